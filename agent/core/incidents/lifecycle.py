"""An incident's shape and lifecycle: its phases, the steps allowed between them, and its id. Pure.

Shapes: :class:`Incident` (frozen; times are timezone-aware UTC datetimes, ``steps`` a tuple of (phase, when));
:class:`Phase` (``detected``, ``held-by-breaker``, ``acting``, ``restarting``, ``recovered``, ``failed``);
:data:`NEXT_PHASES` (phase → the phases it may move to). The fault texts an incident lists are
:func:`describe_fault`'s ``kind:level@node[chips]pod=<name> codes``.

Errors: :class:`TransitionError` when a step the lifecycle does not allow is asked for (a bug in the caller).
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agent.core.cluster import JobRecord
from agent.core.faults import Fault

MAX_FAULTS_KEPT = 20  # faults listed on an incident (the count keeps going): keeps the annotation small


class Phase(enum.StrEnum):
    """An incident's lifecycle phase (its wire value is the string); :data:`NEXT_PHASES` gives the steps allowed."""

    DETECTED = "detected"
    HELD = "held-by-breaker"  # the policy would restart the job, the open circuit breaker refused it
    ACTING = "acting"
    RESTARTING = "restarting"
    RECOVERED = "recovered"
    FAILED = "failed"

    @property
    def open(self) -> bool:
        """True while the incident is not closed (recovered or failed)."""
        return self not in (Phase.RECOVERED, Phase.FAILED)


NEXT_PHASES: dict[Phase, frozenset[Phase]] = {
    Phase.DETECTED: frozenset({Phase.ACTING, Phase.FAILED, Phase.RECOVERED, Phase.HELD}),
    # held-by-breaker → acting: decided again after a person's reset; → recovered: its faults cleared meanwhile
    Phase.HELD: frozenset({Phase.ACTING, Phase.FAILED, Phase.RECOVERED}),
    # acting → recovered: a new leader found the faults cleared and the job healthy before the restart was sent
    Phase.ACTING: frozenset({Phase.RESTARTING, Phase.FAILED, Phase.RECOVERED}),
    # restarting → acting: a pod-level restart escalated to the whole job (once: Incident.escalated)
    Phase.RESTARTING: frozenset({Phase.RECOVERED, Phase.FAILED, Phase.ACTING}),
    Phase.RECOVERED: frozenset(),
    Phase.FAILED: frozenset(),
}
"""The steps the lifecycle allows: phase → the phases an incident in it may move to (closed phases: none)."""


class TransitionError(ValueError):
    """An incident was asked to move to a phase its lifecycle does not allow (a bug in the caller)."""


