"""A person's breaker reset takes up the faults the open breaker held back (found by trying the testbed: a
SeparateNPU chip fault on a job's node arrived while the breaker was open; after ``fault-agent breaker reset``
the job stayed on the faulty chip until the agent happened to restart, whose new term re-evaluated it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from structlog.testing import capture_logs
from support import factories
from support.factories import change, one_job_state
from support.fakes import FakeWriter, ListSink

from agent.core.clock import FixedClock
from agent.core.faults import Fault, FaultKind, ObjectRef
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks import events as ev

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


async def test_a_reset_is_published_as_breaker_reset_with_who_when_why() -> None:
    """Issue 41, 3: ``io.faultagent.breaker.reset.v1`` had a schema and a builder but was never published: a reset
    was only logged. The leader publishes it when it sees the reset, with who reset it, when, why and since when
    the breaker was open."""
    state = one_job_state(NOW)
    for i in (2, 3, 4):
        state.apply(change("nodes", f"n{i}", factories.node(f"n{i}", uid=f"uid-n{i}", at=NOW)))
    writer = FakeWriter()
    clock = FixedClock(NOW)
    sink = ListSink()
    engine = RecoveryEngine(SETTINGS, state, writer, events=sink, clock=clock)
    for node in ("n3", "n4"):
        await engine.handle_fault(node_fault(node), NOW)
        await engine.idle()
    assert engine.breaker.is_open
    reset_at = NOW + timedelta(minutes=7)
    writer.breaker = {
        "state": "closed",
        "reset_at": reset_at.isoformat(),
        "reset_by": "oncall",
        "reset_reason": "rack 12 power restored",
    }
    clock.advance(8 * 60)
    await engine.sync_breaker()
    await engine.idle()
    assert not engine.breaker.is_open
    resets = [ev.as_json(e) for e in sink.events if ev.as_json(e)["type"] == ev.BREAKER_RESET]
    assert len(resets) == 1, sink.types()
    data = resets[0]["data"]
    assert data["by"] == "oncall"
    assert data["reason"] == "rack 12 power restored"
    assert data["open_s"] == 7 * 60
    assert data["faulty_nodes"] == ["n3", "n4"]  # the nodes that tripped it: their describe shows the close
    assert resets[0]["time"].startswith(reset_at.strftime("%Y-%m-%dT%H:%M:%S"))
    await engine.sync_breaker()  # read again: no second reset, no second event
    await engine.idle()
    assert sum(1 for t in sink.types() if t == ev.BREAKER_RESET) == 1
