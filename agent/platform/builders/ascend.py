"""The AscendJob (``mindxdl.gitee.com/v1``) builder and the guide's AscendJob (config/examples/)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import (
    V1ConfigMap,
)

from agent.core.cluster import FaultScheduling
from agent.platform.builders.common import (
    ASCEND_API_VERSION,
    ASCEND_FRAMEWORKS,
    ASCEND_JOB_NAME_LABEL,
    ASCEND_KIND,
    ASCEND_REPLICA_TYPES,
    FRAMEWORK_LABEL,
    BuildError,
    FaultTolerance,
    TrainingContainer,
    check_name,
    pod_template,
    to_wire,
)
from agent.platform.builders.configmaps import build_rings_config


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
    check_name("job name", spec.name)
    check_name("namespace", spec.namespace)
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
        template = pod_template(
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
