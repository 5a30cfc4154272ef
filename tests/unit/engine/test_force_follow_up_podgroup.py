"""The force follow-up after a RestartJob Command waits for Volcano's kill to delete the job's PodGroup, not only for
the job's new version: ``killJob`` writes the version, then deletes the PodGroup (``volcano.sh/volcano`` v1.14.1
``pkg/controllers/job/job_controller_actions.go`` ``killPods``). Old pods deleted with grace 0 in between vanish at
once on a real cluster; their events reach Volcano's job controller before it has seen its own deletion of the
PodGroup, its syncs find the PodGroup Pending and keep the kill's ``status.terminating``, and the job can stay
Restarting with no pods and no PodGroup (the race behind the GPU e2e flake of 2026-12-06; session 25's closing note
left it as the real-cluster risk). The wait is bounded by finish_force's 10 s, as the version's. Runs on a
virtual-time loop, the engine's clock on its time."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from support.factories import FORCE, change
from support.fakes import FakeWriter, Scripted
from support.follow_ups import deleted_once, two_pod_job, volcano_takes_it

from agent.core.cluster import JobKind, PodGroupRecord
from agent.kube.watch import ChangeType
from agent.sources.state import ClusterState

TAKEN_AFTER_S = 1.0
"""When (loop seconds after the decision) Volcano's kill writes the job's new version in this world."""


def _with_podgroup(state: ClusterState) -> tuple[ClusterState, str]:
    """`state` with its job's PodGroup (owned by the job, as Volcano makes it); returns the state and its key."""
    job = state.vcjobs["ns/job"]
    key = f"ns/job-{job.uid}"
    group = PodGroupRecord(
        "ns", f"job-{job.uid}", "pg-uid-1", "5", JobKind.VOLCANO, "job", job.uid, None, labels=tuple(sorted(FORCE))
    )  # with the job's labels, as Volcano copies them (MindCluster reads them from the PodGroup)
    state.apply(change("podgroups", key, group, type=ChangeType.ADDED))
    assert state.podgroup_of(job) is not None
    return state, key


def _kill(state: ClusterState, key: str, podgroup_gone_s: float | None) -> Any:
    """The `make` of a world whose Volcano takes the Command after TAKEN_AFTER_S and deletes the PodGroup `key`
    from the watch cache `podgroup_gone_s` after the decision (None: never, a PodGroup the watch does not see go)."""

    def gone() -> None:
        old = state.podgroups[key]
        state.apply(replace(change("podgroups", key, None, old), type=ChangeType.DELETED))

    def schedule() -> None:
        if podgroup_gone_s is not None:
            asyncio.get_running_loop().call_later(podgroup_gone_s, gone)

    return volcano_takes_it(TAKEN_AFTER_S, on_loop=schedule)


@pytest.mark.parametrize("gone_s", [1.6, 3.0])
def test_the_old_pods_wait_until_the_kill_deleted_the_podgroup(gone_s: float) -> None:
    state, key = _with_podgroup(two_pod_job(version=""))
    went = deleted_once(_kill(state, key, gone_s), state)
    assert gone_s <= went < gone_s + 0.5, (
        f"the old pods went {went:.2f} s after the Command (loop time); the version moved at {TAKEN_AFTER_S} s, "
        f"the PodGroup went at {gone_s} s"
    )


def test_a_podgroup_the_watch_never_sees_go_holds_the_old_pods_no_longer_than_the_version_would() -> None:
    """finish_force's bound (10 s after the follow-up starts) ends the wait: a controller or a watch that does not
    answer must not keep a force-mode job's pods alive."""
    state, key = _with_podgroup(two_pod_job(version=""))
    went = deleted_once(_kill(state, key, None), state)
    assert 10.0 <= went < 10.5, f"the old pods went {went:.2f} s after the Command"


def test_the_podgroup_volcano_makes_after_the_kill_does_not_hold_the_old_pods() -> None:
    """Only the PodGroup cached before the Command is waited for: the one Volcano's next sync creates (a new UID,
    the same name) right after deleting it is the restarted job's."""
    state, key = _with_podgroup(two_pod_job(version=""))

    def make() -> tuple[FakeWriter, Scripted]:
        writer, deletions = _kill(state, key, 1.3)()
        old = state.podgroups[key]
        new = replace(old, uid="pg-uid-2", resource_version="9")
        asyncio.get_running_loop().call_later(1.35, state.apply, change("podgroups", key, new, type=ChangeType.ADDED))
        return writer, deletions

    went = deleted_once(make, state)
    assert 1.3 <= went < 1.8, f"the old pods went {went:.2f} s after the Command; the old PodGroup at 1.3 s"
