"""The consumer: subscribe (group) or assign, poll with pipelined fetches, seek, commits.

Two ways to read, as in the Java client (seed 004, section 2.1):

* ``subscribe(topics)`` / ``subscribe(pattern=re.compile(...))``: the consumer's group
  member joins the group named by ``group_id`` (``ConsumerCoordinator`` in
  ``coordinator.py``, or ``ConsumerGroupMembership`` in ``membership.py`` with
  ``group_protocol="consumer"``; both are ``group_member.GroupMember``), and the
  partitions come from the group's assignor; a ``ConsumerRebalanceListener`` hears about
  revoked, assigned and lost partitions, always on the thread that calls ``poll``.
  Heartbeats run on the member's background thread (``heartbeat.py``); commits and
  committed offsets are the member's ``commits`` (``commits.py``).
* ``assign(partitions)``: exactly these partitions, no group membership (offsets can
  still be committed to ``group_id``).

``poll`` first lets the coordinator do its work (find the coordinator, the next step
of a rebalance, auto-commit, fatal heartbeat errors), then fetches. It never waits for
a rebalance to finish: a COOPERATIVE member keeps consuming the partitions it owns while
its JoinGroup / SyncGroup are in flight (an EAGER member owns none by then), and the
coordinator's responses end the fetch wait early. Positions of newly assigned
partitions come from the committed offsets (OffsetFetch), else ``auto_offset_reset``
(ListOffsets), once the member is stable. The next fetch is sent before records are
returned (pipelining), and the fetch wait is bounded by
``coordinator.time_to_next_poll()``.

Commits: ``commit()`` (Java's commitSync: the current positions or an explicit
``{tp: offset}``), ``commit_async(offsets=None, callback=fn)`` (``fn(offsets, error)``
runs in a later ``poll``), ``committed({tp})``; auto-commit every
``auto_commit_interval_ms`` inside ``poll``, before each rebalance and on ``close``.

Threading: like the Java consumer, a ``Consumer`` is used from one thread. Network
I/O runs on the connections' reader threads, which only queue fetch responses;
records are decoded in ``poll`` on the caller's thread.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from odradek.client.cluster import KafkaClient
from odradek.client.config import ConsumerConfig
from odradek.client.coordinator import ConsumerCoordinator
from odradek.client.errors import IllegalStateError, KafkaError, KafkaTimeoutError
from odradek.client.fetcher import Fetcher
from odradek.client.group_member import GroupMember
from odradek.client.membership import ConsumerGroupMembership
from odradek.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, list_offsets
from odradek.client.structs import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from odradek.client.subscription import (
    NoOffsetForPartitionError,
    OffsetResetStrategy,
    SubscriptionState,
)
from odradek.client.transactions import ConsumerGroupMetadata
from odradek.protocol.errors import ErrorCode

__all__ = [
    "Consumer",
    "ConsumerRecords",
    "NoOffsetForPartitionError",
]


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
        self._coordinator: GroupMember | None = None
        if self.config.group_id:
            # group_protocol="consumer": KIP-848 membership (membership.py); else classic.
            membership: type[GroupMember] = (
                ConsumerGroupMembership
                if self.config.group_protocol == "consumer"
                else ConsumerCoordinator
            )
            self._coordinator = membership(
                self._client, self._subscriptions, self.config, wakeup=self._fetcher.wakeup
            )
        self._closed = False
        self._closing = False

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout: float | None = None) -> None:
        """Commit (auto-commit), revoke (listener), leave the group (dynamic members), stop
        heartbeating, drop connections. Idempotent. The listener may still commit."""
        if self._closed or self._closing:
            return
        self._closing = True
        try:
            if self._coordinator is not None:
                self._coordinator.close(
                    self.config.default_api_timeout_ms / 1000 if timeout is None else timeout
                )
        finally:
            self._closed = True
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
        if self._coordinator is not None and self._subscriptions.is_user_assigned:
            # Java: commit the old assignment's positions before changing it.
            self._coordinator.commits.maybe_auto_commit_async()
        self._subscriptions.assign_from_user(tps)
        self._client.set_topics({tp.topic for tp in tps})

    def assignment(self) -> set[TopicPartition]:
        """The partitions currently assigned (by ``assign`` or by the group)."""
        return self._subscriptions.assigned_partitions()

    def subscription(self) -> set[str]:
        """The subscribed topics (for a pattern: the topics it currently matches)."""
        return set(self._subscriptions.subscription)

    def subscribe(
        self,
        topics: Iterable[str] | re.Pattern[str] | None = None,
        listener: Any = None,
        *,
        pattern: re.Pattern[str] | str | None = None,
    ) -> None:
        """Join ``group_id`` and read the partitions the group assigns.

        ``subscribe(["a", "b"], listener=...)`` or ``subscribe(pattern=re.compile("a-.*"))``
        (a compiled pattern as the first argument works too). Subscribing again replaces
        the topic list; the change takes effect in the next rebalance, which the next
        ``poll`` starts. An empty list unsubscribes. ``listener`` is a
        ``ConsumerRebalanceListener`` (its callbacks run inside ``poll``).
        """
        self._ensure_open()
        if isinstance(topics, re.Pattern):
            pattern, topics = topics, None
        if self._coordinator is None:
            raise IllegalStateError("subscribe needs a group_id (use assign without one)")
        if not self._coordinator.assignors:
            raise IllegalStateError("subscribe needs a partition_assignment_strategy")
        if pattern is not None:
            if topics is not None:
                raise ValueError("give topics or a pattern, not both")
            self._subscriptions.subscribe_pattern(pattern, listener)
            self._client._want_all_topics = True  # match the pattern against every topic
            self._client.request_update()
            return
        if topics is None:
            raise ValueError("subscribe needs topics or a pattern")
        if isinstance(topics, str):
            topics = [topics]
        names = list(topics)
        if not names:
            self.unsubscribe()
            return
        for name in names:
            if not name or not name.strip():
                raise ValueError("topic names must not be empty")
        keep = set(names)
        self._fetcher.clear_buffered_data(lambda tp: tp.topic in keep)
        if self._subscriptions.subscribe(names, listener):
            self._client.set_topics(keep)
        self._client.request_update()

    def unsubscribe(self) -> None:
        """Drop the assignment and the subscription; a group member revokes and leaves."""
        self._ensure_open()
        self._fetcher.clear_buffered_data()
        try:
            if self._coordinator is not None and self._subscriptions.has_auto_assigned_partitions:
                self._coordinator.on_unsubscribe()
        finally:
            self._subscriptions.unsubscribe()
            self._client._want_all_topics = False
            self._client.set_topics(())

    def enforce_rebalance(self, reason: str = "user requested") -> None:
        """Make the next ``poll`` rejoin the group (Java's enforceRebalance)."""
        self._ensure_open()
        if self._coordinator is None or not self._subscriptions.has_auto_assigned_partitions:
            raise IllegalStateError("enforce_rebalance needs a group subscription")
        self._coordinator.request_rejoin(f"enforced: {reason}")

    @property
    def member_id(self) -> str:
        """This member's id in the group ("" before it joined)."""
        return self._coordinator.member_id if self._coordinator is not None else ""

    @property
    def generation_id(self) -> int:
        """The group generation this member belongs to (-1 when not a member)."""
        return self._coordinator.generation.generation_id if self._coordinator else -1

    def group_metadata(self) -> ConsumerGroupMetadata:
        """What a transactional producer's ``send_offsets_to_transaction`` needs (KIP-447):
        the group, and this member's generation and ids, so the group can refuse the
        offsets of a consumer that was replaced."""
        group_id = self.config.group_id
        if group_id is None:
            raise IllegalStateError("group_metadata needs a consumer with a group_id")
        return ConsumerGroupMetadata(
            group_id, self.generation_id, self.member_id, self.config.group_instance_id
        )

    # ------------------------------------------------------------------ commits

    def _require_group(self, what: str) -> GroupMember:
        self._ensure_open()
        if self._coordinator is None:
            raise IllegalStateError(f"{what} needs a group_id")
        return self._coordinator

    def commit(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Commit synchronously (Java's commitSync): the current positions, or ``offsets``.

        ``offsets`` maps partitions to the offset of the *next* record to read (an int or
        an ``OffsetAndMetadata``). Retriable errors are retried until ``timeout``
        (default ``default_api_timeout_ms``); raises ``CommitFailedError`` when the
        member was removed from the group, ``RebalanceInProgressCommitError`` while the
        group rebalances (poll, then commit again).
        """
        coordinator = self._require_group("commit")
        coordinator.commits.commit_sync(offsets, self._timeout_s(timeout))

    def commit_async(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata] | None = None,
        callback: Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], Any]
        | None = None,
    ) -> None:
        """Commit without waiting; ``callback(offsets, error)`` runs in a later poll/commit."""
        coordinator = self._require_group("commit_async")
        coordinator.commits.commit_async(offsets, callback)

    def committed(
        self,
        partitions: Iterable[TopicPartition | tuple[str, int]],
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets for ``partitions`` (None where nothing is)."""
        coordinator = self._require_group("committed")
        return coordinator.commits.committed(list(partitions), self._timeout_s(timeout))

    def _abandon(self) -> None:
        """Test hook: stop like a crashed process (no commit, no LeaveGroup, no callbacks)."""
        if self._closed:
            return
        self._closed = True
        if self._coordinator is not None:
            self._coordinator.abandon()
        self._client.close()

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
            # The coordinator never waits for a rebalance here: a member keeps fetching
            # what it owns while its JoinGroup / SyncGroup are in flight (KIP-429).
            stable = True
            if self._coordinator is not None:
                stable = self._coordinator.poll(max(0.0, deadline - time.monotonic()))
            records = self._poll_once(
                max(0.0, deadline - time.monotonic()), limit, update_positions=stable
            )
            if records:
                # Pipelining: put the next fetch on the wire before handing records out.
                self._fetcher.send_fetches()
                return ConsumerRecords(records)
            if time.monotonic() >= deadline:
                return ConsumerRecords({})

    def _poll_once(
        self, timeout_s: float, limit: int, *, update_positions: bool = True
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """One fetch round. Positions of new partitions are looked up only when the
        group is stable (``update_positions``), as Java's updateAssignmentMetadataIfNeeded."""
        backoff = self.config.retry_backoff_ms / 1000
        self._client.maybe_refresh(timeout_s=self.config.request_timeout_ms / 1000)
        if update_positions and not self._update_fetch_positions(timeout_s):
            timeout_s = min(timeout_s, backoff)
        records = self._fetcher.fetched_records(limit)
        if records:
            return records
        self._fetcher.send_fetches()
        wait = timeout_s
        coordinator = self._coordinator
        if coordinator is not None:
            wait = min(wait, coordinator.time_to_next_poll())
        if not self._fetcher.has_available_fetches():
            if not self._fetcher.has_in_flight() and not (
                coordinator is not None and coordinator.awaiting_response()
            ):
                # Nothing will wake us (paused, no leader, no position): back off briefly.
                wait = min(wait, backoff)
            # A fetch response, or the coordinator's wakeup (a rebalance step can go on),
            # ends the wait early.
            self._fetcher.wait_for_fetches(wait)
        return self._fetcher.fetched_records(limit)

    def _update_fetch_positions(self, timeout_s: float) -> bool:
        """Committed offsets (with a coordinator), else resets; True when all are known."""
        if self._subscriptions.has_all_fetch_positions():
            return True
        coordinator = self._coordinator
        if coordinator is not None and not coordinator.commits.refresh_committed_offsets(timeout_s):
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
            if meta.error_code == ErrorCode.NONE
        }
