"""Checkpoint-aware graceful restart (issue 38), with the whole agent as a subprocess: a grace-mode Volcano Job
that reports its progress (``fault-agent.io/progress: lease``; rank 0's loop is testbed.heartbeat.TrainingLoop,
the real client against the real apiserver) is hit by a chip fault; the agent deletes its pods honouring their
grace period, and rank 0 answers the SIGTERM (testbed.heartbeat.GracefulExitAnswer) by saving a checkpoint of its
last step 2 s later. The agent force-deletes the pods at that checkpoint, well before grace-over-time, and says so
in ``recovery.succeeded`` (``grace_waits``) and ``fault_agent_grace_wait_seconds``. A job whose checkpoint never
comes is forced at grace-over-time as before.

As in test_grace_mode, kwok is stopped so the pods stay terminating (kwok confirms an exit at once), and started
again once the agent has forced them. Timings come from the agent (the wait's seconds in its event, its own
monotonic clock) and the apiserver (the pods' deletionTimestamp), never from when this test saw something.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import VC, eventually, guide_vcjob, record_pods, submit, wait_running
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from agent.core.progress import PROGRESS_LABEL
from testbed.heartbeat import GracefulExitAnswer, TrainingLoop
from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e
SAVE_AFTER_S = 2.0
LABELS = {"fault-scheduling": "grace", PROGRESS_LABEL: "lease"}


async def _graceful_restart(sc: Scenario, *, grace_over_time_s: int, saves: bool) -> tuple[dict[str, Any], Any]:
    """Run the scenario of the module docstring; returns the ``recovery.succeeded`` data and the answer's record."""
    await sc.add_nodes(4)
    created = await submit(sc.api, guide_vcjob(sc.namespace, sc.tag, labels=LABELS), VC)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, name)
    old_uids = {p.metadata.uid for p in pods}
    loop = TrainingLoop(sc.testbed, sc.namespace, name, min(p.metadata.name for p in pods)).start()
    agent = await sc.start_agent(POLICY__GRACE_OVER_TIME_S=str(grace_over_time_s))
    watched = await record_pods(sc.api, sc.namespace)
    bad = pods[0]
    chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[5].rsplit("-", 1)[1])
    await asyncio.sleep(2)  # the agent follows the job's Lease (two writes at the loop's 1 s interval)
    sc.testbed.kill("kwok")
    stopped = True
    try:
        async with GracefulExitAnswer(sc.api, loop, after_s=SAVE_AFTER_S, saves=saves) as answer:
            sc.injector.chip_fault(bad.spec.node_name, [ChipFault(chip, ("80E3A201",), "SeparateNPU")])
            (started,) = await sc.wait_events("recovery.started", for_job(uid))
            assert started["data"]["action"] == "restart-job"

            async def forced() -> bool:
                return {o["metadata"]["uid"] for kind, o in watched.events if kind == "DELETED"} >= old_uids

            await eventually(forced, timeout_s=grace_over_time_s + 15, what="the agent to force-delete the pods")
            assert answer.seen.signal == "SIGTERM"
            assert (answer.seen.saved_step is not None) is saves
        ended = "checkpoint" if saves else "timeout"

        async def counted() -> bool:
            n = agent.metric("fault_agent_grace_wait_seconds_count", wait="grace-over-time", ended=ended)
            return n == 1

        await eventually(counted, timeout_s=10, what=f"one grace-over-time wait ended by {ended} counted")
        await _restart_kwok(sc)
        stopped = False
        await wait_running(sc.api, sc.namespace, name, not_uids=old_uids, timeout_s=60)
        (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        return succeeded["data"], answer.seen
    finally:
        loop.stop()
        if stopped:
            await _restart_kwok(sc)
        await watched.stop()


async def test_the_grace_wait_ends_at_the_checkpoint_the_job_saves_on_sigterm(scenario: Scenario) -> None:
    grace_over_time_s = 30
    data, seen = await _graceful_restart(scenario, grace_over_time_s=grace_over_time_s, saves=True)
    (wait,) = data["grace_waits"]
    assert (wait["wait"], wait["ended"]) == ("grace-over-time", "checkpoint")
    assert wait["checkpoint_step"] == seen.saved_step
    # the agent's own measure of its wait (from the restart to the force): not before the job saved, 2 s after the
    # graceful deletion, and well before grace-over-time
    assert SAVE_AFTER_S - 0.5 <= wait["waited_s"] < grace_over_time_s / 3


async def test_a_job_whose_checkpoint_never_comes_is_forced_at_grace_over_time(scenario: Scenario) -> None:
    grace_over_time_s = 5
    data, seen = await _graceful_restart(scenario, grace_over_time_s=grace_over_time_s, saves=False)
    (wait,) = data["grace_waits"]
    assert (wait["wait"], wait["ended"], wait["checkpoint_step"]) == ("grace-over-time", "timeout", None)
    assert wait["waited_s"] >= grace_over_time_s
    assert seen.saved_step is None


async def _restart_kwok(sc: Scenario) -> None:
    coord = k8s.CoordinationV1Api(sc.api)
    for node in sc.nodes:
        with contextlib.suppress(ApiException):
            await coord.delete_namespaced_lease(node, "kube-node-lease")
    await asyncio.to_thread(sc.testbed.start, "kwok")
