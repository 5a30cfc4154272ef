"""Faults queued together share the outbox's write + fsync rounds (group commit): the recovery loop hands each
fault's events to the sink and goes on to the next fault; the act task of each job waits for its fault.detected and
recovery.started to be durable before its claim and restart go out (together). Regression: the loop awaited
each event's fsync before the next fault, so N queued faults took N commit rounds (the scale benchmark's fault →
Command p99 went from 1.9 s to 30 s)."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio import client as k8s
from support.fakes import PerJobWriter
from test_app_concurrent_actions import NOW, _fault, _state

from agent.actions import ActionResult
from agent.core.cluster import JobRef
from agent.engine.recovery import RecoveryEngine
from agent.engine.tasks import Tasks
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sinks import events as ev

JOBS = [f"job-{i}" for i in range(20)]


class GroupCommitSink:
    """An event sink whose events become durable only when the test runs a commit round (:meth:`commit`), as the
    Kafka publisher's group commit makes everything submitted so far durable in one write + fsync."""

    def __init__(self) -> None:
        self.submitted: list[Any] = []
        self.durable: list[dict[str, Any]] = []
        self.rounds = 0
        self._waiting: list[tuple[Any, asyncio.Future[None]]] = []

    async def submit(self, event: Any) -> asyncio.Future[None]:
        self.submitted.append(event)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((event, done))
        return done

    def commit(self) -> int:
        """One round: everything submitted so far is durable. Returns the events it made durable."""
        batch, self._waiting = self._waiting, []
        if batch:
            self.rounds += 1
        for event, done in batch:
            self.durable.append(ev.as_json(event))
            if not done.done():
                done.set_result(None)
        return len(batch)


class CheckingWriter(PerJobWriter):
    """Records, when a job is claimed and when its Command is sent, which of its events were durable then."""

    def __init__(self, api: k8s.ApiClient, sink: GroupCommitSink) -> None:
        super().__init__(api)
        self.sink = sink
        self.at_claim: dict[str, list[str]] = {}
        self.at_command: dict[str, list[str]] = {}

    async def claim_record(self, job: JobRef, data: Any, *, resource_version: str, incident: str) -> ActionResult:
        self.at_claim[job.name] = self._types(job.name)
        return await super().claim_record(job, data, resource_version=resource_version, incident=incident)

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        self.at_command[job.name] = self._types(job.name)
        return await super().restart_command(job, incident=incident, reason=reason, message=message)

    def _types(self, job: str) -> list[str]:
        return [e["type"] for e in self.sink.durable if e.get("subject") == f"ns/{job}"]


async def _settle() -> None:
    """Let every task run until it waits for something the test controls (a commit round)."""
    for _ in range(30):
        await asyncio.sleep(0)


async def test_queued_faults_share_commit_rounds_and_each_event_is_durable_before_its_step() -> None:
    settings = Settings.model_validate(
        {"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50, "restart_burst": 100}}
    )
    api = k8s.ApiClient()
    sink = GroupCommitSink()
    writer = CheckingWriter(api, sink)
    queue: asyncio.Queue[Any] = asyncio.Queue()
    for job in JOBS:  # all queued before the loop takes the first (a burst, or a loop that fell behind)
        queue.put_nowait(_fault(job))
    async with asyncio.TaskGroup() as tg:
        engine = RecoveryEngine(
            settings, _state(JOBS), writer, events=sink, tasks=Tasks(tg.create_task), clock=SystemClock()
        )

        async def recovery_loop() -> None:  # what agent.runtime.app._recovery_loop does with each item
            while not queue.empty():
                await engine.handle_fault(queue.get_nowait(), NOW)

        loop = tg.create_task(recovery_loop())
        for _ in range(4 * len(JOBS)):
            await _settle()
            if len(writer.sent) == len(JOBS):
                break
            sink.commit()
        await loop
    await api.close()
    assert sorted(writer.sent) == sorted(JOBS)
    # fault.detected and recovery.started are handed over together (the claim goes out with the restart, one
    # round trip): one round makes both durable for every queued fault, not one round per fault or per event
    assert sink.rounds <= 2, f"{sink.rounds} commit rounds for {len(JOBS)} queued faults"
    for job in JOBS:
        assert writer.at_claim[job] == ["io.faultagent.fault.detected.v1", "io.faultagent.recovery.started.v1"], job
        assert writer.at_command[job] == ["io.faultagent.fault.detected.v1", "io.faultagent.recovery.started.v1"], job
