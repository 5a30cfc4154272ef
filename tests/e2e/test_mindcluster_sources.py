"""The guide's Volcano Job recovering from faults read in MindCluster's own shapes, as MindCluster writes them.

Every ConfigMap here is encoded by our Go program (testbed/mcencode): the device plugin's, with A3 switch info,
written by the injector, and ClusterD's ``cluster-info-*``, aggregated from them by the ClusterD stand-in
(testbed/clusterd.py) into the test's namespace. With ClusterD as the only source the agent watches no per-node
ConfigMap (``kube.fault_source: clusterd``), as a large cluster would run it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import record_commands, restart_commands, taints
from test_volcano_recovery import _guide_job_running, _one_restart_off

from testbed import clusterd
from testbed.inject import ChipFault, SwitchFault

pytestmark = pytest.mark.e2e

SWITCH_CODE = "[0x00f103b0,155907,na,na]"


@contextlib.asynccontextmanager
async def clusterd_writing(sc: Scenario) -> AsyncIterator[None]:
    """The ClusterD stand-in aggregating every node's ConfigMaps into ``<test namespace>/cluster-info-*``."""
    running = clusterd.running(sc.testbed.kubeconfig, sc.namespace, sc.workdir / "clusterd.log")
    await asyncio.to_thread(running.__enter__)
    try:
        yield
    finally:
        await asyncio.to_thread(running.__exit__, None, None, None)


def clusterd_only(sc: Scenario, fault_source: str = "clusterd") -> dict[str, str]:
    """Agent settings: ClusterD's ConfigMaps in the test's namespace, no per-node ConfigMap watched (with
    `fault_source` ``auto``, because the stand-in has written them before the agent starts)."""
    return {"KUBE__FAULT_SOURCE": fault_source, "KUBE__NODE_INFO_NAMESPACE": sc.namespace}


async def test_clusterd_only_chip_fault_restarts_the_job_off_the_node(scenario: Scenario) -> None:
    """With ``kube.fault_source: auto`` (the default) the agent finds ClusterD's ConfigMaps at start and reads them
    alone, as MindCluster's scheduler does where ClusterD runs (issue 36, item 7)."""
    sc = scenario
    name, uid, pods, version = await _guide_job_running(sc)
    async with clusterd_writing(sc):
        agent = await sc.start_agent(**clusterd_only(sc, "auto"))
        assert agent.metric("fault_agent_fault_source", source="clusterd") == 1
        assert agent.metric("fault_agent_clusterd_unread") == 0
        commands = await record_commands(sc.api, sc.namespace)
        try:
            bad = pods[0]
            bad_node = bad.spec.node_name
            chips = bad.metadata.annotations["huawei.com/AscendReal"].split(",")
            assert chips == bad.metadata.annotations["huawei.com/Ascend910"].split(",")
            chip = int(chips[2].rsplit("-", 1)[1])
            sc.injector.chip_fault(bad_node, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])

            (detected,) = await sc.wait_events("fault.detected", for_job(uid))
            fault = detected["data"]["fault"]
            assert (fault["kind"], fault["level"], fault["node"]) == ("chip", "SeparateNPU", bad_node)
            assert (fault["chips"], fault["codes"]) == ([f"Ascend910-{chip}"], ["80E3A201"])
            assert fault["source"]["name"].startswith("cluster-info-device-")
            assert fault["source"]["namespace"] == sc.namespace

            await _one_restart_off(sc, name, uid, pods, version, bad_node)
            assert len(restart_commands(commands, name)) == 1
            assert agent.metric("fault_agent_faults_total", kind="chip", level="SeparateNPU", source="clusterd") == 1
            # the per-node watches are off: nothing came from the device plugin's ConfigMap itself
            assert not agent.metric(
                "fault_agent_faults_total", kind="chip", level="SeparateNPU", source="device-plugin"
            )
        finally:
            await commands.stop()


@pytest.mark.parametrize("via", ["device-plugin", "clusterd"])
async def test_a3_switch_separate_fault_restarts_the_job_off_the_node(scenario: Scenario, via: str) -> None:
    """An A3 switch event at level Separate (NodeStatus UnHealthy) takes the node's interconnect out: a node fault
    that moves the job off the node and quarantines it; the switch healthy again clears it. Read from the device
    plugin's ``SwitchInfoCfg`` or from ClusterD's ``cluster-info-switch-<i>`` entry ``mindx-dl-switchinfo-<node>``."""
    sc = scenario
    name, uid, pods, version = await _guide_job_running(sc)
    taint_key = f"e2e.fault-agent.io/{sc.tag}"
    async with contextlib.AsyncExitStack() as stack:
        settings: dict[str, str] = {"POLICY__TAINT_KEY": taint_key}
        if via == "clusterd":
            await stack.enter_async_context(clusterd_writing(sc))
            settings |= clusterd_only(sc)
        agent = await sc.start_agent(**settings)
        commands = await record_commands(sc.api, sc.namespace)
        stack.push_async_callback(commands.stop)
        bad_node = pods[1].spec.node_name
        sc.injector.switch_fault(bad_node, [SwitchFault(SWITCH_CODE, 0, 3, "Separate")])

        (detected,) = await sc.wait_events("fault.detected", for_job(uid))
        fault: dict[str, Any] = detected["data"]["fault"]
        assert (fault["kind"], fault["level"], fault["node"], fault["codes"], fault["reason"]) == (
            "node",
            "SeparateNPU",
            bad_node,
            [SWITCH_CODE],
            "SwitchFault",
        )
        source = "cluster-info-switch-" if via == "clusterd" else f"mindx-dl-deviceinfo-{bad_node}"
        assert fault["source"]["name"].startswith(source)

        await _one_restart_off(sc, name, uid, pods, version, bad_node)
        assert len(restart_commands(commands, name)) == 1
        assert (taint_key, "SeparateNPU", "NoSchedule") in await taints(sc.api, bad_node)
        assert agent.metric("fault_agent_recovery_seconds_count", fault_kind="node", outcome="recovered") == 1

        sc.injector.switch_healthy(bad_node)
        (cleared,) = await sc.wait_events("fault.cleared", lambda e: e["data"]["fault"]["node"] == bad_node)
        assert cleared["data"]["fault"]["reason"] == "SwitchFault"
