"""Device plugin ConfigMap: classification per fixture, diffing, fast paths, overrides, flapping, bad input."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import factories

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.checkcode import check_code, go_map
from agent.core.detect.customization import FaultCustomization, FrequencyRule
from agent.core.detect.deviceinfo import DeviceInfoDetector
from agent.core.detect.flapping import FlapTracker
from agent.core.detect.levels import load_shipped_table, parse_fault_config
from agent.core.faults import FaultKind, FaultLevel, ObjectRef

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"
ROOT = Path(__file__).resolve().parents[3]
NOW = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
P = "huawei.com/Ascend910"
TABLE = load_shipped_table()


def fixture_cm(name: str) -> ConfigMapRecord:
    doc = json.loads((FIXTURES / name).read_text())
    m = doc["metadata"]
    return factories.configmap(m["name"], doc["data"], namespace=m["namespace"], uid="uid-1")


def fault_el(
    chip: str, codes: str, level: str, ftype: str = "CardUnhealthy", t_ms: int = 1767225601000
) -> dict[str, Any]:
    return {
        "fault_type": ftype,
        "npu_name": chip,
        "large_model_fault_level": level,
        "fault_level": level,
        "fault_handling": level,
        "fault_code": codes,
        "fault_time_and_level_map": {c: {"fault_time": t_ms, "fault_level": level} for c in codes.split(",") if c},
    }


def device_cm(
    faults: list[dict[str, Any]] | str | None = None,
    *,
    unhealthy: str = "",
    network: str = "",
    recovering: str = "",
    update_time: int = 1767225603,
    node: str = "w1",
    good_check: bool = True,
    extra: dict[str, str] | None = None,
    prefix: str = P,
) -> ConfigMapRecord:
    dl: dict[str, str] = {
        prefix: "",
        f"{prefix}-Unhealthy": unhealthy,
        f"{prefix}-NetworkUnhealthy": network,
        f"{prefix}-Recovering": recovering,
    }
    if faults is not None:
        dl[f"{prefix}-Fault"] = faults if isinstance(faults, str) else json.dumps(faults, separators=(",", ":"))
    code = check_code({"DeviceList": go_map(dl), "UpdateTime": update_time}) if good_check else "0" * 64
    cfg = {
        "DeviceInfo": {"DeviceList": dl, "UpdateTime": update_time},
        "SuperPodID": -2,
        "ServerIndex": -2,
        "CheckCode": code,
    }
    data = {"DeviceInfoCfg": json.dumps(cfg, separators=(",", ":")), "ManuallySeparateNPU": ""}
    data.update(extra or {})
    return factories.configmap(f"mindx-dl-deviceinfo-{node}", data, uid="uid-1")


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        pytest.param("deviceinfo-healthy.json", [], id="healthy"),
        pytest.param(
            "deviceinfo-chip-restartbusiness.json",
            [
                (
                    FaultKind.CHIP,
                    FaultLevel.RESTART_BUSINESS,
                    "worker-07",
                    ("Ascend910-3",),
                    ("80E01801",),
                    True,
                    datetime(2026, 1, 1, 0, 0, 1, 123000, tzinfo=UTC),
                )
            ],
            id="restart-business",
        ),
        pytest.param(
            "deviceinfo-chip-separate-multi-code.json",
            [
                (
                    FaultKind.CHIP,
                    FaultLevel.SEPARATE,
                    "worker-02",
                    ("Ascend910-5",),
                    ("80E21007", "80E3A201"),
                    True,
                    datetime(2026, 1, 1, 1, 0, 0, 456000, tzinfo=UTC),
                )
            ],
            id="separate-multi-code",
        ),
        pytest.param(
            "deviceinfo-network-preseparate.json",
            [
                (
                    FaultKind.NETWORK,
                    FaultLevel.PRE_SEPARATE,
                    "worker-03",
                    ("Ascend910-1",),
                    ("81078603",),
                    True,
                    datetime(2026, 1, 1, 2, 0, 0, 789000, tzinfo=UTC),
                )
            ],
            id="network-preseparate",
        ),
        pytest.param(
            "deviceinfo-npu-prefix-restartnpu.json",
            [
                (
                    FaultKind.CHIP,
                    FaultLevel.RESTART_NPU,
                    "worker-950-01",
                    ("npu-6",),
                    ("80E18005",),
                    True,
                    datetime(2026, 1, 1, 3, 0, tzinfo=UTC),
                )
            ],
            id="npu-prefix",
        ),
        pytest.param(
            "deviceinfo-bad-checkcode.json",
            [
                (
                    FaultKind.CHIP,
                    FaultLevel.SEPARATE,
                    "worker-04",
                    ("Ascend910-2",),
                    ("A8028801",),
                    False,
                    datetime(2026, 1, 1, 4, 0, tzinfo=UTC),
                )
            ],
            id="bad-checkcode-used-and-flagged",
        ),
    ],
)
def test_fixture_faults(fixture: str, expected: list[tuple[object, ...]]) -> None:
    res = DeviceInfoDetector(TABLE).update(fixture_cm(fixture), NOW)
    got = [(f.kind, f.level, f.node, f.chips, f.codes, f.check_code_ok, f.signal_time) for f in res.faults]
    assert got == expected
    assert all(f.observed_at == NOW and f.source.name == fixture_cm(fixture).name for f in res.faults)
    reasons = [r.reason for r in res.rejections]
    assert reasons == (["bad-check-code"] if fixture == "deviceinfo-bad-checkcode.json" else [])


def test_bad_checkcode_ignored_when_configured() -> None:
    det = DeviceInfoDetector(TABLE, on_mismatch="ignore")
    res = det.update(fixture_cm("deviceinfo-bad-checkcode.json"), NOW)
    assert res.faults == []
    assert [r.reason for r in res.rejections] == ["bad-check-code"]


def test_rewrite_new_fault_and_clear() -> None:
    det = DeviceInfoDetector(TABLE)
    assert not det.update(device_cm([]), NOW)
    el = fault_el("Ascend910-3", "80E01801", "RestartBusiness")
    first = det.update(device_cm([el], unhealthy="Ascend910-3", update_time=1767225610), NOW)
    assert [(f.chips, f.level) for f in first.faults] == [(("Ascend910-3",), FaultLevel.RESTART_BUSINESS)]
    # heartbeat rewrite: new UpdateTime and CheckCode, same faults
    again = det.update(device_cm([el], unhealthy="Ascend910-3", update_time=1767225910), NOW + timedelta(minutes=5))
    assert not again
    gone = det.update(device_cm([], update_time=1767226000), NOW + timedelta(minutes=7))
    assert gone.faults == []
    assert [c.fault for c in gone.cleared] == first.faults
    assert gone.cleared[0].cleared_at == NOW + timedelta(minutes=7)


def test_level_change_clears_and_reemits() -> None:
    det = DeviceInfoDetector(TABLE)
    det.update(device_cm([fault_el("Ascend910-1", "80E18005", "RestartNPU")], unhealthy="Ascend910-1"), NOW)
    res = det.update(
        device_cm(
            [fault_el("Ascend910-1", "80E18005", "SeparateNPU")], unhealthy="Ascend910-1", update_time=1767225999
        ),
        NOW,
    )
    assert [f.level for f in res.faults] == [FaultLevel.SEPARATE]
    assert [c.fault.level for c in res.cleared] == [FaultLevel.RESTART_NPU]


def test_old_plugin_lists_only() -> None:
    res = DeviceInfoDetector(TABLE).update(
        device_cm(None, unhealthy="Ascend910-0,Ascend910-4", network="Ascend910-2", recovering="Ascend910-6"), NOW
    )
    got = sorted((f.kind, f.chips, f.level, f.reason) for f in res.faults)
    assert got == [
        (FaultKind.CHIP, ("Ascend910-0",), FaultLevel.SEPARATE, "CardUnhealthy"),
        (FaultKind.CHIP, ("Ascend910-4",), FaultLevel.SEPARATE, "CardUnhealthy"),
        (FaultKind.CHIP, ("Ascend910-6",), FaultLevel.NOT_HANDLE, "Recovering"),
        (FaultKind.NETWORK, ("Ascend910-2",), FaultLevel.PRE_SEPARATE, "CardNetworkUnhealthy"),
    ]
    assert all(f.signal_time == datetime.fromtimestamp(1767225603, UTC) for f in res.faults)


def test_broken_fault_string_keeps_unhealthy_list_and_previous_fault() -> None:
    det = DeviceInfoDetector(TABLE)
    first = det.update(
        device_cm([fault_el("Ascend910-3", "80E01801", "RestartBusiness")], unhealthy="Ascend910-3"), NOW
    )
    res = det.update(device_cm('[{"fault_type":', unhealthy="Ascend910-3,Ascend910-5", update_time=1767225700), NOW)
    assert [r.reason for r in res.rejections] == ["json-truncated"]
    assert [f.chips for f in res.faults] == [("Ascend910-5",)]  # the old chip-3 fault is carried over, not re-raised
    assert res.cleared == []
    fresh = DeviceInfoDetector(TABLE).update(device_cm("not json", unhealthy="Ascend910-3"), NOW)
    assert [(f.chips, f.level) for f in fresh.faults] == [(("Ascend910-3",), FaultLevel.SEPARATE)]
    assert [r.reason for r in fresh.rejections] == ["json-invalid"]
    assert first.faults


def test_manual_separation_and_switch() -> None:
    det = DeviceInfoDetector(TABLE)
    sw = json.dumps(
        {
            "FaultCode": ["8C2FA001"],
            "FaultLevel": "PreSeparateNPU",
            "UpdateTime": 1767225600,
            "NodeStatus": "PreSeparate",
        }
    )
    res = det.update(device_cm([], extra={"ManuallySeparateNPU": "Ascend910-1", "SwitchInfoCfg": sw}), NOW)
    got = sorted((f.kind, f.level, f.chips, f.reason) for f in res.faults)
    assert got == [
        (FaultKind.CHIP, FaultLevel.MANUALLY_SEPARATE, ("Ascend910-1",), "ManuallySeparateNPU"),
        (FaultKind.NODE, FaultLevel.PRE_SEPARATE, (), "SwitchFault"),
    ]
    res = det.update(device_cm([], extra={"ManuallySeparateNPU": "", "SwitchInfoCfg": sw}), NOW)
    assert [c.fault.reason for c in res.cleared] == ["ManuallySeparateNPU"]


def test_delete_clears_everything() -> None:
    det = DeviceInfoDetector(TABLE)
    det.update(fixture_cm("deviceinfo-chip-restartbusiness.json"), NOW)
    res = det.delete("kube-system", "mindx-dl-deviceinfo-worker-07", NOW)
    assert [c.fault.chips for c in res.cleared] == [("Ascend910-3",)]
    assert len(det) == 0


def test_fault_config_fills_only_levels_the_reporter_left_out() -> None:
    overrides, rej = parse_fault_config(fixture_cm("fault-config-cm.json"))
    assert rej == []
    assert overrides is not None
    assert overrides["A8028801"] is FaultLevel.SEPARATE
    det = DeviceInfoDetector(TABLE)
    # the plugin says RestartBusiness; the override lists 81078605 as SubHealthFault: the plugin's word is final
    det.update(device_cm([fault_el("Ascend910-0", "81078605", "RestartBusiness")], unhealthy="Ascend910-0"), NOW)
    assert not det.set_table(TABLE.with_overrides(overrides), NOW)
    # an element without a level takes the override's
    res = det.update(
        device_cm([fault_el("Ascend910-0", "81078605", "")], unhealthy="Ascend910-0", update_time=1767225700), NOW
    )
    assert [f.level for f in res.faults] == [FaultLevel.SUB_HEALTH]
    assert [c.fault.level for c in res.cleared] == [FaultLevel.RESTART_BUSINESS]


def _mindcluster_fault_config() -> dict[str, str]:
    """A mindx-dl-fault-config made from MindCluster's whole faultCode.json (the documented way): every list of
    the shipped chip table, which is generated from that file."""
    doc = yaml.safe_load((ROOT / "agent" / "core" / "detect" / "data" / "fault_levels.yaml").read_text())
    lists = {k: v for k, v in doc.items() if k.endswith("Codes")}
    return {"faultCode.json": json.dumps(lists)}


def test_full_mindcluster_fault_config_keeps_the_plugins_escalated_level() -> None:
    """Issue 14: a fault-config ConfigMap made from MindCluster's full file replaced the level the device plugin
    wrote, so a chip the plugin escalated to SeparateNPU (frequency rule) became RestartBusiness again."""
    overrides, rej = parse_fault_config(_mindcluster_fault_config())
    assert rej == []
    assert overrides is not None
    assert overrides["80E01801"] is FaultLevel.RESTART_BUSINESS
    det = DeviceInfoDetector(TABLE.with_overrides(overrides))
    res = det.update(device_cm([fault_el("Ascend910-5", "80E01801", "SeparateNPU")], unhealthy="Ascend910-5"), NOW)
    assert [(f.chips, f.level) for f in res.faults] == [(("Ascend910-5",), FaultLevel.SEPARATE)]
    # and re-reading with the table again changes nothing
    assert not det.set_table(TABLE.with_overrides(overrides), NOW)


@pytest.mark.parametrize(
    ("codes", "reported", "by_code", "kind", "overrides", "expected"),
    [
        pytest.param(("80E01801",), None, {}, "chip", {}, FaultLevel.RESTART_BUSINESS, id="shipped"),
        pytest.param(("DEADBEEF",), None, {}, "chip", {}, FaultLevel.SEPARATE, id="unknown-chip"),
        pytest.param(("DEADBEEF",), None, {}, "network", {}, FaultLevel.PRE_SEPARATE, id="unknown-network"),
        pytest.param((), None, {}, "chip", {}, FaultLevel.SEPARATE, id="no-codes"),
        pytest.param(("80E01801",), FaultLevel.RESTART_NPU, {}, "chip", {}, FaultLevel.RESTART_NPU, id="reporter"),
        pytest.param(("80E01801", "80E3A201"), None, {}, "chip", {}, FaultLevel.SEPARATE, id="most-severe-code"),
        pytest.param(
            ("80E01801", "80E21007"),
            FaultLevel.RESTART_BUSINESS,
            {},
            "chip",
            {"80E21007": FaultLevel.SEPARATE},
            FaultLevel.RESTART_BUSINESS,
            id="override-never-raises-the-reporters",
        ),
        pytest.param(
            ("80E01801",),
            FaultLevel.RESTART_BUSINESS,
            {},
            "chip",
            {"80E01801": FaultLevel.NOT_HANDLE},
            FaultLevel.RESTART_BUSINESS,
            id="override-never-lowers-the-reporters",
        ),
        pytest.param(
            ("AAAAAAAA",),
            None,
            {"AAAAAAAA": FaultLevel.RESTART_NPU},
            "chip",
            {},
            FaultLevel.RESTART_NPU,
            id="per-code-reported",
        ),
    ],
)
def test_level_resolution(codes, reported, by_code, kind, overrides, expected) -> None:  # type: ignore[no-untyped-def]
    assert TABLE.with_overrides(overrides).resolve(codes, reported, by_code, kind) is expected


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param({"faultCode.json": "{"}, "json-truncated", id="truncated"),
        pytest.param({}, "missing-key", id="missing"),
        pytest.param({"faultCode.json": "[]"}, "wrong-type", id="not-object"),
        pytest.param({"faultCode.json": '{"SeparateNPUCodes":"x"}'}, "wrong-type", id="list-not-list"),
        pytest.param({"faultCode.json": '{"SeparateNPUCodes":["zz"]}'}, "bad-code", id="bad-code"),
        pytest.param({"faultCode.json": '{"BogusCodes":[]}'}, "unknown-list", id="unknown-list"),
    ],
)
def test_fault_config_rejections(data: dict[str, str], reason: str) -> None:
    _, rej = parse_fault_config(data)
    assert [r.reason for r in rej] == [reason]


def test_flapping_escalates_third_fault_within_window() -> None:
    flap = FlapTracker(3, timedelta(hours=24))
    det = DeviceInfoDetector(TABLE, flapping=flap)
    levels = []
    for i in range(3):
        t_ms = 1767225601000 + i * 3_600_000
        ut = 1767225603 + i * 3600
        res = det.update(
            device_cm(
                [fault_el("Ascend910-2", "80E01801", "RestartBusiness", t_ms=t_ms)],
                unhealthy="Ascend910-2",
                update_time=ut,
            ),
            NOW,
        )
        levels += [(f.level, f.reason) for f in res.faults]
        det.update(device_cm([], update_time=ut + 60), NOW)
    assert levels == [
        (FaultLevel.RESTART_BUSINESS, "CardUnhealthy"),
        (FaultLevel.RESTART_BUSINESS, "CardUnhealthy"),
        (FaultLevel.MANUALLY_SEPARATE, "CardUnhealthy+Flapping"),
    ]


@pytest.mark.parametrize(
    ("level", "escalated_to"),
    [
        pytest.param("RestartRequest", FaultLevel.MANUALLY_SEPARATE, id="restart-request"),
        pytest.param("RestartNPU", FaultLevel.MANUALLY_SEPARATE, id="restart-npu"),
        pytest.param("PreSeparateNPU", FaultLevel.MANUALLY_SEPARATE, id="pre-separate"),
        pytest.param("SeparateNPU", FaultLevel.MANUALLY_SEPARATE, id="separate-counts"),
        pytest.param("ManuallySeparateNPU", FaultLevel.MANUALLY_SEPARATE, id="manually-separate-not-lowered"),
        pytest.param("SubHealthFault", None, id="sub-health-never"),
        pytest.param("NotHandleFault", None, id="not-handle-never"),
    ],
)
def test_flapping_counts_every_level_that_takes_the_chip_out(level: str, escalated_to: FaultLevel | None) -> None:
    """Issue 13 A.2: a chip flapping at SeparateNPU (the injector's default) was never counted."""
    det = DeviceInfoDetector(TABLE, flapping=FlapTracker(3, timedelta(hours=24)))
    last = None
    for i in range(3):
        res = det.update(
            device_cm(
                [fault_el("Ascend910-2", "80E01801", level, t_ms=1767225601000 + i * 60_000)],
                unhealthy="Ascend910-2",
                update_time=1767225603 + i * 60,
            ),
            NOW,
        )
        last = res.faults[-1]
        det.update(device_cm([], update_time=1767225630 + i * 60), NOW)
    assert last is not None
    if escalated_to is None:
        assert "Flapping" not in last.reason
    else:
        assert (last.level, last.reason) == (escalated_to, "CardUnhealthy+Flapping")


@pytest.mark.parametrize(
    ("gap_hours", "times", "escalated"),
    [
        pytest.param(1, None, False, id="two-below-threshold"),
        pytest.param(1, 2, True, id="code-rule-two"),
        pytest.param(30, 2, False, id="outside-window"),
    ],
)
def test_flapping_thresholds(gap_hours: int, times: int | None, escalated: bool) -> None:
    rules = FaultCustomization({"80E01801": FrequencyRule(86400, times, FaultLevel.MANUALLY_SEPARATE)} if times else {})
    flap = FlapTracker(3, timedelta(hours=24), rules)
    det = DeviceInfoDetector(TABLE, flapping=flap)
    last = None
    for i in range(2):
        t_ms = int(NOW.timestamp() * 1000) - (gap_hours + 1) * 3_600_000 + i * gap_hours * 3_600_000
        res = det.update(
            device_cm(
                [fault_el("Ascend910-2", "80E01801", "RestartBusiness", t_ms=t_ms)],
                unhealthy="Ascend910-2",
                update_time=1767225603 + i,
            ),
            NOW,
        )
        last = res.faults[-1]
        det.update(device_cm([], update_time=1767225700 + i), NOW)
    assert last is not None
    assert (last.level is FaultLevel.MANUALLY_SEPARATE) is escalated


BAD_FAULT_INPUTS = [
    pytest.param("[1]", "wrong-type", id="element-not-object"),
    pytest.param('{"a":1}', "wrong-type", id="fault-not-array"),
    pytest.param([fault_el("Ascend910-1", "80E01801", "Bogus")], "unknown-level", id="unknown-level"),
    pytest.param([fault_el("Ascend910-1", "80E01801", "")], "empty-level", id="empty-level"),
    pytest.param([fault_el("Ascend910-1", "XYZ", "RestartNPU")], "bad-code", id="non-hex-code"),
    pytest.param([fault_el("", "80E01801", "RestartNPU")], "missing-key", id="no-npu-name"),
    pytest.param(
        [fault_el("Ascend910-1", "80E01801", "RestartNPU", ftype="Weird")],
        "unknown-fault-type",
        id="unknown-fault-type",
    ),
    pytest.param([fault_el("Ascend910-1", "80E01801", "RestartNPU", t_ms=-5)], "bad-timestamp", id="negative-time"),
    pytest.param(
        [fault_el("Ascend910-1", "80E01801", "RestartNPU", t_ms=1767225601)], "bad-timestamp", id="seconds-as-ms"
    ),
    pytest.param(
        [{**fault_el("Ascend910-1", "80E01801", "RestartNPU"), "fault_code": 5}], "wrong-type", id="code-wrong-type"
    ),
]


@pytest.mark.parametrize(("faults", "reason"), BAD_FAULT_INPUTS)
def test_bad_fault_element_rejected(faults: list[dict[str, Any]] | str, reason: str) -> None:
    res = DeviceInfoDetector(TABLE).update(device_cm(faults, unhealthy="Ascend910-1"), NOW)
    assert reason in {r.reason for r in res.rejections}
    assert all(r.source.name == "mindx-dl-deviceinfo-w1" for r in res.rejections)
    # the chip listed in -Unhealthy is never lost
    assert ("Ascend910-1",) in [f.chips for f in res.faults]


def _raw(text: str) -> ConfigMapRecord:
    return factories.configmap("mindx-dl-deviceinfo-w1", {"DeviceInfoCfg": text}, uid="u")


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        pytest.param(_raw('{"DeviceInfo":{"DeviceList":{'), "json-truncated", id="truncated"),
        pytest.param(_raw("[1,2]"), "wrong-type", id="top-not-object"),
        pytest.param(_raw('{"CheckCode":"ab"}'), "missing-key", id="no-deviceinfo"),
        pytest.param(
            _raw('{"DeviceInfo":{"DeviceList":{},"UpdateTime":1767225603}}'), "missing-check-code", id="no-checkcode"
        ),
        pytest.param(
            _raw('{"DeviceInfo":{"DeviceList":{"x":1},"UpdateTime":1767225603},"CheckCode":"a"}'),
            "wrong-type",
            id="value-not-string",
        ),
        pytest.param(
            _raw('{"DeviceInfo":{"DeviceList":{},"UpdateTime":-1},"CheckCode":"a"}'),
            "bad-timestamp",
            id="negative-update-time",
        ),
        pytest.param(
            _raw('{"DeviceInfo":{"DeviceList":{},"UpdateTime":1767225603000},"CheckCode":"a"}'),
            "bad-timestamp",
            id="ms-as-seconds",
        ),
        pytest.param(
            _raw('{"DeviceInfo":{"DeviceList":{},"UpdateTime":"x"},"CheckCode":"a"}'),
            "wrong-type",
            id="update-time-string",
        ),
        pytest.param(_raw(" " * ((1 << 20) + 1)), "value-too-large", id="over-1mib"),
        pytest.param(factories.configmap("mindx-dl-deviceinfo-w1", {}, uid="u"), "missing-key", id="missing-key"),
        pytest.param(factories.configmap("other-cm", {}, uid="u"), "unexpected-name", id="bad-name"),
    ],
)
def test_bad_configmap_rejected(record: ConfigMapRecord, reason: str) -> None:
    det = DeviceInfoDetector(TABLE)
    res = det.update(record, NOW)
    assert reason in {r.reason for r in res.rejections}
    # logged once: the same bad content again is not rejected again
    assert det.update(record, NOW).rejections == []


