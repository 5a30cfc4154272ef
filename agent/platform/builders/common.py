"""What the builders of every job kind share: the guide's API versions, kinds, labels and rings-config
volume (shared/DOMAIN.md §2), the name rule, the fault-tolerance labels, the training container and its pod
template, and the model-to-wire conversion."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import (
    V1Affinity,
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

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class BuildError(ValueError):
    """A builder input that cannot become a usable job; the message names the field and the bad value."""


def rings_config_name(job_name: str) -> str:
    """``rings-config-<job>``: the ConfigMap the guide mounts into every pod of `job_name`."""
    return RINGS_CONFIG_PREFIX + job_name


def is_dns1123_label(name: str) -> bool:
    """True for a DNS-1123 label: lower-case letters, digits and '-', alphanumeric at both ends, ≤ 63 characters."""
    return 0 < len(name) <= 63 and DNS1123_LABEL.match(name) is not None


def check_name(what: str, name: str) -> None:
    # Job names end up in pod names, service names and label values: a DNS-1123 label, at most 63 chars.
    """Raise :class:`BuildError` unless `name` (the `what`: job name, namespace, task name) is a DNS-1123 label."""
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


def pod_template(
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
    """The pod template the Volcano Job and AscendJob builders share: the ``ring-controller.atlas`` label over
    `extra_labels`, the ``host-arch`` / ``accelerator-type`` node selectors, one pod of the job per node (with
    `anti_affinity`), the rings-config volume and `container`.

    Raises:
        BuildError: a negative `termination_grace_period_s`.
    """
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
