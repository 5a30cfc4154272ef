"""A stand-in for MindCluster's Ascend Operator (the AscendJob controller), for the testbed.

Written from the operator's observable rules (Ascend/mind-cluster commit 22bb3d98,
component/ascend-operator/pkg/controllers/v1: ascendjob_controller.go, job.go, pod.go, labels.go, annotation.go,
service.go, unconditaional_retry.go, consts.go, and the kubeflow/common v0.4.3 status helpers it calls), checked
against the real binary by ``bench/conformance_ascendjob.py`` (docs/mindcluster-conformance.md). No code of
theirs is copied. The rules:

- **First sight of a job** (its creation, or the first list after this process starts): condition ``Created``
  (reason ``JobCreated``); the restart counter ``version`` starts at 0 and the backoff limit is
  ``spec.runPolicy.backoffLimit``, else the ``fault-retry-times`` label, else unlimited. Both live in this
  process's memory only, as in the operator: ``version`` shows on the pods' ``version`` label, never on the job.
- **Gang scheduling**: a Volcano PodGroup ``<job>-<uid>`` with the job's labels and annotations (plus
  ``process-recover-enable=on`` when the job has the ``recover-strategy`` annotation), owned by the job,
  minMember = ``runPolicy.schedulingPolicy.minAvailable`` or the replicas' sum, ``minTaskMember`` per replica
  type, the policy's queue and priority class, and the first minMember pods' requests as minResources. While it has
  no phase or is Pending, no pods are made and ``Created`` takes reason ``PodGroupNotInitialized`` /
  ``PodGroupPending`` (same type and status: its lastTransitionTime stays).
- **Pods**: one per replica index, ``<job>-<type>-<index>``, labels = the template's + ``version`` (the current
  counter) + kubeflow's job, operator, group, replica-type and replica-index labels (and ``job-role=master`` for
  Master/Scheduler/Chief), annotations ``hccl/rankIndex`` (a Worker's index + 1 when a non-worker replica asks for
  chips), ``scheduling.k8s.io/group-name`` and ``volcano.sh/task-spec``, ``schedulerName: volcano``, the replica's
  restartPolicy. A missing index is created again (at the current version); a pod still terminating holds its index.
  A Service ``<job>-<master type>-0`` with the master container's ports.
- **Every deleted pod of the current version bumps the version** (whoever deleted it); older pods do not.
- **Backoff**: at a reconcile with version > backoffLimit > 0 the job is Failed (reason ``JobFailed``).
- **Job status from its pods**: a Failed pod (not being deleted) → ``Restarting`` if a Restarting condition is
  already listed; else, for a job whose ``fault-retry-times`` label is > 0 and which has an entry
  ``"<ns>/<name>-<uid>"`` with ``Times`` >= 1 in ``volcano-system/vcjob-fault-npu-cm`` key
  ``remain-retry-times`` (JSON ``{"<ns>/<name>-<uid>": {"UUID": "...", "Times": n}}``), ``Restarting`` (reason
  ``JobRestarting``); otherwise ``Failed`` (reason ``JobFailed``). Else a Running pod → ``Running``
  (``JobRunning``); else all Succeeded → ``Succeeded`` (reason ``JobRunning``, as the operator writes it).
  Nobody deletes the failed pod here: the job stays Restarting until someone does.
- **Conditions** follow kubeflow's rules (:func:`set_condition`): nothing changes once Failed; a condition of the
  same type, status and reason is left alone; same type and status with another reason moves to the end keeping
  its lastTransitionTime; Running and Restarting replace each other; Failed/Succeeded turn Running False.
- **Finished jobs** (Failed or Succeeded): pods still Pending are deleted, the others are left
  (``cleanPodPolicy`` defaults to None), the PodGroup is deleted.

- **The rank table** (:class:`RankTable`): for an AscendJob with a supported ``framework`` label, and for a
  Volcano Job labelled ``ring-controller.atlas`` or with a ``ranktable`` volume that asks for chips, the stand-in
  writes ``rings-config-<job>`` (if it existed when first looked for) key ``hccl.json``: ``completed`` with a
  server per pod once every replica's pod is allocated (it carries the device plugin's
  ``ascend-910-configuration`` annotation, which the testbed's NPU stand-in writes), ``initializing`` once when
  fewer are, a new ``completed`` when the full set's pod UIDs changed; a status is written only when it differs
  from the one it last wrote. Format 1.0 only (no super-pod 1.2 or A5 2.0 tables), no shared-storage file.

Not modelled: environment variables, restartPolicy ``ExitCode``, elastic scaling, hot switch,
``ttlSecondsAfterFinished``, job validation, Deployments / StatefulSets decorated by the operator.

Run as a testbed component: ``python -m testbed.ascend_operator --kubeconfig FILE [--namespace-label K=V]``;
with ``--namespace-label`` it manages only AscendJobs in namespaces carrying that label (the testbed's own tests
create AscendJobs with no controller and must not get one).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import signal
import ssl
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from testbed.rest import Rest, RestError

GROUP, VERSION, PLURAL = "mindxdl.gitee.com", "v1", "ascendjobs"
JOBS = f"/apis/{GROUP}/{VERSION}"
PODGROUPS = "/apis/scheduling.volcano.sh/v1beta1"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
VERSION_LABEL = "version"
RETRY_LABEL = "fault-retry-times"
RECOVER_STRATEGY = "recover-strategy"
PROCESS_RECOVER_LABEL = "process-recover-enable"
RESCHEDULE_CM = ("volcano-system", "vcjob-fault-npu-cm")
REMAIN_RETRY_KEY = "remain-retry-times"
MASTER_TYPES = ("Master", "Scheduler", "Chief")
DEFAULT_CONTAINER = "ascend"
NAMESPACE_LABEL = "testbed.fault-agent.io/ascend-operator=stand-in"
"""The label ``python -m testbed up`` runs the stand-in with: it manages AscendJobs in namespaces labelled so."""


def _log(msg: str) -> None:
    print(f"ascend-operator: {msg}", file=sys.stderr, flush=True)


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ----- kubeflow's condition rules ----------------------------------------------------------------------------
def is_true(status: dict[str, Any], ctype: str) -> bool:
    return any(c.get("type") == ctype and c.get("status") == "True" for c in status.get("conditions") or [])


def set_condition(status: dict[str, Any], ctype: str, reason: str, message: str, now: str) -> None:
    """Add condition `ctype` (status True) to `status` as kubeflow/common's UpdateJobConditions does."""
    conds: list[dict[str, Any]] = list(status.get("conditions") or [])
    if is_true(status, "Failed"):
        return
    current = next((c for c in conds if c.get("type") == ctype), None)
    if current is not None and current.get("status") == "True" and current.get("reason") == reason:
        return
    new = {
        "type": ctype,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastUpdateTime": now,
        "lastTransitionTime": now,
    }
    if current is not None and current.get("status") == "True":
        new["lastTransitionTime"] = current.get("lastTransitionTime", now)
    kept = []
    for c in conds:
        if c.get("type") == ctype:
            continue
        if {ctype, c.get("type")} == {"Running", "Restarting"}:
            continue
        if ctype in ("Failed", "Succeeded") and c.get("type") == "Running":
            c = {**c, "status": "False"}
        kept.append(c)
    status["conditions"] = [*kept, new]


