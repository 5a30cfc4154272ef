"""Grace mode on a dead node (issue 36, 6): pods on a node that is gone, NotReady or unreachable cannot exit
gracefully (their kubelet does not answer); the agent waited up to grace-over-time (900 s) for them. The grace
follow-up now forces those at once and still waits for the others."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from support import factories
from support.fakes import RestartFake

from agent.actions import Outcome, PodRef, finish_grace
from agent.core.cluster import JobKind, JobRef, NodeCondition, Taint, node_is_down

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
JOB = JobRef(JobKind.VOLCANO, "ns", "job", "uid-job")
A, B = PodRef("ns", "job-0", "uid-a"), PodRef("ns", "job-1", "uid-b")


@pytest.mark.parametrize(
    ("node", "down"),
    [
        pytest.param(factories.node("n1", at=NOW), False, id="ready"),
        pytest.param(None, True, id="gone"),
        pytest.param(factories.node("n1", at=NOW, ready="False"), True, id="not-ready"),
        pytest.param(factories.node("n1", at=NOW, ready="Unknown"), True, id="unknown"),
        pytest.param(
            factories.node("n1", at=NOW, taints=(Taint("node.kubernetes.io/unreachable", "", "NoExecute"),)),
            True,
            id="unreachable-taint",
        ),
        pytest.param(
            factories.node("n1", at=NOW, conditions=(NodeCondition("MemoryPressure", "False", "", NOW),)),
            False,
            id="no-ready-condition",
        ),
    ],
)
def test_node_is_down(node: object, down: bool) -> None:
    assert node_is_down(node) is down  # type: ignore[arg-type]


def _forced(writer: RestartFake, started: float) -> list[tuple[float, str]]:
    """(seconds since `started`, pod name) of each deletion, all of them forced (grace 0)."""
    assert all(grace == 0 for _, _, grace in writer.deleted)
    return [(at - started, pod.name) for at, pod, _ in writer.deleted]


async def test_pods_on_a_down_node_are_forced_at_once_and_the_others_after_grace_over_time() -> None:
    writer = RestartFake()
    started = asyncio.get_running_loop().time()
    result = await finish_grace(
        writer,  # type: ignore[arg-type]
        JOB,
        (A, B),
        incident="inc",
        grace_over_time_s=0.6,
        on_down_nodes=lambda pods: tuple(p for p in pods if p is A),
        poll_s=0.05,
    )
    assert result.outcome is Outcome.DONE
    (t_a, first), (t_b, second) = _forced(writer, started)
    assert (first, second) == ("job-0", "job-1")
    assert t_a < 0.3  # forced at the first poll, not after grace-over-time
    assert t_b >= 0.6


async def test_without_a_down_node_the_follow_up_waits_as_before() -> None:
    writer = RestartFake()
    started = asyncio.get_running_loop().time()
    await finish_grace(
        writer, JOB, (A,), incident="inc", grace_over_time_s=0.2, on_down_nodes=lambda p: (), poll_s=0.05
    )  # type: ignore[arg-type]
    forced = _forced(writer, started)
    assert [name for _, name in forced] == ["job-0"]
    assert forced[0][0] >= 0.2
