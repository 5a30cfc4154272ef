"""Hang detection from the training-progress heartbeat (issue 38), with the whole agent as a subprocess.

The guide's Volcano Job opts in (``fault-agent.io/progress: lease``, ``fault-agent.io/hang-timeout-s: 6``); its
rank 0's training loop (testbed.heartbeat.TrainingLoop, the real client against the real apiserver) steps every
0.5 s and writes the Lease every second. A loop that stops stepping is restarted once, charged to the business
retry budget, with reason ``hang`` and a ``job.hung`` event, and its first step after the restart is a
``recovery.resumed`` event; a loop that keeps stepping is left alone.
"""

from __future__ import annotations

import asyncio

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

from agent.core.progress import HANG_TIMEOUT_LABEL, PROGRESS_LABEL
from testbed.heartbeat import TrainingLoop

pytestmark = pytest.mark.e2e

TIMEOUT_S = 6
LABELS = {PROGRESS_LABEL: "lease", HANG_TIMEOUT_LABEL: str(TIMEOUT_S)}


async def _job_with_a_training_loop(sc: Scenario) -> tuple[str, str, list[object], TrainingLoop]:
    await sc.add_nodes(4)
    # maxRetry 10: Volcano's own restart limit (which counts these restarts too) is not what bounds the budget
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, labels=LABELS, max_retry=10), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    rank0 = min(p.metadata.name for p in pods)
    loop = TrainingLoop(sc.testbed, sc.namespace, name, rank0).start()
    return name, uid, pods, loop


async def test_a_hung_job_is_restarted_once_with_reason_hang(scenario: Scenario) -> None:
    sc = scenario
    name, uid, pods, loop = await _job_with_a_training_loop(sc)
    commands = await record_commands(sc.api, sc.namespace)
    try:
        agent = await sc.start_agent()
        version = job_version(await get_job(sc.api, sc.namespace, name))
        await asyncio.sleep(3)  # the agent sees the steps move: armed
        loop.hang()
        hung_step = loop.step
        (hung,) = await sc.wait_events("job.hung", for_job(uid), timeout_s=TIMEOUT_S + 15)
        data = hung["data"]
        assert data["action"] == "restart-job"
        assert data["step"] == hung_step
        assert data["timeout_s"] == TIMEOUT_S
        assert data["timeout_from"] == "label"
        assert data["idle_s"] >= TIMEOUT_S
        assert data["pod"]["name"] == min(p.metadata.name for p in pods)  # type: ignore[attr-defined]
        assert data["incident_id"]
        (started,) = await sc.wait_events("recovery.started", for_job(uid))
        assert [f["reason"] for f in started["data"]["faults"]] == ["hang"]
        assert started["data"]["incident_id"] == data["incident_id"]
        assert started["data"]["budget_left"] == 2  # fault-retry-times=3: one business retry spent
        old = {p.metadata.uid for p in pods}  # type: ignore[attr-defined]
        await wait_running(sc.api, sc.namespace, name, not_uids=old, timeout_s=60)
        await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        assert job_version(await get_job(sc.api, sc.namespace, name)) == version + 1
        assert len(restart_commands(commands, name)) == 1
        assert (
            agent.metric("fault_agent_faults_total", kind="business", level="RestartBusiness", source="progress") == 1
        )
        # the restarted loop does not step for a while (initialising): no hang before its first step
        await holds(
            lambda: _commands_are(commands, name, 1), for_s=TIMEOUT_S + 3, what="no second restart before a step"
        )
        loop.resume()
        await sc.wait_events("fault.cleared", lambda e: e["data"]["fault"]["reason"] == "hang", timeout_s=15)
        (resumed,) = await sc.wait_events("recovery.resumed", for_job(uid), timeout_s=15)
        assert resumed["data"]["incident_id"] == data["incident_id"]
        assert resumed["data"]["time_to_first_step_s"] >= TIMEOUT_S + 3  # the loop waited that long to step again
        assert agent.metric("fault_agent_time_to_first_step_seconds_count", job_kind="vcjob") == 1
        await holds(lambda: _commands_are(commands, name, 1), for_s=TIMEOUT_S + 2, what="a progressing job is left")
        assert len(sc.events("job.hung", for_job(uid))) == 1
    finally:
        loop.stop()
        await commands.stop()


async def test_a_progressing_job_is_left_alone(scenario: Scenario) -> None:
    sc = scenario
    name, uid, _, loop = await _job_with_a_training_loop(sc)
    commands = await record_commands(sc.api, sc.namespace)
    try:
        agent = await sc.start_agent()
        await holds(lambda: _commands_are(commands, name, 0), for_s=3 * TIMEOUT_S, what="no restart")
        assert sc.events("job.hung", for_job(uid)) == []
        assert sc.events("recovery.started", for_job(uid)) == []
        assert (
            agent.metric("fault_agent_faults_total", kind="business", level="RestartBusiness", source="progress") == 0
        )
        assert loop.reporter is not None
        assert loop.reporter.failures == 0
        assert loop.reporter.writes >= 2 * TIMEOUT_S
    finally:
        loop.stop()
        await commands.stop()


async def _commands_are(commands: object, name: str, n: int) -> bool:
    return len(restart_commands(commands, name)) == n  # type: ignore[arg-type]
