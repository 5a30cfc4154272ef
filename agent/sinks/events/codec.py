"""One event as a Kafka record and back: structured-mode CloudEvents JSON (CloudEvents Kafka protocol binding 1.0,
section 3.2), the only header ``content-type: application/cloudevents+json``, the key the ``partitionkey``
extension (see :mod:`agent.sinks.events` for why no ``ce_*`` headers).

Errors: :func:`encode` raises :class:`~agent.sinks.events.vocabulary.EventBuildError` for an event that is not
one of ours; :func:`decode` raises ``ValueError`` for a value that is not a CloudEvent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import orjson
from cloudevents.core.bindings.kafka import to_structured_event
from cloudevents.core.exceptions import BaseCloudEventException
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from agent.sinks.events.vocabulary import CONTENT_TYPE, EVENT_TYPES, PARTITION_KEY, STREAM_OF, EventBuildError, Stream

_FORMAT: Final = JSONFormat()


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


def stream_of(event: CloudEvent) -> Stream:
    """The stream (topic family) of one of our events.

    Raises:
        EventBuildError: the event's type is not one of EVENT_TYPES.
    """
    t = event.get_type()
    try:
        return STREAM_OF[t]
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
        ValueError: ``not a structured CloudEvent: ...``: not UTF-8 JSON, not an object, or not a valid CloudEvent 1.0
            (the SDK's error is chained). Any other exception is a bug and is not caught.
    """
    try:
        event = _FORMAT.read(CloudEvent, value)
    except (ValueError, TypeError, AttributeError, KeyError, BaseCloudEventException) as e:
        # What the SDK's JSONFormat.read raises for a bad value (cloudevents 2.2, core/formats/json.py):
        # ValueError for bytes that are not UTF-8 or not JSON, or a time that is not RFC 3339; TypeError for a
        # JSON scalar or a time that is not a string; AttributeError for a JSON array or string (it calls .get on
        # the value); KeyError for a missing attribute; its BaseCloudEventException (CloudEventValidationError)
        # for attributes CloudEvents 1.0 refuses.
        raise ValueError(f"not a structured CloudEvent: {e}") from e
    assert isinstance(event, CloudEvent)
    return event


def as_json(event: CloudEvent) -> dict[str, Any]:
    """The event as the JSON object a consumer reads (what :func:`event_errors` checks)."""
    parsed: dict[str, Any] = json.loads(_FORMAT.write(event))
    return parsed