@dataclass(frozen=True, slots=True)
class Incident:
    """One incident of one job.

    Attributes:
        id: deterministic id: ``<job name>-<10 hex>`` from (job UID, generation, sequence number).
        job_uid, kind, namespace, name: the job.
        generation: the job generation when the incident opened.
        phase: lifecycle phase.
        first_fault_at: the first fault's own timestamp (`Fault.signal_time`); recovery time counts from it.
        steps: (phase, when) for each step taken, in order.
        faults: short descriptions of the faults that joined (first :data:`MAX_FAULTS_KEPT`).
        fault_count: faults that joined, all of them.
        action, mode, reason: the decision that was taken ("" before acting).
        restart_at: when the restart request was sent, for the recovery check.
        detail: why it failed, when it did.
        pods: names of the pods a pod-level restart stops (from ``acting`` on, so a successor resumes it as such;
            recovered once each has a newer Running, Ready pod).
        escalated: the pod-level restart was escalated to the whole job (never a second time).
        pod_status: for a ``mark-pods`` incident (``fault-scheduling: external-*``), the ``huawei.com/pod-status``
            value its pods get, so a successor resuming it marks them the same; else "".
    """

    id: str
    job_uid: str
    kind: str
    namespace: str
    name: str
    generation: str
    phase: Phase
    first_fault_at: datetime
    steps: tuple[tuple[Phase, datetime], ...]
    faults: tuple[str, ...] = ()
    fault_count: int = 0
    action: str = ""
    mode: str = ""
    reason: str = ""
    restart_at: datetime | None = None
    detail: str = ""
    pods: tuple[str, ...] = ()
    escalated: bool = False
    pod_status: str = ""

    def at(self, phase: Phase) -> datetime | None:
        """When the incident entered `phase`, or None."""
        for p, when in self.steps:
            if p is phase:
                return when
        return None

    @property
    def closed_at(self) -> datetime | None:
        return self.at(Phase.RECOVERED) or self.at(Phase.FAILED)

    @property
    def recovery_seconds(self) -> float | None:
        """Seconds from the first fault's own timestamp to recovery, or None while not recovered."""
        done = self.at(Phase.RECOVERED)
        return None if done is None else (done - self.first_fault_at).total_seconds()

    def move(self, phase: Phase, now: datetime, **changes: Any) -> Incident:
        """The incident in `phase` at `now` (plus field `changes`).

        Raises:
            TransitionError: the lifecycle does not allow this step (e.g. recovered → acting).
        """
        if phase not in NEXT_PHASES[self.phase]:
            raise TransitionError(f"incident {self.id}: cannot go from {self.phase} to {phase}")
        return replace(self, phase=phase, steps=(*self.steps, (phase, now)), **changes)

    def may_hold(self, fault: Fault) -> bool:
        """Whether `fault` opened or joined this incident as far as its list tells: named on it (at any level,
        :func:`fault_place`), or the list is empty or was cut at :data:`MAX_FAULTS_KEPT` (then any fault of the
        job may be one of its)."""
        complete = bool(self.faults) and self.fault_count <= len(self.faults)
        return not complete or self.names(fault)

    def names(self, fault: Fault) -> bool:
        """Whether this incident's fault list names `fault`'s place (its node, chips or pod; any level), and the
        fault began before the restart was sent (else before the incident ended): a later fault of the same chip,
        once the job's pods had left it, never joined this incident."""
        bound = self.restart_at or (self.steps[-1][1] if not self.phase.open and self.steps else None)
        if bound is not None and fault.signal_time > bound:
            return False
        place = fault_place(describe_fault(fault))
        return any(fault_place(text) == place for text in self.faults)

    def join(self, fault: Fault) -> Incident:
        """The incident with `fault` joined (listed while fewer than MAX_FAULTS_KEPT, always counted)."""
        faults = self.faults if len(self.faults) >= MAX_FAULTS_KEPT else (*self.faults, describe_fault(fault))
        return replace(self, faults=faults, fault_count=self.fault_count + 1)


def describe_fault(fault: Fault) -> str:
    """A short, stable text for a fault: ``kind:level@node[chips]codes``."""
    chips = f"[{','.join(fault.chips)}]" if fault.chips else ""
    pod = f"pod={fault.pod.name}" if fault.pod is not None else ""
    return f"{fault.kind.value}:{fault.level.wire_name}@{fault.node}{chips}{pod} {','.join(fault.codes)}".strip()


def fault_place(described: str) -> str:
    """An incident's fault text (:func:`describe_fault`, ``kind:level@node[chips]… codes``) without its level: the
    same chip or node still faulty at another level (a flap escalation the new leader's detectors have not made)
    is still the same fault."""
    head, at, rest = described.partition("@")
    return f"{head.partition(':')[0]}{at}{rest}"


def incident_id(job: JobRecord, seq: int) -> str:
    """Deterministic incident id for the `seq`-th incident of `job` (same inputs, same id, on any replica)."""
    return make_incident_id(job.name, job.uid, job.version, seq)


def make_incident_id(name: str, uid: str, generation: str, seq: int) -> str:
    """The id of the `seq`-th incident of job `name` with UID `uid` at job generation `generation`."""
    digest = hashlib.sha256(f"{uid}\x00{generation}\x00{seq}".encode()).hexdigest()[:10]
    return f"{name}-{digest}"
