"""Event builders: attributes, deterministic ids, keys, and every type valid against its JSON Schema."""

from __future__ import annotations

import filecmp
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cloudevents.core.v1.event import CloudEvent
from support import factories

from agent.core.checkpoint_wait import GraceWait, GraceWaitOutcome, WaitEnded
from agent.core.faults import Fault, FaultCleared, FaultKind, FaultLevel, ObjectRef
from agent.sinks import events as ev

ROOT = Path(__file__).resolve().parents[3]
T0 = datetime(2025, 3, 1, 12, 0, 0, 250000, tzinfo=UTC)
JOB = ObjectRef("vcjob", "team-a", "llama-8b", "0b5d3c4e-1111-2222-3333-444455556666")
CM = ObjectRef("ConfigMap", "kube-system", "mindx-dl-deviceinfo-node-7")
OTHER = ObjectRef("acjob", "team-b", "gpt", "7e0c2b1a-1111-2222-3333-444455556666")


def chip_fault(**kw: Any) -> Fault:
    base = factories.fault(
        node="node-7", chips=("Ascend910-3",), at=T0, observed_at=T0 + timedelta(seconds=1.5), source=CM
    )
    return replace(base, **kw)


DURATIONS = ev.Durations(detection=1.5, decision=0.01, action=0.2, reschedule=40.0, total=41.71)


