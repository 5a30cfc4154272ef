"""Conformance of "a ClusterD": MindCluster's real binary, built from source, or the testbed's stand-in.

Drives the testbed's inputs (device plugin ConfigMaps with chip faults of each level and network faults, A3
switch info, NodeD ConfigMaps, public-fault ConfigMaps) and records, after each step, what the ClusterD under test
wrote: the ``mindx-dl/cluster-info-*`` ConfigMaps (entries of the run's nodes only), the job pods' ``fault-type``
labels and the PodGroup's annotations, with the time from the write to the first change of its output. Then
every step's ``cluster-info-*`` ConfigMaps go through ``fault-agent detect`` (the agent reading ClusterD's
view alone) and the faults it reads are added to the record.

    # the stand-in (a testbed component, run by the driver)
    python bench/conformance_clusterd.py --dir .testbed --clusterd stand-in --out stand-in.json
    # the real ClusterD (component/clusterd at 22bb3d98, built outside the project): run in a private mount
    # namespace and a root of its own that holds its fixed paths (docs/mindcluster-conformance.md "ClusterD")
    python bench/conformance_clusterd.py --dir .testbed --clusterd real --binary ./clusterd \\
        --source component/clusterd --out real.json
    # --agent: also run the agent beside it (dry run, ClusterD's view its only fault source, --record) and add
    # the replayed decisions, each given the step it happened in, to the record
    # both records side by side (markdown)
    python bench/conformance_clusterd.py --compare real.json stand-in.json

A job (the guide's Volcano Job, two pods of 8 chips) runs on two of the run's four nodes so ClusterD's
"chip in use" rules have something to see; the other two nodes carry the faults on unused hardware.
Docs: docs/mindcluster-conformance.md "ClusterD".
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testbed import clusterd as stand_in  # noqa: E402
from testbed.cluster import Testbed  # noqa: E402
from testbed.inject import ChipFault, Injector, PublicFault, SwitchFault, public_fault_cm  # noqa: E402
from testbed.rest import Rest, RestError  # noqa: E402
from testbed.service_account import service_account_token  # noqa: E402

NODES = [f"cd-node-{i}" for i in range(4)]
OUT_NS = "mindx-dl"
JOB_NS = "cdconf"
JOB = "cd-job"
SEED = ROOT / "tests" / "fixtures" / "seed-vcjob.yaml"
PGS = "/apis/scheduling.volcano.sh/v1beta1"
PUBLIC_CM = "cd-public-fault"
VALID_RESOURCE = "CCAE"
"""A public-fault source ClusterD accepts (build/publicFaultConfiguration.json ``publicFaultResource``)."""


def _log(msg: str) -> None:
    print(f"[conformance-clusterd] {msg}", file=sys.stderr, flush=True)


def _now_ms() -> int:
    return int(time.time() * 1000)


# ----- reading what ClusterD wrote ---------------------------------------------------------------------------
def _ours(name: str) -> bool:
    return any(name.endswith(n) for n in NODES)


def read_output(rest: Rest) -> dict[str, Any]:
    """The ``cluster-info-*`` ConfigMaps of OUT_NS: per ConfigMap, ``""`` (its value was an empty string), or
    the entries of the run's nodes (JSON-decoded; others dropped), or ``{"unreadable": text}``."""
    q = urllib.parse.urlencode({"labelSelector": "mx-consumer-volcano=true"})
    out: dict[str, Any] = {}
    for cm in rest.get(f"/api/v1/namespaces/{OUT_NS}/configmaps?{q}").get("items", []):
        name = cm["metadata"]["name"]
        data = cm.get("data") or {}
        value = data.get(name)
        if set(data) != {name}:
            out.setdefault("_keys", {})[name] = sorted(data)
        if value == "" or value is None:
            out[name] = value
            continue
        try:
            doc = json.loads(value)
        except ValueError:
            out[name] = {"unreadable": value[:200]}
            continue
        out[name] = {k: v for k, v in sorted(doc.items()) if _ours(k)} if isinstance(doc, dict) else doc
    return dict(sorted(out.items()))


