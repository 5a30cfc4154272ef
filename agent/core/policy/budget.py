"""A job's restart budgets: the agent's retry ledger and the limits of the job's controller. Pure.

Shapes: :class:`RetryLedger` (frozen counts: business retries, restarts, resubmissions, incidents, and the UIDs
of pods the agent stopped); :func:`restart_budget` gives (restarts counted, restarts left) from the ledger and the
job's own counter, read as each controller counts them (Volcano ``status.retryCount`` against ``spec.maxRetry``,
pkg/controllers/job/state/restarting.go; the Ascend Operator's pod ``version`` against its backoff limit,
component/ascend-operator/pkg/controllers/v1/ascendjob_controller.go; JobSet's ``restartsCountTowardsMax``).
:func:`controller_ended_job` says when the controller has given the job up. Nothing here raises.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from agent.core.cluster import JobKind, JobRecord
from agent.core.jobset import restarts_left as jobset_restarts_left
from agent.core.policy.decision import UNLIMITED_RESTARTS, Decision

ENDED_PHASES = frozenset({"Failed", "Aborted", "Terminated"})
"""Phases in which the job's controller has given the job up: an incident waiting for it to run again ends."""


def controller_name(kind: JobKind) -> str:
    """Who restarts a job of `kind`, for the reasons: ``Volcano``, ``the Ascend Operator``, ``JobSet``."""
    return {JobKind.VOLCANO: "Volcano", JobKind.ASCEND: "the Ascend Operator", JobKind.JOBSET: "JobSet"}[kind]


MAX_AGENT_PODS_KEPT = 256  # pod UIDs the agent deleted, newest kept


@dataclass(frozen=True, slots=True)
class RetryLedger:
    """A job's retry ledger: its budgets as spent by the agent. Kept by agent.core.incidents, persisted in the job's
    record ConfigMap (``fault-agent-job-<uid>``, key :data:`agent.core.records.KEY_LEDGER`; the job annotation
    :data:`agent.core.incidents.LEDGER_ANNOTATION` is only read from jobs written by older agents); the policy
    decides against it.

    ``business_retries_used`` is MindCluster's ``remain-retry-times`` seen from the other side (``Times`` =
    ``fault-retry-times`` - used, agent.core.bookkeeping.remain_times_after; internal/rescheduling/reschedule.go
    ``doRestartJob``, job.go ``isFaultJobCanRestarted``): only a restart for a failed pod spends one, the label
    counts only when > 0, nothing refills it. Unlike MindCluster it is charged when the incident opens (before the
    restart is sent: a crash or a failed restart cannot buy a second restart on one retry) and it survives an
    agent restart (MindCluster's count lives in the scheduler's memory and starts again from the label).

    Attributes:
        business_retries_used: restarts for business failures (``fault-retry-times``).
        restarts_used: the agent's restarts that count against ``maxRetry`` / ``backoffLimit``.
        resubmits_used: resubmissions.
        incidents: incidents opened for this job so far (gives each a distinct id).
        agent_pod_uids: UIDs of pods the agent deleted (newest :data:`MAX_AGENT_PODS_KEPT`).
    """

    business_retries_used: int = 0
    restarts_used: int = 0
    resubmits_used: int = 0
    incidents: int = 0
    agent_pod_uids: tuple[str, ...] = ()

    def charge(self, decision: Decision) -> RetryLedger:
        """The ledger after `decision` was carried out (budgets spent as the decision says)."""
        return replace(
            self,
            business_retries_used=self.business_retries_used + int(decision.consumes_business_budget),
            restarts_used=self.restarts_used + int(decision.counts_restart),
            resubmits_used=self.resubmits_used + int(decision.action.value == "resubmit"),
        )

    def with_agent_pods(self, uids: Iterable[str]) -> RetryLedger:
        """The ledger remembering `uids` as pods the agent itself stopped."""
        merged = list(dict.fromkeys([*self.agent_pod_uids, *uids]))
        return replace(self, agent_pod_uids=tuple(merged[-MAX_AGENT_PODS_KEPT:]))


def restart_budget(job: JobRecord, restarts_used: int) -> tuple[int, int]:
    """(restarts counted so far, restarts the job's controller still takes without failing the job).

    `restarts_used` is the agent's ledger; the count is the larger of it and the job's own counter
    (``JobRecord.retry_count``), because the watch cache may lag the controller and the controller also counts
    restarts others made (a person deleting a pod, the operator's own retry of a failed pod).

    - Volcano Job: ``status.retryCount`` counts every RestartJob / RestartTask / RestartPod (Volcano v1.14
      ``pkg/controllers/job/state/running.go`` and ``pending.go`` add one per restart action) and the Restarting
      state marks the job ``Failed`` once ``retryCount >= spec.maxRetry`` (``state/restarting.go``): with
      maxRetry M the job survives M - 1 restarts, so ``left = maxRetry - 1 - used``.
    - AscendJob: the operator's counter is its pods' ``version`` label (the state reads it into
      ``retry_count``): every deleted pod of the current version bumps it, whoever deleted it, and the job goes
      Failed once ``version > backoffLimit`` (component/ascend-operator/pkg/controllers/v1/ascendjob_controller.go
      ``onPodDeleteFunc``, job.go ``reconcileJob``), so ``left = limit - used``. The limit is
      ``spec.runPolicy.backoffLimit``, else the ``fault-retry-times`` label, else unlimited
      (agent.sources.jobs.ascend_backoff_from_label); ≤ 0 is unlimited (:data:`UNLIMITED_RESTARTS`), because the
      operator fails a job only for ``backoffLimit > 0 && version > backoffLimit``.
    """
    used = max(restarts_used, job.retry_count)
    if job.kind is JobKind.VOLCANO:
        return used, max(0, job.max_retry - 1 - used)
    if job.kind is JobKind.JOBSET:
        # JobSet's own counter (status.restartsCountTowardsMax), never the agent's: a restart under a
        # RestartJobSetAndIgnoreMaxRestarts rule (an eviction) does not raise it (agent.core.jobset)
        left = jobset_restarts_left(job.max_retry, job.retry_count)
        return job.retry_count, UNLIMITED_RESTARTS if left is None else left
    if job.max_retry <= 0:
        return used, UNLIMITED_RESTARTS
    return used, max(0, job.max_retry - used)


def controller_ended_job(job: JobRecord) -> str | None:
    """Why the job's controller has given `job` up (phase Failed, Aborted or Terminated), or None while it may
    still run again. The text names the job's counters, e.g. "Volcano marked the job Failed (status.retryCount 3,
    spec.maxRetry 3)". Volcano phases: ``batch.volcano.sh/v1alpha1`` JobPhase; AscendJob: its conditions
    (agent.sources.jobs.ascend_phase; the kubeflow ``Failed`` condition wins)."""
    if job.phase not in ENDED_PHASES:
        return None
    if job.kind is JobKind.VOLCANO:
        return (
            f"Volcano marked the job {job.phase} (status.retryCount {job.retry_count}, spec.maxRetry {job.max_retry})"
        )
    if job.kind is JobKind.JOBSET:
        return (
            f"JobSet marked the JobSet {job.phase} (status.restarts {job.version or 0}, restartsCountTowardsMax "
            f"{job.retry_count})"
        )
    version = job.version or "unknown"
    if job.max_retry <= 0:
        return f"the Ascend Operator marked the job {job.phase} (pod version {version}; no restart limit)"
    return (
        f"the Ascend Operator marked the job {job.phase} (pod version {version}, "
        f"{job.max_retry_from or 'backoffLimit'} {job.max_retry})"
    )
