"""The ClusterD stand-in's pre-separate rules (testbed/mcencode/clusterd.go), as MindCluster's real ClusterD
showed them on the testbed (docs/mindcluster-conformance.md "ClusterD"; the record
tests/fixtures/conformance/clusterd-real-22bb3d98.json; source component/clusterd/pkg/application/faultmanager/
cmprocess/preseparate): a PreSeparateNPU chip is listed unhealthy only while no pod holds it; a node (NodeD) or
switch whose most severe fault is pre-separate reports NodeStatus Healthy while pods hold chips on it, else
UnHealthy."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from testbed.encoder import Encoder, shared

WRITTEN_S = 1_767_254_400
NODE = "ps-node"
CHIP = "Ascend910-0"


@pytest.fixture
def aggregator() -> Iterator[Encoder]:
    enc = Encoder(shared().binary)
    try:
        yield enc
    finally:
        enc.close()


def _report(aggregator: Encoder, used: dict[str, list[str]]) -> dict[str, Any]:
    assert aggregator.request("clusterd-used", used=used) is True
    out = {}
    for cm in aggregator.request("clusterd-report", namespace="mindx-dl"):
        name = cm["metadata"]["name"]
        out[name] = json.loads(cm["data"][name]) if cm["data"][name] else ""
    return out


def _device(level: str, code: str = "80E18402", fault_type: str = "CardUnhealthy") -> dict[str, Any]:
    fault = {"chip": 0, "codes": [code], "level": level, "fault_type": fault_type, "time_ms": WRITTEN_S * 1000}
    return shared().device_cm({"node": NODE, "update_time": WRITTEN_S, "faults": [fault]})


@pytest.mark.parametrize(
    ("used", "unhealthy"),
    [
        pytest.param({}, CHIP, id="unused-chip-listed-unhealthy"),
        pytest.param({NODE: [CHIP]}, "", id="chip-in-use-not-listed"),
        pytest.param({NODE: ["Ascend910-5"]}, CHIP, id="other-chip-in-use-listed"),
    ],
)
def test_a_preseparate_chip_is_unhealthy_only_while_no_pod_holds_it(
    aggregator: Encoder, used: dict[str, list[str]], unhealthy: str
) -> None:
    assert aggregator.request("clusterd-put", configmap=_device("PreSeparateNPU")) is True
    entry = _report(aggregator, used)["cluster-info-device-0"][f"mindx-dl-deviceinfo-{NODE}"]
    assert entry["DeviceList"]["huawei.com/Ascend910-Unhealthy"] == unhealthy
    assert CHIP not in entry["DeviceList"]["huawei.com/Ascend910"].split(",")
    faults = json.loads(entry["DeviceList"]["huawei.com/Ascend910-Fault"])
    assert [(f["npu_name"], f["fault_level"]) for f in faults] == [(CHIP, "PreSeparateNPU")]


@pytest.mark.parametrize(
    "device",
    [
        pytest.param(lambda: _device("SeparateNPU"), id="separate-chip-in-use-stays-unhealthy"),
        pytest.param(
            lambda: _device("PreSeparateNPU", "81078603", "CardNetworkUnhealthy"), id="parameter-plane-code-untouched"
        ),
    ],
)
def test_other_faults_keep_the_plugins_lists(aggregator: Encoder, device: Any) -> None:
    cm = device()
    assert aggregator.request("clusterd-put", configmap=cm) is True
    written = json.loads(cm["data"]["DeviceInfoCfg"])["DeviceInfo"]["DeviceList"]
    entry = _report(aggregator, {NODE: [CHIP]})["cluster-info-device-0"][f"mindx-dl-deviceinfo-{NODE}"]
    assert entry["DeviceList"] == written


@pytest.mark.parametrize(
    ("level", "used", "status"),
    [
        pytest.param("PreSeparateFault", {}, "UnHealthy", id="preseparate-free-node-unhealthy"),
        pytest.param("PreSeparateFault", {NODE: [CHIP]}, "Healthy", id="preseparate-node-in-use-healthy"),
        pytest.param("SeparateFault", {NODE: [CHIP]}, "UnHealthy", id="separate-stays-unhealthy"),
        pytest.param("NotHandleFault", {}, "Healthy", id="nothandle-unchanged"),
    ],
)
def test_a_noded_preseparate_node_status_follows_whether_pods_use_the_node(
    aggregator: Encoder, level: str, used: dict[str, list[str]], status: str
) -> None:
    cm = shared().node_cm(
        {
            "node": NODE,
            "update_time": WRITTEN_S,
            "devs": [{"device_type": "CPU", "device_id": 1, "codes": ["00000011"], "level": level}],
        }
    )
    assert aggregator.request("clusterd-put", configmap=cm) is True
    entry = _report(aggregator, used)["cluster-info-node-cm"][f"mindx-dl-nodeinfo-{NODE}"]
    assert entry["NodeStatus"] == status
    assert [d["FaultLevel"] for d in entry["FaultDevList"]] == [level]


@pytest.mark.parametrize(
    ("level", "used", "status"),
    [
        pytest.param("PreSeparate", {}, "UnHealthy", id="preseparate-free-node-unhealthy"),
        pytest.param("PreSeparate", {NODE: [CHIP]}, "Healthy", id="preseparate-node-in-use-healthy"),
        pytest.param("Separate", {NODE: [CHIP]}, "UnHealthy", id="separate-stays-unhealthy"),
        pytest.param("SubHealthFault", {}, "SubHealthy", id="subhealth-unchanged"),
    ],
)
def test_a_preseparate_switch_status_follows_whether_pods_use_the_node(
    aggregator: Encoder, level: str, used: dict[str, list[str]], status: str
) -> None:
    event = {"code": "[0x00f103b0,155907,na,na]", "switch_chip": 0, "port": 3, "level": level, "time_ms": 0}
    cm = shared().device_cm({"node": NODE, "update_time": WRITTEN_S, "switch": {"enabled": True, "events": [event]}})
    assert aggregator.request("clusterd-put", configmap=cm) is True
    entry = _report(aggregator, used)["cluster-info-switch-0"][f"mindx-dl-switchinfo-{NODE}"]
    assert entry["NodeStatus"] == status
    assert entry["FaultLevel"] == level
