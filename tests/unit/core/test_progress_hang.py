"""The heartbeat Lease's reading and the hang rule (agent.core.progress): pure, the clock passed in."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from support.factories import FORCE, T0, job, pod

from agent.core.cluster import JobRecord, PodRecord
from agent.core.faults import FaultKind, FaultLevel, Rejection
from agent.core.progress import (
    CHECKPOINT_STEP_ANNOTATION,
    CHECKPOINTING_ANNOTATION,
    HANG_TIMEOUT_LABEL,
    PROGRESS_LABEL,
    STEP_ANNOTATION,
    STEP_TIME_ANNOTATION,
    HangDetector,
    HangSettings,
    LeaseRecord,
    Progress,
    SignalCheck,
    hang_timeout,
    is_hang,
    parse_progress,
)

SETTINGS = HangSettings(floor_s=60, ceiling_s=1800, step_time_multiple=10, checkpoint_max_s=3600)


def lease(
    step: str | None = "10", *, holder: str = "job-0", duration_s: int | None = 30, **annotations: str
) -> LeaseRecord:
    ann = dict(annotations)
    if step is not None:
        ann[STEP_ANNOTATION] = step
    return LeaseRecord("ns", "fault-agent-progress-job", "uid-lease", "1", "job", holder, T0, duration_s,
                       tuple(sorted(ann.items())))  # fmt: skip


def opted_in(**labels: str) -> JobRecord:
    return job(labels={**dict(FORCE), PROGRESS_LABEL: "lease", **labels}, fault_retry_times=3)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({STEP_ANNOTATION: "7"}, Progress(7, None, None, False), id="step-only"),
        pytest.param(
            {
                STEP_ANNOTATION: "7",
                STEP_TIME_ANNOTATION: "1.5",
                CHECKPOINT_STEP_ANNOTATION: "5",
                CHECKPOINTING_ANNOTATION: "true",
            },
            Progress(7, 1.5, 5, True),
            id="everything",
        ),
        pytest.param({}, "missing-step", id="no-step"),
        pytest.param({STEP_ANNOTATION: "-1"}, "bad-step", id="negative-step"),
        pytest.param({STEP_ANNOTATION: "1e3"}, "bad-step", id="float-step"),
        pytest.param({STEP_ANNOTATION: "9" * 20}, "bad-step", id="huge-step"),
        pytest.param({STEP_ANNOTATION: "1", STEP_TIME_ANNOTATION: "0"}, "bad-step-time", id="zero-step-time"),
        pytest.param({STEP_ANNOTATION: "1", STEP_TIME_ANNOTATION: "nan"}, "bad-step-time", id="nan-step-time"),
        pytest.param({STEP_ANNOTATION: "1", STEP_TIME_ANNOTATION: "fast"}, "bad-step-time", id="text-step-time"),
        pytest.param({STEP_ANNOTATION: "1", CHECKPOINT_STEP_ANNOTATION: "x"}, "bad-checkpoint-step", id="bad-ckpt"),
        pytest.param({STEP_ANNOTATION: "1", CHECKPOINTING_ANNOTATION: "yes"}, "bad-checkpointing", id="bad-flag"),
    ],
)
def test_parse_progress(annotations: dict[str, str], expected: Progress | str) -> None:
    rec = LeaseRecord("ns", "l", "u", "1", "job", "p", T0, 30, tuple(sorted(annotations.items())))
    got = parse_progress(rec)
    if isinstance(expected, str):
        assert isinstance(got, Rejection)
        assert got.reason == expected
        assert got.source.kind == "Lease"
    else:
        assert got == expected


def test_a_lease_without_its_job_label_is_rejected() -> None:
    rec = LeaseRecord("ns", "l", "u", "1", "", "p", T0, 30, ((STEP_ANNOTATION, "1"),))
    got = parse_progress(rec)
    assert isinstance(got, Rejection)
    assert got.reason == "no-job-label"


@pytest.mark.parametrize(
    ("label", "step_time", "duration", "checkpointing", "expected"),
    [
        pytest.param("120", 0.5, 30, False, (120.0, "label"), id="label-wins"),
        pytest.param("abc", 2.0, 30, False, (60.0, "step-time"), id="bad-label-derived-floor"),
        pytest.param("3", 2.0, 30, False, (60.0, "step-time"), id="label-below-minimum-ignored"),
        pytest.param(None, 20.0, 30, False, (200.0, "step-time"), id="derived"),
        pytest.param(None, 500.0, 30, False, (1800.0, "step-time"), id="derived-ceiling"),
        pytest.param(None, None, 30, False, (1800.0, "ceiling"), id="no-step-time"),
        pytest.param("10", None, 90, False, (90.0, "label"), id="never-below-lease-duration"),
        pytest.param("10", None, 30, True, (3600.0, "label"), id="checkpointing"),
    ],
)
def test_hang_timeout(
    label: str | None, step_time: float | None, duration: int, checkpointing: bool, expected: tuple[float, str]
) -> None:
    assert hang_timeout(label, step_time, duration, checkpointing, SETTINGS) == expected


class Cluster:
    """The detector's job lookup over one job and its pods (changeable between ticks)."""

    def __init__(self, job: JobRecord | None, pods: list[PodRecord]) -> None:
        self.job, self.pods = job, pods

    def __call__(self, namespace: str, name: str) -> tuple[JobRecord | None, list[PodRecord]]:
        return (self.job, self.pods) if self.job is not None and name == self.job.name else (None, [])


