"""CloudEvents the agent publishes: fault detected/cleared, recovery held/started/succeeded/failed, breaker
tripped/reset, job misconfigured, quarantine released.

Every builder returns a CloudEvents 1.0 event (``cloudevents.core.v1.event.CloudEvent`` from the
``cloudevents`` SDK) whose

- ``type`` is one of the versioned names in :data:`EVENT_TYPES` (``io.faultagent.<thing>.<what>.v1``);
- ``source`` is ``/fault-agent/<cluster name>`` (``Settings.cluster_name``, percent-quoted);
- ``subject`` is ``<namespace>/<job>`` for job events, ``node/<name>`` for node events, ``cluster`` for the breaker;
- ``id`` is deterministic (a UUIDv5 of the type, the cluster and what identifies the occurrence), so a re-send
  of the same occurrence has the same id and consumers can de-duplicate; one id is always one content: a
  ``fault.detected`` id covers its fault, its job and its incident link (``data.incident_id``, or none);
- ``time`` is when it happened (not when it was published), RFC 3339 UTC;
- ``partitionkey`` (the CloudEvents Kafka binding's key extension) is the job UID, or the node name for node
  events, so one job's events stay in one partition and in order;
- ``dataschema`` is ``urn:fault-agent:schema:<type>``, the ``$id`` of the JSON Schema of the event's ``data``:
  ``agent/sinks/schemas/<type>.json`` (copies in ``config/schemas/``), see :func:`data_schema_for`. The attributes
  around it are checked by ``agent/sinks/schemas/cloudevents-envelope.json`` (:func:`envelope_schema`), which
  allows extension attributes (e.g. ``traceparent``) as CloudEvents 1.0 does; :func:`event_errors` applies both.

On Kafka the event is the record value in structured mode (CloudEvents Kafka protocol binding 1.0, section 3.2):
the only header is ``content-type: application/cloudevents+json``. ``ce_*`` headers belong to the binary mode,
where they carry the attributes instead of the value; copies of them beside a structured value would be a second,
unsynchronised source of the same attributes (a proxy that adds or rewrites an attribute in the value leaves them
stale), so the agent sends none.

Builders are pure (no clock reads, no I/O). Bad arguments raise :class:`EventBuildError`.
"""

from __future__ import annotations

import enum
import functools
import json
import math
import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Final

import jsonschema
import orjson
from cloudevents.core.bindings.kafka import to_structured_event
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from agent.core.checkpoint_wait import GraceWaitOutcome
from agent.core.detect.levels import level_name
from agent.core.faults import Fault, FaultCleared, FaultKind, ObjectRef

FAULT_DETECTED: Final = "io.faultagent.fault.detected.v1"
FAULT_CLEARED: Final = "io.faultagent.fault.cleared.v1"
RECOVERY_HELD: Final = "io.faultagent.recovery.held.v1"
RECOVERY_STARTED: Final = "io.faultagent.recovery.started.v1"
RECOVERY_SUCCEEDED: Final = "io.faultagent.recovery.succeeded.v1"
RECOVERY_FAILED: Final = "io.faultagent.recovery.failed.v1"
RECOVERY_RESUMED: Final = "io.faultagent.recovery.resumed.v1"
BREAKER_TRIPPED: Final = "io.faultagent.breaker.tripped.v1"
BREAKER_RESET: Final = "io.faultagent.breaker.reset.v1"
JOB_MISCONFIGURED: Final = "io.faultagent.job.misconfigured.v1"
JOB_HUNG: Final = "io.faultagent.job.hung.v1"
JOB_STRAGGLER: Final = "io.faultagent.job.straggler.v1"
QUARANTINE_RELEASED: Final = "io.faultagent.quarantine.released.v1"

EVENT_TYPES: Final[tuple[str, ...]] = (
    FAULT_DETECTED,
    FAULT_CLEARED,
    RECOVERY_HELD,
    RECOVERY_STARTED,
    RECOVERY_SUCCEEDED,
    RECOVERY_FAILED,
    RECOVERY_RESUMED,
    BREAKER_TRIPPED,
    BREAKER_RESET,
    JOB_MISCONFIGURED,
    JOB_HUNG,
    QUARANTINE_RELEASED,
    JOB_STRAGGLER,
)
ACTED_BY: Final[tuple[str, ...]] = ("agent", "observed")
"""``data.acted_by`` of the recovery events: the agent restarted the job, or someone else did and the agent
watched (policy.mode=observe; agent.core.observe)."""

CONTENT_TYPE: Final = "application/cloudevents+json"
DATA_CONTENT_TYPE: Final = "application/json"
PARTITION_KEY: Final = "partitionkey"

# Namespace of the UUIDv5 event ids (fixed forever: changing it changes every id).
_ID_NAMESPACE: Final = uuid.UUID("5b0f2f64-3c1e-4f7e-9a53-6f1d2c7a9e10")
_FORMAT: Final = JSONFormat()


class Stream(enum.StrEnum):
    """Which topic an event goes to (topic names come from KafkaSettings)."""

    FAULTS = "faults"  # fault detected / cleared
    RECOVERIES = "recoveries"  # recovery started / succeeded / failed, breaker tripped / reset, job misconfigured
    # (a quarantine released goes with the faults: it ends what their fault.detected began on the node)


