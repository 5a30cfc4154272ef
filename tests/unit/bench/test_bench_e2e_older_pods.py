"""bench/bench_e2e.py's count of the pods that survived a restart under an older ``volcano.sh/job-version`` than
their job's ``status.version`` (``_older_pods``), and of the agent's log lines saying it restarted such a job with a
Command (``_log_count``)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_bench_script("bench_e2e.py", "_bench_e2e_older_pods_under_test")


def _job(version: int | None) -> dict[str, Any]:
    return {"metadata": {}, "status": {} if version is None else {"version": version}}


def _pod(job: str, i: int, version: str | None) -> dict[str, Any]:
    notes = {} if version is None else {"volcano.sh/job-version": version}
    return {
        "metadata": {"name": f"{job}-default-test-{i}", "labels": {"volcano.sh/job-name": job}, "annotations": notes}
    }


def test_older_pods_counts_each_pod_below_its_jobs_version_and_the_jobs_all_of_whose_pods_are(
    bench: ModuleType,
) -> None:
    jobs = {"a": _job(4), "b": _job(4), "c": _job(4), "d": _job(None), "e": _job(10)}
    pods = [
        _pod("a", 0, "4"), _pod("a", 1, "4"),  # current
        _pod("b", 0, "3"), _pod("b", 1, "4"),  # one survivor: b's next deletion is still counted
        _pod("c", 0, "3"), _pod("c", 1, "2"),  # every pod older: c's deletion would only sync
        _pod("d", 0, "0"), _pod("d", 1, None),  # no status.version yet (0), a pod without the annotation
        _pod("e", 0, "9"), _pod("e", 1, "10"),  # numbers, not text
    ]  # fmt: skip
    assert bench._older_pods(jobs, pods, ["a", "b", "c", "d", "e"]) == (4, 1)
    assert bench._older_pods(jobs, pods, ["a"]) == (0, 0)


def test_log_count_counts_the_lines_with_the_text_and_zero_for_a_missing_file(
    bench: ModuleType, tmp_path: Path
) -> None:
    log = tmp_path / "agent.log"
    log.write_text(f"x\n{bench.OUTDATED_COMMAND} job=a\ny {bench.OUTDATED_COMMAND}\n")
    assert bench._log_count(log, bench.OUTDATED_COMMAND) == 2
    assert bench._log_count(tmp_path / "missing.log", bench.OUTDATED_COMMAND) == 0


def test_log_count_counts_only_what_this_run_appended(bench: ModuleType, tmp_path: Path) -> None:
    """The agent's log file is shared by the runs of one testbed (it is appended to): a run counts the lines after
    the offset it noted before its agent started, not an earlier run's warnings (session 23: a run of the old code,
    which has no such warning, reported the 3 of the run before it)."""
    log = tmp_path / "agent.log"
    log.write_text(f"{bench.OUTDATED_COMMAND} job=a\n{bench.OUTDATED_COMMAND} job=b\n")
    start = log.stat().st_size
    with log.open("a") as f:
        f.write(f"started\n{bench.OUTDATED_COMMAND} job=c\n")
    assert bench._log_count(log, bench.OUTDATED_COMMAND, start) == 1
    assert bench._log_count(log, bench.OUTDATED_COMMAND) == 3


def test_the_bench_looks_for_the_agents_own_warning(bench: ModuleType) -> None:
    """The text the benchmark counts is in the agent's warning (agent.engine.sending)."""
    sending = Path(__file__).resolve().parents[3] / "agent" / "engine" / "sending.py"
    assert bench.OUTDATED_COMMAND in " ".join(sending.read_text().split())
