"""An incident whose restart never goes out (every claim of the job fails) is failed at the recovery deadline
(``policy.recovery_deadline_s``: "an incident not recovered within this is failed"), as a restarting one is, with
one ``recovery.failed`` event (reason ``action-error``) and the incident persisted as failed: it does not stay
``acting`` for good, retried on every tick with nothing for an operator to alert on."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import T0 as LEFT_AT
from support.factories import T0 as NOW
from support.factories import left_acting_state as left_state
from support.factories import one_job_state
from support.fakes import CountingWriter, InstantWriter, ListSink

from agent.actions import ActionResult, Outcome
from agent.core.clock import FixedClock
from agent.core.cluster import JobRef
from agent.core.incidents import Phase, decode_incident, make_incident_id
from agent.core.records import KEY_INCIDENT
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks import events as ev

SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"recovery_deadline_s": 600}})


class RefusingWriter(InstantWriter):
    """Every claim of the job fails (`status`); so does every restart write sent with the first claim."""

    def __init__(self, api: k8s.ApiClient, status: int) -> None:
        super().__init__(api)
        self.status = status
        self.claims = 0
        self.commands = 0
        self.annotated: list[dict[str, str]] = []

    async def claim_record(self, job: JobRef, data: Any, *, resource_version: str, incident: str) -> ActionResult:
        self.claims += 1
        retriable = self.status >= 500
        return ActionResult("claim-record", str(job), Outcome.FAILED, f"HTTP {self.status}", retriable, self.status)

    async def write_record(self, job: JobRef, data: Any, *, incident: str) -> ActionResult:
        self.annotated.append(dict(data))
        return ActionResult("write-record", str(job), Outcome.DONE)

    async def pending_resubmissions(self) -> tuple[list[Any], list[Any]]:
        return [], []  # none left over

    async def job_version(self, job: JobRef) -> str | None:
        return "0"  # no Command ever landed: the job's generation stays where the decision saw it

    async def restart_command(self, job: JobRef, *, incident: str, reason: str, message: str) -> ActionResult:
        self.commands += 1
        return ActionResult("restart-command", str(job), Outcome.FAILED, "HTTP 503", True, 503)


async def _run(status: int) -> tuple[RecoveryEngine, RefusingWriter, ListSink, FixedClock, k8s.ApiClient]:
    api = k8s.ApiClient()
    clock = FixedClock(NOW)
    writer = RefusingWriter(api, status)
    sink = ListSink()
    engine = RecoveryEngine(SETTINGS, one_job_state(), writer, events=sink, clock=clock)
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
        claims = writer.claims
        assert claims >= 4  # the first, with the Command, then one per tick
        assert ev.RECOVERY_FAILED not in sink.types()

        await _tick(engine, clock, 601)
        failed = engine.store.incident("uid-job")
        assert failed is not None
        assert failed.phase is Phase.FAILED
        assert failed.detail.startswith("not restarted within 600 s of the fault: claim failed: ")
        assert f"HTTP {status}" in failed.detail  # the last write's failure says why
        assert writer.claims == claims  # no claim at the tick that failed it
        assert writer.commands == 1
        assert sink.types().count(ev.RECOVERY_FAILED) == 1
        published = next(ev.as_json(e) for e in sink.events if ev.as_json(e)["type"] == ev.RECOVERY_FAILED)
        assert published["data"]["reason"] == ev.FailureReason.ACTION_ERROR.value  # the restart's writes failed
        written = decode_incident(writer.annotated[-1][KEY_INCIDENT])  # persisted in the job's record
        assert written.id == failed.id
        assert written.phase is Phase.FAILED

        await _tick(engine, clock, 700)  # closed: nothing more
        assert writer.claims == claims
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
