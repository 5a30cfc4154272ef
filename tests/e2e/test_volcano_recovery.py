"""The guide's Volcano Job recovering from hardware faults, with the whole agent as a subprocess.

Each test: fresh nodes, the guide's job Running on two of them, the agent started, one fault injected as
MindCluster's components write it; then the test checks like an operator would: Kafka events (validated against
the agent's JSON Schemas), /metrics, and the cluster's own objects (Commands, the job's status, pods, nodes).
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import (
    VC,
    get_job,
    guide_vcjob,
    holds,
    job_version,
    record_commands,
    restart_commands,
    submit,
    wait_running,
)

from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e


async def _guide_job_running(sc: Scenario, **labels: str) -> tuple[str, str, list[Any], int]:
    """Four nodes, the guide's job Running on two of them; returns (name, uid, pods, status.version)."""
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, labels=labels), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    return name, uid, pods, job_version(await get_job(sc.api, sc.namespace, name))


async def _one_restart_off(sc: Scenario, name: str, uid: str, pods: list[Any], version: int, bad_node: str) -> Any:
    """Common checks after a fault that must restart the job once and move it off `bad_node`: the new pods run
    on other nodes, exactly one RestartJob Command, status.version + 1, a recovery.succeeded event. Returns the
    recovery.succeeded event."""
    old_uids = {p.metadata.uid for p in pods}
    new_pods = await wait_running(sc.api, sc.namespace, name, not_uids=old_uids, timeout_s=60)
    assert bad_node not in {p.spec.node_name for p in new_pods}, "a new pod was placed on the faulty node"
    assert len({p.spec.node_name for p in new_pods}) == 2
    (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
    assert job_version(await get_job(sc.api, sc.namespace, name)) == version + 1
    return succeeded


async def test_chip_fault_restarts_the_guides_job_once_off_the_faulty_node(scenario: Scenario) -> None:
    sc = scenario
    name, uid, pods, version = await _guide_job_running(sc)
    agent = await sc.start_agent()
    commands = await record_commands(sc.api, sc.namespace)
    try:
        bad = pods[0]
        bad_node = bad.spec.node_name
        chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[3].rsplit("-", 1)[1])
        injected = time.time()
        sc.injector.chip_fault(bad_node, [ChipFault(chip, ("80E01801",), "SeparateNPU")])

        (detected,) = await sc.wait_events("fault.detected", for_job(uid))
        fault = detected["data"]["fault"]
        assert (fault["kind"], fault["level"], fault["node"]) == ("chip", "SeparateNPU", bad_node)
        assert fault["chips"] == [f"Ascend910-{chip}"] and fault["codes"] == ["80E01801"]
        assert fault["check_code_ok"] is True  # the injector's CheckCode encoder agrees with the agent's verifier
        assert detected["subject"] and detected["partitionkey"] == uid

        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert started["data"]["action"] == "restart-job"
        succeeded = await _one_restart_off(sc, name, uid, pods, version, bad_node)
        assert succeeded["data"]["incident_id"] == started["data"]["incident_id"]
        durations = succeeded["data"]["durations"]
        assert 0 < durations["total_s"] < time.time() - injected + 2
        assert durations["total_s"] >= durations["reschedule_s"]

        assert len(restart_commands(commands, name)) == 1
        (cmd,) = restart_commands(commands, name)
        assert cmd["target"]["uid"] == uid
        # A storm does not follow: no second Command and no second version bump while the agent keeps watching.
        await holds(lambda: _still_one(sc, commands, name, version + 1), for_s=3, what="one Command, version + 1")
        assert agent.metric("fault_agent_recovery_seconds_count", job_kind="vcjob", outcome="recovered") == 1
        assert agent.metric("fault_agent_recovery_seconds_sum", job_kind="vcjob") > 0
        assert agent.metric("fault_agent_actions_total", action="restart-job", result="done") == 1
    finally:
        await commands.stop()


async def _still_one(sc: Scenario, commands: Any, name: str, version: int) -> bool:
    job = await get_job(sc.api, sc.namespace, name)
    return len(restart_commands(commands, name)) == 1 and job_version(job) == version
