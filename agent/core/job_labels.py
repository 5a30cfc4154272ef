"""A job's fault-tolerance labels as MindCluster's scheduler reads them: its PodGroup's labels merged with its
pods' labels (DOMAIN.md §2).

MindCluster's Volcano plugin never reads the job object's labels. It takes every label of the job's PodGroup,
then adds each label of each of the job's pods: a key the PodGroup lacks takes the pod's value; a value the key
already holds (compared without case, element by element of a ``|``-joined list) is skipped; any other value is
appended after a ``|`` (``component/ascend-for-volcano/plugin/job.go`` ``getJobLabelFromVcJob``,
``isSelectorContains``). The rescheduler then compares the merged values as written
(``internal/rescheduling/job.go`` ``GetJobFaultRescheduleLabel``, ``setFaultRetryTimeOfJob``,
``IsProcessReschedulingJob``; ``job_v2.go`` ``IsProcessReschedulePause``; ``plugin/job.go``
``setJobSubHealthyStrategy``), so a value that differs between the PodGroup and a pod (``force|grace``) is no
known value: not rescheduled, no retries, no process recovery.

Who writes those labels: Volcano's job controller and the Ascend Operator copy the job's labels onto the PodGroup
when they create it, and never again (volcano ``pkg/controllers/job/job_controller_actions.go``
``createOrUpdatePodGroup``; ``component/ascend-operator/pkg/controllers/v1/job.go`` ``createPodGroup``); the
Ascend Operator adds ``process-recover-enable=on`` when the job has the ``recover-strategy`` annotation and at
least one label (``addPgProcessRecoverLabel``, ``isProcessRecoverJob``); ClusterD changes that label on the PodGroup
to ``pause`` when process recovery fails (then the job is rescheduled at job or pod level). A pod's labels are its
template's plus the controller's own (job name, replica type and index, version, ...), none of them one of
:data:`SETTING_LABELS` (volcano ``job_controller_util.go`` ``createJobPod``; ascend-operator ``labels.go``), so
the templates stand in for the pods.

Until the agent sees the job's PodGroup (not made yet, deleted by the Ascend Operator when the job failed, or
PodGroups not watched) the job's own labels stand in for it, with the Ascend Operator's
``process-recover-enable=on`` rule applied: that is what the controller puts on the PodGroup it makes.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from agent.core.cluster import FaultScheduling, JobRecord, PodGroupRecord

FAULT_SCHEDULING_LABEL = "fault-scheduling"
FAULT_RETRY_TIMES_LABEL = "fault-retry-times"
POD_RESCHEDULING_LABEL = "pod-rescheduling"
SUB_HEALTHY_LABEL = "subHealthyStrategy"
PROCESS_RECOVER_LABEL = "process-recover-enable"
"""``on``: ClusterD/TaskD recover the job's processes (MindCluster ``common/util/type.go`` ``ProcessRecoverEnable``);
``pause``: ClusterD turned process recovery off after it failed (``ProcessRecoverPause``)."""
PROCESS_RECOVER_ON = "on"
PROCESS_RECOVER_PAUSE = "pause"
RECOVER_STRATEGY_ANNOTATION = "recover-strategy"
"""The AscendJob annotation from which the Ascend Operator labels the PodGroup ``process-recover-enable=on``
(``component/ascend-operator/pkg/api`` ``RecoverStrategyKey``)."""
SETTING_LABELS = frozenset(
    {FAULT_SCHEDULING_LABEL, FAULT_RETRY_TIMES_LABEL, POD_RESCHEDULING_LABEL, SUB_HEALTHY_LABEL, PROCESS_RECOVER_LABEL}
)
"""The labels MindCluster's scheduler reads from the merged PodGroup and pod labels and the agent decides by."""

Labels = tuple[tuple[str, str], ...]