# ----- what the operator reads -------------------------------------------------------------------------------
def backoff_limit(job: dict[str, Any]) -> int:
    """The job's restart limit (-1: unlimited): runPolicy.backoffLimit, else the fault-retry-times label."""
    limit = (job.get("spec", {}).get("runPolicy") or {}).get("backoffLimit")
    if limit is not None:
        return int(limit)
    value = (job["metadata"].get("labels") or {}).get(RETRY_LABEL)
    if value:
        try:
            return int(value)
        except ValueError:
            return -1
    return -1


def is_unconditional_retry(job: dict[str, Any]) -> bool:
    value = (job["metadata"].get("labels") or {}).get(RETRY_LABEL, "")
    try:
        return int(value) > 0
    except ValueError:
        return False


def remain_retry_times(cm_data: dict[str, str] | None, job: dict[str, Any]) -> int | None:
    """Times left for `job` in the reschedule ConfigMap's data (None: no ConfigMap, key, or entry for the job).

    The key is ``remain-retry-times``; its value a JSON object keyed ``<namespace>/<name>-<uid>`` whose values are
    ``{"UUID": ..., "Times": n}``."""
    if not cm_data or REMAIN_RETRY_KEY not in cm_data:
        return None
    try:
        table = json.loads(cm_data[REMAIN_RETRY_KEY])
    except ValueError:
        return None
    meta = job["metadata"]
    entry = table.get(f"{meta['namespace']}/{meta['name']}-{meta['uid']}") if isinstance(table, dict) else None
    if not isinstance(entry, dict):
        return None
    try:
        return int(entry.get("Times", 0))
    except (TypeError, ValueError):
        return None


def replicas_of(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    specs: dict[str, dict[str, Any]] = job.get("spec", {}).get("replicaSpecs") or {}
    return specs


def _count(spec: dict[str, Any]) -> int:
    return int(spec.get("replicas", 1))


def _npu_request(template: dict[str, Any]) -> int:
    total = 0
    for c in (template.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        for key in ("limits", "requests"):
            for name, value in (res.get(key) or {}).items():
                if name.startswith("huawei.com/"):
                    with contextlib.suppress(ValueError):
                        total = max(total, int(value))
    return total


def non_worker_holds_chips(job: dict[str, Any]) -> bool:
    """True when a replica other than Worker asks for chips (a Worker's rank is then its index + 1)."""
    return any(rt != "Worker" and _npu_request(s.get("template") or {}) > 0 for rt, s in replicas_of(job).items())


def owner_ref(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AscendJob",
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def common_labels(name: str) -> dict[str, str]:
    return {
        "training.kubeflow.org/operator-name": "ascendjob-controller",
        "group-name": GROUP,
        JOB_NAME_LABEL: name,
        "job-name": name,
    }


def podgroup_name(job: dict[str, Any]) -> str:
    return f"{job['metadata']['name']}-{job['metadata']['uid']}"


def _quantity(value: Any) -> float:
    text = str(value)
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * units[suffix]
    return float(text)


def _format_quantity(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{int(value * 1000)}m"


def podgroup_for(job: dict[str, Any]) -> dict[str, Any]:
    """The PodGroup the operator creates for `job`."""
    meta = job["metadata"]
    specs = replicas_of(job)
    policy = (job.get("spec", {}).get("runPolicy") or {}).get("schedulingPolicy") or {}
    min_member = int(policy.get("minAvailable", sum(_count(s) for s in specs.values())))
    labels = dict(meta.get("labels") or {})
    annotations = dict(meta.get("annotations") or {})
    if RECOVER_STRATEGY in annotations and meta.get("labels"):
        labels[PROCESS_RECOVER_LABEL] = "on"
    spec: dict[str, Any] = {
        "minMember": min_member,
        "minTaskMember": {rt.lower(): _count(s) for rt, s in specs.items()},
    }
    if policy.get("queue"):
        spec["queue"] = policy["queue"]
    if policy.get("priorityClass"):
        spec["priorityClassName"] = policy["priorityClass"]
    if policy.get("minResources"):
        spec["minResources"] = policy["minResources"]
    else:
        sums: dict[str, float] = {}
        left = min_member
        for _, s in sorted(specs.items()):
            for _ in range(min(left, _count(s))):
                for c in ((s.get("template") or {}).get("spec") or {}).get("containers") or []:
                    for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
                        sums[name] = sums.get(name, 0.0) + _quantity(value)
            left -= min(left, _count(s))
        if sums:
            spec["minResources"] = {k: _format_quantity(v) for k, v in sums.items()}
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": podgroup_name(job),
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_ref(job)],
        },
        "spec": spec,
    }


def pod_for(job: dict[str, Any], rtype: str, index: int, version: int) -> dict[str, Any]:
    """The pod the operator creates for replica `rtype`/`index` of `job` at restart counter `version`."""
    meta = job["metadata"]
    spec = replicas_of(job)[rtype]
    template = copy.deepcopy(spec.get("template") or {})
    tmeta = template.get("metadata") or {}
    rt = rtype.lower()
    labels = dict(tmeta.get("labels") or {})
    if rtype in MASTER_TYPES:
        labels["training.kubeflow.org/job-role"] = "master"
    labels[VERSION_LABEL] = str(version)
    labels.update(common_labels(meta["name"]))
    labels.update(
        {REPLICA_TYPE_LABEL: rt, "replica-type": rt, REPLICA_INDEX_LABEL: str(index), "replica-index": str(index)}
    )
    rank = index + 1 if rtype == "Worker" and non_worker_holds_chips(job) else index
    annotations = dict(tmeta.get("annotations") or {})
    annotations["hccl/rankIndex"] = str(rank)
    annotations["scheduling.k8s.io/group-name"] = podgroup_name(job)
    annotations["volcano.sh/task-spec"] = rt
    pod_spec = template.get("spec") or {}
    policy = spec.get("restartPolicy") or ""
    pod_spec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    if not pod_spec.get("restartPolicy"):
        pod_spec.pop("restartPolicy")
    scheduler = job.get("spec", {}).get("schedulerName") or "volcano"
    if not any((s.get("template") or {}).get("spec", {}).get("schedulerName") for s in replicas_of(job).values()):
        pod_spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{rt}-{index}",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [owner_ref(job)],
        },
        "spec": pod_spec,
    }


