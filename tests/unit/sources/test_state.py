"""ClusterState: indexes stay consistent after any sequence of changes; readiness needs every first list."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import factories

from agent.core.cluster import ConfigMapRecord, FaultScheduling, JobKind, JobRecord, JobRef, PodRecord
from agent.kube.watch import Change, ChangeType
from agent.sources.state import ClusterState, UnknownSource


def pod(name: str, node: str, job: str | None, rv: int, chips: tuple[str, ...] = ()) -> PodRecord:
    link = JobRef(JobKind.VOLCANO, "ns", job) if job else None
    return factories.pod(name, resource_version=str(rv), node=node, job=link, chips=chips, rank=None, created_at=None)


def job(name: str, uid: str, rv: int) -> JobRecord:
    return factories.job(
        name,
        uid=uid,
        resource_version=str(rv),
        labels=(),
        fault_scheduling=FaultScheduling.FORCE,
        min_available=None,
        created_at=None,
    )


def cm(name: str, rv: int) -> ConfigMapRecord:
    return factories.configmap(name, {}, uid=f"uid-{name}", resource_version=str(rv))


def put(state: ClusterState, source: str, key: str, rec: Any) -> None:
    old = state.store(source).get(key)
    t = ChangeType.ADDED if old is None else ChangeType.MODIFIED
    state.apply(Change(t, source, key, rec, old, False, 0.0))


def delete(state: ClusterState, source: str, key: str) -> None:
    old = state.store(source).get(key)
    if old is not None:
        state.apply(Change(ChangeType.DELETED, source, key, None, old, False, 0.0))


ops = st.lists(
    st.tuples(
        st.sampled_from(["pod", "job", "cm", "del-pod", "del-job", "del-cm"]),
        st.integers(0, 5),  # object
        st.sampled_from(["n1", "n2", ""]),  # node
        st.sampled_from(["j1", "j2", None]),  # job link
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_indexes_consistent_after_any_sequence(sequence: list[tuple[str, int, str, str | None]]) -> None:
    state = ClusterState()
    for rv, (op, i, node, link) in enumerate(sequence):
        if op == "pod":
            put(state, "pods", f"ns/p{i}", pod(f"p{i}", node, link, rv))
        elif op == "job":
            put(state, "vcjobs", f"ns/j{i}", job(f"j{i}", f"uid-{i}-{rv % 2}", rv))
        elif op == "cm":
            put(state, "deviceinfo", f"kube-system/mindx-dl-deviceinfo-w{i}", cm(f"mindx-dl-deviceinfo-w{i}", rv))
        elif op == "del-pod":
            delete(state, "pods", f"ns/p{i}")
        elif op == "del-job":
            delete(state, "vcjobs", f"ns/j{i}")
        else:
            delete(state, "deviceinfo", f"kube-system/mindx-dl-deviceinfo-w{i}")
        assert state.check_indexes() == []
    assert all(state.pods_by_node.values())  # no empty buckets left behind
    assert all(state.pods_by_job.values())


def test_queries() -> None:
    state = ClusterState()
    put(state, "pods", "ns/a", pod("a", "n1", "j1", 1, ("Ascend910-0", "Ascend910-1")))
    put(state, "pods", "ns/b", pod("b", "n1", "j1", 2, ("Ascend910-2",)))
    put(state, "pods", "ns/c", pod("c", "n2", "j2", 3, ("Ascend910-0",)))
    put(state, "vcjobs", "ns/j1", job("j1", "u1", 4))
    assert sorted(p.name for p in state.pods_of_job(JobKind.VOLCANO, "ns", "j1")) == ["a", "b"]
    assert state.job(JobKind.VOLCANO, "ns", "j1") is state.vcjobs["ns/j1"]
    assert state.job(JobKind.ASCEND, "ns", "j1") is None
    # a pod moving node leaves its old bucket
    put(state, "pods", "ns/b", pod("b", "n2", "j1", 5))
    assert sorted(p.name for p in state.pods_on_node("n2")) == ["b", "c"]
    assert state.check_indexes() == []


@pytest.mark.parametrize(
    ("expected", "listed", "ready"),
    [
        pytest.param([], [], False, id="nothing-expected-is-not-ready"),
        pytest.param(["pods@*", "nodes@*"], ["pods@*"], False, id="one-missing"),
        pytest.param(["pods@*", "nodes@*"], ["nodes@*", "pods@*"], True, id="all-listed"),
        pytest.param(["pods@a", "pods@b"], ["pods@a", "pods@a"], False, id="per-namespace-watchers"),
    ],
)
def test_readiness(expected: list[str], listed: list[str], ready: bool) -> None:
    state = ClusterState()
    for w in expected:
        state.expect(w)
    for w in listed:
        state.apply(Change(ChangeType.LISTED, w.split("@")[0], "", None, None, True, 0.0, w))
    assert state.ready is ready


def _listed_by_scan(state: ClusterState, source: str) -> bool:
    """listed()'s answer as it was computed before it was kept per source: a scan of the unlisted watchers."""
    return not any(w.split("@", 1)[0] == source for w in state.not_listed)


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param(["+pods@a", "+pods@b", "Lpods@a", "Lpods@b"], id="per-namespace-watchers"),
        pytest.param(["+nodes@*", "Lnodes@*", "+nodes@x", "Lnodes@x"], id="expected-after-the-source-listed"),
        pytest.param(["Lnodes@*", "+nodes@*", "+pods@*"], id="listed-before-expected"),
        pytest.param(["+pods@*", "Lnodes@*", "+nodes@*", "+nodes@y", "Ldeviceinfo@*"], id="other-sources"),
    ],
)
def test_listed_per_source_answers_as_the_scan(steps: list[str]) -> None:
    """ClusterState.listed(source), kept per source as watchers list: after every step (``+w``: expect watcher w,
    ``Lw``: its LISTED), for every source, the answer of a scan of the expected watchers not yet listed."""
    state = ClusterState()
    for step in steps:
        w = step[1:]
        if step[0] == "+":
            state.expect(w)
        else:
            state.apply(Change(ChangeType.LISTED, w.split("@")[0], "", None, None, True, 0.0, w))
        for source in ("pods", "nodes", "deviceinfo", "vcjobs"):
            assert state.listed(source) is _listed_by_scan(state, source), (step, source)


def test_unknown_source_is_a_wiring_error() -> None:
    with pytest.raises(UnknownSource):
        ClusterState().apply(Change(ChangeType.ADDED, "secrets", "k", cm("x", 1), None, False, 0.0))
