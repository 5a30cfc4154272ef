"""Public-fault ConfigMaps (MindCluster ClusterD interface): faults per influenced node, recover, rejections."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import factories

from agent.core.cluster import ConfigMapRecord
from agent.core.detect import PublicFaultDetector
from agent.core.detect.levels import load_shipped_table
from agent.core.faults import FaultKind, FaultLevel

NOW = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
T_MS = int(datetime(2026, 1, 1, 7, 59, tzinfo=UTC).timestamp() * 1000)
TABLE = load_shipped_table()
SEPARATE_CODE = "220001001"  # SeparateNPU in ClusterD's publicFaultConfiguration.json


def _fault(fid: str = "fault-0001", **kw: Any) -> dict[str, Any]:
    f: dict[str, Any] = {
        "faultId": fid,
        "faultType": "NPU",
        "faultCode": "NPU000001",
        "faultTime": T_MS,
        "assertion": "occur",
        "faultLocation": {"rack": "r1"},
        "influence": [{"nodeName": "worker-01", "nodeSN": "SN1", "deviceIds": [3, 1]}],
        "description": "link down",
    }
    f.update(kw)
    return f


def _doc(*faults: dict[str, Any], **kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"id": "ccae-msg-0001", "timestamp": T_MS, "version": "1.0", "resource": "CCAE"}
    d["faults"] = list(faults) if faults else [_fault()]
    d.update(kw)
    return d


def _cm(doc: object, name: str = "ccae-faults") -> ConfigMapRecord:
    text = doc if isinstance(doc, str) else json.dumps(doc)
    return factories.configmap(
        name, {"PublicFault": text}, namespace="default", uid="u1", labels=(("mc-consumer-publicfault", "true"),)
    )


def test_npu_fault_then_recover_then_delete() -> None:
    det = PublicFaultDetector(TABLE, FaultLevel.SUB_HEALTH)
    res = det.update(_cm(_doc(_fault(faultCode=SEPARATE_CODE))), NOW)
    assert res.rejections == []
    [f] = res.faults
    assert (f.kind, f.node, f.chips, f.codes, f.level) == (
        FaultKind.CHIP,
        "worker-01",
        ("Ascend910-1", "Ascend910-3"),
        (SEPARATE_CODE,),
        FaultLevel.SEPARATE,
    )
    assert f.reason == "PublicFault:CCAE"
    assert f.signal_time == datetime(2026, 1, 1, 7, 59, tzinfo=UTC)
    assert f.source.name == "ccae-faults"
    assert f.observed_at == NOW
    assert not det.update(_cm(_doc(_fault(faultCode=SEPARATE_CODE))), NOW)  # same text: nothing
    assert not det.update(_cm(_doc(_fault(faultCode=SEPARATE_CODE), id="ccae-msg-0002")), NOW)  # held: nothing
    res = det.update(_cm(_doc(_fault(faultCode=SEPARATE_CODE, assertion="recover"))), NOW)
    assert [c.fault for c in res.cleared] == [f]
    assert res.faults == []
    assert len(det) == 0
    det.update(_cm(_doc(_fault(faultCode=SEPARATE_CODE))), NOW)
    assert not det.delete("default", "ccae-faults", NOW)  # ClusterD ignores the deletion: the fault stays
    assert [h.codes for h in det.held()] == [(SEPARATE_CODE,)]


@pytest.mark.parametrize(
    ("ftype", "kind", "chips"),
    [
        pytest.param("Network", FaultKind.NETWORK, ("Ascend910-1", "Ascend910-3"), id="network"),
        pytest.param("Node", FaultKind.NODE, (), id="node"),
        pytest.param("Storage", FaultKind.NODE, (), id="storage"),
    ],
)
def test_fault_types(ftype: str, kind: FaultKind, chips: tuple[str, ...]) -> None:
    res = PublicFaultDetector(TABLE).update(_cm(_doc(_fault(faultType=ftype))), NOW)
    assert [(f.kind, f.chips) for f in res.faults] == [(kind, chips)]


def test_one_fault_per_influenced_node_and_a_rewrite_without_it_keeps_it() -> None:
    """Only a recover clears: a rewrite that no longer lists a fault leaves it held (ClusterD's cache)."""
    det = PublicFaultDetector(TABLE)
    two = _fault(influence=[{"nodeName": "a", "deviceIds": [0]}, {"nodeName": "b", "deviceIds": [1]}])
    res = det.update(_cm(_doc(two, _fault("fault-0002", faultType="Node"))), NOW)
    assert sorted((f.node, f.kind) for f in res.faults) == [
        ("a", FaultKind.CHIP),
        ("b", FaultKind.CHIP),
        ("worker-01", FaultKind.NODE),
    ]
    res = det.update(_cm(_doc(_fault("fault-0002", faultType="Node"))), NOW)
    assert not res
    assert len(det) == 3
    recover_b = _fault(assertion="recover", influence=[{"nodeName": "b", "deviceIds": [1]}])
    res = det.update(_cm(_doc(recover_b)), NOW)
    assert [c.fault.node for c in res.cleared] == ["b"]
    assert sorted(f.node for f in det.held()) == ["a", "worker-01"]


def test_level_from_table_override_else_default() -> None:
    table = TABLE.with_overrides({"NPU000001": FaultLevel.SEPARATE})
    res = PublicFaultDetector(table, FaultLevel.NOT_HANDLE).update(
        _cm(_doc(_fault(), _fault("fault-0002", faultCode="NPU000002"))), NOW
    )
    assert sorted(f.level for f in res.faults) == [FaultLevel.NOT_HANDLE, FaultLevel.SEPARATE]


def test_reloaded_levels_reclassify_held_faults_at_once() -> None:
    """A fault-config reload re-reads the held documents: a fault whose level changed is cleared and raised again
    at the new level (no rewrite of the public-fault ConfigMap needed); unchanged ones emit nothing."""
    det = PublicFaultDetector(TABLE, FaultLevel.NOT_HANDLE)
    first = det.update(_cm(_doc(_fault(), _fault("fault-0002", faultCode="NPU000002"))), NOW)
    by_code = {f.codes: f for f in first.faults}
    assert by_code[("NPU000001",)].level is FaultLevel.NOT_HANDLE
    later = datetime(2026, 1, 1, 8, 5, tzinfo=UTC)
    res = det.set_table(TABLE.with_overrides({"NPU000001": FaultLevel.SEPARATE}), later)
    assert [c.fault for c in res.cleared] == [by_code[("NPU000001",)]]
    assert [(f.codes, f.level) for f in res.faults] == [(("NPU000001",), FaultLevel.SEPARATE)]
    assert res.rejections == []
    assert not det.set_table(TABLE.with_overrides({"NPU000001": FaultLevel.SEPARATE}), later)  # same table: nothing
    # the next rewrite of the same document sees the new level as current: nothing new
    assert not det.update(_cm(_doc(_fault(), _fault("fault-0002", faultCode="NPU000002"), id="ccae-msg-0002")), later)


def test_bad_fault_does_not_hide_good_ones() -> None:
    res = PublicFaultDetector(TABLE).update(_cm(_doc(_fault(faultType="GPU"), _fault("fault-0002"))), NOW)
    assert [r.reason for r in res.rejections] == ["unknown-fault-type"]
    assert len(res.faults) == 1


def test_unusable_document_keeps_previous_faults() -> None:
    det = PublicFaultDetector(TABLE)
    assert det.update(_cm(_doc()), NOW).faults
    res = det.update(_cm('{"id": "x'), NOW)
    assert [r.reason for r in res.rejections] == ["json-truncated"]
    assert not res.cleared


def _without(key: str) -> dict[str, Any]:
    d = _doc()
    del d[key]
    return d


def _fault_without(key: str) -> dict[str, Any]:
    f = _fault()
    del f[key]
    return _doc(f)


BAD: list[Any] = [
    pytest.param("{not json}", "json-invalid", id="json-invalid"),
    pytest.param('{"id": "abc', "json-truncated", id="json-truncated"),
    pytest.param("null", "wrong-type", id="null"),
    pytest.param("[1]", "wrong-type", id="array"),
    pytest.param(_without("version"), "missing-key", id="no-version"),
    pytest.param(_without("faults"), "missing-key", id="no-faults"),
    pytest.param(_without("timestamp"), "missing-key", id="no-timestamp"),
    pytest.param(_doc(version="2.0"), "bad-version", id="bad-version"),
    pytest.param(_doc(id="short"), "bad-id", id="bad-id-short"),
    pytest.param(_doc(id="has space 123"), "bad-id", id="bad-id-chars"),
    pytest.param(_doc(id=12345678), "wrong-type", id="id-type"),
    pytest.param(_doc(timestamp=1_600_000_000_000), "bad-timestamp", id="ts-before-2025"),
    pytest.param(_doc(timestamp=T_MS // 1000), "bad-timestamp", id="ts-seconds"),
    pytest.param(_doc(timestamp="1767254340000"), "wrong-type", id="ts-string"),
    pytest.param(_doc(resource=""), "missing-key", id="empty-resource"),
    pytest.param(_doc(faults={}), "wrong-type", id="faults-type"),
    pytest.param(_doc(faults=[]), "bad-fault-count", id="no-faults-items"),
    pytest.param(_doc(*[_fault(f"fault-{i:04}") for i in range(101)]), "bad-fault-count", id="101-faults"),
    pytest.param(_doc(_fault(faultType="GPU")), "unknown-fault-type", id="fault-type"),
    pytest.param(_doc(_fault(assertion="maybe")), "bad-assertion", id="assertion"),
    pytest.param(_doc(_fault(influence=[])), "empty-influence", id="empty-influence"),
    pytest.param(_doc(_fault(influence={})), "wrong-type", id="influence-type"),
    pytest.param(_fault_without("influence"), "missing-key", id="no-influence"),
    pytest.param(_fault_without("faultCode"), "missing-key", id="no-code"),
    pytest.param(_doc(_fault(faultCode="ABC")), "bad-code", id="bad-code"),
    pytest.param(_doc(_fault(faultId="x")), "bad-fault-id", id="bad-fault-id"),
    pytest.param(_doc(_fault(faultTime=5)), "bad-timestamp", id="fault-time"),
    pytest.param(_doc(_fault(influence=[{"nodeName": "n", "deviceIds": []}])), "empty-device-ids", id="npu-no-ids"),
    pytest.param(_doc(_fault(influence=[{"deviceIds": [1]}])), "missing-key", id="no-node-name"),
    pytest.param(_doc(_fault(influence=["n"])), "wrong-type", id="influence-item"),
    pytest.param(_doc(_fault(influence=[{"nodeName": "n", "deviceIds": "1"}])), "wrong-type", id="ids-type"),
    pytest.param(_doc(_fault(faultLocation=[1])), "wrong-type", id="location-type"),
    pytest.param(_doc(_fault(), "x"), "wrong-type", id="fault-item"),
]


@pytest.mark.parametrize(("doc", "reason"), BAD)
def test_rejections(doc: object, reason: str) -> None:
    res = PublicFaultDetector(TABLE).update(_cm(doc), NOW)
    assert reason in [r.reason for r in res.rejections]
    assert all(r.source.name == "ccae-faults" for r in res.rejections)


def test_bad_device_id_dropped_others_kept() -> None:
    f = _fault(influence=[{"nodeName": "n", "deviceIds": [1, -1, True, "2"]}])
    res = PublicFaultDetector(TABLE).update(_cm(_doc(f)), NOW)
    assert [(r.reason, r.detail) for r in res.rejections] == [
        (
            "bad-device-id",
            "3 device id(s) are not chip ids 0-31 (faults[0].influence[0].deviceIds): -1, True, '2'",
        )
    ]
    assert [x.chips for x in res.faults] == [("Ascend910-1",)]


def test_missing_key_and_too_large() -> None:
    det = PublicFaultDetector(TABLE)
    res = det.update(factories.configmap("x", {}, namespace="default", uid="u"), NOW)
    assert [r.reason for r in res.rejections] == ["missing-key"]
    big = factories.configmap(
        "y", {"PublicFault": json.dumps(_doc()), "pad": "x" * (1 << 20)}, namespace="default", uid="u"
    )
    assert [r.reason for r in det.update(big, NOW).rejections] == ["value-too-large"]


def test_later_recover_cancels_earlier_occur_in_same_document() -> None:
    res = PublicFaultDetector(TABLE).update(_cm(_doc(_fault(), _fault(assertion="recover"))), NOW)
    assert res.faults == []
    assert res.rejections == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12) | st.floats(allow_nan=False),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=12), c, max_size=4),
    max_leaves=20,
)


