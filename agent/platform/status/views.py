"""Reading a job into what `status` shows: a job object (wire format), its pods and its agent record become a
:class:`JobView` (retries used and budget, open incident, problems). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.core.cluster import FaultScheduling, JobKind, JobRecord
from agent.core.incidents import (
    ANNOTATION_PREFIX,
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    Incident,
    IncidentDecodeError,
    decode_incident,
    decode_ledger,
)
from agent.core.job_labels import FAULT_RETRY_TIMES_LABEL, FAULT_SCHEDULING_LABEL
from agent.core.policy import RetryLedger, restart_budget, restart_limit_text, restarts_text
from agent.core.records import KEY_INCIDENT, KEY_LEDGER
from agent.platform.kubeapi import (
    job_phase,
)
from agent.sources.jobs import ASCEND_LIMIT_FROM_LABEL, ascend_backoff_from_label, fault_scheduling_problem
from agent.sources.jobsets import JobSetConverter

VOLCANO_DEFAULT_MAX_RETRY = 3


@dataclass(frozen=True, slots=True)
class PodLine:
    """One pod of a job: name, phase, node ("" while unscheduled), restarts of its containers, its
    ``spec.restartPolicy`` ("" when unknown) and its ``version`` label (an AscendJob's pods: the Ascend Operator's
    restart counter; "" when absent)."""

    name: str
    phase: str
    node: str
    restarts: int = 0
    restart_policy: str = ""
    version: str = ""


@dataclass(frozen=True, slots=True)
class JobView:
    """What `status` shows about one job. Built by :func:`job_view`, pure.

    Attributes:
        retries_used / retry_budget: the job controller's restarts (Volcano retryCount / maxRetry; AscendJob:
            the highest ``version`` label of its pods, the Ascend Operator's counter, or the agent's ledger when
            that is higher (no pods given, or a restart not seen on them yet) / the operator's backoff limit:
            ``spec.runPolicy.backoffLimit``, else the ``fault-retry-times`` label, else unlimited); None when
            unknown.
        retry_rule: who fails the job at which count, and the restarts left (agent.core.policy
            ``restart_limit_text``); "" when the budget is unknown.
        retry_unlimited: the controller never fails the job for its restarts (an AscendJob whose limit is unset
            or ≤ 0; component/ascend-operator/pkg/controllers/v1/job.go); `retry_budget` is then None.
        business_budget: the `fault-retry-times` label; business_used from the agent's ledger.
        incident: the decoded incident of the job's record (open or closed), None when absent or unreadable.
        raw_annotations: the record's keys as written (``record <key>``), or for a job without one every
            `fault-agent.io/` annotation as an earlier version wrote it.
        problems: values that could not be decoded, with the reason.
        label_problems: opt-in labels the agent cannot read (e.g. ``fault-scheduling=FORCE``), with the reason.
    """

    kind: JobKind
    namespace: str
    name: str
    uid: str
    phase: str
    fault_scheduling: str
    retries_used: int | None
    retry_budget: int | None
    retry_unlimited: bool
    business_used: int | None
    business_budget: str | None
    pods: tuple[PodLine, ...]
    incident: Incident | None
    ledger: RetryLedger | None
    raw_annotations: tuple[tuple[str, str], ...]
    problems: tuple[str, ...] = field(default=())
    label_problems: tuple[str, ...] = field(default=())
    retry_rule: str = ""

    @property
    def open_incident(self) -> Incident | None:
        return self.incident if self.incident is not None and self.incident.phase.open else None

    @property
    def restart_policy_warning(self) -> str:
        """A sentence when some pods' ``restartPolicy`` is not ``Never`` (else ""): their failed containers are
        restarted inside the Running pod by the kubelet, and the agent restarts the whole job as well."""
        other = sorted({p.restart_policy for p in self.pods if p.restart_policy and p.restart_policy != "Never"})
        if not other:
            return ""
        names = [p.name for p in self.pods if p.restart_policy in other]
        return (
            f"the job's restart policy is {'/'.join(other)} (pods {', '.join(names)}), not Never: a failing container "
            "is restarted inside its Running pod by the kubelet, and the agent restarts the whole job as well"
        )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def mapping_of(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """``obj[key]`` when it is a mapping, else an empty one."""
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def job_view(
    kind: JobKind, job: Mapping[str, Any], pods: Sequence[PodLine] = (), record: Mapping[str, str] | None = None
) -> JobView:
    """Summarise a job object (wire-format dict as the apiserver returns it), its pods and the data of its record
    (agent.core.records; None: no record, then an earlier version's annotations on the job are read). Pure."""
    meta = mapping_of(job, "metadata")
    labels, annotations = mapping_of(meta, "labels"), mapping_of(meta, "annotations")
    if record is not None:
        stored: Mapping[str, Any] = {
            INCIDENT_ANNOTATION: record.get(KEY_INCIDENT),
            LEDGER_ANNOTATION: record.get(KEY_LEDGER),
        }
        raw = tuple(sorted((f"record {k}", str(v)) for k, v in record.items()))
    else:
        stored = annotations
        raw = tuple(sorted((str(k), str(v)) for k, v in annotations.items() if str(k).startswith(ANNOTATION_PREFIX)))
    spec, status = mapping_of(job, "spec"), mapping_of(job, "status")
    unlimited = False
    jobset: JobRecord | None = None
    if kind is JobKind.VOLCANO:
        used = _int(status.get("retryCount", 0))
        budget = _int(spec.get("maxRetry", VOLCANO_DEFAULT_MAX_RETRY))
    elif kind is JobKind.JOBSET:
        # JobSet's own counters and what its failure policy grants the agent (agent.sources.jobsets)
        converted = JobSetConverter()(dict(job))
        jobset = converted if isinstance(converted, JobRecord) else None
        used = jobset.retry_count if jobset is not None else None
        budget = jobset.max_retry if jobset is not None and jobset.max_retry >= 0 else None
        unlimited = jobset is not None and jobset.max_retry < 0
    else:
        # the Ascend Operator's limit: runPolicy.backoffLimit, else the fault-retry-times label, else unlimited;
        # it fails a job only for a limit > 0 (agent.sources.jobs.ascend_backoff_from_label, policy.restart_budget)
        run_policy = mapping_of(spec, "runPolicy")
        used = None
        budget = _int(run_policy.get("backoffLimit"))
        if budget is None and run_policy.get("backoffLimit") is None:
            label = labels.get(FAULT_RETRY_TIMES_LABEL)
            budget = ascend_backoff_from_label(label if isinstance(label, str) else None)
        unlimited = budget is not None and budget <= 0
    problems: list[str] = []
    incident = ledger = None
    text = stored.get(INCIDENT_ANNOTATION)
    if isinstance(text, str):
        try:
            incident = decode_incident(text)
        except IncidentDecodeError as e:
            problems.append(str(e))
    text = stored.get(LEDGER_ANNOTATION)
    if isinstance(text, str):
        try:
            ledger = decode_ledger(text)
        except IncidentDecodeError as e:
            problems.append(str(e))
    if kind is JobKind.ASCEND:
        # the operator's counter is its pods' version label (every deleted pod of the current version bumps it,
        # whoever deleted it); the agent's ledger when higher (a restart the pods do not show yet)
        versions = [int(p.version) for p in pods if p.version.isdigit()]
        ledger_used = ledger.restarts_used if ledger is not None else (None if problems else 0)
        used = max([*versions, *([] if ledger_used is None else [ledger_used])], default=None)
    retry_times = labels.get(FAULT_RETRY_TIMES_LABEL)
    scheduling = labels.get(FAULT_SCHEDULING_LABEL)
    label_problems: list[str] = []
    problem = fault_scheduling_problem(scheduling if isinstance(scheduling, str) else None)
    if problem is not None:
        label_problems.append(problem)
        scheduling = f"unreadable {str(scheduling)[:40]!r}"
    rule = ""
    if used is not None and (unlimited or budget is not None):
        budget_job = jobset or _budget_record(kind, -1 if unlimited else budget or 0, _limit_from(kind, spec))
        left = restart_budget(budget_job, used)[1]
        rule = restart_limit_text(budget_job, used) + f" ({restarts_text(left)})"
    return JobView(
        kind=kind,
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        phase=job_phase(kind, job),
        fault_scheduling=str("off" if scheduling is None else scheduling),
        retries_used=used,
        retry_budget=None if unlimited else budget,
        retry_unlimited=unlimited,
        business_used=ledger.business_retries_used if ledger is not None else (None if problems else 0),
        business_budget=retry_times if isinstance(retry_times, str) else None,
        pods=tuple(pods),
        incident=incident,
        ledger=ledger,
        raw_annotations=raw,
        problems=tuple(problems),
        label_problems=tuple(label_problems),
        retry_rule=rule,
    )


def _limit_from(kind: JobKind, spec: Mapping[str, Any]) -> str:
    """Where the job's restart limit was read (``JobRecord.max_retry_from``, agent.sources.jobs)."""
    if kind is JobKind.VOLCANO:
        return "spec.maxRetry" if "maxRetry" in spec else "Volcano's default maxRetry"
    if mapping_of(spec, "runPolicy").get("backoffLimit") is not None:
        return "spec.runPolicy.backoffLimit"
    return ASCEND_LIMIT_FROM_LABEL


def _budget_record(kind: JobKind, limit: int, limit_from: str) -> JobRecord:
    """A bare record carrying what :func:`agent.core.policy.restart_budget` reads (kind, limit, its source)."""
    return JobRecord(
        kind=kind, namespace="", name="", uid="", resource_version="", generation=0, labels=(),
        fault_scheduling=FaultScheduling.OFF, fault_retry_times=None, pod_rescheduling=False,
        sub_healthy_strategy="", max_retry=limit, min_available=None, phase="", version="", retry_count=0,
        annotations=(), created_at=None, max_retry_from=limit_from,
    )  # fmt: skip


def pod_line(pod: Any) -> PodLine:
    """A PodLine from a kubernetes_asyncio V1Pod."""
    status = pod.status
    restarts = sum(cs.restart_count or 0 for cs in (status.container_statuses or [])) if status else 0
    return PodLine(
        name=pod.metadata.name,
        phase=(status.phase if status else "") or "",
        node=pod.spec.node_name or "" if pod.spec else "",
        restarts=restarts,
        restart_policy=(pod.spec.restart_policy or "") if pod.spec else "",
        version=str(((pod.metadata.labels or {}) if pod.metadata else {}).get("version", "")),
    )
