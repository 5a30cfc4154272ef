"""bench/bench_e2e.py's restart-to-training figures: the job watch's 'Running again' per fault (RunningAgain), the
agent's recovery.resumed and the Lease watch's first step matched to a fault, and the per-fault spreads."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from support.bench_scripts import load_bench_script

from testbed.agent_runner import Received
from testbed.observe import Seen

UID = "0b7f6f0e-0000-4000-8000-000000000001"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench_script("bench_e2e.py", "_bench_e2e_under_test")


def _job(name: str, phase: str, at: float, since: str = "") -> Seen:
    return Seen("MODIFIED", {"metadata": {"name": name}, "phase": phase, "ours": "[]", "since": since}, at)


def _fault(bench: ModuleType, job: str, at: float) -> Any:
    return bench.Injected(job, UID, "node-1", at, 0, at + 0.01)


def test_running_again_needs_the_job_to_leave_running_after_the_fault(bench: ModuleType) -> None:
    tracker = bench.RunningAgain()
    events = [_job("a", "Running", 9.0), _job("a", "Restarting", 9.5)]  # before the fault: not this restart
    assert tracker.feed(events) == []
    item = _fault(bench, "a", 10.0)
    tracker.expect(item, events)
    events += [_job("a", "Running", 10.1), _job("b", "Pending", 10.2)]  # still Running: the restart not begun
    assert tracker.feed(events) == []
    events += [_job("a", "Restarting", 10.3), _job("a", "Pending", 11.0), _job("a", "Running", 12.5)]
    done = tracker.feed(events)
    assert [(i.job, s.at) for i, s in done] == [("a", 12.5)]
    events.append(_job("a", "Running", 13.0))  # answered once: a later event is not this fault's
    assert tracker.feed(events) == []


def test_running_again_counts_a_restart_seen_before_the_fault_was_expected(bench: ModuleType) -> None:
    """The job can leave Running before the injector's PUT is answered: the events already read at or after the
    fault's moment count when the fault is expected."""
    tracker = bench.RunningAgain()
    events = [_job("a", "Running", 9.0), _job("a", "Restarting", 10.05)]
    tracker.feed(events)
    tracker.expect(_fault(bench, "a", 10.0), events)
    events.append(_job("a", "Running", 11.0))
    assert [s.at for _, s in tracker.feed(events)] == [11.0]


def test_running_again_follows_each_job_apart(bench: ModuleType) -> None:
    tracker = bench.RunningAgain()
    events: list[Seen] = []
    tracker.expect(_fault(bench, "a", 1.0), events)
    tracker.expect(_fault(bench, "b", 1.0), events)
    events += [_job("a", "Restarting", 2.0), _job("b", "Running", 2.1), _job("a", "Running", 3.0)]
    assert [i.job for i, _ in tracker.feed(events)] == ["a"]
    events += [_job("b", "Aborting", 4.0), _job("b", "Running", 5.0)]
    assert [i.job for i, _ in tracker.feed(events)] == ["b"]


def test_rfc3339_s(bench: ModuleType) -> None:
    assert bench.rfc3339_s("1970-01-01T00:01:01Z") == 61.0
    assert bench.rfc3339_s("1970-01-01T00:00:01.250000+00:00") == 1.25
    assert bench.rfc3339_s("") is None
    assert bench.rfc3339_s("yesterday") is None


def _resumed(uid: str, first_step_at: str, kind: str = "io.faultagent.recovery.resumed.v1") -> Received:
    data = {"job": {"uid": uid, "namespace": "bench-e2e", "name": "a"}, "first_step_at": first_step_at}
    return Received("training.recoveries", uid, {}, {"type": kind, "data": data}, 0)


def test_resumed_for_takes_the_agents_first_step_of_that_job_after_the_fault(bench: ModuleType) -> None:
    item = _fault(bench, "a", 100.0)
    assert bench.resumed_for(_resumed(UID, "1970-01-01T00:01:42.5Z"), item) == 102.5
    assert bench.resumed_for(_resumed(UID, "1970-01-01T00:01:39Z"), item) is None  # an earlier restart's
    assert bench.resumed_for(_resumed("other", "1970-01-01T00:01:42Z"), item) is None
    kind = "io.faultagent.recovery.succeeded.v1"
    assert bench.resumed_for(_resumed(UID, "1970-01-01T00:01:42Z", kind), item) is None


def _lease(job: str, step: str, at: float) -> Seen:
    return Seen("MODIFIED", {"metadata": {"name": f"fault-agent-progress-{job}"}, "job": job, "step": step}, at)


def test_step_seen_is_the_resumed_step_written_after_it_was_sent(bench: ModuleType) -> None:
    item = _fault(bench, "a", 100.0)
    assert not bench.step_seen(_lease("a", "11", 103.0), item)  # nothing resumed yet
    item.resume_step, item.resume_sent = 11, 102.0
    assert bench.step_seen(_lease("a", "11", 102.04), item)
    assert not bench.step_seen(_lease("a", "11", 101.9), item)  # the same step an earlier generation wrote
    assert not bench.step_seen(_lease("a", "17", 102.04), item)  # the step the fault stopped at
    assert not bench.step_seen(_lease("b", "11", 102.04), item)


def test_after_fault_and_spread(bench: ModuleType) -> None:
    a, b, c = _fault(bench, "a", 10.0), _fault(bench, "b", 20.0), _fault(bench, "c", 30.0)
    a.running_at, a.terminating_at = 12.5, 10.5
    b.running_at = 21.0
    assert bench.after_fault([a, b, c], "running_at") == [2500.0, 1000.0]
    assert bench.after_fault([a, b, c], "running_at", "terminating_at") == [2000.0]
    assert bench.spread([2500.0, 1000.0]) == "p50 1000 ms, p99 2500 ms, max 2500 ms (2)"
    assert bench.spread([]) == "none seen"
