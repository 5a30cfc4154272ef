"""A level change clears a fault and raises it again under the same key in one detector result: the pipeline
queues the clear before the new fault, so the engine (and the pipeline's active faults, which a new leader
re-evaluates) keep the fault at its new level instead of dropping it."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta

from support import factories

from agent.core.clock import FixedClock
from agent.core.cluster import ConfigMapRecord
from agent.core.faults import Fault, FaultCleared
from agent.engine.detecting import DetectPipeline
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sources.state import ClusterState
from testbed.inject import ChipFault, device_info_cm

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CODE = "80E18404"  # RestartNPU in the shipped table


def _device(data: dict[str, str], rv: str) -> Change[ConfigMapRecord]:
    cm = factories.configmap(
        "mindx-dl-deviceinfo-n1", data, uid="uid-1", resource_version=rv, labels=(("mx-consumer-cim", "true"),)
    )
    return Change(ChangeType.MODIFIED, "deviceinfo", "kube-system/mindx-dl-deviceinfo-n1", cm, None, False, 0.0)


def _without_levels(data: dict[str, str]) -> dict[str, str]:
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


def _drain(queue: asyncio.Queue[Fault | FaultCleared]) -> list[Fault | FaultCleared]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


def _order(items: list[Fault | FaultCleared]) -> list[tuple[str, str]]:
    return [
        ("cleared", i.fault.level.wire_name) if isinstance(i, FaultCleared) else ("fault", i.level.wire_name)
        for i in items
    ]


def _pipeline() -> tuple[DetectPipeline, asyncio.Queue[Fault | FaultCleared]]:
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    return DetectPipeline(Settings(), ClusterState(), queue, clock=FixedClock(NOW)), queue


def test_a_level_table_reload_keeps_the_re_raised_fault_active() -> None:
    pipeline, queue = _pipeline()
    data = device_info_cm("n1", [ChipFault(1, (CODE,), "RestartNPU")], now=NOW)["data"]
    data = _without_levels(data)  # an older plugin's shape: the table decides (a level the plugin wrote is final)
    pipeline(_device(data, "1"))
    assert _order(_drain(queue)) == [("fault", "RestartNPU")]
    overrides = {"faultCode.json": f'{{"SeparateNPUCodes":["{CODE}"]}}'}
    cm = factories.configmap("mindx-dl-fault-config", overrides, uid="uid-f", resource_version="5")
    pipeline(Change(ChangeType.ADDED, "faultconfig", "kube-system/mindx-dl-fault-config", cm, None, False, 0.0))

    assert _order(_drain(queue)) == [("cleared", "RestartNPU"), ("fault", "SeparateNPU")]
    assert [(f.level.wire_name, f.chips) for f in pipeline.active_faults()] == [("SeparateNPU", ("Ascend910-1",))]


def test_a_device_plugin_level_change_of_the_same_chip_keeps_the_fault_active() -> None:
    pipeline, queue = _pipeline()
    pipeline(_device(device_info_cm("n1", [ChipFault(3, (CODE,), "RestartNPU")], now=NOW)["data"], "1"))
    later = NOW + timedelta(seconds=1)
    pipeline(_device(device_info_cm("n1", [ChipFault(3, (CODE,), "SeparateNPU")], now=later)["data"], "2"))

    assert _order(_drain(queue)) == [("fault", "RestartNPU"), ("cleared", "RestartNPU"), ("fault", "SeparateNPU")]
    assert [(f.level.wire_name, f.chips) for f in pipeline.active_faults()] == [("SeparateNPU", ("Ascend910-3",))]
