"""A NodeD ConfigMap (``mindx-dl-nodeinfo-<node>``) for a node that does not exist is input to reject, as the
device plugin's is (tests/unit/core/test_chip_names.py): reported once as ``unknown-node`` and counted, no fault (so no
event and no taint); read again when the Node appears, its faults raised then; a Node that goes clears them and
its ConfigMap is rejected again, as on the device path."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support import factories

from agent.core.clock import FixedClock
from agent.core.cluster import ConfigMapRecord, NodeRecord
from agent.core.detect.chips import NodeChips
from agent.core.detect.levels import load_shipped_table
from agent.core.detect.nodeinfo import NodeInfoDetector
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel
from agent.engine.detecting import DetectPipeline
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sinks.metrics import AgentMetrics
from agent.sources.state import ClusterState
from testbed.encoder import Encoder
from testbed.inject import ChipFault, device_info_cm, node_info_cm

NOW = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)
GHOST = "ghost-9"
NS = "mindx-dl"


def _noded(node: str, *, rv: str = "1", at: datetime = NOW) -> ConfigMapRecord:
    """NodeD's ConfigMap for `node`: one CPU fault at SeparateFault, written at `at`."""
    data = node_info_cm(node, now=at)["data"]
    return factories.configmap(f"mindx-dl-nodeinfo-{node}", data, namespace=NS, uid=f"uid-{node}", resource_version=rv)


# ------------------------------------------------------------------------------------------------ the detector


def test_a_noded_configmap_for_a_node_that_does_not_exist_is_reported_and_not_acted_on() -> None:
    nodes: dict[str, NodeChips] = {}
    det = NodeInfoDetector(load_shipped_table(), nodes=nodes.get)
    cm = _noded(GHOST)
    out = det.update(cm, NOW)
    assert out.faults == []  # old code: a SeparateFault node fault of a node that does not exist
    assert [(r.reason, r.detail) for r in out.rejections] == [
        ("unknown-node", "node 'ghost-9' does not exist: its NodeD ConfigMap is not acted on")
    ]
    assert det.update(cm, NOW).rejections == []  # the same write seen again is not reported again
    nodes[GHOST] = NodeChips()  # the Node appears: its fault counts now
    out = det.recheck(cm, NOW)
    assert [(f.kind, f.level, f.node, f.reason) for f in out.faults] == [
        (FaultKind.NODE, FaultLevel.SEPARATE, GHOST, "NodeD-CPU")
    ]
    assert out.rejections == []
    del nodes[GHOST]  # the Node goes: its fault clears and the ConfigMap is not acted on again
    out = det.recheck(cm, NOW)
    assert [c.fault.reason for c in out.cleared] == ["NodeD-CPU"]
    assert out.faults == []
    assert [r.reason for r in out.rejections] == ["unknown-node"]


def test_a_new_write_for_an_unknown_node_is_reported_again_and_raises_nothing() -> None:
    det = NodeInfoDetector(load_shipped_table(), nodes=lambda node: None)
    first = det.update(_noded(GHOST, rv="1"), NOW)
    second = det.update(_noded(GHOST, rv="2", at=NOW + timedelta(seconds=5)), NOW + timedelta(seconds=5))
    assert [r.reason for r in first.rejections] == [r.reason for r in second.rejections] == ["unknown-node"]
    assert first.faults == second.faults == []


def test_without_a_node_lookup_every_node_counts() -> None:
    # ClusterD's node entries and a detector fed by hand consult no Node
    out = NodeInfoDetector(load_shipped_table()).update(_noded(GHOST), NOW)
    assert [f.node for f in out.faults] == [GHOST]
    assert out.rejections == []


# ------------------------------------------------------------------------------------------------ the pipeline


def _node(name: str) -> NodeRecord:
    return factories.node(name, at=NOW)


def _change(source: str, key: str, new: Any, type_: ChangeType, old: Any = None) -> Change[Any]:
    return Change(type_, source, key, new, old, False, time.time())


def _listed(source: str) -> Change[Any]:
    return Change(ChangeType.LISTED, source, "", None, None, True, time.time(), f"{source}@*")


def _device(node: str) -> ConfigMapRecord:
    data = device_info_cm(node, [ChipFault(3)], now=NOW)["data"]
    return factories.configmap(f"mindx-dl-deviceinfo-{node}", data, uid=f"uid-{node}")


def _clusterd(node: str) -> ConfigMapRecord:
    """ClusterD's ``cluster-info-device-0`` holding `node`'s device entry (chip 3 faulty), aggregated and encoded by
    testbed/mcencode's ClusterD stand-in."""
    device = device_info_cm(node, [ChipFault(3)], now=NOW)
    slim = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": device["metadata"]["name"],
            "namespace": "kube-system"}, "data": device["data"]}  # fmt: skip
    enc = Encoder()
    try:
        enc.request("clusterd-put", configmap=slim)
        report = enc.request("clusterd-report", namespace=NS)
    finally:
        enc.close()
    chunk = next(c for c in report if c["metadata"]["name"] == "cluster-info-device-0")
    return factories.configmap("cluster-info-device-0", chunk["data"], namespace=NS, uid="uid-clusterd")


