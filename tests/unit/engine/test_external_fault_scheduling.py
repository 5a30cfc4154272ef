"""``fault-scheduling: external-force | external-grace`` (issue 36 item 3): the agent deletes nothing and marks each
fault pod ``huawei.com/pod-status: Unhealthy-<fault type>`` for an outside component (MindCluster
internal/rescheduling/job.go restartSingleFaultJob, addPodStatusAnnotationForFaultTask, addPodStatusAnnotation)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from support import factories
from support.factories import T0
from support.fakes import ListSink, PodListingWriter
from test_process_recovery_rules import _engine_state

from agent.core.clock import FixedClock
from agent.core.cluster import FaultScheduling, JobKind, JobRecord, PodRecord
from agent.core.correlate import JobHit
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef
from agent.core.incidents import IncidentStore, Phase, decode_incident, encode_incident
from agent.core.policy import Action, Decision, RetryLedger, decide
from agent.engine.recovery import RecoveryEngine
from agent.settings import PolicySettings, Settings
from agent.sinks import events as ev
from agent.sources.jobs import JobConverter, fault_scheduling_problem

NOW = T0 + timedelta(seconds=2)
EXT = FaultScheduling.EXTERNAL_FORCE


def _job(**kw: Any) -> JobRecord:
    return replace(factories.job(labels={"fault-scheduling": "external-force"}, fault_scheduling=EXT), **kw)


def _decide(fault: Fault, job: JobRecord, pods: tuple[PodRecord, ...], ledger: RetryLedger | None = None) -> Decision:
    hit = JobHit(job=job, pods=pods, actionable=True)
    return decide(fault, hit, ledger or RetryLedger(), PolicySettings.model_validate({}), NOW)


@pytest.mark.parametrize("value", ["external-force", "external-grace"])
def test_the_values_are_read_as_opted_in(value: str) -> None:
    raw = {
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "u",
            "resourceVersion": "1",
            "labels": {"fault-scheduling": value},
        },
        "spec": {"tasks": []},
        "status": {},
    }
    rec = JobConverter(JobKind.VOLCANO)(raw)
    assert isinstance(rec, JobRecord)
    assert rec.fault_scheduling.value == value
    assert rec.fault_scheduling.external
    assert rec.fault_scheduling.opted_in
    assert fault_scheduling_problem(value) is None


POD0 = factories.pod("job-0", rank=0)
POD1 = factories.pod("job-1", rank=1)
FAILED = ObjectRef("Pod", "ns", "job-1", "uid-job-1")


@pytest.mark.parametrize(
    ("fault", "job_kw", "pods", "marked", "value"),
    [
        pytest.param(factories.fault(), {}, (POD0, POD1), ("job-0", "job-1"), "Unhealthy-CardUnhealthy", id="chip"),
        pytest.param(
            factories.fault(kind=FaultKind.NODE, chips=()),
            {"pod_rescheduling": True},
            (POD1,),
            ("job-1",),
            "Unhealthy-NodeUnhealthy",
            id="node-pod-level",
        ),
        pytest.param(
            factories.fault(kind=FaultKind.BUSINESS, level=FaultLevel.RESTART_BUSINESS, pod=FAILED),
            {"fault_retry_times": 1},
            (POD1,),
            ("job-1",),
            "Unhealthy-pod-failed",
            id="failed-pod",
        ),
        pytest.param(
            factories.fault(kind=FaultKind.BUSINESS, level=FaultLevel.RESTART_BUSINESS, pod=FAILED),
            {"fault_retry_times": 0},
            (POD1,),
            ("job-1",),
            "Unhealthy-pod-failed",
            id="failed-pod-no-budget-check",
        ),
        pytest.param(
            factories.fault(level=FaultLevel.SUB_HEALTH),
            {"sub_healthy_strategy": "forceExit"},
            (POD0,),
            ("job-0",),
            "Unhealthy-SubHealthFault",
            id="sub-health",
        ),
        pytest.param(
            factories.fault(),
            {"retry_count": 3},
            (POD0,),
            ("job-0",),
            "Unhealthy-CardUnhealthy",
            id="no-restart-budget-check",
        ),
        pytest.param(
            factories.fault(),
            {"process_recover_strategy": "recover"},
            (POD0,),
            ("job-0",),
            "Unhealthy-CardUnhealthy",
            id="process-recover-strategy-not-read",
        ),
    ],
)
def test_the_fault_pods_are_marked_and_nothing_deleted(
    fault: Fault, job_kw: dict[str, Any], pods: tuple[PodRecord, ...], marked: tuple[str, ...], value: str
) -> None:
    d = _decide(fault, _job(**job_kw), pods)
    assert (d.action, d.pods, d.pod_status) == (Action.MARK_PODS, marked, value)
    assert (d.restarts, d.counts_restart, d.consumes_business_budget) == (False, False, False)
    assert d.mode is FaultScheduling.OFF
    assert "fault-scheduling=external-force" in d.reason


@pytest.mark.parametrize(
    ("fault", "job_kw"),
    [
        pytest.param(factories.fault(level=FaultLevel.PRE_SEPARATE), {}, id="pre-separate"),
        pytest.param(factories.fault(level=FaultLevel.SUB_HEALTH), {}, id="sub-health-ignore"),
        pytest.param(
            factories.fault(kind=FaultKind.BUSINESS, level=FaultLevel.RESTART_BUSINESS, pod=FAILED),
            {},
            id="failed-pod-without-fault-retry-times",
        ),
        pytest.param(
            factories.fault(kind=FaultKind.DISRUPTION, level=FaultLevel.RESTART_BUSINESS, pod=FAILED),
            {},
            id="disruption",
        ),
        pytest.param(
            factories.fault(
                kind=FaultKind.DISRUPTION, level=FaultLevel.RESTART_BUSINESS, pod=FAILED, reason="StuckTerminating"
            ),
            {},
            id="stuck-terminating",
        ),
        pytest.param(factories.fault(), {"phase": "Failed"}, id="failed-job-no-resubmit"),
    ],
)
def test_what_is_no_fault_pod_is_recorded_only(fault: Fault, job_kw: dict[str, Any]) -> None:
    settings = PolicySettings.model_validate({"resubmit_limit": 2})
    hit = JobHit(job=_job(**job_kw), pods=(POD0, POD1), actionable=True)
    d = decide(fault, hit, RetryLedger(), settings, NOW)
    assert d.action is Action.NONE
    assert not d.pods


def test_the_mark_survives_in_the_incident_record() -> None:
    job = _job()
    store = IncidentStore()
    d = _decide(factories.fault(), job, (POD0,))
    store.admit(job, factories.fault(), (POD0,))
    incident = store.open(job, factories.fault(), d, NOW)
    again = decode_incident(encode_incident(incident))
    assert (again.action, again.pods, again.pod_status) == ("mark-pods", ("job-0",), "Unhealthy-CardUnhealthy")


def _settings() -> Settings:
    return Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50}})


async def test_marks_the_fault_pod_publishes_and_times_the_recovery() -> None:
    job = _job()
    state = _engine_state(job)
    writer, sink, clock = PodListingWriter(state), ListSink(), FixedClock(NOW)
    active = [replace(factories.fault(at=T0), chips=("Ascend910-1",))]
    engine = RecoveryEngine(_settings(), state, writer, events=sink, clock=clock, active_faults=lambda: list(active))
    [decision] = await engine.handle_fault(active[0], NOW)
    await engine.idle()
    assert decision.action is Action.MARK_PODS
    assert writer.pod_marks == [("job-1", {"huawei.com/pod-status": "Unhealthy-CardUnhealthy"})]
    assert [m for m in writer.methods() if m.startswith(("delete", "restart"))] == []
    assert writer.commands == 0
    assert [e["data"]["action"] for e in sink.of(ev.RECOVERY_STARTED)] == ["mark-pods"]
    incident = engine.store.incident(job.uid)
    assert incident is not None
    assert (incident.phase, incident.pods, incident.pod_status) == (
        Phase.RESTARTING,
        ("job-1",),
        "Unhealthy-CardUnhealthy",
    )
    active.clear()  # the outside component moved the pod off the chip
    clock.advance(3)
    await engine.tick(clock.now())
    closed = engine.store.incident(job.uid)
    assert closed is not None
    assert closed.phase is Phase.RECOVERED
    [succeeded] = sink.of(ev.RECOVERY_SUCCEEDED)
    assert succeeded["data"]["action"] == "mark-pods"