def every_event() -> list[tuple[str, CloudEvent]]:
    """One event of each type (and the node-event variants)."""
    c = "prod-east"
    f = chip_fault()
    node_fault = chip_fault(kind=FaultKind.NODE, chips=(), codes=("00000011",), reason="SeparateFault")
    pod = ObjectRef("Pod", "team-a", "llama-8b-worker-0", "p-uid")
    business = chip_fault(kind=FaultKind.BUSINESS, level=FaultLevel.RESTART_BUSINESS, chips=(), codes=("137",), pod=pod)
    return [
        ("detected-job", ev.fault_detected(f, cluster=c, job=JOB, incident_id="inc-1")),
        ("detected-node", ev.fault_detected(node_fault, cluster=c)),
        ("detected-business", ev.fault_detected(business, cluster=c, job=JOB)),
        ("cleared-job", ev.fault_cleared(FaultCleared(f, T0 + timedelta(minutes=5), CM), cluster=c, job=JOB)),
        ("cleared-node", ev.fault_cleared(FaultCleared(node_fault, T0 + timedelta(minutes=5), CM), cluster=c)),
        (
            "cleared-one-of-two-jobs",
            ev.fault_cleared(
                FaultCleared(f, T0 + timedelta(minutes=5), CM), cluster=c, job=OTHER, jobs=[JOB, OTHER], incident_id="i"
            ),
        ),
        (
            "started",
            ev.recovery_started(
                "inc-1",
                JOB,
                "restart-job",
                "chip Ascend910-3 on node-7 is SeparateNPU",
                cluster=c,
                at=T0,
                faults=[f],
                budget_left=2,
            ),
        ),
        (
            "held",
            ev.recovery_held(
                "inc-1",
                JOB,
                "restart-job",
                "held by the open circuit breaker",
                cluster=c,
                at=T0,
                faults=[f],
                breaker_reason="2 of 4 nodes faulty",
            ),
        ),
        (
            "started-dry-run",
            ev.recovery_started("inc-1", JOB, "delete-pods", "r", cluster=c, at=T0, dry_run=True, attempt=2),
        ),
        ("succeeded", ev.recovery_succeeded("inc-1", JOB, "restart-job", DURATIONS, cluster=c, at=T0)),
        (
            "succeeded-grace-waits",
            ev.recovery_succeeded(
                "inc-2",
                JOB,
                "restart-job",
                DURATIONS,
                cluster=c,
                at=T0,
                grace_waits=[
                    GraceWaitOutcome(GraceWait.GRACE_EXIT, WaitEnded.TIMEOUT, 30.0),
                    GraceWaitOutcome(GraceWait.GRACE_OVER_TIME, WaitEnded.CHECKPOINT, 2.4, 1200),
                ],
            ),
        ),
        (
            "failed",
            ev.recovery_failed(
                "inc-1", JOB, ev.FailureReason.BUDGET_EXHAUSTED, cluster=c, at=T0, action="restart-job", detail="3/3"
            ),
        ),
        ("failed-str-reason", ev.recovery_failed("inc-1", JOB, "timeout", cluster=c, at=T0, attempt=2)),
        (
            "tripped",
            ev.breaker_tripped(
                cluster=c,
                at=T0,
                reason="5 of 10 nodes faulty in 300 s",
                faulty_nodes=["n2", "n1"],
                watched_nodes=10,
                threshold_share=0.2,
                window_s=300,
            ),
        ),
        (
            "reset",
            ev.breaker_reset(cluster=c, at=T0, by="alice", reason="rack fixed", opened_at=T0 - timedelta(hours=1)),
        ),
        ("reset-no-open", ev.breaker_reset(cluster=c, at=T0 + timedelta(hours=2), by="alice")),
        (
            "job-misconfigured",
            ev.job_misconfigured(
                JOB, cluster=c, at=T0, label="fault-retry-times", value="abc", problem="not an integer 0–100"
            ),
        ),
        (
            "recovery-resumed",
            ev.recovery_resumed(
                JOB,
                cluster=c,
                incident_id="inc-1",
                restart_at=T0,
                first_fault_at=T0 - timedelta(seconds=400),
                first_step_at=T0 + timedelta(seconds=95),
                step=1001,
                checkpoint_step=1000,
            ),
        ),
        (
            "job-hung",
            ev.job_hung(
                JOB,
                cluster=c,
                at=T0,
                pod=pod,
                node="node-7",
                lease=ObjectRef("Lease", "team-a", "fault-agent-progress-llama-8b", "l-uid"),
                step=1200,
                checkpoint_step=1000,
                last_step_at=T0 - timedelta(seconds=300),
                timeout_s=300.0,
                timeout_from="label",
                action="restart-job",
                reason="business failure, retry 1 of 3",
                incident_id="inc-1",
            ),
        ),
        (
            "job-hung-no-incident",
            ev.job_hung(
                JOB,
                cluster=c,
                at=T0,
                pod=pod,
                node="node-7",
                lease=ObjectRef("Lease", "team-a", "fault-agent-progress-llama-8b", "l-uid"),
                step=0,
                checkpoint_step=None,
                last_step_at=T0 - timedelta(seconds=1800),
                timeout_s=1800.0,
                timeout_from="ceiling",
                action="none",
                reason="no budget",
                incident_id=None,
            ),
        ),
        (
            "job-straggler",
            ev.job_straggler(
                JOB,
                cluster=c,
                at=T0,
                found_at=T0,
                state="straggling",
                pod=pod,
                node="node-7",
                chips=("Ascend910-0", "Ascend910-1"),
                rank=3,
                step=1200,
                step_time_s=2.6,
                median_s=1.0,
                multiple=1.5,
                windows=3,
                lease=ObjectRef("Lease", "team-a", "fault-agent-progress-llama-8b", "l-uid"),
                mode="avoid",
                avoidance="node-marked",
            ),
        ),
        (
            "job-straggler-ended",
            ev.job_straggler(
                JOB,
                cluster=c,
                at=T0 + timedelta(seconds=600),
                found_at=T0,
                state="ended",
                pod=pod,
                node="node-7",
                chips=(),
                rank=3,
                step=1200,
                step_time_s=None,
                median_s=None,
                multiple=1.5,
                windows=3,
                lease=ObjectRef("Lease", "team-a", "fault-agent-progress-llama-8b", "l-uid"),
                mode="detect",
                avoidance="none",
                ended_by="restarted",
            ),
        ),
        (
            "quarantine-released",
            ev.quarantine_released(
                "node-3",
                cluster=c,
                at=T0,
                by="alice",
                reason="board replaced",
                chips=("Ascend910-2",),
                hold_until=T0 + timedelta(hours=20),
            ),
        ),
        (
            "quarantine-released-still-faulty",
            ev.quarantine_released(
                "node-3", cluster=c, at=T0 + timedelta(hours=1), by="alice", still_quarantined="SeparateNPU"
            ),
        ),
    ]


