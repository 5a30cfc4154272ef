"""Only nodes of this cluster count towards the circuit breaker: a device ConfigMap left behind by a removed
node (or written for a node that never existed) must not trip it (found by trying `testbed inject` on missing
nodes: two ghost ConfigMaps tripped the breaker and the next real fault was not acted on)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from kubernetes_asyncio import client as k8s
from support import factories

from agent.actions import ClusterWriter
from agent.core.faults import Fault
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sources.state import ClusterState

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def chip_fault(node: str) -> Fault:
    return factories.fault(node=node, codes=("80E3A201",), at=NOW)


async def test_faults_on_nodes_that_do_not_exist_do_not_count() -> None:
    state = ClusterState()
    for i in range(4):
        node = factories.node(f"n{i}", uid=f"uid-{i}", at=NOW)
        state.apply(Change(ChangeType.ADDED, "nodes", f"n{i}", node, None, False, time.time()))
    settings = Settings.model_validate(
        {"kafka": {"enabled": False}, "policy": {"breaker_node_share": 0.5, "breaker_min_faulty_nodes": 2}}
    )
    api = k8s.ApiClient()
    try:
        engine = RecoveryEngine(settings, state, ClusterWriter(api), clock=SystemClock())
        for ghost in ("0", "999", "node-99"):
            await engine.handle_fault(chip_fault(ghost), NOW)
            await engine.idle()
        assert not engine.breaker.is_open

        await engine.handle_fault(chip_fault("n1"), NOW)
        await engine.idle()
        await engine.handle_fault(chip_fault("n2"), NOW)
        await engine.idle()
        assert not engine.breaker.is_open  # 2 of 4 watched nodes: not more than 50 %
        await engine.handle_fault(chip_fault("n3"), NOW)
        await engine.idle()
        assert engine.breaker.is_open  # 3 of 4
    finally:
        await api.close()


def _four_node_engine(api: k8s.ApiClient) -> RecoveryEngine:
    state = ClusterState()
    for i in range(4):
        node = factories.node(f"n{i}", uid=f"uid-{i}", at=NOW)
        state.apply(Change(ChangeType.ADDED, "nodes", f"n{i}", node, None, False, time.time()))
    settings = Settings.model_validate(
        {
            "kafka": {"enabled": False},
            "policy": {"breaker_node_share": 0.5, "breaker_min_faulty_nodes": 2, "breaker_window_s": 300},
        }
    )
    return RecoveryEngine(settings, state, ClusterWriter(api), clock=SystemClock())


async def test_a_burst_read_now_but_dated_before_the_window_trips_the_breaker() -> None:
    """Issue 37, 3: the breaker dated a fault by its own fault_time only, so a burst the agent read for the first
    time but dated older than the window (a device plugin that was down and writes its backlog, a node clock
    behind) never tripped it. A fault read after the first lists were handled counts no earlier than when it was
    read."""
    api = k8s.ApiClient()
    try:
        engine = _four_node_engine(api)
        await engine.tick(NOW, settled=True)
        read = NOW + timedelta(seconds=30)
        for node in ("n1", "n2", "n3"):  # dated 20 minutes ago, a 300 s window: read now
            stale = factories.fault(node=node, codes=("80E3A201",), at=NOW - timedelta(minutes=20), observed_at=read)
            await engine.handle_fault(stale, read)
            await engine.idle()
        assert engine.breaker.is_open, engine.breaker.faulty_in_window(read.timestamp())
        assert engine.breaker.trip is not None
        assert set(engine.breaker.trip.faulty_nodes) == {"n1", "n2", "n3"}
    finally:
        await api.close()


async def test_standing_faults_of_the_first_lists_still_count_at_their_own_time() -> None:
    """The case the signal-time rule was made for (issue 13, B4) holds: faults the first lists read, before the
    agent settled, are standing ones and count when they happened (20 minutes ago: outside the window)."""
    api = k8s.ApiClient()
    try:
        engine = _four_node_engine(api)
        for node in ("n1", "n2", "n3"):  # read at start, before the first settled tick
            standing = factories.fault(node=node, codes=("80E3A201",), at=NOW - timedelta(minutes=20), observed_at=NOW)
            await engine.handle_fault(standing, NOW)
            await engine.idle()
        await engine.tick(NOW + timedelta(seconds=5), settled=True)
        assert not engine.breaker.is_open, engine.breaker.trip
        assert engine.breaker.faulty_in_window((NOW + timedelta(seconds=5)).timestamp()) == ()
    finally:
        await api.close()
