"""Incidents end when the job's controller ends the job (issue 13, C.10): Volcano marks a job Failed at
``retryCount == maxRetry`` (v1.14 ``pkg/controllers/job/state/restarting.go``), after which the job never runs
again, so an incident waiting for it fails at once instead of at the recovery deadline. Pure logic."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from support import factories
from test_budgets import T0, _fault, _job

from agent.core.cluster import FaultScheduling, JobKind, PodRecord
from agent.core.incidents import IncidentStore, Phase
from agent.core.policy import Action, Decision, controller_ended_job


@pytest.mark.parametrize(
    ("kind", "phase", "retry_count", "words"),
    [
        pytest.param(JobKind.VOLCANO, "Failed", 3, ("Failed", "retryCount 3", "maxRetry 3"), id="volcano-failed"),
        pytest.param(JobKind.VOLCANO, "Aborted", 0, ("Aborted",), id="volcano-aborted"),
        pytest.param(JobKind.VOLCANO, "Terminated", 0, ("Terminated",), id="volcano-terminated"),
        pytest.param(JobKind.ASCEND, "Failed", 0, ("Failed", "backoffLimit"), id="ascendjob-failed"),
        pytest.param(JobKind.VOLCANO, "Running", 3, None, id="running"),
        pytest.param(JobKind.VOLCANO, "Restarting", 3, None, id="restarting"),
        pytest.param(JobKind.VOLCANO, "Pending", 0, None, id="pending"),
    ],
)
def test_controller_ended_job(kind: JobKind, phase: str, retry_count: int, words: tuple[str, ...] | None) -> None:
    detail = controller_ended_job(_job(kind=kind, phase=phase, retry_count=retry_count))
    if words is None:
        assert detail is None
    else:
        assert detail is not None
        for w in words:
            assert w in detail, detail


def _pod(created: datetime) -> PodRecord:
    return factories.pod("job-w-0", uid="uid-new", node="n2", chips=(), rank=None, created_at=created)


RESTART = Decision(Action.RESTART_JOB, "chip", mode=FaultScheduling.FORCE, counts_restart=True)


def test_volcano_failing_the_job_fails_the_incident_at_once() -> None:
    store = IncidentStore()
    job = _job()
    store.open(job, _fault(), RESTART, T0)
    store.restarting(job.uid, T0 + timedelta(seconds=1))
    failed = _job(phase="Failed", version="1", retry_count=3)
    inc = store.observe(failed, [], T0 + timedelta(seconds=5), 1800)
    assert inc is not None
    assert inc.phase is Phase.FAILED
    assert "Failed" in inc.detail
    assert "retryCount 3" in inc.detail


def test_restarting_job_is_not_failed_early() -> None:
    store = IncidentStore()
    job = _job()
    store.open(job, _fault(), RESTART, T0)
    store.restarting(job.uid, T0 + timedelta(seconds=1))
    assert store.observe(_job(phase="Restarting", version="1"), [], T0 + timedelta(seconds=5), 1800) is None
    assert store.observe(_job(phase="Pending", version="1"), [], T0 + timedelta(seconds=6), 1800) is None
    healthy = store.observe(_job(version="1"), [_pod(T0 + timedelta(seconds=3))], T0 + timedelta(seconds=7), 1800)
    assert healthy is not None
    assert healthy.phase is Phase.RECOVERED


def test_resubmit_of_a_failed_job_waits_for_the_new_job() -> None:
    """A resubmission (dry-run, or the old job still cached) sees the old Failed job of the same generation: that
    failure is the one being recovered from, not a new one."""
    store = IncidentStore()
    job = _job(phase="Failed", version="2", retry_count=3)
    store.open(job, _fault(), Decision(Action.RESUBMIT, "resubmit"), T0)
    store.restarting(job.uid, T0 + timedelta(seconds=1))
    assert store.observe(job, [], T0 + timedelta(seconds=5), 1800) is None