_STREAM_OF: Final[dict[str, Stream]] = {
    FAULT_DETECTED: Stream.FAULTS,
    FAULT_CLEARED: Stream.FAULTS,
    RECOVERY_HELD: Stream.RECOVERIES,
    RECOVERY_STARTED: Stream.RECOVERIES,
    RECOVERY_SUCCEEDED: Stream.RECOVERIES,
    RECOVERY_FAILED: Stream.RECOVERIES,
    RECOVERY_RESUMED: Stream.RECOVERIES,
    BREAKER_TRIPPED: Stream.RECOVERIES,
    BREAKER_RESET: Stream.RECOVERIES,
    JOB_MISCONFIGURED: Stream.RECOVERIES,
    JOB_HUNG: Stream.RECOVERIES,
    JOB_STRAGGLER: Stream.RECOVERIES,
    QUARANTINE_RELEASED: Stream.FAULTS,
}


class FailureReason(enum.StrEnum):
    """Why a recovery failed (``data.reason`` of a recovery-failed event)."""

    BUDGET_EXHAUSTED = "budget-exhausted"  # the job's retry budget (maxRetry / fault-retry-times) is spent
    TIMEOUT = "timeout"  # not recovered within policy.recovery_deadline_s
    ACTION_ERROR = "action-error"  # the action (Command, pod delete, resubmit) could not be carried out
    BREAKER_OPEN = "breaker-open"  # held by the open circuit breaker until the recovery deadline passed
    JOB_GONE = "job-gone"  # the job was deleted while recovering
    JOB_FAILED = "job-failed"  # the job's controller gave it up (Volcano: Failed at retryCount == maxRetry)


class EventBuildError(ValueError):
    """An event could not be built from the arguments given (a caller bug, never Kafka's fault).

    Attributes:
        event_type: the type being built.
        field: the argument that was wrong.
        retriable: always False: the same arguments fail again.
    """

    retriable = False

    def __init__(self, event_type: str, field: str, message: str) -> None:
        super().__init__(f"{event_type}: {field}: {message}")
        self.event_type = event_type
        self.field = field


@dataclass(frozen=True, slots=True)
class Durations:
    """Phases of one recovery, seconds (all ≥ 0).

    detection: fault signal time → the agent saw it; decision: saw it → decided; action: decided → action done
    (Command accepted, pods deleted); reschedule: action done → job running again; total: signal time → running.
    """

    detection: float
    decision: float
    action: float
    reschedule: float
    total: float


@dataclass(frozen=True, slots=True)
class Message:
    """One event as a Kafka record: structured-mode CloudEvent JSON as value, the partition key, headers.

    headers: ``content-type: application/cloudevents+json`` only (structured mode; see the module docstring).
    """

    stream: Stream
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    event_id: str
    event_type: str


def rfc3339(t: datetime) -> str:
    """`t` (timezone-aware) as RFC 3339 UTC with microseconds, e.g. ``2025-01-02T03:04:05.000006Z``."""
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def source_for(cluster: str) -> str:
    """The CloudEvents ``source`` of this agent in `cluster`: ``/fault-agent/<cluster, percent-quoted>``."""
    return "/fault-agent/" + urllib.parse.quote(cluster, safe="")


def stream_of(event: CloudEvent) -> Stream:
    """The stream (topic family) of one of our events.

    Raises:
        EventBuildError: the event's type is not one of EVENT_TYPES.
    """
    t = event.get_type()
    try:
        return _STREAM_OF[t]
    except KeyError:
        raise EventBuildError(t, "type", f"not an event type of this agent (known: {', '.join(EVENT_TYPES)})") from None


def encode(event: CloudEvent) -> Message:
    """Serialise `event` as a Kafka record in CloudEvents structured JSON mode (the SDK's Kafka binding).

    Raises:
        EventBuildError: not one of our types, or no ``partitionkey`` extension.
    """
    stream = stream_of(event)
    key = event.get_extension(PARTITION_KEY)
    if not isinstance(key, str) or not key:
        raise EventBuildError(event.get_type(), PARTITION_KEY, "missing: every event needs a partition key")
    data = event.get_data()
    if isinstance(data, dict):
        # Same JSON as the SDK's structured format (a unit test compares them), written by orjson: the SDK's
        # stdlib-json path costs ~30 µs per event, most of the publisher's per-event budget.
        # Copied to its exact size: orjson 3.13's output keeps the allocation of its write buffer (8 KiB resident
        # for a 1.1 KB event, measured), and a Kafka outage keeps up to `kafka.queue_size` of these in memory.
        value = bytes(memoryview(orjson.dumps({**event.get_attributes(), "data": data}, option=orjson.OPT_UTC_Z)))
    else:
        value = to_structured_event(event, _FORMAT).value
    headers = (("content-type", CONTENT_TYPE.encode()),)
    return Message(stream, key.encode(), value, headers, event.get_id(), event.get_type())


def decode(value: bytes | str) -> CloudEvent:
    """Parse a structured-mode CloudEvent JSON value (as :func:`encode` writes it).

    Raises:
        ValueError: not JSON, or not a valid CloudEvent 1.0 (the SDK's validation error is chained).
    """
    try:
        event = _FORMAT.read(CloudEvent, value)
    except Exception as e:  # the SDK raises JSONDecodeError, KeyError or its own validation errors
        raise ValueError(f"not a structured CloudEvent: {e}") from e
    assert isinstance(event, CloudEvent)
    return event


ENVELOPE_SCHEMA: Final = "cloudevents-envelope"


def _schema_file(name: str) -> dict[str, Any]:
    text = resources.files("agent.sinks").joinpath("schemas", f"{name}.json").read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@functools.cache