def test_torn_update_keeps_previous_view() -> None:
    det = DeviceInfoDetector(TABLE)
    det.update(fixture_cm("deviceinfo-chip-restartbusiness.json"), NOW)
    torn = factories.configmap("mindx-dl-deviceinfo-worker-07", {"DeviceInfoCfg": "{"}, uid="u", resource_version="2")
    res = det.update(torn, NOW)
    assert res.cleared == []
    assert res.faults == []
    assert [r.reason for r in res.rejections] == ["json-truncated"]


def test_heartbeat_with_bad_checkcode_keeps_faults_and_flags_once() -> None:
    det = DeviceInfoDetector(TABLE)
    el = fault_el("Ascend910-3", "80E01801", "RestartBusiness")
    first = det.update(device_cm([el], unhealthy="Ascend910-3"), NOW)
    res = det.update(device_cm([el], unhealthy="Ascend910-3", update_time=1767225700, good_check=False), NOW)
    assert res.cleared == []
    assert res.faults == []
    assert [r.reason for r in res.rejections] == ["bad-check-code"]
    assert first.faults[0].check_code_ok


def test_fast_path_matches_full_path_on_a_stream() -> None:
    fast, slow = DeviceInfoDetector(TABLE), DeviceInfoDetector(TABLE, fast_path=False)
    el = fault_el("Ascend910-3", "80E01801", "RestartBusiness")
    stream = [
        device_cm([el] if i % 3 else [], unhealthy="Ascend910-3" if i % 3 else "", update_time=1767225603 + i)
        for i in range(9)
    ]
    for cm in stream:
        a, b = fast.update(cm, NOW), slow.update(cm, NOW)
        assert (a.faults, a.cleared) == (b.faults, b.cleared)