def raw_output(rest: Rest) -> list[dict[str, Any]]:
    """The ``cluster-info-*`` ConfigMaps as written (names, labels, data), for ``fault-agent detect``."""
    q = urllib.parse.urlencode({"labelSelector": "mx-consumer-volcano=true"})
    items = rest.get(f"/api/v1/namespaces/{OUT_NS}/configmaps?{q}").get("items", [])
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": cm["metadata"]["name"],
                "namespace": OUT_NS,
                "labels": cm["metadata"].get("labels") or {},
            },
            "data": cm.get("data") or {},
        }
        for cm in items
    ]


TIME_KEYS = ("UpdateTime", "fault_time", "AlarmRaisedTime")


def _without_times(value: Any) -> Any:
    """`value` with every time field (TIME_KEYS) dropped, also inside JSON held in strings (the ``-Fault`` list,
    switch events): the run's inputs are stamped with the wall clock and ClusterD restamps some each second."""
    if isinstance(value, dict):
        return {k: _without_times(v) for k, v in value.items() if k not in TIME_KEYS}
    if isinstance(value, list):
        return [_without_times(v) for v in value]
    if isinstance(value, str) and value[:1] in ("[", "{"):
        try:
            return {"json": _without_times(json.loads(value))}
        except ValueError:
            return value
    return value


