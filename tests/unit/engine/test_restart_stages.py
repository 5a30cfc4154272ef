"""A fault's way to its restart, timed and kept short (issue 39, "half the distance to the floor").

- Each restart a fault opens is timed from the fault's read to the stages decided, durable, sent and answered
  (``fault_agent_fault_stage_seconds{stage}``, agent.engine.stages), once per stage.
- What can wait (the agent's Kubernetes Events) waits while a restart is being sent, at most HOLD_S in a row
  (agent.engine.stages.RestartsSending; agent.sinks.kube_events ``KubeEventRecorder.hold``).
- A restart by pod deletion sends no read of the job beside its deletions (only a RestartJob Command's force
  follow-up uses that read), and its deletions leave before the list of the job's pods; the claim, whose lease-fence
  check must come first, still goes out first.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import structlog
import structlog.testing
from prometheus_client import CollectorRegistry
from support import factories
from support.factories import SETTINGS
from support.factories import T0 as NOW
from support.fakes import Apiserver, PortWriter
from test_restart_round_trip import _state

from agent.actions import PodRef
from agent.core.clock import FixedClock, ThreadUsage
from agent.core.cluster import JobRef
from agent.engine.recovery import RecoveryEngine
from agent.engine.stages import (
    DECISION_PATH,
    FAULT_STAGES,
    HOLD_S,
    DecisionPath,
    FaultStages,
    RestartsSending,
)
from agent.runtime.clock import thread_usage
from agent.settings import Settings
from agent.sinks.metrics import AgentMetrics

DELETE_PODS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"volcano_restart": "delete-pods"}})


class ListingWriter(PortWriter):
    """:class:`PortWriter` whose list of the job's pods is logged with the writes, in the order it was sent."""

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        self.api.log.append("list start")
        return await super().list_job_pods(job)


class SteppingClock(FixedClock):
    """A fixed clock that moves on by `step` at each read (so each stage reads a later time than the one before)."""

    def __init__(self, at: datetime, step: timedelta) -> None:
        super().__init__(at)
        self.step = step

    def now(self) -> datetime:
        at = super().now()
        self.set(at + self.step)
        return at


async def _started(engine: RecoveryEngine, api: Apiserver, writes: int) -> None:
    await engine.handle_fault(factories.fault(at=NOW), NOW)
    for _ in range(50):
        await asyncio.sleep(0)
        if len(api.log) >= writes:
            return


async def test_a_restart_by_deletion_sends_its_deletions_before_the_list_and_reads_no_job() -> None:
    api = Apiserver()
    writer = ListingWriter(api)
    writer.gate = asyncio.Event()
    engine = RecoveryEngine(DELETE_PODS, _state(), writer, clock=FixedClock(NOW))
    await _started(engine, api, 3)
    assert api.log == ["claim start", "delete-pods start", "list start"]  # the claim first: its fence check
    assert writer.reads == ["list_job_pods"]  # no GET of the job: no force follow-up comes from a deletion
    writer.gate.set()
    await engine.idle()
    assert api.log.index("rings start") > api.log.index("delete-pods end")


async def test_a_restart_by_command_still_reads_the_job_for_its_force_follow_up() -> None:
    api = Apiserver()
    writer = ListingWriter(api)
    writer.gate = asyncio.Event()
    engine = RecoveryEngine(SETTINGS, _state(), writer, clock=FixedClock(NOW))
    await _started(engine, api, 2)
    assert api.log == ["claim start", "command start"]
    assert writer.reads == ["job_meta"]
    writer.gate.set()
    await engine.idle()


async def test_each_stage_of_a_restart_is_timed_once_from_the_faults_read() -> None:
    registry = CollectorRegistry()
    step = timedelta(milliseconds=2)
    engine = RecoveryEngine(
        DELETE_PODS,
        _state(),
        PortWriter(Apiserver()),
        clock=SteppingClock(NOW, step),
        metrics=AgentMetrics(registry),
    )
    await engine.handle_fault(factories.fault(at=NOW), NOW)
    await engine.idle()
    counts = {s: registry.get_sample_value("fault_agent_fault_stage_seconds_count", {"stage": s}) for s in FAULT_STAGES}
    assert counts == dict.fromkeys(FAULT_STAGES, 1.0)
    sums = [registry.get_sample_value("fault_agent_fault_stage_seconds_sum", {"stage": s}) for s in FAULT_STAGES]
    assert all(s is not None and s > 0 for s in sums)
    assert sums == sorted(sums)  # in the order a restart passes them, each read later than the one before


