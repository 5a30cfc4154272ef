"""A job's fault-tolerance labels read as MindCluster's scheduler reads them: its PodGroup's labels merged with its
pods' (component/ascend-for-volcano/plugin/job.go ``getJobLabelFromVcJob``; agent.core.job_labels).

Regression (issue 36, 1): the Ascend Operator turns the AscendJob annotation ``recover-strategy`` into the PodGroup
label ``process-recover-enable=on`` (users are told not to set the label); the agent read the label from the job
only, so a chip fault on one worker of such a job restarted the whole job where MindCluster deletes the worker's
pod alone. ClusterD's ``pause`` on the PodGroup (process recovery failed) was not seen either.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import factories

from agent.core.cluster import FaultScheduling, JobKind, JobRecord, PodGroupRecord
from agent.core.correlate import correlate
from agent.core.faults import ObjectRef
from agent.core.job_labels import job_view, merge_labels
from agent.core.policy import Action, RetryLedger, decide
from agent.engine.views import StateJobs
from agent.kube.watch import ChangeType
from agent.settings import PolicySettings
from agent.sources.jobs import JobConverter, label_rejections
from agent.sources.podgroups import convert_podgroup
from agent.sources.state import ClusterState
from testbed.ascend_operator import podgroup_for

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
UID = "0b6c2a5e-1111-4222-8333-444455556666"


@pytest.mark.parametrize(
    ("podgroup", "pods", "expected"),
    [
        pytest.param({"a": "1"}, [], {"a": "1"}, id="podgroup-only"),
        pytest.param({}, [{"a": "1"}, {"a": "1"}], {"a": "1"}, id="pod-only-key-taken"),
        pytest.param({"a": "force"}, [{"a": "FORCE"}], {"a": "force"}, id="same-value-any-case-keeps-podgroups"),
        pytest.param({"a": "force"}, [{"a": "grace"}], {"a": "force|grace"}, id="different-values-joined"),
        pytest.param({"a": "on"}, [{"a": "off"}, {"a": "on"}, {"a": "OFF"}], {"a": "on|off"}, id="each-value-once"),
        pytest.param({"a": "x"}, [{"b": "y"}], {"a": "x", "b": "y"}, id="keys-added"),
    ],
)
def test_merge_labels_as_mindcluster(
    podgroup: dict[str, str], pods: list[dict[str, str]], expected: dict[str, str]
) -> None:
    assert merge_labels(podgroup, pods) == expected


def _guide_acjob(*, recover_strategy: bool = True, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The guide's AscendJob (tests/fixtures/seed-acjob.yaml) as the apiserver returns it."""
    docs = list(yaml.safe_load_all((FIXTURES / "seed-acjob.yaml").read_text()))
    job = copy.deepcopy(next(d for d in docs if d.get("kind") == "AscendJob"))
    meta = job["metadata"]
    meta.update(name="job", namespace="ns", uid=UID, resourceVersion="5", creationTimestamp="2026-01-01T00:00:00Z")
    if labels is not None:
        meta["labels"] = labels
    if recover_strategy:
        meta.setdefault("annotations", {})["recover-strategy"] = "recover"
    return job


def _podgroup(job: dict[str, Any], **labels: str) -> PodGroupRecord:
    raw = podgroup_for(job)  # the stand-in's PodGroup: what the real operator makes (docs/mindcluster-conformance.md)
    raw["metadata"].update(uid="pg-uid", resourceVersion="9")
    raw["metadata"]["labels"].update(labels)
    rec = convert_podgroup(raw)
    assert isinstance(rec, PodGroupRecord)
    return rec


def _record(job: dict[str, Any]) -> JobRecord:
    rec = JobConverter(JobKind.ASCEND)(job)
    assert isinstance(rec, JobRecord)
    return rec


def test_the_operators_process_recover_label_from_recover_strategy() -> None:
    job = _guide_acjob()
    assert "process-recover-enable" not in job["metadata"]["labels"]
    # before the PodGroup is seen: what the operator will put on it
    assert _record(job).process_recover
    assert not _record(_guide_acjob(recover_strategy=False)).process_recover
    # the operator adds the label only to a PodGroup that has labels (job.go addPgProcessRecoverLabel)
    bare = _guide_acjob(labels={})
    bare["spec"]["replicaSpecs"]["Master"]["template"]["metadata"]["labels"] = {"fault-scheduling": "force"}
    assert "process-recover-enable" not in podgroup_for(bare)["metadata"]["labels"]
    rec = _record(bare)
    assert not rec.process_recover
    assert rec.fault_scheduling is FaultScheduling.FORCE  # from the pod template alone


@pytest.mark.parametrize(
    ("podgroup_value", "template_value", "expected", "scheduling_on_template", "scheduling"),
    [
        pytest.param("on", None, True, None, FaultScheduling.FORCE, id="podgroup-on"),
        pytest.param("pause", None, False, None, FaultScheduling.FORCE, id="clusterd-pause"),
        pytest.param("on", "on", True, "force", FaultScheduling.FORCE, id="template-agrees"),
        pytest.param("pause", "on", False, None, FaultScheduling.FORCE, id="pause-and-template-on-is-no-value"),
        pytest.param("on", None, True, "grace", FaultScheduling.OFF, id="scheduling-differs-not-rescheduled"),
    ],
)
def test_settings_from_the_podgroup_merged_with_the_templates(
    podgroup_value: str,
    template_value: str | None,
    expected: bool,
    scheduling_on_template: str | None,
    scheduling: FaultScheduling,
) -> None:
    raw = _guide_acjob()
    labels = raw["spec"]["replicaSpecs"]["Worker"]["template"]["metadata"].setdefault("labels", {})
    if template_value is not None:
        labels["process-recover-enable"] = template_value
    if scheduling_on_template is not None:
        labels["fault-scheduling"] = scheduling_on_template
    view = job_view(_record(raw), _podgroup(raw, **{"process-recover-enable": podgroup_value}))
    assert view.process_recover is expected
    assert view.fault_scheduling is scheduling
    assert view.settings_from.startswith("PodGroup ")
    if scheduling is FaultScheduling.OFF:  # an unknown merged value is reported, not silently taken as off
        (rejection,) = label_rejections(view, ObjectRef("AscendJob", "ns", "job", UID))
        assert rejection.reason == "bad-fault-scheduling"
        assert "force|grace" in rejection.detail


