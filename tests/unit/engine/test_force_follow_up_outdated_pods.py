"""The force follow-up of the RestartJob Command the agent sends instead of deleting pods that are all older than
their Volcano Job (agent.engine.sending ``Sending._by_command``, agent.core.policy.volcano_deletion_outdated): those
pods go at once, not once Volcano's controller has taken the Command from its queue. Deleting a pod older than the
job is only a sync to Volcano, and the Command counts the restart whatever the pods' versions, so waiting bought
nothing and put Volcano's queue into the restart's first pod terminating (session 23's bench_e2e run with 3 such
restarts of 120: p99 4.9 s against 0.3 s). Runs on a virtual-time loop, the engine's clock on its time."""

from __future__ import annotations

import asyncio

from support import factories
from support.factories import T0, one_job_state
from support.fakes import FakeWriter, Scripted, script

from agent.engine.recovery import RecoveryEngine
from agent.replay.vloop import VirtualClock, VirtualLoop, run_virtual
from agent.settings import Settings
from agent.sources.state import ClusterState

SETTINGS = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"volcano_restart": "auto"}})


def _not_taken() -> tuple[FakeWriter, Scripted]:
    """Volcano has not taken the Command yet: every read of the job answers status.version 3, its resourceVersion
    the cache's (the GET sent with the restart proves the cached version). Returns the writer and its deletions."""
    writer = FakeWriter()
    script(writer, "job_meta", answer=("1", {}))
    script(writer, "job_version", answer="3")
    script(writer, "pods_remaining", does=list)
    return writer, script(writer, "delete_pods")


def _state(pod_version: str) -> ClusterState:
    """Volcano Job ns/job Running at status.version 3 (its policies restart it on a deleted pod) and its two pods
    created under `pod_version` (volcano.sh/job-version)."""
    return one_job_state(version="3", restarts_on_eviction=True, pod_versions=(pod_version, pod_version))


def _restart(pod_version: str) -> tuple[list[str], Scripted, float, list[float]]:
    async def main() -> tuple[list[str], Scripted, float, list[float]]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualLoop)
        writer, deletions = _not_taken()
        commands = script(writer, "restart_command")
        engine = RecoveryEngine(SETTINGS, _state(pod_version), writer, clock=VirtualClock(loop, T0))
        sent_at = loop.time()
        decisions = await engine.handle_fault(factories.fault(at=T0), T0)
        await asyncio.sleep(3.0)  # longer than the at-once path takes, well inside the follow-up's 10 s bound
        return [d.action.value for d in decisions], commands, sent_at, deletions.called_at

    return run_virtual(main())


def test_pods_older_than_their_job_go_at_once_after_the_command_sent_for_them() -> None:
    actions, commands, sent_at, deleted_at = _restart("2")
    assert actions == ["restart-job"]
    assert len(commands.called_at) == 1, "a RestartJob Command, as Volcano would not count the deletions"
    assert len(deleted_at) == 1, f"the old pods were deleted {len(deleted_at)} times within 3 s"
    waited = deleted_at[0] - sent_at
    assert waited < 1.0, f"the old pods went {waited:.2f} s after the Command (loop time)"


def test_pods_of_the_jobs_version_are_deleted_by_the_restart_itself_with_no_command() -> None:
    """The common path is not this one: pods of the job's own version are the restart (deleted, no Command)."""
    actions, commands, _, deleted_at = _restart("3")
    assert actions == ["restart-job"]
    assert commands.called_at == []
    assert len(deleted_at) == 1
