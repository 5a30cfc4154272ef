"""A flapping chip on the testbed (issue 14 item 3): MindCluster's frequency rule isolates that chip, and the job on
it is restarted off it, while its node stays in service.

80E18008 (RestartNPU) is in the first FaultFrequency rule of MindCluster's faultCustomization.json: 2 occurrences on
one chip within 86400 s mean ManuallySeparateNPU. The guide's job (2 pods x 8 chips, one pod per node) runs on three
nodes A, B, Z: the chip of A faults (restart: the job moves to B and Z), heals; a chip of B faults (the job moves back
to A and Z), heals; the same chip of A faults again: the agent reports it ManuallySeparateNPU (reason ...+Flapping),
restarts the job off A, and keeps the chip's fault active after the plugin says it is healthy. A is quarantined: with
one chip isolated it can no longer hold the job's 8-chip pods, and a device plugin that does not share the rule would
hand the chip out again (issue 37 item 1).

B4 (issue 37 item 1): a one-pod job pinned to one node, its chip faulting and healing four times: the third fault
isolates the chip (the agent's catch-all rule, 3 faults) and restarts the job, the node is quarantined, and the fourth
restarts nothing, the job waiting Pending instead of being placed back on the chip.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import VC, get_job, guide_vcjob, holds, job_version, live_pods, submit, taints, wait_running
from support.polling import eventually

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e
CODE = "80E18008"


async def _chip_fault_events(sc: Scenario, uid: str, node: str, count: int) -> list[dict[str, Any]]:
    """The job's fault.detected events for CODE on `node`, once there are `count` of them."""

    def where(e: dict[str, Any]) -> bool:
        fault = e["data"]["fault"]
        return bool(for_job(uid)(e)) and fault["node"] == node and fault["codes"] == [CODE]

    return [e["data"]["fault"] for e in await sc.wait_events("fault.detected", where, count=count)]


async def _moved(sc: Scenario, name: str, pods: list[Any], off: str) -> list[Any]:
    new = await wait_running(sc.api, sc.namespace, name, not_uids={p.metadata.uid for p in pods}, timeout_s=60)
    assert off not in {p.spec.node_name for p in new}, f"a new pod was placed on {off}"
    return new


async def test_a_flapping_chip_is_isolated_and_its_job_restarted_off_it(scenario: Scenario) -> None:
    sc = scenario
    await sc.add_nodes(3)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, max_retry=10), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    taint_key = f"e2e.fault-agent.io/{sc.tag}"
    await sc.start_agent(POLICY__TAINT_KEY=taint_key, DETECT__FLAP_THRESHOLD="0")
    a, b = pods[0].spec.node_name, pods[1].spec.node_name
    chip = 3
    version = job_version(await get_job(sc.api, sc.namespace, name))

    # 1. the chip of A faults once: a plain RestartNPU restart, the job leaves A
    sc.injector.chip_fault(a, [ChipFault(chip, (CODE,), "RestartNPU")])
    pods = await _moved(sc, name, pods, a)
    (first,) = await _chip_fault_events(sc, uid, a, 1)
    assert (first["level"], first["reason"]) == ("RestartNPU", "CardUnhealthy")
    sc.injector.chip_healthy(a)

    # 2. a chip of B faults (another code, no rule): the job moves back onto A
    sc.injector.chip_fault(b, [ChipFault(0, ("80E3A201",), "SeparateNPU")])
    pods = await _moved(sc, name, pods, b)
    assert a in {p.spec.node_name for p in pods}
    sc.injector.chip_healthy(b)

    # 3. the same chip of A faults again: isolated (ManuallySeparateNPU), the job restarted off it
    sc.injector.chip_fault(a, [ChipFault(chip, (CODE,), "RestartNPU")])
    pods = await _moved(sc, name, pods, a)
    flapped = (await _chip_fault_events(sc, uid, a, 2))[-1]
    assert (flapped["level"], flapped["reason"], flapped["chips"]) == (
        "ManuallySeparateNPU",
        "CardUnhealthy+Flapping",
        [f"Ascend910-{chip}"],
    )
    assert job_version(await get_job(sc.api, sc.namespace, name)) == version + 3
    # the plugin says the chip is healthy again: the agent keeps it isolated (no fault.cleared for it), and A, which
    # can no longer hold one of the job's 8-chip pods without that chip, stays quarantined
    sc.injector.chip_healthy(a)
    quarantine = (taint_key, "ManuallySeparateNPU", "NoSchedule")

    async def isolated_and_node_quarantined() -> bool:
        cleared = [
            e for e in sc.events("fault.cleared")
            if e["data"]["fault"]["node"] == a and e["data"]["fault"]["reason"].endswith("+Flapping")
        ]  # fmt: skip
        return not cleared and quarantine in await taints(sc.api, a)

    await eventually(isolated_and_node_quarantined, timeout_s=10, what=f"{a} quarantined for its isolated chip")
    await holds(isolated_and_node_quarantined, for_s=5, what="the chip stays isolated, its node quarantined")


