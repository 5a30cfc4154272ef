"""reset-config-<job>: the update rules, the parser, and the bytes and checkCode against Go's encoder.

The expected bytes come from testbed/mcencode (Go's encoding/json over structs with MindCluster's field names,
plugin/type.go TaskResetInfo / TaskDevInfo / DevFaultInfo), never from the module under test.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from agent.core.resetconfig import (
    POD_RESCHEDULE,
    RankEntry,
    ResetConfigError,
    ResetConfigUpdate,
    ResetInfo,
    after_pods_placed,
    initial_reset_config,
    parse_reset_config,
    reset_config_data,
    reset_config_name,
    reset_config_reason,
    updated_data,
    with_graceful_exit,
)
from testbed.encoder import shared

NOW_S = 1_767_225_600

RANKS = (
    RankEntry(rank_id=3, logic_id=1, status="unrecovered", policy="reset", initial_policy="reset",
              error_codes=(2147483648, 0x80E18005), error_code_hex="80E18005"),
    RankEntry(rank_id=0, error_codes=None),
    RankEntry(rank_id=7, status="<&>\u2028", error_codes=()),
)  # fmt: skip

INFOS = [
    pytest.param(ResetInfo(), id="zero-nil-ranklist"),
    pytest.param(ResetInfo(rank_list=()), id="empty-ranklist"),
    pytest.param(ResetInfo(rank_list=RANKS, update_time=NOW_S, retry_time=4, fault_flushing=True,
                           graceful_exit=1, restart_fault_process=True), id="every-field"),
]  # fmt: skip


def _go(info: ResetInfo, restart_type: str | None) -> Any:
    return shared().request("reset-config", reset=info.to_go(), restart_type=restart_type or "")


@pytest.mark.parametrize("info", INFOS)
@pytest.mark.parametrize("restart_type", [POD_RESCHEDULE, None], ids=["pod-reschedule", "grace-exit"])
def test_data_is_what_go_writes(info: ResetInfo, restart_type: str | None) -> None:
    assert reset_config_data(info, restart_type=restart_type) == _go(info, restart_type)


@pytest.mark.parametrize("info", INFOS)
def test_parse_reads_back_go_bytes_and_verifies_check_code(info: ResetInfo) -> None:
    got = parse_reset_config(_go(info, POD_RESCHEDULE))
    assert got.info == info
    assert got.restart_type == POD_RESCHEDULE
    assert got.check_code_ok is True
    assert got.unknown_fields == ()


def test_pod_level_update_empties_ranklist_stamps_time_and_counts() -> None:
    before = ResetInfo(rank_list=RANKS, update_time=10, retry_time=2, graceful_exit=0)
    after = after_pods_placed(before, now_s=NOW_S, pod_level=True)
    assert after == ResetInfo(rank_list=(), update_time=NOW_S, retry_time=3)
    data = reset_config_data(after, restart_type=POD_RESCHEDULE)
    assert data["reset.json"].startswith('{"RankList":[],"UpdateTime":1767225600,"RetryTime":3,')
    assert data["restartType"] == "podReschedule"


def test_whole_job_placement_resets_retry_time() -> None:
    after = after_pods_placed(ResetInfo(retry_time=5), now_s=NOW_S, pod_level=False)
    assert (after.retry_time, after.rank_list, after.update_time) == (0, (), NOW_S)


def test_negative_time_is_refused() -> None:
    with pytest.raises(ValueError, match="now_s must be unix seconds"):
        after_pods_placed(ResetInfo(), now_s=-1, pod_level=True)


def test_graceful_exit_sets_and_resets_only_that_field_and_drops_restart_type() -> None:
    before = ResetInfo(rank_list=RANKS, update_time=10, retry_time=2)
    on = with_graceful_exit(before, on=True)
    assert on == ResetInfo(rank_list=RANKS, update_time=10, retry_time=2, graceful_exit=1)
    assert with_graceful_exit(on, on=False) == before
    assert set(reset_config_data(on, restart_type=None)) == {"checkCode", "reset.json"}


def test_name() -> None:
    assert reset_config_name("mindx-dls-test") == "reset-config-mindx-dls-test"


def test_platform_created_configmap_without_check_code_reads_as_zero() -> None:
    got = parse_reset_config({"reset.json": "{}"})
    assert (got.info, got.check_code_ok, got.restart_type) == (ResetInfo(), None, None)


def test_check_code_mismatch_is_reported_not_raised() -> None:
    data = dict(_go(ResetInfo(retry_time=1), POD_RESCHEDULE))
    data["reset.json"] = data["reset.json"].replace('"RetryTime":1', '"RetryTime":2')
    got = parse_reset_config(data)
    assert got.check_code_ok is False
    assert got.info.retry_time == 2
    assert hashlib.sha256(data["reset.json"].encode()).hexdigest() != data["checkCode"]


def test_unknown_fields_are_listed() -> None:
    got = parse_reset_config({"reset.json": '{"RankList":[{"RankId":1,"Extra":2}],"NewThing":true}'})
    assert got.unknown_fields == ("NewThing", "reset.json.RankList[0].Extra")


@pytest.mark.parametrize(
    ("data", "reason", "where"),
    [
        pytest.param({}, "missing-key", "no reset.json key", id="no-key"),
        pytest.param({"reset.json": '{"RankList":'}, "bad-json", "reset.json", id="truncated"),
        pytest.param({"reset.json": "[]"}, "wrong-type", "expected an object", id="array"),
        pytest.param({"reset.json": '{"RetryTime":"1"}'}, "wrong-type", "reset.json.RetryTime", id="string-int"),
        pytest.param({"reset.json": '{"GracefulExit":true}'}, "wrong-type", "reset.json.GracefulExit", id="bool-int"),
        pytest.param({"reset.json": '{"FaultFlushing":1}'}, "wrong-type", "reset.json.FaultFlushing", id="int-bool"),
        pytest.param({"reset.json": '{"RankList":{}}'}, "wrong-type", "reset.json.RankList", id="ranklist-object"),
        pytest.param({"reset.json": '{"RankList":[{"LogicId":4294967296}]}'}, "wrong-type",
                     "reset.json.RankList[0].LogicId", id="logic-id-over-int32"),
        pytest.param({"reset.json": '{"RankList":[{"ErrorCode":["80E18005"]}]}'}, "wrong-type",
                     "reset.json.RankList[0].ErrorCode[0]", id="error-code-string"),
    ],
)  # fmt: skip
def test_bad_input_names_the_field(data: dict[str, str], reason: str, where: str) -> None:
    with pytest.raises(ResetConfigError) as info:
        parse_reset_config(data)
    assert info.value.reason == reason
    assert where in str(info.value)


# ---------------------------------------------------------------- the intents the engine hands the writer

GUIDE = {"fault-scheduling": "grace"}


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        pytest.param({**GUIDE, "pod-rescheduling": "on"}, "pod-rescheduling=on", id="pod-rescheduling"),
        pytest.param({"fault-scheduling": "force", "subHealthyStrategy": "graceExit"}, "subHealthyStrategy=graceExit",
                     id="grace-exit"),
        pytest.param({**GUIDE, "pod-rescheduling": "on", "process-recover-enable": "on"}, None,
                     id="process-recovery-owns-it"),
        pytest.param({**GUIDE, "subHealthyStrategy": "forceExit"}, None, id="force-exit"),
        pytest.param({**GUIDE, "pod-rescheduling": "off"}, None, id="pod-rescheduling-off"),
        pytest.param({"pod-rescheduling": "on"}, None, id="not-opted-in"),
        pytest.param({"fault-scheduling": "off", "subHealthyStrategy": "graceExit"}, None, id="opted-out"),
    ],
)  # fmt: skip
def test_which_jobs_need_a_reset_config(labels: dict[str, str], reason: str | None) -> None:
    assert reset_config_reason(labels) == reason


def test_initial_configmap_is_the_zero_payload_as_go_marshals_it() -> None:
    cm = initial_reset_config("job", "ns")
    assert cm["metadata"] == {"name": "reset-config-job", "namespace": "ns", "labels": {"reset": "true"}}
    assert cm["data"] == _go(ResetInfo(), None)
    assert parse_reset_config(cm["data"]).check_code_ok is True


def test_pod_level_update_of_the_initial_configmap_is_what_go_writes() -> None:
    update = ResetConfigUpdate("ns", "job", "pod-reschedule", pod_level=True, now_s=NOW_S)
    got = updated_data(update, initial_reset_config("job", "ns")["data"])
    assert got == _go(ResetInfo(rank_list=(), update_time=NOW_S, retry_time=1), POD_RESCHEDULE)


@pytest.mark.parametrize(
    ("stored", "written"),
    [
        pytest.param(
            _go(ResetInfo(rank_list=(), update_time=NOW_S, retry_time=1), POD_RESCHEDULE), False, id="landed-already"
        ),
        pytest.param(
            _go(ResetInfo(rank_list=(), update_time=NOW_S - 60, retry_time=1), POD_RESCHEDULE), True, id="older-one"
        ),
        pytest.param(_go(ResetInfo(update_time=NOW_S), None), True, id="no-pod-level-update-yet"),
    ],
)
def test_a_repeated_pod_level_update_of_one_restart_writes_once(stored: dict[str, str], written: bool) -> None:
    """A successor repeating the update of a restart (since_s: before the stored one) whose update landed: no
    write, so RetryTime does not count twice; an older pod-level update (an earlier restart's) is updated."""
    update = ResetConfigUpdate("ns", "job", "pod-reschedule", pod_level=True, now_s=NOW_S + 5, since_s=NOW_S - 10)
    got = updated_data(update, stored)
    assert (got is not None) is written
    if got is not None:
        assert parse_reset_config(got).info.update_time == NOW_S + 5


def test_grace_exit_updates_drop_restart_type_and_repeat_as_nothing_to_do() -> None:
    start = _go(ResetInfo(rank_list=(), update_time=NOW_S, retry_time=3), POD_RESCHEDULE)
    on = updated_data(ResetConfigUpdate("ns", "job", "grace-exit-on"), start)
    assert on == _go(ResetInfo(rank_list=(), update_time=NOW_S, retry_time=3, graceful_exit=1), None)
    assert on is not None
    assert updated_data(ResetConfigUpdate("ns", "job", "grace-exit-on"), on) is None  # already set
    off = updated_data(ResetConfigUpdate("ns", "job", "grace-exit-off"), on)
    assert off == _go(ResetInfo(rank_list=(), update_time=NOW_S, retry_time=3), None)


def test_an_update_of_unreadable_data_raises_and_an_unknown_change_is_refused() -> None:
    with pytest.raises(ResetConfigError, match="missing-key"):
        updated_data(ResetConfigUpdate("ns", "job", "grace-exit-on"), {"profilingSwitch": "{}"})
    with pytest.raises(ValueError, match="change must be one of"):
        ResetConfigUpdate("ns", "job", "hot-reset")