def service_for(job: dict[str, Any]) -> dict[str, Any] | None:
    """The Service the operator makes for the job's master replica (Master, Scheduler or Chief), if any."""
    meta = job["metadata"]
    specs = replicas_of(job)
    rtype = next((rt for rt in specs if rt in MASTER_TYPES), "")
    rt = rtype.lower()
    labels = {**common_labels(meta["name"]), REPLICA_TYPE_LABEL: rt, "replica-type": rt}
    labels.update({REPLICA_INDEX_LABEL: "0", "replica-index": "0"})
    ports = []
    if rtype:
        for c in ((specs[rtype].get("template") or {}).get("spec") or {}).get("containers") or []:
            if c.get("name") == DEFAULT_CONTAINER:
                ports = [{"name": p["name"], "port": p["containerPort"]} for p in c.get("ports") or [] if p.get("name")]
    if not ports:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": f"{meta['name']}-{rt}-0",
            "namespace": meta["namespace"],
            "labels": labels,
            "ownerReferences": [owner_ref(job)],
        },
        "spec": {"selector": labels, "ports": ports},
    }


def job_state(
    job: dict[str, Any], status: dict[str, Any], pods: list[dict[str, Any]], cm_data: dict[str, str] | None
) -> tuple[str, str, str] | None:
    """The condition (type, reason, message) the operator adds from the job's pods, or None."""
    active = succeeded = failed = 0
    for pod in pods:
        phase = pod.get("status", {}).get("phase")
        if phase == "Running":
            active += 1
        elif phase == "Succeeded":
            succeeded += 1
        elif phase == "Failed" and not pod["metadata"].get("deletionTimestamp"):
            failed += 1
    ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
    if failed:
        restarting = next((c for c in status.get("conditions") or [] if c.get("type") == "Restarting"), None)
        if restarting is not None:
            return ("Restarting", restarting.get("reason", ""), restarting.get("message", ""))
        failed_msg = f"Job <{ns}/{name}> has failed because has pod failed."
        if not is_unconditional_retry(job):
            return ("Failed", "JobFailed", failed_msg)
        times = remain_retry_times(cm_data, job)
        if times is None:
            return ("Failed", "JobFailed", failed_msg)
        if times < 1:
            return (
                "Failed",
                "JobFailed",
                f"Job <{ns}/{name}> has failed because pod failed and remain retry times is 0.",
            )
        return (
            "Restarting",
            "JobRestarting",
            f"Job <{ns}/{name}> is unconditional retry job and remain retry times is <{times}>.",
        )
    if active:
        return ("Running", "JobRunning", f"Job {ns}/{name} is running.")
    total = sum(_count(s) for s in replicas_of(job).values())
    if succeeded and (succeeded == total or active == 0):
        return ("Succeeded", "JobRunning", f"Job<{ns}-{name}> successfully completed.")
    return None


