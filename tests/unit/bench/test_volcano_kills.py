"""bench/volcano_kills.py: the kills of Volcano's job controller in its log (klog lines of v1.14.1 at ``-v=3``, as
the testbed's controller wrote them in bench_e2e runs of 2026-12-06) and the pods of the old version each left."""

from __future__ import annotations

from types import ModuleType

import pytest
from support.bench_scripts import load_bench_script


def _klog(at: str, where: str, text: str) -> str:
    """One klog line as the controller writes it (pid 26975 of those runs)."""
    return f"I1206 {at}   26975 {where}] {text}"


def _execute(at: str, action: str, job: str, phase: str) -> str:
    state = f"*state.{phase.lower()}State"
    return _klog(at, "job_controller.go:385", f"Execute <{action}> on Job <bench-e2e/{job}> in <{phase}> by <{state}>.")


def _marked(at: str, pod: str) -> str:
    return _klog(at, "job_controller_actions.go:189", f'"Marked Pod as out-of-sync" Pod="bench-e2e/{pod}" UID="u"')


def _kill(at: str, job: str, version: int) -> str:
    return _klog(at, "job_controller_actions.go:84", f"Killing Job <bench-e2e/{job}>, current version {version}")


def _finished(at: str, job: str, version: int) -> str:
    text = f"Finished Job <bench-e2e/{job}> killing, current version {version}"
    return _klog(at, "job_controller_actions.go:87", text)


# e2e-6: a sync re-created both deleted pods (the job turned Pending), the kill saw only test-1 in its cache;
# e2e-2: a kill in Running, its pods already gone (no sync before it re-created them); e2e-0 (another worker,
# interleaved): a kill that stopped both pods; e2e-9: a kill the log ends inside
LOG = [
    _execute("01:18:48.215636", "SyncJob", "e2e-6", "Running"),
    _execute("01:18:48.398800", "RestartJob", "e2e-6", "Pending"),
    _kill("01:18:48.398867", "e2e-6", 18),
    _execute("01:18:48.398900", "RestartJob", "e2e-0", "Pending"),
    _kill("01:18:48.398950", "e2e-0", 7),
    _marked("01:18:48.401000", "e2e-0-default-test-0"),
    _marked("01:18:48.402000", "e2e-6-default-test-1"),
    _marked("01:18:48.403000", "e2e-0-default-test-1"),
    _finished("01:18:48.500000", "e2e-0", 7),
    _finished("01:18:48.510000", "e2e-6", 18),
    _execute("01:00:19.327460", "RestartJob", "e2e-2", "Running"),
    _kill("01:00:19.327502", "e2e-2", 0),
    _finished("01:00:19.653535", "e2e-2", 0),
    _execute("01:23:56.900000", "RestartJob", "e2e-9", "Pending"),
    _kill("01:23:56.906534", "e2e-9", 23),
    _klog("01:23:56.907000", "job_controller_actions.go:195", "Pod <bench-e2e/e2e-9-default-test-0> is terminating"),
]


@pytest.fixture(scope="module")
def tool() -> ModuleType:
    return load_bench_script("volcano_kills.py", "_volcano_kills_under_test")


def test_each_finished_kill_with_the_phase_of_its_restart_and_the_pods_it_stopped(tool: ModuleType) -> None:
    found = tool.kills(LOG)
    assert [(k.job, k.version, k.phase, k.marked, k.terminating) for k in found] == [
        ("bench-e2e/e2e-0", 7, "Pending", ["e2e-0-default-test-0", "e2e-0-default-test-1"], []),
        ("bench-e2e/e2e-6", 18, "Pending", ["e2e-6-default-test-1"], []),
        ("bench-e2e/e2e-2", 0, "Running", [], []),
    ]
    assert found[1].at == "01:18:48.398867"


def test_left_behind_counts_the_pods_a_kill_in_pending_did_not_stop(tool: ModuleType) -> None:
    e2e0, e2e6, e2e2 = tool.kills(LOG)
    assert (e2e0.left_behind(2), e2e6.left_behind(2), e2e2.left_behind(2)) == (0, 1, 0)
    assert e2e6.left_behind(4) == 3
    terminating = tool.Kill("ns/j", "t", 1, "Pending", [], ["j-default-test-0"])
    assert terminating.left_behind(2) == 1  # a pod found terminating was stopped already