def _one_pod_job(sc: Scenario) -> tuple[dict[str, Any], dict[str, Any]]:
    """The guide's job with one 8-chip pod (minAvailable 1): pinned, by the test's node label, to the one node."""
    cm, job = guide_vcjob(sc.namespace, sc.tag, max_retry=10)
    job["spec"]["minAvailable"] = 1
    job["spec"]["tasks"][0]["replicas"] = 1
    return cm, job


async def test_b4_a_flapping_chip_under_a_pinned_job_restarts_it_once_isolated_and_then_no_more(
    scenario: Scenario,
) -> None:
    sc = scenario
    (a,) = await sc.add_nodes(1)
    created = await submit(sc.api, _one_pod_job(sc), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name, count=1)
    taint_key = f"e2e.fault-agent.io/{sc.tag}"
    await sc.start_agent(POLICY__TAINT_KEY=taint_key, DETECT__FLAP_THRESHOLD="3")
    version = job_version(await get_job(sc.api, sc.namespace, name))
    fault = [ChipFault(3, ("80E3A201",), "SeparateNPU")]  # a code without a MindCluster rule: the catch-all's

    async def restarted(times: int) -> None:
        async def probe() -> bool:
            return job_version(await get_job(sc.api, sc.namespace, name)) >= version + times

        await eventually(probe, timeout_s=30, what=f"restart {times} of {name}")

    # faults 1 and 2: the job restarted each time and placed back on A (its only node) once the chip healed. The
    # chip heals as soon as the agent has decided (its recovery.started), before the restarted pod can be running
    # again: healed only once the job's version moved, the replacement could land on the still-faulty chip first,
    # and the agent rightly restarts a pod placed on a faulty chip again (one restart more than the test counts)
    for n in (1, 2):
        sc.injector.chip_fault(a, fault)
        await sc.wait_events("recovery.started", for_job(uid), count=n)
        sc.injector.chip_healthy(a)
        await restarted(n)
        pods = await wait_running(sc.api, sc.namespace, name, count=1, not_uids={p.metadata.uid for p in pods})
        assert [p.spec.node_name for p in pods] == [a]

    # fault 3: the catch-all isolates the chip, the job is restarted once more, and A is quarantined
    sc.injector.chip_fault(a, fault)

    def flapping(e: dict[str, Any]) -> bool:
        return bool(for_job(uid)(e)) and str(e["data"]["fault"]["reason"]).endswith("+Flapping")

    isolating = (await sc.wait_events("fault.detected", flapping, count=1))[0]["data"]["fault"]
    assert (isolating["level"], isolating["chips"]) == ("ManuallySeparateNPU", ["Ascend910-3"])
    await restarted(3)
    quarantine = (taint_key, "ManuallySeparateNPU", "NoSchedule")

    async def quarantined() -> bool:
        return quarantine in await taints(sc.api, a)

    await eventually(quarantined, timeout_s=10, what=f"{a} quarantined")
    sc.injector.chip_healthy(a)  # the device plugin reports the chip healthy again: it would hand it out

    async def not_placed_back() -> bool:
        bound = [p for p in await live_pods(sc.api, sc.namespace, f"volcano.sh/job-name={name}") if p.spec.node_name]
        job = await get_job(sc.api, sc.namespace, name)
        return not bound and job_version(job) == version + 3 and await quarantined()

    await holds(not_placed_back, for_s=5, what="the job waits, not placed back on the isolated chip")

    # fault 4: the chip flaps again; no pod of the job is on it, nothing is restarted
    sc.injector.chip_fault(a, fault)
    await holds(not_placed_back, for_s=8, what="no restart for the isolated chip's fourth fault")
    sc.injector.chip_healthy(a)