@pytest.mark.parametrize(("name", "event"), every_event(), ids=[n for n, _ in every_event()])
def test_every_event_is_valid_against_the_envelope_and_its_data_schema(name: str, event: CloudEvent) -> None:
    doc = json.loads(ev.encode(event).value)
    checker = jsonschema.FormatChecker()
    jsonschema.validate(doc, ev.envelope_schema(), format_checker=checker)
    jsonschema.validate(doc["data"], ev.data_schema_for(event.get_type()), format_checker=checker)
    assert doc["dataschema"] == ev.data_schema_for(event.get_type())["$id"]
    assert ev.event_errors(doc) == []


@pytest.mark.parametrize(("name", "event"), every_event(), ids=[n for n, _ in every_event()])
def test_extension_attributes_are_accepted(name: str, event: CloudEvent) -> None:
    """A proxy or tracer may add CloudEvents extension attributes (W3C trace context's `traceparent`/`tracestate`,
    the spec's own `dataref`, `sequence`, ...) to the value: the envelope allows them."""
    doc = json.loads(ev.encode(event).value)
    doc["traceparent"] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    doc["tracestate"] = "rojo=00f067aa0ba902b7"
    doc["sequence"] = 7
    doc["sampled"] = True
    doc["averyveryverylongname1"] = "over the recommended 20 characters: still a valid name"
    assert ev.event_errors(doc) == []


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        pytest.param(lambda d: d.update(Traceparent="x"), "(root)", id="upper-case-name"),
        pytest.param(lambda d: d.update(trace_parent="x"), "(root)", id="underscore-in-name"),
        pytest.param(lambda d: d.update(traceparent={"a": 1}), "traceparent", id="object-value"),
        pytest.param(lambda d: d.update(traceparent=1.5), "traceparent", id="float-value"),
        pytest.param(lambda d: d.pop("partitionkey"), "(root)", id="missing-partitionkey"),
        pytest.param(lambda d: d.update(type="io.faultagent.nope.v1"), "type", id="unknown-type"),
        pytest.param(
            lambda d: d.update(dataschema="urn:fault-agent:schema:io.faultagent.fault.cleared.v1"),
            "dataschema",
            id="dataschema-of-another-type",
        ),
        pytest.param(lambda d: d.update(data="text"), "data", id="data-not-an-object"),
    ],
)
def test_envelope_rejects(mutate: Any, where: str) -> None:
    doc = ev.as_json(ev.fault_detected(chip_fault(), cluster="c", job=JOB))
    mutate(doc)
    errors = ev.event_errors(doc)
    assert errors, "accepted"
    assert any(e.startswith(f"{where}:") for e in errors), errors
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, ev.envelope_schema())


def test_every_type_is_built_by_some_builder() -> None:
    assert {e.get_type() for _, e in every_event()} == set(ev.EVENT_TYPES)


@pytest.mark.parametrize("event_type", ev.EVENT_TYPES)
def test_data_schema_rejects_another_types_data(event_type: str) -> None:
    others = [e for _, e in every_event() if e.get_type() != event_type]
    for other in others:
        data = ev.as_json(other)["data"]
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(data, ev.data_schema_for(event_type))


@pytest.mark.parametrize(
    ("mutate", "where"),
    [
        pytest.param(lambda d: d["data"]["fault"].update(level="Broken"), "data/fault/level", id="level"),
        pytest.param(lambda d: d["data"].pop("job"), "data/(root)", id="missing-job"),
        pytest.param(lambda d: d.update(time="yesterday"), "time", id="time"),
        pytest.param(lambda d: d["data"]["fault"].update(detection_lag_s=-1), "data/fault/detection_lag_s", id="lag"),
        pytest.param(lambda d: d["data"].update(extra=1), "data/(root)", id="unknown-data-member"),
    ],
)
def test_schemas_reject_broken_fault_detected(mutate: Any, where: str) -> None:
    doc = ev.as_json(ev.fault_detected(chip_fault(), cluster="c", job=JOB))
    mutate(doc)
    errors = ev.event_errors(doc)
    assert any(e.startswith(f"{where}:") for e in errors), errors


