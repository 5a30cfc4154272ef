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

``mindx-dl/job-reschedule-reason``, key ``recent-reschedule-records``: ``json.Marshal`` of
``map[api.JobID]*RescheduleReason``; each ``{"JobID", "TotalRescheduleTimes", "RescheduleRecords": [ {
"LogFileFormatTime", "RescheduleTimeStamp", "ReasonOfTask": [{"RescheduleReason", "PodName", "NodeName",
"NodeRankIndex"}]} ], "AdditionalInfo"}`` (``AdditionalInfo`` omitted when empty). Newest record first, at most
``MAX_RESCHEDULE_RECORDS`` (10) records per job and 10 task reasons per record; the whole value is kept under
``MAX_RESCHEDULE_RECORDS_BYTES`` (950 KiB) by dropping every job's oldest record (never its newest) up to 10
rounds. ``LogFileFormatTime`` is Go layout ``I0102 15:04:05`` (klog's: ``I`` + month day + time) of the
reschedule time, ``RescheduleTimeStamp`` its unix seconds. The empty string when there are no records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from agent.core.detect.checkcode import go_map, go_marshal

FAULT_NPU_CM = ("volcano-system", "vcjob-fault-npu-cm")
KEY_REMAIN_RETRY_TIMES = "remain-retry-times"
RESCHEDULE_REASON_CM = ("mindx-dl", "job-reschedule-reason")
KEY_RESCHEDULE_RECORDS = "recent-reschedule-records"
MAX_RESCHEDULE_RECORDS = 10
MAX_RESCHEDULE_RECORDS_BYTES = 950 * 1024


class BookkeepingError(ValueError):
    """A bookkeeping value that cannot be read; `reason` is ``bad-json`` or ``wrong-type``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


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
    return go_marshal(go_map({k: v.to_go() for k, v in entries.items()})).decode("utf-8")


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BookkeepingError("wrong-type", f"{where}: expected an object, got {type(value).__name__}")
    return value


def _typed(obj: Mapping[str, Any], key: str, kind: type, default: Any, where: str) -> Any:
    value = obj.get(key, default)
    if value is None and kind is list:
        return []
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BookkeepingError("wrong-type", f"{where}.{key}: expected {kind.__name__}, got {value!r}")
    return value


def _load(text: str, key: str) -> dict[str, Any]:
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise BookkeepingError("bad-json", f"{key}: {e}") from e
    return _obj(doc, key)


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


@dataclass(frozen=True, slots=True)
class TaskReason:
    """Why one pod was rescheduled (Go ``RescheduleTaskReason``). `rank_index` is a string, as in Go."""

    reason: str
    pod: str
    node: str
    rank_index: str

    def to_go(self) -> dict[str, Any]:
        return {
            "RescheduleReason": self.reason,
            "PodName": self.pod,
            "NodeName": self.node,
            "NodeRankIndex": self.rank_index,
        }


@dataclass(frozen=True, slots=True)
class RescheduleRecord:
    """One reschedule (Go ``RescheduleRecord``): `log_time` ``I0102 15:04:05``, `at_s` unix seconds."""

    log_time: str
    at_s: int
    tasks: tuple[TaskReason, ...]

    def to_go(self) -> dict[str, Any]:
        return {
            "LogFileFormatTime": self.log_time,
            "RescheduleTimeStamp": self.at_s,
            "ReasonOfTask": [t.to_go() for t in self.tasks],
        }


@dataclass(frozen=True, slots=True)
class RescheduleReasons:
    """One job's history (Go ``RescheduleReason``): newest record first, `total` reschedules since creation."""

    job_id: str
    total: int
    records: tuple[RescheduleRecord, ...]
    additional_info: str = ""

    def to_go(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "JobID": self.job_id,
            "TotalRescheduleTimes": self.total,
            "RescheduleRecords": [r.to_go() for r in self.records],
        }
        if self.additional_info:
            out["AdditionalInfo"] = self.additional_info
        return out


def klog_time(at: datetime) -> str:
    """`at` in Go layout ``I0102 15:04:05`` (e.g. ``I1201 13:34:05``), in `at`'s own time zone."""
    return at.strftime("I%m%d %H:%M:%S")


def add_reschedule_record(
    history: RescheduleReasons | None, job_id: str, at: datetime, tasks: Sequence[TaskReason]
) -> RescheduleReasons:
    """`history` with a reschedule at `at` prepended (MindCluster reschedule.go ``updateRescheduleReason``):
    total + 1, at most 10 task reasons in the record and 10 records kept (the oldest dropped)."""
    record = RescheduleRecord(klog_time(at), int(at.timestamp()), tuple(tasks[:MAX_RESCHEDULE_RECORDS]))
    if history is None:
        history = RescheduleReasons(job_id, 0, ())
    records = (record, *history.records)[:MAX_RESCHEDULE_RECORDS]
    return replace(history, total=history.total + 1, records=records)


def _marshal_records(histories: Mapping[str, RescheduleReasons]) -> str:
    return go_marshal(go_map({k: v.to_go() for k, v in histories.items()})).decode("utf-8")


def encode_reschedule_records(
    histories: Mapping[str, RescheduleReasons], *, max_bytes: int = MAX_RESCHEDULE_RECORDS_BYTES
) -> tuple[str, dict[str, RescheduleReasons]]:
    """The ``recent-reschedule-records`` value (``""`` when empty) and the histories it holds.

    Over `max_bytes` (950 KiB), each round drops the oldest record of every job that has more than one, up to
    10 rounds (MindCluster cache.go ``writeRescheduleReasonsToCMString``); the value may stay over the cap when
    every job is down to its newest record. The returned histories are the trimmed ones (MindCluster keeps the
    trim in its cache too).
    """
    kept = dict(histories)
    if not kept:
        return "", kept
    text = _marshal_records(kept)
    for _ in range(MAX_RESCHEDULE_RECORDS):
        if len(text.encode("utf-8")) <= max_bytes:
            break
        kept = {k: replace(v, records=v.records[:-1]) if len(v.records) > 1 else v for k, v in kept.items()}
        text = _marshal_records(kept)
    return text, kept


def _task(raw: Any, where: str) -> TaskReason:
    el = _obj(raw, where)
    return TaskReason(
        _typed(el, "RescheduleReason", str, "", where),
        _typed(el, "PodName", str, "", where),
        _typed(el, "NodeName", str, "", where),
        _typed(el, "NodeRankIndex", str, "", where),
    )


def _record(raw: Any, where: str) -> RescheduleRecord:
    el = _obj(raw, where)
    tasks = _typed(el, "ReasonOfTask", list, [], where)
    return RescheduleRecord(
        _typed(el, "LogFileFormatTime", str, "", where),
        _typed(el, "RescheduleTimeStamp", int, 0, where),
        tuple(_task(t, f"{where}.ReasonOfTask[{i}]") for i, t in enumerate(tasks)),
    )


def parse_reschedule_records(text: str) -> dict[str, RescheduleReasons]:
    """Read a ``recent-reschedule-records`` value (``""`` is no records).

    Raises:
        BookkeepingError: not JSON, or a field of the wrong type (the message names it).
    """
    if not text.strip():
        return {}
    out: dict[str, RescheduleReasons] = {}
    for job_id, raw in _load(text, KEY_RESCHEDULE_RECORDS).items():
        where = f"{KEY_RESCHEDULE_RECORDS}[{job_id!r}]"
        el = _obj(raw, where)
        records = _typed(el, "RescheduleRecords", list, [], where)
        out[job_id] = RescheduleReasons(
            _typed(el, "JobID", str, "", where),
            _typed(el, "TotalRescheduleTimes", int, 0, where),
            tuple(_record(r, f"{where}.RescheduleRecords[{i}]") for i, r in enumerate(records)),
            _typed(el, "AdditionalInfo", str, "", where),
        )
    return out
