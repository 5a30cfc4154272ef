"""Observe mode in the engine: plans that write nothing, a writer port that cannot write, and the recovery events
and histogram sample of a restart someone else made (agent.engine.observing, agent.engine.readonly)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support import factories as f
from support.fakes import FakeWriter, ListSink

from agent.actions import Outcome, PodRef
from agent.core.clock import FixedClock
from agent.core.cluster import JobKind, JobRef
from agent.core.faults import FaultKind, FaultLevel, ObjectRef
from agent.core.incidents import RESUBMITTED_FROM_ANNOTATION
from agent.core.policy import Action
from agent.core.resetconfig import ResetConfigUpdate
from agent.core.resubmission import Leftover, PendingResubmission
from agent.engine.plan import Observe, Plan
from agent.engine.ports import ClusterWriterPort
from agent.engine.readonly import READS, ReadOnlyWriter, WriteRefused, refused_by_result
from agent.engine.recovery import RecoveryEngine
from agent.kube.watch import ChangeType
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


class Metrics:
    """Records the recovery samples (agent.engine.ports.Metrics)."""

    def __init__(self) -> None:
        self.recoveries: list[tuple[str, str, str, str, float, str]] = []

    def decision(self, seconds: float) -> None: ...
    def fault_stage(self, stage: str, seconds: float) -> None: ...
    def action(self, action: str, result: str) -> None: ...
    def incidents_open(self, n: int, held: int = 0) -> None: ...
    def budget_exhausted(self, job_kind: str) -> None: ...
    def recovery_failed(self, job_kind: str, reason: str) -> None: ...
    def breaker_open(self, is_open: bool) -> None: ...
    def input_rejected(self, source: str, reason: str) -> None: ...
    def time_to_first_step(self, job_kind: str, seconds: float) -> None: ...
    def lost_training(self, lost_by_cause: Mapping[str, float], work_lost_steps: int | None) -> None: ...
    def training_time(self, wall_s: float, productive_s: float) -> None: ...
    def grace_wait(self, wait: str, ended: str, seconds: float) -> None: ...

    def recovery(
        self, job_kind: str, fault_kind: str, action: str, outcome: str, seconds: float, acted_by: str = "agent"
    ) -> None:
        self.recoveries.append((job_kind, fault_kind, action, outcome, seconds, acted_by))


def _settings(mode: str = "observe", **policy: Any) -> Settings:
    return Settings.model_validate({"kafka": {"enabled": False}, "policy": {"mode": mode, **policy}})


def _state(*, terminating: bool = False) -> ClusterState:
    state = ClusterState()
    for n in ("n1", "n2", "n3", "n4"):
        state.apply(f.change("nodes", n, f.node(n)))
    state.apply(f.change("vcjobs", "ns/job", f.job()))
    for i, node in enumerate(("n1", "n2")):
        pod = f.pod(f"job-{i}", node=node, rank=i, deletion_timestamp=T0 if terminating and i == 0 else None)
        state.apply(f.change("pods", f"ns/job-{i}", pod))
    return state


def _engine(
    settings: Settings, state: ClusterState | None = None
) -> tuple[RecoveryEngine, FakeWriter, ListSink, Metrics]:
    writer, sink, metrics = FakeWriter(), ListSink(), Metrics()
    port: ClusterWriterPort = writer
    engine = RecoveryEngine(settings, state or _state(), port, events=sink, metrics=metrics, clock=FixedClock(T0))
    return engine, writer, sink, metrics


def _data(sink: ListSink, fragment: str) -> list[dict[str, Any]]:
    return [ev.as_json(e)["data"] for e in sink.events if fragment in ev.as_json(e)["type"]]


def test_observe_mode_plans_an_observation_and_no_incident() -> None:
    engine, _, _, _ = _engine(_settings())
    fault = f.fault(at=T0)
    [plan] = engine.deciding.plan_fault(fault, T0)
    job = engine.state.job(JobKind.VOLCANO, "ns", "job")
    assert job is not None
    assert plan.decision is not None
    assert plan.decision.action is Action.RESTART_JOB  # what the agent would have done
    assert plan == Plan(steps=(Observe(fault, job, plan.decision, T0),), decision=plan.decision)
    assert engine.store.open_incidents() == []


async def test_a_fault_the_policy_would_not_restart_for_is_only_published() -> None:
    engine, _, sink, _ = _engine(_settings())
    await engine.handle_fault(f.fault(level=FaultLevel.SUB_HEALTH, at=T0), T0)
    [detected] = _data(sink, "fault.detected")
    assert detected["incident_id"] is None
    assert engine.observing.open == {}


async def test_no_path_writes_in_observe_mode() -> None:
    """Chip, node (quarantine taint), stuck-pod (force deletion) and breaker-tripping faults, then ticks: the
    writer port's fake sees no write at all, though the same faults make the agent write in act mode."""
    wrote: dict[str, list[str]] = {}
    for mode in ("act", "observe"):
        settings = _settings(mode, breaker_min_faulty_nodes=1, breaker_node_share=0.01)
        engine, writer, _, _ = _engine(settings, _state(terminating=True))
        stuck = f.fault(kind=FaultKind.DISRUPTION, level=FaultLevel.RESTART_BUSINESS, node="n1", chips=(), at=T0,
                        pod=ObjectRef("Pod", "ns", "job-0", "uid-job-0"), reason="StuckTerminating")  # fmt: skip
        for fault in (f.fault(at=T0), f.fault(kind=FaultKind.NODE, node="n2", chips=(), at=T0), stuck):
            await engine.handle_fault(fault, T0)
        for s in range(1, 8):
            await engine.tick(T0 + timedelta(seconds=s))
        await engine.idle()
        wrote[mode] = writer.methods()
    assert wrote["observe"] == []
    assert {"delete_pod", "taint_node", "write_breaker"} <= set(wrote["act"])  # the breaker holds the restarts


