"""What the end-to-end tests share (no tests here): the guide's jobs, polling with deadlines, event validation
against the agent's own JSON Schemas, and recorders that watch the cluster the way an operator would.

Everything talks to the real testbed: no mocks, no in-process agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import yaml
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException
from support.polling import eventually

import agent.sinks
from agent.core.records import record_name
from agent.sinks.events import event_errors
from testbed.agent_runner import Received
from testbed.ascend_operator import NAMESPACE_LABEL
from testbed.inject import ChipFault

if TYPE_CHECKING:
    from conftest import Scenario

T = TypeVar("T")

FIXTURES = Path(__file__).parent.parent / "fixtures"
SCHEMAS = Path(agent.sinks.__file__).parent / "schemas"
TEST_LABEL = "e2e.fault-agent.io/test"
"""Node label naming the test that owns a node; the tests' jobs select it so their pods land on their own nodes."""
NPU = "huawei.com/Ascend910"
VC = ("batch.volcano.sh", "v1alpha1", "jobs")
AC = ("mindxdl.gitee.com", "v1", "ascendjobs")
JS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
BUS = ("bus.volcano.sh", "v1alpha1", "commands")
AC_JOB_LABEL = "training.kubeflow.org/job-name"
"""The label the Ascend Operator (and its stand-in) puts on an AscendJob's pods: the job's name."""


# ------------------------------------------------------------------------------------------------ polling


async def holds(probe: Callable[[], Awaitable[bool]], *, for_s: float, what: str) -> None:
    """Poll `probe` every 0.2 s for `for_s` seconds; fails at the first poll where it is false (a negative
    assertion needs a window: "no second restart within N s")."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        if not await probe():
            pytest.fail(f"no longer true: {what}")
        await asyncio.sleep(0.2)


# ------------------------------------------------------------------------------------------------ events


def event_time(value: str) -> datetime:
    """An RFC 3339 UTC time as the agent writes it (an event's ``time``, a fault's ``signal_time``:
    ``2026-12-05T15:00:00.123Z``), as an aware datetime."""
    return datetime.fromisoformat(value)


def recovery_span_s(signal_time: str, succeeded: dict[str, Any]) -> float:
    """Seconds from a fault's ``signal_time`` (as its ``fault.detected`` event gives it) to the agent's
    ``recovery.succeeded`` event's ``time``: the agent's own timestamps, so a duration checked against it does not
    depend on when the test's consumer happened to receive the event (issue 40). The recovery's
    ``durations.total_s`` (fault signal time → job running again, measured before the event is sent) fits in it."""
    return (event_time(succeeded["time"]) - event_time(signal_time)).total_seconds()


def validate_event(received: Received) -> dict[str, Any]:
    """Check one Kafka event as a consumer would: the envelope against agent/sinks/schemas/cloudevents-envelope.json
    and its data against agent/sinks/schemas/<type>.json (agent.sinks.events.event_errors); returns the CloudEvent.
    Fails the test when the type has no schema or the payload does not match."""
    event_type = received.type
    path = SCHEMAS / f"{event_type}.json"
    assert path.is_file(), f"event type {event_type!r} has no schema in {SCHEMAS}"
    errors = event_errors(received.event)
    assert not errors, f"{event_type} does not match its schemas: " + "; ".join(errors)
    return received.event


# ------------------------------------------------------------------------------------------------ jobs


def seed_docs(fixture: str) -> list[dict[str, Any]]:
    """The documents of a seed job fixture (rings-config ConfigMap, then the job)."""
    return [d for d in yaml.safe_load_all((FIXTURES / fixture).read_text()) if d]


def guide_vcjob(
    namespace: str,
    tag: str,
    *,
    name: str = "mindx-dls-test",
    labels: dict[str, str] | None = None,
    max_retry: int | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The guide's Volcano Job (tests/fixtures/seed-vcjob.yaml: 2 pods x 8 chips, one pod per node,
    ``fault-scheduling=force``) and its rings-config, moved to `namespace`, renamed to `name`, with `labels`
    merged into the job's labels, and its pods restricted to the nodes labelled ``TEST_LABEL=tag``."""
    cm, job = copy.deepcopy(seed_docs("seed-vcjob.yaml"))
    old = job["metadata"]["name"]
    cm["metadata"].update(namespace=namespace, name=f"rings-config-{name}")
    job["metadata"].update(namespace=namespace, name=name)
    job["metadata"]["labels"].update(labels or {})
    if max_retry is not None:
        job["spec"]["maxRetry"] = max_retry
    pod = job["spec"]["tasks"][0]["template"]["spec"]
    pod["nodeSelector"][TEST_LABEL] = tag
    for term in pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]:
        for expr in term["labelSelector"]["matchExpressions"]:
            expr["values"] = [name if v == old else v for v in expr["values"]]
    for volume in pod["volumes"]:
        if volume.get("configMap", {}).get("name") == f"rings-config-{old}":
            volume["configMap"]["name"] = f"rings-config-{name}"
    return cm, job


