"""A restart by pod deletion never deletes the replacement the job's controller made for the pods it deleted
(found against MindCluster's real Ascend Operator, docs/mindcluster-conformance.md "With the agent", scenario b:
the agent deleted the known pods and, concurrently, listed the job's pods; the operator recreated master-0 at the
next version 40 ms after the delete, the list answered with it, and the agent deleted it as a pod its cache had
missed: one restart counted twice against backoffLimit)."""

from __future__ import annotations

import orjson
from support.fakes import RestartFake

from agent.actions import PodRef
from agent.actions.recovery import restart_job
from agent.actions.writes.pods import live_pods as _live_pods
from agent.core.cluster import FaultScheduling, JobKind, JobRef

JOB = JobRef(JobKind.ASCEND, "ns", "job", "uid-job")


def _deleted(writer: RestartFake) -> list[str]:
    """``<pod>@<version>`` of each pod deleted, in order."""
    return [f"{pod.name}@{pod.version}" for _, pod, _ in writer.deleted]


async def test_the_controllers_replacement_at_the_next_version_is_left_alone() -> None:
    known = [PodRef("ns", "job-master-0", "old-m", "0"), PodRef("ns", "job-worker-0", "old-w", "0")]
    replacement = PodRef("ns", "job-master-0", "new-m", "1")  # the operator made it before the list answered
    missed = PodRef("ns", "job-worker-1", "old-w1", "0")  # a pod of this generation the cache did not have yet
    writer = RestartFake(listed=[replacement, known[1], missed])
    plan = await restart_job(
        writer,  # type: ignore[arg-type]
        JOB, mode=FaultScheduling.FORCE, incident="inc", reason="chip out", known_pods=known,
    )  # fmt: skip
    assert _deleted(writer) == ["job-master-0@0", "job-worker-0@0", "job-worker-1@0"]
    assert {p.uid for p in plan.pods} == {"old-m", "old-w", "old-w1"}


async def test_without_versions_a_missed_pod_is_still_stopped() -> None:
    known = [PodRef("ns", "job-master-0", "old-m")]
    writer = RestartFake(listed=[PodRef("ns", "job-worker-0", "w")])
    await restart_job(
        writer,  # type: ignore[arg-type]
        JOB, mode=FaultScheduling.FORCE, incident="inc", reason="chip out", known_pods=known,
    )  # fmt: skip
    assert _deleted(writer) == ["job-master-0@", "job-worker-0@"]


def test_the_list_reads_each_pods_generation() -> None:
    items = [
        {"metadata": {"name": "a", "uid": "1", "labels": {"version": "3"}}},
        {"metadata": {"name": "b", "uid": "2", "annotations": {"volcano.sh/job-version": "7"}}},
    ]
    body = orjson.dumps({"kind": "PodList", "items": items})
    assert _live_pods(body, "x", JobKind.ASCEND) == [("a", "1", "3"), ("b", "2", "")]
    assert _live_pods(body, "x", JobKind.VOLCANO) == [("a", "1", ""), ("b", "2", "7")]
