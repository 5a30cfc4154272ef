"""Deciding returns a plan (plain data); acting carries it out through the writer port. The plans are asserted on
without any API client; the production path (the act task, the restart, the force follow-up) runs against a fake
writer port and a fixed clock."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from support import factories
from support.factories import change
from support.fakes import FakeWriter, ListSink

from agent.actions import ActionResult, Outcome, PodRef
from agent.core.bookkeeping import BookkeepingIntent, TaskReason
from agent.core.clock import FixedClock
from agent.core.cluster import FaultScheduling, JobKind
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef
from agent.core.policy import Action
from agent.engine.plan import Defer, FaultDetected, ForceDeletePod, Hold, Plan, Recover
from agent.engine.ports import ClusterWriterPort, NoMetrics
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import Change, ChangeType
from agent.settings import Settings
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50}})
JOB_REF = ObjectRef("vcjob", "ns", "job", "uid-job")


def _state(*, terminating: bool = False) -> ClusterState:
    state = factories.one_job_state(NOW)
    if terminating:
        for key, pod in list(state.pods.items()):
            state.apply(change("pods", key, replace(pod, deletion_timestamp=NOW)))
    return state


def _chip_fault(node: str = "n1") -> Fault:
    return factories.fault(node=node, at=NOW)


def _engine(writer: FakeWriter, **kw: Any) -> RecoveryEngine:
    port: ClusterWriterPort = writer  # the fake implements the port (mypy checks the signatures)
    return RecoveryEngine(SETTINGS, kw.pop("state", None) or _state(), port, clock=FixedClock(NOW), **kw)


def test_a_chip_fault_on_an_opted_in_job_plans_its_restart() -> None:
    engine = _engine(FakeWriter())
    fault = _chip_fault()
    [plan] = engine.deciding.plan_fault(fault, NOW)
    assert plan.decision is not None
    assert plan.decision.action is Action.RESTART_JOB
    job = engine.state.job(JobKind.VOLCANO, "ns", "job")
    assert job is not None
    # no event of its own: the Recover step publishes the fault's event naming the incident it opens
    # and once the restart is sent, MindCluster's bookkeeping for it: no fault-retry-times label, so Times 0
    keep = BookkeepingIntent("ns/job-uid-job", "uid-job", 0, (TaskReason("CardUnhealthy", "job-0", "n1", "0"),))
    assert plan == Plan(steps=(Recover(fault, job, plan.decision, NOW, keep),), decision=plan.decision)


def test_a_fault_on_a_node_without_jobs_plans_one_node_event() -> None:
    engine = _engine(FakeWriter())
    fault = _chip_fault("n2")
    assert engine.deciding.plan_fault(fault, NOW) == [Plan(events=(FaultDetected(fault),))]


def test_an_open_breaker_plans_a_held_incident_not_a_restart() -> None:
    engine = _engine(FakeWriter())
    engine.breaker.restore({"state": "open", "tripped_at": str(NOW.timestamp()), "reason": "test"})
    fault = _chip_fault()
    [plan] = engine.deciding.plan_fault(fault, NOW)
    assert plan.decision is not None
    assert plan.decision.action is Action.RESTART_JOB
    [hold] = plan.steps
    assert isinstance(hold, Hold)
    assert hold.fault == fault
    assert "turned faulty" in hold.breaker_reason
    assert plan.events == ()  # the Hold step publishes the fault's event naming the incident it opens
    assert "restarts left" not in hold.reason
    assert hold.reason.startswith("held by the open circuit breaker")


def test_the_rate_limit_plans_a_deferral() -> None:
    engine = _engine(FakeWriter())
    while engine.deciding.bucket.try_take(NOW.timestamp()):
        pass
    fault = _chip_fault()
    [plan] = engine.deciding.plan_fault(fault, NOW)
    assert plan.steps == (Defer(fault, "uid-job"),)


async def test_a_fault_joining_an_open_incident_plans_only_its_event() -> None:
    engine = _engine(FakeWriter())
    fault = _chip_fault()
    [first] = engine.deciding.plan_fault(fault, NOW)
    assert isinstance(first.steps[0], Recover)
    await engine.acting.recover(first.steps[0])  # opens the incident at once; its act task runs on
    incident = engine.store.incident("uid-job")
    assert incident is not None
    again = _chip_fault()
    [plan] = engine.deciding.plan_fault(again, NOW)
    assert plan == Plan(events=(FaultDetected(again, JOB_REF, incident.id),))
    await engine.idle()


def test_a_pod_stuck_terminating_plans_its_force_deletion() -> None:
    engine = _engine(FakeWriter(), state=_state(terminating=True))
    pod = ObjectRef("Pod", "ns", "job-0", "uid-pod-0")
    fault = Fault(FaultKind.DISRUPTION, FaultLevel.RESTART_BUSINESS, "", (), (), NOW, NOW, pod, "StuckTerminating",
                  pod=pod)  # fmt: skip
    plans = engine.deciding.plan_fault(fault, NOW)
    assert [s for p in plans for s in p.steps] == [ForceDeletePod(PodRef("ns", "job-0", "uid-pod-0"))]


async def test_the_production_path_claims_restarts_and_follows_up_through_the_port() -> None:
    writer = FakeWriter()
    sink = ListSink()
    engine = _engine(writer, events=sink)
    decisions = await engine.handle_fault(_chip_fault(), NOW)
    assert [d.action for d in decisions] == [Action.RESTART_JOB]
    await engine.idle()  # the act task and the force follow-up it started
    assert writer.calls == [
        ("claim_record", "Job/ns/job"),  # the decisive write first (agent.core.fence)
        ("restart_command", "Job/ns/job"),
        ("reset_rings_config", "job"),  # once the Command was accepted (issue 36, item 8)
        ("write_record", "Job/ns/job"),  # restarting, persisted; the force follow-up found the old pods gone
    ]
    assert sink.types() == ["io.faultagent.fault.detected.v1", "io.faultagent.recovery.started.v1"]
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase.value == "restarting"
    assert engine.inflight.executing() == set()
    assert not engine.tasks.running


class _CountingMetrics(NoMetrics):
    def __init__(self) -> None:
        self.actions: list[tuple[str, str]] = []

    def action(self, action: str, result: str) -> None:
        self.actions.append((action, result))


async def test_the_restart_writes_mindclusters_bookkeeping_keeping_the_other_keys() -> None:
    writer = FakeWriter()
    writer.configmaps[("volcano-system", "vcjob-fault-npu-cm")] = {"fault-node": "kept"}
    writer.configmaps[("mindx-dl", "job-reschedule-reason")] = {
        # a job gone from the cluster: dropped, as MindCluster's SyncJobRecentRescheduleReason does
        "recent-reschedule-records": json.dumps({"ns/gone-uid-0": {"JobID": "ns/gone-uid-0"}}),
        "other": "kept",
    }
    state = _state()
    for source in ("vcjobs", "acjobs"):  # every job listed: the cache knows which jobs are gone
        state.expect(f"{source}@*")
        state.apply(Change(ChangeType.LISTED, source, "", None, None, False, 0.0, f"{source}@*"))
    engine = _engine(writer, events=ListSink(), state=state)
    await engine.handle_fault(_chip_fault(), NOW)
    await engine.idle()
    npu = writer.configmaps[("volcano-system", "vcjob-fault-npu-cm")]
    assert npu["fault-node"] == "kept"
    assert json.loads(npu["remain-retry-times"]) == {"ns/job-uid-job": {"UUID": "uid-job", "Times": 0}}
    reasons = writer.configmaps[("mindx-dl", "job-reschedule-reason")]
    assert reasons["other"] == "kept"
    assert json.loads(reasons["recent-reschedule-records"]) == {
        "ns/job-uid-job": {
            "JobID": "ns/job-uid-job",
            "TotalRescheduleTimes": 1,
            "RescheduleRecords": [
                {
                    "LogFileFormatTime": "I0301 12:00:00",
                    "RescheduleTimeStamp": int(NOW.timestamp()),
                    "ReasonOfTask": [
                        {
                            "RescheduleReason": "CardUnhealthy",
                            "PodName": "job-0",
                            "NodeName": "n1",
                            "NodeRankIndex": "0",
                        }
                    ],
                }
            ],
        }
    }


async def test_jobs_are_dropped_only_when_the_cache_has_listed_every_job() -> None:
    writer = FakeWriter()
    stored = json.dumps({"ns/gone-uid-0": {"UUID": "uid-0", "Times": 1}})
    writer.configmaps[("volcano-system", "vcjob-fault-npu-cm")] = {"remain-retry-times": stored}
    engine = _engine(writer, events=ListSink())  # no watcher listed yet (or a job label selector): keep them
    await engine.handle_fault(_chip_fault(), NOW)
    await engine.idle()
    remain = json.loads(writer.configmaps[("volcano-system", "vcjob-fault-npu-cm")]["remain-retry-times"])
    assert sorted(remain) == ["ns/gone-uid-0", "ns/job-uid-job"]


async def test_a_failed_bookkeeping_write_is_counted_and_never_repeats_the_restart() -> None:
    class Refusing(FakeWriter):
        async def update_configmap_keys(self, namespace: str, name: str, update: Any, **_: Any) -> ActionResult:
            update({})  # the values are computed, the write refused
            return ActionResult("update-configmap", f"ConfigMap/{namespace}/{name}", Outcome.FAILED, "HTTP 403")

    writer, metrics = Refusing(), _CountingMetrics()
    engine = _engine(writer, events=ListSink(), metrics=metrics)
    await engine.handle_fault(_chip_fault(), NOW)
    await engine.idle()
    assert writer.methods().count("restart_command") == 1
    assert ("bookkeeping", "failed") in metrics.actions
    assert metrics.actions.count(("bookkeeping", "failed")) == 2  # one per ConfigMap
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase.value == "restarting"


async def test_a_raising_bookkeeping_write_is_logged_and_counted() -> None:
    class Raising(FakeWriter):
        async def update_configmap_keys(self, namespace: str, name: str, update: Any, **_: Any) -> ActionResult:
            raise RuntimeError("boom")

    writer, metrics = Raising(), _CountingMetrics()
    engine = _engine(writer, events=ListSink(), metrics=metrics)
    await engine.handle_fault(_chip_fault(), NOW)
    await engine.idle()
    assert metrics.actions.count(("bookkeeping", "failed")) == 2
    assert not engine.tasks.running


async def test_dry_run_writes_no_bookkeeping() -> None:
    writer = FakeWriter(dry_run=True)
    engine = _engine(writer, events=ListSink())
    await engine.handle_fault(_chip_fault(), NOW)
    await engine.idle()
    assert writer.configmaps == {}


def test_bookkeeping_off_plans_none() -> None:
    settings = SETTINGS.model_copy(update={"policy": SETTINGS.policy.model_copy(update={"bookkeeping": False})})
    engine = RecoveryEngine(settings, _state(), FakeWriter(), clock=FixedClock(NOW))
    [plan] = engine.deciding.plan_fault(_chip_fault(), NOW)
    assert isinstance(plan.steps[0], Recover)
    assert plan.steps[0].bookkeeping is None


def _sub_health_fault() -> Fault:
    return Fault(
        FaultKind.CHIP, FaultLevel.SUB_HEALTH, "n1", ("Ascend910-1",), ("80C98009",), NOW, NOW,
        ObjectRef("ConfigMap", "kube-system", "mindx-dl-deviceinfo-n1"), "CardUnhealthy",
    )  # fmt: skip


def test_a_sub_health_fault_with_a_hard_fault_on_the_job_takes_the_normal_path() -> None:
    """subHealthyStrategy ignore, fault-scheduling force: alone the sub-health fault leaves the job running; with
    a SeparateNPU fault active on the job it restarts the job in the job's force mode (MindCluster
    setIsSubHealthFault)."""
    hard = _chip_fault()
    alone = _engine(FakeWriter(), active_faults=lambda: [_sub_health_fault()])
    [plan] = alone.deciding.plan_fault(_sub_health_fault(), NOW)
    assert plan.decision is not None
    assert plan.decision.action is Action.NONE
    mixed = _engine(FakeWriter(), active_faults=lambda: [hard, _sub_health_fault()])
    [plan] = mixed.deciding.plan_fault(_sub_health_fault(), NOW)
    assert plan.decision is not None
    assert plan.decision.action is Action.RESTART_JOB
    assert plan.decision.mode is FaultScheduling.FORCE
    assert "the normal path" in plan.decision.reason
    assert isinstance(plan.steps[0], Recover)
    assert plan.steps[0].bookkeeping is not None
    assert plan.steps[0].bookkeeping.tasks == (TaskReason("SubHealthFault", "job-1", "n1", "1"),)
