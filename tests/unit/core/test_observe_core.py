"""Observe mode's pure decisions (agent.core.observe): when someone else's restart starts and ends, read from the
job's and pods' own state, and when MindCluster's plugin is evidently active. Tables; no clock read."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from support import factories as f

from agent.core.cluster import PodRecord
from agent.core.faults import ObjectRef
from agent.core.observe import (
    ConfigMapSeen,
    Observation,
    PluginEvidence,
    Transition,
    coexistence_warning,
    observation_id,
    open_observation,
    plugin_evidence,
    recovery_seconds,
    replaced,
    restart_signs,
    step,
    worth_watching,
)

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DEADLINE_S = 1800.0
OLD = (f.pod("job-0", node="n1", chips=("Ascend910-0",)), f.pod("job-1", node="n2", chips=("Ascend910-0",), rank=1))


def _new(*, n: int = 2, phase: str = "Running", ready: bool = True, keep: str | None = None) -> list[PodRecord]:
    """`n` new pods (new UIDs, on n3/n4), or the old pod `keep` plus new ones."""
    out = [f.pod(f"job-{i}", uid=f"new-{i}", node=f"n{3 + i}", phase=phase, ready=ready) for i in range(n)]
    if keep is not None:
        out[0] = next(p for p in OLD if p.name == keep)
    return out


def _obs(**kw: object) -> Observation:
    obs = open_observation(f.job(), OLD, f.fault(node="n1", at=T0), T0 + timedelta(seconds=1))
    return replace(obs, **kw)  # type: ignore[arg-type]


def test_opening_records_the_jobs_counters_pods_and_the_hit_pod() -> None:
    obs = _obs()
    assert (obs.version, obs.retry_count, obs.phase, obs.pod_count) == ("0", 0, "Running", 2)
    assert obs.pods == {"uid-job-0", "uid-job-1"}
    assert obs.hit == {"uid-job-0"}  # the chip fault is on n1's Ascend910-0
    assert obs.first_fault_at == T0
    assert obs.id.startswith("job-o")
    assert len(obs.id) == len("job-o") + 9


def test_the_id_is_the_same_on_any_replica_and_differs_per_fault_and_generation() -> None:
    job, fault = f.job(), f.fault(at=T0)
    assert observation_id(job, fault) == observation_id(f.job(), f.fault(at=T0))
    assert observation_id(job, fault) != observation_id(f.job(version="1"), fault)
    assert observation_id(job, fault) != observation_id(job, f.fault(at=T0 + timedelta(seconds=1)))


def test_a_business_fault_hits_its_own_pod() -> None:
    fault = f.fault(pod=ObjectRef("Pod", "ns", "job-1", "uid-job-1"))
    assert open_observation(f.job(), OLD, fault, T0).hit == {"uid-job-1"}


@pytest.mark.parametrize(
    ("job_kw", "pods", "expected"),
    [
        ({}, OLD, None),
        ({"version": "1"}, OLD, ("status.version 0 -> 1", True)),
        ({"retry_count": 1}, OLD, ("status.retryCount 0 -> 1", True)),
        ({"phase": "Restarting"}, OLD, ("phase Restarting", True)),
        (
            {"phase": "Pending", "version": "1"},
            [],
            ("status.version 0 -> 1; phase Pending; 2 of its 2 pods deleted", True),
        ),
        ({}, [OLD[1]], ("1 of its 2 pods deleted", False)),
        ({}, [replace(OLD[0], deletion_timestamp=T0), OLD[1]], ("1 of its 2 pods deleted", False)),
        ({"version": "not-a-number"}, OLD, None),
    ],
    ids=["nothing", "version", "retry-count", "restarting", "pending-empty", "pod-gone", "pod-terminating", "bad-v"],
)
def test_restart_signs(job_kw: dict[str, object], pods: list[PodRecord], expected: object) -> None:
    assert restart_signs(_obs(), f.job(**job_kw), pods) == expected  # type: ignore[arg-type]


def test_a_restart_already_under_way_when_the_fault_is_seen_starts_at_once() -> None:
    """The other rescheduler was quicker than the agent: a pod created after the fault is not part of the job as
    the fault found it, and counts as the restart's start."""
    late = f.pod("job-0", uid="new-0", node="n3", created_at=T0 + timedelta(seconds=2))
    obs = open_observation(f.job(), [late, OLD[1]], f.fault(node="n1", at=T0), T0 + timedelta(seconds=3))
    assert (obs.pods, obs.hit, obs.pod_count) == ({"uid-job-1"}, frozenset(), 1)
    assert restart_signs(obs, f.job(), [late, OLD[1]]) == ("1 pods created after the fault", False)
    same_second = f.pod("job-0", uid="new-0", node="n3", created_at=T0)
    assert restart_signs(obs, f.job(), [same_second, OLD[1]]) is None


