"""Shared parts of the end-to-end benchmarks (bench_e2e, bench_recovery, bench_scale): a testbed to run on,
copies of the integration guide's Volcano Job, waiting for jobs to run, and the RESULTS.md row writer.

Not a benchmark itself; imported by the scripts in this folder (run them as ``python bench/<script>.py``).
"""

from __future__ import annotations

import copy
import shutil
import sys
import tempfile
import time
import urllib.error
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from testbed.agent_runner import AgentProcess
from testbed.cluster import Testbed, TestbedError
from testbed.rest import Rest, RestError

ROOT = Path(__file__).resolve().parent.parent
GUIDE_JOB = ROOT / "config" / "examples" / "vcjob-mindx-dls-test.yaml"
RESULTS = Path(__file__).with_name("RESULTS.md")
HEADER = ("| row | figure | target | baseline in same run | command |", "|---|---|---|---|---|")
CHIPS = "huawei.com/Ascend910"


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def open_testbed(workdir: str | None, **options: Any) -> tuple[Testbed, Callable[[], None]]:
    """The running testbed in `workdir`, or a fresh one in a temporary folder (stopped by the returned closer);
    `options` are :class:`Testbed` keyword arguments for a fresh one (e.g. ``priority_and_fairness=True``).

    Raises:
        TestbedError: `workdir` holds no running testbed, or a fresh one did not start.
    """
    if workdir:
        tb = Testbed.attach(Path(workdir))
        stopped = [n for n, s in tb.status().items() if s != "running"]
        if stopped:
            raise TestbedError(f"testbed in {workdir}: not running: {', '.join(stopped)}")
        return tb, lambda: None
    tmp = Path(tempfile.mkdtemp(prefix="bench-tb-"))
    tb = Testbed(tmp, die_with_parent=True, **options)
    say(f"starting a fresh testbed in {tmp}")
    tb.up()

    def close() -> None:
        tb.down()
        shutil.rmtree(tmp, ignore_errors=True)

    return tb, close


def guide_job(name: str, namespace: str, *, max_retry: int = 1000, labels: dict[str, str] | None = None) -> list[Any]:
    """The guide's rings-config ConfigMap and Volcano Job, renamed to `name` in `namespace`.

    ``maxRetry`` is raised (default 1000) so repeated benchmark restarts do not fail the job; `labels` are added
    to the job's labels.
    """
    docs = [d for d in yaml.safe_load_all(GUIDE_JOB.read_text(encoding="utf-8")) if d]
    cm, job = copy.deepcopy(docs[0]), copy.deepcopy(docs[1])
    cm["metadata"].update(name=f"rings-config-{name}", namespace=namespace)
    job["metadata"].update(name=name, namespace=namespace)
    job["metadata"]["labels"].update(labels or {})
    job["spec"]["maxRetry"] = max_retry
    tmpl = job["spec"]["tasks"][0]["template"]["spec"]
    term = tmpl["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
    term["labelSelector"]["matchExpressions"][0]["values"] = [name]
    for vol in tmpl["volumes"]:
        if vol.get("configMap"):
            vol["configMap"]["name"] = f"rings-config-{name}"
    return [cm, job]


def create_namespace(rest: Rest, namespace: str) -> None:
    rest.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})


def create_guide_jobs(rest: Rest, namespace: str, names: Iterable[str], **kw: Any) -> None:
    """Create the guide's job (and its rings-config) once per name; existing objects are left alone."""
    for name in names:
        cm, job = guide_job(name, namespace, **kw)
        for path, body in (
            (f"/api/v1/namespaces/{namespace}/configmaps", cm),
            (f"/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs", job),
        ):
            try:
                rest.request("POST", path, body)
            except RestError as e:
                if e.status != 409:
                    raise