class Driver:
    def __init__(self, rest: Rest) -> None:
        self.rest = rest
        self.injector = Injector(rest)
        self.used: list[str] = []
        self.free: list[str] = []
        self.steps: list[dict[str, Any]] = []
        self.raw: list[dict[str, Any]] = []

    # ----- set-up ----------------------------------------------------------------------------------------------
    def setup(self) -> None:
        self.injector.add_nodes(NODES)
        with contextlib.suppress(RestError):
            self.rest.request(
                "POST",
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": JOB_NS}},
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                self.rest.get(f"/api/v1/namespaces/{JOB_NS}/serviceaccounts/default")
                break
            except RestError:
                time.sleep(0.2)
        cm, job = (copy.deepcopy(d) for d in yaml.safe_load_all(SEED.read_text()) if d)
        for obj in (cm, job):
            obj["metadata"]["namespace"] = JOB_NS
        cm["metadata"]["name"] = f"rings-config-{JOB}"
        job["metadata"]["name"] = JOB
        spec = job["spec"]["tasks"][0]["template"]["spec"]
        spec["volumes"][0]["configMap"]["name"] = f"rings-config-{JOB}"
        spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"][
            "matchExpressions"
        ][0]["values"] = [JOB]
        with contextlib.suppress(RestError):
            self.rest.request("POST", f"/api/v1/namespaces/{JOB_NS}/configmaps", cm)
        with contextlib.suppress(RestError):
            self.rest.request("POST", f"/apis/batch.volcano.sh/v1alpha1/namespaces/{JOB_NS}/jobs", job)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            pods = self.pods()
            placed = [p for p in pods if p.get("spec", {}).get("nodeName") in NODES]
            real = [p for p in placed if (p["metadata"].get("annotations") or {}).get("huawei.com/AscendReal")]
            if len(real) == 2 and all(p.get("status", {}).get("phase") == "Running" for p in real):
                self.used = sorted(p["spec"]["nodeName"] for p in real)
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"the job's pods did not run on {NODES} within 90 s")
        self.free = [n for n in NODES if n not in self.used]
        _log(f"job {JOB_NS}/{JOB} runs on {self.used}; free nodes {self.free}")

    def pods(self) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"labelSelector": f"volcano.sh/job-name={JOB}"})
        items: list[dict[str, Any]] = self.rest.get(f"/api/v1/namespaces/{JOB_NS}/pods?{q}").get("items", [])
        return sorted(items, key=lambda p: p["metadata"]["name"])

    def job_view(self) -> dict[str, Any]:
        """The job pods' ``fault-type`` labels (and node) and the PodGroup's annotations and labels."""
        pods = {
            p["metadata"]["name"]: {
                "node": p.get("spec", {}).get("nodeName"),
                "fault-type": (p["metadata"].get("labels") or {}).get("fault-type"),
            }
            for p in self.pods()
        }
        pgs = self.rest.get(f"{PGS}/namespaces/{JOB_NS}/podgroups").get("items", [])
        pg = next((g for g in pgs if any(o.get("name") == JOB for o in g["metadata"].get("ownerReferences", []))), None)
        return {
            "pods": pods,
            "podgroup_annotations": None if pg is None else pg["metadata"].get("annotations") or {},
            "podgroup_labels": None if pg is None else pg["metadata"].get("labels") or {},
        }

    # ----- one step ----------------------------------------------------------------------------------------------
    def step(
        self, name: str, act: Callable[[], None], *, quiet_s: float = 3.0, timeout_s: float = 20.0
    ) -> dict[str, Any]:
        """Run `act` (one input written), then wait until ClusterD's output (times ignored) and the job view
        stop changing for `quiet_s` (at most `timeout_s`); record the output, the job view and the delay from
        the write to the first change (None: nothing changed)."""
        before = _without_times(read_output(self.rest)), self.job_view()
        t0 = _now_ms()
        act()
        first_change: int | None = None
        last = before
        since = time.monotonic()
        deadline = time.monotonic() + timeout_s
        while True:
            time.sleep(0.2)
            now = _without_times(read_output(self.rest)), self.job_view()
            if now != last:
                if first_change is None and now != before:
                    first_change = _now_ms() - t0
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
            if time.monotonic() > deadline:
                break
        rec = {
            "step": name,
            "written_at_ms": t0,
            "first_change_ms": first_change,
            "output": read_output(self.rest),
            **self.job_view(),
        }
        self.steps.append(rec)
        self.raw.append({"step": name, "configmaps": raw_output(self.rest)})
        _log(f"{name}: first change after {first_change} ms")
        return rec

    # ----- inputs ------------------------------------------------------------------------------------------------
    def public(self, faults: list[PublicFault], *, resource: str = VALID_RESOURCE) -> None:
        cm = public_fault_cm(PUBLIC_CM, OUT_NS, faults, now=datetime.now(UTC), resource=resource)
        path = f"/api/v1/namespaces/{OUT_NS}/configmaps/{PUBLIC_CM}"
        try:
            self.rest.request("PUT", path, cm)
        except RestError as e:
            if e.status != 404:
                raise
            self.rest.request("POST", f"/api/v1/namespaces/{OUT_NS}/configmaps", cm)

    def tampered_device_cm(self, node: str) -> None:
        """A device ConfigMap whose DeviceInfo says chip 2 is faulty but whose CheckCode is of the old content."""
        path = f"/api/v1/namespaces/kube-system/configmaps/mindx-dl-deviceinfo-{node}"
        cm = self.rest.get(path)
        doc = json.loads(cm["data"]["DeviceInfoCfg"])
        doc["DeviceInfo"]["DeviceList"]["huawei.com/Ascend910-Unhealthy"] = "Ascend910-2"
        cm["data"]["DeviceInfoCfg"] = json.dumps(doc, separators=(",", ":"))
        self.rest.request("PUT", path, cm)