def test_a_phase_the_job_was_already_in_is_no_sign() -> None:
    obs = _obs(phase="Pending")
    assert restart_signs(obs, f.job(phase="Pending"), OLD) is None


@pytest.mark.parametrize(
    ("whole", "job_kw", "pods", "expected"),
    [
        (True, {}, _new(), True),
        (True, {"phase": "Pending"}, _new(), False),
        (True, {}, _new(phase="Pending"), False),
        (True, {}, _new(ready=False), False),
        (True, {}, _new(n=1), False),  # fewer pods than before
        (True, {}, _new(keep="job-1"), False),  # a pod from before the job restart
        (False, {}, _new(keep="job-1"), True),  # pod-level: the unhit pod stays
        (False, {}, _new(keep="job-0"), False),  # the hit pod is still there
        (True, {}, [], False),
        (True, {}, [replace(p, node="") for p in _new()], False),  # not placed
    ],
    ids=[
        "all-new",
        "job-pending",
        "pod-pending",
        "not-ready",
        "fewer",
        "old-pod",
        "pod-level",
        "hit-kept",
        "none",
        "unplaced",
    ],
)
def test_replaced(whole: bool, job_kw: dict[str, object], pods: list[PodRecord], expected: bool) -> None:
    assert replaced(_obs(whole_job=whole, started_at=T0), f.job(**job_kw), pods) is expected  # type: ignore[arg-type]


def _run(steps: list[tuple[dict[str, object] | None, list[PodRecord], float]]) -> list[Transition | None]:
    """Feed `step` a sequence of (job fields or None for no job, pods, seconds after T0); the transitions."""
    obs, out = _obs(), []
    for job_kw, pods, at_s in steps:
        job = None if job_kw is None else f.job(**job_kw)  # type: ignore[arg-type]
        obs, t = step(obs, job, pods, T0 + timedelta(seconds=at_s), DEADLINE_S)
        out.append(t)
    return out


