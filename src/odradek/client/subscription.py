"""SubscriptionState: what the consumer reads, and where it stands in each partition.

As in the Java client (seed 004, section 2.1) a consumer either subscribes
(to topics or a pattern; the group coordinator assigns partitions through
``assign_from_subscribed``) or is assigned partitions by the user
(``assign_from_user``); the two are exclusive. Each assigned partition has a
``TopicPartitionState``: the fetch position (None until known), the high
watermark / log start / last stable offset from the latest fetch, whether the
user paused it, and a pending offset reset strategy.

A partition without a position first gets the committed offset (the
coordinator's job), else a reset through ListOffsets by its strategy.

Thread-safe: one lock guards everything, because the group coordinator's
heartbeat thread may revoke partitions while the user thread polls.
"""

from __future__ import annotations

import enum
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from odradek.client.errors import IllegalStateError, KafkaError
from odradek.client.structs import TopicPartition


class NoOffsetForPartitionError(KafkaError):
    """A partition needs a position and ``auto_offset_reset`` is 'none'."""


class OffsetResetStrategy(enum.Enum):
    EARLIEST = "earliest"
    LATEST = "latest"
    NONE = "none"

    @property
    def timestamp(self) -> int | None:
        """The ListOffsets timestamp for this strategy (-2 earliest, -1 latest)."""
        if self is OffsetResetStrategy.EARLIEST:
            return -2
        if self is OffsetResetStrategy.LATEST:
            return -1
        return None


class SubscriptionType(enum.Enum):
    NONE = "none"
    AUTO_TOPICS = "auto_topics"
    AUTO_PATTERN = "auto_pattern"
    USER_ASSIGNED = "user_assigned"


@dataclass
class TopicPartitionState:
    position: int | None = None
    position_leader_epoch: int | None = None
    high_watermark: int | None = None
    log_start_offset: int | None = None
    last_stable_offset: int | None = None
    paused: bool = False
    reset_strategy: OffsetResetStrategy | None = None
    next_reset_attempt: float = 0.0  # monotonic; backoff after a failed reset
    pending_revocation: bool = False  # committed before an eager revoke: fetch no more

    @property
    def is_fetchable(self) -> bool:
        return (
            not self.paused
            and not self.pending_revocation
            and self.position is not None
            and self.reset_strategy is None
        )


