"""`fault-agent lint FILE…`: find mistakes in fault-tolerant job files before they reach the cluster.

A file is a YAML stream holding one Volcano Job (`batch.volcano.sh/v1alpha1` Job), AscendJob
(`mindxdl.gitee.com/v1`), JobSet (`jobset.x-k8s.io/v1alpha2`) or Kubeflow Trainer v2 TrainJob
(`trainer.kubeflow.org/v1alpha1`: where its opt-in labels must be to reach its JobSet; `submit` does not take one)
and optionally its `rings-config-<job>` and `reset-config-<job>` ConfigMaps, as in
MindCluster's integration guide. The rules come from the guide and shared/DOMAIN.md §2; each problem names its
field path (e.g. ``spec.tasks[0].template.spec.restartPolicy``) and a rule slug. A problem is an error or a
warning: warnings (printed as "warning: …") are worth knowing but do not make the file wrong, so they do not
change the exit code and do not stop `submit`. The module is pure (no Kubernetes client).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agent.core.cluster import FaultScheduling
from agent.core.detect.common import json_type
from agent.core.job_labels import FAULT_RETRY_TIMES_LABEL, FAULT_SCHEDULING_LABEL, POD_RESCHEDULING_LABEL
from agent.core.job_labels import SUB_HEALTHY_LABEL as SUB_HEALTHY_STRATEGY_LABEL
from agent.core.jobset import restart_budget
from agent.core.resetconfig import (
    KEY_RESET,
    RESET_LABEL,
    ResetConfigError,
    parse_reset_config,
    reset_config_name,
    reset_config_reason,
)
from agent.platform.builders import (
    ASCEND_API_VERSION,
    ASCEND_FRAMEWORKS,
    ASCEND_JOB_NAME_LABEL,
    ASCEND_KIND,
    ASCEND_REPLICA_TYPES,
    FRAMEWORK_LABEL,
    GRACE_OVER_TIME_LABEL,
    JOBSET_API_VERSION,
    JOBSET_KIND,
    RING_CONTROLLER_LABEL,
    RINGS_CONFIG_KEY,
    RINGS_CONFIG_MOUNT_PATH,
    RINGS_CONFIG_PREFIX,
    SUB_HEALTHY_STRATEGIES,
    VOLCANO_API_VERSION,
    VOLCANO_JOB_NAME_LABEL,
    VOLCANO_KIND,
    is_dns1123_label,
    rings_config_name,
)
from agent.sources.common import Bad
from agent.sources.jobsets import jobset_spec

VOLCANO_DEFAULT_MAX_RETRY = 3  # Volcano's default for spec.maxRetry
NPU_RESOURCE_PREFIX = "huawei.com/"  # huawei.com/Ascend910, huawei.com/npu, huawei.com/Ascend310P, …
GPU_RESOURCE_PREFIXES = ("nvidia.com/", "amd.com/")  # nvidia.com/gpu, nvidia.com/mig-1g.10gb, amd.com/gpu
ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Problem:
    """One mistake: where (file, 1-based document number, dotted field path), which rule, and what to do.

    `severity` is ERROR (the file is wrong: exit 1) or WARNING (shown as "warning: …", exit code unchanged).
    """

    file: str
    document: int
    path: str
    rule: str
    message: str
    severity: str = ERROR

    @property
    def is_error(self) -> bool:
        return self.severity == ERROR

    def __str__(self) -> str:
        where = f"{self.file}" + (f" (document {self.document})" if self.document else "")
        prefix = "" if self.is_error else f"{self.severity}: "
        return f"{prefix}{where}: {self.path or '<document>'}: {self.message} [{self.rule}]"


@dataclass(frozen=True, slots=True)
class _Template:
    """A pod template inside a job: its path, its owner (task or replica type) and its restart policy."""

    path: str
    owner: str
    body: Any
    restart_policy: Any
    restart_policy_path: str
    replicas: Any


class _Checker:
    def __init__(self, file: str, document: int) -> None:
        self.file = file
        self.document = document
        self.problems: list[Problem] = []

    def add(self, path: str, rule: str, message: str, severity: str = ERROR) -> None:
        self.problems.append(Problem(self.file, self.document, path, rule, message, severity))


def _get(obj: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(k)
    return obj


def _as_list(obj: Any) -> list[Any]:
    return obj if isinstance(obj, list) else []


def _int_label(c: _Checker, labels: Mapping[str, Any], key: str, low: int, high: int, rule: str) -> int | None:
    value = labels.get(key)
    if value is None or not isinstance(value, str):
        return None
    # ASCII decimal digits only, as the agent reads the label (agent.sources.jobs.fault_retry_times_problem):
    # Python's int() would also take "1_0", "+3", " 3" and non-ASCII digits, which the agent refuses
    number = int(value) if value.isascii() and value.isdigit() else None
    if number is None or not low <= number <= high:
        c.add(f"metadata.labels.{key}", rule, f"{key} must be an integer {low}–{high}, got {value!r}")
        return None
    return number


def _templates(job: Mapping[str, Any], kind: str) -> list[_Template]:
    out = []
    if kind == VOLCANO_KIND:
        for i, task in enumerate(_as_list(_get(job, "spec", "tasks"))):
            path = f"spec.tasks[{i}].template"
            name = _get(task, "name") or f"#{i}"
            out.append(
                _Template(
                    path, f"task {name}", _get(task, "template"), _get(task, "template", "spec", "restartPolicy"),
                    f"{path}.spec.restartPolicy", _get(task, "replicas"),
                )
            )  # fmt: skip
    else:
        specs = _get(job, "spec", "replicaSpecs")
        if isinstance(specs, Mapping):
            for rtype, rspec in specs.items():
                path = f"spec.replicaSpecs.{rtype}"
                # The AscendJob operator takes the replica spec's restartPolicy (the pod's one is overwritten).
                out.append(
                    _Template(
                        f"{path}.template", f"replica {rtype}", _get(rspec, "template"), _get(rspec, "restartPolicy"),
                        f"{path}.restartPolicy", _get(rspec, "replicas"),
                    )
                )  # fmt: skip
    return out


def _containers(t: _Template) -> Iterator[tuple[str, Any]]:
    for i, container in enumerate(_as_list(_get(t.body, "spec", "containers"))):
        yield f"{t.path}.spec.containers[{i}]", container


def _resources(t: _Template) -> set[str]:
    """The extended resources `t`'s containers ask for (limits or requests)."""
    out: set[str] = set()
    for _, container in _containers(t):
        for part in ("limits", "requests"):
            got = _get(container, "resources", part)
            if isinstance(got, Mapping):
                out.update(str(k) for k in got)
    return out


