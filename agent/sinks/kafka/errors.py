"""Why Kafka could not be used: the reasons the publisher counts (``fault_agent_kafka_errors_total{reason}``), the
error it raises or keeps, and how an aiokafka or OS exception maps to a reason.
"""

from __future__ import annotations

import enum

from aiokafka.errors import KafkaConnectionError


class ErrorReason(enum.StrEnum):
    """Why Kafka could not be used (``KafkaSinkError.reason``, the publisher's ``errors`` counter keys)."""

    CONFIG = "config"  # the settings cannot work (SASL without user, missing SSL files)
    UNREACHABLE = "unreachable"  # no broker answered at the bootstrap addresses
    AUTH = "auth"  # SASL / SSL handshake or credentials refused
    TOPIC_MISSING = "topic-missing"  # a topic does not exist and create_topics is off
    TOPIC_CREATE = "topic-create"  # creating a topic failed
    DELIVERY = "delivery"  # a send failed or timed out
    STALLED = "stalled"  # no acknowledgement within spill_after_s
    QUEUE_FULL = "queue-full"  # the in-memory queue was full
    OUTBOX = "outbox"  # the outbox could not take events (they are dropped)
    INVALID = "invalid"  # publish() got an event that cannot be encoded (a caller bug)


class KafkaSinkError(Exception):
    """Kafka cannot take events now. `reason` is an :class:`ErrorReason`; `retriable` says whether waiting helps."""

    def __init__(self, reason: ErrorReason, message: str, *, retriable: bool) -> None:
        super().__init__(f"kafka {reason.value}: {message}")
        self.reason = reason
        self.retriable = retriable


def describe(err: BaseException) -> str:
    """``<ExceptionType>: <message>`` without repeating the type when the message already starts with it."""
    text = str(err) or repr(err)
    name = type(err).__name__
    return text if text.startswith(name) else f"{name}: {text}"


def classify(err: BaseException) -> ErrorReason:
    """Map an aiokafka / OS exception to an :class:`ErrorReason`."""
    name = type(err).__name__
    if "Authentication" in name or "Sasl" in name or "SSL" in name or "Authorization" in name:
        return ErrorReason.AUTH
    if isinstance(err, KafkaConnectionError | ConnectionError | OSError):
        return ErrorReason.UNREACHABLE
    if "UnknownTopic" in name:
        return ErrorReason.TOPIC_MISSING
    return ErrorReason.DELIVERY
