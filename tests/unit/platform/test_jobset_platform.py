"""JobSets in `lint`, `submit` (its plan), `status` (the job view) and the builder (agent/platform/)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.core.cluster import JobKind
from agent.platform.builders import BuildError, JobSetTrainingSpec, build_jobset, guide_jobset
from agent.platform.kubeapi import job_kind_of, job_phase
from agent.platform.lint import lint_documents
from agent.platform.status import job_view
from agent.platform.submit import plan_documents


def _guide() -> dict[str, Any]:
    return copy.deepcopy(guide_jobset("train", "ns", workers=2, image="busybox", max_restarts=3))


def _rules(doc: dict[str, Any]) -> dict[str, str]:
    return {p.rule: p.severity for p in lint_documents([doc], "jobset.yaml")}


def _worker(doc: dict[str, Any]) -> dict[str, Any]:
    job: dict[str, Any] = doc["spec"]["replicatedJobs"][0]["template"]["spec"]
    return job


def test_the_guide_jobset_lints_clean() -> None:
    assert lint_documents([_guide()], "jobset.yaml") == []


def _no_policy(doc: dict[str, Any]) -> None:
    del doc["spec"]["failurePolicy"]


def _backoff(doc: dict[str, Any]) -> None:
    _worker(doc)["backoffLimit"] = 2


def _no_eviction_rule(doc: dict[str, Any]) -> None:
    doc["spec"]["failurePolicy"]["rules"] = []


def _on_failure(doc: dict[str, Any]) -> None:
    _worker(doc)["template"]["spec"]["restartPolicy"] = "OnFailure"


def _not_opted_in(doc: dict[str, Any]) -> None:
    doc["metadata"]["labels"] = {}


def _bad_action(doc: dict[str, Any]) -> None:
    doc["spec"]["failurePolicy"]["rules"][0]["action"] = "Retry"


@pytest.mark.parametrize(
    ("change", "rule", "severity"),
    [
        pytest.param(_no_policy, "jobset-not-restartable", "error", id="no-failure-policy"),
        pytest.param(_backoff, "jobset-not-restartable", "error", id="backoff-limit-2"),
        pytest.param(_no_eviction_rule, "jobset-evictions-counted", "warning", id="evictions-counted"),
        pytest.param(_on_failure, "jobset-restart-policy", "error", id="restart-policy-on-failure"),
        pytest.param(_not_opted_in, "jobset-not-opted-in", "warning", id="not-opted-in"),
        pytest.param(_bad_action, "jobset-spec-invalid", "error", id="unknown-rule-action"),
    ],
)
def test_lint_jobset_rules(change: Any, rule: str, severity: str) -> None:
    doc = _guide()
    change(doc)
    assert _rules(doc).get(rule) == severity


def test_submit_plans_a_jobset_without_rings_config() -> None:
    plan = plan_documents([_guide()], None)
    assert plan.kind is JobKind.JOBSET
    assert plan.rings_config is None
    assert (plan.namespace, plan.name) == ("ns", "train")
    assert plan.ref == "JobSet ns/train"


@pytest.mark.parametrize(
    ("status", "phase"),
    [
        pytest.param(None, "", id="no-status-yet"),
        pytest.param({"restarts": 0}, "Running", id="running"),
        pytest.param({"conditions": [{"type": "Failed", "status": "True"}]}, "Failed", id="failed"),
        pytest.param({"conditions": [{"type": "Completed", "status": "True"}]}, "Completed", id="completed"),
    ],
)
def test_jobset_phase(status: dict[str, Any] | None, phase: str) -> None:
    doc = _guide()
    assert job_kind_of(doc) is JobKind.JOBSET
    if status is not None:
        doc["status"] = status
    assert job_phase(JobKind.JOBSET, doc) == phase


def test_status_shows_jobsets_own_counters() -> None:
    doc = _guide()
    doc["metadata"].update(uid="u-1", resourceVersion="1")
    doc["status"] = {"restarts": 3, "restartsCountTowardsMax": 2}
    view = job_view(JobKind.JOBSET, doc)
    assert (view.retries_used, view.retry_budget, view.retry_unlimited) == (2, 3, False)
    assert "restartsCountTowardsMax is 2" in view.retry_rule
    assert "1 restarts left" in view.retry_rule


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        pytest.param({"workers": 0}, "workers", id="no-workers"),
        pytest.param({"max_restarts": -1}, "max_restarts", id="negative-max-restarts"),
        pytest.param({"name": "Bad_Name"}, "JobSet name", id="bad-name"),
        pytest.param({"image": ""}, "image", id="no-image"),
    ],
)
def test_build_jobset_refuses(kw: dict[str, Any], message: str) -> None:
    spec = {"name": "train", "namespace": "ns", "image": "busybox", **kw}
    with pytest.raises(BuildError, match=message):
        build_jobset(JobSetTrainingSpec(**spec))


def test_the_example_file_is_the_guide_jobset() -> None:
    path = Path(__file__).resolve().parents[3] / "config" / "examples" / "jobset-train.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]
    assert docs == [guide_jobset()]
    assert lint_documents(docs, str(path)) == []


def _trainjob(metadata_labels: dict[str, str], spec_labels: dict[str, str] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"runtimeRef": {"name": "torch-distributed"}, "trainer": {"numNodes": 2}}
    if spec_labels is not None:
        spec["labels"] = spec_labels
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "train", "labels": metadata_labels},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("metadata_labels", "spec_labels", "rules"),
    [
        # the opt-in where Trainer copies it to the JobSet: only the runtime (not in the file) is left to say
        ({}, {"fault-scheduling": "force"}, {"trainjob-runtime-not-checked": "warning"}),
        # on the TrainJob's own metadata only: Trainer never copies it, the JobSet is not opted in
        (
            {"fault-scheduling": "force", "fault-retry-times": "3"},
            None,
            {
                "trainjob-label-not-propagated": "error",
                "trainjob-not-opted-in": "warning",
                "trainjob-runtime-not-checked": "warning",
            },
        ),
        (
            {},
            {"fault-scheduling": "yes"},
            {"trainjob-not-opted-in": "error", "trainjob-runtime-not-checked": "warning"},
        ),
    ],
)
def test_lint_trainjob_wants_the_labels_in_spec_labels(
    metadata_labels: dict[str, str], spec_labels: dict[str, str] | None, rules: dict[str, str]
) -> None:
    problems = lint_documents([_trainjob(metadata_labels, spec_labels)], "trainjob.yaml")
    assert {p.rule: p.severity for p in problems} == rules
    moved = [p for p in problems if p.rule == "trainjob-label-not-propagated"]
    assert sorted(p.path for p in moved) == sorted(f"metadata.labels.{k}" for k in metadata_labels)
