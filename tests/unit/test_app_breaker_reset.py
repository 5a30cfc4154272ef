"""A person's breaker reset takes up the faults the open breaker held back (found by trying the testbed: a
SeparateNPU chip fault on a job's node arrived while the breaker was open; after ``fault-agent breaker reset``
the job stayed on the faulty chip until the agent happened to restart, whose new term re-evaluated it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app_support import FakeWriter, change, one_job_state
from structlog.testing import capture_logs
from support import factories

from agent.core.clock import FixedClock
from agent.core.faults import Fault, FaultKind, ObjectRef
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate(
    {"kafka": {"enabled": False}, "policy": {"breaker_node_share": 0.5, "breaker_min_faulty_nodes": 2}}
)


def node_fault(node: str) -> Fault:
    return factories.fault(
        kind=FaultKind.NODE,
        node=node,
        chips=(),
        codes=("00000011",),
        at=NOW,
        source=ObjectRef("ConfigMap", "mindx-dl", f"mindx-dl-nodeinfo-{node}"),
        reason="NodeD-CPU",
    )


async def test_a_reset_breaker_acts_on_the_faults_it_held_back() -> None:
    state = one_job_state(NOW)  # job ns/job on node n1, chips Ascend910-0 and -1
    for i in (2, 3, 4):
        state.apply(change("nodes", f"n{i}", factories.node(f"n{i}", uid=f"uid-n{i}", at=NOW)))
    chip = factories.fault(node="n1", chips=("Ascend910-0",), at=NOW)
    active = [node_fault("n2"), node_fault("n3"), chip]
    writer = FakeWriter()
    clock = FixedClock(NOW)
    engine = RecoveryEngine(SETTINGS, state, writer, active_faults=lambda: list(active), clock=clock)

    for fault in active:  # n2, n3, then the job's chip: 3 of 4 nodes trips the breaker before the decision
        await engine.handle_fault(fault, NOW)
        await engine.idle()
    assert engine.breaker.is_open
    await engine.tick(clock.advance(1))
    await engine.idle()
    assert writer.commands == 0  # held back while open

    writer.breaker = {"state": "closed", "reset_at": (NOW + timedelta(seconds=5)).isoformat(), "reset_by": "oncall"}
    with capture_logs() as logs:
        await engine.sync_breaker()
        assert not engine.breaker.is_open
        await engine.tick(clock.advance(5))
        await engine.idle()
    assert writer.commands == 1  # the job leaves the faulty chip once a person reset the breaker
    assert not engine.breaker.is_open  # the faults it already counted do not trip it again
    assert [e["event"] for e in logs if e["event"].startswith("circuit breaker")] == [
        "circuit breaker reset by a person"
    ]
    for _ in range(3):  # and only once
        await engine.tick(clock.advance(1))
        await engine.idle()
    assert writer.commands == 1