def replica_statuses(job: dict[str, Any], pods: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for rtype in replicas_of(job):
        counts = {"active": 0, "succeeded": 0, "failed": 0}
        for pod in pods:
            if (pod["metadata"].get("labels") or {}).get(REPLICA_TYPE_LABEL) != rtype.lower():
                continue
            phase = pod.get("status", {}).get("phase")
            if phase == "Running":
                counts["active"] += 1
            elif phase == "Succeeded":
                counts["succeeded"] += 1
            elif phase == "Failed" and not pod["metadata"].get("deletionTimestamp"):
                counts["failed"] += 1
        out[rtype] = {k: v for k, v in counts.items() if v}
    return out


# ----- the rank table: rings-config-<job> hccl.json ---------------------------------------------------------
CONFIG_910_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
CONFIG_NPU_ANNOTATION = "ascend.kubectl.kubernetes.io/ascend-npu-configuration"
RANK_INDEX_ANNOTATION = "hccl/rankIndex"
RINGS_PREFIX = "rings-config-"
RANK_TABLE_KEY = "hccl.json"
RANK_TABLE_VERSION_KEY = "version"
RANK_TABLE_FORMAT = "1.0"
INITIALIZING, COMPLETED, UNKNOWN = "initializing", "completed", "unknown"
ATLAS_LABEL = "ring-controller.atlas"
RANKTABLE_VOLUME = "ranktable"
FRAMEWORKS = ("pytorch", "mindspore", "tensorflow")
VCJOBS = "/apis/batch.volcano.sh/v1alpha1"
VCJOB_NAME_LABEL = "volcano.sh/job-name"


def requests_chips(pod_spec: dict[str, Any]) -> bool:
    """True when a container of `pod_spec` requests more than 0 of a ``huawei.com/`` resource (requests only, as
    the operator's ``podUseNpu`` reads them)."""
    for c in pod_spec.get("containers") or []:
        for name, value in ((c.get("resources") or {}).get("requests") or {}).items():
            if name.startswith("huawei.com/"):
                with contextlib.suppress(ValueError):
                    if int(value) > 0:
                        return True
    return False


def pod_allocated(pod: dict[str, Any]) -> bool:
    """Whether `pod` counts towards the rank table (operator: ranktable/utils/util.go ``PodHasAllocated``): not
    being deleted, and either asking for no chips or carrying the device plugin's configuration annotation."""
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    if not requests_chips(pod.get("spec") or {}):
        return True
    annotations = meta.get("annotations") or {}
    return CONFIG_910_ANNOTATION in annotations or CONFIG_NPU_ANNOTATION in annotations


def server_of(pod: dict[str, Any], one_pod_one_node: bool) -> dict[str, Any] | None:
    """The rank table's server entry for allocated `pod` (None: it carries no configuration annotation, so it adds
    no server), from its configuration annotation (the device plugin's JSON ``{"pod_name", "server_id",
    "host_ip", "devices": [{"device_id", "device_ip"}]}``, MindCluster component/ascend-device-plugin
    pkg/common/common.go ``GetPodConfiguration``), ``hccl/rankIndex`` and ``status.podIP``: ``{"device":
    [{"device_id", "device_ip", "rank_id"}], "server_id", "host_ip", "container_ip"}``, rank_id = rankIndex x the
    pod's chip count + the chip's place (operator: ranktable/common/common.go ``buildServerInfo``,
    ``getDeviceList``). server_id is the annotation's (the pod UID), or its host_ip when every pod of the job is on
    a node of its own.

    Raises:
        ValueError: the annotation is not JSON of that shape, rankIndex is not an integer, the pod has no IP yet, or
            a chip has the device plugin's error IP (format 1.0 needs every chip's IP).
    """
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    text = annotations.get(CONFIG_910_ANNOTATION, annotations.get(CONFIG_NPU_ANNOTATION))
    if text is None:
        return None
    where = f"pod {meta.get('namespace')}/{meta.get('name')}"
    try:
        instance = json.loads(text)
        devices = [(str(d["device_id"]), str(d["device_ip"])) for d in instance.get("devices") or []]
        server_id, host_ip = str(instance.get("server_id", "")), str(instance.get("host_ip", ""))
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"{where}: unreadable {CONFIG_910_ANNOTATION}: {e}") from e
    pod_ip = (pod.get("status") or {}).get("podIP") or ""
    if not pod_ip:
        raise ValueError(f"{where}: no pod IP yet")
    try:
        rank_index = int(annotations.get(RANK_INDEX_ANNOTATION, ""))
    except ValueError as e:
        raise ValueError(f"{where}: {RANK_INDEX_ANNOTATION} is not an integer") from e
    for device_id, device_ip in devices:
        if device_ip == "-1":
            raise ValueError(f"{where}: chip {device_id} has no device IP")
    return {
        "device": [
            {"device_id": d, "device_ip": ip, "rank_id": str(rank_index * len(devices) + i)}
            for i, (d, ip) in enumerate(devices)
        ],
        "server_id": host_ip if one_pod_one_node else server_id,
        "host_ip": host_ip,
        "container_ip": pod_ip,
    }


def rank_table_text(status: str, server_list: list[dict[str, Any]]) -> str:
    """``hccl.json`` as the operator writes it (format 1.0): compact JSON ``{"status", "server_list",
    "server_count", "version": "1.0"}``, the server list and count left out while the list is empty."""
    body: dict[str, Any] = {"status": status}
    if server_list:
        body["server_list"] = server_list
        body["server_count"] = str(len(server_list))
    body["version"] = RANK_TABLE_FORMAT
    return json.dumps(body, separators=(",", ":"))


class RankTable:
    """One job's rank table as the operator holds it in memory (operator: pkg/controllers/v1/pod.go
    ``genRankTable``, ``handleCompletedRankTable``, ``buildNewRankTable``, ``saveRankTableConfigmap``;
    ranktable/common/common.go ``BaseGenerator``).

    :meth:`update` takes the job's pods at an event and returns what to write into ``rings-config-<job>``, or
    None. The rules: with every replica allocated (:func:`pod_allocated`) and the status ``initializing``, build
    the table (status ``completed``); once ``completed``, fewer allocated pods than replicas drop the servers and
    turn it ``initializing`` (the last server list stays in what is written, as the operator's does: it clears only
    its per-pod map), and a full set of other pod UIDs builds it anew; more allocated pods than replicas change
    nothing. A status is written only when it differs from the one last written to the ConfigMap (a failed write
    leaves ``unknown``: the next change writes again). The ConfigMap's ``version`` key gets the Unix time (s) of the
    previous save, 0 for the first since this process started (the operator stamps after it writes).
    """

    def __init__(self) -> None:
        self.status = INITIALIZING
        self.cm_status = INITIALIZING
        self.servers: dict[str, dict[str, Any]] = {}  # pod UID -> server
        self.server_list: list[dict[str, Any]] = []
        self.timestamp = 0
        self.configmap_exists: bool | None = None  # checked once, at the first save
        self.logged: set[str] = set()  # the allocation errors already logged

    def update(self, pods: list[dict[str, Any]], replicas: int, now_unix: int) -> dict[str, str] | None:
        """The ConfigMap data to write (``hccl.json`` and ``version``) after the job's `pods` changed, or None.

        Raises:
            ValueError: a pod's allocation cannot be read (:func:`server_of`); nothing changes.
        """
        allocated = [p for p in pods if pod_allocated(p)]
        if self.status == COMPLETED:
            if len(allocated) > replicas:
                return None
            if len(allocated) < replicas:
                self.servers = {}
                self.status = INITIALIZING
                return self._save(now_unix)
            if {p["metadata"]["uid"] for p in allocated} == set(self.servers):
                return None
            self.servers = {}
            self.status = INITIALIZING
            self.cm_status = INITIALIZING
        if replicas == 0 or len(allocated) != replicas:
            return None
        nodes = [(p.get("spec") or {}).get("nodeName") for p in allocated]
        one_pod_one_node = len(set(nodes)) == len(nodes)
        servers = {p["metadata"]["uid"]: server_of(p, one_pod_one_node) for p in allocated}
        self.servers = {uid: s for uid, s in servers.items() if s is not None}
        self.status = COMPLETED
        self.server_list = sorted(self.servers.values(), key=_first_rank)
        return self._save(now_unix)

    def _save(self, now_unix: int) -> dict[str, str] | None:
        data = None
        if self.cm_status != self.status:
            data = {
                RANK_TABLE_KEY: rank_table_text(self.status, self.server_list),
                RANK_TABLE_VERSION_KEY: str(self.timestamp),
            }
        self.timestamp = now_unix
        return data

    def written(self, ok: bool) -> None:
        """Record the outcome of writing what :meth:`update` returned."""
        self.cm_status = self.status if ok else UNKNOWN


