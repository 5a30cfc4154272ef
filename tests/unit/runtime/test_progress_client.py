"""The heartbeat client (agent.training.progress_client) stands alone and writes what the agent reads
(agent.core.progress, agent.sources.leases). Its writes against the real apiserver are exercised by
tests/e2e/test_training_hang.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import agent.core.progress as core
import agent.training.progress_client as client
from agent.core.faults import Rejection
from agent.core.progress import Progress, parse_progress
from agent.core.straggler import parse_rank_step_times
from agent.sources.leases import convert_lease
from agent.training.progress_client import ProgressReporter


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def reporter(ticks: Ticks | None = None) -> ProgressReporter:
    return ProgressReporter("llama", "team-a", "llama-worker-0", server="https://127.0.0.1:1", token="t",
                            interval_s=10, monotonic=ticks or Ticks())  # fmt: skip


def test_the_client_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(client.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {"__future__", "json", "os", "ssl", "sys", "threading", "time", "urllib", "collections",
                        "datetime", "pathlib", "typing"}  # fmt: skip


@pytest.mark.parametrize(
    "name",
    ["PROGRESS_LABEL", "PROGRESS_LEASE", "LEASE_JOB_LABEL", "LEASE_PREFIX", "STEP_ANNOTATION", "STEP_TIME_ANNOTATION",
     "CHECKPOINT_STEP_ANNOTATION", "CHECKPOINTING_ANNOTATION", "RANK_STEP_TIMES_ANNOTATION"],
)  # fmt: skip
def test_the_client_and_the_agent_spell_the_lease_alike(name: str) -> None:
    assert getattr(client, name) == getattr(core, name)


def _read_back(body: dict[str, object]) -> Progress | Rejection:
    obj = {**body, "metadata": {**body["metadata"], "uid": "u", "resourceVersion": "1"}}  # type: ignore[dict-item]
    rec = convert_lease(obj)
    assert not isinstance(rec, Rejection)
    assert rec.name == "fault-agent-progress-llama"
    assert rec.job == "llama"
    assert rec.holder == "llama-worker-0"
    assert rec.duration_s == 30
    assert rec.renew_time is not None
    return parse_progress(rec)


def test_nothing_is_written_before_the_first_step() -> None:
    assert reporter().body() is None
    assert reporter().write() is False


def test_what_the_client_writes_the_agent_reads() -> None:
    ticks = Ticks()
    r = reporter(ticks)
    r.step(10)
    ticks.t += 4.0
    r.step(12)  # 2 s per step
    body = r.body()
    assert body is not None
    assert _read_back(body) == Progress(12, 2.0, None, False)
    ticks.t += 12.0
    r.step(15, checkpoint_step=14)  # 4 s per step: the average moves a fifth of the way
    r._checkpointing = True  # checkpoint_started() without its write
    body = r.body()
    assert body is not None
    assert _read_back(body) == Progress(15, 2.4, 14, True)


def test_a_failed_write_never_raises_into_the_training_loop(capsys: pytest.CaptureFixture[str]) -> None:
    r = reporter()
    r.step(1)
    assert r.flush() is False  # nothing listens on port 1
    assert r.flush() is False
    assert r.failures == 2
    assert capsys.readouterr().err.count("writing Lease team-a/fault-agent-progress-llama failed") == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"job": ""}, "must not be empty"), ({"interval_s": 0.5}, "at least 1 second")],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"job": "j", "namespace": "n", "pod": "p", "server": "https://x", "token": "t"}
    with pytest.raises(ValueError, match=message):
        ProgressReporter(**{**args, **kwargs})  # type: ignore[arg-type]


def test_rank_step_times_ride_on_the_heartbeat_and_the_agent_reads_them() -> None:
    r = reporter()
    r.step(3)
    assert core.RANK_STEP_TIMES_ANNOTATION not in r.body()["metadata"]["annotations"]  # type: ignore[index]
    r.rank_step_times([0.51234, 1.5, 12345.678])
    body = r.body()
    assert body is not None
    obj = {**body, "metadata": {**body["metadata"], "uid": "u", "resourceVersion": "1"}}
    rec = convert_lease(obj)
    assert not isinstance(rec, Rejection)
    text = rec.annotation(core.RANK_STEP_TIMES_ANNOTATION)
    assert text is not None
    assert parse_rank_step_times(text) == pytest.approx((0.5123, 1.5, 12350.0))


@pytest.mark.parametrize("times", [[], [1.0, 0.0], [1.0, -1.0], [float("nan")], [float("inf")]])
def test_unusable_rank_step_times_are_refused(times: list[float]) -> None:
    with pytest.raises(ValueError, match="positive finite"):
        reporter().rank_step_times(times)