def run_steps(d: Driver) -> None:
    inj = d.injector
    used, free = d.used[0], d.free[0]
    free2 = d.free[1]
    d.step("baseline: all healthy", lambda: None)
    for level in (
        "NotHandleFault",
        "SubHealthFault",
        "RestartRequest",
        "RestartBusiness",
        "FreeRestartNPU",
        "RestartNPU",
        "PreSeparateNPU",
        "SeparateNPU",
        "ManuallySeparateNPU",
    ):
        d.step(f"chip fault {level} on a free node", lambda lv=level: inj.chip_fault(free, [ChipFault(0, level=lv)]))
    d.step("chips healthy (free node)", lambda: inj.chip_healthy(free))
    d.step(
        "chip fault PreSeparateNPU on a chip in use",
        lambda: inj.chip_fault(used, [ChipFault(0, ("80E18402",), level="PreSeparateNPU")]),
    )
    d.step(
        "chip fault PreSeparateNPU on an unused chip",
        lambda: inj.chip_fault(free, [ChipFault(0, ("80E18402",), level="PreSeparateNPU")]),
    )
    d.step(
        "chip fault SeparateNPU on a chip in use",
        lambda: inj.chip_fault(used, [ChipFault(0, level="SeparateNPU")]),
    )
    d.step("chips healthy (node in use)", lambda: inj.chip_healthy(used))
    d.step("chips healthy (free node) again", lambda: inj.chip_healthy(free))
    d.step(
        "network fault (CardNetworkUnhealthy, PreSeparateNPU) on a free node",
        lambda: inj.chip_fault(
            free, [ChipFault(1, ("81078603",), level="PreSeparateNPU", fault_type="CardNetworkUnhealthy")]
        ),
    )
    d.step("network healthy", lambda: inj.chip_healthy(free))
    d.step("device ConfigMap with a CheckCode mismatch", lambda: d.tampered_device_cm(free2))
    d.step("device ConfigMap rewritten healthy", lambda: inj.chip_healthy(free2))
    # NodeD
    d.step("NodeD SeparateFault on a free node", lambda: inj.node_fault(free, "SeparateFault"))
    d.step("NodeD PreSeparateFault on a free node", lambda: inj.node_fault(free, "PreSeparateFault"))
    d.step("NodeD PreSeparateFault on a node in use", lambda: inj.node_fault(used, "PreSeparateFault"))
    d.step("NodeD NotHandleFault on a node in use", lambda: inj.node_fault(used, "NotHandleFault"))
    d.step("NodeD ConfigMap deleted (node in use)", lambda: inj.node_fault_cleared(used))
    d.step("NodeD ConfigMap deleted (free node)", lambda: inj.node_fault_cleared(free))
    # A3 switch
    d.step("switch healthy (SwitchInfoCfg, no event) on a free node", lambda: inj.switch_healthy(free))
    for level in ("NotHandle", "SubHealthFault", "RestartRequest", "PreSeparate", "Separate"):
        d.step(
            f"switch fault {level} on a free node",
            lambda lv=level: inj.switch_fault(free, [SwitchFault(level=lv)]),
        )
    d.step(
        "switch fault PreSeparate on a node in use", lambda: inj.switch_fault(used, [SwitchFault(level="PreSeparate")])
    )
    d.step("switch healthy (node in use)", lambda: inj.switch_healthy(used))
    d.step("switch healthy (free node)", lambda: inj.switch_healthy(free))
    # public faults
    d.step(
        "public fault from a resource not in publicFaultResource (testbed)",
        lambda: d.public([PublicFault(free, chips=(1,), fault_id="cd-fault-0000")], resource="testbed"),
    )
    d.step(
        "public fault NPU 220001001 (SeparateNPU) occur, resource CCAE, free node chip 1",
        lambda: d.public([PublicFault(free, chips=(1,), fault_id="cd-fault-0001")]),
    )
    d.step(
        "public fault NPU 220001001 occur on a chip in use",
        lambda: d.public([PublicFault(used, chips=(1,), fault_id="cd-fault-0002")]),
    )
    d.step(
        "public fault 110001022 (PreSeparateNPU) occur, free node chip 2",
        lambda: d.public([PublicFault(free, code="110001022", chips=(2,), fault_id="cd-fault-0003")]),
    )
    d.step(
        "public fault with a code not in the table (999999999)",
        lambda: d.public([PublicFault(free, code="999999999", chips=(3,), fault_id="cd-fault-0004")]),
    )
    d.step(
        "public fault type Node, no deviceIds",
        lambda: d.public([PublicFault(free2, fault_type="Node", chips=(), fault_id="cd-fault-0005")]),
    )
    d.step("public fault ConfigMap deleted", lambda: inj.public_fault_deleted(name=PUBLIC_CM, namespace=OUT_NS))
    d.step(
        "public fault recover (free node chip 1, chip in use, chip 2)",
        lambda: d.public(
            [
                PublicFault(free, chips=(1,), fault_id="cd-fault-0001", assertion="recover"),
                PublicFault(used, chips=(1,), fault_id="cd-fault-0002", assertion="recover"),
                PublicFault(free, code="110001022", chips=(2,), fault_id="cd-fault-0003", assertion="recover"),
                PublicFault(free2, fault_type="Node", chips=(), fault_id="cd-fault-0005", assertion="recover"),
            ]
        ),
        timeout_s=25.0,
    )
    d.step(
        "public fault once (free node chip 4)",
        lambda: d.public([PublicFault(free, chips=(4,), fault_id="cd-fault-0006", assertion="once")]),
        quiet_s=8.0,
        timeout_s=25.0,
    )


