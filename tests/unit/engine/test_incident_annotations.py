"""A job's incident annotation is input too (issue 16 item 6): one that is future-dated, made up, or names another
job is reported and not adopted, so it can never make a real fault look already handled."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs
from support import factories
from support.factories import change
from support.fakes import CountingWriter

from agent.core.cluster import FaultScheduling, JobRecord
from agent.core.faults import Fault
from agent.core.incidents import (
    INCIDENT_ANNOTATION,
    LEDGER_ANNOTATION,
    MAX_CLOCK_SKEW,
    RESUBMITTED_FROM_ANNOTATION,
    Admission,
    IncidentStore,
    Phase,
    check_incident,
    decode_incident,
    encode_incident,
    encode_ledger,
)
from agent.core.policy import Action, Decision, RetryLedger
from agent.engine.recovery import RecoveryEngine
from agent.runtime.clock import SystemClock
from agent.settings import Settings
from agent.sinks.metrics import AgentMetrics
from agent.sources.state import ClusterState

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
RESTART = Decision(Action.RESTART_JOB, "chip fault", mode=FaultScheduling.FORCE, counts_restart=True)
YEAR_9999 = "9999-01-01T00:00:00+00:00"


def _job(annotations: tuple[tuple[str, str], ...] = (), *, uid: str = "uid-job", version: str = "0") -> JobRecord:
    return factories.job(uid=uid, version=version, annotations=annotations, created_at=NOW)


def _fault(at: datetime) -> Fault:
    return factories.fault(at=at)


def _written(phase: Phase = Phase.RECOVERED) -> tuple[dict[str, Any], str]:
    """An incident and ledger exactly as the agent writes them (opened 1 min before NOW), as (incident doc,
    ledger text)."""
    store = IncidentStore()
    job = _job()
    t = NOW - timedelta(minutes=1)
    store.open(job, _fault(t), RESTART, t)
    if phase in (Phase.RESTARTING, Phase.RECOVERED):
        store.restarting(job.uid, t + timedelta(seconds=1))
    incident = store.incident(job.uid)
    assert incident is not None
    if phase is Phase.RECOVERED:
        incident = incident.move(Phase.RECOVERED, t + timedelta(seconds=20))
    return json.loads(encode_incident(incident)), encode_ledger(store.ledger(job.uid))


def _annotations(doc: dict[str, Any], ledger: str) -> tuple[tuple[str, str], ...]:
    return ((INCIDENT_ANNOTATION, json.dumps(doc)), (LEDGER_ANNOTATION, ledger))


def _future(doc: dict[str, Any]) -> dict[str, Any]:
    """Every time in the incident set to year 9999 (the issue's reproduction)."""
    out = dict(doc, firstFaultAt=YEAR_9999, steps=[[p, YEAR_9999] for p, _ in doc["steps"]])
    if out.get("restartAt"):
        out["restartAt"] = YEAR_9999
    return out


def test_what_the_agent_writes_is_adopted() -> None:
    doc, ledger = _written()
    store = IncidentStore()
    assert store.restore(_job(_annotations(doc, ledger)), NOW) == []
    assert store.incident("uid-job") == decode_incident(json.dumps(doc))


def test_a_year_9999_incident_is_not_adopted_and_a_real_fault_is_new() -> None:
    doc, ledger = _written()
    store = IncidentStore()
    (err,) = store.restore(_job(_annotations(_future(doc), ledger)), NOW)
    assert err.key == INCIDENT_ANNOTATION
    assert "in the future" in err.detail
    assert "9999" in err.detail
    assert store.incident("uid-job") is None
    assert store.ledger("uid-job").incidents == 1  # the readable ledger is still adopted
    assert store.admit(_job(), _fault(NOW)) is Admission.NEW  # old code: STALE ("older than the last incident")


def test_a_time_just_ahead_within_the_clock_skew_is_accepted() -> None:
    doc, ledger = _written()
    ahead = (NOW + MAX_CLOCK_SKEW - timedelta(seconds=1)).isoformat()
    doc = dict(doc, steps=[*doc["steps"][:-1], [doc["steps"][-1][0], ahead]])
    assert IncidentStore().restore(_job(_annotations(doc, ledger)), NOW) == []


def _mutated(**changes: Any) -> dict[str, Any]:
    doc, _ = _written()
    return dict(doc, **changes)


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        pytest.param(_mutated(id="job-0123456789"), "is not the id of incident 1", id="made-up-id"),
        pytest.param(_mutated(jobUID="uid-other"), "is not the job's UID", id="other-job-uid"),
        pytest.param(_mutated(name="other"), "not this job", id="other-job-name"),
        pytest.param(_mutated(phase="acting"), "is not its last step", id="phase-not-last-step"),
        pytest.param(_mutated(steps=[]), "do not start with detected", id="no-steps"),
        pytest.param(_mutated(restartAt=None), "restartAt", id="restarting-without-restart-time"),
        pytest.param(_mutated(action="nuke"), "unknown action", id="unknown-action"),
        pytest.param(_mutated(mode="FORCE"), "unknown mode", id="unknown-mode"),
        pytest.param(_mutated(firstFaultAt="1970-01-01T00:00:00+00:00"), "before 2000", id="epoch"),
    ],
)
def test_check_incident_names_what_is_wrong(doc: dict[str, Any], problem: str) -> None:
    incident = decode_incident(json.dumps(doc))
    found = check_incident(incident, _job(), RetryLedger(restarts_used=1, incidents=1), NOW)
    assert found is not None
    assert problem in found


