"""Straggler detection from the heartbeat's per-rank step times (agent.core.straggler): pure, the clock passed in."""

from __future__ import annotations

from datetime import timedelta

import pytest
from support.factories import FORCE, T0, job, pod

from agent.core.cluster import JobRecord, PodRecord
from agent.core.progress import PROGRESS_LABEL, RANK_STEP_TIMES_ANNOTATION, STEP_ANNOTATION, LeaseRecord
from agent.core.straggler import (
    STRAGGLER_LABEL,
    StragglerDetector,
    StragglerSettings,
    parse_rank_step_times,
    rank_pod,
)

SETTINGS = StragglerSettings(multiple=1.5, windows=3, min_ranks=2)
FOUR = [pod(f"job-{i}", node=f"n{i}", chips=(f"Ascend910-{i}",), rank=i) for i in range(4)]


def at(s: float) -> object:
    return T0 + timedelta(seconds=s)


def lease(step: int, times: str | None) -> LeaseRecord:
    ann = {STEP_ANNOTATION: str(step)}
    if times is not None:
        ann[RANK_STEP_TIMES_ANNOTATION] = times
    return LeaseRecord("ns", "fault-agent-progress-job", "uid-lease", "1", "job", "job-0", T0, 30,
                       tuple(sorted(ann.items())))  # fmt: skip


def opted_in(mode: str = "detect", version: str = "0") -> JobRecord:
    return job(labels={**dict(FORCE), PROGRESS_LABEL: "lease", STRAGGLER_LABEL: mode}, version=version)


class World:
    """The lookup the detector asks: one job and its pods, changed by the test."""

    def __init__(self, j: JobRecord | None, pods: list[PodRecord]) -> None:
        self.job, self.pods = j, pods

    def __call__(self, namespace: str, name: str) -> tuple[JobRecord | None, list[PodRecord]]:
        return self.job, self.pods


def feed(d: StragglerDetector, world: World, first_step: int, windows: list[str], t0: float = 0.0) -> list[object]:
    """One window per write (step moves by 10), a tick after each; everything the ticks found, in order."""
    seen: list[object] = []
    for i, times in enumerate(windows):
        now = at(t0 + i)
        d.update(lease(first_step + 10 * i, times), now)  # type: ignore[arg-type]
        news = d.tick(now, world)  # type: ignore[arg-type]
        seen += news.found + news.ended + news.rejections
    return seen


def started(d: StragglerDetector, world: World) -> None:
    """The detector knows the job (its first tick records the restart counter; windows before it are dropped)."""
    d.update(lease(0, "1,1,1,1"), at(-1))  # type: ignore[arg-type]
    d.tick(at(-1), world)  # type: ignore[arg-type]


def test_a_rank_slow_for_the_configured_windows_is_one_straggler_naming_its_pod() -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(), FOUR)
    started(d, world)
    seen = feed(d, world, 10, ["1,1,2.5,1", "1,1.1,2.4,1", "1,1,2.6,1", "1,1,2.7,1", "1,1,2.5,1"])
    assert len(seen) == 1  # once per episode, at the third window
    (found,) = seen
    assert found.rank == 2
    assert found.pod.name == "job-2"
    assert found.pod.node == "n2"
    assert found.pod.chips == ("Ascend910-2",)  # type: ignore[attr-defined]
    assert found.step_time_s == 2.6
    assert found.median_s == 1.0
    assert found.step == 30
    assert found.at == at(2)
    assert [s.rank for s in d.active()] == [2]


def test_an_interrupted_slow_run_is_no_straggler() -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(), FOUR)
    started(d, world)
    assert feed(d, world, 10, ["1,1,2.5,1", "1,1,2.5,1", "1,1,1.2,1", "1,1,2.5,1", "1,1,2.5,1"]) == []


def test_even_ranks_and_a_rank_just_under_the_multiple_are_no_straggler() -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(), FOUR)
    started(d, world)
    assert feed(d, world, 10, ["1,1.02,0.98,1"] * 5 + ["1,1,1.5,1"] * 5) == []  # 1.5 is not above 1.5 x 1


def test_the_episode_ends_when_the_rank_is_fast_again_for_the_windows_and_a_new_one_is_reported() -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(), FOUR)
    started(d, world)
    slow, fast = "3,1,1,1", "1,1,1,1"
    seen = feed(d, world, 10, [slow] * 3 + [fast] * 2)
    assert [type(s).__name__ for s in seen] == ["Straggler"]
    seen = feed(d, world, 60, [fast, slow, slow, slow], t0=5)
    assert [type(s).__name__ for s in seen] == ["StragglerEnded", "Straggler"]
    assert seen[0].cause == "recovered"
    assert seen[0].step_time_s == 1.0


def test_repeated_writes_without_a_step_are_one_window() -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(), FOUR)
    started(d, world)
    for i in range(6):  # a stalled loop's client renews the Lease with the same step and times
        d.update(lease(10, "3,1,1,1"), at(i))
        assert d.tick(at(i), world).found == []


