"""Conformance scenarios for "an Ascend Operator": MindCluster's real binary or the testbed's stand-in.

Plays the faults itself (no fault-agent): a pod turned Failed through its status (a business failure), pods
deleted (what a chip-fault restart does), the reschedule ConfigMap's ``remain-retry-times`` entry written as
MindCluster's Volcano plugin writes it. After each step it waits until the job, its pods and its PodGroup stop
changing, and records the job's conditions, the pods' ``version`` labels and phases, and the PodGroup.

    # the stand-in (a testbed component; the driver labels each scenario's namespace for it)
    python bench/conformance_ascendjob.py --dir .testbed --operator stand-in --out stand-in.json
    # the real operator, built from MindCluster's source: the driver installs its CRD, ServiceAccount and RBAC
    # from its manifest and runs the binary with the manifest's arguments and a ServiceAccount token
    python bench/conformance_ascendjob.py --dir .testbed --operator real --binary ./ascend-operator \\
        --manifest ascend-operator.yaml --out real.json
    # both records side by side (markdown)
    python bench/conformance_ascendjob.py --compare real.json stand-in.json

``--manifest`` (either run) installs the manifest's AscendJob CRD (its status stanza removed) in place of the
testbed's schemaless one, so both operators run against the same schema. Docs: docs/mindcluster-conformance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import secrets
import shlex
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from testbed.ascend_operator import NAMESPACE_LABEL  # noqa: E402
from testbed.cluster import Testbed  # noqa: E402
from testbed.inject import Injector  # noqa: E402
from testbed.rest import Rest, RestError  # noqa: E402
from testbed.service_account import service_account_token, write_token_kubeconfig  # noqa: E402

JOBS = "/apis/mindxdl.gitee.com/v1"
PGS = "/apis/scheduling.volcano.sh/v1beta1"
CRD = "ascendjobs.mindxdl.gitee.com"
SEED = ROOT / "tests" / "fixtures" / "seed-acjob.yaml"
NODES = [f"conf-node-{i}" for i in range(8)]
CM_NS, CM_NAME = "volcano-system", "vcjob-fault-npu-cm"


def _log(msg: str) -> None:
    print(f"[conformance] {msg}", file=sys.stderr, flush=True)


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


class Driver:
    def __init__(self, rest: Rest, operator: str) -> None:
        self.rest = rest
        self.operator = operator
        self.injector = Injector(rest)
        self.namespaces: list[str] = []

    # ----- set-up ----------------------------------------------------------------------------------------------
    def namespace(self, tag: str) -> str:
        name = f"conf-{tag}-{secrets.token_hex(3)}"
        self.namespaces.append(name)
        labels = {}
        if self.operator == "stand-in":
            key, _, value = NAMESPACE_LABEL.partition("=")
            labels[key] = value
        self.rest.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}},
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # pods need the namespace's default ServiceAccount
            try:
                self.rest.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
                break
            except RestError:
                time.sleep(0.2)
        return name

    def job(
        self,
        ns: str,
        *,
        labels: dict[str, str] | None = None,
        drop_labels: tuple[str, ...] = (),
        annotations: dict[str, str] | None = None,
        backoff_limit: int | None = None,
    ) -> dict[str, Any]:
        cm, job = (copy.deepcopy(d) for d in yaml.safe_load_all(SEED.read_text()) if d)
        cm["metadata"]["namespace"] = ns
        job["metadata"]["namespace"] = ns
        job["metadata"]["name"] = "conf-job"
        cm["metadata"]["name"] = "rings-config-conf-job"
        for spec in job["spec"]["replicaSpecs"].values():
            spec["template"]["spec"]["volumes"][0]["configMap"]["name"] = "rings-config-conf-job"
        worker = job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]
        worker["nodeSelector"]["accelerator-type"] = "module-910b-8"
        worker["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"][
            "matchExpressions"
        ][0]["values"] = ["conf-job"]
        for key in drop_labels:
            job["metadata"]["labels"].pop(key, None)
        job["metadata"]["labels"].update(labels or {})
        if annotations:
            job["metadata"]["annotations"] = annotations
        if backoff_limit is not None:
            job["spec"]["runPolicy"]["backoffLimit"] = backoff_limit
        self.rest.request("POST", f"/api/v1/namespaces/{ns}/configmaps", cm)
        created: dict[str, Any] = self.rest.request("POST", f"{JOBS}/namespaces/{ns}/ascendjobs", job)
        return created

    def remain_retry(self, job: dict[str, Any], times: int) -> None:
        """Write the job's entry into volcano-system/vcjob-fault-npu-cm key remain-retry-times as MindCluster's
        Volcano plugin does: ``{"<ns>/<name>-<uid>": {"UUID": "<uid>", "Times": n}}`` (other entries kept)."""
        meta = job["metadata"]
        key = f"{meta['namespace']}/{meta['name']}-{meta['uid']}"
        path = f"/api/v1/namespaces/{CM_NS}/configmaps/{CM_NAME}"
        try:
            cm = self.rest.get(path)
        except RestError as e:
            if e.status != 404:
                raise
            cm = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CM_NAME, "namespace": CM_NS},
                "data": {},
            }
            self.rest.request("POST", f"/api/v1/namespaces/{CM_NS}/configmaps", cm)
            cm = self.rest.get(path)
        data = cm.get("data") or {}
        table = json.loads(data.get("remain-retry-times") or "{}")
        table[key] = {"UUID": meta["uid"], "Times": times}
        data["remain-retry-times"] = json.dumps(table, separators=(",", ":"))
        cm["data"] = data
        self.rest.request("PUT", path, cm)

    def cleanup(self) -> None:
        """Delete the scenarios' namespaces and wait (at most 60 s) until their pods are gone (chips free)."""
        for ns in self.namespaces:
            with contextlib.suppress(RestError):
                self.rest.request("DELETE", f"/api/v1/namespaces/{ns}")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(self._any_pod(ns) for ns in self.namespaces):
            time.sleep(0.5)
        self.namespaces.clear()

    def _any_pod(self, ns: str) -> bool:
        try:
            return bool(self.rest.get(f"/api/v1/namespaces/{ns}/pods").get("items"))
        except RestError:
            return False

    # ----- faults --------------------------------------------------------------------------------------------
    def pods(self, ns: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode({"labelSelector": "training.kubeflow.org/job-name=conf-job"})
        items: list[dict[str, Any]] = self.rest.get(f"/api/v1/namespaces/{ns}/pods?{q}").get("items", [])
        return sorted(items, key=lambda p: p["metadata"]["name"])

    def fail(self, ns: str, pod: str) -> None:
        self.injector.pod_failed(ns, pod, exit_code=1)

    def delete(self, ns: str, pod: str) -> None:
        with contextlib.suppress(RestError):
            self.rest.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}", {"gracePeriodSeconds": 0})

    def delete_all(self, ns: str) -> None:
        for p in self.pods(ns):
            if not p["metadata"].get("deletionTimestamp"):
                self.delete(ns, p["metadata"]["name"])

    # ----- observation ---------------------------------------------------------------------------------------
    def snapshot(self, ns: str, step: str) -> dict[str, Any]:
        job = self.rest.get(f"{JOBS}/namespaces/{ns}/ascendjobs/conf-job")
        meta = job["metadata"]
        created = _ts(meta["creationTimestamp"]) or 0.0
        status = job.get("status") or {}
        conds = [
            {
                "type": c.get("type"),
                "status": c.get("status"),
                "reason": c.get("reason"),
                "lastTransitionTime": c.get("lastTransitionTime"),
                "offset_s": None
                if _ts(c.get("lastTransitionTime")) is None
                else int((_ts(c.get("lastTransitionTime")) or 0) - created),
            }
            for c in status.get("conditions") or []
        ]
        pods = [
            {
                "name": p["metadata"]["name"].removeprefix("conf-job-"),
                "version": (p["metadata"].get("labels") or {}).get("version"),
                "phase": p.get("status", {}).get("phase"),
                "deleting": bool(p["metadata"].get("deletionTimestamp")),
            }
            for p in self.pods(ns)
        ]
        pg_name = f"conf-job-{meta['uid']}"
        try:
            pg = self.rest.get(f"{PGS}/namespaces/{ns}/podgroups/{pg_name}")
            job_labels = meta.get("labels") or {}
            pgrec: dict[str, Any] | None = {
                "phase": (pg.get("status") or {}).get("phase"),
                "labels_added": {
                    k: v for k, v in (pg["metadata"].get("labels") or {}).items() if job_labels.get(k) != v
                },
                "labels_missing": sorted(k for k in job_labels if k not in (pg["metadata"].get("labels") or {})),
                "annotations": pg["metadata"].get("annotations") or {},
                "minMember": pg["spec"].get("minMember"),
            }
        except RestError as e:
            if e.status != 404:
                raise
            pgrec = None
        final = next((c["type"] for c in reversed(conds) if c["status"] == "True"), None)
        return {
            "step": step,
            "job_version_label": (meta.get("labels") or {}).get("version"),
            "conditions": conds,
            "pods": pods,
            "podgroup": pgrec,
            "phase": final,
            "replicaStatuses": status.get("replicaStatuses"),
        }

    def settle(self, ns: str, step: str, *, quiet_s: float = 4.0, timeout_s: float = 60.0) -> dict[str, Any]:
        """Wait until nothing recorded changes for `quiet_s` (at most `timeout_s`), then snapshot."""
        deadline = time.monotonic() + timeout_s
        last = None
        since = time.monotonic()
        while True:
            snap = self.snapshot(ns, step)
            if snap != last:
                last, since = snap, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                return snap
            if time.monotonic() > deadline:
                snap["unsettled"] = True
                return snap
            time.sleep(0.3)

    def wait_running(self, ns: str, step: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Wait for two Running pods and a Running job (or timeout), then settle."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            snap = self.snapshot(ns, step)
            live = [p for p in snap["pods"] if p["phase"] == "Running" and not p["deleting"]]
            running = any(c["type"] == "Running" and c["status"] == "True" for c in snap["conditions"])
            if len(live) == 2 and running:
                break
            time.sleep(0.3)
        return self.settle(ns, step)


# ----- scenarios ---------------------------------------------------------------------------------------------
Scenario = Callable[[Driver], list[dict[str, Any]]]


def s1a_failure_no_entry(d: Driver) -> list[dict[str, Any]]:
    """Business failure before any restart; fault-retry-times 3; no remain-retry-times entry."""
    ns = d.namespace("1a")
    d.job(ns)
    out = [d.wait_running(ns, "started")]
    d.fail(ns, "conf-job-worker-0")
    out.append(d.settle(ns, "worker-0 Failed"))
    return out


def s1b_failure_with_entry(d: Driver) -> list[dict[str, Any]]:
    """Business failure before any restart; fault-retry-times 3; an entry with Times 2; then the failed pod is
    deleted (as the Volcano plugin would)."""
    ns = d.namespace("1b")
    job = d.job(ns)
    out = [d.wait_running(ns, "started")]
    d.remain_retry(job, 2)
    d.fail(ns, "conf-job-worker-0")
    out.append(d.settle(ns, "worker-0 Failed (entry Times=2)"))
    d.delete(ns, "conf-job-worker-0")
    out.append(d.wait_running(ns, "failed pod deleted"))
    return out


def s1c_failure_no_retry_label(d: Driver) -> list[dict[str, Any]]:
    """Business failure, job without the fault-retry-times label (entry present anyway)."""
    ns = d.namespace("1c")
    job = d.job(ns, drop_labels=("fault-retry-times",))
    out = [d.wait_running(ns, "started")]
    d.remain_retry(job, 2)
    d.fail(ns, "conf-job-worker-0")
    out.append(d.settle(ns, "worker-0 Failed (no retry label)"))
    return out


def s1d_failure_entry_zero(d: Driver) -> list[dict[str, Any]]:
    """Business failure; fault-retry-times 3; the entry holds Times 0."""
    ns = d.namespace("1d")
    job = d.job(ns)
    out = [d.wait_running(ns, "started")]
    d.remain_retry(job, 0)
    d.fail(ns, "conf-job-worker-0")
    out.append(d.settle(ns, "worker-0 Failed (entry Times=0)"))
    return out


def s2_failure_after_restart(d: Driver) -> list[dict[str, Any]]:
    """A restart (all pods deleted), then a business failure with an entry (Times 2), then a second without one."""
    ns = d.namespace("2")
    job = d.job(ns)
    out = [d.wait_running(ns, "started")]
    d.delete_all(ns)
    out.append(d.wait_running(ns, "all pods deleted"))
    d.remain_retry(job, 2)
    d.fail(ns, "conf-job-master-0")
    out.append(d.settle(ns, "master-0 Failed (entry Times=2)"))
    d.delete(ns, "conf-job-master-0")
    out.append(d.wait_running(ns, "failed pod deleted"))
    d.remain_retry(job, 0)
    d.fail(ns, "conf-job-worker-0")
    out.append(d.settle(ns, "worker-0 Failed (entry Times=0)"))
    return out


def s3_one_pod_deleted(d: Driver) -> list[dict[str, Any]]:
    """One pod deleted (a pod-level restart), then the other."""
    ns = d.namespace("3")
    d.job(ns)
    out = [d.wait_running(ns, "started")]
    d.delete(ns, "conf-job-master-0")
    out.append(d.wait_running(ns, "master-0 deleted"))
    d.delete(ns, "conf-job-worker-0")
    out.append(d.wait_running(ns, "worker-0 (version 0) deleted"))
    return out


def s4_three_restarts_backoff2(d: Driver) -> list[dict[str, Any]]:
    """Three whole-job restarts (all pods deleted) with runPolicy.backoffLimit 2."""
    ns = d.namespace("4")
    d.job(ns, backoff_limit=2)
    out = [d.wait_running(ns, "started")]
    for i in range(1, 4):
        d.delete_all(ns)
        out.append(d.wait_running(ns, f"restart {i}: all pods deleted", timeout_s=30 if i == 3 else 60))
    return out


def s5_failure_then_two_deletions(d: Driver) -> list[dict[str, Any]]:
    """One business failure (entry Times 2) whose pod is deleted, then two whole-job deletions; backoffLimit 2."""
    ns = d.namespace("5")
    job = d.job(ns, backoff_limit=2)
    out = [d.wait_running(ns, "started")]
    d.remain_retry(job, 2)
    d.fail(ns, "conf-job-worker-0")
    out.append(d.settle(ns, "worker-0 Failed (entry Times=2)"))
    d.delete(ns, "conf-job-worker-0")
    out.append(d.wait_running(ns, "deletion 1: failed pod deleted"))
    d.delete_all(ns)
    out.append(d.wait_running(ns, "deletion 2: all pods deleted"))
    d.delete_all(ns)
    out.append(d.wait_running(ns, "deletion 3: all pods deleted", timeout_s=30))
    return out


def s6_recover_strategy(d: Driver) -> list[dict[str, Any]]:
    """The recover-strategy annotation: what the PodGroup gets."""
    ns = d.namespace("6")
    d.job(ns, annotations={"recover-strategy": "recover"}, labels={"pod-rescheduling": "on"})
    return [d.wait_running(ns, "started (recover-strategy=recover)")]


def s7_startup_conditions(d: Driver) -> list[dict[str, Any]]:
    """Conditions from creation to Running, sampled every 0.3 s (each distinct list recorded)."""
    ns = d.namespace("7")
    d.job(ns)
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snap = d.snapshot(ns, "during start-up")
        key = [(c["type"], c["status"], c["reason"], c["lastTransitionTime"]) for c in snap["conditions"]]
        if not seen or key != [
            (c["type"], c["status"], c["reason"], c["lastTransitionTime"]) for c in seen[-1]["conditions"]
        ]:
            seen.append(snap)
        if snap["phase"] == "Running":
            break
        time.sleep(0.3)
    seen.append(d.settle(ns, "started"))
    return seen


SCENARIOS: dict[str, tuple[str, Scenario]] = {
    "1a": ("business failure, no remain-retry-times entry", s1a_failure_no_entry),
    "1b": ("business failure, entry Times=2, failed pod then deleted", s1b_failure_with_entry),
    "1c": ("business failure, no fault-retry-times label", s1c_failure_no_retry_label),
    "1d": ("business failure, entry Times=0", s1d_failure_entry_zero),
    "2": ("business failure after a restart", s2_failure_after_restart),
    "3": ("one pod deleted, then the other", s3_one_pod_deleted),
    "4": ("three whole-job restarts, backoffLimit 2", s4_three_restarts_backoff2),
    "5": ("business failure then two deletions, backoffLimit 2", s5_failure_then_two_deletions),
    "6": ("recover-strategy annotation", s6_recover_strategy),
    "7": ("start-up conditions", s7_startup_conditions),
}


# ----- the real operator -------------------------------------------------------------------------------------
def install_crd(rest: Rest, manifest: Path) -> None:
    """Replace the AscendJob CRD with the manifest's (its status stanza removed), unless already the same."""
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    crd = next(d for d in docs if d["kind"] == "CustomResourceDefinition")
    crd.pop("status", None)
    crd["metadata"].pop("creationTimestamp", None)
    current = rest.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")
    schema = current["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    if "replicaSpecs" in (schema.get("properties", {}).get("spec", {}).get("properties") or {}):
        return
    _log("replacing the testbed's AscendJob CRD with the manifest's")
    rest.request("DELETE", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            rest.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}")
            time.sleep(0.3)
        except RestError:
            break
    rest.request("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
    while not any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (rest.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD}").get("status") or {}).get(
            "conditions"
        )
        or []
    ):
        time.sleep(0.2)
    time.sleep(2)


def manifest_args(manifest: Path, log_file: Path) -> list[str]:
    """The operator's arguments from the manifest's Deployment: healthz flags dropped, log file ours."""
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    dep = next(d for d in docs if d["kind"] == "Deployment")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    words = shlex.split(" ".join(container.get("args") or []))
    args = [w for w in words[1:] if w.startswith("--") and "healthz" not in w.lower() and "probe" not in w.lower()]
    return [f"--logFile={log_file}" if a.startswith("--logFile=") else a for a in args]


@contextlib.contextmanager
def real_operator(tb: Testbed, binary: Path, manifest: Path, workdir: Path) -> Iterator[list[str]]:
    rest = tb.rest()
    docs = [d for d in yaml.safe_load_all(manifest.read_text()) if d]
    for doc in docs:
        if doc["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
            rest.apply(doc)
    sa = next(d for d in docs if d["kind"] == "ServiceAccount")["metadata"]
    token = service_account_token(rest, sa["namespace"], sa["name"], seconds=86400)
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = write_token_kubeconfig(workdir / "kubeconfig", tb, token, user="ascend-operator")
    log = workdir / "ascend-operator.log"
    argv = [str(binary), *manifest_args(manifest, log), f"--kubeconfig={kubeconfig}"]
    _log("running " + " ".join(argv))
    with (workdir / "stdout.log").open("ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "KUBECONFIG": str(kubeconfig)}, cwd=workdir
        )
    try:
        time.sleep(5)
        if proc.poll() is not None:
            raise RuntimeError(f"the operator exited ({proc.returncode}); see {workdir}")
        yield argv
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# ----- comparison --------------------------------------------------------------------------------------------
def _created_time(snap: dict[str, Any]) -> str | None:
    return next((c["lastTransitionTime"] for c in snap["conditions"] if c["type"] == "Created"), None)


def _shape(snap: dict[str, Any], first_created: str | None) -> dict[str, Any]:
    """What must match between two operators: conditions by type, status and reason in order, whether Created
    still has the transition time it got at the job's start (timestamps themselves depend on timing), the live
    pods' versions and phases, the PodGroup's added and missing labels, the phases."""
    return {
        "conditions": [(c["type"], c["status"], c["reason"]) for c in snap["conditions"]],
        "created_time_kept": _created_time(snap) == first_created,
        "pods": [(p["name"], p["version"], p["phase"]) for p in snap["pods"] if not p["deleting"]],
        "podgroup": None
        if snap["podgroup"] is None
        else (sorted(snap["podgroup"]["labels_added"].items()), snap["podgroup"]["labels_missing"]),
        "phase": snap["phase"],
        "job_version_label": snap["job_version_label"],
    }


def newest_true(snap: dict[str, Any]) -> str | None:
    """The True condition with the newest lastTransitionTime, the later in the list on a tie: how the agent reads an
    AscendJob's phase (agent/sources/jobs.py ``_newest_true_condition``)."""
    best, best_t = None, ""
    for c in snap["conditions"]:
        if c["status"] == "True" and (c["lastTransitionTime"] or "") >= best_t:
            best, best_t = c["type"], c["lastTransitionTime"] or ""
    return best


def _fmt(snap: dict[str, Any]) -> str:
    conds = ", ".join(
        f"{c['type']}{'' if c['status'] == 'True' else '=' + str(c['status'])}({c['reason']},+{c['offset_s']}s)"
        for c in snap["conditions"]
    )
    pods = " ".join(f"{p['name']}:v{p['version']}/{p['phase']}" for p in snap["pods"] if not p["deleting"])
    pg = (
        "none"
        if snap["podgroup"] is None
        else f"{snap['podgroup']['phase']} +{snap['podgroup']['labels_added'] or '{}'}"
    )
    phase = f"last True: {snap['phase']}, newest True: {newest_true(snap)}"
    return f"{conds}<br>{phase}<br>pods {pods or '-'}<br>PodGroup {pg}"


def compare(real: dict[str, Any], stand_in: dict[str, Any]) -> str:
    lines = ["| scenario | step | real operator | stand-in | match |", "|---|---|---|---|---|"]
    for key, (title, _) in SCENARIOS.items():
        r, s = real["scenarios"].get(key, []), stand_in["scenarios"].get(key, [])
        r_first = next((_created_time(x) for x in r if _created_time(x)), None)
        s_first = next((_created_time(x) for x in s if _created_time(x)), None)
        if key == "7":  # start-up samples depend on timing: compare the settled end only
            r, s = r[-1:], s[-1:]
        for i in range(max(len(r), len(s))):
            rs, ss = (r[i] if i < len(r) else None), (s[i] if i < len(s) else None)
            match = rs is not None and ss is not None and _shape(rs, r_first) == _shape(ss, s_first)
            step = (rs or ss or {}).get("step", "")
            lines.append(
                f"| {key} {title if i == 0 else ''} | {step} | {_fmt(rs) if rs else '-'} | {_fmt(ss) if ss else '-'} "
                f"| {'yes' if match else '**no**'} |"
            )
    return "\n".join(lines)


def utc_stamp() -> str:
    """Now, UTC, to the second (``2026-12-05T08:00:00Z``): the records' timestamps."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_operator_args(parser: argparse.ArgumentParser) -> None:
    """The arguments every operator conformance run takes (this script's and conformance_agent.py's)."""
    parser.add_argument("--dir", default=".testbed", help="a running testbed (python -m testbed up --dir DIR)")
    parser.add_argument("--operator", choices=("real", "stand-in"))
    parser.add_argument("--binary", type=Path, help="the real operator's binary (--operator real)")
    parser.add_argument(
        "--manifest", type=Path, help="MindCluster's component/ascend-operator/build/ascend-operator.yaml"
    )
    parser.add_argument("--out", type=Path, help="where the record goes (JSON)")
    parser.add_argument("--only", default="", help="comma-separated scenario keys (default: all)")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("REAL", "STAND_IN"))


def start_operator_run(
    parser: argparse.ArgumentParser, args: argparse.Namespace, keys: list[str]
) -> tuple[Testbed, Rest, list[str]]:
    """Check `args` (from :func:`add_operator_args`, without --compare), attach to the testbed, add the nodes and
    the CRD; return the testbed, its client and the scenario keys to run (--only, else `keys`)."""
    if args.operator is None or args.out is None:
        parser.error("--operator and --out are needed (or --compare)")
    if args.operator == "real" and not (args.binary and args.manifest):
        parser.error("--operator real needs --binary and --manifest")
    tb = Testbed.attach(Path(args.dir))
    rest = tb.rest()
    Injector(rest).add_nodes(NODES)
    if args.manifest:
        install_crd(rest, args.manifest)
    return tb, rest, [k for k in args.only.split(",") if k] or keys


def operator_context(tb: Testbed, args: argparse.Namespace, op_dir: Path) -> contextlib.AbstractContextManager[Any]:
    """The real operator running for the scenarios (`op_dir` its directory), or nothing for the stand-in (the
    testbed runs it); the context's value is the argv it ran with."""
    if args.operator == "real":
        return real_operator(tb, args.binary.resolve(), args.manifest, op_dir)
    return contextlib.nullcontext([])


def error_step(e: BaseException, **extra: Any) -> dict[str, Any]:
    """The record of a scenario that failed with `e` (the same keys as a snapshot, empty)."""
    return {
        "step": "error",
        "error": repr(e),
        "conditions": [],
        "pods": [],
        "podgroup": None,
        "phase": None,
        "job_version_label": None,
        **extra,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    add_operator_args(parser)
    parser.add_argument(
        "--agent",
        action="store_true",
        help="run the scenarios WITH the agent (bench/conformance_agent.py: its own scenarios a-g, an agent per "
        "scenario, its Kafka events recorded; --compare then compares two such records)",
    )
    args = parser.parse_args(argv)
    if args.agent:
        from conformance_agent import main as with_agent

        return with_agent([a for a in (sys.argv[1:] if argv is None else argv) if a != "--agent"])
    if args.compare:
        real, stand_in = (json.loads(p.read_text()) for p in args.compare)
        print(compare(real, stand_in))
        return 0
    tb, rest, keys = start_operator_run(parser, args, list(SCENARIOS))
    record: dict[str, Any] = {"operator": args.operator, "started": utc_stamp(), "scenarios": {}}
    driver = Driver(rest, args.operator)
    with operator_context(tb, args, Path(args.dir).resolve() / "real-ascend-operator") as run_argv:
        record["argv"] = run_argv
        for key in keys:
            title, fn = SCENARIOS[key]
            _log(f"scenario {key}: {title}")
            try:
                record["scenarios"][key] = fn(driver)
            except (RestError, RuntimeError, KeyError) as e:
                record["scenarios"][key] = [error_step(e)]
                _log(f"scenario {key} failed: {e}")
            driver.cleanup()
            args.out.write_text(json.dumps(record, indent=1) + "\n")
    record["finished"] = utc_stamp()
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
