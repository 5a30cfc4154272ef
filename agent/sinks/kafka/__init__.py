"""Publishing the agent's CloudEvents to Kafka without losing any: an on-disk outbox first, Kafka behind it.

The package by topic: :mod:`~agent.sinks.kafka.publisher` (:class:`KafkaPublisher`: the lifecycle, the group
commit, and how an event travels, in its docstring), :mod:`~agent.sinks.kafka.direct` (memory to Kafka),
:mod:`~agent.sinks.kafka.replay` (outbox to Kafka after a spill), :mod:`~agent.sinks.kafka.base` (the state
they share, the connection, the counting), :mod:`~agent.sinks.kafka.peers` (outboxes of gone processes),
:mod:`~agent.sinks.kafka.producer` (the aiokafka producer's options, partitioner and topics),
:mod:`~agent.sinks.kafka.tls` (the TLS context and handshake diagnosis) and :mod:`~agent.sinks.kafka.errors`
(reasons and the error). Callers import the public names from here.
"""

from agent.sinks.kafka.base import Mode, PublisherStats, SinkMetrics
from agent.sinks.kafka.errors import ErrorReason, KafkaSinkError, classify, describe
from agent.sinks.kafka.producer import CachedPartitioner, producer_options
from agent.sinks.kafka.publisher import KafkaPublisher, wait_until
from agent.sinks.kafka.tls import tls_context, tls_problem

__all__ = [
    "CachedPartitioner",
    "ErrorReason",
    "KafkaPublisher",
    "KafkaSinkError",
    "Mode",
    "PublisherStats",
    "SinkMetrics",
    "classify",
    "describe",
    "producer_options",
    "tls_context",
    "tls_problem",
    "wait_until",
]
