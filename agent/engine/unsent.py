"""Unsent incidents: a restart announced and never sent still ends, on this replica's ticks.

On the one-round-trip path (agent.engine.acting ``Acting.recover``) an incident's ``recovery.started`` is made
durable before anything of it is sent; then the job's claim (its record, the agent's own ConfigMap) and the restart
go out at once, the claim first (agent.engine.sending ``Sending._restart_with_claim``). When the lease fence refuses
that claim's first write (the fence only closes within a term, so no restart write after it was sent either), or
the act task is cancelled (the leadership lost) before the claim was handed to the writer, nothing of the incident
reached the apiserver: no job record holds it, so no successor resumes it, and a new term of this replica starts with
a fresh incident store (agent.engine.context ``EngineContext.new_term``). Its ``recovery.started`` is out, though,
and a consumer waits for the incident's end (the soak's lifecycle invariant: one terminal event per started
incident; found by the soak, seed 1710049074).

The act path tells :class:`UnsentIncidents` what happens, whichever task is running when the leadership goes
(the claim runs in a task of its own, and the act task may be cancelled while it waits for the restart): announced
(``recovery.started`` out, :meth:`~UnsentIncidents.announce`), the claim's first write handed to the writer
(:meth:`~UnsentIncidents.claim_handed`, agent.engine.claiming ``Claiming.try_claim``), then refused by the fence
(:meth:`~UnsentIncidents.claim_refused`: kept) or answered (:meth:`~UnsentIncidents.claim_answered`: forgotten, the
job's record holds it if it landed), or the act task ended first (:meth:`~UnsentIncidents.act_ended`: kept when it
was cancelled).

:class:`UnsentIncidents` keeps such incidents across leadership terms (bounded: :data:`UNSENT_KEPT`, oldest dropped)
and settles each at the ticks, leader or standby (the engine ticks on every replica; the event sink, the outbox and
its Kafka publisher, runs on every replica too: agent.runtime.app starts it before the leader election):

- the job's incident, as this term's store has it (leading) or the job's record says (watched by every replica), is
  the same incident id: a leader took it up (incident ids are deterministic: the job's UID, generation and the
  record's incident count, agent.core.incidents ``incident_id``; a successor deciding the same still-active fault on
  the same record derives the same id, and publishes the same ``recovery.started`` id): dropped, nothing published,
  the leader ends it;
- otherwise it ends as failed, ``recovery.failed`` reason ``leadership-lost``, once no leader can take it up any more
  or the recovery deadline passed: the job's record counts an incident of its own with this one's number or a later
  one (another id), the job is gone (deleted, or another UID under its name) or finished (its controller ended it,
  or it completed), or ``policy.recovery_deadline_s`` passed since the incident's first fault. It is counted as
  every ended incident is (``fault_agent_recovery_seconds`` outcome failed, ``fault_agent_recovery_failures_total``),
  logged once and dropped.

The limit: an incident ended at its deadline while its job runs on at the same generation, with no later incident in
its record, leaves that record's incident count where it was, so the job's next incident (a later fault, decided by
whoever leads then) derives the same id again: its events then share this one's ids (``recovery.started``
attempt 1 is one event id) and the incident id ends twice. Only a write of the record could move the count, and a
standby writes nothing. The ticks read the record as the watch has it then: a leader's incident of the same id that
came and went between two ticks (a replica frozen meanwhile), or a claim of it the watch has not delivered yet when
the job ends, is not seen, and this replica ends the incident too. A claim whose first write the writer retried (its
first attempt not taken: no connection, 408, 429) while the restart went out beside it, and whose retry the fence
then refused, counts as refused although the restart was sent: no record holds that incident either (a successor
takes the still-active fault as covered by the restart), and it ends here as leadership-lost. The kept incidents
live in this replica's memory only: a replica killed before it settles them leaves them without an end.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from agent.core.bookkeeping import FINISHED_PHASES
from agent.core.cluster import JobKind
from agent.core.faults import FaultKind, ObjectRef
from agent.core.incidents import Incident, IncidentDecodeError, decode_incident, decode_ledger
from agent.core.policy import controller_ended_job
from agent.engine.context import EngineContext
from agent.sinks import events as ev

log = structlog.get_logger(__name__)

UNSENT_KEPT = 256
"""How many unsent incidents :class:`UnsentIncidents` keeps (the oldest beyond it are dropped, logged)."""


@dataclass(frozen=True, slots=True)
class UnsentIncident:
    """An incident this replica opened and announced (``recovery.started``) whose restart may go out with its claim.

    Attributes:
        incident: the incident as opened (its id, job, action and ``first_fault_at``, UTC).
        seq: its number among the job's incidents (the job's ledger ``incidents`` once it opened; part of its id).
        fault_kind: the kind of the fault that opened it (the ``fault_kind`` label of ``recovery_seconds``).
    """

    incident: Incident
    seq: int
    fault_kind: FaultKind


class Verdict(enum.Enum):
    """What a tick makes of an unsent incident (:meth:`UnsentIncidents.verdict`)."""

    WAIT = "wait"  # nothing says yet: a leader may still take it up
    TAKEN_UP = "taken-up"  # a leader holds the same incident id: dropped, nothing published
    FAILED = "failed"  # no leader can take it up any more, or its deadline passed: recovery.failed


class UnsentIncidents:
    """The incidents this replica announced and never sent (see the module docstring), kept across its terms.

    Args:
        ctx: the engine's shared parts (the state cache with the job records, this term's store, the event sink,
            metrics, settings).
    """

    def __init__(self, ctx: EngineContext) -> None:
        self.ctx = ctx
        self._announced: dict[str, UnsentIncident] = {}  # by incident id: act tasks not at their claim yet
        self._claiming: dict[str, UnsentIncident] = {}  # by incident id: the claim's first write with the writer
        self._kept: dict[str, UnsentIncident] = {}  # by incident id, oldest first

    def __len__(self) -> int:
        return len(self._kept)

    def ids(self) -> tuple[str, ...]:
        """The incidents kept, oldest first."""
        return tuple(self._kept)

    def announce(self, unsent: UnsentIncident) -> None:
        """`unsent`'s ``recovery.started`` is out and its act task has not handed its claim to the writer yet
        (agent.engine.acting ``Acting.recover``); not settled while so."""
        self._announced[unsent.incident.id] = unsent

    def claim_handed(self, incident_id: str) -> None:
        """The first write of `incident_id`'s claim goes to the writer now (agent.engine.claiming): from here it may
        be sent. Nothing happens for an incident not announced (one resumed, escalated, or claimed before its
        restart); one kept because its act task was cancelled first is taken back (its claim may still land)."""
        unsent = self._announced.pop(incident_id, None) or self._kept.pop(incident_id, None)
        if unsent is not None:
            self._claiming[incident_id] = unsent

    def claim_refused(self, incident_id: str) -> None:
        """The lease fence refused that first write: nothing of the incident was sent (the claim goes first, and the
        fence only closes within a term). Kept, whatever the act task does next."""
        unsent = self._claiming.pop(incident_id, None)
        if unsent is not None:
            log.warning(
                "no longer the leader: nothing of the incident was sent (its claim refused by the lease "
                "fence); its end is settled at the ticks unless a leader takes it up",
                incident=incident_id,
            )
            self.keep(unsent)

    def claim_answered(self, incident_id: str) -> None:
        """That first write was sent (answered, or cut short in flight): if it landed, the job's record holds the
        incident and whoever leads resumes it; forgotten here."""
        self._claiming.pop(incident_id, None)

    def act_ended(self, incident_id: str, *, cancelled: bool) -> None:
        """`incident_id`'s act task ended (`cancelled`: by the leadership lost, or the agent stopping). Cancelled
        before its claim was handed to the writer (even before its first step), nothing of the incident was sent:
        kept. Ended otherwise before that (a failure of its own: the term resumes it), forgotten here."""
        unsent = self._announced.pop(incident_id, None)
        if unsent is not None and cancelled:
            log.warning("stopped acting before anything was sent; the incident's end is settled at the ticks",
                        incident=incident_id)  # fmt: skip
            self.keep(unsent)

    def keep(self, unsent: UnsentIncident) -> None:
        """Keep `unsent` until a tick settles it (the same id again replaces it: one end per incident id)."""
        self._kept.pop(unsent.incident.id, None)
        self._kept[unsent.incident.id] = unsent
        while len(self._kept) > UNSENT_KEPT:
            oldest = self._kept.pop(next(iter(self._kept)))
            log.warning("unsent incident dropped unsettled: too many kept", incident=oldest.incident.id,
                        kept=UNSENT_KEPT)  # fmt: skip

    def verdict(self, unsent: UnsentIncident, now: datetime, *, leading: bool) -> tuple[Verdict, str]:
        """What `unsent` is at `now` (engine clock, UTC), and why (a sentence for the event's detail): see the
        module docstring. `leading`: this replica leads, so its store is this term's (a standby's is stale)."""
        ctx = self.ctx
        incident = unsent.incident
        uid = incident.job_uid
        known, counted = self._job_incidents(uid, leading=leading)
        if incident.id in known:
            return Verdict.TAKEN_UP, "a leader took the incident up"
        if counted >= unsent.seq:
            later = ", ".join(sorted(i for i in known if i)) or "none open"
            return Verdict.FAILED, f"the job's record counts {counted} incidents (its incident: {later})"
        job = ctx.state.job(JobKind(incident.kind), incident.namespace, incident.name)
        if job is None or job.uid != uid:
            return Verdict.FAILED, "the job is gone"
        ended = controller_ended_job(job)
        if ended is not None:
            return Verdict.FAILED, ended
        if job.phase in FINISHED_PHASES:
            return Verdict.FAILED, f"the job is {job.phase}"
        deadline = timedelta(seconds=ctx.settings.policy.recovery_deadline_s)
        if now - incident.first_fault_at > deadline:
            return Verdict.FAILED, f"policy.recovery_deadline_s ({deadline.total_seconds():g} s) passed"
        return Verdict.WAIT, ""

    def _job_incidents(self, job_uid: str, *, leading: bool) -> tuple[set[str], int]:
        """The job's incident ids and the highest incident count of its ledger, as the job's record says (the
        watch's last delivery; a record that cannot be read counts as none) and, when leading, as this term's store
        has them (it restored the record, or opened an incident the record does not show yet; a standby's store
        is an ended term's)."""
        ctx = self.ctx
        known: set[str] = set()
        counted = 0
        if leading:
            current = ctx.store.incident(job_uid)
            if current is not None:
                known.add(current.id)
            counted = ctx.store.ledger(job_uid).incidents
        record = ctx.state.job_record(job_uid)
        if record is not None:
            try:
                if record.incident:
                    known.add(decode_incident(record.incident).id)
                if record.ledger:
                    counted = max(counted, decode_ledger(record.ledger).incidents)
            except IncidentDecodeError as e:
                log.info("job record not read for an unsent incident", job_uid=job_uid, error=str(e))
        return known, counted

    async def settle(self, now: datetime, *, leading: bool) -> int:
        """Settle every kept incident at `now` (engine clock, UTC): drop those a leader took up, end the others
        whose :meth:`verdict` is FAILED (``recovery.failed`` reason ``leadership-lost``, counted, logged once).
        Returns how many ended."""
        ended = 0
        for unsent in list(self._kept.values()):
            verdict, why = self.verdict(unsent, now, leading=leading)
            if verdict is Verdict.WAIT:
                continue
            if verdict is Verdict.FAILED:
                await self._fail(unsent, now, why)  # raised on (the event not taken): kept, tried at the next tick
                ended += 1
            else:
                log.info("unsent incident taken up by a leader: its end is the leader's", incident=unsent.incident.id)
            self._kept.pop(unsent.incident.id, None)
        return ended

    async def _fail(self, unsent: UnsentIncident, now: datetime, why: str) -> None:
        ctx = self.ctx
        incident = unsent.incident
        reason = ev.FailureReason.LEADERSHIP_LOST
        detail = f"the lease ran out before the restart was sent; no leader took the incident up: {why}"[:300]
        seconds = max(0.0, (now - incident.first_fault_at).total_seconds())
        action = incident.action or "none"
        ref = ObjectRef(incident.kind, incident.namespace, incident.name, incident.job_uid)
        await ctx.publish(
            lambda: ev.recovery_failed(
                incident.id, ref, reason, cluster=ctx.settings.cluster_name, at=now, action=incident.action,
                detail=detail,
            )
        )  # fmt: skip
        log.warning("recovery failed: the restart was never sent", incident=incident.id, reason=reason.value,
                    job=f"{incident.namespace}/{incident.name}", detail=detail)  # fmt: skip
        ctx.metrics.recovery_failed(incident.kind, reason.value)
        ctx.metrics.recovery(incident.kind, unsent.fault_kind.value, action, "failed", seconds)
