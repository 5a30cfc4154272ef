"""The ``ProcessRecoverStrategy`` annotation read from a job's PodGroup as well as from the job (MindCluster reads
it from the PodGroup: component/ascend-for-volcano/internal/rescheduling/job.go ``isDealFaultByExternal``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from support import factories
from support.factories import change

from agent.core.cluster import JobKind, JobRecord, PodGroupRecord
from agent.core.faults import Rejection
from agent.engine.views import StateJobs, with_podgroup_strategy
from agent.kube.watch import ChangeType
from agent.settings import KubeSettings
from agent.sources.podgroups import convert_podgroup
from agent.sources.state import ClusterState
from agent.sources.watchers import resources

UID = "job-uid-1"


def _raw(name: str, *, owner: dict[str, Any] | None = None, strategy: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"pg-{name}", "resourceVersion": "7"}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    if strategy is not None:
        meta["annotations"] = {"ProcessRecoverStrategy": strategy, "other": "x"}
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": meta, "spec": {}}


VC_OWNER = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "job", "uid": UID, "controller": True}
AC_OWNER = {"apiVersion": "mindxdl.gitee.com/v1", "kind": "AscendJob", "name": "job", "uid": UID, "controller": True}
OTHER_UID = dict(VC_OWNER, uid="an-earlier-job")
NOT_A_JOB = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "job", "uid": UID, "controller": True}


def _job(strategy: str | None = None) -> JobRecord:
    return replace(factories.job("job", namespace="ns", uid=UID), process_recover_strategy=strategy)


@pytest.mark.parametrize(
    ("job_strategy", "podgroups", "expected", "source"),
    [
        pytest.param(None, [], None, "job", id="neither"),
        pytest.param("recover", [], "recover", "job", id="job-only"),
        pytest.param(None, [_raw("job-" + UID, owner=VC_OWNER, strategy="on")], "on", "PodGroup", id="podgroup-only"),
        pytest.param(None, [_raw("job-" + UID, owner=VC_OWNER, strategy="")], "", "PodGroup", id="empty-value-counts"),
        pytest.param(
            "recover", [_raw("job-" + UID, owner=VC_OWNER, strategy="on")], "recover", "job", id="job-wins-when-both"
        ),
        pytest.param(None, [_raw("job-" + UID, owner=VC_OWNER)], None, "job", id="podgroup-without-it"),
        pytest.param(None, [_raw("odd-name", owner=VC_OWNER, strategy="on")], "on", "PodGroup", id="by-owner-uid"),
        pytest.param(None, [_raw("job-" + UID, strategy="on")], "on", "PodGroup", id="by-name-job-uid-no-owner"),
        pytest.param(None, [_raw("job", strategy="on")], "on", "PodGroup", id="by-old-name-no-owner"),
        pytest.param(
            None, [_raw("job", owner=OTHER_UID, strategy="on")], None, "job", id="same-name-earlier-job-ignored"
        ),
        pytest.param(None, [_raw("job", owner=NOT_A_JOB, strategy="on")], "on", "PodGroup", id="non-job-owner-by-name"),
        pytest.param(None, [_raw("other-" + UID, strategy="on")], None, "job", id="another-jobs-podgroup"),
    ],
)
def test_strategy_on_the_job_or_its_podgroup(
    job_strategy: str | None, podgroups: list[dict[str, Any]], expected: str | None, source: str
) -> None:
    state = ClusterState()
    job = _job(job_strategy)
    state.apply(change("vcjobs", "ns/job", job))
    for raw in podgroups:
        rec = convert_podgroup(raw)
        assert isinstance(rec, PodGroupRecord)
        state.apply(change("podgroups", f"ns/{rec.name}", rec))
    seen = StateJobs(state)[(JobKind.VOLCANO, "ns", "job")]
    assert (seen.process_recover_strategy, seen.process_recover_strategy_from) == (expected, source)
    assert state.check_indexes() == []


def test_the_podgroup_annotation_removed_or_deleted_no_longer_counts() -> None:
    state = ClusterState()
    state.apply(change("vcjobs", "ns/job", _job()))
    marked = convert_podgroup(_raw("pg", owner=AC_OWNER, strategy="on"))
    assert isinstance(marked, PodGroupRecord)
    assert marked.owner_kind is JobKind.ASCEND
    state.apply(change("podgroups", "ns/pg", marked))
    assert state.podgroup_strategy(_job()) == "on"
    cleared = convert_podgroup(_raw("pg", owner=AC_OWNER))
    state.apply(change("podgroups", "ns/pg", cleared))
    assert state.podgroup_strategy(_job()) is None
    state.apply(change("podgroups", "ns/pg", marked))
    state.apply(replace(change("podgroups", "ns/pg", None), type=ChangeType.DELETED))
    assert state.podgroup_strategy(_job()) is None
    assert state.podgroups_by_owner == {}
    assert state.check_indexes() == []


def test_with_podgroup_strategy_is_identity_without_one() -> None:
    job = _job()
    assert with_podgroup_strategy(job, None) is job
    assert with_podgroup_strategy(_job("a"), "b").process_recover_strategy == "a"


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        pytest.param({"kind": "PodGroup"}, "missing-metadata", id="no-metadata"),
        pytest.param({"metadata": {"name": "pg", "uid": "u"}}, "missing-metadata", id="no-resource-version"),
        pytest.param(
            {"metadata": {"name": "pg", "uid": "u", "resourceVersion": "1", "ownerReferences": ["x"]}},
            "wrong-type",
            id="owner-not-an-object",
        ),
        pytest.param(
            {"metadata": {"name": "pg", "uid": "u", "resourceVersion": "1", "annotations": []}},
            "wrong-type",
            id="annotations-not-a-map",
        ),
    ],
)
def test_bad_podgroups_are_rejected(raw: dict[str, Any], reason: str) -> None:
    out = convert_podgroup(raw)
    assert isinstance(out, Rejection)
    assert out.reason == reason


def test_podgroups_watched_per_namespace_unless_turned_off() -> None:
    on = [r for r in resources(KubeSettings.model_validate({"namespaces": ["a", "b"]})) if r.source == "podgroups"]
    assert [(r.group, r.version, r.plural, r.namespace) for r in on] == [
        ("scheduling.volcano.sh", "v1beta1", "podgroups", "a"),
        ("scheduling.volcano.sh", "v1beta1", "podgroups", "b"),
    ]
    off = resources(KubeSettings.model_validate({"podgroup_info_enabled": False}))
    assert all(r.source != "podgroups" for r in off)
