"""Effective training time through the production path (agent.engine.goodput): the detect pipeline's Lease source
keeps the readings, the engine's recovery.resumed carries the work lost since the last checkpoint and the lost time
by cause, recovery.succeeded carries the time to the first step when it came first, and the metrics count them."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import change
from support.fakes import CountingWriter, ListSink

from agent.core.clock import FixedClock
from agent.core.faults import Fault, FaultCleared
from agent.core.goodput import ProgressHistory
from agent.core.progress import (
    CHECKPOINT_STEP_ANNOTATION,
    HANG_TIMEOUT_LABEL,
    PROGRESS_LABEL,
    STEP_ANNOTATION,
    STEP_TIME_ANNOTATION,
    LeaseRecord,
    Progress,
)
from agent.engine.detecting import DetectPipeline
from agent.engine.goodput import GoodputKeeper
from agent.engine.ports import NoMetrics
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 100}})
LEASE_KEY = "ns/fault-agent-progress-job"


class TrainingMetrics(NoMetrics):
    def __init__(self) -> None:
        self.lost: list[tuple[dict[str, float], int | None]] = []
        self.totals: list[tuple[float, float]] = []

    def lost_training(self, lost_by_cause: Mapping[str, float], work_lost_steps: int | None) -> None:
        self.lost.append((dict(lost_by_cause), work_lost_steps))

    def training_time(self, wall_s: float, productive_s: float) -> None:
        self.totals.append((wall_s, productive_s))


def _lease(step: int, checkpoint: int | None, step_time: str | None) -> LeaseRecord:
    notes = [(STEP_ANNOTATION, str(step))]
    if checkpoint is not None:
        notes.append((CHECKPOINT_STEP_ANNOTATION, str(checkpoint)))
    if step_time is not None:
        notes.append((STEP_TIME_ANNOTATION, step_time))
    return LeaseRecord("ns", "fault-agent-progress-job", "uid-lease", str(step), "job", "job-0", NOW, 3,
                       tuple(notes))  # fmt: skip


class Harness:
    def __init__(self, labels: dict[str, str]) -> None:
        self.clock = FixedClock(NOW)
        self.state = ClusterState()
        self.queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
        self.pipeline = DetectPipeline(SETTINGS, self.state, self.queue, clock=self.clock)
        self.api = k8s.ApiClient()
        self.writer = CountingWriter(self.api)
        self.sink = ListSink()
        self.engine = RecoveryEngine(
            SETTINGS, self.state, self.writer, events=self.sink, clock=self.clock,
            active_faults=self.pipeline.active_faults,
        )  # fmt: skip
        # wired as agent.runtime.app wires them
        self.engine.ctx.hang_of = self.pipeline.hang_of
        self.engine.ctx.take_resumed = self.pipeline.take_resumed
        self.engine.ctx.goodput.history = self.pipeline.progress
        self.metrics = TrainingMetrics()
        self.engine.ctx.metrics = self.metrics
        self.apply(change("nodes", "n1", factories.node("n1", at=NOW)))
        self.apply(change("nodes", "n2", factories.node("n2", at=NOW)))
        job = factories.job(labels={"fault-scheduling": "force", **labels}, fault_retry_times=3, created_at=NOW)
        self.apply(change("vcjobs", "ns/job", job))
        self.pods(NOW, "")

    def pods(self, created: datetime, suffix: str) -> None:
        for i, node in enumerate(("n1", "n2")):
            pod = factories.pod(f"job-{i}", uid=f"uid-job-{i}{suffix}", node=node, chips=("Ascend910-0",), rank=i,
                                created_at=created)  # fmt: skip
            self.apply(change("pods", f"ns/job-{i}", pod))

    def apply(self, c: object) -> None:
        self.state.apply(c)  # type: ignore[arg-type]
        self.pipeline(c)  # type: ignore[arg-type]

    def at(self, seconds: float) -> datetime:
        self.clock.set(NOW + timedelta(seconds=seconds))
        return self.clock.now()

    def step(self, seconds: float, step: int, checkpoint: int | None = None, step_time: str | None = None) -> None:
        self.at(seconds)
        self.apply(change("leases", LEASE_KEY, _lease(step, checkpoint, step_time)))

    async def tick(self, seconds: float) -> None:
        now = self.at(seconds)
        self.pipeline.tick()
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if isinstance(item, FaultCleared):
                await self.engine.handle_cleared(item)
            else:
                await self.engine.handle_fault(item, now)
        await self.engine.idle()
        await self.engine.tick(now)
        await self.engine.idle()

    def restarted(self) -> None:
        job = self.state.vcjobs["ns/job"]
        self.apply(change("vcjobs", "ns/job", dataclasses.replace(job, version="1")))

    def data(self, event_type: str) -> list[dict[str, Any]]:
        return [ev.as_json(e)["data"] for e in self.sink.events if ev.as_json(e)["type"] == event_type]


async def test_a_hangs_resume_carries_the_work_lost_and_where_the_time_went() -> None:
    h = Harness({PROGRESS_LABEL: "lease", HANG_TIMEOUT_LABEL: "30"})
    h.step(0, 100, 100, "2.0")
    await h.tick(1)  # the restart counter seen: waits for the first step
    h.step(2, 105, 100, "2.0")  # the job's first step the agent saw: its account starts here
    await h.tick(3)
    await h.tick(33)  # 31 s without a step: hung, restarted
    assert h.writer.commands == 1
    incident = h.engine.store.incident("uid-job")
    assert incident is not None
    h.restarted()
    await h.tick(34)
    h.step(60, 101, 100, "2.0")  # loaded checkpoint 100; the first step after the restart
    await h.tick(61)
    (resumed,) = h.data(ev.RECOVERY_RESUMED)
    assert resumed["incident_id"] == incident.id
    assert resumed["work_lost"] == {
        "steps": 5, "seconds": 10.0, "step_at_fault": 105, "checkpoint_step": 100, "step_time_s": 2.0,
    }  # fmt: skip
    # training stopped at the last step (2 s), not at the hang's detection (32 s): the wait is detection time
    assert resumed["stopped_at"] == "2025-03-01T12:00:02.000000Z"
    lost = resumed["lost_s"]
    assert lost["detection_s"] == pytest.approx(31.0)  # last step → the decision at 33 s
    assert lost["restart_s"] == 0.0
    assert lost["rescheduling_s"] + lost["initialisation_s"] == pytest.approx(27.0)  # restart (33 s) → first step
    assert lost["recomputation_s"] == 10.0
    assert lost["total_s"] == pytest.approx(68.0)
    training = resumed["training"]
    assert training["first_step_at"] == "2025-03-01T12:00:02.000000Z"
    assert training["wall_s"] == pytest.approx(58.0)
    assert training["lost_s"] == pytest.approx(58.0)  # capped at the wall time
    assert training["incidents"] == 1
    ((by_cause, steps),) = h.metrics.lost
    assert steps == 5
    assert by_cause["recomputation"] == 10.0
    assert sum(by_cause.values()) == pytest.approx(68.0)
    await h.tick(80)  # productive since the first step after the restart: the gauges say so
    wall, productive = h.metrics.totals[-1]
    assert wall == pytest.approx(78.0)
    assert productive == pytest.approx(78.0 - 68.0)
    await h.api.close()


async def test_recovery_succeeded_carries_the_time_to_first_step_once_seen() -> None:
    h = Harness({PROGRESS_LABEL: "lease"})
    h.step(0, 10, 10)
    await h.tick(1)
    h.step(2, 12, 10)
    await h.tick(3)
    chip = factories.fault(node="n1", chips=("Ascend910-0",), at=h.at(5))
    await h.engine.handle_fault(chip, h.at(6))
    await h.engine.idle()
    assert h.writer.commands == 1
    incident = h.engine.store.incident("uid-job")
    assert incident is not None
    assert incident.restart_at is not None
    h.restarted()
    await h.tick(7)
    h.step(20, 11, 10)  # the first step (the job reports no step time: observed from its readings)
    await h.tick(21)
    (resumed,) = h.data(ev.RECOVERY_RESUMED)
    ttfs = (h.at(20) - incident.restart_at).total_seconds()
    assert resumed["time_to_first_step_s"] == ttfs
    assert resumed["work_lost"]["steps"] == 2
    assert resumed["work_lost"]["step_time_s"] == 1.0  # 2 steps in 2 s before the fault
    assert resumed["stopped_at"] == "2025-03-01T12:00:05.000000Z"  # a chip fault: its own time
    # the chip is healthy again and the new pods run: the incident ends, after the first step
    h.pipeline._active.clear()
    h.pods(h.at(22), "-new")
    await h.tick(22)
    await h.tick(40)
    (succeeded,) = h.data(ev.RECOVERY_SUCCEEDED)
    assert succeeded["incident_id"] == incident.id
    assert succeeded["time_to_first_step_s"] == ttfs
    for event in h.sink.events:
        assert ev.event_errors(ev.as_json(event)) == []
    await h.api.close()


def test_the_totals_count_the_followed_jobs_that_still_exist() -> None:
    history = ProgressHistory()
    keeper = GoodputKeeper(history)
    for name, seen in (("a", 0), ("b", 100)):
        history.observe("ns", name, Progress(1, None, None, False), NOW + timedelta(seconds=seen))
        history.observe("ns", name, Progress(2, None, None, False), NOW + timedelta(seconds=seen + 1))
    history.observe("ns", "c", Progress(1, None, None, False), NOW)  # never stepped: not counted
    later = NOW + timedelta(seconds=201)
    assert keeper.totals(later) == (300.0, 300.0)  # a: 200 s, b: 100 s; no incident: all productive
    assert keeper.totals(later, lambda ns, name: name != "a") == (100.0, 100.0)  # a's Lease outlived the job
    history.forget("ns", "b")
    assert keeper.totals(later) == (200.0, 200.0)
    assert GoodputKeeper().totals(later) == (0.0, 0.0)  # an engine without the detect pipeline's readings