def jobs_state(rest: Rest, namespace: str) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(job name → job object, live pods) of `namespace`."""
    jobs = rest.get(f"/apis/batch.volcano.sh/v1alpha1/namespaces/{namespace}/jobs").get("items", [])
    pods = rest.get(f"/api/v1/namespaces/{namespace}/pods").get("items", [])
    return (
        {j["metadata"]["name"]: j for j in jobs},
        [p for p in pods if not p["metadata"].get("deletionTimestamp")],
    )


def pods_of(pods: list[dict[str, Any]], job: str) -> list[dict[str, Any]]:
    return sorted(
        (p for p in pods if p["metadata"].get("labels", {}).get("volcano.sh/job-name") == job),
        key=lambda p: str(p["metadata"]["name"]),
    )


def job_ready(
    job: dict[str, Any], pods: list[dict[str, Any]], replicas: int = 2, replaced: frozenset[str] = frozenset()
) -> bool:
    """Job Running with `replicas` Running pods whose chips are annotated, none of them one of the pods
    `replaced` (UIDs: the pods a restart must replace).

    Not the job's ``status.version``: when a write to the job lands while Volcano v1.14's controller is restarting
    it (its status update then conflicts and is retried), the controller can re-create the pods under the old
    version, so that restart never moves ``status.version`` although every pod was replaced (seen with
    ``--volcano-restart delete-pods``, whose job annotation lands right as Volcano restarts the job)."""
    if job.get("status", {}).get("state", {}).get("phase") != "Running":
        return False
    ok = [
        p
        for p in pods
        if p.get("status", {}).get("phase") == "Running"
        and p["metadata"].get("annotations", {}).get(CHIPS)
        and str(p["metadata"].get("uid", "")) not in replaced
    ]
    return len(ok) >= replicas


def wait_jobs_ready(
    rest: Rest,
    namespace: str,
    names: Iterable[str],
    *,
    timeout_s: float,
    replaced: dict[str, frozenset[str]] | None = None,
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Wait until every job in `names` is ready (see :func:`job_ready`; `replaced`: job name → the UIDs of its
    pods that must be gone). Raises TimeoutError listing the others."""
    wanted = set(names)
    deadline = time.monotonic() + timeout_s
    while True:
        jobs, pods = jobs_state(rest, namespace)
        waiting = sorted(
            n
            for n in wanted
            if n not in jobs or not job_ready(jobs[n], pods_of(pods, n), replaced=(replaced or {}).get(n, frozenset()))
        )
        if not waiting:
            return jobs, pods
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(waiting)} job(s) not Running within {timeout_s:.0f} s: {', '.join(waiting[:10])}")
        time.sleep(0.5)


def write_row(row: str, figure: str, target: str, baseline: str, command: str) -> None:
    """Replace (or add) the row named `row` in bench/RESULTS.md, keeping every other row."""
    put_row(f"| {row} | {figure} | {target} | {baseline} | `{command}` |")


def put_row(line: str) -> None:
    """Replace the row of bench/RESULTS.md named like `line` (a whole ``| name | … |`` line) in place, or add it
    at the end of the table (the first run of lines starting with ``|``), so notes below the table stay below."""
    name = line.split("|")[1].strip()
    lines = RESULTS.read_text(encoding="utf-8").splitlines() if RESULTS.exists() else list(HEADER)
    out, done = [], False
    for ln in lines:
        if ln.startswith(f"| {name} |"):
            if not done:
                out.append(line)
                done = True
            continue
        out.append(ln)
    if not done:
        start = next((i for i, ln in enumerate(out) if ln.startswith("|")), len(out))
        end = start
        while end < len(out) and out[end].startswith("|"):
            end += 1
        out.insert(end, line)
    RESULTS.write_text("\n".join(out) + "\n", encoding="utf-8")


def start_agent(tb: Testbed, workdir: Path, settings: dict[str, str], name: str) -> AgentProcess:
    """`fault-agent run` as a process, ready and holding the Lease. Raises RuntimeError naming its log."""
    agent = AgentProcess(tb, workdir, settings=settings, name=name)
    agent.start(ready_timeout_s=120)
    deadline = time.monotonic() + 30
    while not _leads(agent):
        if time.monotonic() > deadline:
            agent.stop()
            raise RuntimeError(f"agent not leader within 30 s; log {agent.log}")
        time.sleep(0.2)
    return agent


def _leads(agent: AgentProcess) -> bool:
    """Whether the agent's /metrics says it leads; a scrape that times out (the agent busy just after its start
    on a loaded machine: seen at load average 24) is a no, asked again until start_agent's deadline."""
    try:
        return agent.metric("fault_agent_leader") >= 1
    except (TimeoutError, urllib.error.URLError):
        return False


#: Settings for benchmarks that fail many nodes or jobs on purpose: the restart rate limit and the circuit
#: breaker (which exist to stop exactly such storms) are raised out of the way.
STORM_SETTINGS = {
    "CLUSTER_NAME": "bench",
    "POLICY__RESTART_BURST": "10000",
    "POLICY__RESTART_RATE_PER_MIN": "10000",
    "POLICY__BREAKER_NODE_SHARE": "1.0",
    "POLICY__BREAKER_MIN_FAULTY_NODES": "100000",
}
