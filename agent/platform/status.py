"""`fault-agent status [NAMESPACE/]JOB`: a job's phase, pods and nodes, retries used / budget, open incident.

Without a job, a table of the watched jobs (label `fault-scheduling` or `fault-retry-times` set) across namespaces,
or in -n, then the restart circuit breaker (ConfigMap `policy.breaker_configmap` in `leader.namespace`) and the
leader (the Lease `leader.name` in `leader.namespace`); settings come from --config and the environment as for the
agent. Either is shown as "unknown (reason)" when it cannot be read.
Retries come from the job itself (Volcano `status.retryCount` / `spec.maxRetry`, AscendJob
`spec.runPolicy.backoffLimit`, the `fault-retry-times` label) and from the agent's ledger and incident in the job's
record (ConfigMap `fault-agent-job-<job UID>` in `leader.namespace`, keys `ledger` and `incident`, see
agent.core.records; for a job no agent has written a record for yet, an earlier version's `fault-agent.io/ledger`
and `fault-agent.io/incident` annotations on the job); a value that cannot be decoded is shown raw.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agent.core.cluster import FaultScheduling, JobKind, JobRecord
from agent.core.goodput import JobGoodput
from agent.core.incidents import (
    ANNOTATION_PREFIX,
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    Incident,
    IncidentDecodeError,
    Phase,
    decode_incident,
    decode_ledger,
)
from agent.core.job_labels import FAULT_RETRY_TIMES_LABEL, FAULT_SCHEDULING_LABEL
from agent.core.policy import RetryLedger, restart_budget, restart_limit_text, restarts_text
from agent.core.records import JOB_UID_LABEL, KEY_INCIDENT, KEY_LEDGER, RECORD_LABEL
from agent.platform.kubeapi import (
    JOB_APIS,
    PlatformError,
    add_kube_arguments,
    connect,
    connection_error,
    context_namespace,
    describe_api_exception,
    job_phase,
    login,
)
from agent.sources.jobs import ASCEND_LIMIT_FROM_LABEL, ascend_backoff_from_label, fault_scheduling_problem
from agent.sources.jobsets import JobSetConverter

VOLCANO_DEFAULT_MAX_RETRY = 3
MIN_WIDTH = 40
PIPE_WIDTH = 200  # output width when stdout is not a terminal (and neither --width nor $COLUMNS says otherwise)


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


def _map(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def job_view(
    kind: JobKind, job: Mapping[str, Any], pods: Sequence[PodLine] = (), record: Mapping[str, str] | None = None
) -> JobView:
    """Summarise a job object (wire-format dict as the apiserver returns it), its pods and the data of its record
    (agent.core.records; None: no record, then an earlier version's annotations on the job are read). Pure."""
    meta = _map(job, "metadata")
    labels, annotations = _map(meta, "labels"), _map(meta, "annotations")
    if record is not None:
        stored: Mapping[str, Any] = {
            INCIDENT_ANNOTATION: record.get(KEY_INCIDENT),
            LEDGER_ANNOTATION: record.get(KEY_LEDGER),
        }
        raw = tuple(sorted((f"record {k}", str(v)) for k, v in record.items()))
    else:
        stored = annotations
        raw = tuple(sorted((str(k), str(v)) for k, v in annotations.items() if str(k).startswith(ANNOTATION_PREFIX)))
    spec, status = _map(job, "spec"), _map(job, "status")
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
        run_policy = _map(spec, "runPolicy")
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
    if _map(spec, "runPolicy").get("backoffLimit") is not None:
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


def _fraction(used: int | None, budget: int | str | None, *, unlimited: bool = False) -> str:
    if unlimited:
        return f"{'?' if used is None else used} / unlimited"
    if budget is None:  # unknown, or no label (no business retries): never "unlimited" unless it is
        return "-" if used is None else f"{used} / -"
    return f"{'?' if used is None else used} / {budget}"


def incident_summary(incident: Incident | None) -> str:
    """One line: id, phase, action and fault count; "none" without an incident."""
    if incident is None:
        return "none"
    parts = [incident.id, incident.phase.value]
    if incident.action:
        parts.append(f"action {incident.action}" + (f" ({incident.mode})" if incident.mode else ""))
    parts.append(f"{incident.fault_count} fault(s)")
    return ", ".join(parts)


def render_job(view: JobView, console: Console) -> None:
    """Print one job's view: header lines, a pods table, the incident and the agent's record (raw, when it could
    not be read)."""
    kind = JOB_APIS[view.kind].object_kind
    console.print(f"[bold]{kind} {view.namespace}/{view.name}[/bold]  uid {view.uid}")
    console.print(f"phase:            {view.phase or 'none yet (no controller has reported a status)'}")
    console.print(f"fault-scheduling: {view.fault_scheduling}")
    retries = _fraction(view.retries_used, view.retry_budget, unlimited=view.retry_unlimited)
    console.print(f"retries:          {retries} (job controller)")
    if view.retry_rule:
        console.print(f"  {view.retry_rule}", markup=False, highlight=False)
    console.print(f"business retries: {_fraction(view.business_used, view.business_budget)} (fault-retry-times)")
    console.print(f"open incident:    {incident_summary(view.open_incident)}")
    if view.incident is not None and view.open_incident is None:
        console.print(f"last incident:    {incident_summary(view.incident)}")
    if view.incident is not None and view.incident.reason:
        console.print(f"  reason: {view.incident.reason}", markup=False, highlight=False)
    if view.open_incident is not None and view.open_incident.phase is Phase.HELD:
        console.print(
            "  held: the open circuit breaker holds this incident; nothing is restarted until a person runs "
            "`fault-agent breaker reset` (see `fault-agent breaker show`)",
            markup=False,
            highlight=False,
        )
    if view.incident is not None and view.incident.faults:
        for fault in view.incident.faults:
            console.print(f"  fault: {fault}", markup=False)
    if view.restart_policy_warning:
        console.print(f"[yellow]restart policy:[/yellow] {view.restart_policy_warning}", highlight=False)
    if view.pods:
        table = Table("pod", "phase", "node", "restarts")
        for p in view.pods:
            table.add_row(p.name, p.phase, p.node or "(unscheduled)", str(p.restarts))
        console.print(table)
    else:
        console.print("pods:             none")
    for problem in (*view.label_problems, *view.problems):
        console.print(f"[yellow]unreadable:[/yellow] {escape(problem)}", highlight=False)
    if view.problems:
        for key, value in view.raw_annotations:
            console.print(f"  {key}: {value}", markup=False, highlight=False)


def render_table(
    views: Sequence[JobView], console: Console, *, training: Mapping[tuple[str, str], JobGoodput] | str | None = None
) -> None:
    """Print the watched jobs as one table (namespace, kind, name, phase, mode, retries, incident); with
    `training` (``--training``: each job's effective training time from the events topic, or why it could not be
    read) a last column with the job's running share."""
    columns = ["namespace", "kind", "job", "phase", "fault-scheduling", "retries", "business", "incident"]
    table = Table(*columns, *(["training"] if training is not None else []))
    for v in views:
        extra: list[str] = []
        if isinstance(training, str):
            extra = ["unknown"]
        elif training is not None:
            extra = [training_share(training.get((v.namespace, v.name)))]
        table.add_row(
            v.namespace,
            v.kind.value,
            v.name,
            v.phase or "-",
            v.fault_scheduling,
            _fraction(v.retries_used, v.retry_budget, unlimited=v.retry_unlimited),
            _fraction(v.business_used, v.business_budget),
            incident_summary(v.open_incident) if not v.problems else "unreadable annotation",
            *extra,
        )
    console.print(table)
    if isinstance(training, str):
        console.print(f"training: {training}", markup=False, highlight=False)


async def training_rows(args: argparse.Namespace, namespace: str | None) -> dict[tuple[str, str], JobGoodput] | str:
    """``--training``: effective training time per job of `namespace` (None: every namespace) from the agent's
    ``recovery.resumed`` events (agent.platform.goodput_cli.read_events, the ``kafka`` settings), keyed
    ``(namespace, name)``; or "unknown (reason)" when the topic cannot be read."""
    from agent.platform.goodput_cli import GoodputReadError, read_events
    from agent.settings import SettingsError, load_settings

    try:
        settings = load_settings(getattr(args, "config", None))
        result = await read_events(settings.kafka, settings.kafka.recoveries_topic, args.training_timeout)
    except (SettingsError, GoodputReadError) as e:
        return f"unknown ({e})"
    rows = result.fold.report(datetime.now(UTC), namespace=namespace)
    return {(r.namespace, r.name): r for r in rows}


def training_share(row: JobGoodput | None) -> str:
    """The table's training cell: the running share, or "-" without a resumed event."""
    s = row.summary if row is not None else None
    return "-" if s is None or s.running_share is None else f"{100 * s.running_share:.1f}%"


def training_text(row: JobGoodput | None) -> str:
    """The one-job view's training line (see :func:`training_rows`)."""
    if row is None:
        return "no recovery.resumed event (not restarted since it reports its progress, or it does not report it)"
    s = row.summary
    causes = ", ".join(f"{c} {v:.1f}s" for c, v in s.lost_by_cause.items())
    return (
        f"{training_share(row)} productive: {s.productive_s:.0f}s of {s.wall_s:.0f}s since {_iso(s.first_step_at)}; "
        f"lost {s.lost_s:.1f}s ({causes}) in {s.incidents} incident(s), {s.work_lost_steps} step(s) computed again"
    )


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


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def breaker_line(data: Mapping[str, str] | None, where: str) -> str:
    """The breaker's state from its ConfigMap data (None: no ConfigMap), in the words `status` and `breaker show`
    both print (:func:`state_line`). Pure."""
    if data is None:
        return (
            f"closed (no ConfigMap {where} yet: the agent writes it when the breaker first trips; "
            "check leader.namespace)"
        )
    state = data.get("state", "closed")
    if state != "open":
        reset = f", reset by {data['reset_by']}" if data.get("reset_by") else ""
        return f"{state} (ConfigMap {where}{reset})"
    tripped = ""
    with contextlib.suppress(ValueError, OverflowError, OSError):
        tripped = f" {_iso(datetime.fromtimestamp(float(data.get('tripped_at', '')), UTC))}"
    reason = f": {data['reason']}" if data.get("reason") else ""
    return (
        f"OPEN since{tripped or ' an unknown time'} (ConfigMap {where}){reason}; reset with `fault-agent breaker reset`"
    )


def state_line(what: str, text: str) -> str:
    """One line of the agent's state as `status` prints it below the jobs and `breaker show` first:
    ``breaker:  OPEN since …`` (the label padded to 9 columns)."""
    return f"{what + ':':<9} {text}"


def leader_line(
    holder: str | None, renewed: datetime | None, duration_s: float | None, where: str, now: datetime
) -> str:
    """The leader from its Lease's holderIdentity, renewTime and leaseDurationSeconds. Pure."""
    if not holder:
        return f"unknown (Lease {where} has no holder: no agent replica leads)"
    if renewed is None:
        return f"{holder} (Lease {where}, never renewed)"
    ago = (now - renewed).total_seconds()
    text = f"{holder}, renewed {_iso(renewed)} ({ago:.0f} s ago; Lease {where})"
    if duration_s is not None and ago > duration_s:
        text += f"; EXPIRED: not renewed for more than {duration_s:g} s, the holder may be gone"
    return text


async def job_records(api: Any, config: str | None) -> dict[str, dict[str, str]]:
    """The agent's job records (agent.core.records) in ``leader.namespace``: job UID -> data. Empty when the
    settings cannot be loaded or the list fails (the job views then fall back to the jobs' own annotations).

    Raises nothing: a 403 (no right to list ConfigMaps there) is not worth failing `status` for."""
    from kubernetes_asyncio.client import CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    from agent.settings import SettingsError, load_settings

    try:
        settings = load_settings(config)
        listed = await CoreV1Api(api).list_namespaced_config_map(
            settings.leader.namespace, label_selector=f"{RECORD_LABEL}=true"
        )
    except (SettingsError, ApiException):
        return {}
    out: dict[str, dict[str, str]] = {}
    for cm in listed.items:
        uid = (cm.metadata.labels or {}).get(JOB_UID_LABEL)
        if uid:
            out[str(uid)] = {str(k): str(v) for k, v in (cm.data or {}).items()}
    return out


async def agent_state_lines(api: Any, config: str | None) -> list[tuple[str, str]]:
    """("breaker", text) and ("leader", text), read from the cluster; "unknown (reason)" when unreadable."""
    from kubernetes_asyncio.client import CoordinationV1Api, CoreV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    from agent.settings import SettingsError, load_settings

    try:
        settings = load_settings(config)
    except SettingsError as e:
        reason = f"unknown (settings cannot be loaded: {e})"
        return [("breaker", reason), ("leader", reason)]
    ns = settings.leader.namespace
    cm_where = f"{ns}/{settings.policy.breaker_configmap}"
    lease_where = f"{ns}/{settings.leader.name}"

    def failed(e: ApiException, what: str) -> str:
        if e.status == 403:
            return f"unknown (forbidden to read {what}: HTTP 403)"
        return f"unknown (cannot read {what}: HTTP {e.status} {e.reason})"

    try:
        cm = await CoreV1Api(api).read_namespaced_config_map(settings.policy.breaker_configmap, ns)
        breaker = breaker_line(dict(cm.data or {}), cm_where)
    except ApiException as e:
        breaker = breaker_line(None, cm_where) if e.status == 404 else failed(e, f"ConfigMap {cm_where}")
    try:
        lease = await CoordinationV1Api(api).read_namespaced_lease(settings.leader.name, ns)
        spec = lease.spec
        leader = leader_line(
            spec.holder_identity if spec else None,
            spec.renew_time if spec else None,
            spec.lease_duration_seconds if spec else None,
            lease_where,
            datetime.now(UTC),
        )
    except ApiException as e:
        if e.status == 404:
            leader = f"unknown (no Lease {lease_where}: no agent has run leader election there; check leader.namespace)"
        else:
            leader = failed(e, f"Lease {lease_where}")
    return [("breaker", breaker), ("leader", leader)]


def parse_target(target: str, namespace: str | None, default_namespace: str) -> tuple[str, str]:
    """Split ``[NAMESPACE/]JOB`` into (namespace, job).

    Raises:
        PlatformError: an empty part, more than one '/', or a namespace that contradicts -n.
    """
    parts = target.split("/")
    if len(parts) > 2 or not all(parts):
        raise PlatformError(f"expected [NAMESPACE/]JOB, got {target!r}", 2)
    if len(parts) == 2:
        if namespace and namespace != parts[0]:
            raise PlatformError(f"{target!r} names namespace {parts[0]} but -n says {namespace}", 2)
        return parts[0], parts[1]
    return namespace or default_namespace, parts[0]


async def _one(api: Any, args: argparse.Namespace, console: Console) -> int:
    from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi
    from kubernetes_asyncio.client.exceptions import ApiException

    namespace, name = parse_target(args.job, args.namespace, context_namespace(*login(args)))
    custom, core = CustomObjectsApi(api), CoreV1Api(api)
    kinds = [JobKind(args.kind)] if args.kind else list(JOB_APIS)
    for kind in kinds:
        ja = JOB_APIS[kind]
        try:
            job = await custom.get_namespaced_custom_object(ja.group, ja.version, namespace, ja.plural, name)
        except ApiException as e:
            if e.status == 404:
                continue
            raise describe_api_exception(e, f"read {ja.object_kind} {namespace}/{name}") from e
        try:
            pods = await core.list_namespaced_pod(namespace, label_selector=f"{ja.pod_job_label}={name}")
        except ApiException as e:
            raise describe_api_exception(e, f"list the pods of {namespace}/{name}") from e
        records = await job_records(api, getattr(args, "config", None))
        uid = str(_map(job, "metadata").get("uid", ""))
        render_job(job_view(kind, job, [pod_line(p) for p in pods.items], records.get(uid)), console)
        if args.training:
            rows = await training_rows(args, namespace)
            text = rows if isinstance(rows, str) else training_text(rows.get((namespace, name)))
            console.print(f"training:         {text}", markup=False, highlight=False)
        return 0
    looked = " or ".join(JOB_APIS[k].object_kind for k in kinds)
    raise PlatformError(f"no {looked} named {name} in namespace {namespace}")


async def _all(api: Any, args: argparse.Namespace, console: Console) -> int:
    from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi
    from kubernetes_asyncio.client.exceptions import ApiException

    custom = CustomObjectsApi(api)
    records = await job_records(api, getattr(args, "config", None))
    views: dict[str, JobView] = {}
    kinds = [JobKind(args.kind)] if args.kind else list(JOB_APIS)
    for kind in kinds:
        ja = JOB_APIS[kind]
        # A job opts in with either label (label selectors cannot say "or": one list each, merged by UID).
        for label in (FAULT_SCHEDULING_LABEL, FAULT_RETRY_TIMES_LABEL):
            try:
                if args.namespace:
                    listed = await custom.list_namespaced_custom_object(
                        ja.group, ja.version, args.namespace, ja.plural, label_selector=label
                    )
                else:
                    listed = await custom.list_cluster_custom_object(
                        ja.group, ja.version, ja.plural, label_selector=label
                    )
            except ApiException as e:
                if e.status == 404 and kind is JobKind.JOBSET and not args.kind:
                    break  # no JobSet CRD on this cluster: nothing to list
                raise describe_api_exception(e, f"list {ja.plural}.{ja.group}") from e
            for item in listed.get("items", []):
                uid = str(item.get("metadata", {}).get("uid", ""))
                views[uid] = job_view(kind, item, record=records.get(uid))
    ordered = sorted(views.values(), key=lambda v: (v.namespace, v.name, v.kind.value))
    if not ordered:
        if args.namespace:
            from agent.kube.client import namespace_missing

            try:
                missing = await namespace_missing(CoreV1Api(api), args.namespace)
            except ApiException as e:
                raise describe_api_exception(e, f"read namespace {args.namespace}") from e
            if missing:
                raise PlatformError(f"namespace {args.namespace} does not exist", 1)
        where = f"namespace {args.namespace}" if args.namespace else "any namespace"
        console.print(f"no watched jobs (label {FAULT_SCHEDULING_LABEL} or {FAULT_RETRY_TIMES_LABEL} set) in {where}")
    else:
        training = await training_rows(args, args.namespace) if args.training else None
        render_table(ordered, console, training=training)
    for what, text in await agent_state_lines(api, getattr(args, "config", None)):
        console.print(
            state_line(what, text), markup=False, highlight=False, soft_wrap=True
        )  # one line, as `breaker show`
    return 0


def output_width(requested: int | None, is_terminal: bool, environ: Mapping[str, str]) -> int | None:
    """--width, else the terminal's (None: rich asks it), else $COLUMNS, else PIPE_WIDTH: no cut at 80 in a pipe."""
    if requested is not None or is_terminal or environ.get("COLUMNS", "").isdigit():
        return requested
    return PIPE_WIDTH


def _width(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of columns, got {text!r}") from None
    if value < MIN_WIDTH:
        raise argparse.ArgumentTypeError(f"must be at least {MIN_WIDTH} columns, got {value}")
    return value


async def _status(args: argparse.Namespace) -> int:
    console = Console(file=sys.stdout, width=output_width(args.width, sys.stdout.isatty(), os.environ))
    api = await connect(args)
    try:
        return await (_one(api, args, console) if args.job else _all(api, args, console))
    except (aiohttp.ClientError, TimeoutError) as e:
        raise connection_error(e, api) from e
    finally:
        await api.close()


def _run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_status(args))
    except PlatformError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code


def configure(parser: argparse.ArgumentParser) -> None:
    """Arguments of `fault-agent status`."""
    parser.add_argument("job", nargs="?", metavar="[NAMESPACE/]JOB", help="one job; without it, all watched jobs")
    parser.add_argument("--kind", choices=[k.value for k in JobKind], help="only this job kind")
    parser.add_argument(
        "--width",
        type=_width,
        default=None,
        help=f"output width, at least {MIN_WIDTH} (default: the terminal's; {PIPE_WIDTH} when not a terminal)",
    )
    parser.add_argument(
        "--training",
        action="store_true",
        help="also show effective training time (productive vs lost since the first step, from the agent's "
        "recovery.resumed events on Kafka: reads the recoveries topic from its beginning)",
    )
    parser.add_argument(
        "--training-timeout", type=float, default=30.0, help="seconds to read the topic with --training (default 30)"
    )
    add_kube_arguments(parser)
    parser.set_defaults(func=_run)
