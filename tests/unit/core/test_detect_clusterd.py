"""ClusterD's cluster-info-* ConfigMaps in MindCluster's real shape: flat entries, no CheckCode, an empty string
for "nothing to report". The fixtures come from testbed/mcencode (Go encoding/json of MindCluster's field names
and types) and from MindCluster's own documentation, never from our Python encoders."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from support import factories

from agent.core.cluster import ConfigMapRecord
from agent.core.detect.clusterd import ClusterDDetector
from agent.core.detect.deviceinfo import NodeChips
from agent.core.detect.levels import load_shipped_table
from agent.core.faults import FaultKind, FaultLevel

MC = Path(__file__).parent.parent.parent / "fixtures" / "mindcluster"
NOW = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
SIGNAL = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)


def record(name: str) -> ConfigMapRecord:
    doc: dict[str, Any] = json.loads((MC / name).read_text())
    meta = doc["metadata"]
    return factories.configmap(
        meta["name"], doc["data"], namespace=meta["namespace"], uid="u", labels=tuple(meta["labels"].items())
    )


def _cm(name: str, value: str) -> ConfigMapRecord:
    return factories.configmap(name, {name: value}, namespace="mindx-dl", uid="u")


def test_device_entries_are_read_without_a_check_code_and_an_empty_string_clears_them() -> None:
    det = ClusterDDetector(load_shipped_table())
    res = det.update(record("clusterd-device-faults.json"), NOW)
    assert res.rejections == []
    got = sorted((f.kind, f.level, f.node, f.chips, f.codes, f.reason) for f in res.faults)
    assert got == [
        (FaultKind.CHIP, FaultLevel.SEPARATE, "mc-node-0", ("Ascend910-3",), ("80E3A201",), "CardUnhealthy"),
        (FaultKind.CHIP, FaultLevel.SEPARATE, "mc-node-0", ("Ascend910-5",), ("220001001",), "PublicFault"),
        (
            FaultKind.NETWORK,
            FaultLevel.PRE_SEPARATE,
            "mc-node-0",
            ("Ascend910-1",),
            ("81078603",),
            "CardNetworkUnhealthy",
        ),
    ]
    assert all(f.source.name == "cluster-info-device-0" for f in res.faults)
    # ClusterD's public faults carry fault_time in seconds (fault_collector.go), the plugin's in milliseconds
    by_reason = {f.reason: f.signal_time for f in res.faults}
    assert by_reason["PublicFault"] == datetime(2026, 1, 1, 7, 59, 55, tzinfo=UTC)
    assert by_reason["CardUnhealthy"] == datetime(2026, 1, 1, 7, 59, 55, 123000, tzinfo=UTC)
    assert not det.update(record("clusterd-device-faults.json"), NOW)  # ClusterD's 5 s rewrite: nothing new

    gone = det.update(record("clusterd-device-empty.json"), NOW)
    assert gone.rejections == []  # not json-truncated: an empty string is "all healthy"
    assert sorted(c.fault.chips for c in gone.cleared) == [("Ascend910-1",), ("Ascend910-3",), ("Ascend910-5",)]
    assert gone.faults == []


def test_an_entry_that_leaves_the_map_clears_its_faults() -> None:
    det = ClusterDDetector(load_shipped_table())
    det.update(record("clusterd-device-faults.json"), NOW)
    data = json.loads(record("clusterd-device-faults.json").data["cluster-info-device-0"])
    del data["mindx-dl-deviceinfo-mc-node-0"]
    res = det.update(_cm("cluster-info-device-0", json.dumps(data)), NOW)
    assert {c.fault.node for c in res.cleared} == {"mc-node-0"}
    assert len(res.cleared) == 3


def test_node_entries_take_their_update_time_in_milliseconds_and_clear_on_empty() -> None:
    det = ClusterDDetector(load_shipped_table())
    res = det.update(record("clusterd-node-fault.json"), NOW)
    assert res.rejections == []
    (fault,) = res.faults
    assert (fault.kind, fault.level, fault.node, fault.codes, fault.reason) == (
        FaultKind.NODE,
        FaultLevel.SEPARATE,
        "mc-node-0",
        ("00000011",),
        "NodeD-CPU",
    )
    assert fault.signal_time == SIGNAL
    gone = det.update(record("clusterd-node-empty.json"), NOW)
    assert [c.fault.node for c in gone.cleared] == ["mc-node-0"]
    assert gone.rejections == []


def test_switch_entries_a_separate_switch_fault_is_a_node_fault() -> None:
    det = ClusterDDetector(load_shipped_table())
    res = det.update(record("clusterd-switch-separate.json"), NOW)
    assert res.rejections == []
    (fault,) = res.faults
    assert (fault.kind, fault.level, fault.node, fault.chips, fault.codes, fault.reason) == (
        FaultKind.NODE,
        FaultLevel.SEPARATE,
        "mc-node-0",
        (),
        ("[0x00f103b0,155907,na,na]",),
        "SwitchFault",
    )
    assert fault.signal_time == SIGNAL
    gone = det.update(record("clusterd-switch-empty.json"), NOW)
    assert [c.fault.node for c in gone.cleared] == ["mc-node-0"]
    gone = det.delete("mindx-dl", "cluster-info-switch-0", NOW)
    assert not gone


def test_mindcluster_documentation_sample() -> None:
    """The cluster-info-device-0 value printed in MindCluster's docs (common_operations.md): three chips with a
    public fault on one node, a healthy node with an empty ``-Fault`` list."""
    res = ClusterDDetector(load_shipped_table()).update(record("docs-cluster-info-device-0.json"), NOW)
    assert res.rejections == []
    assert sorted((f.node, f.chips, f.codes, f.level, f.reason) for f in res.faults) == [
        ("localhost.localdomain", (f"Ascend910-{i}",), ("220001001",), FaultLevel.SEPARATE, "PublicFault")
        for i in range(3)
    ]


def test_deleting_the_configmap_clears_every_entry() -> None:
    det = ClusterDDetector(load_shipped_table())
    det.update(record("clusterd-node-fault.json"), NOW)
    gone = det.delete("mindx-dl", "cluster-info-node-cm", NOW)
    assert [c.fault.node for c in gone.cleared] == ["mc-node-0"]


@pytest.mark.parametrize(
    ("record_", "reason"),
    [
        pytest.param(factories.configmap("other", {}, namespace="mindx-dl", uid="u"), "unexpected-name", id="name"),
        pytest.param(
            factories.configmap("cluster-info-node-cm", {}, namespace="mindx-dl", uid="u"), "missing-key", id="key"
        ),
        pytest.param(_cm("cluster-info-node-cm", "{"), "json-truncated", id="truncated"),
        pytest.param(_cm("cluster-info-node-cm", "[]"), "wrong-type", id="not-map"),
        pytest.param(_cm("cluster-info-device-1", '{"mindx-dl-deviceinfo-x": 5}'), "wrong-type", id="entry-type"),
        pytest.param(_cm("cluster-info-switch-0", '{"other-x": {}}'), "unexpected-name", id="switch-name"),
        pytest.param(
            _cm("cluster-info-device-0", '{"mindx-dl-deviceinfo-x": {"UpdateTime": 1767254400}}'),
            "missing-key",
            id="no-device-list",
        ),
    ],
)
def test_clusterd_rejections(record_: ConfigMapRecord, reason: str) -> None:
    res = ClusterDDetector(load_shipped_table()).update(record_, NOW)
    assert reason in {r.reason for r in res.rejections}


def test_a_fault_config_reload_reclassifies_clusterd_entries() -> None:
    """The level table changed (mindx-dl-fault-config): ClusterD's device entries are classified again, like the
    per-node ones, instead of being rejected as missing their DeviceInfoCfg."""
    table = load_shipped_table()
    det = ClusterDDetector(table)
    det.update(record("clusterd-device-faults.json"), NOW)
    res = det.set_table(table.with_overrides({"80E3A201": FaultLevel.RESTART_NPU}), NOW)
    assert res.rejections == []
    # the device plugin wrote SeparateNPU for 80E3A201: a level the reporter wrote is final
    assert not res.cleared
    assert not res.faults
    assert not det.update(record("clusterd-device-faults.json"), NOW)


@pytest.mark.parametrize(
    "fixture", ["clusterd-device-faults.json", "clusterd-switch-separate.json"], ids=["device", "switch"]
)
def test_an_entry_that_moves_to_a_chunk_written_first_keeps_its_faults(fixture: str) -> None:
    # ClusterD splits the map into chunks with no fixed node order (SplitMapToSafeChunks): a node may move from
    # chunk 1 to chunk 0, and chunk 0 (which now holds it) can be read before chunk 1 (which no longer does).
    # The entry left chunk 1 but is still reported: its faults must stay active.
    rec = record(fixture)
    family = rec.name.rsplit("-", 1)[0]  # cluster-info-device / cluster-info-switch
    value = rec.data[rec.name]
    det = ClusterDDetector(load_shipped_table())
    first = det.update(_cm(f"{family}-1", value), NOW)
    assert first.faults
    moved = det.update(_cm(f"{family}-0", value), NOW)
    assert moved.cleared == []  # the same entry, now in chunk 0: nothing new, nothing cleared
    left = det.update(_cm(f"{family}-1", ""), NOW)  # chunk 1 no longer holds it
    assert left.cleared == []
    assert left.faults == []
    # and when chunk 0, which holds it now, drops it, its faults clear
    gone = det.update(_cm(f"{family}-0", ""), NOW)
    assert sorted(c.fault.key for c in gone.cleared) == sorted(f.key for f in first.faults)


def test_a_deleted_chunk_does_not_clear_entries_another_chunk_now_holds() -> None:
    value = record("clusterd-device-faults.json").data["cluster-info-device-0"]
    det = ClusterDDetector(load_shipped_table())
    det.update(_cm("cluster-info-device-1", value), NOW)
    det.update(_cm("cluster-info-device-0", value), NOW)
    assert not det.delete("mindx-dl", "cluster-info-device-1", NOW).cleared


# one Go-made fixture per entry family, each with a fault on mc-node-0 (mc-node-1 healthy), and the fault's kind
ENTRY_FIXTURES = [
    pytest.param("clusterd-node-fault.json", FaultKind.NODE, id="node-entry"),
    pytest.param("clusterd-switch-separate.json", FaultKind.NODE, id="switch-entry"),
    pytest.param("clusterd-device-faults.json", FaultKind.CHIP, id="device-entry"),
]


@pytest.mark.parametrize(("fixture", "kind"), ENTRY_FIXTURES)
def test_an_entry_for_a_node_that_does_not_exist_is_not_acted_on_until_the_node_appears(
    fixture: str, kind: FaultKind
) -> None:
    """ClusterD entries name their Node; one that does not exist gives no fault and one unknown-node rejection
    (not repeated by ClusterD's rewrites), as NodeD's and the device plugin's own ConfigMaps do. ClusterD's next
    write after the Node appeared raises the entry's faults, unchanged as it is; after the Node went, they clear.
    Regression: before, node and switch entries of a Node that does not exist were acted on."""
    present = {"mc-node-1"}  # the fixtures' other node, healthy
    det = ClusterDDetector(load_shipped_table(), nodes=lambda n: NodeChips() if n in present else None)
    first = det.update(record(fixture), NOW)
    assert first.faults == []
    assert [r.reason for r in first.rejections] == ["unknown-node"]
    assert "mc-node-0" in first.rejections[0].detail
    again = det.update(record(fixture), NOW)  # ClusterD's periodic rewrite of the same content
    assert (again.faults, again.rejections) == ([], [])

    present.add("mc-node-0")
    appeared = det.update(record(fixture), NOW)
    assert appeared.faults
    assert {f.node for f in appeared.faults} == {"mc-node-0"}
    assert kind in {f.kind for f in appeared.faults}
    assert appeared.rejections == []
    assert not det.update(record(fixture), NOW)  # nothing new while the Node stays

    present.discard("mc-node-0")
    went = det.update(record(fixture), NOW)
    assert went.faults == []
    assert {c.fault.node for c in went.cleared} == {"mc-node-0"}
    assert len(went.cleared) == len(appeared.faults)


def test_skipping_entries_read_already_changes_nothing_the_detector_reports() -> None:
    """The fast path (an entry equal to the one last read, its Node looking the same, is not read again) gives
    what reading every entry gives, write after write: ClusterD's rewrites of the same content, one entry's
    UpdateTime or faults changing, entries leaving and coming back, a Node going, coming back or changing its
    capacity, a level reload. The same faults and clears; its rejections are among the full read's (that one
    may say again, after a level reload, a rejection an unchanged entry had already given: a re-read of the
    unchanged entry forgot it had)."""
    import random

    rng = random.Random(7)
    device = json.loads(record("clusterd-device-faults.json").data["cluster-info-device-0"])
    node_cm = json.loads(record("clusterd-node-fault.json").data["cluster-info-node-cm"])
    healthy = json.loads(record("clusterd-device-empty.json").data["cluster-info-device-0"] or "{}")
    chips: dict[str, NodeChips | None] = {"mc-node-0": NodeChips(), "mc-node-1": NodeChips()}
    fast = ClusterDDetector(load_shipped_table(), nodes=chips.get)
    slow = ClusterDDetector(load_shipped_table(), nodes=chips.get, fast_path=False)
    assert healthy == {}
    skipped = 0
    for step in range(300):
        what = rng.choice(["rewrite", "update-time", "fault-off", "fault-on", "leave", "node", "capacity", "levels"])
        if what == "update-time":
            entry = device[rng.choice(sorted(device))]
            entry["UpdateTime"] += 1
        elif what in {"fault-off", "fault-on"} and "mindx-dl-deviceinfo-mc-node-0" in device:
            entry = device["mindx-dl-deviceinfo-mc-node-0"]
            original = json.loads(record("clusterd-device-faults.json").data["cluster-info-device-0"])
            entry["DeviceList"] = (
                original["mindx-dl-deviceinfo-mc-node-1"]["DeviceList"]
                if what == "fault-off"
                else original["mindx-dl-deviceinfo-mc-node-0"]["DeviceList"]
            )
        elif what == "leave":
            name = rng.choice(sorted(device))
            restore = json.loads(record("clusterd-device-faults.json").data["cluster-info-device-0"])
            if len(device) == 2:
                del device[name]
            else:
                device = restore
        elif what == "node":
            node = rng.choice(sorted(chips))
            chips[node] = None if chips[node] is not None else NodeChips()
        elif what == "capacity":
            node = rng.choice(sorted(chips))
            chips[node] = NodeChips("huawei.com/Ascend910", rng.choice([4, 8, None]))
        elif what == "levels":
            now = NOW.replace(second=step % 60)
            got, want = fast.set_table(load_shipped_table(), now), slow.set_table(load_shipped_table(), now)
            assert (got.faults, got.cleared) == (want.faults, want.cleared), step
            assert all(r in want.rejections for r in got.rejections), step
            continue
        for name, value in (("cluster-info-device-0", device), ("cluster-info-node-cm", node_cm)):
            cm = factories.configmap(
                name, {name: json.dumps(value)}, namespace="mindx-dl", uid="u", resource_version=str(step)
            )
            got, want = fast.update(cm, NOW), slow.update(cm, NOW)
            assert (got.faults, got.cleared) == (want.faults, want.cleared), (step, what, name)
            assert all(r in want.rejections for r in got.rejections), (step, what, name)
        skipped += what == "rewrite"
    assert skipped > 20  # the rewrites of the same content, the case the fast path is for, were exercised


@pytest.mark.parametrize(("fixture", "kind"), ENTRY_FIXTURES)
def test_a_node_that_appears_or_goes_has_its_entries_read_again_without_a_clusterd_write(
    fixture: str, kind: FaultKind
) -> None:
    """ClusterD writes a chunk again only when one of its entries changes: the Node's own change has its entries
    read again (recheck), as the per-node ConfigMaps are. Regression: before, they waited for that write."""
    present = {"mc-node-1"}
    det = ClusterDDetector(load_shipped_table(), nodes=lambda n: NodeChips() if n in present else None)
    assert det.update(record(fixture), NOW).faults == []
    assert det.recheck("mc-node-0", NOW) == det.recheck("mc-node-1", NOW)  # nothing changed: nothing
    assert not det.recheck("mc-node-0", NOW)

    present.add("mc-node-0")
    appeared = det.recheck("mc-node-0", NOW)
    assert {f.node for f in appeared.faults} == {"mc-node-0"}
    assert kind in {f.kind for f in appeared.faults}
    assert appeared.rejections == []
    assert not det.recheck("mc-node-0", NOW)  # once
    assert not det.update(record(fixture), NOW)  # ClusterD's next write of the same content: nothing new

    present.discard("mc-node-0")
    went = det.recheck("mc-node-0", NOW)
    assert went.faults == []
    assert {c.fault.node for c in went.cleared} == {"mc-node-0"}
    assert len(went.cleared) == len(appeared.faults)
    assert [r.reason for r in went.rejections] == ["unknown-node"]
    assert not det.recheck("ghost", NOW)  # a node no entry names


def _clusterd_cm(name: str, value: object) -> ConfigMapRecord:
    return _cm(name, value if isinstance(value, str) else json.dumps(value))


def test_a_capacity_change_reads_the_device_entry_against_the_chips_the_node_has_now() -> None:
    """The fixture's faults are on Ascend910-1, -3 and -5. At capacity 2, chips 3 and 5 are not the node's: their
    faults clear (and the names are reported); back at 8 they are raised again. Regression: recheck, like a
    ClusterD rewrite, found the entry unchanged and did nothing."""
    chips = {"mc-node-0": NodeChips("huawei.com/Ascend910", 8), "mc-node-1": NodeChips("huawei.com/Ascend910", 8)}
    det = ClusterDDetector(load_shipped_table(), nodes=chips.get)
    first = det.update(record("clusterd-device-faults.json"), NOW)
    assert sorted(f.chips for f in first.faults) == [("Ascend910-1",), ("Ascend910-3",), ("Ascend910-5",)]
    chips["mc-node-0"] = NodeChips("huawei.com/Ascend910", 2)
    fewer = det.recheck("mc-node-0", NOW)
    assert sorted(c.fault.chips for c in fewer.cleared) == [("Ascend910-3",), ("Ascend910-5",)]
    assert [r.reason for r in fewer.rejections] == ["bad-chip-name"]
    assert not det.update(record("clusterd-device-faults.json"), NOW)  # ClusterD's rewrite: nothing new
    chips["mc-node-0"] = NodeChips("huawei.com/Ascend910", 8)
    more = det.recheck("mc-node-0", NOW)
    assert sorted(f.chips for f in more.faults) == [("Ascend910-3",), ("Ascend910-5",)]
    assert more.cleared == []


@pytest.mark.parametrize("fixture", ["clusterd-device-faults.json", "clusterd-node-fault.json"])
def test_a_node_that_goes_after_a_level_reload_has_its_entries_cleared(fixture: str) -> None:
    """Regression: the reload forgot the entries recheck reads again, so a Node that went kept its faults."""
    present = {"mc-node-0", "mc-node-1"}
    det = ClusterDDetector(load_shipped_table(), nodes=lambda n: NodeChips() if n in present else None)
    raised = det.update(record(fixture), NOW).faults
    assert raised
    det.set_table(load_shipped_table(), NOW)
    present.discard("mc-node-0")
    went = det.recheck("mc-node-0", NOW)
    assert len(went.cleared) == len([f for f in raised if f.node == "mc-node-0"])
    assert [r.reason for r in went.rejections] == ["unknown-node"]


def test_an_entry_named_for_another_family_does_not_take_the_real_entry_over() -> None:
    """A device entry's name in cluster-info-node-cm is rejected there, and the device chunk still clears its own
    entry. Regression: the misplaced name took the entry over, and the device faults never cleared."""
    det = ClusterDDetector(load_shipped_table(), nodes=lambda n: NodeChips())
    assert len(det.update(record("clusterd-device-faults.json"), NOW).faults) == 3
    misplaced = {"mindx-dl-deviceinfo-mc-node-0": {"FaultDevList": [], "NodeStatus": "Healthy"}}
    out = det.update(_clusterd_cm("cluster-info-node-cm", misplaced), NOW)
    assert out.faults == out.cleared == []
    assert [r.reason for r in out.rejections] == ["unexpected-name"]
    assert len(det.update(_clusterd_cm("cluster-info-device-0", ""), NOW).cleared) == 3


@pytest.mark.parametrize(
    ("name", "value", "reason"),
    [
        pytest.param("cluster-info-device-0", {"mindx-dl-deviceinfo-x": 5}, "wrong-type", id="entry-not-an-object"),
        pytest.param("cluster-info-switch-0", {"other-x": {}}, "unexpected-name", id="switch-entry-name"),
        pytest.param("cluster-info-device-0", {"other-x": {}}, "unexpected-name", id="device-entry-name"),
    ],
)
def test_a_bad_entry_is_reported_once_not_at_every_clusterd_rewrite(name: str, value: object, reason: str) -> None:
    """ClusterD rewrites its chunks up to 5 times a second: a bad entry it keeps is reported (logged, counted) once,
    and again only once it was fixed and came back."""
    det = ClusterDDetector(load_shipped_table(), nodes=lambda n: NodeChips())
    reported = [r.reason for _ in range(3) for r in det.update(_clusterd_cm(name, value), NOW).rejections]
    assert reported == [reason]
    assert det.update(_clusterd_cm(name, ""), NOW).rejections == []
    assert [r.reason for r in det.update(_clusterd_cm(name, value), NOW).rejections] == [reason]
