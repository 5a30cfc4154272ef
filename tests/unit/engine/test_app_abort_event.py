"""A budget abort is reported the same way in its event and its metrics: the recovery.failed event names the
action ``abort`` (as fault_agent_recovery_seconds{action="abort"} does), and the failure is counted once under
its reason, ``budget-exhausted``, never as a timeout or an action error (each reason has its own alert)."""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes_asyncio import client as k8s
from prometheus_client import CollectorRegistry
from support import factories
from support.factories import change
from support.fakes import InstantWriter, ListSink

from agent.core.cluster import FaultScheduling
from agent.core.faults import FaultKind, FaultLevel, ObjectRef
from agent.engine.recovery import RecoveryEngine
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sinks.metrics import AgentMetrics
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def _state() -> ClusterState:
    """A Volcano job with fault-retry-times=0 (no business retry at all) and one Running pod on n1."""
    state = ClusterState()
    node = factories.node(at=NOW)
    state.apply(change("nodes", "n1", node))
    job = factories.job(
        labels=(("fault-scheduling", "force"), ("fault-retry-times", "0")),
        fault_scheduling=FaultScheduling.FORCE,
        fault_retry_times=0,
        min_available=1,
        created_at=NOW,
    )
    state.apply(change("vcjobs", "ns/job", job))
    pod = factories.pod(uid="uid-pod-0", created_at=NOW)
    state.apply(change("pods", "ns/job-0", pod))
    return state


async def test_budget_abort_event_names_the_abort_action_and_counts_its_reason() -> None:
    reg = CollectorRegistry()
    metrics = AgentMetrics(reg)
    sink = ListSink()
    api = k8s.ApiClient()
    settings = Settings.model_validate({"kafka": {"enabled": False}})
    engine = RecoveryEngine(settings, _state(), InstantWriter(api), events=sink, metrics=metrics, clock=SystemClock())
    pod = ObjectRef("Pod", "ns", "job-0", "uid-pod-0")
    fault = factories.fault(
        kind=FaultKind.BUSINESS,
        level=FaultLevel.RESTART_BUSINESS,
        codes=("1",),
        at=NOW,
        source=pod,
        reason="Error",
        pod=pod,
    )
    try:
        await engine.handle_fault(fault, NOW)
        await engine.idle()
    finally:
        await api.close()

    (failed,) = [ev.as_json(e) for e in sink.events if ev.as_json(e)["type"] == ev.RECOVERY_FAILED]
    assert failed["data"]["reason"] == "budget-exhausted"
    assert failed["data"]["action"] == "abort"
    labels = {"job_kind": "vcjob", "fault_kind": "business", "action": "abort", "outcome": "failed"}
    labels["acted_by"] = "agent"
    assert reg.get_sample_value("fault_agent_recovery_seconds_count", labels) == 1
    assert reg.get_sample_value("fault_agent_retry_budget_exhausted_total", {"job_kind": "vcjob"}) == 1
    failures = {
        reason: reg.get_sample_value("fault_agent_recovery_failures_total", {"job_kind": "vcjob", "reason": reason})
        for reason in ("budget-exhausted", "timeout", "action-error")
    }
    assert failures == {"budget-exhausted": 1, "timeout": 0, "action-error": 0}
