"""The incident store: each job's open (or last closed) incident and its retry ledger, by job UID. Pure.

The single place that decides "already handled": :meth:`IncidentStore.admit` joins a fault to the job's open
incident, or says it is stale or new; the engine opens, advances and closes incidents through the store's named
steps (``open``, ``hold``, ``restarting``, ``escalate``, ``resubmitted``, ``observe``, ``fail``), each a lifecycle
step of agent.core.incidents.lifecycle, and persists :meth:`IncidentStore.encoded` in the job's record. Times are
passed in (UTC datetimes). Errors: :class:`~agent.core.incidents.lifecycle.TransitionError` for a step the
lifecycle does not allow; unreadable persisted text is returned as
:class:`~agent.core.incidents.wire.IncidentDecodeError` values, never raised.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from agent.core.cluster import JobKind, JobRecord, PodRecord
from agent.core.faults import Fault
from agent.core.incidents.lifecycle import Incident, Phase, TransitionError, incident_id
from agent.core.incidents.recovery import recovered
from agent.core.incidents.wire import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    RESUBMIT_COUNT_ANNOTATION,
    IncidentDecodeError,
    check_incident,
    decode_incident,
    decode_ledger,
    encode_incident,
    encode_ledger,
)
from agent.core.policy import Action, Decision, RetryLedger, controller_ended_job

MAX_JOINED_KEPT = 256  # faults that joined an open incident, kept in memory to decide again when it closes


class Admission(enum.StrEnum):
    """What :meth:`IncidentStore.admit` made of a fault."""

    NEW = "new"  # no open incident: the caller decides, then opens one if it acts
    JOINED = "joined"  # joined the open incident: nothing more to do
    HELD = "held"  # the job's incident is held by the breaker: the caller joins it (breaker open) or decides
    STALE = "stale"  # older than the job's last closed incident of the same generation: ignore


@dataclass(slots=True)
class _Entry:
    ledger: RetryLedger = field(default_factory=RetryLedger)
    incident: Incident | None = None  # the open one, or the last closed one
    # faults that joined the open incident, by (fault key, pod): decided again when it closes (in memory only)
    joined: dict[tuple[Any, ...], Fault] = field(default_factory=dict)

    def remember(self, fault: Fault) -> None:
        key = (fault.key, fault.pod)
        self.joined.pop(key, None)
        self.joined[key] = fault
        while len(self.joined) > MAX_JOINED_KEPT:
            del self.joined[next(iter(self.joined))]


def _unrecorded_restart_after(job: JobRecord, ledger: RetryLedger, fault: Fault, pods: Sequence[PodRecord]) -> bool:
    """A restart of the Volcano `job` that no incident records (its ``retryCount`` above `ledger`'s
    ``restarts_used``) came after `fault`: every pod in `pods` was created at or after the fault's own second
    (see :meth:`IncidentStore.covers`)."""
    if job.kind is not JobKind.VOLCANO or job.retry_count <= ledger.restarts_used or not pods:
        return False
    since = fault.signal_time.replace(microsecond=0)
    return all(p.created_at is not None and p.created_at >= since for p in pods)


class IncidentStore:
    """Incidents and retry ledgers of all jobs, by job UID. In memory; the engine persists what :meth:`encoded`
    returns in the job's record after each change, and :meth:`restore` reads it back."""

    def __init__(self) -> None:
        self._jobs: dict[str, _Entry] = {}

    def restore(
        self,
        job: JobRecord,
        now: datetime | None = None,
        *,
        incident_text: str | None = None,
        ledger_text: str | None = None,
    ) -> list[IncidentDecodeError]:
        """Adopt the incident and ledger persisted for `job` (`incident_text`, `ledger_text`: the job record's
        ``incident`` and ``ledger``, agent.core.records, "" for none; both None: an earlier version's
        :data:`INCIDENT_ANNOTATION` and :data:`LEDGER_ANNOTATION` on the job, which only a job without a record is
        read from), unless this store already knows the job (its own memory is newer). The resubmission count
        comes from the job's lineage annotation (written when the job was created). Returns what could not be read
        (each skipped), including an incident that :func:`check_incident` does not accept at `now` (then the job
        starts with no incident, so no real fault is held back by it)."""
        errors: list[IncidentDecodeError] = []
        if job.uid in self._jobs:
            return errors
        entry = _Entry()
        if incident_text is None and ledger_text is None:
            incident_text, ledger_text = job.annotation(INCIDENT_ANNOTATION), job.annotation(LEDGER_ANNOTATION)
        if ledger_text:
            try:
                entry.ledger = decode_ledger(ledger_text)
            except IncidentDecodeError as e:
                errors.append(e)
        count_text = job.annotation(RESUBMIT_COUNT_ANNOTATION)
        if count_text:
            try:
                count = int(count_text)
            except ValueError:
                errors.append(IncidentDecodeError(RESUBMIT_COUNT_ANNOTATION, f"not an integer: {count_text[:40]!r}"))
            else:
                if count > entry.ledger.resubmits_used:
                    entry.ledger = replace(entry.ledger, resubmits_used=count)
        if incident_text:
            try:
                incident = decode_incident(incident_text)
            except IncidentDecodeError as e:
                errors.append(e)
            else:
                problem = check_incident(incident, job, entry.ledger, now)
                if problem is None:
                    entry.incident = incident
                else:
                    errors.append(IncidentDecodeError(INCIDENT_ANNOTATION, f"not adopted: {problem}"))
        self._jobs[job.uid] = entry
        return errors

    def adopt_resubmission(self, job_uid: str, incident_text: str, ledger_text: str) -> list[IncidentDecodeError]:
        """Adopt the incident and ledger that a resubmission record (agent.core.resubmission) kept for the
        deleted job `job_uid`, unless this store already knows that UID. Only an ``acting`` incident is adopted
        (the resubmission it was carrying out is what is being finished). Returns what could not be read."""
        errors: list[IncidentDecodeError] = []
        if job_uid in self._jobs:
            return errors
        entry = _Entry()
        if ledger_text:
            try:
                entry.ledger = decode_ledger(ledger_text)
            except IncidentDecodeError as e:
                errors.append(e)
        if incident_text:
            try:
                incident = decode_incident(incident_text)
            except IncidentDecodeError as e:
                errors.append(e)
            else:
                if incident.phase is Phase.ACTING and incident.job_uid == job_uid:
                    entry.incident = incident
                else:
                    errors.append(IncidentDecodeError(INCIDENT_ANNOTATION, "not adopted: not the acting incident"))
        self._jobs[job_uid] = entry
        return errors

    def forget(self, job_uid: str) -> None:
        """Drop a deleted job."""
        self._jobs.pop(job_uid, None)

    def ledger(self, job_uid: str) -> RetryLedger:
        entry = self._jobs.get(job_uid)
        return entry.ledger if entry else RetryLedger()

    def incident(self, job_uid: str) -> Incident | None:
        """The job's open incident, or its last closed one, or None."""
        entry = self._jobs.get(job_uid)
        return entry.incident if entry else None

    def naming(self, fault: Fault) -> list[Incident]:
        """The incidents (each job's open or last closed one) whose fault list names `fault`
        (:meth:`Incident.names`): the jobs a predecessor's fault.detected of it may have named."""
        return [e.incident for e in self._jobs.values() if e.incident is not None and e.incident.names(fault)]

    def open_incidents(self) -> list[Incident]:
        return [e.incident for e in self._jobs.values() if e.incident is not None and e.incident.phase.open]

    def admit(self, job: JobRecord, fault: Fault, pods: Sequence[PodRecord] = ()) -> Admission:
        """Classify `fault` for `job`: join the open incident (JOINED), ignore it as older than the restart of the
        job's last closed incident of the same generation, or than a restart no incident records (STALE: see
        :meth:`covers`; `pods` are the job's pods the fault hits), or report that no incident covers it (NEW).
        HELD: the job's incident is held by the breaker; nothing is changed (the caller joins the fault to it with
        :meth:`join_held` while the breaker is open, else decides the fault again and opens on the held incident)."""
        entry = self._jobs.setdefault(job.uid, _Entry())
        current = entry.incident
        if current is not None and current.phase is Phase.HELD:
            return Admission.HELD
        if current is not None and current.phase.open:
            entry.incident = current.join(fault)
            entry.remember(fault)
            return Admission.JOINED
        if current is not None and current.generation == job.version:
            # The last restart already covered faults from before it. Compared at whole seconds because
            # Kubernetes times (a container's finishedAt) have second resolution.
            covered = current.restart_at or current.at(Phase.ACTING) or current.first_fault_at
            if fault.signal_time < covered.replace(microsecond=0):
                return Admission.STALE
        if _unrecorded_restart_after(job, entry.ledger, fault, pods):
            return Admission.STALE
        return Admission.NEW

    def note_joined(self, job: JobRecord, fault: Fault) -> bool:
        """Remember `fault` as one the job's open incident absorbs (a new leader re-evaluating an active fault
        the open incident covers), without counting it again. Returns False when the job has no open incident."""
        entry = self._jobs.get(job.uid)
        if entry is None or entry.incident is None or not entry.incident.phase.open:
            return False
        entry.remember(fault)
        return True

    def take_joined(self, job_uid: str) -> list[Fault]:
        """The faults that joined the job's incident since it opened, oldest first, and forget them. Called when
        the incident closes: those still active on the job's current pods are decided again (a fault that
        joined a restart in progress may sit on a pod that restart created)."""
        entry = self._jobs.get(job_uid)
        if entry is None:
            return []
        joined, entry.joined = list(entry.joined.values()), {}
        return joined

    def covers(self, job: JobRecord, fault: Fault, pods: Sequence[PodRecord] = ()) -> bool:
        """True when `job`'s incident (open but not held by the breaker, or closed having restarted the job, in any
        generation) already covers `fault`: it is open, or its restart (else its acting step, else its closing: an
        abort) is at or after the fault's own time (whole seconds). Used when a new leader re-evaluates faults that
        are still active.

        Also True for a restart no incident records: the job's Volcano ``retryCount`` is above the ledger's
        ``restarts_used`` (every restart the agent sends is charged to the ledger in the same write that records
        its incident, the claim; a restart written without it is one whose claim was lost: a leader that died
        between its concurrent writes, agent.engine.sending) and every pod in `pods` (those the fault hits) was
        created at or after the fault's own second: those pods were started by a restart that came after the
        fault. (A person's or Volcano's own restart looks the same and is treated the same.) Volcano counts every
        RestartJob (``status.retryCount++`` in pkg/controllers/job/state/running.go, RestartJobAction); an
        AscendJob has no such counter, so a restart by pod deletions whose claim was lost is not recognised here."""
        entry = self._jobs.get(job.uid)
        current = entry.incident if entry else None
        if current is not None and current.phase is Phase.HELD:
            return False  # nothing was done for it yet: decided again (joined while the breaker stays open)
        if current is not None:
            if current.phase.open:
                return True
            acted = current.restart_at or current.at(Phase.ACTING) or current.closed_at
            if acted is not None and fault.signal_time.replace(microsecond=0) <= acted:
                return True
        return _unrecorded_restart_after(job, entry.ledger if entry else RetryLedger(), fault, pods)

    def open(self, job: JobRecord, fault: Fault, decision: Decision, now: datetime) -> Incident:
        """Open an incident for `job` acting on `decision` (phase ``acting``; ``detected`` is stamped with
        the fault's own time). The ledger is charged at once, so a crash after this point cannot spend the
        budget twice.

        Raises:
            TransitionError: the job already has an open incident (call :meth:`admit` first).
        """
        entry = self._jobs.setdefault(job.uid, _Entry())
        held = entry.incident if entry.incident is not None and entry.incident.phase is Phase.HELD else None
        if entry.incident is not None and entry.incident.phase.open and held is None:
            raise TransitionError(f"job {job.namespace}/{job.name} already has open incident {entry.incident.id}")
        seq = entry.ledger.incidents + 1
        if job.kind is JobKind.VOLCANO and job.retry_count > entry.ledger.restarts_used:
            # Volcano restarted the job without us (a policy, a person): the ledger follows the job's own counter
            entry.ledger = replace(entry.ledger, restarts_used=job.retry_count)
        if held is not None:
            # the incident the breaker held goes on (same id: it charged nothing, so `seq` is still its number)
            incident = held if held.names(fault) else held.join(fault)
        else:
            incident = self._new(job, fault, seq, now)
        if decision.action.value == "abort":
            incident = replace(incident, action=decision.action.value, reason=decision.reason).move(
                Phase.FAILED, now, detail=decision.reason
            )
        else:
            # a pod-level restart's pods go into the record the claim writes: a successor resuming the incident
            # restarts those pods, not the whole job (the decision itself is not persisted)
            pods = decision.pods if decision.action in (Action.RESTART_PODS, Action.MARK_PODS) else ()
            incident = incident.move(
                Phase.ACTING, now, action=decision.action.value, mode=decision.mode.value, reason=decision.reason,
                pods=pods, pod_status=decision.pod_status,
            )  # fmt: skip
        entry.incident = incident
        entry.joined = {}
        entry.ledger = replace(entry.ledger.charge(decision), incidents=seq)
        return incident

    @staticmethod
    def _new(job: JobRecord, fault: Fault, seq: int, now: datetime) -> Incident:
        """A ``detected`` incident of `job` (its `seq`-th) for `fault`, stamped with the fault's own time."""
        detected_at = min(fault.signal_time, now)
        return Incident(
            id=incident_id(job, seq),
            job_uid=job.uid,
            kind=job.kind.value,
            namespace=job.namespace,
            name=job.name,
            generation=job.version,
            phase=Phase.DETECTED,
            first_fault_at=detected_at,
            steps=((Phase.DETECTED, detected_at),),
        ).join(fault)

    def hold(self, job: JobRecord, fault: Fault, decision: Decision, now: datetime, reason: str) -> Incident:
        """Open `job`'s incident held by the circuit breaker (``detected`` → ``held-by-breaker``): the policy's
        `decision` (action and mode kept: what a reset will do if still needed) was refused by the open breaker;
        `reason` says so (never the decision's "restarting …" text). Nothing is charged to the ledger, so the
        incident keeps its id when it goes on to ``acting`` after a reset (:meth:`open`). Later faults of the job
        join it (:meth:`join_held`).

        Raises:
            TransitionError: the job already has an open incident (call :meth:`admit` first).
        """
        entry = self._jobs.setdefault(job.uid, _Entry())
        if entry.incident is not None and entry.incident.phase.open:
            raise TransitionError(f"job {job.namespace}/{job.name} already has open incident {entry.incident.id}")
        incident = self._new(job, fault, entry.ledger.incidents + 1, now).move(
            Phase.HELD, now, action=decision.action.value, mode=decision.mode.value, reason=reason
        )
        entry.incident = incident
        entry.joined = {}
        return incident

    def join_held(self, job_uid: str, fault: Fault) -> Incident | None:
        """Join `fault` to the job's held incident (not counted again when its list already names it: a fault
        decided again while the breaker stays open). Returns the incident, None when none is held."""
        entry = self._jobs.get(job_uid)
        if entry is None or entry.incident is None or entry.incident.phase is not Phase.HELD:
            return None
        if not entry.incident.names(fault):
            entry.incident = entry.incident.join(fault)
        return entry.incident

    def held_incidents(self) -> list[Incident]:
        """The incidents held by the circuit breaker now."""
        return [e.incident for e in self._jobs.values() if e.incident is not None and e.incident.phase is Phase.HELD]

    def counts(self) -> tuple[int, int]:
        """(open incidents, of which held by the breaker): the ``fault_agent_incidents_open`` and
        ``fault_agent_incidents_held`` gauges."""
        return len(self.open_incidents()), len(self.held_incidents())

    def _update(self, job_uid: str, phase: Phase, now: datetime, **changes: Any) -> Incident:
        entry = self._jobs.get(job_uid)
        if entry is None or entry.incident is None:
            raise TransitionError(f"job UID {job_uid}: no incident")
        entry.incident = entry.incident.move(phase, now, **changes)
        return entry.incident

    def restarting(
        self, job_uid: str, now: datetime, pod_uids: Iterable[str] = (), pod_names: Iterable[str] = ()
    ) -> Incident:
        """The restart request was sent at `now`; `pod_uids` are the pods it stops (never counted as failures),
        `pod_names` their names for a pod-level restart (the recovery check and the pending escalation read them).

        Raises:
            TransitionError: no incident, or it is not ``acting``.
        """
        entry = self._jobs.get(job_uid)
        if entry is not None:
            entry.ledger = entry.ledger.with_agent_pods(pod_uids)
        return self._update(job_uid, Phase.RESTARTING, now, restart_at=now, pods=tuple(pod_names))

    def escalate(self, job_uid: str, now: datetime, decision: Decision) -> Incident:
        """A ``restarting`` pod-level restart becomes the whole-job restart `decision` (``acting`` again, marked
        `escalated`); the ledger is charged for it. Once per incident.

        Raises:
            TransitionError: no incident, it is not ``restarting``, or it was escalated already.
        """
        entry = self._jobs.get(job_uid)
        if entry is None or entry.incident is None:
            raise TransitionError(f"job UID {job_uid}: no incident")
        if entry.incident.escalated:
            raise TransitionError(f"incident {entry.incident.id}: already escalated once")
        incident = self._update(
            job_uid, Phase.ACTING, now, action=decision.action.value, mode=decision.mode.value,
            reason=decision.reason, escalated=True,
        )  # fmt: skip
        entry.ledger = entry.ledger.charge(decision)
        return incident

    def resubmitted(self, old_uid: str, new_uid: str, now: datetime) -> Incident:
        """The job was deleted and created again as `new_uid` at `now`: its ``acting`` incident moves to
        ``restarting`` and, with the ledger, over to the new UID (recovered once the new job runs). The new job
        starts with fresh restart and business budgets; resubmissions used and the incident count carry over.

        Raises:
            TransitionError: no incident for `old_uid`, or it is not ``acting``.
        """
        entry = self._jobs.get(old_uid)
        if entry is None or entry.incident is None:
            raise TransitionError(f"job UID {old_uid}: no incident")
        incident = entry.incident.move(Phase.RESTARTING, now, restart_at=now, job_uid=new_uid)
        ledger = RetryLedger(
            resubmits_used=entry.ledger.resubmits_used,
            incidents=entry.ledger.incidents,
            agent_pod_uids=entry.ledger.agent_pod_uids,
        )
        del self._jobs[old_uid]
        self._jobs[new_uid] = _Entry(ledger, incident, entry.joined)
        return incident

    def recovered_unrestarted(self, job_uid: str, now: datetime, detail: str) -> Incident:
        """Close an ``acting`` incident (or one ``held-by-breaker``) as recovered without its restart: the new leader
        that found it (the tick, for a held one) found its faults cleared and the job healthy (see the engine's
        resume). `detail` says so.

        Raises:
            TransitionError: no incident, or it is neither ``acting`` nor held.
        """
        entry = self._jobs.get(job_uid)
        if entry is None or entry.incident is None:
            raise TransitionError(f"job UID {job_uid}: no incident")
        if entry.incident.phase not in (Phase.ACTING, Phase.HELD):
            raise TransitionError(f"incident {entry.incident.id}: only an acting or held incident recovers unrestarted")
        return self._update(job_uid, Phase.RECOVERED, now, detail=detail)

    def fail(self, job_uid: str, now: datetime, detail: str) -> Incident:
        """Close the incident as failed with `detail`.

        Raises:
            TransitionError: no incident, or it is already closed.
        """
        return self._update(job_uid, Phase.FAILED, now, detail=detail)

    def observe(
        self,
        job: JobRecord,
        pods: Iterable[PodRecord],
        now: datetime,
        recovery_deadline_s: float,
        *,
        faults_on_job: bool = False,
    ) -> Incident | None:
        """Advance `job`'s open incident from what the cluster shows: ``restarting`` → ``recovered`` when
        :func:`recovered` holds (`faults_on_job`: an active fault still hits the job's live pods, read for a
        hand-off); ``restarting`` → ``failed`` at once when the
        job's controller gave the job up (:func:`agent.core.policy.controller_ended_job`: Volcano marks it Failed at
        ``retryCount == maxRetry``); any open phase → ``failed`` when the first fault is more than
        `recovery_deadline_s` old. Returns the incident when it changed, else None."""
        entry = self._jobs.get(job.uid)
        incident = entry.incident if entry else None
        if incident is None or not incident.phase.open:
            return None
        if incident.phase is Phase.RESTARTING and recovered(incident, job, pods, faults_on_job=faults_on_job):
            return self._update(job.uid, Phase.RECOVERED, now)
        ended = controller_ended_job(job) if incident.phase is Phase.RESTARTING else None
        # A resubmission starts from a Failed job: that job, still of the incident's generation, is not news.
        if ended is not None and not (incident.action == "resubmit" and job.version == incident.generation):
            return self._update(job.uid, Phase.FAILED, now, detail=ended)
        if now - incident.first_fault_at > timedelta(seconds=recovery_deadline_s):
            if incident.phase is Phase.HELD:
                detail = (
                    f"held by the open circuit breaker for {recovery_deadline_s:.0f} s from the fault "
                    "(policy.recovery_deadline_s); the job was not restarted"
                )
            else:
                detail = f"not recovered within {recovery_deadline_s:.0f} s of the fault"
            return self._update(job.uid, Phase.FAILED, now, detail=detail)
        return None

    def encoded(self, job_uid: str) -> tuple[str, str]:
        """The job's (incident, ledger) as the record stores them now (agent.core.records): the incident's JSON
        ("" when it has none) and the ledger's."""
        entry = self._jobs.get(job_uid, _Entry())
        incident = "" if entry.incident is None else encode_incident(entry.incident)
        return incident, encode_ledger(entry.ledger)