def test_data_schema_ids_are_the_dataschema_attribute() -> None:
    for event_type in ev.EVENT_TYPES:
        schema = ev.data_schema_for(event_type)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$id"] == f"urn:fault-agent:schema:{event_type}"
    jsonschema.Draft202012Validator.check_schema(ev.envelope_schema())


def test_packaged_schemas_equal_documented_copies() -> None:
    packaged = ROOT / "agent" / "sinks" / "schemas"
    documented = ROOT / "config" / "schemas"
    names = sorted(p.name for p in packaged.glob("*.json"))
    assert names == sorted(p.name for p in documented.glob("*.json"))
    assert names == sorted([f"{t}.json" for t in ev.EVENT_TYPES] + [f"{ev.ENVELOPE_SCHEMA}.json"])
    match, mismatch, errors = filecmp.cmpfiles(packaged, documented, names, shallow=False)
    assert (mismatch, errors) == ([], [])
    assert len(match) == len(ev.EVENT_TYPES) + 1


@pytest.mark.parametrize(
    ("event", "subject", "key", "stream"),
    [
        pytest.param(
            ev.fault_detected(chip_fault(), cluster="c", job=JOB),
            "team-a/llama-8b",
            JOB.uid,
            ev.Stream.FAULTS,
            id="job-fault",
        ),
        pytest.param(
            ev.fault_detected(chip_fault(), cluster="c"), "node/node-7", "node-7", ev.Stream.FAULTS, id="node-fault"
        ),
        pytest.param(
            ev.fault_detected(chip_fault(), cluster="c", job=replace(JOB, uid="")),
            "team-a/llama-8b",
            "team-a/llama-8b",
            ev.Stream.FAULTS,
            id="job-without-uid-keyed-by-name",
        ),
        pytest.param(
            ev.recovery_started("i", JOB, "a", "r", cluster="c", at=T0),
            "team-a/llama-8b",
            JOB.uid,
            ev.Stream.RECOVERIES,
            id="recovery",
        ),
        pytest.param(
            ev.breaker_reset(cluster="c", at=T0, by="bob"), "cluster", "breaker", ev.Stream.RECOVERIES, id="breaker"
        ),
        pytest.param(
            ev.quarantine_released("node-3", cluster="c", at=T0, by="bob"),
            "node/node-3",
            "node-3",
            ev.Stream.FAULTS,
            id="quarantine-released",
        ),
        pytest.param(
            ev.job_misconfigured(JOB, cluster="c", at=T0, label="fault-retry-times", value="-1", problem="p"),
            "team-a/llama-8b",
            JOB.uid,
            ev.Stream.RECOVERIES,
            id="job-misconfigured",
        ),
    ],
)
def test_subject_key_and_stream(event: CloudEvent, subject: str, key: str, stream: ev.Stream) -> None:
    msg = ev.encode(event)
    assert event.get_subject() == subject
    assert msg.key == key.encode()
    assert msg.stream is stream
    # Structured mode (CloudEvents Kafka binding 3.2): content-type only, no binary-mode ce_* headers.
    assert msg.headers == (("content-type", b"application/cloudevents+json"),)


def test_attributes_time_and_source() -> None:
    f = chip_fault(signal_time=T0.astimezone(timezone(timedelta(hours=8))))
    doc = ev.as_json(ev.fault_detected(f, cluster="prod east/1", job=JOB))
    assert doc["time"] == "2025-03-01T12:00:00.250000Z"
    assert doc["source"] == "/fault-agent/prod%20east%2F1"
    assert doc["specversion"] == "1.0"
    assert doc["data"]["fault"]["detection_lag_s"] == pytest.approx(1.5)
    assert doc["data"]["fault"]["level"] == "SeparateNPU"


