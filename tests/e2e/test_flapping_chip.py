"""A flapping chip on the testbed (issue 14 item 3): MindCluster's frequency rule isolates that chip, and the job on
it is restarted off it, while its node stays in service.

80E18008 (RestartNPU) is in the first FaultFrequency rule of MindCluster's faultCustomization.json: 2 occurrences on
one chip within 86400 s mean ManuallySeparateNPU. The guide's job (2 pods x 8 chips, one pod per node) runs on three
nodes A, B, Z: the chip of A faults (restart: the job moves to B and Z), heals; a chip of B faults (the job moves back
to A and Z), heals; the same chip of A faults again: the agent reports it ManuallySeparateNPU (reason ...+Flapping),
restarts the job off A, does not taint A, and keeps the chip's fault active after the plugin says it is healthy.
"""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import VC, get_job, guide_vcjob, holds, job_version, submit, taints, wait_running

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
    # the plugin says the chip is healthy again: the agent keeps it isolated (no fault.cleared for it) and never
    # takes the node out for one chip
    sc.injector.chip_healthy(a)

    async def isolated_and_node_in_service() -> bool:
        cleared = [
            e for e in sc.events("fault.cleared")
            if e["data"]["fault"]["node"] == a and e["data"]["fault"]["reason"].endswith("+Flapping")
        ]  # fmt: skip
        return not cleared and not [t for t in await taints(sc.api, a) if t[0] == taint_key]

    await holds(isolated_and_node_in_service, for_s=5, what="the chip stays isolated, its node untainted")
