"""Effective training time (agent.core.goodput): work lost, lost time by cause, the per-job account and the fold
of recovery.resumed events. Pure: every time is passed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agent.core.goodput import (
    CAUSES,
    GoodputFold,
    JobTraining,
    LostTime,
    ProgressHistory,
    Reading,
    incident_lost_time,
    observed_step_time,
    work_lost,
)
from agent.core.progress import Progress

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def r(step: int, seconds: float, checkpoint: int | None = None, step_time: float | None = None) -> Reading:
    return Reading(step, checkpoint, step_time, at(seconds))


@pytest.mark.parametrize(
    ("readings", "steps", "seconds", "step_time"),
    [
        pytest.param([], None, None, None, id="no-reading"),
        pytest.param([r(10, 0), r(20, 30)], None, None, None, id="no-checkpoint-reported"),
        pytest.param([r(150, 0, 100, 2.0)], 50, 100.0, 2.0, id="heartbeat-step-time"),
        pytest.param([r(100, 0, 100, 2.0)], 0, 0.0, 2.0, id="fault-right-after-a-checkpoint"),
        pytest.param([r(100, 0, 80), r(130, 30, 80), r(160, 60, 80)], 80, 80.0, 1.0, id="observed-step-time"),
        pytest.param([r(90, 0, 80), r(100, 20, 100)], 0, 0.0, 2.0, id="observed-rate-with-checkpoint-at-step"),
    ],
)
def test_work_lost(readings: list[Reading], steps: int | None, seconds: float | None, step_time: float | None) -> None:
    got = work_lost(readings)
    assert (got.steps, got.step_time_s) == (steps, step_time)
    assert got.seconds == (None if seconds is None else pytest.approx(seconds))


def test_work_lost_seconds_without_a_heartbeat_step_time() -> None:
    # the observed rate counts only the run of increasing steps since the restart in between
    readings = [r(5, 0, 0), r(3, 10, 0), r(40, 70, 0)]  # a restart in between: the runs do not join
    got = work_lost(readings)
    assert got.steps == 40
    assert got.step_time_s == pytest.approx(60 / 37)
    # no rate at all (one reading): the seconds from the agent's clock, checkpoint step reached → last reading
    only = [r(40, 70, 10)]
    got = work_lost(only)
    assert (got.steps, got.seconds, got.step_time_s) == (30, 0.0, None)
    two = [r(12, 10, 10), r(12, 20, 12)]  # step did not move: no rate; step 12 (the checkpoint) first seen at 10 s
    got = work_lost(two)
    assert (got.steps, got.seconds) == (0, 10.0)


def test_observed_step_time_uses_the_last_increasing_run() -> None:
    assert observed_step_time([r(100, 0), r(5, 50), r(15, 60)]) == pytest.approx(1.0)
    assert observed_step_time([r(100, 0)]) is None


def test_lost_time_splits_the_outage_at_each_milestone() -> None:
    lost = incident_lost_time(at(0), at(2), at(5), at(35), at(95), 40.0)
    assert lost == LostTime(2.0, 3.0, 30.0, 60.0, 40.0)
    assert lost.total_s == 135.0
    assert set(lost.by_cause()) == set(CAUSES)
    assert lost.as_data()["total_s"] == 135.0


@pytest.mark.parametrize(
    ("decided", "running", "expected"),
    [
        pytest.param(None, None, LostTime(5.0, 0.0, 90.0, 0.0, 0.0), id="no-decision-no-running: first step ends it"),
        pytest.param(at(2), at(200), LostTime(2.0, 3.0, 90.0, 0.0, 0.0), id="running-after-first-step-clamped"),
        pytest.param(at(-3), at(1), LostTime(0.0, 5.0, 0.0, 90.0, 0.0), id="boundaries-before-the-stop-clamped"),
    ],
)
def test_lost_time_boundaries_are_clamped_between_neighbours(
    decided: datetime | None, running: datetime | None, expected: LostTime
) -> None:
    assert incident_lost_time(at(0), decided, at(5), running, at(95), None) == expected


def test_lost_time_of_a_first_step_before_the_stop_is_zero() -> None:
    assert incident_lost_time(at(10), at(11), at(12), at(13), at(5), float("nan")).total_s == 0.0


def test_history_keeps_changes_and_the_first_step() -> None:
    h = ProgressHistory()
    p = Progress(10, 2.0, 0, False)
    h.observe("ns", "job", p, at(0))
    h.observe("ns", "job", p, at(30))  # the same reading again: not kept
    assert h.first_step_at("ns", "job") is None
    h.observe("ns", "job", Progress(25, 2.0, 20, False), at(60))
    h.observe("ns", "job", Progress(25, 1.5, 20, False), at(61))  # only the step time changed: updates the last
    assert h.first_step_at("ns", "job") == at(60)
    assert [x.step for x in h.before("ns", "job", at(59))] == [10]
    assert h.before("ns", "job", at(61))[-1].step_time_s == 1.5
    assert h.last_step_change("ns", "job", at(100)) == at(60)
    h.forget("ns", "job")
    assert h.before("ns", "job", at(100)) == []


def test_job_account_productive_is_wall_minus_lost() -> None:
    account = JobTraining(at(0))
    assert account.summary(at(0)).running_share is None
    account.add(LostTime(10, 0, 20, 30, 40), at(500), 40)
    s = account.summary(at(1000))
    assert (s.wall_s, s.lost_s, s.productive_s, s.running_share) == (1000.0, 100.0, 900.0, 0.9)
    assert s.lost_by_cause["recomputation"] == 40
    assert (s.incidents, s.work_lost_steps) == (1, 40)
    assert account.summary(at(50)).productive_s == 0.0  # lost capped at the wall time


def _resumed(incident: str, name: str, first_step: float, stopped: float, lost: LostTime, **job: Any) -> dict[str, Any]:
    return {
        "incident_id": incident,
        "job": {"kind": "Job", "namespace": job.get("namespace", "ns"), "name": name, "uid": "u"},
        "stopped_at": at(stopped).isoformat().replace("+00:00", "Z"),
        "first_step_at": at(first_step).isoformat().replace("+00:00", "Z"),
        "work_lost": {"steps": 7, "seconds": 1.0, "step_at_fault": 9, "checkpoint_step": 2, "step_time_s": None},
        "lost_s": lost.as_data(),
        "training": {"first_step_at": T0.isoformat().replace("+00:00", "Z")},
    }


def test_fold_adds_up_incidents_per_job_once_each() -> None:
    fold = GoodputFold()
    one = _resumed("i1", "a", 100, 50, LostTime(1, 2, 3, 4, 5))
    assert fold.add(one) is None
    assert fold.add(one) is None  # the same event read twice
    assert fold.add(_resumed("i2", "a", 300, 200, LostTime(0, 0, 10, 0, 0))) is None
    assert fold.add(_resumed("i3", "b", 300, 200, LostTime(0, 0, 0, 0, 60), namespace="other")) is None
    rows = fold.report(at(1000))
    assert [(x.namespace, x.name) for x in rows] == [("ns", "a"), ("other", "b")]
    a = rows[0].summary
    assert (a.wall_s, a.lost_s, a.productive_s, a.incidents, a.work_lost_steps) == (1000.0, 25.0, 975.0, 2, 14)
    assert a.lost_by_cause == {"detection": 1, "restart": 2, "rescheduling": 13, "initialisation": 4,
                               "recomputation": 5}  # fmt: skip
    assert rows[0].as_data()["running_share"] == 0.975
    assert [x.name for x in fold.report(at(1000), namespace="other")] == ["b"]
    since = fold.report(at(1000), since=at(150), namespace="ns")[0].summary
    assert (since.wall_s, since.lost_s, since.incidents) == (850.0, 10.0, 1)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"lost_s": None}, "lost_s", id="an-earlier-agents-event"),
        pytest.param({"incident_id": ""}, "incident_id", id="no-incident"),
        pytest.param({"stopped_at": "yesterday"}, "stopped_at", id="bad-time"),
        pytest.param({"stopped_at": "2025-03-01T12:00:00"}, "stopped_at", id="naive-time"),
        pytest.param({"job": {"name": "a"}}, "job", id="no-namespace"),
        pytest.param({"training": {}}, "first_step_at", id="no-first-step"),
    ],
)
def test_fold_refuses_an_event_it_cannot_read(change: dict[str, Any], field: str) -> None:
    fold = GoodputFold()
    data = {**_resumed("i1", "a", 100, 50, LostTime()), **change}
    err = fold.add(data)
    assert err is not None
    assert err.field == field
    assert fold.rejected == 1
    assert fold.report(at(1000)) == []


def test_fold_refuses_negative_lost_seconds() -> None:
    data = _resumed("i1", "a", 100, 50, LostTime())
    data["lost_s"]["restart_s"] = -1
    err = GoodputFold().add(data)
    assert err is not None
    assert err.field == "restart_s"
