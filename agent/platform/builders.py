"""Typed builders for fault-tolerant training jobs: Volcano Job, AscendJob and their rings-config ConfigMap (plus
the reset-config ConfigMap a ``pod-rescheduling: on`` or ``subHealthyStrategy: graceExit`` job needs).

Core types (ConfigMap, PodTemplateSpec, Container, …) are `kubernetes_asyncio` model classes; the CRDs
(`batch.volcano.sh/v1alpha1` Job, `mindxdl.gitee.com/v1` AscendJob) are plain dicts in wire format (camelCase
keys, as the apiserver takes them). The fields and labels are the ones MindCluster's integration guide sets
(see shared/DOMAIN.md §2): `ring-controller.atlas`, `fault-scheduling`, `fault-retry-times`, `framework`,
`tor-affinity`, a pod anti-affinity by job name, `host-arch` / `accelerator-type` node selectors, the
rings-config volume, NPU limits equal to requests, `XDL_IP` from `status.hostIP`, `restartPolicy: Never`.

Builders raise `BuildError` (a ValueError) for inputs that would make a job the cluster or the agent cannot use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import (
    V1Affinity,
    V1ConfigMap,
    V1ConfigMapVolumeSource,
    V1Container,
    V1ContainerPort,
    V1EnvVar,
    V1EnvVarSource,
    V1LabelSelector,
    V1LabelSelectorRequirement,
    V1ObjectFieldSelector,
    V1ObjectMeta,
    V1PodAffinityTerm,
    V1PodAntiAffinity,
    V1PodSpec,
    V1PodTemplateSpec,
    V1ResourceRequirements,
    V1Volume,
    V1VolumeMount,
)

from agent.core.cluster import FaultScheduling
from agent.core.job_labels import (
    FAULT_RETRY_TIMES_LABEL,
    FAULT_SCHEDULING_LABEL,
    POD_RESCHEDULING_LABEL,
)
from agent.core.job_labels import SUB_HEALTHY_LABEL as SUB_HEALTHY_STRATEGY_LABEL
from agent.core.resetconfig import initial_reset_config, reset_config_reason

VOLCANO_API_VERSION = "batch.volcano.sh/v1alpha1"
VOLCANO_KIND = "Job"
ASCEND_API_VERSION = "mindxdl.gitee.com/v1"
ASCEND_KIND = "AscendJob"

RING_CONTROLLER_LABEL = "ring-controller.atlas"
# Not a job label anywhere: MindCluster reads grace-over-time from its Volcano plugin's scheduler-wide arguments
# (default 900 s, 2–3600; component/ascend-for-volcano/plugin/factory.go getGraceDeleteTime), the agent from
# policy.grace_over_time_s. Kept so lint can flag the label.
GRACE_OVER_TIME_LABEL = "grace-over-time"
FRAMEWORK_LABEL = "framework"
TOR_AFFINITY_LABEL = "tor-affinity"

VOLCANO_JOB_NAME_LABEL = "volcano.sh/job-name"
ASCEND_JOB_NAME_LABEL = "training.kubeflow.org/job-name"

RINGS_CONFIG_PREFIX = "rings-config-"
RINGS_CONFIG_KEY = "hccl.json"
# The guide's initial content, byte for byte; the agent resets it to this after a restart.
RINGS_CONFIG_INITIAL = '{"status": "initializing"}'
RINGS_CONFIG_VOLUME = "ascend-910-config"
RINGS_CONFIG_MOUNT_PATH = "/user/serverid/devindex/config"

DEFAULT_NPU_RESOURCE = "huawei.com/Ascend910"
ASCEND_FRAMEWORKS = ("pytorch", "mindspore", "tensorflow")
ASCEND_REPLICA_TYPES = ("Master", "Scheduler", "Chief", "Worker")
SUB_HEALTHY_STRATEGIES = ("ignore", "graceExit", "forceExit", "hotSwitch")

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class BuildError(ValueError):
    """A builder input that cannot become a usable job; the message names the field and the bad value."""


def rings_config_name(job_name: str) -> str:
    """``rings-config-<job>``: the ConfigMap the guide mounts into every pod of `job_name`."""
    return RINGS_CONFIG_PREFIX + job_name


def is_dns1123_label(name: str) -> bool:
    """True for a DNS-1123 label: lower-case letters, digits and '-', alphanumeric at both ends, ≤ 63 characters."""
    return 0 < len(name) <= 63 and _DNS1123_LABEL.match(name) is not None


def _check_name(what: str, name: str) -> None:
    # Job names end up in pod names, service names and label values: a DNS-1123 label, at most 63 chars.
    if not is_dns1123_label(name):
        raise BuildError(
            f"{what} {name!r} is not a valid name: lower-case letters, digits and '-', "
            "starting and ending with a letter or digit, at most 63 characters"
        )


@dataclass(frozen=True, slots=True)
class FaultTolerance:
    """The job's fault-tolerance labels.

    Attributes:
        ring_controller: `ring-controller.atlas` value, e.g. "ascend-910b"; set on the job and pod templates.
        fault_scheduling: `fault-scheduling`; None leaves the label off (no rescheduling).
        fault_retry_times: `fault-retry-times` (0–100), retries of business-plane failures; None leaves it off.
        pod_rescheduling: adds `pod-rescheduling: on`.
        sub_healthy_strategy: `subHealthyStrategy` (ignore, graceExit, forceExit, hotSwitch) or None.
        tor_affinity: `tor-affinity`, e.g. "normal-schema", or None.
    """

    ring_controller: str = "ascend-910b"
    fault_scheduling: FaultScheduling | None = FaultScheduling.FORCE
    fault_retry_times: int | None = None
    pod_rescheduling: bool = False
    sub_healthy_strategy: str | None = None
    tor_affinity: str | None = None

    def labels(self) -> dict[str, str]:
        """The job-level labels as strings (label values are always strings).

        Raises:
            BuildError: retry times outside 0–100, an unknown sub-healthy strategy, an empty ring controller.
        """
        if not self.ring_controller:
            raise BuildError("ring_controller (label ring-controller.atlas) must not be empty")
        out = {RING_CONTROLLER_LABEL: self.ring_controller}
        if self.fault_scheduling is not None:
            out[FAULT_SCHEDULING_LABEL] = FaultScheduling(self.fault_scheduling).value
        if self.fault_retry_times is not None:
            if not 0 <= self.fault_retry_times <= 100:
                raise BuildError(f"fault_retry_times must be 0–100, got {self.fault_retry_times}")
            out[FAULT_RETRY_TIMES_LABEL] = str(self.fault_retry_times)
        if self.pod_rescheduling:
            out[POD_RESCHEDULING_LABEL] = "on"
        if self.sub_healthy_strategy is not None:
            if self.sub_healthy_strategy not in SUB_HEALTHY_STRATEGIES:
                raise BuildError(
                    f"sub_healthy_strategy must be one of {', '.join(SUB_HEALTHY_STRATEGIES)}, "
                    f"got {self.sub_healthy_strategy!r}"
                )
            out[SUB_HEALTHY_STRATEGY_LABEL] = self.sub_healthy_strategy
        if self.tor_affinity is not None:
            out[TOR_AFFINITY_LABEL] = self.tor_affinity
        return out


@dataclass(frozen=True, slots=True)
class TrainingContainer:
    """The training container of a task or replica.

    Attributes:
        name: container name ("ascend" is required by AscendJob).
        image: image reference.
        command: the command line, e.g. ("/bin/bash", "-c", "bash train_start.sh").
        npus: NPUs per pod (resource limit and request, equal), ≥ 1.
        npu_resource: the extended resource name, e.g. "huawei.com/Ascend910" or "huawei.com/npu".
        ports: (name, containerPort) pairs.
        env: plain (name, value) pairs, after XDL_IP.
        pod_name_env: name of an env var that receives the pod's name (metadata.name), or None.
        image_pull_policy: Always, IfNotPresent or Never.
    """

    name: str
    image: str
    command: tuple[str, ...]
    npus: int = 8
    npu_resource: str = DEFAULT_NPU_RESOURCE
    ports: tuple[tuple[str, int], ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    pod_name_env: str | None = None
    image_pull_policy: str = "IfNotPresent"

    def build(self) -> V1Container:
        """The V1Container, with the rings-config mount.

        Raises:
            BuildError: empty name or image, npus < 1, a port outside 1–65535.
        """
        if not self.name:
            raise BuildError("container name must not be empty")
        if not self.image:
            raise BuildError(f"container {self.name!r}: image must not be empty")
        if self.npus < 1:
            raise BuildError(f"container {self.name!r}: npus must be ≥ 1, got {self.npus}")
        env: list[V1EnvVar] = []
        if self.pod_name_env is not None:
            env.append(
                V1EnvVar(
                    name=self.pod_name_env,
                    value_from=V1EnvVarSource(field_ref=V1ObjectFieldSelector(field_path="metadata.name")),
                )
            )
        env.append(
            V1EnvVar(
                name="XDL_IP", value_from=V1EnvVarSource(field_ref=V1ObjectFieldSelector(field_path="status.hostIP"))
            )
        )
        env.extend(V1EnvVar(name=k, value=v) for k, v in self.env)
        ports = []
        for port_name, number in self.ports:
            if not 1 <= number <= 65535:
                raise BuildError(f"container {self.name!r}: port {port_name!r} must be 1–65535, got {number}")
            ports.append(V1ContainerPort(container_port=number, name=port_name))
        npus = {self.npu_resource: str(self.npus)}
        return V1Container(
            name=self.name,
            image=self.image,
            image_pull_policy=self.image_pull_policy,
            command=list(self.command),
            ports=ports or None,
            env=env,
            resources=V1ResourceRequirements(limits=dict(npus), requests=dict(npus)),
            volume_mounts=[V1VolumeMount(name=RINGS_CONFIG_VOLUME, mount_path=RINGS_CONFIG_MOUNT_PATH)],
        )


def _pod_template(
    *,
    job_name: str,
    job_name_label: str,
    ring_controller: str,
    container: TrainingContainer,
    host_arch: str,
    accelerator_type: str,
    anti_affinity: bool,
    restart_policy: str | None,
    extra_labels: Mapping[str, str],
    termination_grace_period_s: int | None,
) -> V1PodTemplateSpec:
    affinity = None
    if anti_affinity:
        # One pod of the job per node: a node fault then hits one rank, not several.
        affinity = V1Affinity(
            pod_anti_affinity=V1PodAntiAffinity(
                required_during_scheduling_ignored_during_execution=[
                    V1PodAffinityTerm(
                        label_selector=V1LabelSelector(
                            match_expressions=[
                                V1LabelSelectorRequirement(key=job_name_label, operator="In", values=[job_name])
                            ]
                        ),
                        topology_key="kubernetes.io/hostname",
                    )
                ]
            )
        )
    if termination_grace_period_s is not None and termination_grace_period_s < 0:
        raise BuildError(f"termination_grace_period_s must be ≥ 0, got {termination_grace_period_s}")
    return V1PodTemplateSpec(
        metadata=V1ObjectMeta(labels={**extra_labels, RING_CONTROLLER_LABEL: ring_controller}),
        spec=V1PodSpec(
            affinity=affinity,
            node_selector={"host-arch": host_arch, "accelerator-type": accelerator_type},
            restart_policy=restart_policy,
            termination_grace_period_seconds=termination_grace_period_s,
            containers=[container.build()],
            volumes=[
                V1Volume(name=RINGS_CONFIG_VOLUME, config_map=V1ConfigMapVolumeSource(name=rings_config_name(job_name)))
            ],
        ),
    )


def build_rings_config(job_name: str, namespace: str, ring_controller: str) -> V1ConfigMap:
    """The ``rings-config-<job>`` ConfigMap: label `ring-controller.atlas`, key `hccl.json` = initializing.

    Raises:
        BuildError: invalid job name or namespace, empty ring controller.
    """
    _check_name("job name", job_name)
    _check_name("namespace", namespace)
    if not ring_controller:
        raise BuildError("ring_controller (label ring-controller.atlas) must not be empty")
    return V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=V1ObjectMeta(
            name=rings_config_name(job_name), namespace=namespace, labels={RING_CONTROLLER_LABEL: ring_controller}
        ),
        data={RINGS_CONFIG_KEY: RINGS_CONFIG_INITIAL},
    )


def build_reset_config(job_name: str, namespace: str) -> V1ConfigMap:
    """The ``reset-config-<job>`` ConfigMap created with a job whose labels need it
    (:func:`needs_reset_config`): label ``reset: "true"``, ``reset.json`` the zero ``TaskResetInfo`` as Go marshals
    it and its ``checkCode`` (agent.core.resetconfig ``initial_reset_config``; MindCluster plugin/type.go).

    Raises:
        BuildError: invalid job name or namespace.
    """
    _check_name("job name", job_name)
    _check_name("namespace", namespace)
    body = initial_reset_config(job_name, namespace)
    meta = body["metadata"]
    return V1ConfigMap(
        api_version="v1",
        kind="ConfigMap",
        metadata=V1ObjectMeta(name=meta["name"], namespace=namespace, labels=meta["labels"]),
        data=body["data"],
    )


def needs_reset_config(job: Mapping[str, Any]) -> str | None:
    """Why the job (a built or read manifest) needs a ``reset-config-<job>`` ConfigMap, e.g.
    ``"pod-rescheduling=on"``, or None (agent.core.resetconfig ``reset_config_reason``)."""
    labels = (job.get("metadata") or {}).get("labels") or {}
    return reset_config_reason({str(k): str(v) for k, v in labels.items()})


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
    _check_name("job name", spec.name)
    _check_name("namespace", spec.namespace)
    labels = spec.fault.labels()
    if not spec.tasks:
        raise BuildError("a Volcano Job needs at least one task")
    names = [t.name for t in spec.tasks]
    if len(set(names)) != len(names):
        raise BuildError(f"task names must be unique, got {names}")
    for t in spec.tasks:
        _check_name("task name", t.name)
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
        template = _pod_template(
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


@dataclass(frozen=True, slots=True)
class AscendReplica:
    """One replica type (Master, Worker, …) of an AscendJob."""

    replicas: int
    container: TrainingContainer
    accelerator_type: str = "module-910b-8"
    anti_affinity: bool = True


@dataclass(frozen=True, slots=True)
class AscendJobSpec:
    """An AscendJob as the guide writes it.

    Attributes:
        framework: the `framework` label: pytorch, mindspore or tensorflow.
        replica_specs: replica type → replica, in the order to write them (Master first).
        min_available: `runPolicy.schedulingPolicy.minAvailable`; None means the sum of replicas.
        backoff_limit: `runPolicy.backoffLimit`, None leaves it unset.
    """

    name: str
    namespace: str
    framework: str
    replica_specs: Mapping[str, AscendReplica]
    fault: FaultTolerance = field(default_factory=FaultTolerance)
    min_available: int | None = None
    queue: str = "default"
    scheduler_name: str = "volcano"
    success_policy: str = "AllWorkers"
    backoff_limit: int | None = None
    host_arch: str = "huawei-x86"
    termination_grace_period_s: int | None = None


def build_ascend_job(spec: AscendJobSpec) -> dict[str, Any]:
    """The `mindxdl.gitee.com/v1` AscendJob as a wire-format dict.

    Raises:
        BuildError: invalid names, an unknown framework or replica type, no replicas, a container not named
            "ascend", replicas < 1, min_available outside 1..total, backoff_limit < fault_retry_times.
    """
    _check_name("job name", spec.name)
    _check_name("namespace", spec.namespace)
    labels = spec.fault.labels()
    if spec.framework not in ASCEND_FRAMEWORKS:
        raise BuildError(f"framework must be one of {', '.join(ASCEND_FRAMEWORKS)}, got {spec.framework!r}")
    labels[FRAMEWORK_LABEL] = spec.framework
    if not spec.replica_specs:
        raise BuildError("an AscendJob needs at least one replica spec (Master, Worker, …)")
    for rtype, r in spec.replica_specs.items():
        if rtype not in ASCEND_REPLICA_TYPES:
            raise BuildError(f"replica type must be one of {', '.join(ASCEND_REPLICA_TYPES)}, got {rtype!r}")
        if r.replicas < 1:
            raise BuildError(f"replica {rtype}: replicas must be ≥ 1, got {r.replicas}")
        if r.container.name != "ascend":
            raise BuildError(
                f"replica {rtype}: the AscendJob container must be named 'ascend', got {r.container.name!r}"
            )
    total = sum(r.replicas for r in spec.replica_specs.values())
    min_available = total if spec.min_available is None else spec.min_available
    if not 1 <= min_available <= total:
        raise BuildError(f"min_available must be 1–{total} (the replicas), got {min_available}")
    retry_times = spec.fault.fault_retry_times
    if spec.backoff_limit is not None and retry_times is not None and spec.backoff_limit < retry_times:
        raise BuildError(f"backoff_limit {spec.backoff_limit} is smaller than fault_retry_times {retry_times}")
    replica_specs = {}
    for rtype, r in spec.replica_specs.items():
        template = _pod_template(
            job_name=spec.name,
            job_name_label=ASCEND_JOB_NAME_LABEL,
            ring_controller=spec.fault.ring_controller,
            container=r.container,
            host_arch=spec.host_arch,
            accelerator_type=r.accelerator_type,
            anti_affinity=r.anti_affinity,
            restart_policy=None,  # AscendJob sets it on the replica spec
            extra_labels={},
            termination_grace_period_s=spec.termination_grace_period_s,
        )
        replica_specs[rtype] = {"replicas": r.replicas, "restartPolicy": "Never", "template": to_wire(template)}
    run_policy: dict[str, Any] = {"schedulingPolicy": {"minAvailable": min_available, "queue": spec.queue}}
    if spec.backoff_limit is not None:
        run_policy["backoffLimit"] = spec.backoff_limit
    return {
        "apiVersion": ASCEND_API_VERSION,
        "kind": ASCEND_KIND,
        "metadata": {"name": spec.name, "namespace": spec.namespace, "labels": labels},
        "spec": {
            "schedulerName": spec.scheduler_name,
            "runPolicy": run_policy,
            "successPolicy": spec.success_policy,
            "replicaSpecs": replica_specs,
        },
    }


def to_wire(obj: Any) -> Any:
    """A `kubernetes_asyncio` model (or list/dict of them) as wire-format JSON data.

    Keys follow the model's `attribute_map` (the OpenAPI camelCase names); None fields are left out, as the
    client does when it sends a request. Primitives, lists and dicts pass through (recursively).
    """
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    if isinstance(obj, list | tuple):
        return [to_wire(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_wire(v) for k, v in obj.items()}
    types: Mapping[str, str] | None = getattr(obj, "openapi_types", None)
    attribute_map: Mapping[str, str] | None = getattr(obj, "attribute_map", None)
    if types is None or attribute_map is None:
        raise TypeError(f"cannot serialise {type(obj).__name__}")
    return {attribute_map[a]: to_wire(getattr(obj, a)) for a in types if getattr(obj, a) is not None}


# --- The guide's jobs (config/examples/), as builder calls. ---------------------------------------------


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


def guide_ascend_job(
    name: str = "default-test-pytorch", namespace: str = "default"
) -> tuple[V1ConfigMap, dict[str, Any]]:
    """The integration guide's AscendJob (config/examples/acjob-default-test-pytorch.yaml) and its rings-config."""

    def container() -> TrainingContainer:
        return TrainingContainer(
            name="ascend",
            image="pt-arm:b120",
            command=("/bin/bash", "-c", "bash train_start.sh ..."),
            ports=(("ascendjob-port", 2222),),
        )

    spec = AscendJobSpec(
        name=name,
        namespace=namespace,
        framework="pytorch",
        fault=FaultTolerance(fault_scheduling=FaultScheduling.FORCE, fault_retry_times=3, tor_affinity="normal-schema"),
        min_available=2,
        replica_specs={
            "Master": AscendReplica(replicas=1, container=container(), anti_affinity=False),
            "Worker": AscendReplica(replicas=1, container=container(), accelerator_type="module-910b-16"),
        },
    )
    return build_rings_config(name, namespace, spec.fault.ring_controller), build_ascend_job(spec)


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


# --- JobSet (jobset.x-k8s.io/v1alpha2): Kubeflow Trainer v2's TrainJob runs as one. ------------------------

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
    _check_name("JobSet name", spec.name)
    _check_name("namespace", spec.namespace)
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
