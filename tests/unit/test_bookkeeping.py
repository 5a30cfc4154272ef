"""vcjob-fault-npu-cm remain-retry-times and job-reschedule-reason records: rules, parser, and Go's bytes.

The expected bytes come from testbed/mcencode (Go's encoding/json over structs with MindCluster's field names,
internal/rescheduling/type.go RemainRetryTimes / RescheduleReason / RescheduleRecord / RescheduleTaskReason).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agent.core.bookkeeping import (
    MAX_RESCHEDULE_RECORDS,
    BookkeepingError,
    RemainRetryTimes,
    RescheduleReasons,
    TaskReason,
    add_reschedule_record,
    after_failed_pod_restart,
    encode_remain_retry_times,
    encode_reschedule_records,
    first_remain_retry_times,
    klog_time,
    parse_remain_retry_times,
    parse_reschedule_records,
)
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