def test_a_fault_reclassified_by_level_table_reloads_is_not_counted_as_flapping() -> None:
    """One occurrence read again at new levels (the operator edits the level table back and forth) is one fault of
    the chip, not three: found by the hot-reload testbed test once every level from RestartRequest up counted."""
    flap = FlapTracker(3, timedelta(hours=24))
    det = DeviceInfoDetector(TABLE, flapping=flap)
    t_ms = 1767225601000
    first = det.update(
        device_cm([fault_el("Ascend910-3", "80E01801", "", t_ms=t_ms)], unhealthy="Ascend910-3"), NOW
    ).faults
    assert [f.level for f in first] == [FaultLevel.RESTART_BUSINESS]
    levels = []
    for lists in ('{"SeparateNPUCodes":["80E01801"]}', '{"RestartBusinessCodes":["80E01801"]}') * 2:
        overrides, rejections = parse_fault_config(
            {"faultCode.json": lists}, ObjectRef("ConfigMap", "kube-system", "x")
        )
        assert overrides is not None
        assert rejections == []
        res = det.set_table(TABLE.with_overrides(overrides), NOW)
        levels += [(f.level, f.reason.endswith("+Flapping")) for f in res.faults]
    assert levels == [(FaultLevel.SEPARATE, False), (FaultLevel.RESTART_BUSINESS, False)] * 2
    assert flap.count("w1", "Ascend910-3", NOW) == 1


