"""Partitioners: where a record goes when the caller does not name a partition.

``DefaultPartitioner`` does what the Java client does: a record with a key goes
to ``toPositive(murmur2(key)) % numPartitions`` (all partitions, available or
not, so a key's partition never depends on broker health); records without a
key stick to one partition until a batch for it is complete, then move to
another (KIP-480 sticky partitioning).

Custom partitioners subclass ``Partitioner``, or are plain callables
``(key_bytes, all_partitions, available_partitions) -> partition`` (the
kafka-python / aiokafka convention).
"""

from __future__ import annotations

import random
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

from odradek.protocol.columns import murmur2  # Kafka's Utils.murmur2, compiled where built


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``)."""
    return n & 0x7FFFFFFF


def key_partition(key: bytes, num_partitions: int) -> int:
    """The partition the Java client picks for ``key``."""
    return to_positive(murmur2(key)) % num_partitions


class Partitioner(ABC):
    """Chooses a partition for a record without one. Subclass for custom logic."""

    @abstractmethod
    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partitions: Sequence[int],
        available: Sequence[int],
    ) -> int:
        """The partition for this record, from `partitions` (prefer `available`)."""

    def on_new_batch(
        self, topic: str, partitions: Sequence[int], available: Sequence[int], prev_partition: int
    ) -> None:
        """Called when a keyless record would open a new batch in ``prev_partition``."""
        return None  # optional hook: stateless partitioners need nothing here

    @property
    def sticky(self) -> bool:
        """Whether ``on_new_batch`` may change the choice for keyless records."""
        return False


class DefaultPartitioner(Partitioner):
    """murmur2 for keys (Java-compatible), sticky per batch for keyless records."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}
        self._lock = threading.Lock()

    @property
    def sticky(self) -> bool:
        return True

    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partitions: Sequence[int],
        available: Sequence[int],
    ) -> int:
        if key is not None:
            return key_partition(key, len(partitions))
        current = self._sticky.get(topic)  # a dict read needs no lock; changes take it
        if current is not None and current in partitions:
            return current
        with self._lock:
            current = self._sticky.get(topic)
            if current is None or current not in partitions:
                current = self._choose(partitions, available, None)
                self._sticky[topic] = current
            return current

    def on_new_batch(
        self, topic: str, partitions: Sequence[int], available: Sequence[int], prev_partition: int
    ) -> None:
        with self._lock:
            if self._sticky.get(topic, prev_partition) == prev_partition:
                self._sticky[topic] = self._choose(partitions, available, prev_partition)

    def _choose(
        self, partitions: Sequence[int], available: Sequence[int], avoid: int | None
    ) -> int:
        pool = list(available) or list(partitions)
        if avoid is not None and len(pool) > 1:
            pool = [p for p in pool if p != avoid]
        return self._rng.choice(pool)


class CallablePartitioner(Partitioner):
    """Adapts ``fn(key_bytes, all_partitions, available_partitions) -> int``."""

    def __init__(self, fn: Callable[[bytes | None, list[int], list[int]], int]) -> None:
        self._fn = fn

    def partition(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        partitions: Sequence[int],
        available: Sequence[int],
    ) -> int:
        return int(self._fn(key, list(partitions), list(available)))


def resolve_partitioner(spec: object) -> Partitioner:
    """The ``partitioner`` setting: None / "default" / a Partitioner / a callable."""
    if spec is None or spec == "default" or spec == "murmur2_random":
        return DefaultPartitioner()
    if isinstance(spec, Partitioner):
        return spec
    if isinstance(spec, type) and issubclass(spec, Partitioner):
        return spec()
    if callable(spec):
        return CallablePartitioner(spec)  # type: ignore[arg-type]
    from odradek.client.errors import ConfigError

    raise ConfigError(f"partitioner must be None, 'default', a Partitioner or a callable: {spec!r}")