def _first_rank(server: dict[str, Any]) -> int:
    devices = server.get("device") or []
    try:
        return int(devices[0]["rank_id"]) if devices else -1
    except (ValueError, KeyError):
        return -1


def serves_ascendjob(job: dict[str, Any]) -> bool:
    """Whether the operator keeps a rank table for AscendJob `job`: its ``framework`` label names one it supports
    (operator: ascendjob_controller.go ``ascendJobCreateFunc``, api/v1/defaults.go ``GetJobFramework``)."""
    return (job["metadata"].get("labels") or {}).get("framework") in FRAMEWORKS


def serves_vcjob(job: dict[str, Any]) -> bool:
    """Whether the operator keeps a rank table for Volcano Job `job`: labelled ``ring-controller.atlas``, or a task's
    pod template has a volume named ``ranktable`` (operator: ranktable/plugins.go ``vcJobPlugin``)."""
    if ATLAS_LABEL in (job["metadata"].get("labels") or {}):
        return True
    for task in job.get("spec", {}).get("tasks") or []:
        for volume in ((task.get("template") or {}).get("spec") or {}).get("volumes") or []:
            if volume.get("name") == RANKTABLE_VOLUME:
                return True
    return False


def vcjob_replicas(job: dict[str, Any]) -> int:
    return sum(int(t.get("replicas", 0)) for t in job.get("spec", {}).get("tasks") or [])


def vcjob_requests_chips(job: dict[str, Any]) -> bool:
    return any(
        requests_chips((t.get("template") or {}).get("spec") or {}) for t in job.get("spec", {}).get("tasks") or []
    )


