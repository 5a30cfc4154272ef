"""The rules of a Volcano Job and an AscendJob: name, retry budget (Volcano's maxRetry, the AscendJob's
backoffLimit), restart policies, gang size, the AscendJob's framework and replica types, and each pod template
(ring-controller label, NPU/GPU limits, the rings-config volume, the anti-affinity)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.core.cluster import FaultScheduling
from agent.core.detect.common import json_type
from agent.core.job_labels import FAULT_RETRY_TIMES_LABEL, FAULT_SCHEDULING_LABEL
from agent.platform.builders import (
    ASCEND_FRAMEWORKS,
    ASCEND_JOB_NAME_LABEL,
    ASCEND_KIND,
    ASCEND_REPLICA_TYPES,
    FRAMEWORK_LABEL,
    RING_CONTROLLER_LABEL,
    RINGS_CONFIG_MOUNT_PATH,
    RINGS_CONFIG_PREFIX,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_KIND,
    is_dns1123_label,
    rings_config_name,
)
from agent.platform.lint.common import (
    WARNING,
    Checker,
    Template,
    as_list,
    get_in,
)
from agent.platform.lint.configmaps import (
    check_reset_config,
    check_rings_config,
)
from agent.platform.lint.labels import (
    check_labels,
)
from agent.platform.lint.templates import (
    GPU_RESOURCE_PREFIXES,
    NPU_RESOURCE_PREFIX,
    containers_of,
    is_gpu_job,
    templates_of,
)

VOLCANO_DEFAULT_MAX_RETRY = 3  # Volcano's default for spec.maxRetry


def tight_max_retry(shown: str, max_retry: int, retry_times: int) -> str:
    """The max-retry-tight warning. Volcano v1.14 adds one to ``status.retryCount`` for every restart, business
    or hardware, whoever asked (``pkg/controllers/job/state/running.go``), and marks the job Failed at the restart
    that brings it to ``spec.maxRetry`` (``state/restarting.go``): the job survives maxRetry - 1 restarts."""
    survives = max(0, max_retry - 1)
    return (
        f"{shown} with fault-retry-times {retry_times}: Volcano counts every restart (business failures and "
        f"hardware faults alike) against maxRetry and marks the job Failed at the restart that brings "
        f"status.retryCount to {max_retry}, so the job survives {survives} restart(s) in all, fewer than its "
        f"{retry_times} business retries plus one hardware restart; the agent will not send the restart that "
        f"would make Volcano fail the job. Set maxRetry to at least {retry_times + 2} for both"
    )


def check_job(c: Checker, job: Mapping[str, Any], kind: str, cms: Mapping[str, tuple[int, Any]]) -> None:
    """Every rule of one Volcano Job or AscendJob (`kind`); `cms`: the file's ConfigMaps by name (document number,
    object)."""
    name = get_in(job, "metadata", "name")
    if get_in(job, "metadata", "generateName") is not None and name is None:
        c.add(
            "metadata.generateName",
            "generate-name",
            "use metadata.name, not generateName: the rings-config ConfigMap is named after the job and a "
            "second submit would create a duplicate job",
        )
    elif not isinstance(name, str) or not name:
        c.add("metadata.name", "name-missing", "the job has no metadata.name")
        name = None
    elif not is_dns1123_label(name):
        c.add(
            "metadata.name",
            "name-invalid",
            f"job name {name!r} must be a DNS-1123 label (lower-case letters, digits and '-', starting and ending "
            "with a letter or digit, at most 63 characters): the job's pods and services are named after it",
        )
    labels = get_in(job, "metadata", "labels")
    if labels is None:
        labels = {}
    if not isinstance(labels, Mapping):
        c.add("metadata.labels", "labels-not-mapping", f"metadata.labels must be a mapping, got {json_type(labels)}")
        labels = {}
    gpu = is_gpu_job(templates_of(job, kind)) if isinstance(get_in(job, "spec"), Mapping) else False
    scheduling, retry_times = check_labels(c, labels, gpu=gpu)
    if FAULT_SCHEDULING_LABEL not in labels and FAULT_RETRY_TIMES_LABEL not in labels:
        c.add(
            "metadata.labels",
            "not-fault-tolerant",
            f"the job has neither a {FAULT_SCHEDULING_LABEL} nor a {FAULT_RETRY_TIMES_LABEL} label: the agent will "
            "not act on it (no restart or rescheduling on a fault)",
            WARNING,
        )
    ring_controller = labels.get(RING_CONTROLLER_LABEL)
    spec = get_in(job, "spec")
    if not isinstance(spec, Mapping):
        c.add("spec", "spec-missing", "the job has no spec")
        return
    templates = templates_of(job, kind)
    if not templates:
        where = "spec.tasks" if kind == VOLCANO_KIND else "spec.replicaSpecs"
        c.add(where, "no-pods", f"{where} is missing or empty: the job has no pods")

    scheduler = spec.get("schedulerName")
    if scheduler is not None and scheduler != "volcano":
        c.add("spec.schedulerName", "scheduler-not-volcano", f"schedulerName must be volcano, got {scheduler!r}")

    # Retry budget: Volcano's maxRetry (default 3) or AscendJob's backoffLimit must cover fault-retry-times.
    if retry_times is not None:
        if kind == VOLCANO_KIND:
            max_retry = spec.get("maxRetry", VOLCANO_DEFAULT_MAX_RETRY)
            path = "spec.maxRetry"
            shown = (
                f"{path} {max_retry}" if "maxRetry" in spec else f"{path} is unset and Volcano's default {max_retry}"
            )
        else:
            max_retry = get_in(spec, "runPolicy", "backoffLimit")
            path = "spec.runPolicy.backoffLimit"
            shown = f"{path} {max_retry}"
        if isinstance(max_retry, int) and max_retry < retry_times:
            c.add(
                path,
                "max-retry-below-retry-times",
                f"{shown} is smaller than fault-retry-times {retry_times}: the job fails before the retries are used",
            )
        elif kind == VOLCANO_KIND and isinstance(max_retry, int) and max_retry - 1 < retry_times + 1:
            c.add(path, "max-retry-tight", tight_max_retry(shown, max_retry, retry_times), WARNING)
        for t in templates:
            if t.restart_policy != "Never":
                c.add(
                    t.restart_policy_path,
                    "retry-times-needs-never",
                    f"fault-retry-times needs restartPolicy: Never on {t.owner}, got {t.restart_policy!r}",
                )
    if kind == VOLCANO_KIND:
        for i, policy in enumerate(as_list(spec.get("policies"))):
            events = [get_in(policy, "event"), *as_list(get_in(policy, "events"))]
            if retry_times is not None and "PodFailed" in events and get_in(policy, "action") == "RestartJob":
                c.add(
                    f"spec.policies[{i}]",
                    "double-restart",
                    "a PodFailed → RestartJob policy together with fault-retry-times restarts the job twice for one "
                    "failure; drop the policy or the label",
                )
    if scheduling == FaultScheduling.GRACE.value:
        for t in templates:
            if get_in(t.body, "spec", "terminationGracePeriodSeconds") == 0:
                c.add(
                    f"{t.path}.spec.terminationGracePeriodSeconds",
                    "grace-without-grace-period",
                    f"fault-scheduling: grace with terminationGracePeriodSeconds 0 on {t.owner}: the pods get no "
                    "time to save a checkpoint",
                )

    # Gang size.
    min_available = (
        spec.get("minAvailable")
        if kind == VOLCANO_KIND
        else get_in(spec, "runPolicy", "schedulingPolicy", "minAvailable")
    )
    replicas = [t.replicas for t in templates]
    if isinstance(min_available, int) and all(isinstance(r, int) for r in replicas) and replicas:
        total = sum(replicas)
        if min_available > total:
            path = "spec.minAvailable" if kind == VOLCANO_KIND else "spec.runPolicy.schedulingPolicy.minAvailable"
            c.add(path, "min-available-above-replicas", f"minAvailable {min_available} is more than the {total} pods")

    if kind == ASCEND_KIND:
        framework = labels.get(FRAMEWORK_LABEL)
        if framework not in ASCEND_FRAMEWORKS:
            c.add(
                f"metadata.labels.{FRAMEWORK_LABEL}",
                "framework-invalid",
                f"an AscendJob needs a framework label, one of {', '.join(ASCEND_FRAMEWORKS)}; "
                + ("it has none" if framework is None else f"got {framework!r}"),
            )
        rspecs = spec.get("replicaSpecs")
        if isinstance(rspecs, Mapping):
            for rtype in rspecs:
                if rtype not in ASCEND_REPLICA_TYPES:
                    c.add(
                        f"spec.replicaSpecs.{rtype}",
                        "replica-type-unknown",
                        f"unknown replica type {rtype!r}; use {', '.join(ASCEND_REPLICA_TYPES)}",
                    )

    for t in templates:
        check_template(c, t, kind, name, ring_controller, gpu=gpu)

    if name is not None:
        cm_name = rings_config_name(name)
        if cm_name in cms:
            check_rings_config(c, cms[cm_name], get_in(job, "metadata", "namespace"))
        elif isinstance(ring_controller, str):
            c.add(
                "metadata.labels",
                "rings-config-missing",
                f"the job carries {RING_CONTROLLER_LABEL} but this file has no ConfigMap {cm_name}: its pods mount it "
                "(the kubelet does not start them until it exists) and MindCluster's Ascend Operator writes the rank "
                "table only into one that existed when it first looked at the job. fault-agent submit creates it "
                "with the job; add it to this file if you apply it with kubectl (fault-agent lint reads only this "
                "file)",
                WARNING,
            )
        check_reset_config(c, name, labels, cms, get_in(job, "metadata", "namespace"))


def check_template(
    c: Checker, t: Template, kind: str, job_name: str | None, ring_controller: Any, *, gpu: bool = False
) -> None:
    """The rules of one pod template `t`: ring-controller label, containers, NPU/GPU requests equal to limits,
    the rings-config volume and the anti-affinity on this job's own pods."""
    if not isinstance(t.body, Mapping):
        c.add(t.path, "template-missing", f"{t.owner} has no pod template")
        return
    pod_labels = get_in(t.body, "metadata", "labels")
    pod_ring = pod_labels.get(RING_CONTROLLER_LABEL) if isinstance(pod_labels, Mapping) else None
    if pod_ring is None and not gpu:
        c.add(
            f"{t.path}.metadata.labels",
            "ring-controller-missing",
            f"the pod template of {t.owner} has no {RING_CONTROLLER_LABEL} label",
        )
    elif isinstance(ring_controller, str) and pod_ring != ring_controller:
        c.add(
            f"{t.path}.metadata.labels.{RING_CONTROLLER_LABEL}",
            "ring-controller-mismatch",
            f"{RING_CONTROLLER_LABEL} is {pod_ring!r} on {t.owner} but {ring_controller!r} on the job",
        )

    containers = list(containers_of(t))
    if not containers:
        c.add(f"{t.path}.spec.containers", "no-containers", f"{t.owner} has no containers")
    if kind == ASCEND_KIND and containers and not any(get_in(ct, "name") == "ascend" for _, ct in containers):
        c.add(
            f"{t.path}.spec.containers",
            "ascend-container-missing",
            f"{t.owner} has no container named 'ascend'; the AscendJob operator configures only that one",
        )
    for path, container in containers:
        limits = get_in(container, "resources", "limits") or {}
        requests = get_in(container, "resources", "requests") or {}
        if not isinstance(limits, Mapping) or not isinstance(requests, Mapping):
            continue
        for res in sorted({*limits, *requests}):
            npu = str(res).startswith(NPU_RESOURCE_PREFIX)
            if not npu and not str(res).startswith(GPU_RESOURCE_PREFIXES):
                continue
            limit, request = limits.get(res), requests.get(res)
            if request is not None and str(limit) != str(request):
                c.add(
                    f"{path}.resources",
                    "npu-requests-not-limits" if npu else "gpu-requests-not-limits",
                    f"{'NPU' if npu else 'GPU'} resource {res}: requests {request!r} must equal limits {limit!r}",
                )

    if job_name is None:
        return
    expected = rings_config_name(job_name)
    volumes = as_list(get_in(t.body, "spec", "volumes"))
    mounted = {
        get_in(m, "name")
        for _, ct in containers
        for m in as_list(get_in(ct, "volumeMounts"))
        if get_in(m, "mountPath") == RINGS_CONFIG_MOUNT_PATH
    }
    found = wrong = False
    for i, volume in enumerate(volumes):
        cm = get_in(volume, "configMap", "name")
        if not isinstance(cm, str):
            continue
        if cm == expected:
            found = True
        elif cm.startswith(RINGS_CONFIG_PREFIX) or get_in(volume, "name") in mounted:
            wrong = True
            c.add(
                f"{t.path}.spec.volumes[{i}].configMap.name",
                "rings-config-volume-wrong",
                f"volume {get_in(volume, 'name')!r} points at ConfigMap {cm!r}, expected {expected!r}",
            )
    if not found and not wrong and isinstance(ring_controller, str):
        c.add(
            f"{t.path}.spec.volumes",
            "rings-config-volume-missing",
            f"{t.owner} mounts no volume from ConfigMap {expected!r} (at {RINGS_CONFIG_MOUNT_PATH})",
        )

    # One pod of the job per node: the anti-affinity must select this job's own pods.
    label_key = VOLCANO_JOB_NAME_LABEL if kind == VOLCANO_KIND else ASCEND_JOB_NAME_LABEL
    terms = as_list(
        get_in(t.body, "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    )
    for i, term in enumerate(terms):
        for j, expr in enumerate(as_list(get_in(term, "labelSelector", "matchExpressions"))):
            if get_in(expr, "key") in (VOLCANO_JOB_NAME_LABEL, ASCEND_JOB_NAME_LABEL) and (
                get_in(expr, "key") != label_key or job_name not in as_list(get_in(expr, "values"))
            ):
                c.add(
                    f"{t.path}.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
                    f".labelSelector.matchExpressions[{j}]",
                    "anti-affinity-other-job",
                    f"the pod anti-affinity selects {get_in(expr, 'key')} in {get_in(expr, 'values')!r}, "
                    f"expected {label_key} in [{job_name}]",
                )
