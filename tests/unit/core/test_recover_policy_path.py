"""``huawei.com/recover_policy_path: pod`` (issue 36 item 4): read from the job or its pod templates, and no
escalation beyond the fault pods, even for rank 0 (MindCluster internal/rescheduling/job.go setReScheduleLimit,
allowUpgradePodRescheduling, isNormalTaskCanBeDelete; reschedule.go singlePodReschedulingUpgrade)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support import factories

from agent.core.cluster import FaultScheduling, JobKind, JobRecord, PodRecord
from agent.core.correlate import JobHit
from agent.core.faults import Fault, FaultKind, FaultLevel, ObjectRef
from agent.core.policy import Action, Decision, RetryLedger, decide, pending_escalation
from agent.settings import PolicySettings
from agent.sources.jobs import JobConverter

T0 = datetime(2025, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(seconds=2)
KEY = "huawei.com/recover_policy_path"


def _raw(kind: JobKind, *, job_ann: dict[str, str] | None = None, tpl_ann: dict[str, str] | None = None,
         labels: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    template: dict[str, Any] = {"metadata": {"annotations": tpl_ann}} if tpl_ann is not None else {}
    spec: dict[str, Any]
    if kind is JobKind.VOLCANO:
        spec = {"maxRetry": 3, "tasks": [{"name": "w", "replicas": 2, "template": template}]}
    else:
        spec = {"replicaSpecs": {"Master": {"template": {}}, "Worker": {"template": template}}}
    return {
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "u1",
            "resourceVersion": "1",
            "labels": {"fault-scheduling": "force", **(labels or {})},
            "annotations": job_ann or {},
        },
        "spec": spec,
        "status": {},
    }


@pytest.mark.parametrize("kind", [JobKind.VOLCANO, JobKind.ASCEND])
@pytest.mark.parametrize(
    ("raw", "value", "where"),
    [
        pytest.param({"tpl_ann": {KEY: "pod"}}, "pod", "the pod template's annotation", id="pod-template"),
        pytest.param({"job_ann": {KEY: "pod"}, "tpl_ann": {KEY: "job"}}, "pod", "the job's annotation", id="job-first"),
        pytest.param({"job_ann": {KEY: "job"}}, "job", "the job's annotation", id="other-value-no-limit"),
        pytest.param(
            {"labels": {"app": "mindie-ms-controller"}},
            "pod",
            "the job's label app=mindie-ms-controller",
            id="mindie-controller-label",
        ),
        pytest.param(
            {"labels": {"ome.io/inferenceservice": "x"}},
            "pod",
            "the job's label ome.io/inferenceservice",
            id="ome-label",
        ),
        pytest.param({"labels": {"app": "other"}}, "", "", id="absent"),
    ],
)
def test_recover_policy_path_is_read_from_the_job_then_its_pod_templates(
    kind: JobKind, raw: dict[str, Any], value: str, where: str
) -> None:
    rec = JobConverter(kind)(_raw(kind, **raw))
    assert isinstance(rec, JobRecord)
    assert (rec.recover_policy_path, rec.recover_policy_path_from) == (value, where)
    assert rec.pod_only is (value == "pod")


def _job(**kw: object) -> JobRecord:
    base = factories.job(labels=(), fault_scheduling=FaultScheduling.FORCE, min_available=None, created_at=T0)
    fields: dict[str, object] = {
        "recover_policy_path": "pod",
        "recover_policy_path_from": "the pod template's annotation",
    }
    return replace(base, **{**fields, **kw})  # type: ignore[arg-type]


def _decide(fault: Fault, job: JobRecord, pods: tuple[PodRecord, ...]) -> Decision:
    hit = JobHit(job=job, pods=pods, actionable=True)
    return decide(fault, hit, RetryLedger(), PolicySettings.model_validate({}), NOW)


def _chip_fault() -> Fault:
    return factories.fault(kind=FaultKind.CHIP, level=FaultLevel.SEPARATE, chips=("Ascend910-0",), at=T0)


@pytest.mark.parametrize(
    "job_kw",
    [
        pytest.param({}, id="plain-force-job"),
        pytest.param({"pod_rescheduling": True}, id="pod-rescheduling"),
        pytest.param({"process_recover": True}, id="process-recovery"),
        pytest.param({"fault_scheduling": FaultScheduling.GRACE}, id="grace-job"),
    ],
)
def test_a_chip_fault_on_rank_0_deletes_only_that_pod(job_kw: dict[str, object]) -> None:
    master = factories.pod("j-master-0", rank=0, created_at=T0)
    d = _decide(_chip_fault(), _job(**job_kw), (master,))
    assert (d.action, d.pods) == (Action.RESTART_PODS, ("j-master-0",))
    assert "recover_policy_path: pod" in d.reason
    assert d.counts_restart


def test_without_the_annotation_rank_0_still_escalates_to_the_whole_job() -> None:
    master = factories.pod("j-master-0", rank=0, created_at=T0)
    d = _decide(_chip_fault(), _job(pod_rescheduling=True, recover_policy_path=""), (master,))
    assert d.action is Action.RESTART_JOB


def test_a_failed_master_pod_is_the_only_pod_deleted() -> None:
    master = factories.pod("j-master-0", rank=0, created_at=T0, phase="Failed")
    fault = factories.fault(kind=FaultKind.BUSINESS, level=FaultLevel.RESTART_BUSINESS, at=T0,
                            pod=ObjectRef("Pod", "ns", "j-master-0", "uid-j-master-0"))  # fmt: skip
    d = _decide(fault, _job(fault_retry_times=2), (master,))
    assert (d.action, d.pods) == (Action.RESTART_PODS, ("j-master-0",))
    assert d.consumes_business_budget


def test_unplaced_replacements_never_escalate() -> None:
    gone: list[PodRecord] = []  # the deleted pod has no replacement at all
    later = T0 + timedelta(seconds=600)
    job = _job(pod_rescheduling=True)
    assert pending_escalation(job, ["j-w-1"], gone, T0, later, 12.0) is None
    assert pending_escalation(replace(job, recover_policy_path=""), ["j-w-1"], gone, T0, later, 12.0) is not None
