"""Benchmark: the agent at scale — RSS, CPU share, fault → action latency and time to ready.

Cluster (full size, the issue's): 2,000 kwok nodes (8 chips each, a device-plugin ConfigMap each), 500 Volcano
Jobs labelled ``fault-scheduling=force`` and 20,000 pods, created already bound to nodes (``spec.nodeName``: no
scheduler needed) with their chips annotated (8 one-chip NPU pods and 2 CPU pods per node; 40 pods per job over
4 nodes), and the jobs as plain objects with a Running status. The testbed's Volcano controller, Volcano
scheduler, kube-scheduler and npu-plugin are stopped for this benchmark (nothing must create pods for the jobs or
bind them); Commands the agent creates therefore stay unconsumed.

Then ``fault-agent run`` starts (time to ready: process start → /readyz 200, i.e. every source listed), and for
``--duration`` seconds a background writer sends ``--rate`` changes/s through the apiserver — half device-plugin
ConfigMap rewrites (a new UpdateTime, no fault: the plugin's periodic report) and half pod annotation changes —
while ``--faults`` SeparateNPU chip faults hit nodes of distinct jobs. Measured: the agent's RSS (/proc VmRSS)
after ready and at the end, its CPU time over the load window as a share of one core, the watch events it
counted (fault_agent_watch_events_total), the background rate the apiserver actually took, and fault → action
(the RestartJob Command's ADDED event on a watch in this process, as in bench_e2e) with p50/p99.

Baseline in the same run: the same measurements with no background writer (idle cluster), before the load.

``--apf``: a fresh testbed whose kube-apiserver runs API Priority and Fairness (``--apf-seats`` read-only seats,
half as many mutating, so the priority levels can fill on a 2-core machine). The agent runs as deploy/'s
ServiceAccount (deploy/'s RBAC, a TokenRequest token) and the background writer as a ServiceAccount of its own
(bound to cluster-admin; not the testbed admin, whose ``system:masters`` group APF exempts), so both land in the
built-in ``service-accounts`` FlowSchema and share ``workload-low``. A third window then repeats the load with
deploy/flowschema.yaml applied (the agent in its own priority level): fault → action with and without the
FlowSchema in the same run, and the apiserver's APF rejections and queue waits per priority level in each window.

    python bench/bench_scale.py --nodes 2000 --pods 20000 --jobs 500 --rate 2000 [--apf] [--write]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import ssl
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from e2e_common import STORM_SETTINGS, open_testbed, say, start_agent, write_row

from testbed.agent_runner import AgentProcess
from testbed.cluster import Testbed
from testbed.inject import PREFIX, ChipFault, Injector, device_info_cms, kwok_node, wall_clock
from testbed.observe import TimedRest, WatchRecorder, pct
from testbed.rest import Rest
from testbed.service_account import service_account_token, write_token_kubeconfig

ROW = "scale"
APF_ROW = "scale-apf"
DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
# deploy/'s RBAC files, in creation order (what tests/integration/test_deploy_agent_rbac.py proves is enough)
DEPLOY_RBAC = (
    "namespace.yaml", "serviceaccount.yaml", "clusterrole.yaml", "clusterrolebinding.yaml", "role.yaml",
    "rolebinding.yaml", "bookkeeping-rbac.yaml",
)  # fmt: skip
WRITER_SA = "bench-writer"
NAMESPACE = "bench-scale"
PODS_PER_NODE = 10
NPU_PODS_PER_NODE = 8
STOPPED = ("vc-controller-manager", "vc-scheduler", "kube-scheduler", "npu-plugin")


class Api:
    """A small aiohttp client with keep-alive connections for bulk writes (the stdlib client opens a TLS
    connection per request, which caps it far below the rates needed here)."""

    def __init__(self, tb: Testbed, connections: int = 32, token: str | None = None) -> None:
        rest = tb.rest()
        self.base = rest.base
        self.session = aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {token or rest.token}"},
            connector=aiohttp.TCPConnector(ssl=rest.ctx or ssl.create_default_context(), limit=connections),
        )
        self.errors = 0

    async def send(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json", ok: tuple[int, ...] = ()
    ) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        async with self.session.request(
            method, self.base + path, data=data, headers={"Content-Type": content_type}
        ) as resp:
            text = await resp.read()
            if resp.status >= 400 and resp.status not in ok:
                self.errors += 1
                raise RuntimeError(f"{method} {path}: HTTP {resp.status}: {text[:300]!r}")
            return json.loads(text) if text and resp.status < 400 else None

    async def close(self) -> None:
        await self.session.close()


async def bounded(n: int, coros: Any) -> None:
    """Run the coroutines of the iterable `coros` with at most `n` in flight."""
    sem = asyncio.Semaphore(n)

    async def one(c: Any) -> None:
        async with sem:
            await c

    await asyncio.gather(*(one(c) for c in coros))


def _pod(i: int, per_job: int, node: str, job: str, job_uid: str) -> dict[str, Any]:
    slot = i % PODS_PER_NODE
    npu = slot < NPU_PODS_PER_NODE
    resources = {"requests": {PREFIX: "1"}, "limits": {PREFIX: "1"}} if npu else {}
    annotations = {"volcano.sh/job-version": "0", "volcano.sh/task-index": str(i % per_job)}
    if npu:
        annotations[PREFIX] = f"Ascend910-{slot}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-worker-{i % per_job}",
            "namespace": NAMESPACE,
            "labels": {
                "volcano.sh/job-name": job,
                "volcano.sh/job-namespace": NAMESPACE,
                "volcano.sh/task-spec": "worker",
                "app": "bench",
            },
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": job,
                    "uid": job_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "volcano",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "ms-arm:b120", "resources": resources}],
        },
    }


def _job(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"fault-scheduling": "force"}},
        "spec": {
            "minAvailable": replicas,
            "schedulerName": "volcano",
            "maxRetry": 1000,
            "queue": "default",
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "ms-arm:b120"}]}
                    },
                }
            ],
        },
    }


async def build_cluster(tb: Testbed, nodes: int, pods: int, jobs: int) -> dict[str, str]:
    """Create the nodes, ConfigMaps, jobs (status Running) and pods. Returns job name → uid."""
    api = Api(tb)
    try:
        await api.send("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}}, ok=(409,))
        names = [f"scale-node-{i}" for i in range(nodes)]
        t = time.monotonic()
        await bounded(32, (api.send("POST", "/api/v1/nodes", kwok_node(n), ok=(409,)) for n in names))
        cms = device_info_cms(names, now=wall_clock())  # one round trip to the Go encoder
        await bounded(32, (api.send("POST", "/api/v1/namespaces/kube-system/configmaps", cm, ok=(409,)) for cm in cms))
        say(f"{nodes} nodes and device-plugin ConfigMaps in {time.monotonic() - t:.0f} s")
        t = time.monotonic()
        uids: dict[str, str] = {}
        pods_per_job = pods // jobs
        job_names = [f"scale-job-{j}" for j in range(jobs)]

        async def make_job(name: str) -> None:
            path = f"/apis/batch.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/jobs"
            await api.send("POST", path, _job(name, pods_per_job), ok=(409,))
            obj = await api.send("GET", f"{path}/{name}")
            uids[name] = str(obj["metadata"]["uid"])
            status = {
                "status": {
                    "state": {"phase": "Running"},
                    "version": 0,
                    "running": pods_per_job,
                    "minAvailable": pods_per_job,
                }
            }
            await api.send("PATCH", f"{path}/{name}/status", status, "application/merge-patch+json")

        await bounded(32, (make_job(n) for n in job_names))
        await bounded(
            32,
            (
                api.send(
                    "POST",
                    f"/api/v1/namespaces/{NAMESPACE}/pods",
                    _pod(i, pods_per_job, names[(i // PODS_PER_NODE) % nodes], job, uids[job]),
                    ok=(409,),
                )
                for i in range(pods)
                for job in [job_names[(i // pods_per_job) % jobs]]
            ),
        )
        say(f"{jobs} jobs and {pods} pods in {time.monotonic() - t:.0f} s")
        return uids
    finally:
        await api.close()


def _check_sizes(nodes: int, pods: int, jobs: int) -> None:
    if pods % jobs or pods != nodes * PODS_PER_NODE or (pods // jobs) % PODS_PER_NODE:
        raise SystemExit(
            f"sizes must satisfy pods = {PODS_PER_NODE} × nodes and pods = jobs × a multiple of {PODS_PER_NODE} "
            "(each job fills whole nodes)"
        )


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Window:
    """What one measurement window saw."""

    label: str
    seconds: float = 0.0
    cpu_share: float = 0.0
    rss_end: int = 0
    events_seen: float = 0.0
    writes_sent: int = 0
    action_ms: list[float] = field(default_factory=list)
    missing: int = 0
    # of `missing`: jobs a Command had already restarted before their injected fault (another fault hit them
    # first, e.g. a node kwok failed to heartbeat under load went NotReady; their open incident absorbed the
    # injected fault, so no second Command is the right outcome)
    restarted_before: int = 0
    decision_p99_le: float = float("nan")  # upper bound of the decision histogram bucket holding p99, seconds
    # APF (``--apf``): per priority level, requests rejected and (count, mean s) waited in its queues
    apf_rejected: dict[str, float] = field(default_factory=dict)
    apf_wait: dict[str, tuple[float, float]] = field(default_factory=dict)


async def window(
    tb: Testbed,
    agent: AgentProcess,
    label: str,
    *,
    duration: float,
    rate: float,
    faults: list[tuple[str, str, int]],
    background_nodes: list[str],
    pod_names: list[str],
    max_inflight: int = 16,
    writer_token: str | None = None,
    apf: bool = False,
) -> Window:
    """One window: optional background writes at `rate`/s (as `writer_token`, default the testbed admin), and
    `faults` (node, job, chip) spread evenly; with `apf`, the apiserver's APF counters over the window too."""
    assert agent.proc is not None
    pid = agent.proc.pid
    w = Window(label)
    commands = WatchRecorder(tb, f"/apis/bus.volcano.sh/v1alpha1/namespaces/{NAMESPACE}/commands")
    await commands.start()
    inj = Injector(TimedRest.of(tb))
    timed: TimedRest = inj.rest  # type: ignore[assignment]
    api = Api(tb, connections=64, token=writer_token)
    stop = asyncio.Event()
    sent = 0

    async def quiet(coro: Any) -> None:
        with contextlib.suppress(Exception):  # counted in api.errors
            await coro

    async def background() -> None:
        nonlocal sent
        if rate <= 0:
            return
        tick = 0.05
        per_tick = max(1, round(rate * tick))
        n = 0
        next_t = time.monotonic()
        inflight: set[asyncio.Task[Any]] = set()
        while not stop.is_set():
            # this tick's device-plugin rewrites, encoded by Go in one round trip
            tick_nodes = [
                background_nodes[((n + i) // 2) % len(background_nodes)]
                for i in range(1, per_tick + 1)
                if (n + i) % 2 and background_nodes
            ]
            tick_cms = iter(device_info_cms(tick_nodes, now=wall_clock()) if tick_nodes else [])
            for _ in range(per_tick):
                n += 1
                if n % 2 and background_nodes:
                    node = background_nodes[(n // 2) % len(background_nodes)]
                    coro = api.send(
                        "PUT", f"/api/v1/namespaces/kube-system/configmaps/mindx-dl-deviceinfo-{node}",
                        next(tick_cms),
                    )  # fmt: skip
                else:
                    pod = pod_names[(n // 2) % len(pod_names)]
                    coro = api.send(
                        "PATCH", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}",
                        {"metadata": {"annotations": {"bench/tick": str(n)}}}, "application/merge-patch+json",
                    )  # fmt: skip
                task = asyncio.create_task(quiet(coro))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                # at most `max_inflight` requests outstanding: an apiserver that cannot take the asked rate then
                # sets the pace instead of building a deep queue that every client's requests (the agent's
                # restart writes too) would wait behind (the testbed runs without priority and fairness)
                if len(inflight) >= max_inflight:
                    await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
            sent = n
            next_t += tick
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))
        await asyncio.gather(*inflight, return_exceptions=True)

    apf_before = await asyncio.to_thread(apf_counters, tb.rest()) if apf else {}
    events_before = agent.metric("fault_agent_watch_events_total")
    buckets_before = decision_buckets(agent)
    cpu_before = cpu_seconds(pid)
    started = time.monotonic()
    bg = asyncio.create_task(background())
    injected: list[tuple[str, float]] = []
    gap = duration / max(1, len(faults))
    try:
        await asyncio.sleep(min(2.0, gap))
        for node, job, chip in faults:
            await asyncio.to_thread(inj.chip_fault, node, [ChipFault(chip)])
            injected.append((job, timed.last_write(f"mindx-dl-deviceinfo-{node}", sent=True)))
            await asyncio.sleep(gap)
        await asyncio.sleep(max(0.0, duration - (time.monotonic() - started)))
    finally:
        stop.set()
        await bg
        w.seconds = time.monotonic() - started
        w.cpu_share = (cpu_seconds(pid) - cpu_before) / w.seconds
        w.events_seen = agent.metric("fault_agent_watch_events_total") - events_before
        w.decision_p99_le = bucket_quantile(buckets_before, decision_buckets(agent), 0.99)
        w.rss_end = rss_bytes(pid)
        w.writes_sent = sent - api.errors
        await api.close()
        if apf:
            w.apf_rejected, w.apf_wait = apf_delta(apf_before, await asyncio.to_thread(apf_counters, tb.rest()))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = {}
        for job, at in injected:
            for s in commands.events:
                if s.type == "ADDED" and s.at >= at and s.obj.get("target", {}).get("name") == job:
                    found[job] = (s.at - at) * 1000
                    break
        if len(found) == len(injected):
            break
        await asyncio.sleep(0.5)
    await commands.stop()
    w.action_ms = list(found.values())
    w.missing = len(injected) - len(found)
    w.restarted_before = sum(
        1
        for job, at in injected
        if job not in found
        and any(s.type == "ADDED" and s.at < at and s.obj.get("target", {}).get("name") == job for s in commands.events)
    )
    return w


def decision_buckets(agent: AgentProcess) -> dict[float, float]:
    """The agent's fault_agent_decision_seconds histogram: bucket upper bound (s) → cumulative count."""
    out: dict[float, float] = {}
    for line in agent.metrics().splitlines():
        if line.startswith("fault_agent_decision_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float("inf") if le == "+Inf" else float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """Upper bound of the bucket holding the `q` quantile of the observations made between two scrapes."""
    delta = {le: after.get(le, 0.0) - before.get(le, 0.0) for le in after}
    total = delta.get(float("inf"), 0.0)
    if total <= 0:
        return float("nan")
    for le in sorted(delta):
        if delta[le] >= q * total:
            return le
    return float("inf")


APF_METRICS = (
    "apiserver_flowcontrol_rejected_requests_total",
    "apiserver_flowcontrol_request_wait_duration_seconds_sum",
    "apiserver_flowcontrol_request_wait_duration_seconds_count",
)


def parse_apf_metrics(text: str) -> dict[tuple[str, str], float]:
    """The apiserver's APF counters in a /metrics exposition `text`, summed per (metric, priority_level).

    Metric names: :data:`APF_METRICS` (kube-apiserver's flowcontrol metrics, k8s.io/apiserver
    pkg/util/flowcontrol/metrics); lines of other metrics, or without a ``priority_level`` label, are skipped.
    """
    out: dict[tuple[str, str], float] = {}
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name not in APF_METRICS or 'priority_level="' not in rest:
            continue
        level = rest.split('priority_level="', 1)[1].split('"', 1)[0]
        try:
            value = float(rest.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        out[(name, level)] = out.get((name, level), 0.0) + value
    return out


def apf_counters(rest: Rest) -> dict[tuple[str, str], float]:
    """:func:`parse_apf_metrics` of the apiserver's /metrics (read as the testbed admin)."""
    return parse_apf_metrics(rest.get_text("/metrics"))


def apf_delta(
    before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]
) -> tuple[dict[str, float], dict[str, tuple[float, float]]]:
    """(priority level → requests rejected, priority level → (requests that waited, mean wait s)) between two
    :func:`apf_counters` scrapes; levels with nothing in the window are left out."""
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    rejected = {lvl: v for (m, lvl), v in d.items() if m == APF_METRICS[0] and v > 0}
    wait = {}
    for (m, lvl), n in d.items():
        if m == APF_METRICS[2] and n > 0:
            wait[lvl] = (n, d.get((APF_METRICS[1], lvl), 0.0) / n)
    return rejected, wait


def _deploy_docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text(encoding="utf-8")) if d]


def flowschema_subject() -> tuple[str, str]:
    """(namespace, name) of the ServiceAccount deploy/flowschema.yaml's FlowSchema matches. Raises SystemExit
    if it is not deploy/serviceaccount.yaml's (the measurement would then compare nothing)."""
    fs = next(d for d in _deploy_docs("flowschema.yaml") if d["kind"] == "FlowSchema")
    subject = fs["spec"]["rules"][0]["subjects"][0]["serviceAccount"]
    sa = _deploy_docs("serviceaccount.yaml")[0]["metadata"]
    if (subject["namespace"], subject["name"]) != (sa["namespace"], sa["name"]):
        raise SystemExit(f"deploy/flowschema.yaml matches {subject}, not deploy/serviceaccount.yaml's {sa}")
    return str(sa["namespace"]), str(sa["name"])


def apf_identities(tb: Testbed, workdir: Path) -> tuple[dict[str, str], str]:
    """deploy/'s RBAC created, and a writer ServiceAccount bound to cluster-admin. Returns (agent settings that
    run it as deploy/'s ServiceAccount, the writer's bearer token)."""
    rest = tb.rest()
    ns, sa = flowschema_subject()
    for name in DEPLOY_RBAC:
        for doc in _deploy_docs(name):
            if doc["kind"] in {"Role", "RoleBinding"}:  # the bookkeeping Roles' namespaces (MindCluster's)
                rest.apply(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": doc["metadata"]["namespace"]}}
                )
            rest.apply(doc)
    rest.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": WRITER_SA, "namespace": NAMESPACE}})
    rest.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": WRITER_SA},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": WRITER_SA, "namespace": NAMESPACE}],
        }
    )
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = write_token_kubeconfig(workdir / "agent-kubeconfig", tb, service_account_token(rest, ns, sa))
    settings = {"KUBE__KUBECONFIG": str(kubeconfig), "LEADER__NAMESPACE": ns}
    return settings, service_account_token(rest, NAMESPACE, WRITER_SA)


