"""fault_agent_decision_seconds times a fault's first decision only. A fault decided again (held back by the
restart rate limit and decided at every tick until a token is free, re-evaluated by a new leader, or joined to an
incident that closed) is not a new sample: counted again, its growing age (the time since it was seen) would
read on the dashboard's decision p99 as the agent being slow to decide."""

from __future__ import annotations

from datetime import timedelta

from prometheus_client import CollectorRegistry
from support import factories
from support.factories import T0 as NOW
from support.fakes import FakeWriter

from agent.core.clock import FixedClock
from agent.core.incidents import Phase
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks.metrics import AgentMetrics

SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50}})


def _count(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("fault_agent_decision_seconds_count")


async def test_a_fault_the_rate_limit_holds_back_is_timed_once() -> None:
    registry = CollectorRegistry()
    clock = FixedClock(NOW)
    engine = RecoveryEngine(
        SETTINGS, factories.one_job_state(NOW), FakeWriter(), clock=clock, metrics=AgentMetrics(registry)
    )
    while engine.deciding.bucket.try_take(NOW.timestamp()):
        pass  # no restart token left: the fault's restart is deferred
    await engine.handle_fault(factories.fault(at=NOW), NOW)
    await engine.idle()
    assert _count(registry) == 1
    for _ in range(3):  # decided again at every tick while no token is free
        await engine.tick(NOW)
        await engine.idle()
    assert engine.store.incident("uid-job") is None  # still held back
    assert _count(registry) == 1

    later = NOW + timedelta(minutes=5)  # tokens again: the restart goes out
    clock.set(later)
    await engine.tick(later)
    await engine.idle()
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase in (Phase.ACTING, Phase.RESTARTING)
    assert _count(registry) == 1
    assert registry.get_sample_value("fault_agent_decision_seconds_bucket", {"le": "0.0005"}) == 1  # the first