def is_gpu_job(templates: Sequence[_Template]) -> bool:
    """True when the job's pods ask for GPUs (a resource under :data:`GPU_RESOURCE_PREFIXES`, e.g.
    ``nvidia.com/gpu``) and for no NPU: such a job has no HCCL rank table, so the NPU-only rules (the
    ``ring-controller.atlas`` label, its rings-config) do not apply to it."""
    asked = set().union(*(_resources(t) for t in templates)) if templates else set()
    return any(r.startswith(GPU_RESOURCE_PREFIXES) for r in asked) and not any(
        r.startswith(NPU_RESOURCE_PREFIX) for r in asked
    )


def job_uses_gpus(job: Mapping[str, Any]) -> bool:
    """:func:`is_gpu_job` of a Volcano Job or AscendJob manifest (its ``kind`` says which)."""
    kind = job.get("kind")
    return isinstance(kind, str) and isinstance(_get(job, "spec"), Mapping) and is_gpu_job(_templates(job, kind))


def _check_labels(c: _Checker, labels: Mapping[str, Any], *, gpu: bool = False) -> tuple[str | None, int | None]:
    """Label rules; returns (fault-scheduling, fault-retry-times) when valid. `gpu`: a GPU job (no NPU rules)."""
    for key, value in labels.items():
        if not isinstance(value, str):
            c.add(
                f"metadata.labels.{key}",
                "label-not-string",
                f'label values must be strings, got {json_type(value)} {value!r}; quote it: {key}: "{value}"',
            )
    scheduling = labels.get(FAULT_SCHEDULING_LABEL)
    known = [s.value for s in FaultScheduling]
    if isinstance(scheduling, str) and scheduling not in known:
        c.add(
            f"metadata.labels.{FAULT_SCHEDULING_LABEL}",
            "fault-scheduling-unknown",
            f"unknown fault-scheduling {scheduling!r}; use one of {', '.join(known)}",
        )
        scheduling = None
    retry_times = _int_label(c, labels, FAULT_RETRY_TIMES_LABEL, 0, 100, "fault-retry-times-invalid")
    if GRACE_OVER_TIME_LABEL in labels:
        # MindCluster reads grace-over-time only from its scheduler plugin's arguments (scheduler-wide), never
        # from a job (component/ascend-for-volcano/plugin/factory.go getGraceDeleteTime); so does the
        # agent (policy.grace_over_time_s). The label is harmless but misleading: warn, do not fail the file.
        c.add(
            f"metadata.labels.{GRACE_OVER_TIME_LABEL}",
            "grace-over-time-label-ignored",
            "grace-over-time is not read from a job: it is a scheduler-wide setting (MindCluster: the Volcano "
            "plugin argument grace-over-time; this agent: policy.grace_over_time_s, env "
            "FAULT_AGENT_POLICY__GRACE_OVER_TIME_S, default 900 s, 2–3600); remove the label",
            WARNING,
        )
    rescheduling = labels.get(POD_RESCHEDULING_LABEL)
    if isinstance(rescheduling, str) and rescheduling not in ("on", "off"):
        c.add(
            f"metadata.labels.{POD_RESCHEDULING_LABEL}",
            "pod-rescheduling-invalid",
            f"pod-rescheduling must be 'on' or 'off', got {rescheduling!r}",
        )
    strategy = labels.get(SUB_HEALTHY_STRATEGY_LABEL)
    if isinstance(strategy, str) and strategy not in SUB_HEALTHY_STRATEGIES:
        c.add(
            f"metadata.labels.{SUB_HEALTHY_STRATEGY_LABEL}",
            "sub-healthy-strategy-invalid",
            f"subHealthyStrategy must be one of {', '.join(SUB_HEALTHY_STRATEGIES)}, got {strategy!r}",
        )
    if not gpu and (not isinstance(labels.get(RING_CONTROLLER_LABEL), str) or not labels.get(RING_CONTROLLER_LABEL)):
        c.add(
            "metadata.labels",
            "ring-controller-missing",
            f"the job has no {RING_CONTROLLER_LABEL} label; NPU jobs need it (e.g. ascend-910b)",
        )
    return (scheduling if isinstance(scheduling, str) else None), retry_times


