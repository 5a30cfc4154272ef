"""The world of the force follow-up tests: one Volcano Job with two pods, restarted once by a RestartJob Command on
a virtual-time loop, the engine's clock on the loop's time (agent.replay.vloop)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter, Scripted, script

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


def volcano_takes_it(
    after_s: float, *, on_loop: Callable[[], None] | None = None
) -> Callable[[], tuple[FakeWriter, Scripted]]:
    """A `make` for :func:`restart_once`: Volcano takes the Command `after_s` loop seconds after the decision (every
    read of the job answers no ``status.version`` before, "1" after), the old pods are there until the follow-up
    deletes them. `on_loop`: called on the loop when the writer is made (to schedule the world's other changes)."""

    def make() -> tuple[FakeWriter, Scripted]:
        loop = asyncio.get_running_loop()
        writer = FakeWriter()
        start = loop.time()

        def version(*_: object, **__: object) -> str:
            return "" if loop.time() - start < after_s else "1"

        if on_loop is not None:
            on_loop()
        script(writer, "job_version", does=version)
        script(writer, "pods_remaining", does=list)
        return writer, script(writer, "delete_pods")

    return make


def deleted_once(make: Callable[[], tuple[FakeWriter, Scripted]], state: ClusterState) -> float:
    """:func:`restart_once`, checked to have decided one ``restart-job`` and deleted the old pods once; the loop
    seconds from the decision to that deletion."""
    actions, waits = restart_once(make, state)
    assert actions == ["restart-job"]
    assert len(waits) == 1, f"the old pods were deleted {len(waits)} times"
    return waits[0]
