"""Public faults with ClusterD's semantics (component/clusterd/pkg/application/publicfault/fault_collector.go):
codes from its public table, ``once``, clear only on ``recover``, ``nodeSN``, the chip prefix from the node, an
unknown code reported. The ConfigMaps are Go's encoding/json of MindCluster's field names (testbed/mcencode)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest
from support import factories

from agent.core.clock import FixedClock
from agent.core.cluster import ConfigMapRecord, NodeRecord
from agent.core.detect import PublicFaultDetector
from agent.core.detect.chips import NodeChips
from agent.core.detect.levels import load_shipped_table
from agent.core.detect.publicfault import ONCE_HOLD
from agent.core.faults import FaultLevel
from testbed.inject import PublicFault, public_fault_cm

NOW = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)
TABLE = load_shipped_table()


def _cm(
    faults: Sequence[PublicFault], *, name: str = "pf-a", resource: str = "CCAE", now: datetime = NOW
) -> ConfigMapRecord:
    obj = public_fault_cm(name, "default", faults, now=now, resource=resource)
    labels = tuple(obj["metadata"]["labels"].items())
    return factories.configmap(name, obj["data"], namespace="default", uid=f"uid-{name}", labels=labels)


@pytest.mark.parametrize(
    ("code", "level"),
    [
        pytest.param("220001001", FaultLevel.SEPARATE, id="separate-npu"),
        pytest.param("110001022", FaultLevel.PRE_SEPARATE, id="pre-separate-npu"),
        pytest.param("010001001", FaultLevel.SUB_HEALTH, id="sub-health"),
        pytest.param("200001006", FaultLevel.NOT_HANDLE, id="not-handle"),
    ],
)
def test_level_comes_from_clusterd_public_table(code: str, level: FaultLevel) -> None:
    det = PublicFaultDetector(TABLE, FaultLevel.NOT_HANDLE)
    [f] = det.update(_cm([PublicFault("n1", code=code, chips=(2,))]), NOW).faults
    assert (f.level, f.codes, f.reason) == (level, (code,), "PublicFault:CCAE")


def test_unknown_code_is_reported_at_the_default_level_not_discarded() -> None:
    """ClusterD drops a fault whose code its table lacks; the agent reports it, marked, at the default level."""
    res = PublicFaultDetector(TABLE, FaultLevel.SUB_HEALTH).update(_cm([PublicFault("n1", code="999999999")]), NOW)
    assert res.rejections == []
    assert [(f.level, f.reason) for f in res.faults] == [(FaultLevel.SUB_HEALTH, "PublicFault:CCAE:unknown-code")]


def test_once_is_raised_and_cleared_after_the_hold() -> None:
    det = PublicFaultDetector(TABLE)
    [f] = det.update(_cm([PublicFault("n1", assertion="once")]), NOW).faults
    assert f.level is FaultLevel.SEPARATE
    assert not det.tick(NOW + ONCE_HOLD - timedelta(milliseconds=1))
    res = det.tick(NOW + ONCE_HOLD)
    assert [c.fault for c in res.cleared] == [f]
    assert len(det) == 0
    assert not det.tick(NOW + 2 * ONCE_HOLD)


def test_once_of_a_held_fault_changes_nothing_and_tick_keeps_occur() -> None:
    det = PublicFaultDetector(TABLE)
    assert det.update(_cm([PublicFault("n1")]), NOW).faults
    assert not det.update(_cm([PublicFault("n1", assertion="once")], now=NOW + timedelta(seconds=1)), NOW)
    assert not det.tick(NOW + timedelta(hours=1))
    assert len(det) == 1


def test_a_second_occur_keeps_the_first_fault() -> None:
    """ClusterD adds an occur only when the resource+faultId is not held on the node."""
    det = PublicFaultDetector(TABLE)
    det.update(_cm([PublicFault("n1", code="220001001")]), NOW)
    res = det.update(_cm([PublicFault("n1", code="010001001")], now=NOW + timedelta(seconds=1)), NOW)
    assert not res
    assert [f.codes for f in det.held()] == [("220001001",)]


def test_rewrite_and_delete_keep_the_fault_until_recover() -> None:
    """Regression: rewriting the ConfigMap without the fault, or deleting it, cleared a fault ClusterD keeps."""
    det = PublicFaultDetector(TABLE)
    [f] = det.update(_cm([PublicFault("n1", fault_id="ccae-fault-0001")]), NOW).faults
    other = PublicFault("n2", fault_id="ccae-fault-0002")
    assert [x.node for x in det.update(_cm([other], now=NOW + timedelta(seconds=1)), NOW).faults] == ["n2"]
    assert not det.delete("default", "pf-a", NOW).cleared
    assert sorted(x.node for x in det.held()) == ["n1", "n2"]
    res = det.update(_cm([PublicFault("n1", fault_id="ccae-fault-0001", assertion="recover")]), NOW)
    assert [c.fault for c in res.cleared] == [f]


def test_a_recover_from_another_configmap_of_the_same_resource_clears() -> None:
    """ClusterD keys a public fault by resource + faultId, not by ConfigMap."""
    det = PublicFaultDetector(TABLE)
    det.update(_cm([PublicFault("n1")], name="pf-a"), NOW)
    assert not det.update(_cm([PublicFault("n1", assertion="recover")], name="pf-b", resource="pingmesh"), NOW)
    res = det.update(_cm([PublicFault("n1", assertion="recover")], name="pf-c"), NOW)
    assert [c.fault.source.name for c in res.cleared] == ["pf-a"]
    assert [c.source.name for c in res.cleared] == ["pf-c"]


def test_node_sn_names_the_node_by_its_serial_number_annotation() -> None:
    serials = {"SN-0042": "worker-42"}
    det = PublicFaultDetector(TABLE, serials=serials.get)
    res = det.update(_cm([PublicFault("", node_sn="SN-0042", chips=(1,))]), NOW)
    assert res.rejections == []
    assert [(f.node, f.chips) for f in res.faults] == [("worker-42", ("Ascend910-1",))]
    # nodeName wins when both are given (ClusterD looks the SN up only for an empty nodeName)
    res = det.update(_cm([PublicFault("n7", node_sn="SN-0042", fault_id="ccae-fault-0007")]), NOW)
    assert [f.node for f in res.faults] == ["n7"]


def test_an_unknown_node_sn_is_rejected() -> None:
    res = PublicFaultDetector(TABLE).update(_cm([PublicFault("", node_sn="SN-none")]), NOW)
    assert res.faults == []
    assert [r.reason for r in res.rejections] == ["unknown-node-sn"]
    assert "SN-none" in res.rejections[0].detail


@pytest.mark.parametrize(
    ("chips", "names"),
    [
        pytest.param(NodeChips("huawei.com/npu", 16), ("npu-3", "npu-12"), id="a3-npu-resource"),
        pytest.param(NodeChips("huawei.com/Ascend310P", 8), ("Ascend310P-3", "Ascend310P-12"), id="ascend310p"),
        pytest.param(NodeChips("", None), ("Ascend910-3", "Ascend910-12"), id="resource-unknown"),
        pytest.param(None, ("Ascend910-3", "Ascend910-12"), id="node-unknown"),
    ],
)
def test_chip_prefix_comes_from_the_node(chips: NodeChips | None, names: tuple[str, ...]) -> None:
    """Regression: the prefix was hard-coded to Ascend910."""
    det = PublicFaultDetector(TABLE, nodes=lambda node: chips if node == "n1" else None)
    obj = public_fault_cm("pf-a", "default", [PublicFault("n1", chips=(3,))], now=NOW, resource="CCAE")
    text = obj["data"]["PublicFault"].replace('"deviceIds":[3]', '"deviceIds":[3,12]')
    cm = factories.configmap("pf-a", {"PublicFault": text}, namespace="default", uid="u")
    [f] = det.update(cm, NOW).faults
    assert f.chips == names


def test_a_level_reload_reclassifies_held_faults() -> None:
    det = PublicFaultDetector(TABLE, FaultLevel.SUB_HEALTH)
    [f] = det.update(_cm([PublicFault("n1", code="999999999")]), NOW).faults
    later = NOW + timedelta(minutes=1)
    res = det.set_table(TABLE.with_overrides({"999999999": FaultLevel.SEPARATE}), later)
    assert [c.fault for c in res.cleared] == [f]
    assert [(x.level, x.reason, x.signal_time) for x in res.faults] == [
        (FaultLevel.SEPARATE, "PublicFault:CCAE", f.signal_time)
    ]
    assert det.held() == res.faults


def test_the_pipeline_names_the_node_by_sn_prefixes_chips_from_it_and_clears_once_at_tick() -> None:
    """Wiring: the Node record keeps its product-serial-number annotation (NodeConverter), the pipeline holds a
    public fault until the Nodes are listed, resolves nodeSN and the chip prefix through the cluster state, and its
    tick clears a ``once`` fault after the hold."""
    import asyncio

    from agent.core.faults import Fault, FaultCleared
    from agent.engine.detecting import DetectPipeline
    from agent.kube.watch import Change, ChangeType
    from agent.settings import Settings
    from agent.sources.nodes import NodeConverter
    from agent.sources.state import ClusterState

    raw = {
        "metadata": {
            "name": "a3-node-1",
            "uid": "u-a3",
            "resourceVersion": "7",
            "annotations": {"product-serial-number": "2102315LNE10P5100007", "other": "x"},
        },
        "spec": {},
        "status": {
            "conditions": [],
            "capacity": {"huawei.com/npu": "16"},
            "allocatable": {"huawei.com/npu": "16"},
        },
    }
    node = NodeConverter(npu_resources=("huawei.com/Ascend910", "huawei.com/npu"))(raw)
    assert isinstance(node, NodeRecord), node
    assert node.annotations == (("product-serial-number", "2102315LNE10P5100007"),)
    state = ClusterState()
    state.expect("nodes@*")
    clock = FixedClock(NOW)
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    pipeline = DetectPipeline(Settings(), state, queue, clock=clock)
    fault = PublicFault("", node_sn="2102315LNE10P5100007", chips=(5,), assertion="once")
    # the public fault comes before the Nodes are listed: it waits for them (its node and chip names need them)
    for change in (
        Change(ChangeType.ADDED, "publicfault", "default/pf-a", _cm([fault]), None, False, 0.0),
        Change(ChangeType.ADDED, "nodes", "a3-node-1", node, None, False, 0.0),
    ):
        state.apply(change)
        pipeline(change)
    assert queue.empty()
    assert pipeline.rejected == 0
    listed = Change(ChangeType.LISTED, "nodes", "", None, None, True, 0.0, "nodes@*")
    state.apply(listed)
    pipeline(listed)
    [raised] = [queue.get_nowait() for _ in range(queue.qsize())]
    assert isinstance(raised, Fault)
    assert (raised.node, raised.chips, raised.level) == ("a3-node-1", ("npu-5",), FaultLevel.SEPARATE)
    assert pipeline.active_faults() == [raised]
    clock.set(NOW + ONCE_HOLD)
    pipeline.tick()
    cleared = [queue.get_nowait() for _ in range(queue.qsize())]
    assert [(type(c).__name__, c.fault) for c in cleared if isinstance(c, FaultCleared)] == [("FaultCleared", raised)]
    assert pipeline.active_faults() == []
