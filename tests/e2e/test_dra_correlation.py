"""Chip-precise correlation through Dynamic Resource Allocation, on the testbed's real kube-scheduler.

Each test publishes ResourceSlices for its kwok node as a DRA driver would (no driver runs: the slices are the
whole contract between a driver and the scheduler), creates a DeviceClass, and runs two Volcano Jobs whose one pod
each takes a device through a ResourceClaimTemplate. The pods use ``schedulerName: default-scheduler``: the real
kube-scheduler allocates the claims (``status.allocation``) and reserves them for the pods (``status.reservedFor``);
Volcano's vc-scheduler v1.14.1 allocates claims only with its predicates plugin's
``predicate.DynamicResourceAllocationEnable`` argument, which the testbed's default scheduler configuration leaves
off (docs/dra.md). Both pods land on the same node; a fault on the device one claim holds must restart that job and
leave the other alone.

- NPU: slices shaped like MindCluster's DRA driver's (driver ``npu.huawei.com``, ``physicId``), the fault as the
  device plugin writes it (``Ascend910-<n>``, its ConfigMap), the whole agent as a subprocess.
- GPU: slices shaped like NVIDIA's DRA driver's (``uuid``, ``pcieBusID``), the agent's own watches filling a
  ClusterState from the apiserver, and a fault naming the GPU by UUID correlated against it (the GPU fault sources
  are a separate branch's: issue 42).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import TEST_LABEL, VC, eventually, get_job, holds, job_version, live_pods, record_commands
from kubernetes_asyncio import client as k8s
from support import factories

from agent.core.correlate import correlate
from agent.core.devices import DeviceRef
from agent.core.faults import FaultKind
from agent.engine.views import StateJobs, pods_for
from agent.kube.client import ApiTransport
from agent.settings import KubeSettings
from agent.sources.state import ClusterState
from agent.sources.watchers import build_watchers
from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e

RES = ("resource.k8s.io", "v1")
NPU_DRIVER = "npu.huawei.com"
GPU_DRIVER = "gpu.nvidia.com"


def _gpu_uuid(tag: str, i: int) -> str:
    return f"GPU-{i:08x}-{tag[:4].ljust(4, '0')}-4000-8000-{i:012x}"


async def _publish(sc: Scenario, node: str, driver: str, devices: list[dict[str, Any]]) -> str:
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


async def _cleanup(sc: Scenario, cls: str) -> None:
    await k8s.CustomObjectsApi(sc.api).delete_cluster_custom_object(*RES, "deviceclasses", cls)


async def _dra_job(sc: Scenario, name: str, node: str, cls: str) -> tuple[str, Any]:
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


def _device_of(claim: Any) -> str:
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return str(result["device"])


async def test_npu_fault_restarts_only_the_job_whose_claim_holds_the_chip(scenario: Scenario) -> None:
    sc = scenario
    (node,) = await sc.add_nodes(1)
    # MindCluster's driver names a device <released name>-<physicId> and publishes deviceType and physicId; a
    # device name must be a DNS label, so these are lower case (the apiserver refuses "Ascend910-0").
    cls = await _publish(
        sc,
        node,
        NPU_DRIVER,
        [
            {"name": f"npu-{i}", "attributes": {"deviceType": {"string": "Ascend910B"}, "physicId": {"int": i}}}
            for i in range(2)
        ],
    )
    try:
        uid_a, claim_a = await _dra_job(sc, "dra-a", node, cls)
        uid_b, claim_b = await _dra_job(sc, "dra-b", node, cls)
        assert {_device_of(claim_a), _device_of(claim_b)} == {"npu-0", "npu-1"}, "the scheduler gave each a chip"
        version_a = job_version(await get_job(sc.api, sc.namespace, "dra-a"))
        version_b = job_version(await get_job(sc.api, sc.namespace, "dra-b"))
        pod_a = (await live_pods(sc.api, sc.namespace, "volcano.sh/job-name=dra-a"))[0].metadata.uid
        agent = await sc.start_agent()
        commands = await record_commands(sc.api, sc.namespace)
        try:
            chip = int(_device_of(claim_b).rsplit("-", 1)[1])
            sc.injector.chip_fault(node, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])

            (started,) = await sc.wait_events("recovery.started", for_job(uid_b), timeout_s=30)
            assert started["data"]["action"] == "restart-job"
            (detected,) = sc.events("fault.detected", for_job(uid_b))
            assert detected["data"]["fault"]["chips"] == [f"Ascend910-{chip}"]

            async def b_restarted() -> bool:
                return job_version(await get_job(sc.api, sc.namespace, "dra-b")) == version_b + 1

            await eventually(b_restarted, timeout_s=30, what="dra-b restarted once")

            async def a_untouched() -> bool:
                pods = await live_pods(sc.api, sc.namespace, "volcano.sh/job-name=dra-a")
                return (
                    job_version(await get_job(sc.api, sc.namespace, "dra-a")) == version_a
                    and [p.metadata.uid for p in pods] == [pod_a]
                    and not [c for c in commands.added() if c.get("target", {}).get("name") == "dra-a"]
                    and not sc.events("fault.detected", for_job(uid_a))
                    and not sc.events("recovery", for_job(uid_a))
                )

            await holds(a_untouched, for_s=5, what="dra-a untouched: no restart, no Command, no event")
            assert agent.metric("fault_agent_actions_total", action="restart-job", result="done") == 1
        finally:
            await commands.stop()
    finally:
        await _cleanup(sc, cls)


async def test_gpu_fault_by_uuid_correlates_to_the_claim_holder_only(scenario: Scenario) -> None:
    """The agent's own watches (resources, converters, state) read the slices and the claims the real scheduler
    allocated; a fault naming one GPU by UUID (or by PCI address) hits exactly the job holding it."""
    sc = scenario
    (node,) = await sc.add_nodes(1)
    gpus = [
        {
            "name": f"gpu-{i}",
            "attributes": {
                "uuid": {"string": _gpu_uuid(sc.tag, i)},
                "pcieBusID": {"string": f"0000:{0x3B + i:02x}:00.0"},
                "index": {"int": i},
                "productName": {"string": "NVIDIA H100 80GB HBM3"},
            },
        }
        for i in range(2)
    ]
    cls = await _publish(sc, node, GPU_DRIVER, gpus)
    try:
        uid_a, _ = await _dra_job(sc, "gpu-a", node, cls)
        uid_b, claim_b = await _dra_job(sc, "gpu-b", node, cls)
        state = ClusterState()
        settings = KubeSettings(namespaces=[sc.namespace], dra="on")
        watchers = build_watchers(settings, ApiTransport(sc.api), state)
        assert {w.resource.source for w in watchers} >= {"resourceslices", "resourceclaims"}
        tasks = [asyncio.create_task(w.run(asyncio.Event())) for w in watchers]
        try:
            await eventually(lambda: state.ready, timeout_s=30, what="the agent's watches listed")
            index_b = int(_device_of(claim_b).rsplit("-", 1)[1])
            for chip in (_gpu_uuid(sc.tag, index_b), f"00000000:{0x3B + index_b:02X}:00.0"):
                fault = factories.fault(kind=FaultKind.CHIP, node=node, chips=(chip,))
                hits = correlate(fault, pods_for(state, fault), StateJobs(state), state.device_allocations).hits
                assert [(h.job.name, h.job.uid) for h in hits] == [("gpu-b", uid_b)], chip
            # the same fault without DRA: a device plugin's GPU, its holder unknown: every job on the node
            without = correlate(fault, pods_for(state, fault), StateJobs(state)).hits
            assert sorted(h.job.uid for h in without) == sorted((uid_a, uid_b))
            assert state.device_allocations.resolve(DeviceRef(node, uuid=_gpu_uuid(sc.tag, 0).lower()))
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await _cleanup(sc, cls)