class SubscriptionState:
    def __init__(self, default_reset: str | OffsetResetStrategy = "latest") -> None:
        self.default_reset = OffsetResetStrategy(
            default_reset.value if isinstance(default_reset, OffsetResetStrategy) else default_reset
        )
        self._lock = threading.RLock()
        self.subscription_type = SubscriptionType.NONE
        self.subscription: set[str] = set()
        self.subscribed_pattern: re.Pattern[str] | None = None
        self.listener: Any = None  # ConsumerRebalanceListener, set by the coordinator
        self._assignment: dict[TopicPartition, TopicPartitionState] = {}
        self._on_assignment_change: list[Callable[[set[TopicPartition]], None]] = []

    # ------------------------------------------------------------------ subscription type

    def _set_type(self, kind: SubscriptionType) -> None:
        if self.subscription_type is SubscriptionType.NONE:
            self.subscription_type = kind
        elif self.subscription_type is not kind:
            raise IllegalStateError(
                "subscription to topics, a pattern and user-assigned partitions are mutually "
                "exclusive; call unsubscribe() first"
            )

    def subscribe(self, topics: Iterable[str], listener: Any = None) -> bool:
        """Subscribe to topics; returns True when the topic set changed."""
        with self._lock:
            self._set_type(SubscriptionType.AUTO_TOPICS)
            self.listener = listener
            new = set(topics)
            if new == self.subscription:
                return False
            self.subscription = new
            return True

    def subscribe_pattern(self, pattern: re.Pattern[str] | str, listener: Any = None) -> None:
        with self._lock:
            self._set_type(SubscriptionType.AUTO_PATTERN)
            self.listener = listener
            self.subscribed_pattern = re.compile(pattern) if isinstance(pattern, str) else pattern

    def subscribe_from_pattern(self, topics: Iterable[str]) -> bool:
        """Set the topics a pattern currently matches; True when they changed."""
        with self._lock:
            if self.subscription_type is not SubscriptionType.AUTO_PATTERN:
                raise IllegalStateError("not subscribed to a pattern")
            new = set(topics)
            if new == self.subscription:
                return False
            self.subscription = new
            return True

    def matches_pattern(self, topic: str) -> bool:
        pattern = self.subscribed_pattern
        return pattern is not None and pattern.fullmatch(topic) is not None

    def unsubscribe(self) -> None:
        with self._lock:
            self.subscription = set()
            self.subscribed_pattern = None
            self.listener = None
            self._set_assignment({})
            self.subscription_type = SubscriptionType.NONE

    @property
    def has_auto_assigned_partitions(self) -> bool:
        return self.subscription_type in (
            SubscriptionType.AUTO_TOPICS,
            SubscriptionType.AUTO_PATTERN,
        )

    @property
    def is_user_assigned(self) -> bool:
        return self.subscription_type is SubscriptionType.USER_ASSIGNED

    # ------------------------------------------------------------------ assignment

    def add_assignment_listener(self, fn: Callable[[set[TopicPartition]], None]) -> None:
        """``fn(removed)`` runs after partitions leave the assignment (fetcher cleanup)."""
        self._on_assignment_change.append(fn)

    def _set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        new: dict[TopicPartition, TopicPartitionState] = {}
        for tp in partitions:
            new[tp] = self._assignment.get(tp) or TopicPartitionState()
        removed = set(self._assignment) - set(new)
        self._assignment = new
        for fn in self._on_assignment_change:
            fn(removed)

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> bool:
        """Manual assignment; returns True when it changed."""
        with self._lock:
            self._set_type(SubscriptionType.USER_ASSIGNED)
            parts = [TopicPartition(tp[0], int(tp[1])) for tp in partitions]
            if set(parts) == set(self._assignment):
                return False
            self.subscription = {tp.topic for tp in parts}
            self._set_assignment(parts)
            return True

    def assign_from_subscribed(self, partitions: Iterable[TopicPartition]) -> None:
        """Assignment chosen by the group; every partition must be of a subscribed topic."""
        with self._lock:
            if not self.has_auto_assigned_partitions:
                raise IllegalStateError("assign_from_subscribed needs a subscription")
            parts = list(partitions)
            for tp in parts:
                if tp.topic not in self.subscription and not self.matches_pattern(tp.topic):
                    raise IllegalStateError(f"assigned partition {tp} is not of a subscribed topic")
            self._set_assignment(parts)

    def assigned_partitions(self) -> set[TopicPartition]:
        with self._lock:
            return set(self._assignment)

    def assigned_list(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._assignment)

    def is_assigned(self, tp: TopicPartition) -> bool:
        return tp in self._assignment

    def state(self, tp: TopicPartition) -> TopicPartitionState:
        try:
            return self._assignment[tp]
        except KeyError:
            raise IllegalStateError(f"no current assignment for partition {tp}") from None

    # ------------------------------------------------------------------ positions

    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int | None = None) -> None:
        with self._lock:
            st = self.state(tp)
            st.position = offset
            st.position_leader_epoch = leader_epoch
            st.reset_strategy = None

    def position(self, tp: TopicPartition) -> int | None:
        with self._lock:
            return self.state(tp).position

    def maybe_seek_unvalidated(
        self, tp: TopicPartition, offset: int, strategy: OffsetResetStrategy
    ) -> None:
        """Apply a reset result unless the user sought elsewhere meanwhile."""
        with self._lock:
            st = self._assignment.get(tp)
            if st is None or st.reset_strategy is not strategy:
                return
            st.position = offset
            st.reset_strategy = None

    def request_reset(
        self, tps: Iterable[TopicPartition], strategy: OffsetResetStrategy | None = None
    ) -> None:
        with self._lock:
            for tp in tps:
                st = self.state(tp)
                st.reset_strategy = strategy or self.default_reset
                st.position = None
                st.next_reset_attempt = 0.0

    def reset_failed(self, tp: TopicPartition, retry_at: float) -> None:
        with self._lock:
            st = self._assignment.get(tp)
            if st is not None:
                st.next_reset_attempt = retry_at

    def partitions_needing_reset(
        self, now: float | None = None
    ) -> dict[TopicPartition, OffsetResetStrategy]:
        now = time.monotonic() if now is None else now
        with self._lock:
            return {
                tp: st.reset_strategy
                for tp, st in self._assignment.items()
                if st.reset_strategy is not None
                and st.reset_strategy is not OffsetResetStrategy.NONE
                and st.next_reset_attempt <= now
            }

    def missing_positions(self) -> list[TopicPartition]:
        """Partitions with neither a position nor a pending reset."""
        with self._lock:
            return [
                tp
                for tp, st in self._assignment.items()
                if st.position is None and st.reset_strategy is None
            ]

    def reset_missing_positions(self) -> None:
        """Give every partition still without a position the default reset strategy."""
        with self._lock:
            missing = self.missing_positions()
            if not missing:
                return
            if self.default_reset is OffsetResetStrategy.NONE:
                raise NoOffsetForPartitionError(
                    "no committed offset and auto_offset_reset='none' for "
                    f"{sorted(map(str, missing))}"
                )
            self.request_reset(missing)

    def has_all_fetch_positions(self) -> bool:
        with self._lock:
            return all(st.position is not None for st in self._assignment.values())

    def all_consumed(self) -> dict[TopicPartition, int]:
        """Positions of partitions that have one (what auto-commit commits)."""
        with self._lock:
            return {
                tp: st.position for tp, st in self._assignment.items() if st.position is not None
            }

    # ------------------------------------------------------------------ fetching

    def fetchable_partitions(
        self, exclude: Callable[[TopicPartition], bool] | None = None
    ) -> list[TopicPartition]:
        with self._lock:
            return [
                tp
                for tp, st in self._assignment.items()
                if st.is_fetchable and (exclude is None or not exclude(tp))
            ]

    def move_to_end(self, tp: TopicPartition) -> None:
        """Put ``tp`` last in the fetch order (Java's movePartitionToEnd): a broker without
        a fetch session reads a full fetch's partitions in the order listed, so one that
        just returned records (or an error) goes after the others, which get their turn
        when a response's max_bytes is full."""
        with self._lock:
            st = self._assignment.pop(tp, None)
            if st is not None:
                self._assignment[tp] = st

    def is_fetchable(self, tp: TopicPartition) -> bool:
        st = self._assignment.get(tp)
        return st is not None and st.is_fetchable

    def update_high_watermark(
        self, tp: TopicPartition, hw: int, log_start: int | None = None, lso: int | None = None
    ) -> None:
        with self._lock:
            st = self._assignment.get(tp)
            if st is None:
                return
            if hw >= 0:
                st.high_watermark = hw
            if log_start is not None and log_start >= 0:
                st.log_start_offset = log_start
            if lso is not None and lso >= 0:
                st.last_stable_offset = lso

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                self.state(tp).paused = True

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                self.state(tp).paused = False

    def paused_partitions(self) -> set[TopicPartition]:
        with self._lock:
            return {tp for tp, st in self._assignment.items() if st.paused}

    def mark_pending_revocation(self, tps: Iterable[TopicPartition]) -> None:
        """Stop fetching (and handing out) these partitions: they are about to be revoked
        and their positions are being committed (Java's markPendingRevocation)."""
        with self._lock:
            for tp in tps:
                st = self._assignment.get(tp)
                if st is not None:
                    st.pending_revocation = True

    def is_pending_revocation(self, tp: TopicPartition) -> bool:
        st = self._assignment.get(tp)
        return st is not None and st.pending_revocation