def data_schema_for(event_type: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the ``data`` of an event of `event_type`, from the package data
    (``agent/sinks/schemas/<type>.json``; its ``$id`` is the event's ``dataschema`` attribute).

    Raises:
        EventBuildError: unknown type.
    """
    if event_type not in _STREAM_OF:
        raise EventBuildError(event_type, "type", "no schema for this type")
    return _schema_file(event_type)


@functools.cache
def envelope_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of the attributes of every event the agent publishes
    (``agent/sinks/schemas/cloudevents-envelope.json``): the attributes it always sets, their types, ``dataschema``
    matching ``type``, and any extension attribute a CloudEvents 1.0 name may have (``[a-z0-9]+``; string,
    integer or boolean value). ``data`` is only required to be an object here: see :func:`data_schema_for`."""
    return _schema_file(ENVELOPE_SCHEMA)


@functools.cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    schema = envelope_schema() if name == ENVELOPE_SCHEMA else data_schema_for(name)
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def event_errors(doc: Mapping[str, Any]) -> list[str]:
    """What is wrong with `doc`, a structured-mode event as JSON (a Kafka record value parsed), as one
    ``<where>: <message>`` line per problem; empty when it is a valid event of this agent.

    The envelope is checked first (:func:`envelope_schema`); when its ``type`` is one of :data:`EVENT_TYPES`,
    ``data`` is checked against that type's schema (:func:`data_schema_for`), its paths prefixed ``data/``.
    Never raises for bad input.
    """

    def lines(validator: jsonschema.protocols.Validator, instance: Any, prefix: str) -> list[str]:
        errors = sorted(validator.iter_errors(instance), key=lambda e: [str(p) for p in e.path])
        return [f"{prefix}{'/'.join(map(str, e.path)) or '(root)'}: {e.message}" for e in errors]

    out = lines(_validator(ENVELOPE_SCHEMA), doc, "")
    event_type = doc.get("type") if isinstance(doc, Mapping) else None
    if isinstance(event_type, str) and event_type in _STREAM_OF and "data" in doc:
        out += lines(_validator(event_type), doc["data"], "data/")
    return out


def as_json(event: CloudEvent) -> dict[str, Any]:
    """The event as the JSON object a consumer reads (what :func:`event_errors` checks)."""
    parsed: dict[str, Any] = json.loads(_FORMAT.write(event))
    return parsed


# --- builders ---------------------------------------------------------------------------------------------


def fault_detected(
    fault: Fault,
    *,
    cluster: str,
    job: ObjectRef | None = None,
    incident_id: str | None = None,
) -> CloudEvent:
    """A fault was seen (one event per fault and affected job; node-wide with `job` None).

    Args:
        fault: the fault (agent.core.faults.Fault); its ``signal_time`` becomes the event time.
        cluster: Settings.cluster_name.
        job: the training job hit (kind vcjob/acjob, namespace, name, uid); None for a fault with no job, which is
            then a node event (subject ``node/<node>``, key the node name).
        incident_id: the incident it opened or joined, if any.

    Raises:
        EventBuildError: naive datetimes, a job without namespace/name, a node event without a node.
    """
    t = FAULT_DETECTED
    subject, key = _subject_and_key(t, job, fault.node)
    _aware(t, "fault.signal_time", fault.signal_time)
    data = {
        "fault": _fault_data(t, fault),
        "fault_id": fault_id(fault, cluster=cluster),
        "job": _job_data(job),
        "incident_id": incident_id,
    }
    ident = (subject, *_fault_ident(fault), _incident_link(incident_id))
    return _build(t, cluster, subject, key, fault.signal_time, ident, data)


def fault_id(fault: Fault, *, cluster: str) -> str:
    """The fault's own identity, the same in its ``fault.detected`` and ``fault.cleared`` events and for every
    job it hit: a UUIDv5 of the cluster, kind, node, chips, codes and signal time (``data.fault_id``)."""
    return str(uuid.uuid5(_ID_NAMESPACE, "\x1f".join(("fault", cluster, *_fault_ident(fault)))))


def detected_id(fault: Fault, *, cluster: str, job: ObjectRef | None = None, incident_id: str | None = None) -> str:
    """The CloudEvents id of the ``fault.detected`` event :func:`fault_detected` builds for `fault`, `job` and
    `incident_id` (``data.detected_id`` of the matching ``fault.cleared``). The incident link is part of the id:
    the same fault and job published again linked to another incident (or to none) is another event, so it has
    another id, and a consumer de-duplicating by id keeps both.

    Raises:
        EventBuildError: as :func:`fault_detected`.
    """
    subject, _ = _subject_and_key(FAULT_DETECTED, job, fault.node)
    return _event_id(FAULT_DETECTED, cluster, (subject, *_fault_ident(fault), _incident_link(incident_id)))


def fault_cleared(
    cleared: FaultCleared,
    *,
    cluster: str,
    job: ObjectRef | None = None,
    incident_id: str | None = None,
    jobs: Sequence[ObjectRef] = (),
    detected_incident_id: str | None = None,
) -> CloudEvent:
    """The cluster no longer reports a fault (chip healthy, NodeD ConfigMap deleted, node Ready).

    Published like :func:`fault_detected`: one event per job the fault hit, subject and key that job (so it
    follows the job's ``fault.detected`` in the job's ordered stream), or one node event when it hit none.
    ``data.fault_id`` is the fault's identity (:func:`fault_id`, as in its ``fault.detected``),
    ``data.detected_id`` the id of the ``fault.detected`` event this one ends (same fault, same job, linked to
    `detected_incident_id`: the incident that event named, None for none; :func:`detected_id`), and
    ``data.jobs`` every job the fault hit (`jobs`; `job` is added when missing).
    ``data.fault_duration_s`` = cleared_at - fault.signal_time, seconds (0 when the clocks disagree).

    Raises:
        EventBuildError: as :func:`fault_detected`.
    """
    t = FAULT_CLEARED
    fault = cleared.fault
    subject, key = _subject_and_key(t, job, fault.node)
    _aware(t, "cleared_at", cleared.cleared_at)
    _aware(t, "fault.signal_time", fault.signal_time)
    hit = list(jobs) if job is None or job in jobs else [job, *jobs]
    for other in hit:
        _subject_and_key(t, other, fault.node)  # the same checks as `job`
    data = {
        "fault": _fault_data(t, fault),
        "fault_id": fault_id(fault, cluster=cluster),
        "detected_id": detected_id(fault, cluster=cluster, job=job, incident_id=detected_incident_id),
        "job": _job_data(job),
        "jobs": [_ref_data(j) for j in sorted(hit, key=lambda j: (j.namespace, j.name, j.uid))],
        "incident_id": incident_id,
        "cleared_at": rfc3339(cleared.cleared_at),
        "fault_duration_s": max(0.0, (cleared.cleared_at - fault.signal_time).total_seconds()),
        "cleared_by": _ref_data(cleared.source),
    }
    ident = (subject, *_fault_ident(fault), rfc3339(cleared.cleared_at))
    return _build(t, cluster, subject, key, cleared.cleared_at, ident, data)


def recovery_started(
    incident_id: str,
    job: ObjectRef,
    action: str,
    reason: str,
    *,
    cluster: str,
    at: datetime,
    attempt: int = 1,
    faults: Sequence[Fault] = (),
    dry_run: bool = False,
    budget_left: int | None = None,
    acted_by: str = "agent",
) -> CloudEvent:
    """The agent starts recovering `job` with `action` (e.g. ``restart-job``, ``delete-pods``, ``resubmit``), or
    (`acted_by` ``observed``, observe mode) saw someone else start restarting it.

    Args:
        incident_id: the incident's id (non-empty); with `attempt` it makes the event id.
        reason: a sentence a person can read (the policy Decision's reason).
        at: when the action was decided (event time).
        attempt: 1 for the first recovery of this incident, 2 … for later ones.
        faults: the incident's faults (summarised in ``data.faults``).
        dry_run: shadow mode: decided and published but nothing written to the cluster.
        budget_left: retries left after this one, None when the job has no budget.
        acted_by: who restarts the job (:data:`ACTED_BY`): ``agent``, or ``observed`` for a restart someone else
            made (MindCluster's plugin, Volcano's own job policy) that the agent only watched (policy.mode=observe).

    Raises:
        EventBuildError: empty incident id/action/reason, attempt < 1, budget_left < 0, naive time, bad job,
            unknown acted_by.
    """
    t = RECOVERY_STARTED
    _recovery_common(t, incident_id, attempt, at)
    _acted_by(t, acted_by)
    _non_empty(t, "action", action)
    _non_empty(t, "reason", reason)
    if budget_left is not None and budget_left < 0:
        raise EventBuildError(t, "budget_left", f"must be ≥ 0, got {budget_left}")
    subject, key = _subject_and_key(t, job, "")
    data = {
        "incident_id": incident_id,
        "job": _job_data(job),
        "attempt": attempt,
        "action": action,
        "reason": reason,
        "dry_run": dry_run,
        "budget_left": budget_left,
        "faults": [_fault_data(t, f) for f in faults],
        "acted_by": acted_by,
    }
    return _build(t, cluster, subject, key, at, (incident_id, str(attempt)), data)


def recovery_held(
    incident_id: str,
    job: ObjectRef,
    action: str,
    reason: str,
    *,
    cluster: str,
    at: datetime,
    faults: Sequence[Fault] = (),
    dry_run: bool = False,
    breaker_reason: str = "",
) -> CloudEvent:
    """The open circuit breaker holds `job`'s incident: the policy would recover it with `action` (e.g.
    ``restart-job``) but the agent restarts nothing until a person resets the breaker (``fault-agent breaker
    reset``); then the job is decided again and the same incident goes on (``recovery.started``), or ends
    (``recovery.succeeded`` when its faults cleared meanwhile, ``recovery.failed`` reason ``breaker-open`` when the
    recovery deadline passed while held). One event per incident (its id is made of the incident id).

    Args:
        incident_id: the held incident's id (the id ``recovery.started`` will carry after a reset).
        action: what a reset will do if still needed (the policy's decision).
        reason: the incident's reason, a sentence for a person (it says that the breaker holds it).
        at: when the breaker refused the restart (event time).
        faults: the incident's faults so far (``data.faults``).
        dry_run: shadow mode (nothing would have been written anyway).
        breaker_reason: why the breaker tripped ("" when unknown).

    Raises:
        EventBuildError: empty incident id, action or reason, naive time, bad job.
    """
    t = RECOVERY_HELD
    _recovery_common(t, incident_id, 1, at)
    _non_empty(t, "action", action)
    _non_empty(t, "reason", reason)
    subject, key = _subject_and_key(t, job, "")
    data = {
        "incident_id": incident_id,
        "job": _job_data(job),
        "action": action,
        "reason": reason,
        "breaker_reason": breaker_reason,
        "dry_run": dry_run,
        "faults": [_fault_data(t, f) for f in faults],
    }
    return _build(t, cluster, subject, key, at, (incident_id, "held"), data)


def recovery_succeeded(
    incident_id: str,
    job: ObjectRef,
    action: str,
    durations: Durations,
    *,
    cluster: str,
    at: datetime,
    attempt: int = 1,
    acted_by: str = "agent",
    time_to_first_step_s: float | None = None,
    grace_waits: Sequence[GraceWaitOutcome] = (),
) -> CloudEvent:
    """`job` runs again after `action`; `durations` gives each phase in seconds (see :class:`Durations`; for an
    observed restart, `acted_by` ``observed``, ``decision`` is 0 and ``action`` runs from the agent seeing the
    fault to the restart being seen). `grace_waits`: the graceful waits of the restart, in order
    (agent.core.checkpoint_wait: which wait, why it ended, its seconds, the checkpoint step that ended it), as
    ``data.grace_waits``; absent when there were none (or a new leader does not know them).

    `time_to_first_step_s`: for a job that reports its progress, the restart → first training step seconds when
    the agent saw that step before the pods were Running and Ready (``data.time_to_first_step_s``); otherwise the
    field is absent and the incident's ``recovery.resumed`` event (same ``incident_id``) carries it when the step
    comes. Nothing waits for it: this event still marks the pods Running.

    Raises:
        EventBuildError: a negative or non-finite duration, and as :func:`recovery_started`.
    """
    t = RECOVERY_SUCCEEDED
    _recovery_common(t, incident_id, attempt, at)
    _acted_by(t, acted_by)
    _non_empty(t, "action", action)
    d = {}
    for name in ("detection", "decision", "action", "reschedule", "total"):
        v = getattr(durations, name)
        if not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise EventBuildError(t, f"durations.{name}", f"must be a finite number of seconds ≥ 0, got {v!r}")
        d[f"{name}_s"] = float(v)
    subject, key = _subject_and_key(t, job, "")
    data: dict[str, Any] = {
        "incident_id": incident_id,
        "job": _job_data(job),
        "attempt": attempt,
        "action": action,
        "durations": d,
        "acted_by": acted_by,
    }
    if time_to_first_step_s is not None:
        if not math.isfinite(time_to_first_step_s) or time_to_first_step_s < 0:
            raise EventBuildError(t, "time_to_first_step_s", f"must be seconds ≥ 0, got {time_to_first_step_s!r}")
        data["time_to_first_step_s"] = float(time_to_first_step_s)
    if grace_waits:
        waits: list[dict[str, Any]] = []
        for w in grace_waits:
            if not math.isfinite(w.waited_s) or w.waited_s < 0:
                raise EventBuildError(t, "grace_waits.waited_s", f"must be finite and ≥ 0, got {w.waited_s!r}")
            waits.append({"wait": w.wait.value, "ended": w.ended.value, "waited_s": float(w.waited_s),
                          "checkpoint_step": w.checkpoint_step})  # fmt: skip
        data["grace_waits"] = waits
    return _build(t, cluster, subject, key, at, (incident_id, str(attempt)), data)


def recovery_failed(
    incident_id: str,
    job: ObjectRef,
    reason: FailureReason | str,
    *,
    cluster: str,
    at: datetime,
    action: str = "",
    detail: str = "",
    attempt: int = 1,
    acted_by: str = "agent",
) -> CloudEvent:
    """The recovery of `job` failed for `reason` (a :class:`FailureReason` or its value); `detail` is free text;
    `acted_by` as for :func:`recovery_started`.

    Raises:
        EventBuildError: unknown reason, and as :func:`recovery_started`.
    """
    t = RECOVERY_FAILED
    _recovery_common(t, incident_id, attempt, at)
    _acted_by(t, acted_by)
    try:
        why = FailureReason(reason)
    except ValueError:
        known = ", ".join(r.value for r in FailureReason)
        raise EventBuildError(t, "reason", f"unknown {reason!r} (known: {known})") from None
    subject, key = _subject_and_key(t, job, "")
    data = {
        "incident_id": incident_id,
        "job": _job_data(job),
        "attempt": attempt,
        "action": action,
        "reason": why.value,
        "detail": detail,
        "acted_by": acted_by,
    }
    return _build(t, cluster, subject, key, at, (incident_id, str(attempt)), data)


def breaker_tripped(
    *,
    cluster: str,
    at: datetime,
    reason: str,
    faulty_nodes: Sequence[str],
    watched_nodes: int,
    threshold_share: float,
    window_s: float,
) -> CloudEvent:
    """The restart circuit breaker opened: no restarts until a person resets it.

    Args:
        faulty_nodes: the nodes that turned faulty within the window (listed in ``data.faulty_nodes``).
        watched_nodes: nodes watched in total (> 0).
        threshold_share: the share (0, 1] that trips the breaker; window_s: its window, seconds (> 0).

    Raises:
        EventBuildError: empty reason, watched_nodes < 1, a share outside (0, 1], window ≤ 0, naive time.
    """
    t = BREAKER_TRIPPED
    _aware(t, "at", at)
    _non_empty(t, "reason", reason)
    if watched_nodes < 1:
        raise EventBuildError(t, "watched_nodes", f"must be ≥ 1, got {watched_nodes}")
    if not (0 < threshold_share <= 1):
        raise EventBuildError(t, "threshold_share", f"must be in (0, 1], got {threshold_share}")
    if not (window_s > 0 and math.isfinite(window_s)):
        raise EventBuildError(t, "window_s", f"must be > 0 seconds, got {window_s}")
    data = {
        "reason": reason,
        "faulty_nodes": sorted(faulty_nodes),
        "faulty_node_count": len(set(faulty_nodes)),
        "watched_nodes": watched_nodes,
        "threshold_share": float(threshold_share),
        "window_s": float(window_s),
    }
    return _build(t, cluster, "cluster", "breaker", at, (rfc3339(at),), data)


def breaker_reset(
    *,
    cluster: str,
    at: datetime,
    by: str,
    reason: str = "",
    opened_at: datetime | None = None,
    faulty_nodes: Sequence[str] = (),
) -> CloudEvent:
    """A person (`by`, e.g. the CLI user) closed the circuit breaker; ``data.open_s`` is how long it was open.

    Args:
        faulty_nodes: the nodes whose faults tripped the breaker now closed (``data.faulty_nodes``, sorted, as
            ``breaker.tripped`` listed them; empty when the agent does not know them): ``kubectl describe node``
            shows the close next to the trip.

    Raises:
        EventBuildError: empty `by`, naive times, opened_at after at.
    """
    t = BREAKER_RESET
    _aware(t, "at", at)
    _non_empty(t, "by", by)
    open_s = None
    if opened_at is not None:
        _aware(t, "opened_at", opened_at)
        if opened_at > at:
            raise EventBuildError(t, "opened_at", "is after the reset time")
        open_s = (at - opened_at).total_seconds()
    data = {
        "by": by,
        "reason": reason,
        "opened_at": rfc3339(opened_at) if opened_at else None,
        "open_s": open_s,
        "faulty_nodes": sorted({n for n in faulty_nodes if n}),
    }
    return _build(t, cluster, "cluster", "breaker", at, (rfc3339(at),), data)


def job_misconfigured(
    job: ObjectRef, *, cluster: str, at: datetime, label: str, value: str, problem: str
) -> CloudEvent:
    """A watched job carries a label value the agent cannot use (e.g. ``fault-retry-times: abc``), or one the cluster
    did not honour (``subHealthyStrategy: hotSwitch`` with no hot switch by ClusterD within
    ``policy.hot_switch_wait_s``, agent.engine.ticking); the job is still watched and `problem` says what the agent
    does instead. One event per job UID, label and value.

    Args:
        job: the job (kind vcjob/acjob, namespace, name, uid).
        at: when the agent first saw the value (event time).
        label: the label's key; value: its value as written (cut to 100 characters); problem: a sentence.

    Raises:
        EventBuildError: empty label or problem, naive time, a job without namespace/name.
    """
    t = JOB_MISCONFIGURED
    _aware(t, "at", at)
    _non_empty(t, "label", label)
    _non_empty(t, "problem", problem)
    subject, key = _subject_and_key(t, job, "")
    data = {"job": _job_data(job), "label": label, "value": value[:100], "problem": problem}
    return _build(t, cluster, subject, key, at, (job.uid, label, value), data)


def recovery_resumed(
    job: ObjectRef,
    *,
    cluster: str,
    incident_id: str,
    restart_at: datetime,
    first_fault_at: datetime,
    first_step_at: datetime,
    step: int,
    checkpoint_step: int | None,
    stopped_at: datetime | None = None,
    work_lost: Mapping[str, Any] | None = None,
    lost_s: Mapping[str, float] | None = None,
    training: Mapping[str, Any] | None = None,
) -> CloudEvent:
    """A job that reports its training progress (agent.core.progress) took its first step after the agent's
    restart of incident `incident_id`: training really resumed.

    What the incident cost (agent.core.goodput, docs/progress.md): `stopped_at`, when training stopped (the first
    fault's own time, or a hang's last step; default `first_fault_at`); `work_lost`
    (agent.core.goodput.WorkLost.as_data: steps, seconds, step_at_fault, checkpoint_step, step_time_s; each may
    be null); `lost_s` (agent.core.goodput.LostTime.as_data: ``<cause>_s`` for detection, restart, rescheduling,
    initialisation, recomputation, and total_s); `training`, the job's account after it
    (agent.core.goodput.TrainingSummary.as_data plus ``first_step_at``, a datetime). Absent ones are sent as
    nulls / zeros (an engine without the account).

    Args:
        job: the job; restart_at: when the restart was sent; first_fault_at: the incident's first fault's own time;
        first_step_at: when the agent saw the first step change after the restart (the event time).
        step, checkpoint_step: that step, and the last complete checkpoint's step the heartbeat reported.

    ``data.time_to_first_step_s`` is first_step_at − restart_at, ``data.fault_to_first_step_s`` first_step_at −
    first_fault_at (both ≥ 0). One event per incident.

    Raises:
        EventBuildError: naive times, an empty incident id, a job without namespace/name.
    """
    t = RECOVERY_RESUMED
    for name, value in (
        ("restart_at", restart_at),
        ("first_fault_at", first_fault_at),
        ("first_step_at", first_step_at),
    ):
        _aware(t, name, value)
    _non_empty(t, "incident_id", incident_id)
    subject, key = _subject_and_key(t, job, "")
    data = {
        "incident_id": incident_id,
        "job": _job_data(job),
        "restart_at": rfc3339(restart_at),
        "first_step_at": rfc3339(first_step_at),
        "time_to_first_step_s": max(0.0, (first_step_at - restart_at).total_seconds()),
        "fault_to_first_step_s": max(0.0, (first_step_at - first_fault_at).total_seconds()),
        "step": step,
        "checkpoint_step": checkpoint_step,
        "stopped_at": rfc3339(stopped_at or first_fault_at),
        "work_lost": dict(work_lost) if work_lost is not None else dict.fromkeys(_WORK_LOST_KEYS),
        "lost_s": _lost_seconds(t, lost_s),
        "training": _training_data(t, training, first_step_at),
    }
    return _build(t, cluster, subject, key, first_step_at, (incident_id,), data)


_WORK_LOST_KEYS = ("steps", "seconds", "step_at_fault", "checkpoint_step", "step_time_s")
_LOST_KEYS = ("detection_s", "restart_s", "rescheduling_s", "initialisation_s", "recomputation_s", "total_s")


def _lost_seconds(t: str, lost_s: Mapping[str, float] | None) -> dict[str, float]:
    out = dict.fromkeys(_LOST_KEYS, 0.0)
    for k, v in (lost_s or {}).items():
        if k not in out or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
            raise EventBuildError(t, f"lost_s.{k}", f"must be one of {_LOST_KEYS} with seconds ≥ 0, got {v!r}")
        out[k] = float(v)
    return out


def _training_data(t: str, training: Mapping[str, Any] | None, default_first: datetime) -> dict[str, Any]:
    given = dict(training or {})
    first = given.pop("first_step_at", default_first)
    _aware(t, "training.first_step_at", first)
    out: dict[str, Any] = {"first_step_at": rfc3339(first), "wall_s": 0.0, "lost_s": 0.0, "productive_s": 0.0,
                           "running_share": None, "incidents": 0}  # fmt: skip
    out.update(given)
    return out


def job_hung(
    job: ObjectRef,
    *,
    cluster: str,
    at: datetime,
    pod: ObjectRef,
    node: str,
    lease: ObjectRef,
    step: int,
    checkpoint_step: int | None,
    last_step_at: datetime,
    timeout_s: float,
    timeout_from: str,
    action: str,
    reason: str,
    incident_id: str | None,
) -> CloudEvent:
    """A job that reports its training progress (agent.core.progress) made no step for its hang timeout.

    Args:
        job: the job; pod, node: the pod the heartbeat Lease names (rank 0) and its node; lease: the Lease.
        at: when the agent found the hang (event time); last_step_at: when it saw the step change last (its clock).
        step, checkpoint_step: the last step and the last complete checkpoint's step the heartbeat reported.
        timeout_s, timeout_from: the hang timeout (seconds) and where it came from (``label``, ``step-time``,
            ``ceiling``).
        action, reason: what the policy decided (``restart-job``, ``none``, ``abort``, …) and why.
        incident_id: the incident the hang opened or joined (None: none).

    One event per job UID and stall (the step and the time it was last seen to change).

    Raises:
        EventBuildError: naive times, a job without namespace/name, an empty action.
    """
    t = JOB_HUNG
    _aware(t, "at", at)
    _aware(t, "last_step_at", last_step_at)
    _non_empty(t, "action", action)
    subject, key = _subject_and_key(t, job, "")
    data = {
        "job": _job_data(job),
        "pod": _ref_data(pod),
        "node": node,
        "lease": _ref_data(lease),
        "step": step,
        "checkpoint_step": checkpoint_step,
        "last_step_at": rfc3339(last_step_at),
        "idle_s": max(0.0, (at - last_step_at).total_seconds()),
        "timeout_s": timeout_s,
        "timeout_from": timeout_from,
        "action": action,
        "reason": reason,
        "incident_id": incident_id,
    }
    return _build(t, cluster, subject, key, at, (job.uid, str(step), rfc3339(last_step_at)), data)


STRAGGLER_STATES: Final[tuple[str, ...]] = ("straggling", "ended")
STRAGGLER_END_CAUSES: Final[tuple[str, ...]] = (
    "recovered", "restarted", "job-gone", "opted-out", "lease-gone", "ranks-changed"
)  # fmt: skip
STRAGGLER_AVOIDANCE: Final[tuple[str, ...]] = ("none", "node-marked", "disabled")


def job_straggler(
    job: ObjectRef,
    *,
    cluster: str,
    at: datetime,
    found_at: datetime,
    state: str,
    pod: ObjectRef,
    node: str,
    chips: Sequence[str],
    rank: int,
    step: int,
    step_time_s: float | None,
    median_s: float | None,
    multiple: float,
    windows: int,
    lease: ObjectRef,
    mode: str,
    avoidance: str,
    ended_by: str | None = None,
) -> CloudEvent:
    """A pod rank of a job that reports per-rank step times (agent.core.straggler) is a straggler (`state`
    ``straggling``), or its episode ended (``ended``, `ended_by` one of :data:`STRAGGLER_END_CAUSES`).

    Args:
        job: the job; pod, node, chips: the straggler's pod (pod rank `rank`), its node and the chips allocated to
            it; lease: the heartbeat Lease that carried the times.
        at: the event's time (found, or ended); found_at: when the episode was found (the agent's clock).
        step: the heartbeat's step in the window that found it; step_time_s, median_s: the rank's seconds per step
            and the window's median then (at the end: in the window that ended it, None when none did).
        multiple, windows: the rule's settings (detect.straggler_step_time_multiple, detect.straggler_windows).
        mode: the job's ``fault-agent.io/straggler`` label (``detect``, ``avoid``); avoidance: ``node-marked`` (the
            node is marked sub-healthy so the next restart avoids it), ``disabled`` (``avoid`` asked, but
            policy.sub_health_taint is off), ``none``.

    One event per job UID, rank, episode (`found_at`) and state.

    Raises:
        EventBuildError: naive times, a job without namespace/name, an unknown state, cause or avoidance.
    """
    t = JOB_STRAGGLER
    _aware(t, "at", at)
    _aware(t, "found_at", found_at)
    if state not in STRAGGLER_STATES:
        raise EventBuildError(t, "state", f"must be one of {STRAGGLER_STATES}, got {state!r}")
    if (ended_by is None) != (state == "straggling") or (ended_by is not None and ended_by not in STRAGGLER_END_CAUSES):
        raise EventBuildError(t, "ended_by", f"{ended_by!r} does not go with state {state!r}")
    if avoidance not in STRAGGLER_AVOIDANCE:
        raise EventBuildError(t, "avoidance", f"must be one of {STRAGGLER_AVOIDANCE}, got {avoidance!r}")
    subject, key = _subject_and_key(t, job, "")
    data = {
        "job": _job_data(job),
        "state": state,
        "ended_by": ended_by,
        "pod": _ref_data(pod),
        "node": node,
        "chips": list(chips),
        "rank": rank,
        "step": step,
        "step_time_s": step_time_s,
        "median_s": median_s,
        "multiple": multiple,
        "windows": windows,
        "lease": _ref_data(lease),
        "mode": mode,
        "avoidance": avoidance,
        "found_at": rfc3339(found_at),
    }
    return _build(t, cluster, subject, key, at, (job.uid, str(rank), rfc3339(found_at), state), data)


# --- helpers ----------------------------------------------------------------------------------------------


def quarantine_released(
    node: str,
    *,
    cluster: str,
    at: datetime,
    by: str,
    reason: str = "",
    chips: Sequence[str] = (),
    hold_until: datetime | None = None,
    still_quarantined: str | None = None,
) -> CloudEvent:
    """A person released `node`'s quarantine early (``fault-agent quarantine release``): the isolation of `chips`
    and the hold until `hold_until` are lifted; `still_quarantined` names the level a fault still reported keeps
    the node at (None: the node is free). Subject ``node/<node>``, key the node name; one event per node and
    release time (`at`).

    Raises:
        EventBuildError: empty node or `by`, naive times.
    """
    t = QUARANTINE_RELEASED
    _non_empty(t, "node", node)
    _non_empty(t, "by", by)
    _aware(t, "at", at)
    if hold_until is not None:
        _aware(t, "hold_until", hold_until)
    data = {
        "node": node,
        "by": by,
        "reason": reason,
        "chips": list(chips),
        "hold_until": rfc3339(hold_until) if hold_until else None,
        "still_quarantined": still_quarantined,
    }
    return _build(t, cluster, f"node/{node}", node, at, (node, rfc3339(at)), data)


def _build(
    event_type: str,
    cluster: str,
    subject: str,
    key: str,
    at: datetime,
    ident: Sequence[str],
    data: Mapping[str, Any],
) -> CloudEvent:
    _non_empty(event_type, "cluster", cluster)
    attributes: dict[str, Any] = {
        "id": _event_id(event_type, cluster, ident),
        "source": source_for(cluster),
        "type": event_type,
        "specversion": "1.0",
        "subject": subject,
        "time": at.astimezone(UTC),
        "datacontenttype": DATA_CONTENT_TYPE,
        "dataschema": f"urn:fault-agent:schema:{event_type}",
        PARTITION_KEY: key,
    }
    return CloudEvent(attributes, dict(data))


def _acted_by(event_type: str, acted_by: str) -> None:
    if acted_by not in ACTED_BY:
        raise EventBuildError(event_type, "acted_by", f"must be one of {', '.join(ACTED_BY)}, got {acted_by!r}")


def _event_id(event_type: str, cluster: str, ident: Sequence[str]) -> str:
    return str(uuid.uuid5(_ID_NAMESPACE, "\x1f".join((event_type, cluster, *ident))))


def _subject_and_key(event_type: str, job: ObjectRef | None, node: str) -> tuple[str, str]:
    if job is None:
        if not node:
            raise EventBuildError(event_type, "job", "no job and no node: the event would have no subject")
        return f"node/{node}", node
    if not job.namespace or not job.name:
        raise EventBuildError(event_type, "job", f"needs namespace and name, got {job}")
    subject = f"{job.namespace}/{job.name}"
    return subject, job.uid or subject


def _aware(event_type: str, field: str, t: datetime) -> None:
    if not isinstance(t, datetime) or t.tzinfo is None or t.utcoffset() is None:
        raise EventBuildError(event_type, field, f"must be a timezone-aware datetime, got {t!r}")


def _non_empty(event_type: str, field: str, value: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise EventBuildError(event_type, field, f"must be a non-empty string, got {value!r}")


def _recovery_common(event_type: str, incident_id: str, attempt: int, at: datetime) -> None:
    _non_empty(event_type, "incident_id", incident_id)
    if not isinstance(attempt, int) or attempt < 1:
        raise EventBuildError(event_type, "attempt", f"must be an integer ≥ 1, got {attempt!r}")
    _aware(event_type, "at", at)


def _ref_data(ref: ObjectRef | None) -> dict[str, str] | None:
    if ref is None:
        return None
    return {"kind": ref.kind, "namespace": ref.namespace, "name": ref.name, "uid": ref.uid}


def _job_data(job: ObjectRef | None) -> dict[str, str] | None:
    return _ref_data(job)


def _incident_link(incident_id: str | None) -> str:
    """The fault.detected id's part for its incident link (``data.incident_id``); "none" cannot be an id's
    part for a real incident, whose part is prefixed."""
    return "none" if incident_id is None else f"incident:{incident_id}"


def _fault_ident(fault: Fault) -> tuple[str, ...]:
    return (fault.kind.value, fault.node, ",".join(fault.chips), ",".join(fault.codes), rfc3339(fault.signal_time))


def _fault_data(event_type: str, fault: Fault) -> dict[str, Any]:
    _aware(event_type, "fault.signal_time", fault.signal_time)
    _aware(event_type, "fault.observed_at", fault.observed_at)
    if fault.kind is not FaultKind.BUSINESS and fault.kind is not FaultKind.DISRUPTION and not fault.node:
        raise EventBuildError(event_type, "fault.node", f"a {fault.kind.value} fault needs its node")
    return {
        "kind": fault.kind.value,
        "level": level_name(fault),  # NodeD's own names for a NodeD fault (SeparateFault, ...)
        "node": fault.node,
        "chips": list(fault.chips),
        "codes": list(fault.codes),
        "reason": fault.reason,
        "signal_time": rfc3339(fault.signal_time),
        "observed_at": rfc3339(fault.observed_at),
        "detection_lag_s": max(0.0, (fault.observed_at - fault.signal_time).total_seconds()),
        "check_code_ok": fault.check_code_ok,
        "source": _ref_data(fault.source),
        "pod": _ref_data(fault.pod),
        "detail": fault.detail,  # the reporter's words, e.g. a condition's "XidError48: DBE"
        "devices": list(fault.devices),  # e.g. "GPU:GPU-8f3c…", "PCI:0000:3b:00"
    }
