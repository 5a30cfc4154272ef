"""A node that goes from Ready=Unknown to Ready=False without ever being Ready stays one down-node fault.

Found on the testbed (tests/integration/test_detect_pipeline.py): the condition's lastTransitionTime moves on
Unknown -> False, which restarted the NotReady grace, cleared the fault while the node was still not Ready and
raised it again once the lifecycle controller's taint arrived.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from support import factories

from agent.core.cluster import NodeCondition, NodeRecord
from agent.core.detect.nodes import NodeDetector

T0 = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)


def node(status: str, transition: datetime, rv: str) -> NodeRecord:
    return factories.node(
        "w1", uid="uid-n", resource_version=rv, conditions=(NodeCondition("Ready", status, "x", transition),)
    )


def test_unknown_then_false_keeps_the_node_down_without_a_clear() -> None:
    det = NodeDetector(not_ready_grace=timedelta(seconds=5), problem_condition_types=())
    assert not det.update(node("True", T0 - timedelta(hours=1), "1"), T0)
    assert not det.update(node("Unknown", T0, "2"), T0)
    down = det.tick(T0 + timedelta(seconds=6))
    assert [f.reason for f in down.faults] == ["NodeUnknown"]
    # the kubelet reports in again, still not ready: a new lastTransitionTime, the same outage
    later = T0 + timedelta(seconds=10)
    assert not det.update(node("False", later, "3"), later)
    assert not det.tick(later + timedelta(seconds=1))
    assert det.down_nodes() == frozenset({"w1"})
    # Ready again: exactly one clear of the one fault
    back = det.update(node("True", later + timedelta(seconds=2), "4"), later + timedelta(seconds=2))
    assert [c.fault for c in back.cleared] == down.faults
    assert not back.faults


def test_a_node_already_not_ready_before_we_watched_counts_from_its_transition() -> None:
    det = NodeDetector(not_ready_grace=timedelta(seconds=5), problem_condition_types=())
    res = det.update(node("False", T0 - timedelta(minutes=3), "1"), T0)
    assert [(f.reason, f.signal_time) for f in res.faults] == [("NotReady", T0 - timedelta(minutes=3))]