def _tight_max_retry(shown: str, max_retry: int, retry_times: int) -> str:
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


def _check_job(c: _Checker, job: Mapping[str, Any], kind: str, cms: Mapping[str, tuple[int, Any]]) -> None:
    name = _get(job, "metadata", "name")
    if _get(job, "metadata", "generateName") is not None and name is None:
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
    labels = _get(job, "metadata", "labels")
    if labels is None:
        labels = {}
    if not isinstance(labels, Mapping):
        c.add("metadata.labels", "labels-not-mapping", f"metadata.labels must be a mapping, got {json_type(labels)}")
        labels = {}
    gpu = is_gpu_job(_templates(job, kind)) if isinstance(_get(job, "spec"), Mapping) else False
    scheduling, retry_times = _check_labels(c, labels, gpu=gpu)
    if FAULT_SCHEDULING_LABEL not in labels and FAULT_RETRY_TIMES_LABEL not in labels:
        c.add(
            "metadata.labels",
            "not-fault-tolerant",
            f"the job has neither a {FAULT_SCHEDULING_LABEL} nor a {FAULT_RETRY_TIMES_LABEL} label: the agent will "
            "not act on it (no restart or rescheduling on a fault)",
            WARNING,
        )
    ring_controller = labels.get(RING_CONTROLLER_LABEL)
    spec = _get(job, "spec")
    if not isinstance(spec, Mapping):
        c.add("spec", "spec-missing", "the job has no spec")
        return
    templates = _templates(job, kind)
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
            max_retry = _get(spec, "runPolicy", "backoffLimit")
            path = "spec.runPolicy.backoffLimit"
            shown = f"{path} {max_retry}"
        if isinstance(max_retry, int) and max_retry < retry_times:
            c.add(
                path,
                "max-retry-below-retry-times",
                f"{shown} is smaller than fault-retry-times {retry_times}: the job fails before the retries are used",
            )
        elif kind == VOLCANO_KIND and isinstance(max_retry, int) and max_retry - 1 < retry_times + 1:
            c.add(path, "max-retry-tight", _tight_max_retry(shown, max_retry, retry_times), WARNING)
        for t in templates:
            if t.restart_policy != "Never":
                c.add(
                    t.restart_policy_path,
                    "retry-times-needs-never",
                    f"fault-retry-times needs restartPolicy: Never on {t.owner}, got {t.restart_policy!r}",
                )
    if kind == VOLCANO_KIND:
        for i, policy in enumerate(_as_list(spec.get("policies"))):
            events = [_get(policy, "event"), *_as_list(_get(policy, "events"))]
            if retry_times is not None and "PodFailed" in events and _get(policy, "action") == "RestartJob":
                c.add(
                    f"spec.policies[{i}]",
                    "double-restart",
                    "a PodFailed → RestartJob policy together with fault-retry-times restarts the job twice for one "
                    "failure; drop the policy or the label",
                )
    if scheduling == FaultScheduling.GRACE.value:
        for t in templates:
            if _get(t.body, "spec", "terminationGracePeriodSeconds") == 0:
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
        else _get(spec, "runPolicy", "schedulingPolicy", "minAvailable")
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
        _check_template(c, t, kind, name, ring_controller, gpu=gpu)

    if name is not None:
        cm_name = rings_config_name(name)
        if cm_name in cms:
            _check_rings_config(c, cms[cm_name], _get(job, "metadata", "namespace"))
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
        _check_reset_config(c, name, labels, cms, _get(job, "metadata", "namespace"))


