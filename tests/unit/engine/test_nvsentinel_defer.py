"""Observe, don't fight (issue 42): on a node NVSentinel holds (its state or cordon-by label, fault-quarantine's
cordon annotation: agent.core.detect.gpu.nvsentinel_mark) a node fault that would quarantine it gets no taint of the
agent's (``policy.defer_to_nvsentinel``), counted as a taint ``deferred``; elsewhere, or with the setting off, the
node is tainted as before. The e2e test (tests/e2e/test_gpu_nvsentinel.py) runs the same on the testbed."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter

from agent.core.clock import FixedClock
from agent.core.cluster import Taint
from agent.core.faults import FaultCleared, FaultKind, FaultLevel, ObjectRef
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks.metrics import AgentMetrics
from agent.sources.state import ClusterState

NOW = T0 + timedelta(seconds=2)
XID79 = replace(
    factories.fault(kind=FaultKind.NODE, level=FaultLevel.SEPARATE, at=T0),
    chips=(),
    codes=("XID-79",),
    reason="SysLogsXIDError",
    source=ObjectRef("Node", "", "n1", "uid-n1"),
)


class TaintRecorder(FakeWriter):
    def __init__(self) -> None:
        super().__init__()
        self.taints: list[tuple[str, str | None]] = []

    async def taint_node(self, node: str, *, key: str, value: str, incident: str = "") -> Any:
        self.taints.append((node, value))
        return await super().taint_node(node, key=key, value=value, incident=incident)

    async def untaint_node(self, node: str, *, key: str, incident: str = "") -> Any:
        self.taints.append((node, None))
        return await super().untaint_node(node, key=key, incident=incident)


def _engine(
    writer: FakeWriter, labels: dict[str, str], annotations: dict[str, str], **policy: Any
) -> tuple[RecoveryEngine, CollectorRegistry]:
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node("n1", labels=labels, annotations=annotations)))
    settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": policy})
    registry = CollectorRegistry()
    engine = RecoveryEngine(
        settings, state, writer, clock=FixedClock(NOW), active_faults=lambda: [], metrics=AgentMetrics(registry)
    )
    return engine, registry


def _deferred(registry: CollectorRegistry) -> float:
    return registry.get_sample_value("fault_agent_actions_total", {"action": "taint", "result": "deferred"}) or 0.0


@pytest.mark.parametrize(
    ("labels", "annotations"),
    [
        pytest.param({"dgxc.nvidia.com/nvsentinel-state": "quarantined"}, {}, id="state-label"),
        pytest.param({"k8saas.nvidia.com/cordon-by": "NVSentinel"}, {}, id="cordon-by"),
        pytest.param({}, {"quarantineHealthEventIsCordoned": "True"}, id="cordon-annotation"),
    ],
)
async def test_a_node_nvsentinel_holds_is_not_tainted_by_the_agent(
    labels: dict[str, str], annotations: dict[str, str]
) -> None:
    writer = TaintRecorder()
    engine, registry = _engine(writer, labels, annotations)
    await engine.handle_fault(XID79, NOW)
    await engine.idle()
    assert writer.taints == []
    assert _deferred(registry) == 1
    await engine.handle_cleared(FaultCleared(XID79, NOW, XID79.source))
    await engine.idle()
    assert writer.taints == []  # nothing of ours to lift


@pytest.mark.parametrize(
    ("labels", "policy"),
    [
        pytest.param({}, {}, id="no-mark"),
        pytest.param({"dgxc.nvidia.com/nvsentinel-state": "remediation-succeeded"}, {}, id="released-by-nvsentinel"),
        pytest.param({"dgxc.nvidia.com/nvsentinel-state": "quarantined"}, {"defer_to_nvsentinel": False}, id="off"),
    ],
)
async def test_otherwise_the_node_is_tainted_as_before(labels: dict[str, str], policy: dict[str, Any]) -> None:
    writer = TaintRecorder()
    engine, registry = _engine(writer, labels, {}, **policy)
    await engine.handle_fault(XID79, NOW)
    await engine.idle()
    assert writer.taints == [("n1", "SeparateNPU")]
    assert _deferred(registry) == 0
    await engine.handle_cleared(FaultCleared(XID79, NOW, XID79.source))
    await engine.idle()
    assert writer.taints[-1] == ("n1", None)


async def test_a_taint_set_before_nvsentinel_took_the_node_is_handed_over_and_comes_back_if_it_lets_go() -> None:
    """NVSentinel's condition often lands before its cordon: the agent taints first; once the node carries
    NVSentinel's marks the periodic reconcile lifts the agent's taint (the cordon keeps new pods off); should
    NVSentinel release the node while the fault lasts, the agent taints it again."""
    writer = TaintRecorder()
    engine, registry = _engine(writer, {}, {})
    await engine.handle_fault(XID79, NOW)
    await engine.idle()
    assert writer.taints == [("n1", "SeparateNPU")]
    tainted = factories.node("n1", taints=(Taint("fault-agent.io/fault", "SeparateNPU", "NoSchedule"),))
    engine.ctx.state.apply(change("nodes", "n1", tainted))
    held = replace(tainted, labels=(("dgxc.nvidia.com/nvsentinel-state", "quarantined"),), resource_version="2")
    engine.ctx.state.apply(change("nodes", "n1", held))
    await engine.reconcile_taints()
    await engine.idle()
    assert writer.taints == [("n1", "SeparateNPU"), ("n1", None)]
    assert _deferred(registry) == 1
    released = replace(tainted, taints=(), resource_version="3")
    engine.ctx.state.apply(change("nodes", "n1", released))
    await engine.reconcile_taints()
    await engine.idle()
    assert writer.taints[-1] == ("n1", "SeparateNPU")