def test_a_stage_reached_again_is_not_counted_again_and_times_are_from_the_read() -> None:
    registry = CollectorRegistry()
    clock = FixedClock(NOW + timedelta(milliseconds=7))
    stages = FaultStages(NOW, clock, AgentMetrics(registry))
    stages.mark("sent")
    clock.set(NOW + timedelta(milliseconds=30))
    stages.mark("sent")  # a second try of the restart: timed by its first
    stages.mark("answered")
    assert stages.ms == {"sent": 7.0, "answered": 30.0}
    assert registry.get_sample_value("fault_agent_fault_stage_seconds_count", {"stage": "sent"}) == 1
    assert registry.get_sample_value("fault_agent_fault_stage_seconds_sum", {"stage": "sent"}) == 0.007


async def test_what_can_wait_waits_for_the_restart_being_sent_and_no_longer_than_the_hold() -> None:
    clock = FixedClock(NOW)
    sending = RestartsSending(clock)
    await asyncio.wait_for(sending.quiet(), 0.1)  # nothing being sent: at once
    sending.started()
    sending.started()
    waiting = asyncio.ensure_future(sending.quiet())
    await asyncio.sleep(0.01)
    sending.ended()
    await asyncio.sleep(0.01)
    assert not waiting.done()  # one restart still being sent
    sending.ended()
    await asyncio.wait_for(waiting, 0.1)
    sending.started()
    clock.set(NOW + timedelta(seconds=HOLD_S))  # the busy period is as old as the hold: nothing waits any more
    await asyncio.wait_for(sending.quiet(), 0.1)


async def test_the_engine_is_quiet_again_once_its_restarts_writes_were_answered() -> None:
    api = Apiserver()
    writer = PortWriter(api)
    writer.gate = asyncio.Event()
    engine = RecoveryEngine(DELETE_PODS, _state(), writer, clock=FixedClock(NOW))
    await _started(engine, api, 2)
    quiet = asyncio.ensure_future(engine.restarts_quiet())
    await asyncio.sleep(0.01)
    assert not quiet.done()  # the restart's writes are not answered yet
    writer.gate.set()
    await engine.idle()
    await asyncio.wait_for(quiet, 0.1)


async def test_a_fault_read_from_its_source_has_its_decision_paths_cpu_in_the_stage_line() -> None:
    engine = RecoveryEngine(
        DELETE_PODS, _state(), PortWriter(Apiserver()), clock=FixedClock(NOW), thread_usage=thread_usage
    )
    with structlog.testing.capture_logs() as logs:
        await engine.handle_fault(factories.fault(at=NOW), NOW)
        await engine.idle()
    (line,) = [e for e in logs if e["event"] == "fault stages"]
    assert 0 < line["path_cpu_ms"] < 1000  # the loop thread's CPU from taking the fault to handing its events over
    assert line["path_preempted"] >= 0
    assert DECISION_PATH.get() is None  # the recovery loop's next fault starts its own path


async def test_a_fault_decided_again_or_without_a_usage_reader_has_no_decision_path() -> None:
    timed = RecoveryEngine(
        DELETE_PODS, _state(), PortWriter(Apiserver()), clock=FixedClock(NOW), thread_usage=thread_usage
    )
    untimed = RecoveryEngine(DELETE_PODS, _state(), PortWriter(Apiserver()), clock=FixedClock(NOW))
    with structlog.testing.capture_logs() as logs:
        await timed.handle_fault(factories.fault(at=NOW), NOW, again=True)  # the rate limit deferred it
        await untimed.handle_fault(factories.fault(at=NOW), NOW)  # a replay or a test: no reader given
        await timed.idle()
        await untimed.idle()
    lines = [e for e in logs if e["event"] == "fault stages"]
    assert len(lines) == 2
    assert not any("path_cpu_ms" in line or "path_preempted" in line for line in lines)


def test_the_decision_path_is_the_threads_cpu_and_preemptions_since_the_fault_was_taken() -> None:
    taken = thread_usage()
    start = ThreadUsage(taken.cpu_s - 0.004, taken.preempted - 2)  # taken 4 ms of CPU and 2 preemptions ago
    token = DECISION_PATH.set(DecisionPath(start, thread_usage))
    try:
        stages = FaultStages(NOW, FixedClock(NOW), AgentMetrics(CollectorRegistry()))
    finally:
        DECISION_PATH.reset(token)
    stages.path_done()
    first = dict(stages.path)
    assert first["path_cpu_ms"] >= 4.0
    assert first["path_preempted"] >= 2
    stages.path_done()  # ended once: a second call changes nothing
    assert stages.path == first
