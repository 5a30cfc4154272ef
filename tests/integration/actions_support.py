"""Builders and polling helpers shared by the actions, leader and recovery integration tests (no tests here).

They create real objects on the testbed's apiserver: kwok nodes (kwok manages every node, so pods bound to
them with ``spec.nodeName`` become Running), Volcano Jobs and AscendJobs (CRDs only, no controller), job pods
with the labels the controllers would set, and rings-config ConfigMaps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from typing import Any, TypeVar

from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from agent.actions.writer import (
    ASCEND_GROUP,
    ASCEND_PLURAL,
    ASCEND_VERSION,
    VOLCANO_GROUP,
    VOLCANO_PLURAL,
    VOLCANO_VERSION,
)
from agent.core.cluster import JobKind, JobRef
from agent.core.records import record_name

T = TypeVar("T")


async def make_node(api: k8s.ApiClient, name: str | None = None) -> str:
    """Create a kwok node (Ready, 8 NPUs allocatable); returns its name. Delete it with :func:`delete_node`."""
    name = name or f"kwok-{uuid.uuid4().hex[:8]}"
    node = k8s.V1Node(
        metadata=k8s.V1ObjectMeta(
            name=name,
            labels={"type": "kwok", "kubernetes.io/hostname": name},
            annotations={"kwok.x-k8s.io/node": "fake"},
        ),
        spec=k8s.V1NodeSpec(),
        status=k8s.V1NodeStatus(
            allocatable={"cpu": "64", "memory": "512Gi", "pods": "110", "huawei.com/Ascend910": "8"},
            capacity={"cpu": "64", "memory": "512Gi", "pods": "110", "huawei.com/Ascend910": "8"},
        ),
    )
    await k8s.CoreV1Api(api).create_node(node)
    return name


async def delete_node(api: k8s.ApiClient, name: str) -> None:
    try:
        await k8s.CoreV1Api(api).delete_node(name)
    except ApiException as e:
        if e.status != 404:
            raise


async def make_job(
    api: k8s.ApiClient,
    namespace: str,
    name: str,
    kind: JobKind,
    *,
    labels: dict[str, str] | None = None,
    max_retry: int = 3,
) -> JobRef:
    """Create a Volcano Job or AscendJob object (no controller runs); returns its JobRef with the UID."""
    custom = k8s.CustomObjectsApi(api)
    if kind is JobKind.VOLCANO:
        body: dict[str, Any] = {
            "apiVersion": f"{VOLCANO_GROUP}/{VOLCANO_VERSION}",
            "kind": "Job",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"minAvailable": 2, "maxRetry": max_retry, "schedulerName": "volcano", "tasks": []},
        }
        obj = await custom.create_namespaced_custom_object(
            VOLCANO_GROUP, VOLCANO_VERSION, namespace, VOLCANO_PLURAL, body
        )
    else:
        body = {
            "apiVersion": f"{ASCEND_GROUP}/{ASCEND_VERSION}",
            "kind": "AscendJob",
            "metadata": {"name": name, "labels": {"version": "0", **(labels or {})}},
            "spec": {"runPolicy": {"backoffLimit": max_retry}, "replicaSpecs": {}},
        }
        obj = await custom.create_namespaced_custom_object(ASCEND_GROUP, ASCEND_VERSION, namespace, ASCEND_PLURAL, body)
    return JobRef(kind, namespace, name, obj["metadata"]["uid"])


async def make_job_pod(
    api: k8s.ApiClient,
    job: JobRef,
    index: int,
    node: str,
    *,
    grace_s: int = 30,
    chips: str = "",
    restart_policy: str = "Never",
) -> k8s.V1Pod:
    """Create pod ``<job>-worker-<index>`` of `job`, bound to `node`, with the controller's labels, the
    owner reference, the rank annotation and (optionally) a chip allocation annotation."""
    if job.kind is JobKind.VOLCANO:
        labels = {"volcano.sh/job-name": job.name, "volcano.sh/job-namespace": job.namespace}
        owner = k8s.V1OwnerReference(
            api_version=f"{VOLCANO_GROUP}/{VOLCANO_VERSION}", kind="Job", name=job.name, uid=job.uid, controller=True
        )
    else:
        labels = {"training.kubeflow.org/job-name": job.name, "training.kubeflow.org/replica-index": str(index)}
        owner = k8s.V1OwnerReference(
            api_version=f"{ASCEND_GROUP}/{ASCEND_VERSION}",
            kind="AscendJob",
            name=job.name,
            uid=job.uid,
            controller=True,
        )
    annotations = {"hccl/rankIndex": str(index)}
    if chips:
        annotations["huawei.com/Ascend910"] = chips
    pod = k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(
            name=f"{job.name}-worker-{index}",
            labels=labels,
            annotations=annotations,
            owner_references=[owner],
        ),
        spec=k8s.V1PodSpec(
            node_name=node,
            termination_grace_period_seconds=grace_s,
            restart_policy=restart_policy,
            containers=[k8s.V1Container(name="train", image="fake/train:1")],
            tolerations=[k8s.V1Toleration(operator="Exists")],
        ),
    )
    created: k8s.V1Pod = await k8s.CoreV1Api(api).create_namespaced_pod(job.namespace, pod)
    return created


async def make_rings_config(api: k8s.ApiClient, namespace: str, job_name: str) -> None:
    """A rings-config ConfigMap as filled in after placement (status completed)."""
    cm = k8s.V1ConfigMap(
        metadata=k8s.V1ObjectMeta(name=f"rings-config-{job_name}", labels={"ring-controller.atlas": "ascend-910"}),
        data={"hccl.json": '{"status":"completed","server_list":[]}'},
    )
    await k8s.CoreV1Api(api).create_namespaced_config_map(namespace, cm)


async def list_commands(api: k8s.ApiClient, namespace: str) -> list[dict[str, Any]]:
    result = await k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        "bus.volcano.sh", "v1alpha1", namespace, "commands"
    )
    items: list[dict[str, Any]] = result["items"]
    return items


async def pods_by_name(api: k8s.ApiClient, namespace: str) -> dict[str, k8s.V1Pod]:
    pods = await k8s.CoreV1Api(api).list_namespaced_pod(namespace)
    return {p.metadata.name: p for p in pods.items}


def device_info_data(
    node: str,
    faults: dict[str, tuple[str, str]],
    *,
    prefix: str = "huawei.com/Ascend910",
    fault_time_ms: int | None = None,
) -> dict[str, str]:
    """ConfigMap data of ``mindx-dl-deviceinfo-<node>`` as the device plugin writes it, with a correct CheckCode.

    Args:
        faults: chip name -> (fault level, comma-joined codes), e.g. {"Ascend910-0": ("SeparateNPU", "80E01801")}.
        fault_time_ms: the faults' ``fault_time`` (unix ms; default now): an older one is a standing fault the
            plugin keeps reporting (its ``UpdateTime`` is still now).
    """
    from agent.core.detect import check_code

    now_ms = int(time.time() * 1000)
    fault_ms = now_ms if fault_time_ms is None else fault_time_ms
    elements = [
        {
            "fault_type": "CardUnhealthy",
            "npu_name": chip,
            "large_model_fault_level": level,
            "fault_level": level,
            "fault_handling": level,
            "fault_code": codes,
            "fault_time_and_level_map": {c: {"fault_time": fault_ms, "fault_level": level} for c in codes.split(",")},
        }
        for chip, (level, codes) in sorted(faults.items())
    ]
    healthy = [f"Ascend910-{i}" for i in range(8) if f"Ascend910-{i}" not in faults]
    device_list = {
        prefix: ",".join(healthy),
        f"{prefix}-Fault": json.dumps(elements, separators=(",", ":")),
        f"{prefix}-NetworkUnhealthy": "",
        f"{prefix}-Recovering": "",
        f"{prefix}-Unhealthy": ",".join(sorted(faults)),
    }
    info = {"DeviceList": device_list, "UpdateTime": now_ms // 1000}
    cfg = {"DeviceInfo": info, "SuperPodID": -2, "ServerIndex": -2, "CheckCode": check_code(info)}
    return {"DeviceInfoCfg": json.dumps(cfg, separators=(",", ":")), "ManuallySeparateNPU": ""}


async def put_device_info(
    api: k8s.ApiClient, node: str, faults: dict[str, tuple[str, str]], *, fault_time_ms: int | None = None
) -> None:
    """Create or replace ``kube-system/mindx-dl-deviceinfo-<node>`` with `faults` (see :func:`device_info_data`)."""
    core = k8s.CoreV1Api(api)
    name = f"mindx-dl-deviceinfo-{node}"
    data = device_info_data(node, faults, fault_time_ms=fault_time_ms)
    body = k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name=name, labels={"mx-consumer-cim": "true"}), data=data)
    try:
        await core.replace_namespaced_config_map(name, "kube-system", body)
    except ApiException as e:
        if e.status != 404:
            raise
        await core.create_namespaced_config_map("kube-system", body)


async def delete_device_info(api: k8s.ApiClient, node: str) -> None:
    try:
        await k8s.CoreV1Api(api).delete_namespaced_config_map(f"mindx-dl-deviceinfo-{node}", "kube-system")
    except ApiException as e:
        if e.status != 404:
            raise


class CommandRecorder:
    """Records every Command ever created in a namespace (watch ADDED events), so counts hold even when a
    Volcano controller runs the Commands and deletes them. Use as ``async with CommandRecorder(api, ns) as rec``;
    ``rec.created`` lists the Command objects in creation order."""

    def __init__(self, api: k8s.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.created: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None
        self._started = asyncio.Event()

    async def _run(self) -> None:
        from kubernetes_asyncio import watch

        custom = k8s.CustomObjectsApi(self.api)
        listed = await custom.list_namespaced_custom_object("bus.volcano.sh", "v1alpha1", self.namespace, "commands")
        self.created.extend(listed["items"])
        seen = {c["metadata"]["uid"] for c in self.created}
        rv = listed["metadata"]["resourceVersion"]
        self._started.set()
        while True:
            async with watch.Watch() as w:
                async for event in w.stream(
                    custom.list_namespaced_custom_object,
                    "bus.volcano.sh",
                    "v1alpha1",
                    self.namespace,
                    "commands",
                    resource_version=rv,
                    timeout_seconds=300,
                ):
                    obj = event["object"]
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if event["type"] == "ADDED" and obj["metadata"]["uid"] not in seen:
                        seen.add(obj["metadata"]["uid"])
                        self.created.append(obj)

    async def __aenter__(self) -> CommandRecorder:
        self._task = asyncio.create_task(self._run(), name=f"commands@{self.namespace}")
        waiter = asyncio.create_task(self._started.wait())
        await asyncio.wait({self._task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if self._task.done():
            waiter.cancel()
            self._task.result()
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def count(self) -> list[dict[str, Any]]:
        """The Commands created so far (an awaitable for :func:`eventually`)."""
        if self._task is not None and self._task.done():
            self._task.result()  # the watch failed: surface it
        return list(self.created)


async def job_record(api: k8s.ApiClient, namespace: str, job: JobRef) -> dict[str, str]:
    """The data of the agent's record of `job` (ConfigMap ``fault-agent-job-<uid>`` in `namespace`, the agent's
    ``leader.namespace``: agent.core.records), ``{}`` when there is none."""
    try:
        cm = await k8s.CoreV1Api(api).read_namespaced_config_map(record_name(job.uid), namespace)
    except ApiException as e:
        if e.status == 404:
            return {}
        raise
    return {str(k): str(v) for k, v in (cm.data or {}).items()}


class DeletionGraces:
    """The grace period (seconds) the first deletion of each pod in `namespace` carried, by pod name, as the
    apiserver's watch shows it (``deletionGracePeriodSeconds``): the request's own value, whenever the test looks
    (kwok, standing in for the kubelet, finishes a graceful deletion with grace 0 at once, so only the first value
    seen is the request's). Use as ``async with DeletionGraces(api, namespace) as graces:``; ``graces.first``."""

    def __init__(self, api: k8s.ApiClient, namespace: str) -> None:
        self.core = k8s.CoreV1Api(api)
        self.namespace = namespace
        self.first: dict[str, int] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> DeletionGraces:
        listed = await self.core.list_namespaced_pod(self.namespace)
        self._task = asyncio.create_task(self._run(listed.metadata.resource_version), name="deletion-graces")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self, resource_version: str) -> None:
        async with watch.Watch() as w:
            stream = w.stream(
                self.core.list_namespaced_pod, self.namespace, resource_version=resource_version, timeout_seconds=60
            )
            async for event in stream:
                meta = event["object"].metadata
                if meta.deletion_grace_period_seconds is not None:
                    self.first.setdefault(meta.name, meta.deletion_grace_period_seconds)
