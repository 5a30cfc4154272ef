"""Checkpoint-aware graceful waits (issue 38): the pure rule (agent.core.checkpoint_wait), the hang detector's
note of when a checkpoint step changed (agent.core.progress), and the grace follow-up's early end
(agent.actions.recovery.finish_grace_wait). The clock is passed; the follow-up's wait runs on the event loop."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from support.fakes import RestartFake

from agent.actions import Outcome, PodRef, finish_grace_wait
from agent.core.checkpoint_wait import (
    CheckpointBaseline,
    CheckpointReading,
    WaitEnded,
    baseline,
    checkpoint_after_fault,
)
from agent.core.cluster import JobKind, JobRef
from agent.core.progress import (
    CHECKPOINT_STEP_ANNOTATION,
    STEP_ANNOTATION,
    HangDetector,
    HangSettings,
    LeaseRecord,
)

FAULT_AT = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BEFORE, AFTER = FAULT_AT - timedelta(seconds=1), FAULT_AT + timedelta(seconds=1)
BASE = CheckpointBaseline(step=100, fault_at=FAULT_AT)


@pytest.mark.parametrize(
    ("reading", "ends"),
    [
        pytest.param(CheckpointReading(100, 100, AFTER), True, id="save-of-the-last-step-after-the-fault"),
        pytest.param(CheckpointReading(103, 103, AFTER), True, id="save-of-a-later-step"),
        pytest.param(CheckpointReading(100, 95, AFTER), False, id="older-checkpoint-finished-after-the-fault"),
        pytest.param(CheckpointReading(104, 103, AFTER), False, id="still-stepping-past-its-checkpoint"),
        pytest.param(CheckpointReading(100, 100, BEFORE), False, id="checkpoint-seen-before-the-fault"),
        pytest.param(CheckpointReading(100, 100, FAULT_AT), False, id="checkpoint-seen-at-the-fault"),
        pytest.param(CheckpointReading(100, 100, None), False, id="checkpoint-there-when-first-followed"),
        pytest.param(CheckpointReading(100, None, AFTER), False, id="no-checkpoint-reported"),
        pytest.param(None, False, id="no-signal"),
    ],
)
def test_a_wait_ends_only_at_a_checkpoint_newer_than_the_fault(reading: CheckpointReading | None, ends: bool) -> None:
    assert checkpoint_after_fault(BASE, reading) is ends


def test_without_a_baseline_no_reading_ends_a_wait() -> None:
    assert baseline(None, FAULT_AT) is None
    assert checkpoint_after_fault(None, CheckpointReading(100, 100, AFTER)) is False
    assert baseline(CheckpointReading(7, 5, BEFORE), FAULT_AT) == CheckpointBaseline(7, FAULT_AT)


def _lease(step: int, checkpoint: int | None) -> LeaseRecord:
    ann = {STEP_ANNOTATION: str(step)}
    if checkpoint is not None:
        ann[CHECKPOINT_STEP_ANNOTATION] = str(checkpoint)
    return LeaseRecord("ns", "fault-agent-progress-job", "u", "1", "job", "job-0", FAULT_AT, 3,
                       tuple(sorted(ann.items())))  # fmt: skip


def test_the_hang_detector_notes_when_it_saw_the_checkpoint_step_change() -> None:
    d = HangDetector(HangSettings(180, 1800, 10, 3600))
    assert d.checkpoint_reading("ns", "job") is None  # no Lease followed
    d.update(_lease(10, 10), BEFORE)
    assert d.checkpoint_reading("ns", "job") == CheckpointReading(10, 10, None)  # there already: time unknown
    d.update(_lease(12, 10), FAULT_AT)
    assert d.checkpoint_reading("ns", "job") == CheckpointReading(12, 10, None)  # the step alone moved
    d.update(_lease(12, 12), AFTER)
    assert d.checkpoint_reading("ns", "job") == CheckpointReading(12, 12, AFTER)
    d.update(_lease(13, 12), AFTER + timedelta(seconds=5))
    assert d.checkpoint_reading("ns", "job") == CheckpointReading(13, 12, AFTER)  # unchanged checkpoint: kept
    assert d.checkpoint_reading("ns", "other") is None


JOB = JobRef(JobKind.VOLCANO, "ns", "job", "uid-job")
A, B = PodRef("ns", "job-0", "uid-a"), PodRef("ns", "job-1", "uid-b")


def _forced(writer: RestartFake, started: float) -> list[tuple[float, str]]:
    """(seconds since `started`, pod name) of each deletion, all of them forced (grace 0)."""
    assert all(grace == 0 for _, _, grace in writer.deleted)
    return [(at - started, pod.name) for at, pod, _ in writer.deleted]


async def test_a_checkpoint_ends_the_grace_wait_and_forces_the_pods_left() -> None:
    writer = RestartFake(left=(A, B))
    started = asyncio.get_running_loop().time()
    saved_at = started + 0.3
    finished = await finish_grace_wait(
        writer,  # type: ignore[arg-type]
        JOB, (A, B), incident="inc", grace_over_time_s=5.0, poll_s=0.05,
        checkpointed=lambda: asyncio.get_running_loop().time() >= saved_at,
    )  # fmt: skip
    assert finished.ended is WaitEnded.CHECKPOINT
    assert finished.result.outcome is Outcome.DONE
    assert 0.3 <= finished.waited_s < 1.0  # at the checkpoint, not after 5 s
    forced = _forced(writer, started)
    assert [name for _, name in forced] == ["job-0", "job-1"]
    assert all(t < 1.0 for t, _ in forced)


async def test_a_checkpoint_that_never_comes_waits_the_whole_time() -> None:
    writer = RestartFake(left=(A,))
    started = asyncio.get_running_loop().time()
    finished = await finish_grace_wait(
        writer,  # type: ignore[arg-type]
        JOB, (A,), incident="inc", grace_over_time_s=0.4, poll_s=0.05, checkpointed=lambda: False,
    )  # fmt: skip
    assert finished.ended is WaitEnded.TIMEOUT
    assert finished.waited_s >= 0.4
    assert _forced(writer, started)[0][0] >= 0.4


@pytest.mark.parametrize(
    ("left", "down", "ended"),
    [
        pytest.param((), (), WaitEnded.EXITED, id="pods-went-on-their-own"),
        pytest.param((A, B), (A, B), WaitEnded.NODE_DOWN, id="all-on-down-nodes"),
        pytest.param((A, B), (A,), WaitEnded.TIMEOUT, id="one-left-at-the-deadline"),
    ],
)
async def test_why_a_wait_without_a_checkpoint_ended(
    left: tuple[PodRef, ...], down: tuple[PodRef, ...], ended: WaitEnded
) -> None:
    writer = RestartFake(left=left)
    finished = await finish_grace_wait(
        writer,  # type: ignore[arg-type]
        JOB, (A, B), incident="inc", grace_over_time_s=0.3, poll_s=0.05,
        on_down_nodes=lambda pods: tuple(p for p in pods if p in down),
    )  # fmt: skip
    assert finished.ended is ended
