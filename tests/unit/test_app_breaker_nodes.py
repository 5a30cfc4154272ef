"""Only nodes of this cluster count towards the circuit breaker: a device ConfigMap left behind by a removed
node (or written for a node that never existed) must not trip it (found by trying `testbed inject` on missing
nodes: two ghost ConfigMaps tripped the breaker and the next real fault was not acted on)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from kubernetes_asyncio import client as k8s
from support import factories

from agent.actions import ClusterWriter
from agent.core.faults import Fault
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
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
        engine = RecoveryEngine(settings, state, ClusterWriter(api))
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
