"""The default partitioner: Java's murmur2 for keys, sticky-per-batch without keys."""

from __future__ import annotations

import random

import pytest
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from odradek.client.partitioner import (
    CallablePartitioner,
    DefaultPartitioner,
    key_partition,
    murmur2,
    resolve_partitioner,
)

pytestmark = pytest.mark.timeout(30)

# Partitions out of 1000 that Kafka's Java client picks (the vectors kafka-python and
# aiokafka test their partitioners with).
JAVA_VECTORS = [
    (b"", 681),
    (b"a", 524),
    (b"ab", 434),
    (b"abc", 107),
    (b"123456789", 566),
    (b"\x00 ", 742),
]


@pytest.mark.parametrize(("key", "partition"), JAVA_VECTORS)
def test_java_vectors(key: bytes, partition: int) -> None:
    assert key_partition(key, 1000) == partition


def test_matches_kafka_python_murmur2() -> None:
    rng = random.Random(4)
    for n in range(3000):
        data = bytes(rng.getrandbits(8) for _ in range(n % 41))
        assert murmur2(data) & 0xFFFFFFFF == kafka_python_murmur2(data)


def test_murmur2_is_signed_like_java() -> None:
    values = [murmur2(bytes([i, i + 1, 7])) for i in range(200)]
    assert any(v < 0 for v in values)
    assert all(-(2**31) <= v < 2**31 for v in values)


def test_keyed_records_use_all_partitions() -> None:
    p = DefaultPartitioner()
    # Same key, same partition, even when the partition has no leader right now.
    assert p.partition("t", b"abc", None, list(range(1000)), [0]) == 107


def test_keyless_records_stick_until_a_new_batch() -> None:
    p = DefaultPartitioner(random.Random(1))
    parts = list(range(8))
    first = p.partition("t", None, None, parts, parts)
    assert all(p.partition("t", None, None, parts, parts) == first for _ in range(50))
    p.on_new_batch("t", parts, parts, first)
    second = p.partition("t", None, None, parts, parts)
    assert second != first
    # A stale notification (about a partition we no longer stick to) changes nothing.
    p.on_new_batch("t", parts, parts, first)
    assert p.partition("t", None, None, parts, parts) == second


def test_keyless_prefers_available_partitions() -> None:
    p = DefaultPartitioner(random.Random(2))
    for _ in range(20):
        p.on_new_batch("t", list(range(6)), [4], -1)
        assert p.partition("t", None, None, list(range(6)), [4]) == 4


def test_custom_partitioners() -> None:
    fn = resolve_partitioner(lambda key, all_parts, avail: all_parts[-1])
    assert isinstance(fn, CallablePartitioner)
    assert fn.partition("t", b"k", None, [0, 1, 2], [0, 1, 2]) == 2
    assert isinstance(resolve_partitioner(None), DefaultPartitioner)
