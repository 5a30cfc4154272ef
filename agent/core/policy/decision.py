"""The policy's answer: what to do for a job (:class:`Action`) and the :class:`Decision` that carries it. Pure.

Shapes: :class:`Decision` (frozen): the action, a one-sentence reason, the stop mode, pod names, the budgets it
spends and what they leave (counts; :data:`UNLIMITED_RESTARTS` for a controller that never gives up). How a
whole-job restart is carried out for a job kind is :func:`volcano_restart_by_deletion`. Nothing here raises.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from agent.core.cluster import FaultScheduling, JobKind, JobRecord


class Action(enum.StrEnum):
    """What the agent does for a job."""

    NONE = "none"  # record and publish only
    RESTART_JOB = "restart-job"  # the whole job: Volcano RestartJob Command or pod deletion
    RESTART_PODS = "restart-pods"  # pod-rescheduling: only the hit pods
    ABORT = "abort"  # a budget is used up: record, publish, alert; at most the faulty pods deleted (stop_pods)
    RESUBMIT = "resubmit"  # delete and create the Failed job again from its spec
    FORCE_DELETE_PODS = "force-delete-pods"  # pods stuck terminating on a dead node: grace 0, nothing else
    HAND_OFF = "hand-off"  # ProcessRecoverStrategy: a platform recovers the job; record the recovery, stop nothing
    MARK_PODS = "mark-pods"  # fault-scheduling external-*: annotate the fault pods for an outside component


def volcano_restart_by_deletion(job: JobRecord, volcano_restart: str) -> bool:
    """Whether a whole-job restart of `job` deletes its pods instead of creating a RestartJob Command, for the
    ``policy.volcano_restart`` setting: ``delete-pods`` always (a Volcano Job or an AscendJob), ``auto`` for a
    Volcano Job whose controller restarts the whole job on a deleted pod (:attr:`JobRecord.restarts_on_eviction`:
    MindCluster's way, with the first old pod stopping at the agent's own write), ``command`` never. An AscendJob
    has no Command: it is always restarted by deletion, whatever this says."""
    if job.kind is not JobKind.VOLCANO:
        return True
    return volcano_restart == "delete-pods" or (volcano_restart == "auto" and job.restarts_on_eviction)


def volcano_deletion_outdated(job: JobRecord, pod_versions: Iterable[str]) -> bool:
    """Whether deleting the pods of `job` whose ``volcano.sh/job-version`` annotations are `pod_versions` (text,
    "" when absent) would not restart it in Volcano's count: `job` is a Running Volcano Job and every such pod
    carries a version below its ``status.version`` (:attr:`JobRecord.version`).

    Volcano's job controller turns a deleted pod into a ``PodEvicted`` request carrying the pod's annotation, and
    a request whose version is below the job's ``status.version`` is "outdated": a sync, which re-creates the pod
    under the current version, instead of the ``RestartJob`` its policies give (``volcano.sh/volcano`` v1.14.1
    ``pkg/controllers/job/job_controller_handler.go`` ``deletePod``, ``job_controller_util.go`` ``applyPolicies``).
    Such pods exist when a sync re-created deleted pods under the old version and the ``killJob`` of that restart
    ran before its cache held them: they survive the restart, and the job runs on with them (issue 39; seen about
    once in 100-500 restarts, bench/RESULTS.md). Deleting them makes an uncounted restart that never moves the
    job's restart counter; a ``RestartJob`` Command is counted whatever the pods' versions.

    False when the job is not Running (a restart under way, which the agent's own incident or Volcano's policies
    cover: deleting old pods there only syncs, as before), when the job's version or every pod's is unknown (not a
    number), and when any pod carries the job's version or a newer one (its deletion is a counted ``RestartJob``).
    Pods without a version give Volcano no request at all and are left out."""
    if job.kind is not JobKind.VOLCANO or job.phase != "Running" or not job.version.isdigit():
        return False
    known = [int(v) for v in pod_versions if v.isdigit()]
    return bool(known) and max(known) < int(job.version)


UNLIMITED_RESTARTS = 1 << 30
"""`restarts_left` of a job whose controller never gives up on restarts (an AscendJob with a backoff limit ≤ 0):
no decision ever refuses for lack of restarts; events show no budget (None)."""


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's answer.

    Attributes:
        action: what to do.
        reason: one sentence a person can read in a log line or an event.
        mode: how pods are stopped: FORCE (grace 0, UID precondition) or GRACE (normal deletion, forced after
            grace-over-time); OFF when the action stops no pods.
        pods: names of the pods to restart for RESTART_PODS, else empty.
        consumes_business_budget: the restart spends one ``fault-retry-times`` retry.
        counts_restart: the restart counts against ``maxRetry`` / ``backoffLimit`` (every restart does: both
            controllers count them all).
        business_left: business retries left after this decision (None: the job has no such budget).
        restarts_left: restarts the job's controller still takes after this decision without failing the job
            (:func:`restart_budget`).
        stop_pods: for an ABORT at the end of the restart budget on a hardware fault, the pods on the faulty
            hardware, deleted (in `mode`) so that the job's controller fails the job visibly instead of leaving
            it running on a chip that is out (:func:`end_of_budget_pods`); else empty.
        awaits_hot_switch: a NONE for a sub-health fault of a ``subHealthyStrategy: hotSwitch`` job: nothing is
            deleted until ClusterD annotates a pod ``needVolcanoOpe: delete``; the engine bounds the wait
            (``policy.hot_switch_wait_s``, agent.engine.deciding) and says so when it runs out.
        pod_status: for MARK_PODS, the value of the ``huawei.com/pod-status`` annotation each pod in `pods` gets
            (``Unhealthy-<fault type>``, :func:`pod_status_value`); else "".
        controller_restarts: a NONE because the job's controller restarts the job by itself on this fault (a
            JobSet's failure policy on a failed or evicted pod): observe mode watches for that restart.
    """

    action: Action
    reason: str
    mode: FaultScheduling = FaultScheduling.OFF
    pods: tuple[str, ...] = ()
    consumes_business_budget: bool = False
    counts_restart: bool = False
    business_left: int | None = None
    restarts_left: int = 0
    stop_pods: tuple[str, ...] = ()
    pod_status: str = ""
    awaits_hot_switch: bool = False
    controller_restarts: bool = False

    @property
    def restarts(self) -> bool:
        """True when the decision stops pods (RESTART_JOB or RESTART_PODS)."""
        return self.action in (Action.RESTART_JOB, Action.RESTART_PODS)

    @property
    def budget_left(self) -> int | None:
        """Retries really left after this decision: for a business restart the smaller of the
        ``fault-retry-times`` remainder and the controller's restarts left, else the controller's restarts left
        (``budget_left`` of the recovery-started event); None when neither bounds it (no restart limit)."""
        if self.consumes_business_budget and self.business_left is not None:
            return min(self.business_left, self.restarts_left)
        return None if self.restarts_left >= UNLIMITED_RESTARTS // 2 else self.restarts_left
