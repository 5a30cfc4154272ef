"""The per-fault-kind rules: what to do about one fault for one job, as a :class:`Decision`. Pure.

Inputs: the fault, the job and its pods it hits (agent.core.correlate ``JobHit``), the job's retry ledger, the
policy settings and `now` (UTC; only the fault's age in the reason reads it). The reason texts are
agent.core.policy.reasons', the budget arithmetic agent.core.policy.budget's. Never raises on well-typed input.
MindCluster sources: component/ascend-for-volcano/internal/rescheduling (job.go, reschedule.go, type.go).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from agent.core.cluster import FaultScheduling, JobKind, PodRecord
from agent.core.correlate import JobHit
from agent.core.detect.pods import HOT_SWITCH_DELETE_REASON, SOFTWARE_FAULT_REASON
from agent.core.faults import Fault, FaultKind, FaultLevel
from agent.core.policy.budget import RetryLedger, controller_name, restart_budget
from agent.core.policy.decision import Action, Decision
from agent.core.policy.reasons import (
    controller_refuses,
    fault_in_words,
    pod_level_text,
    pod_only_text,
    process_recover_text,
    restart_policy_note,
    restarts_text,
    retry_times_shown,
    stop_pods_text,
)
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


REPLICA_TYPE_WORKER = "worker"
"""``training.kubeflow.org/replica-type`` value of a non-master pod (MindCluster ``ReplicaTypeValueWorker``)."""


def is_master_pod(pod: PodRecord) -> bool:
    """MindCluster's master rule (``internal/rescheduling/job.go`` ``isMasterRank``): the pod's ``hccl/rankIndex``
    is 0 **and** its ``training.kubeflow.org/replica-type`` label is absent or not ``worker``. A fault on a master
    pod escalates a pod-level restart to the whole job (``isMasterFault``). Every job the agent acts on is an NPU
    job (MindCluster also requires ``isNpuJob``)."""
    return pod.rank == 0 and pod.replica_type != REPLICA_TYPE_WORKER


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
        f"{fault_in_words(fault)}: the {hit.job.process_recover_strategy_from}'s ProcessRecoverStrategy annotation "
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
    what = fault_in_words(fault)
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
    what = fault_in_words(fault)
    age_s = max(0.0, (now - fault.signal_time).total_seconds())
    business_left = _business_left(hit, ledger)
    restarts_used, restarts_left = restart_budget(job, ledger.restarts_used)
    controller = controller_name(job.kind)

    def refused() -> Decision:
        stop = end_of_budget_pods(fault, hit)
        return Decision(
            Action.ABORT,
            f"{what}: {controller_refuses(job, restarts_used)}{stop_pods_text(job, stop)}",
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
                f"{what}: business retry budget (fault-retry-times={retry_times_shown(job)}) is used up; "
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
            f"({left} left{bound}){pod_level_text(pod_level, job)}{note}",
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
            what = f"{what}, with {fault_in_words(hard[0])} also on the job: the normal path"
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
            f"{what}: rescheduling pods {', '.join(names)} only{process_recover_text(job)}{pod_only_text(job)}"
            f" ({restarts_text(after)})",
            mode=mode,
            pods=names,
            counts_restart=True,
            business_left=business_left,
            restarts_left=after,
        )
    return Decision(
        Action.RESTART_JOB,
        f"{what}: restarting the job in {mode.value} mode{process_recover_text(job)}, fault seen {age_s:.1f} s ago "
        f"({restarts_text(after)})",
        mode=mode,
        counts_restart=True,
        business_left=business_left,
        restarts_left=after,
    )


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
