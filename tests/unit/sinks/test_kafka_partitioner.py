"""The publisher's partitioner is aiokafka's default one (murmur2, as every Kafka client) with its answers kept:
a job's events must land on the partition any Kafka client computes for its key."""

from __future__ import annotations

import pytest

import agent.sinks.kafka.producer as kafka_producer
from agent.sinks.kafka import CachedPartitioner

# murmur2 of these keys as Apache Kafka's own UtilsTest states them (signed 32-bit, Java's int).
JAVA_MURMUR2 = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536, b"abc": 479470107}


def _java_partition(key: bytes, n: int) -> int:
    return (JAVA_MURMUR2[key] & 0x7FFFFFFF) % n  # Utils.toPositive(murmur2(key)) % numPartitions


@pytest.mark.parametrize("n", [1, 3, 6, 12])
def test_partition_matches_the_java_client_again_and_again(n: int) -> None:
    p = CachedPartitioner()
    parts = list(range(n))
    for _ in range(2):  # computed, then from the cache
        assert {k: p(k, parts, parts) for k in JAVA_MURMUR2} == {k: _java_partition(k, n) for k in JAVA_MURMUR2}


def test_partition_follows_a_change_in_partition_count_and_the_cache_is_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka_producer, "_PARTITION_CACHE", 10)
    p = CachedPartitioner()
    six, twelve = list(range(6)), list(range(12))
    assert p(b"21", six, six) == _java_partition(b"21", 6)
    assert p(b"21", twelve, twelve) == _java_partition(b"21", 12)
    for i in range(100):
        p(f"k{i}".encode(), six, six)
    assert len(p._cache) <= 10
    assert p(b"foobar", six, six) == _java_partition(b"foobar", 6)