# ----- the agent's reading --------------------------------------------------------------------------------------
def agent_reading(raw: list[dict[str, Any]], workdir: Path) -> list[dict[str, Any]]:
    """Each step's ``cluster-info-*`` ConfigMaps through ``fault-agent detect --json`` with ClusterD's view as
    the only source (faults read, for the run's nodes; rejections)."""
    out = []
    cfg = workdir / "agent-clusterd-only.yaml"
    cfg.write_text(yaml.safe_dump({"kube": {"fault_source": "clusterd"}}))
    for st in raw:
        f = workdir / "step.json"
        f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": st["configmaps"]}))
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "fault-agent"), "detect", "-f", str(f), "--json", "--config", str(cfg)],
            capture_output=True,
            text=True,
            check=False,
        )
        try:
            doc = json.loads(proc.stdout)
        except ValueError:
            out.append({"step": st["step"], "error": (proc.stderr or proc.stdout)[-500:]})
            continue
        faults = [f for f in doc.get("faults", []) if f.get("node") in NODES]
        rejections = doc.get("rejections", [])
        out.append({"step": st["step"], "faults": faults, "rejections": rejections})
    return out


# ----- the agent's decisions -------------------------------------------------------------------------------------
AGENT_SETTINGS = {
    "KUBE__FAULT_SOURCE": "clusterd",  # ClusterD's view alone (the recorded run used the three booleans it replaced)
    "KUBE__PUBLIC_FAULT_ENABLED": "false",
    "POLICY__DRY_RUN": "true",
}
"""ClusterD's view as the agent's only fault source (as MindCluster's scheduler reads it), nothing written."""


def start_agent(tb: Testbed, workdir: Path) -> Any:
    from testbed.agent_runner import AgentProcess

    rec = workdir / "agent-recording"
    if rec.exists():
        shutil.rmtree(rec)
    agent = AgentProcess(tb, workdir, settings=AGENT_SETTINGS, name="agent", args=["--record", str(rec)])
    agent.start()
    return agent


def _setting(value: str) -> str | bool:
    """An environment setting's value as the settings file spells it: ``true``/``false`` as booleans, any other
    text (``kube.fault_source: clusterd``) as itself."""
    return {"true": True, "false": False}.get(value, value)