def test_the_podgroup_replaces_the_jobs_own_labels() -> None:
    raw = _guide_acjob(recover_strategy=False)
    rec = _record(raw)
    assert rec.fault_retry_times == 3
    pg = _podgroup(raw)
    pg = replace(pg, labels=tuple((k, v) for k, v in pg.labels if k != "fault-retry-times"))
    assert job_view(rec, pg).fault_retry_times is None  # the job's label is not read once the PodGroup is
    assert rec.max_retry_from == job_view(rec, pg).max_retry_from  # the operator's backoff limit: the job's label


def _state_with(raw: dict[str, Any], pg: PodGroupRecord | None) -> ClusterState:
    state = ClusterState()
    state.apply(factories.change("acjobs", "ns/job", _record(raw), type=ChangeType.ADDED))
    if pg is not None:
        state.apply(factories.change("podgroups", f"ns/{pg.name}", pg, type=ChangeType.ADDED))
    return state


def test_the_state_follows_the_podgroup_and_reports_the_change() -> None:
    raw = _guide_acjob(recover_strategy=False)
    state = _state_with(raw, None)
    state.take_changed_jobs()
    assert not StateJobs(state)[(JobKind.ASCEND, "ns", "job")].process_recover
    on = _podgroup(raw, **{"process-recover-enable": "on"})
    state.apply(factories.change("podgroups", f"ns/{on.name}", on, type=ChangeType.ADDED))
    job = state.job(JobKind.ASCEND, "ns", "job")
    assert job is not None
    assert job.process_recover
    assert job.settings_from == f"PodGroup {on.name}"
    ((before, after),) = state.take_changed_jobs()  # the bookkeeping sees a label change of the job
    assert before is not None
    assert after is not None
    assert not before.process_recover
    assert after.process_recover
    paused = replace(
        on, resource_version="10", labels=tuple(sorted({**dict(on.labels), "process-recover-enable": "pause"}.items()))
    )
    state.apply(factories.change("podgroups", f"ns/{on.name}", paused, on))
    job = state.job(JobKind.ASCEND, "ns", "job")
    assert job is not None
    assert not job.process_recover
    assert job.label("process-recover-enable") == "pause"
    state.apply(factories.change("podgroups", f"ns/{on.name}", None, paused, type=ChangeType.DELETED))
    job = state.job(JobKind.ASCEND, "ns", "job")
    assert job is not None
    assert job.settings_from == "job"
    assert job.label("process-recover-enable") is None
    # the job changing again keeps the PodGroup's reading (the order of the watches does not matter)
    state.apply(factories.change("podgroups", f"ns/{on.name}", on, type=ChangeType.ADDED))
    state.apply(factories.change("acjobs", "ns/job", replace(_record(raw), resource_version="6")))
    job = state.job(JobKind.ASCEND, "ns", "job")
    assert job is not None
    assert job.process_recover
    assert state.check_indexes() == []


def _pods() -> list[Any]:
    master = replace(
        factories.pod("job-master-0", job="job", job_kind=JobKind.ASCEND, node="n1", rank=0), replica_type="master"
    )
    worker = replace(
        factories.pod("job-worker-0", job="job", job_kind=JobKind.ASCEND, node="n2", rank=1), replica_type="worker"
    )
    return [master, worker]


def _decide_worker_chip_fault(state: ClusterState) -> Any:
    for pod in _pods():
        state.apply(factories.change("pods", f"ns/{pod.name}", pod, type=ChangeType.ADDED))
    fault = factories.fault(node="n2")
    (hit,) = correlate(fault, state.pods_on_node("n2"), StateJobs(state)).hits
    return decide(fault, hit, RetryLedger(), PolicySettings.model_validate({}), factories.T0)


@pytest.mark.parametrize(
    ("recover_strategy", "podgroup_value", "pod_rescheduling", "action"),
    [
        pytest.param(True, "on", False, Action.RESTART_PODS, id="recover-strategy-worker-only"),
        pytest.param(True, None, False, Action.RESTART_PODS, id="recover-strategy-before-the-podgroup-is-seen"),
        pytest.param(True, "pause", False, Action.RESTART_JOB, id="paused-whole-job"),
        pytest.param(True, "pause", True, Action.RESTART_PODS, id="paused-pod-rescheduling"),
        pytest.param(False, None, False, Action.RESTART_JOB, id="plain-whole-job"),
    ],
)
def test_a_worker_chip_fault_decided_from_the_podgroup_labels(
    recover_strategy: bool, podgroup_value: str | None, pod_rescheduling: bool, action: Action
) -> None:
    raw = _guide_acjob(recover_strategy=recover_strategy)
    if pod_rescheduling:
        raw["metadata"]["labels"]["pod-rescheduling"] = "on"
    pg = None
    if podgroup_value is not None:
        pg = _podgroup(raw, **{"process-recover-enable": podgroup_value})
    decision = _decide_worker_chip_fault(_state_with(raw, pg))
    assert decision.action is action, decision.reason
    if action is Action.RESTART_PODS:
        assert decision.pods == ("job-worker-0",)
    if podgroup_value == "pause":
        assert "process-recover-enable=pause" in decision.reason
