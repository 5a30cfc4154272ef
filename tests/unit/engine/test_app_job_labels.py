"""A malformed ``fault-retry-times`` keeps the job watched and is reported once (issue 13 B8).

The job source keeps the job with a business budget of 0 (tests/unit/sources/test_sources.py); the engine says so once:
one log line and one ``input_rejected`` count per (job, value) on every replica, one ``job.misconfigured`` event
from the leader (again after a new term, with the same deterministic id).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client as k8s
from structlog.testing import capture_logs
from support import factories
from support.factories import change
from support.fakes import InstantWriter, ListSink

from agent.core.cluster import FaultScheduling, JobRecord
from agent.engine.recovery import RecoveryEngine
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class Counting:
    def __init__(self) -> None:
        self.rejected: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None

    def input_rejected(self, source: str, reason: str) -> None:
        self.rejected.append((source, reason))


def _job(name: str, retry_label: str | None, retry_times: int | None) -> JobRecord:
    labels = (("fault-scheduling", "force"),) + ((("fault-retry-times", retry_label),) if retry_label else ())
    return factories.job(
        name, labels=labels, fault_scheduling=FaultScheduling.FORCE, fault_retry_times=retry_times, created_at=NOW
    )


async def test_a_bad_fault_retry_times_is_logged_counted_and_published_once() -> None:
    state = ClusterState()
    state.apply(change("vcjobs", "ns/bad", _job("bad", "abc", 0)))
    state.apply(change("vcjobs", "ns/good", _job("good", "3", 3)))
    leader = [True]
    sink, metrics = ListSink(), Counting()
    api = k8s.ApiClient()
    try:
        settings = Settings.model_validate({"kafka": {"enabled": False}})
        engine = RecoveryEngine(
            settings, state, InstantWriter(api), events=sink, metrics=metrics,  # type: ignore[arg-type]
            is_leader=lambda: leader[0], clock=SystemClock(),
        )  # fmt: skip
        with capture_logs() as logs:
            for _ in range(5):
                await engine.tick(NOW)
                await engine.idle()
            state.apply(change("vcjobs", "ns/bad", _job("bad", "-1", 0)))  # a new bad value: reported again
            await engine.tick(NOW)
            await engine.idle()
            leader[0] = False
            await engine.tick(NOW)
            await engine.idle()
            leader[0] = True  # a new term publishes again (the same event id: consumers de-duplicate)
            await engine.tick(NOW)
            await engine.idle()
        lines = [e for e in logs if e["event"] == "job label unusable; the job is still watched"]
        assert [(e["job"], e["value"]) for e in lines] == [("ns/bad", "abc"), ("ns/bad", "-1")]
        assert metrics.rejected == [("Job", "bad-fault-retry-times")] * 2
        published = [(e.get_type(), e.get_data()["value"]) for e in sink.events]
        assert published == [(ev.JOB_MISCONFIGURED, "abc"), (ev.JOB_MISCONFIGURED, "-1"), (ev.JOB_MISCONFIGURED, "-1")]
        assert sink.events[1].get_id() == sink.events[2].get_id()
        assert sink.events[0].get_data()["job"]["uid"] == "uid-bad"
    finally:
        await api.close()


async def test_the_label_check_reads_only_the_jobs_that_changed(monkeypatch: Any) -> None:
    """Issue 39 (no per-tick work in proportion to the cluster): a tick reads the labels of the jobs that changed
    since the last one and of those still misconfigured, not every watched job."""
    import agent.engine.job_checks as job_checks

    read: list[str | None] = []
    real = job_checks.fault_retry_times_problem

    def counting(value: str | None) -> str | None:
        read.append(value)
        return real(value)

    monkeypatch.setattr(job_checks, "fault_retry_times_problem", counting)
    state = ClusterState()
    for i in range(200):
        state.apply(change("vcjobs", f"ns/good-{i}", _job(f"good-{i}", "3", 3)))
    state.apply(change("vcjobs", "ns/bad", _job("bad", "abc", 0)))
    sink = ListSink()
    api = k8s.ApiClient()
    try:
        settings = Settings.model_validate({"kafka": {"enabled": False}})
        engine = RecoveryEngine(
            settings, state, InstantWriter(api), events=sink, metrics=Counting(),  # type: ignore[arg-type]
            is_leader=lambda: True, clock=SystemClock(),
        )  # fmt: skip
        await engine.tick(NOW)
        await engine.idle()
        assert len(read) == 201  # the first tick reads every job once (all were added)
        read.clear()
        for _ in range(3):
            await engine.tick(NOW)
            await engine.idle()
        assert read == ["abc"] * 3  # unchanged jobs are not read again; the misconfigured one is, until it is fixed
        read.clear()
        state.apply(change("vcjobs", "ns/good-7", _job("good-7", "4", 4)))
        state.apply(change("vcjobs", "ns/bad", _job("bad", "5", 5)))  # fixed
        await engine.tick(NOW)
        await engine.tick(NOW)
        await engine.idle()
        assert sorted(map(str, read)) == ["4", "5"]
        assert [e.get_data()["value"] for e in sink.events if e.get_type() == ev.JOB_MISCONFIGURED] == ["abc"]
    finally:
        await api.close()
