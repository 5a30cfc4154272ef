"""The JobSet (``jobset.x-k8s.io/v1alpha2``) builder: Kubeflow Trainer v2's TrainJob runs as one (docs/jobset.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.core.cluster import FaultScheduling
from agent.core.job_labels import (
    FAULT_SCHEDULING_LABEL,
)
from agent.platform.builders.common import (
    BuildError,
    check_name,
)

JOBSET_API_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_KIND = "JobSet"
EVICTION_RULE = "evictionsNotCounted"
"""The guide JobSet's failure policy rule that restarts on an evicted pod without spending ``maxRestarts``."""


@dataclass(frozen=True, slots=True)
class JobSetTrainingSpec:
    """A JobSet as the agent's guide writes it (docs/jobset.md): one replicated job of `workers` pods.

    Attributes:
        fault_scheduling: the JobSet's ``fault-scheduling`` label (force or grace; None leaves it off).
        max_restarts: ``spec.failurePolicy.maxRestarts``: the restarts JobSet grants the agent's chip and node
            faults and the workload's own failures together.
        accelerators: per pod, of `accelerator_resource` (limits and requests, equal); 0 for none.
        accelerator_resource: e.g. ``nvidia.com/gpu`` or ``huawei.com/Ascend910``.
        termination_grace_period_s: the pods' grace period (grace mode's checkpoint time), None for the default.
    """

    name: str
    namespace: str
    image: str
    command: tuple[str, ...] = ("/bin/sh", "-c", "exec python train.py")
    workers: int = 2
    max_restarts: int = 3
    fault_scheduling: FaultScheduling | None = FaultScheduling.FORCE
    accelerators: int = 8
    accelerator_resource: str = "nvidia.com/gpu"
    node_selector: Mapping[str, str] = field(default_factory=dict)
    termination_grace_period_s: int | None = None


def build_jobset(spec: JobSetTrainingSpec) -> dict[str, Any]:
    """The JobSet as a wire-format dict. Shaped so that the agent can restart it and JobSet counts it right
    (agent.core.jobset): the child Job has ``backoffLimit: 0`` (a deleted pod fails the Job, and JobSet restarts the
    whole JobSet), a ``podFailurePolicy`` that fails the Job on a ``DisruptionTarget`` pod (an eviction or a drain),
    and the failure policy restarts on that reason with ``RestartJobSetAndIgnoreMaxRestarts`` (not counted), every
    other failure with the default ``RestartJobSet`` (counted against ``maxRestarts``). The fault-tolerance labels
    sit on the JobSet and its pod template; one pod per node (anti-affinity on the JobSet's name label).

    Raises:
        BuildError: invalid names, workers < 1, max_restarts < 0, accelerators < 0, an empty image.
    """
    check_name("JobSet name", spec.name)
    check_name("namespace", spec.namespace)
    if spec.workers < 1:
        raise BuildError(f"workers must be ≥ 1, got {spec.workers}")
    if spec.max_restarts < 0:
        raise BuildError(f"max_restarts must be ≥ 0, got {spec.max_restarts}")
    if spec.accelerators < 0:
        raise BuildError(f"accelerators must be ≥ 0, got {spec.accelerators}")
    if not spec.image:
        raise BuildError("image must not be empty")
    labels = {}
    if spec.fault_scheduling is not None:
        labels[FAULT_SCHEDULING_LABEL] = FaultScheduling(spec.fault_scheduling).value
    container: dict[str, Any] = {"name": "trainer", "image": spec.image, "command": list(spec.command)}
    if spec.accelerators:
        amount = {spec.accelerator_resource: str(spec.accelerators)}
        container["resources"] = {"limits": dict(amount), "requests": dict(amount)}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [
                                {"key": "jobset.sigs.k8s.io/jobset-name", "operator": "In", "values": [spec.name]}
                            ]
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            }
        },
    }
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.termination_grace_period_s is not None:
        pod_spec["terminationGracePeriodSeconds"] = spec.termination_grace_period_s
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": JOBSET_KIND,
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels},
        "spec": {
            "failurePolicy": {
                "maxRestarts": spec.max_restarts,
                "rules": [
                    {
                        "name": EVICTION_RULE,
                        "action": "RestartJobSetAndIgnoreMaxRestarts",
                        "onJobFailureReasons": ["PodFailurePolicy"],
                    }
                ],
            },
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": spec.workers,
                            "completions": spec.workers,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "podFailurePolicy": {
                                "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
                            },
                            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
                        }
                    },
                }
            ],
        },
    }


def guide_jobset(
    name: str = "train",
    namespace: str = "default",
    *,
    workers: int = 2,
    image: str = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
    max_restarts: int = 3,
    accelerators: int = 8,
    accelerator_resource: str = "nvidia.com/gpu",
) -> dict[str, Any]:
    """The guide's JobSet (config/examples/jobset-train.yaml): `workers` pods with `accelerators` each,
    ``fault-scheduling: force``, ``maxRestarts`` `max_restarts`, evictions not counted (:func:`build_jobset`)."""
    return build_jobset(
        JobSetTrainingSpec(
            name=name,
            namespace=namespace,
            image=image,
            workers=workers,
            max_restarts=max_restarts,
            accelerators=accelerators,
            accelerator_resource=accelerator_resource,
        )
    )
