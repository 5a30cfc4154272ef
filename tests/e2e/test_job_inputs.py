"""A job's own inputs the agent cannot use, with the whole agent as a subprocess (issue 13 B8).

A malformed ``fault-retry-times`` (``-1``, ``abc``, ``101``) made the whole job a rejected input, so the agent
ignored its hardware faults too. The job must stay watched, its label be reported once (log, metric, event) and
its business budget count as 0.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import Scenario, for_job
from helpers import VC, get_job, guide_vcjob, job_version, record_commands, restart_commands, submit, wait_running

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e


# "-1" (the third example) is no valid label value: the apiserver refuses it before any agent sees it
@pytest.mark.parametrize("value", ["abc", "101", "1.5"])
async def test_a_malformed_fault_retry_times_is_reported_once_and_hardware_faults_still_restart(
    scenario: Scenario, value: str
) -> None:
    sc = scenario
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, labels={"fault-retry-times": value}), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    version = job_version(await get_job(sc.api, sc.namespace, name))
    agent = await sc.start_agent()
    commands = await record_commands(sc.api, sc.namespace)
    try:
        # the job is still watched: a chip fault on one of its nodes restarts it once, off that node
        bad = pods[0]
        chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[0].rsplit("-", 1)[1])
        sc.injector.chip_fault(bad.spec.node_name, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-job"
        await wait_running(sc.api, sc.namespace, name, not_uids={p.metadata.uid for p in pods}, timeout_s=60)
        assert len(restart_commands(commands, name)) == 1
        assert job_version(await get_job(sc.api, sc.namespace, name)) == version + 1

        (event,) = await sc.wait_events("job.misconfigured", for_job(uid))
        data = event["data"]
        assert (data["label"], data["value"]) == ("fault-retry-times", value)
        assert "business retry budget is 0" in data["problem"]
        assert event["partitionkey"] == uid
        assert agent.metric("fault_agent_input_rejected_total", source="Job", reason="bad-fault-retry-times") == 1

        # reported once: one event, one count, one log line, however many ticks and job updates went by
        await asyncio.sleep(2)
        assert len(sc.events("job.misconfigured", for_job(uid))) == 1
        assert agent.metric("fault_agent_input_rejected_total", source="Job", reason="bad-fault-retry-times") == 1
        lines = [json.loads(line) for line in agent.log.read_text().splitlines() if line.startswith("{")]
        reported = [e for e in lines if e.get("event") == "job label unusable; the job is still watched"]
        assert len(reported) == 1, reported
        assert reported[0]["value"] == value
    finally:
        await commands.stop()