async def submit(api: k8s.ApiClient, docs: tuple[dict[str, Any], dict[str, Any]], gvp: tuple[str, str, str]) -> Any:
    """Create the rings-config ConfigMap and the job; returns the created job."""
    cm, job = docs
    await k8s.CoreV1Api(api).create_namespaced_config_map(cm["metadata"]["namespace"], cm)
    return await k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        *gvp[:2], job["metadata"]["namespace"], gvp[2], job
    )


async def get_job(api: k8s.ApiClient, namespace: str, name: str, gvp: tuple[str, str, str] = VC) -> Any:
    return await k8s.CustomObjectsApi(api).get_namespaced_custom_object(*gvp[:2], namespace, gvp[2], name)


async def job_record(api: k8s.ApiClient, namespace: str, job: Any) -> dict[str, str]:
    """The data of the agent's record of `job` (a job object; ConfigMap ``fault-agent-job-<uid>`` in `namespace`,
    the agent's ``leader.namespace``: agent.core.records), ``{}`` when there is none."""
    name = record_name(job["metadata"]["uid"])
    try:
        cm = await k8s.CoreV1Api(api).read_namespaced_config_map(name, namespace)
    except ApiException as e:
        if e.status == 404:
            return {}
        raise
    return {str(k): str(v) for k, v in (cm.data or {}).items()}


async def live_pods(api: k8s.ApiClient, namespace: str, selector: str) -> list[k8s.V1Pod]:
    """The pods matching `selector` that are not being deleted."""
    pods = (await k8s.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector)).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


async def wait_running(
    api: k8s.ApiClient,
    namespace: str,
    name: str,
    *,
    count: int = 2,
    not_uids: set[str] | frozenset[str] = frozenset(),
    timeout_s: float = 60.0,
) -> list[k8s.V1Pod]:
    """Wait until Volcano job `name` is Running with `count` live pods, all Running, Ready, annotated with their
    chips by the device plugin, on distinct nodes, and none of them in `not_uids`; returns the pods."""

    async def probe() -> list[k8s.V1Pod] | None:
        job = await get_job(api, namespace, name)
        if (job.get("status") or {}).get("state", {}).get("phase") != "Running":
            return None
        pods = await live_pods(api, namespace, f"volcano.sh/job-name={name}")
        good = [
            p
            for p in pods
            if p.status.phase == "Running"
            and (p.metadata.annotations or {}).get(NPU)
            and p.metadata.uid not in not_uids
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ]
        return good if len(good) == count == len(pods) else None

    return await eventually(probe, timeout_s=timeout_s, what=f"job {namespace}/{name} Running with {count} pods")


def job_version(job: Any) -> int:
    """Volcano's job generation, ``status.version``."""
    return int((job.get("status") or {}).get("version", 0))


# ------------------------------------------------------------------------------------------------ AscendJobs


@dataclass
class WatchedOperator:
    """What happened to an AscendJob's pods: deleted pods as (name, uid, deletionGracePeriodSeconds, whether a
    graceful deletion was seen first), created pods as (name, uid), and the highest ``version`` label seen on a pod
    (the operator's restart counter)."""

    deleted: list[tuple[str, str, int | None, bool]] = field(default_factory=list)
    created: list[tuple[str, str]] = field(default_factory=list)
    version: int = 0


async def for_the_stand_in(sc: Scenario, job: dict[str, Any]) -> None:
    """Label the test's namespace for the testbed's Ascend Operator stand-in (testbed/ascend_operator.py) and pin
    `job`'s replicas to the test's nodes. Before the job is submitted: the stand-in looks at a job's namespace when
    it first sees the job."""
    key, _, value = NAMESPACE_LABEL.partition("=")
    await k8s.CoreV1Api(sc.api).patch_namespace(sc.namespace, {"metadata": {"labels": {key: value}}})
    for spec in job["spec"]["replicaSpecs"].values():
        spec["template"]["spec"].setdefault("nodeSelector", {})[TEST_LABEL] = sc.tag


