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
  ClusterState from the apiserver, and a fault naming the GPU by UUID correlated against it.
- GPU end to end (issue 42's done-condition): NVSentinel's ``SysLogsXIDError`` node condition naming job B's GPU
  by UUID, the whole agent (DRA auto) as a subprocess: B restarted once, A untouched. With ``kube.dra: off`` the
  same test fails (a node condition then hits every job on the node).
"""

from __future__ import annotations

import asyncio

import pytest
from conftest import Scenario, for_job
from helpers import (
    GPU_DRIVER,
    HEARTBEAT_OFF,
    NPU_DRIVER,
    add_gpu_nodes,
    delete_device_class,
    device_of,
    dra_job,
    eventually,
    get_job,
    gpu_devices,
    gpu_uuid,
    holds,
    job_version,
    live_pods,
    nvsentinel_xid,
    publish_devices,
    record_commands,
)
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


async def test_npu_fault_restarts_only_the_job_whose_claim_holds_the_chip(scenario: Scenario) -> None:
    sc = scenario
    (node,) = await sc.add_nodes(1)
    # MindCluster's driver names a device <released name>-<physicId> and publishes deviceType and physicId; a
    # device name must be a DNS label, so these are lower case (the apiserver refuses "Ascend910-0").
    cls = await publish_devices(
        sc,
        node,
        NPU_DRIVER,
        [
            {"name": f"npu-{i}", "attributes": {"deviceType": {"string": "Ascend910B"}, "physicId": {"int": i}}}
            for i in range(2)
        ],
    )
    try:
        uid_a, claim_a = await dra_job(sc, "dra-a", node, cls)
        uid_b, claim_b = await dra_job(sc, "dra-b", node, cls)
        assert {device_of(claim_a), device_of(claim_b)} == {"npu-0", "npu-1"}, "the scheduler gave each a chip"
        version_a = job_version(await get_job(sc.api, sc.namespace, "dra-a"))
        version_b = job_version(await get_job(sc.api, sc.namespace, "dra-b"))
        pod_a = (await live_pods(sc.api, sc.namespace, "volcano.sh/job-name=dra-a"))[0].metadata.uid
        agent = await sc.start_agent()
        commands = await record_commands(sc.api, sc.namespace)
        try:
            chip = int(device_of(claim_b).rsplit("-", 1)[1])
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
        await delete_device_class(sc, cls)


async def test_gpu_fault_by_uuid_correlates_to_the_claim_holder_only(scenario: Scenario) -> None:
    """The agent's own watches (resources, converters, state) read the slices and the claims the real scheduler
    allocated; a fault naming one GPU by UUID (or by PCI address) hits exactly the job holding it."""
    sc = scenario
    (node,) = await sc.add_nodes(1)
    cls = await publish_devices(sc, node, GPU_DRIVER, gpu_devices(sc.tag, 2))
    try:
        uid_a, _ = await dra_job(sc, "gpu-a", node, cls)
        uid_b, claim_b = await dra_job(sc, "gpu-b", node, cls)
        state = ClusterState()
        settings = KubeSettings(namespaces=[sc.namespace], dra="on")
        watchers = build_watchers(settings, ApiTransport(sc.api), state)
        assert {w.resource.source for w in watchers} >= {"resourceslices", "resourceclaims"}
        tasks = [asyncio.create_task(w.run(asyncio.Event())) for w in watchers]
        try:
            await eventually(lambda: state.ready, timeout_s=30, what="the agent's watches listed")
            index_b = int(device_of(claim_b).rsplit("-", 1)[1])
            for chip in (gpu_uuid(sc.tag, index_b), f"00000000:{0x3B + index_b:02X}:00.0"):
                fault = factories.fault(kind=FaultKind.CHIP, node=node, chips=(chip,))
                hits = correlate(fault, pods_for(state, fault), StateJobs(state), state.device_allocations).hits
                assert [(h.job.name, h.job.uid) for h in hits] == [("gpu-b", uid_b)], chip
            # the same fault without DRA: a device plugin's GPU, its holder unknown: every job on the node
            without = correlate(fault, pods_for(state, fault), StateJobs(state)).hits
            assert sorted(h.job.uid for h in without) == sorted((uid_a, uid_b))
            assert state.device_allocations.resolve(DeviceRef(node, uuid=gpu_uuid(sc.tag, 0).lower()))
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await delete_device_class(sc, cls)


async def test_an_nvsentinel_xid_naming_a_gpu_by_uuid_restarts_exactly_the_job_whose_claim_holds_it(
    scenario: Scenario,
) -> None:
    """Issue 42's done-condition, end to end: one GPU kwok node whose two GPUs (NVIDIA DRA driver-shaped slices)
    the real kube-scheduler allocated to two opted-in Volcano Jobs' claims; NVSentinel's node condition for an XID
    48 on job B's GPU (a NODE fault whose ``devices`` name the GPU by UUID and PCI address) → the running agent
    restarts job B once and leaves job A alone (no event, no Command, same pod, same version)."""
    sc = scenario
    (node,) = await add_gpu_nodes(sc, 1)
    await k8s.CoreV1Api(sc.api).patch_node(node, {"metadata": {"labels": HEARTBEAT_OFF}})
    cls = await publish_devices(sc, node, GPU_DRIVER, gpu_devices(sc.tag, 2))
    try:
        uid_a, claim_a = await dra_job(sc, "xid-a", node, cls)
        uid_b, claim_b = await dra_job(sc, "xid-b", node, cls)
        assert {device_of(claim_a), device_of(claim_b)} == {"gpu-0", "gpu-1"}, "the scheduler gave each a GPU"
        version_a = job_version(await get_job(sc.api, sc.namespace, "xid-a"))
        version_b = job_version(await get_job(sc.api, sc.namespace, "xid-b"))
        pod_a = (await live_pods(sc.api, sc.namespace, "volcano.sh/job-name=xid-a"))[0].metadata.uid
        pod_b = (await live_pods(sc.api, sc.namespace, "volcano.sh/job-name=xid-b"))[0].metadata.uid
        agent = await sc.start_agent()  # DRA auto (the default): the testbed serves resource.k8s.io/v1
        commands = await record_commands(sc.api, sc.namespace)
        try:
            index_b = int(device_of(claim_b).rsplit("-", 1)[1])
            uuid_b = gpu_uuid(sc.tag, index_b)
            await nvsentinel_xid(
                sc,
                node,
                48,
                "COMPONENT_RESET",
                "ROBUST_CHANNEL_GPU_ECC_DBE",
                uuid=uuid_b,
                pci=f"0000:{0x3B + index_b:02x}:00",
            )

            (started,) = await sc.wait_events("recovery.started", for_job(uid_b), timeout_s=60)
            assert started["data"]["action"] == "restart-job"
            assert "XID-48" in started["data"]["reason"]
            (detected,) = sc.events("fault.detected", for_job(uid_b))
            fault = detected["data"]["fault"]
            assert (fault["kind"], fault["node"], fault["codes"]) == ("node", node, ["XID-48"])
            assert f"GPU:{uuid_b}" in fault["devices"]

            async def b_restarted() -> bool:
                pods = await live_pods(sc.api, sc.namespace, "volcano.sh/job-name=xid-b")
                return job_version(await get_job(sc.api, sc.namespace, "xid-b")) == version_b + 1 and pod_b not in {
                    p.metadata.uid for p in pods
                }

            await eventually(b_restarted, timeout_s=60, what="xid-b restarted once, its pod replaced")

            async def only_b_once() -> bool:
                pods = await live_pods(sc.api, sc.namespace, "volcano.sh/job-name=xid-a")
                return (
                    job_version(await get_job(sc.api, sc.namespace, "xid-a")) == version_a
                    and [p.metadata.uid for p in pods] == [pod_a]
                    and not [c for c in commands.added() if c.get("target", {}).get("name") == "xid-a"]
                    and not sc.events("fault.detected", for_job(uid_a))
                    and not sc.events("recovery", for_job(uid_a))
                    and len(sc.events("recovery.started", for_job(uid_b))) == 1
                    and job_version(await get_job(sc.api, sc.namespace, "xid-b")) == version_b + 1
                )

            # the condition stays True: no second restart of B for the same fault, and A never touched
            await holds(only_b_once, for_s=8, what="xid-a untouched and xid-b restarted exactly once")
            assert agent.metric("fault_agent_actions_total", action="restart-job", result="done") == 1
        finally:
            await commands.stop()
    finally:
        await delete_device_class(sc, cls)