def at(s: float):
    return T0 + timedelta(seconds=s)


def test_a_job_whose_step_stops_is_hung_once_after_its_timeout() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), [pod("job-0", rank=0, node="n3"), pod("job-1", rank=1)])
    d.update(lease("10"), at(0))
    d.tick(at(1), cluster)
    d.update(lease("11"), at(2))  # the first step the agent saw: armed
    res, hangs = d.tick(at(101), cluster)
    assert res.faults == []
    assert hangs == []
    res, hangs = d.tick(at(102), cluster)
    [fault] = res.faults
    assert is_hang(fault)
    assert (fault.kind, fault.level, fault.node, fault.reason, fault.codes) == (
        FaultKind.BUSINESS, FaultLevel.RESTART_BUSINESS, "n3", "hang", ("hang",),
    )  # fmt: skip
    assert fault.pod is not None
    assert fault.pod.name == "job-0"
    assert fault.signal_time == at(102)
    assert fault.observed_at == at(102)
    [hang] = hangs
    assert (hang.step, hang.timeout_s, hang.timeout_from, hang.idle_s) == (11, 100.0, "label", 100.0)
    res, hangs = d.tick(at(500), cluster)
    assert res.faults == []
    assert hangs == []


def test_no_hang_before_the_first_step_is_seen() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), [pod()])
    d.update(lease("10"), at(0))
    for s in (1, 200, 5000):
        res, _ = d.tick(at(s), cluster)
        assert res.faults == []


def test_a_restart_waits_for_the_first_step_again() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), [pod()])
    d.update(lease("10"), at(0))
    d.tick(at(1), cluster)
    d.update(lease("11"), at(2))
    assert cluster.job is not None
    cluster.job = replace(cluster.job, version="1")
    d.tick(at(50), cluster)  # the restart counter moved: disarmed
    res, _ = d.tick(at(1000), cluster)
    assert res.faults == []
    d.update(lease("5"), at(1001))  # the first step after the restart (resumed from a checkpoint)
    res, _ = d.tick(at(1100), cluster)
    assert res.faults == []
    res, _ = d.tick(at(1101), cluster)
    assert len(res.faults) == 1


def test_progress_clears_the_hang_and_rearms() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), [pod()])
    d.update(lease("10"), at(0))
    d.tick(at(1), cluster)
    d.update(lease("11"), at(2))
    [fault] = d.tick(at(102), cluster)[0].faults
    res = d.update(lease("11"), at(150))  # a renewal with the same step: still hung
    assert res.cleared == []
    res = d.update(lease("12"), at(160))
    assert [c.fault for c in res.cleared] == [fault]
    assert d.tick(at(259), cluster)[0].faults == []
    assert len(d.tick(at(260), cluster)[0].faults) == 1


def test_checkpointing_waits_longer() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), [pod()])
    d.update(lease("10"), at(0))
    d.tick(at(1), cluster)
    d.update(lease("11", **{CHECKPOINTING_ANNOTATION: "true"}), at(2))
    assert d.tick(at(3000), cluster)[0].faults == []
    assert len(d.tick(at(3602), cluster)[0].faults) == 1


def test_derived_timeout_from_the_step_time() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(), [pod()])
    d.update(lease("10", **{STEP_TIME_ANNOTATION: "12"}), at(0))
    d.tick(at(1), cluster)
    d.update(lease("11", **{STEP_TIME_ANNOTATION: "12"}), at(2))
    assert d.tick(at(121), cluster)[0].faults == []
    [hang] = d.tick(at(122), cluster)[1]
    assert (hang.timeout_s, hang.timeout_from) == (120.0, "step-time")


@pytest.mark.parametrize(
    "cluster",
    [
        pytest.param(Cluster(None, []), id="no-opted-in-job"),
        pytest.param(Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), []), id="no-pods"),
        pytest.param(
            Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), [pod(phase="Succeeded")]), id="only-finished-pods"
        ),
    ],
)
def test_no_hang_without_a_live_job(cluster: Cluster) -> None:
    d = HangDetector(SETTINGS)
    d.update(lease("10"), at(0))
    d.tick(at(1), cluster)
    d.update(lease("11"), at(2))
    assert d.tick(at(10_000), cluster)[0].faults == []


