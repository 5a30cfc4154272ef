"""A fault is correlated once on its way to a decision (issue 39: the decision path's CPU), and again only when the
cluster state changed in between (a breaker trip's publication waits, and the watches go on meanwhile)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from support import factories
from support.factories import T0 as NOW
from support.factories import change
from support.fakes import Apiserver, PortWriter
from test_restart_round_trip import _state

import agent.core.correlate as correlate_module
import agent.engine.deciding as deciding_module
import agent.engine.recovery as recovery_module
from agent.core.clock import FixedClock
from agent.core.faults import Fault
from agent.core.policy import Action
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import ChangeType
from agent.settings import Settings

SETTINGS = Settings.model_validate({"kafka": {"enabled": False}})


def _count_correlations(monkeypatch: pytest.MonkeyPatch) -> list[Fault]:
    """Every call of correlate, from wherever the engine imported it: the faults it was called for."""
    calls: list[Fault] = []
    real = correlate_module.correlate

    def counted(fault: Fault, *args: Any, **kwargs: Any) -> Any:
        calls.append(fault)
        return real(fault, *args, **kwargs)

    for module in (recovery_module, deciding_module):
        monkeypatch.setattr(module, "correlate", counted)
    return calls


async def test_a_fault_is_correlated_once_when_nothing_changed_meanwhile(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_correlations(monkeypatch)
    engine = RecoveryEngine(SETTINGS, _state(), PortWriter(Apiserver()), clock=FixedClock(NOW))
    fault = factories.fault(at=NOW)
    decisions = await engine.handle_fault(fault, NOW)
    assert [d.action for d in decisions] == [Action.RESTART_JOB]
    assert calls == [fault]
    assert engine.fault_jobs.hit(fault, "uid-job")  # what the one correlation found is remembered for fault.cleared


async def test_a_fault_is_correlated_again_when_the_state_changed_before_its_decision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job's pods leave the node while the breaker's feed waits: the decision reads the state as it is then
    (no job hit: no restart), not the correlation made before."""
    calls = _count_correlations(monkeypatch)
    state = _state()
    engine = RecoveryEngine(SETTINGS, state, PortWriter(Apiserver()), clock=FixedClock(NOW))

    async def feed_while_pods_leave(fault: Fault, now: datetime) -> None:
        for i in range(2):
            old = state.pods[f"ns/job-{i}"]
            state.apply(change("pods", f"ns/job-{i}", None, old, type=ChangeType.DELETED))

    monkeypatch.setattr(engine.breakers, "feed", feed_while_pods_leave)
    fault = factories.fault(at=NOW)
    decisions = await engine.handle_fault(fault, NOW)
    assert decisions == []
    assert calls == [fault, fault]