def go_device_cm(
    faults: list[dict[str, Any]] | None = None,
    *,
    update_time: int = 1767225603,
    node: str = "w1",
    good_check: bool = True,
    upper_code: bool = False,
) -> ConfigMapRecord:
    """A device ConfigMap as the Go device plugin writes it (DeviceList keys sorted, no spaces: the text the
    CheckCode covers), healthy unless `faults`."""
    dl = go_map({
        P: ",".join(f"Ascend910-{i}" for i in range(8)),
        f"{P}-Fault": json.dumps(faults or [], separators=(",", ":")),
        f"{P}-NetworkUnhealthy": "",
        f"{P}-Recovering": "",
        f"{P}-Unhealthy": ",".join(f["npu_name"] for f in faults or []),
    })  # fmt: skip
    code = check_code({"DeviceList": dl, "UpdateTime": update_time}) if good_check else "0" * 64
    cfg = {"DeviceInfo": {"DeviceList": dl, "UpdateTime": update_time}, "SuperPodID": -2, "ServerIndex": -2,
           "CheckCode": code.upper() if upper_code else code}  # fmt: skip
    data = {"DeviceInfoCfg": json.dumps(cfg, separators=(",", ":")), "ManuallySeparateNPU": ""}
    return factories.configmap(f"mindx-dl-deviceinfo-{node}", data, uid=f"uid-{node}")


