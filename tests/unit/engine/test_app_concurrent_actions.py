"""With `spawn` (the running agent), the apiserver writes of one job's restart run in their own task: faults of
other jobs are decided and acted on meanwhile, a later fault of the same job joins its incident, and a failure
in one job's task is logged and counted without ending the agent's task group."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client as k8s
from support import factories
from support.factories import change
from support.fakes import PerJobWriter

from agent.core.faults import Fault, FaultCleared, FaultKind, ObjectRef
from agent.core.incidents import Phase
from agent.engine.recovery import RecoveryEngine
from agent.engine.tasks import Tasks
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


class CountingMetrics:
    def __init__(self) -> None:
        self.actions: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None

    def action(self, action: str, result: str) -> None:
        self.actions.append((action, result))


def _state(jobs: list[str]) -> ClusterState:
    """One node per job (n-<job>), each job with two Running pods holding chips 0 and 1."""
    state = ClusterState()
    for name in jobs:
        node = factories.node(f"n-{name}", uid=f"uid-n-{name}", at=NOW)
        state.apply(change("nodes", node.name, node))
        job = factories.job(name, created_at=NOW)
        state.apply(change("vcjobs", f"ns/{name}", job))
        for i in range(2):
            pod = factories.pod(
                f"{name}-{i}",
                uid=f"uid-{name}-{i}",
                node=f"n-{name}",
                job=name,
                chips=(f"Ascend910-{i}",),
                rank=i,
                created_at=NOW,
            )
            state.apply(change("pods", f"ns/{name}-{i}", pod))
    return state


def _fault(job: str, chip: int = 0) -> Fault:
    return factories.fault(node=f"n-{job}", chips=(f"Ascend910-{chip}",), at=NOW)


async def test_a_slow_restart_does_not_hold_up_another_jobs_restart() -> None:
    settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50}})
    api = k8s.ApiClient()
    writer = PerJobWriter(api)
    writer.gates["slow"] = asyncio.Event()
    async with asyncio.TaskGroup() as tg:
        spawn = Tasks(tg.create_task)

        engine = RecoveryEngine(settings, _state(["slow", "fast"]), writer, tasks=spawn, clock=SystemClock())
        await asyncio.wait_for(engine.handle_fault(_fault("slow"), NOW), 2)  # returns with the Command pending
        await asyncio.wait_for(writer.entered.setdefault("slow", asyncio.Event()).wait(), 2)
        assert engine.inflight.executing() == {"uid-slow"}

        await asyncio.wait_for(engine.handle_fault(_fault("fast"), NOW), 2)
        for _ in range(50):
            if "fast" in writer.sent:
                break
            await asyncio.sleep(0.01)
        assert writer.sent == ["fast"]  # sent while the slow job's Command still waits

        # another fault of the slow job joins its open incident: no second restart
        assert await engine.handle_fault(_fault("slow", chip=1), NOW) == []
        incident = engine.store.incident("uid-slow")
        assert incident is not None
        assert incident.phase is Phase.ACTING
        assert incident.fault_count == 2

        writer.gates["slow"].set()
    await api.close()
    assert writer.sent == ["fast", "slow"]
    assert engine.inflight.executing() == set()
    for uid in ("uid-slow", "uid-fast"):
        done = engine.store.incident(uid)
        assert done is not None
        assert done.phase is Phase.RESTARTING
    # the pods came from the watch cache: no list round trip before the Command
    assert writer.listed == 0


async def test_a_failing_restart_task_is_logged_and_counted_and_the_agent_goes_on() -> None:
    settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50}})
    api = k8s.ApiClient()
    writer = PerJobWriter(api)
    writer.broken.add("bad")
    metrics = CountingMetrics()
    async with asyncio.TaskGroup() as tg:
        spawn = Tasks(tg.create_task)

        engine = RecoveryEngine(
            settings, _state(["bad", "good"]), writer, tasks=spawn, metrics=metrics, clock=SystemClock()
        )  # type: ignore[arg-type]
        await engine.handle_fault(_fault("bad"), NOW)
        await engine.handle_fault(_fault("good"), NOW)
    await api.close()
    # the claim goes out with the Command (one round trip): the bad job's Command was sent although its claim
    # raised; the incident says so (restarting, not lost), the failure of its annotation write is counted
    assert sorted(writer.sent) == ["bad", "good"]
    assert ("restart-job", "failed") in metrics.actions
    assert engine.inflight.executing() == set()
    bad = engine.store.incident("uid-bad")
    assert bad is not None
    assert bad.phase is Phase.RESTARTING


async def test_quarantine_taint_does_not_hold_up_the_restart_and_the_latest_state_wins() -> None:
    """A node fault quarantines the node (taint) and restarts its jobs. The taint write runs in the node's own
    task: the job's Command goes out while the node write still waits; the fault clearing meanwhile makes that
    task sync once more, so the node ends untainted."""
    settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50}})
    api = k8s.ApiClient()
    writer = PerJobWriter(api)
    writer.taint_gate.clear()
    node_fault = factories.fault(
        kind=FaultKind.NODE,
        node="n-job",
        chips=(),
        codes=("00000011",),
        at=NOW,
        source=ObjectRef("ConfigMap", "mindx-dl", "mindx-dl-nodeinfo-n-job"),
        reason="NodeUnhealthy",
    )
    async with asyncio.TaskGroup() as tg:
        spawn = Tasks(tg.create_task)

        engine = RecoveryEngine(settings, _state(["job"]), writer, tasks=spawn, clock=SystemClock())
        await asyncio.wait_for(engine.handle_fault(node_fault, NOW), 2)
        for _ in range(50):
            if writer.sent:
                break
            await asyncio.sleep(0.01)
        assert writer.sent == ["job"]  # restarted while the taint write still waits
        assert writer.taint_calls == [("n-job", "SeparateNPU")]
        assert engine.quarantining.syncing == {"n-job"}

        await engine.handle_cleared(FaultCleared(node_fault, NOW, node_fault.source))
        assert writer.taint_calls == [("n-job", "SeparateNPU")]  # no second write while the first runs
        writer.taint_gate.set()
    await api.close()
    assert writer.taint_calls == [("n-job", "SeparateNPU"), ("n-job", None)]
    assert engine.quarantining.tainted == {}
    assert engine.quarantining.syncing == set()
