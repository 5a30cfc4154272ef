"""Recovery policy (agent/core/policy/): one table per rule family."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from support import factories

from agent.core.cluster import FaultScheduling, JobKind, JobRecord, PodRecord
from agent.core.correlate import JobHit
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef
from agent.core.policy import FLAPPING_REASON, Action, Decision, RetryLedger, controller_ended_job, decide
from agent.core.quarantine import quarantine_for
from agent.settings import PolicySettings

T0 = datetime(2025, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(seconds=2)
L = FaultLevel
F = FaultScheduling


def _job(**kw: object) -> JobRecord:
    base = factories.job(labels=(), fault_scheduling=F.FORCE, min_available=None, created_at=T0)
    return replace(base, **kw)  # type: ignore[arg-type]


def _pod(name: str, rank: int | None) -> PodRecord:
    return factories.pod(name, rank=rank, created_at=T0)


def _fault(kind: FaultKind = FaultKind.CHIP, level: FaultLevel = L.SEPARATE, **kw: object) -> Fault:
    base = factories.fault(
        kind=kind,
        level=level,
        chips=("Ascend910-0",) if kind in (FaultKind.CHIP, FaultKind.NETWORK) else (),
        at=T0,
        pod=ObjectRef("Pod", "ns", "job-w-1", "uid-job-w-1")
        if kind in (FaultKind.BUSINESS, FaultKind.DISRUPTION)
        else None,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def _decide(
    fault: Fault,
    job: JobRecord | None = None,
    budgets: RetryLedger | None = None,
    pods: tuple[PodRecord, ...] = (),
    settings: PolicySettings | None = None,
) -> Decision:
    job = job or _job()
    hit = JobHit(job=job, pods=pods, actionable=job.fault_scheduling is not F.OFF)
    return decide(fault, hit, budgets or RetryLedger(), settings or PolicySettings.model_validate({}), NOW)


@pytest.mark.parametrize(
    ("kind", "level", "fs", "expected", "mode"),
    [
        pytest.param(FaultKind.CHIP, L.SEPARATE, F.FORCE, Action.RESTART_JOB, F.FORCE, id="separate-force-restarts"),
        pytest.param(FaultKind.CHIP, L.SEPARATE, F.GRACE, Action.RESTART_JOB, F.GRACE, id="separate-grace-restarts"),
        pytest.param(FaultKind.CHIP, L.MANUALLY_SEPARATE, F.FORCE, Action.RESTART_JOB, F.FORCE, id="manual-separate"),
        pytest.param(FaultKind.CHIP, L.RESTART_NPU, F.FORCE, Action.RESTART_JOB, F.FORCE, id="restart-npu"),
        pytest.param(FaultKind.CHIP, L.FREE_RESTART_NPU, F.FORCE, Action.RESTART_JOB, F.FORCE, id="free-restart-npu"),
        pytest.param(FaultKind.CHIP, L.RESTART_BUSINESS, F.FORCE, Action.RESTART_JOB, F.FORCE, id="restart-business"),
        pytest.param(FaultKind.CHIP, L.RESTART_REQUEST, F.FORCE, Action.RESTART_JOB, F.FORCE, id="restart-request"),
        pytest.param(FaultKind.CHIP, L.PRE_SEPARATE, F.FORCE, Action.NONE, F.OFF, id="preseparate-leaves-running-job"),
        pytest.param(FaultKind.CHIP, L.NOT_HANDLE, F.FORCE, Action.NONE, F.OFF, id="not-handle-recorded"),
        pytest.param(FaultKind.CHIP, L.SEPARATE, F.OFF, Action.NONE, F.OFF, id="not-opted-in"),
        pytest.param(FaultKind.NODE, L.SEPARATE, F.FORCE, Action.RESTART_JOB, F.FORCE, id="node-separate-restarts"),
        pytest.param(FaultKind.NODE, L.PRE_SEPARATE, F.GRACE, Action.NONE, F.OFF, id="node-preseparate-no-action"),
        pytest.param(FaultKind.NETWORK, L.SEPARATE, F.FORCE, Action.NONE, F.OFF, id="network-alone-no-restart"),
        pytest.param(FaultKind.NETWORK, L.PRE_SEPARATE, F.FORCE, Action.NONE, F.OFF, id="network-preseparate"),
    ],
)
def test_decide_by_level(
    kind: FaultKind, level: FaultLevel, fs: FaultScheduling, expected: Action, mode: FaultScheduling
) -> None:
    d = _decide(_fault(kind, level), _job(fault_scheduling=fs))
    assert d.action is expected
    assert d.mode is mode
    assert d.reason.startswith(f"{kind.value} fault {level.wire_name}")
    assert d.counts_restart is (expected is Action.RESTART_JOB)


@pytest.mark.parametrize(
    ("strategy", "expected", "mode"),
    [
        pytest.param("ignore", Action.NONE, F.OFF, id="ignore"),
        pytest.param("", Action.NONE, F.OFF, id="default-is-ignore"),
        pytest.param("bogus", Action.NONE, F.OFF, id="unknown-is-ignore"),
        pytest.param("graceExit", Action.RESTART_JOB, F.GRACE, id="grace-exit"),
        pytest.param("forceExit", Action.RESTART_JOB, F.FORCE, id="force-exit"),
        # MindCluster task.go getTaskHealthStateBySubHealth: nothing until ClusterD's needVolcanoOpe=delete
        # (tests/unit/engine/test_hot_switch.py), then job.go deleteJobWithSubHealthyLabels force-deletes as forceExit
        pytest.param("hotSwitch", Action.NONE, F.OFF, id="hot-switch-waits-for-clusterd"),
        pytest.param("hotSwitch+delete", Action.RESTART_JOB, F.FORCE, id="hot-switch-delete-as-force-exit"),
    ],
)
def test_sub_health_strategy(strategy: str, expected: Action, mode: FaultScheduling) -> None:
    strategy, _, delete = strategy.partition("+")
    job = _job(sub_healthy_strategy=strategy, fault_scheduling=F.GRACE if mode is F.FORCE else F.FORCE)
    d = _decide(_fault(level=L.SUB_HEALTH, reason="HotSwitchDelete" if delete else "SubHealth"), job)
    assert (d.action, d.mode) == (expected, mode)


@pytest.mark.parametrize(
    ("strategy", "others", "expected", "mode", "normal"),
    [
        pytest.param("ignore", (), Action.NONE, F.OFF, False, id="ignore-alone"),
        pytest.param(
            "ignore", ((FaultKind.CHIP, L.SUB_HEALTH),), Action.NONE, F.OFF, False, id="ignore-all-sub-health"
        ),
        pytest.param(
            "ignore", ((FaultKind.CHIP, L.SEPARATE),), Action.RESTART_JOB, F.GRACE, True, id="ignore-with-hard"
        ),
        pytest.param(
            "forceExit",
            ((FaultKind.NODE, L.RESTART_REQUEST),),
            Action.RESTART_JOB,
            F.GRACE,
            True,
            id="force-exit-with-hard-takes-the-jobs-mode",
        ),
        pytest.param(
            "forceExit",
            ((FaultKind.BUSINESS, L.RESTART_BUSINESS),),
            Action.RESTART_JOB,
            F.GRACE,
            True,
            id="a-failed-pod-is-not-sub-health",
        ),
        pytest.param(
            "hotSwitch",
            ((FaultKind.CHIP, L.NOT_HANDLE),),
            Action.NONE,  # the strategy's: wait for ClusterD's hot switch
            F.OFF,
            False,
            id="not-handle-leaves-the-strategy",
        ),
        pytest.param(
            "graceExit",
            ((FaultKind.NETWORK, L.SEPARATE),),
            Action.RESTART_JOB,
            F.GRACE,
            False,
            id="network-leaves-the-strategy",
        ),
        pytest.param(
            "forceExit",
            ((FaultKind.CHIP, L.PRE_SEPARATE),),
            Action.RESTART_JOB,
            F.FORCE,
            False,
            id="pre-separate-leaves-the-strategy",
        ),
    ],
)
def test_sub_health_strategy_only_when_every_fault_is_sub_health(
    strategy: str,
    others: tuple[tuple[FaultKind, FaultLevel], ...],
    expected: Action,
    mode: FaultScheduling,
    normal: bool,
) -> None:
    """MindCluster job.go setIsSubHealthFault / deleteJobWithLabels: the strategy applies only when every fault
    type of the job is SubHealthFault; otherwise the normal path, the job's fault-scheduling mode (grace here)."""
    job = _job(sub_healthy_strategy=strategy, fault_scheduling=F.GRACE)
    hit = JobHit(job=job, pods=(), actionable=True)
    other = tuple(_fault(k, lv) for k, lv in others)
    settings = PolicySettings.model_validate({})
    d = decide(_fault(level=L.SUB_HEALTH), hit, RetryLedger(), settings, NOW, other_faults=other)
    assert (d.action, d.mode) == (expected, mode)
    assert ("the normal path" in d.reason) is normal