def test_steps_out_of_order_or_skipping_the_lifecycle_are_refused() -> None:
    doc, ledger = _written()
    steps = doc["steps"]
    backwards = dict(doc, steps=[steps[0], [steps[1][0], "2001-01-01T00:00:00+00:00"], *steps[2:]])
    skipping = dict(doc, steps=[steps[0], *steps[2:]])  # detected -> restarting
    for bad, problem in ((backwards, "is before step"), (skipping, "steps go from detected to restarting")):
        (err,) = IncidentStore().restore(_job(_annotations(bad, ledger)), NOW)
        assert problem in err.detail


def test_a_made_up_open_incident_does_not_swallow_a_real_fault() -> None:
    made_up = {
        "id": "job-aaaaaaaaaa", "jobUID": "uid-job", "kind": "vcjob", "namespace": "ns", "name": "job",
        "generation": "0", "phase": "restarting", "firstFaultAt": NOW.isoformat(),
        "steps": [["detected", NOW.isoformat()], ["acting", NOW.isoformat()], ["restarting", NOW.isoformat()]],
        "restartAt": NOW.isoformat(),
    }  # fmt: skip
    store = IncidentStore()
    (err,) = store.restore(_job(_annotations(made_up, encode_ledger(RetryLedger(incidents=1)))), NOW)
    assert "is not the id" in err.detail
    assert store.admit(_job(), _fault(NOW)) is Admission.NEW  # old code: JOINED the made-up incident


def test_a_resubmitted_job_adopts_the_incident_it_carries_from_its_predecessor() -> None:
    store = IncidentStore()
    old = _job(uid="uid-old")
    t = NOW - timedelta(minutes=1)
    store.open(old, _fault(t), Decision(Action.RESUBMIT, "failed", mode=FaultScheduling.FORCE), t)
    store.resubmitted("uid-old", "uid-new", t + timedelta(seconds=1))
    incident, ledger = store.encoded("uid-new")
    annotations = {INCIDENT_ANNOTATION: incident, LEDGER_ANNOTATION: ledger}  # an earlier version's, migrated
    new = _job((*annotations.items(), (RESUBMITTED_FROM_ANNOTATION, "uid-old")), uid="uid-new")
    other = IncidentStore()
    assert other.restore(new, NOW) == []
    assert other.incident("uid-new") is not None


# ------------------------------------------------------------------------------------------------ the engine


def _state(annotations: tuple[tuple[str, str], ...]) -> ClusterState:
    state = ClusterState()
    node = factories.node(at=NOW)
    state.apply(change("nodes", "n1", node))
    state.apply(change("vcjobs", "ns/job", _job(annotations)))
    for i in range(2):
        pod = factories.pod(f"job-{i}", uid=f"uid-pod-{i}", chips=(f"Ascend910-{i}",), rank=i, created_at=NOW)
        state.apply(change("pods", f"ns/job-{i}", pod))
    return state


async def test_the_engine_restarts_a_job_whose_incident_annotation_is_year_9999_and_reports_it_once() -> None:
    doc, ledger = _written()
    registry = CollectorRegistry()
    api = k8s.ApiClient()
    writer = CountingWriter(api)
    settings = Settings.model_validate({"kafka": {"enabled": False}})
    engine = RecoveryEngine(
        settings,
        _state(_annotations(_future(doc), ledger)),
        writer,
        metrics=AgentMetrics(registry),
        clock=SystemClock(),
    )
    with capture_logs() as logs:
        await engine.handle_fault(_fault(NOW), NOW)
        await engine.idle()
        await engine.tick(NOW + timedelta(seconds=1))
        await engine.idle()
    await api.close()
    assert writer.commands == 1  # old code: 0, "fault older than the job's last incident; ignored"
    warnings = [e for e in logs if e.get("event") == "job record unreadable; ignored"]
    assert len(warnings) == 1
    assert "in the future" in warnings[0]["error"]
    labels = {"source": "Job", "reason": "bad-annotation"}
    assert registry.get_sample_value("fault_agent_input_rejected_total", labels) == 1
