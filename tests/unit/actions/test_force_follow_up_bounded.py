"""A force follow-up deletes a big job's pods a few at a time (FOLLOW_UP_DELETES_IN_FLIGHT), so its burst does not
take every connection and API Priority and Fairness seat the next fault's restart needs (issue 19)."""

from __future__ import annotations

from support.fakes import RestartFake

from agent.actions import Outcome, PodRef, finish_force
from agent.actions.recovery import FOLLOW_UP_DELETES_IN_FLIGHT
from agent.core.cluster import JobKind, JobRef


def _writer() -> RestartFake:
    """Volcano took the Command ("1" after "0"); the old pods are all still there; each deletion takes 1 ms."""
    return RestartFake(version="1", write_s=0.001)


async def test_a_big_jobs_pods_are_deleted_a_few_at_a_time() -> None:
    writer = _writer()
    job = JobRef(JobKind.VOLCANO, "ns", "big", "uid-big")
    pods = tuple(PodRef("ns", f"big-{i}", f"uid-{i}") for i in range(50))
    result = await finish_force(writer, job, pods, incident="i-1", version="0")  # type: ignore[arg-type]
    assert result.outcome is Outcome.DONE
    assert sorted(p.name for _, p, _ in writer.deleted) == sorted(p.name for p in pods)
    assert writer.most <= FOLLOW_UP_DELETES_IN_FLIGHT < len(pods)


async def test_a_small_jobs_pods_go_in_one_call() -> None:
    writer = _writer()
    job = JobRef(JobKind.VOLCANO, "ns", "small", "uid-small")
    pods = tuple(PodRef("ns", f"small-{i}", f"uid-{i}") for i in range(2))
    result = await finish_force(writer, job, pods, incident="i-2", version="0")  # type: ignore[arg-type]
    assert result.outcome is Outcome.DONE
    assert result.detail == "2 of 2 written"
    assert writer.most == 2
