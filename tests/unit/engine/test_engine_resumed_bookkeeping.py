"""MindCluster's bookkeeping (remain-retry-times, job-reschedule-reason) for the restarts not made straight from a
decision: the whole-job restart of an escalated pod-level restart, and an incident left ``acting`` that the
leader resumes (after a takeover, or when its own claim did not land). Against a fake writer port and a fixed
clock; the bookkeeping is read from what the port's ``update_configmap_keys`` calls wrote."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter, ListSink, PodListingWriter

from agent.core.bookkeeping import RESCHEDULE_REASON_CM, TaskReason, resumed_intent
from agent.core.clock import FixedClock
from agent.core.cluster import FaultScheduling, JobRecord
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    Incident,
    Phase,
    describe_fault,
    encode_incident,
    encode_ledger,
)
from agent.core.policy import Action, Decision, RetryLedger
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sources.state import ClusterState

NOW = T0 + timedelta(seconds=2)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50}})
NPU = ("volcano-system", "vcjob-fault-npu-cm")


def _job(**kw: Any) -> JobRecord:
    return replace(factories.job(labels=factories.FORCE, fault_scheduling=FaultScheduling.FORCE), **kw)


def _state(job: JobRecord) -> ClusterState:
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node("n1")))
    state.apply(change("vcjobs", "ns/job", job))
    for i in range(2):
        pod = replace(factories.pod(f"job-{i}", chips=(f"Ascend910-{i}",), created_at=T0), rank=i)
        state.apply(change("pods", f"ns/job-{i}", pod))
    return state


def _chip() -> Fault:
    return replace(factories.fault(at=T0), chips=("Ascend910-1",))


def _records(writer: FakeWriter) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(writer.configmaps[RESCHEDULE_REASON_CM]["recent-reschedule-records"])
    return doc


def _reasons(record: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return [(t["RescheduleReason"], t["PodName"], t["NodeName"], t["NodeRankIndex"]) for t in record["ReasonOfTask"]]


async def test_an_escalated_whole_job_restart_writes_mindclusters_bookkeeping() -> None:
    """Regression: the escalation's whole-job restart wrote no record and no remain-retry-times (MindCluster's
    ``doRestartJob`` records the fault tasks again when the upgraded job restarts)."""
    job = _job(pod_rescheduling=True, fault_retry_times=2)
    state = _state(job)
    writer, clock = PodListingWriter(state), FixedClock(NOW)
    engine = RecoveryEngine(SETTINGS, state, writer, events=ListSink(), clock=clock, active_faults=lambda: [])
    await engine.handle_fault(_chip(), NOW)
    await engine.idle()
    assert writer.bookkeeping == [NPU, RESCHEDULE_REASON_CM]  # the pod-level restart's
    unbound = factories.pod("job-1", uid="uid-new", node="", phase="Pending", ready=False)
    state.apply(change("pods", "ns/job-1", replace(unbound, created_at=clock.now(), rank=1)))
    for _ in range(3):
        clock.advance(20)
        await engine.tick(clock.now())
        await engine.idle()
    incident = engine.store.incident(job.uid)
    assert incident is not None
    assert incident.escalated
    assert writer.bookkeeping == [NPU, RESCHEDULE_REASON_CM] * 2  # once more for the whole-job restart, once
    [history] = _records(writer).values()
    assert history["TotalRescheduleTimes"] == 2
    assert [_reasons(r) for r in history["RescheduleRecords"]] == [[("CardUnhealthy", "job-1", "n1", "1")]] * 2
    remain = json.loads(writer.configmaps[NPU]["remain-retry-times"])
    assert remain == {"ns/job-uid-job": {"UUID": "uid-job", "Times": 2}}  # hardware restarts spend no retry


def _left_acting(engine: RecoveryEngine, state: ClusterState, job: JobRecord, **changed: Any) -> None:
    """The job's incident as a previous leader left it on the job's annotations: ``acting`` (ledger charged), its
    restart not recorded; the job then shows `changed`."""
    decision = Decision(Action.RESTART_JOB, "r", mode=FaultScheduling.FORCE, counts_restart=True)
    incident = engine.store.open(job, _chip(), decision, NOW)
    persisted = (
        (INCIDENT_ANNOTATION, encode_incident(incident)),
        (LEDGER_ANNOTATION, encode_ledger(engine.store.ledger(job.uid))),
    )
    state.apply(change("vcjobs", "ns/job", replace(job, annotations=persisted, **changed)))


async def test_a_resumed_restart_writes_mindclusters_bookkeeping() -> None:
    """Regression: a restart the leader resumed (an incident left ``acting``) wrote no bookkeeping."""
    job = _job()
    state = _state(job)
    writer = PodListingWriter(state)
    engine = RecoveryEngine(
        SETTINGS, state, writer, events=ListSink(), clock=FixedClock(NOW), active_faults=lambda: [_chip()]
    )
    _left_acting(engine, state, job)
    await engine.tick(NOW)
    await engine.idle()
    assert writer.methods().count("restart_command") == 1
    assert writer.bookkeeping == [NPU, RESCHEDULE_REASON_CM]
    [history] = _records(writer).values()
    assert [_reasons(r) for r in history["RescheduleRecords"]] == [[("CardUnhealthy", "job-1", "n1", "1")]]
    assert json.loads(writer.configmaps[NPU]["remain-retry-times"]) == {
        "ns/job-uid-job": {"UUID": "uid-job", "Times": 0}
    }


async def test_a_restart_found_sent_at_takeover_writes_its_bookkeeping_once() -> None:
    """The job's generation moved on: the old leader's restart went out, unrecorded; it is recorded (not sent
    again) and so is its bookkeeping, once."""
    job = _job()
    state = _state(job)
    writer = PodListingWriter(state)
    engine = RecoveryEngine(SETTINGS, state, writer, events=ListSink(), clock=FixedClock(NOW), active_faults=lambda: [])
    _left_acting(engine, state, job, version="1", resource_version="2")
    await engine.tick(NOW)
    await engine.idle()
    await engine.tick(NOW + timedelta(seconds=1))
    await engine.idle()
    assert writer.methods().count("restart_command") == 0
    assert writer.bookkeeping == [NPU, RESCHEDULE_REASON_CM]


async def test_a_resumed_restart_writes_no_bookkeeping_when_it_is_off() -> None:
    settings = SETTINGS.model_copy(update={"policy": SETTINGS.policy.model_copy(update={"bookkeeping": False})})
    job = _job()
    state = _state(job)
    writer = PodListingWriter(state)
    engine = RecoveryEngine(
        settings, state, writer, events=ListSink(), clock=FixedClock(NOW), active_faults=lambda: [_chip()]
    )
    _left_acting(engine, state, job)
    await engine.tick(NOW)
    await engine.idle()
    assert writer.methods().count("restart_command") == 1
    assert writer.bookkeeping == []


def _incident(faults: Sequence[Fault], pods: tuple[str, ...] = ()) -> Incident:
    return Incident(
        id="job-1", job_uid="uid-job", kind="vcjob", namespace="ns", name="job", generation="0",
        phase=Phase.ACTING, first_fault_at=T0, steps=((Phase.ACTING, T0),),
        faults=tuple(describe_fault(f) for f in faults), fault_count=len(faults), action="restart-job", pods=pods,
    )  # fmt: skip


def test_resumed_intent() -> None:
    job = _job(fault_retry_times=3)
    pods = [replace(factories.pod(f"job-{i}", node=f"n{i}"), rank=i) for i in range(3)]
    failed = ObjectRef("Pod", "ns", "job-2", "uid-2")
    business = replace(factories.fault(kind=FaultKind.BUSINESS, level=FaultLevel.RESTART_BUSINESS, node="n2",
                                       chips=(), pod=failed))  # fmt: skip
    sub = replace(factories.fault(node="n1", level=FaultLevel.SUB_HEALTH))
    ledger = RetryLedger(business_retries_used=1)
    # a fault naming its pod; another fault's pods are the job's pods on its node
    intent = resumed_intent(job, _incident([business, factories.fault(node="n0")]), pods, ledger)
    assert intent.job_id == "ns/job-uid-job"
    assert intent.remain_times == 2
    assert intent.tasks == (
        TaskReason("pod-failed", "job-2", "n2", "2"),
        TaskReason("CardUnhealthy", "job-0", "n0", "0"),
    )
    # a pod-level restart's stopped pods are the hit ones (their replacements may be unbound: the fault's node)
    unbound = [replace(p, node="") for p in pods]
    intent = resumed_intent(job, _incident([sub], pods=("job-1",)), unbound, RetryLedger(business_retries_used=5))
    assert intent.remain_times == 0
    assert intent.tasks == (TaskReason("SubHealthFault", "job-1", "n1", "1"),)
    # a pod gone from the cache: no rank
    assert resumed_intent(job, _incident([factories.fault(node="n1")], pods=("job-9",)), pods, ledger).tasks == (
        TaskReason("CardUnhealthy", "job-9", "n1", ""),
    )
    assert resumed_intent(job, _incident([]), pods, ledger).tasks == ()
