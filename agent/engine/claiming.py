"""Claiming: the decisive write of a job's record before its restart, and the writes of the record after it.

A job's record is a ConfigMap of the agent's (agent.core.records; never the job object) holding its incident,
ledger and the ``actor`` (``<identity>#<term>``) that last claimed it. The claim is conditioned so that two
replicas never both believe they own the job's restart (agent.core.fence); :meth:`Claiming.persist` writes the
record's incident and ledger as they stand without touching the actor.
"""

from __future__ import annotations

import enum

import structlog

from agent.actions import Outcome, error_detail
from agent.core.cluster import JobRecord
from agent.core.fence import NotLeader, may_claim
from agent.core.records import record_data
from agent.engine.context import EngineContext
from agent.engine.inflight import RestartsInFlight
from agent.engine.unsent import UnsentIncidents
from agent.engine.views import job_ref, stored_record
from agent.kube.errors import KubeError

log = structlog.get_logger(__name__)

CLAIM_TRIES = 4
"""How many times a claim that met a 409 (the record exists, or changed since) is tried before giving up."""


class ClaimResult(enum.Enum):
    CLAIMED = "claimed"
    OTHER_ACTOR = "other-actor"  # another actor appeared in the job's record during this term
    NOT_CLAIMED = "not-claimed"  # the write failed, or the job kept changing


class Claiming:
    """Claims jobs and persists their records.

    Args:
        ctx: the engine's shared parts (writer, store, term, watch cache).
        inflight: told why a restart was not sent when a claim fails (:meth:`RestartsInFlight.mark_unsent`).
        unsent: told when a claim's first write is handed to the writer and how it ended (agent.engine.unsent: an
            announced incident whose claim the lease fence refused was sent nowhere). None: nobody is told.
    """

    def __init__(self, ctx: EngineContext, inflight: RestartsInFlight, unsent: UnsentIncidents | None = None) -> None:
        self.ctx = ctx
        self.inflight = inflight
        self.unsent = unsent

    async def claim(self, job: JobRecord, incident_id: str) -> bool:
        """The decisive write before any restart of `job` that is not sent with its restart (agent.core.fence;
        :meth:`try_claim`): when another actor appeared on the job's record, this replica drops its own incident
        and adopts the record's (the tick resumes it). Returns whether the job is claimed (dry-run counts as
        claimed).

        Raises:
            NotLeader: the lease fence closed before the write was sent.
        """
        claimed = await self.try_claim(job, incident_id)
        if claimed is ClaimResult.OTHER_ACTOR:
            self.adopt_other(job)
        return claimed is ClaimResult.CLAIMED

    def adopt_other(self, job: JobRecord) -> None:
        """Drop this replica's incident of `job`: the record's (another actor's) is adopted at the next tick."""
        self.ctx.store.forget(job.uid)
        self.ctx.unrestore(job)

    async def try_claim(self, job: JobRecord, incident_id: str) -> ClaimResult:
        """Write the job's incident and ledger plus ``actor`` = this term's actor into the job's record: created
        when the watch shows no record (an earlier version's annotations on the job count as none: the claim
        migrates them), else replaced with the record's resourceVersion as the watch last delivered it as
        precondition. A 409 (the record exists, or changed since) reads the record again and claims again while no
        other actor has appeared on it (agent.core.fence.may_claim; no record at all is no other actor: only a
        job's deletion removes one), up to CLAIM_TRIES times. A claim not made is marked unsent with its reason.

        The first write's fate goes to agent.engine.unsent (``claim_handed``, then ``claim_refused`` when the lease
        fence refused it, else ``claim_answered``): for an incident announced before its claim, a refused first
        write means that nothing of it was sent.

        Raises:
            NotLeader: the lease fence closed before a write was sent.
        """
        ctx = self.ctx
        ref = job_ref(job)
        mine = ctx.term.actor()
        expected = {ctx.term.actor_baseline.get(job.uid), None}
        stored = stored_record(ctx.state, job)
        current = (stored.actor or None) if stored is not None else None
        version = "" if stored is None or stored.legacy else stored.resource_version
        for attempt in range(CLAIM_TRIES):
            if not may_claim(current, expected, mine):
                log.warning(
                    "another replica claimed this job during this term; adopting its incident instead",
                    incident=incident_id, job=f"{job.namespace}/{job.name}", actor=current,
                )  # fmt: skip
                return ClaimResult.OTHER_ACTOR
            data = record_data(*ctx.store.encoded(job.uid), mine)
            if attempt == 0 and self.unsent is not None:
                self.unsent.claim_handed(incident_id)
            try:
                result = await ctx.writer.claim_record(ref, data, resource_version=version, incident=incident_id)
            except NotLeader:
                if attempt == 0 and self.unsent is not None:  # nothing of this claim was sent
                    self.unsent.claim_refused(incident_id)
                raise
            except BaseException:  # it may have been sent (cut short, a lost answer): as answered
                if attempt == 0 and self.unsent is not None:
                    self.unsent.claim_answered(incident_id)
                raise
            if attempt == 0 and self.unsent is not None:
                self.unsent.claim_answered(incident_id)
            if result.outcome in (Outcome.DONE, Outcome.DRY_RUN):
                return ClaimResult.CLAIMED  # the baseline stays: the cache may still show it
            if result.status != 409:
                log.warning("job not claimed; not restarting it now", incident=incident_id, detail=result.detail)
                self.inflight.mark_unsent(incident_id, f"claim failed: {result.detail}")
                return ClaimResult.NOT_CLAIMED
            try:
                record = await ctx.writer.read_record(ref)
            except KubeError as e:  # not re-read: the incident stays unsent, the tick tries the claim again
                log.warning("job record not re-read after a conflict", incident=incident_id, error=error_detail(e))
                self.inflight.mark_unsent(
                    incident_id, f"record not re-read after a claim's conflict: {error_detail(e)}"
                )
                return ClaimResult.NOT_CLAIMED
            version = "" if record is None else record.resource_version
            current = None if record is None else (record.actor or None)
        log.warning("job record kept changing; not claimed", incident=incident_id)
        self.inflight.mark_unsent(incident_id, f"job record kept changing: not claimed after {CLAIM_TRIES} conflicts")
        return ClaimResult.NOT_CLAIMED

    async def persist(self, job: JobRecord, incident_id: str) -> None:
        """Write the job's incident and ledger into its record (agent.core.records; the actor is kept). A failed
        write is logged: the record says what it said before, which a successor resumes from."""
        ctx = self.ctx
        data = record_data(*ctx.store.encoded(job.uid), "")
        result = await ctx.writer.write_record(job_ref(job), data, incident=incident_id)
        if result.outcome is Outcome.FAILED:
            log.warning("incident state not persisted", incident=incident_id, detail=result.detail)