def _replace(draw: st.DrawFn, doc: Any) -> Any:
    if isinstance(doc, dict) and doc and draw(st.booleans()):
        k = draw(st.sampled_from(sorted(doc)))
        return {**doc, k: _replace(draw, doc[k])}
    if isinstance(doc, list) and doc and draw(st.booleans()):
        i = draw(st.integers(0, len(doc) - 1))
        return [*doc[:i], _replace(draw, doc[i]), *doc[i + 1 :]]
    return draw(json_values)


@st.composite
def mutated(draw: st.DrawFn) -> str:
    doc = copy.deepcopy(_doc(_fault(), _fault("fault-0002", faultType="Network")))
    for _ in range(draw(st.integers(1, 3))):
        doc = _replace(draw, doc)
    text = json.dumps(doc)
    if draw(st.booleans()):
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.text(max_size=4)) + text[i + draw(st.integers(0, 4)) :]
    return text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(mutated() | st.text(max_size=40), min_size=1, max_size=3))
def test_property_never_raises(texts: list[str]) -> None:
    det = PublicFaultDetector(TABLE)
    active: set[Any] = set()
    for text in texts:
        res = det.update(_cm(text), NOW)
        for f in res.faults:
            assert f.node
            assert f.codes
            assert f.source.name == "ccae-faults"
            active.add(f)
        for c in res.cleared:
            active.remove(c.fault)
    assert not det.delete("default", "ccae-faults", NOW)
    assert set(det.held()) == active


def test_fault_config_can_give_a_public_fault_code_its_level() -> None:
    """mindx-dl-fault-config lists accept the 9-character public-fault codes next to the 8-hex-digit ones, so an
    operator can opt a public fault into rescheduling."""
    from agent.core.detect.levels import parse_fault_config

    overrides, rejections = parse_fault_config({"faultCode.json": '{"SeparateNPUCodes":["NPU000001","80E3A201"]}'})
    assert rejections == []
    assert overrides is not None
    det = PublicFaultDetector(TABLE.with_overrides(overrides), FaultLevel.SUB_HEALTH)
    (fault,) = det.update(_cm(_doc()), NOW).faults
    assert fault.level is FaultLevel.SEPARATE
