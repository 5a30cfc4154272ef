"""The engine's checkpoint-aware graceful waits (issue 38) on the production path with a fake writer port and a
fixed clock: a ``subHealthyStrategy: graceExit`` job in grace mode that reports its progress ends both waits (the
graceExit wait for its processes, then grace mode's force after grace-over-time) at the checkpoint its heartbeat
reports after the fault, and ``recovery.succeeded`` says so; a job that did not opt in waits as before."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter, ListSink

from agent.actions import ActionResult, PodRef
from agent.core.checkpoint_wait import CheckpointReading
from agent.core.clock import FixedClock
from agent.core.cluster import JobRef
from agent.core.faults import FaultLevel
from agent.core.incidents import Phase
from agent.core.progress import PROGRESS_LABEL
from agent.core.resetconfig import ResetConfigUpdate
from agent.engine.ports import NoMetrics
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState

GRACE_EXIT = {"fault-scheduling": "grace", "subHealthyStrategy": "graceExit"}
WAIT_S = 20.0  # graceExit's wait; grace-over-time is 2 s (its least value)


class WaitMetrics(NoMetrics):
    def __init__(self) -> None:
        self.actions: list[tuple[str, str]] = []
        self.waits: list[tuple[str, str, float]] = []

    def action(self, action: str, result: str) -> None:
        self.actions.append((action, result))

    def grace_wait(self, wait: str, ended: str, seconds: float) -> None:
        self.waits.append((wait, ended, seconds))


class SavingWriter(FakeWriter):
    """The fake port; the job's training saves a checkpoint of its last step when told ``GracefulExit`` 1 (its
    processes keep running: the pods stay Ready), which its heartbeat reports."""

    def __init__(self, state: ClusterState, reading: list[CheckpointReading | None], saved_at: FixedClock) -> None:
        super().__init__()
        self.state = state
        self.reading = reading
        self.clock = saved_at

    async def list_job_pods(self, job: JobRef) -> list[PodRef]:
        pods = self.state.pods_of_job(job.kind, job.namespace, job.name)
        return [PodRef(p.namespace, p.name, p.uid) for p in pods if p.deletion_timestamp is None]

    async def update_reset_config(self, update: ResetConfigUpdate, *, incident: str) -> ActionResult:
        result = await super().update_reset_config(update, incident=incident)
        if update.change == "grace-exit-on":
            # the Lease write that follows, seen by the agent a second after it acted
            self.reading[0] = CheckpointReading(100, 100, self.clock.now() + timedelta(seconds=1))
        return result


def _engine(labels: dict[str, str]) -> tuple[RecoveryEngine, SavingWriter, WaitMetrics, ListSink]:
    state = ClusterState()
    for n in ("n1", "n2"):
        state.apply(change("nodes", n, factories.node(n)))
    job = factories.job(labels=labels, sub_healthy_strategy="graceExit")
    state.apply(change("vcjobs", "ns/job", job))
    for i, n in enumerate(("n1", "n2")):
        state.apply(change("pods", f"ns/job-{i}", factories.pod(f"job-{i}", node=n, rank=i)))
    clock = FixedClock(T0 + timedelta(seconds=10))
    # before the fault: step 100, its last checkpoint at 90, seen when the agent began following the Lease
    reading: list[CheckpointReading | None] = [CheckpointReading(100, 90, None)]
    writer, metrics, sink = SavingWriter(state, reading, clock), WaitMetrics(), ListSink()
    settings = Settings.model_validate(
        {
            "kafka": {"enabled": False},
            "policy": {"breaker_min_faulty_nodes": 50, "grace_exit_wait_s": WAIT_S, "grace_over_time_s": 2},
        }
    )
    engine = RecoveryEngine(settings, state, writer, clock=clock, metrics=metrics, events=sink)
    engine.ctx.checkpoint_of = lambda namespace, name: reading[0] if (namespace, name) == ("ns", "job") else None
    return engine, writer, metrics, sink


async def _recover(engine: RecoveryEngine) -> dict[str, object]:
    clock = engine.ctx.clock
    assert isinstance(clock, FixedClock)
    later = clock.advance(5)
    for i in range(2):
        pod = factories.pod(f"job-{i}", uid=f"uid-job-{i}-new", node="n1", rank=i, created_at=later)
        engine.state.apply(change("pods", f"ns/job-{i}", pod))
    await engine.tick(later)
    await engine.idle()
    incident = engine.store.incident("uid-job")
    assert incident is not None
    assert incident.phase is Phase.RECOVERED
    sink = engine.ctx.events
    assert isinstance(sink, ListSink)
    (succeeded,) = [e for e in sink.events if e.get_type() == ev.RECOVERY_SUCCEEDED]
    data: dict[str, object] = ev.as_json(succeeded)["data"]
    assert ev.event_errors(ev.as_json(succeeded)) == []
    return data


async def test_a_job_that_saves_ends_both_graceful_waits_at_its_checkpoint() -> None:
    engine, writer, metrics, _ = _engine({**GRACE_EXIT, PROGRESS_LABEL: "lease"})
    loop = asyncio.get_running_loop()
    began = loop.time()
    await engine.handle_fault(factories.fault(node="n1", level=FaultLevel.SUB_HEALTH), T0)
    await engine.idle()
    assert loop.time() - began < 5  # neither the 20 s graceExit wait nor the 2 s grace-over-time
    assert ("grace-exit-wait", "checkpoint") in metrics.actions
    assert [(w, e) for w, e, _ in metrics.waits] == [("grace-exit", "checkpoint"), ("grace-over-time", "checkpoint")]
    assert "restart_command" in writer.methods()
    data = await _recover(engine)
    assert [(w["wait"], w["ended"], w["checkpoint_step"]) for w in data["grace_waits"]] == [  # type: ignore[attr-defined]
        ("grace-exit", "checkpoint", 100),
        ("grace-over-time", "checkpoint", 100),
    ]


async def test_a_job_that_did_not_opt_in_waits_as_before() -> None:
    engine, _, metrics, _ = _engine(GRACE_EXIT)  # the same heartbeat, but no fault-agent.io/progress label
    engine.ctx.settings.policy.grace_exit_wait_s = 0.5
    loop = asyncio.get_running_loop()
    began = loop.time()
    await engine.handle_fault(factories.fault(node="n1", level=FaultLevel.SUB_HEALTH), T0)
    await engine.idle()
    assert loop.time() - began >= 2.5  # the whole graceExit wait and the whole grace-over-time
    assert ("grace-exit-wait", "timeout") in metrics.actions
    # the fake port finds the old pods gone at grace-over-time: they exited within it
    assert [(w, e) for w, e, _ in metrics.waits] == [("grace-exit", "timeout"), ("grace-over-time", "exited")]
    data = await _recover(engine)
    assert [(w["wait"], w["ended"], w["checkpoint_step"]) for w in data["grace_waits"]] == [  # type: ignore[attr-defined]
        ("grace-exit", "timeout", None),
        ("grace-over-time", "exited", None),
    ]


async def test_a_checkpoint_older_than_the_last_step_does_not_end_the_wait() -> None:
    engine, writer, metrics, _ = _engine({**GRACE_EXIT, PROGRESS_LABEL: "lease"})
    engine.ctx.settings.policy.grace_exit_wait_s = 0.5

    async def stale(update: ResetConfigUpdate, *, incident: str) -> ActionResult:
        result = await FakeWriter.update_reset_config(writer, update, incident=incident)
        if update.change == "grace-exit-on":  # a periodic checkpoint of step 95 finished after the fault
            writer.reading[0] = CheckpointReading(100, 95, writer.clock.now() + timedelta(seconds=1))
        return result

    writer.update_reset_config = stale  # type: ignore[method-assign]
    await engine.handle_fault(factories.fault(node="n1", level=FaultLevel.SUB_HEALTH), T0)
    await engine.idle()
    assert [(w, e) for w, e, _ in metrics.waits] == [("grace-exit", "timeout"), ("grace-over-time", "exited")]