def test_ids_are_deterministic_and_distinct() -> None:
    first = [e.get_id() for _, e in every_event()]
    again = [e.get_id() for _, e in every_event()]
    assert first == again
    assert len(set(first)) == len(first)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param(
            lambda: ev.fault_detected(chip_fault(), cluster="c", job=JOB),
            lambda: ev.fault_detected(chip_fault(), cluster="d", job=JOB),
            id="cluster",
        ),
        pytest.param(
            lambda: ev.fault_detected(chip_fault(), cluster="c", job=JOB),
            lambda: ev.fault_detected(chip_fault(chips=("Ascend910-4",)), cluster="c", job=JOB),
            id="chip",
        ),
        pytest.param(
            lambda: ev.fault_detected(chip_fault(), cluster="c", job=JOB),
            lambda: ev.fault_detected(chip_fault(signal_time=T0 + timedelta(seconds=1)), cluster="c", job=JOB),
            id="signal-time",
        ),
        pytest.param(
            lambda: ev.fault_detected(chip_fault(), cluster="c", job=JOB),
            lambda: ev.fault_detected(chip_fault(), cluster="c", job=replace(JOB, name="other")),
            id="job",
        ),
        pytest.param(  # one id is one content: the incident link is part of a fault.detected id
            lambda: ev.fault_detected(chip_fault(), cluster="c", job=JOB, incident_id="inc-1"),
            lambda: ev.fault_detected(chip_fault(), cluster="c", job=JOB),
            id="incident-link",
        ),
        pytest.param(
            lambda: ev.fault_detected(chip_fault(), cluster="c", job=JOB, incident_id="inc-1"),
            lambda: ev.fault_detected(chip_fault(), cluster="c", job=JOB, incident_id="inc-2"),
            id="incident",
        ),
        pytest.param(
            lambda: ev.recovery_started("i", JOB, "a", "r", cluster="c", at=T0),
            lambda: ev.recovery_started("i", JOB, "a", "r", cluster="c", at=T0, attempt=2),
            id="attempt",
        ),
        pytest.param(
            lambda: ev.recovery_started("i", JOB, "a", "r", cluster="c", at=T0),
            lambda: ev.recovery_failed("i", JOB, "timeout", cluster="c", at=T0),
            id="type",
        ),
    ],
)
def test_ids_differ_when_the_occurrence_differs(a: Any, b: Any) -> None:
    assert a().get_id() != b().get_id()


def test_same_occurrence_same_id_even_with_other_observation_time() -> None:
    a = ev.fault_detected(chip_fault(), cluster="c", job=JOB)
    b = ev.fault_detected(chip_fault(observed_at=T0 + timedelta(seconds=9)), cluster="c", job=JOB)
    assert a.get_id() == b.get_id()


