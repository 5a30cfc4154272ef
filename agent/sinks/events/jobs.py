"""Builders of the events about a job's health and the cluster's restart breaker: a job misconfigured, hung or
straggling, the breaker tripped or reset. Pure: no clock reads, no I/O; bad arguments raise
:class:`~agent.sinks.events.vocabulary.EventBuildError`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Final

from cloudevents.core.v1.event import CloudEvent

from agent.core.faults import ObjectRef
from agent.sinks.events.build import (
    build_event,
    check_aware,
    check_non_empty,
    job_data,
    ref_data,
    rfc3339,
    subject_and_key,
)
from agent.sinks.events.vocabulary import (
    BREAKER_RESET,
    BREAKER_TRIPPED,
    JOB_HUNG,
    JOB_MISCONFIGURED,
    JOB_STRAGGLER,
    EventBuildError,
)


def breaker_tripped(
    *,
    cluster: str,
    at: datetime,
    reason: str,
    faulty_nodes: Sequence[str],
    watched_nodes: int,
    threshold_share: float,
    window_s: float,
) -> CloudEvent:
    """The restart circuit breaker opened: no restarts until a person resets it.

    Args:
        faulty_nodes: the nodes that turned faulty within the window (listed in ``data.faulty_nodes``).
        watched_nodes: nodes watched in total (> 0).
        threshold_share: the share (0, 1] that trips the breaker; window_s: its window, seconds (> 0).

    Raises:
        EventBuildError: empty reason, watched_nodes < 1, a share outside (0, 1], window ≤ 0, naive time.
    """
    t = BREAKER_TRIPPED
    check_aware(t, "at", at)
    check_non_empty(t, "reason", reason)
    if watched_nodes < 1:
        raise EventBuildError(t, "watched_nodes", f"must be ≥ 1, got {watched_nodes}")
    if not (0 < threshold_share <= 1):
        raise EventBuildError(t, "threshold_share", f"must be in (0, 1], got {threshold_share}")
    if not (window_s > 0 and math.isfinite(window_s)):
        raise EventBuildError(t, "window_s", f"must be > 0 seconds, got {window_s}")
    data = {
        "reason": reason,
        "faulty_nodes": sorted(faulty_nodes),
        "faulty_node_count": len(set(faulty_nodes)),
        "watched_nodes": watched_nodes,
        "threshold_share": float(threshold_share),
        "window_s": float(window_s),
    }
    return build_event(t, cluster, "cluster", "breaker", at, (rfc3339(at),), data)


def breaker_reset(
    *,
    cluster: str,
    at: datetime,
    by: str,
    reason: str = "",
    opened_at: datetime | None = None,
    faulty_nodes: Sequence[str] = (),
) -> CloudEvent:
    """A person (`by`, e.g. the CLI user) closed the circuit breaker; ``data.open_s`` is how long it was open.

    Args:
        faulty_nodes: the nodes whose faults tripped the breaker now closed (``data.faulty_nodes``, sorted, as
            ``breaker.tripped`` listed them; empty when the agent does not know them): ``kubectl describe node``
            shows the close next to the trip.

    Raises:
        EventBuildError: empty `by`, naive times, opened_at after at.
    """
    t = BREAKER_RESET
    check_aware(t, "at", at)
    check_non_empty(t, "by", by)
    open_s = None
    if opened_at is not None:
        check_aware(t, "opened_at", opened_at)
        if opened_at > at:
            raise EventBuildError(t, "opened_at", "is after the reset time")
        open_s = (at - opened_at).total_seconds()
    data = {
        "by": by,
        "reason": reason,
        "opened_at": rfc3339(opened_at) if opened_at else None,
        "open_s": open_s,
        "faulty_nodes": sorted({n for n in faulty_nodes if n}),
    }
    return build_event(t, cluster, "cluster", "breaker", at, (rfc3339(at),), data)


def job_misconfigured(
    job: ObjectRef, *, cluster: str, at: datetime, label: str, value: str, problem: str
) -> CloudEvent:
    """A watched job carries a label value the agent cannot use (e.g. ``fault-retry-times: abc``), or one the cluster
    did not honour (``subHealthyStrategy: hotSwitch`` with no hot switch by ClusterD within
    ``policy.hot_switch_wait_s``, agent.engine.ticking); the job is still watched and `problem` says what the agent
    does instead. One event per job UID, label and value.

    Args:
        job: the job (kind vcjob/acjob, namespace, name, uid).
        at: when the agent first saw the value (event time).
        label: the label's key; value: its value as written (cut to 100 characters); problem: a sentence.

    Raises:
        EventBuildError: empty label or problem, naive time, a job without namespace/name.
    """
    t = JOB_MISCONFIGURED
    check_aware(t, "at", at)
    check_non_empty(t, "label", label)
    check_non_empty(t, "problem", problem)
    subject, key = subject_and_key(t, job, "")
    data = {"job": job_data(job), "label": label, "value": value[:100], "problem": problem}
    return build_event(t, cluster, subject, key, at, (job.uid, label, value), data)


def job_hung(
    job: ObjectRef,
    *,
    cluster: str,
    at: datetime,
    pod: ObjectRef,
    node: str,
    lease: ObjectRef,
    step: int,
    checkpoint_step: int | None,
    last_step_at: datetime,
    timeout_s: float,
    timeout_from: str,
    action: str,
    reason: str,
    incident_id: str | None,
) -> CloudEvent:
    """A job that reports its training progress (agent.core.progress) made no step for its hang timeout.

    Args:
        job: the job; pod, node: the pod the heartbeat Lease names (rank 0) and its node; lease: the Lease.
        at: when the agent found the hang (event time); last_step_at: when it saw the step change last (its clock).
        step, checkpoint_step: the last step and the last complete checkpoint's step the heartbeat reported.
        timeout_s, timeout_from: the hang timeout (seconds) and where it came from (``label``, ``step-time``,
            ``ceiling``).
        action, reason: what the policy decided (``restart-job``, ``none``, ``abort``, …) and why.
        incident_id: the incident the hang opened or joined (None: none).

    One event per job UID and stall (the step and the time it was last seen to change).

    Raises:
        EventBuildError: naive times, a job without namespace/name, an empty action.
    """
    t = JOB_HUNG
    check_aware(t, "at", at)
    check_aware(t, "last_step_at", last_step_at)
    check_non_empty(t, "action", action)
    subject, key = subject_and_key(t, job, "")
    data = {
        "job": job_data(job),
        "pod": ref_data(pod),
        "node": node,
        "lease": ref_data(lease),
        "step": step,
        "checkpoint_step": checkpoint_step,
        "last_step_at": rfc3339(last_step_at),
        "idle_s": max(0.0, (at - last_step_at).total_seconds()),
        "timeout_s": timeout_s,
        "timeout_from": timeout_from,
        "action": action,
        "reason": reason,
        "incident_id": incident_id,
    }
    return build_event(t, cluster, subject, key, at, (job.uid, str(step), rfc3339(last_step_at)), data)


STRAGGLER_STATES: Final[tuple[str, ...]] = ("straggling", "ended")
STRAGGLER_END_CAUSES: Final[tuple[str, ...]] = (
    "recovered", "restarted", "job-gone", "opted-out", "lease-gone", "ranks-changed"
)  # fmt: skip
STRAGGLER_AVOIDANCE: Final[tuple[str, ...]] = ("none", "node-marked", "disabled")


def job_straggler(
    job: ObjectRef,
    *,
    cluster: str,
    at: datetime,
    found_at: datetime,
    state: str,
    pod: ObjectRef,
    node: str,
    chips: Sequence[str],
    rank: int,
    step: int,
    step_time_s: float | None,
    median_s: float | None,
    multiple: float,
    windows: int,
    lease: ObjectRef,
    mode: str,
    avoidance: str,
    ended_by: str | None = None,
) -> CloudEvent:
    """A pod rank of a job that reports per-rank step times (agent.core.straggler) is a straggler (`state`
    ``straggling``), or its episode ended (``ended``, `ended_by` one of :data:`STRAGGLER_END_CAUSES`).

    Args:
        job: the job; pod, node, chips: the straggler's pod (pod rank `rank`), its node and the chips allocated to
            it; lease: the heartbeat Lease that carried the times.
        at: the event's time (found, or ended); found_at: when the episode was found (the agent's clock).
        step: the heartbeat's step in the window that found it; step_time_s, median_s: the rank's seconds per step
            and the window's median then (at the end: in the window that ended it, None when none did).
        multiple, windows: the rule's settings (detect.straggler_step_time_multiple, detect.straggler_windows).
        mode: the job's ``fault-agent.io/straggler`` label (``detect``, ``avoid``); avoidance: ``node-marked`` (the
            node is marked sub-healthy so the next restart avoids it), ``disabled`` (``avoid`` asked, but
            policy.sub_health_taint is off), ``none``.

    One event per job UID, rank, episode (`found_at`) and state.

    Raises:
        EventBuildError: naive times, a job without namespace/name, an unknown state, cause or avoidance.
    """
    t = JOB_STRAGGLER
    check_aware(t, "at", at)
    check_aware(t, "found_at", found_at)
    if state not in STRAGGLER_STATES:
        raise EventBuildError(t, "state", f"must be one of {STRAGGLER_STATES}, got {state!r}")
    if (ended_by is None) != (state == "straggling") or (ended_by is not None and ended_by not in STRAGGLER_END_CAUSES):
        raise EventBuildError(t, "ended_by", f"{ended_by!r} does not go with state {state!r}")
    if avoidance not in STRAGGLER_AVOIDANCE:
        raise EventBuildError(t, "avoidance", f"must be one of {STRAGGLER_AVOIDANCE}, got {avoidance!r}")
    subject, key = subject_and_key(t, job, "")
    data = {
        "job": job_data(job),
        "state": state,
        "ended_by": ended_by,
        "pod": ref_data(pod),
        "node": node,
        "chips": list(chips),
        "rank": rank,
        "step": step,
        "step_time_s": step_time_s,
        "median_s": median_s,
        "multiple": multiple,
        "windows": windows,
        "lease": ref_data(lease),
        "mode": mode,
        "avoidance": avoidance,
        "found_at": rfc3339(found_at),
    }
    return build_event(t, cluster, subject, key, at, (job.uid, str(rank), rfc3339(found_at), state), data)
