"""The pod templates of a Volcano Job or an AscendJob, their containers and resources, and which jobs are GPU
jobs (no NPU rule applies to them)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from agent.platform.builders import (
    VOLCANO_KIND,
)
from agent.platform.lint.common import (
    Template,
    as_list,
    get_in,
)

NPU_RESOURCE_PREFIX = "huawei.com/"  # huawei.com/Ascend910, huawei.com/npu, huawei.com/Ascend310P, …
GPU_RESOURCE_PREFIXES = ("nvidia.com/", "amd.com/")  # nvidia.com/gpu, nvidia.com/mig-1g.10gb, amd.com/gpu


def templates_of(job: Mapping[str, Any], kind: str) -> list[Template]:
    """The pod templates of a Volcano Job (``spec.tasks``) or an AscendJob (``spec.replicaSpecs``), by `kind`."""
    out = []
    if kind == VOLCANO_KIND:
        for i, task in enumerate(as_list(get_in(job, "spec", "tasks"))):
            path = f"spec.tasks[{i}].template"
            name = get_in(task, "name") or f"#{i}"
            out.append(
                Template(
                    path, f"task {name}", get_in(task, "template"), get_in(task, "template", "spec", "restartPolicy"),
                    f"{path}.spec.restartPolicy", get_in(task, "replicas"),
                )
            )  # fmt: skip
    else:
        specs = get_in(job, "spec", "replicaSpecs")
        if isinstance(specs, Mapping):
            for rtype, rspec in specs.items():
                path = f"spec.replicaSpecs.{rtype}"
                # The AscendJob operator takes the replica spec's restartPolicy (the pod's one is overwritten).
                out.append(
                    Template(
                        f"{path}.template", f"replica {rtype}", get_in(rspec, "template"),
                        get_in(rspec, "restartPolicy"), f"{path}.restartPolicy", get_in(rspec, "replicas"),
                    )
                )  # fmt: skip
    return out


def containers_of(t: Template) -> Iterator[tuple[str, Any]]:
    """(field path, container) of each container of `t`."""
    for i, container in enumerate(as_list(get_in(t.body, "spec", "containers"))):
        yield f"{t.path}.spec.containers[{i}]", container


def resources_of(t: Template) -> set[str]:
    """The extended resources `t`'s containers ask for (limits or requests)."""
    out: set[str] = set()
    for _, container in containers_of(t):
        for part in ("limits", "requests"):
            got = get_in(container, "resources", part)
            if isinstance(got, Mapping):
                out.update(str(k) for k in got)
    return out


def is_gpu_job(templates: Sequence[Template]) -> bool:
    """True when the job's pods ask for GPUs (a resource under :data:`GPU_RESOURCE_PREFIXES`, e.g.
    ``nvidia.com/gpu``) and for no NPU: such a job has no HCCL rank table, so the NPU-only rules (the
    ``ring-controller.atlas`` label, its rings-config) do not apply to it."""
    asked = set().union(*(resources_of(t) for t in templates)) if templates else set()
    return any(r.startswith(GPU_RESOURCE_PREFIXES) for r in asked) and not any(
        r.startswith(NPU_RESOURCE_PREFIX) for r in asked
    )


def job_uses_gpus(job: Mapping[str, Any]) -> bool:
    """:func:`is_gpu_job` of a Volcano Job or AscendJob manifest (its ``kind`` says which)."""
    kind = job.get("kind")
    return isinstance(kind, str) and isinstance(get_in(job, "spec"), Mapping) and is_gpu_job(templates_of(job, kind))
