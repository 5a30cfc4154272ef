"""The Volcano Job (``batch.volcano.sh/v1alpha1`` Job) builder and the guide's Volcano Jobs (config/examples/)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import (
    V1ConfigMap,
)

from agent.core.cluster import FaultScheduling
from agent.platform.builders.common import (
    VOLCANO_API_VERSION,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_KIND,
    BuildError,
    FaultTolerance,
    TrainingContainer,
    check_name,
    pod_template,
    to_wire,
)
from agent.platform.builders.configmaps import build_rings_config


@dataclass(frozen=True, slots=True)
class VolcanoTask:
    """One task of a Volcano Job: `replicas` identical pods.

    Attributes:
        accelerator_type: the `accelerator-type` node selector, e.g. "module-910b-8".
        pod_labels: extra pod-template labels (e.g. {"app": "mindspore"}); ring-controller.atlas is added.
    """

    name: str
    replicas: int
    container: TrainingContainer
    accelerator_type: str = "module-910b-8"
    pod_labels: Mapping[str, str] = field(default_factory=dict)
    anti_affinity: bool = True


@dataclass(frozen=True, slots=True)
class VolcanoJobSpec:
    """A Volcano Job as the guide writes it.

    Attributes:
        min_available: gang size; None means the sum of the tasks' replicas.
        max_retry: `spec.maxRetry`, Volcano's own restart budget (default 3); must be ≥ fault_retry_times.
            Volcano counts every restart against it and fails the job at the one that brings retryCount to it.
        policies: (event, action) lifecycle policies; the guide uses PodEvicted → RestartJob.
        plugins: Volcano job plugins enabled with no arguments (ssh, env, svc).
        termination_grace_period_s: pod `terminationGracePeriodSeconds` (grace mode), None for the default.
    """

    name: str
    namespace: str
    tasks: tuple[VolcanoTask, ...]
    fault: FaultTolerance = field(default_factory=FaultTolerance)
    min_available: int | None = None
    max_retry: int = 3
    queue: str = "default"
    scheduler_name: str = "volcano"
    policies: tuple[tuple[str, str], ...] = (("PodEvicted", "RestartJob"),)
    plugins: tuple[str, ...] = ("ssh", "env", "svc")
    host_arch: str = "huawei-x86"
    termination_grace_period_s: int | None = None


def build_volcano_job(spec: VolcanoJobSpec) -> dict[str, Any]:
    """The `batch.volcano.sh/v1alpha1` Job as a wire-format dict.

    Raises:
        BuildError: invalid names, no tasks, duplicate task names, replicas < 1, min_available outside
            1..total replicas, max_retry < 0 or < fault_retry_times, a PodFailed → RestartJob policy together
            with fault_retry_times (the job would be restarted twice for one failure).
    """
    check_name("job name", spec.name)
    check_name("namespace", spec.namespace)
    labels = spec.fault.labels()
    if not spec.tasks:
        raise BuildError("a Volcano Job needs at least one task")
    names = [t.name for t in spec.tasks]
    if len(set(names)) != len(names):
        raise BuildError(f"task names must be unique, got {names}")
    for t in spec.tasks:
        check_name("task name", t.name)
        if t.replicas < 1:
            raise BuildError(f"task {t.name!r}: replicas must be ≥ 1, got {t.replicas}")
    total = sum(t.replicas for t in spec.tasks)
    min_available = total if spec.min_available is None else spec.min_available
    if not 1 <= min_available <= total:
        raise BuildError(f"min_available must be 1–{total} (the tasks' replicas), got {min_available}")
    if spec.max_retry < 0:
        raise BuildError(f"max_retry must be ≥ 0, got {spec.max_retry}")
    retry_times = spec.fault.fault_retry_times
    if retry_times is not None and spec.max_retry < retry_times:
        raise BuildError(f"max_retry {spec.max_retry} is smaller than fault_retry_times {retry_times}")
    if retry_times is not None and ("PodFailed", "RestartJob") in spec.policies:
        raise BuildError("a PodFailed → RestartJob policy together with fault_retry_times restarts the job twice")
    tasks = []
    for t in spec.tasks:
        template = pod_template(
            job_name=spec.name,
            job_name_label=VOLCANO_JOB_NAME_LABEL,
            ring_controller=spec.fault.ring_controller,
            container=t.container,
            host_arch=spec.host_arch,
            accelerator_type=t.accelerator_type,
            anti_affinity=t.anti_affinity,
            restart_policy="Never",
            extra_labels=t.pod_labels,
            termination_grace_period_s=spec.termination_grace_period_s,
        )
        tasks.append({"name": t.name, "replicas": t.replicas, "template": to_wire(template)})
    return {
        "apiVersion": VOLCANO_API_VERSION,
        "kind": VOLCANO_KIND,
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels},
        "spec": {
            "minAvailable": min_available,
            "schedulerName": spec.scheduler_name,
            "policies": [{"event": event, "action": action} for event, action in spec.policies],
            "plugins": {p: [] for p in spec.plugins},
            "maxRetry": spec.max_retry,
            "queue": spec.queue,
            "tasks": tasks,
        },
    }


def guide_volcano_job(name: str = "mindx-dls-test", namespace: str = "vcjob") -> tuple[V1ConfigMap, dict[str, Any]]:
    """The integration guide's Volcano Job (config/examples/vcjob-mindx-dls-test.yaml) and its rings-config."""
    spec = VolcanoJobSpec(
        name=name,
        namespace=namespace,
        fault=FaultTolerance(fault_scheduling=FaultScheduling.FORCE, fault_retry_times=3),
        min_available=2,
        tasks=(
            VolcanoTask(
                name="default-test",
                replicas=2,
                pod_labels={"app": "mindspore"},
                container=TrainingContainer(
                    name="mindspore",
                    image="ms-arm:b120",
                    command=("/bin/bash", "-c", "bash train_start.sh ..."),
                    pod_name_env=name,
                    env=(("framework", "MindSpore"),),
                ),
            ),
        ),
    )
    return build_rings_config(name, namespace, spec.fault.ring_controller), build_volcano_job(spec)


def grace_volcano_job(name: str = "mindx-dls-grace", namespace: str = "vcjob") -> tuple[V1ConfigMap, dict[str, Any]]:
    """A grace-mode Volcano Job (config/examples/vcjob-grace.yaml): pods get 120 s to save a checkpoint and
    exit; the agent force-deletes them if the job has not restarted after grace-over-time, which is the agent's
    setting ``policy.grace_over_time_s`` (900 s), not a job label (see :data:`GRACE_OVER_TIME_LABEL`)."""
    spec = VolcanoJobSpec(
        name=name,
        namespace=namespace,
        fault=FaultTolerance(fault_scheduling=FaultScheduling.GRACE, fault_retry_times=2),
        min_available=2,
        max_retry=4,  # Volcano fails the job at retryCount == maxRetry: room for 2 business retries + 1 hardware
        termination_grace_period_s=120,
        tasks=(
            VolcanoTask(
                name="default-test",
                replicas=2,
                pod_labels={"app": "mindspore"},
                container=TrainingContainer(
                    name="mindspore",
                    image="ms-arm:b120",
                    command=("/bin/bash", "-c", "bash train_start.sh ..."),
                    env=(("framework", "MindSpore"),),
                ),
            ),
        ),
    )
    return build_rings_config(name, namespace, spec.fault.ring_controller), build_volcano_job(spec)