async def test_an_observed_volcano_restart_publishes_its_recovery_and_records_its_time() -> None:
    engine, writer, sink, metrics = _engine(_settings())
    state = engine.state
    await engine.handle_fault(f.fault(at=T0), T0)
    [detected] = _data(sink, "fault.detected")
    [obs] = engine.observing.open.values()
    assert detected["incident_id"] == obs.id

    # Volcano's PodEvicted -> RestartJob: the job restarts (version + 1), its old pods go
    state.apply(f.change("vcjobs", "ns/job", f.job(phase="Restarting", version="1")))
    for i in range(2):
        state.apply(f.change("pods", f"ns/job-{i}", None, f.pod(f"job-{i}"), type=ChangeType.DELETED))
    await engine.tick(T0 + timedelta(seconds=5))
    [started] = _data(sink, "recovery.started")
    assert (started["acted_by"], started["action"], started["incident_id"]) == ("observed", "restart-job", obs.id)
    assert "status.version 0 -> 1" in started["reason"]
    assert started["dry_run"] is False

    # the new pods run on other nodes: recovered, 30 s after the fault's own time
    state.apply(f.change("vcjobs", "ns/job", f.job(version="1")))
    for i, node in enumerate(("n3", "n4")):
        state.apply(f.change("pods", f"ns/job-{i}", f.pod(f"job-{i}", uid=f"new-{i}", node=node, rank=i)))
    await engine.tick(T0 + timedelta(seconds=30))
    [succeeded] = _data(sink, "recovery.succeeded")
    assert (succeeded["acted_by"], succeeded["incident_id"]) == ("observed", obs.id)
    assert succeeded["durations"]["total_s"] == 30.0
    assert succeeded["durations"]["reschedule_s"] == 25.0
    assert metrics.recoveries == [("vcjob", "chip", "restart-job", "recovered", 30.0, "observed")]
    assert engine.observing.open == {}
    assert writer.calls == []
    for e in sink.events:  # every event is valid against its schema, acted_by included
        assert ev.event_errors(ev.as_json(e)) == []


async def test_a_second_fault_joins_the_open_observation() -> None:
    engine, _, sink, _ = _engine(_settings())
    await engine.handle_fault(f.fault(at=T0), T0)
    later = T0 + timedelta(seconds=1)
    await engine.handle_fault(f.fault(level=FaultLevel.SUB_HEALTH, codes=("80E01802",), at=later), later)
    ids = {d["incident_id"] for d in _data(sink, "fault.detected")}
    assert len(ids) == 1
    assert len(engine.observing.open) == 1


async def test_an_observed_restart_the_job_never_recovers_from_fails_with_acted_by_observed() -> None:
    engine, _, sink, metrics = _engine(_settings(recovery_deadline_s=60))
    await engine.handle_fault(f.fault(at=T0), T0)
    engine.state.apply(f.change("vcjobs", "ns/job", f.job(phase="Restarting", version="1")))
    await engine.tick(T0 + timedelta(seconds=5))
    await engine.tick(T0 + timedelta(seconds=61))
    [failed] = _data(sink, "recovery.failed")
    assert (failed["acted_by"], failed["reason"]) == ("observed", "timeout")
    assert metrics.recoveries == [("vcjob", "chip", "restart-job", "failed", 61.0, "observed")]


async def test_act_mode_events_say_the_agent_acted() -> None:
    engine, _, sink, _ = _engine(_settings("act"))
    await engine.handle_fault(f.fault(at=T0), T0)
    await engine.idle()
    [started] = _data(sink, "recovery.started")
    assert started["acted_by"] == "agent"


# ---------------------------------------------------------------- the read-only writer port


def _port_members() -> set[str]:
    members = set()
    for cls in ClusterWriterPort.__mro__:
        if cls in (object,) or cls.__name__ in ("Protocol", "Generic"):
            continue
        members |= {n for n in vars(cls) if not n.startswith("_")}
    return members


def test_every_port_member_is_a_known_read_or_refused() -> None:
    """A write another change adds to the port must be refused here too: this fails until it is."""
    members = _port_members()
    assert members >= READS
    writes = members - READS
    assert writes, "the port has writes"
    missing = [m for m in writes if m not in vars(ReadOnlyWriter) and not refused_by_result(m)]
    assert missing == []