PATHS = [
    pytest.param("nodeinfo", _noded, FaultKind.NODE, "noded", id="noded"),
    pytest.param("deviceinfo", _device, FaultKind.CHIP, "device-plugin", id="device-plugin"),
    # old code (953cd1b): no fault when the Node appeared, until ClusterD wrote that chunk again
    pytest.param("clusterinfo", _clusterd, FaultKind.CHIP, "clusterd", id="clusterd"),
]


def _pipeline(source: str) -> tuple[ClusterState, DetectPipeline, CollectorRegistry]:
    state = ClusterState()
    for w in ("nodes@*", f"{source}@*"):
        state.expect(w)
    queue: asyncio.Queue[Fault | FaultCleared] = asyncio.Queue()
    registry = CollectorRegistry()
    pipeline = DetectPipeline(Settings(), state, queue, clock=FixedClock(NOW), metrics=AgentMetrics(registry))
    return state, pipeline, registry


def _feed(state: ClusterState, pipeline: DetectPipeline, change: Change[Any]) -> list[Fault | FaultCleared]:
    """Apply `change` as the watch engine does (the state first), run the pipeline, take what it queued."""
    state.apply(change)
    pipeline(change)
    queue = pipeline.queue
    return [queue.get_nowait() for _ in range(queue.qsize())]


def _unknown_node_rejections(registry: CollectorRegistry) -> float | None:
    labels = {"source": "ConfigMap", "reason": "unknown-node"}
    return registry.get_sample_value("fault_agent_input_rejected_total", labels)


@pytest.mark.parametrize(("source", "make", "kind", "label"), PATHS)
def test_the_pipeline_rejects_a_configmap_of_an_unknown_node_and_reads_it_when_the_node_appears(
    source: str, make: Any, kind: FaultKind, label: str
) -> None:
    """Both paths alike: rejected and counted while the Node is unknown, the fault raised when it appears, cleared
    (and the ConfigMap rejected again) when it goes."""
    state, pipeline, registry = _pipeline(source)
    for change in (_change("nodes", "n1", _node("n1"), ChangeType.ADDED), _listed("nodes"), _listed(source)):
        assert _feed(state, pipeline, change) == []

    cm = make(GHOST)
    items = _feed(state, pipeline, _change(source, f"{cm.namespace}/{cm.name}", cm, ChangeType.ADDED))
    assert items == []  # old code (noded): a SeparateFault node fault of "ghost-9", a node that does not exist
    assert _unknown_node_rejections(registry) == 1
    assert pipeline.active_faults() == []

    items = _feed(state, pipeline, _change("nodes", GHOST, _node(GHOST), ChangeType.ADDED))  # the Node appears
    assert [(type(i).__name__, i.node, i.kind) for i in items] == [("Fault", GHOST, kind)]
    faults = {"kind": kind.value, "level": "SeparateNPU", "source": label}
    assert registry.get_sample_value("fault_agent_faults_total", faults) == 1
    assert _unknown_node_rejections(registry) == 1

    items = _feed(state, pipeline, _change("nodes", GHOST, None, ChangeType.DELETED, old=_node(GHOST)))  # it goes
    assert [(i.fault.node, i.fault.kind) for i in items if isinstance(i, FaultCleared)] == [(GHOST, kind)]
    assert not [i for i in items if isinstance(i, Fault)]
    assert _unknown_node_rejections(registry) == 2
    assert pipeline.active_faults() == []


def test_noded_changes_wait_for_the_nodes_list() -> None:
    """A NodeD ConfigMap read before the Nodes are listed cannot tell a real node from a ghost: it waits."""
    state, pipeline, registry = _pipeline("nodeinfo")
    for node in ("n1", GHOST):
        cm = _noded(node)
        assert _feed(state, pipeline, _change("nodeinfo", f"{NS}/{cm.name}", cm, ChangeType.ADDED)) == []
    assert _feed(state, pipeline, _change("nodes", "n1", _node("n1"), ChangeType.ADDED)) == []
    items = _feed(state, pipeline, _listed("nodes"))
    assert [(type(i).__name__, i.node) for i in items] == [("Fault", "n1")]  # old code: ghost-9's fault too
    assert _unknown_node_rejections(registry) == 1


def test_the_noded_index_follows_the_configmaps() -> None:
    state = ClusterState()
    cm = _noded(GHOST)
    key = f"{NS}/{cm.name}"
    state.apply(_change("nodeinfo", key, cm, ChangeType.ADDED))
    assert state.node_info_by_node == {GHOST: cm}
    assert state.check_indexes() == []
    state.apply(_change("nodeinfo", key, None, ChangeType.DELETED, old=cm))
    assert state.node_info_by_node == {}
    assert state.check_indexes() == []
