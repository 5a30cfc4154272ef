"""Checkpoint-aware graceful waits (agent.core.checkpoint_wait): the check each wait polls, and how each wait
ended, kept for the ``recovery.succeeded`` event's ``grace_wait`` and counted in ``fault_agent_grace_wait_seconds``.

The job's heartbeat is read from the hang detector's state through :attr:`EngineContext.checkpoint_of` (a dict
read, no I/O); without it (no progress watch, a job that did not opt in, no Lease) no check is made and every wait
runs as it did before.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from agent.core.checkpoint_wait import (
    CheckpointBaseline,
    CheckpointReading,
    GraceWait,
    GraceWaitOutcome,
    WaitEnded,
    baseline,
    checkpoint_after_fault,
)
from agent.core.cluster import JobRecord
from agent.core.incidents import Incident, Phase
from agent.core.progress import PROGRESS_LABEL, PROGRESS_LEASE
from agent.engine.context import EngineContext

log = structlog.get_logger(__name__)

OUTCOMES_KEPT = 4096
"""How many incidents' wait outcomes :class:`CheckpointWaits` keeps until their ``recovery.succeeded`` (oldest go
first: an incident that never recovers must not hold its entry forever)."""


class CheckpointWaits:
    """The checks of the waits in flight and the outcomes of those that ended (by incident id)."""

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self.outcomes: dict[str, list[GraceWaitOutcome]] = {}

    def reading(self, job: JobRecord) -> CheckpointReading | None:
        """`job`'s heartbeat now; None when the job has not opted in (``fault-agent.io/progress: lease``) or the
        agent follows no Lease of it."""
        if self.ctx.checkpoint_of is None or job.label(PROGRESS_LABEL) != PROGRESS_LEASE:
            return None
        return self.ctx.checkpoint_of(job.namespace, job.name)

    def check(self, job: JobRecord, incident: Incident) -> Callable[[], bool] | None:
        """What a wait for `job` beginning now polls: whether its heartbeat reports a checkpoint newer than the
        fault (agent.core.checkpoint_wait.checkpoint_after_fault), the fault's time being when the agent acted on
        `incident` (its ``acting`` step, the agent's clock; its first fault's time when it has none). None: no
        signal, no check."""
        fault_at = incident.at(Phase.ACTING) or incident.first_fault_at
        base: CheckpointBaseline | None = baseline(self.reading(job), fault_at)
        if base is None:
            return None
        log.info("graceful wait: it also ends at a checkpoint newer than the fault", incident=incident.id,
                 job=f"{job.namespace}/{job.name}", step=base.step)  # fmt: skip

        def checkpointed() -> bool:
            return checkpoint_after_fault(base, self.reading(job))

        return checkpointed

    def ended(self, job: JobRecord, incident_id: str, wait: GraceWait, ended: WaitEnded, waited_s: float) -> None:
        """Record how `incident_id`'s `wait` ended: counted, logged, kept for its ``recovery.succeeded``."""
        step = None
        if ended is WaitEnded.CHECKPOINT:
            reading = self.reading(job)
            step = reading.checkpoint_step if reading is not None else None
        outcome = GraceWaitOutcome(wait, ended, max(0.0, waited_s), step)
        self.ctx.metrics.grace_wait(wait.value, ended.value, outcome.waited_s)
        log.info("graceful wait ended", incident=incident_id, wait=wait.value, ended=ended.value,
                 waited_s=round(outcome.waited_s, 2), checkpoint_step=step)  # fmt: skip
        self.outcomes[incident_id] = [*self.outcomes.pop(incident_id, []), outcome]
        while len(self.outcomes) > OUTCOMES_KEPT:
            del self.outcomes[next(iter(self.outcomes))]

    def take(self, incident_id: str) -> list[GraceWaitOutcome]:
        """The outcomes of `incident_id`'s waits, in order (then forgotten); empty when it had none (or they were
        forgotten: a new leader does not know the waits of the last one)."""
        return self.outcomes.pop(incident_id, [])
