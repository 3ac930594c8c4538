"""Group -> ``__consumer_offsets`` partition, exactly as Kafka computes it."""

from __future__ import annotations

_INT_MIN = -(2**31)
OFFSETS_TOPIC = "__consumer_offsets"


def java_string_hashcode(value: str) -> int:
    """Java's ``String.hashCode``: over UTF-16 code units, with int32 overflow."""
    data = value.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def java_utils_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: like ``Math.abs`` but maps Integer.MIN_VALUE to 0."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for(group_id: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition that owns ``group_id``."""
    if num_partitions <= 0:
        raise ValueError("num_partitions must be positive")
    return java_utils_abs(java_string_hashcode(group_id)) % num_partitions
