"""Events across a leader's death and a fault's whole life, with the whole agent as subprocesses (issue 16).

- A leader SIGKILLed right after it restarted a job, none of its events out yet (its Kafka address answers
  nothing, so they wait in its own outbox, which nobody replays here): the standby that takes over publishes the
  incident's fault.detected and recovery.started itself, then recovery.succeeded; still one restart.
- A chip fault's fault.cleared is in the job's stream: keyed by the job UID like its fault.detected, naming the
  job, the fault's identity and the fault.detected it ends, although the job's pods left the node by then.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import (
    VC,
    eventually,
    get_job,
    guide_vcjob,
    holds,
    job_version,
    record_commands,
    restart_commands,
    submit,
    wait_running,
)

from testbed.agent_runner import AgentProcess
from testbed.cluster import free_port
from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e

FAST_LEASE = {"LEADER__LEASE_DURATION_S": "3", "LEADER__RENEW_DEADLINE_S": "2", "LEADER__RETRY_PERIOD_S": "0.5"}


async def _guide_job_running(sc: Scenario) -> tuple[str, str, list[Any], int]:
    """Four nodes, the guide's job Running on two of them; returns (name, uid, pods, status.version)."""
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    return name, uid, pods, job_version(await get_job(sc.api, sc.namespace, name))


def _chip_of(pod: Any) -> int:
    """One chip the pod holds (from the device plugin's allocation annotation)."""
    return int(pod.metadata.annotations["huawei.com/Ascend910"].split(",")[-1].rsplit("-", 1)[1])


async def _standby(sc: Scenario, **settings: str) -> AgentProcess:
    """A second agent of the same test (same Lease, its own outbox), ready but not leading."""
    env = {
        "CLUSTER_NAME": f"e2e-{sc.tag}",
        "KUBE__NAMESPACES": json.dumps([sc.namespace]),
        "LEADER__NAMESPACE": sc.namespace,
        "LEADER__NAME": f"fault-agent-{sc.tag}",
        "POLICY__BREAKER_CONFIGMAP": f"fault-agent-breaker-{sc.tag}",
        "POLICY__BREAKER_MIN_FAULTY_NODES": "1000",
        **settings,
    }
    agent = AgentProcess(sc.testbed, sc.workdir, settings=env, name=f"standby-{sc.tag}")
    sc.agents.append(agent)
    await asyncio.to_thread(agent.start)
    assert agent.metric("fault_agent_leader") == 0
    return agent


async def test_a_leader_killed_right_after_acting_has_its_first_events_published_by_the_successor(
    scenario: Scenario,
) -> None:
    """Regression (issue 16 item 2): in 2 of 20 leader kills right after a fault, the standby resumed the incident
    (one Command) but fault.detected and recovery.started never reached Kafka; only recovery.succeeded did."""
    sc = scenario
    name, uid, pods, version = await _guide_job_running(sc)
    # The leader's events cannot get out before it dies: nothing listens at its Kafka address.
    leader = await sc.start_agent("leader", KAFKA__BOOTSTRAP_SERVERS=f"127.0.0.1:{free_port()}", **FAST_LEASE)
    standby = await _standby(sc, **FAST_LEASE)
    commands = await record_commands(sc.api, sc.namespace)
    try:
        bad = pods[0]
        sc.injector.chip_fault(bad.spec.node_name, [ChipFault(_chip_of(bad), ("80E3A201",), "SeparateNPU")])
        deadline = time.monotonic() + 30
        while not restart_commands(commands, name):
            assert time.monotonic() < deadline, "the leader never restarted the job"
            await asyncio.sleep(0.02)
        leader.stop(signal.SIGKILL)  # right after it acted
        assert sc.events("", for_job(uid)) == []  # nothing of the incident reached Kafka

        async def leads() -> bool:
            return standby.metric("fault_agent_leader") == 1

        await eventually(leads, timeout_s=30, what="the standby to take over")
        (detected,) = await sc.wait_events("fault.detected", for_job(uid), timeout_s=60)
        assert detected["partitionkey"] == uid
        assert detected["data"]["fault"]["node"] == bad.spec.node_name
        (started,) = await sc.wait_events("recovery.started", for_job(uid), timeout_s=30)
        (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
        assert started["data"]["incident_id"] == succeeded["data"]["incident_id"]
        assert started["data"]["action"] == "restart-job"
        await holds(lambda: _one_command(commands, name), for_s=3, what="one RestartJob Command")
        assert job_version(await get_job(sc.api, sc.namespace, name)) == version + 1
    finally:
        await commands.stop()


async def _one_command(commands: Any, name: str) -> bool:
    return len(restart_commands(commands, name)) == 1


async def test_fault_cleared_is_in_the_jobs_stream_paired_with_its_fault_detected(scenario: Scenario) -> None:
    """Regression (issue 16 item 3): fault.cleared was keyed by the node and named no job, so a consumer that
    orders and pairs by job UID could not match it with the job's fault.detected."""
    sc = scenario
    name, uid, pods, _ = await _guide_job_running(sc)
    await sc.start_agent()
    bad = pods[0]
    bad_node = bad.spec.node_name
    sc.injector.chip_fault(bad_node, [ChipFault(_chip_of(bad), ("80E3A201",), "SeparateNPU")])
    (detected,) = await sc.wait_events("fault.detected", for_job(uid))
    await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)  # the job runs elsewhere now
    sc.injector.chip_healthy(bad_node)
    (cleared,) = await sc.wait_events("fault.cleared", lambda e: e["data"]["fault"]["node"] == bad_node)
    assert cleared["partitionkey"] == detected["partitionkey"] == uid
    assert cleared["subject"] == detected["subject"] == f"{sc.namespace}/{name}"
    assert cleared["data"]["job"] == detected["data"]["job"]
    assert [j["uid"] for j in cleared["data"]["jobs"]] == [uid]
    assert cleared["data"]["fault_id"] == detected["data"]["fault_id"]
    assert cleared["data"]["detected_id"] == detected["id"]
    assert cleared["data"]["fault"]["chips"] == detected["data"]["fault"]["chips"]
