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
# 4 nodes: two faulty ones (more than a quarter) trip it
SETTINGS = Settings.model_validate(
    {"kafka": {"enabled": False}, "policy": {"breaker_node_share": 0.25, "breaker_min_faulty_nodes": 2}}
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
    state.apply(change("vcjobs", "ns/job2", factories.job("job2", created_at=NOW)))
    state.apply(change("pods", "ns/job2-0", factories.pod("job2-0", node="n2", job="job2", created_at=NOW)))
    # n4 (no job), then a chip of each job's node: the first job's fault trips the breaker before its decision
    active = [node_fault("n4"), factories.fault(node="n1", at=NOW), factories.fault(node="n2", at=NOW)]
    writer = FakeWriter()
    clock = FixedClock(NOW)
    engine = RecoveryEngine(SETTINGS, state, writer, active_faults=lambda: list(active), clock=clock)

    for fault in active:
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
    assert writer.commands == 2  # both jobs leave their faulty chips once a person reset the breaker
    # the faults the person reset it with do not trip it again
    assert not engine.breaker.is_open
    assert [e["event"] for e in logs if e["event"].startswith("circuit breaker")] == [
        "circuit breaker reset by a person"
    ]
    for _ in range(3):  # and only once
        await engine.tick(clock.advance(1))
        await engine.idle()
    assert writer.commands == 2
    # faults that come after the reset count: two newly faulty nodes trip it again
    later = clock.now()
    for node in ("n3", "n4"):
        await engine.handle_fault(factories.fault(node=node, codes=("80E18005",), at=later), later)
        await engine.idle()
    assert engine.breaker.is_open
