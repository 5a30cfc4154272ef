"""The engine's reset-config writes, asserted on as the plain intents it hands the writer port.

A ``pod-rescheduling: on`` job restarted by the agent gets MindCluster's pod-level update once its pods are back
(plugin/job.go ``updateResetConfigMap``); a ``subHealthyStrategy: graceExit`` job gets ``GracefulExit`` 1 before
the grace deletion, a wait for its processes to exit (``policy.grace_exit_wait_s``), then 0
(internal/rescheduling/reschedule.go ``updateResetConfigMapWithGraceExit``). No API client, a fixed clock.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter, script

from agent.actions import ActionResult, PodRef
from agent.core.clock import FixedClock
from agent.core.cluster import JobRecord, JobRef
from agent.core.faults import FaultLevel
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    Incident,
    Phase,
    encode_incident,
    encode_ledger,
    make_incident_id,
    recovered,
)
from agent.core.policy import RetryLedger
from agent.core.resetconfig import ResetConfigUpdate
from agent.engine.ports import ClusterWriterPort, NoMetrics
from agent.engine.recovery import RecoveryEngine
from agent.kube.errors import KubeConnectionError
from agent.settings import Settings
from agent.sources.state import ClusterState

POD_LEVEL = {"fault-scheduling": "force", "pod-rescheduling": "on"}
GRACE_EXIT = {"fault-scheduling": "grace", "subHealthyStrategy": "graceExit"}


class CountingMetrics(NoMetrics):
    def __init__(self) -> None:
        self.actions: list[tuple[str, str]] = []

    def action(self, action: str, result: str) -> None:
        self.actions.append((str(action), str(result)))


def _settings(wait_s: float = 1.0) -> Settings:
    return Settings.model_validate(
        {
            "kafka": {"enabled": False},
            "policy": {"breaker_min_faulty_nodes": 50, "grace_exit_wait_s": wait_s, "grace_over_time_s": 2},
        }
    )


def _job(labels: dict[str, str]) -> JobRecord:
    return factories.job(
        labels=labels, pod_rescheduling=labels.get("pod-rescheduling") == "on",
        sub_healthy_strategy=labels.get("subHealthyStrategy", "ignore"),
    )  # fmt: skip


def _state(labels: dict[str, str]) -> ClusterState:
    state = ClusterState()
    for n in ("n1", "n2"):
        state.apply(change("nodes", n, factories.node(n)))
    state.apply(change("vcjobs", "ns/job", _job(labels)))
    for i, n in enumerate(("n1", "n2")):
        state.apply(change("pods", f"ns/job-{i}", factories.pod(f"job-{i}", node=n, rank=i)))
    return state


class ListingWriter(FakeWriter):
    """The fake port, listing a job's pods from the state cache as the apiserver would (a pod-level restart
    lists before it deletes)."""

    state: ClusterState | None = None

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        assert self.state is not None
        pods = self.state.pods_of_job(job.kind, job.namespace, job.name)
        return [PodRef(p.namespace, p.name, p.uid) for p in pods if p.deletion_timestamp is None]


def _engine(state: ClusterState, writer: FakeWriter, metrics: CountingMetrics, wait_s: float = 1.0) -> RecoveryEngine:
    port: ClusterWriterPort = writer
    if isinstance(writer, ListingWriter):
        writer.state = state
    # the pods were created at T0; the agent acts 10 s later (the surviving pod is older than the restart)
    return RecoveryEngine(_settings(wait_s), state, port, clock=FixedClock(T0 + timedelta(seconds=10)), metrics=metrics)


async def _pods_back(engine: RecoveryEngine, names: tuple[str, ...]) -> None:
    """The deleted pods come back (new UIDs, created after the restart, Running and Ready); one tick."""
    clock = engine.ctx.clock
    assert isinstance(clock, FixedClock)
    later = clock.advance(5)
    for i, name in enumerate(("job-0", "job-1")):
        if name in names:
            pod = factories.pod(name, uid=f"uid-{name}-new", node="n1", rank=i, created_at=later)
            engine.state.apply(change("pods", f"ns/{name}", pod))
    await engine.tick(later)
    await engine.idle()


async def test_a_pod_level_restart_rewrites_reset_config_once_the_pods_are_back() -> None:
    writer, metrics = ListingWriter(), CountingMetrics()
    engine = _engine(_state(POD_LEVEL), writer, metrics)
    await engine.handle_fault(factories.fault(node="n2", chips=("Ascend910-0",)), T0)  # rank 1: pod-level
    await engine.idle()
    assert writer.reset_updates == []  # nothing before the pods are back
    await _pods_back(engine, ("job-1",))
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RECOVERED
    assert writer.reset_updates == [
        ResetConfigUpdate(
            "ns",
            "job",
            "pod-reschedule",
            pod_level=True,
            now_s=int((T0 + timedelta(seconds=15)).timestamp()),
            since_s=int((T0 + timedelta(seconds=10)).timestamp()),  # the restart's time
        )
    ]
    assert ("reset-config-pod-reschedule", "done") in metrics.actions
    await engine.tick(T0 + timedelta(seconds=16))  # closed: never written twice
    assert len(writer.reset_updates) == 1


async def test_a_whole_job_restart_of_a_pod_rescheduling_job_resets_retry_time() -> None:
    writer, metrics = ListingWriter(), CountingMetrics()
    engine = _engine(_state(POD_LEVEL), writer, metrics)
    await engine.handle_fault(factories.fault(node="n1"), T0)  # rank 0 hit: the whole job
    await engine.idle()
    await _pods_back(engine, ("job-0", "job-1"))
    [update] = writer.reset_updates
    assert (update.change, update.pod_level) == ("pod-reschedule", False)


async def test_jobs_without_pod_rescheduling_or_with_process_recovery_get_no_pod_level_write() -> None:
    for labels in ({"fault-scheduling": "force"}, {**POD_LEVEL, "process-recover-enable": "on"}):
        writer, metrics = ListingWriter(), CountingMetrics()
        engine = _engine(_state(labels), writer, metrics)
        await engine.handle_fault(factories.fault(node="n1"), T0)
        await engine.idle()
        await _pods_back(engine, ("job-0", "job-1"))
        assert writer.reset_updates == [], labels


def _restarting(job: JobRecord) -> Incident:
    return Incident(
        "i", job.uid, "vcjob", job.namespace, job.name, "0", Phase.RESTARTING, T0, (), action="restart-pods",
        pods=("job-1",), restart_at=T0 + timedelta(seconds=2),
    )  # fmt: skip


def test_survivors_of_a_pod_level_restart_need_not_be_ready_when_reset_config_restarts_them() -> None:
    """Regression: a pod-level incident waited for every pod to be Ready; a graceful exit stops the survivor's
    processes too, and only the pod-level reset-config update that recovery triggers restarts them, so such an
    incident never recovered. Only the replacements must be Ready when the job gets that update."""
    restart = T0 + timedelta(seconds=2)
    idle = factories.pod("job-0", created_at=T0, ready=False)
    replacement = factories.pod("job-1", uid="uid-job-1-new", created_at=restart)
    starting = factories.pod("job-1", uid="uid-job-1-new", created_at=restart, ready=False)
    old = factories.pod("job-1", created_at=T0)
    job = _job(POD_LEVEL)
    incident = _restarting(job)
    assert recovered(incident, job, [idle, replacement], faults_on_job=False)
    assert not recovered(incident, job, [idle, starting], faults_on_job=False)  # the replacement must be
    assert not recovered(incident, job, [idle, old], faults_on_job=False)  # not replaced yet
    assert not recovered(incident, job, [idle], faults_on_job=False)
    # without the update (process-recover-enable: ClusterD restarts the processes) every pod is waited for
    other = _job({**POD_LEVEL, "process-recover-enable": "on"})
    assert not recovered(_restarting(other), other, [idle, replacement], faults_on_job=False)


class ExitingWriter(ListingWriter):
    """Stands in for the training processes too: when GracefulExit 1 is written, the job's pods turn Failed
    (their processes saved a checkpoint and exited)."""

    def __init__(self, state: ClusterState, *, exits: bool) -> None:
        super().__init__()
        self.state = state
        self.exits = exits

    async def update_reset_config(self, update: ResetConfigUpdate, *, incident: str) -> ActionResult:
        result = await super().update_reset_config(update, incident=incident)
        if self.exits and update.change == "grace-exit-on":
            for i in range(2):
                pod = factories.pod(f"job-{i}", node=("n1", "n2")[i], rank=i, phase="Failed", ready=False)
                self.state.apply(change("pods", f"ns/job-{i}", pod))
        return result


def _sub_health() -> Any:
    return factories.fault(node="n1", level=FaultLevel.SUB_HEALTH)


async def test_grace_exit_sets_the_flag_waits_for_the_exit_then_deletes_and_resets_it() -> None:
    state = _state(GRACE_EXIT)
    writer, metrics = ExitingWriter(state, exits=True), CountingMetrics()
    engine = _engine(state, writer, metrics, wait_s=30)
    await engine.handle_fault(_sub_health(), T0)
    await engine.idle()
    assert [u.change for u in writer.reset_updates] == ["grace-exit-on", "grace-exit-off"]
    methods = writer.methods()
    on, off = (i for i, m in enumerate(methods) if m == "update_reset_config")
    assert methods.index("claim_record") < on < methods.index("restart_command") < off
    assert ("grace-exit-wait", "exited") in metrics.actions


async def test_grace_exit_deletes_anyway_when_the_processes_do_not_exit_in_time() -> None:
    state = _state(GRACE_EXIT)
    writer, metrics = ExitingWriter(state, exits=False), CountingMetrics()
    engine = _engine(state, writer, metrics, wait_s=0.5)
    await engine.handle_fault(_sub_health(), T0)
    await engine.idle()
    assert [u.change for u in writer.reset_updates] == ["grace-exit-on", "grace-exit-off"]
    assert "restart_command" in writer.methods()
    assert ("grace-exit-wait", "timeout") in metrics.actions


async def test_a_missing_reset_config_is_counted_and_the_restart_still_happens() -> None:
    writer, metrics = ListingWriter(), CountingMetrics()
    writer.reset_result = 404
    engine = _engine(_state(GRACE_EXIT), writer, metrics, wait_s=30)
    await engine.handle_fault(_sub_health(), T0)
    await engine.idle()
    assert ("reset-config-grace-exit-on", "missing") in metrics.actions
    assert ("grace-exit-wait", "skipped") in metrics.actions  # nobody was told: no point waiting
    assert "restart_command" in writer.methods()


async def test_a_pod_level_grace_exit_recovers_and_tells_the_stopped_survivor_to_restart() -> None:
    """pod-rescheduling and graceExit: GracefulExit stops every pod's processes, only the hit pod is replaced;
    the survivor (not Ready now) must not keep the incident open, or the pod-level update that restarts its
    processes would never come."""
    labels = {**GRACE_EXIT, "pod-rescheduling": "on"}
    state = _state(labels)
    writer, metrics = ExitingWriter(state, exits=True), CountingMetrics()
    engine = _engine(state, writer, metrics, wait_s=30)
    await engine.handle_fault(factories.fault(node="n2", level=FaultLevel.SUB_HEALTH), T0)  # job-1 only
    await engine.idle()
    clock = engine.ctx.clock
    assert isinstance(clock, FixedClock)
    later = clock.advance(5)
    engine.state.apply(change("pods", "ns/job-0", factories.pod("job-0", node="n1", rank=0, ready=False)))
    engine.state.apply(
        change("pods", "ns/job-1", factories.pod("job-1", uid="uid-job-1-new", rank=1, created_at=later))
    )
    await engine.tick(later)
    await engine.idle()
    assert [(u.change, u.pod_level) for u in writer.reset_updates] == [
        ("grace-exit-on", False),
        ("grace-exit-off", False),
        ("pod-reschedule", True),
    ]


async def test_a_chip_fault_on_a_grace_exit_job_is_no_graceful_exit() -> None:
    writer, metrics = ListingWriter(), CountingMetrics()
    engine = _engine(_state(GRACE_EXIT), writer, metrics)
    await engine.handle_fault(factories.fault(node="n1"), T0)  # SeparateNPU: the normal grace path
    await engine.idle()
    assert writer.reset_updates == []
    assert "restart_command" in writer.methods()


async def test_a_reset_config_write_that_raises_is_counted_and_the_restart_still_happens() -> None:
    writer, metrics = FakeWriter(), CountingMetrics()
    unreachable = KubeConnectionError("connection error: TimeoutError('apiserver unreachable')")  # as the edge raises
    script(writer, "update_reset_config", raises=unreachable)
    engine = _engine(_state(GRACE_EXIT), writer, metrics, wait_s=30)
    await engine.handle_fault(_sub_health(), T0)
    await engine.idle()
    assert ("reset-config-grace-exit-on", "failed") in metrics.actions
    assert ("grace-exit-wait", "skipped") in metrics.actions
    assert "restart_command" in writer.methods()


def _left_acting(version: str, fault: Any) -> ClusterState:
    """A graceExit job a previous leader left ``acting`` (its incident read back from the job's annotation, opened
    at generation "0" by `fault`); `version` is the job's generation now ("1": that leader's restart went out)."""
    incident = Incident(
        id=make_incident_id("job", "uid-job", "0", 1), job_uid="uid-job", kind="vcjob", namespace="ns", name="job",
        generation="0", phase=Phase.DETECTED, first_fault_at=T0, steps=((Phase.DETECTED, T0),),
    ).join(fault)  # fmt: skip
    incident = incident.move(Phase.ACTING, T0, action="restart-job", mode="grace", reason="sub-health")
    state = _state(GRACE_EXIT)
    job = factories.job(
        labels=GRACE_EXIT, sub_healthy_strategy="graceExit", version=version,
        annotations=(
            (INCIDENT_ANNOTATION, encode_incident(incident)),
            (LEDGER_ANNOTATION, encode_ledger(RetryLedger(restarts_used=1, incidents=1))),
        ),
    )  # fmt: skip
    state.apply(change("vcjobs", "ns/job", job))
    return state


def _new_leader(state: ClusterState, writer: FakeWriter, metrics: CountingMetrics, fault: Any) -> RecoveryEngine:
    return RecoveryEngine(
        _settings(30), state, writer, clock=FixedClock(T0 + timedelta(seconds=10)), metrics=metrics,
        active_faults=lambda: [fault],
    )  # fmt: skip


async def test_a_new_leader_resuming_a_grace_exit_restart_waits_for_the_exit_again_and_sets_the_flag_back() -> None:
    """Regression: a leader that died in the graceExit wait left GracefulExit 1; the new leader sent the restart
    without the wait and never set it back, so TaskD's manager (which kills the workers whenever it reads 1) would
    stop the restarted job's training at once."""
    fault = _sub_health()
    state = _left_acting("0", fault)
    writer, metrics = ExitingWriter(state, exits=True), CountingMetrics()
    engine = _new_leader(state, writer, metrics, fault)
    await engine.tick(T0 + timedelta(seconds=10))
    await engine.idle()
    assert [u.change for u in writer.reset_updates] == ["grace-exit-on", "grace-exit-off"]
    methods = writer.methods()
    on, off = (i for i, m in enumerate(methods) if m == "update_reset_config")
    assert on < methods.index("restart_command") < off
    assert methods.count("restart_command") == 1
    assert ("grace-exit-wait", "exited") in metrics.actions