@pytest.mark.parametrize(
    ("ranks", "expected", "pods"),
    [
        pytest.param((1,), Action.RESTART_PODS, ("p1",), id="one-pod-only"),
        pytest.param((1, 2), Action.RESTART_PODS, ("p1", "p2"), id="two-pods-only"),
        pytest.param((None,), Action.RESTART_PODS, ("p-",), id="unknown-rank-not-rank0"),
        pytest.param((0,), Action.RESTART_JOB, (), id="rank0-escalates"),
        pytest.param((3, 0), Action.RESTART_JOB, (), id="rank0-among-several-escalates"),
    ],
)
def test_pod_rescheduling(ranks: tuple[int | None, ...], expected: Action, pods: tuple[str, ...]) -> None:
    hit_pods = tuple(_pod(f"p{'' if r is None else r}" if r is not None else "p-", r) for r in ranks)
    d = _decide(_fault(), _job(pod_rescheduling=True), pods=hit_pods)
    assert d.action is expected
    assert d.pods == pods
    assert d.counts_restart


@pytest.mark.parametrize(
    ("retry_times", "used", "expected", "left"),
    [
        pytest.param(2, 0, Action.RESTART_JOB, 1, id="first-retry"),
        pytest.param(2, 1, Action.RESTART_JOB, 0, id="last-retry"),
        pytest.param(2, 2, Action.ABORT, 0, id="exhausted-aborts"),
        pytest.param(0, 0, Action.ABORT, 0, id="zero-budget-aborts"),
        pytest.param(None, 0, Action.NONE, None, id="no-label-no-retry"),
    ],
)
def test_business_budget(retry_times: int | None, used: int, expected: Action, left: int | None) -> None:
    d = _decide(
        _fault(FaultKind.BUSINESS), _job(fault_retry_times=retry_times), RetryLedger(business_retries_used=used)
    )
    assert d.action is expected
    assert d.business_left == left
    assert d.consumes_business_budget is (expected is Action.RESTART_JOB)
    assert d.counts_restart is (expected is Action.RESTART_JOB)  # Volcano counts it against maxRetry too


