"""The soak's invariant 8 (testbed/soak/checks.py ``check_progress``): no hang action on a job that was
progressing, and exactly one per stall of the job the soak hangs on purpose."""

from __future__ import annotations

from testbed.soak.checks import Life, Observed, Record, check_all, check_progress
from testbed.soak.runner import BOUNDS
from testbed.soak.schedule import ACTING_LEVELS

NS = "soak-abc"
TIMEOUT = 40.0


def _hung(job: str, t: float, id_: str) -> Record:
    return Record(0, int(t), "training.recoveries", f"uid-{job}", id_, "job.hung", f"{NS}/{job}", t, t)


def _steps(until: float, *, every: float = 1.0, start: float = 0.0) -> list[tuple[float, int]]:
    out, t, step = [], start, 0
    while t <= until:
        step += 1
        out.append((t, step))
        t += every
    return out


def test_one_hang_per_stall_of_the_hung_job_and_none_elsewhere_holds() -> None:
    steps = {"job-0": _steps(200), "job-hung": _steps(15)}
    records = [_hung("job-hung", 15 + TIMEOUT + 0.6, "e1"), _hung("job-hung", 15 + TIMEOUT + 0.6, "e1")]  # re-sent
    violations, hangs = check_progress(
        records, steps, [15.0], [Life("a", 1, 0.0)], namespace=NS, hung_job="job-hung", timeout_s=TIMEOUT
    )
    assert violations == []
    assert hangs == 1


def test_a_hang_on_a_job_that_stepped_within_its_timeout_is_a_violation() -> None:
    steps = {"job-0": _steps(200), "job-hung": _steps(15)}
    records = [_hung("job-hung", 56.0, "e1"), _hung("job-0", 120.0, "e2")]
    violations, _ = check_progress(records, steps, [15.0], namespace=NS, hung_job="job-hung", timeout_s=TIMEOUT)
    assert [v.invariant for v in violations] == ["progress"]
    assert "job-0 at t=120.0s" in violations[0].detail
    assert "last at t=120.0s" in violations[0].detail


def test_a_hang_just_past_the_timeout_holds_and_one_just_before_it_does_not() -> None:
    steps = {"job-hung": _steps(15)}
    ok, _ = check_progress([_hung("job-hung", 55.05, "e")], steps, [15.0], namespace=NS, hung_job="job-hung",
                           timeout_s=TIMEOUT)  # fmt: skip
    early, _ = check_progress([_hung("job-hung", 54.5, "e")], steps, [15.0], namespace=NS, hung_job="job-hung",
                              timeout_s=TIMEOUT)  # fmt: skip
    assert ok == []
    assert [v.invariant for v in early] == ["progress"]


def test_the_hung_job_without_its_hang_or_with_two_is_a_violation() -> None:
    steps = {"job-hung": _steps(15)}
    lives = [Life("a", 1, 0.0), Life("b", 2, 1.0)]  # both agents saw it step: either must call it hung
    none, _ = check_progress([], steps, [15.0], lives, namespace=NS, hung_job="job-hung", timeout_s=TIMEOUT)
    two, _ = check_progress(
        [_hung("job-hung", 60.0, "e1"), _hung("job-hung", 70.0, "e2")], steps, [15.0], lives, namespace=NS,
        hung_job="job-hung", timeout_s=TIMEOUT,
    )  # fmt: skip
    assert "0 job.hung event(s)" in none[0].detail
    assert "(expected one)" in none[0].detail
    assert "2 job.hung event(s)" in two[0].detail


def test_a_missing_hang_is_excused_only_by_an_agent_started_after_the_stall() -> None:
    steps = {"job-hung": _steps(15)}
    restarted = [Life("a", 1, 0.0, 20.0, killed=True), Life("a", 3, 21.5), Life("b", 2, 1.0)]
    ok, _ = check_progress([], steps, [15.0], restarted, namespace=NS, hung_job="job-hung", timeout_s=TIMEOUT)
    late, _ = check_progress(
        [], steps, [15.0], [Life("a", 1, 0.0), Life("a", 3, 15.0 + TIMEOUT + 5)], namespace=NS, hung_job="job-hung",
        timeout_s=TIMEOUT,
    )  # fmt: skip
    two, _ = check_progress(
        [_hung("job-hung", 60.0, "e1"), _hung("job-hung", 70.0, "e2")], steps, [15.0], restarted, namespace=NS,
        hung_job="job-hung", timeout_s=TIMEOUT,
    )  # fmt: skip
    assert ok == []
    assert [v.invariant for v in late] == ["progress"]
    assert "(expected one at most)" in two[0].detail


def test_check_all_names_the_progress_invariant_only_when_asked() -> None:
    obs = Observed(steps={"job-0": _steps(100)}, records=[_hung("job-0", 50.0, "e1")])
    assert "progress" not in check_all(obs, BOUNDS, acting_levels=ACTING_LEVELS).invariants_failed()
    verdict = check_all(obs, BOUNDS, acting_levels=ACTING_LEVELS, progress=(NS, "job-hung", TIMEOUT))
    assert "progress" in verdict.invariants_failed()
    assert verdict.figures["hang_events"] == 1
