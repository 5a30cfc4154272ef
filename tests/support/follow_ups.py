"""The world of the force follow-up tests: one Volcano Job with two pods, restarted once by a RestartJob Command on
a virtual-time loop, the engine's clock on the loop's time (agent.replay.vloop)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter, Scripted

from agent.core.cluster import JobKind, JobRef
from agent.engine.recovery import RecoveryEngine
from agent.replay.vloop import VirtualClock, VirtualLoop, run_virtual
from agent.settings import Settings
from agent.sources.state import ClusterState

COMMAND = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"volcano_restart": "command"}})
"""Settings whose Volcano restart is a RestartJob Command (the force follow-up then deletes the old pods)."""


def two_pod_job(version: str) -> ClusterState:
    """Job ns/job at ``status.version`` `version` ("" when Volcano omits it: a job at 0) and its two pods, created
    under version 0 (``volcano.sh/job-version``), on node n1."""
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node(at=T0)))
    state.apply(change("vcjobs", "ns/job", factories.job(created_at=T0, version=version)))
    link = JobRef(JobKind.VOLCANO, "ns", "job", "", "0")
    for i in range(2):
        made = factories.pod(f"job-{i}", uid=f"uid-pod-{i}", chips=(f"Ascend910-{i}",), rank=i, job=link)
        state.apply(change("pods", f"ns/job-{i}", made))
    return state


def restart_once(make: Callable[[], tuple[FakeWriter, Scripted]], state: ClusterState) -> tuple[list[str], list[float]]:
    """A chip fault on `state`'s job handled to the end on a virtual-time loop, with the writer and its scripted
    deletions `make` builds on that loop. Returns the decisions' actions and the loop seconds from the decision to
    each deletion, in order (``[]``: none)."""

    async def main() -> tuple[list[str], list[float]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualLoop)
        writer, deletions = make()
        engine = RecoveryEngine(COMMAND, state, writer, clock=VirtualClock(loop, T0))
        sent_at = loop.time()
        decisions = await engine.handle_fault(factories.fault(at=T0), T0)
        await engine.idle()
        return [d.action.value for d in decisions], [t - sent_at for t in deletions.called_at]

    result: tuple[list[str], list[float]] = run_virtual(main())
    return result
