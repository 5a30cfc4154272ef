"""Correlation: fault -> pods -> jobs (agent/core/correlate.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from support import factories

from agent.core.cluster import FaultScheduling, JobKind, JobRecord, JobRef, PodRecord
from agent.core.correlate import JobKey, correlate, job_key, pods_hit
from agent.core.faults import Fault, FaultKind, ObjectRef

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _job(name: str, kind: JobKind = JobKind.VOLCANO, fs: FaultScheduling = FaultScheduling.FORCE) -> JobRecord:
    return factories.job(name, kind=kind, labels=(), fault_scheduling=fs, min_available=None, created_at=T0)


def _pod(
    name: str,
    node: str,
    chips: tuple[str, ...] = (),
    job: str | None = "a",
    kind: JobKind = JobKind.VOLCANO,
    phase: str = "Running",
    job_uid: str = "",
) -> PodRecord:
    link = JobRef(kind=kind, namespace="ns", name=job, uid=job_uid) if job else None
    return factories.pod(
        name, node=node, phase=phase, ready=phase == "Running", job=link, chips=chips, rank=None, created_at=T0
    )


def _fault(kind: FaultKind, node: str = "n1", chips: tuple[str, ...] = (), pod: str | None = None) -> Fault:
    return factories.fault(
        kind=kind, node=node, chips=chips, at=T0, pod=ObjectRef("Pod", "ns", pod, f"uid-{pod}") if pod else None
    )


PODS = (
    _pod("a-0", "n1", ("Ascend910-0", "Ascend910-1"), job="a"),
    _pod("a-1", "n1", ("Ascend910-2", "Ascend910-3"), job="a"),
    _pod("b-0", "n1", ("Ascend910-4",), job="b", kind=JobKind.ASCEND),
    _pod("c-0", "n2", ("Ascend910-0",), job="c"),
    _pod("loose", "n1", ("Ascend910-5",), job=None),
    _pod("done", "n1", ("Ascend910-6",), job="a", phase="Succeeded"),
    _pod("ghost", "n1", ("Ascend910-7",), job="zz"),
)
JOBS: dict[JobKey, JobRecord] = {
    job_key(j): j
    for j in (
        _job("a"),
        _job("b", kind=JobKind.ASCEND, fs=FaultScheduling.GRACE),
        _job("c", fs=FaultScheduling.OFF),
    )
}


@pytest.mark.parametrize(
    ("fault", "expected_pods"),
    [
        pytest.param(_fault(FaultKind.CHIP, chips=("Ascend910-1",)), ["a-0"], id="chip-hits-holder"),
        pytest.param(
            _fault(FaultKind.CHIP, chips=("Ascend910-0",), node="n2"), ["c-0"], id="chip-same-name-other-node"
        ),
        pytest.param(
            _fault(FaultKind.CHIP, chips=("Ascend910-1", "Ascend910-4")), ["a-0", "b-0"], id="two-chips-two-pods"
        ),
        pytest.param(_fault(FaultKind.CHIP, chips=("Ascend910-9",)), [], id="idle-chip-hits-nothing"),
        pytest.param(_fault(FaultKind.CHIP, chips=("Ascend910-6",)), [], id="finished-pod-ignored"),
        pytest.param(_fault(FaultKind.NETWORK, chips=("Ascend910-2",)), ["a-1"], id="network-like-chip"),
        pytest.param(_fault(FaultKind.NODE), ["a-0", "a-1", "b-0", "ghost", "loose"], id="node-hits-every-pod-on-node"),
        pytest.param(_fault(FaultKind.NODE, node=""), [], id="node-fault-without-node"),
        pytest.param(_fault(FaultKind.BUSINESS, pod="c-0"), ["c-0"], id="business-hits-own-pod"),
        pytest.param(_fault(FaultKind.DISRUPTION, pod="b-0"), ["b-0"], id="disruption-hits-own-pod"),
        pytest.param(_fault(FaultKind.BUSINESS), [], id="business-without-pod"),
        pytest.param(_fault(FaultKind.BUSINESS, pod="missing"), [], id="business-unknown-pod"),
    ],
)
def test_pods_hit(fault: Fault, expected_pods: list[str]) -> None:
    assert sorted(p.name for p in pods_hit(fault, PODS)) == expected_pods


@pytest.mark.parametrize(
    ("fault", "jobs", "actionable", "orphans"),
    [
        pytest.param(_fault(FaultKind.CHIP, chips=("Ascend910-0",)), ["a"], ["a"], [], id="chip-to-force-job"),
        pytest.param(_fault(FaultKind.CHIP, chips=("Ascend910-4",)), ["b"], ["b"], [], id="chip-to-grace-acjob"),
        pytest.param(
            _fault(FaultKind.CHIP, chips=("Ascend910-0",), node="n2"), ["c"], [], [], id="off-job-recorded-only"
        ),
        pytest.param(_fault(FaultKind.NODE), ["a", "b"], ["a", "b"], ["ghost", "loose"], id="node-groups-per-job"),
        pytest.param(_fault(FaultKind.CHIP, chips=("Ascend910-5",)), [], [], ["loose"], id="non-job-pod-orphan"),
        pytest.param(_fault(FaultKind.CHIP, chips=("Ascend910-7",)), [], [], ["ghost"], id="unknown-job-orphan"),
    ],
)
def test_correlate(fault: Fault, jobs: list[str], actionable: list[str], orphans: list[str]) -> None:
    c = correlate(fault, PODS, JOBS)
    assert [h.job.name for h in c.hits] == jobs
    assert [h.job.name for h in c.actionable] == actionable
    assert [p.name for p in c.orphan_pods] == orphans


def test_node_fault_groups_pods_of_one_job() -> None:
    c = correlate(_fault(FaultKind.NODE), PODS, JOBS)
    assert [p.name for p in c.hits[0].pods] == ["a-0", "a-1"]


def test_recreated_job_does_not_adopt_old_pods() -> None:
    old = _pod("a-0", "n1", ("Ascend910-0",), job="a", job_uid="uid-of-deleted-a")
    c = correlate(_fault(FaultKind.CHIP, chips=("Ascend910-0",)), [old], JOBS)
    assert c.hits == ()
    assert [p.name for p in c.orphan_pods] == ["a-0"]


def test_matching_job_uid_links() -> None:
    pod = _pod("a-0", "n1", ("Ascend910-0",), job="a", job_uid="uid-a")
    c = correlate(_fault(FaultKind.CHIP, chips=("Ascend910-0",)), [pod], JOBS)
    assert [h.job.name for h in c.hits] == ["a"]
