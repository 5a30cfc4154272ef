"""End of the restart budget on a hardware fault (issue 35, defect 5): the faulty pods are deleted so that the
job's controller fails the job visibly, as after MindCluster's plugin (internal/rescheduling/job.go
``isFaultJobCanRestarted`` checks only business retries; the controller's limit is the controller's), instead of
an "abort" that leaves the job running on a chip that is out. The event says why."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest
from support import factories
from support.factories import change
from support.fakes import FakeWriter, ListSink

from agent.core.cluster import FaultScheduling, JobKind, JobRecord, JobRef, PodRecord
from agent.core.correlate import JobHit
from agent.core.faults import FaultKind, FaultLevel, ObjectRef
from agent.core.policy import Action, RetryLedger, decide
from agent.engine.ports import ClusterWriterPort
from agent.engine.recovery import RecoveryEngine
from agent.runtime.clock import SystemClock
from agent.settings import PolicySettings, Settings
from agent.sinks import events as ev
from agent.sources.state import ClusterState

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
F = FaultScheduling


def _acjob(**kw: object) -> JobRecord:
    job = factories.job(
        kind=JobKind.ASCEND, labels=(("fault-scheduling", "force"),), fault_scheduling=F.FORCE, max_retry=1,
        retry_count=1, version="1", min_available=None, created_at=NOW,
    )  # fmt: skip
    return replace(job, max_retry_from="spec.runPolicy.backoffLimit", **kw)  # type: ignore[arg-type]


def _pods(kind: JobKind = JobKind.ASCEND) -> tuple[PodRecord, ...]:
    return (factories.pod("job-w-1", job_kind=kind, created_at=NOW), factories.pod("job-w-0", job_kind=kind))


@pytest.mark.parametrize(
    ("job", "fault", "stop"),
    [
        pytest.param(_acjob(), factories.fault(at=NOW), ("job-w-0", "job-w-1"), id="ascendjob-chip"),
        pytest.param(
            _acjob(fault_scheduling=F.GRACE), factories.fault(at=NOW), ("job-w-0", "job-w-1"), id="ascendjob-chip-grace"
        ),
        pytest.param(
            replace(_acjob(), kind=JobKind.VOLCANO, max_retry=3, retry_count=2, restarts_on_eviction=True),
            factories.fault(at=NOW),
            ("job-w-0", "job-w-1"),
            id="volcano-restarting-on-eviction",
        ),
        # a Volcano Job without PodEvicted -> RestartJob would only get its pod re-created, uncounted: no write
        pytest.param(
            replace(_acjob(), kind=JobKind.VOLCANO, max_retry=3, retry_count=2),
            factories.fault(at=NOW),
            (),
            id="volcano-command-job",
        ),
        pytest.param(
            _acjob(),
            factories.fault(
                kind=FaultKind.DISRUPTION,
                chips=(),
                reason="Evicted",
                pod=ObjectRef("Pod", "ns", "job-w-1", "uid-job-w-1"),
                at=NOW,
            ),
            (),
            id="disruption",
        ),
        pytest.param(_acjob(), factories.fault(level=FaultLevel.PRE_SEPARATE, at=NOW), None, id="preseparate"),
    ],
)
def test_end_of_budget_stops_the_faulty_pods(job: JobRecord, fault: object, stop: tuple[str, ...] | None) -> None:
    hit = JobHit(job=job, pods=_pods(job.kind), actionable=True)
    d = decide(fault, hit, RetryLedger(), PolicySettings(), NOW)  # type: ignore[arg-type]
    if stop is None:
        assert d.action is Action.NONE
        return
    assert d.action is Action.ABORT, d.reason
    assert d.stop_pods == stop
    assert d.restarts_left == 0
    if stop:
        assert d.mode is job.fault_scheduling
        assert "deleting the faulty pod(s) job-w-0, job-w-1" in d.reason
        assert "fails the job visibly" in d.reason


def _state() -> ClusterState:
    state = ClusterState()
    state.apply(change("nodes", "n1", factories.node(at=NOW)))
    state.apply(change("acjobs", "ns/job", _acjob(version="", retry_count=0)))
    for name in ("job-w-0", "job-w-1"):
        pod = factories.pod(name, job=JobRef(JobKind.ASCEND, "ns", "job", "uid-job", "1"), created_at=NOW)
        state.apply(change("pods", f"ns/{name}", pod))
    return state


async def test_the_abort_deletes_the_faulty_pods_and_says_who_fails_the_job() -> None:
    """Regression: with backoffLimit 1 and the pods at version 1 (one restart made, by anyone) the agent
    published budget-exhausted and left the job running on the faulty chip; the reason named no real limit."""
    sink = ListSink()
    writer = FakeWriter()
    port: ClusterWriterPort = writer  # type: ignore[assignment]
    settings = Settings.model_validate({"kafka": {"enabled": False}})
    engine = RecoveryEngine(settings, _state(), port, events=sink, clock=SystemClock())
    await engine.handle_fault(factories.fault(at=NOW), NOW)
    await engine.idle()
    (failed,) = [ev.as_json(e) for e in sink.events if ev.as_json(e)["type"] == ev.RECOVERY_FAILED]
    assert failed["data"]["reason"] == "budget-exhausted"
    detail = failed["data"]["detail"]
    assert "the Ascend Operator fails the job at pod version > spec.runPolicy.backoffLimit 1; version is 1" in detail
    assert "deleting the faulty pod(s) job-w-0, job-w-1 (force)" in detail
    assert ("delete_pods", "AscendJob/ns/job") in writer.calls
