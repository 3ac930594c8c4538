"""The consumer: manual assignment, poll with pipelined fetches, seek, pause, offsets.

This step supports consumers that pick their partitions themselves
(``assign``). Group membership -- ``subscribe`` (topics or pattern), the
``ConsumerCoordinator`` with its join/sync loop and heartbeat thread,
rebalance listeners, committed offsets, ``commit`` / ``commit_async`` and
auto-commit -- is not part of this module yet, and so ``Consumer`` has no
``subscribe``/``commit`` methods for now. The seams it plugs into are:

* ``Consumer._coordinator``: an object with the ``CoordinatorHooks`` methods.
  ``poll`` calls ``coordinator.poll(timeout_s)`` first (join/sync, auto-commit,
  heartbeat bookkeeping) and bounds its fetch wait with
  ``coordinator.time_to_next_poll()``; positions of newly assigned partitions
  come from ``coordinator.refresh_committed_offsets(timeout_s)`` before the
  ``auto_offset_reset`` fallback; ``close`` calls ``coordinator.close``.
* ``SubscriptionState`` already models topic and pattern subscriptions and
  ``assign_from_subscribed``; the fetcher drops buffered data of partitions
  that leave the assignment.

Threading: like the Java consumer, a ``Consumer`` is used from one thread.
Network I/O runs on the connections' reader threads, which only queue fetch
responses; records are decoded in ``poll`` on the caller's thread.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Protocol

from odradek.client.cluster import KafkaClient
from odradek.client.config import ConsumerConfig
from odradek.client.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from odradek.client.fetcher import Fetcher
from odradek.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from odradek.client.structs import ConsumerRecord, OffsetAndTimestamp, TopicPartition
from odradek.client.subscription import (
    NoOffsetForPartitionError,
    OffsetResetStrategy,
    SubscriptionState,
)

__all__ = [
    "Consumer",
    "ConsumerRecords",
    "CoordinatorHooks",
    "NoOffsetForPartitionError",
]


class CoordinatorHooks(Protocol):
    """What ``Consumer`` expects of the group coordinator component."""

    def poll(self, timeout_s: float) -> bool:
        """Drive membership (join, sync, auto-commit); False if not ready in time."""
        ...

    def time_to_next_poll(self) -> float:
        """Seconds until the coordinator needs ``poll`` again (heartbeat / auto-commit)."""
        ...

    def refresh_committed_offsets(self, timeout_s: float) -> bool:
        """Seek partitions without a position to their committed offsets."""
        ...

    def close(self, timeout_s: float) -> None: ...


class ConsumerRecords:
    """The records of one poll: iterable, sized, and grouped by partition."""

    def __init__(self, by_partition: dict[TopicPartition, list[ConsumerRecord]]) -> None:
        self._by_partition = by_partition

    def __iter__(self) -> Iterator[ConsumerRecord]:
        for records in self._by_partition.values():
            yield from records

    def __len__(self) -> int:
        return sum(len(r) for r in self._by_partition.values())

    def __bool__(self) -> bool:
        return any(self._by_partition.values())

    def partitions(self) -> set[TopicPartition]:
        return set(self._by_partition)

    def records(self, tp: TopicPartition) -> list[ConsumerRecord]:
        return list(self._by_partition.get(tp, ()))

    def count(self) -> int:
        return len(self)

    def __repr__(self) -> str:
        return f"<ConsumerRecords {len(self)} records from {len(self._by_partition)} partitions>"


def _tp(value: Any) -> TopicPartition:
    if isinstance(value, TopicPartition):
        return value
    topic, partition = value
    return TopicPartition(str(topic), int(partition))


class Consumer:
    """``Consumer(bootstrap_servers=..., auto_offset_reset="earliest", ...)``; see module docs."""

    def __init__(self, config: Mapping[str, Any] | None = None, **settings: Any) -> None:
        self.config = ConsumerConfig.from_settings(config, **settings)
        self._client = KafkaClient(
            self.config, allow_auto_create_topics=self.config.allow_auto_create_topics
        )
        self._subscriptions = SubscriptionState(self.config.auto_offset_reset)
        self._fetcher = Fetcher(self._client, self._subscriptions, self.config)
        self._coordinator: CoordinatorHooks | None = None
        self._closed = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout: float | None = None) -> None:
        """Leave (when a coordinator is plugged in), drop connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._coordinator is not None:
                self._coordinator.close(
                    self.config.default_api_timeout_ms / 1000 if timeout is None else timeout
                )
        finally:
            self._client.close()

    def _ensure_open(self) -> None:
        if self._closed:
            raise IllegalStateError("this consumer is closed")

    def _timeout_s(self, timeout: float | None) -> float:
        return self.config.default_api_timeout_ms / 1000 if timeout is None else float(timeout)

    # ------------------------------------------------------------------ assignment

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions (no group management). Empty list: unassign."""
        self._ensure_open()
        tps = [_tp(p) for p in partitions]
        if not tps:
            self.unsubscribe()
            return
        self._subscriptions.assign_from_user(tps)
        self._client.set_topics({tp.topic for tp in tps})

    def assignment(self) -> set[TopicPartition]:
        return self._subscriptions.assigned_partitions()

    def unsubscribe(self) -> None:
        """Drop the assignment (and, with a coordinator, the subscription)."""
        self._ensure_open()
        self._fetcher.clear_buffered_data()
        self._subscriptions.unsubscribe()
        self._client.set_topics(())

    # ------------------------------------------------------------------ poll

    def poll(self, timeout: float = 0.0, max_records: int | None = None) -> ConsumerRecords:
        """Records from assigned partitions, waiting up to ``timeout`` seconds for some.

        At most ``max_poll_records`` (or ``max_records``) records. The next fetch
        is sent before the records are returned (pipelining).
        """
        self._ensure_open()
        if not self._subscriptions.assigned_partitions() and not (
            self._subscriptions.has_auto_assigned_partitions
        ):
            raise IllegalStateError("consumer is not assigned any partitions")
        limit = max_records or self.config.max_poll_records
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            remaining = max(0.0, deadline - time.monotonic())
            if self._coordinator is not None and not self._coordinator.poll(remaining):
                if time.monotonic() >= deadline:
                    return ConsumerRecords({})
                continue
            records = self._poll_once(max(0.0, deadline - time.monotonic()), limit)
            if records:
                # Pipelining: put the next fetch on the wire before handing records out.
                self._fetcher.send_fetches()
                return ConsumerRecords(records)
            if time.monotonic() >= deadline:
                return ConsumerRecords({})

    def _poll_once(
        self, timeout_s: float, limit: int
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        self._client.maybe_refresh(timeout_s=self.config.request_timeout_ms / 1000)
        if not self._update_fetch_positions(timeout_s):
            timeout_s = min(timeout_s, self.config.retry_backoff_ms / 1000)
        records = self._fetcher.fetched_records(limit)
        if records:
            return records
        self._fetcher.send_fetches()
        wait = timeout_s
        if self._coordinator is not None:
            wait = min(wait, self._coordinator.time_to_next_poll())
        if not self._fetcher.has_available_fetches():
            if self._fetcher.has_in_flight():
                self._fetcher.wait_for_fetches(wait)
            elif wait > 0:
                # Nothing fetchable (paused, no leader, no position): back off briefly.
                time.sleep(min(wait, self.config.retry_backoff_ms / 1000))
        return self._fetcher.fetched_records(limit)

    def _update_fetch_positions(self, timeout_s: float) -> bool:
        """Committed offsets (with a coordinator), else resets; True when all are known."""
        if self._subscriptions.has_all_fetch_positions():
            return True
        if self._coordinator is not None and not self._coordinator.refresh_committed_offsets(
            timeout_s
        ):
            return False
        self._subscriptions.reset_missing_positions()
        self._fetcher.reset_offsets_if_needed(max(timeout_s, self.config.request_timeout_ms / 1000))
        return self._subscriptions.has_all_fetch_positions()

    # ------------------------------------------------------------------ positions

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        """Fetch from ``offset`` next (an offset past the end resets per auto_offset_reset)."""
        self._ensure_open()
        if offset < 0:
            raise ValueError(f"seek offset must not be negative: {offset}")
        self._subscriptions.seek(_tp(partition), int(offset))

    def seek_to_beginning(self, partitions: Iterable[Any] | None = None) -> None:
        """Reset to the earliest offset (evaluated lazily on the next poll/position)."""
        self._ensure_open()
        tps = self._tps_or_all(partitions)
        self._subscriptions.request_reset(tps, OffsetResetStrategy.EARLIEST)

    def seek_to_end(self, partitions: Iterable[Any] | None = None) -> None:
        """Reset to the log end offset (evaluated lazily on the next poll/position)."""
        self._ensure_open()
        tps = self._tps_or_all(partitions)
        self._subscriptions.request_reset(tps, OffsetResetStrategy.LATEST)

    def _tps_or_all(self, partitions: Iterable[Any] | None) -> list[TopicPartition]:
        if partitions is None:
            return self._subscriptions.assigned_list()
        tps = [_tp(p) for p in partitions]
        for tp in tps:
            if not self._subscriptions.is_assigned(tp):
                raise IllegalStateError(f"partition {tp} is not assigned to this consumer")
        return tps

    def position(
        self, partition: TopicPartition | tuple[str, int], timeout: float | None = None
    ) -> int:
        """The offset of the next record to fetch; resolves a pending reset if needed."""
        self._ensure_open()
        tp = _tp(partition)
        deadline = time.monotonic() + self._timeout_s(timeout)
        while True:
            pos = self._subscriptions.position(tp)
            if pos is not None:
                return pos
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"position of {tp} not known in time")
            self._update_fetch_positions(remaining)
            if self._subscriptions.position(tp) is None:
                time.sleep(min(self.config.retry_backoff_ms / 1000, max(0.0, remaining)))

    def highwater(self, partition: TopicPartition | tuple[str, int]) -> int | None:
        """The high watermark from the last fetch of the partition (None before one)."""
        return self._subscriptions.state(_tp(partition)).high_watermark

    # ------------------------------------------------------------------ pause / resume

    def pause(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Stop fetching these partitions (buffered records are dropped, refetched on resume)."""
        self._ensure_open()
        self._subscriptions.pause(_tp(p) for p in partitions)

    def resume(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        self._ensure_open()
        self._subscriptions.resume(_tp(p) for p in partitions)

    def paused(self) -> set[TopicPartition]:
        return self._subscriptions.paused_partitions()

    # ------------------------------------------------------------------ offsets lookups

    def offsets_for_times(
        self,
        timestamps: Mapping[TopicPartition | tuple[str, int], int],
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Earliest offset whose timestamp is >= the given one (None if there is none)."""
        self._ensure_open()
        request: dict[TopicPartition, int] = {}
        for p, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"timestamp must not be negative: {ts}")
            request[_tp(p)] = int(ts)
        return self._list_offsets(request, timeout)

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        self._ensure_open()
        found = self._list_offsets(dict.fromkeys(map(_tp, partitions), EARLIEST_TIMESTAMP), timeout)
        return {tp: (o.offset if o is not None else -1) for tp, o in found.items()}

    def end_offsets(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """Log end offsets (the last stable offset with read_committed)."""
        self._ensure_open()
        found = self._list_offsets(dict.fromkeys(map(_tp, partitions), LATEST_TIMESTAMP), timeout)
        return {tp: (o.offset if o is not None else -1) for tp, o in found.items()}

    def _list_offsets(
        self, request: dict[TopicPartition, int], timeout: float | None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        if not request:
            return {}
        return list_offsets(
            self._client,
            request,
            timeout_s=self._timeout_s(timeout),
            isolation_level=1 if self.config.isolation_level == "read_committed" else 0,
        )

    # ------------------------------------------------------------------ metadata

    def partitions_for_topic(self, topic: str, timeout: float | None = None) -> list[int]:
        self._ensure_open()
        try:
            return self._client.wait_for_topic(topic, self._timeout_s(timeout))
        except KafkaError:
            return []

    def list_topics(self, timeout: float | None = None) -> dict[str, list[int]]:
        """Every topic with its partitions."""
        self._ensure_open()
        cluster = self._client.refresh(all_topics=True, timeout_s=self._timeout_s(timeout))
        return {
            name: sorted(meta.partitions)
            for name, meta in cluster.topics.items()
            if meta.error_code == 0
        }
