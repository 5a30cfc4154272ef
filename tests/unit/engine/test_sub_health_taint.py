"""Sub-healthy nodes (issue 36 item 5): a card or switch sub-health fault quarantines its node with
``<taint key>=SubHealthFault:NoSchedule`` while it lasts (``policy.sub_health_taint``), as MindCluster's node
predicate refuses such nodes to jobs whose subHealthyStrategy is not ignore (internal/rescheduling/reschedule.go
checkNodeCurNodeIsFault); a real fault on the same node outranks it; the taint goes when the fault clears."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter

from agent.core.clock import FixedClock
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel, ObjectRef
from agent.core.quarantine import is_sub_healthy_node, quarantine_for
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sources.state import ClusterState

NOW = T0 + timedelta(seconds=2)
L = FaultLevel
POD = ObjectRef("Pod", "ns", "job-0", "uid-job-0")


def _fault(kind: FaultKind, level: FaultLevel, **kw: Any) -> Fault:
    return replace(factories.fault(kind=kind, level=level, at=T0), **kw)


@pytest.mark.parametrize(
    ("fault", "on", "off"),
    [
        pytest.param(_fault(FaultKind.CHIP, L.SUB_HEALTH), L.SUB_HEALTH, None, id="card-sub-health"),
        pytest.param(_fault(FaultKind.NODE, L.SUB_HEALTH, chips=(), reason="SwitchFault"), L.SUB_HEALTH, None,
                     id="switch-sub-healthy"),
        pytest.param(_fault(FaultKind.CHIP, L.SUB_HEALTH, pod=POD, reason="HotSwitchDelete"), None, None,
                     id="a-pods-hot-switch-request-is-no-node-state"),
        pytest.param(_fault(FaultKind.NETWORK, L.SUB_HEALTH), None, None, id="network"),
        pytest.param(_fault(FaultKind.CHIP, L.NOT_HANDLE), None, None, id="not-handle"),
        pytest.param(_fault(FaultKind.CHIP, L.SEPARATE), None, None, id="a-chip-fault-never-takes-the-node"),
        pytest.param(_fault(FaultKind.NODE, L.SEPARATE), L.SEPARATE, L.SEPARATE, id="node-separate-as-before"),
        pytest.param(_fault(FaultKind.CHIP, L.SUB_HEALTH, node=""), None, None, id="no-node"),
    ],
)  # fmt: skip
def test_which_faults_taint_the_node(fault: Fault, on: FaultLevel | None, off: FaultLevel | None) -> None:
    assert quarantine_for(fault, sub_health=True) == on
    assert quarantine_for(fault, sub_health=False) == off
    assert is_sub_healthy_node(fault) is (on is L.SUB_HEALTH)


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


def _engine(writer: FakeWriter, **policy: Any) -> RecoveryEngine:
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node("n1")))
    settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": policy})
    return RecoveryEngine(settings, state, writer, clock=FixedClock(NOW), active_faults=lambda: [])


async def test_the_node_is_tainted_subhealthfault_and_released_when_it_clears() -> None:
    writer = TaintRecorder()
    engine = _engine(writer)
    card = _fault(FaultKind.CHIP, L.SUB_HEALTH)
    await engine.handle_fault(card, NOW)
    await engine.idle()
    assert writer.taints == [("n1", "SubHealthFault")]
    # a real node fault on top: the taint carries the higher level, so an ignore job's toleration (by value)
    # no longer lets it in
    separate = _fault(
        FaultKind.NODE,
        L.SEPARATE,
        chips=(),
        codes=("00000011",),
        reason="NodeD",
        source=ObjectRef("ConfigMap", "mindx-dl", "mindx-dl-nodeinfo-n1"),
    )
    await engine.handle_fault(separate, NOW)
    await engine.idle()
    assert writer.taints[-1] == ("n1", "SeparateNPU")
    await engine.handle_cleared(FaultCleared(separate, NOW, separate.source))
    await engine.idle()
    assert writer.taints[-1] == ("n1", "SubHealthFault")
    await engine.handle_cleared(FaultCleared(card, NOW, card.source))
    await engine.idle()
    assert writer.taints[-1] == ("n1", None)


async def test_off_sub_health_never_taints() -> None:
    writer = TaintRecorder()
    engine = _engine(writer, sub_health_taint=False)
    await engine.handle_fault(_fault(FaultKind.CHIP, L.SUB_HEALTH), NOW)
    await engine.idle()
    assert writer.taints == []
