"""A hang (agent.core.progress) through the production path: the detect pipeline's Lease source and tick, the
engine's decision, the acting code against a fake writer, the job.hung event. A hang and a hardware fault on the
same job make one incident and one restart, whichever comes first."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import change
from support.fakes import CountingWriter, ListSink

from agent.core.clock import FixedClock
from agent.core.faults import Fault, FaultCleared
from agent.core.progress import HANG_TIMEOUT_LABEL, PROGRESS_LABEL, STEP_ANNOTATION, LeaseRecord, is_hang
from agent.engine.detecting import DetectPipeline
from agent.engine.ports import NoMetrics
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 100}})
LEASE_KEY = "ns/fault-agent-progress-job"


class StepMetrics(NoMetrics):
    def __init__(self) -> None:
        self.first_steps: list[tuple[str, float]] = []

    def time_to_first_step(self, job_kind: str, seconds: float) -> None:
        self.first_steps.append((job_kind, seconds))


def _lease(step: int) -> LeaseRecord:
    return LeaseRecord("ns", "fault-agent-progress-job", "uid-lease", str(step), "job", "job-0", NOW, 3,
                       ((STEP_ANNOTATION, str(step)),))  # fmt: skip


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
        self.engine.ctx.hang_of = self.pipeline.hang_of
        self.engine.ctx.take_resumed = self.pipeline.take_resumed
        self.metrics = StepMetrics()
        self.engine.ctx.metrics = self.metrics
        self.apply(change("nodes", "n1", factories.node("n1", at=NOW)))
        self.apply(change("nodes", "n2", factories.node("n2", at=NOW)))
        job = factories.job(labels={"fault-scheduling": "force", **labels}, fault_retry_times=3, created_at=NOW)
        self.apply(change("vcjobs", "ns/job", job))
        for i, node in enumerate(("n1", "n2")):
            pod = factories.pod(f"job-{i}", node=node, chips=("Ascend910-0",), rank=i, created_at=NOW)
            self.apply(change("pods", f"ns/job-{i}", pod))

    def apply(self, c: object) -> None:
        self.state.apply(c)  # type: ignore[arg-type]
        self.pipeline(c)  # type: ignore[arg-type]

    def at(self, seconds: float) -> datetime:
        self.clock.set(NOW + timedelta(seconds=seconds))
        return self.clock.now()

    def step(self, seconds: float, step: int) -> None:
        self.at(seconds)
        self.apply(change("leases", LEASE_KEY, _lease(step)))

    async def tick(self, seconds: float) -> None:
        now = self.at(seconds)
        self.pipeline.tick()
        await self.drain(now)
        await self.engine.tick(now)
        await self.engine.idle()

    async def drain(self, now: datetime) -> None:
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if isinstance(item, FaultCleared):
                await self.engine.handle_cleared(item)
            else:
                await self.engine.handle_fault(item, now)
        await self.engine.idle()

    def hung_events(self) -> list[dict[str, object]]:
        return [ev.as_json(e)["data"] for e in self.sink.events if ev.as_json(e)["type"] == ev.JOB_HUNG]


async def _heartbeating(h: Harness) -> None:
    h.step(0, 10)
    await h.tick(1)  # the job's restart counter seen: waits for the first step
    h.step(2, 11)  # armed


async def test_a_hang_restarts_the_job_once_and_says_so() -> None:
    h = Harness({PROGRESS_LABEL: "lease", HANG_TIMEOUT_LABEL: "30"})
    await _heartbeating(h)
    await h.tick(31)
    assert h.writer.messages == []
    await h.tick(32)
    assert len(h.writer.messages) == 1
    (data,) = h.hung_events()
    incident = h.engine.store.incident("uid-job")
    assert incident is not None
    assert (data["action"], data["step"], data["timeout_s"], data["incident_id"]) == (
        "restart-job",
        11,
        30.0,
        incident.id,
    )
    assert h.engine.store.ledger("uid-job").business_retries_used == 1
    await h.tick(100)
    assert len(h.writer.messages) == 1
    await h.api.close()


async def test_no_hang_for_a_job_that_did_not_opt_in() -> None:
    h = Harness({HANG_TIMEOUT_LABEL: "30"})  # a Lease, but no fault-agent.io/progress label on the job
    await _heartbeating(h)
    await h.tick(1000)
    assert h.writer.messages == []
    assert h.hung_events() == []
    await h.api.close()


@pytest.mark.parametrize("hardware_first", [True, False], ids=["chip-fault-then-hang", "hang-then-chip-fault"])
async def test_a_hang_and_a_hardware_fault_on_its_node_are_one_incident(hardware_first: bool) -> None:
    h = Harness({PROGRESS_LABEL: "lease", HANG_TIMEOUT_LABEL: "30"})
    await _heartbeating(h)
    chip = factories.fault(node="n1", chips=("Ascend910-0",), at=NOW + timedelta(seconds=20))
    if hardware_first:
        await h.tick(20)
        await h.engine.handle_fault(chip, h.at(20))
        await h.engine.idle()
        await h.tick(32)  # the training hangs behind the dead chip
    else:
        await h.tick(32)
        await h.engine.handle_fault(chip, h.at(33))
        await h.engine.idle()
    assert len(h.writer.messages) == 1
    (data,) = h.hung_events()
    incident = h.engine.store.incident("uid-job")
    assert incident is not None
    assert data["incident_id"] == incident.id
    assert data["action"] == ("joined" if hardware_first else "restart-job")
    hangs = [f for f in h.pipeline.active_faults() if is_hang(f)]
    assert len(hangs) == 1
    await h.api.close()


async def test_the_first_step_after_the_hangs_restart_is_recovery_resumed() -> None:
    h = Harness({PROGRESS_LABEL: "lease", HANG_TIMEOUT_LABEL: "30"})
    await _heartbeating(h)
    await h.tick(32)
    assert len(h.writer.messages) == 1
    incident = h.engine.store.incident("uid-job")
    assert incident is not None
    assert incident.restart_at == h.at(32)
    # Volcano restarted the job: a new generation; its training loads a checkpoint, then steps
    job = h.state.vcjobs["ns/job"]
    h.apply(change("vcjobs", "ns/job", dataclasses.replace(job, version="1")))
    await h.tick(33)
    await h.tick(80)
    assert h.writer.messages == [h.writer.messages[0]]  # no hang before the first step
    h.step(90, 5)
    await h.tick(91)
    resumed = [ev.as_json(e)["data"] for e in h.sink.events if ev.as_json(e)["type"] == ev.RECOVERY_RESUMED]
    assert len(resumed) == 1
    assert resumed[0]["incident_id"] == incident.id
    assert resumed[0]["time_to_first_step_s"] == 58.0
    assert resumed[0]["step"] == 5
    assert h.metrics.first_steps == [("vcjob", 58.0)]
    await h.api.close()


async def test_a_first_step_written_before_the_tick_sees_the_restart_is_the_resume() -> None:
    """The restart counter moves and the restarted job's first step arrives before the once-a-second tick: that
    step is the resume (the old code waited past it and counted the next heartbeat write's, seconds late)."""
    h = Harness({PROGRESS_LABEL: "lease", HANG_TIMEOUT_LABEL: "30"})
    await _heartbeating(h)
    await h.tick(32)
    incident = h.engine.store.incident("uid-job")
    assert incident is not None
    assert incident.restart_at == h.at(32)
    job = h.state.vcjobs["ns/job"]
    h.at(33)
    h.apply(change("vcjobs", "ns/job", dataclasses.replace(job, version="1")))
    h.step(33.5, 5)  # the first step, no tick in between
    await h.tick(34)
    h.step(36, 6)  # the next heartbeat write
    await h.tick(37)
    resumed = [ev.as_json(e)["data"] for e in h.sink.events if ev.as_json(e)["type"] == ev.RECOVERY_RESUMED]
    assert [(r["step"], r["time_to_first_step_s"]) for r in resumed] == [(5, 1.5)]
    assert h.metrics.first_steps == [("vcjob", 1.5)]
    await h.api.close()
