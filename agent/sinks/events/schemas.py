"""The JSON Schemas (draft 2020-12) of the agent's events, from the package data ``agent/sinks/schemas/``: one
per type for ``data`` (``<type>.json``, its ``$id`` the event's ``dataschema``) and one for the attributes around
it (``cloudevents-envelope.json``); :func:`event_errors` applies both to an event as JSON.

Errors: :func:`data_schema_for` raises :class:`~agent.sinks.events.vocabulary.EventBuildError` for an unknown
type; :func:`event_errors` never raises for bad input.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any, Final

import jsonschema

from agent.sinks.events.vocabulary import STREAM_OF, EventBuildError

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
    if event_type not in STREAM_OF:
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
    if isinstance(event_type, str) and event_type in STREAM_OF and "data" in doc:
        out += lines(_validator(event_type), doc["data"], "data/")
    return out
