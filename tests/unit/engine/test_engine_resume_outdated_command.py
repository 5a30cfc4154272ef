"""A new leader resumes the force follow-up of a restart its predecessor sent as a RestartJob Command in place of
pod deletions (a job of ``policy.volcano_restart: auto`` whose pods were all older than it: agent.engine.sending
``Sending._by_command``, issue 39): the stopped pods, older than the incident's generation, say it was a Command, so
the old pods still there are force-deleted (grace 0) as after any Command (agent.engine.follow_ups
``FollowUps.resume``). Without it a stuck-terminating pod on a dead node kept the force-mode job from recovering."""

from __future__ import annotations

from datetime import timedelta

import pytest
from support.factories import OLD_PODS, T0, left_incident, left_restart_state
from support.fakes import CacheWriter

from agent.core.clock import FixedClock
from agent.engine.recovery import RecoveryEngine
from agent.settings import Settings
from agent.sources.state import ClusterState


def _left(pod_version: str) -> ClusterState:
    """A force-mode job its predecessor restarted at generation "1" (now "2": Volcano counted the restart), its
    record ``restarting`` with a ledger naming the old pods, which carry job-version `pod_version` and are still
    terminating (Volcano honours their grace period: on a dead node that never ends)."""
    incident = left_incident("restart-job", "force", generation="1")
    return left_restart_state(incident, version="2", pod_version=pod_version, restarts_on_eviction=True)


@pytest.mark.parametrize(
    ("pod_version", "want"),
    [
        ("0", [(OLD_PODS, 0)]),  # older than the generation: the restart was a Command, its force follow-up redone
        ("1", []),  # the generation's own pods: a restart by deletion (grace 0 already), nothing to follow up
    ],
)
async def test_a_new_leader_redoes_the_force_follow_up_of_a_command_sent_for_outdated_pods(
    pod_version: str, want: list[tuple[tuple[str, ...], int]]
) -> None:
    state = _left(pod_version)
    writer = CacheWriter(state)
    settings = Settings.model_validate({"kafka": {"enabled": False}, "policy": {"breaker_min_faulty_nodes": 50}})
    now = T0 + timedelta(seconds=10)
    engine = RecoveryEngine(settings, state, writer, clock=FixedClock(now), active_faults=lambda: [])
    await engine.tick(now)
    await engine.idle()
    assert writer.deletions == want
    assert writer.commands == 0  # the restart itself is not sent again
