"""Chip names are input too (issue 16 item 7): a device ConfigMap's names are checked against its Node's NPU
resource and capacity, garbage is reported once per write (never a fault), a valid chip among garbage still
counts, one object can cause a bounded number of faults, and a ConfigMap for a Node that does not exist is
reported and not acted on."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from support import factories

from agent.core.clock import FixedClock
from agent.core.cluster import ConfigMapRecord, NodeRecord
from agent.core.detect.chips import MAX_CHIPS_PER_NODE, ChipNames, NodeChips
from agent.core.detect.common import DetectResult
from agent.core.detect.deviceinfo import DeviceInfoDetector, NodeLookup
from agent.core.detect.levels import load_shipped_table
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel
from agent.engine.detecting import DetectPipeline
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sources.state import ClusterState
from testbed.inject import ChipFault, device_info_cm

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
P = "huawei.com/Ascend910"
EIGHT = NodeChips(P, 8)
GARBAGE = [
    "Ascend910-99",  # beyond the 8 chips of the node
    "Ascend910-8",
    "Ascend910-\u0663",  # ARABIC-INDIC DIGIT THREE
    "Ascend910-3\u202e",  # RIGHT-TO-LEFT OVERRIDE
    "\u202eAscend910-3",
    "Ascend910-\U0001f4a5",
    "npu-1",  # another product's prefix
    "Ascend910-01",
    "Ascend910--1",
    "Ascend910",
    "x" * 500,
]


@pytest.mark.parametrize(
    ("name", "chips", "valid"),
    [
        *(pytest.param(f"Ascend910-{i}", EIGHT, True, id=f"chip-{i}") for i in (0, 7)),
        *(pytest.param(n, EIGHT, False, id=f"garbage-{i}") for i, n in enumerate(GARBAGE)),
        pytest.param("Ascend910-15", NodeChips(P, 16), True, id="a3-16-chips"),
        pytest.param("npu-6", NodeChips("huawei.com/npu", 8), True, id="npu-prefix"),
        pytest.param("Ascend910-2c-111-0", NodeChips(P, 8), False, id="virtual-without-its-key"),
        pytest.param("Ascend910-63", None, True, id="unknown-node-below-limit"),
        pytest.param(f"Ascend910-{MAX_CHIPS_PER_NODE}", None, False, id="unknown-node-at-limit"),
    ],
)
def test_chip_names(name: str, chips: NodeChips | None, valid: bool) -> None:
    prefixes = [chips.resource] if chips is not None else [P]
    assert ChipNames("n1", prefixes, chips).valid(name) is valid


def test_a_virtual_npu_key_allows_its_names() -> None:
    names = ChipNames("n1", [P, P + "-2c"], EIGHT)
    assert names.valid("Ascend910-2c-111-0")
    assert not names.valid("Ascend910-2c-111-8")


def _cm(device_list: dict[str, str], *, manual: str = "", rv: str = "1", node: str = "n1") -> ConfigMapRecord:
    info = {"DeviceList": device_list, "UpdateTime": 1_740_830_000}
    # Go's encoding of these values (sorted keys, no spaces, UTF-8 kept; none has <>& or U+2028/9 to escape).
    text = json.dumps(info, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    check = hashlib.sha256(text.encode()).hexdigest()
    cfg = json.dumps({"DeviceInfo": info, "SuperPodID": -2, "ServerIndex": -2, "CheckCode": check})
    data = {"DeviceInfoCfg": cfg, "ManuallySeparateNPU": manual}
    return factories.configmap(f"mindx-dl-deviceinfo-{node}", data, uid="uid-cm", resource_version=rv)


def _detector(nodes: dict[str, NodeChips]) -> DeviceInfoDetector:
    lookup: NodeLookup = nodes.get
    return DeviceInfoDetector(load_shipped_table(), nodes=lookup)


def _chips(result: DetectResult) -> list[tuple[str, ...]]:
    return sorted(f.chips for f in result.faults)


def test_garbage_in_the_lists_is_one_rejection_and_the_valid_chip_among_it_still_counts() -> None:
    det = _detector({"n1": EIGHT})
    out = det.update(_cm({f"{P}-Unhealthy": ",".join([*GARBAGE, "Ascend910-3"])}), NOW)
    assert _chips(out) == [("Ascend910-3",)]  # old code: a fault per garbage name too
    (rej,) = out.rejections
    assert rej.reason == "bad-chip-name"
    assert rej.detail.startswith(f"{len(GARBAGE)} name(s) are not chips of node n1 (Ascend910-<0..7> (capacity 8; ")


def test_garbage_in_manually_separate_npu_is_rejected_and_a_real_entry_kept() -> None:
    det = _detector({"n1": EIGHT})
    out = det.update(_cm({P: "Ascend910-0"}, manual="Ascend910-99,\U0001f600,Ascend910-5, ,Ascend910-\u0663"), NOW)
    assert [(f.chips, f.level) for f in out.faults] == [(("Ascend910-5",), FaultLevel.MANUALLY_SEPARATE)]
    assert [r.reason for r in out.rejections] == ["bad-chip-name"]


def test_a_fault_element_naming_no_chip_is_skipped_but_a_node_fault_is_kept() -> None:
    def element(fault_type: str, name: str) -> dict[str, str]:
        return {"fault_type": fault_type, "npu_name": name, "fault_handling": "SeparateNPU", "fault_code": "80E01801"}

    elements = [
        element("CardUnhealthy", "Ascend910-42"),
        element("CardUnhealthy", "Ascend910-2"),
        element("NodeUnhealthy", "\u202e"),
    ]
    out = _detector({"n1": EIGHT}).update(_cm({f"{P}-Fault": json.dumps(elements)}), NOW)
    assert sorted((f.kind.value, f.chips) for f in out.faults) == [("chip", ("Ascend910-2",)), ("node", ())]
    assert [r.reason for r in out.rejections] == ["bad-chip-name"]


def test_a_10000_chip_write_makes_no_fault_and_one_rejection() -> None:
    det = _detector({"n1": EIGHT})
    names = ",".join(f"Ascend910-{i}" for i in range(100, 10_100))
    out = det.update(_cm({f"{P}-Unhealthy": names, f"{P}-NetworkUnhealthy": names}, manual=names), NOW)
    assert out.faults == []  # old code: 30,000 faults
    (rej,) = out.rejections
    assert rej.detail.startswith("30000 name(s) are not chips of node n1")


def test_10000_names_listing_the_real_chips_too_makes_a_fault_per_real_chip() -> None:
    det = _detector({"n1": EIGHT})
    out = det.update(_cm({f"{P}-Unhealthy": ",".join(f"Ascend910-{i}" for i in range(10_000))}), NOW)
    assert _chips(out) == sorted((f"Ascend910-{i}",) for i in range(8))
    assert [r.reason for r in out.rejections] == ["bad-chip-name"]


def test_the_faults_one_configmap_can_cause_are_bounded_keeping_the_most_severe() -> None:
    elements = [
        {"fault_type": "CardUnhealthy", "npu_name": f"Ascend910-{i % 8}", "fault_handling": level,
         "fault_code": f"80E{i:05X}"}
        for i, level in ((i, "NotHandleFault" if i else "SeparateNPU") for i in range(2_000))
    ]  # fmt: skip
    out = _detector({"n1": EIGHT}).update(_cm({f"{P}-Fault": json.dumps(elements)}), NOW)
    assert len(out.faults) == 3 * 8 + 8
    assert any(f.level is FaultLevel.SEPARATE for f in out.faults)  # the one real fault survives the cut
    assert [r.reason for r in out.rejections] == ["too-many-faults"]


def test_a_configmap_for_a_node_that_does_not_exist_is_reported_and_not_acted_on() -> None:
    nodes: dict[str, NodeChips] = {}
    det = _detector(nodes)
    cm = _cm({f"{P}-Unhealthy": "Ascend910-3"}, node="ghost")
    out = det.update(cm, NOW)
    assert out.faults == []
    assert [(r.reason, r.detail) for r in out.rejections] == [
        ("unknown-node", "node 'ghost' does not exist: its device ConfigMap is not acted on")
    ]
    nodes["ghost"] = EIGHT  # the Node appears: its chip fault counts now
    out = det.recheck(cm, NOW)
    assert _chips(out) == [("Ascend910-3",)]
    assert out.rejections == []
    del nodes["ghost"]  # the Node goes: its faults clear
    out = det.recheck(cm, NOW)
    assert [c.fault.chips for c in out.cleared] == [("Ascend910-3",)]


def test_each_new_bad_write_is_reported_even_with_the_same_text_but_a_re_read_is_not() -> None:
    det = _detector({"n1": EIGHT})
    first = det.update(_cm({f"{P}-Unhealthy": "Ascend910-99"}, rv="1"), NOW)
    assert [r.reason for r in first.rejections] == ["bad-chip-name"]
    # a new write (another bad name, the same count) whose rejection reads as the first one's did
    second = det.update(_cm({f"{P}-Unhealthy": "Ascend910-99", f"{P}-Recovering": ""}, rv="2"), NOW)
    assert [r.detail for r in second.rejections] == [first.rejections[0].detail]  # old code: hidden
    # the fault config reloads: the same content is read again, nothing is repeated
    assert det.set_table(load_shipped_table(), NOW).rejections == []


# ------------------------------------------------------------------------------------------------ the pipeline


def _node(name: str, capacity: int) -> NodeRecord:
    return factories.node(name, at=NOW, npu_allocatable=capacity, npu_capacity=capacity, npu_resource=P)


def _change(source: str, key: str, new: Any, type_: ChangeType = ChangeType.MODIFIED) -> Change[Any]:
    return Change(type_, source, key, new, None, False, time.time())


def _listed(source: str) -> Change[Any]:
    return Change(ChangeType.LISTED, source, "", None, None, True, time.time(), f"{source}@*")


def test_the_pipeline_checks_chips_against_the_node_once_the_nodes_are_listed() -> None:
    state = ClusterState()
    for w in ("nodes@*", "deviceinfo@kube-system"):
        state.expect(w)
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(Settings(), state, queue, clock=FixedClock(NOW))

    def feed(change: Change[Any]) -> None:
        state.apply(change)
        pipeline(change)

    cm = device_info_cm("n1", [ChipFault(3), ChipFault(6)], now=NOW)  # chip 6 does not exist on a 4-chip node
    rec = factories.configmap("mindx-dl-deviceinfo-n1", cm["data"], uid="u")
    ghost = factories.configmap("mindx-dl-deviceinfo-ghost", cm["data"], uid="u2")
    feed(_change("deviceinfo", "kube-system/mindx-dl-deviceinfo-n1", rec, ChangeType.ADDED))
    feed(_change("deviceinfo", "kube-system/mindx-dl-deviceinfo-ghost", ghost, ChangeType.ADDED))
    assert queue.empty()  # held until the Nodes are known
    feed(_change("nodes", "n1", _node("n1", 4), ChangeType.ADDED))
    feed(_listed("nodes"))
    items = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [(i.node, i.chips) for i in items if isinstance(i, Fault)] == [("n1", ("Ascend910-3",))]
    assert pipeline.rejected == 2  # chip 6 on n1, and the ConfigMap of the Node "ghost"
    feed(_change("nodes", "n1", _node("n1", 8)))  # the capacity grows: chip 6 is a chip of n1 now
    items = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [(i.node, i.chips) for i in items if isinstance(i, Fault)] == [("n1", ("Ascend910-6",))]
    assert FaultKind.CHIP in {i.kind for i in items if isinstance(i, Fault)}


def test_noded_reports_each_new_bad_write_even_with_the_same_text() -> None:
    from agent.core.detect.nodeinfo import NodeInfoDetector

    det = NodeInfoDetector(load_shipped_table())

    def write(rv: str, data: dict[str, str]) -> list[str]:
        cm = factories.configmap("mindx-dl-nodeinfo-n1", data, namespace="mindx-dl", uid="u", resource_version=rv)
        return [r.reason for r in det.update(cm, NOW).rejections]

    # two writes without the NodeInfo key: their rejections read the same
    assert write("1", {"updateTime": "2025-03-01T11:00:00Z"}) == ["missing-key"]
    assert write("2", {"updateTime": "2025-03-01T11:00:05Z"}) == ["missing-key"]  # old code: hidden
