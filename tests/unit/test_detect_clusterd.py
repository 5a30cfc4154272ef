"""ClusterD cluster-wide ConfigMaps give the same faults as the per-node ones, and clear when entries go."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.detect.clusterd import ClusterDDetector
from agent.detect.levels import load_shipped_table
from agent.model import FaultKind, FaultLevel
from agent.records import ConfigMapRecord

FIXTURES = Path(__file__).parent.parent / "fixtures"
NOW = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)


def _content(name: str, key: str, as_object: bool) -> tuple[str, object]:
    doc = json.loads((FIXTURES / name).read_text())
    value = doc["data"][key]
    return doc["metadata"]["name"], json.loads(value) if as_object else value


def _cm(name: str, entries: dict[str, object]) -> ConfigMapRecord:
    return ConfigMapRecord("mindx-dl", name, "u", "1", (), {name: json.dumps(entries)})


@pytest.mark.parametrize("as_object", [pytest.param(True, id="object"), pytest.param(False, id="string")])
def test_device_entries_and_removal(as_object: bool) -> None:
    det = ClusterDDetector(load_shipped_table())
    a = _content("deviceinfo-chip-restartbusiness.json", "DeviceInfoCfg", as_object)
    b = _content("deviceinfo-npu-prefix-restartnpu.json", "DeviceInfoCfg", as_object)
    res = det.update(_cm("cluster-info-device-0", dict([a, b])), NOW)
    assert res.rejections == []
    assert sorted((f.node, f.level) for f in res.faults) == [
        ("worker-07", FaultLevel.RESTART_BUSINESS),
        ("worker-950-01", FaultLevel.RESTART_NPU),
    ]
    assert all(f.source.name == "cluster-info-device-0" for f in res.faults)
    assert not det.update(_cm("cluster-info-device-0", dict([a, b])), NOW)
    res = det.update(_cm("cluster-info-device-0", dict([a])), NOW)
    assert [c.fault.node for c in res.cleared] == ["worker-950-01"]


def test_node_entries() -> None:
    det = ClusterDDetector(load_shipped_table())
    entry = _content("nodeinfo-unhealthy-cpu.json", "NodeInfo", True)
    res = det.update(_cm("cluster-info-node-cm", dict([entry])), NOW)
    assert [(f.kind, f.node, f.level) for f in res.faults] == [(FaultKind.NODE, "worker-05", FaultLevel.SEPARATE)]
    gone = det.delete("mindx-dl", "cluster-info-node-cm", NOW)
    assert [c.fault.node for c in gone.cleared] == ["worker-05"]


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        pytest.param(ConfigMapRecord("mindx-dl", "other", "u", "1", (), {}), "unexpected-name", id="name"),
        pytest.param(ConfigMapRecord("mindx-dl", "cluster-info-node-cm", "u", "1", (), {}), "missing-key", id="key"),
        pytest.param(
            ConfigMapRecord("mindx-dl", NODE := "cluster-info-node-cm", "u", "1", (), {NODE: "{"}),
            "json-truncated",
            id="truncated",
        ),
        pytest.param(ConfigMapRecord("mindx-dl", NODE, "u", "1", (), {NODE: "[]"}), "wrong-type", id="not-map"),
        pytest.param(_cm("cluster-info-device-1", {"mindx-dl-deviceinfo-x": 5}), "wrong-type", id="entry-type"),
    ],
)
def test_clusterd_rejections(record: ConfigMapRecord, reason: str) -> None:
    res = ClusterDDetector(load_shipped_table()).update(record, NOW)
    assert reason in {r.reason for r in res.rejections}
