"""One process counts an incident's end once in ``fault_agent_recovery_seconds``.

The soak at 498e821 (seed 247409195) failed its lifecycle invariant with 10 samples for 9 incidents ended: a leader
closed an incident (one sample, its ``recovery.succeeded`` out), the record write of that end went out unconfirmed
as the lease ran out (the answer lost, the retry refused by the fence), and the same process's next term adopted the
incident from a record that still said ``restarting`` and closed it again: the same event id, a second sample."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from support import factories
from support.factories import SETTINGS, one_job_state
from support.factories import T0 as NOW
from support.fakes import Apiserver, PortWriter

from agent.core.clock import FixedClock
from agent.core.cluster import JobKind
from agent.engine.recovery import RecoveryEngine
from agent.sinks.metrics import AgentMetrics


def _samples(registry: CollectorRegistry) -> float:
    return sum(
        s.value
        for metric in registry.collect()
        for s in metric.samples
        if s.name == "fault_agent_recovery_seconds_count"
    )


async def test_an_incident_ended_again_by_a_later_term_is_sampled_once() -> None:
    state = one_job_state(NOW)
    registry = CollectorRegistry()
    engine = RecoveryEngine(
        SETTINGS, state, PortWriter(Apiserver()), metrics=AgentMetrics(registry), clock=FixedClock(NOW)
    )
    await engine.handle_fault(factories.fault(at=NOW), NOW)
    await engine.idle()
    job = state.job(JobKind.VOLCANO, "ns", "job")
    assert job is not None
    ended = engine.store.fail(job.uid, NOW, "ended")
    engine.closing.finished(ended, job)
    assert _samples(registry) == 1
    engine.closing.finished(ended, job)  # a later term adopting it from a stale record ends it again
    assert _samples(registry) == 1
