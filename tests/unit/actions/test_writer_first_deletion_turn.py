"""ClusterWriter.delete_pods: a restart's first pod deletion leaves in the caller's own step, not a loop turn behind
the tasks scheduled with it (agent.actions.recovery schedules the list of the job's pods right after the deletions).

Regression (issue 39, session 24): every deletion was a task of ``asyncio.gather``, one loop turn after the
deletions' task itself, so the list of the job's pods (a task scheduled after it) went to the apiserver before the
first deletion, and on a busy loop each turn waited behind every ready callback: in bench_e2e's slowest tenth of
restarts the first deletion's request started 7.7 ms on average after the claim's (a stage probe). A stand-in for
the generated CoreV1Api records the order in which the requests start."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from support.fakes import RawAnswer

from agent.actions import ClusterWriter, PodRef
from agent.actions.results import Outcome
from agent.core.fence import NotLeader


class _Core:
    """Records each delete request's start in `order` (shared with the test's other tasks), then answers 200."""

    def __init__(self, order: list[str]) -> None:
        self.order = order

    async def delete_namespaced_pod(self, name: str, namespace: str, **_: Any) -> RawAnswer:
        self.order.append(f"delete {name}")
        await asyncio.sleep(0)  # the round trip
        return RawAnswer({})


async def _with_writer(order: list[str], fence: Any = None) -> tuple[ClusterWriter, k8s.ApiClient]:
    api = k8s.ApiClient()
    writer = ClusterWriter(api, fence=fence) if fence is not None else ClusterWriter(api)
    writer.core = _Core(order)
    return writer, api


PODS = [PodRef("ns", "job-0", "uid-0"), PodRef("ns", "job-1", "uid-1"), PodRef("ns", "job-2", "uid-2")]


async def test_the_first_deletion_starts_before_a_task_scheduled_after_the_deletions() -> None:
    order: list[str] = []
    writer, api = await _with_writer(order)
    try:

        async def listing() -> None:
            order.append("list")

        deletions = asyncio.ensure_future(writer.delete_pods(PODS, incident="inc", grace_seconds=0))
        listed = asyncio.ensure_future(listing())  # as restart_job schedules the list after the deletions
        result, _ = await asyncio.gather(deletions, listed)
    finally:
        await api.close()
    assert order[0] == "delete job-0"  # old code: "list" first, every deletion a turn later
    assert sorted(order) == ["delete job-0", "delete job-1", "delete job-2", "list"]
    assert result.outcome is Outcome.DONE
    assert result.detail == "3 of 3 written"


async def test_no_pods_is_nothing_to_delete() -> None:
    order: list[str] = []
    writer, api = await _with_writer(order)
    try:
        result = await writer.delete_pods([], incident="inc", grace_seconds=0, target="ns/job")
    finally:
        await api.close()
    assert order == []
    assert result.outcome is Outcome.ALREADY_DONE


async def test_a_refused_first_deletion_is_raised_once_the_others_ended() -> None:
    """The lease fence refuses every write (no leadership left): NotLeader is raised from the inline deletion,
    and no deletion task is left running behind it."""
    order: list[str] = []
    writer, api = await _with_writer(order, fence=lambda: 0.0)
    try:
        before = asyncio.all_tasks()
        with pytest.raises(NotLeader):
            await writer.delete_pods(PODS, incident="inc", grace_seconds=0)
        assert asyncio.all_tasks() - before == set()  # the others ended (refused too), none left behind
    finally:
        await api.close()
    assert order == []  # nothing was sent