def test_a_restart_ends_the_episode_and_waits_for_new_windows() -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(), FOUR)
    started(d, world)
    assert len(feed(d, world, 10, ["3,1,1,1"] * 3)) == 1
    world.job = opted_in(version="1")
    d.update(lease(5, "3,1,1,1"), at(10))
    news = d.tick(at(10), world)
    assert [(e.cause, e.straggler.rank) for e in news.ended] == [("restarted", 0)]
    assert news.found == []
    assert d.active() == []


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        pytest.param("gone", "job-gone", id="job-gone"),
        pytest.param("opted-out", "opted-out", id="label-removed"),
        pytest.param("lease", "lease-gone", id="lease-deleted"),
        pytest.param("ranks", "ranks-changed", id="ranks-changed"),
    ],
)
def test_every_other_end_of_an_episode_is_reported(change: str, cause: str) -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(), FOUR)
    started(d, world)
    assert len(feed(d, world, 10, ["3,1,1,1"] * 3)) == 1
    if change == "lease":
        ended = d.delete("ns/fault-agent-progress-job", at(9))
    else:
        if change == "gone":
            world.job = None
        elif change == "opted-out":
            world.job = job(labels={**dict(FORCE), PROGRESS_LABEL: "lease"})
        d.update(lease(100, "1,1,1,1,1" if change == "ranks" else "3,1,1,1"), at(9))
        ended = d.tick(at(9), world).ended  # type: ignore[assignment]
    assert [(e.cause, e.straggler.rank) for e in ended] == [(cause, 0)]
    assert d.active() == []


def test_a_window_with_fewer_ranks_than_the_minimum_is_not_judged() -> None:
    d = StragglerDetector(StragglerSettings(multiple=1.5, windows=1, min_ranks=3))
    world = World(opted_in(), FOUR[:2])
    started(d, world)
    assert feed(d, world, 10, ["5,1"] * 3) == []


def test_two_ranks_compare_with_the_lower_median() -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(), FOUR[:2])
    started(d, world)
    seen = feed(d, world, 10, ["1,2"] * 3)
    assert [(s.rank, s.median_s) for s in seen] == [(1, 1.0)]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        pytest.param("1,x,1", "entry 1", id="not-a-number"),
        pytest.param("1,0,1", "positive", id="zero"),
        pytest.param("1,-2", "positive", id="negative"),
        pytest.param("1,nan", "positive", id="nan"),
        pytest.param("1,inf", "positive", id="inf"),
        pytest.param("", "entry 0", id="empty"),
        pytest.param(",".join(["1"] * 20001), "more than", id="too-many"),
    ],
)
def test_unreadable_rank_step_times_are_rejected_once_and_never_judged(text: str, problem: str) -> None:
    got = parse_rank_step_times(text)
    assert isinstance(got, str)
    assert problem in got
    d, world = StragglerDetector(SETTINGS), World(opted_in(), FOUR)
    started(d, world)
    first = d.update(lease(10, text), at(0))
    assert [(r.reason, r.source.kind) for r in first] == [("bad-rank-step-times", "Lease")]
    for i in range(1, 5):
        assert d.update(lease(10 + i, text), at(i)) == []
        assert d.tick(at(i), world).found == []


def test_a_bad_straggler_label_is_reported_once_and_nothing_is_judged() -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(mode="yes"), FOUR)
    news = [d.tick(at(i), world) for i in range(1) if d.update(lease(i, "3,1,1,1"), at(i)) == []]
    seen = news + [d.tick(at(i), world) for i in range(1, 5) if d.update(lease(10 * i, "3,1,1,1"), at(i)) == []]
    rejections = [r for n in seen for r in n.rejections]
    assert [(r.reason, r.source.kind) for r in rejections] == [("bad-straggler-label", "Job")]
    assert all(n.found == [] for n in seen)


def test_a_slow_rank_no_pod_holds_is_rejected_once() -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(), FOUR[:3])
    started(d, world)
    seen = feed(d, world, 10, ["1,1,1,3"] * 5)
    assert [(r.reason, r.source.kind) for r in seen] == [("unknown-rank", "Lease")]  # type: ignore[attr-defined]


def test_rank_pod_uses_the_rank_annotation_else_the_index_in_the_name() -> None:
    ranked = [pod("a", rank=1), pod("b", rank=0)]
    assert rank_pod(0, ranked).name == "b"  # type: ignore[union-attr]
    unranked = [pod(f"j-worker-{i}", rank=None) for i in (10, 2, 0, 1)]
    assert [rank_pod(r, unranked).name for r in range(4)] == [  # type: ignore[union-attr]
        "j-worker-0", "j-worker-1", "j-worker-2", "j-worker-10"
    ]  # fmt: skip
    assert rank_pod(4, unranked) is None
    gone = [pod("x", rank=0, phase="Failed")]
    assert rank_pod(0, gone) is None


def test_what_was_reported_of_a_job_is_forgotten_when_the_job_goes() -> None:
    d, world = StragglerDetector(SETTINGS), World(opted_in(mode="yes"), FOUR)
    d.update(lease(1, "1,1,1,1"), at(0))
    assert [r.reason for r in d.tick(at(0), world).rejections] == ["bad-straggler-label"]
    assert d.tick(at(1), world).rejections == []  # once
    world.job = None
    d.tick(at(2), world)
    assert d.rejected == {}
