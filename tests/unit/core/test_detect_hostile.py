"""Hostile input to the detectors (issue 36): deep nesting, Go's reading of lone surrogates and null lists, public-fault
device ids, NodeD's level names. Each test failed on the code before its fix."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from support import factories

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.clusterd import ClusterDDetector
from agent.core.detect.common import Rejections, parse_json
from agent.core.detect.deviceinfo import DeviceInfoDetector
from agent.core.detect.levels import level_name, load_shipped_table
from agent.core.detect.nesting import BoundedSafeLoader, NestingError, too_deep, yaml_load_all
from agent.core.detect.nodeinfo import NodeInfoDetector
from agent.core.detect.publicfault import PublicFaultDetector
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel, ObjectRef

MC = Path(__file__).parent.parent.parent / "fixtures" / "mindcluster"
NOW = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
TABLE = load_shipped_table()
P = "huawei.com/Ascend910"
JOB = ObjectRef("vcjob", "team-a", "llama", "0b5d3c4e-1111-2222-3333-444455556666")
DEEP = "[" * 1000 + "]" * 1000  # 2 KB: enough to exhaust Python's recursion in any recursive reader


# --- item 10: deep nesting ------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [100, 1000, 1023, 1100, 5000])
def test_a_deeply_nested_device_info_value_is_one_too_deep_rejection(depth: int) -> None:
    """Regression: at 1,000 levels the CheckCode's encoder raised RecursionError ("detector failed"); beyond
    orjson's 1,024 it was a vague json-invalid."""
    deep = "[" * depth + "]" * depth
    dl = '{"' + P + '":"Ascend910-0","x":' + deep + "}"
    cfg = '{"DeviceInfo":{"DeviceList":' + dl + ',"UpdateTime":1767225603},"CheckCode":"00"}'
    out = DeviceInfoDetector(TABLE).update(_device_cm(cfg), NOW)
    assert [(r.reason, r.detail) for r in out.rejections] == [
        ("too-deep", "DeviceInfoCfg: nested more than 64 levels deep")
    ]
    assert out.faults == []


def _device_cm(cfg: str, version: str = "1") -> ConfigMapRecord:
    return factories.configmap("mindx-dl-deviceinfo-w1", {"DeviceInfoCfg": cfg}, uid="u", resource_version=version)


def test_parse_json_refuses_deep_documents_and_keeps_shallow_ones() -> None:
    rej = Rejections(ObjectRef("ConfigMap", "ns", "x"))
    assert parse_json("[" * 64 + "]" * 64, "v", rej) == _nest(63)
    assert rej.items == []
    assert parse_json("[" * 65 + "]" * 65, "v", rej) is None
    assert [r.reason for r in rej.items] == ["too-deep"]


def test_a_clusterd_entry_nested_too_deep_is_refused_alone_and_the_other_entries_are_read() -> None:
    doc: dict[str, Any] = json.loads((MC / "clusterd-device-faults.json").read_text())
    value = json.loads(doc["data"]["cluster-info-device-0"])
    nested: Any = {}
    for _ in range(200):
        nested = {"DeviceList": nested}
    value["mindx-dl-deviceinfo-mc-node-9"] = nested
    det = ClusterDDetector(TABLE)
    out = det.update(
        factories.configmap(
            "cluster-info-device-0", {doc["metadata"]["name"]: json.dumps(value)}, namespace="mindx-dl", uid="u"
        ),
        NOW,
    )
    assert [(r.reason, r.detail) for r in out.rejections] == [
        ("too-deep", "mindx-dl-deviceinfo-mc-node-9: nested more than 64 levels deep")
    ]
    assert sorted(f.chips for f in out.faults) == [("Ascend910-1",), ("Ascend910-3",), ("Ascend910-5",)]


def test_too_deep_is_iterative_and_exact() -> None:
    value: Any = 1
    for _ in range(100_000):  # far beyond any recursion limit
        value = [value]
    assert too_deep(value)
    assert not too_deep([[[]]], limit=3)
    assert too_deep([[[[]]]], limit=3)
    assert not too_deep({"a": {"b": "c" * 10}}, limit=2)
    assert not too_deep(5, limit=0)
    assert not too_deep([[{}]], limit=3)
    assert too_deep([[{"a": {}}]], limit=3)
    assert too_deep(({"k": ([],)},), limit=3)  # tuple, dict, tuple, list
    assert not too_deep([1, "x", {"a": [2, {"b": None}]}, []], limit=4)
    assert too_deep([1, "x", {"a": [2, {"b": []}]}, []], limit=4)


