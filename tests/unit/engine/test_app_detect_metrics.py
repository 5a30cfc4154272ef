"""The detect pipeline counts what it finds: fault_agent_faults_total{kind,level,source},
fault_agent_faults_cleared_total{kind} and fault_agent_input_rejected_total{source,reason} (the dashboard's fault
panels read the first)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from support import factories

from agent.core.clock import FixedClock
from agent.core.cluster import ConfigMapRecord
from agent.core.faults import Fault, FaultCleared
from agent.engine.detecting import DetectPipeline
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sinks.metrics import AgentMetrics
from agent.sources.state import ClusterState
from testbed.inject import ChipFault, device_info_cm

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def _change(data: dict[str, str], rv: str) -> Change[ConfigMapRecord]:
    cm = factories.configmap(
        "mindx-dl-deviceinfo-n1", data, uid="uid-1", resource_version=rv, labels=(("mx-consumer-cim", "true"),)
    )
    return Change(
        ChangeType.MODIFIED, "deviceinfo", "kube-system/mindx-dl-deviceinfo-n1", cm, None, False, NOW.timestamp()
    )


@pytest.mark.parametrize(
    ("level", "code"),
    [
        pytest.param("SeparateNPU", "80E3A201", id="separate"),
        pytest.param("RestartNPU", "80E18404", id="restart-npu"),
    ],
)
def test_faults_and_clears_are_counted_by_kind_level_and_source(level: str, code: str) -> None:
    registry = CollectorRegistry()
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(Settings(), ClusterState(), queue, metrics=AgentMetrics(registry), clock=FixedClock(NOW))
    pipeline(_change(device_info_cm("n1", [ChipFault(3, (code,), level)], now=NOW)["data"], "1"))
    pipeline(_change(device_info_cm("n1", now=NOW + timedelta(seconds=1))["data"], "2"))

    labels = {"kind": "chip", "level": level, "source": "device-plugin"}
    assert registry.get_sample_value("fault_agent_faults_total", labels) == 1
    assert registry.get_sample_value("fault_agent_faults_cleared_total", {"kind": "chip"}) == 1
    assert queue.qsize() == 2


def test_rejected_input_is_counted() -> None:
    registry = CollectorRegistry()
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(Settings(), ClusterState(), queue, metrics=AgentMetrics(registry), clock=FixedClock(NOW))
    pipeline(_change({"DeviceInfoCfg": '{"DeviceInfo": {"DeviceList": '}, "1"))  # torn JSON
    samples = [
        s
        for metric in registry.collect()
        if metric.name == "fault_agent_input_rejected"
        for s in metric.samples
        if s.name.endswith("_total")
    ]
    assert [s.labels["source"] for s in samples] == ["ConfigMap"]
    assert samples[0].value == 1
    assert queue.empty()


def test_clusterd_configmap_yields_the_same_faults_as_the_per_node_one() -> None:
    """ClusterD's cluster-info-device-<m> ConfigMap holds each node's flat entry under the per-node name (the
    fixture is Go's encoding/json of MindCluster's field names, testbed/mcencode)."""
    registry = CollectorRegistry()
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(Settings(), ClusterState(), queue, metrics=AgentMetrics(registry), clock=FixedClock(NOW))
    doc = json.loads((Path(__file__).parents[2] / "fixtures/mindcluster/clusterd-device-faults.json").read_text())
    cm = factories.configmap(
        "cluster-info-device-0",
        doc["data"],
        namespace="mindx-dl",
        uid="uid-c",
        labels=(("mx-consumer-volcano", "true"),),
    )
    pipeline(
        Change(ChangeType.ADDED, "clusterinfo", "mindx-dl/cluster-info-device-0", cm, None, False, NOW.timestamp())
    )
    faults = [item for item in (queue.get_nowait() for _ in range(queue.qsize())) if isinstance(item, Fault)]
    assert sorted((f.node, f.chips) for f in faults) == [
        ("mc-node-0", ("Ascend910-1",)),
        ("mc-node-0", ("Ascend910-3",)),
        ("mc-node-0", ("Ascend910-5",)),
    ]
    labels = {"kind": "chip", "level": "SeparateNPU", "source": "clusterd"}
    assert registry.get_sample_value("fault_agent_faults_total", labels) == 2


def _without_levels(data: dict[str, str]) -> dict[str, str]:
    """The device ConfigMap data with its -Fault elements' levels removed (an older plugin's shape; the CheckCode
    no longer matches, which the default check_code_mismatch=use reads and flags)."""
    cfg = json.loads(data["DeviceInfoCfg"])
    dl = cfg["DeviceInfo"]["DeviceList"]
    els = json.loads(dl["huawei.com/Ascend910-Fault"])
    for el in els:
        for key in ("large_model_fault_level", "fault_level", "fault_handling"):
            del el[key]
        el["fault_time_and_level_map"] = {
            c: {"fault_time": v["fault_time"]} for c, v in el["fault_time_and_level_map"].items()
        }
    dl["huawei.com/Ascend910-Fault"] = json.dumps(els)
    return {**data, "DeviceInfoCfg": json.dumps(cfg)}


def test_fault_config_override_reclassifies_held_faults() -> None:
    """The override decides the level of a fault whose reporter wrote none (a level the plugin wrote is final:
    tests/unit/core/test_detect_deviceinfo.py)."""
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(Settings(), ClusterState(), queue, clock=FixedClock(NOW))
    data = _without_levels(device_info_cm("n1", [ChipFault(1, ("80E18404",), "RestartNPU")], now=NOW)["data"])
    pipeline(_change(data, "1"))
    first = queue.get_nowait()
    assert isinstance(first, Fault)
    assert first.level.wire_name == "RestartNPU"  # the shipped table's level for 80E18404
    rejected = pipeline.rejected
    overrides = '{"SeparateNPUCodes":["80E18404"]}'
    cm = factories.configmap("mindx-dl-fault-config", {"faultCode.json": overrides}, uid="uid-f", resource_version="5")
    pipeline(
        Change(ChangeType.ADDED, "faultconfig", "kube-system/mindx-dl-fault-config", cm, None, False, NOW.timestamp())
    )
    items = [queue.get_nowait(), queue.get_nowait()]
    cleared = [i for i in items if isinstance(i, FaultCleared)]
    again = [i for i in items if isinstance(i, Fault)]
    assert [c.fault.level.wire_name for c in cleared] == ["RestartNPU"]
    assert [(f.level.wire_name, f.chips) for f in again] == [("SeparateNPU", ("Ascend910-1",))]
    # an unreadable fault config keeps the overrides in force and is rejected
    bad = factories.configmap("mindx-dl-fault-config", {"faultCode.json": "{"}, uid="uid-f", resource_version="6")
    pipeline(Change(ChangeType.MODIFIED, "faultconfig", "kube-system/mindx-dl-fault-config", bad, None, False, 0.0))
    assert queue.empty()
    assert pipeline.rejected == rejected + 1
