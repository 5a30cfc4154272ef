"""A pod-level restart whose replacement pods stay unplaced escalates to the whole job. Pure.

:func:`pending_escalation` says when (seconds since the restart, from ``policy.pending_escalation_s``; pod
creation compared at whole seconds), :func:`escalation_decision` what (a whole-job :class:`Decision`, or NONE
when no restart is left). MindCluster's plugin: internal/rescheduling/reschedule.go
``singlePodReschedulingUpgrade``. Nothing here raises.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from agent.core.cluster import JobRecord, PodRecord
from agent.core.policy.budget import RetryLedger, restart_budget
from agent.core.policy.decision import Action, Decision
from agent.core.policy.reasons import controller_refuses, restarts_text


def pending_escalation(
    job: JobRecord,
    stopped: Iterable[str],
    pods: Iterable[PodRecord],
    restarted_at: datetime,
    now: datetime,
    pending_s: float,
) -> str | None:
    """Why a pod-level restart must now become a whole-job restart, or None. Pure.

    MindCluster's plugin counts, for a ``pod-rescheduling: on`` job whose fault pods were deleted, every scheduling
    session in which the job still has fewer pods allocated than it needs, and at ``PendingTimes`` = 12 sessions
    deletes the whole job (``internal/rescheduling/reschedule.go`` ``singlePodReschedulingUpgrade``, called from
    ``synCacheFaultJobWithSession``; ``job.go`` ``IsJobSingleRescheduling``; ``common/util/constants.go``). It
    never does so for a ``process-recover-enable: on`` job (the upgrade returns early). Here the 12 sessions are
    `pending_s` seconds (``policy.pending_escalation_s``: 12 × the scheduler's ``--schedule-period``, 1 s by
    default), counted from the pod-level restart. The super-pod step at 6 sessions is not reproduced. Never for a
    job limited to its fault pods (``huawei.com/recover_policy_path: pod``: ``singlePodReschedulingUpgrade``
    returns early when ``allowUpgradePodRescheduling`` is false).

    Args:
        job: the job as watched now.
        stopped: the names of the pods the pod-level restart deleted.
        pods: the job's pods as watched now.
        restarted_at: when the pod-level restart was sent.
        now: the current time.
        pending_s: seconds the replacements may stay unbound.

    Returns the reason (naming the pods still unplaced) once `pending_s` has passed since `restarted_at` and some
    stopped pod has no replacement bound to a node: no live pod of that name created at or after the restart
    (whole seconds), or one with an empty ``spec.nodeName``.
    """
    if not job.pod_rescheduling or job.process_recover or job.pod_only:
        return None
    waited = (now - restarted_at).total_seconds()
    if waited < pending_s:
        return None
    floor = restarted_at.replace(microsecond=0)
    live = {p.name: p for p in pods if p.deletion_timestamp is None}
    unplaced = []
    for name in stopped:
        pod = live.get(name)
        if pod is None or pod.created_at is None or pod.created_at < floor or not pod.node:
            unplaced.append(name)
    if not unplaced:
        return None
    return (
        f"replacement pod(s) {', '.join(sorted(unplaced))} still not placed {waited:.0f} s after the pod-level "
        f"restart (policy.pending_escalation_s={pending_s:g}); escalating to the whole job"
    )


def escalation_decision(job: JobRecord, ledger: RetryLedger, why: str) -> Decision:
    """The whole-job restart a pending pod-level restart escalates to (:func:`pending_escalation` gave `why`), in
    the job's ``fault-scheduling`` mode and counted against its restart budget; NONE when no restart is left
    (the incident then runs into its recovery deadline, as MindCluster's would never escalate past Volcano's
    ``maxRetry`` either). Pure."""
    used, left = restart_budget(job, ledger.restarts_used)
    if left == 0:
        return Decision(Action.NONE, f"{why}: {controller_refuses(job, used)}", restarts_left=0)
    return Decision(
        Action.RESTART_JOB,
        f"{why} ({restarts_text(left - 1)})",
        mode=job.fault_scheduling,
        counts_restart=True,
        restarts_left=left - 1,
    )
