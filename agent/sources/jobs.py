"""Volcano Jobs and AscendJobs → :class:`~agent.core.cluster.JobRecord` (DOMAIN.md §2).

Volcano ``batch.volcano.sh/v1alpha1`` Job: ``spec.maxRetry`` (default 3), ``spec.minAvailable``,
``status.state.phase``, ``status.version``, ``status.retryCount``, the lifecycle ``policies`` (job and tasks)
that answer a deleted pod. MindCluster ``mindxdl.gitee.com/v1``
AscendJob: ``spec.runPolicy.backoffLimit``, ``spec.runPolicy.schedulingPolicy.minAvailable``, kubeflow-style
``status.conditions`` (:func:`ascend_phase`); its restart counter is on its pods only (the pods' ``version`` label,
read by agent.sources.state). Labels on both: ``fault-scheduling``, ``fault-retry-times``,
``pod-rescheduling``, ``subHealthyStrategy``, ``process-recover-enable``, read as MindCluster's scheduler reads
them: the PodGroup's labels merged with the pod templates' (agent.core.job_labels; until the PodGroup is seen the
job's own labels stand in for it).
"""

from __future__ import annotations

import re
from typing import Any

from agent.core.cluster import UNLIMITED_BACKOFF, FaultScheduling, JobKind, JobRecord
from agent.core.faults import ObjectRef, Rejection
from agent.core.job_labels import FAULT_RETRY_TIMES_LABEL as FAULT_RETRY_TIMES_LABEL
from agent.core.job_labels import FAULT_SCHEDULING_LABEL as FAULT_SCHEDULING_LABEL
from agent.core.job_labels import POD_RESCHEDULING_LABEL as POD_RESCHEDULING_LABEL
from agent.core.job_labels import PROCESS_RECOVER_LABEL as PROCESS_RECOVER_LABEL
from agent.core.job_labels import RECOVER_STRATEGY_ANNOTATION, job_view, template_labels
from agent.core.job_labels import SUB_HEALTHY_LABEL as SUB_HEALTHY_LABEL
from agent.core.progress import HANG_TIMEOUT_LABEL, PROGRESS_LABEL
from agent.core.straggler import STRAGGLER_LABEL
from agent.sources.common import Bad, Metadata, get_dict, get_int, get_list, get_str, intern, object_ref

PROCESS_RECOVER_STRATEGY_ANNOTATION = "ProcessRecoverStrategy"
"""Present (any value): an external platform handles the job's faults and the rescheduler deletes nothing
(MindCluster ``common/util/constants.go`` ``ProcessRecoverExternalModeKey``, read from the PodGroup's annotations,
which the Volcano job controller and the Ascend Operator copy from the job's when they create the PodGroup)."""
RECOVER_POLICY_PATH_ANNOTATION = "huawei.com/recover_policy_path"
"""``pod``: rescheduling never goes beyond the fault pods (no master escalation, no pending escalation), for any
job (MindCluster ``common/util/constants.go`` ``RecoverPolicyPathKey``, ``ReschedulingUpperLimitPod``; read by
``internal/rescheduling/job.go`` ``setReScheduleLimit`` from the PodGroup's annotations, else the first pod's:
``plugin/job.go`` ``getJobAnnotationFromJobInfo``)."""
RECOVER_POLICY_PATH_POD = "pod"
POD_LIMIT_LABELS = (
    ("ome.io/inferenceservice", None),
    ("app", "mindie-ms-controller"),
    ("app", "mindie-ms-coordinator"),
)
"""Job labels that put the same pod-only limit on a job (``setReScheduleLimit``: the label
``ome.io/inferenceservice`` with any value, ``app`` = ``mindie-ms-controller`` or ``mindie-ms-coordinator``;
``common/util/constants.go`` ``OmeInferenceServiceKey``, ``AppTypeLabelKey``, ``ControllerAppType``,
``CoordinatorAppType``)."""
AGENT_ANNOTATION_PREFIX = "fault-agent.io/"
VOLCANO_DEFAULT_MAX_RETRY = 3
# Labels kept on the record: the fault-tolerance settings of DOMAIN.md §2 (others are dropped).
KEPT_LABELS = frozenset(
    {
        FAULT_SCHEDULING_LABEL,
        FAULT_RETRY_TIMES_LABEL,
        POD_RESCHEDULING_LABEL,
        SUB_HEALTHY_LABEL,
        PROCESS_RECOVER_LABEL,
        "ring-controller.atlas",
        "framework",
        "tor-affinity",
        PROGRESS_LABEL,
        HANG_TIMEOUT_LABEL,
        STRAGGLER_LABEL,
    }
)


