"""The aiokafka producer the publisher uses: its keyword arguments from the ``kafka`` settings (security included),
its partitioner, and the steps around it: create or check the topics, learn their partitions, stop it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import structlog
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from agent.settings import KafkaSettings
from agent.sinks.kafka.errors import ErrorReason, KafkaSinkError, describe
from agent.sinks.kafka.tls import tls_context

log = structlog.get_logger(__name__)

_TOPIC_ALREADY_EXISTS = 36
_METADATA_WAIT_S = 2.0  # how long the connect waits for a topic's partition metadata before leaving it to send()
_PARTITION_CACHE = 65536  # (key, partition count) entries the partitioner keeps before it starts again


class CachedPartitioner:
    """aiokafka's :class:`~aiokafka.partitioner.DefaultPartitioner` (murmur2 of the key, as every Kafka client)
    with its answers kept per (key, partition count), given to the producer as its ``partitioner``: the keys are
    job UIDs and node names, a bounded set, and murmur2 in pure Python was a fifth of a ``send()``'s cost.
    Keyless records go to the default partitioner's random choice.

    Called by aiokafka as ``partitioner(key_bytes, all_partitions, available_partitions)``; returns a partition id.
    """

    def __init__(self) -> None:
        self._default = DefaultPartitioner()
        self._cache: dict[tuple[bytes, int], int] = {}

    def __call__(self, key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        if key is None:
            return int(self._default(key, all_partitions, available))
        slot = (key, len(all_partitions))
        got = self._cache.get(slot)
        if got is None:
            if len(self._cache) >= _PARTITION_CACHE:
                self._cache.clear()
            got = self._cache[slot] = int(self._default(key, all_partitions, available))
        return got


def producer_options(settings: KafkaSettings) -> dict[str, Any]:
    """aiokafka producer/admin keyword arguments for `settings` (security included).

    Raises:
        KafkaSinkError: (config, not retriable) SASL without mechanism/user/password, or an unreadable SSL file.
    """
    opts: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap_servers,
        "client_id": settings.client_id,
        "request_timeout_ms": settings.request_timeout_ms,
        "security_protocol": settings.security_protocol,
    }
    proto = settings.security_protocol
    if proto.startswith("SASL"):
        missing = [
            name
            for name, value in (
                ("sasl_mechanism", settings.sasl_mechanism),
                ("sasl_username", settings.sasl_username),
                ("sasl_password", settings.sasl_password),
            )
            if not value
        ]
        if missing:
            raise KafkaSinkError(
                ErrorReason.CONFIG, f"security_protocol {proto} needs {', '.join(missing)}", retriable=False
            )
        opts |= {
            "sasl_mechanism": settings.sasl_mechanism,
            "sasl_plain_username": settings.sasl_username,
            "sasl_plain_password": settings.sasl_password,
        }
    if proto.endswith("SSL"):
        opts["ssl_context"] = tls_context(settings)
    return opts


def build_producer(factory: Callable[..., Any], settings: KafkaSettings, opts: dict[str, Any]) -> Any:
    """A producer from `factory` (``AIOKafkaProducer``, or a fake in tests) with `opts` (:func:`producer_options`)
    and what the publisher's guarantees need: ``acks=all`` and idempotence (no loss, no duplicate from a retried
    batch), the settings' compression, ``linger_ms`` and ``max_batch_bytes``, and a :class:`CachedPartitioner`.
    Not started."""
    return factory(
        **opts,
        acks="all",
        enable_idempotence=True,
        compression_type=settings.compression_type,
        linger_ms=settings.linger_ms,
        max_batch_size=settings.max_batch_bytes,
        partitioner=CachedPartitioner(),
    )


async def check_topics(settings: KafkaSettings, opts: dict[str, Any], topics: Iterable[str]) -> None:
    """Make sure `topics` exist, creating the missing ones (``topic_partitions``, ``topic_replication_factor``)
    when ``create_topics`` is on, through an admin client with `opts`.

    Raises:
        KafkaSinkError: (topic-missing, retriable) a topic is missing and create_topics is off; (topic-create,
            retriable) the broker refused to create one (any error code but 0 and 36, TOPIC_ALREADY_EXISTS).
        KafkaError, OSError: the admin client could not reach the brokers.
    """
    admin = AIOKafkaAdminClient(**opts)
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        missing = [t for t in topics if t not in existing]
        if not missing:
            return
        if not settings.create_topics:
            raise KafkaSinkError(
                ErrorReason.TOPIC_MISSING,
                f"topic(s) {', '.join(missing)} do not exist and create_topics is off "
                "(create them, or set FAULT_AGENT_KAFKA__CREATE_TOPICS=true)",
                retriable=True,
            )
        resp = await admin.create_topics(
            [NewTopic(t, settings.topic_partitions, settings.topic_replication_factor) for t in missing]
        )
        for err in getattr(resp, "topic_errors", ()):
            name, code = err[0], err[1]
            if code not in (0, _TOPIC_ALREADY_EXISTS):
                detail = err[2] if len(err) > 2 else ""
                raise KafkaSinkError(
                    ErrorReason.TOPIC_CREATE, f"creating {name}: error code {code} {detail}", retriable=True
                )
        log.info("kafka topics created", topics=missing, partitions=settings.topic_partitions)
    finally:
        await admin.close()


async def learn_partitions(producer: Any, topics: Iterable[str]) -> None:
    """Fetch the partition metadata of `topics` into `producer` now (``partitions_for``), so that the first event
    of each topic is not held up by a metadata round trip inside ``send()`` (~2 ms on the testbed, once per
    topic and producer). The producer's ``start()`` learns the brokers only. Best effort: a topic just created
    whose metadata is not there yet within ``_METADATA_WAIT_S`` is left to ``send()``, which waits for it."""
    for topic in topics:
        try:
            await asyncio.wait_for(producer.partitions_for(topic), _METADATA_WAIT_S)
        except (TimeoutError, KafkaError) as e:
            log.debug("kafka topic metadata not there yet; the first send waits for it", topic=topic, error=describe(e))


async def stop_producer(producer: Any, wait_s: float) -> None:
    """Stop `producer` within `wait_s` seconds; when it cannot stop cleanly (its broker is gone, the stop timed
    out) close its connections all the same, so that no socket outlives it. Never raises for the producer's
    errors (KafkaError, OSError, TimeoutError); they are logged at debug level."""
    try:
        await asyncio.wait_for(producer.stop(), wait_s)
    except (KafkaError, OSError, TimeoutError) as e:  # aiokafka's stop: a flush that fails or the stop timing out
        log.debug("kafka producer stop failed; closing its connections", error=describe(e))
        with contextlib.suppress(KafkaError, OSError, TimeoutError):
            await producer.client.close()
