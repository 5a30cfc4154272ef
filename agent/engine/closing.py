"""Closing: how an incident's end is counted, and how a restart that failed ends its incident."""

from __future__ import annotations

from collections import OrderedDict
from datetime import datetime

from agent.core.cluster import JobRecord
from agent.core.incidents import Incident, Phase
from agent.engine.claiming import Claiming
from agent.engine.context import EngineContext
from agent.engine.inflight import RestartsInFlight
from agent.engine.views import job_object
from agent.sinks import events as ev

COUNTED_KEPT = 4096
"""How many ended incidents' ids :class:`Closing` remembers to count each once (the oldest forgotten first)."""


class Closing:
    """Counts closed incidents and fails the incidents whose restart failed.

    Args:
        ctx: the engine's shared parts (store, metrics, events).
        inflight: told of each incident that closed (:meth:`RestartsInFlight.finish`).
        claiming: persists a failed incident in its job's record.
    """

    def __init__(self, ctx: EngineContext, inflight: RestartsInFlight, claiming: Claiming) -> None:
        self.ctx = ctx
        self.inflight = inflight
        self.claiming = claiming
        # ids of the incidents counted, across terms: one process counts an incident's end once
        self._counted: OrderedDict[str, None] = OrderedDict()

    def finished(self, incident: Incident, job: JobRecord) -> None:
        """Count a closed incident: ``recovery_seconds`` by outcome (labelled with the kind of the fault that
        opened it), and the incidents still open; the restart is no longer in flight.

        An incident this process counted already is not sampled again: its end's record write can go out unconfirmed
        as the lease runs out (the answer lost, the retry refused by the fence), and the next term adopts it from a
        record that still says it is open and ends it again, under the same event id (the soak at 498e821, seed
        247409195: 10 samples for 9 incidents ended)."""
        seconds = ((incident.closed_at or incident.first_fault_at) - incident.first_fault_at).total_seconds()
        kind = self.inflight.finish(incident.id, incident.action)
        outcome = "recovered" if incident.phase is Phase.RECOVERED else "failed"
        if incident.id not in self._counted:
            self._counted[incident.id] = None
            while len(self._counted) > COUNTED_KEPT:
                self._counted.popitem(last=False)
            self.ctx.metrics.recovery(job.kind.value, kind.value, incident.action or "none", outcome, seconds)
        self.ctx.metrics.incidents_open(*self.ctx.store.counts())

    async def action_failed(self, job: JobRecord, now: datetime, action: str, detail: str) -> None:
        """The restart or resubmission failed (or never went out: agent.engine.ticking): the incident fails, is
        persisted and reported (``recovery.failed`` reason ``action-error``).

        Raises:
            NotLeader: the lease fence closed before the record was written.
        """
        ctx = self.ctx
        failed = ctx.store.fail(job.uid, now, detail)
        await self.claiming.persist(job, failed.id)
        ctx.metrics.recovery_failed(job.kind.value, ev.FailureReason.ACTION_ERROR.value)
        await ctx.publish(
            lambda: ev.recovery_failed(
                failed.id, job_object(job), ev.FailureReason.ACTION_ERROR, cluster=ctx.settings.cluster_name,
                at=now, action=action, detail=detail,
            )
        )  # fmt: skip
        self.finished(failed, job)