class JobConverter:
    """Callable raw Volcano Job / AscendJob dict → JobRecord, or a Rejection.

    Rejection reasons: ``missing-metadata``, ``wrong-type``, ``bad-timestamp``, ``bad-max-retry``.
    A ``fault-retry-times`` value that is not an integer in 0–100 is no rejection: the job stays watched (its
    hardware faults are handled) with a business retry budget of 0, and the agent reports the label once
    (:func:`fault_retry_times_problem`, agent.runtime.app.RecoveryEngine).
    An unknown ``fault-scheduling`` value reads as OFF (the job is not opted in, as MindCluster's Volcano plugin
    reads it) and still gives a record: :func:`label_rejections` reports it.
    """

    def __init__(self, kind: JobKind) -> None:
        self.kind = kind
        self._kind_name = kind.api_kind

    def __call__(self, obj: dict[str, Any]) -> JobRecord | Rejection:
        """Convert one job. Never raises."""
        try:
            return self._convert(obj)
        except Bad as e:
            return Rejection(object_ref(obj, self._kind_name), e.reason, e.detail)

    def _convert(self, obj: dict[str, Any]) -> JobRecord:
        m = Metadata(obj, self._kind_name)
        meta = obj["metadata"]
        generation = get_int(meta, "generation", "metadata") or 0
        labels = m.labels
        spec = get_dict(obj, "spec", "job")
        status = get_dict(obj, "status", "job")
        if self.kind is JobKind.VOLCANO:
            max_retry = _count(spec, "maxRetry", "spec", VOLCANO_DEFAULT_MAX_RETRY)
            max_retry_from = "spec.maxRetry" if "maxRetry" in spec else "Volcano's default maxRetry"
            min_available = get_int(spec, "minAvailable", "spec")
            phase = get_str(get_dict(status, "state", "status"), "phase", "status.state")
            version_int = get_int(status, "version", "status")
            version = str(version_int) if version_int is not None else ""
            retry_count = get_int(status, "retryCount", "status") or 0
            on_eviction = restarts_on_eviction(spec)
        else:
            run_policy = get_dict(spec, "runPolicy", "spec")
            max_retry = _count(run_policy, "backoffLimit", "spec.runPolicy", UNSET)
            max_retry_from = "spec.runPolicy.backoffLimit"
            if max_retry == UNSET:
                max_retry = ascend_backoff_from_label(labels.get(FAULT_RETRY_TIMES_LABEL))
                max_retry_from = ASCEND_LIMIT_FROM_LABEL if max_retry > 0 else ""
            min_available = get_int(
                get_dict(run_policy, "schedulingPolicy", "spec.runPolicy"), "minAvailable", "schedulingPolicy"
            )
            phase = ascend_phase(get_list(status, "conditions", "status"))
            # the operator keeps its restart counter on the pods only: the state fills both in from them
            # (agent.sources.state.ClusterState, ascend_pod_version); a `version` label on the job is not its
            version = ""
            retry_count = 0
            on_eviction = False
        policy_path, policy_path_from = recover_policy_path(obj)
        own = tuple(sorted((intern(k), intern(v)) for k, v in labels.items() if k in KEPT_LABELS))
        record = JobRecord(
            kind=self.kind,
            namespace=m.namespace,
            name=intern(m.name),
            uid=m.uid,
            resource_version=m.rv,
            generation=generation,
            labels=own,
            fault_scheduling=FaultScheduling.OFF,
            fault_retry_times=None,
            pod_rescheduling=False,
            sub_healthy_strategy="ignore",
            max_retry=max_retry,
            min_available=min_available,
            phase=intern(phase),
            version=intern(version),
            retry_count=retry_count,
            annotations=tuple(
                sorted((k, v) for k, v in m.annotations.items() if k.startswith(AGENT_ANNOTATION_PREFIX))
            ),
            created_at=m.created_at,
            process_recover_strategy=m.annotations.get(PROCESS_RECOVER_STRATEGY_ANNOTATION),
            restarts_on_eviction=on_eviction,
            max_retry_from=max_retry_from,
            recover_policy_path=policy_path,
            recover_policy_path_from=policy_path_from,
            job_labels=own,
            template_labels=template_labels(pod_template_labels(self.kind, spec)),
            operator_process_recover=(
                self.kind is JobKind.ASCEND and RECOVER_STRATEGY_ANNOTATION in m.annotations and bool(labels)
            ),
        )
        # the settings as MindCluster reads them; the state merges the PodGroup's labels in once it sees it
        return job_view(record, None)


