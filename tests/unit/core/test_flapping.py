"""Per-chip flapping with MindCluster's faultCustomization.json rules (frequency and duration), on an injected clock.

MindCluster's defaults (component/ascend-device-plugin/build/faultCustomization.json at 22bb3d98): 41 codes such as
80E01801 isolate a chip after 2 occurrences in 86400 s, 80E18005 after 3, 81078603 after 5 (released after 172800 s
of health); 81078603 active for 20 s is PreSeparateNPU until it has been gone 60 s.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support import factories

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.common import Rejections
from agent.core.detect.customization import (
    FaultCustomization,
    FrequencyRule,
    load_shipped_customization,
    parse_customization,
)
from agent.core.detect.deviceinfo import DeviceInfoDetector
from agent.core.detect.flapping import FlapTracker
from agent.core.detect.levels import load_shipped_table, parse_fault_config
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
TABLE = load_shipped_table()
RULES = TABLE.customization
SRC = ObjectRef("ConfigMap", "kube-system", "mindx-dl-deviceinfo-n1")
L = FaultLevel


def fault(
    at: timedelta,
    code: str = "80E01801",
    chip: str = "Ascend910-2",
    level: FaultLevel = L.RESTART_BUSINESS,
    kind: FaultKind = FaultKind.CHIP,
) -> Fault:
    """A fault seen at T0 + `at` whose signal time is the same instant."""
    t = T0 + at
    return factories.fault(kind=kind, level=level, chips=(chip,), codes=(code,), at=t, source=SRC)


def tracker(threshold: int = 0, rules: FaultCustomization = RULES, release_h: float = 24) -> FlapTracker:
    return FlapTracker(threshold, timedelta(hours=24), rules, release=timedelta(hours=release_h))


def test_the_shipped_rules_are_mindclusters() -> None:
    text = (Path(__file__).resolve().parents[3] / "agent/core/detect/data/fault_customization.yaml").read_text()
    assert load_shipped_customization(text) == RULES
    assert len(RULES.frequency) == 43
    assert RULES.frequency["80E01801"] == FrequencyRule(86400, 2, L.MANUALLY_SEPARATE, None)
    assert RULES.frequency["80E18005"] == FrequencyRule(86400, 3, L.MANUALLY_SEPARATE, None)
    assert RULES.frequency["81078603"] == FrequencyRule(86400, 5, L.MANUALLY_SEPARATE, 172800)
    assert RULES.duration["81078603"].fault_timeout_s == 20
    assert RULES.duration["81078603"].recover_timeout_s == 60
    assert RULES.duration["81078603"].handling is L.PRE_SEPARATE


@pytest.mark.parametrize(
    ("code", "gaps_h", "isolated_at"),
    [
        pytest.param("80E01801", [0, 5], 1, id="two-in-a-day-isolates"),
        pytest.param("80E01801", [0, 25], None, id="a-day-apart-does-not"),
        pytest.param("80E18005", [0, 1], None, id="rule-of-three-two"),
        pytest.param("80E18005", [0, 1, 2], 2, id="rule-of-three-three"),
        pytest.param("80E3A201", [0, 1, 2, 3], None, id="code-without-a-rule"),
    ],
)
def test_frequency_rules(code: str, gaps_h: list[int], isolated_at: int | None) -> None:
    flap = tracker()
    out = [flap.observe(fault(timedelta(hours=h), code)) for h in gaps_h]
    for i, f in enumerate(out):
        if isolated_at is not None and i >= isolated_at:
            assert (f.level, f.reason) == (L.MANUALLY_SEPARATE, "CardUnhealthy+Flapping")
        else:
            assert (f.level, f.reason) == (L.RESTART_BUSINESS, "CardUnhealthy")
    assert flap.is_isolated("n1", ["Ascend910-2"]) is (isolated_at is not None)


def test_only_that_chip_is_isolated_and_counts_are_per_chip() -> None:
    flap = tracker()
    flap.observe(fault(timedelta(0), chip="Ascend910-2"))
    assert flap.observe(fault(timedelta(minutes=1), chip="Ascend910-3")).level is L.RESTART_BUSINESS
    assert flap.observe(fault(timedelta(minutes=2), chip="Ascend910-2")).level is L.MANUALLY_SEPARATE
    assert set(flap.isolated) == {("n1", "Ascend910-2")}
    # any later fault of the isolated chip, whatever its code, is ManuallySeparateNPU
    later = flap.observe(fault(timedelta(hours=1), code="80E3A201", level=L.SEPARATE))
    assert (later.level, later.reason) == (L.MANUALLY_SEPARATE, "CardUnhealthy+Flapping")
    assert flap.observe(fault(timedelta(hours=1), chip="Ascend910-4")).level is L.RESTART_BUSINESS


def test_the_same_occurrence_read_again_counts_once() -> None:
    flap = tracker()
    first = fault(timedelta(0))
    flap.observe(first)
    again = Fault(**{**{s: getattr(first, s) for s in first.__slots__}, "observed_at": T0 + timedelta(minutes=5)})
    assert flap.observe(again).level is L.RESTART_BUSINESS
    assert flap.code_count("n1", "Ascend910-2", "80E01801", T0 + timedelta(minutes=5)) == 1


def test_release_after_the_chip_has_been_healthy_for_its_release_time() -> None:
    flap = tracker(release_h=24)
    flap.observe(fault(timedelta(0)))
    tripped = flap.observe(fault(timedelta(hours=1)))
    flap.cleared(tripped, T0 + timedelta(hours=2))
    assert flap.released(T0 + timedelta(hours=25)) == []
    # faulting again while isolated restarts the healthy time
    again = flap.observe(fault(timedelta(hours=20), code="80E3A201"))
    assert again.level is L.MANUALLY_SEPARATE
    flap.cleared(again, T0 + timedelta(hours=21))
    assert flap.released(T0 + timedelta(hours=44, minutes=59)) == []
    assert flap.released(T0 + timedelta(hours=45)) == [("n1", "Ascend910-2")]
    assert not flap.is_isolated("n1", ["Ascend910-2"])
    # counts start afresh after the release
    assert flap.observe(fault(timedelta(hours=46))).level is L.RESTART_BUSINESS


def test_release_time_window_of_the_rule() -> None:
    """81078603 (link down) isolates after 5 in a day and is released after 172800 s of health."""
    flap = tracker(release_h=1)
    out = [flap.observe(fault(timedelta(minutes=m), "81078603", kind=FaultKind.NETWORK, level=L.NOT_HANDLE))
           for m in range(5)]  # fmt: skip
    assert [f.level for f in out] == [L.NOT_HANDLE] * 4 + [L.MANUALLY_SEPARATE]
    flap.cleared(out[-1], T0 + timedelta(minutes=10))
    assert flap.released(T0 + timedelta(hours=47)) == []
    assert flap.released(T0 + timedelta(hours=48, minutes=10)) == [("n1", "Ascend910-2")]


def test_catch_all_rule_is_the_agents_and_can_be_off() -> None:
    on, off = tracker(threshold=3), tracker(threshold=0)
    codes = ["80E3A201", "8C03A000", "80C98002"]  # three codes without a frequency rule
    got_on = [on.observe(fault(timedelta(hours=i), c, level=L.SEPARATE)).level for i, c in enumerate(codes)]
    got_off = [off.observe(fault(timedelta(hours=i), c, level=L.SEPARATE)).level for i, c in enumerate(codes)]
    assert got_on == [L.SEPARATE, L.SEPARATE, L.MANUALLY_SEPARATE]
    assert got_off == [L.SEPARATE] * 3
    with pytest.raises(ValueError, match=r"0 \(off\) or >= 2"):
        FlapTracker(1, timedelta(hours=1))


def test_duration_rule() -> None:
    flap = tracker()
    link = fault(timedelta(0), "81078603", kind=FaultKind.NETWORK, level=L.NOT_HANDLE)
    assert flap.observe(link).level is L.NOT_HANDLE
    assert flap.duration_level(link, T0 + timedelta(seconds=19)) is None
    assert flap.duration_level(link, T0 + timedelta(seconds=20)) is L.PRE_SEPARATE
    escalated = Fault(**{**{s: getattr(link, s) for s in link.__slots__}, "level": L.PRE_SEPARATE})
    flap.cleared(escalated, T0 + timedelta(seconds=30))
    # back within RecoverTimeout (60 s): escalated at once; after it: read as reported
    assert flap.observe(fault(timedelta(seconds=80), "81078603", kind=FaultKind.NETWORK, level=L.NOT_HANDLE)).level \
        is L.PRE_SEPARATE  # fmt: skip
    flap2 = tracker()
    flap2.observe(link)
    flap2.cleared(escalated, T0 + timedelta(seconds=30))
    assert flap2.observe(fault(timedelta(seconds=91), "81078603", kind=FaultKind.NETWORK, level=L.NOT_HANDLE)).level \
        is L.NOT_HANDLE  # fmt: skip


def _device_cm(els: list[dict[str, Any]], update_time: int, unhealthy: str = "") -> ConfigMapRecord:
    dl = {
        "huawei.com/Ascend910": "Ascend910-0",
        "huawei.com/Ascend910-Unhealthy": unhealthy,
        "huawei.com/Ascend910-Fault": json.dumps(els),
    }
    cfg = {"DeviceInfo": {"DeviceList": dl, "UpdateTime": update_time}}
    return factories.configmap(
        "mindx-dl-deviceinfo-n1", {"DeviceInfoCfg": json.dumps(cfg)}, uid="u", resource_version=str(update_time)
    )


def _el(chip: str, code: str, level: str, t: datetime, ftype: str = "CardUnhealthy") -> dict[str, Any]:
    ms = int(t.timestamp() * 1000)
    return {"fault_type": ftype, "npu_name": chip, "fault_handling": level, "fault_code": code,
            "fault_time_and_level_map": {code: {"fault_time": ms, "fault_level": level}}}  # fmt: skip


def test_detector_holds_an_isolated_chips_clear_until_release() -> None:
    """The flapping chip's fault stays active (ManuallySeparateNPU) while the plugin says it is healthy again, and
    clears only when the chip has been healthy for its release time (tick with the injected clock)."""
    flap = tracker(release_h=24)
    det = DeviceInfoDetector(TABLE, flapping=flap, check_code=False)
    ut = int(T0.timestamp())
    res = det.update(_device_cm([_el("Ascend910-2", "80E01801", "RestartBusiness", T0)], ut), T0)
    assert [f.level for f in res.faults] == [L.RESTART_BUSINESS]
    res = det.update(_device_cm([], ut + 60), T0 + timedelta(minutes=1))
    assert [c.fault.level for c in res.cleared] == [L.RESTART_BUSINESS]
    t2 = T0 + timedelta(hours=1)
    res = det.update(_device_cm([_el("Ascend910-2", "80E01801", "RestartBusiness", t2)], ut + 3600), t2)
    assert [(f.chips, f.level, f.reason) for f in res.faults] == [
        (("Ascend910-2",), L.MANUALLY_SEPARATE, "CardUnhealthy+Flapping")
    ]
    healthy = t2 + timedelta(minutes=1)
    res = det.update(_device_cm([], ut + 3660), healthy)
    assert not res.cleared  # held: the chip stays isolated
    assert not det.tick(healthy + timedelta(hours=23))
    res = det.tick(healthy + timedelta(hours=24))
    assert [(c.fault.chips, c.fault.level) for c in res.cleared] == [(("Ascend910-2",), L.MANUALLY_SEPARATE)]
    assert not det.tick(healthy + timedelta(hours=25))


def test_detector_tick_applies_duration_rules() -> None:
    det = DeviceInfoDetector(TABLE, flapping=tracker(), check_code=False)
    ut = int(T0.timestamp())
    el = _el("Ascend910-0", "81078603", "NotHandleFault", T0, ftype="CardNetworkUnhealthy")
    res = det.update(_device_cm([el], ut), T0)
    assert [(f.kind, f.level) for f in res.faults] == [(FaultKind.NETWORK, L.NOT_HANDLE)]
    assert not det.tick(T0 + timedelta(seconds=19))
    res = det.tick(T0 + timedelta(seconds=20))
    assert [c.fault.level for c in res.cleared] == [L.NOT_HANDLE]
    assert [(f.kind, f.level) for f in res.faults] == [(FaultKind.NETWORK, L.PRE_SEPARATE)]
    assert not det.tick(T0 + timedelta(seconds=40))  # once
    # the plugin rewrites the same content: nothing new
    assert not det.update(_device_cm([el], ut + 5), T0 + timedelta(seconds=45))


def test_fault_config_key_replaces_the_rules_and_its_absence_restores_the_defaults() -> None:
    custom = {"FaultFrequency": [{"EventId": ["80e3a201"], "TimeWindow": 3600, "Times": 2,
                                  "FaultHandling": "ManuallySeparateNPU"}]}  # fmt: skip
    cfg, rej = parse_fault_config({"faultCode.json": "{}", "faultCustomization.json": json.dumps(custom)})
    assert rej == []
    assert cfg is not None
    table = TABLE.with_overrides(cfg)
    assert set(table.customization.frequency) == {"80E3A201"}
    assert table.customization.duration == {}
    cfg, rej = parse_fault_config({"faultCode.json": "{}"})
    assert cfg is not None
    assert table.with_overrides(cfg).customization == RULES
    cfg, rej = parse_fault_config({"faultCode.json": "{}", "faultCustomization.json": "{"})
    assert [r.reason for r in rej] == ["json-truncated"]
    assert cfg is not None
    assert table.with_overrides(cfg).customization == RULES  # unreadable: the defaults, as the plugin does


def test_a_reload_applies_new_rules_to_the_detectors_tracker() -> None:
    flap = tracker()
    det = DeviceInfoDetector(TABLE, flapping=flap, check_code=False)
    cfg, _ = parse_fault_config({"faultCode.json": "{}", "faultCustomization.json": '{"FaultFrequency": []}'})
    assert cfg is not None
    det.set_table(TABLE.with_overrides(cfg), T0)
    assert flap.rules.frequency == {}


def _rule(**kw: Any) -> dict[str, Any]:
    return {"EventId": ["80E01801"], "TimeWindow": 86400, "Times": 2, "FaultHandling": "ManuallySeparateNPU", **kw}


@pytest.mark.parametrize(
    ("section", "rule", "reason"),
    [
        pytest.param("FaultFrequency", _rule(TimeWindow=59), "out-of-range", id="window-too-short"),
        pytest.param("FaultFrequency", _rule(TimeWindow=864001), "out-of-range", id="window-too-long"),
        pytest.param("FaultFrequency", _rule(Times=0), "out-of-range", id="times-zero"),
        pytest.param("FaultFrequency", _rule(Times=101), "out-of-range", id="times-too-many"),
        pytest.param("FaultFrequency", _rule(ReleaseTimeWindow=59), "out-of-range", id="release-too-short"),
        pytest.param("FaultFrequency", _rule(FaultHandling="SeparateNPU"), "release-required", id="release-required"),
        pytest.param("FaultFrequency", _rule(FaultHandling="SeparateFault"), "unknown-level", id="noded-level"),
        pytest.param("FaultFrequency", _rule(Times="2"), "wrong-type", id="times-string"),
        pytest.param("FaultFrequency", _rule(EventId=[]), "missing-key", id="no-event-id"),
        pytest.param("FaultFrequency", _rule(EventId=["zz"]), "bad-code", id="bad-code"),
        pytest.param("FaultDuration", {"EventId": ["81078603"], "FaultTimeout": 601, "RecoverTimeout": 60,
                                       "FaultHandling": "PreSeparateNPU"}, "out-of-range", id="timeout-too-long"),
        pytest.param("FaultDuration", {"EventId": ["81078603"], "FaultTimeout": 20, "RecoverTimeout": 86401,
                                       "FaultHandling": "PreSeparateNPU"}, "out-of-range", id="recover-too-long"),
        pytest.param("FaultDuration", {"EventId": ["81078603"], "FaultTimeout": 20, "RecoverTimeout": 60,
                                       "FaultHandling": "ManuallySeparateNPU"}, "unknown-level", id="no-manual"),
    ],
)  # fmt: skip
def test_invalid_rules_are_skipped_with_a_reason(section: str, rule: dict[str, Any], reason: str) -> None:
    rej = Rejections(SRC)
    got = parse_customization({section: [rule]}, "faultCustomization.json", rej)
    assert [r.reason for r in rej.items] == [reason]
    assert got.frequency == {}
    assert got.duration == {}


def test_a_code_in_two_rules_keeps_the_first_and_other_rules_still_apply() -> None:
    rej = Rejections(SRC)
    got = parse_customization(
        {"FaultFrequency": [_rule(), _rule(Times=5), _rule(EventId=["80E18005"], TimeWindow=1)]}, "x", rej
    )
    assert [r.reason for r in rej.items] == ["duplicate-code", "out-of-range"]
    assert got.frequency["80E01801"].times == 2
    assert "80E18005" not in got.frequency
    ok = parse_customization({"FaultFrequency": [_rule(ReleaseTimeWindow=0), _rule(EventId=["1"], Times=1,
        FaultHandling="SeparateNPU", ReleaseTimeWindow=600)]}, "x", Rejections(SRC))  # fmt: skip
    assert ok.frequency["80E01801"].release_s is None
    assert ok.frequency["1"] == FrequencyRule(86400, 1, L.SEPARATE, 600)
