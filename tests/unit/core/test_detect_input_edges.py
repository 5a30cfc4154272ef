"""Input the device plugin, ClusterD or a Node can really hold, found misread by a bad-input review: each test
fails on the code before its fix. Well-formed ConfigMaps come from Go (testbed/mcencode, or a ClusterD fixture);
malformed ones are written here by hand, as no Go struct would marshal them."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support import factories

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.chips import NodeChips
from agent.core.detect.clusterd import ClusterDDetector
from agent.core.detect.deviceinfo import DeviceInfoDetector
from agent.core.detect.levels import load_shipped_table
from agent.core.faults import FaultLevel, Rejection
from agent.sources.nodes import NodeConverter
from testbed.inject import ChipFault, device_info_cm

NOW = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
P = "huawei.com/Ascend910"
MC = Path(__file__).parent.parent.parent / "fixtures" / "mindcluster"


def _device_cm(device_list: dict[str, str], *, manual: str = "") -> ConfigMapRecord:
    """A device-plugin ConfigMap holding `device_list` as Go would marshal it (sorted keys, no spaces; none of the
    values here has a character Go escapes), with its CheckCode."""
    info = {"DeviceList": device_list, "UpdateTime": 1_767_254_400}
    text = json.dumps(info, separators=(",", ":"), sort_keys=True)
    cfg = json.dumps({"DeviceInfo": info, "CheckCode": hashlib.sha256(text.encode()).hexdigest()})
    return factories.configmap("mindx-dl-deviceinfo-n1", {"DeviceInfoCfg": cfg,
                           "ManuallySeparateNPU": manual}, uid="uid-cm")  # fmt: skip


def _element(chip: str, level: Any = "SeparateNPU", code: str = "80E01801") -> dict[str, Any]:
    """A ``-Fault`` element with the device plugin's json tags (component/ascend-device-plugin/pkg/common, the
    ``DeviceFault`` struct)."""
    return {"fault_type": "CardUnhealthy", "npu_name": chip, "large_model_fault_level": "SeparateNPU",
            "fault_level": "SeparateNPU", "fault_handling": "SeparateNPU", "fault_code": code,
            "fault_time_and_level_map": {code: {"fault_time": 1_767_254_399_000, "fault_level": level}}}  # fmt: skip


def _chips(faults: list[Any]) -> list[tuple[tuple[str, ...], FaultLevel]]:
    return sorted((f.chips, f.level) for f in faults)


@pytest.mark.parametrize("level", [["SeparateNPU"], {"a": 1}, 3, None, True])
def test_a_code_level_of_the_wrong_type_is_rejected_and_the_rest_of_the_configmap_read(level: object) -> None:
    """Regression: a list (or object) as a code's ``fault_level`` raised TypeError (an unhashable value looked
    up in a set): the detector failed on the whole ConfigMap, and the good fault beside it was lost."""
    healthy = ",".join(f"Ascend910-{i}" for i in (0, 1, 2, 4, 6, 7))
    dl = {P: healthy, f"{P}-Unhealthy": "Ascend910-3,Ascend910-5",
          f"{P}-Fault": json.dumps([_element("Ascend910-3"), _element("Ascend910-5", level)])}  # fmt: skip
    out = DeviceInfoDetector(load_shipped_table()).update(_device_cm(dl), NOW)
    assert _chips(out.faults) == [(("Ascend910-3",), FaultLevel.SEPARATE), (("Ascend910-5",), FaultLevel.SEPARATE)]
    assert [r.reason for r in out.rejections] == ["wrong-type"]


def test_a_chip_whose_id_is_at_the_capacity_counts_when_the_plugin_lists_it() -> None:
    """Regression: chip ids are physical; a chip the driver did not enumerate leaves capacity 7 with ids up to 7,
    and the fault on Ascend910-7 (in the plugin's own lists, a ``-Fault`` element and ManuallySeparateNPU) was
    refused as not a chip of the node."""
    seven = NodeChips(P, 7)
    dl = {P: "Ascend910-0,Ascend910-1,Ascend910-2,Ascend910-4,Ascend910-5,Ascend910-6",
          f"{P}-Unhealthy": "Ascend910-7", f"{P}-Fault": json.dumps([_element("Ascend910-7")])}  # fmt: skip
    det = DeviceInfoDetector(load_shipped_table(), nodes=lambda node: seven)
    out = det.update(_device_cm(dl, manual="Ascend910-7"), NOW)
    assert _chips(out.faults) == [
        (("Ascend910-7",), FaultLevel.SEPARATE),
        (("Ascend910-7",), FaultLevel.MANUALLY_SEPARATE),
    ]
    assert out.rejections == []


def test_a_name_at_the_capacity_the_plugin_does_not_list_is_still_refused() -> None:
    eight = NodeChips(P, 8)
    dl = {P: ",".join(f"Ascend910-{i}" for i in range(8)), f"{P}-Fault": json.dumps([_element("Ascend910-9")])}
    out = DeviceInfoDetector(load_shipped_table(), nodes=lambda node: eight).update(_device_cm(dl), NOW)
    assert out.faults == []
    assert [r.reason for r in out.rejections] == ["bad-chip-name"]


def test_lists_naming_more_chips_than_the_capacity_do_not_widen_it() -> None:
    eight = NodeChips(P, 8)
    dl = {f"{P}-Unhealthy": ",".join(f"Ascend910-{i}" for i in range(12))}
    out = DeviceInfoDetector(load_shipped_table(), nodes=lambda node: eight).update(_device_cm(dl), NOW)
    assert _chips(out.faults) == sorted(((f"Ascend910-{i}",), FaultLevel.SEPARATE) for i in range(8))
    assert [r.reason for r in out.rejections] == ["bad-chip-name"]


@pytest.mark.parametrize("entry", ["garbage", None, 5, []])
def test_a_clusterd_entry_that_is_not_an_object_keeps_the_faults_read_before(entry: object) -> None:
    """Regression: such an entry was rejected and then dropped as gone, clearing every fault of the node (faulty
    hardware read as healthy); MindCluster's scheduler plugin keeps its old cache on a string entry."""
    text = (MC / "clusterd-device-faults.json").read_text()
    fixture = json.loads(text)
    det = ClusterDDetector(load_shipped_table())
    first = det.update(
        factories.configmap("cluster-info-device-0", fixture["data"], namespace="mindx-dl", uid="u"), NOW
    )
    assert len(first.faults) == 3
    chunk = json.loads(fixture["data"]["cluster-info-device-0"])
    chunk["mindx-dl-deviceinfo-mc-node-0"] = entry
    bad = factories.configmap(
        "cluster-info-device-0",
        {"cluster-info-device-0": json.dumps(chunk)},
        namespace="mindx-dl",
        uid="u",
        resource_version="2",
    )
    out = det.update(bad, NOW)
    assert out.cleared == []
    assert [r.reason for r in out.rejections] == ["wrong-type"]
    del chunk["mindx-dl-deviceinfo-mc-node-0"]  # the entry gone from the map: its faults clear
    gone = factories.configmap(
        "cluster-info-device-0",
        {"cluster-info-device-0": json.dumps(chunk)},
        namespace="mindx-dl",
        uid="u",
        resource_version="3",
    )
    assert len(det.update(gone, NOW).cleared) == 3


def test_codes_without_leading_zeros_and_public_codes_are_kept() -> None:
    """Regression: the plugin writes a code it has no configuration for with Go's %x, without leading zeros, and
    ClusterD takes any 9-character public-fault code; both were refused as bad-code and the fault kept no code.
    The ConfigMap is Go's (mcencode)."""
    faults = [ChipFault(2, codes=("c1234ab",)), ChipFault(4, codes=("NPUHB0001",))]
    cm = device_info_cm("n1", faults, now=NOW)
    out = DeviceInfoDetector(load_shipped_table()).update(
        factories.configmap("mindx-dl-deviceinfo-n1", cm["data"], uid="u"), NOW
    )
    assert sorted((f.chips, f.codes) for f in out.faults) == [
        (("Ascend910-2",), ("0C1234AB",)),
        (("Ascend910-4",), ("NPUHB0001",)),
    ]
    assert out.rejections == []


@pytest.mark.parametrize("quantity", ["\u00b2", "\uff18", "8\u0663"])
def test_a_node_npu_quantity_of_non_ascii_digits_is_a_rejection_not_an_exception(quantity: str) -> None:
    """Regression: ``"²"`` passed ``str.isdigit`` and made ``int`` raise ValueError out of the converter;
    fullwidth ``"８"`` was read as 8."""
    raw = {"metadata": {"name": "n1", "uid": "u1", "resourceVersion": "1"},
           "status": {"capacity": {P: quantity}, "allocatable": {P: "8"}}}  # fmt: skip
    rejection = NodeConverter(npu_resources=(P,))(raw)
    assert isinstance(rejection, Rejection)
    assert rejection.reason == "bad-allocatable"


def test_a_clusterd_entry_whose_reading_failed_is_read_again_at_the_next_identical_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Regression: the entry was remembered as read before its detector ran, so after a detector failure the
    next identical write (ClusterD rewrites a chunk every few seconds) skipped it and its faults never came."""
    fixture = json.loads((MC / "clusterd-device-faults.json").read_text())
    record = factories.configmap("cluster-info-device-0", fixture["data"], namespace="mindx-dl", uid="u")
    det = ClusterDDetector(load_shipped_table())
    real = det.devices.update_data

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a detector bug")

    monkeypatch.setattr(det.devices, "update_data", broken)
    with pytest.raises(RuntimeError):
        det.update(record, NOW)
    monkeypatch.setattr(det.devices, "update_data", real)
    assert len(det.update(record, NOW).faults) == 3