def pod_template_labels(kind: JobKind, spec: dict[str, Any]) -> list[dict[str, str]]:
    """The labels of each pod template that makes pods: a Volcano Job's ``spec.tasks[].template`` with
    ``replicas`` > 0, an AscendJob's ``spec.replicaSpecs.<type>.template`` with ``replicas`` > 0 (absent: 1, the
    kubeflow default), in the spec's order. A template, task or label value of the wrong type is skipped (the
    controller would not make such pods; a label that is not a string never matches a setting)."""
    if kind is JobKind.VOLCANO:
        tasks = spec.get("tasks")
        entries = [t for t in tasks if isinstance(t, dict)] if isinstance(tasks, list) else []
        default = 0
    else:
        replicas = spec.get("replicaSpecs")
        entries = [r for r in replicas.values() if isinstance(r, dict)] if isinstance(replicas, dict) else []
        default = 1
    out: list[dict[str, str]] = []
    for entry in entries:
        count = entry.get("replicas", default)
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            continue
        template = entry.get("template")
        meta = template.get("metadata") if isinstance(template, dict) else None
        labels = meta.get("labels") if isinstance(meta, dict) else None
        if isinstance(labels, dict):
            out.append({k: v for k, v in labels.items() if isinstance(k, str) and isinstance(v, str)})
    return out


def recover_policy_path(obj: dict[str, Any]) -> tuple[str, str]:
    """(the job's ``huawei.com/recover_policy_path`` value, where it was read), ("", "") when it has none.

    Read as MindCluster's scheduler reads it: a label that limits rescheduling to pods (:data:`POD_LIMIT_LABELS`)
    gives ``pod``; else the job's own annotation (the Volcano job controller and the Ascend Operator copy the
    job's annotations onto its PodGroup, where MindCluster reads it first); else the first pod template that
    carries it (MindCluster takes the key from the first pod it sees; Volcano ``spec.tasks[].template``, AscendJob
    ``spec.replicaSpecs.<type>.template``, in the order written). A value that is not a string is ignored.
    Never raises."""
    meta = obj.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if isinstance(labels, dict):
        for key, value in POD_LIMIT_LABELS:
            if key in labels and (value is None or labels[key] == value):
                shown = key if value is None else f"{key}={value}"
                return RECOVER_POLICY_PATH_POD, f"the job's label {shown}"
    annotations = meta.get("annotations") if isinstance(meta, dict) else None
    if isinstance(annotations, dict) and isinstance(annotations.get(RECOVER_POLICY_PATH_ANNOTATION), str):
        return intern(annotations[RECOVER_POLICY_PATH_ANNOTATION]), "the job's annotation"
    spec = obj.get("spec")
    templates: list[object] = []
    if isinstance(spec, dict):
        tasks = spec.get("tasks")
        if isinstance(tasks, list):
            templates += [t.get("template") for t in tasks if isinstance(t, dict)]
        replicas = spec.get("replicaSpecs")
        if isinstance(replicas, dict):
            templates += [r.get("template") for r in replicas.values() if isinstance(r, dict)]
    for template in templates:
        tmeta = template.get("metadata") if isinstance(template, dict) else None
        tann = tmeta.get("annotations") if isinstance(tmeta, dict) else None
        if isinstance(tann, dict) and isinstance(tann.get(RECOVER_POLICY_PATH_ANNOTATION), str):
            return intern(tann[RECOVER_POLICY_PATH_ANNOTATION]), "the pod template's annotation"
    return "", ""


