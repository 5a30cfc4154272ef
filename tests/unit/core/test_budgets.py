"""Retry budgets that agree with the job's controller.

Volcano v1.14 (pkg/controllers/job/state/running.go, pending.go) adds one to ``status.retryCount`` for every
RestartJob / RestartTask / RestartPod, whoever asked, and the Restarting state (state/restarting.go) marks the job
``Failed`` once ``retryCount >= spec.maxRetry``: a job with maxRetry M survives M - 1 restarts. The policy must
never promise a restart that makes Volcano fail the job (issue 13, C.9).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from support import factories

from agent.core.cluster import FaultScheduling, JobKind, JobRecord
from agent.core.correlate import JobHit
from agent.core.faults import Fault, FaultKind, ObjectRef
from agent.core.incidents import IncidentStore
from agent.core.policy import Action, Decision, RetryLedger, decide
from agent.settings import PolicySettings

T0 = datetime(2025, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(seconds=2)


def _job(**kw: object) -> JobRecord:
    base = factories.job(
        labels=(), fault_scheduling=FaultScheduling.FORCE, fault_retry_times=3, min_available=None, created_at=T0
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _fault(kind: FaultKind = FaultKind.CHIP, **kw: object) -> Fault:
    base = factories.fault(
        kind=kind,
        chips=("Ascend910-0",) if kind is FaultKind.CHIP else (),
        at=T0,
        reason="Evicted" if kind is FaultKind.DISRUPTION else "",
        pod=ObjectRef("Pod", "ns", "job-w-0", "uid-w-0") if kind is not FaultKind.CHIP else None,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _decide(fault: Fault, job: JobRecord, budgets: RetryLedger | None = None) -> Decision:
    hit = JobHit(job=job, pods=(), actionable=True)
    return decide(fault, hit, budgets or RetryLedger(), PolicySettings.model_validate({}), NOW)


CHIP, BUSINESS, DISRUPTION = FaultKind.CHIP, FaultKind.BUSINESS, FaultKind.DISRUPTION


@pytest.mark.parametrize(
    ("kind", "retry_count", "business_used", "expected", "restarts_left", "budget_left"),
    [
        # the run: maxRetry 3, fault-retry-times 3
        pytest.param(CHIP, 0, 0, Action.RESTART_JOB, 1, 1, id="chip-first-restart-one-left"),
        pytest.param(BUSINESS, 1, 0, Action.RESTART_JOB, 0, 0, id="business-after-chip-is-the-last"),
        pytest.param(BUSINESS, 2, 1, Action.ABORT, 0, 0, id="third-restart-would-fail-the-job"),
        pytest.param(CHIP, 2, 0, Action.ABORT, 0, 0, id="chip-at-retrycount-2-of-3"),
        pytest.param(DISRUPTION, 2, 0, Action.ABORT, 0, 0, id="eviction-at-retrycount-2-of-3"),
        pytest.param(DISRUPTION, 0, 0, Action.RESTART_JOB, 1, 1, id="eviction-counts-for-volcano"),
        pytest.param(BUSINESS, 0, 0, Action.RESTART_JOB, 1, 1, id="business-bounded-by-maxretry"),
    ],
)
def test_volcano_counts_every_restart_against_max_retry(
    kind: FaultKind, retry_count: int, business_used: int, expected: Action, restarts_left: int, budget_left: int
) -> None:
    d = _decide(_fault(kind), _job(retry_count=retry_count), RetryLedger(business_retries_used=business_used))
    assert d.action is expected, d.reason
    assert d.restarts_left == restarts_left
    assert d.budget_left == budget_left
    if expected is Action.RESTART_JOB:
        assert d.counts_restart, "Volcano counts this restart: the ledger must too"
        assert f"({budget_left} left" in d.reason or f"({budget_left} restart" in d.reason, d.reason
    else:
        assert "maxRetry 3" in d.reason, d.reason
        assert f"retryCount {retry_count}" in d.reason, d.reason
        assert "Failed" in d.reason, d.reason


def test_business_reason_never_promises_more_than_volcano_allows() -> None:
    """The log line of the issue: "retry 2 of 3 (1 left)" while Volcano had no restart left."""
    d = _decide(_fault(BUSINESS), _job(retry_count=1), RetryLedger(business_retries_used=1, restarts_used=1))
    assert d.action is Action.RESTART_JOB
    assert d.business_left == 1  # fault-retry-times' own remainder (MindCluster's remain-retry-times) is kept
    assert d.budget_left == 0
    assert "(1 left)" not in d.reason
    assert "0 left" in d.reason


def test_ledger_ahead_of_a_stale_retry_count_still_counts() -> None:
    """The watch cache may lag the controller: the agent's own count of restarts bounds the budget too."""
    d = _decide(_fault(), _job(retry_count=0), RetryLedger(restarts_used=2))
    assert d.action is Action.ABORT


@pytest.mark.parametrize(
    ("max_retry", "used", "expected", "left"),
    [
        pytest.param(3, 2, Action.RESTART_JOB, 0, id="backoff-limit-last"),
        pytest.param(3, 3, Action.ABORT, 0, id="backoff-limit-used-up"),
    ],
)
def test_ascendjob_budget_unchanged(max_retry: int, used: int, expected: Action, left: int) -> None:
    job = _job(kind=JobKind.ASCEND, max_retry=max_retry)
    d = _decide(_fault(), job, RetryLedger(restarts_used=used))
    assert (d.action, d.restarts_left) == (expected, left)


RESTART = Decision(Action.RESTART_JOB, "chip", mode=FaultScheduling.FORCE, counts_restart=True)


def test_ledger_agrees_with_volcano_retry_count() -> None:
    """Volcano restarted the job on its own (a PodEvicted → RestartJob policy): the next charge starts from the
    job's own counter."""
    store = IncidentStore()
    job = _job(retry_count=1)
    store.open(job, _fault(), RESTART, T0)
    assert store.ledger(job.uid).restarts_used == 2