def test_stuck_terminating_pod_is_force_deleted_only() -> None:
    d = _decide(_fault(FaultKind.DISRUPTION, reason="StuckTerminating"), _job(fault_retry_times=1))
    assert (d.action, d.pods, d.mode) == (Action.FORCE_DELETE_PODS, ("job-w-1",), F.FORCE)
    assert not d.consumes_business_budget
    assert not d.counts_restart
    assert not d.restarts


def test_agent_caused_failure_is_not_counted() -> None:
    budgets = RetryLedger(agent_pod_uids=("uid-job-w-1",))
    d = _decide(_fault(FaultKind.BUSINESS), _job(fault_retry_times=2), budgets)
    assert d.action is Action.NONE
    assert "agent's own restart" in d.reason
    assert d.business_left == 2


@pytest.mark.parametrize(
    ("used", "retry_times", "kind"),
    [
        pytest.param(0, 2, JobKind.VOLCANO, id="budget-left"),
        pytest.param(2, 2, JobKind.VOLCANO, id="budget-used-up"),
        pytest.param(0, None, JobKind.VOLCANO, id="none"),
        pytest.param(2, 2, JobKind.ASCEND, id="ascendjob"),
    ],
)
def test_disruption_never_consumes_budget(used: int, retry_times: int | None, kind: JobKind) -> None:
    """Never the business budget; the controller's restart limit counts the restart all the same (Volcano's
    retryCount goes up by one for any RestartJob, the Ascend Operator's pod version for any deleted pod)."""
    d = _decide(
        _fault(FaultKind.DISRUPTION, reason="Evicted"),
        _job(fault_retry_times=retry_times, kind=kind),
        RetryLedger(business_retries_used=used),
    )
    assert d.action is Action.RESTART_JOB
    assert not d.consumes_business_budget
    assert d.counts_restart
    assert "never consume" in d.reason