NAIVE = datetime(2025, 3, 1, 12, 0, 0)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        pytest.param(
            lambda: ev.fault_detected(chip_fault(signal_time=NAIVE), cluster="c", job=JOB),
            "fault.signal_time",
            id="naive-signal-time",
        ),
        pytest.param(
            lambda: ev.fault_detected(chip_fault(observed_at=NAIVE), cluster="c", job=JOB),
            "fault.observed_at",
            id="naive-observed-at",
        ),
        pytest.param(lambda: ev.fault_detected(chip_fault(node=""), cluster="c"), "job", id="no-job-no-node"),
        pytest.param(
            lambda: ev.fault_detected(chip_fault(node=""), cluster="c", job=JOB),
            "fault.node",
            id="chip-fault-without-node",
        ),
        pytest.param(lambda: ev.fault_detected(chip_fault(), cluster="", job=JOB), "cluster", id="empty-cluster"),
        pytest.param(
            lambda: ev.fault_detected(chip_fault(), cluster="c", job=replace(JOB, namespace="")),
            "job",
            id="job-without-namespace",
        ),
        pytest.param(
            lambda: ev.fault_cleared(FaultCleared(chip_fault(), NAIVE, CM), cluster="c"),
            "cleared_at",
            id="naive-cleared-at",
        ),
        pytest.param(
            lambda: ev.recovery_started("", JOB, "a", "r", cluster="c", at=T0), "incident_id", id="empty-incident"
        ),
        pytest.param(lambda: ev.recovery_started("i", JOB, "", "r", cluster="c", at=T0), "action", id="empty-action"),
        pytest.param(lambda: ev.recovery_started("i", JOB, "a", " ", cluster="c", at=T0), "reason", id="blank-reason"),
        pytest.param(
            lambda: ev.recovery_started("i", JOB, "a", "r", cluster="c", at=T0, attempt=0), "attempt", id="attempt-zero"
        ),
        pytest.param(
            lambda: ev.recovery_started("i", JOB, "a", "r", cluster="c", at=T0, budget_left=-1),
            "budget_left",
            id="negative-budget",
        ),
        pytest.param(lambda: ev.recovery_started("i", JOB, "a", "r", cluster="c", at=NAIVE), "at", id="naive-at"),
        pytest.param(
            lambda: ev.recovery_succeeded("i", JOB, "a", replace(DURATIONS, reschedule=-1.0), cluster="c", at=T0),
            "durations.reschedule",
            id="negative-duration",
        ),
        pytest.param(
            lambda: ev.recovery_succeeded("i", JOB, "a", replace(DURATIONS, total=float("nan")), cluster="c", at=T0),
            "durations.total",
            id="nan-duration",
        ),
        pytest.param(lambda: ev.recovery_failed("i", JOB, "bored", cluster="c", at=T0), "reason", id="unknown-reason"),
        pytest.param(
            lambda: ev.breaker_tripped(
                cluster="c", at=T0, reason="r", faulty_nodes=[], watched_nodes=0, threshold_share=0.2, window_s=300
            ),
            "watched_nodes",
            id="no-nodes",
        ),
        pytest.param(
            lambda: ev.breaker_tripped(
                cluster="c", at=T0, reason="r", faulty_nodes=[], watched_nodes=3, threshold_share=1.5, window_s=300
            ),
            "threshold_share",
            id="share",
        ),
        pytest.param(
            lambda: ev.breaker_tripped(
                cluster="c", at=T0, reason="r", faulty_nodes=[], watched_nodes=3, threshold_share=0.5, window_s=0
            ),
            "window_s",
            id="window",
        ),
        pytest.param(lambda: ev.breaker_reset(cluster="c", at=T0, by=""), "by", id="reset-by-nobody"),
        pytest.param(
            lambda: ev.breaker_reset(cluster="c", at=T0, by="a", opened_at=T0 + timedelta(1)),
            "opened_at",
            id="opened-after-reset",
        ),
    ],
)
def test_bad_arguments_raise_a_specific_error(build: Any, field: str) -> None:
    with pytest.raises(ev.EventBuildError) as info:
        build()
    assert info.value.field == field
    assert info.value.retriable is False
    assert field in str(info.value)


def test_encode_rejects_foreign_events() -> None:
    foreign = CloudEvent({"type": "com.example.other", "source": "/x", "id": "1"}, {"a": 1})
    with pytest.raises(ev.EventBuildError, match="not an event type"):
        ev.encode(foreign)
    keyless = CloudEvent({"type": ev.BREAKER_RESET, "source": "/x", "id": "1"}, {"a": 1})
    with pytest.raises(ev.EventBuildError, match="partition key"):
        ev.encode(keyless)


def test_decode_round_trip_and_errors() -> None:
    e = ev.fault_detected(chip_fault(), cluster="c", job=JOB)
    back = ev.decode(ev.encode(e).value)
    assert back.get_id() == e.get_id()
    assert back.get_time() == e.get_time()
    assert back.get_data() == e.get_data()
    for bad in (b"{not json", b'{"specversion": "1.0"}', b"[]"):
        with pytest.raises(ValueError, match="not a structured CloudEvent"):
            ev.decode(bad)


_GOOD_ATTRS = '"specversion": "1.0", "id": "a", "source": "/s", "type": "t"'


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(b"\xff", id="not-utf8-ValueError"),
        pytest.param(b"{not json", id="not-json-ValueError"),
        pytest.param(b"1", id="json-number-TypeError"),
        pytest.param(b"null", id="json-null-TypeError"),
        pytest.param(b"[]", id="json-array-AttributeError"),
        pytest.param(b'"x"', id="json-string-AttributeError"),
        pytest.param(("{" + _GOOD_ATTRS + ', "time": 5}').encode(), id="time-not-string-TypeError"),
        pytest.param(("{" + _GOOD_ATTRS + ', "time": "soon"}').encode(), id="time-not-rfc3339-ValueError"),
        pytest.param(b'{"specversion": "1.0"}', id="missing-attributes-CloudEventValidationError"),
        pytest.param(("{" + _GOOD_ATTRS + ', "id": 5}').encode(), id="id-not-string-CloudEventValidationError"),
    ],
)
def test_decode_bad_value_raises_value_error(bad: bytes) -> None:
    """Each error the SDK's reader raises for a bad value is still reported as one ValueError (the narrowed catch)."""
    with pytest.raises(ValueError, match="not a structured CloudEvent") as got:
        ev.decode(bad)
    assert got.value.__cause__ is not None


