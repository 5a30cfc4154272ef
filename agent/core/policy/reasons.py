"""The words of a decision's reason: the fault, the budget left, the job's labels that shaped the decision. Pure.

Each function returns a sentence or a clause (starting with "; " or " (" so the rules can append it; "" when it
does not apply) built only from its arguments, so a reason a person reads in a log line or an event names the
fault, the rule and the job's own numbers and labels. Nothing here raises.
"""

from __future__ import annotations

from agent.core.cluster import JobKind, JobRecord
from agent.core.correlate import JobHit
from agent.core.detect.levels import level_name
from agent.core.faults import Fault, FaultKind
from agent.core.job_labels import PROCESS_RECOVER_LABEL, PROCESS_RECOVER_PAUSE
from agent.core.policy.budget import controller_name
from agent.core.policy.decision import UNLIMITED_RESTARTS


def restarts_text(left: int) -> str:
    """``"3 restarts left"``, or ``"no restart limit"`` for :data:`UNLIMITED_RESTARTS` (or more)."""
    return "no restart limit" if left >= UNLIMITED_RESTARTS // 2 else f"{left} restarts left"


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


def controller_refuses(job: JobRecord, used: int) -> str:
    """Why no restart is left, naming the job's own numbers and who enforces them."""
    return f"no restart left: {restart_limit_text(job, used)}; not restarting"


def fault_in_words(fault: Fault) -> str:
    """The fault as a reason starts: ``<kind> fault <level> at <chips> on <node> codes <codes>``."""
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


def retry_times_shown(job: JobRecord) -> str:
    """The business budget as the reason shows it: a label the sources could not read counts as 0, and says so."""
    raw = job.label("fault-retry-times")
    if raw is not None and raw != str(job.fault_retry_times):
        return f"{job.fault_retry_times}: the label {raw[:20]!r} is not an integer 0–100"
    return str(job.fault_retry_times)


def process_recover_text(job: JobRecord) -> str:
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


def stop_pods_text(job: JobRecord, pods: tuple[str, ...]) -> str:
    """The clause naming the faulty pods an abort deletes so that the controller fails the job (or "")."""
    if not pods:
        return ""
    who = controller_name(job.kind)
    return (
        f"; deleting the faulty pod(s) {', '.join(pods)} ({job.fault_scheduling.value}) so that {who} fails the job "
        "visibly instead of leaving it running on hardware that is out"
    )


def pod_level_text(pods: tuple[str, ...], job: JobRecord | None = None) -> str:
    """The clause naming the one pod a business failure restarts, and the label that limits it (or "")."""
    if not pods:
        return ""
    why = "huawei.com/recover_policy_path: pod" if job is not None and job.pod_only else "process-recover-enable"
    return f"; {why}: deleting pod {pods[0]} only"


def pod_only_text(job: JobRecord) -> str:
    """The clause naming the pod-only limit and where it was read (or "")."""
    if not job.pod_only:
        return ""
    return (
        f" (huawei.com/recover_policy_path: pod, from {job.recover_policy_path_from or 'the job'}: "
        "never the whole job, not even for rank 0)"
    )