def _check_reset_config(
    c: _Checker, job_name: str, labels: Mapping[str, Any], cms: Mapping[str, tuple[int, Any]], job_namespace: Any
) -> None:
    """reset-config-<job>: the file alone decides (lint reads no cluster). A job whose labels need one
    (agent.core.resetconfig ``reset_config_reason``) and a file without it is a warning: ``fault-agent submit``
    creates it, ``kubectl apply`` of this file would not. One in the file must be readable and labelled."""
    cm_name = reset_config_name(job_name)
    reason = reset_config_reason({str(k): str(v) for k, v in labels.items()})
    if cm_name not in cms:
        if reason is not None:
            c.add(
                "metadata.labels",
                "reset-config-missing",
                f'{reason} needs a ConfigMap {cm_name} (label reset: "true"): the rescheduler tells the '
                "training processes to restart or exit through it. fault-agent submit creates it with the job; "
                "add it to this file if you apply it with kubectl (fault-agent lint reads only this file)",
                WARNING,
            )
        return
    document, cm = cms[cm_name]
    cc = _Checker(c.file, document)
    namespace = _get(cm, "metadata", "namespace")
    if namespace != job_namespace:
        cc.add(
            "metadata.namespace",
            "reset-config-namespace",
            f"ConfigMap {cm_name} is in namespace {namespace!r} but the job in {job_namespace!r}",
        )
    cm_labels = _get(cm, "metadata", "labels")
    if not isinstance(cm_labels, Mapping) or cm_labels.get(RESET_LABEL[0]) != RESET_LABEL[1]:
        cc.add("metadata.labels", "reset-config-label-missing", f'ConfigMap {cm_name} needs the label reset: "true"')
    data = _get(cm, "data")
    try:
        if not isinstance(data, Mapping):
            raise ResetConfigError("missing-key", "no data")
        parse_reset_config({str(k): str(v) for k, v in data.items()})
    except ResetConfigError as e:
        cc.add(f"data.{KEY_RESET}", "reset-config-invalid", f"ConfigMap {cm_name}: {e}")
    c.problems.extend(cc.problems)


