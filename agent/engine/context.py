"""What every part of the engine shares: settings, the state cache, the ports, the clock, the incident store."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from agent.core.checkpoint_wait import CheckpointReading
from agent.core.clock import Clock
from agent.core.cluster import JobRecord
from agent.core.faults import Fault
from agent.core.incidents import IncidentDecodeError, IncidentStore
from agent.core.policy import Decision
from agent.core.progress import Hang, Resumed
from agent.engine.goodput import GoodputKeeper
from agent.engine.ports import ClusterWriterPort, EventSink, Metrics
from agent.engine.tasks import Tasks
from agent.engine.term import LeadershipTerm
from agent.engine.views import stored_record
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState

log = structlog.get_logger(__name__)

DETECTED_LINKS_KEPT = 10000
"""How many fault.detected incident links (:attr:`EngineContext.detected_links`) are kept, like the fault jobs."""


@dataclass(slots=True, eq=False)
class EngineContext:
    """The engine's shared parts. `store` is replaced by a fresh one at each new leadership term (a standby's
    memory is not trusted; the jobs' records are read back instead)."""

    settings: Settings
    state: ClusterState
    writer: ClusterWriterPort
    events: EventSink | None
    metrics: Metrics
    clock: Clock
    term: LeadershipTerm
    tasks: Tasks
    active_faults: Callable[[], list[Fault]] | None = None
    # told of every decision the policy makes (fault, job, decision), as it is made: the replay's output
    on_decision: Callable[[Fault, JobRecord, Decision], None] | None = None
    # fail closed: why the agent must not act now (its admission policy not in force for its identity,
    # agent.sources.admission_check), else None; None: never refused
    admission_refusal: Callable[[], str | None] | None = None
    # what the hang detector found when it raised a hang fault (DetectPipeline.hang_of), for job.hung
    hang_of: Callable[[Fault], Hang | None] | None = None
    # the first training steps seen after a restart since the last call (DetectPipeline.take_resumed)
    take_resumed: Callable[[], list[Resumed]] | None = None
    # the effective-training account (its history: the detect pipeline's heartbeat readings, DetectPipeline.progress)
    goodput: GoodputKeeper = field(default_factory=GoodputKeeper)
    # a job's heartbeat now, by (namespace, job name) (HangDetector.checkpoint_reading), for checkpoint-aware waits
    checkpoint_of: Callable[[str, str], CheckpointReading | None] | None = None
    store: IncidentStore = field(default_factory=IncidentStore)
    # job UIDs whose persisted incident state this term has read (adopted) already
    restored: set[str] = field(default_factory=set)
    # whether every job must be looked at by the next RecoveryEngine.restore_all (a new term: none restored yet)
    restore_every_job: bool = True
    # (namespace, name) of jobs whose UID left `restored` this term (unrestore): looked at by the next restore_all
    restore_again: set[tuple[str, str]] = field(default_factory=set)
    # (fault id, event subject) -> the incident the last fault.detected published for them named (None: none),
    # for the data.detected_id of their fault.cleared (the link is part of that id; bounded, oldest first)
    detected_links: dict[tuple[str, str], str | None] = field(default_factory=dict)

    def new_term(self) -> None:
        """A new leadership term starts from what the jobs' records say: a fresh :attr:`store`, no job restored
        yet (a standby's memory is not trusted)."""
        self.store = IncidentStore()
        self.restored.clear()
        self.restore_every_job = True
        self.restore_again.clear()

    def unrestore(self, job: JobRecord) -> None:
        """Adopt `job`'s persisted state again at the next restore (RecoveryEngine.restore_all)."""
        self.restored.discard(job.uid)
        self.restore_again.add((job.namespace, job.name))

    def restore(self, job: JobRecord, now: datetime | None) -> list[IncidentDecodeError]:
        """Adopt into :attr:`store` what is persisted for `job` (its record, else an earlier version's annotations
        on the job: agent.engine.views.stored_record), unless the store knows the job already; returns what could
        not be read (agent.core.incidents.IncidentStore.restore)."""
        stored = stored_record(self.state, job)
        if stored is None:
            return self.store.restore(job, now)
        return self.store.restore(job, now, incident_text=stored.incident, ledger_text=stored.ledger)

    async def submit(self, build: Callable[[], Any]) -> Awaitable[None]:
        """Hand the event `build` makes to the sink, in call order, and return what is done once it is durable
        (:class:`~agent.engine.ports.EventSink`). The caller awaits that before the step the event describes
        (acting on a fault, lifting a quarantine): an event is on disk before the agent acts on it, while the
        recovery loop goes on to the next fault without an fsync of its own per event.

        Only paths a leader entered reach here (the engine checks the term first), so leadership is not checked
        again: a replica stopping in the middle of a step (its leader flag drops before its Lease is released) has
        already written that step's incident state in the job's record, and a successor reading it would not report the
        step, so its event must still go out (a duplicate carries the same deterministic id)."""
        if self.events is None:
            return durable()
        try:
            event = build()
        except ValueError as e:  # EventBuildError: a bug in our arguments, never worth crashing for
            log.error("event not built", error=str(e))
            return durable()
        if event.get_type() == ev.FAULT_DETECTED:
            data = event.get_data()
            self.detected_links[(data["fault_id"], event.get_subject())] = data["incident_id"]
            while len(self.detected_links) > DETECTED_LINKS_KEPT:
                del self.detected_links[next(iter(self.detected_links))]
        return await self.events.submit(event)

    async def publish(self, build: Callable[[], Any]) -> None:
        """:meth:`submit` the event and wait until it is durable (for an event whose step follows at once)."""
        await (await self.submit(build))


def durable() -> asyncio.Future[None]:
    """An already-done durability future: for events not handed to a sink (none configured, not built). Called
    on the running loop (the future binds to it); the engine touches no loop clock, so no loop is read here."""
    done: asyncio.Future[None] = asyncio.Future()
    done.set_result(None)
    return done
