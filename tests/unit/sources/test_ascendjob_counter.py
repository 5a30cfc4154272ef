"""An AscendJob as the real Ascend Operator shows it (issue 35, defects 2 and 3): its phase from its conditions by
the operator's rules, its restart counter from its pods' ``version`` labels (agent.sources.jobs, .state)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support import factories

from agent.core.cluster import JobKind, JobRecord, JobRef, PodRecord
from agent.core.incidents import IncidentStore, Phase
from agent.core.policy import Action, Decision
from agent.kube.watch import Change, ChangeType
from agent.sources.jobs import JobConverter
from agent.sources.state import ClusterState

T = "2026-01-01T00:00:00Z"


def _cond(type_: str, status: str = "True", at: str = T) -> dict[str, Any]:
    return {"type": type_, "status": status, "lastTransitionTime": at, "lastUpdateTime": at}


@pytest.mark.parametrize(
    ("conditions", "phase"),
    [
        # the restart the operator makes: Created re-appended after Running, its old time tying with Running's
        pytest.param([_cond("Running"), _cond("Created")], "Running", id="created-after-running-same-second"),
        pytest.param(
            [_cond("Running", at="2026-01-01T00:00:05Z"), _cond("Created", at="2026-01-01T00:00:01Z")],
            "Running",
            id="created-after-running-older",
        ),
        pytest.param([_cond("Created"), _cond("Running")], "Running", id="running-after-created"),
        pytest.param([_cond("Created"), _cond("Restarting")], "Restarting", id="restarting"),
        pytest.param([_cond("Restarting"), _cond("Created")], "Restarting", id="restarting-then-pending"),
        pytest.param([_cond("Created")], "Created", id="created-only"),
        pytest.param([_cond("Created"), _cond("Running", "False"), _cond("Failed")], "Failed", id="failed"),
        pytest.param([_cond("Failed", at="2026-01-01T00:00:01Z"), _cond("Running")], "Failed", id="failed-wins"),
        pytest.param([_cond("Created"), _cond("Running", "False"), _cond("Succeeded")], "Succeeded", id="succeeded"),
        pytest.param([], "", id="none"),
        pytest.param([_cond("Running", "False")], "", id="none-true"),
    ],
)
def test_ascend_phase_by_the_operators_rules(conditions: list[dict[str, Any]], phase: str) -> None:
    """agent.sources.jobs.ascend_phase through the converter."""
    job = JobConverter(JobKind.ASCEND)(_raw_acjob(conditions))
    assert isinstance(job, JobRecord)
    assert job.phase == phase


def _change(source: str, key: str, new: Any, old: Any = None, type_: ChangeType = ChangeType.MODIFIED) -> Change[Any]:
    return Change(type_, source, key, new, old, False, time.time())


def _acjob(uid: str = "uid-a", rv: str = "1") -> JobRecord:
    return factories.job("a", kind=JobKind.ASCEND, uid=uid, resource_version=rv, max_retry=2)


def _pod(name: str, version: str, uid: str = "uid-a", **kw: Any) -> PodRecord:
    return factories.pod(name, job=JobRef(JobKind.ASCEND, "ns", "a", uid, version), **kw)


def _put(state: ClusterState, pod: PodRecord) -> None:
    state.apply(_change("pods", f"ns/{pod.name}", pod, state.pods.get(f"ns/{pod.name}")))


def _drop(state: ClusterState, name: str) -> None:
    state.apply(_change("pods", f"ns/{name}", None, state.pods.get(f"ns/{name}"), ChangeType.DELETED))


def _counter(state: ClusterState) -> tuple[str, int]:
    job = state.acjobs["ns/a"]
    return job.version, job.retry_count


def test_counter_follows_the_pods_version_labels() -> None:
    """The operator's counter is the highest version among the job's pods; with every pod gone (deleted at once,
    grace 0) the last one seen stands; a job of another UID starts again; nothing else changes the record."""
    state = ClusterState()
    state.apply(_change("acjobs", "ns/a", _acjob(), type_=ChangeType.ADDED))
    assert _counter(state) == ("", 0)
    _put(state, _pod("a-master-0", "0"))
    _put(state, _pod("a-worker-0", "0"))
    assert _counter(state) == ("0", 0)
    # a restart: both pods deleted (the operator bumps to 1 at the first), replacements carry version 1
    _drop(state, "a-master-0")
    _drop(state, "a-worker-0")
    assert _counter(state) == ("0", 0)  # no pod left: the last seen stands (the agent's ledger covers the gap)
    _put(state, _pod("a-master-0", "1"))
    assert _counter(state) == ("1", 1)
    _put(state, _pod("a-worker-0", "1"))
    # a pod-level restart of one pod: its replacement at 2, the other pod still at 1
    _drop(state, "a-worker-0")
    _put(state, _pod("a-worker-0", "2"))
    assert _counter(state) == ("2", 2)
    # the job's own update (its watch) keeps the pods' counter and its resourceVersion
    state.apply(_change("acjobs", "ns/a", _acjob(rv="9"), state.acjobs["ns/a"]))
    assert _counter(state) == ("2", 2)
    assert state.acjobs["ns/a"].resource_version == "9"
    assert state.check_indexes() == []
    # deleted and created again under the same name: a new UID, a new counter
    state.apply(_change("acjobs", "ns/a", None, state.acjobs["ns/a"], ChangeType.DELETED))
    for name in ("a-master-0", "a-worker-0"):
        _drop(state, name)
    state.apply(_change("acjobs", "ns/a", _acjob(uid="uid-b"), type_=ChangeType.ADDED))
    assert _counter(state) == ("", 0)
    assert state.check_indexes() == []


def test_volcano_pods_do_not_touch_the_counter() -> None:
    state = ClusterState()
    state.apply(_change("acjobs", "ns/a", _acjob(), type_=ChangeType.ADDED))
    _put(state, factories.pod("a-0", job=JobRef(JobKind.VOLCANO, "ns", "a", "uid-v", "7")))
    _put(state, _pod("a-1", "not-a-number"))
    assert _counter(state) == ("", 0)
    assert state.check_indexes() == []


# ---- recovery of an AscendJob: judged from its pods (defect 3) ----

T0 = datetime(2026, 1, 1, tzinfo=UTC)
RESTART = Decision(Action.RESTART_JOB, "chip fault", counts_restart=True, restarts_left=1)


def _raw_acjob(conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "mindxdl.gitee.com/v1",
        "kind": "AscendJob",
        "metadata": {"name": "a", "namespace": "ns", "uid": "uid-a", "resourceVersion": "5",
                     "labels": {"fault-scheduling": "force"}, "creationTimestamp": T},
        "spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 2}}},
        "status": {"conditions": conditions},
    }  # fmt: skip


def _new_pod(name: str, at: datetime, version: str = "1", **kw: Any) -> PodRecord:
    return factories.pod(name, job=JobRef(JobKind.ASCEND, "ns", "a", "uid-a", version), created_at=at, **kw)


@pytest.mark.parametrize(
    ("conditions", "pods", "recovered"),
    [
        # after the operator's restart: Created re-appended after Running, both True, the same second
        pytest.param([_cond("Running"), _cond("Created")], 2, True, id="tie-created-after-running"),
        pytest.param([_cond("Created"), _cond("Running")], 2, True, id="running-last"),
        pytest.param([_cond("Created"), _cond("Restarting")], 2, True, id="conditions-lag-the-pods"),
        pytest.param([_cond("Running"), _cond("Created")], 1, False, id="fewer-than-min-available"),
        pytest.param([_cond("Running", "False"), _cond("Failed")], 2, False, id="operator-gave-up"),
    ],
)
def test_ascendjob_recovery_is_read_from_its_pods(conditions: list[dict[str, Any]], pods: int, recovered: bool) -> None:
    job = JobConverter(JobKind.ASCEND)(_raw_acjob(conditions))
    assert isinstance(job, JobRecord)
    store = IncidentStore()
    fault = factories.fault(chips=("Ascend910-0",), at=T0)
    store.open(job, fault, RESTART, T0 + timedelta(seconds=1))
    store.restarting(job.uid, T0 + timedelta(seconds=2), pod_uids=["uid-old"])
    new = [_new_pod(f"a-{i}", T0 + timedelta(seconds=5)) for i in range(pods)]
    inc = store.observe(job, new, T0 + timedelta(seconds=8), 1800)
    assert (inc is not None and inc.phase is Phase.RECOVERED) is recovered
