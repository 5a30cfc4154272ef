"""A node is not reported down from what was written while the agent could not see the apiserver (issue 16 item 5).

After a 90 s apiserver stop, kube-controller-manager marked healthy nodes Ready=Unknown with a transition time from
inside the stop; the agent counted its 5 s grace from that time and tainted them and restarted their jobs within
2 s of the apiserver's return. Now the node watch's return (RESUMED) starts a re-check: a node is down only once a
heartbeat of its own was seen after it (or the controller's grace passed), and its grace counts from the return.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from support import factories
from support.fakes import FakeTransport
from test_kube_watch import line, make, pod

from agent.core.cluster import NodeCondition, NodeRecord
from agent.core.detect.nodes import NodeDetector
from agent.kube.errors import KubeConnectionError
from agent.kube.watch import ChangeType

R = datetime(2026, 1, 1, 8, 0, tzinfo=UTC)  # when the agent's node watch came back
GRACE = timedelta(seconds=5)
RECHECK = timedelta(seconds=50)


def node(status: str, *, transition: datetime, heartbeat: datetime, rv: str = "2") -> NodeRecord:
    ready = NodeCondition("Ready", status, "", transition, heartbeat)
    return factories.node(resource_version=rv, conditions=(ready,))


def detector() -> NodeDetector:
    return NodeDetector(not_ready_grace=GRACE, problem_condition_types=(), health_recheck=RECHECK)


def healthy_before_the_stall(d: NodeDetector) -> None:
    assert not d.update(node("True", transition=R - timedelta(hours=1), heartbeat=R - timedelta(seconds=95)), R).faults


def marked_unknown_during_the_stall() -> NodeRecord:
    """What the lifecycle controller wrote: Unknown since inside the stall, the kubelet's last heartbeat kept."""
    return node("Unknown", transition=R - timedelta(seconds=30), heartbeat=R - timedelta(seconds=95), rv="3")


def test_without_a_resume_the_old_transition_time_counts() -> None:
    """The behaviour the fix keeps when the agent was never blind: the node's own transition time counts."""
    d = detector()
    healthy_before_the_stall(d)
    assert [f.reason for f in d.update(marked_unknown_during_the_stall(), R + timedelta(seconds=1)).faults] == [
        "NodeUnknown"
    ]


def test_a_node_marked_unknown_during_the_agents_blindness_waits_for_its_heartbeat() -> None:
    d = detector()
    healthy_before_the_stall(d)
    d.resumed(R)
    assert not d.update(marked_unknown_during_the_stall(), R + timedelta(seconds=1)).faults
    for s in (6, 20, 49):
        assert not d.tick(R + timedelta(seconds=s)).faults, f"down after {s} s without evidence"
    # the kubelet is back: Ready True with a fresh heartbeat; nothing was ever reported, so nothing clears
    back = d.update(node("True", transition=R + timedelta(seconds=8), heartbeat=R + timedelta(seconds=8), rv="4"), R)
    assert (back.faults, back.cleared) == ([], [])
    assert not d.tick(R + timedelta(seconds=60)).faults


def test_the_status_from_before_the_outage_is_not_a_heartbeat() -> None:
    """The list after the return still shows Ready True from before the stop (same heartbeat); the controller's
    Unknown comes after it. That stale True must not count as the node's health re-established."""
    d = detector()
    healthy_before_the_stall(d)
    d.resumed(R)
    stale = node("True", transition=R - timedelta(hours=1), heartbeat=R - timedelta(seconds=95), rv="2")
    assert not d.update(stale, R).faults
    assert not d.update(marked_unknown_during_the_stall(), R + timedelta(seconds=1)).faults
    assert not d.tick(R + timedelta(seconds=10)).faults
    older = node("Unknown", transition=R - timedelta(seconds=30), heartbeat=R - timedelta(seconds=120), rv="5")
    assert not d.update(older, R + timedelta(seconds=11)).faults  # an older heartbeat is no heartbeat either


def test_without_a_heartbeat_the_node_is_down_once_the_controllers_grace_passed() -> None:
    d = detector()
    healthy_before_the_stall(d)
    d.resumed(R)
    assert not d.update(marked_unknown_during_the_stall(), R + timedelta(seconds=1)).faults
    assert not d.tick(R + timedelta(seconds=49)).faults
    (down,) = d.tick(R + timedelta(seconds=50)).faults
    assert down.reason == "NodeUnknown"
    assert down.signal_time == R  # counted from the watch's return, not from inside the stall


def test_a_fresh_heartbeat_with_not_ready_counts_the_grace_from_the_return() -> None:
    d = detector()
    healthy_before_the_stall(d)
    d.resumed(R)
    # the kubelet reports itself NotReady after the return (a real node problem): believed, grace from R
    not_ready = node("False", transition=R - timedelta(seconds=30), heartbeat=R + timedelta(seconds=2), rv="4")
    assert not d.update(not_ready, R + timedelta(seconds=2)).faults
    assert not d.tick(R + timedelta(seconds=4)).faults
    (down,) = d.tick(R + timedelta(seconds=5)).faults
    assert down.reason == "NotReady"


def test_a_node_reported_down_before_the_stall_stays_down() -> None:
    d = detector()
    dead = node("Unknown", transition=R - timedelta(minutes=10), heartbeat=R - timedelta(minutes=11))
    assert d.update(dead, R - timedelta(minutes=5)).faults
    d.resumed(R)
    result = d.update(node("Unknown", transition=dead.conditions[0].last_transition or R, heartbeat=R, rv="9"), R)
    assert (result.faults, result.cleared) == ([], [])
    assert d.down_nodes() == frozenset({"n1"})


def test_a_node_first_seen_after_the_return_waits_too() -> None:
    d = detector()
    d.resumed(R)
    assert not d.update(marked_unknown_during_the_stall(), R + timedelta(seconds=1)).faults
    assert not d.tick(R + timedelta(seconds=10)).faults


# ------------------------------------------------------------------------------------------------ the watch


async def test_the_watch_says_resumed_before_what_it_missed_once_the_apiserver_answers_again() -> None:
    t = FakeTransport()
    t.objects = [pod("a", "1")]
    t.streams = [KubeConnectionError("refused"), [line("MODIFIED", pod("a", "2"))], "hang"]
    w, rec, _ = make(t, inactivity_s=60, backoff_initial_s=0.01, backoff_max_s=0.02)
    stop = asyncio.Event()
    task = asyncio.create_task(w.run(stop))
    for _ in range(200):
        if any(c.type is ChangeType.MODIFIED for c in rec.changes):
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(task, 2)
    kinds: list[Any] = [c.type for c in rec.changes]
    assert kinds == [ChangeType.ADDED, ChangeType.LISTED, ChangeType.RESUMED, ChangeType.MODIFIED]
    assert rec.changes[2].watcher_id == w.resource.watcher_id