@pytest.mark.parametrize(
    ("fault", "backoff", "version", "used", "expected", "budget_left"),
    [
        # the operator fails the job at pod version > backoffLimit: limit 2 takes 2 restarts in all
        pytest.param(FaultKind.CHIP, 2, 0, 0, Action.RESTART_JOB, 1, id="chip-fresh"),
        pytest.param(FaultKind.CHIP, 2, 1, 0, Action.RESTART_JOB, 0, id="chip-last"),
        pytest.param(FaultKind.CHIP, 2, 2, 0, Action.ABORT, 0, id="chip-version-at-limit"),
        pytest.param(FaultKind.CHIP, 2, 0, 2, Action.ABORT, 0, id="chip-ledger-at-limit"),
        # business and disruption restarts bump the pod version too: no restart past the limit is promised
        pytest.param(FaultKind.BUSINESS, 2, 2, 0, Action.ABORT, 0, id="business-version-at-limit"),
        pytest.param(FaultKind.BUSINESS, 3, 2, 0, Action.RESTART_JOB, 0, id="business-bounded-by-limit"),
        pytest.param(FaultKind.DISRUPTION, 2, 2, 0, Action.ABORT, 0, id="disruption-version-at-limit"),
        # a limit <= 0 (or unset: -1) is unlimited to the operator
        pytest.param(FaultKind.CHIP, -1, 40, 0, Action.RESTART_JOB, None, id="unlimited"),
        pytest.param(FaultKind.BUSINESS, 0, 40, 0, Action.RESTART_JOB, 2, id="zero-is-unlimited-business-bound"),
    ],
)
def test_ascendjob_budget_follows_pod_version(
    fault: FaultKind, backoff: int, version: int, used: int, expected: Action, budget_left: int | None
) -> None:
    """An AscendJob's restarts are the pods' version (JobRecord.retry_count, filled in by the state), counted for
    every kind of restart; the reason names the limit, where it was read and who enforces it."""
    job = _job(
        kind=JobKind.ASCEND, max_retry=backoff, retry_count=version, version=str(version), fault_retry_times=3,
        max_retry_from="spec.runPolicy.backoffLimit",
    )  # fmt: skip
    d = _decide(_fault(fault, reason="Evicted") if fault is FaultKind.DISRUPTION else _fault(fault), job,
                RetryLedger(restarts_used=used))  # fmt: skip
    assert d.action is expected, d.reason
    assert d.budget_left == budget_left
    if expected is Action.ABORT:
        assert (
            f"the Ascend Operator fails the job at pod version > spec.runPolicy.backoffLimit {backoff}; "
            f"version is {max(version, used)}" in d.reason
        )
    else:
        assert d.counts_restart


def test_ascendjob_ended_names_the_limit_it_has() -> None:
    """A job without spec.runPolicy.backoffLimit whose operator took 3 from fault-retry-times is not said to have
    a backoffLimit 3; one with no limit at all says so."""
    job = _job(kind=JobKind.ASCEND, phase="Failed", max_retry=3, version="4", retry_count=4,
               max_retry_from="the fault-retry-times label (no spec.runPolicy.backoffLimit)")  # fmt: skip
    text = controller_ended_job(job)
    assert text is not None
    assert "spec.runPolicy.backoffLimit 3" not in text
    assert "fault-retry-times label (no spec.runPolicy.backoffLimit) 3" in text
    assert "pod version 4" in text
    unlimited = controller_ended_job(replace(job, max_retry=-1, max_retry_from=""))
    assert unlimited is not None
    assert "no restart limit" in unlimited


@pytest.mark.parametrize(
    ("max_retry", "used", "retry_count", "expected", "left"),
    [
        # Volcano fails the job at the restart that brings retryCount to maxRetry: maxRetry 3 is 2 restarts
        pytest.param(3, 0, 0, Action.RESTART_JOB, 1, id="fresh"),
        pytest.param(3, 1, 0, Action.RESTART_JOB, 0, id="last-restart"),
        pytest.param(3, 2, 0, Action.ABORT, 0, id="ledger-exhausted"),
        pytest.param(3, 0, 2, Action.ABORT, 0, id="volcano-retrycount-exhausted"),
        pytest.param(1, 0, 0, Action.ABORT, 0, id="max-retry-1-no-restart"),
        pytest.param(0, 0, 0, Action.ABORT, 0, id="zero-max-retry"),
    ],
)
def test_restart_budget(max_retry: int, used: int, retry_count: int, expected: Action, left: int) -> None:
    d = _decide(_fault(), _job(max_retry=max_retry, retry_count=retry_count), RetryLedger(restarts_used=used))
    assert (d.action, d.restarts_left) == (expected, left)