@contextlib.asynccontextmanager
async def watch_operator(api: k8s.ApiClient, namespace: str, name: str) -> AsyncIterator[WatchedOperator]:
    """Watch AscendJob `name`'s pods while the block runs (from before any pod exists)."""
    core = k8s.CoreV1Api(api)
    seen = WatchedOperator()
    listed = await core.list_namespaced_pod(namespace, label_selector=f"{AC_JOB_LABEL}={name}")

    async def run(rv: str) -> None:
        graceful: set[str] = set()
        while True:
            async with watch.Watch().stream(
                core.list_namespaced_pod, namespace, label_selector=f"{AC_JOB_LABEL}={name}", resource_version=rv
            ) as stream:
                async for ev in stream:
                    meta = ev["raw_object"]["metadata"]
                    rv = meta.get("resourceVersion", rv)
                    with contextlib.suppress(ValueError):
                        seen.version = max(seen.version, int((meta.get("labels") or {}).get("version", "0")))
                    grace = meta.get("deletionGracePeriodSeconds")
                    if ev["type"] == "ADDED":
                        seen.created.append((meta["name"], meta["uid"]))
                    if ev["type"] == "MODIFIED" and meta.get("deletionTimestamp") and (grace or 0) > 0:
                        graceful.add(meta["uid"])
                    if ev["type"] == "DELETED":
                        seen.deleted.append((meta["name"], meta["uid"], grace, meta["uid"] in graceful))

    task = asyncio.create_task(run(listed.metadata.resource_version), name="watch-ascend-operator")
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def acjob_running(
    sc: Scenario, name: str, *, not_uids: frozenset[str] | set[str] = frozenset()
) -> list[k8s.V1Pod]:
    """Wait until AscendJob `name` has 2 live pods, both Running with their chips and none in `not_uids`."""

    async def probe() -> list[k8s.V1Pod] | None:
        pods = await live_pods(sc.api, sc.namespace, f"{AC_JOB_LABEL}={name}")
        good = [
            p
            for p in pods
            if p.status.phase == "Running"
            and (p.metadata.annotations or {}).get(NPU)
            and p.metadata.uid not in not_uids
        ]
        return good if len(good) == 2 == len(pods) else None

    return await eventually(probe, timeout_s=60, what=f"AscendJob {name}'s 2 pods Running with chips")


def guide_acjob(sc: Scenario) -> tuple[dict[str, Any], dict[str, Any]]:
    """The guide's AscendJob and its ConfigMap in the test's namespace, for the testbed's 8-chip nodes (the
    guide's Worker asks for a 16-chip node type; the testbed's nodes are the guide's 8-chip A2 nodes)."""
    cm, job = copy.deepcopy(seed_docs("seed-acjob.yaml"))
    for doc in (cm, job):
        doc["metadata"]["namespace"] = sc.namespace
    job["spec"]["replicaSpecs"]["Worker"]["template"]["spec"]["nodeSelector"]["accelerator-type"] = "module-910b-8"
    return cm, job


def chip_of(pod: k8s.V1Pod, index: int = 1) -> int:
    """A chip the device plugin gave `pod`: the `index`-th of its `huawei.com/Ascend910` annotation
    (``Ascend910-<chip>,…``), as the chip's number on its node."""
    return int(pod.metadata.annotations[NPU].split(",")[index].rsplit("-", 1)[1])


def fault_chip(sc: Scenario, pod: k8s.V1Pod, *, index: int = 0, level: str = "SeparateNPU") -> int:
    """Fault the `index`-th chip the device plugin gave `pod` (:func:`chip_of`) at `level` (code 80E3A201) in its
    node's device-plugin ConfigMap (the testbed's injector). Returns the chip's number on the node."""
    chip = chip_of(pod, index)
    sc.injector.chip_fault(pod.spec.node_name, [ChipFault(chip, ("80E3A201",), level)])
    return chip


async def restart_by_command(sc: Scenario, job_name: str, uid: str, *, reason: str, name: str = "") -> None:
    """Create a RestartJob Command (``bus.volcano.sh/v1alpha1``) for the Volcano Job `job_name` with UID `uid` in
    the test's namespace, as an operator would (``vcctl job restart``): owned by the job, named `name` (empty: a
    name generated from ``<job_name>-restartjob-``), with `reason`."""
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job_name, "uid": uid, "controller": True}
    naming = {"name": name} if name else {"generateName": f"{job_name}-restartjob-"}
    body = {
        "apiVersion": "bus.volcano.sh/v1alpha1",
        "kind": "Command",
        "metadata": {**naming, "namespace": sc.namespace, "ownerReferences": [owner]},
        "action": "RestartJob",
        "target": owner,
        "reason": reason,
    }
    await k8s.CustomObjectsApi(sc.api).create_namespaced_custom_object(*BUS[:2], sc.namespace, BUS[2], body)


# ------------------------------------------------------------------------------------------------ recorders