def merge_labels(base: Mapping[str, str], pods: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """`base` (the PodGroup's labels) merged with each of `pods` (their labels, in order) as MindCluster's
    ``getJobLabelFromVcJob`` does (module docstring): a new key takes the pod's value, a value already among the
    key's ``|``-separated values (without case) is skipped, another is appended after ``|``. Pure."""
    out = dict(base)
    for labels in pods:
        for key, value in labels.items():
            have = out.get(key)
            if have is None:
                out[key] = value
            elif not any(v.casefold() == value.casefold() for v in have.split("|")):
                out[key] = f"{have}|{value}"
    return out


def parse_fault_retry_times(value: str | None) -> int | None:
    """The ``fault-retry-times`` label as the agent uses it: None when absent, the number when it is 0–100 in ASCII
    decimal digits, else 0 (a business retry budget of 0: the job keeps its hardware-fault protection; the label
    is reported by agent.sources.jobs.fault_retry_times_problem). A merged ``3|2`` is such an unusable value, as
    MindCluster's ``strconv.Atoi`` fails on it and counts 0 (``job.go`` ``setFaultRetryTimeOfJob``)."""
    if value is None:
        return None
    if value.isascii() and value.isdigit() and 0 <= int(value) <= 100:
        return int(value)
    return 0


def podgroup_labels_from_job(job: JobRecord) -> dict[str, str]:
    """The setting labels the job's controller puts on the PodGroup it makes: the job's own, plus for an AscendJob
    with the ``recover-strategy`` annotation and any label ``process-recover-enable=on`` (module docstring)."""
    labels = dict(job.job_labels)
    if job.operator_process_recover:
        labels[PROCESS_RECOVER_LABEL] = PROCESS_RECOVER_ON
    return {k: v for k, v in labels.items() if k in SETTING_LABELS}


def job_view(job: JobRecord, podgroup: PodGroupRecord | None) -> JobRecord:
    """`job` with its fault-tolerance settings (``fault_scheduling``, ``fault_retry_times``, ``pod_rescheduling``,
    ``sub_healthy_strategy``, ``process_recover``) and ``labels`` read from the merged labels: `podgroup`'s labels
    (None: the job's own stand in, :func:`podgroup_labels_from_job`) merged with the job's pod templates' labels
    (:func:`merge_labels`). ``settings_from`` says which (``PodGroup <name>`` or ``job``). Every other field is
    `job`'s. Idempotent: it reads only ``job_labels``, ``template_labels`` and `podgroup`. Pure."""
    if podgroup is not None:
        base = {k: v for k, v in podgroup.labels if k in SETTING_LABELS}
        source = f"PodGroup {podgroup.name}"
    else:
        base = podgroup_labels_from_job(job)
        source = "job"
    merged = merge_labels(base, (dict(t) for t in job.template_labels))
    labels = dict(job.job_labels)
    for key in SETTING_LABELS:
        labels.pop(key, None)
    labels.update(merged)
    return with_settings(job, labels, source)


def with_settings(job: JobRecord, labels: Mapping[str, str], source: str) -> JobRecord:
    """`job` with ``labels`` and the settings read from them (see :func:`job_view`). Pure."""
    try:
        scheduling = FaultScheduling(labels.get(FAULT_SCHEDULING_LABEL, "off"))
    except ValueError:
        scheduling = FaultScheduling.OFF
    new = replace(
        job,
        labels=tuple(sorted(labels.items())),
        fault_scheduling=scheduling,
        fault_retry_times=parse_fault_retry_times(labels.get(FAULT_RETRY_TIMES_LABEL)),
        pod_rescheduling=labels.get(POD_RESCHEDULING_LABEL) == "on",
        sub_healthy_strategy=labels.get(SUB_HEALTHY_LABEL, "ignore"),
        process_recover=labels.get(PROCESS_RECOVER_LABEL) == PROCESS_RECOVER_ON,
        settings_from=source,
    )
    return job if new == job else new


def template_labels(templates: Sequence[Mapping[str, str]]) -> tuple[Labels, ...]:
    """The setting labels of each pod template (in the order given), empty ones dropped. Pure."""
    out = []
    for labels in templates:
        kept = tuple(sorted((k, v) for k, v in labels.items() if k in SETTING_LABELS))
        if kept:
            out.append(kept)
    return tuple(out)