def test_decode_does_not_hide_a_bug(monkeypatch: pytest.MonkeyPatch) -> None:
    """An exception that is not about the value (a bug, here a RuntimeError in the reader) is not turned into
    "not a structured CloudEvent"."""
    from agent.sinks.events import codec

    def broken(*_: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(codec._FORMAT, "read", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        ev.decode(b"{}")


def test_data_schema_for_unknown_type() -> None:
    with pytest.raises(ev.EventBuildError):
        ev.data_schema_for("io.faultagent.nope.v1")
    assert ev.event_errors({"type": "io.faultagent.nope.v1"})  # bad input gives errors, not an exception
    assert ev.event_errors([])
    assert ev.event_errors({"type": 3, "data": None})


@pytest.mark.parametrize(("name", "event"), every_event(), ids=[n for n, _ in every_event()])
def test_fast_encoding_equals_the_sdk_structured_format(name: str, event: CloudEvent) -> None:
    from cloudevents.core.bindings.kafka import to_structured_event

    sdk = to_structured_event(event)
    assert json.loads(ev.encode(event).value) == json.loads(sdk.value)
    assert dict(ev.encode(event).headers) == sdk.headers  # the SDK's structured mode: content-type only


@pytest.mark.parametrize(
    "at",
    [
        pytest.param(datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC), id="whole-second"),
        pytest.param(datetime(2025, 3, 1, 12, 0, 0, 1, tzinfo=UTC), id="one-microsecond"),
        pytest.param(datetime(2025, 3, 1, 20, 0, 0, 5000, tzinfo=timezone(timedelta(hours=8))), id="offset"),
    ],
)
def test_fast_encoding_writes_time_like_the_sdk(at: datetime) -> None:
    from cloudevents.core.bindings.kafka import to_structured_event

    e = ev.breaker_reset(cluster="c", at=at, by="a")
    assert json.loads(ev.encode(e).value)["time"] == json.loads(to_structured_event(e).value)["time"]


@pytest.mark.parametrize("job", [pytest.param(JOB, id="job"), pytest.param(None, id="node")])
def test_fault_cleared_pairs_with_its_fault_detected(job: ObjectRef | None) -> None:
    """Issue 16 item 3: a consumer keyed by job UID finds the clear in the detected event's stream and matches it
    by the fault's identity and by the detected event's id."""
    f = chip_fault()
    detected = ev.fault_detected(f, cluster="c", job=job)
    cleared = ev.fault_cleared(FaultCleared(f, T0 + timedelta(minutes=5), CM), cluster="c", job=job, jobs=[OTHER])
    d, c = ev.as_json(detected), ev.as_json(cleared)
    assert ev.encode(cleared).key == ev.encode(detected).key
    assert c["subject"] == d["subject"]
    assert c["data"]["fault_id"] == d["data"]["fault_id"] == ev.fault_id(f, cluster="c")
    assert c["data"]["detected_id"] == d["id"]
    assert c["data"]["job"] == d["data"]["job"]
    assert [j["uid"] for j in c["data"]["jobs"]] == sorted([OTHER.uid] + ([job.uid] if job else []))
    # another fault of the same chip (a later signal) is another identity
    assert ev.fault_id(chip_fault(signal_time=T0 + timedelta(hours=1)), cluster="c") != d["data"]["fault_id"]


def test_detected_id_is_the_id_of_the_fault_detected_with_that_incident_link() -> None:
    f = chip_fault()
    for incident in (None, "inc-1"):
        built = ev.fault_detected(f, cluster="c", job=JOB, incident_id=incident)
        assert ev.detected_id(f, cluster="c", job=JOB, incident_id=incident) == built.get_id()
        cleared = ev.fault_cleared(
            FaultCleared(f, T0 + timedelta(minutes=1), CM), cluster="c", job=JOB, detected_incident_id=incident
        )
        assert ev.as_json(cleared)["data"]["detected_id"] == built.get_id()
