"""Incidents: de-duplication, lifecycle, ledger and their annotations (agent/core/incidents/)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from support import factories

from agent.core.cluster import FaultScheduling, JobRecord, PodRecord
from agent.core.faults import Fault
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    MAX_FAULTS_KEPT,
    Admission,
    IncidentDecodeError,
    IncidentStore,
    Phase,
    TransitionError,
    decode_incident,
    decode_ledger,
    encode_incident,
    encode_ledger,
    incident_id,
    job_healthy,
)
from agent.core.policy import Action, Decision, RetryLedger

T0 = datetime(2025, 1, 1, tzinfo=UTC)
RESTART = Decision(Action.RESTART_JOB, "chip fault", mode=FaultScheduling.FORCE, counts_restart=True)
BUSINESS = Decision(Action.RESTART_JOB, "business", mode=FaultScheduling.FORCE, consumes_business_budget=True)
ABORT = Decision(Action.ABORT, "budget used up")


def _job(version: str = "0", phase: str = "Running", annotations: tuple[tuple[str, str], ...] = ()) -> JobRecord:
    return factories.job(
        labels=(),
        fault_scheduling=FaultScheduling.FORCE,
        fault_retry_times=2,
        min_available=None,
        phase=phase,
        version=version,
        annotations=annotations,
        created_at=T0,
    )


def _fault(at: datetime = T0, chip: str = "Ascend910-0") -> Fault:
    return factories.fault(chips=(chip,), at=at)


def _pod(name: str, created: datetime, phase: str = "Running", ready: bool = True) -> PodRecord:
    return factories.pod(name, phase=phase, ready=ready, chips=(), rank=None, created_at=created)


def _s(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_lifecycle_to_recovered() -> None:
    store = IncidentStore()
    job = _job()
    assert store.admit(job, _fault()) is Admission.NEW
    inc = store.open(job, _fault(), RESTART, _s(1))
    assert inc.phase is Phase.ACTING
    assert inc.at(Phase.DETECTED) == T0
    inc = store.restarting(job.uid, _s(2), pod_uids=["uid-w0"])
    assert inc.restart_at == _s(2)
    # pods from before the restart do not count as recovered
    assert store.observe(_job("1"), [_pod("w0", _s(0))], _s(3), 1800) is None
    inc2 = store.observe(_job("1"), [_pod("w0", _s(10)), _pod("w1", _s(11))], _s(20), 1800)
    assert inc2 is not None
    assert inc2.phase is Phase.RECOVERED
    assert inc2.recovery_seconds == 20.0
    assert [p for p, _ in inc2.steps] == [Phase.DETECTED, Phase.ACTING, Phase.RESTARTING, Phase.RECOVERED]
    assert store.ledger(job.uid).restarts_used == 1
    assert store.ledger(job.uid).agent_pod_uids == ("uid-w0",)


def test_storm_of_faults_joins_one_incident() -> None:
    store = IncidentStore()
    job = _job()
    store.admit(job, _fault())
    store.open(job, _fault(), RESTART, _s(0))
    admissions = [store.admit(job, _fault(_s(i), chip=f"Ascend910-{i % 8}")) for i in range(1, 30)]
    assert set(admissions) == {Admission.JOINED}
    inc = store.incident(job.uid)
    assert inc is not None
    assert inc.fault_count == 30
    assert len(inc.faults) == MAX_FAULTS_KEPT
    assert store.ledger(job.uid).restarts_used == 1


@pytest.mark.parametrize(
    ("fault_at", "job_version", "expected"),
    [
        pytest.param(1, "0", Admission.STALE, id="before-restart-same-generation"),
        pytest.param(2.0, "0", Admission.NEW, id="same-second-as-restart-is-new"),
        pytest.param(5, "0", Admission.NEW, id="after-restart-same-generation"),
        pytest.param(1, "1", Admission.NEW, id="new-generation"),
    ],
)
def test_admission_after_close(fault_at: float, job_version: str, expected: Admission) -> None:
    store = IncidentStore()
    job = _job()
    store.admit(job, _fault())
    store.open(job, _fault(), RESTART, _s(1))
    store.restarting(job.uid, _s(2.4))
    store.fail(job.uid, _s(10), "test")
    assert store.admit(_job(job_version), _fault(_s(fault_at))) is expected


def test_abort_opens_failed_incident_and_new_id_each_time() -> None:
    store = IncidentStore()
    job = _job()
    inc = store.open(job, _fault(), ABORT, _s(1))
    assert inc.phase is Phase.FAILED
    assert inc.detail == "budget used up"
    second = store.open(job, _fault(_s(5)), RESTART, _s(6))
    assert second.id != inc.id
    assert second.id == incident_id(job, 2)


def test_open_twice_is_a_bug() -> None:
    store = IncidentStore()
    store.open(_job(), _fault(), RESTART, _s(1))
    with pytest.raises(TransitionError, match="already has open incident"):
        store.open(_job(), _fault(), RESTART, _s(2))


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        pytest.param(["restarting", "restarting"], "cannot go from restarting to restarting", id="restart-twice"),
        pytest.param(["fail", "restarting"], "cannot go from failed to restarting", id="after-failed"),
    ],
)
def test_illegal_transitions(steps: list[str], message: str) -> None:
    store = IncidentStore()
    store.open(_job(), _fault(), RESTART, _s(1))

    def step(name: str) -> None:
        if name == "restarting":
            store.restarting("uid-job", _s(2))
        else:
            store.fail("uid-job", _s(2), "x")

    step(steps[0])
    with pytest.raises(TransitionError, match=message):
        step(steps[1])


def test_transition_without_incident() -> None:
    with pytest.raises(TransitionError, match="no incident"):
        IncidentStore().restarting("nope", T0)


def test_deadline_fails_open_incident() -> None:
    store = IncidentStore()
    store.open(_job(), _fault(), RESTART, _s(1))
    store.restarting("uid-job", _s(2))
    assert store.observe(_job(), [], _s(100), 120) is None
    inc = store.observe(_job(), [], _s(121), 120)
    assert inc is not None
    assert inc.phase is Phase.FAILED
    assert "within 120 s" in inc.detail


@pytest.mark.parametrize(
    ("phase", "pods", "expected"),
    [
        pytest.param("Running", [("a", 10, "Running", True)], True, id="all-ready-new"),
        pytest.param("Restarting", [("a", 10, "Running", True)], False, id="job-not-running"),
        pytest.param("Running", [], False, id="no-pods"),
        pytest.param("Running", [("a", 10, "Running", True), ("b", 10, "Pending", False)], False, id="one-pending"),
        pytest.param("Running", [("a", 10, "Running", False)], False, id="not-ready"),
        pytest.param("Running", [("a", 1, "Running", True)], False, id="pod-older-than-restart"),
        pytest.param("Running", [("a", 5, "Running", True)], True, id="same-second-as-restart"),
    ],
)
def test_job_healthy(phase: str, pods: list[tuple[str, float, str, bool]], expected: bool) -> None:
    records = [_pod(n, _s(c), ph, r) for n, c, ph, r in pods]
    assert job_healthy(_job(phase=phase), records, _s(5.7)) is expected


def test_annotations_round_trip_and_new_leader_resumes() -> None:
    store = IncidentStore()
    job = _job()
    store.open(job, _fault(), BUSINESS, _s(1))
    store.restarting(job.uid, _s(2), pod_uids=["uid-a"])
    incident, ledger = store.encoded(job.uid)
    annotations = {INCIDENT_ANNOTATION: incident, LEDGER_ANNOTATION: ledger}
    # a new leader reads the job with these annotations (an earlier version's); the record's are the same texts
    other = IncidentStore()
    assert other.restore(_job(annotations=tuple(annotations.items()))) == []
    assert other.incident(job.uid) == store.incident(job.uid)
    assert other.ledger(job.uid) == store.ledger(job.uid)
    assert other.ledger(job.uid).business_retries_used == 1
    # the resumed incident absorbs the next fault instead of opening a second one
    assert other.admit(job, _fault(_s(3))) is Admission.JOINED


def test_restore_does_not_overwrite_own_memory() -> None:
    store = IncidentStore()
    store.open(_job(), _fault(), RESTART, _s(1))
    stale = RetryLedger()
    assert store.restore(_job(annotations=((LEDGER_ANNOTATION, encode_ledger(stale)),))) == []
    assert store.ledger("uid-job").restarts_used == 1


def test_restore_reports_bad_annotations() -> None:
    errors = IncidentStore().restore(_job(annotations=((LEDGER_ANNOTATION, "{"), (INCIDENT_ANNOTATION, "[]"))))
    assert [e.key for e in errors] == [LEDGER_ANNOTATION, INCIDENT_ANNOTATION]


def _good_incident() -> dict[str, object]:
    store = IncidentStore()
    inc = store.open(_job(), _fault(), RESTART, _s(1))
    doc: dict[str, object] = json.loads(encode_incident(inc))
    return doc


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"phase": "exploded"}, "unknown phase 'exploded'", id="unknown-phase"),
        pytest.param({"phase": None}, "'phase' must be a str", id="phase-not-string"),
        pytest.param({"id": None}, "'id' must be a str", id="id-not-string"),
        pytest.param({"firstFaultAt": "yesterday"}, "firstFaultAt is not an ISO 8601", id="bad-time"),
        pytest.param({"firstFaultAt": "2025-01-01T00:00:00"}, "has no time zone", id="naive-time"),
        pytest.param({"steps": [["acting"]]}, r"steps\[0\] must be \[phase, time\]", id="short-step"),
        pytest.param({"steps": [["boom", "2025-01-01T00:00:00+00:00"]]}, "unknown phase 'boom'", id="bad-step"),
        pytest.param({"faultCount": -1}, "must not be negative", id="negative-count"),
        pytest.param({"faultCount": True}, "must be an integer", id="bool-count"),
        pytest.param({"faults": [1]}, "list of strings", id="faults-not-strings"),
    ],
)
def test_decode_incident_rejects(change: dict[str, object], message: str) -> None:
    doc = _good_incident() | change
    with pytest.raises(IncidentDecodeError, match=message):
        decode_incident(json.dumps(doc))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("not json", "not valid JSON", id="not-json"),
        pytest.param("[1]", "must be a JSON object", id="array"),
        pytest.param('{"restartsUsed": "2"}', "'restartsUsed' must be an integer", id="string-count"),
        pytest.param('{"businessRetriesUsed": -3}', "must not be negative", id="negative"),
        pytest.param('{"agentPodUIDs": [1, 2]}', "list of strings", id="uids-not-strings"),
    ],
)
def test_decode_ledger_rejects(text: str, message: str) -> None:
    with pytest.raises(IncidentDecodeError, match=message):
        decode_ledger(text)


def test_missing_required_field() -> None:
    doc = _good_incident()
    del doc["jobUID"]
    with pytest.raises(IncidentDecodeError, match="missing field 'jobUID'"):
        decode_incident(json.dumps(doc))


def test_ledger_keeps_newest_agent_pods() -> None:
    ledger = RetryLedger().with_agent_pods(str(i) for i in range(300))
    assert len(ledger.agent_pod_uids) == 256
    assert ledger.agent_pod_uids[-1] == "299"
    assert decode_ledger(encode_ledger(ledger)) == ledger


def test_incident_id_is_deterministic() -> None:
    assert incident_id(_job(), 1) == incident_id(_job(), 1)
    assert incident_id(_job(), 1) != incident_id(replace(_job(), version="1"), 1)
    assert incident_id(_job(), 1).startswith("job-")
