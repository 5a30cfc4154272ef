"""MindCluster's ``mindx-dl/job-reschedule-reason`` key ``recent-reschedule-records``: its records, how a restart
adds one, how the value is read, encoded and trimmed; and what the bookkeeping values share (the read errors, the
next value of a key). Pure (no I/O, no clock reads). Shapes read from Ascend/mind-cluster at commit 22bb3d98,
component/ascend-for-volcano/internal/rescheduling/ (type.go, cache.go, reschedule.go); the rest of the
bookkeeping (``remain-retry-times``, the restart's intent) is agent.core.bookkeeping, which re-exports these names.

The value: ``json.Marshal`` of
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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent.core.detect.checkcode import go_map, go_marshal_plain

if TYPE_CHECKING:
    from agent.core.bookkeeping import BookkeepingIntent

KEY_RESCHEDULE_RECORDS = "recent-reschedule-records"
MAX_RESCHEDULE_RECORDS = 10
MAX_RESCHEDULE_RECORDS_BYTES = 950 * 1024


class BookkeepingError(ValueError):
    """A bookkeeping value that cannot be read; `reason` is ``bad-json`` or ``wrong-type``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


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


@dataclass(frozen=True, slots=True)
class NextValue:
    """A bookkeeping key's new value: `text`, the job ids whose entries were `dropped`, and `problem` (the
    :class:`BookkeepingError` text) when the stored value was unreadable and so replaced, else None."""

    text: str
    dropped: tuple[str, ...] = ()
    problem: str | None = None


def _watched(job_id: str, namespaces: Collection[str]) -> bool:
    return not namespaces or job_id.split("/", 1)[0] in namespaces


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
    return go_marshal_plain(go_map({k: v.to_go() for k, v in histories.items()})).decode("utf-8")


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


def next_reschedule_records(
    current: str,
    intent: BookkeepingIntent,
    at: datetime,
    live: Mapping[str, str] | None,
    namespaces: Collection[str] = (),
) -> NextValue:
    """The ``recent-reschedule-records`` value after `intent`'s restart at `at`.

    A record for `intent` is prepended (:func:`add_reschedule_record`) to the job's history (a new one when the
    stored value is unreadable: it is replaced).
    Jobs not in `live` (in the watched `namespaces`) are dropped (reschedule.go ``SyncJobRecentRescheduleReason``:
    by job id only, which holds the UID);
    the value is trimmed under 950 KiB (:func:`encode_reschedule_records`).
    """
    return fold_reschedule_records(current, ((intent, at),), live, namespaces)


def _entry_text(job_id: str, history: RescheduleReasons) -> str:
    """``"<job id>":<history>`` as Go writes that map entry (what :func:`_marshal_records` joins)."""
    return go_marshal_plain({job_id: history.to_go()}).decode("utf-8")[1:-1]


class _EncodedHistories:
    """Histories with each job's map entry encoded once and re-encoded only when that job changes, so the size of
    the whole value (UTF-8 bytes) is known after every intent without encoding all of it again."""

    def __init__(self, histories: dict[str, RescheduleReasons]) -> None:
        self.histories = histories
        self._text: dict[str, str] = {}
        self._bytes = 0  # sum of the entries' UTF-8 lengths
        for k, v in histories.items():
            self._encode(k, v)

    def copy(self) -> _EncodedHistories:
        """An independent copy (the histories are frozen: only the maps are copied)."""
        other = _EncodedHistories({})
        other.histories, other._text, other._bytes = dict(self.histories), dict(self._text), self._bytes
        return other

    def _encode(self, job_id: str, history: RescheduleReasons) -> None:
        text = _entry_text(job_id, history)
        self._bytes += len(text.encode("utf-8")) - len(self._text.get(job_id, "").encode("utf-8"))
        self._text[job_id] = text

    def set(self, job_id: str, history: RescheduleReasons) -> None:
        self.histories[job_id] = history
        self._encode(job_id, history)

    def drop(self, job_id: str) -> None:
        del self.histories[job_id]
        self._bytes -= len(self._text.pop(job_id).encode("utf-8"))

    def size(self) -> int:
        """UTF-8 bytes of :meth:`text`."""
        n = len(self._text)
        return 0 if n == 0 else 2 + self._bytes + n - 1

    def text(self) -> str:
        """The map as Go marshals it (keys sorted), ``""`` when empty."""
        if not self._text:
            return ""
        return "{" + ",".join(self._text[k] for k in sorted(self._text)) + "}"

    def trim(self, max_bytes: int) -> None:
        """:func:`encode_reschedule_records`' trim: while over `max_bytes`, up to 10 rounds, every job with more
        than one record loses its oldest."""
        for _ in range(MAX_RESCHEDULE_RECORDS):
            if self.size() <= max_bytes:
                return
            for k, v in list(self.histories.items()):
                if len(v.records) > 1:
                    self.set(k, replace(v, records=v.records[:-1]))


class ParsedRecords:
    """The last ``recent-reschedule-records`` value :func:`fold_reschedule_records` read or made, kept parsed and
    encoded: a fold whose stored value is that text (the usual case: the value the agent's last write left) starts
    from a copy instead of parsing and encoding every job's history again (issue 39: that was half the CPU of a
    bookkeeping write). One per writer; the text is compared whole, so a value changed by anyone else is parsed."""

    def __init__(self) -> None:
        self._text: str | None = None
        self._value = _EncodedHistories({})

    def read(self, text: str) -> _EncodedHistories | None:
        """A copy of `text` parsed and encoded, None unless it is the value kept."""
        return self._value.copy() if text == self._text else None

    def keep(self, text: str, value: _EncodedHistories) -> None:
        """Keep `value` (a copy of it) as what `text` reads to."""
        self._text, self._value = text, value.copy()


def fold_reschedule_records(
    current: str,
    intents: Sequence[tuple[BookkeepingIntent, datetime]],
    live: Mapping[str, str] | None,
    namespaces: Collection[str] = (),
    *,
    max_bytes: int = MAX_RESCHEDULE_RECORDS_BYTES,
    parsed: ParsedRecords | None = None,
) -> NextValue:
    """The ``recent-reschedule-records`` value after all `intents` (each with its restart's time), in order: the
    same value as applying :func:`next_reschedule_records` to each in turn (each drops the histories of other
    jobs gone from `live`, prepends its record and trims the value under `max_bytes`), with the stored value
    parsed once and each job's entry encoded once plus once per change (the size check after each intent needs
    no encoding of the whole value); with `parsed`, not even once when `current` is the value it keeps (it then
    keeps the value made). `dropped` and `problem` as :func:`fold_remain_retry_times`."""
    problem = None
    value = parsed.read(current) if parsed is not None else None
    if value is None:
        try:
            histories = parse_reschedule_records(current)
        except BookkeepingError as e:
            histories, problem = {}, str(e)
        value = _EncodedHistories(histories)
    histories = value.histories
    dropped: set[str] = set()
    for intent, at in intents:
        if live is not None:
            gone = [k for k in histories if k != intent.job_id and _watched(k, namespaces) and k not in live]
            for k in gone:
                value.drop(k)
            dropped.update(gone)
        value.set(intent.job_id, add_reschedule_record(histories.get(intent.job_id), intent.job_id, at, intent.tasks))
        value.trim(max_bytes)
    text = value.text()
    if parsed is not None:
        parsed.keep(text, value)
    return NextValue(text, tuple(sorted(dropped)), problem)
