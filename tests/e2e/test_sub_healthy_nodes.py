"""Sub-healthy nodes (issue 36 item 5): a job restarted for a sub-health fault (``subHealthyStrategy: forceExit``)
is not placed back on the sub-healthy node. MindCluster's scheduler refuses such a node to every job whose
strategy is not ``ignore`` (component/ascend-for-volcano/internal/rescheduling/reschedule.go
``checkNodeCurNodeIsFault``); the agent quarantines it with ``<taint key>=SubHealthFault:NoSchedule`` while the
fault lasts, which Volcano's scheduler honours, and lifts the taint when the fault clears."""

from __future__ import annotations

import pytest
from conftest import Scenario, for_job
from helpers import VC, eventually, guide_vcjob, submit, taints, wait_running

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e


async def test_a_job_restarted_for_a_sub_health_fault_does_not_land_on_the_sub_healthy_node(
    scenario: Scenario,
) -> None:
    sc = scenario
    await sc.add_nodes(2)  # exactly the job's two nodes: without the taint the restart lands right back
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, labels={"subHealthyStrategy": "forceExit"}), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    key = f"e2e.fault-agent.io/{sc.tag}"
    agent = await sc.start_agent(POLICY__TAINT_KEY=key)
    bad = pods[0]
    bad_node = bad.spec.node_name
    chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[0].rsplit("-", 1)[1])
    sc.injector.chip_fault(bad_node, [ChipFault(chip, ("80E3A201",), "SubHealthFault")])

    (started,) = await sc.wait_events("recovery.started", for_job(uid))
    assert started["data"]["action"] == "restart-job"
    assert "SubHealthFault" in started["data"]["reason"]
    sub_health_taint = (key, "SubHealthFault", "NoSchedule")

    async def tainted() -> list[tuple[str, str, str]]:
        return await taints(sc.api, bad_node)

    await eventually(tainted, lambda ts: sub_health_taint in ts, what="the sub-healthy node tainted")
    # one more node; the restarted job's pods go to it and to the healthy one, never to the sub-healthy one
    (spare,) = await sc.add_nodes(1)
    new_pods = await wait_running(sc.api, sc.namespace, name, not_uids={p.metadata.uid for p in pods}, timeout_s=60)
    placed = {p.spec.node_name for p in new_pods}
    assert bad_node not in placed, "a restarted pod was placed on the sub-healthy node"
    assert spare in placed
    await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
    assert agent.metric("fault_agent_actions_total", action="taint", result="done") >= 1

    # the chip healthy again: the taint goes, only ours
    sc.injector.chip_healthy(bad_node)
    await eventually(tainted, lambda ts: sub_health_taint not in ts, what="the sub-health taint lifted")