POD_EVICTED = "PodEvicted"
ANY_EVENT = "*"
RESTART_JOB = "RestartJob"


def restarts_on_eviction(spec: dict[str, Any]) -> bool:
    """Whether a Volcano Job's controller restarts the whole job (``RestartJob``) when any one of its pods is
    deleted, from the job's ``spec``: for every task in ``spec.tasks``, the first of the task's ``policies``
    whose events (``event`` and ``events``) hold ``PodEvicted`` or ``*`` gives the action, else the first such
    policy of ``spec.policies``; it must be ``RestartJob`` for every task. A policy that only names an
    ``exitCode`` never answers an eviction (exit code 0), and ``PodEvicted`` needs no ``timeout``.

    Source: ``volcano.sh/volcano`` v1.14.1 ``pkg/controllers/job/job_controller_handler.go`` ``deletePod`` (a
    deleted pod of the job's current version is the request ``PodEvicted`` for its task) and
    ``job_controller_util.go`` ``applyPolicies`` (task policies, then job policies; no match: ``SyncJob``, which
    only re-creates the pod). False for a job with no tasks and for any shape the controller's CRD would not
    admit (a value of the wrong type is skipped, so it never reads as a restart: a RestartJob Command then
    restarts the job whatever its policies say)."""
    job_action = _eviction_action(spec.get("policies"))
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        return False
    for task in tasks:
        action = _eviction_action(task.get("policies")) if isinstance(task, dict) else None
        if (action if action is not None else job_action) != RESTART_JOB:
            return False
    return True


def _eviction_action(policies: object) -> str | None:
    """The action of the first policy in `policies` that answers ``PodEvicted`` (or ``*``), "" when that
    policy's action is unreadable; None when none answers it."""
    if not isinstance(policies, list):
        return None
    for policy in policies:
        if not isinstance(policy, dict):
            continue
        events = policy.get("events")
        named = [e for e in events if isinstance(e, str)] if isinstance(events, list) else []
        if isinstance(policy.get("event"), str):
            named.append(policy["event"])
        if POD_EVICTED in named or ANY_EVENT in named:
            action = policy.get("action")
            return action if isinstance(action, str) else ""
    return None


def fault_scheduling_problem(value: str | None) -> str | None:
    """Why a ``fault-scheduling`` label value is not valid, or None when it is valid or absent.

    Valid values are exactly ``force``, ``grace``, ``off``, ``external-force`` and ``external-grace`` (MindCluster's
    Volcano plugin compares them as written: ``component/ascend-for-volcano/internal/rescheduling/job.go``
    ``restartSingleFaultJob``); anything else (``FORCE``, ``""``,
    ``grace-ish``) leaves the job without fault rescheduling, which must never happen silently.
    """
    if value is None:
        return None
    try:
        FaultScheduling(value)
    except ValueError:
        known = "|".join(s.value for s in FaultScheduling)
        return f"label {FAULT_SCHEDULING_LABEL}={value[:40]!r} is not {known}: the job is treated as not opted in"
    return None


def label_rejections(rec: JobRecord, source: ObjectRef) -> list[Rejection]:
    """The job's label values the agent could not use (the record is still kept). Reasons:
    ``bad-fault-scheduling`` (see :func:`fault_scheduling_problem`). Pure; the caller reports each once per
    distinct value (agent.runtime.app.DetectPipeline)."""
    problem = fault_scheduling_problem(rec.label(FAULT_SCHEDULING_LABEL))
    return [] if problem is None else [Rejection(source, "bad-fault-scheduling", problem)]


