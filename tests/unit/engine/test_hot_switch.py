"""``subHealthyStrategy: hotSwitch`` (issue 36 item 2): nothing deleted on the sub-health fault; ClusterD's
``needVolcanoOpe: delete`` on a pod makes that pod a fault, deleted as forceExit deletes; the wait is bounded by
``policy.hot_switch_wait_s`` and its end published (MindCluster internal/rescheduling/task.go
getTaskHealthStateBySubHealth, job.go deleteJobWithSubHealthyLabels; ClusterD hot_switch_controller.go)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from support import factories
from support.factories import T0, change
from support.fakes import ListSink, PodListingWriter

from agent.core.clock import FixedClock
from agent.core.cluster import FaultScheduling, JobKind, JobRecord, PodRecord
from agent.core.correlate import JobHit, correlate
from agent.core.detect.pods import HOT_SWITCH_DELETE_REASON, pod_faults
from agent.core.faults import Fault, FaultKind, FaultLevel
from agent.core.incidents import Phase
from agent.core.policy import Action, RetryLedger, decide
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
from agent.settings import PolicySettings, Settings
from agent.sinks import events as ev
from agent.sinks.metrics import AgentMetrics
from agent.sources.pods import PodConverter
from agent.sources.state import ClusterState

NOW = T0 + timedelta(seconds=2)
F = FaultScheduling


def _raw_pod(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "1", "annotations": annotations},
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }


def test_the_pod_record_keeps_clusterds_request() -> None:
    pod = PodConverter()(_raw_pod({"needVolcanoOpe": "delete"}))
    assert isinstance(pod, PodRecord)
    assert pod.need_volcano_ope == "delete"
    plain = PodConverter()(_raw_pod({}))
    assert isinstance(plain, PodRecord)
    assert plain.need_volcano_ope == ""


@pytest.mark.parametrize(
    ("ope", "terminating", "fault"),
    [
        pytest.param("delete", False, True, id="delete-asked"),
        pytest.param("delete", True, False, id="already-terminating"),
        pytest.param("create", False, False, id="other-value"),
        pytest.param("", False, False, id="absent"),
    ],
)
def test_a_pod_clusterd_asks_to_delete_is_a_sub_health_fault_of_that_pod(
    ope: str, terminating: bool, fault: bool
) -> None:
    pod = replace(factories.pod("job-1", rank=1), need_volcano_ope=ope, deletion_timestamp=T0 if terminating else None)
    faults = [
        f for f in pod_faults(pod, NOW, (), timedelta(seconds=30)).values() if f.reason == HOT_SWITCH_DELETE_REASON
    ]
    assert bool(faults) is fault
    if fault:
        [f] = faults
        assert (f.kind, f.level, f.node) == (FaultKind.CHIP, FaultLevel.SUB_HEALTH, "n1")
        # it hits that pod only, not its neighbours on the node
        other = factories.pod("job-0", rank=0, chips=pod.chips)
        job = factories.job(labels={"fault-scheduling": "force", "subHealthyStrategy": "hotSwitch"})
        [hit] = correlate(f, [pod, other], {(JobKind.VOLCANO, "ns", "job"): job}).hits
        assert [p.name for p in hit.pods] == ["job-1"]


def _job(**kw: Any) -> JobRecord:
    base = factories.job(labels={"fault-scheduling": "grace"}, fault_scheduling=F.GRACE)
    return replace(base, sub_healthy_strategy="hotSwitch", **kw)


def _delete_fault(pod: PodRecord) -> Fault:
    return next(iter(pod_faults(replace(pod, need_volcano_ope="delete"), NOW, (), timedelta(seconds=30)).values()))


@pytest.mark.parametrize(
    ("job_kw", "pod", "action", "pods"),
    [
        pytest.param({"process_recover": True}, factories.pod("job-1", rank=1), Action.RESTART_PODS, ("job-1",),
                     id="process-recovery-only-that-pod"),
        pytest.param({"pod_rescheduling": True}, factories.pod("job-1", rank=1), Action.RESTART_PODS, ("job-1",),
                     id="pod-rescheduling-only-that-pod"),
        pytest.param({"process_recover": True}, factories.pod("job-0", rank=0), Action.RESTART_JOB, (),
                     id="rank-0-stops-the-job"),  # ClusterD notifyStopJob annotates rank 0
        pytest.param({}, factories.pod("job-1", rank=1), Action.RESTART_JOB, (), id="whole-job-without-pod-level"),
    ],
)  # fmt: skip
def test_clusterds_request_deletes_as_force_exit(
    job_kw: dict[str, Any], pod: PodRecord, action: Action, pods: tuple[str, ...]
) -> None:
    fault = _delete_fault(pod)
    hit = JobHit(job=_job(**job_kw), pods=(replace(pod, need_volcano_ope="delete"),), actionable=True)
    d = decide(fault, hit, RetryLedger(), PolicySettings.model_validate({}), NOW)
    assert (d.action, d.mode, d.pods) == (action, F.FORCE, pods)
    assert "needVolcanoOpe=delete" in d.reason
    assert not d.awaits_hot_switch


def test_the_sub_health_fault_itself_deletes_nothing() -> None:
    hit = JobHit(job=_job(process_recover=True), pods=(factories.pod("job-1", rank=1),), actionable=True)
    fault = factories.fault(level=FaultLevel.SUB_HEALTH, reason="SubHealth")
    d = decide(fault, hit, RetryLedger(), PolicySettings.model_validate({}), NOW)
    assert (d.action, d.pods, d.counts_restart) == (Action.NONE, (), False)
    assert d.awaits_hot_switch
    assert "needVolcanoOpe=delete" in d.reason


def _state(job: JobRecord) -> ClusterState:
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node("n1")))
    state.apply(change("vcjobs", "ns/job", job))
    for i in range(2):
        pod = replace(factories.pod(f"job-{i}", chips=(f"Ascend910-{i}",), created_at=T0), rank=i)
        state.apply(change("pods", f"ns/job-{i}", pod))
    return state


def _settings(wait_s: float = 60) -> Settings:
    return Settings.model_validate(
        {"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50, "hot_switch_wait_s": wait_s}}
    )


def _count(engine: RecoveryEngine, result: str) -> float:
    metrics = engine.ctx.metrics
    assert isinstance(metrics, AgentMetrics)
    value = metrics.registry.get_sample_value(
        "fault_agent_actions_total", {"action": "hot-switch-wait", "result": result}
    )
    return value or 0.0


async def test_the_wait_ends_with_clusterds_request_and_only_that_pod_is_deleted() -> None:
    job = _job(process_recover=True)
    state = _state(job)
    writer, sink, clock = PodListingWriter(state), ListSink(), FixedClock(NOW)
    sub_health = replace(factories.fault(at=T0, level=FaultLevel.SUB_HEALTH), chips=("Ascend910-1",))
    active = [sub_health]
    engine = RecoveryEngine(
        _settings(),
        state,
        writer,
        events=sink,
        clock=clock,
        active_faults=lambda: list(active),
        metrics=AgentMetrics(CollectorRegistry()),
    )
    [waiting] = await engine.handle_fault(sub_health, NOW)
    await engine.idle()
    assert waiting.awaits_hot_switch
    clock.advance(30)
    await engine.tick(clock.now())
    assert [m for m in writer.methods() if m.startswith(("delete", "restart"))] == []
    # ClusterD: the backup pod runs, training paused; it asks for the old pod's deletion
    asked = replace(state.pods["ns/job-1"], need_volcano_ope="delete", resource_version="2")
    state.apply(change("pods", "ns/job-1", asked))
    clock.advance(1)
    await engine.tick(clock.now())
    assert _count(engine, "switched") == 1
    [deleting] = await engine.handle_fault(_delete_fault(asked), clock.now())
    await engine.idle()
    assert (deleting.action, deleting.pods, deleting.mode) == (Action.RESTART_PODS, ("job-1",), F.FORCE)
    assert ("delete_pods", "job-1") in writer.calls
    assert writer.commands == 0
    assert sink.of(ev.JOB_MISCONFIGURED) == []
    # the backup pod (the Ascend Operator's <old>-hot-<4 digits>, made before the deletion) stands in for job-1:
    # no pod of the old name comes back, and the incident closes as recovered
    gone = state.pods["ns/job-1"]
    state.apply(Change(ChangeType.DELETED, "pods", "ns/job-1", None, gone, False, 0.0))
    backup = replace(factories.pod("job-1-hot-4821", chips=("Ascend910-4",), created_at=T0), rank=1)
    state.apply(change("pods", "ns/job-1-hot-4821", backup))
    clock.advance(2)
    await engine.tick(clock.now())
    closed = engine.store.incident(job.uid)
    assert closed is not None
    assert closed.phase is Phase.RECOVERED


async def test_past_the_bound_the_agent_says_so_and_leaves_the_job_running() -> None:
    job = _job()
    state = _state(job)
    writer, sink, clock = PodListingWriter(state), ListSink(), FixedClock(NOW)
    sub_health = replace(factories.fault(at=T0, level=FaultLevel.SUB_HEALTH), chips=("Ascend910-0",))
    engine = RecoveryEngine(
        _settings(60),
        state,
        writer,
        events=sink,
        clock=clock,
        active_faults=lambda: [sub_health],
        metrics=AgentMetrics(CollectorRegistry()),
    )
    await engine.handle_fault(sub_health, NOW)
    await engine.idle()
    clock.advance(59)
    await engine.tick(clock.now())
    assert _count(engine, "timeout") == 0
    clock.advance(1)
    await engine.tick(clock.now())
    assert _count(engine, "timeout") == 1
    [event] = sink.of(ev.JOB_MISCONFIGURED)
    assert (event["data"]["label"], event["data"]["value"]) == ("subHealthyStrategy", "hotSwitch")
    assert "needVolcanoOpe=delete" in event["data"]["problem"]
    assert "ignore" in event["data"]["problem"]
    clock.advance(600)
    await engine.tick(clock.now())
    assert _count(engine, "timeout") == 1  # said once
    assert [m for m in writer.methods() if m.startswith(("delete", "restart"))] == []


async def test_the_wait_ends_quietly_when_the_fault_clears() -> None:
    job = _job()
    state = _state(job)
    writer, sink, clock = PodListingWriter(state), ListSink(), FixedClock(NOW)
    sub_health = replace(factories.fault(at=T0, level=FaultLevel.SUB_HEALTH), chips=("Ascend910-0",))
    active = [sub_health]
    engine = RecoveryEngine(
        _settings(60),
        state,
        writer,
        events=sink,
        clock=clock,
        active_faults=lambda: list(active),
        metrics=AgentMetrics(CollectorRegistry()),
    )
    await engine.handle_fault(sub_health, NOW)
    await engine.idle()
    active.clear()
    clock.advance(1)
    await engine.tick(clock.now())
    assert (_count(engine, "cleared"), _count(engine, "timeout")) == (1, 0)
    clock.advance(120)
    await engine.tick(clock.now())
    assert _count(engine, "timeout") == 0
    assert sink.of(ev.JOB_MISCONFIGURED) == []
