"""Bookkeeping ConfigMaps MindCluster's Volcano plugin keeps, which other MindCluster components read.

Pure (no I/O, no clock reads). Shapes read from Ascend/mind-cluster at commit 22bb3d98,
component/ascend-for-volcano/internal/rescheduling/ (type.go, cache.go, reschedule.go, job.go):

``volcano-system/vcjob-fault-npu-cm``, key ``remain-retry-times``: Go's ``json.Marshal`` of
``map[api.JobID]*RemainRetryTimes``: ``{"<job id>":{"UUID":"<job uid>","Times":<int>}, …}`` with the map keys
sorted; the empty string when no job has an entry. The job id is the scheduler's (``<namespace>/<podgroup>``),
``UUID`` the owner UID of the job's PodGroup, i.e. the job's UID. The plugin adds an entry (``Times`` = the
``fault-retry-times`` label, 0 when absent or not a number) the first time it sees a job as a fault job, takes one
off after each restart it made for a failed pod (``PodFailed`` reason), never refills it, and drops the entry when
the job leaves the session or its UID changes. The Ascend Operator reads it to decide whether to fail the job.
The ConfigMap has other keys (``fault-node``, ``fault-job``…) this module does not write; MindCluster merges its
keys into the stored ones (common/k8s/configmap.go ``UpdateConfigmapIncrementally``), and so must a writer.

``mindx-dl/job-reschedule-reason``, key ``recent-reschedule-records``: agent.core.reschedule_records (its names are
importable from here too).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.core.cluster import JobRecord, PodRecord
from agent.core.correlate import JobHit
from agent.core.detect.checkcode import go_map, go_marshal_plain
from agent.core.faults import Fault
from agent.core.incidents import Incident
from agent.core.job_labels import FAULT_SCHEDULING_LABEL
from agent.core.policy import Decision, RetryLedger

# the names of agent.core.reschedule_records (split from here): "X as X" keeps them importable from here
from agent.core.reschedule_records import KEY_RESCHEDULE_RECORDS as KEY_RESCHEDULE_RECORDS
from agent.core.reschedule_records import MAX_RESCHEDULE_RECORDS as MAX_RESCHEDULE_RECORDS
from agent.core.reschedule_records import MAX_RESCHEDULE_RECORDS_BYTES as MAX_RESCHEDULE_RECORDS_BYTES
from agent.core.reschedule_records import BookkeepingError as BookkeepingError
from agent.core.reschedule_records import NextValue as NextValue
from agent.core.reschedule_records import ParsedRecords as ParsedRecords
from agent.core.reschedule_records import RescheduleReasons as RescheduleReasons
from agent.core.reschedule_records import RescheduleRecord as RescheduleRecord
from agent.core.reschedule_records import TaskReason as TaskReason
from agent.core.reschedule_records import (
    _load,
    _obj,
    _typed,
    _watched,
)
from agent.core.reschedule_records import add_reschedule_record as add_reschedule_record
from agent.core.reschedule_records import encode_reschedule_records as encode_reschedule_records
from agent.core.reschedule_records import fold_reschedule_records as fold_reschedule_records
from agent.core.reschedule_records import klog_time as klog_time
from agent.core.reschedule_records import next_reschedule_records as next_reschedule_records
from agent.core.reschedule_records import parse_reschedule_records as parse_reschedule_records

FAULT_NPU_CM = ("volcano-system", "vcjob-fault-npu-cm")
KEY_REMAIN_RETRY_TIMES = "remain-retry-times"
RESCHEDULE_REASON_CM = ("mindx-dl", "job-reschedule-reason")
WRITER_ANNOTATION = "fault-agent.io/bookkeeping-writer"
"""Set on both ConfigMaps by each of the agent's writes (value: the actor, ``<identity>#<term>``), so a reader can
tell the agent's updates from MindCluster's plugin (whose replace carries no annotations and so drops it)."""


# ---- remain-retry-times ----


@dataclass(frozen=True, slots=True)
class RemainRetryTimes:
    """One job's entry: `uid` the job's UID (Go ``UUID``), `times` the retries of business failures left."""

    uid: str
    times: int

    def to_go(self) -> dict[str, Any]:
        return {"UUID": self.uid, "Times": self.times}


def first_remain_retry_times(uid: str, fault_retry_times: int | None) -> RemainRetryTimes:
    """The entry MindCluster creates when it first sees a job as a fault job: ``Times`` = the label's value,
    0 when the label is absent or not a number (`fault_retry_times` None)."""
    return RemainRetryTimes(uid, fault_retry_times or 0)


def after_failed_pod_restart(entry: RemainRetryTimes) -> RemainRetryTimes:
    """One off after a restart made for a failed pod (never refilled; MindCluster does not restart at ≤ 0)."""
    return replace(entry, times=entry.times - 1)


def encode_remain_retry_times(entries: Mapping[str, RemainRetryTimes]) -> str:
    """The ``remain-retry-times`` value for `entries` (scheduler job id → entry): Go's marshal, keys sorted,
    or ``""`` when there are none."""
    if not entries:
        return ""
    return go_marshal_plain(go_map({k: v.to_go() for k, v in entries.items()})).decode("utf-8")


def parse_remain_retry_times(text: str) -> dict[str, RemainRetryTimes]:
    """Read a ``remain-retry-times`` value (``""`` is no entries).

    Raises:
        BookkeepingError: not JSON, or not a map of ``{"UUID": str, "Times": int}``.
    """
    if not text.strip():
        return {}
    out: dict[str, RemainRetryTimes] = {}
    for job_id, raw in _load(text, KEY_REMAIN_RETRY_TIMES).items():
        where = f"{KEY_REMAIN_RETRY_TIMES}[{job_id!r}]"
        el = _obj(raw, where)
        out[job_id] = RemainRetryTimes(_typed(el, "UUID", str, "", where), _typed(el, "Times", int, 0, where))
    return out


# ---- recent-reschedule-records ----
# ---- what the agent writes after a restart ----

FAULT_TYPE_POD_FAILED = "pod-failed"
"""MindCluster's fault type of a task whose pod failed (type.go ``PodFailed``): the only restarts that take one
off ``remain-retry-times``."""
_FAULT_TYPES: dict[str, str] = {
    "chip": "CardUnhealthy",  # type.go NodeCardUnhealthy
    "node": "NodeUnhealthy",  # type.go NodeUnhealthy
    "network": "CardNetworkUnhealthy",  # type.go NodeCardNetworkUnhealthy
    "business": FAULT_TYPE_POD_FAILED,
    "disruption": FAULT_TYPE_POD_FAILED,  # MindCluster has no type for an eviction; the pod failed
}
SUB_HEALTH_FAULT_TYPE = "SubHealthFault"  # type.go SubHealthFault


def scheduler_job_id(namespace: str, name: str, uid: str) -> str:
    """The scheduler's job id MindCluster keys both values by: ``<namespace>/<podgroup>``, the PodGroup being
    ``<job name>-<job UID>`` for a Volcano Job (Volcano pkg/controllers/job/job_controller_actions.go
    ``generateRelatedPodGroupName``) and an AscendJob alike (ascend-operator pkg/controllers/v1/pod.go sets
    ``scheduling.k8s.io/group-name``; unconditaional_retry.go ``getJobRemainRetryTimes`` looks the job up so)."""
    return f"{namespace}/{name}-{uid}"


def fault_type(kind: str, level_wire_name: str) -> str:
    """MindCluster's ``RescheduleReason`` for a fault of our `kind` (agent.core.faults.FaultKind value) at the
    level named `level_wire_name`: ``SubHealthFault`` for a sub-health chip or node fault, else
    ``CardUnhealthy`` (chip), ``NodeUnhealthy`` (node), ``CardNetworkUnhealthy`` (network) or ``pod-failed``."""
    if level_wire_name == SUB_HEALTH_FAULT_TYPE and kind in ("chip", "node"):
        return SUB_HEALTH_FAULT_TYPE
    return _FAULT_TYPES.get(kind, FAULT_TYPE_POD_FAILED)


@dataclass(frozen=True, slots=True)
class BookkeepingIntent:
    """The bookkeeping one restart asks for, written once the restart was sent (agent.engine.sending).

    Attributes:
        job_id: :func:`scheduler_job_id` of the job.
        uid: the job's UID (``UUID`` of its remain-retry-times entry).
        remain_times: ``Times`` after this restart: ``fault-retry-times`` (0 when absent) minus the business
            restarts the agent made (the retry ledger), never below 0.
        tasks: the hit pods' reasons (at most 10 are recorded).
    """

    job_id: str
    uid: str
    remain_times: int
    tasks: tuple[TaskReason, ...]


def remain_times_after(fault_retry_times: int | None, business_retries_used: int) -> int:
    """``Times`` of a job's entry once the agent spent `business_retries_used` business restarts: the label's
    value (0 when absent: MindCluster reads an absent or unreadable label as 0) minus those, never below 0
    (MindCluster restarts for a failed pod only while ``Times`` > 0, so its value never goes below 0 either)."""
    return max(0, (fault_retry_times or 0) - business_retries_used)


@dataclass(frozen=True, slots=True)
class EntryChange:
    """One job's ``remain-retry-times`` entry to make (`drop` False: set to ``{uid, times}`` unless the job, with
    this UID, has one already) or to remove (`drop` True)."""

    job_id: str
    uid: str = ""
    times: int = 0
    drop: bool = False


FINISHED_PHASES = frozenset({"Completed", "Completing", "Succeeded", "Failed", "Aborted", "Aborting", "Terminated"})
"""Job phases in which no entry is made any more (one made before is kept while the job exists)."""


def wants_remain_retry_entry(job: JobRecord) -> bool:
    """Whether MindCluster's plugin keeps a ``remain-retry-times`` entry for `job`: its ``fault-scheduling`` label
    is present and not ``off`` (any other value, ``force``, ``grace``, ``external-*`` or one it does not know:
    internal/rescheduling/reschedule.go ``updateNewFaultJobAttr`` returns before making the entry only for
    ``off``, job.go ``GetJobFaultRescheduleLabel`` reads an absent label as ``off``), whatever its
    ``fault-retry-times``: ``Times`` is that label (0 when absent or not a number, job.go
    ``setFaultRetryTimeOfJob``). The Ascend Operator reads the entry only for ``fault-retry-times`` > 0
    (component/ascend-operator/pkg/controllers/v1/unconditaional_retry.go): there it must exist before the first
    failed pod, or that pod fails the job."""
    value = job.label(FAULT_SCHEDULING_LABEL)
    return value is not None and value != "off"


def entry_changes(
    seen: Sequence[tuple[JobRecord | None, JobRecord | None]], business_used: Mapping[str, int]
) -> list[EntryChange]:
    """The entry changes for jobs that changed: each (`before`, `after`) pair is one job's record before its
    changes (None: unknown, or it did not exist) and now (None: deleted). The entry of `before`'s UID is dropped
    when the job is gone, its UID changed or it no longer :func:`wants_remain_retry_entry`; one for `after` is
    made when it wants one and is not finished (:data:`FINISHED_PHASES`), ``Times`` = ``fault-retry-times`` (0
    when absent) minus the business retries the agent spent on it (`business_used`, by job UID; never below 0).
    A job whose UID and opt-in did not change (its status, annotations, other labels did) needs nothing: an
    entry is never refilled or re-made from a changed ``fault-retry-times`` (MindCluster makes it once). Pure."""
    out: list[EntryChange] = []
    for before, after in seen:
        wanted = after is not None and wants_remain_retry_entry(after)
        if before is not None:
            if after is not None and after.uid == before.uid and wants_remain_retry_entry(before) == wanted:
                continue
            if wants_remain_retry_entry(before):
                out.append(EntryChange(scheduler_job_id(before.namespace, before.name, before.uid), drop=True))
        if after is not None and wanted and after.phase not in FINISHED_PHASES:
            times = remain_times_after(after.fault_retry_times, business_used.get(after.uid, 0))
            out.append(EntryChange(scheduler_job_id(after.namespace, after.name, after.uid), after.uid, times))
    return out


def next_remain_retry_times(
    current: str, intent: BookkeepingIntent, live: Mapping[str, str] | None, namespaces: Collection[str] = ()
) -> NextValue:
    """The ``remain-retry-times`` value after `intent`.

    `current` is the stored value (unreadable: replaced, as MindCluster, which never reads it back, does);
    `live` maps the job id of every job in the agent's watch cache to its UID: an entry whose job is not there,
    or whose UID differs, is dropped (reschedule.go ``SyncJobRemainRetryTimes``); None keeps every other entry,
    and so does a job id outside the watched `namespaces` (empty: all are watched).
    """
    return fold_remain_retry_times(current, (intent,), live, namespaces)


def fold_remain_retry_times(
    current: str,
    intents: Sequence[BookkeepingIntent],
    live: Mapping[str, str] | None,
    namespaces: Collection[str] = (),
    changes: Sequence[EntryChange] = (),
) -> NextValue:
    """The ``remain-retry-times`` value after the job `changes` (:func:`entry_changes`: entries made for jobs
    seen, dropped for jobs gone or no longer opted in), then all `intents`, in order: the same value as applying
    :func:`next_remain_retry_times` to each in turn (each drops the entries of other jobs gone from `live`, then
    sets its own job's), with the stored value parsed once and the result encoded once. `dropped` is every job id
    a change or an intent dropped (sorted), `problem` the unreadable stored value's error (it is replaced)."""
    problem = None
    try:
        entries = parse_remain_retry_times(current)
    except BookkeepingError as e:
        entries, problem = {}, str(e)
    dropped: set[str] = set()
    for change in changes:
        held = entries.get(change.job_id)
        if change.drop:
            if held is not None:
                del entries[change.job_id]
                dropped.add(change.job_id)
        elif held is None or held.uid != change.uid:  # an entry of this job is kept: never refilled
            entries[change.job_id] = RemainRetryTimes(change.uid, change.times)
    if changes and live is not None and not intents:
        gone = [k for k, v in entries.items() if _watched(k, namespaces) and live.get(k) != v.uid]
        for k in gone:
            del entries[k]
        dropped.update(gone)
    for intent in intents:
        if live is not None:
            gone = [
                k for k, v in entries.items() if k != intent.job_id and _watched(k, namespaces) and live.get(k) != v.uid
            ]
            for k in gone:
                del entries[k]
            dropped.update(gone)
        entries[intent.job_id] = RemainRetryTimes(intent.uid, intent.remain_times)
    return NextValue(encode_remain_retry_times(entries), tuple(sorted(dropped)), problem)


def bookkeeping_intent(fault: Fault, hit: JobHit, decision: Decision, ledger: RetryLedger) -> BookkeepingIntent:
    """What the restart `decision` (for `fault` on the job of `hit`) asks to record, given the job's retry
    `ledger` before the decision was charged. ``Times`` takes one off only for a restart that spends a business
    retry (MindCluster: ``faultReason == PodFailed``, reschedule.go ``doRestartJob``); each hit pod becomes a task
    reason (its ``hccl/rankIndex`` as text, "" without one; the fault's pod for a pod fault)."""
    job = hit.job
    used = ledger.business_retries_used + int(decision.consumes_business_budget)
    reason = fault_type(fault.kind.value, fault.level.wire_name)
    tasks = tuple(
        TaskReason(reason, p.name, p.node or fault.node, "" if p.rank is None else str(p.rank)) for p in hit.pods
    )
    if not tasks and fault.pod is not None:
        tasks = (TaskReason(reason, fault.pod.name, fault.node, ""),)
    return BookkeepingIntent(
        scheduler_job_id(job.namespace, job.name, job.uid),
        job.uid,
        remain_times_after(job.fault_retry_times, used),
        tasks,
    )


def _described(described: str) -> tuple[str, str, str, frozenset[str], str]:
    """(kind, level wire name, node, chips, pod name or "") of an incident's fault text
    (agent.core.incidents.describe_fault: ``kind:level@node[chip,…]pod=<name> codes``)."""
    head, _, rest = described.partition("@")
    kind, _, level = head.partition(":")
    place, _, pod = rest.split(" ", 1)[0].partition("pod=")
    node, _, chips = place.partition("[")
    return kind, level, node, frozenset(c for c in chips.rstrip("]").split(",") if c), pod


def resumed_intent(
    job: JobRecord, incident: Incident, pods: Sequence[PodRecord], ledger: RetryLedger
) -> BookkeepingIntent:
    """The bookkeeping of a restart decided earlier and sent now (an escalation to the whole job, or an incident
    a new leader resumes), rebuilt from what persists: the job, its `incident` (its fault texts and the pods a
    pod-level restart stopped), the job's `pods` in the watch cache and its `ledger`, already charged for the
    restart (the incident's opening or escalation charges it). ``Times`` as :func:`bookkeeping_intent` gives.

    One task reason per fault text of the incident (MindCluster records the fault job's fault tasks again when it
    restarts the job after an escalation, reschedule.go ``doRestartJob``): its pod when the fault names one; else
    the pods the pod-level restart stopped (`incident.pods`, the hit ones), on the fault's node; else the job's
    pods on the fault's node (for a chip fault, those allocated one of its chips). A pod's ``hccl/rankIndex``
    comes from the cache when it holds the pod (a replacement keeps its name and rank); the node is the fault's
    (where the pod was hit), else the cached pod's; a pod listed twice keeps its first reason.
    """
    by_name = {p.name: p for p in pods}
    tasks: list[TaskReason] = []
    seen: set[str] = set()
    for described in incident.faults:
        kind, level, node, chips, pod_name = _described(described)
        reason = fault_type(kind, level)
        if pod_name:
            names: Sequence[str] = (pod_name,)
        elif incident.pods:
            names = incident.pods
        else:
            names = [p.name for p in pods if p.node == node and (not chips or chips & set(p.chips))]
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            pod = by_name.get(name)
            rank = "" if pod is None or pod.rank is None else str(pod.rank)
            tasks.append(TaskReason(reason, name, node or (pod.node if pod is not None else ""), rank))
    return BookkeepingIntent(
        scheduler_job_id(job.namespace, job.name, job.uid),
        job.uid,
        remain_times_after(job.fault_retry_times, ledger.business_retries_used),
        tuple(tasks),
    )