RUNNING_RECORDERS: set[WatchRecorder] = set()
"""Recorders started and not stopped yet: the scenario fixture stops what a test left running before the test's
ApiClient closes (the event loop lives for the session: a recorder left behind would be collected in a later test,
whose run then fails on the unraisable "coroutine ignored GeneratorExit")."""


@dataclass(eq=False)  # hashable by identity: kept in RUNNING_RECORDERS
class WatchRecorder:
    """Records every watch event of one collection from the moment :meth:`start` returns (list, then watch from
    the list's resourceVersion, so nothing between the two is missed). Each event is (type, object as dict)."""

    list_call: Callable[..., Awaitable[Any]]
    args: tuple[Any, ...]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        listed = await self.list_call(*self.args)
        rv = listed["metadata"]["resourceVersion"] if isinstance(listed, dict) else listed.metadata.resource_version
        self._task = asyncio.create_task(self._run(rv), name="watch-recorder")
        RUNNING_RECORDERS.add(self)

    async def _run(self, rv: str) -> None:
        while True:
            w = watch.Watch()
            async with w.stream(self.list_call, *self.args, resource_version=rv, timeout_seconds=300) as stream:
                async for ev in stream:
                    raw: dict[str, Any] = ev["raw_object"]
                    rv = raw["metadata"].get("resourceVersion", rv)
                    self.events.append((ev["type"], raw))

    async def stop(self) -> None:
        RUNNING_RECORDERS.discard(self)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    def added(self) -> list[dict[str, Any]]:
        return [obj for kind, obj in self.events if kind == "ADDED"]


async def record_commands(api: k8s.ApiClient, namespace: str) -> WatchRecorder:
    """A started recorder of Volcano Commands in `namespace` (the controller deletes each Command once it ran
    it, so Commands are counted by their ADDED events)."""
    rec = WatchRecorder(k8s.CustomObjectsApi(api).list_namespaced_custom_object, (*BUS[:2], namespace, BUS[2]))
    await rec.start()
    return rec


async def record_pods(api: k8s.ApiClient, namespace: str) -> WatchRecorder:
    """A started recorder of the pods in `namespace`."""
    rec = WatchRecorder(k8s.CoreV1Api(api).list_namespaced_pod, (namespace,))
    await rec.start()
    return rec


def restart_commands(rec: WatchRecorder, job_name: str) -> list[dict[str, Any]]:
    """The RestartJob Commands created for `job_name` so far."""
    return [c for c in rec.added() if c.get("action") == "RestartJob" and c.get("target", {}).get("name") == job_name]


async def taints(api: k8s.ApiClient, node: str) -> list[tuple[str, str, str]]:
    n = await k8s.CoreV1Api(api).read_node(node)
    return sorted((t.key, t.value or "", t.effect) for t in n.spec.taints or [])


# ------------------------------------------------------------------------------------------------ GPUs and DRA

RES = ("resource.k8s.io", "v1")
NPU_DRIVER = "npu.huawei.com"
GPU_DRIVER = "gpu.nvidia.com"


def gpu_uuid(tag: str, i: int) -> str:
    """A GPU UUID in NVML's spelling (``GPU-<8>-<4>-<4>-<4>-<12>`` hex), unique to test `tag` and index `i`."""
    return f"GPU-{i:08x}-{tag[:4].ljust(4, '0')}-4000-8000-{i:012x}"


async def publish_devices(sc: Scenario, node: str, driver: str, devices: list[dict[str, Any]]) -> str:
    """A DeviceClass selecting `driver` (named for this test) and one ResourceSlice of `devices` for `node`, owned
    by the Node as a kubelet plugin's are (garbage-collected with it). Returns the DeviceClass's name."""
    api = k8s.CustomObjectsApi(sc.api)
    core = k8s.CoreV1Api(sc.api)
    node_uid = (await core.read_node(node)).metadata.uid
    cls = f"{driver.split('.')[0]}-{sc.tag}"
    await api.create_cluster_custom_object(
        *RES,
        "deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": cls},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
    )
    await api.create_cluster_custom_object(
        *RES,
        "resourceslices",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "name": f"{node}-{driver.split('.')[0]}",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}],
            },
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        },
    )
    return cls


async def delete_device_class(sc: Scenario, cls: str) -> None:
    await k8s.CustomObjectsApi(sc.api).delete_cluster_custom_object(*RES, "deviceclasses", cls)


