"""vcjob-fault-npu-cm remain-retry-times and job-reschedule-reason records: rules, parser, and Go's bytes.

The expected bytes come from testbed/mcencode (Go's encoding/json over structs with MindCluster's field names,
internal/rescheduling/type.go RemainRetryTimes / RescheduleReason / RescheduleRecord / RescheduleTaskReason).
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from support import factories

from agent.core.bookkeeping import (
    MAX_RESCHEDULE_RECORDS,
    BookkeepingError,
    BookkeepingIntent,
    ParsedRecords,
    RemainRetryTimes,
    RescheduleReasons,
    TaskReason,
    add_reschedule_record,
    after_failed_pod_restart,
    bookkeeping_intent,
    encode_remain_retry_times,
    encode_reschedule_records,
    fault_type,
    first_remain_retry_times,
    fold_remain_retry_times,
    fold_reschedule_records,
    klog_time,
    next_remain_retry_times,
    next_reschedule_records,
    parse_remain_retry_times,
    parse_reschedule_records,
    remain_times_after,
    scheduler_job_id,
)
from agent.core.cluster import FaultScheduling
from agent.core.correlate import JobHit
from agent.core.faults import FaultKind, FaultLevel
from agent.core.policy import Action, Decision, RetryLedger
from testbed.encoder import shared

T0 = datetime(2026, 12, 1, 13, 4, 5, tzinfo=UTC)
TASK = TaskReason("NodeUnhealthy", "job-w-1", "node-3", "1")


def test_remain_retry_times_bytes_are_gos() -> None:
    entries = {"vcjob/b-uid2": RemainRetryTimes("uid-2", 0), "vcjob/a-uid1": RemainRetryTimes("uid-<&>", 3)}
    ours = encode_remain_retry_times(entries)
    assert ours == shared().request("remain-retry-times", remain={k: v.to_go() for k, v in entries.items()})
    assert ours.startswith('{"vcjob/a-uid1":{"UUID":"uid-\\u003c\\u0026\\u003e","Times":3},')
    assert parse_remain_retry_times(ours) == entries


def test_no_entries_is_the_empty_string() -> None:
    assert encode_remain_retry_times({}) == "" == shared().request("remain-retry-times")
    assert parse_remain_retry_times("") == {}


@pytest.mark.parametrize(("label", "times"), [(3, 3), (0, 0), (None, 0)], ids=["three", "zero", "absent"])
def test_first_entry_starts_at_the_label(label: int | None, times: int) -> None:
    assert first_remain_retry_times("uid-1", label) == RemainRetryTimes("uid-1", times)


def test_failed_pod_restart_takes_one_off_and_never_refills() -> None:
    e = first_remain_retry_times("uid-1", 2)
    e = after_failed_pod_restart(after_failed_pod_restart(e))
    assert e.times == 0
    assert after_failed_pod_restart(e).times == -1  # MindCluster decrements only when it restarted (times > 0)


def test_records_newest_first_capped_at_ten_and_total_counts_all() -> None:
    h = None
    for i in range(12):
        h = add_reschedule_record(h, "vcjob/j-uid", T0 + timedelta(seconds=i), [TASK])
    assert h is not None
    assert h.total == 12
    assert len(h.records) == MAX_RESCHEDULE_RECORDS
    assert h.records[0].at_s == int((T0 + timedelta(seconds=11)).timestamp())
    assert h.records[0].log_time == "I1201 13:04:16"


def test_at_most_ten_task_reasons_per_record() -> None:
    h = add_reschedule_record(None, "j", T0, [TASK] * 15)
    assert len(h.records[0].tasks) == 10


def test_klog_time_layout() -> None:
    assert klog_time(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)) == "I0102 03:04:05"


def test_reschedule_records_bytes_are_gos() -> None:
    a = add_reschedule_record(None, "vcjob/a", T0, [TASK, TaskReason("pod-failed", "a-w-0", "n1", "0")])
    b = RescheduleReasons("vcjob/b", 1, (), additional_info="cut 3 records")
    histories = {"vcjob/b": b, "vcjob/a": a}
    text, kept = encode_reschedule_records(histories)
    assert kept == histories
    assert text == shared().request("reschedule-reasons", reasons={k: v.to_go() for k, v in histories.items()})
    assert parse_reschedule_records(text) == histories
    empty_info = shared().request("reschedule-reasons", reasons={"vcjob/a": a.to_go()})
    assert '"AdditionalInfo"' not in empty_info  # omitempty
    assert encode_reschedule_records({})[0] == "" == shared().request("reschedule-reasons")


def test_over_the_cap_drops_every_jobs_oldest_record_but_keeps_the_newest() -> None:
    big = TaskReason("x" * 200, "p", "n", "0")
    h = None
    for i in range(5):
        h = add_reschedule_record(h, "j1", T0 + timedelta(seconds=i), [big])
    assert h is not None
    one = RescheduleReasons("j2", 1, h.records[:1])
    full, _ = encode_reschedule_records({"j1": h, "j2": one})
    text, kept = encode_reschedule_records({"j1": h, "j2": one}, max_bytes=len(full) - 1)
    assert len(text) < len(full)
    assert [len(kept["j1"].records), len(kept["j2"].records)] == [4, 1]
    assert kept["j1"].records[0] == h.records[0]
    text, kept = encode_reschedule_records({"j1": h, "j2": one}, max_bytes=10)
    assert [len(kept["j1"].records), len(kept["j2"].records)] == [1, 1]  # still over: newest kept, rounds end
    assert kept["j1"].total == 5


@pytest.mark.parametrize(
    ("text", "reason", "where"),
    [
        pytest.param("{", "bad-json", "remain-retry-times", id="truncated"),
        pytest.param("[]", "wrong-type", "expected an object", id="array"),
        pytest.param('{"j":{"UUID":1,"Times":1}}', "wrong-type", "remain-retry-times['j'].UUID", id="uuid-int"),
        pytest.param('{"j":{"UUID":"u","Times":true}}', "wrong-type", "['j'].Times", id="times-bool"),
        pytest.param('{"j":3}', "wrong-type", "remain-retry-times['j']", id="entry-int"),
    ],
)
def test_bad_remain_retry_times(text: str, reason: str, where: str) -> None:
    with pytest.raises(BookkeepingError) as info:
        parse_remain_retry_times(text)
    assert info.value.reason == reason
    assert where in str(info.value)


def test_bad_reschedule_records_name_the_field() -> None:
    text = '{"j":{"JobID":"j","TotalRescheduleTimes":1,"RescheduleRecords":[{"ReasonOfTask":[{"NodeRankIndex":1}]}]}}'
    with pytest.raises(BookkeepingError, match=r"RescheduleRecords\[0\]\.ReasonOfTask\[0\]\.NodeRankIndex"):
        parse_reschedule_records(text)


# ---- what the agent writes after a restart ----

INTENT = BookkeepingIntent("ns/job-uid-1", "uid-1", 2, (TASK,))


def test_scheduler_job_id_is_namespace_slash_podgroup() -> None:
    # the Ascend Operator looks an AscendJob up by exactly this (unconditaional_retry.go getJobRemainRetryTimes)
    assert scheduler_job_id("ns", "job", "uid-1") == "ns/job-uid-1"


@pytest.mark.parametrize(
    ("kind", "level", "expected"),
    [
        pytest.param("chip", "SeparateNPU", "CardUnhealthy", id="chip"),
        pytest.param("node", "SeparateNPU", "NodeUnhealthy", id="node"),
        pytest.param("network", "SeparateNPU", "CardNetworkUnhealthy", id="network"),
        pytest.param("business", "RestartBusiness", "pod-failed", id="business"),
        pytest.param("disruption", "RestartBusiness", "pod-failed", id="disruption"),
        pytest.param("chip", "SubHealthFault", "SubHealthFault", id="sub-health-chip"),
        pytest.param("node", "SubHealthFault", "SubHealthFault", id="sub-health-node"),
    ],
)
def test_fault_type_is_mindclusters(kind: str, level: str, expected: str) -> None:
    assert fault_type(kind, level) == expected


@pytest.mark.parametrize(
    ("label", "used", "times"),
    [
        pytest.param(3, 0, 3, id="none-used"),
        pytest.param(3, 2, 1, id="two-used"),
        pytest.param(3, 5, 0, id="never-below-zero"),
        pytest.param(None, 0, 0, id="absent-is-zero"),
        pytest.param(0, 0, 0, id="zero"),
    ],
)
def test_remain_times_after(label: int | None, used: int, times: int) -> None:
    assert remain_times_after(label, used) == times


@pytest.mark.parametrize(
    ("stored", "live", "namespaces", "expected", "dropped"),
    [
        pytest.param("", None, (), {"ns/job-uid-1": ("uid-1", 2)}, (), id="first-entry"),
        pytest.param(
            '{"ns/job-uid-1":{"UUID":"uid-1","Times":3}}', None, (), {"ns/job-uid-1": ("uid-1", 2)}, (),
            id="replaced-never-refilled",
        ),
        pytest.param(
            '{"ns/other-u2":{"UUID":"u2","Times":1}}', {"ns/other-u2": "u2"}, (),
            {"ns/job-uid-1": ("uid-1", 2), "ns/other-u2": ("u2", 1)}, (), id="live-job-kept",
        ),
        pytest.param(
            '{"ns/gone-u3":{"UUID":"u3","Times":1}}', {}, (), {"ns/job-uid-1": ("uid-1", 2)}, ("ns/gone-u3",),
            id="gone-job-dropped",
        ),
        pytest.param(
            '{"ns/re-u4":{"UUID":"u4","Times":1}}', {"ns/re-u4": "u5"}, (), {"ns/job-uid-1": ("uid-1", 2)},
            ("ns/re-u4",), id="uid-changed-dropped",
        ),
        pytest.param(
            '{"far/x-u6":{"UUID":"u6","Times":1}}', {}, ("ns",),
            {"ns/job-uid-1": ("uid-1", 2), "far/x-u6": ("u6", 1)}, (), id="unwatched-namespace-kept",
        ),
    ],
)  # fmt: skip
def test_next_remain_retry_times(
    stored: str,
    live: dict[str, str] | None,
    namespaces: tuple[str, ...],
    expected: dict[str, tuple[str, int]],
    dropped: tuple[str, ...],
) -> None:
    value = next_remain_retry_times(stored, INTENT, live, namespaces)
    assert value.problem is None
    assert value.dropped == dropped
    got = json.loads(value.text)  # plain json, not our parser
    assert got == {k: {"UUID": u, "Times": t} for k, (u, t) in expected.items()}
    # and byte for byte Go's encoding of the same map
    assert value.text == shared().request("remain-retry-times", remain=got)


def test_an_unreadable_stored_value_is_replaced_and_said_so() -> None:
    value = next_remain_retry_times("{not json", INTENT, None)
    assert value.problem is not None
    assert value.problem.startswith("bad-json")
    assert json.loads(value.text) == {"ns/job-uid-1": {"UUID": "uid-1", "Times": 2}}
    records = next_reschedule_records('{"j": 3}', INTENT, T0, None)
    assert records.problem is not None
    assert list(json.loads(records.text)) == ["ns/job-uid-1"]


def test_next_reschedule_records_prepends_and_drops_gone_jobs() -> None:
    first = next_reschedule_records("", INTENT, T0, None)
    other = add_reschedule_record(None, "ns/other-u2", T0, [TASK])
    gone = add_reschedule_record(None, "ns/gone-u3", T0, [TASK])
    stored, _ = encode_reschedule_records({**parse_reschedule_records(first.text), "ns/other-u2": other,
                                           "ns/gone-u3": gone})  # fmt: skip
    later = T0 + timedelta(minutes=1)
    value = next_reschedule_records(stored, INTENT, later, {"ns/job-uid-1": "uid-1", "ns/other-u2": "u2"})
    assert value.dropped == ("ns/gone-u3",)
    doc = json.loads(value.text)
    assert sorted(doc) == ["ns/job-uid-1", "ns/other-u2"]
    mine = doc["ns/job-uid-1"]
    assert mine["TotalRescheduleTimes"] == 2
    assert [r["RescheduleTimeStamp"] for r in mine["RescheduleRecords"]] == [
        int(later.timestamp()),
        int(T0.timestamp()),
    ]
    assert mine["RescheduleRecords"][0]["LogFileFormatTime"] == "I1201 13:05:05"
    assert value.text == shared().request("reschedule-reasons", reasons=doc)


def _hit(retry_times: int | None) -> JobHit:
    job = replace(factories.job(labels=(), fault_scheduling=FaultScheduling.FORCE), fault_retry_times=retry_times)
    return JobHit(
        job, (factories.pod("job-w-0", rank=0, node="n1"), factories.pod("job-w-1", node="n2", rank=None)), True
    )


@pytest.mark.parametrize(
    ("kind", "level", "retry_times", "used", "business", "times", "reason"),
    [
        pytest.param(FaultKind.BUSINESS, FaultLevel.RESTART_BUSINESS, 3, 0, True, 2, "pod-failed", id="business-1"),
        pytest.param(FaultKind.BUSINESS, FaultLevel.RESTART_BUSINESS, 3, 2, True, 0, "pod-failed", id="last-retry"),
        pytest.param(FaultKind.CHIP, FaultLevel.SEPARATE, 3, 1, False, 2, "CardUnhealthy", id="hardware-takes-none"),
        pytest.param(FaultKind.NODE, FaultLevel.SEPARATE, None, 0, False, 0, "NodeUnhealthy", id="no-label"),
        pytest.param(FaultKind.CHIP, FaultLevel.SUB_HEALTH, 1, 0, False, 1, "SubHealthFault", id="sub-health"),
    ],
)  # fmt: skip
def test_bookkeeping_intent(
    kind: FaultKind, level: FaultLevel, retry_times: int | None, used: int, business: bool, times: int, reason: str
) -> None:
    hit = _hit(retry_times)
    fault = factories.fault(kind=kind, level=level, node="n1")
    decision = Decision(Action.RESTART_JOB, "r", consumes_business_budget=business)
    intent = bookkeeping_intent(fault, hit, decision, RetryLedger(business_retries_used=used))
    job = hit.job
    assert intent.job_id == f"{job.namespace}/{job.name}-{job.uid}"
    assert intent.uid == job.uid
    assert intent.remain_times == times
    assert intent.tasks == (TaskReason(reason, "job-w-0", "n1", "0"), TaskReason(reason, "job-w-1", "n2", ""))


# ---- several intents folded into one write (agent.engine.bookkeeping coalesces a burst of restarts)


def _one_by_one_records(
    current: str, intents: list[tuple[BookkeepingIntent, datetime]], live: dict[str, str] | None, max_bytes: int
) -> str:
    """The reference: each intent on its own, as one write per restart did, built from the whole-value encoder
    (encode_reschedule_records' trim), not from the fold's per-job encoding."""
    for intent, at in intents:
        try:
            histories = parse_reschedule_records(current)
        except BookkeepingError:
            histories = {}
        if live is not None:
            histories = {k: v for k, v in histories.items() if k == intent.job_id or k in live}
        histories[intent.job_id] = add_reschedule_record(histories.get(intent.job_id), intent.job_id, at, intent.tasks)
        current, _ = encode_reschedule_records(histories, max_bytes=max_bytes)
    return current


def _intent(i: int, times: int = 1) -> BookkeepingIntent:
    return BookkeepingIntent(f"ns/j{i}-u{i}", f"u{i}", times, (TaskReason("CardUnhealthy", f"j{i}-w-0", "n<&>", "0"),))


def _stored(jobs: int, records: int) -> str:
    histories = {}
    for j in range(jobs):
        h = None
        for r in range(records):
            h = add_reschedule_record(h, f"ns/j{j}-u{j}", T0 + timedelta(seconds=r), [TASK, TASK])
        assert h is not None
        histories[h.job_id] = h
    return encode_reschedule_records(histories)[0]


BURST = [(_intent(i % 4), T0 + timedelta(seconds=i)) for i in (0, 1, 2, 1, 3, 0, 5)]  # repeats, a new job (5)


@pytest.mark.parametrize(
    ("current", "live", "max_bytes"),
    [
        pytest.param("", None, 950 * 1024, id="empty-keep-all"),
        pytest.param(_stored(4, 10), None, 950 * 1024, id="full-histories"),
        pytest.param(_stored(6, 3), {f"ns/j{i}-u{i}": f"u{i}" for i in (0, 1, 2, 3)}, 950 * 1024, id="drops-gone"),
        pytest.param(_stored(4, 10), None, len(_stored(4, 10)) - 50, id="trimmed-near-the-cap"),
        pytest.param(_stored(4, 10), {}, len(_stored(4, 5)), id="all-gone-and-trimmed"),
        pytest.param(_stored(4, 10), None, 10, id="over-the-cap-for-good"),
        pytest.param('{"j": 3}', None, 950 * 1024, id="unreadable"),
    ],
)  # fmt: skip
def test_folding_reschedule_records_at_once_equals_one_by_one(
    current: str, live: dict[str, str] | None, max_bytes: int
) -> None:
    expected = _one_by_one_records(current, BURST, live, max_bytes)
    assert fold_reschedule_records(current, BURST, live, max_bytes=max_bytes).text == expected
    chained = current
    for step in BURST:
        chained = fold_reschedule_records(chained, [step], live, max_bytes=max_bytes).text
    assert chained == expected
    # split anywhere: folding the rest onto a folded prefix is the same again
    head = fold_reschedule_records(current, BURST[:3], live, max_bytes=max_bytes).text
    assert fold_reschedule_records(head, BURST[3:], live, max_bytes=max_bytes).text == expected


@pytest.mark.parametrize(
    ("current", "live", "max_bytes"),
    [
        pytest.param(_stored(4, 10), None, 950 * 1024, id="full-histories"),
        pytest.param(_stored(6, 3), {f"ns/j{i}-u{i}": f"u{i}" for i in (0, 1, 2, 3)}, 950 * 1024, id="drops-gone"),
        pytest.param(_stored(4, 10), None, len(_stored(4, 10)) - 50, id="trimmed-near-the-cap"),
        pytest.param('{"j": 3}', None, 950 * 1024, id="unreadable"),
    ],
)  # fmt: skip
def test_a_fold_from_the_value_it_made_reads_it_kept_not_parsed(
    current: str, live: dict[str, str] | None, max_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39: the bookkeeper's folds keep the value they made parsed (ParsedRecords); a fold whose stored value
    is that value starts from a copy of it, with the same result as parsing it, and never parses; a value someone
    else changed is parsed again."""
    import agent.core.reschedule_records as rr

    parses: list[str] = []
    real_parse = rr.parse_reschedule_records

    def counted(text: str) -> dict[str, RescheduleReasons]:
        parses.append(text)
        return real_parse(text)

    monkeypatch.setattr(rr, "parse_reschedule_records", counted)
    kept = ParsedRecords()
    chained = current
    for step in BURST:
        chained = fold_reschedule_records(chained, [step], live, max_bytes=max_bytes, parsed=kept).text
    assert chained == _one_by_one_records(current, BURST, live, max_bytes)
    assert parses == [current]  # only the first stored value, which no fold made
    # a fold that is not written (a 409: the stored value is another) leaves nothing of it in what is kept
    fold_reschedule_records(chained, [(_intent(7), T0)], live, max_bytes=max_bytes, parsed=kept)
    again = fold_reschedule_records(chained, [(_intent(8), T0)], live, max_bytes=max_bytes, parsed=kept).text
    assert again == _one_by_one_records(chained, [(_intent(8), T0)], live, max_bytes)
    assert len(parses) == 2  # `chained` was no longer the value kept: parsed
    elsewhere = _stored(2, 1)  # written by someone else (MindCluster's plugin): parsed, never taken from the cache
    out = fold_reschedule_records(elsewhere, [(_intent(0), T0)], live, max_bytes=max_bytes, parsed=kept).text
    assert out == _one_by_one_records(elsewhere, [(_intent(0), T0)], live, max_bytes)
    assert parses[-1] == elsewhere


def test_folding_reschedule_records_reports_every_drop_and_the_problem_once() -> None:
    live = {"ns/j0-u0": "u0"}
    value = fold_reschedule_records(_stored(3, 1), [(_intent(0), T0), (_intent(1), T0), (_intent(2), T0)], live)
    assert value.dropped == ("ns/j1-u1", "ns/j2-u2")  # gone from the cache (each kept only in its own step)
    assert sorted(json.loads(value.text)) == ["ns/j0-u0", "ns/j2-u2"]  # the last intent's job stays, as one by one
    bad = fold_reschedule_records("{", [(_intent(0), T0), (_intent(1), T0)], None)
    assert bad.problem is not None
    assert bad.problem.startswith("bad-json")
    assert value.text == shared().request("reschedule-reasons", reasons=json.loads(value.text))


@pytest.mark.parametrize(
    ("current", "live"),
    [
        pytest.param("", None, id="empty"),
        pytest.param('{"ns/j9-u9":{"UUID":"u9","Times":4},"ns/j1-u1":{"UUID":"old","Times":7}}', None, id="keep"),
        pytest.param(
            '{"ns/j9-u9":{"UUID":"u9","Times":4},"ns/j1-u1":{"UUID":"old","Times":7}}',
            {"ns/j0-u0": "u0", "ns/j1-u1": "u1"}, id="drop-gone-and-uid-changed",
        ),
        pytest.param("[1]", {}, id="unreadable"),
    ],
)  # fmt: skip
def test_folding_remain_retry_times_at_once_equals_one_by_one(current: str, live: dict[str, str] | None) -> None:
    intents = [_intent(0, 3), _intent(1, 2), _intent(0, 2), _intent(2, 0)]
    one_by_one = current  # the reference: each intent on its own, from the parser and the encoder
    for intent in intents:
        try:
            entries = parse_remain_retry_times(one_by_one)
        except BookkeepingError:
            entries = {}
        if live is not None:
            entries = {k: v for k, v in entries.items() if k == intent.job_id or live.get(k) == v.uid}
        one_by_one = encode_remain_retry_times(
            {**entries, intent.job_id: RemainRetryTimes(intent.uid, intent.remain_times)}
        )
    folded = fold_remain_retry_times(current, intents, live)
    assert folded.text == one_by_one
    chained = current
    for intent in intents:
        chained = next_remain_retry_times(chained, intent, live).text
    assert chained == one_by_one
    if live is None or "ns/j0-u0" in live:
        assert json.loads(folded.text)["ns/j0-u0"] == {"UUID": "u0", "Times": 2}  # the later intent wins
    assert folded.text == shared().request("remain-retry-times", remain=json.loads(folded.text))
