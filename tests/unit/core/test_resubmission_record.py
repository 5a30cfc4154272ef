"""The resubmission record (agent.core.resubmission): the ConfigMap written before a resubmitted job is deleted,
read back, its size limit, and what a leader does with one it finds left over."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agent.actions.writer import resubmission_body
from agent.core.cluster import JobKind
from agent.core.incidents import (
    RESUBMITTED_FROM_ANNOTATION,
    Incident,
    IncidentStore,
    Phase,
    encode_incident,
    encode_ledger,
)
from agent.core.policy import RetryLedger
from agent.core.resubmission import (
    CONFIGMAP_LIMIT_BYTES,
    KEYS,
    BodyTooLarge,
    Leftover,
    PendingResubmission,
    ResubmissionDecodeError,
    configmap_name,
    decode,
    encode,
    leftover_action,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)
OLD_UID = "0d9c7b62-1111-4a4a-9e9e-000000000001"
JOB: dict[str, Any] = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "llm", "namespace": "team-a", "uid": OLD_UID, "labels": {"fault-scheduling": "force"}},
    "spec": {"minAvailable": 2, "maxRetry": 3, "tasks": [{"name": "worker", "replicas": 2}]},
    "status": {"state": {"phase": "Failed"}},
}


def _acting(uid: str = OLD_UID) -> Incident:
    return Incident(
        id="llm-0123456789", job_uid=uid, kind="vcjob", namespace="team-a", name="llm", generation="0",
        phase=Phase.DETECTED, first_fault_at=AT, steps=((Phase.DETECTED, AT),),
    ).move(Phase.ACTING, AT, action="resubmit", mode="force", reason="job failed")  # fmt: skip


def _pending(**changes: Any) -> PendingResubmission:
    fields: dict[str, Any] = {
        "kind": JobKind.VOLCANO,
        "namespace": "team-a",
        "name": "llm",
        "from_uid": OLD_UID,
        "incident": "llm-0123456789",
        "count": 2,
        "body": resubmission_body(JOB, from_uid=OLD_UID, count=2),
        "incident_state": encode_incident(_acting()),
        "ledger": encode_ledger(RetryLedger(resubmits_used=2, incidents=3)),
    }
    fields.update(changes)
    return PendingResubmission(**fields)


def test_the_record_is_named_from_the_old_uid_and_reads_back_as_written() -> None:
    pending = _pending()
    data = encode(pending)
    assert pending.configmap == configmap_name(OLD_UID) == f"fault-agent-resubmit-{OLD_UID}"
    assert set(data) == set(KEYS)
    assert all(isinstance(v, str) for v in data.values())
    again = decode(pending.configmap, data)
    assert again == pending
    assert again.body["spec"] == JOB["spec"]  # the spec that was lost before
    assert again.body["metadata"]["annotations"][RESUBMITTED_FROM_ANNOTATION] == OLD_UID


def test_a_body_over_the_configmap_limit_is_refused_with_its_size() -> None:
    big = resubmission_body(
        {**JOB, "spec": {**JOB["spec"], "blob": "x" * CONFIGMAP_LIMIT_BYTES}}, from_uid=OLD_UID, count=1
    )
    with pytest.raises(BodyTooLarge, match="over the 1048576-byte ConfigMap limit; the job is not deleted") as e:
        encode(_pending(body=big))
    assert e.value.size > CONFIGMAP_LIMIT_BYTES


def _broken(key: str, value: str | None) -> dict[str, str]:
    data = encode(_pending())
    if value is None:
        del data[key]
    else:
        data[key] = value
    return data


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(_broken("body", None), "missing-key", id="no-body"),
        pytest.param(_broken("kind", "deployment"), "bad-kind", id="unknown-kind"),
        pytest.param(_broken("count", "two"), "bad-count", id="count-not-a-number"),
        pytest.param(_broken("body", "{not json"), "bad-body", id="body-not-json"),
        pytest.param(_broken("name", "other"), "bad-body", id="body-of-another-job"),
        pytest.param(_broken("from-uid", "another-uid"), "bad-body", id="lineage-not-from-uid"),
    ],
)
def test_an_unreadable_record_is_rejected_with_a_reason(data: dict[str, str], reason: str) -> None:
    with pytest.raises(ResubmissionDecodeError) as e:
        decode(configmap_name(OLD_UID), data)
    assert e.value.reason == reason


def test_a_record_under_another_uids_name_is_rejected() -> None:
    with pytest.raises(ResubmissionDecodeError) as e:
        decode(configmap_name("some-other-uid"), encode(_pending()))
    assert e.value.reason == "bad-name"


def _obj(uid: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "llm", "namespace": "team-a", "uid": uid, "annotations": annotations or {}}}


@pytest.mark.parametrize(
    ("current", "expected"),
    [
        pytest.param(None, Leftover.CREATE, id="neither-job-create-from-the-record"),
        pytest.param(_obj(OLD_UID), Leftover.OLD_EXISTS, id="old-job-still-there"),
        pytest.param(_obj("new-uid", {RESUBMITTED_FROM_ANNOTATION: OLD_UID}), Leftover.FINISHED, id="new-job-made"),
        pytest.param(_obj("new-uid"), Leftover.CONFLICT, id="unrelated-object-never-touched"),
        pytest.param(
            _obj("new-uid", {RESUBMITTED_FROM_ANNOTATION: "an-earlier-uid"}),
            Leftover.CONFLICT,
            id="resubmitted-from-another-job",
        ),
    ],
)
def test_what_a_leader_does_with_a_left_over_record(current: dict[str, Any] | None, expected: Leftover) -> None:
    assert leftover_action(_pending(), current) is expected


def test_the_store_adopts_the_records_acting_incident_and_moves_it_to_the_new_job() -> None:
    store = IncidentStore()
    pending = _pending()
    assert store.adopt_resubmission(pending.from_uid, pending.incident_state, pending.ledger) == []
    moved = store.resubmitted(OLD_UID, "new-uid", AT)
    assert (moved.id, moved.job_uid, moved.phase) == ("llm-0123456789", "new-uid", Phase.RESTARTING)
    assert store.ledger("new-uid").resubmits_used == 2


def test_the_store_keeps_what_it_knows_and_adopts_no_closed_incident() -> None:
    store = IncidentStore()
    closed = _acting().move(Phase.FAILED, AT, detail="x")
    errors = store.adopt_resubmission(OLD_UID, encode_incident(closed), "")
    assert [e.key for e in errors] == ["fault-agent.io/incident"]
    assert store.incident(OLD_UID) is None
    assert store.adopt_resubmission(OLD_UID, encode_incident(_acting()), "") == []  # known now: left as it is
    assert store.incident(OLD_UID) is None
