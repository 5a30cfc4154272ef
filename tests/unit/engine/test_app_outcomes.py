"""Every recovery.started ends in exactly one recovery.succeeded|failed event and one recovery_seconds sample,
whatever happens to the job: Volcano failing it ends the incident at once (reason ``job-failed``), a deletion ends
it as abandoned (reason ``job-gone``, outcome ``abandoned``). The engine on a fake writer and a fixed clock."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from kubernetes_asyncio import client as k8s
from prometheus_client import CollectorRegistry
from support import factories
from support.factories import change
from support.fakes import CountingWriter
from support.fakes import ListSink as BaseSink

from agent.core.faults import Fault
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sinks.metrics import AgentMetrics
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}})
JOB = factories.job(fault_retry_times=3, created_at=NOW)


class ListSink(BaseSink):
    def recoveries(self) -> list[tuple[str, str]]:
        out = []
        for e in self.events:
            doc = ev.as_json(e)
            if ".recovery." in doc["type"]:
                what = doc["type"].split(".")[-2]
                out.append((what, doc["data"]["reason"] if what == "failed" else ""))
        return out


def _state() -> ClusterState:
    state = ClusterState()
    node = factories.node(at=NOW)
    state.apply(change("nodes", "n1", node))
    state.apply(change("vcjobs", "ns/job", JOB))
    for i in range(2):
        pod = factories.pod(f"job-{i}", uid=f"uid-pod-{i}", chips=(f"Ascend910-{i}",), rank=i, created_at=NOW)
        state.apply(change("pods", f"ns/job-{i}", pod))
    return state


def _fault() -> Fault:
    return factories.fault(at=NOW)


async def _restarting(api: k8s.ApiClient) -> tuple[RecoveryEngine, ClusterState, ListSink, CollectorRegistry]:
    state = _state()
    sink = ListSink()
    registry = CollectorRegistry()
    engine = RecoveryEngine(
        SETTINGS, state, CountingWriter(api), events=sink, metrics=AgentMetrics(registry), clock=SystemClock()
    )
    await engine.handle_fault(_fault(), NOW)
    await engine.idle()
    (incident,) = engine.store.open_incidents()
    assert incident.phase.value == "restarting"
    assert sink.recoveries() == [("started", "")]
    return engine, state, sink, registry


def _samples(registry: CollectorRegistry, outcome: str) -> float:
    return registry.get_sample_value("fault_agent_recovery_seconds_count", {
        "job_kind": "vcjob", "fault_kind": "chip", "action": "restart-job", "outcome": outcome, "acted_by": "agent",
    }) or 0.0  # fmt: skip


async def test_job_deleted_mid_recovery_is_abandoned_once() -> None:
    async with k8s.ApiClient() as api:
        engine, state, sink, registry = await _restarting(api)
        state.apply(Change(ChangeType.DELETED, "vcjobs", "ns/job", None, JOB, False, time.time()))
        for s in range(1, 4):
            await engine.tick(NOW + timedelta(seconds=s))
            await engine.idle()
    assert sink.recoveries() == [("started", ""), ("failed", "job-gone")]
    assert _samples(registry, "abandoned") == 1
    assert _samples(registry, "failed") == 0
    assert engine.store.open_incidents() == []


async def test_volcano_failing_the_job_fails_the_recovery_at_once() -> None:
    async with k8s.ApiClient() as api:
        engine, state, sink, registry = await _restarting(api)
        failed = replace(JOB, phase="Failed", version="1", retry_count=3, resource_version="2")
        state.apply(change("vcjobs", "ns/job", failed))
        for s in range(1, 4):  # seconds, not the 1800 s deadline
            await engine.tick(NOW + timedelta(seconds=s))
            await engine.idle()
    assert sink.recoveries() == [("started", ""), ("failed", "job-failed")]
    (last,) = [ev.as_json(e) for e in sink.events if ev.as_json(e)["type"].endswith("recovery.failed.v1")]
    assert "retryCount 3" in last["data"]["detail"]
    assert "maxRetry 3" in last["data"]["detail"]
    assert last["data"]["action"] == "restart-job"
    assert _samples(registry, "failed") == 1
