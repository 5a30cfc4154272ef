"""MindCluster parity for process-level recovery, the master rule, pending escalation and the AscendJob backoff
limit (issue 15 items 1, 4, 5).

Facts from Ascend/mind-cluster ``component/ascend-for-volcano``: ``internal/rescheduling/job.go`` (``isMasterRank``,
``isMasterFault``, ``isNormalTaskCanBeDelete``, ``isDealFaultByExternal``, ``isFaultJobCanRestarted``,
``IsJobSingleRescheduling``), ``reschedule.go`` (``singlePodReschedulingUpgrade``), ``common/util/type.go`` and
``constants.go``; ``component/ascend-operator/pkg/controllers/v1/ascendjob_controller.go``
(``setFaultRetryTimesToBackoffLimits``) and ``job.go`` (the ``backoffLimit > 0`` check).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter, ListSink, PodListingWriter

from agent.core.clock import FixedClock
from agent.core.cluster import UNLIMITED_BACKOFF, FaultScheduling, JobKind, JobRecord, PodRecord
from agent.core.correlate import JobHit
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef
from agent.core.incidents import (
    Incident,
    IncidentStore,
    Phase,
    TransitionError,
    check_incident,
    decode_incident,
    encode_incident,
    recovered,
)
from agent.core.policy import (
    UNLIMITED_RESTARTS,
    Action,
    Decision,
    RetryLedger,
    decide,
    escalation_decision,
    is_master_pod,
    pending_escalation,
    restart_budget,
)
from agent.engine.plan import Escalate
from agent.engine.recovery import RecoveryEngine
from agent.settings import PolicySettings, Settings
from agent.sinks import events as ev
from agent.sources.jobs import JobConverter, ascend_backoff_from_label
from agent.sources.pods import PodConverter
from agent.sources.state import ClusterState

F = FaultScheduling
NOW = T0 + timedelta(seconds=2)


def _job(**kw: Any) -> JobRecord:
    return replace(factories.job(labels=factories.FORCE, fault_scheduling=F.FORCE), **kw)


def _pod(name: str, rank: int | None, replica_type: str = "", **kw: Any) -> PodRecord:
    return replace(factories.pod(name, rank=rank), replica_type=replica_type, **kw)


def _chip(node: str = "n1", chip: str = "Ascend910-1") -> Fault:
    return replace(factories.fault(at=T0), node=node, chips=(chip,))


def _decide(fault: Fault, job: JobRecord, pods: tuple[PodRecord, ...], ledger: RetryLedger | None = None) -> Decision:
    hit = JobHit(job=job, pods=pods, actionable=True)
    return decide(fault, hit, ledger or RetryLedger(), PolicySettings.model_validate({}), NOW)


# ---------------------------------------------------------------- the master rule


@pytest.mark.parametrize(
    ("rank", "replica_type", "master"),
    [
        pytest.param(0, "", True, id="rank0-no-replica-type"),
        pytest.param(0, "master", True, id="rank0-master"),
        pytest.param(0, "Master", True, id="rank0-other-spelling-is-not-worker"),
        pytest.param(0, "chief", True, id="rank0-chief"),
        pytest.param(0, "worker", False, id="rank0-worker-is-not-master"),
        pytest.param(1, "master", False, id="rank1-master-label"),
        pytest.param(None, "", False, id="no-rank"),
    ],
)
def test_is_master_pod(rank: int | None, replica_type: str, master: bool) -> None:
    assert is_master_pod(_pod("p", rank, replica_type)) is master


@pytest.mark.parametrize(
    ("pods", "expected", "names"),
    [
        pytest.param((("p1", 1, ""),), Action.RESTART_PODS, ("p1",), id="worker-rank1"),
        pytest.param((("p0", 0, "worker"),), Action.RESTART_PODS, ("p0",), id="rank0-worker-stays-pod-level"),
        pytest.param((("p0", 0, ""),), Action.RESTART_JOB, (), id="rank0-unlabelled-escalates"),
        pytest.param((("p0", 0, "master"), ("p1", 1, "worker")), Action.RESTART_JOB, (), id="master-among-two"),
    ],
)
@pytest.mark.parametrize("label", ["pod_rescheduling", "process_recover"])
def test_pod_level_restart_escalates_only_for_the_master(
    label: str, pods: tuple[tuple[str, int, str], ...], expected: Action, names: tuple[str, ...]
) -> None:
    hit = tuple(_pod(n, r, t) for n, r, t in pods)
    d = _decide(_chip(), _job(**{label: True}), hit)
    assert (d.action, d.pods) == (expected, names)
    assert d.counts_restart


# ---------------------------------------------------------------- process-level recovery


def test_process_recover_job_deletes_only_the_faulty_pods() -> None:
    d = _decide(_chip(), _job(process_recover=True), (_pod("job-1", 1),))
    assert (d.action, d.pods) == (Action.RESTART_PODS, ("job-1",))
    assert "process-recover-enable" in d.reason


def test_process_recover_business_failure_deletes_only_the_failed_pod() -> None:
    failed = _pod("job-1", 1)
    fault = replace(factories.fault(at=T0), kind=FaultKind.BUSINESS, pod=ObjectRef("Pod", "ns", "job-1", failed.uid))
    d = _decide(fault, _job(process_recover=True, fault_retry_times=2), (failed,))
    assert (d.action, d.pods, d.consumes_business_budget) == (Action.RESTART_PODS, ("job-1",), True)


@pytest.mark.parametrize(
    ("kind", "level", "retry_times", "ledger"),
    [
        pytest.param(FaultKind.CHIP, FaultLevel.SEPARATE, None, RetryLedger(), id="chip"),
        pytest.param(FaultKind.NODE, FaultLevel.SEPARATE, None, RetryLedger(), id="node"),
        pytest.param(FaultKind.BUSINESS, FaultLevel.SEPARATE, 2, RetryLedger(), id="business"),
        pytest.param(
            FaultKind.BUSINESS,
            FaultLevel.SEPARATE,
            1,
            RetryLedger(business_retries_used=1),
            id="business-budget-used-up-is-no-abort",
        ),
        pytest.param(FaultKind.CHIP, FaultLevel.SEPARATE, None, RetryLedger(restarts_used=3), id="no-restart-left"),
    ],
)
@pytest.mark.parametrize("value", ["recover", "retry", "", "anything"])
def test_process_recover_strategy_annotation_hands_off_and_deletes_nothing(
    kind: FaultKind, level: FaultLevel, retry_times: int | None, ledger: RetryLedger, value: str
) -> None:
    """Presence alone counts (``isDealFaultByExternal`` checks the key only)."""
    pod = _pod("job-1", 1)
    fault = replace(factories.fault(at=T0), kind=kind, level=level)
    if kind is FaultKind.BUSINESS:
        fault = replace(fault, pod=ObjectRef("Pod", "ns", "job-1", pod.uid), chips=())
    job = _job(process_recover=True, process_recover_strategy=value, fault_retry_times=retry_times)
    d = _decide(fault, job, (pod,), ledger)
    assert (d.action, d.pods, d.counts_restart, d.consumes_business_budget) == (Action.HAND_OFF, (), False, False)
    assert not d.restarts
    assert "ProcessRecoverStrategy" in d.reason


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        pytest.param(FaultLevel.NOT_HANDLE, Action.NONE, id="not-handle-stays-none"),
        pytest.param(FaultLevel.PRE_SEPARATE, Action.NONE, id="pre-separate-stays-none"),
    ],
)
def test_process_recover_strategy_changes_nothing_that_needs_no_action(level: FaultLevel, expected: Action) -> None:
    job = _job(process_recover_strategy="recover")
    assert _decide(replace(_chip(), level=level), job, (_pod("job-1", 1),)).action is expected


# ---------------------------------------------------------------- AscendJob backoff limit


@pytest.mark.parametrize(
    ("label", "limit"),
    [
        pytest.param(None, UNLIMITED_BACKOFF, id="absent-unlimited"),
        pytest.param("", UNLIMITED_BACKOFF, id="empty-unlimited"),
        pytest.param("5", 5, id="label-value"),
        pytest.param("+5", 5, id="atoi-sign"),
        pytest.param("007", 7, id="atoi-leading-zeros"),
        pytest.param("0", UNLIMITED_BACKOFF, id="zero-is-unlimited-to-the-operator"),
        pytest.param("-3", UNLIMITED_BACKOFF, id="negative-unlimited"),
        pytest.param("abc", UNLIMITED_BACKOFF, id="not-a-number-unlimited"),
        pytest.param(" 5", UNLIMITED_BACKOFF, id="atoi-refuses-spaces"),
        pytest.param("5_0", UNLIMITED_BACKOFF, id="no-python-underscores"),
        pytest.param("4294967296", UNLIMITED_BACKOFF, id="beyond-int32"),
    ],
)
def test_ascend_backoff_from_label(label: str | None, limit: int) -> None:
    assert ascend_backoff_from_label(label) == limit


def _raw_ascend(labels: dict[str, str], run_policy: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "mindxdl.gitee.com/v1",
        "kind": "AscendJob",
        "metadata": {
            "name": "ac", "namespace": "ns", "uid": "uid-ac", "resourceVersion": "1", "labels": labels,
            "annotations": {"ProcessRecoverStrategy": "recover"},
        },
        "spec": {"runPolicy": run_policy},
        "status": {},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("labels", "run_policy", "max_retry"),
    [
        pytest.param({}, {}, UNLIMITED_BACKOFF, id="nothing-set-unlimited"),
        pytest.param({"fault-retry-times": "4"}, {}, 4, id="label-when-unset"),
        pytest.param({"fault-retry-times": "4"}, {"backoffLimit": 2}, 2, id="backoff-limit-wins"),
        pytest.param({"fault-retry-times": "x"}, {}, UNLIMITED_BACKOFF, id="bad-label-unlimited"),
    ],
)
def test_ascendjob_converter_reads_the_operators_backoff_limit(
    labels: dict[str, str], run_policy: dict[str, Any], max_retry: int
) -> None:
    rec = JobConverter(JobKind.ASCEND)(_raw_ascend({"fault-scheduling": "force", **labels}, run_policy))
    assert isinstance(rec, JobRecord)
    assert rec.max_retry == max_retry
    assert rec.process_recover_strategy == "recover"


def test_volcano_default_max_retry_is_unchanged() -> None:
    raw = _raw_ascend({}, {}) | {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "spec": {}}
    rec = JobConverter(JobKind.VOLCANO)(raw)
    assert isinstance(rec, JobRecord)
    assert rec.max_retry == 3


def test_pod_converter_keeps_the_replica_type_label() -> None:
    raw = {
        "metadata": {
            "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "1",
            "labels": {"training.kubeflow.org/replica-type": "worker"}, "annotations": {"hccl/rankIndex": "0"},
        },
        "spec": {"nodeName": "n1"},
        "status": {"phase": "Running"},
    }  # fmt: skip
    rec = PodConverter()(raw)
    assert isinstance(rec, PodRecord)
    assert (rec.rank, rec.replica_type, is_master_pod(rec)) == (0, "worker", False)


@pytest.mark.parametrize(
    ("max_retry", "used", "left"),
    [
        pytest.param(UNLIMITED_BACKOFF, 0, UNLIMITED_RESTARTS, id="unlimited"),
        pytest.param(UNLIMITED_BACKOFF, 500, UNLIMITED_RESTARTS, id="unlimited-after-many"),
        pytest.param(0, 7, UNLIMITED_RESTARTS, id="explicit-zero-unlimited"),
        pytest.param(3, 1, 2, id="limited"),
        pytest.param(3, 3, 0, id="limited-used-up"),
    ],
)
def test_ascendjob_restart_budget(max_retry: int, used: int, left: int) -> None:
    job = _job(kind=JobKind.ASCEND, max_retry=max_retry)
    assert restart_budget(job, used) == (used, left)


def test_unlimited_ascendjob_restarts_and_events_show_no_budget() -> None:
    job = _job(kind=JobKind.ASCEND, max_retry=UNLIMITED_BACKOFF)
    d = _decide(_chip(), job, (_pod("job-1", 1),), RetryLedger(restarts_used=1000))
    assert d.action is Action.RESTART_JOB
    assert d.budget_left is None
    assert "no restart limit" in d.reason


def _ascend_state(max_retry: int) -> ClusterState:
    state = ClusterState()
    for i in range(12):
        job = replace(
            factories.job(f"j{i}", kind=JobKind.ASCEND, labels=factories.FORCE, fault_scheduling=F.FORCE),
            max_retry=max_retry,
        )
        state.apply(change("acjobs", f"ns/j{i}", job))
        pod = replace(factories.pod(f"j{i}-0", job=f"j{i}", job_kind=JobKind.ASCEND, node=f"n{i}"), rank=1)
        state.apply(change("pods", f"ns/j{i}-0", pod))
    return state


def test_unlimited_backoff_still_goes_through_the_rate_limit_and_the_breaker() -> None:
    settings = Settings.model_validate(
        {"kafka": {"enabled": False}, "policy": {"restart_burst": 3, "restart_rate_per_min": 1,
                                                  "breaker_min_faulty_nodes": 50}}
    )  # fmt: skip
    engine = RecoveryEngine(settings, _ascend_state(UNLIMITED_BACKOFF), FakeWriter(), clock=FixedClock(NOW))
    kinds = []
    for i in range(6):
        [plan] = engine.deciding.plan_fault(_chip(f"n{i}", "Ascend910-0"), NOW)
        assert plan.decision is not None
        assert plan.decision.action is Action.RESTART_JOB
        kinds.append(type(plan.steps[0]).__name__)
    assert kinds == ["Recover"] * 3 + ["Defer"] * 3  # the bucket holds the storm back
    engine.breaker.restore({"state": "open", "tripped_at": str(NOW.timestamp()), "reason": "test"})
    [plan] = engine.deciding.plan_fault(_chip("n7", "Ascend910-0"), NOW)
    assert [type(s).__name__ for s in plan.steps] == ["Hold"]  # held by the open breaker, nothing restarted


# ---------------------------------------------------------------- pending escalation


RESTART = T0


@pytest.mark.parametrize(
    ("after_s", "replacement", "escalates"),
    [
        pytest.param(11.9, None, False, id="before-12s"),
        pytest.param(12.0, None, True, id="no-replacement-yet"),
        pytest.param(12.0, {"node": ""}, True, id="replacement-unbound"),
        pytest.param(12.0, {"node": "n2", "phase": "Pending", "ready": False}, False, id="bound-counts-as-placed"),
        pytest.param(12.0, {"node": "n2"}, False, id="replacement-running"),
        pytest.param(12.0, {"created_at": RESTART - timedelta(seconds=5)}, True, id="old-pod-still-there"),
        pytest.param(12.0, {"deletion_timestamp": RESTART, "node": "n2"}, True, id="terminating-is-no-replacement"),
    ],
)
def test_pending_escalation(after_s: float, replacement: dict[str, Any] | None, escalates: bool) -> None:
    job = _job(pod_rescheduling=True)
    pods = [factories.pod("job-0", created_at=T0 - timedelta(minutes=5))]
    if replacement is not None:
        fields = {"created_at": RESTART + timedelta(seconds=1), "phase": "Pending", "ready": False, **replacement}
        pods.append(replace(factories.pod("job-1", uid="uid-new"), **fields))
    why = pending_escalation(job, ("job-1",), pods, RESTART, RESTART + timedelta(seconds=after_s), 12.0)
    assert (why is not None) is escalates
    if why is not None:
        assert "job-1" in why
        assert "pending_escalation_s=12" in why


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(_job(pod_rescheduling=True, process_recover=True), id="process-recover-never-escalates"),
        pytest.param(_job(process_recover=True), id="process-recover-only"),
        pytest.param(_job(), id="not-pod-rescheduling"),
    ],
)
def test_pending_escalation_is_only_for_pod_rescheduling(job: JobRecord) -> None:
    assert pending_escalation(job, ("job-1",), [], RESTART, RESTART + timedelta(minutes=5), 12.0) is None


@pytest.mark.parametrize(
    ("kind", "max_retry", "used", "action", "left"),
    [
        pytest.param(JobKind.VOLCANO, 3, 1, Action.RESTART_JOB, 0, id="volcano-last-restart"),
        pytest.param(JobKind.VOLCANO, 3, 2, Action.NONE, 0, id="volcano-no-restart-left"),
        pytest.param(
            JobKind.ASCEND, UNLIMITED_BACKOFF, 9, Action.RESTART_JOB, UNLIMITED_RESTARTS - 1, id="ascend-unlimited"
        ),
    ],
)
def test_escalation_decision_stays_within_the_budget(
    kind: JobKind, max_retry: int, used: int, action: Action, left: int
) -> None:
    job = _job(kind=kind, max_retry=max_retry, pod_rescheduling=True, fault_scheduling=F.GRACE)
    d = escalation_decision(job, RetryLedger(restarts_used=used), "pods pending")
    assert (d.action, d.restarts_left) == (action, left)
    if action is Action.RESTART_JOB:
        assert (d.mode, d.counts_restart, d.pods) == (F.GRACE, True, ())


# ---------------------------------------------------------------- incidents: recovery and the one escalation


def _restarting(action: Action, pods: tuple[str, ...] = ()) -> tuple[IncidentStore, JobRecord, Incident]:
    store = IncidentStore()
    job = _job(pod_rescheduling=True)
    decision = Decision(action, "r", mode=F.FORCE, pods=pods, counts_restart=action is not Action.HAND_OFF)
    store.open(job, _chip(), decision, T0)
    return store, job, store.restarting(job.uid, T0 + timedelta(seconds=1), pod_names=pods)


OLD = T0 - timedelta(minutes=5)
NEW = T0 + timedelta(seconds=3)


@pytest.mark.parametrize(
    ("action", "pods", "faults_on_job", "expected"),
    [
        pytest.param(Action.RESTART_PODS, {"job-0": OLD, "job-1": NEW}, False, True, id="pod-level-survivor-old"),
        pytest.param(Action.RESTART_PODS, {"job-0": OLD, "job-1": OLD}, False, False, id="pod-level-not-replaced"),
        pytest.param(Action.RESTART_PODS, {"job-0": OLD}, False, False, id="pod-level-replacement-missing"),
        pytest.param(Action.RESTART_JOB, {"job-0": OLD, "job-1": NEW}, False, False, id="whole-job-needs-all-new"),
        pytest.param(Action.RESTART_JOB, {"job-0": NEW, "job-1": NEW}, False, True, id="whole-job-all-new"),
        pytest.param(Action.HAND_OFF, {"job-0": OLD, "job-1": OLD}, True, False, id="hand-off-fault-still-on-job"),
        pytest.param(Action.HAND_OFF, {"job-0": OLD, "job-1": OLD}, False, True, id="hand-off-fault-gone"),
    ],
)
def test_recovered(action: Action, pods: dict[str, datetime], faults_on_job: bool, expected: bool) -> None:
    _, job, incident = _restarting(action, ("job-1",) if action is Action.RESTART_PODS else ())
    records = [factories.pod(name, created_at=at) for name, at in pods.items()]
    assert recovered(incident, job, records, faults_on_job=faults_on_job) is expected


def test_hand_off_needs_the_pods_running_and_ready() -> None:
    _, job, incident = _restarting(Action.HAND_OFF)
    pods = [factories.pod("job-0"), factories.pod("job-1", ready=False)]
    assert not recovered(incident, job, pods, faults_on_job=False)


def test_escalation_happens_once_and_round_trips() -> None:
    store, job, incident = _restarting(Action.RESTART_PODS, ("job-1",))
    assert incident.pods == ("job-1",)
    whole = escalation_decision(job, store.ledger(job.uid), "pending")
    escalated = store.escalate(job.uid, T0 + timedelta(seconds=13), whole)
    assert (escalated.phase, escalated.action, escalated.escalated) == (Phase.ACTING, "restart-job", True)
    assert store.ledger(job.uid).restarts_used == 2  # the pod-level restart and the escalation
    again = store.restarting(job.uid, T0 + timedelta(seconds=14))
    assert again.pods == ()  # the whole-job restart recovers on all pods being new
    with pytest.raises(TransitionError, match="already escalated"):
        store.escalate(job.uid, T0 + timedelta(seconds=15), whole)
    decoded = decode_incident(encode_incident(again))
    assert decoded == again
    assert check_incident(decoded, job, store.ledger(job.uid), T0 + timedelta(seconds=20)) is None


def test_a_second_acting_step_without_the_escalation_mark_is_not_adopted() -> None:
    store, job, _incident = _restarting(Action.RESTART_PODS, ("job-1",))
    store.escalate(job.uid, T0 + timedelta(seconds=13), escalation_decision(job, store.ledger(job.uid), "p"))
    forged = replace(store.restarting(job.uid, T0 + timedelta(seconds=14)), escalated=False)
    problem = check_incident(forged, job, store.ledger(job.uid), T0 + timedelta(seconds=20))
    assert problem is not None
    assert "without an escalation" in problem


def test_old_annotations_without_pods_still_decode() -> None:
    _, _, incident = _restarting(Action.RESTART_JOB)
    text = encode_incident(incident)
    assert '"pods"' not in text
    assert '"escalated"' not in text
    assert decode_incident(text) == incident


# ---------------------------------------------------------------- the engine: plans and what acting does


def _engine_state(job: JobRecord) -> ClusterState:
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node("n1")))
    state.apply(change("vcjobs", "ns/job", job))
    for i in range(2):
        pod = replace(factories.pod(f"job-{i}", chips=(f"Ascend910-{i}",), created_at=OLD), rank=i)
        state.apply(change("pods", f"ns/job-{i}", pod))
    return state


def _settings(**policy: Any) -> Settings:
    return Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50, **policy}})


async def test_hand_off_deletes_nothing_publishes_and_times_the_recovery() -> None:
    job = _job(process_recover=True, process_recover_strategy="recover")
    state = _engine_state(job)
    writer, sink, clock = PodListingWriter(state), ListSink(), FixedClock(NOW)
    active = [_chip()]
    engine = RecoveryEngine(_settings(), state, writer, events=sink, clock=clock, active_faults=lambda: list(active))
    [decision] = await engine.handle_fault(active[0], NOW)
    await engine.idle()
    assert decision.action is Action.HAND_OFF
    assert [m for m in writer.methods() if m.startswith(("delete", "restart"))] == []
    incident = engine.store.incident(job.uid)
    assert incident is not None
    assert incident.phase is Phase.RESTARTING
    assert [e["data"]["action"] for e in sink.of(ev.RECOVERY_STARTED)] == ["hand-off"]
    assert len(sink.of(ev.FAULT_DETECTED)) == 1
    clock.advance(5)
    await engine.tick(clock.now())
    assert engine.store.incident(job.uid).phase is Phase.RESTARTING  # type: ignore[union-attr]  # fault still on
    active.clear()  # the chip recovered in place
    clock.advance(2)
    await engine.tick(clock.now())
    closed = engine.store.incident(job.uid)
    assert closed is not None
    assert closed.phase is Phase.RECOVERED
    assert closed.recovery_seconds == pytest.approx(9.0)  # from the fault's own time (T0) to T0 + 9 s
    [succeeded] = sink.of(ev.RECOVERY_SUCCEEDED)
    assert succeeded["data"]["action"] == "hand-off"


async def test_process_recover_deletes_only_the_faulty_pod_and_recovers_on_its_replacement() -> None:
    job = _job(process_recover=True)
    state = _engine_state(job)
    writer, clock = PodListingWriter(state), FixedClock(NOW)
    engine = RecoveryEngine(_settings(), state, writer, clock=clock, active_faults=lambda: [])
    await engine.handle_fault(_chip(chip="Ascend910-1"), NOW)
    await engine.idle()
    assert ("delete_pods", "job-1") in writer.calls
    assert writer.commands == 0
    incident = engine.store.incident(job.uid)
    assert incident is not None
    assert incident.pods == ("job-1",)
    # the controller recreates job-1; job-0 keeps running, untouched
    clock.advance(3)
    state.apply(change("pods", "ns/job-1", replace(factories.pod("job-1", uid="uid-new"), created_at=clock.now())))
    await engine.tick(clock.now())
    assert engine.store.incident(job.uid).phase is Phase.RECOVERED  # type: ignore[union-attr]


async def test_pending_replacement_escalates_to_one_whole_job_restart() -> None:
    job = _job(pod_rescheduling=True)
    state = _engine_state(job)
    writer, sink, clock = PodListingWriter(state), ListSink(), FixedClock(NOW)
    engine = RecoveryEngine(_settings(), state, writer, events=sink, clock=clock, active_faults=lambda: [])
    await engine.handle_fault(_chip(chip="Ascend910-1"), NOW)
    await engine.idle()
    assert writer.commands == 0
    # the replacement is created but never bound
    state.apply(change("pods", "ns/job-1", replace(factories.pod("job-1", uid="uid-new", node="", phase="Pending",
                                                                  ready=False), created_at=clock.now())))  # fmt: skip
    clock.advance(11)
    await engine.tick(clock.now())
    await engine.idle()
    assert writer.commands == 0
    incident = engine.store.incident(job.uid)
    assert incident is not None
    plan = engine.deciding.plan_escalation(job, incident, clock.now() + timedelta(seconds=2))
    assert plan is not None
    assert isinstance(plan.steps[0], Escalate)
    clock.advance(2)
    for _ in range(3):
        await engine.tick(clock.now())
        await engine.idle()
        clock.advance(20)
    assert writer.commands == 1  # one RestartJob Command for the whole job, never a second
    incident = engine.store.incident(job.uid)
    assert incident is not None
    assert incident.escalated
    assert incident.action == "restart-job"
    attempts = [e["data"]["attempt"] for e in sink.of(ev.RECOVERY_STARTED)]
    assert attempts == [1, 2]
    assert engine.store.ledger(job.uid).restarts_used == 2
