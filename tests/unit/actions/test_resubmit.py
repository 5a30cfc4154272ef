"""Resubmission's pure parts: the body created again from a Failed job, and the lineage count read back."""

from __future__ import annotations

from datetime import UTC, datetime

from support import factories

from agent.actions.writer import resubmission_body
from agent.core.cluster import FaultScheduling, JobRecord
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    RESUBMIT_COUNT_ANNOTATION,
    RESUBMITTED_FROM_ANNOTATION,
    IncidentStore,
)

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)

FAILED_JOB = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {
        "name": "llm",
        "namespace": "team-a",
        "uid": "old-uid",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2025-03-01T11:00:00Z",
        "managedFields": [{"manager": "kubectl"}],
        "ownerReferences": [{"kind": "JobFlow", "name": "f", "uid": "u"}],
        "finalizers": ["x"],
        "labels": {"fault-scheduling": "force"},
        "annotations": {
            "team": "llm",
            INCIDENT_ANNOTATION: "{}",
            LEDGER_ANNOTATION: "{}",
            RESUBMIT_COUNT_ANNOTATION: "1",
        },
    },
    "spec": {"maxRetry": 3, "tasks": [{"name": "worker", "replicas": 2}]},
    "status": {"state": {"phase": "Failed"}, "version": 4},
}


def test_resubmission_body_keeps_the_spec_labels_and_annotations_and_adds_lineage() -> None:
    body = resubmission_body(FAILED_JOB, from_uid="old-uid", count=2)
    assert body == {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "name": "llm",
            "namespace": "team-a",
            "labels": {"fault-scheduling": "force"},
            "annotations": {"team": "llm", RESUBMIT_COUNT_ANNOTATION: "2", RESUBMITTED_FROM_ANNOTATION: "old-uid"},
        },
        "spec": {"maxRetry": 3, "tasks": [{"name": "worker", "replicas": 2}]},
    }
    body["spec"]["tasks"][0]["replicas"] = 9
    assert FAILED_JOB["spec"]["tasks"][0]["replicas"] == 2  # type: ignore[index]  # a copy, not the original


def _job(annotations: tuple[tuple[str, str], ...]) -> JobRecord:
    return factories.job(
        uid="new-uid",
        labels=(),
        fault_scheduling=FaultScheduling.FORCE,
        phase="Failed",
        annotations=annotations,
        created_at=NOW,
    )


def test_the_resubmit_count_is_read_back_from_the_job() -> None:
    store = IncidentStore()
    assert store.restore(_job(((RESUBMIT_COUNT_ANNOTATION, "2"),))) == []
    assert store.ledger("new-uid").resubmits_used == 2


def test_an_unreadable_resubmit_count_is_reported_and_ignored() -> None:
    store = IncidentStore()
    errors = store.restore(_job(((RESUBMIT_COUNT_ANNOTATION, "two"),)))
    assert [e.key for e in errors] == [RESUBMIT_COUNT_ANNOTATION]
    assert store.ledger("new-uid").resubmits_used == 0
