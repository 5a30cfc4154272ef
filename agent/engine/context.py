"""What every part of the engine shares: settings, the state cache, the ports, the clock, the incident store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from agent.core.clock import Clock
from agent.core.faults import Fault
from agent.core.incidents import IncidentStore
from agent.engine.ports import ClusterWriterPort, EventSink, Metrics
from agent.engine.tasks import Tasks
from agent.engine.term import LeadershipTerm
from agent.settings import Settings
from agent.sources.state import ClusterState

log = structlog.get_logger(__name__)


@dataclass(slots=True, eq=False)
class EngineContext:
    """The engine's shared parts. `store` is replaced by a fresh one at each new leadership term (a standby's
    memory is not trusted; the jobs' annotations are read back instead)."""

    settings: Settings
    state: ClusterState
    writer: ClusterWriterPort
    events: EventSink | None
    metrics: Metrics
    clock: Clock
    term: LeadershipTerm
    tasks: Tasks
    active_faults: Callable[[], list[Fault]] | None = None
    store: IncidentStore = field(default_factory=IncidentStore)
    # job UIDs whose persisted incident state this term has read (adopted) already
    restored: set[str] = field(default_factory=set)

    async def publish(self, build: Callable[[], Any]) -> None:
        """Publish the event `build` makes. Only paths a leader entered reach here (the engine checks the term
        first), so leadership is not checked again: a replica stopping in the middle of a step (its leader flag
        drops before its Lease is released) has already written that step's incident state on the job, and a
        successor reading it would not report the step, so its event must still go out (a duplicate carries the
        same deterministic id)."""
        if self.events is None:
            return
        try:
            event = build()
        except ValueError as e:  # EventBuildError: a bug in our arguments, never worth crashing for
            log.error("event not built", error=str(e))
            return
        await self.events.publish(event)