def _counting_parse(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    import agent.core.detect.deviceinfo.detector as detector_module

    calls: list[str] = []
    real = detector_module.parse_device_info

    def counting(cfg: Any, node: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(node)
        return real(cfg, node, *args, **kwargs)

    monkeypatch.setattr(detector_module, "parse_device_info", counting)
    return calls


def _seen(result: Any) -> tuple[list[Any], list[Any], list[tuple[str, str]]]:
    return (
        sorted((f.node, f.chips, f.codes, f.level, f.signal_time) for f in result.faults),
        sorted((c.fault.node, c.fault.chips, c.fault.codes) for c in result.cleared),
        [(r.reason, r.detail) for r in result.rejections],
    )


def test_a_heartbeat_and_a_list_read_before_are_not_parsed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 39: a healthy device ConfigMap whose content did not change in what the detector reads (the plugin's
    heartbeat: only UpdateTime and its CheckCode new), and a healthy DeviceList another node already reported, cost
    no JSON parse, CheckCode encoding or classification; what they yield is what a full read yields."""
    calls = _counting_parse(monkeypatch)
    det = DeviceInfoDetector(TABLE)
    assert not det.update(go_device_cm(update_time=1767225600), NOW)
    assert calls == ["w1"]
    assert not det.update(go_device_cm(update_time=1767225900), NOW)  # heartbeat
    assert not det.update(go_device_cm(update_time=1767226200, node="w2"), NOW)  # same healthy list, another node
    assert calls == ["w1"]
    assert det._state[("kube-system", "mindx-dl-deviceinfo-w1")].update_time == datetime.fromtimestamp(1767225900, UTC)
    assert det._state[("kube-system", "mindx-dl-deviceinfo-w2")].update_time == datetime.fromtimestamp(1767226200, UTC)


@pytest.mark.parametrize("nodes", [1, 3], ids=["one-node", "three-nodes"])
def test_the_heartbeat_and_known_list_paths_match_a_full_read(nodes: int) -> None:
    """The same stream through the fast paths and through full reads: the same faults, clears and rejections
    (a CheckCode that does not match, or one in upper case, is read in full; each write reports its rejections)."""
    fault = fault_el("Ascend910-2", "80E01801", "RestartBusiness", t_ms=1767225700000)
    stream: list[ConfigMapRecord] = []
    for n in range(nodes):
        node = f"w{n}"
        stream += [
            go_device_cm(update_time=1767225600, node=node),
            go_device_cm(update_time=1767225900, node=node),
            go_device_cm(update_time=1767226000, node=node, good_check=False),
            go_device_cm(update_time=1767226100, node=node, good_check=False),
            go_device_cm(update_time=1767226200, node=node),
            go_device_cm(update_time=1767226300, node=node, upper_code=True),
            go_device_cm([fault], update_time=1767226400, node=node),
            go_device_cm([fault], update_time=1767226700, node=node),
            go_device_cm(update_time=1767227000, node=node),
            go_device_cm(update_time=NOW.timestamp().__int__() + 10 * 86400, node=node),  # out of range
            go_device_cm(update_time=1767227300, node=node),
        ]
    fast, slow = DeviceInfoDetector(TABLE), DeviceInfoDetector(TABLE, fast_path=False)
    rejected: list[str] = []
    raised = 0
    for i, cm in enumerate(stream):
        cm = factories.configmap(cm.name, cm.data, uid=cm.uid, resource_version=str(i))
        full = _seen(slow.update(cm, NOW))
        assert _seen(fast.update(cm, NOW)) == full, i
        rejected += [reason for reason, _ in full[2]]
        raised += len(full[0])
    assert rejected.count("bad-check-code") == 2 * nodes  # each write with a bad CheckCode reports it
    assert rejected.count("bad-timestamp") == nodes
    assert raised >= nodes  # the chip fault was raised on every node
