"""Checkpoint-aware graceful restart (issue 38), with the whole agent as a subprocess: a grace-mode Volcano Job
that reports its progress (``fault-agent.io/progress: lease``; rank 0's loop is testbed.heartbeat.TrainingLoop,
the real client against the real apiserver) is hit by a chip fault, which stops its training (a collective
waits: no step and no periodic checkpoint after it); the agent deletes its pods honouring their
grace period, and rank 0 answers the SIGTERM (testbed.heartbeat.GracefulExitAnswer) by saving a checkpoint of its
last step 2 s later. The agent force-deletes the pods at that checkpoint, well before grace-over-time, and says so
in ``recovery.succeeded`` (``grace_waits``) and ``fault_agent_grace_wait_seconds``. A job whose checkpoint never
comes is forced at grace-over-time as before. The same for graceExit's wait: a ``subHealthyStrategy: graceExit`` job's
rank 0 saves when its reset-config says ``GracefulExit`` 1, and the agent's wait for the processes ends there.

As in test_grace_mode, kwok is stopped so the pods stay terminating (kwok confirms an exit at once), and started
again once the agent has forced them. Timings come from the agent (the wait's seconds in its event, its own
monotonic clock; the ``recovery.started`` time) and the apiserver (the pods' deletionTimestamp: the graceful
deletion's less its grace period, and the force deletion's), never from when this test saw something.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from conftest import Scenario, for_job
from helpers import VC, eventually, get_job, guide_vcjob, record_pods, submit, wait_running
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from agent.core.progress import PROGRESS_LABEL
from agent.platform.submit import plan_documents, submit_plan
from testbed.heartbeat import ExitSeen, GracefulExitAnswer, TrainingLoop
from testbed.inject import ChipFault

pytestmark = pytest.mark.e2e
SAVE_AFTER_S = 2.0
LABELS = {"fault-scheduling": "grace", PROGRESS_LABEL: "lease"}


@dataclass(frozen=True)
class Restart:
    """What one run saw: the ``recovery.succeeded`` data, the answer's record, the ``recovery.started`` event's
    ``time`` (the agent's clock, before the restart went out) and the force deletion's time (the apiserver's)."""

    data: dict[str, Any]
    seen: ExitSeen
    started_at: datetime
    forced_at: datetime


async def _graceful_restart(sc: Scenario, *, grace_over_time_s: int, saves: bool) -> Restart:
    """Run the scenario of the module docstring."""
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
            loop.hang()  # the chip fault stops the collective: no step (and no periodic checkpoint) after it
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
        # kwok was stopped for the wait and must take up every node and pod again first: under CI's load that alone
        # took most of a minute (a fresh-clone run timed out at 60 s with the agent's force deletion long done)
        await wait_running(sc.api, sc.namespace, name, not_uids=old_uids, timeout_s=120)
        (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=30)
        forced_at = min(
            datetime.fromisoformat(o["metadata"]["deletionTimestamp"])
            for kind, o in watched.events
            if kind == "DELETED" and o["metadata"]["uid"] in old_uids
        )  # the apiserver's time of the first grace-0 deletion, whole seconds
        return Restart(succeeded["data"], answer.seen, datetime.fromisoformat(started["time"]), forced_at)
    finally:
        loop.stop()
        if stopped:
            await _restart_kwok(sc)
        await watched.stop()


async def test_the_grace_wait_ends_at_the_checkpoint_the_job_saves_on_sigterm(scenario: Scenario) -> None:
    grace_over_time_s = 30
    run = await _graceful_restart(scenario, grace_over_time_s=grace_over_time_s, saves=True)
    (wait,) = run.data["grace_waits"]
    assert (wait["wait"], wait["ended"]) == ("grace-over-time", "checkpoint")
    assert wait["checkpoint_step"] == run.seen.saved_step
    # forced after the save, which came 2 s after the graceful deletion (the apiserver's times, whole seconds) ...
    assert run.seen.deletion_requested_at is not None
    assert run.forced_at - run.seen.deletion_requested_at >= timedelta(seconds=SAVE_AFTER_S - 1)
    # ... and well before grace-over-time: by the agent's own measure of its wait and against its restart's time
    assert wait["waited_s"] < grace_over_time_s / 3
    assert run.forced_at - run.started_at < timedelta(seconds=grace_over_time_s / 3)


async def test_a_job_whose_checkpoint_never_comes_is_forced_at_grace_over_time(scenario: Scenario) -> None:
    grace_over_time_s = 5
    run = await _graceful_restart(scenario, grace_over_time_s=grace_over_time_s, saves=False)
    (wait,) = run.data["grace_waits"]
    assert (wait["wait"], wait["ended"], wait["checkpoint_step"]) == ("grace-over-time", "timeout", None)
    assert wait["waited_s"] >= grace_over_time_s
    assert run.forced_at + timedelta(seconds=1) - run.started_at >= timedelta(seconds=grace_over_time_s)
    assert run.seen.saved_step is None


async def test_the_grace_exit_wait_ends_at_the_checkpoint_the_job_saves_on_graceful_exit(scenario: Scenario) -> None:
    """graceExit (a sub-health fault of a ``subHealthyStrategy: graceExit`` job): ``GracefulExit`` 1, and the wait
    for the processes ends at the checkpoint rank 0 saves 1 s after reading it, well before
    ``policy.grace_exit_wait_s``; the processes never exit by themselves here (nobody turns the pods not Ready)."""
    sc = scenario
    grace_exit_wait_s = 30
    await sc.add_nodes(3)
    labels = {"fault-scheduling": "grace", "subHealthyStrategy": "graceExit", PROGRESS_LABEL: "lease"}
    cm, job = guide_vcjob(sc.namespace, sc.tag, name="ckptexit", labels=labels)
    job["spec"]["policies"] = []  # as tests/e2e/test_reset_config.py: a deleted pod is recreated
    plan = plan_documents([cm, job], None)
    await submit_plan(sc.api, plan, dry_run=False, say=lambda line: None)
    uid = (await get_job(sc.api, sc.namespace, "ckptexit"))["metadata"]["uid"]
    pods = await wait_running(sc.api, sc.namespace, "ckptexit")
    # no periodic checkpoint: the only one after the fault is the save on GracefulExit
    loop = TrainingLoop(
        sc.testbed, sc.namespace, "ckptexit", min(p.metadata.name for p in pods), checkpoint_every=10**9
    )
    loop.start()
    try:
        agent = await sc.start_agent(POLICY__GRACE_EXIT_WAIT_S=str(grace_exit_wait_s), POLICY__GRACE_OVER_TIME_S="3")
        await asyncio.sleep(2)  # the agent follows the job's Lease
        bad = pods[0]
        chip = int(bad.metadata.annotations["huawei.com/Ascend910"].split(",")[0].rsplit("-", 1)[1])
        async with GracefulExitAnswer(sc.api, loop, after_s=1.0) as answer:
            sc.injector.chip_fault(bad.spec.node_name, [ChipFault(chip, ("80E3A201",), "SubHealthFault")])
            (succeeded,) = await sc.wait_events("recovery.succeeded", for_job(uid), timeout_s=60)
        assert answer.seen.signal == "GracefulExit"
        assert answer.seen.saved_step is not None
        first, *_ = succeeded["data"]["grace_waits"]
        assert (first["wait"], first["ended"]) == ("grace-exit", "checkpoint")
        assert first["checkpoint_step"] == answer.seen.saved_step
        assert first["waited_s"] < grace_exit_wait_s / 3  # the agent's own measure of its wait
        assert agent.metric("fault_agent_actions_total", action="grace-exit-wait", result="checkpoint") == 1
    finally:
        loop.stop()


async def _restart_kwok(sc: Scenario) -> None:
    coord = k8s.CoordinationV1Api(sc.api)
    for node in sc.nodes:
        with contextlib.suppress(ApiException):
            await coord.delete_namespaced_lease(node, "kube-node-lease")
    await asyncio.to_thread(sc.testbed.start, "kwok")
