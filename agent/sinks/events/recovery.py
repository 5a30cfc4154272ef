"""Builders of the recovery events of one incident's job: held, started, succeeded, failed, and resumed (the
first training step after it, with the training lost). Pure: no clock reads, no I/O; bad arguments raise
:class:`~agent.sinks.events.vocabulary.EventBuildError`. Durations are seconds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from cloudevents.core.v1.event import CloudEvent

from agent.core.checkpoint_wait import GraceWaitOutcome
from agent.core.faults import Fault, ObjectRef
from agent.core.observe import ACTED_BY_AGENT
from agent.sinks.events.build import (
    build_event,
    check_acted_by,
    check_aware,
    check_non_empty,
    check_recovery_common,
    fault_data,
    job_data,
    rfc3339,
    subject_and_key,
)
from agent.sinks.events.vocabulary import (
    RECOVERY_FAILED,
    RECOVERY_HELD,
    RECOVERY_RESUMED,
    RECOVERY_STARTED,
    RECOVERY_SUCCEEDED,
    Durations,
    EventBuildError,
    FailureReason,
)


def recovery_started(
    incident_id: str,
    job: ObjectRef,
    action: str,
    reason: str,
    *,
    cluster: str,
    at: datetime,
    attempt: int = 1,
    faults: Sequence[Fault] = (),
    dry_run: bool = False,
    budget_left: int | None = None,
    acted_by: str = ACTED_BY_AGENT,
) -> CloudEvent:
    """The agent starts recovering `job` with `action` (e.g. ``restart-job``, ``delete-pods``, ``resubmit``), or
    (`acted_by` ``observed``, observe mode) saw someone else start restarting it.

    Args:
        incident_id: the incident's id (non-empty); with `attempt` it makes the event id.
        reason: a sentence a person can read (the policy Decision's reason).
        at: when the action was decided (event time).
        attempt: 1 for the first recovery of this incident, 2 … for later ones.
        faults: the incident's faults (summarised in ``data.faults``).
        dry_run: shadow mode: decided and published but nothing written to the cluster.
        budget_left: retries left after this one, None when the job has no budget.
        acted_by: who restarts the job (:data:`ACTED_BY`): ``agent``, or ``observed`` for a restart someone else
            made (MindCluster's plugin, Volcano's own job policy) that the agent only watched (policy.mode=observe).

    Raises:
        EventBuildError: empty incident id/action/reason, attempt < 1, budget_left < 0, naive time, bad job,
            unknown acted_by.
    """
    t = RECOVERY_STARTED
    check_recovery_common(t, incident_id, attempt, at)
    check_acted_by(t, acted_by)
    check_non_empty(t, "action", action)
    check_non_empty(t, "reason", reason)
    if budget_left is not None and budget_left < 0:
        raise EventBuildError(t, "budget_left", f"must be ≥ 0, got {budget_left}")
    subject, key = subject_and_key(t, job, "")
    data = {
        "incident_id": incident_id,
        "job": job_data(job),
        "attempt": attempt,
        "action": action,
        "reason": reason,
        "dry_run": dry_run,
        "budget_left": budget_left,
        "faults": [fault_data(t, f) for f in faults],
        "acted_by": acted_by,
    }
    return build_event(t, cluster, subject, key, at, (incident_id, str(attempt)), data)


def recovery_held(
    incident_id: str,
    job: ObjectRef,
    action: str,
    reason: str,
    *,
    cluster: str,
    at: datetime,
    faults: Sequence[Fault] = (),
    dry_run: bool = False,
    breaker_reason: str = "",
) -> CloudEvent:
    """The open circuit breaker holds `job`'s incident: the policy would recover it with `action` (e.g.
    ``restart-job``) but the agent restarts nothing until a person resets the breaker (``fault-agent breaker
    reset``); then the job is decided again and the same incident goes on (``recovery.started``), or ends
    (``recovery.succeeded`` when its faults cleared meanwhile, ``recovery.failed`` reason ``breaker-open`` when the
    recovery deadline passed while held). One event per incident (its id is made of the incident id).

    Args:
        incident_id: the held incident's id (the id ``recovery.started`` will carry after a reset).
        action: what a reset will do if still needed (the policy's decision).
        reason: the incident's reason, a sentence for a person (it says that the breaker holds it).
        at: when the breaker refused the restart (event time).
        faults: the incident's faults so far (``data.faults``).
        dry_run: shadow mode (nothing would have been written anyway).
        breaker_reason: why the breaker tripped ("" when unknown).

    Raises:
        EventBuildError: empty incident id, action or reason, naive time, bad job.
    """
    t = RECOVERY_HELD
    check_recovery_common(t, incident_id, 1, at)
    check_non_empty(t, "action", action)
    check_non_empty(t, "reason", reason)
    subject, key = subject_and_key(t, job, "")
    data = {
        "incident_id": incident_id,
        "job": job_data(job),
        "action": action,
        "reason": reason,
        "breaker_reason": breaker_reason,
        "dry_run": dry_run,
        "faults": [fault_data(t, f) for f in faults],
    }
    return build_event(t, cluster, subject, key, at, (incident_id, "held"), data)


def recovery_succeeded(
    incident_id: str,
    job: ObjectRef,
    action: str,
    durations: Durations,
    *,
    cluster: str,
    at: datetime,
    attempt: int = 1,
    acted_by: str = ACTED_BY_AGENT,
    time_to_first_step_s: float | None = None,
    grace_waits: Sequence[GraceWaitOutcome] = (),
) -> CloudEvent:
    """`job` runs again after `action`; `durations` gives each phase in seconds (see :class:`Durations`; for an
    observed restart, `acted_by` ``observed``, ``decision`` is 0 and ``action`` runs from the agent seeing the
    fault to the restart being seen). `grace_waits`: the graceful waits of the restart, in order
    (agent.core.checkpoint_wait: which wait, why it ended, its seconds, the checkpoint step that ended it), as
    ``data.grace_waits``; absent when there were none (or a new leader does not know them).

    `time_to_first_step_s`: for a job that reports its progress, the restart → first training step seconds when
    the agent saw that step before the pods were Running and Ready (``data.time_to_first_step_s``); otherwise the
    field is absent and the incident's ``recovery.resumed`` event (same ``incident_id``) carries it when the step
    comes. Nothing waits for it: this event still marks the pods Running.

    Raises:
        EventBuildError: a negative or non-finite duration, and as :func:`recovery_started`.
    """
    t = RECOVERY_SUCCEEDED
    check_recovery_common(t, incident_id, attempt, at)
    check_acted_by(t, acted_by)
    check_non_empty(t, "action", action)
    d = {}
    for name in ("detection", "decision", "action", "reschedule", "total"):
        v = getattr(durations, name)
        if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise EventBuildError(t, f"durations.{name}", f"must be a finite number of seconds ≥ 0, got {v!r}")
        d[f"{name}_s"] = float(v)
    subject, key = subject_and_key(t, job, "")
    data: dict[str, Any] = {
        "incident_id": incident_id,
        "job": job_data(job),
        "attempt": attempt,
        "action": action,
        "durations": d,
        "acted_by": acted_by,
    }
    if time_to_first_step_s is not None:
        if not math.isfinite(time_to_first_step_s) or time_to_first_step_s < 0:
            raise EventBuildError(t, "time_to_first_step_s", f"must be seconds ≥ 0, got {time_to_first_step_s!r}")
        data["time_to_first_step_s"] = float(time_to_first_step_s)
    if grace_waits:
        waits: list[dict[str, Any]] = []
        for w in grace_waits:
            if not math.isfinite(w.waited_s) or w.waited_s < 0:
                raise EventBuildError(t, "grace_waits.waited_s", f"must be finite and ≥ 0, got {w.waited_s!r}")
            waits.append({"wait": w.wait.value, "ended": w.ended.value, "waited_s": float(w.waited_s),
                          "checkpoint_step": w.checkpoint_step})  # fmt: skip
        data["grace_waits"] = waits
    return build_event(t, cluster, subject, key, at, (incident_id, str(attempt)), data)


def recovery_failed(
    incident_id: str,
    job: ObjectRef,
    reason: FailureReason | str,
    *,
    cluster: str,
    at: datetime,
    action: str = "",
    detail: str = "",
    attempt: int = 1,
    acted_by: str = ACTED_BY_AGENT,
) -> CloudEvent:
    """The recovery of `job` failed for `reason` (a :class:`FailureReason` or its value); `detail` is free text;
    `acted_by` as for :func:`recovery_started`.

    Raises:
        EventBuildError: unknown reason, and as :func:`recovery_started`.
    """
    t = RECOVERY_FAILED
    check_recovery_common(t, incident_id, attempt, at)
    check_acted_by(t, acted_by)
    try:
        why = FailureReason(reason)
    except ValueError:
        known = ", ".join(r.value for r in FailureReason)
        raise EventBuildError(t, "reason", f"unknown {reason!r} (known: {known})") from None
    subject, key = subject_and_key(t, job, "")
    data = {
        "incident_id": incident_id,
        "job": job_data(job),
        "attempt": attempt,
        "action": action,
        "reason": why.value,
        "detail": detail,
        "acted_by": acted_by,
    }
    return build_event(t, cluster, subject, key, at, (incident_id, str(attempt)), data)


def recovery_resumed(
    job: ObjectRef,
    *,
    cluster: str,
    incident_id: str,
    restart_at: datetime,
    first_fault_at: datetime,
    first_step_at: datetime,
    step: int,
    checkpoint_step: int | None,
    stopped_at: datetime | None = None,
    work_lost: Mapping[str, Any] | None = None,
    lost_s: Mapping[str, float] | None = None,
    training: Mapping[str, Any] | None = None,
) -> CloudEvent:
    """A job that reports its training progress (agent.core.progress) took its first step after the agent's
    restart of incident `incident_id`: training really resumed.

    What the incident cost (agent.core.goodput, docs/progress.md): `stopped_at`, when training stopped (the first
    fault's own time, or a hang's last step; default `first_fault_at`); `work_lost`
    (agent.core.goodput.WorkLost.as_data: steps, seconds, step_at_fault, checkpoint_step, step_time_s; each may
    be null); `lost_s` (agent.core.goodput.LostTime.as_data: ``<cause>_s`` for detection, restart, rescheduling,
    initialisation, recomputation, and total_s); `training`, the job's account after it
    (agent.core.goodput.TrainingSummary.as_data plus ``first_step_at``, a datetime). Absent ones are sent as
    nulls / zeros (an engine without the account).

    Args:
        job: the job; restart_at: when the restart was sent; first_fault_at: the incident's first fault's own time;
        first_step_at: when the agent saw the first step change after the restart (the event time).
        step, checkpoint_step: that step, and the last complete checkpoint's step the heartbeat reported.

    ``data.time_to_first_step_s`` is first_step_at − restart_at, ``data.fault_to_first_step_s`` first_step_at −
    first_fault_at (both ≥ 0). One event per incident.

    Raises:
        EventBuildError: naive times, an empty incident id, a job without namespace/name.
    """
    t = RECOVERY_RESUMED
    for name, value in (
        ("restart_at", restart_at),
        ("first_fault_at", first_fault_at),
        ("first_step_at", first_step_at),
    ):
        check_aware(t, name, value)
    check_non_empty(t, "incident_id", incident_id)
    subject, key = subject_and_key(t, job, "")
    data = {
        "incident_id": incident_id,
        "job": job_data(job),
        "restart_at": rfc3339(restart_at),
        "first_step_at": rfc3339(first_step_at),
        "time_to_first_step_s": max(0.0, (first_step_at - restart_at).total_seconds()),
        "fault_to_first_step_s": max(0.0, (first_step_at - first_fault_at).total_seconds()),
        "step": step,
        "checkpoint_step": checkpoint_step,
        "stopped_at": rfc3339(stopped_at or first_fault_at),
        "work_lost": dict(work_lost) if work_lost is not None else dict.fromkeys(_WORK_LOST_KEYS),
        "lost_s": _lost_seconds(t, lost_s),
        "training": _training_data(t, training, first_step_at),
    }
    return build_event(t, cluster, subject, key, first_step_at, (incident_id,), data)


_WORK_LOST_KEYS = ("steps", "seconds", "step_at_fault", "checkpoint_step", "step_time_s")
_LOST_KEYS = ("detection_s", "restart_s", "rescheduling_s", "initialisation_s", "recomputation_s", "total_s")


def _lost_seconds(t: str, lost_s: Mapping[str, float] | None) -> dict[str, float]:
    out = dict.fromkeys(_LOST_KEYS, 0.0)
    for k, v in (lost_s or {}).items():
        if k not in out or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise EventBuildError(t, f"lost_s.{k}", f"must be one of {_LOST_KEYS} with seconds ≥ 0, got {v!r}")
        out[k] = float(v)
    return out


def _training_data(t: str, training: Mapping[str, Any] | None, default_first: datetime) -> dict[str, Any]:
    given = dict(training or {})
    first = given.pop("first_step_at", default_first)
    check_aware(t, "training.first_step_at", first)
    out: dict[str, Any] = {"first_step_at": rfc3339(first), "wall_s": 0.0, "lost_s": 0.0, "productive_s": 0.0,
                           "running_share": None, "incidents": 0}  # fmt: skip
    out.update(given)
    return out
