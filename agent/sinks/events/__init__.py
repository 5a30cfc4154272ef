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

The package by topic: :mod:`~agent.sinks.events.vocabulary` (types, streams, reasons, the build error),
:mod:`~agent.sinks.events.codec` (Kafka record and back), :mod:`~agent.sinks.events.schemas` (JSON Schema checks),
:mod:`~agent.sinks.events.build` (what every builder shares) and the builders by stream:
:mod:`~agent.sinks.events.faults`, :mod:`~agent.sinks.events.recovery`, :mod:`~agent.sinks.events.jobs`. Callers
import them from here (``from agent.sinks import events as ev``).
"""

from agent.sinks.events.build import rfc3339, source_for
from agent.sinks.events.codec import Message, as_json, decode, encode, stream_of
from agent.sinks.events.faults import detected_id, fault_cleared, fault_detected, fault_id, quarantine_released
from agent.sinks.events.jobs import (
    STRAGGLER_AVOIDANCE,
    STRAGGLER_END_CAUSES,
    STRAGGLER_STATES,
    breaker_reset,
    breaker_tripped,
    job_hung,
    job_misconfigured,
    job_straggler,
)
from agent.sinks.events.recovery import (
    recovery_failed,
    recovery_held,
    recovery_resumed,
    recovery_started,
    recovery_succeeded,
)
from agent.sinks.events.schemas import ENVELOPE_SCHEMA, data_schema_for, envelope_schema, event_errors
from agent.sinks.events.vocabulary import (
    ACTED_BY,
    BREAKER_RESET,
    BREAKER_TRIPPED,
    CONTENT_TYPE,
    DATA_CONTENT_TYPE,
    EVENT_TYPES,
    FAULT_CLEARED,
    FAULT_DETECTED,
    JOB_HUNG,
    JOB_MISCONFIGURED,
    JOB_STRAGGLER,
    PARTITION_KEY,
    QUARANTINE_RELEASED,
    RECOVERY_FAILED,
    RECOVERY_HELD,
    RECOVERY_RESUMED,
    RECOVERY_STARTED,
    RECOVERY_SUCCEEDED,
    Durations,
    EventBuildError,
    FailureReason,
    Stream,
)

__all__ = [
    "ACTED_BY",
    "BREAKER_RESET",
    "BREAKER_TRIPPED",
    "CONTENT_TYPE",
    "DATA_CONTENT_TYPE",
    "ENVELOPE_SCHEMA",
    "EVENT_TYPES",
    "FAULT_CLEARED",
    "FAULT_DETECTED",
    "JOB_HUNG",
    "JOB_MISCONFIGURED",
    "JOB_STRAGGLER",
    "PARTITION_KEY",
    "QUARANTINE_RELEASED",
    "RECOVERY_FAILED",
    "RECOVERY_HELD",
    "RECOVERY_RESUMED",
    "RECOVERY_STARTED",
    "RECOVERY_SUCCEEDED",
    "STRAGGLER_AVOIDANCE",
    "STRAGGLER_END_CAUSES",
    "STRAGGLER_STATES",
    "Durations",
    "EventBuildError",
    "FailureReason",
    "Message",
    "Stream",
    "as_json",
    "breaker_reset",
    "breaker_tripped",
    "data_schema_for",
    "decode",
    "detected_id",
    "encode",
    "envelope_schema",
    "event_errors",
    "fault_cleared",
    "fault_detected",
    "fault_id",
    "job_hung",
    "job_misconfigured",
    "job_straggler",
    "quarantine_released",
    "recovery_failed",
    "recovery_held",
    "recovery_resumed",
    "recovery_started",
    "recovery_succeeded",
    "rfc3339",
    "source_for",
    "stream_of",
]
