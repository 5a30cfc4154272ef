"""A fault the open circuit breaker blocks is an incident in state ``held-by-breaker`` (issue 41, item 3): in the
job's record, published as ``recovery.held`` (and its fault.detected names the incident), counted in
``fault_agent_incidents_held``; its reason never says "restarting the job … (N restarts left)". After a person's
reset the same incident (same id) goes on to the restart; a held incident whose faults clear ends recovered without
a restart, one still held at the recovery deadline ends failed with reason ``breaker-open``. A new leader adopts a
held incident from the record and publishes its recovery.held again, never a recovery.started."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from support import factories
from support.factories import change, one_job_state
from support.fakes import FakeWriter, ListSink, record_change

from agent.core.clock import FixedClock
from agent.core.cluster import JobKind
from agent.core.faults import Fault
from agent.core.incidents import Phase, check_incident, decode_incident, decode_ledger
from agent.core.records import KEY_INCIDENT, KEY_LEDGER
from agent.engine.ports import NoMetrics
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks import events as ev

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"recovery_deadline_s": 600}})
OPEN = {"state": "open", "tripped_at": str((NOW - timedelta(seconds=30)).timestamp()), "reason": "3 of 4 nodes"}


class Gauges(NoMetrics):
    def __init__(self) -> None:
        self.open = self.held = -1

    def incidents_open(self, n: int, held: int = 0) -> None:
        self.open, self.held = n, held


def _engine(active: list[Fault]) -> tuple[RecoveryEngine, FakeWriter, ListSink, Gauges, FixedClock]:
    state = one_job_state(NOW)  # job ns/job on node n1, chips Ascend910-0 and -1
    for i in (2, 3, 4):
        state.apply(change("nodes", f"n{i}", factories.node(f"n{i}", uid=f"uid-n{i}", at=NOW)))
    writer, sink, gauges, clock = FakeWriter(), ListSink(), Gauges(), FixedClock(NOW)
    engine = RecoveryEngine(
        SETTINGS, state, writer, events=sink, metrics=gauges, clock=clock, active_faults=lambda: list(active)
    )
    engine.breaker.restore(OPEN)
    writer.breaker = dict(OPEN)
    return engine, writer, sink, gauges, clock


def _data(sink: ListSink, event_type: str) -> list[dict[str, object]]:
    out = []
    for e in sink.events:
        doc = ev.as_json(e)
        assert ev.event_errors(doc) == [], doc
        if doc["type"] == event_type:
            out.append(doc["data"])
    return out


async def _hold_one() -> tuple[RecoveryEngine, FakeWriter, ListSink, Gauges, FixedClock, list[Fault]]:
    active = [factories.fault(node="n1", at=NOW)]
    engine, writer, sink, gauges, clock = _engine(active)
    await engine.handle_fault(active[0], NOW)
    await engine.idle()
    return engine, writer, sink, gauges, clock, active


async def test_a_blocked_fault_is_a_held_incident_in_the_record_an_event_and_a_metric() -> None:
    engine, writer, sink, gauges, _clock, _active = await _hold_one()
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.HELD
    assert incident.phase.value == "held-by-breaker"
    assert writer.commands == 0
    assert "restarts left" not in incident.reason
    assert "restarting the job" not in incident.reason
    assert incident.reason.startswith("held by the open circuit breaker")
    assert "fault-agent breaker reset" in incident.reason
    # the job's record holds it, charged nothing
    record = writer.records["uid-job"]
    assert decode_incident(record[KEY_INCIDENT]) == incident
    assert decode_ledger(record[KEY_LEDGER]).restarts_used == 0
    # published: the fault naming the incident, then recovery.held; no recovery.started
    [detected] = _data(sink, ev.FAULT_DETECTED)
    assert detected["incident_id"] == incident.id
    [held] = _data(sink, ev.RECOVERY_HELD)
    assert held["incident_id"] == incident.id
    assert held["action"] == "restart-job"
    assert held["breaker_reason"]  # why the breaker tripped (restored: its ConfigMap's reason)
    assert _data(sink, ev.RECOVERY_STARTED) == []
    assert (gauges.open, gauges.held) == (1, 1)


async def test_a_later_fault_joins_the_held_incident() -> None:
    engine, writer, sink, _gauges, _clock, active = await _hold_one()
    first = engine.store.incident("uid-job")
    assert first is not None
    other = factories.fault(node="n1", chips=("Ascend910-1",), at=NOW + timedelta(seconds=1))
    active.append(other)
    await engine.handle_fault(other, NOW + timedelta(seconds=1))
    await engine.idle()
    joined = engine.store.incident("uid-job")
    assert joined is not None
    assert joined.id == first.id
    assert joined.phase is Phase.HELD
    assert joined.fault_count == 2
    assert [d["incident_id"] for d in _data(sink, ev.FAULT_DETECTED)] == [first.id, first.id]
    assert len(_data(sink, ev.RECOVERY_HELD)) == 1
    assert writer.commands == 0


async def test_after_a_reset_the_held_incident_goes_on_to_the_restart_under_its_own_id() -> None:
    engine, writer, sink, gauges, clock, _active = await _hold_one()
    held = engine.store.incident("uid-job")
    assert held is not None
    writer.breaker = {"state": "closed", "reset_at": (NOW + timedelta(seconds=5)).isoformat(), "reset_by": "oncall"}
    await engine.sync_breaker()
    await engine.tick(clock.advance(5))
    await engine.idle()
    assert writer.commands == 1
    after = engine.store.incident("uid-job")
    assert after is not None
    assert after.id == held.id
    assert after.phase is Phase.RESTARTING
    assert [p for p, _ in after.steps][:3] == [Phase.DETECTED, Phase.HELD, Phase.ACTING]
    assert "restarting the job" in after.reason  # now it does restart
    [started] = _data(sink, ev.RECOVERY_STARTED)
    assert started["incident_id"] == held.id
    assert engine.store.ledger("uid-job").restarts_used == 1
    assert gauges.held == 0


async def test_a_held_incident_whose_faults_cleared_ends_recovered_without_a_restart() -> None:
    engine, writer, sink, gauges, clock, active = await _hold_one()
    active.clear()  # the chip is healthy again; the job's pods run
    await engine.tick(clock.advance(10))
    await engine.idle()
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RECOVERED
    assert "not restarted" in incident.detail
    assert writer.commands == 0
    assert len(_data(sink, ev.RECOVERY_SUCCEEDED)) == 1
    assert (gauges.open, gauges.held) == (0, 0)


async def test_a_held_incident_at_the_recovery_deadline_fails_with_reason_breaker_open() -> None:
    engine, writer, sink, _gauges, clock, _active = await _hold_one()
    await engine.tick(clock.advance(601))
    await engine.idle()
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.FAILED
    [failed] = _data(sink, ev.RECOVERY_FAILED)
    assert failed["reason"] == "breaker-open"
    assert "held by the open circuit breaker" in str(failed["detail"])
    assert writer.commands == 0


async def test_a_new_leader_adopts_a_held_incident_and_publishes_recovery_held_again() -> None:
    engine, writer, _sink, _gauges, _clock, active = await _hold_one()
    held = engine.store.incident("uid-job")
    assert held is not None
    record = writer.records["uid-job"]
    job = engine.state.job(JobKind.VOLCANO, "ns", "job")
    assert job is not None
    assert check_incident(held, job, decode_ledger(record[KEY_LEDGER]), NOW) is None
    # a successor: the job's record in its cache, the breaker still open
    successor, writer2, sink2, _g, clock2 = _engine(active)
    successor.state.apply(record_change(job, record))
    await successor.tick(clock2.advance(1))
    await successor.idle()
    adopted = successor.store.incident("uid-job")
    assert adopted is not None
    assert adopted.id == held.id
    assert adopted.phase is Phase.HELD
    assert [d["incident_id"] for d in _data(sink2, ev.RECOVERY_HELD)] == [held.id]
    assert _data(sink2, ev.RECOVERY_STARTED) == []
    assert writer2.commands == 0
