"""A3 switch faults (SwitchInfoCfg) and the -Fault variants ClusterD and newer plugins write, read from fixtures
that Go's encoding/json made from MindCluster's field names and types (testbed/mcencode)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support import factories

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.common import Rejections
from agent.core.detect.deviceinfo import DeviceInfoDetector
from agent.core.detect.levels import load_shipped_table
from agent.core.detect.switchinfo import parse_switch_info
from agent.core.faults import FaultKind, FaultLevel, ObjectRef

MC = Path(__file__).parent.parent.parent / "fixtures" / "mindcluster"
NOW = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
SIGNAL = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
SWITCH_CODE = "[0x00f103b0,155907,na,na]"


def record(name: str) -> ConfigMapRecord:
    doc: dict[str, Any] = json.loads((MC / name).read_text())
    meta = doc["metadata"]
    return factories.configmap(
        meta["name"], doc["data"], namespace=meta["namespace"], uid="u", labels=tuple(meta["labels"].items())
    )


def test_a_separate_switch_fault_is_a_node_fault_and_a_healthy_rewrite_clears_it() -> None:
    det = DeviceInfoDetector(load_shipped_table())
    res = det.update(record("deviceinfo-a3-switch-separate.json"), NOW)
    assert res.rejections == []
    (fault,) = res.faults
    assert (fault.kind, fault.level, fault.node, fault.chips, fault.codes, fault.reason) == (
        FaultKind.NODE,
        FaultLevel.SEPARATE,
        "mc-node-0",
        (),
        (SWITCH_CODE,),
        "SwitchFault",
    )
    assert fault.signal_time == SIGNAL
    healthy = det.update(record("deviceinfo-a3-switch-healthy.json"), NOW)
    assert healthy.rejections == []
    assert [c.fault for c in healthy.cleared] == [fault]


def test_a_plugin_with_switch_faults_off_writes_null_fault_codes_and_that_is_no_error() -> None:
    res = DeviceInfoDetector(load_shipped_table()).update(record("deviceinfo-a3-switch-null.json"), NOW)
    assert res.rejections == []  # no wrong-type for FaultCode: null, no bad-timestamp for UpdateTime: 0
    assert res.faults == []


def _switch(**fields: Any) -> dict[str, Any]:
    event = {"EventType": 1, "AssembledFaultCode": SWITCH_CODE, "Assertion": 1, "AlarmRaisedTime": 1767254395123}
    obj: dict[str, Any] = {"FaultCode": [json.dumps(event)], "UpdateTime": 1767254400, "FaultTimeAndLevelMap": {}}
    obj.update(fields)
    return obj


@pytest.mark.parametrize(
    ("fields", "level"),
    [
        pytest.param({"FaultLevel": "NotHandle", "NodeStatus": "Healthy"}, FaultLevel.NOT_HANDLE, id="nothandle"),
        pytest.param({"FaultLevel": "SubHealthFault", "NodeStatus": "SubHealthy"}, FaultLevel.SUB_HEALTH, id="sub"),
        pytest.param({"FaultLevel": "PreSeparate", "NodeStatus": "PreSeparate"}, FaultLevel.PRE_SEPARATE, id="pre"),
        pytest.param({"FaultLevel": "Separate", "NodeStatus": "UnHealthy"}, FaultLevel.SEPARATE, id="separate"),
        # RestartRequest makes the node UnHealthy: MindCluster's scheduler takes it out like a Separate one
        pytest.param({"FaultLevel": "RestartRequest", "NodeStatus": "UnHealthy"}, FaultLevel.SEPARATE, id="restart"),
        pytest.param({"FaultLevel": "", "NodeStatus": "UnHealthy", "FaultCode": []}, FaultLevel.SEPARATE, id="status"),
    ],
)
def test_switch_levels_map_onto_the_chip_scale(fields: dict[str, Any], level: FaultLevel) -> None:
    rej = Rejections(ObjectRef("ConfigMap", "kube-system", "x"))
    faults = parse_switch_info(_switch(**fields), "n", rej.source, load_shipped_table(), NOW, NOW, rej)
    assert rej.items == []
    assert [(f.kind, f.level, f.reason) for f in faults.values()] == [(FaultKind.NODE, level, "SwitchFault")]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        pytest.param({"FaultLevel": "SeparateNPU"}, "unknown-level", id="chip-vocabulary"),
        pytest.param({"NodeStatus": "Broken"}, "unknown-node-status", id="status"),
        pytest.param({"FaultCode": ["{not json"]}, "json-invalid", id="event-json"),
        pytest.param({"FaultCode": ['{"EventType": 1}']}, "missing-key", id="event-code"),
        pytest.param({"FaultCode": 5}, "wrong-type", id="codes-type"),
    ],
)
def test_bad_switch_input_is_rejected(fields: dict[str, Any], reason: str) -> None:
    rej = Rejections(ObjectRef("ConfigMap", "kube-system", "x"))
    parse_switch_info(_switch(**fields), "n", rej.source, load_shipped_table(), NOW, NOW, rej)
    assert reason in {r.reason for r in rej.items}


def test_recovery_events_are_not_faults() -> None:
    event = json.dumps({"AssembledFaultCode": SWITCH_CODE, "Assertion": 0})
    rej = Rejections(ObjectRef("ConfigMap", "kube-system", "x"))
    obj = {"FaultCode": [event], "FaultLevel": "", "NodeStatus": "Healthy"}
    assert parse_switch_info(obj, "n", rej.source, load_shipped_table(), NOW, NOW, rej) == {}
    assert rej.items == []


def test_fault_variants_public_fault_normal_levels_and_nine_digit_codes() -> None:
    res = DeviceInfoDetector(load_shipped_table()).update(record("deviceinfo-fault-variants.json"), NOW)
    assert res.rejections == []  # no bad-code for 220001001, no unknown-level for NormalNPU / NormalNetwork
    got = sorted((f.kind, f.level, f.chips, f.codes, f.reason, f.check_code_ok) for f in res.faults)
    assert got == [
        (FaultKind.CHIP, FaultLevel.RESTART_NPU, ("Ascend910-7",), ("80E18005",), "CardUnhealthy", True),
        (FaultKind.CHIP, FaultLevel.SEPARATE, ("Ascend910-6",), ("220001001",), "PublicFault", True),
    ]
    public = next(f for f in res.faults if f.reason == "PublicFault")
    assert public.signal_time == datetime(2026, 1, 1, 7, 59, 55, tzinfo=UTC)  # fault_time in seconds
