"""The consumer's group membership with ``group_protocol="consumer"`` (KIP-848).

Java's ``ConsumerMembershipManager`` / ``AsyncKafkaConsumer``: no JoinGroup, no
SyncGroup, no leader. The member sends one ConsumerGroupHeartbeat every
``heartbeat_interval_ms`` the coordinator dictates; the coordinator computes the
target assignment itself (``group_remote_assignor``: uniform or range) and each
heartbeat response may carry this member's next assignment. The member converges
to it incrementally, by itself, with no group-wide barrier:

====================  ========================================================
state                 what the member does
====================  ========================================================
``UNSUBSCRIBED``      nothing (no subscription yet, or after ``unsubscribe``)
``JOINING``           heartbeats with epoch 0, owning nothing
``RECONCILING``       a new assignment arrived: the next ``poll`` commits (when
                      auto-committing), revokes what left (``on_partitions_revoked``)
                      and takes what came (``on_partitions_assigned``), in that
                      order, as Java's AsyncKafkaConsumer
``ACKNOWLEDGING``     the next heartbeat, sent at once, tells the coordinator what
                      the member owns now (that is how a revocation is acknowledged)
``STABLE``            owns its assignment at its epoch; heartbeats on the interval
``FENCED``            FENCED_MEMBER_EPOCH or UNKNOWN_MEMBER_ID: the next ``poll`` hands
                      every partition to ``on_partitions_lost`` and joins again
``STALE``             ``max_poll_interval_ms`` passed without a poll: the member left;
                      the next poll loses its partitions and joins again
``LEAVING``           ``close`` / ``unsubscribe``: revoke, then epoch -1 (a static
                      member: -2, it comes back under its instance id)
``FATAL``             an error nothing but a new consumer fixes (raised from ``poll``)
====================  ========================================================

Offsets are committed with the member epoch (OffsetCommit / OffsetFetch v9): a
STALE_MEMBER_EPOCH is retried with the newest epoch. The consumer keeps fetching
what it owns while the coordinator is unreachable or the group rebalances.

Finding the coordinator (``discovery.py``), commits and committed offsets
(``commits.py``), the heartbeat thread and timers, and closing are
``group_member.GroupMember``'s, shared with the classic ``ConsumerCoordinator``: this
class is only the membership. Its heartbeat thread sends ConsumerGroupHeartbeats on the
coordinator's interval, and at once when the member joins or acknowledges an
assignment; it leaves when the poll timer expires.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from odradek.client.cluster import KafkaClient
from odradek.client.commits import rebalancing_error
from odradek.client.config import ConsumerConfig
from odradek.client.errors import (
    COORDINATOR_MOVED,
    CommitFailedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    make_error,
)
from odradek.client.group_member import GroupMember, sorted_partitions
from odradek.client.heartbeat import LOOK_UP_COORDINATOR, Wait
from odradek.client.structs import Generation, TopicPartition
from odradek.client.subscription import SubscriptionState
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

_LEAVE_EPOCH = -1
_LEAVE_STATIC_EPOCH = -2
# Errors after which only a new consumer can go on (Java: fatal in the heartbeat manager).
_FATAL = frozenset(
    {
        ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
        ErrorCode.INVALID_GROUP_ID,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.UNSUPPORTED_VERSION,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.GROUP_MAX_SIZE_REACHED,
        ErrorCode.FENCED_INSTANCE_ID,
        ErrorCode.UNRELEASED_INSTANCE_ID,
        ErrorCode.UNSUPPORTED_ASSIGNOR,
        ErrorCode.INVALID_REGULAR_EXPRESSION,
    }
)
_FENCED = frozenset(
    {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_ID_NOT_FOUND}
)

TopicIdPartition = tuple[uuid.UUID, int]


class ConsumerMemberState(enum.Enum):
    UNSUBSCRIBED = "unsubscribed"
    JOINING = "joining"
    RECONCILING = "reconciling"
    ACKNOWLEDGING = "acknowledging"
    STABLE = "stable"
    FENCED = "fenced"
    STALE = "stale"
    LEAVING = "leaving"
    FATAL = "fatal"


M = ConsumerMemberState


class StaleMemberEpochError(KafkaError):
    """A commit or offset fetch carried an epoch the member has since left: retried."""

    retriable = True


class ConsumerGroupMembership(GroupMember):
    """Group membership through ConsumerGroupHeartbeat (see the module docs)."""

    heartbeat_thread_name = "odradek-cg-heartbeat"

    def __init__(
        self,
        client: KafkaClient,
        subscriptions: SubscriptionState,
        config: ConsumerConfig,
        *,
        wakeup: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(client, subscriptions, config, wakeup=wakeup)
        # KIP-1082: the member names itself, once, for the consumer's lifetime.
        self._member_uuid = str(uuid.uuid4())
        self.mstate = M.UNSUBSCRIBED
        self.epoch = 0
        self.generation = Generation(0, self._member_uuid, None)
        self._owned: frozenset[TopicIdPartition] = frozenset()
        self._names: dict[uuid.UUID, str] = {}
        # The newest assignment the coordinator sent, not yet reconciled: (epoch, partitions).
        self._target: tuple[int, frozenset[TopicIdPartition]] | None = None
        self._send_now = True  # send the next heartbeat without waiting for the interval
        self._full = True  # the next heartbeat carries every field (join, after an error)
        self._sent_subscription: tuple[Any, ...] | None = None
        self._in_flight = False
        self._fatal: BaseException | None = None
        self._retry_at = 0.0

    # ================================================================ small helpers

    def __repr__(self) -> str:
        return (
            f"<ConsumerGroupMembership group={self.group_id} member={self._member_uuid} "
            f"epoch={self.epoch} state={self.mstate.value}>"
        )

    @property
    def member_id(self) -> str:
        return self._member_uuid

    def _set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        self.generation = Generation(epoch, self._member_uuid, None)

    def state_has_not_joined(self) -> bool:
        return self.mstate in (M.UNSUBSCRIBED, M.JOINING, M.FENCED, M.STALE, M.FATAL)

    def rebalance_in_progress(self) -> bool:
        return self.mstate in (M.JOINING, M.RECONCILING, M.ACKNOWLEDGING)

    def generation_if_stable(self) -> Generation | None:
        """Commits go out with the member's epoch whenever it is a member."""
        with self.cond:
            if self.epoch > 0 and self.mstate in (M.RECONCILING, M.ACKNOWLEDGING, M.STABLE):
                return self.generation
            return None

    def request_rejoin(self, reason: str) -> None:
        """Java's enforceRebalance has no use with the consumer protocol: the coordinator
        rebalances when members or topics change."""
        log.info("group %s: rebalances are the coordinator's to start (%s)", self.group_id, reason)

    def awaiting_response(self) -> bool:
        return self._in_flight and self.mstate in (M.JOINING, M.ACKNOWLEDGING)

    def _subscription_now(self) -> tuple[Any, ...]:
        subs = self.subscriptions
        pattern = subs.subscribed_pattern
        if pattern is not None:
            return ("regex", pattern.pattern)
        return ("names", tuple(sorted(subs.subscription)))

    # ================================================================ the heartbeat

    def heartbeat_step(self) -> Wait:
        """Heartbeat thread, lock held: what to do next (``HeartbeatOwner``)."""
        hb = self.heartbeat
        backoff = hb.retry_backoff_s
        if self.mstate in (M.UNSUBSCRIBED, M.FENCED, M.STALE, M.FATAL, M.LEAVING):
            return backoff * 5
        if self.discovery.coordinator_unknown():
            return LOOK_UP_COORDINATOR
        if hb.poll_timeout_expired():
            self.leave_for_poll_timeout()
            return 0.0
        if self.heartbeat_due():
            self.send_heartbeat_request()
            return 0.0
        return min(backoff, max(0.001, hb.time_to_next_heartbeat()))

    def look_up_coordinator(self) -> float:
        super().look_up_coordinator()
        return self.heartbeat.retry_backoff_s if self.discovery.coordinator_unknown() else 0.0

    def heartbeat_thread_failed(self, error: BaseException) -> None:
        self._fail(error)

    def heartbeat_due(self) -> bool:
        """Heartbeat thread, lock held: whether to send one now."""
        if self._in_flight or self.mstate in (M.UNSUBSCRIBED, M.FENCED, M.STALE, M.FATAL):
            return False
        if time.monotonic() < self._retry_at:
            return False
        if self.mstate is M.RECONCILING:
            return self.heartbeat.should_heartbeat()  # keep the session alive meanwhile
        return self._send_now or self.heartbeat.should_heartbeat()

    def send_heartbeat_request(self) -> None:
        """Heartbeat thread, lock held: send one ConsumerGroupHeartbeat."""
        joining = self.mstate is M.JOINING
        if joining:
            self._set_epoch(0)
            self._owned = frozenset()
        full = self._full or joining
        subscription = self._subscription_now()
        changed = subscription != self._sent_subscription
        kind, value = subscription
        by_topic: dict[uuid.UUID, list[int]] = {}
        for topic_id, p in sorted(self._owned, key=lambda tp: (tp[0].bytes, tp[1])):
            by_topic.setdefault(topic_id, []).append(p)
        body = {
            "group_id": self.group_id,
            "member_id": self._member_uuid,
            "member_epoch": self.epoch,
            "instance_id": self.group_instance_id if full else None,
            "rack_id": (self.config.client_rack or None) if full else None,
            "rebalance_timeout": self.rebalance_timeout_ms if full else -1,
            "subscribed_topic_names": list(value)
            if kind == "names" and (full or changed)
            else None,
            "subscribed_topic_regex": value if kind == "regex" and (full or changed) else None,
            "server_assignor": self.config.group_remote_assignor if full else None,
            "topic_partitions": [
                {"topic_id": topic_id, "partitions": ps} for topic_id, ps in by_topic.items()
            ],
        }
        if kind == "regex" and self._api_version_or_none() == 0:
            self._fail(
                make_error(
                    ErrorCode.UNSUPPORTED_VERSION,
                    "a pattern subscription needs ConsumerGroupHeartbeat v1",
                )
            )
            return
        self._send_now = False
        self._in_flight = True
        self.heartbeat.sent_heartbeat()
        sent_epoch = self.epoch
        future = self.discovery.send(ApiKey.CONSUMER_GROUP_HEARTBEAT, body)
        future.add_done_callback(
            lambda f: self._on_consumer_heartbeat(f, sent_epoch, subscription, full)
        )

    def _api_version_or_none(self) -> int | None:
        try:
            return self.discovery.api_version(ApiKey.CONSUMER_GROUP_HEARTBEAT)
        except KafkaError:
            return None

    def _fail(self, error: BaseException) -> None:
        self._fatal = error
        self.mstate = M.FATAL
        self._wakeup()

    def _on_consumer_heartbeat(
        self, future: Future[Any], sent_epoch: int, subscription: tuple[Any, ...], full: bool
    ) -> None:
        with self.cond:
            self._in_flight = False
            try:
                self._handle_heartbeat_response(future, sent_epoch, subscription, full)
            finally:
                self.cond.notify_all()
        self._wakeup()

    def _handle_heartbeat_response(
        self, future: Future[Any], sent_epoch: int, subscription: tuple[Any, ...], full: bool
    ) -> None:
        hb = self.heartbeat
        exc = future.exception()
        if exc is not None:
            log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
            if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
                self.discovery.mark_coordinator_unknown(f"heartbeat failed: {exc}")
            hb.fail_heartbeat()
            self._full = True
            self._retry_at = time.monotonic() + self._backoff_s()
            return
        response = future.result()
        code = int(response.error_code)
        if self.mstate in (M.LEAVING, M.UNSUBSCRIBED):
            return  # a heartbeat from before the member left
        if code == ErrorCode.NONE:
            hb.receive_heartbeat()
            interval = _milliseconds(response.heartbeat_interval)
            if interval > 0:
                hb.heartbeat_interval_s = interval / 1000
                hb.heartbeat_timer.reset(hb.heartbeat_interval_s)
            self._full = False
            self._sent_subscription = subscription
            self._set_epoch(int(response.member_epoch))
            assignment = response.assignment
            if assignment is not None:
                target = frozenset(
                    (t.topic_id, int(p)) for t in assignment.topic_partitions for p in t.partitions
                )
                if target != self._owned:
                    self._target = (self.epoch, target)
                    self.mstate = M.RECONCILING
                    return
                self._target = None  # nothing to do: it owns exactly that already
                if self.mstate is M.RECONCILING:
                    self.mstate = M.STABLE
            if self.mstate in (M.JOINING, M.ACKNOWLEDGING):
                self.mstate = M.STABLE
            return
        hb.fail_heartbeat()
        message = getattr(response, "error_message", None)
        if code in _FENCED:
            log.info(
                "group %s: member %s fenced at epoch %d (%s): its partitions are lost",
                self.group_id,
                self._member_uuid,
                sent_epoch,
                make_error(code, message),
            )
            self.mstate = M.FENCED
            self._target = None
            self._full = True
        elif code in COORDINATOR_MOVED:
            self.discovery.mark_coordinator_unknown(f"heartbeat error {code}")
            self._full = True
        elif code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            self._retry_at = time.monotonic() + self._backoff_s()
        elif code in _FATAL:
            log.error("group %s: fatal heartbeat error %s", self.group_id, code)
            self._fail(make_error(code, message or f"group {self.group_id!r}"))
        else:
            log.warning("group %s: heartbeat error %s: %s", self.group_id, code, message)
            self._full = True
            self._retry_at = time.monotonic() + self._backoff_s()

    # ================================================================ poll

    def poll(self, timeout_s: float) -> bool:
        """Reconcile what the coordinator sent, run the listener, auto-commit; never waits
        for the group: True unless the member is still joining."""
        if self._closed:
            raise IllegalStateError("the coordinator is closed")
        self.commits.invoke_completed_callbacks()
        if self._fatal is not None:
            raise self._fatal
        if self.subscriptions.has_auto_assigned_partitions:
            with self.cond:
                self.heartbeat.poll()
                if self.mstate in (M.UNSUBSCRIBED, M.LEAVING):
                    # (after a leave still in flight: it goes first on the connection)
                    self.mstate = M.JOINING
                    self._send_now = self._full = True
                if self._subscription_now() != self._sent_subscription and not self._full:
                    self._send_now = True  # tell the coordinator at once
                self.cond.notify_all()
            self._start_heartbeat_thread_if_needed()
            self._maybe_lose_partitions()
            self._maybe_reconcile()
        self.commits.maybe_auto_commit_async()
        return self.mstate not in (M.JOINING, M.FENCED, M.STALE)

    def time_to_next_poll(self) -> float:
        wait = self.heartbeat.time_to_next_heartbeat()
        if self.mstate in (M.RECONCILING, M.FENCED, M.STALE):
            return 0.0
        if self.commits.auto_commit_enabled:
            wait = min(wait, self.commits.time_to_next_auto_commit())
        return wait

    def _maybe_lose_partitions(self) -> None:
        """Fenced, or left after max_poll_interval_ms: the partitions are lost; join again."""
        with self.cond:
            if self.mstate not in (M.FENCED, M.STALE):
                return
        owned = self.subscriptions.assigned_partitions()
        error = self.invoke_listener("on_partitions_lost", owned) if owned else None
        self.subscriptions.assign_from_subscribed([])
        with self.cond:
            self._owned = frozenset()
            self._target = None
            self._set_epoch(0)
            self.mstate = M.JOINING
            self._send_now = self._full = True
            self.cond.notify_all()
        if error is not None:
            raise KafkaError(f"user rebalance callback raised: {error!r}") from error

    def _resolve(self, target: frozenset[TopicIdPartition]) -> dict[TopicIdPartition, str] | None:
        """Topic ids to names through the metadata; None while some are not known yet."""
        ids = {t for t, _ in target}
        if not ids <= self._names.keys():
            self._learn_names()
            if not ids <= self._names.keys():
                with contextlib.suppress(KafkaError):
                    self.client.refresh(
                        all_topics=True, timeout_s=self.config.request_timeout_ms / 1000
                    )
                self._learn_names()
        if not ids <= self._names.keys():
            return None
        return {tp: self._names[tp[0]] for tp in target}

    def _learn_names(self) -> None:
        for name, meta in self.client.cluster.topics.items():
            if meta.topic_id is not None:
                self._names[meta.topic_id] = name

    def _maybe_reconcile(self) -> None:
        """Java's reconciliation, on the application thread: commit, revoke, assign, ack."""
        with self.cond:
            if self.mstate is not M.RECONCILING or self._target is None:
                return
            epoch, target = self._target
        named = self._resolve(target)
        if named is None:
            self.client.request_update()
            return  # the next poll tries again, once the metadata knows the topics
        subs = self.subscriptions
        wanted = {TopicPartition(name, p) for (_, p), name in named.items()}
        if subs.subscribed_pattern is not None:
            subs.subscribe_from_pattern({tp.topic for tp in wanted})
        else:
            # A topic no longer subscribed: the coordinator has not caught up yet.
            wanted = {tp for tp in wanted if tp.topic in subs.subscription}
        self.client.add_topics({tp.topic for tp in wanted})
        owned = subs.assigned_partitions()
        revoked, added = owned - wanted, wanted - owned
        first: BaseException | None = None
        if revoked:
            if self.commits.auto_commit_enabled:
                self.commits.auto_commit_sync(self.rebalance_timeout_ms / 1000)
            first = self.invoke_listener("on_partitions_revoked", revoked)
            subs.assign_from_subscribed(sorted_partitions(owned - revoked))
        subs.assign_from_subscribed(sorted_partitions(wanted))
        self.commits.new_assignment()
        second = self.invoke_listener("on_partitions_assigned", added)
        ids = frozenset(tp for tp, name in named.items() if TopicPartition(name, tp[1]) in wanted)
        with self.cond:
            self._owned = ids
            if self._target is not None and self._target[1] == target:
                self._target = None
            if self.mstate is M.RECONCILING and self._target is None:
                self.mstate = M.ACKNOWLEDGING
                self._send_now = True
            self.cond.notify_all()
        log.info(
            "group %s: reconciled to epoch %d: assigned %s, revoked %s",
            self.group_id,
            epoch,
            ", ".join(map(str, sorted_partitions(added))) or "(none)",
            ", ".join(map(str, sorted_partitions(revoked))) or "(none)",
        )
        first = first or second
        if first is not None:
            raise KafkaError(f"user rebalance callback raised: {first!r}") from first

    # ================================================================ leaving

    def on_leave_prepare(self) -> None:
        """Before leaving: revoke what is owned (lost, if the member is no longer in)."""
        subs = self.subscriptions
        owned = subs.assigned_partitions()
        if not subs.has_auto_assigned_partitions or not owned:
            return
        with self.cond:
            member = self.epoch > 0 and self.mstate not in (M.FENCED, M.STALE, M.FATAL)
        exc = self.invoke_listener(
            "on_partitions_revoked" if member else "on_partitions_lost", owned
        )
        subs.assign_from_subscribed([])
        with self.cond:
            self._owned = frozenset()
        if exc is not None:
            raise KafkaError(f"user rebalance callback raised: {exc!r}") from exc

    def maybe_leave_group(self, reason: str) -> Future[Any] | None:
        """Heartbeat with epoch -1 (a static member: -2, it will be back)."""
        with self.cond:
            was = self.mstate
            self.mstate = M.UNSUBSCRIBED
            self._target = None
            self._owned = frozenset()
            self._send_now = self._full = True
            self._sent_subscription = None
            epoch = self.epoch
            self._set_epoch(0)
            if (
                epoch <= 0
                or was in (M.FENCED, M.STALE, M.FATAL)
                or self.discovery.coordinator_unknown()
            ):
                return None
            leave = _LEAVE_EPOCH if self.group_instance_id is None else _LEAVE_STATIC_EPOCH
            log.info(
                "group %s: member %s leaving (epoch %d) due to %s",
                self.group_id,
                self._member_uuid,
                leave,
                reason,
            )
            self.mstate = M.LEAVING
            future = self.discovery.send(
                ApiKey.CONSUMER_GROUP_HEARTBEAT,
                {
                    "group_id": self.group_id,
                    "member_id": self._member_uuid,
                    "member_epoch": leave,
                    "instance_id": self.group_instance_id,
                    "rack_id": None,
                    "rebalance_timeout": -1,
                    "subscribed_topic_names": None,
                    "subscribed_topic_regex": None,
                    "server_assignor": None,
                    "topic_partitions": None,
                },
            )

        def left(_f: Future[Any]) -> None:
            with self.cond:
                if self.mstate is M.LEAVING:
                    self.mstate = M.UNSUBSCRIBED
                self.cond.notify_all()

        future.add_done_callback(left)
        return future

    def leave_for_poll_timeout(self) -> None:
        """Heartbeat thread, lock held: max_poll_interval_ms passed without a poll."""
        log.warning(
            "consumer poll timeout has expired: the time between polls was longer than "
            "max_poll_interval_ms (%s ms); member %s leaves group %s",
            self.config.max_poll_interval_ms,
            self._member_uuid,
            self.group_id,
        )
        future = self.maybe_leave_group("consumer poll timeout has expired")
        del future  # fire and forget: the next poll joins again
        self.mstate = M.STALE

    def on_unsubscribe(self) -> None:
        try:
            self.on_leave_prepare()
        finally:
            self.maybe_leave_group("the consumer unsubscribed from all topics")

    # ================================================================ what commits ask

    def commit_refused(self, code: int, sent: Generation) -> BaseException | None:
        """Kafka 4.x: STALE_MEMBER_EPOCH is retried with the newest epoch; UNKNOWN_MEMBER_ID
        is a failed commit (the heartbeat finds out the member was removed)."""
        if code == ErrorCode.STALE_MEMBER_EPOCH:
            return StaleMemberEpochError(
                f"commit with member epoch {sent.generation_id}: the member has "
                "moved on (retried with its new epoch)"
            )
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            return CommitFailedError(
                "Offset commit cannot be completed: the member is no longer in "
                "the group (UNKNOWN_MEMBER_ID)."
            )
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return rebalancing_error()
        if code == ErrorCode.FENCED_INSTANCE_ID:
            with self.cond:
                if self.generation == sent:
                    return make_error(code, f"group_instance_id {self.group_instance_id!r}")
            return CommitFailedError()
        if code == ErrorCode.ILLEGAL_GENERATION:
            return CommitFailedError()  # a classic generation: not this member's
        return None

    def offset_fetch_member(self) -> Generation | None:
        return self.generation_if_stable()

    def offset_fetch_refused(self, code: int) -> KafkaError | None:
        if code == ErrorCode.STALE_MEMBER_EPOCH:
            return StaleMemberEpochError("offset fetch with an old member epoch: retried")
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            with self.cond:
                if self.mstate not in (M.LEAVING, M.UNSUBSCRIBED):
                    self.mstate = M.FENCED
            return StaleMemberEpochError("offset fetch by a member no longer in the group")
        return None


def _milliseconds(value: Any) -> int:
    """kio reads int32 durations as timedelta."""
    if hasattr(value, "total_seconds"):
        return round(value.total_seconds() * 1000)
    return int(value or 0)