S, R, F, TO, A, U = (
    Transition.STARTED,
    Transition.RECOVERED,
    Transition.FAILED,
    Transition.TIMEOUT,
    Transition.ABANDONED,
    Transition.UNRESTARTED,
)


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        # Volcano's PodEvicted -> RestartJob: Restarting, version + 1, new pods, Running
        (
            [({}, list(OLD), 2), ({"phase": "Restarting", "version": "1"}, [], 3),
             ({"phase": "Pending", "version": "1"}, _new(phase="Pending"), 5), ({"version": "1"}, _new(), 9),
             ({"version": "1"}, _new(), 10)],
            [None, S, None, R, None],
        ),
        # MindCluster's plugin deletes the faulty pod (pod-rescheduling): the other pod stays
        ([({}, [OLD[1]], 2), ({}, _new(keep="job-1"), 8)], [S, R]),
        # a pod-level restart that escalates to the whole job: the kept pod must go too
        ([({}, [OLD[1]], 2), ({"version": "1"}, _new(keep="job-1"), 8), ({"version": "1"}, _new(), 12)], [S, None, R]),
        # Volcano gives the job up after the restart (retryCount == maxRetry)
        ([({"retry_count": 1}, [], 2), ({"retry_count": 3, "phase": "Failed"}, [], 5)], [S, F]),
        # started but not running again within the deadline
        ([({"version": "1"}, [], 2), ({"version": "1"}, [], DEADLINE_S + 1)], [S, TO]),
        # the job deleted after the restart started
        ([({"version": "1"}, [], 2), (None, [], 3)], [S, A]),
        # nobody restarts the job: the observation ends quietly at the deadline, or when the job goes or fails
        ([({}, list(OLD), 2), ({}, list(OLD), DEADLINE_S + 1)], [None, U]),
        ([(None, [], 2)], [U]),
        ([({"phase": "Failed"}, list(OLD), 2)], [U]),
        # a job of the same name with another UID is not the observed job
        ([({"version": "1"}, [], 2), ({"uid": "other"}, _new(), 5)], [S, A]),
    ],
    ids=["volcano-restartjob", "plugin-deletes-pod", "escalation", "job-failed", "timeout", "job-gone",
         "unrestarted-deadline", "unrestarted-gone", "unrestarted-failed", "new-uid"],
)  # fmt: skip
def test_step(steps: list[tuple[dict[str, object] | None, list[PodRecord], float]], expected: list[object]) -> None:
    assert _run(steps) == expected


def test_a_closed_observation_does_not_move_and_counts_from_the_fault() -> None:
    obs, _ = step(_obs(), f.job(version="1"), [], T0 + timedelta(seconds=2), DEADLINE_S)
    obs, t = step(obs, f.job(version="1"), _new(), T0 + timedelta(seconds=42), DEADLINE_S)
    assert t is Transition.RECOVERED
    assert recovery_seconds(obs) == 42.0
    assert obs.action == "restart-job"
    assert step(obs, f.job(version="2"), [], T0 + timedelta(seconds=50), DEADLINE_S) == (obs, None)


CM = ConfigMapSeen("100", frozenset({"fault-node", "remain-retry-times"}))


@pytest.mark.parametrize(
    ("first", "latest", "expected"),
    [
        (None, None, PluginEvidence.ABSENT),
        (CM, None, PluginEvidence.ABSENT),  # deleted since
        (
            None,
            ConfigMapSeen("1", frozenset({"remain-retry-times"})),
            PluginEvidence.ABSENT,
        ),  # the agent's own key only
        (CM, CM, PluginEvidence.PRESENT),
        (CM, replace(CM, resource_version="101"), PluginEvidence.UPDATED),
        (None, CM, PluginEvidence.UPDATED),  # created while the agent watched
    ],
    ids=["absent", "deleted", "agent-key-only", "present", "updated", "created"],
)
def test_plugin_evidence(first: ConfigMapSeen | None, latest: ConfigMapSeen | None, expected: PluginEvidence) -> None:
    assert plugin_evidence(first, latest) is expected


@pytest.mark.parametrize(
    ("evidence", "mode", "warns"),
    [
        (PluginEvidence.ABSENT, "act", False),
        (PluginEvidence.PRESENT, "act", True),
        (PluginEvidence.UPDATED, "act", True),
        (PluginEvidence.PRESENT, "observe", False),
        (PluginEvidence.UPDATED, "observe", False),
    ],
)
def test_the_warning_says_how_to_switch(evidence: PluginEvidence, mode: str, warns: bool) -> None:
    text = coexistence_warning(evidence, mode)
    assert (text is not None) is warns
    if text is not None:
        assert "policy.mode: observe" in text
        assert "FAULT_AGENT_POLICY__MODE=observe" in text
        assert "volcano-system/vcjob-fault-npu-cm" in text


@pytest.mark.parametrize(
    ("action", "watched"),
    [("restart-job", True), ("restart-pods", True), ("resubmit", True), ("abort", True), ("none", False),
     ("force-delete-pods", False)],
)  # fmt: skip
def test_worth_watching(action: str, watched: bool) -> None:
    assert worth_watching(action) is watched
