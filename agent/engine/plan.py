"""What deciding asks for, as plain data: the events to publish and the steps to take, in order.

:class:`agent.engine.deciding.Deciding` returns one :class:`Plan` per job a fault hits (or one for the fault when it
hits none); :class:`agent.engine.acting.Acting` carries each out through the ports: its events first, then its
steps. A unit test asserts on the plans without any API client.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from agent.actions import PodRef
from agent.core.bookkeeping import BookkeepingIntent
from agent.core.cluster import JobRecord
from agent.core.faults import Fault, ObjectRef
from agent.core.policy import Decision


@dataclass(frozen=True, slots=True)
class FaultDetected:
    """Publish ``fault.detected`` for `fault`: for `job` (None: a node event) and its open incident, if any."""

    fault: Fault
    job: ObjectRef | None = None
    incident_id: str | None = None


@dataclass(frozen=True, slots=True)
class ForceDeletePod:
    """Delete a pod stuck terminating at once (grace 0, on its UID)."""

    pod: PodRef


@dataclass(frozen=True, slots=True)
class Defer:
    """The restart rate limit held the restart back: decide `fault` again at the next tick."""

    fault: Fault
    job_uid: str


@dataclass(frozen=True, slots=True)
class Recover:
    """Open `job`'s incident for `decision`, publish the fault's ``fault.detected`` naming it (the plan has no
    event of its own for it), and carry it out in a task of its own: claim the job, publish ``recovery.started``
    (or ``recovery.failed`` for an abort), restart, and start the restart's follow-ups; once the restart was sent,
    write `bookkeeping` (MindCluster's ConfigMaps, agent.core.bookkeeping; None: nothing to write)."""

    fault: Fault
    job: JobRecord
    decision: Decision
    now: datetime
    bookkeeping: BookkeepingIntent | None = None


@dataclass(frozen=True, slots=True)
class Hold:
    """The open circuit breaker refused the restart `decision` asks for: open `job`'s incident in state
    ``held-by-breaker`` (nothing charged), write it into the job's record, and publish the fault's
    ``fault.detected`` naming it and ``recovery.held``. `reason` is the incident's reason (the breaker holds it),
    `breaker_reason` why the breaker tripped ("" when unknown)."""

    fault: Fault
    job: JobRecord
    decision: Decision
    now: datetime
    reason: str
    breaker_reason: str = ""


@dataclass(frozen=True, slots=True)
class Observe:
    """Observe mode (``policy.mode=observe``): watch `job` for the restart someone else makes after `fault`
    (agent.engine.observing), and publish the fault's ``fault.detected`` naming that observation (the plan has
    no event of its own for it). `decision` is what the agent would have done; nothing is written."""

    fault: Fault
    job: JobRecord
    decision: Decision
    now: datetime


@dataclass(frozen=True, slots=True)
class Escalate:
    """`job`'s pod-level restart (its ``restarting`` incident `incident_id`) left replacement pods unplaced for
    ``policy.pending_escalation_s``: restart the whole job as `decision` says, once (the incident goes back to
    ``acting``, marked escalated, then ``restarting``), publishing ``recovery.started`` attempt 2."""

    job: JobRecord
    incident_id: str
    decision: Decision
    now: datetime


Step = ForceDeletePod | Defer | Recover | Hold | Observe | Escalate


@dataclass(frozen=True, slots=True)
class Plan:
    """What one decision about one fault (and one job) asks for.

    Attributes:
        events: published first, in order.
        steps: carried out next, in order.
        decision: the policy's decision (None: none was made: the job is not opted in, the fault joined an open
            incident, or it is older than the job's last incident).
    """

    events: tuple[FaultDetected, ...] = ()
    steps: tuple[Step, ...] = ()
    decision: Decision | None = None
