"""Recovery policy: what to do about one fault for one job. Pure: no I/O, no clock reads (time is passed in).

The rules follow MindCluster's fault levels and job labels (shared/DOMAIN.md §2–§3) and the lessons in
DESIGN.md (evictions never eat the retry budget, the agent's own restarts are not new failures):

- job not opted in (``fault-scheduling`` off/absent) → record and publish only;
- job already finished → nothing; job ``Failed`` after a hardware fault → resubmit while the configured
  limit allows (off by default);
- parameter-plane network fault → nothing (the job's own failure, if any, is what restarts it);
- chip / node level ``NotHandleFault`` → nothing; ``SubHealthFault`` → the job's ``subHealthyStrategy``
  (``ignore`` by default, ``graceExit``, ``forceExit``, ``hotSwitch``: nothing until ClusterD asks for a pod's
  deletion with ``needVolcanoOpe: delete``, then that pod as forceExit) when every fault of the job is
  sub-health, else the normal path; ``PreSeparate*`` → leave the running job alone (the
  node is marked, see :func:`quarantine_for`); ``RestartRequest`` … ``ManuallySeparateNPU`` → restart the job,
  or only the hit pods with ``pod-rescheduling=on`` or ``process-recover-enable=on`` unless a master pod is
  among them (:func:`is_master_pod`);
- a job with the ``ProcessRecoverStrategy`` annotation is recovered by an external platform: the agent deletes
  nothing (HAND_OFF) and only records and publishes the fault and the recovery;
- disruption (eviction, preemption, drain) → restart without consuming any budget;
- business failure → restart while the ``fault-retry-times`` budget lasts, then abort; a pod the agent itself
  stopped is never a new failure;
- both controllers count **every** restart (business, hardware, pod-level or disruption, whoever asked): a
  Volcano Job fails at the restart that brings ``status.retryCount`` to ``spec.maxRetry`` (it survives
  ``maxRetry - 1`` restarts), an AscendJob at the restart that brings its pods' ``version`` above its backoff
  limit (``spec.runPolicy.backoffLimit``, else the ``fault-retry-times`` label; ≤ 0 or unset is unlimited: the
  breaker and the rate limit still bound the restarts). No decision promises a restart past that (see
  :func:`restart_budget`); used up → abort.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from agent.core.cluster import FaultScheduling, JobKind, JobRecord, PodRecord
from agent.core.correlate import JobHit
from agent.core.detect.levels import level_name
from agent.core.detect.pods import HOT_SWITCH_DELETE_REASON, SOFTWARE_FAULT_REASON
from agent.core.faults import Fault, FaultKind, FaultLevel
from agent.core.job_labels import PROCESS_RECOVER_LABEL, PROCESS_RECOVER_PAUSE
from agent.core.jobset import restarts_left as jobset_restarts_left
from agent.settings import PolicySettings

FLAPPING_REASON = "Flapping"
"""Suffix of `Fault.reason` (``<reason>+Flapping``) the detector sets on a fault that isolates its chip, or of a chip
already isolated, under a frequency rule (agent.core.detect.flapping: MindCluster's faultCustomization.json rules
and the agent's catch-all); the fault's level is then ManuallySeparateNPU."""


def is_flapping(fault: Fault) -> bool:
    """True when the detector marked `fault` as a flapping chip (reason ``Flapping`` or ``…+Flapping``)."""
    return FLAPPING_REASON in fault.reason.split("+")


STUCK_TERMINATING_REASON = "StuckTerminating"
"""`Fault.reason` of a pod stuck terminating on a dead node (agent.core.detect.pods)."""

_DONE_PHASES = frozenset({"Completed", "Completing", "Succeeded", "Terminated", "Terminating", "Aborted", "Aborting"})
_FAILED_PHASES = frozenset({"Failed"})
_ENDED_PHASES = frozenset({"Failed", "Aborted", "Terminated"})
"""Phases in which the job's controller has given the job up: an incident waiting for it to run again ends."""


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


def controller_name(kind: JobKind) -> str:
    """Who restarts a job of `kind`, for the reasons: ``Volcano``, ``the Ascend Operator``, ``JobSet``."""
    return {JobKind.VOLCANO: "Volcano", JobKind.ASCEND: "the Ascend Operator", JobKind.JOBSET: "JobSet"}[kind]


UNLIMITED_RESTARTS = 1 << 30
"""`restarts_left` of a job whose controller never gives up on restarts (an AscendJob with a backoff limit ≤ 0):
no decision ever refuses for lack of restarts; events show no budget (None)."""


def restarts_text(left: int) -> str:
    """``"3 restarts left"``, or ``"no restart limit"`` for :data:`UNLIMITED_RESTARTS` (or more)."""
    return "no restart limit" if left >= UNLIMITED_RESTARTS // 2 else f"{left} restarts left"


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


MAX_AGENT_PODS_KEPT = 256  # pod UIDs the agent deleted, newest kept


@dataclass(frozen=True, slots=True)
class RetryLedger:
    """A job's retry ledger: its budgets as spent by the agent. Kept by agent.core.incidents, persisted on the job
    under :data:`agent.core.incidents.LEDGER_ANNOTATION`; the policy decides against it.

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


def restart_limit_text(job: JobRecord, used: int) -> str:
    """Who fails the job at which count, naming the real limit and where it was read, e.g. "the Ascend Operator
    fails the job at pod version > spec.runPolicy.backoffLimit 2; version is 2", "Volcano counts every restart
    against maxRetry 3 (retryCount 2) and marks the job Failed at the restart that brings retryCount to
    maxRetry"."""
    if job.kind is JobKind.VOLCANO:
        return (
            f"Volcano counts every restart against maxRetry {job.max_retry} (retryCount {used}) and marks the job "
            "Failed at the restart that brings retryCount to maxRetry"
        )
    if job.kind is JobKind.JOBSET:
        if job.max_retry == 0:
            return f"JobSet will not restart the JobSet on the agent's pod deletion: {job.max_retry_from}"
        if job.max_retry < 0:
            return f"JobSet restarts without limit ({job.max_retry_from})"
        return (
            f"JobSet refuses a restart once status.restartsCountTowardsMax reaches spec.failurePolicy.maxRestarts "
            f"{job.max_retry}; restartsCountTowardsMax is {used} (the agent's restart: {job.max_retry_from})"
        )
    if job.max_retry <= 0:
        return (
            "the Ascend Operator sets the job no restart limit (no spec.runPolicy.backoffLimit > 0, no "
            "fault-retry-times > 0)"
        )
    return (
        f"the Ascend Operator fails the job at pod version > {job.max_retry_from or 'backoffLimit'} "
        f"{job.max_retry}; version is {used}"
    )


def _controller_refuses(job: JobRecord, used: int) -> str:
    """Why no restart is left, naming the job's own numbers and who enforces them."""
    return f"no restart left: {restart_limit_text(job, used)}; not restarting"


def controller_ended_job(job: JobRecord) -> str | None:
    """Why the job's controller has given `job` up (phase Failed, Aborted or Terminated), or None while it may
    still run again. The text names the job's counters, e.g. "Volcano marked the job Failed (status.retryCount 3,
    spec.maxRetry 3)". Volcano phases: ``batch.volcano.sh/v1alpha1`` JobPhase; AscendJob: its conditions
    (agent.sources.jobs.ascend_phase; the kubeflow ``Failed`` condition wins)."""
    if job.phase not in _ENDED_PHASES:
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


REPLICA_TYPE_WORKER = "worker"
"""``training.kubeflow.org/replica-type`` value of a non-master pod (MindCluster ``ReplicaTypeValueWorker``)."""


def is_master_pod(pod: PodRecord) -> bool:
    """MindCluster's master rule (``internal/rescheduling/job.go`` ``isMasterRank``): the pod's ``hccl/rankIndex``
    is 0 **and** its ``training.kubeflow.org/replica-type`` label is absent or not ``worker``. A fault on a master
    pod escalates a pod-level restart to the whole job (``isMasterFault``). Every job the agent acts on is an NPU
    job (MindCluster also requires ``isNpuJob``)."""
    return pod.rank == 0 and pod.replica_type != REPLICA_TYPE_WORKER


def _describe(fault: Fault) -> str:
    where = fault.node or "unknown node"
    if fault.kind in (FaultKind.CHIP, FaultKind.NETWORK) and fault.chips:
        where = f"{', '.join(fault.chips)} on {where}"
    if fault.kind is FaultKind.CHIP and fault.pod is not None:  # ClusterD's fault-type pod label
        where = f"pod {fault.pod.name} (ClusterD fault-type label, {fault.reason}) on {where}"
    if fault.kind in (FaultKind.BUSINESS, FaultKind.DISRUPTION) and fault.pod is not None:
        where = f"pod {fault.pod.name} on {where}"
    codes = f" codes {','.join(fault.codes)}" if fault.codes else ""
    suffix = "" if fault.check_code_ok else " (CheckCode mismatch: data may be torn or hand-edited)"
    return f"{fault.kind.value} fault {level_name(fault)} at {where}{codes}{suffix}"


def restart_policy_note(fault: Fault, hit: JobHit) -> str:
    """For a business failure of a pod whose ``restartPolicy`` is not ``Never``, a clause saying so (else "").

    With ``OnFailure`` (or ``Always``) the kubelet restarts the failed container inside the pod, which stays
    Running, and the agent restarts the whole job on top; the integration guide (and ``fault-agent lint``) ask for
    ``restartPolicy: Never`` on the pods of a job with ``fault-retry-times``.
    """
    if fault.kind is not FaultKind.BUSINESS or fault.pod is None:
        return ""
    pod = next((p for p in hit.pods if p.name == fault.pod.name and p.namespace == fault.pod.namespace), None)
    if pod is None or not pod.restart_policy or pod.restart_policy == "Never":
        return ""
    return (
        f"; the job's restart policy is {pod.restart_policy}, not Never: the kubelet restarts the failed container "
        f"in pod {pod.name} (phase {pod.phase or 'unknown'}) by itself, and the agent restarts the whole job as well"
    )


def _retry_times_shown(job: JobRecord) -> str:
    """The business budget as the reason shows it: a label the sources could not read counts as 0, and says so."""
    raw = job.label("fault-retry-times")
    if raw is not None and raw != str(job.fault_retry_times):
        return f"{job.fault_retry_times}: the label {raw[:20]!r} is not an integer 0–100"
    return str(job.fault_retry_times)


def _business_left(hit: JobHit, ledger: RetryLedger) -> int | None:
    times = hit.job.fault_retry_times
    return None if times is None else max(0, times - ledger.business_retries_used)


def is_sub_health_only(fault: Fault) -> bool:
    """True when `fault` leaves a job's sub-health strategy in charge: a sub-health chip or node fault, or a
    fault that takes no part in the decision (a network fault, a ``NotHandleFault`` or pre-separate level, a
    disruption). A business failure or a chip/node fault at ``RestartRequest`` or above is not (MindCluster
    job.go ``setIsSubHealthFault``: every fault type of the job must be ``SubHealthFault``)."""
    if fault.kind is FaultKind.BUSINESS:
        return False
    if fault.kind not in (FaultKind.CHIP, FaultKind.NODE):
        return True
    return fault.level in (FaultLevel.NOT_HANDLE, FaultLevel.SUB_HEALTH, FaultLevel.PRE_SEPARATE)


def decide(
    fault: Fault,
    hit: JobHit,
    ledger: RetryLedger,
    settings: PolicySettings,
    now: datetime,
    *,
    other_faults: Sequence[Fault] = (),
) -> Decision:
    """Choose what to do about `fault` for the job in `hit`. Pure: no I/O, no clock reads.

    A job with the ``ProcessRecoverStrategy`` annotation gets HAND_OFF wherever the rules below would restart or
    abort it: MindCluster's rescheduler deletes nothing for such a job, whatever the fault (``job.go``
    ``isDealFaultByExternal``, checked first in ``isFaultJobCanRestarted``); the agent still opens an incident,
    publishes the fault and the recovery, and times the recovery from the job's own state.

    Args:
        fault: the fault (already correlated to `hit`).
        hit: the job and its pods the fault touches (from :func:`agent.core.correlate.correlate`).
        ledger: the job's retry ledger (agent.core.incidents keeps it).
        settings: the policy settings (``resubmit_limit`` is read here).
        now: the current time (UTC), used for the fault's age in the reason.
        other_faults: the job's other active faults (read only for a sub-health fault: any that is not
            :func:`is_sub_health_only` puts the job on the normal path, its ``fault-scheduling`` mode).

    Returns a :class:`Decision` whose `reason` names the fault, the rule applied and the budget left.
    Never raises on well-typed input.
    """
    if hit.job.fault_scheduling.external:
        return _decide_external(fault, hit, ledger, settings, now, other_faults)
    decision = _decide(fault, hit, ledger, settings, now, other_faults)
    strategy = hit.job.process_recover_strategy
    if strategy is None or decision.action not in (Action.RESTART_JOB, Action.RESTART_PODS, Action.ABORT):
        return decision
    return Decision(
        Action.HAND_OFF,
        f"{_describe(fault)}: the {hit.job.process_recover_strategy_from}'s ProcessRecoverStrategy annotation "
        f"({strategy[:40]!r}) hands its recovery "
        "to the platform; deleting nothing, recording the recovery",
        business_left=decision.business_left,
        restarts_left=restart_budget(hit.job, ledger.restarts_used)[1],
    )


POD_STATUS_ANNOTATION = "huawei.com/pod-status"
"""The pod annotation MindCluster's rescheduler sets on each fault pod of an ``external-force`` /
``external-grace`` job (``internal/rescheduling/type.go`` ``PodStatus`` = ``HuaweiPrefix + "pod-status"``). It never
removes it: the outside component replaces the pod, and the new pod does not carry it."""
POD_STATUS_UNHEALTHY = "Unhealthy"
"""The value's prefix (``internal/rescheduling/type.go`` ``CommonUnhealthyStatus``)."""


def pod_status_value(fault: Fault) -> str:
    """``Unhealthy-<fault type>`` for `fault`, in the fault-type words of MindCluster's fault tasks
    (``internal/rescheduling/reschedule.go`` ``getTaskHealthState``; constants in ``internal/rescheduling/type.go``):
    a sub-health chip or node fault ``SubHealthFault``; another chip fault ``CardUnhealthy`` (``NodeCardUnhealthy``);
    a node fault (NodeD, switch, NotReady) ``NodeUnhealthy``; a business failure ``pod-failed`` (``PodFailed``).
    Pure."""
    if fault.kind is FaultKind.BUSINESS:
        kind = "pod-failed"
    elif fault.level is FaultLevel.SUB_HEALTH:
        kind = "SubHealthFault"
    elif fault.kind is FaultKind.NODE:
        kind = "NodeUnhealthy"
    else:
        kind = "CardUnhealthy"
    return f"{POD_STATUS_UNHEALTHY}-{kind}"


def _decide_external(
    fault: Fault,
    hit: JobHit,
    ledger: RetryLedger,
    settings: PolicySettings,
    now: datetime,
    other_faults: Sequence[Fault],
) -> Decision:
    """An ``external-force`` / ``external-grace`` job: the pods the rules would stop for a chip, node or business
    fault are marked instead (MARK_PODS), and nothing is deleted.

    MindCluster (``internal/rescheduling/job.go`` ``restartSingleFaultJob`` → ``addPodStatusAnnotationForFaultTask``)
    marks each fault task's pod, whichever job-level or pod-level restart the labels would ask for, and checks no
    retry budget first (``isFaultJobCanRestarted`` runs only for ``force`` / ``grace``), nor the
    ``ProcessRecoverStrategy`` annotation (read in that check). So: the same rules as ``force`` decide whether the
    fault is one to act on (level, sub-health strategy, ``fault-retry-times`` present, job phase), and any restart
    or abort they give becomes a mark of the fault pods: the pods on the faulty chips or node, or the failed pod.
    A disruption, a pod stuck terminating and a resubmission are not MindCluster fault tasks: recorded only. The
    mark spends no budget and is not a restart the agent makes (the outside component decides)."""
    job = hit.job
    as_force = replace(hit, job=replace(job, fault_scheduling=FaultScheduling.FORCE, process_recover_strategy=None))
    decision = _decide(fault, as_force, ledger, settings, now, other_faults)
    what = _describe(fault)
    label = f"fault-scheduling={job.fault_scheduling.value}"
    if decision.action is Action.NONE:
        return replace(decision, reason=decision.reason.replace("fault-scheduling off", label))
    if decision.action not in (Action.RESTART_JOB, Action.RESTART_PODS, Action.ABORT) or fault.kind not in (
        FaultKind.CHIP,
        FaultKind.NODE,
        FaultKind.BUSINESS,
    ):
        return Decision(
            Action.NONE,
            f"{what}: {label}: an outside component recovers the job and this is no fault pod to mark; recorded only",
            business_left=decision.business_left,
            restarts_left=decision.restarts_left,
        )
    if fault.kind is FaultKind.BUSINESS:
        pods: tuple[str, ...] = (fault.pod.name,) if fault.pod is not None else ()
    else:
        pods = tuple(sorted(p.name for p in hit.pods if p.deletion_timestamp is None))
    if not pods:
        return Decision(Action.NONE, f"{what}: {label}: no live pod of the job on it to mark; recorded only")
    value = pod_status_value(fault)
    _, restarts_left = restart_budget(job, ledger.restarts_used)
    return Decision(
        Action.MARK_PODS,
        f"{what}: {label}: marking pod(s) {', '.join(pods)} {POD_STATUS_ANNOTATION}={value} for the outside "
        "component; deleting nothing",
        pods=pods,
        business_left=_business_left(hit, ledger),
        restarts_left=restarts_left,
        pod_status=value,
    )


def _decide(
    fault: Fault,
    hit: JobHit,
    ledger: RetryLedger,
    settings: PolicySettings,
    now: datetime,
    other_faults: Sequence[Fault] = (),
) -> Decision:
    job = hit.job
    what = _describe(fault)
    age_s = max(0.0, (now - fault.signal_time).total_seconds())
    business_left = _business_left(hit, ledger)
    restarts_used, restarts_left = restart_budget(job, ledger.restarts_used)
    controller = controller_name(job.kind)

    def refused() -> Decision:
        stop = end_of_budget_pods(fault, hit)
        return Decision(
            Action.ABORT,
            f"{what}: {_controller_refuses(job, restarts_used)}{_stop_pods_text(job, stop)}",
            mode=job.fault_scheduling if stop else FaultScheduling.OFF,
            business_left=business_left,
            restarts_left=0,
            stop_pods=stop,
        )

    def none(why: str) -> Decision:
        return Decision(Action.NONE, f"{what}: {why}", business_left=business_left, restarts_left=restarts_left)

    if job.fault_scheduling not in (FaultScheduling.FORCE, FaultScheduling.GRACE):
        return none("job does not opt in (fault-scheduling off); recorded and published only")
    if job.phase in _DONE_PHASES:
        return none(f"job is {job.phase}; nothing to recover")

    hardware = fault.kind in (FaultKind.CHIP, FaultKind.NODE) and fault.level.takes_chip_out
    if job.phase in _FAILED_PHASES:
        if job.kind is JobKind.JOBSET:
            return none("JobSet marked the JobSet Failed; the agent does not resubmit JobSets")
        if not hardware:
            return none("job already Failed and the fault is not a hardware fault that would justify a resubmit")
        if settings.resubmit_limit == 0:
            return none("job Failed on a hardware fault; resubmit is off (policy.resubmit_limit=0)")
        if ledger.resubmits_used >= settings.resubmit_limit:
            return Decision(
                Action.ABORT,
                f"{what}: job Failed and its resubmit limit ({settings.resubmit_limit}) is used up",
                business_left=business_left,
                restarts_left=restarts_left,
            )
        left = settings.resubmit_limit - ledger.resubmits_used - 1
        return Decision(
            Action.RESUBMIT,
            f"{what}: job Failed on a hardware fault; resubmitting ({left} resubmits left)",
            business_left=business_left,
            restarts_left=restarts_left,
        )

    mode = job.fault_scheduling

    if fault.kind is FaultKind.DISRUPTION and fault.reason == STUCK_TERMINATING_REASON and fault.pod is not None:
        return Decision(
            Action.FORCE_DELETE_PODS,
            f"{what}: pod stuck terminating on a dead node; force-deleting it so its replacement is not blocked",
            mode=FaultScheduling.FORCE,
            pods=(fault.pod.name,),
            business_left=business_left,
            restarts_left=restarts_left,
        )

    if job.kind is JobKind.JOBSET and fault.kind in (FaultKind.DISRUPTION, FaultKind.BUSINESS):
        # the pod's failure already fails its child Job (backoffLimit 0), and JobSet restarts the whole JobSet by
        # its own failure policy (an eviction under a RestartJobSetAndIgnoreMaxRestarts rule without spending
        # maxRestarts): a deletion of ours on top would be a second restart (agent.core.jobset)
        return replace(
            none(
                f"JobSet's own failure policy restarts the JobSet on the failed pod's child Job "
                f"({restarts_text(restarts_left)}); the agent deletes nothing and spends no business retry"
            ),
            controller_restarts=True,
        )

    if fault.kind is FaultKind.DISRUPTION:
        if restarts_left == 0:
            return refused()
        return Decision(
            Action.RESTART_JOB,
            f"{what} ({fault.reason or 'disruption'}): restarting; disruptions never consume the business retry "
            f"budget, but {controller} counts the restart against {job.max_retry_from or 'its limit'} "
            f"({restarts_text(restarts_left - 1)})",
            mode=mode,
            counts_restart=True,
            business_left=business_left,
            restarts_left=restarts_left - 1,
        )

    if fault.kind is FaultKind.BUSINESS:
        if fault.pod is not None and fault.pod.uid and fault.pod.uid in ledger.agent_pod_uids:
            return none("the pod was stopped by the agent's own restart; not a new failure")
        note = restart_policy_note(fault, hit)
        if business_left is None:
            return none(f"job has no fault-retry-times label; its own restart policy applies{note}")
        if business_left == 0:
            return Decision(
                Action.ABORT,
                f"{what}: business retry budget (fault-retry-times={_retry_times_shown(job)}) is used up; "
                f"aborting{note}",
                business_left=0,
                restarts_left=restarts_left,
            )
        pod_level = _pod_level(fault, hit)
        if restarts_left == 0:
            return refused()
        after = restarts_left - 1
        left = min(business_left - 1, after)
        bound = (
            f"; {controller} allows {after} more restart(s) before {job.max_retry_from or 'its limit'} {job.max_retry}"
            if left < business_left - 1
            else ""
        )
        return Decision(
            Action.RESTART_PODS if pod_level else Action.RESTART_JOB,
            f"{what}: business failure, retry {ledger.business_retries_used + 1} of {job.fault_retry_times} "
            f"({left} left{bound}){_pod_level_text(pod_level, job)}{note}",
            pods=pod_level,
            mode=mode,
            consumes_business_budget=True,
            counts_restart=True,
            business_left=business_left - 1,
            restarts_left=after,
        )

    if fault.kind is FaultKind.NETWORK:
        return none("a parameter-plane network fault alone does not restart a job; its own failure would")

    # Chip and node faults by level.
    level = fault.level
    if level is FaultLevel.NOT_HANDLE:
        return none("level needs no handling; recorded")
    if level is FaultLevel.SUB_HEALTH:
        hard = [f for f in other_faults if not is_sub_health_only(f)]
        strategy = job.sub_healthy_strategy or "ignore"
        if hard:  # MindCluster: the strategy only when every fault of the job is SubHealthFault
            what = f"{what}, with {_describe(hard[0])} also on the job: the normal path"
        elif strategy == "graceExit":
            mode = FaultScheduling.GRACE
        elif strategy == "hotSwitch" and fault.reason != HOT_SWITCH_DELETE_REASON:
            return Decision(
                Action.NONE,
                f"{what}: subHealthyStrategy=hotSwitch: nothing deleted while ClusterD switches to a backup pod; "
                "the pod it replaces is deleted once ClusterD annotates it needVolcanoOpe=delete",
                business_left=business_left,
                restarts_left=restarts_left,
                awaits_hot_switch=True,
            )
        elif strategy in ("forceExit", "hotSwitch"):  # the rescheduler force-deletes for both
            mode = FaultScheduling.FORCE
            if strategy == "hotSwitch":
                what = (
                    f"{what}: ClusterD's hot switch asks for this pod's deletion (needVolcanoOpe=delete), deleted at "
                    "once as forceExit deletes"
                )
        else:
            return none(f"sub-health fault and subHealthyStrategy={strategy}; job left running")
    elif level is FaultLevel.PRE_SEPARATE:
        if fault.reason == SOFTWARE_FAULT_REASON:
            return none(
                "ClusterD labelled the pod fault-type=software: left to the platform's process recovery, as "
                "MindCluster's rescheduler leaves it; the job's own failure restarts it"
            )
        if fault.kind is FaultKind.NODE:
            return none("pre-separate level: running job left alone; the node is quarantined (NoSchedule taint)")
        return none(
            "pre-separate level: running job left alone; the device plugin keeps the chip from new pods once it is "
            "free (the agent marks nothing)"
        )

    if restarts_left == 0:
        return refused()
    after = restarts_left - 1
    if (job.pod_rescheduling or job.process_recover or job.pod_only) and hit.pods:
        master = None if job.pod_only else next((p for p in hit.pods if is_master_pod(p)), None)
        if master is not None:
            return Decision(
                Action.RESTART_JOB,
                f"{what}: master pod {master.name} is hit (rank 0, replica type "
                f"{master.replica_type or 'unset'}), escalating pod rescheduling to the whole job "
                f"({restarts_text(after)})",
                mode=mode,
                counts_restart=True,
                business_left=business_left,
                restarts_left=after,
            )
        names = tuple(p.name for p in hit.pods)
        return Decision(
            Action.RESTART_PODS,
            f"{what}: rescheduling pods {', '.join(names)} only{_process_recover_text(job)}{_pod_only_text(job)}"
            f" ({restarts_text(after)})",
            mode=mode,
            pods=names,
            counts_restart=True,
            business_left=business_left,
            restarts_left=after,
        )
    return Decision(
        Action.RESTART_JOB,
        f"{what}: restarting the job in {mode.value} mode{_process_recover_text(job)}, fault seen {age_s:.1f} s ago "
        f"({restarts_text(after)})",
        mode=mode,
        counts_restart=True,
        business_left=business_left,
        restarts_left=after,
    )


def _process_recover_text(job: JobRecord) -> str:
    """The reason's words on the job's ``process-recover-enable`` label (merged from its PodGroup's and pods'
    labels, agent.core.job_labels): ``on`` (only the fault pods are deleted), ``pause`` (ClusterD turned process
    recovery off after it failed: MindCluster reschedules at pod or job level as without it, ``job_v2.go``
    ``IsProcessReschedulePause``), else nothing."""
    value = job.label(PROCESS_RECOVER_LABEL)
    if job.process_recover:
        return f" (process-recover-enable=on from the {job.settings_from}: ClusterD/TaskD recover the processes)"
    if value == PROCESS_RECOVER_PAUSE:
        return (
            f" (process-recover-enable=pause from the {job.settings_from}: process recovery failed and ClusterD "
            "paused it, so the job is rescheduled without it)"
        )
    return ""


def end_of_budget_pods(fault: Fault, hit: JobHit) -> tuple[str, ...]:
    """The pods to delete when a hardware fault meets a job with no restart left: the hit pods (those on the
    faulty chips or node, not being deleted already), so that the job's controller fails the job at their
    deletion, as it does after MindCluster's plugin, which deletes a fault job's pods whatever the controller's
    limit and leaves the verdict to the controller (internal/rescheduling/job.go ``isFaultJobCanRestarted``
    checks only the business retries; ``ForceDeleteJob`` / ``GraceDeleteJob``). Left alone, the job would keep
    running on a chip that is out, making no progress and raising nothing.

    Only where a deleted pod is a restart the controller counts and refuses: an AscendJob (the operator bumps
    its pods' version at any deleted pod and fails the job past its backoff limit) and a Volcano Job whose
    lifecycle policies answer a deleted pod with ``RestartJob`` (``JobRecord.restarts_on_eviction``: Volcano
    then fails it at ``retryCount == maxRetry``). A Volcano Job without such a policy would only get the pod
    re-created, an uncounted partial restart: nothing is deleted (its abort is the alert). Not for a business
    failure (the pod failed already: the controller sees it) nor for a disruption (the pod is going already)."""
    if fault.kind not in (FaultKind.CHIP, FaultKind.NODE) or not fault.level.takes_chip_out:
        return ()
    job = hit.job
    if job.kind is JobKind.VOLCANO and not job.restarts_on_eviction:
        return ()
    return tuple(sorted(p.name for p in hit.pods if p.deletion_timestamp is None))


def _stop_pods_text(job: JobRecord, pods: tuple[str, ...]) -> str:
    if not pods:
        return ""
    who = controller_name(job.kind)
    return (
        f"; deleting the faulty pod(s) {', '.join(pods)} ({job.fault_scheduling.value}) so that {who} fails the job "
        "visibly instead of leaving it running on hardware that is out"
    )


def _pod_level(fault: Fault, hit: JobHit) -> tuple[str, ...]:
    """For a business failure of a ``process-recover-enable: on`` job, or of a job limited to its fault pods
    (``huawei.com/recover_policy_path: pod``, :attr:`JobRecord.pod_only`): the failed pod's name when only it is
    to be deleted (MindCluster deletes only the fault tasks of a process-recovery job unless the master is hit,
    and only the fault tasks, master or not, when upgrading is not allowed: ``job.go``
    ``isNormalTaskCanBeDelete``); else () (the whole job)."""
    job = hit.job
    if not (job.process_recover or job.pod_only) or fault.pod is None:
        return ()
    pod = next((p for p in hit.pods if p.name == fault.pod.name), None)
    if pod is None or (is_master_pod(pod) and not job.pod_only):
        return ()
    return (pod.name,)


def _pod_level_text(pods: tuple[str, ...], job: JobRecord | None = None) -> str:
    if not pods:
        return ""
    why = "huawei.com/recover_policy_path: pod" if job is not None and job.pod_only else "process-recover-enable"
    return f"; {why}: deleting pod {pods[0]} only"


def _pod_only_text(job: JobRecord) -> str:
    """The clause naming the pod-only limit and where it was read (or "")."""
    if not job.pod_only:
        return ""
    return (
        f" (huawei.com/recover_policy_path: pod, from {job.recover_policy_path_from or 'the job'}: "
        "never the whole job, not even for rank 0)"
    )


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
        return Decision(Action.NONE, f"{why}: {_controller_refuses(job, used)}", restarts_left=0)
    return Decision(
        Action.RESTART_JOB,
        f"{why} ({restarts_text(left - 1)})",
        mode=job.fault_scheduling,
        counts_restart=True,
        restarts_left=left - 1,
    )
