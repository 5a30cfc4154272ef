"""A force follow-up deletes a big job's pods a few at a time (FOLLOW_UP_DELETES_IN_FLIGHT), so its burst does not
take every connection and API Priority and Fairness seat the next fault's restart needs (issue 19)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from agent.actions import ActionResult, Outcome, PodRef, finish_force
from agent.actions.recovery import FOLLOW_UP_DELETES_IN_FLIGHT
from agent.actions.results import combine
from agent.core.cluster import JobKind, JobRef


class CountingWriter:
    """Deletions take a moment; the most in flight at once is kept."""

    dry_run = False

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.deleted: list[str] = []

    async def job_version(self, job: JobRef) -> str | None:
        return "1"  # Volcano took the Command

    async def pods_remaining(self, pods: Sequence[PodRef]) -> list[PodRef]:
        return list(pods)

    async def _delete(self, pod: PodRef) -> ActionResult:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.001)
        self.in_flight -= 1
        self.deleted.append(pod.name)
        return ActionResult("delete-pod", str(pod), Outcome.DONE)

    async def delete_pods(
        self, pods: Sequence[PodRef], *, incident: str, grace_seconds: int | None, target: str = ""
    ) -> ActionResult:
        results = await asyncio.gather(*(self._delete(p) for p in pods))
        return combine("delete-pods", target, list(results))


async def test_a_big_jobs_pods_are_deleted_a_few_at_a_time() -> None:
    writer = CountingWriter()
    job = JobRef(JobKind.VOLCANO, "ns", "big", "uid-big")
    pods = tuple(PodRef("ns", f"big-{i}", f"uid-{i}") for i in range(50))
    result = await finish_force(writer, job, pods, incident="i-1", version="0")  # type: ignore[arg-type]
    assert result.outcome is Outcome.DONE
    assert sorted(writer.deleted) == sorted(p.name for p in pods)
    assert writer.most <= FOLLOW_UP_DELETES_IN_FLIGHT < len(pods)


async def test_a_small_jobs_pods_go_in_one_call() -> None:
    writer = CountingWriter()
    job = JobRef(JobKind.VOLCANO, "ns", "small", "uid-small")
    pods = tuple(PodRef("ns", f"small-{i}", f"uid-{i}") for i in range(2))
    result = await finish_force(writer, job, pods, incident="i-2", version="0")  # type: ignore[arg-type]
    assert result.outcome is Outcome.DONE
    assert result.detail == "2 of 2 written"
    assert writer.most == 2
