"""Offsets as Spark sees them, and how a range of offsets becomes Spark tasks.

Spark stores a source's offsets as JSON in the query's checkpoint and hands
them back JSON-decoded, so keys are strings: ``{"clicks": {"0": 1200, "1": 980}}``
(topic -> partition -> next offset to read), exactly the format of Spark's
Kafka source. Everything in this module is pure (no I/O) and unit-tested.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from odradek.client.structs import TopicPartition

Offsets = dict[TopicPartition, int]


def to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def from_json(data: Mapping[str, Mapping[str, int]] | None) -> Offsets:
    if not data:
        return {}
    return {
        TopicPartition(str(topic), int(p)): int(off)
        for topic, parts in data.items()
        for p, off in parts.items()
    }


def rate_limit(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], limit: int
) -> Offsets:
    """Cap ``end`` so that at most ``limit`` offsets are read, shared in proportion to each
    partition's backlog (like Spark's Kafka source), with the rounding remainder given to the
    partitions with the largest fractions, so a batch holds exactly ``limit`` when the
    backlog is at least that large (Spark's source can leave a few behind)."""
    sizes = {tp: max(0, end[tp] - start.get(tp, end[tp])) for tp in end}
    total = sum(sizes.values())
    if total <= limit:
        return dict(end)
    shares: dict[TopicPartition, int] = {}
    fractions: list[tuple[float, TopicPartition]] = []
    for tp, size in sizes.items():
        exact = limit * size / total
        shares[tp] = min(size, math.floor(exact))
        fractions.append((exact - math.floor(exact), tp))
    left = limit - sum(shares.values())
    for _, tp in sorted(fractions, key=lambda x: (-x[0], x[1])):
        if left <= 0:
            break
        if shares[tp] < sizes[tp]:
            shares[tp] += 1
            left -= 1
    out = dict(end)
    for tp, share in shares.items():
        out[tp] = start.get(tp, end[tp]) + share
    return out


@dataclass(frozen=True)
class OffsetRange:
    topic: str
    partition: int
    from_offset: int
    until_offset: int  # exclusive

    @property
    def size(self) -> int:
        return self.until_offset - self.from_offset


def ranges(
    start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]
) -> list[OffsetRange]:
    """One range per partition with something to read, in partition order."""
    out = []
    for tp in sorted(end):
        lo = start.get(tp)
        if lo is None:
            continue
        if end[tp] > lo:
            out.append(OffsetRange(tp.topic, tp.partition, lo, end[tp]))
    return out


def split(parts: Iterable[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: with ``minPartitions`` larger than the number of
    ranges, split each range into pieces in proportion to its size (at least one each)."""
    parts = list(parts)
    if not min_partitions or len(parts) >= min_partitions:
        return parts
    total = sum(r.size for r in parts)
    if total == 0:
        return parts
    out: list[OffsetRange] = []
    for r in parts:
        pieces = max(1, round(r.size / total * min_partitions))
        pieces = min(pieces, r.size)
        step = r.size / pieces
        for i in range(pieces):
            lo = r.from_offset + math.floor(i * step)
            hi = r.until_offset if i == pieces - 1 else r.from_offset + math.floor((i + 1) * step)
            if hi > lo:
                out.append(OffsetRange(r.topic, r.partition, lo, hi))
    return out