async def test_a_new_leader_finding_the_grace_exit_restart_sent_sets_the_flag_back_without_restarting() -> None:
    """Regression: the previous leader died after the restart went out but before GracefulExit went back to 0."""
    fault = _sub_health()
    state = _left_acting("1", fault)
    writer, metrics = ExitingWriter(state, exits=False), CountingMetrics()
    engine = _new_leader(state, writer, metrics, fault)
    await engine.tick(T0 + timedelta(seconds=10))
    await engine.idle()
    assert [u.change for u in writer.reset_updates] == ["grace-exit-off"]
    assert "restart_command" not in writer.methods()
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RESTARTING


async def test_a_new_leader_resuming_a_chip_fault_restart_of_a_grace_exit_job_does_not_wait_but_clears_the_flag() -> (
    None
):
    """A hard fault's restart never waits for a graceful exit; the flag is still made 0 (a no-op when it is)."""
    fault = factories.fault(node="n1")
    state = _left_acting("0", fault)
    writer, metrics = ExitingWriter(state, exits=True), CountingMetrics()
    engine = _new_leader(state, writer, metrics, fault)
    await engine.tick(T0 + timedelta(seconds=10))
    await engine.idle()
    assert [u.change for u in writer.reset_updates] == ["grace-exit-off"]
    assert writer.methods().count("restart_command") == 1
    assert writer.methods().index("restart_command") < writer.methods().index("update_reset_config")