# ----- the controller ----------------------------------------------------------------------------------------
class AscendOperator:
    """The stand-in's state (restart counter and backoff limit per job UID, in memory as in the operator) and its
    reconcile. Watch threads call :meth:`job_seen`, :meth:`pod_event` and :meth:`enqueue`; :meth:`run_worker`
    reconciles queued jobs one at a time.

    Args:
        rest: admin client.
        namespace_label: ``key=value``; only jobs in namespaces with that label are managed ("" = all).
        clock: returns the RFC 3339 time used in conditions (tests pass their own).
        unix_clock: returns the Unix time (s) the rank table's ``version`` key is stamped with.
    """

    def __init__(
        self,
        rest: Rest,
        namespace_label: str = "",
        clock: Callable[[], str] = now_rfc3339,
        unix_clock: Callable[[], float] = time.time,
    ) -> None:
        self.rest = rest
        self.namespace_label = namespace_label
        self.clock = clock
        self.unix_clock = unix_clock
        self.rank_tables: dict[str, RankTable] = {}  # job UID -> its rank table (AscendJobs and Volcano Jobs)
        self.versions: dict[str, int] = {}
        self.backoff: dict[str, int] = {}
        self.fresh: set[str] = set()  # UIDs seen created whose Created(JobCreated) is not written yet
        # the job pods as the pod watch delivered them (the operator's informer cache), updated under the same lock
        # as the version bump: a reconcile never sees a pod gone before its deletion has bumped the version (read
        # straight from the apiserver, a pod deleted a moment ago was recreated at the old version). None: read
        # the apiserver (until start() turns the cache on).
        self.pod_cache: dict[str, dict[str, Any]] | None = None
        self._ns_cache: dict[str, tuple[float, bool]] = {}
        self._queue: list[tuple[str, str, str]] = []
        self._cond = threading.Condition()
        self._lock = threading.Lock()

    # ----- events ------------------------------------------------------------------------------------------
    def managed(self, namespace: str) -> bool:
        if not self.namespace_label:
            return True
        hit = self._ns_cache.get(namespace)
        if hit is not None and time.monotonic() - hit[0] < 2.0:
            return hit[1]
        key, _, value = self.namespace_label.partition("=")
        try:
            ns = self.rest.get(f"/api/v1/namespaces/{namespace}")
            ok = (ns["metadata"].get("labels") or {}).get(key) == value
        except RestError:
            ok = False
        self._ns_cache[namespace] = (time.monotonic(), ok)
        return ok

    def job_seen(self, kind: str, job: dict[str, Any]) -> None:
        meta = job["metadata"]
        if not self.managed(meta["namespace"]):
            return
        uid = meta["uid"]
        with self._lock:
            if kind == "DELETED":
                self.versions.pop(uid, None)
                self.backoff.pop(uid, None)
                self.fresh.discard(uid)
                self.rank_tables.pop(uid, None)
                return
            if uid not in self.versions:
                self.versions[uid] = 0
                self.backoff[uid] = backoff_limit(job)
                self.fresh.add(uid)
                if serves_ascendjob(job):
                    self.rank_tables[uid] = RankTable()
        self.enqueue(meta["namespace"], meta["name"])

    def vcjob_seen(self, kind: str, job: dict[str, Any]) -> None:
        """A Volcano Job's event: at first sight it gets a rank table when the operator would serve it
        (:func:`serves_vcjob`); every event brings its table up to date."""
        meta = job["metadata"]
        if not self.managed(meta["namespace"]):
            return
        with self._lock:
            if kind == "DELETED":
                self.rank_tables.pop(meta["uid"], None)
                return
            if meta["uid"] not in self.rank_tables and serves_vcjob(job):
                self.rank_tables[meta["uid"]] = RankTable()
        self.enqueue(meta["namespace"], meta["name"], "Job")

    def vcjob_pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
        if owner is not None and owner.get("kind") == "Job" and owner.get("apiVersion", "").startswith("batch.volcano"):
            self.enqueue(meta["namespace"], owner["name"], "Job")

    def pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        owner = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), None)
        if owner is None or owner.get("kind") != "AscendJob":
            return
        with self._lock:
            if self.pod_cache is not None:
                if kind == "DELETED":
                    self.pod_cache.pop(meta["uid"], None)
                else:
                    self.pod_cache[meta["uid"]] = pod
            if kind == "DELETED" and labels.get(REPLICA_TYPE_LABEL) and labels.get(VERSION_LABEL):
                try:
                    version = int(labels[VERSION_LABEL])
                except ValueError:
                    version = -1
                if self.versions.get(owner["uid"]) == version:
                    self.versions[owner["uid"]] = version + 1
        self.enqueue(meta["namespace"], owner["name"])

    def pods_relisted(self, items: list[dict[str, Any]]) -> None:
        """A fresh list of the pods: cached pods absent from it were deleted while the watch was down (an
        informer's DeletedFinalStateUnknown), and are handled as deletions."""
        listed = {p["metadata"]["uid"] for p in items}
        with self._lock:
            gone = [p for uid, p in (self.pod_cache or {}).items() if uid not in listed]
        for pod in gone:
            self.pod_event("DELETED", pod)

    def enqueue(self, namespace: str, name: str, kind: str = "AscendJob") -> None:
        """Queue a reconcile of `kind` (``AscendJob``, or ``Job``: a Volcano Job's rank table) `namespace`/`name`."""
        with self._cond:
            if (namespace, name, kind) not in self._queue:
                self._queue.append((namespace, name, kind))
            self._cond.notify()

    def run_worker(self, stop: threading.Event) -> None:
        while not stop.is_set():
            with self._cond:
                while not self._queue and not stop.is_set():
                    self._cond.wait(timeout=1.0)
                if stop.is_set():
                    return
                ns, name, kind = self._queue.pop(0)
            try:
                again = self.reconcile(ns, name) if kind == "AscendJob" else self.reconcile_vcjob(ns, name)
            except (RestError, OSError, ValueError, KeyError) as e:
                _log(f"reconcile {kind} {ns}/{name} failed: {e}")
                again = True
            if again:
                threading.Timer(0.5, self.enqueue, (ns, name, kind)).start()

    # ----- reconcile ---------------------------------------------------------------------------------------
    def reconcile(self, ns: str, name: str) -> bool:
        """Bring job `ns`/`name` one step towards its desired state; True when it must be tried again soon."""
        if not self.managed(ns):
            return False
        try:
            job = self.rest.get(f"{JOBS}/namespaces/{ns}/{PLURAL}/{name}")
        except RestError as e:
            if e.status == 404:
                return False
            raise
        meta = job["metadata"]
        uid = meta["uid"]
        if meta.get("deletionTimestamp"):
            with self._lock:
                self.versions.pop(uid, None)
                self.backoff.pop(uid, None)
            return False
        status: dict[str, Any] = copy.deepcopy(job.get("status") or {})
        with self._lock:
            if uid not in self.versions:  # first sight through a reconcile (the watch had not shown it yet)
                self.versions[uid] = 0
                self.backoff[uid] = backoff_limit(job)
                self.fresh.add(uid)
                if serves_ascendjob(job):
                    self.rank_tables[uid] = RankTable()
            fresh = uid in self.fresh
            version, limit = self.versions[uid], self.backoff[uid]
        if fresh:
            # the operator adds Created(JobCreated) to its cached copy of the job when it first sees it: part of
            # what it compares against, so it is written only with a later change (at a restart of the operator,
            # a running job's status is left as it is)
            set_condition(status, "Created", "JobCreated", f"Job {name} is create.", self.clock())
        old = copy.deepcopy(status)
        pods = self._pods(job)
        again = False
        if is_true(status, "Succeeded") or is_true(status, "Failed"):
            self._finish(job, pods)
        elif limit > 0 and version > limit:
            self._finish(job, pods)
            set_condition(
                status,
                "Failed",
                "JobFailed",
                f"Job {name} has failed because it has reached the specified backoff limit",
                self.clock(),
            )
            status.setdefault("completionTime", self.clock())
        else:
            again = self._sync(job, status, pods, version)
        if status != old and self._write_status(job, status):
            with self._lock:
                self.fresh.discard(uid)  # written with it
        return again

    def _sync(self, job: dict[str, Any], status: dict[str, Any], pods: list[dict[str, Any]], version: int) -> bool:
        name = job["metadata"]["name"]
        pg = self._podgroup(job)
        phase = (pg.get("status") or {}).get("phase", "")
        if phase in ("", "Pending"):
            if phase == "":
                set_condition(
                    status,
                    "Created",
                    "PodGroupNotInitialized",
                    "volcano-scheduler is maybe not running, execute command to check the status: "
                    "kubectl get pod -n volcano-system -l app=volcano-scheduler",
                    self.clock(),
                )
            else:
                set_condition(status, "Created", "PodGroupPending", "the cluster resource is not enough", self.clock())
            status["lastReconcileTime"] = self.clock()
            return False  # the PodGroup's next change brings the job back
        self._service(job)
        self._rank_table(job, pods, sum(_count(s) for s in replicas_of(job).values()))
        by_index: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            try:
                key = (labels.get(REPLICA_TYPE_LABEL, ""), int(labels.get(REPLICA_INDEX_LABEL, "")))
            except ValueError:
                continue
            by_index.setdefault(key, []).append(pod)
        for rtype, spec in replicas_of(job).items():
            for index in range(_count(spec)):
                if (rtype.lower(), index) in by_index:
                    continue
                body = pod_for(job, rtype, index, version)
                try:
                    self.rest.request("POST", f"/api/v1/namespaces/{job['metadata']['namespace']}/pods", body)
                except RestError as e:
                    if e.status != 409:
                        set_condition(status, "Created", "PodCreateFailed", str(e), self.clock())
                        return True
        status["replicaStatuses"] = replica_statuses(job, pods)
        status.setdefault("startTime", self.clock())
        cond = job_state(job, status, pods, self._reschedule_cm() if self._has_failed(pods) else None)
        if cond is not None:
            set_condition(status, *cond, self.clock())
            if cond[0] in ("Failed", "Succeeded"):
                status.setdefault("completionTime", self.clock())
        _ = name
        return False

    def reconcile_vcjob(self, ns: str, name: str) -> bool:
        """Bring Volcano Job `ns`/`name`'s rank table up to date (nothing for a job the operator does not serve or
        that asks for no chips: operator ascendjob_controller.go ``ranktablePipeline``). Always False."""
        try:
            job = self.rest.get(f"{VCJOBS}/namespaces/{ns}/jobs/{name}")
        except RestError as e:
            if e.status == 404:
                return False
            raise
        if job["metadata"]["uid"] not in self.rank_tables or not vcjob_requests_chips(job):
            return False
        query = urllib.parse.urlencode({"labelSelector": f"{VCJOB_NAME_LABEL}={name}"})
        items: list[dict[str, Any]] = self.rest.get(f"/api/v1/namespaces/{ns}/pods?{query}").get("items", [])
        uid = job["metadata"]["uid"]
        pods = [
            p
            for p in items
            if any(o.get("uid") == uid and o.get("controller") for o in p["metadata"].get("ownerReferences") or [])
        ]
        self._rank_table(job, pods, vcjob_replicas(job))
        return False

    def _rank_table(self, job: dict[str, Any], pods: list[dict[str, Any]], replicas: int) -> None:
        """Update `job`'s rank table from its `pods` and write ``rings-config-<job>`` when it changed status.

        Allocated pods without ``hccl/rankIndex`` (a Volcano Job's) get the lowest free ones, in name order, patched
        onto the pod (operator: pod.go ``updateRankIndex``). The ConfigMap is looked for once per table, at the
        first write: one created later is never written (pod.go ``configmapExist``). A write reads the ConfigMap,
        sets ``hccl.json`` and ``version`` and PUTs it, 3 tries 1 s apart (pod.go ``tryWriteCm``,
        ascendjob_controller.go ``writeRanktableToCm``). An unreadable allocation is logged and waits for the
        pod's next event."""
        meta = job["metadata"]
        table = self.rank_tables.get(meta["uid"])
        if table is None:
            return
        pods = [copy.deepcopy(p) for p in pods]
        allocated = sorted((p for p in pods if pod_allocated(p)), key=lambda p: p["metadata"]["name"])
        if len(allocated) == replicas and (
            table.status != COMPLETED or {p["metadata"]["uid"] for p in allocated} != set(table.servers)
        ):
            self._assign_rank_indexes(allocated)
        try:
            data = table.update(pods, replicas, int(self.unix_clock()))
        except ValueError as e:
            if str(e) not in table.logged:  # once per reason and table: it waits for the pod's next event
                table.logged.add(str(e))
                _log(f"rank table of {meta['namespace']}/{meta['name']}: {e}")
            return
        if data is None:
            return
        path = f"/api/v1/namespaces/{meta['namespace']}/configmaps/{RINGS_PREFIX}{meta['name']}"
        if table.configmap_exists is None:
            try:
                self.rest.get(path)
                table.configmap_exists = True
            except RestError:
                table.configmap_exists = False
        if not table.configmap_exists:
            return
        for attempt in range(3):
            try:
                cm = self.rest.get(path)
                cm["data"] = {**(cm.get("data") or {}), **data}
                self.rest.request("PUT", path, cm)
                table.written(True)
                _log(f"{RINGS_PREFIX}{meta['name']} in {meta['namespace']}: {table.status}")
                return
            except RestError as e:
                _log(f"writing {path} failed: {e}")
                if attempt < 2:
                    time.sleep(1.0)
        table.written(False)

    def _assign_rank_indexes(self, allocated: list[dict[str, Any]]) -> None:
        used: set[int] = set()
        for pod in allocated:
            with contextlib.suppress(ValueError):
                used.add(int((pod["metadata"].get("annotations") or {}).get(RANK_INDEX_ANNOTATION, "")))
        missing = [p for p in allocated if RANK_INDEX_ANNOTATION not in (p["metadata"].get("annotations") or {})]
        rank = 0
        for pod in missing:
            while rank in used:
                rank += 1
            meta = pod["metadata"]
            try:
                self.rest.merge_patch(
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    {"metadata": {"annotations": {RANK_INDEX_ANNOTATION: str(rank)}}},
                )
            except RestError as e:
                _log(f"patching {meta['name']}'s {RANK_INDEX_ANNOTATION} failed: {e}")
                continue
            meta.setdefault("annotations", {})[RANK_INDEX_ANNOTATION] = str(rank)
            used.add(rank)

    @staticmethod
    def _has_failed(pods: list[dict[str, Any]]) -> bool:
        return any(p.get("status", {}).get("phase") == "Failed" for p in pods)

    def _finish(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        ns = job["metadata"]["namespace"]
        for pod in pods:
            if pod.get("status", {}).get("phase") == "Pending" and not pod["metadata"].get("deletionTimestamp"):
                try:
                    self.rest.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}")
                except RestError as e:
                    if e.status != 404:
                        raise
        try:
            self.rest.request("DELETE", f"{PODGROUPS}/namespaces/{ns}/podgroups/{podgroup_name(job)}")
        except RestError as e:
            if e.status != 404:
                raise

    def _pods(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        with self._lock:
            if self.pod_cache is not None:
                return [
                    p
                    for p in self.pod_cache.values()
                    if p["metadata"].get("namespace") == ns
                    and (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name
                ]
        query = urllib.parse.urlencode({"labelSelector": f"{JOB_NAME_LABEL}={name}"})
        items: list[dict[str, Any]] = self.rest.get(f"/api/v1/namespaces/{ns}/pods?{query}").get("items", [])
        return items

    def _podgroup(self, job: dict[str, Any]) -> dict[str, Any]:
        ns = job["metadata"]["namespace"]
        path = f"{PODGROUPS}/namespaces/{ns}/podgroups"
        try:
            pg: dict[str, Any] = self.rest.get(f"{path}/{podgroup_name(job)}")
            return pg
        except RestError as e:
            if e.status != 404:
                raise
        created: dict[str, Any] = self.rest.request("POST", path, podgroup_for(job))
        return created

    def _service(self, job: dict[str, Any]) -> None:
        svc = service_for(job)
        if svc is None:
            return
        ns = job["metadata"]["namespace"]
        try:
            self.rest.get(f"/api/v1/namespaces/{ns}/services/{svc['metadata']['name']}")
        except RestError as e:
            if e.status != 404:
                raise
            try:
                self.rest.request("POST", f"/api/v1/namespaces/{ns}/services", svc)
            except RestError as e2:
                if e2.status != 409:
                    raise

    def _reschedule_cm(self) -> dict[str, str] | None:
        try:
            cm = self.rest.get(f"/api/v1/namespaces/{RESCHEDULE_CM[0]}/configmaps/{RESCHEDULE_CM[1]}")
        except RestError as e:
            if e.status == 404:
                return None
            raise
        data: dict[str, str] = cm.get("data") or {}
        return data

    def _write_status(self, job: dict[str, Any], status: dict[str, Any]) -> bool:
        """PUT the job's status (True when written). As the operator's, it always holds ``conditions`` and
        ``replicaStatuses`` (the real CRD's schema requires both)."""
        meta = job["metadata"]
        status.setdefault("conditions", [])
        status.setdefault("replicaStatuses", {})
        body = {**job, "status": status}
        try:
            self.rest.request("PUT", f"{JOBS}/namespaces/{meta['namespace']}/{PLURAL}/{meta['name']}/status", body)
        except RestError as e:
            if e.status in (404, 409):  # gone, or changed under us: the change's event brings it back
                self.enqueue(meta["namespace"], meta["name"])
                return False
            raise
        return True


# ----- watches ---------------------------------------------------------------------------------------------
def _list_watch(
    rest: Rest,
    path: str,
    on_event: Callable[[str, dict[str, Any]], None],
    stop: threading.Event,
    query: dict[str, str] | None = None,
    on_list: Callable[[list[dict[str, Any]]], None] | None = None,
) -> None:
    """List `path` (`on_list` first, then each item as ADDED), then watch it; on any error list again."""
    while not stop.is_set():
        try:
            qs = urllib.parse.urlencode(query or {})
            listing = rest.get(f"{path}?{qs}" if qs else path)
            if on_list is not None:
                on_list(listing.get("items", []))
            for item in listing.get("items", []):
                on_event("ADDED", item)
            rv = listing["metadata"]["resourceVersion"]
            while not stop.is_set():
                params = urllib.parse.urlencode(
                    {**(query or {}), "watch": "1", "resourceVersion": rv, "timeoutSeconds": "60"}
                )
                req = urllib.request.Request(f"{rest.base}{path}?{params}")
                req.add_header("Authorization", f"Bearer {rest.token}")
                with urllib.request.urlopen(req, timeout=90, context=rest.ctx) as resp:
                    for line in resp:
                        event = json.loads(line)
                        if event.get("type") == "ERROR":
                            raise RestError(0, f"watch of {path}: {event.get('object')}")
                        obj = event["object"]
                        rv = obj.get("metadata", {}).get("resourceVersion", rv)
                        if event["type"] != "BOOKMARK":
                            on_event(event["type"], obj)
        except (RestError, OSError, ssl.SSLError, ValueError, KeyError) as e:
            if not stop.is_set():
                _log(f"watch of {path} ended: {e}; listing again")
                time.sleep(0.5)


def start(operator: AscendOperator, stop: threading.Event) -> list[threading.Thread]:
    """Start the watches and the worker as daemon threads (the pods then come from the pod watch's cache)."""
    rest = operator.rest
    operator.pod_cache = {}

    def on_podgroup(kind: str, pg: dict[str, Any]) -> None:
        owner = next((o for o in pg["metadata"].get("ownerReferences") or [] if o.get("controller")), None)
        if owner is not None and owner.get("kind") == "AscendJob":
            operator.enqueue(pg["metadata"]["namespace"], owner["name"])

    targets: list[tuple[str, Callable[[str, dict[str, Any]], None], dict[str, str] | None, Any]] = [
        (f"{JOBS}/{PLURAL}", operator.job_seen, None, None),
        ("/api/v1/pods", operator.pod_event, {"labelSelector": JOB_NAME_LABEL}, operator.pods_relisted),
        (f"{PODGROUPS}/podgroups", on_podgroup, None, None),
        (f"{VCJOBS}/jobs", operator.vcjob_seen, None, None),
        ("/api/v1/pods", operator.vcjob_pod_event, {"labelSelector": VCJOB_NAME_LABEL}, None),
    ]
    threads = [
        threading.Thread(target=_list_watch, args=(rest, path, fn, stop, q, lst), name=f"watch {path}", daemon=True)
        for path, fn, q, lst in targets
    ]
    threads.append(threading.Thread(target=operator.run_worker, args=(stop,), name="reconcile", daemon=True))
    for t in threads:
        t.start()
    return threads


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument(
        "--namespace-label", default="", help="manage only AscendJobs in namespaces with this key=value label"
    )
    args = parser.parse_args(argv)
    cfg = yaml.safe_load(Path(args.kubeconfig).read_text())
    cluster = cfg["clusters"][0]["cluster"]
    rest = Rest(cluster["server"], cfg["users"][0]["user"]["token"], Path(cluster["certificate-authority"]))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    operator = AscendOperator(rest, args.namespace_label)
    start(operator, stop)
    where = f"namespaces labelled {args.namespace_label}" if args.namespace_label else "every namespace"
    _log(f"managing AscendJobs in {where}")
    while not stop.wait(1.0):
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
