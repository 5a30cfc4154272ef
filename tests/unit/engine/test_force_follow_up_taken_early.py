"""The force follow-up after a RestartJob Command whose job version the GET sent with the restart did not prove
(the job changed on the apiserver since the watch cache saw it): when Volcano already took the Command before the
follow-up's first read, that read answers the new version; the old pods, created under the version before it, must
go at once, not after the follow-up's whole 10 s wait for a change that already happened (the defect: the version
read was taken as the one before the Command). Runs on a virtual-time loop, the engine's clock on its time."""

from __future__ import annotations

import asyncio

from support import factories
from support.factories import T0, change
from support.fakes import FakeWriter, Scripted, script

from agent.core.cluster import JobKind, JobRef
from agent.engine.recovery import RecoveryEngine
from agent.replay.vloop import VirtualClock, VirtualLoop, run_virtual
from agent.settings import Settings
from agent.sources.state import ClusterState

SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"volcano_restart": "command"}})


def _taken_before_read() -> tuple[FakeWriter, Scripted]:
    """Volcano took the Command at once: every read of the job answers status.version 1 (it was 0 when the
    restart was decided), its resourceVersion moved on (so the GET sent with the restart proves nothing), and the
    old pods are still there until the follow-up deletes them. Returns the writer and its deletions' calls."""
    writer = FakeWriter()
    script(writer, "job_meta", answer=("2", {}))  # the cache holds resourceVersion "1"
    script(writer, "job_version", answer="1")
    script(writer, "pods_remaining", does=list)
    return writer, script(writer, "delete_pods")


def _state() -> ClusterState:
    """Job ns/job at status.version 0 and its two pods, created under version 0 (volcano.sh/job-version)."""
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node(at=T0)))
    state.apply(change("vcjobs", "ns/job", factories.job(created_at=T0, version="0")))
    link = JobRef(JobKind.VOLCANO, "ns", "job", "", "0")
    for i in range(2):
        made = factories.pod(f"job-{i}", uid=f"uid-pod-{i}", chips=(f"Ascend910-{i}",), rank=i, job=link)
        state.apply(change("pods", f"ns/job-{i}", made))
    return state


def test_old_pods_go_at_once_when_volcano_took_the_command_before_the_first_read() -> None:
    async def main() -> tuple[list[str], float, list[float]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualLoop)
        writer, deletions = _taken_before_read()
        engine = RecoveryEngine(SETTINGS, _state(), writer, clock=VirtualClock(loop, T0))
        sent_at = loop.time()
        decisions = await engine.handle_fault(factories.fault(at=T0), T0)
        await engine.idle()
        return [d.action.value for d in decisions], sent_at, deletions.called_at

    actions, sent_at, deleted_at = run_virtual(main())
    assert actions == ["restart-job"]
    assert len(deleted_at) == 1, f"the old pods were deleted {len(deleted_at)} times"
    waited = deleted_at[0] - sent_at
    assert waited < 1.0, f"the old pods went {waited:.2f} s after the Command (loop time), Volcano had taken it at once"
