"""JobSet restart semantics (agent/core/jobset.py), the JobSet converter (agent/sources/jobsets.py) and the
policy's JobSet decisions (agent/core/policy/)."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support import factories

from agent.core.cluster import FaultScheduling, JobKind, JobRecord
from agent.core.correlate import JobHit
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef, Rejection
from agent.core.jobset import (
    BACKOFF_LIMIT_EXCEEDED,
    POD_FAILURE_POLICY,
    FailureRule,
    JobSetSpec,
    ReplicatedJob,
    RuleAction,
    restart_budget,
    restarts_left,
    rule_outcome,
)
from agent.core.policy import Action, Decision, RetryLedger, decide
from agent.core.policy import restart_budget as policy_budget
from agent.platform.builders import guide_jobset
from agent.settings import PolicySettings
from agent.sources.jobsets import JobSetConverter

T0 = datetime(2025, 1, 1, tzinfo=UTC)
A = RuleAction
IGNORE_EVICTIONS = FailureRule("evictions", A.RESTART_IGNORE_MAX, on_job_failure_reasons=(POD_FAILURE_POLICY,))
WORKER = ReplicatedJob("workers", backoff_limit=0, disruption_fails_job=True)


def _spec(
    max_restarts: int | None = 3, rules: tuple[FailureRule, ...] = (), jobs: tuple[ReplicatedJob, ...] = (WORKER,)
) -> JobSetSpec:
    return JobSetSpec(max_restarts, rules, jobs)


@pytest.mark.parametrize(
    ("spec", "reason", "action", "counts"),
    [
        pytest.param(_spec(None), BACKOFF_LIMIT_EXCEEDED, None, False, id="no-failure-policy-fails-jobset"),
        pytest.param(_spec(), BACKOFF_LIMIT_EXCEEDED, A.RESTART_JOBSET, True, id="no-rule-default-restart"),
        pytest.param(
            _spec(rules=(IGNORE_EVICTIONS,)), POD_FAILURE_POLICY, A.RESTART_IGNORE_MAX, False, id="eviction-ignored"
        ),
        pytest.param(
            _spec(rules=(IGNORE_EVICTIONS,)), BACKOFF_LIMIT_EXCEEDED, A.RESTART_JOBSET, True, id="deletion-counted"
        ),
        pytest.param(
            _spec(rules=(FailureRule("fail", A.FAIL_JOBSET),)), BACKOFF_LIMIT_EXCEEDED, A.FAIL_JOBSET, False,
            id="fail-rule-matches-all",
        ),
        pytest.param(
            _spec(rules=(FailureRule("other", A.FAIL_JOBSET, target_replicated_jobs=("driver",)),)),
            BACKOFF_LIMIT_EXCEEDED, A.RESTART_JOBSET, True, id="rule-for-another-replicated-job",
        ),
        pytest.param(
            _spec(rules=(FailureRule("msg", A.RESTART_IGNORE_MAX, on_job_failure_message_patterns=("x",)),)),
            BACKOFF_LIMIT_EXCEEDED, A.RESTART_JOBSET, True, id="message-pattern-takes-the-worse",
        ),
        pytest.param(
            _spec(rules=(FailureRule("msg", A.FAIL_JOBSET, on_job_failure_message_patterns=("x",)),)),
            BACKOFF_LIMIT_EXCEEDED, A.FAIL_JOBSET, False, id="message-pattern-may-fail",
        ),
    ],
)  # fmt: skip
def test_rule_outcome(spec: JobSetSpec, reason: str, action: RuleAction | None, counts: bool) -> None:
    out = rule_outcome(spec, reason, "workers")
    assert out.action is action
    assert out.counts is counts
    assert out.text


@pytest.mark.parametrize(
    ("spec", "limit", "evictions_counted"),
    [
        pytest.param(_spec(3, (IGNORE_EVICTIONS,)), 3, False, id="guide-shaped"),
        pytest.param(_spec(3), 3, True, id="no-eviction-rule-evictions-count"),
        pytest.param(_spec(None), 0, True, id="no-failure-policy"),
        pytest.param(_spec(3, jobs=(ReplicatedJob("w", backoff_limit=2),)), 0, True, id="backoff-limit-above-0"),
        pytest.param(_spec(3, jobs=(replace(WORKER, exit_code_rules=True),)), 0, True, id="exit-code-rules-uncertain"),
        pytest.param(_spec(3, (FailureRule("all", A.RESTART_IGNORE_MAX),)), -1, False, id="ignore-all-unlimited"),
        pytest.param(_spec(3, jobs=()), 0, True, id="no-replicated-jobs"),
    ],
)
def test_restart_budget(spec: JobSetSpec, limit: int, evictions_counted: bool) -> None:
    budget = restart_budget(spec)
    assert budget.limit == limit
    assert budget.evictions_counted is evictions_counted
    assert budget.why


@pytest.mark.parametrize(
    ("limit", "counted", "left"),
    [(3, 0, 3), (3, 2, 1), (3, 3, 0), (3, 5, 0), (-1, 7, None), (0, 0, 0)],
)
def test_restarts_left(limit: int, counted: int, left: int | None) -> None:
    assert restarts_left(limit, counted) == left


def _raw(**status: Any) -> dict[str, Any]:
    obj = guide_jobset("train", namespace="ns", workers=2, image="busybox", max_restarts=2)
    obj = copy.deepcopy(obj)
    obj["metadata"].update(uid="uid-1", resourceVersion="7", creationTimestamp="2025-01-01T00:00:00Z")
    obj["status"] = status
    return obj


def test_converter_reads_jobset_counters() -> None:
    rec = JobSetConverter()(_raw(restarts=4, restartsCountTowardsMax=1))
    assert isinstance(rec, JobRecord)
    assert rec.kind is JobKind.JOBSET
    assert (rec.max_retry, rec.retry_count, rec.version, rec.phase) == (2, 1, "4", "Running")
    assert rec.fault_scheduling is FaultScheduling.FORCE
    assert rec.max_retry_from == "no failure policy rule applies to BackoffLimitExceeded: RestartJobSet"
    assert policy_budget(rec, 0) == (1, 1)
    assert policy_budget(rec, 5) == (1, 1)  # JobSet's counter, not the agent's: evictions it did not count


def test_converter_phase_and_rejection() -> None:
    failed = JobSetConverter()(_raw(conditions=[{"type": "Failed", "status": "True", "reason": "ReachedMaxRestarts"}]))
    assert isinstance(failed, JobRecord)
    assert failed.phase == "Failed"
    bad = _raw()
    bad["spec"]["failurePolicy"]["rules"][0]["action"] = "Retry"
    rejected = JobSetConverter()(bad)
    assert isinstance(rejected, Rejection)
    assert rejected.reason == "bad-action"


def _decide(kind: FaultKind, job: JobRecord) -> Decision:
    pod = ObjectRef("Pod", "ns", "train-workers-0-0", "uid-p")
    fault = factories.fault(
        kind=kind,
        level=FaultLevel.SEPARATE,
        chips=("Ascend910-0",) if kind is FaultKind.CHIP else (),
        at=T0,
        pod=pod if kind is not FaultKind.CHIP else None,
    )
    assert isinstance(fault, Fault)
    hit = JobHit(job=job, pods=(), actionable=True)
    return decide(fault, hit, RetryLedger(), PolicySettings.model_validate({}), T0 + timedelta(seconds=1))


@pytest.mark.parametrize(
    ("kind", "counted", "expected"),
    [
        pytest.param(FaultKind.CHIP, 0, Action.RESTART_JOB, id="chip-restarts"),
        pytest.param(FaultKind.CHIP, 2, Action.ABORT, id="chip-at-max-restarts-aborts"),
        pytest.param(FaultKind.DISRUPTION, 0, Action.NONE, id="eviction-left-to-jobset"),
        pytest.param(FaultKind.BUSINESS, 0, Action.NONE, id="business-left-to-jobset"),
    ],
)
def test_policy_on_jobsets(kind: FaultKind, counted: int, expected: Action) -> None:
    rec = JobSetConverter()(_raw(restarts=counted, restartsCountTowardsMax=counted))
    assert isinstance(rec, JobRecord)
    decision = _decide(kind, rec)
    assert decision.action is expected
    # JobSet restarts by itself on a failed or evicted pod: observe mode watches for that restart
    assert decision.controller_restarts is (kind is not FaultKind.CHIP)


def test_jobsets_are_indexed_and_never_in_mindclusters_bookkeeping() -> None:
    """The state keeps JobSets in their own store, links their pods by the jobset-name label, and leaves them out of
    the jobs whose changes feed MindCluster's remain-retry-times entries (its ConfigMaps name no JobSet)."""
    from agent.core.cluster import JobRef
    from agent.kube.watch import ChangeType
    from agent.sources.state import ClusterState

    rec = JobSetConverter()(_raw(restarts=0))
    assert isinstance(rec, JobRecord)
    state = ClusterState()
    state.apply(factories.change("jobsets", "ns/train", rec, type=ChangeType.ADDED))
    pod = replace(factories.pod("train-workers-0-0"), job=JobRef(JobKind.JOBSET, "ns", "train", "uid-1", "0"))
    state.apply(factories.change("pods", f"{pod.namespace}/{pod.name}", pod, type=ChangeType.ADDED))
    assert state.job(JobKind.JOBSET, "ns", "train") is rec
    assert [p.name for p in state.pods_of_job(JobKind.JOBSET, "ns", "train")] == ["train-workers-0-0"]
    assert state.take_changed_jobs() == []


@pytest.mark.parametrize(
    ("api_kind", "kind"),
    [("Job", JobKind.VOLCANO), ("AscendJob", JobKind.ASCEND), ("JobSet", JobKind.JOBSET), ("", JobKind.ASCEND)],
)
def test_a_records_kind_reads_back(api_kind: str, kind: JobKind) -> None:
    assert JobKind.from_api_kind(api_kind) is kind
    if api_kind:
        assert kind.api_kind == api_kind