def test_the_hang_is_charged_to_the_holder_then_rank_0() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), [pod("job-0", rank=0), pod("job-1", rank=1)])
    d.update(lease("10", holder="job-1"), at(0))
    d.tick(at(1), cluster)
    d.update(lease("11", holder="job-1"), at(2))
    [fault] = d.tick(at(102), cluster)[0].faults
    assert fault.pod is not None
    assert fault.pod.name == "job-1"
    d2 = HangDetector(SETTINGS)
    d2.update(lease("10", holder="gone"), at(0))
    d2.tick(at(1), cluster)
    d2.update(lease("11", holder="gone"), at(2))
    [fault] = d2.tick(at(102), cluster)[0].faults
    assert fault.pod is not None
    assert fault.pod.name == "job-0"


def test_bad_signals_are_reported_once_and_never_hang() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), [pod()])
    first = d.update(lease("x"), at(0))
    again = d.update(lease("y"), at(1))
    assert [r.reason for r in first.rejections] == ["bad-step"]
    assert again.rejections == []
    assert d.tick(at(10_000), cluster)[0].faults == []
    assert [r.reason for r in d.update(lease(None), at(2)).rejections] == ["missing-step"]


def test_a_bad_timeout_label_is_reported_once_and_the_derived_timeout_applies() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "soon"}), [pod()])
    d.update(lease("10"), at(0))
    first, _ = d.tick(at(1), cluster)
    d.update(lease("11"), at(2))
    second, _ = d.tick(at(3), cluster)
    assert [r.reason for r in first.rejections + second.rejections] == ["bad-hang-timeout"]
    assert d.tick(at(1801), cluster)[0].faults == []
    assert len(d.tick(at(1802), cluster)[0].faults) == 1  # the ceiling: no step time given


def test_a_deleted_lease_clears_its_hang() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), [pod()])
    d.update(lease("10"), at(0))
    d.tick(at(1), cluster)
    d.update(lease("11"), at(2))
    [fault] = d.tick(at(102), cluster)[0].faults
    res = d.delete("ns/fault-agent-progress-job", at(103))
    assert [c.fault for c in res.cleared] == [fault]


def test_the_first_step_after_a_restart_is_reported_once() -> None:
    d = HangDetector(SETTINGS)
    cluster = Cluster(opted_in(**{HANG_TIMEOUT_LABEL: "100"}), [pod()])
    d.update(lease("10"), at(0))
    d.tick(at(1), cluster)
    d.update(lease("11"), at(2))
    d.tick(at(3), cluster)
    assert d.resumed == []  # the first step the agent saw is no restart's
    assert cluster.job is not None
    cluster.job = replace(cluster.job, version="1")
    d.tick(at(10), cluster)
    d.update(lease("11"), at(20))  # the old step, written again: not a step
    d.tick(at(21), cluster)
    assert d.resumed == []
    d.update(lease("12", **{CHECKPOINT_STEP_ANNOTATION: "10"}), at(30))
    d.tick(at(31), cluster)
    [resumed] = d.resumed
    assert (resumed.step, resumed.checkpoint_step, resumed.at, resumed.job.version) == (12, 10, at(30), "1")
    d.resumed.clear()
    d.update(lease("13"), at(40))
    d.tick(at(41), cluster)
    assert d.resumed == []


def test_missing_and_unusable_signals_are_reported_once() -> None:
    check = SignalCheck(grace_s=600)
    good = opted_in()
    bad = job("other", labels={**dict(FORCE), PROGRESS_LABEL: "yes"})
    plain = job("plain")
    pods = {good.uid: [pod(created_at=T0)], bad.uid: [pod(created_at=T0)], plain.uid: [pod(created_at=T0)]}

    def pods_of(j: JobRecord) -> list[PodRecord]:
        return pods[j.uid]

    first = check.check([good, bad, plain], pods_of, set(), at(599))
    assert [(r.reason, r.source.name) for r in first] == [("bad-progress-label", "other")]
    later = check.check([good, bad, plain], pods_of, set(), at(600))
    assert [(r.reason, r.source.name) for r in later] == [("no-heartbeat", "job")]
    assert check.check([good, bad, plain], pods_of, set(), at(5000)) == []
    assert check.check([good, bad], pods_of, {"ns/fault-agent-progress-job"}, at(5001)) == []
    again = check.check([good, bad], pods_of, set(), at(5002))  # the Lease went again
    assert [r.reason for r in again] == ["no-heartbeat"]