@pytest.mark.parametrize(
    ("phase", "kind", "limit", "used", "expected"),
    [
        pytest.param("Completed", FaultKind.CHIP, 1, 0, Action.NONE, id="completed-nothing"),
        pytest.param("Aborted", FaultKind.NODE, 1, 0, Action.NONE, id="aborted-nothing"),
        pytest.param("Failed", FaultKind.CHIP, 0, 0, Action.NONE, id="failed-resubmit-off"),
        pytest.param("Failed", FaultKind.CHIP, 2, 1, Action.RESUBMIT, id="failed-resubmit"),
        pytest.param("Failed", FaultKind.NODE, 2, 2, Action.ABORT, id="failed-resubmit-limit"),
        pytest.param("Failed", FaultKind.BUSINESS, 2, 0, Action.NONE, id="failed-business-no-resubmit"),
    ],
)
def test_terminal_jobs(phase: str, kind: FaultKind, limit: int, used: int, expected: Action) -> None:
    d = _decide(
        _fault(kind),
        _job(phase=phase, fault_retry_times=5),
        RetryLedger(resubmits_used=used),
        settings=PolicySettings.model_validate({"resubmit_limit": limit}),
    )
    assert d.action is expected


def test_reason_mentions_check_code_and_chip() -> None:
    d = _decide(_fault(check_code_ok=False))
    assert "Ascend910-0 on n1" in d.reason
    assert "CheckCode mismatch" in d.reason


@pytest.mark.parametrize(
    ("fault", "expected"),
    [
        pytest.param(_fault(FaultKind.NODE, L.SEPARATE), L.SEPARATE, id="node-separate"),
        pytest.param(_fault(FaultKind.NODE, L.PRE_SEPARATE), L.PRE_SEPARATE, id="node-preseparate"),
        pytest.param(_fault(FaultKind.NODE, L.NOT_HANDLE), None, id="node-not-handle"),
        pytest.param(_fault(FaultKind.CHIP, L.SEPARATE), None, id="single-chip-no-taint"),
        # a flapping chip is isolated, not its node (issue 14: the engine counts isolated chips per node)
        pytest.param(_fault(FaultKind.CHIP, L.MANUALLY_SEPARATE, reason=FLAPPING_REASON), None, id="flapping-chip"),
        pytest.param(
            _fault(FaultKind.CHIP, L.MANUALLY_SEPARATE, reason="CardUnhealthy+Flapping"), None, id="flapping-suffix"
        ),
        pytest.param(_fault(FaultKind.CHIP, L.SEPARATE, reason="NotFlappingAtAll"), None, id="flapping-substring"),
        pytest.param(_fault(FaultKind.NODE, L.SEPARATE, node=""), None, id="no-node"),
        pytest.param(_fault(FaultKind.BUSINESS), None, id="business"),
    ],
)
def test_quarantine_for(fault: Fault, expected: FaultLevel | None) -> None:
    assert quarantine_for(fault) == expected


@pytest.mark.parametrize(
    ("restart_policy", "retry_times", "expected", "says"),
    [
        pytest.param("OnFailure", 2, Action.RESTART_JOB, True, id="on-failure-restart"),
        pytest.param("Always", 0, Action.ABORT, True, id="always-abort"),
        pytest.param("OnFailure", None, Action.NONE, True, id="on-failure-no-budget"),
        pytest.param("Never", 2, Action.RESTART_JOB, False, id="never-says-nothing"),
        pytest.param("", 2, Action.RESTART_JOB, False, id="unknown-says-nothing"),
    ],
)
def test_business_failure_of_a_pod_not_restart_policy_never_is_explained(
    restart_policy: str, retry_times: int | None, expected: Action, says: bool
) -> None:
    """Issue 13 B12: a container failing in a Running OnFailure pod restarted the job without a word."""
    pod = replace(_pod("job-w-1", 1), uid="uid-job-w-1", restart_policy=restart_policy)
    d = _decide(_fault(FaultKind.BUSINESS), _job(fault_retry_times=retry_times), pods=(pod,))
    assert d.action is expected
    note = f"the job's restart policy is {restart_policy}, not Never"
    assert (note in d.reason) is says, d.reason
    if says:
        assert "pod job-w-1 (phase Running)" in d.reason


def test_business_failure_with_a_malformed_fault_retry_times_aborts_and_says_why() -> None:
    """Issue 13 B8: the job source reads a bad label as a budget of 0; the reason names the label as written."""
    job = _job(fault_retry_times=0, labels=(("fault-retry-times", "abc"),))
    d = _decide(_fault(FaultKind.BUSINESS), job)
    assert d.action is Action.ABORT
    assert "fault-retry-times=0: the label 'abc' is not an integer 0–100" in d.reason
    # hardware faults are handled as for any job
    assert _decide(_fault(), job).action is Action.RESTART_JOB