def fault_retry_times_problem(value: str | None) -> str | None:
    """Why a ``fault-retry-times`` label value cannot be used, or None when it is valid or absent.

    Valid: an integer 0–100 in decimal digits (the business-failure retries of DOMAIN.md §2; ``fault-agent lint``
    checks the same). A job with another value (``-1``, ``abc``, ``101``) keeps being watched with a business
    retry budget of 0: a business failure aborts instead of restarting, hardware faults are handled as usual.
    """
    if value is None or (value.isascii() and value.isdigit() and 0 <= int(value) <= 100):
        return None
    return (
        f"label {FAULT_RETRY_TIMES_LABEL}={value[:20]!r} is not an integer 0–100: the job's business retry budget "
        "is 0 (a business failure aborts), its hardware faults are still handled"
    )


ASCEND_LIMIT_FROM_LABEL = "the fault-retry-times label (no spec.runPolicy.backoffLimit)"
"""`JobRecord.max_retry_from` of an AscendJob whose backoff limit the operator took from that label."""
UNSET = -2  # _count's default when the field is absent (never a valid count)
_GO_ATOI = re.compile(r"[+-]?[0-9]+")


def ascend_backoff_from_label(value: str | None) -> int:
    """The backoff limit of an AscendJob whose ``spec.runPolicy.backoffLimit`` is unset, as the Ascend Operator
    sets it when the job is created: the ``fault-retry-times`` label read with Go's ``strconv.Atoi`` (optional
    sign, decimal digits, within int32 here), else :data:`~agent.core.cluster.UNLIMITED_BACKOFF` (-1): label
    absent, empty, or not such a number (the operator logs the error and keeps -1)
    (component/ascend-operator/pkg/controllers/v1/ascendjob_controller.go ``ascendJobCreateFunc``,
    ``setFaultRetryTimesToBackoffLimits``). The operator fails a job only for a limit > 0, so 0 and negative
    values are unlimited too (``job.go`` ``backoffLimit > 0 && version > backoffLimit``)."""
    if not value or _GO_ATOI.fullmatch(value) is None:
        return UNLIMITED_BACKOFF
    n = int(value)
    if not -(2**31) <= n < 2**31:
        return UNLIMITED_BACKOFF
    return n if n > 0 else UNLIMITED_BACKOFF


def _count(obj: dict[str, Any], key: str, where: str, default: int) -> int:
    try:
        v = get_int(obj, key, where)
    except Bad:
        raise Bad("bad-max-retry", f"{where}.{key}={obj.get(key)!r} is not an integer") from None
    if v is None:
        return default
    if v < 0:
        raise Bad("bad-max-retry", f"{where}.{key}={v} is negative")
    return v


ASCEND_PHASE_ORDER = ("Failed", "Succeeded", "Restarting", "Running", "Created")
"""The kubeflow job condition types in the order the Ascend Operator's status helpers let them win (kubeflow
common v0.4.3 ``pkg/util/status.go``, which component/ascend-operator/pkg/controllers/v1/job.go calls):
``IsFailed`` / ``IsSucceeded`` test for a True condition wherever it sits, and ``setCondition`` never changes a
job once it is Failed; ``Restarting`` and ``Running`` replace each other (``filterOutCondition``); ``Created``
sits beside either of them: the operator re-appends it (reason PodGroupPending) whenever the PodGroup is pending,
after ``Running`` and with the old lastTransitionTime, and leaves ``Running`` True and unchanged once the pods
run again (``setCondition`` does nothing for an unchanged status and reason). So neither list order nor time
tells the phase; the type does."""


def ascend_phase(conditions: list[Any]) -> str:
    """An AscendJob's phase from its ``status.conditions``: the first type of :data:`ASCEND_PHASE_ORDER` with a
    True condition ("" when none is True). Unknown types are ignored.

    Raises:
        Bad: a condition that is not an object (``wrong-type``) or whose lastTransitionTime is not a string
            (``bad-timestamp``).
    """
    true: set[str] = set()
    for c in conditions:
        if not isinstance(c, dict):
            raise Bad("wrong-type", "status.conditions[] is not an object")
        t = c.get("lastTransitionTime")
        if t is not None and not isinstance(t, str):
            raise Bad("bad-timestamp", "status.conditions[].lastTransitionTime is not a string")
        if c.get("status") == "True":
            true.add(get_str(c, "type", "status.conditions[]"))
    return next((phase for phase in ASCEND_PHASE_ORDER if phase in true), "")