def _check_template(
    c: _Checker, t: _Template, kind: str, job_name: str | None, ring_controller: Any, *, gpu: bool = False
) -> None:
    if not isinstance(t.body, Mapping):
        c.add(t.path, "template-missing", f"{t.owner} has no pod template")
        return
    pod_labels = _get(t.body, "metadata", "labels")
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

    containers = list(_containers(t))
    if not containers:
        c.add(f"{t.path}.spec.containers", "no-containers", f"{t.owner} has no containers")
    if kind == ASCEND_KIND and containers and not any(_get(ct, "name") == "ascend" for _, ct in containers):
        c.add(
            f"{t.path}.spec.containers",
            "ascend-container-missing",
            f"{t.owner} has no container named 'ascend'; the AscendJob operator configures only that one",
        )
    for path, container in containers:
        limits = _get(container, "resources", "limits") or {}
        requests = _get(container, "resources", "requests") or {}
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
    volumes = _as_list(_get(t.body, "spec", "volumes"))
    mounted = {
        _get(m, "name")
        for _, ct in containers
        for m in _as_list(_get(ct, "volumeMounts"))
        if _get(m, "mountPath") == RINGS_CONFIG_MOUNT_PATH
    }
    found = wrong = False
    for i, volume in enumerate(volumes):
        cm = _get(volume, "configMap", "name")
        if not isinstance(cm, str):
            continue
        if cm == expected:
            found = True
        elif cm.startswith(RINGS_CONFIG_PREFIX) or _get(volume, "name") in mounted:
            wrong = True
            c.add(
                f"{t.path}.spec.volumes[{i}].configMap.name",
                "rings-config-volume-wrong",
                f"volume {_get(volume, 'name')!r} points at ConfigMap {cm!r}, expected {expected!r}",
            )
    if not found and not wrong and isinstance(ring_controller, str):
        c.add(
            f"{t.path}.spec.volumes",
            "rings-config-volume-missing",
            f"{t.owner} mounts no volume from ConfigMap {expected!r} (at {RINGS_CONFIG_MOUNT_PATH})",
        )

    # One pod of the job per node: the anti-affinity must select this job's own pods.
    label_key = VOLCANO_JOB_NAME_LABEL if kind == VOLCANO_KIND else ASCEND_JOB_NAME_LABEL
    terms = _as_list(
        _get(t.body, "spec", "affinity", "podAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
    )
    for i, term in enumerate(terms):
        for j, expr in enumerate(_as_list(_get(term, "labelSelector", "matchExpressions"))):
            if _get(expr, "key") in (VOLCANO_JOB_NAME_LABEL, ASCEND_JOB_NAME_LABEL) and (
                _get(expr, "key") != label_key or job_name not in _as_list(_get(expr, "values"))
            ):
                c.add(
                    f"{t.path}.spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
                    f".labelSelector.matchExpressions[{j}]",
                    "anti-affinity-other-job",
                    f"the pod anti-affinity selects {_get(expr, 'key')} in {_get(expr, 'values')!r}, "
                    f"expected {label_key} in [{job_name}]",
                )


def _check_rings_config(c: _Checker, found: tuple[int, Any], job_namespace: Any) -> None:
    document, cm = found
    cc = _Checker(c.file, document)
    name = _get(cm, "metadata", "name")
    namespace = _get(cm, "metadata", "namespace")
    if namespace != job_namespace:
        cc.add(
            "metadata.namespace",
            "rings-config-namespace",
            f"ConfigMap {name} is in namespace {namespace!r} but the job in {job_namespace!r}",
        )
    labels = _get(cm, "metadata", "labels")
    if not isinstance(labels, Mapping) or RING_CONTROLLER_LABEL not in labels:
        cc.add(
            "metadata.labels", "rings-config-label-missing", f"ConfigMap {name} has no {RING_CONTROLLER_LABEL} label"
        )
    hccl = _get(cm, "data", RINGS_CONFIG_KEY)
    if hccl is None:
        cc.add(
            f"data.{RINGS_CONFIG_KEY}", "rings-config-hccl-missing", f"ConfigMap {name} has no {RINGS_CONFIG_KEY} key"
        )
    else:
        try:
            status = _get(json.loads(hccl), "status") if isinstance(hccl, str) else None
        except (json.JSONDecodeError, RecursionError):  # Python's json parser recurses once per level
            status = None
        if status != "initializing":
            cc.add(
                f"data.{RINGS_CONFIG_KEY}",
                "rings-config-hccl-invalid",
                f'{RINGS_CONFIG_KEY} must start as {{"status": "initializing"}}, got {hccl!r}',
            )
    c.problems.extend(cc.problems)


def lint_documents(docs: Sequence[Any], file: str = "<input>") -> list[Problem]:
    """Check the documents of one job file (already parsed YAML/JSON, None for empty documents).

    Returns every problem found, in document order; an empty list means the file is fine.
    """
    problems: list[Problem] = []
    jobs: list[tuple[int, Mapping[str, Any], str]] = []
    cms: dict[str, tuple[int, Any]] = {}
    for n, doc in enumerate(docs, start=1):
        if doc is None:
            continue
        c = _Checker(file, n)
        if not isinstance(doc, Mapping):
            c.add("", "not-an-object", f"document is {_a(json_type(doc))}, expected a Kubernetes object")
        else:
            api, kind = doc.get("apiVersion"), doc.get("kind")
            if (api, kind) in (
                (VOLCANO_API_VERSION, VOLCANO_KIND),
                (ASCEND_API_VERSION, ASCEND_KIND),
                (JOBSET_API_VERSION, JOBSET_KIND),
                (TRAINJOB_API_VERSION, TRAINJOB_KIND),
            ):
                jobs.append((n, doc, str(kind)))
            elif (api, kind) == ("v1", "ConfigMap"):
                name = _get(doc, "metadata", "name")
                if isinstance(name, str):
                    cms[name] = (n, doc)
            else:
                c.add(
                    "kind",
                    "unsupported-kind",
                    f"{api} {kind} is not a Volcano Job ({VOLCANO_API_VERSION} Job), an AscendJob "
                    f"({ASCEND_API_VERSION} AscendJob), a JobSet ({JOBSET_API_VERSION} JobSet), a TrainJob "
                    f"({TRAINJOB_API_VERSION} TrainJob) or a ConfigMap",
                )
        problems.extend(c.problems)
    if not jobs and not problems:
        problems.append(Problem(file, 0, "", "no-job", "the file holds no Volcano Job, AscendJob, JobSet or TrainJob"))
    if len(jobs) > 1:
        problems.append(Problem(file, jobs[1][0], "", "several-jobs", "one job per file, found " + str(len(jobs))))
    for n, job, kind in jobs:
        c = _Checker(file, n)
        if kind == JOBSET_KIND:
            _check_jobset(c, job)
        elif kind == TRAINJOB_KIND:
            _check_trainjob(c, job)
        else:
            _check_job(c, job, kind, cms)
        problems.extend(c.problems)
    return problems


def _check_jobset(c: _Checker, job: Mapping[str, Any]) -> None:
    """A JobSet (docs/jobset.md): opted in by ``fault-scheduling`` (force or grace); restartable by the agent (its
    child Jobs fail on a deleted pod and its failure policy restarts on that: agent.core.jobset.restart_budget);
    evictions not spent from ``maxRestarts``; pods with ``restartPolicy: Never`` (with OnFailure, JobSet's webhook
    default, the kubelet restarts a failed container in place and JobSet never restarts the JobSet)."""
    labels = _get(job, "metadata", "labels")
    labels = labels if isinstance(labels, Mapping) else {}
    scheduling = labels.get(FAULT_SCHEDULING_LABEL)
    if scheduling not in (FaultScheduling.FORCE.value, FaultScheduling.GRACE.value):
        c.add(
            f"metadata.labels.{FAULT_SCHEDULING_LABEL}",
            "jobset-not-opted-in",
            f"fault-scheduling is {scheduling!r}: the agent restarts a JobSet only with force or grace",
            WARNING if scheduling is None else ERROR,
        )
    spec = _get(job, "spec")
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
    for i, rjob in enumerate(_as_list(_get(job, "spec", "replicatedJobs"))):
        policy = _get(rjob, "template", "spec", "template", "spec", "restartPolicy")
        if policy != "Never":
            c.add(
                f"spec.replicatedJobs[{i}].template.spec.template.spec.restartPolicy",
                "jobset-restart-policy",
                f"restartPolicy is {policy!r}: use Never, so that a failed pod fails its Job and JobSet restarts "
                "the whole JobSet (OnFailure restarts the container in place)",
            )


TRAINJOB_API_VERSION = "trainer.kubeflow.org/v1alpha1"
TRAINJOB_KIND = "TrainJob"
_TRAINJOB_LABELS = (FAULT_SCHEDULING_LABEL, FAULT_RETRY_TIMES_LABEL, POD_RESCHEDULING_LABEL)


def _check_trainjob(c: _Checker, job: Mapping[str, Any]) -> None:
    """A Kubeflow Trainer v2 TrainJob (docs/jobset.md, "TrainJob"): the agent acts on the JobSet Trainer creates,
    whose labels are the runtime's ``spec.template.metadata.labels`` overlaid with the TrainJob's ``spec.labels``;
    the TrainJob's own ``metadata.labels`` never reach it (trainer v2.0.0 pkg/runtime/core/trainingruntime.go
    ``newRuntimeInfo``, pkg/runtime/framework/plugins/jobset/jobset.go ``Build``). So the opt-in labels must be in
    ``spec.labels``; the JobSet's failure policy comes from the runtime, which this file does not hold (a warning:
    Trainer's shipped runtimes set none, and a JobSet without one fails on its first failed Job)."""
    meta = _get(job, "metadata", "labels")
    meta = meta if isinstance(meta, Mapping) else {}
    spec_labels = _get(job, "spec", "labels")
    spec_labels = spec_labels if isinstance(spec_labels, Mapping) else {}
    for key in _TRAINJOB_LABELS:
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
    runtime = _get(job, "spec", "runtimeRef", "name")
    c.add(
        "spec.runtimeRef",
        "trainjob-runtime-not-checked",
        f"the JobSet's failurePolicy, backoffLimit, podFailurePolicy and restartPolicy come from the runtime "
        f"{runtime!r}, not this file: they need the shape of the guide's JobSet (docs/jobset.md); Trainer's shipped "
        "runtimes set no failurePolicy, and then the agent cannot restart the JobSet",
        WARNING,
    )


def _a(word: str) -> str:
    return f"{'an' if word[:1] in ('a', 'e', 'i', 'o', 'u') else 'a'} {word}"


def lint_text(text: str, file: str = "<input>") -> list[Problem]:
    """Parse `text` as a YAML stream and check it; a YAML syntax error is one `yaml-invalid` problem, and so is
    a document nested more than :data:`agent.core.detect.nesting.MAX_NESTING` levels (it would exhaust PyYAML's
    recursion)."""
    from agent.core.detect.nesting import NestingError, yaml_load_all

    try:
        docs = yaml_load_all(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        detail = getattr(e, "problem", None) or str(e)
        if isinstance(e, NestingError):
            return [Problem(file, 0, where, "too-deep", f"a document is {detail}")]
        return [Problem(file, 0, where, "yaml-invalid", f"not valid YAML: {detail}")]
    return lint_documents(docs, file)


def lint_file(path: Path) -> list[Problem]:
    """Read and check one file; an unreadable file is one `unreadable` problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        return [Problem(str(path), 0, "", "unreadable", f"cannot read: {reason}")]
    return lint_text(text, str(path))


def _run(args: argparse.Namespace) -> int:
    total = 0
    for name in args.files:
        problems = lint_file(Path(name))
        errors = [p for p in problems if p.is_error]
        total += len(errors)
        for p in problems:
            print(p)
        if not errors:
            print(f"{name}: ok")
    if total:
        print(f"{total} problem{'s' if total != 1 else ''} found", file=sys.stderr)
        return 1
    return 0


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of `fault-agent lint`: one or more job files; exit 1 when any error is found."""
    parser.description = (
        "Check fault-tolerant job files for mistakes. Exit code 1 when any file has an error, else 0. "
        "Lines starting with 'warning:' are warnings: worth knowing (e.g. a job without a fault-scheduling or "
        "fault-retry-times label, which the agent will not act on) but they do not change the exit code."
    )
    parser.add_argument("files", nargs="+", metavar="FILE", help="job file(s): YAML with a job and its rings-config")
    parser.set_defaults(func=_run)