_PENDING = PendingResubmission(
    JobKind.VOLCANO, "ns", "job", "uid-job", "i", 1,
    {"metadata": {"name": "job", "namespace": "ns", "annotations": {RESUBMITTED_FROM_ANNOTATION: "uid-job"}}},
)  # fmt: skip


def _args(name: str) -> tuple[list[Any], dict[str, Any]]:
    job = JobRef(JobKind.VOLCANO, "ns", "job", "uid-job")
    pod = PodRef("ns", "job-0", "uid-job-0")
    settings = _settings()
    table: dict[str, tuple[list[Any], dict[str, Any]]] = {
        "restart_command": ([job], {"incident": "i", "reason": "r", "message": "m"}),
        "reset_rings_config": (["ns", "job"], {"incident": "i"}),
        "delete_pod": ([pod], {"incident": "i", "grace_seconds": 0}),
        "delete_pods": ([[pod]], {"incident": "i", "grace_seconds": 0}),
        "claim_record": ([job, {}], {"resource_version": "1", "incident": "i"}),
        "write_record": ([job, {}], {"incident": "i"}),
        "delete_record": (["uid-job"], {"incident": "i"}),
        "resubmit_job": ([job], {"incident": "i", "count": 1}),
        "annotate_node": (["n1", {}], {}),
        "annotate_pod": ([pod, {"huawei.com/pod-status": "Unhealthy-CardUnhealthy"}], {"incident": "i"}),
        "taint_node": (["n1"], {"key": "k", "value": "v"}),
        "untaint_node": (["n1"], {"key": "k"}),
        "write_breaker": ([settings, {"state": "open"}], {}),
        "update_configmap_keys": (["volcano-system", "vcjob-fault-npu-cm", lambda d: {"k": "v"}], {"incident": "i"}),
        "update_reset_config": ([ResetConfigUpdate("ns", "job", "grace-exit-on")], {"incident": "i"}),
        "finish_resubmission": ([_PENDING], {}),
        "forget_resubmission": (["uid-job"], {"incident": "i"}),
    }
    return table[name]


@pytest.mark.parametrize("name", sorted(_port_members() - READS))
async def test_each_write_is_refused_without_reaching_the_inner_writer(name: str) -> None:
    inner = FakeWriter()
    ro = ReadOnlyWriter(inner)
    args, kwargs = _args(name)
    result = await getattr(ro, name)(*args, **kwargs)
    assert inner.calls == []
    assert sum(ro.refused.values()) == 1
    if name == "write_breaker":
        assert result is False
    else:
        if name == "finish_resubmission":
            leftover, result, _ = result
            assert leftover is Leftover.OLD_EXISTS  # nothing is created: the record stays for a real leader
        assert result.outcome is Outcome.DRY_RUN
        assert "observe mode" in result.detail


async def test_reads_pass_through_and_an_unknown_write_raises() -> None:
    inner = FakeWriter()
    inner.breaker = {"state": "closed"}
    ro = ReadOnlyWriter(inner)
    assert ro.dry_run is True
    assert await ro.read_breaker(_settings()) == {"state": "closed"}
    assert await ro.job_version(JobRef(JobKind.VOLCANO, "ns", "job")) == "0"
    inner.write_reset_config = lambda *a, **k: None  # type: ignore[attr-defined]  # a write the port may gain
    with pytest.raises(WriteRefused, match="write_reset_config"):
        await ro.write_reset_config("ns", "job")  # type: ignore[attr-defined]
    assert ro.refused == {"write_reset_config": 1}


def test_the_refusal_test_covers_every_write() -> None:
    for name in _port_members() - READS:
        params = inspect.signature(getattr(ClusterWriterPort, name)).parameters
        assert "self" in params
        _args(name)  # KeyError: a new write without arguments in _args


async def test_a_job_deleted_during_an_observed_restart_is_abandoned() -> None:
    engine, _, sink, metrics = _engine(_settings())
    await engine.handle_fault(f.fault(at=T0), T0)
    engine.state.apply(f.change("vcjobs", "ns/job", f.job(phase="Restarting", version="1")))
    await engine.tick(T0 + timedelta(seconds=5))
    engine.state.apply(f.change("vcjobs", "ns/job", None, f.job(), type=ChangeType.DELETED))
    await engine.tick(T0 + timedelta(seconds=9))
    [failed] = _data(sink, "recovery.failed")
    assert (failed["acted_by"], failed["reason"]) == ("observed", "job-gone")
    assert metrics.recoveries == [("vcjob", "chip", "restart-job", "abandoned", 9.0, "observed")]


async def test_nobody_restarting_the_job_ends_the_observation_without_an_event() -> None:
    engine, _, sink, metrics = _engine(_settings(recovery_deadline_s=60))
    await engine.handle_fault(f.fault(at=T0), T0)
    await engine.tick(T0 + timedelta(seconds=61))
    assert _data(sink, "recovery") == []
    assert metrics.recoveries == []
    assert engine.observing.open == {}