def apply_flowschema(tb: Testbed) -> None:
    """deploy/flowschema.yaml's PriorityLevelConfiguration and FlowSchema, then a pause for the apiserver's APF
    config controller to pick them up."""
    rest = tb.rest()
    for doc in _deploy_docs("flowschema.yaml"):
        rest.apply(doc)
    time.sleep(3)


def apf_summary(w: Window) -> str:
    """One line of a window's APF counters: rejections and queue waits per priority level."""
    rejected = ", ".join(f"{lvl} {n:.0f}" for lvl, n in sorted(w.apf_rejected.items())) or "none"
    waits = ", ".join(f"{lvl} {n:.0f} req mean {mean * 1000:.1f} ms" for lvl, (n, mean) in sorted(w.apf_wait.items()))
    return f"rejected: {rejected}; queue wait: {waits or 'none'}"


def stop_components(tb: Testbed) -> None:
    for name in STOPPED:
        if name in tb.components:
            tb.kill(name)


async def wait_pods_running(tb: Testbed, pods: int, timeout_s: float) -> int:
    """Wait until kwok has marked `pods` pods of the namespace Running (or the timeout); returns the count."""
    api = Api(tb, connections=2)
    deadline = time.monotonic() + timeout_s
    running = 0
    try:
        while time.monotonic() < deadline:
            running, cont = 0, ""
            while True:
                page = await api.send(
                    "GET",
                    f"/api/v1/namespaces/{NAMESPACE}/pods?limit=5000&fieldSelector=status.phase%3DRunning"
                    + (f"&continue={cont}" if cont else ""),
                )
                running += len(page.get("items", []))
                cont = page.get("metadata", {}).get("continue", "")
                if not cont:
                    break
            if running >= pods:
                return running
            await asyncio.sleep(5)
        return running
    finally:
        await api.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; sizes and fault counts are checked (SystemExit with the reason)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", help="a running testbed's folder (default: a fresh one, stopped after)")
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--rate", type=float, default=2000.0, help="background changes per second")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of each measurement window")
    parser.add_argument("--faults", type=int, default=50, help="chip faults per window (distinct jobs)")
    parser.add_argument("--write", action="store_true", help="update the row in bench/RESULTS.md")
    parser.add_argument(
        "--apf",
        action="store_true",
        help="fresh testbed with API Priority and Fairness on; agent and writer as ServiceAccounts; a third "
        "window under load with deploy/flowschema.yaml applied",
    )
    parser.add_argument(
        "--apf-seats", type=int, default=30, help="with --apf: kube-apiserver --max-requests-inflight (default 30)"
    )
    parser.add_argument(
        "--writer-inflight", type=int, default=16, help="background requests outstanding at most (default 16)"
    )
    args = parser.parse_args(argv)
    _check_sizes(args.nodes, args.pods, args.jobs)
    windows = 3 if args.apf else 2
    if args.faults * windows > args.jobs:
        raise SystemExit(f"--faults × {windows} must be at most --jobs ({windows} windows, distinct jobs)")
    if args.apf and args.dir:
        raise SystemExit("--apf starts its own testbed (API Priority and Fairness on): drop --dir")
    if args.apf_seats < 2 or args.writer_inflight < 1:
        raise SystemExit("--apf-seats must be at least 2 and --writer-inflight at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    load_start = os.getloadavg()[0]
    tb, close = open_testbed(
        args.dir, priority_and_fairness=args.apf, max_requests_inflight=args.apf_seats if args.apf else None
    )
    agent: AgentProcess | None = None
    try:
        stop_components(tb)
        say(f"stopped {', '.join(STOPPED)}; building {args.nodes} nodes, {args.jobs} jobs, {args.pods} pods")
        asyncio.run(build_cluster(tb, args.nodes, args.pods, args.jobs))
        running = asyncio.run(wait_pods_running(tb, args.pods, 300))
        say(f"{running}/{args.pods} pods Running (kwok)")
        identity: dict[str, str] = {}
        writer_token: str | None = None
        if args.apf:
            identity, writer_token = apf_identities(tb, tb.workdir / "bench-scale")
            say("agent runs as deploy/'s ServiceAccount, the writer as ServiceAccount " + WRITER_SA)
        t = time.monotonic()
        # fault → action is timed to the RestartJob Command (the guide job's default restart, auto, deletes its
        # pods instead, which this benchmark does not time: each fault would count as missing)
        settings = {**STORM_SETTINGS, "POLICY__VOLCANO_RESTART": "command", **identity}
        agent = start_agent(tb, tb.workdir / "bench-scale", settings, "bench-scale-agent")
        ready_s = time.monotonic() - t
        assert agent.proc is not None
        rss_ready = rss_bytes(agent.proc.pid)
        say(f"agent ready in {ready_s:.1f} s, RSS {rss_ready / 2**20:.0f} MiB")
        pods_per_job = args.pods // args.jobs

        plan_specs = [("idle", 0.0), ("load", args.rate)] + ([("load+flowschema", args.rate)] if args.apf else [])

        def fault_plan(first_job: int) -> list[tuple[str, str, int]]:
            plan = []
            for k in range(args.faults):
                j = first_job + len(plan_specs) * k
                node = f"scale-node-{(j * pods_per_job // PODS_PER_NODE) % args.nodes}"
                plan.append((node, f"scale-job-{j}", 0))
            return plan

        plans = [fault_plan(i) for i in range(len(plan_specs))]
        fault_nodes = {n for plan in plans for n, _, _ in plan}
        background_nodes = [f"scale-node-{i}" for i in range(args.nodes) if f"scale-node-{i}" not in fault_nodes]
        pod_names = [f"scale-job-{j}-worker-{k}" for j in range(args.jobs) for k in range(0, pods_per_job, 7)]
        windows = []
        for (label, rate), plan in zip(plan_specs, plans, strict=True):
            if label == "load+flowschema":
                apply_flowschema(tb)
                say("deploy/flowschema.yaml applied")
            windows.append(
                asyncio.run(
                    window(
                        tb,
                        agent,
                        label,
                        rate=rate,
                        faults=plan,
                        duration=args.duration,
                        background_nodes=background_nodes,
                        pod_names=pod_names,
                        max_inflight=args.writer_inflight,
                        writer_token=writer_token,
                        apf=args.apf,
                    )
                )
            )
        idle, loaded = windows[:2]
    finally:
        if agent is not None:
            agent.stop()
            kept = Path(tempfile.gettempdir()) / "bench-scale-agent.log"
            with contextlib.suppress(OSError):
                shutil.copy(agent.log, kept)
                say(f"agent log kept in {kept}")
        close()
    load = f"load average {load_start:.1f} → {os.getloadavg()[0]:.1f}"
    print(f"machine: {os.cpu_count()} CPUs, {load}")
    i50, i99 = pct(idle.action_ms, 0.5), pct(idle.action_ms, 0.99)
    l50, l99 = pct(loaded.action_ms, 0.5), pct(loaded.action_ms, 0.99)
    took = loaded.writes_sent / loaded.seconds
    print(f"cluster: {args.nodes} nodes, {args.pods} pods ({running} Running), {args.jobs} jobs")
    print(f"time to ready: {ready_s:.1f} s; RSS at ready {rss_ready / 2**20:.0f} MiB")
    for w in windows:
        print(
            f"{w.label}: {w.writes_sent / w.seconds:,.0f} background writes/s taken, agent saw "
            f"{w.events_seen / w.seconds:,.0f} watch events/s, CPU {w.cpu_share * 100:.0f} % of one core, "
            f"RSS {w.rss_end / 2**20:.0f} MiB, fault → action p50 {pct(w.action_ms, 0.5):.0f} ms, "
            f"p99 {pct(w.action_ms, 0.99):.0f} ms ({len(w.action_ms)} faults, {w.missing} missing, of which "
            f"{w.restarted_before} restarted before their fault by another one), decision "
            f"p99 ≤ {w.decision_p99_le * 1000:.0f} ms (agent histogram)"
        )
        if args.apf:
            print(f"  APF: {apf_summary(w)}")
    if args.write and args.apf:
        fs = windows[2]
        f50, f99 = pct(fs.action_ms, 0.5), pct(fs.action_ms, 0.99)
        write_row(
            f"{APF_ROW} ({args.apf_seats} seats)",
            f"{args.nodes:,} nodes, {args.pods:,} pods, {args.jobs} jobs, APF on (apiserver "
            f"--max-requests-inflight={args.apf_seats}), agent as deploy/'s ServiceAccount, writer as another "
            f"({args.writer_inflight} in flight): under load fault → action p99 **{f99:.0f} ms with "
            f"deploy/flowschema.yaml** (p50 {f50:.0f} ms, {len(fs.action_ms)} faults, {fs.missing} missing, "
            f"{fs.writes_sent / fs.seconds:,.0f} writes/s taken; APF {apf_summary(fs)}) against **{l99:.0f} ms "
            f"without** (p50 {l50:.0f} ms, {len(loaded.action_ms)} faults, {loaded.missing} missing, "
            f"{took:,.0f} writes/s taken; APF {apf_summary(loaded)}); {load}",
            "the FlowSchema keeps the agent's p99 from queueing behind other clients",
            f"idle, no FlowSchema: p99 {i99:.0f} ms (p50 {i50:.0f} ms)",
            f"python bench/bench_scale.py --apf --nodes {args.nodes} --pods {args.pods} --jobs {args.jobs} "
            f"--rate {args.rate:.0f} --duration {args.duration:.0f} --faults {args.faults} "
            f"--apf-seats {args.apf_seats} --writer-inflight {args.writer_inflight}",
        )
    elif args.write:
        full = (args.nodes, args.pods, args.jobs, args.rate) == (2000, 20000, 500, 2000.0)
        size = f"{args.nodes:,} nodes, {args.pods:,} pods, {args.jobs} jobs" + ("" if full else " (reduced size)")
        write_row(
            ROW,
            f"{size}, {args.rate:,.0f} background changes/s asked, {took:,.0f}/s taken by the apiserver, agent saw "
            f"{loaded.events_seen / loaded.seconds:,.0f} watch events/s: RSS {loaded.rss_end / 2**20:.0f} MiB, "
            f"CPU {loaded.cpu_share * 100:.0f} % of one core, decision p99 ≤ {loaded.decision_p99_le * 1000:.0f} ms "
            f"(agent's histogram bucket), fault → action p99 {l99:.0f} ms (p50 {l50:.0f} ms, "
            f"{len(loaded.action_ms)} faults, {loaded.missing} without a Command within 30 s, of which "
            f"{loaded.restarted_before} had been restarted just before by another fault and joined that incident), "
            f"ready {ready_s:.1f} s after start (2-core machine shared with "
            f"the apiserver, etcd, kwok and the writer; {load})",
            "2,000 nodes / 20,000 pods / 500 jobs / 2,000 events/s",
            f"idle (no background): RSS {idle.rss_end / 2**20:.0f} MiB, CPU {idle.cpu_share * 100:.0f} %, decision "
            f"p99 ≤ {idle.decision_p99_le * 1000:.0f} ms, fault → action p99 {i99:.0f} ms "
            f"(p50 {i50:.0f} ms); RSS at ready {rss_ready / 2**20:.0f} MiB",
            f"python bench/bench_scale.py --nodes {args.nodes} --pods {args.pods} --jobs {args.jobs} "
            f"--rate {args.rate:.0f}",
        )
    timed_nothing = [w.label for w in windows if args.faults and not w.action_ms]
    if timed_nothing:  # every fault missing: the benchmark measured no fault → action (it stopped working)
        print(f"no fault → action timed in window(s) {', '.join(timed_nothing)}: every fault missing", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
