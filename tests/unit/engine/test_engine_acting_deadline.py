"""An incident whose restart never goes out (every claim of the job fails) is failed at the recovery deadline
(``policy.recovery_deadline_s``: "an incident not recovered within this is failed"), as a restarting one is, with
one ``recovery.failed`` event (reason ``action-error``) and the incident persisted as failed: it does not stay
``acting`` for good, retried on every tick with nothing for an operator to alert on."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import T0 as LEFT_AT
from support.factories import T0 as NOW
from support.factories import left_acting_state as left_state
from support.factories import one_job_state
from support.fakes import CountingWriter, InstantWriter, ListSink, Scripted, script

from agent.actions import ActionResult, Outcome
from agent.core.clock import FixedClock
from agent.core.incidents import Phase, decode_incident, make_incident_id
from agent.core.records import KEY_INCIDENT
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks import events as ev

SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"recovery_deadline_s": 600}})


@dataclass
class Refusing:
    """An :class:`InstantWriter` whose every claim of the job fails (`status`), and so does the RestartJob Command
    sent with the first claim (503); no resubmission left over; the job's version stays "0" (no Command ever
    landed). `claims`, `commands`, `records`: the calls of claim_record, restart_command, write_record."""

    writer: InstantWriter
    claims: Scripted
    commands: Scripted
    records: Scripted

    @classmethod
    def make(cls, api: k8s.ApiClient, status: int) -> Refusing:
        writer = InstantWriter(api)
        claim = ActionResult("claim-record", "job", Outcome.FAILED, f"HTTP {status}", status >= 500, status)
        command = ActionResult("restart-command", "job", Outcome.FAILED, "HTTP 503", True, 503)
        script(writer, "pending_resubmissions", answer=([], []))
        script(writer, "job_version", answer="0")
        return cls(
            writer,
            script(writer, "claim_record", answer=claim),
            script(writer, "restart_command", answer=command),
            script(writer, "write_record"),
        )

    def annotated(self) -> list[dict[str, str]]:
        """The data of each record write, in order."""
        return [dict(args[1]) for args, _ in self.records.calls]


async def _run(status: int) -> tuple[RecoveryEngine, Refusing, ListSink, FixedClock, k8s.ApiClient]:
    api = k8s.ApiClient()
    clock = FixedClock(NOW)
    writer = Refusing.make(api, status)
    sink = ListSink()
    engine = RecoveryEngine(SETTINGS, one_job_state(), writer.writer, events=sink, clock=clock)
    await engine.handle_fault(factories.fault(), NOW)
    await engine.idle()
    return engine, writer, sink, clock, api


async def _tick(engine: RecoveryEngine, clock: FixedClock, seconds: float) -> None:
    at = NOW + timedelta(seconds=seconds)
    clock.set(at)
    await engine.tick(at)
    await engine.idle()


@pytest.mark.parametrize("status", [503, 403])
async def test_an_incident_whose_claim_keeps_failing_fails_at_the_recovery_deadline(status: int) -> None:
    engine, writer, sink, clock, api = await _run(status)
    try:
        assert _phase(engine) is Phase.ACTING
        for seconds in (10, 300, 600):  # before the deadline: resumed (claimed again), not failed
            await _tick(engine, clock, seconds)
            assert _phase(engine) is Phase.ACTING, seconds
        claims = len(writer.claims.calls)
        assert claims >= 4  # the first, with the Command, then one per tick
        assert ev.RECOVERY_FAILED not in sink.types()

        await _tick(engine, clock, 601)
        failed = engine.store.incident("uid-job")
        assert failed is not None
        assert failed.phase is Phase.FAILED
        assert failed.detail.startswith("not restarted within 600 s of the fault: claim failed: ")
        assert f"HTTP {status}" in failed.detail  # the last write's failure says why
        assert len(writer.claims.calls) == claims  # no claim at the tick that failed it
        assert len(writer.commands.calls) == 1
        assert sink.types().count(ev.RECOVERY_FAILED) == 1
        published = next(ev.as_json(e) for e in sink.events if ev.as_json(e)["type"] == ev.RECOVERY_FAILED)
        assert published["data"]["reason"] == ev.FailureReason.ACTION_ERROR.value  # the restart's writes failed
        written = decode_incident(writer.annotated()[-1][KEY_INCIDENT])  # persisted in the job's record
        assert written.id == failed.id
        assert written.phase is Phase.FAILED

        await _tick(engine, clock, 700)  # closed: nothing more
        assert len(writer.claims.calls) == claims
        assert sink.types().count(ev.RECOVERY_FAILED) == 1
    finally:
        await api.close()


def _phase(engine: RecoveryEngine) -> Phase | None:
    incident = engine.store.incident("uid-job")
    return None if incident is None else incident.phase


async def test_an_incident_a_previous_leader_left_acting_past_the_deadline_is_resumed_once_first() -> None:
    """A leader that takes over an ``acting`` incident older than the deadline (the agent was down meanwhile)
    sends its restart once: only its own failed attempt ends the incident at the deadline."""
    api = k8s.ApiClient()
    writer = CountingWriter(api)
    sink = ListSink()
    late = LEFT_AT + timedelta(seconds=2000)  # past the default 1800 s deadline
    engine = RecoveryEngine(
        Settings.model_validate({"kafka": {"enabled": False}}),
        left_state(),
        writer,
        events=sink,
        clock=FixedClock(late),
        active_faults=lambda: [factories.fault()],
    )
    try:
        await engine.tick(late)
        await engine.idle()
    finally:
        await api.close()
    assert writer.commands == 1
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.id == make_incident_id("job", "uid-job", "0", 1)  # the one it took over, not a new one
    assert incident.phase is Phase.RESTARTING
    assert ev.RECOVERY_FAILED not in sink.types()
