"""The rules of a JobSet and of a Kubeflow Trainer v2 TrainJob (docs/jobset.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.cluster import FaultScheduling
from agent.core.job_labels import FAULT_RETRY_TIMES_LABEL, FAULT_SCHEDULING_LABEL, POD_RESCHEDULING_LABEL
from agent.core.jobset import restart_budget
from agent.platform.lint.common import (
    ERROR,
    WARNING,
    Checker,
    as_list,
    get_in,
)
from agent.sources.common import Bad
from agent.sources.jobsets import jobset_spec


def check_jobset(c: Checker, job: Mapping[str, Any]) -> None:
    """A JobSet (docs/jobset.md): opted in by ``fault-scheduling`` (force or grace); restartable by the agent (its
    child Jobs fail on a deleted pod and its failure policy restarts on that: agent.core.jobset.restart_budget);
    evictions not spent from ``maxRestarts``; pods with ``restartPolicy: Never`` (with OnFailure, JobSet's webhook
    default, the kubelet restarts a failed container in place and JobSet never restarts the JobSet)."""
    labels = get_in(job, "metadata", "labels")
    labels = labels if isinstance(labels, Mapping) else {}
    scheduling = labels.get(FAULT_SCHEDULING_LABEL)
    if scheduling not in (FaultScheduling.FORCE.value, FaultScheduling.GRACE.value):
        c.add(
            f"metadata.labels.{FAULT_SCHEDULING_LABEL}",
            "jobset-not-opted-in",
            f"fault-scheduling is {scheduling!r}: the agent restarts a JobSet only with force or grace",
            WARNING if scheduling is None else ERROR,
        )
    spec = get_in(job, "spec")
    try:
        parsed = jobset_spec(spec if isinstance(spec, dict) else {})
    except Bad as e:
        c.add("spec", "jobset-spec-invalid", e.detail)
        return
    budget = restart_budget(parsed)
    if budget.limit == 0:
        c.add("spec", "jobset-not-restartable", f"the agent cannot restart this JobSet: {budget.why}")
    if budget.evictions_counted:
        c.add(
            "spec.failurePolicy",
            "jobset-evictions-counted",
            "an eviction or a drain would spend maxRestarts: give each child Job a podFailurePolicy rule FailJob on "
            "DisruptionTarget and the failure policy a rule RestartJobSetAndIgnoreMaxRestarts on PodFailurePolicy",
            WARNING,
        )
    for i, rjob in enumerate(as_list(get_in(job, "spec", "replicatedJobs"))):
        policy = get_in(rjob, "template", "spec", "template", "spec", "restartPolicy")
        if policy != "Never":
            c.add(
                f"spec.replicatedJobs[{i}].template.spec.template.spec.restartPolicy",
                "jobset-restart-policy",
                f"restartPolicy is {policy!r}: use Never, so that a failed pod fails its Job and JobSet restarts "
                "the whole JobSet (OnFailure restarts the container in place)",
            )


TRAINJOB_API_VERSION = "trainer.kubeflow.org/v1alpha1"
TRAINJOB_KIND = "TrainJob"
TRAINJOB_LABELS = (FAULT_SCHEDULING_LABEL, FAULT_RETRY_TIMES_LABEL, POD_RESCHEDULING_LABEL)


def check_trainjob(c: Checker, job: Mapping[str, Any]) -> None:
    """A Kubeflow Trainer v2 TrainJob (docs/jobset.md, "TrainJob"): the agent acts on the JobSet Trainer creates,
    whose labels are the runtime's ``spec.template.metadata.labels`` overlaid with the TrainJob's ``spec.labels``;
    the TrainJob's own ``metadata.labels`` never reach it (trainer v2.0.0 pkg/runtime/core/trainingruntime.go
    ``newRuntimeInfo``, pkg/runtime/framework/plugins/jobset/jobset.go ``Build``). So the opt-in labels must be in
    ``spec.labels``; the JobSet's failure policy comes from the runtime, which this file does not hold (a warning:
    Trainer's shipped runtimes set none, and a JobSet without one fails on its first failed Job)."""
    meta = get_in(job, "metadata", "labels")
    meta = meta if isinstance(meta, Mapping) else {}
    spec_labels = get_in(job, "spec", "labels")
    spec_labels = spec_labels if isinstance(spec_labels, Mapping) else {}
    for key in TRAINJOB_LABELS:
        if key in meta and key not in spec_labels:
            c.add(
                f"metadata.labels.{key}",
                "trainjob-label-not-propagated",
                f"Trainer copies a TrainJob's spec.labels to its JobSet, not its metadata.labels: move {key} to "
                "spec.labels",
            )
    scheduling = spec_labels.get(FAULT_SCHEDULING_LABEL)
    if scheduling not in (FaultScheduling.FORCE.value, FaultScheduling.GRACE.value):
        c.add(
            f"spec.labels.{FAULT_SCHEDULING_LABEL}",
            "trainjob-not-opted-in",
            f"fault-scheduling in spec.labels is {scheduling!r}: the agent restarts the TrainJob's JobSet only with "
            "force or grace",
            WARNING if scheduling is None else ERROR,
        )
    runtime = get_in(job, "spec", "runtimeRef", "name")
    c.add(
        "spec.runtimeRef",
        "trainjob-runtime-not-checked",
        f"the JobSet's failurePolicy, backoffLimit, podFailurePolicy and restartPolicy come from the runtime "
        f"{runtime!r}, not this file: they need the shape of the guide's JobSet (docs/jobset.md); Trainer's shipped "
        "runtimes set no failurePolicy, and then the agent cannot restart the JobSet",
        WARNING,
    )