def test_the_bounded_yaml_loader_refuses_deep_documents_with_their_line() -> None:
    with pytest.raises(NestingError) as info:
        yaml_load_all("ok: 1\n---\na: " + DEEP + "\n")
    assert "nested more than 64 levels deep" in str(info.value)
    assert info.value.problem_mark is not None
    assert info.value.problem_mark.line == 2
    assert yaml_load_all("a: " + "[" * 60 + "]" * 60) == [{"a": _nest(59)}]
    assert issubclass(BoundedSafeLoader, yaml.SafeLoader)


def _nest(n: int) -> Any:
    value: Any = []
    for _ in range(n):
        value = [value]
    return value


# --- item 12: read a DeviceInfoCfg as Go does -------------------------------------------------------------------


def _go_check_code(device_list: dict[str, str], update_time: int) -> str:
    """What the device plugin writes: sha256 of Go's json.Marshal of DeviceInfo. Here the payload has no character
    Go escapes beyond JSON's own, so Go's bytes are json.dumps' with raw UTF-8 (U+FFFD as EF BF BD)."""
    body = json.dumps(
        {"DeviceList": dict(sorted(device_list.items())), "UpdateTime": update_time},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(body.encode()).hexdigest()


def _fault_element(chip: str, note: str) -> str:
    el = {
        "fault_type": "CardUnhealthy",
        "npu_name": chip,
        "large_model_fault_level": "SeparateNPU",
        "fault_level": "SeparateNPU",
        "fault_handling": "SeparateNPU",
        "fault_code": "80E3A201",
        "fault_time_and_level_map": {"80E3A201": {"fault_time": 1767225601000, "fault_level": "SeparateNPU"}},
        "note": note,
    }
    return json.dumps([el], separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize(
    ("escape", "go_reads"),
    [
        pytest.param("\\ud800", "\ufffd", id="lone-high"),
        pytest.param("\\udc00", "\ufffd", id="lone-low"),
        pytest.param("\\ud800\\u0041", "\ufffdA", id="high-then-not-low"),
        pytest.param("\\ud83d\\ude00", "\U0001f600", id="valid-pair"),
    ],
)
def test_a_lone_surrogate_reads_as_u_fffd_and_the_fault_it_states_is_kept(escape: str, go_reads: str) -> None:
    """Regression: orjson refuses a lone surrogate escape, so the whole DeviceInfoCfg was rejected (json-invalid)
    and the fault it states was lost, though Go reads it (U+FFFD) and the CheckCode verifies."""
    marker = "SURROGATE"
    fault_text = _fault_element("Ascend910-3", marker)
    dl_go = {P: "Ascend910-0", f"{P}-Unhealthy": "Ascend910-3", f"{P}-Fault": fault_text.replace(marker, go_reads)}
    code = _go_check_code(dl_go, 1767225603)
    # the written text: the escape in the DeviceInfoCfg document itself, inside the -Fault string
    dl_json = json.dumps({P: "Ascend910-0", f"{P}-Unhealthy": "Ascend910-3", f"{P}-Fault": fault_text})
    assert dl_json.count(marker) == 1
    dl_json = dl_json.replace(marker, escape)
    text = f'{{"DeviceInfo":{{"DeviceList":{dl_json},"UpdateTime":1767225603}},"SuperPodID":-2,"CheckCode":"{code}"}}'
    out = DeviceInfoDetector(TABLE).update(_device_cm(text), NOW)
    assert out.rejections == []
    assert [(f.kind, f.level, f.chips, f.codes, f.check_code_ok) for f in out.faults] == [
        (FaultKind.CHIP, FaultLevel.SEPARATE, ("Ascend910-3",), ("80E3A201",), True)
    ]


def test_a_lone_surrogate_in_the_outer_text_reads_as_u_fffd() -> None:
    rej = Rejections(ObjectRef("ConfigMap", "ns", "x"))
    assert parse_json('{"a\\ud800":"b\\udc00c","n":[1,"\\ud800"]}', "v", rej) == {
        "a\ufffd": "b\ufffdc",
        "n": [1, "\ufffd"],
    }
    assert rej.items == []
    assert parse_json('{"a":NaN,"b":"\\ud800"}', "v", rej) is None  # Go refuses NaN; so do we, surrogate or not
    assert [r.reason for r in rej.items] == ["json-invalid"]


def test_a_null_device_list_is_an_empty_one_healthy_as_go_reads_it() -> None:
    """Regression: `"DeviceList": null` was rejected (missing-key) and the node's faults stayed; Go reads null into
    a nil map (no chips, all healthy) and marshals it back as null for the CheckCode."""
    det = DeviceInfoDetector(TABLE)
    fault_text = _fault_element("Ascend910-3", "x")
    dl = {P: "Ascend910-0", f"{P}-Unhealthy": "Ascend910-3", f"{P}-Fault": fault_text}
    first = {"DeviceInfo": {"DeviceList": dl, "UpdateTime": 1767225603}, "CheckCode": _go_check_code(dl, 1767225603)}
    cm = factories.configmap("mindx-dl-deviceinfo-w1", {"DeviceInfoCfg": json.dumps(first)}, uid="u")
    assert [f.chips for f in det.update(cm, NOW).faults] == [("Ascend910-3",)]
    null_code = hashlib.sha256(b'{"DeviceList":null,"UpdateTime":1767225609}').hexdigest()
    cfg = f'{{"DeviceInfo":{{"DeviceList":null,"UpdateTime":1767225609}},"CheckCode":"{null_code}"}}'
    out = det.update(_device_cm(cfg, "2"), NOW)
    assert out.rejections == []
    assert out.faults == []
    assert [c.fault.chips for c in out.cleared] == [("Ascend910-3",)]
    assert all(c.fault.check_code_ok for c in out.cleared)


def test_a_missing_device_list_is_still_refused() -> None:
    """Go cannot tell a missing DeviceList from null, but the device plugin always writes the field: a missing one
    is damage, and damage never clears a fault."""
    det = DeviceInfoDetector(TABLE)
    cfg = '{"DeviceInfo":{"UpdateTime":1767225609},"CheckCode":"00"}'
    out = det.update(_device_cm(cfg), NOW)
    assert "missing-key" in [r.reason for r in out.rejections]


# --- item 11: public-fault device ids ---------------------------------------------------------------------------


def _public_cm(*influence: dict[str, Any], faults: int = 1) -> ConfigMapRecord:
    t_ms = int(datetime(2026, 1, 1, 8, 59, tzinfo=UTC).timestamp() * 1000)
    fault = {
        "faultId": "fault-0001",
        "faultType": "NPU",
        "faultCode": "220001001",
        "faultTime": t_ms,
        "assertion": "occur",
        "influence": list(influence),
    }
    doc = {
        "id": "ccae-msg-0001",
        "timestamp": t_ms,
        "version": "1.0",
        "resource": "CCAE",
        "faults": [{**fault, "faultId": f"fault-{i:04}"} for i in range(faults)],
    }
    labels = (("mc-consumer-publicfault", "true"),)
    return factories.configmap("ccae", {"PublicFault": json.dumps(doc)}, namespace="default", uid="u", labels=labels)


def test_device_ids_outside_clusterds_range_are_no_chips() -> None:
    """Regression: ids 200 and 40000 became chips Ascend910-200 and Ascend910-40000 (ClusterD accepts 0-31)."""
    out = PublicFaultDetector(TABLE).update(_public_cm({"nodeName": "w1", "deviceIds": [200, 40000, 31, 0]}), NOW)
    assert [f.chips for f in out.faults] == [("Ascend910-0", "Ascend910-31")]
    assert [(r.reason, r.detail) for r in out.rejections] == [
        ("bad-device-id", "2 device id(s) are not chip ids 0-31 (faults[0].influence[0].deviceIds): 200, 40000")
    ]


def test_a_hundred_thousand_ids_are_one_rejection_and_the_valid_chips_among_them_are_kept() -> None:
    """Regression: 100,000 ids gave one fault naming 65,536 chips and 34,464 rejections (one log line each)."""
    ids: list[object] = [*range(100_000, 0, -1), -5, "x"]
    out = PublicFaultDetector(TABLE).update(_public_cm({"nodeName": "w1", "deviceIds": ids}), NOW)
    assert [len(f.chips) for f in out.faults] == [31]  # 1..31: every valid chip kept
    assert "Ascend910-7" in out.faults[0].chips
    [rej] = out.rejections
    assert rej.reason == "bad-device-id"
    assert rej.detail.startswith("99971 device id(s) are not chip ids 0-31 (faults[0].influence[0].deviceIds): ")


def test_an_entry_of_only_bad_ids_is_skipped_not_widened_and_rejections_are_bounded() -> None:
    det = PublicFaultDetector(TABLE)
    entries = [{"nodeName": f"w{i}", "deviceIds": [99]} for i in range(50)] + [{"nodeName": "ok", "deviceIds": [2]}]
    out = det.update(_public_cm(*entries, {"nodeName": 5}, *([7] * 100)), NOW)
    assert [(f.node, f.chips) for f in out.faults] == [("ok", ("Ascend910-2",))]
    reasons = [r.reason for r in out.rejections]
    assert len(reasons) == 21  # at most 20 listed, then one line with the count
    assert reasons[-1] == "more-rejections"
    assert out.rejections[-1].detail.startswith("82 more rejection(s) not listed: ")
    bad = [r for r in out.rejections if r.reason == "bad-device-id"]
    assert [r.detail for r in bad] == [
        "50 device id(s) are not chip ids 0-31 (faults[0].influence[0].deviceIds and 49 more entries): 99, 99, 99 …"
    ]


# --- item 13: NodeD's level names ------------------------------------------------------------------------------

FIXTURES = Path(__file__).parent.parent.parent / "fixtures"


def _noded_faults(name: str) -> list[Fault]:
    doc = json.loads((FIXTURES / name).read_text())
    m = doc["metadata"]
    cm = factories.configmap(m["name"], doc["data"], namespace=m["namespace"], uid="u")
    return NodeInfoDetector(TABLE).update(cm, datetime(2026, 1, 1, 1, 0, tzinfo=UTC)).faults


@pytest.mark.parametrize(
    ("fixture", "names"),
    [
        pytest.param("nodeinfo-unhealthy-cpu.json", ["SeparateFault"], id="separate"),
        pytest.param("nodeinfo-preseparate-memory.json", ["PreSeparateFault"], id="pre-separate"),
    ],
)
def test_noded_faults_carry_nodeds_level_names_in_events(fixture: str, names: list[str]) -> None:
    """Regression: a NodeD SeparateFault was published as SeparateNPU, the chip vocabulary."""
    from agent.sinks import events as ev

    faults = _noded_faults(fixture)
    assert [level_name(f) for f in faults] == names
    for f in faults:
        for event in (
            ev.fault_detected(f, cluster="c"),
            ev.fault_cleared(FaultCleared(f, NOW, f.source), cluster="c"),
            ev.recovery_started("inc-1", JOB, "restart-job", "r", cluster="c", at=NOW, faults=[f]),
        ):
            doc = ev.as_json(event)
            data = doc["data"]
            level = data["fault"]["level"] if "fault" in data else data["faults"][0]["level"]
            assert level in names
            jsonschema.validate(data, ev.data_schema_for(event.get_type()))


def test_level_names_by_reporter() -> None:
    node = Fault(FaultKind.NODE, FaultLevel.SEPARATE, "n", (), (), NOW, NOW, ObjectRef("ConfigMap", "", "x"), "")
    assert level_name(node) == "SeparateNPU"  # not NodeD's: the chip vocabulary
    assert level_name(replace(node, reason="NodeD-CPU")) == "SeparateFault"
    assert level_name(replace(node, reason="NodeD-UnHealthy", level=FaultLevel.PRE_SEPARATE)) == "PreSeparateFault"
    assert level_name(replace(node, reason="NodeD-CPU", level=FaultLevel.NOT_HANDLE)) == "NotHandleFault"
    # a level-table override NodeD has no name for keeps the chip name
    assert level_name(replace(node, reason="NodeD-CPU", level=FaultLevel.RESTART_NPU)) == "RestartNPU"


def test_detect_prints_nodeds_level_names(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main

    code = main(
        ["detect", "--now", "2026-01-01T01:00:00Z", "--json", "-f", str(FIXTURES / "nodeinfo-unhealthy-cpu.json")]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [(f["kind"], f["level"]) for f in doc["faults"]] == [("node", "SeparateFault")]
