"""The publisher packs records into per-partition batches itself: the key → partition mapping must be the one every
Kafka client uses (murmur2, Java's `Utils.murmur2`), and packing must keep each partition's publish order."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer

from agent.settings import KafkaSettings
from agent.sinks.events import Message, Stream
from agent.sinks.kafka import KafkaPublisher, Partitioner

# murmur2 of these keys as Apache Kafka's own UtilsTest states them (signed 32-bit, Java's int).
JAVA_MURMUR2 = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536, b"abc": 479470107}


def _java_partition(key: bytes, n: int) -> int:
    return (JAVA_MURMUR2[key] & 0x7FFFFFFF) % n  # Utils.toPositive(murmur2(key)) % numPartitions


def test_partition_matches_the_java_client_for_known_keys() -> None:
    p = Partitioner()
    for n in (1, 3, 6, 12):
        parts = list(range(n))
        for key in JAVA_MURMUR2:
            assert p.partition("t", key, parts) == _java_partition(key, n), (key, n)


def test_partition_follows_a_change_in_partition_count() -> None:
    p = Partitioner()
    before = {k: p.partition("t", k, list(range(6))) for k in JAVA_MURMUR2}
    after = {k: p.partition("t", k, list(range(12))) for k in JAVA_MURMUR2}
    assert after == {k: _java_partition(k, 12) for k in JAVA_MURMUR2}
    assert before == {k: _java_partition(k, 6) for k in JAVA_MURMUR2}


def test_partition_cache_is_bounded(monkeypatch: Any) -> None:
    import agent.sinks.kafka as kafka

    monkeypatch.setattr(kafka, "_PARTITION_CACHE", 10)
    p = Partitioner()
    for i in range(100):
        p.partition("t", f"k{i}".encode(), [0, 1, 2])
    assert len(p._cache) <= 10
    assert p.partition("t", b"21", [0, 1, 2]) == _java_partition(b"21", 3)


def _msg(key: str, i: int, size: int = 200) -> Message:
    stream = Stream.FAULTS if i % 3 else Stream.RECOVERIES
    return Message(stream, key.encode(), b"x" * size, (("ce_id", f"{key}-{i}".encode()),), f"{key}-{i}", "t")


async def test_pack_groups_by_partition_and_keeps_order() -> None:
    settings = KafkaSettings.model_validate({"faults_topic": "f", "recoveries_topic": "r"})
    pub = KafkaPublisher(settings)
    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:1", max_batch_size=16384)  # never connects
    keys = ["21", "foobar", "abc", "a-little-bit-long-string"]
    messages = [_msg(keys[i % 4], i) for i in range(400)]
    entries = pub._pack(producer, messages, {"f": [0, 1, 2], "r": [0, 1, 2]})
    # every message exactly once, in a batch for its topic and its key's partition
    packed = [m for e in entries for m in e.messages]
    assert sorted(m.event_id for m in packed) == sorted(m.event_id for m in messages)
    for e in entries:
        assert e.builder is not None
        for m in e.messages:
            assert e.topic == ("f" if m.stream is Stream.FAULTS else "r")
            assert e.partition == _java_partition(m.key, 3)
    # per key and topic (Kafka orders within a partition only), the packed order is the publish order
    for key in keys:
        for stream in Stream:
            mine = [m.event_id for m in messages if m.key == key.encode() and m.stream is stream]
            assert [m.event_id for m in packed if m.key == key.encode() and m.stream is stream] == mine
    # 16 KiB batches of 200-byte records: a partition's records spill over into further batches
    assert len(entries) > len({(e.topic, e.partition) for e in entries})
    await producer.stop()