async def dra_job(sc: Scenario, name: str, node: str, cls: str) -> tuple[str, Any]:
    """A Volcano Job of one pod on `node` taking one device of class `cls` through a ResourceClaimTemplate,
    scheduled by kube-scheduler; waits until the pod runs and its claim is allocated. Returns (job uid, claim)."""
    objs = k8s.CustomObjectsApi(sc.api)
    await objs.create_namespaced_custom_object(
        *RES,
        sc.namespace,
        "resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": f"{name}-device"},
            "spec": {"spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": cls}}]}}},
        },
    )
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"fault-scheduling": "force", "fault-retry-times": "3"}},
        "spec": {
            "minAvailable": 1,
            "schedulerName": "default-scheduler",
            "queue": "default",
            "maxRetry": 3,
            "policies": [{"event": "PodEvicted", "action": "RestartJob"}],
            "tasks": [
                {
                    "name": "worker",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "nodeSelector": {TEST_LABEL: sc.tag, "kubernetes.io/hostname": node},
                            "restartPolicy": "Never",
                            "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": f"{name}-device"}],
                            "containers": [
                                {"name": "train", "image": "train:1", "resources": {"claims": [{"name": "dev"}]}}
                            ],
                        }
                    },
                }
            ],
        },
    }
    created = await objs.create_namespaced_custom_object(*VC[:2], sc.namespace, VC[2], job)

    async def allocated() -> Any:
        pods = await live_pods(sc.api, sc.namespace, f"volcano.sh/job-name={name}")
        if len(pods) != 1 or pods[0].status.phase != "Running":
            return None
        claims = (await objs.list_namespaced_custom_object(*RES, sc.namespace, "resourceclaims"))["items"]
        for claim in claims:
            reserved = (claim.get("status") or {}).get("reservedFor") or []
            if any(r.get("uid") == pods[0].metadata.uid for r in reserved):
                return claim
        return None

    claim = await eventually(allocated, timeout_s=60, what=f"job {name} Running with its claim allocated")
    return created["metadata"]["uid"], claim


def gpu_devices(tag: str, n: int) -> list[dict[str, Any]]:
    """`n` ResourceSlice devices shaped like NVIDIA's DRA driver's (``gpu-<i>`` with ``uuid``, ``pcieBusID``,
    ``index``, ``productName``), UUIDs from :func:`gpu_uuid`, PCI buses from 0x3b on."""
    return [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "uuid": {"string": gpu_uuid(tag, i)},
                "pcieBusID": {"string": f"0000:{0x3B + i:02x}:00.0"},
                "index": {"int": i},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
            },
        }
        for i in range(n)
    ]


def device_of(claim: Any) -> str:
    """The name of the one device a ResourceClaim's allocation holds."""
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return str(result["device"])


NVSENTINEL_UUID = "GPU-8f3c2a10-1b2c-4d5e-8f90-0123456789ab"
"""The GPU UUID :func:`nvsentinel_xid` names unless told another."""
HEARTBEAT_OFF = {"testbed.fault-agent.io/heartbeat": "off"}  # kwok's heartbeat would rewrite the conditions


async def add_gpu_nodes(sc: Scenario, n: int) -> list[str]:
    """`n` GPU kwok nodes labelled for this test, Ready (deleted with the scenario's nodes)."""
    names = [f"e2e-{sc.tag}-gpu-{len(sc.nodes) + i}" for i in range(n)]
    sc.nodes += names
    sc.injector.add_gpu_nodes(names)
    core = k8s.CoreV1Api(sc.api)
    for name in names:
        await core.patch_node(name, {"metadata": {"labels": {TEST_LABEL: sc.tag}}})

    async def ready() -> bool:
        for name in names:
            node = await core.read_node(name)
            if not any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
                return False
        return True

    await eventually(ready, what=f"kwok to make {n} GPU nodes Ready")
    return names


async def nvsentinel_xid(
    sc: Scenario, node: str, xid: int, action: str, text: str, *, uuid: str = NVSENTINEL_UUID, pci: str = "0000:3b:00"
) -> None:
    """Write the condition NVSentinel's platform-connectors write for a fatal XID on `node`'s GPU `uuid` at PCI
    address `pci` (platform-connectors/pkg/connectors/kubernetes/process_node_events.go): type
    ``SysLogsXIDError``, status True, reason ``SysLogsXIDErrorIsNotHealthy``, message
    ``ErrorCode:<xid> PCI:<pci> GPU:<uuid> <text> Recommended Action=<action>;``."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    message = f"ErrorCode:{xid} PCI:{pci} GPU:{uuid} {text} Recommended Action={action};"
    cond = {
        "type": "SysLogsXIDError",
        "status": "True",
        "reason": "SysLogsXIDErrorIsNotHealthy",
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    await k8s.CoreV1Api(sc.api).patch_node_status(node, {"status": {"conditions": [cond]}})