def agent_decisions(workdir: Path, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``fault-agent replay --json`` of the agent's recording under the same settings; each output line is
    given the step whose window (from its write to the next step's write) holds its time."""
    cfg = workdir / "agent-settings.yaml"
    kube = {k.split("__")[1].lower(): _setting(v) for k, v in AGENT_SETTINGS.items() if k.startswith("KUBE__")}
    cfg.write_text(yaml.safe_dump({"kube": kube, "policy": {"dry_run": True}}))
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "fault-agent"),
            "replay",
            str(workdir / "agent-recording"),
            "--config",
            str(cfg),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    out = []
    starts = [(s["written_at_ms"], s["step"]) for s in steps]
    for line in proc.stdout.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        t = doc.get("t") or doc.get("time")
        step = None
        if isinstance(t, (int, float)):
            step = next((name for at, name in reversed(starts) if at <= t), None)
        elif isinstance(t, str):
            with contextlib.suppress(ValueError):
                ms = datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp() * 1000
                step = next((name for at, name in reversed(starts) if at <= ms), None)
        out.append({"step": step, **doc})
    if proc.returncode != 0:
        out.append({"error": proc.stderr[-2000:]})
    return out


# ----- the real ClusterD ------------------------------------------------------------------------------------------
CLUSTERD_RULES = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap")


def _bind(src: str, dst: Path) -> str:
    return f"mount --bind {src} {dst}"


@contextlib.contextmanager
def real_clusterd(tb: Testbed, binary: Path, source: Path, workdir: Path) -> Iterator[list[str]]:
    """Run MindCluster's ClusterD as it runs in its Deployment: a ServiceAccount token, CA and namespace at the
    in-cluster path, ``build/*.json`` and ``fdConfig.yaml`` in ``/home/hwMindX``, logs in
    ``/var/log/mindx-dl/clusterd``; all in a private mount namespace and a root of its own (bind mounts of
    /usr, /etc, /dev, /proc, /tmp), so nothing on the machine is touched. Its RBAC, ServiceAccount and
    ``cluster-system/clusterd-config-cm`` come from ``build/clusterd.yaml``."""
    rest = tb.rest()
    manifest = source / "build" / "clusterd.yaml"
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    for ns in {d["metadata"].get("namespace") for d in docs if d["metadata"].get("namespace")}:
        with contextlib.suppress(RestError):
            rest.request(
                "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            )
    for doc in docs:
        if doc["kind"] in CLUSTERD_RULES:
            rest.apply(doc)
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]
    token = service_account_token(rest, sa["namespace"], sa["name"], seconds=86400)
    root = workdir / "root"
    if root.exists():
        shutil.rmtree(root)
    for d in ("usr", "etc", "dev", "proc", "tmp", "sys"):
        (root / d).mkdir(parents=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        (root / link).symlink_to(f"usr/{link}")
    sa_dir = root / "var/run/secrets/kubernetes.io/serviceaccount"
    sa_dir.mkdir(parents=True)
    (sa_dir / "token").write_text(token)
    shutil.copy(tb.ca_file, sa_dir / "ca.crt")
    (sa_dir / "namespace").write_text(sa["namespace"])
    home = root / "home/hwMindX"
    home.mkdir(parents=True)
    for f in (source / "build").iterdir():
        if f.suffix in (".json", ".yaml") and f.name != "clusterd.yaml":
            shutil.copy(f, home / f.name)
    logdir = workdir / "log"
    logdir.mkdir(parents=True, exist_ok=True)
    (root / "var/log/mindx-dl").mkdir(parents=True)
    for d in ("user1/mindx-dl/clusterd", "user/slownode-cluster", "user/restore/reset", "user/cluster-info"):
        (root / d).mkdir(parents=True)
    (root / "clusterd").mkdir()
    shutil.copy(binary, root / "clusterd" / "clusterd")
    mounts = [_bind(f"/{d}", root / d) for d in ("usr", "etc", "dev", "proc", "tmp", "sys")]
    mounts.append(_bind(str(logdir), root / "var/log/mindx-dl"))
    argv = ["/clusterd/clusterd", "-logFile=/var/log/mindx-dl/clusterd/clusterd.log", "-logLevel=0"]
    script = " && ".join([*mounts, f"exec chroot {root} " + " ".join(argv)])
    port = tb.apiserver_url.rsplit(":", 1)[1]
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": port,
        "POD_IP": "127.0.0.1",
        "NODE_NAME": "cd-control-plane",
    }
    cmd = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    _log("running " + " ".join(cmd) + " with " + " ".join(f"{k}={v}" for k, v in env.items()))
    with (logdir / "stdout.log").open("ab") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                rest.get(f"/api/v1/namespaces/{OUT_NS}/configmaps/cluster-info-node-cm")
                break
            except RestError as e:
                if e.status != 404:
                    raise
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ClusterD wrote no cluster-info-node-cm (exit {proc.poll()}); see {logdir}")
            time.sleep(0.5)
        yield [*cmd, *[f"{k}={v}" for k, v in env.items()]]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def clear_output(rest: Rest) -> None:
    """Delete the previous run's cluster-info-* and public-fault ConfigMaps (each run starts from none)."""
    q = urllib.parse.urlencode({"labelSelector": "mx-consumer-volcano=true"})
    for cm in rest.get(f"/api/v1/namespaces/{OUT_NS}/configmaps?{q}").get("items", []):
        with contextlib.suppress(RestError):
            rest.request("DELETE", f"/api/v1/namespaces/{OUT_NS}/configmaps/{cm['metadata']['name']}")
    with contextlib.suppress(RestError):
        rest.request("DELETE", f"/api/v1/namespaces/{OUT_NS}/configmaps/{PUBLIC_CM}")


# ----- comparison ---------------------------------------------------------------------------------------------
def _fmt(value: Any) -> str:
    text = json.dumps(_without_times(value), sort_keys=True, separators=(",", ":"))
    return text.replace("|", "\\|")


def compare(real: dict[str, Any], other: dict[str, Any]) -> str:
    """Markdown: per step, whether the outputs (times ignored), the pods' labels and PodGroup annotations match,
    and the delays."""
    lines = [
        "| step | real: first change (ms) | stand-in (ms) | output | labels/annotations |",
        "|---|---|---|---|---|",
    ]
    by_name = {s["step"]: s for s in other["steps"]}
    for s in real["steps"]:
        o = by_name.get(s["step"])
        if o is None:
            lines.append(f"| {s['step']} | {s['first_change_ms']} | - | missing | - |")
            continue
        same_out = _without_times(s["output"]) == _without_times(o["output"])
        same_job = {k: v["fault-type"] for k, v in s["pods"].items()} == {
            k: v["fault-type"] for k, v in o["pods"].items()
        } and s["podgroup_annotations"] == o["podgroup_annotations"]
        lines.append(
            f"| {s['step']} | {s['first_change_ms']} | {o['first_change_ms']} | "
            f"{'yes' if same_out else '**no**'} | {'yes' if same_job else '**no**'} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--dir", default=".testbed", help="a running testbed (python -m testbed up --dir DIR)")
    parser.add_argument("--clusterd", choices=("real", "stand-in"))
    parser.add_argument("--binary", type=Path, help="the real ClusterD's binary (--clusterd real)")
    parser.add_argument("--source", type=Path, help="MindCluster's component/clusterd (its build/ files)")
    parser.add_argument("--out", type=Path, help="where the record goes (JSON)")
    parser.add_argument("--raw-out", type=Path, help="also write each step's cluster-info-* ConfigMaps (JSON)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("REAL", "STAND_IN"))
    parser.add_argument(
        "--agent",
        action="store_true",
        help="also run the agent (dry run, ClusterD's view as its only fault source, --record), replay the "
        "recording and add its decisions to the record",
    )
    args = parser.parse_args(argv)
    if args.compare:
        real, other = (json.loads(p.read_text()) for p in args.compare)
        print(compare(real, other))
        return 0
    if args.clusterd is None or args.out is None:
        parser.error("--clusterd and --out are needed (or --compare)")
    tb = Testbed.attach(Path(args.dir))
    rest = tb.rest()
    clear_output(rest)
    workdir = Path(args.dir).resolve() / f"clusterd-{args.clusterd}"
    workdir.mkdir(parents=True, exist_ok=True)
    ctx: contextlib.AbstractContextManager[Any]
    if args.clusterd == "real":
        if not (args.binary and args.source):
            parser.error("--clusterd real needs --binary and --source")
        ctx = real_clusterd(tb, args.binary.resolve(), args.source.resolve(), workdir)
    else:
        ctx = stand_in.running(tb.kubeconfig, OUT_NS, workdir / "stand-in.log")
    record: dict[str, Any] = {"clusterd": args.clusterd, "started": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    driver = Driver(rest)
    driver.setup()
    record["nodes"] = {"used": driver.used, "free": driver.free}
    agent = None
    with ctx as run_argv:
        record["argv"] = run_argv if isinstance(run_argv, list) else ["python", "-m", "testbed.clusterd"]
        if args.agent:
            agent = start_agent(tb, workdir)
        try:
            run_steps(driver)
        finally:
            if agent is not None:
                agent.stop()
                record["agent_settings"] = AGENT_SETTINGS
                record["agent_decisions"] = agent_decisions(workdir, driver.steps)
            record["steps"] = driver.steps
            record["finished"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            with tempfile.TemporaryDirectory() as tmp:
                record["agent_reading"] = agent_reading(driver.raw, Path(tmp))
            args.out.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
            if args.raw_out:
                args.raw_out.write_text(json.dumps(driver.raw, indent=1) + "\n")
    _log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
