"""The tick must not resume an incident the recovery loop is acting on right now.

Found by bench/bench_e2e.py: while the recovery loop awaited the apiserver between opening an incident (phase
``acting``) and sending its RestartJob Command, the once-a-second tick took the incident for one a previous
leader left behind, sent the restart a second time and both paths then failed with
``TransitionError: cannot go from restarting to restarting``.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import one_job_state
from support.fakes import InstantWriter, Scripted, script

from agent.actions import ActionResult, Outcome
from agent.core.incidents import IncidentStore, Phase
from agent.engine.recovery import RecoveryEngine
from agent.runtime.clock import SystemClock
from agent.settings import Settings

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _gated(api: k8s.ApiClient) -> tuple[InstantWriter, asyncio.Event, Scripted]:
    """A writer answering at once, except the RestartJob Command, which waits for the gate returned; the
    Commands' calls are in the :class:`Scripted` returned."""
    writer, gate = InstantWriter(api), asyncio.Event()
    done = ActionResult("restart-command", "job", Outcome.DONE)
    return writer, gate, script(writer, "restart_command", gate=gate, answer=done)


async def test_tick_leaves_an_incident_being_acted_on_alone() -> None:
    settings = Settings.model_validate({"kafka": {"enabled": False}})
    api = k8s.ApiClient()
    writer, gate, commands = _gated(api)
    engine = RecoveryEngine(settings, one_job_state(NOW), writer, clock=SystemClock())
    fault = factories.fault(at=NOW)
    handling = asyncio.create_task(engine.handle_fault(fault, NOW))
    await asyncio.wait_for(commands.entered.wait(), 5)
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.ACTING

    # must not send the restart a second time (which would wait on the gate and time out here)
    await asyncio.wait_for(engine.tick(NOW), 5)

    gate.set()
    await asyncio.wait_for(handling, 5)
    await asyncio.wait_for(engine.idle(), 5)  # the restart, in its own task, goes on past the gate
    await engine.tick(NOW)
    await engine.idle()
    await api.close()
    assert len(commands.calls) == 1
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RESTARTING


async def test_tick_does_not_resume_from_a_stale_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tick lists the open incidents, then awaits writes for some of them; meanwhile the recovery loop may
    finish acting on another. The tick's stale ``acting`` copy must not send that restart again."""
    settings = Settings.model_validate({"kafka": {"enabled": False}})
    api = k8s.ApiClient()
    writer, gate, commands = _gated(api)
    gate.set()
    engine = RecoveryEngine(settings, one_job_state(NOW), writer, clock=SystemClock())
    fault = factories.fault(at=NOW)
    stale: list[Any] = []
    real_open = IncidentStore.open

    def open_and_remember(self: IncidentStore, *args: Any, **kw: Any) -> Any:
        incident = real_open(self, *args, **kw)
        stale.append(incident)
        return incident

    monkeypatch.setattr(IncidentStore, "open", open_and_remember)
    await engine.handle_fault(fault, NOW)
    await engine.idle()
    assert len(commands.calls) == 1
    assert stale[0].phase is Phase.ACTING
    monkeypatch.setattr(IncidentStore, "open_incidents", lambda self: list(stale))

    await asyncio.wait_for(engine.tick(NOW), 5)
    await engine.idle()

    await api.close()
    assert len(commands.calls) == 1
