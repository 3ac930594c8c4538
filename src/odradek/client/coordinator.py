"""The consumer's group client (Java's ``ConsumerCoordinator`` and ``AbstractCoordinator``).

What it does, in the order of seed 004 (section 2.2), seed 000 (section 2) and seed 002:

* **Finding the coordinator.** FindCoordinator (key type GROUP) to the least loaded
  broker; the answer gets its *own* connection (Java uses the node id
  ``Integer.MAX_VALUE - id``), so a JoinGroup parked for a whole rebalance never
  delays fetches to the same broker. COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR /
  COORDINATOR_LOAD_IN_PROGRESS and connection failures mark the coordinator unknown
  and are retried after ``retry_backoff_ms``.
* **The join/sync loop** (``ensure_active_group``) runs on the application thread inside
  ``Consumer.poll`` and never waits for the rebalance, as in Java: each poll starts or
  collects one step (JoinGroup, SyncGroup, the commit before them) and returns, so the
  consumer keeps fetching what it owns meanwhile; the responses wake the consumer's wait
  for fetches. Before joining: ``on_join_prepare`` (when auto-commit is on, commit first:
  sent asynchronously and retried on retriable errors until the rebalance timeout, EAGER
  partitions marked pending revocation meanwhile; then EAGER revokes everything,
  COOPERATIVE only partitions the new subscription excludes, and keeps fetching the rest
  through the whole rebalance; all owned partitions are *lost* when the generation was
  reset).
  JoinGroup errors as in Java: MEMBER_ID_REQUIRED (KIP-394: keep the id the broker handed
  out and join again at once), UNKNOWN_MEMBER_ID (forget the member id, rejoin),
  REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION (rejoin at once), coordinator errors (look up
  again, back off), FENCED_INSTANCE_ID, GROUP_MAX_SIZE_REACHED, INCONSISTENT_GROUP_PROTOCOL,
  INVALID_SESSION_TIMEOUT, authorization (fatal: raised from ``poll``). The leader decodes
  every member's subscription, refreshes metadata for the whole group subscription, runs
  the chosen assignor and sends the assignments in its SyncGroup; followers send an empty
  one. Response handlers compare with the generation the request was *sent* with, so an
  error for an older generation does not reset a newer one. ``on_join_complete`` decodes
  the assignment, and with COOPERATIVE revokes what was taken away (then requests another
  rebalance), takes topics the leader assigned from this member's pattern into the
  subscription (Java's maybeUpdateJoinedSubscription: no extra rebalance when its metadata
  catches up), hands the new assignment to the assignor (``on_assignment``) and to
  ``SubscriptionState``, and calls ``on_partitions_assigned`` with what was added (every
  partition under EAGER). Listener callbacks always run on the application thread; when
  one raises, the error reaches ``poll`` and the next ``poll`` finishes the join (Java
  runs onJoinComplete again: the callbacks then get what is still new, usually nothing),
  so the next rebalance still commits and revokes first.
* **Heartbeats** run on ``heartbeat.HeartbeatThread`` (session, heartbeat and poll
  timers). Heartbeat errors are mapped like Java's ``HeartbeatResponseHandler``:
  REBALANCE_IN_PROGRESS requests a rejoin (the member stays valid), ILLEGAL_GENERATION /
  UNKNOWN_MEMBER_ID reset the generation (so the next ``poll`` reports the partitions as
  *lost*), FENCED_INSTANCE_ID is fatal and re-raised by the next ``poll``, coordinator
  errors mark it unknown. When ``max_poll_interval_ms`` passes without a ``poll`` the
  thread leaves the group; the next ``poll`` reports the partitions lost and rejoins.
* **Offsets.** Committed offsets of newly assigned partitions come from OffsetFetch
  (``require_stable`` on v7+), cached across polls while the request is in flight.
  ``commit_sync`` retries retriable errors until its timeout and raises
  ``CommitFailedError`` when the member is no longer part of the group (ILLEGAL_GENERATION,
  UNKNOWN_MEMBER_ID, or FENCED_INSTANCE_ID for a generation that has passed), and
  ``RebalanceInProgressCommitError`` (its own type: retriable, but only after a ``poll``,
  so it is raised at once) while the group rebalances: as in Java, a member commits only
  when it is stable, and a cooperative member that consumed during a rebalance commits
  after it (or in ``on_partitions_revoked``).
  ``commit_async`` callbacks run on the application thread in the next ``poll`` /
  commit call. Auto-commit runs every ``auto_commit_interval_ms`` inside ``poll``, before
  every rebalance and on close.
* **Static membership** (``group_instance_id``, KIP-345): JoinGroup v5+, no
  MEMBER_ID_REQUIRED round trip, no LeaveGroup on close or when the poll timer expires.
* **Metadata.** A pattern subscription is matched against every topic the cluster has
  (metadata for all topics) and a change of the matched set triggers a rejoin; the leader
  remembers the partition count of every topic the group subscribes to and rejoins when
  it changes (a partition increase or a topic deletion).

Thread safety: ``cond`` (a condition over a re-entrant lock) guards the membership state;
the heartbeat thread and response callbacks on connection reader threads take it, the
application thread takes it around state changes but never while waiting for the
network or running user callbacks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, NamedTuple

from odradek.client.assignors import (
    Assignor,
    RebalanceProtocol,
    cooperative_violations,
    get_assignor,
    select_rebalance_protocol,
)
from odradek.client.cluster import KafkaClient
from odradek.client.config import ConsumerConfig
from odradek.client.connection import BrokerConnection, ConnectionState
from odradek.client.errors import (
    CommitFailedError,
    IllegalStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    RebalanceInProgressCommitError,
    RetriableCommitFailedError,
    UnsupportedVersionError,
    error_for_code,
    make_error,
    retriable_without_poll,
)
from odradek.client.heartbeat import Heartbeat, HeartbeatThread, Timer
from odradek.client.structs import TopicPartition
from odradek.client.subscription import SubscriptionState
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
)

log = logging.getLogger(__name__)

# Error codes (Kafka's Errors enum).
_NONE = 0
_UNKNOWN_TOPIC_OR_PARTITION = 3
_OFFSET_METADATA_TOO_LARGE = 12
_COORDINATOR_LOAD_IN_PROGRESS = 14
_COORDINATOR_NOT_AVAILABLE = 15
_NOT_COORDINATOR = 16
_REQUEST_TIMED_OUT = 7
_ILLEGAL_GENERATION = 22
_INCONSISTENT_GROUP_PROTOCOL = 23
_INVALID_GROUP_ID = 24
_UNKNOWN_MEMBER_ID = 25
_INVALID_SESSION_TIMEOUT = 26
_REBALANCE_IN_PROGRESS = 27
_INVALID_COMMIT_OFFSET_SIZE = 28
_TOPIC_AUTHORIZATION_FAILED = 29
_GROUP_AUTHORIZATION_FAILED = 30
_MEMBER_ID_REQUIRED = 79
_GROUP_MAX_SIZE_REACHED = 81
_FENCED_INSTANCE_ID = 82
_UNSTABLE_OFFSET_COMMIT = 88
_COORDINATOR_ERRORS = (_COORDINATOR_NOT_AVAILABLE, _NOT_COORDINATOR)

_JOIN_GROUP_TIMEOUT_LAPSE_MS = 5_000  # Java's AbstractCoordinator.JOIN_GROUP_TIMEOUT_LAPSE
_COORDINATOR_NODE_BASE = 2**31 - 1  # Java: the coordinator connection id is MAX_VALUE - id

FencedInstanceIdError = error_for_code(_FENCED_INSTANCE_ID)
GroupMaxSizeReachedError = error_for_code(_GROUP_MAX_SIZE_REACHED)


class OffsetAndMetadata(NamedTuple):
    """A committed offset (Java's ``OffsetAndMetadata``)."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    PREPARING_REBALANCE = "preparing_rebalance"
    COMPLETING_REBALANCE = "completing_rebalance"
    STABLE = "stable"


@dataclass(frozen=True, slots=True)
class Generation:
    generation_id: int
    member_id: str
    protocol_name: str | None

    @property
    def has_member_id(self) -> bool:
        return bool(self.member_id)


NO_GENERATION = Generation(-1, "", None)

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


def _code(value: Any) -> int:
    return int(getattr(value, "value", value))


def _tp(value: Any) -> TopicPartition:
    if isinstance(value, TopicPartition):
        return value
    topic, partition = value
    return TopicPartition(str(topic), int(partition))


def _sort_key(tp: TopicPartition) -> tuple[str, int]:
    return (tp.topic, tp.partition)


def _sorted(tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    return sorted(tps, key=_sort_key)


class ConsumerCoordinator:
    """Group membership, rebalances and offsets for one ``Consumer`` (see module docs)."""

    def __init__(
        self,
        client: KafkaClient,
        subscriptions: SubscriptionState,
        config: ConsumerConfig,
        *,
        wakeup: Callable[[], None] | None = None,
    ) -> None:
        if not config.group_id:
            raise IllegalStateError("a group coordinator needs group_id")
        self.client = client
        self.subscriptions = subscriptions
        self.config = config
        self.group_id: str = config.group_id
        self.group_instance_id: str | None = config.group_instance_id or None
        strategies = config.partition_assignment_strategy
        if isinstance(strategies, (str, Assignor)) or not isinstance(strategies, Iterable):
            strategies = [strategies]
        self.assignors: list[Assignor] = [get_assignor(s) for s in strategies]
        names = [a.name for a in self.assignors]
        if len(set(names)) != len(names):
            raise IllegalStateError(f"partition_assignment_strategy lists a name twice: {names}")
        self.protocol: RebalanceProtocol | None = (
            select_rebalance_protocol(self.assignors) if self.assignors else None
        )
        self.rebalance_timeout_ms = config.max_poll_interval_ms
        self.cond = threading.Condition(threading.RLock())
        self.heartbeat = Heartbeat(
            session_timeout_ms=config.session_timeout_ms,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            max_poll_interval_ms=config.max_poll_interval_ms,
            retry_backoff_ms=config.retry_backoff_ms,
        )
        self._heartbeat_thread: HeartbeatThread | None = None
        # Ends the consumer's wait for fetches when a rebalance step can go on.
        self._wakeup: Callable[[], None] = wakeup or (lambda: None)

        # Membership state (guarded by cond).
        self.generation: Generation = NO_GENERATION
        self.state = MemberState.UNJOINED
        self.rejoin_needed = True
        self.rejoin_reason = "initial join"
        self.needs_join_prepare = True
        self.is_leader = False
        self.joined_subscription: frozenset[str] | None = None
        self.assignment_snapshot: dict[str, int] | None = None
        # The JoinGroup or SyncGroup in flight, with the generation it was sent with.
        self._pending: tuple[str, Future[Any], Generation] | None = None
        # A successful SyncGroup whose assignment is not applied yet (Java's completed
        # joinFuture): kept when a listener raises, so the next poll finishes the join.
        self._join_result: tuple[Generation, bytes] | None = None
        self._retry_join_at = 0.0  # monotonic: back off before the next join step
        # Commit before the rebalance (Java's onJoinPrepare): retried until this deadline.
        self._join_prepare_deadline: float | None = None
        self._join_prepare_commit: tuple[Future[Any], Generation] | None = None
        self._pattern_matched: tuple[Any, float] | None = None  # (pattern, metadata time)
        self._closed = False

        # The coordinator and its connection (guarded by cond).
        self._coordinator_id: int | None = None
        self._conn: BrokerConnection | None = None
        self._lookup_lock = threading.Lock()
        self._last_lookup_error: BaseException | None = None

        # Offsets.
        self.auto_commit_enabled = bool(config.enable_auto_commit)
        self.auto_commit_interval_s = config.auto_commit_interval_ms / 1000
        self._next_auto_commit = Timer(time.monotonic, self.auto_commit_interval_s)
        self._completed_commits: deque[
            tuple[CommitCallback | None, dict[TopicPartition, OffsetAndMetadata], Any]
        ] = deque()
        self._pending_async_commits = 0
        self._pending_offset_fetch: tuple[frozenset[TopicPartition], Generation, Future[Any]] | (
            None
        ) = None

        # Counters for tests and metrics.
        self.rebalances = 0
        self.join_attempts = 0

    # ================================================================ small helpers

    def __repr__(self) -> str:
        return (
            f"<ConsumerCoordinator group={self.group_id} member={self.generation.member_id!r} "
            f"generation={self.generation.generation_id} state={self.state.value}>"
        )

    @property
    def member_id(self) -> str:
        return self.generation.member_id

    def state_has_not_joined(self) -> bool:
        return self.state in (MemberState.UNJOINED, MemberState.PREPARING_REBALANCE)

    def rebalance_in_progress(self) -> bool:
        return self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)

    def generation_if_stable(self) -> Generation | None:
        with self.cond:
            return self.generation if self.state is MemberState.STABLE else None

    def _is_dynamic(self) -> bool:
        return self.group_instance_id is None

    def _backoff_s(self) -> float:
        return self.config.retry_backoff_ms / 1000

    def request_rejoin(self, reason: str) -> None:
        with self.cond:
            if not self.rejoin_needed:
                log.info("group %s: request joining the group due to: %s", self.group_id, reason)
            self.rejoin_needed = True
            self.rejoin_reason = reason
        self._wakeup()

    def awaiting_response(self) -> bool:
        """A rebalance step waits for the coordinator (its answer calls ``wakeup``)."""
        return self._pending is not None or self._join_prepare_commit is not None

    def _reset_state_and_generation(self, reason: str, reset_member_id: bool) -> None:
        with self.cond:
            log.info(
                "group %s: resetting generation%s due to: %s",
                self.group_id,
                " and member id" if reset_member_id else "",
                reason,
            )
            self.state = MemberState.UNJOINED
            if reset_member_id:
                self.generation = NO_GENERATION
            else:
                self.generation = Generation(-1, self.generation.member_id, None)

    def _reset_state_and_rejoin(self, reason: str, reset_member_id: bool) -> None:
        with self.cond:
            self._reset_state_and_generation(reason, reset_member_id)
            self.request_rejoin(reason)
            self.needs_join_prepare = True

    # ================================================================ coordinator lookup

    def coordinator_unknown(self) -> bool:
        with self.cond:
            conn = self._conn
            if conn is None:
                return True
            if conn.state is not ConnectionState.READY:
                self.mark_coordinator_unknown("coordinator connection lost")
                return True
            return False

    def mark_coordinator_unknown(self, reason: str) -> None:
        with self.cond:
            conn, self._conn = self._conn, None
            self._coordinator_id = None
        if conn is not None:
            log.info(
                "group %s: coordinator %s:%s is unavailable or invalid due to %s; "
                "will attempt rediscovery",
                self.group_id,
                conn.host,
                conn.port,
                reason,
            )
            # Close without joining the reader thread (we may be on it, or hold the lock
            # a callback on it needs); in-flight requests fail with a connection error.
            conn.state = ConnectionState.CLOSED
            conn.disconnect(f"coordinator marked unknown: {reason}")

    def _find_coordinator(self, timeout_s: float) -> None:
        """One FindCoordinator round trip; installs the coordinator or raises."""
        self.client.bootstrap(timeout_s=timeout_s)
        node = self.client.least_loaded_node()
        if node is None:
            raise NoBrokersAvailableError("no broker to send FindCoordinator to")
        gid = self.group_id
        response = self.client.request(
            node,
            ApiKey.FIND_COORDINATOR,
            {"key": gid, "key_type": 0, "coordinator_keys": [gid]},
            timeout_ms=max(1, int(timeout_s * 1000)),
        )
        if hasattr(response, "coordinators"):
            entry = next((c for c in response.coordinators if c.key == gid), None)
            if entry is None:
                raise make_error(_COORDINATOR_NOT_AVAILABLE, "FindCoordinator: group missing")
        else:
            entry = response
        code = _code(entry.error_code)
        if code != _NONE:
            raise make_error(code, f"FindCoordinator for group {gid!r}")
        node_id, host, port = int(entry.node_id), str(entry.host), int(entry.port)
        conn = BrokerConnection(_COORDINATOR_NODE_BASE - node_id, host, port, self.config)
        try:
            conn.ensure_ready(timeout_s)
        except KafkaError:
            conn.close()
            raise
        with self.cond:
            old, self._conn = self._conn, conn
            self._coordinator_id = node_id
            self.heartbeat.reset_session_timeout()
        if old is not None:
            old.state = ConnectionState.CLOSED
            old.disconnect("replaced by a new coordinator")
        log.info("group %s: discovered coordinator %s:%s (id %s)", gid, host, port, node_id)

    def lookup_coordinator_quietly(self) -> None:
        """Heartbeat thread: try one lookup, keep retriable errors for later."""
        if not self._lookup_lock.acquire(blocking=False):
            return
        try:
            if self._closed or not self.coordinator_unknown():
                return
            self._find_coordinator(self.config.request_timeout_ms / 1000)
        except KafkaError as exc:
            self._last_lookup_error = exc
            log.debug("group %s: coordinator lookup failed: %s", self.group_id, exc)
        finally:
            self._lookup_lock.release()

    def ensure_coordinator_ready(self, deadline: float) -> bool:
        """Block until the coordinator is known and connected, or ``deadline`` passes."""
        while self.coordinator_unknown():
            remaining = deadline - time.monotonic()
            with self._lookup_lock:
                if not self.coordinator_unknown():
                    return True
                try:
                    self._find_coordinator(
                        max(0.05, min(self.config.request_timeout_ms / 1000, remaining))
                    )
                    return True
                except KafkaError as exc:
                    self._last_lookup_error = exc
                    if not exc.retriable and not isinstance(exc, NoBrokersAvailableError):
                        raise
                    log.debug("group %s: coordinator lookup failed: %s", self.group_id, exc)
                    if _code(getattr(exc, "code", -1)) == _COORDINATOR_NOT_AVAILABLE:
                        self.client.request_update()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self._backoff_s(), remaining))
        return True

    def _send(self, api_key: int, body: Any, *, timeout_ms: int | None = None) -> Future[Any]:
        with self.cond:
            conn = self._conn
        if conn is None:
            future: Future[Any] = Future()
            future.set_exception(make_error(_COORDINATOR_NOT_AVAILABLE, "coordinator unknown"))
            return future
        return conn.send(api_key, body, timeout_ms=timeout_ms)

    def _api_version(self, api_key: int) -> int:
        with self.cond:
            conn = self._conn
        if conn is None:
            raise make_error(_COORDINATOR_NOT_AVAILABLE, "coordinator unknown")
        return conn.api_version(api_key)

    # ================================================================ heartbeat thread

    def _start_heartbeat_thread_if_needed(self) -> None:
        with self.cond:
            if self._heartbeat_thread is None and not self._closed:
                self._heartbeat_thread = HeartbeatThread(self)
                self._heartbeat_thread.start()

    def _poll_heartbeat(self) -> None:
        with self.cond:
            thread = self._heartbeat_thread
            if thread is not None:
                if thread.failed is not None:
                    # Raise once; the next ensure_active_group starts a new thread.
                    cause = thread.failed
                    self._heartbeat_thread = None
                    thread.close()
                    raise cause
                if self.heartbeat.should_heartbeat():
                    self.cond.notify_all()
            self.heartbeat.poll()

    def send_heartbeat_request(self) -> None:
        """Heartbeat thread, lock held: send one Heartbeat, handle the reply on arrival."""
        generation = self.generation
        instance = self.group_instance_id
        try:
            version = self._api_version(ApiKey.HEARTBEAT)
        except KafkaError as exc:
            self.heartbeat.fail_heartbeat()
            self.mark_coordinator_unknown(str(exc))
            return
        if instance is not None and version < 3:
            self._fail_heartbeat_thread(
                UnsupportedVersionError("group_instance_id needs Heartbeat v3 (broker too old)")
            )
            return
        future = self._send(
            ApiKey.HEARTBEAT,
            {
                "group_id": self.group_id,
                "generation_id": generation.generation_id,
                "member_id": generation.member_id,
                "group_instance_id": instance,
            },
        )
        future.add_done_callback(lambda f: self._on_heartbeat_response(f, generation))

    def _fail_heartbeat_thread(self, exc: BaseException) -> None:
        with self.cond:
            thread = self._heartbeat_thread
            if thread is not None:
                thread.failed = exc
                thread.disable()

    def _on_heartbeat_response(self, future: Future[Any], sent: Generation) -> None:
        with self.cond:
            hb = self.heartbeat
            try:
                exc = future.exception()
                if exc is not None:
                    log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
                    if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
                        self.mark_coordinator_unknown(f"heartbeat failed: {exc}")
                    hb.fail_heartbeat()
                    return
                code = _code(future.result().error_code)
                if code == _NONE:
                    hb.receive_heartbeat()
                elif code in _COORDINATOR_ERRORS:
                    self.mark_coordinator_unknown(f"heartbeat error {code}")
                    hb.fail_heartbeat()
                elif code == _REBALANCE_IN_PROGRESS:
                    # Keep heartbeating while the group rebalances: the member stays valid.
                    if self.state is MemberState.STABLE:
                        self.request_rejoin("group is already rebalancing")
                    hb.receive_heartbeat()
                elif code in (_ILLEGAL_GENERATION, _UNKNOWN_MEMBER_ID, _FENCED_INSTANCE_ID):
                    if self.generation == sent:
                        self._reset_state_and_rejoin(
                            f"encountered {make_error(code)} from HEARTBEAT response",
                            reset_member_id=code != _ILLEGAL_GENERATION,
                        )
                        if code == _FENCED_INSTANCE_ID:
                            log.error(
                                "group %s: fenced group_instance_id %s in heartbeat",
                                self.group_id,
                                self.group_instance_id,
                            )
                            self._fail_heartbeat_thread(
                                make_error(code, f"group_instance_id {self.group_instance_id!r}")
                            )
                        hb.fail_heartbeat()
                    else:
                        hb.receive_heartbeat()  # stale generation: ignore
                elif code == _GROUP_AUTHORIZATION_FAILED:
                    self._fail_heartbeat_thread(make_error(code, self.group_id))
                else:
                    log.warning("group %s: unexpected heartbeat error %s", self.group_id, code)
                    hb.fail_heartbeat()
            finally:
                self.cond.notify_all()

    # ================================================================ leave

    def maybe_leave_group(self, reason: str) -> Future[Any] | None:
        """Send LeaveGroup (dynamic members only) and reset the generation. Lock-safe."""
        future: Future[Any] | None = None
        with self.cond:
            if (
                self._is_dynamic()
                and not self.coordinator_unknown()
                and self.state is not MemberState.UNJOINED
                and self.generation.has_member_id
            ):
                member = self.generation.member_id
                log.info(
                    "group %s: member %s sending LeaveGroup due to %s",
                    self.group_id,
                    member,
                    reason,
                )
                future = self._send(
                    ApiKey.LEAVE_GROUP,
                    {
                        "group_id": self.group_id,
                        "member_id": member,
                        "members": [
                            {
                                "member_id": member,
                                "group_instance_id": None,
                                "reason": reason[:255],
                            }
                        ],
                    },
                )
            self._pending = None
            self._join_result = None
            self._join_prepare_commit = None
            self._join_prepare_deadline = None
            self._reset_state_and_rejoin(f"consumer pro-actively leaving the group: {reason}", True)
        return future

    # ================================================================ join / sync

    def _metadata_snapshot(self, topics: Iterable[str]) -> dict[str, int]:
        cluster = self.client.cluster
        out: dict[str, int] = {}
        for t in topics:
            parts = cluster.partitions_for(t)
            out[t] = len(parts) if parts else 0
        return out

    def rejoin_needed_or_pending(self) -> bool:
        if not self.subscriptions.has_auto_assigned_partitions:
            return False
        with self.cond:
            snapshot = self.assignment_snapshot
            if snapshot is not None and self._metadata_snapshot(snapshot) != snapshot:
                now = self._metadata_snapshot(snapshot)
                self.request_rejoin(
                    f"cached metadata has changed from {snapshot} at the beginning of the "
                    f"rebalance to {now}"
                )
                self.assignment_snapshot = None
                return True
            joined = self.joined_subscription
            if joined is not None and joined != frozenset(self.subscriptions.subscription):
                self.request_rejoin(
                    f"subscription has changed from {sorted(joined)} to "
                    f"{sorted(self.subscriptions.subscription)}"
                )
                self.joined_subscription = None
                return True
            return self.rejoin_needed or self._pending is not None or self._join_result is not None

    def _subscription_metadata(self) -> list[dict[str, Any]]:
        """One protocol per assignor, each carrying this member's Subscription."""
        subs = self.subscriptions
        topics = sorted(subs.subscription)
        self.joined_subscription = frozenset(topics)
        owned = _sorted(subs.assigned_partitions())
        rack = self.config.client_rack or None
        out = []
        for assignor in self.assignors:
            sub = Subscription.of(
                topics,
                user_data=assignor.subscription_user_data(topics),
                owned=owned,
                generation_id=self.generation.generation_id,
                rack_id=rack,
            )
            out.append({"name": assignor.name, "metadata": sub.encode()})
        return out

    def _send_join_group(self) -> Future[Any]:
        version = self._api_version(ApiKey.JOIN_GROUP)
        if self.group_instance_id is not None and version < 5:
            raise UnsupportedVersionError(
                f"group_instance_id needs JoinGroup v5+; the coordinator supports v{version}"
            )
        with self.cond:
            member_id = self.generation.member_id
            reason = self.rejoin_reason
        body = {
            "group_id": self.group_id,
            "session_timeout": self.config.session_timeout_ms,
            "rebalance_timeout": self.rebalance_timeout_ms,
            "member_id": member_id,
            "group_instance_id": self.group_instance_id,
            "protocol_type": CONSUMER_PROTOCOL_TYPE,
            "protocols": self._subscription_metadata(),
            "reason": reason[:255] if reason else None,
        }
        timeout_ms = max(
            self.config.request_timeout_ms,
            self.rebalance_timeout_ms + _JOIN_GROUP_TIMEOUT_LAPSE_MS,
        )
        log.info("group %s: (re-)joining group as %r", self.group_id, member_id)
        self.join_attempts += 1
        return self._send(ApiKey.JOIN_GROUP, body, timeout_ms=timeout_ms)

    def _initiate_join_group(self) -> None:
        with self.cond:
            self.state = MemberState.PREPARING_REBALANCE
            thread = self._heartbeat_thread
            if thread is not None:
                thread.disable()
            generation = self.generation
        future = self._send_join_group()
        future.add_done_callback(lambda _f: self._wakeup())
        self._pending = ("join", future, generation)

    def ensure_active_group(self, deadline: float) -> bool:
        """Join (or rejoin) and sync; False if ``deadline`` passes first (state is kept).

        ``poll`` passes a deadline of now: each step of the rebalance is started or
        collected without waiting, and the consumer keeps fetching meanwhile.
        """
        if not self.ensure_coordinator_ready(deadline):
            return False
        self._start_heartbeat_thread_if_needed()
        return self._join_group_if_needed(deadline)

    def _join_group_if_needed(self, deadline: float) -> bool:
        """Java's joinGroupIfNeeded: prepare, JoinGroup, SyncGroup, complete, as far as
        ``deadline`` allows; every step in flight is kept for the next call."""
        while self.rejoin_needed_or_pending():
            if not self.ensure_coordinator_ready(deadline):
                return False
            if self.needs_join_prepare:
                # Java's order: mark before the callbacks, so that a callback raising
                # does not make the next poll revoke a second time.
                self.needs_join_prepare = False
                with self.cond:
                    generation = self.generation
                if not self._on_join_prepare(generation, deadline):
                    self.needs_join_prepare = True  # the commit before it is not done yet
                    return False
            if self._join_result is None:
                if not self._advance_join(deadline):
                    return False
                continue
            self._finish_join()
        return True

    def _advance_join(self, deadline: float) -> bool:
        """Send the JoinGroup, or collect the JoinGroup / SyncGroup in flight and handle it.

        False when ``deadline`` passes first (waiting for a response or a backoff)."""
        if self._pending is None:
            wait = self._retry_join_at - time.monotonic()
            if wait > 0:
                if time.monotonic() + wait > deadline:
                    return False
                time.sleep(wait)
            try:
                self._initiate_join_group()
            except KafkaError as exc:
                with self.cond:
                    self.state = MemberState.UNJOINED
                if not exc.retriable:
                    raise
                self._retry_join_at = time.monotonic() + self._backoff_s()
                return True
        kind, future, sent = self._pending  # type: ignore[misc]
        try:
            response = future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            return False
        except KafkaError as exc:
            self._pending = None
            with self.cond:
                self.state = MemberState.UNJOINED
            if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
                self.mark_coordinator_unknown(f"{kind} request failed: {exc}")
                self._retry_join_at = time.monotonic() + self._backoff_s()
                return True
            raise
        self._pending = None
        if kind == "join":
            error = self._handle_join_response(response, sent)
        else:
            error = self._handle_sync_response(response, sent)
        if error is None:
            return True  # SyncGroup sent, or the assignment is in: go on
        with self.cond:
            if self.state is not MemberState.UNJOINED and kind == "join":
                self.state = MemberState.UNJOINED
        if isinstance(error, _RetryNow):
            return True
        if error.retriable:
            self._retry_join_at = time.monotonic() + self._backoff_s()
            return True
        raise error

    def _finish_join(self) -> None:
        """Apply the SyncGroup's assignment (Java's onJoinComplete). When a listener raises,
        the error reaches ``poll`` and the next ``poll`` runs this again: the assignment
        is in place by then, so the callbacks see nothing more, and the member is ready
        for the next rebalance (commit first, revoke what it owns)."""
        assert self._join_result is not None
        generation, assignment = self._join_result
        with self.cond:
            current, state = self.generation, self.state
        if current != generation or state is not MemberState.STABLE:
            self._join_result = None
            self._reset_state_and_rejoin(
                f"rebalance failed since the generation/state was modified by the heartbeat "
                f"thread to {current}/{state.value} before the rebalance callback",
                reset_member_id=True,
            )
            return
        self._on_join_complete(generation, assignment)
        self._join_result = None
        self._retry_join_at = 0.0
        self.needs_join_prepare = True

    @staticmethod
    def _sleep_until(deadline: float, seconds: float) -> None:
        time.sleep(max(0.0, min(seconds, deadline - time.monotonic())))

    def _handle_join_response(self, response: Any, sent: Generation) -> KafkaError | None:
        code = _code(response.error_code)
        if code == _NONE:
            protocol_type = getattr(response, "protocol_type", None)
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
                return make_error(_INCONSISTENT_GROUP_PROTOCOL, f"protocol type {protocol_type}")
            with self.cond:
                if self.state is not MemberState.PREPARING_REBALANCE:
                    # Left the group while the join was in flight (e.g. poll timeout).
                    return _RetryNow("joined after leaving; rejoining")
                self.state = MemberState.COMPLETING_REBALANCE
                # Heartbeats may resume now: the group stays in CompletingRebalance only
                # until the leader's SyncGroup.
                self.generation = Generation(
                    int(response.generation_id), str(response.member_id), response.protocol_name
                )
                thread = self._heartbeat_thread
                if thread is not None:
                    thread.enable()
                generation = self.generation
            log.info(
                "group %s: joined generation %s as %s (leader %s, protocol %s)",
                self.group_id,
                generation.generation_id,
                generation.member_id,
                response.leader,
                generation.protocol_name,
            )
            try:
                if response.leader == response.member_id:
                    assignments = self._on_join_leader(response)
                else:
                    self.is_leader = False
                    assignments = {}
                future = self._send_sync_group(generation, assignments)
                future.add_done_callback(lambda _f: self._wakeup())
                self._pending = ("sync", future, generation)
            except KafkaError as exc:
                self.request_rejoin(f"sync failed: {exc}")
                return exc
            return None
        if code == _COORDINATOR_LOAD_IN_PROGRESS:
            return make_error(code, "JoinGroup")
        if code == _UNKNOWN_MEMBER_ID:
            with self.cond:
                if self.generation == sent:  # else the generation moved on meanwhile
                    self._reset_state_and_rejoin(
                        "encountered UNKNOWN_MEMBER_ID from JOIN_GROUP", True
                    )
            return _RetryNow("unknown member id")
        if code in _COORDINATOR_ERRORS:
            self.mark_coordinator_unknown(f"JoinGroup error {code}")
            return make_error(code, "JoinGroup")
        if code == _MEMBER_ID_REQUIRED:
            with self.cond:
                self.generation = Generation(-1, str(response.member_id), None)
            log.info(
                "group %s: broker assigned member id %s; rejoining",
                self.group_id,
                response.member_id,
            )
            return _RetryNow("member id required")
        if code in (_REBALANCE_IN_PROGRESS, _ILLEGAL_GENERATION):
            return _RetryNow("rebalance in progress")
        if code == _FENCED_INSTANCE_ID:
            return make_error(code, f"group_instance_id {self.group_instance_id!r} was fenced")
        if code == _GROUP_MAX_SIZE_REACHED:
            self._reset_state_and_generation("group max size reached", True)
            return make_error(code, f"group {self.group_id!r} is full")
        return make_error(code, f"JoinGroup to group {self.group_id!r}")

    def _on_join_leader(self, response: Any) -> dict[str, bytes]:
        protocol_name = response.protocol_name
        assignor = self._lookup_assignor(protocol_name)
        subscriptions: dict[str, Subscription] = {}
        all_topics: set[str] = set()
        for m in response.members:
            try:
                sub = Subscription.decode(m.metadata)
            except ConsumerProtocolError as exc:
                raise IllegalStateError(
                    f"member {m.member_id} sent a bad subscription: {exc}"
                ) from exc
            sub = dataclasses.replace(sub, group_instance_id=m.group_instance_id)
            subscriptions[str(m.member_id)] = sub
            all_topics.update(sub.topics)
        with self.cond:
            self.is_leader = True
        # The leader watches every topic the group subscribes to (partition changes).
        self.subscriptions.group_subscription = set(all_topics) | set(
            self.subscriptions.subscription
        )
        self.client.add_topics(all_topics)
        # Java's ensureFreshMetadata: refresh only for a topic the metadata lacks or when it
        # is due anyway. An unneeded refresh costs the whole group time: it may wait behind
        # a fetch long-poll on the broker connection.
        cluster = self.client.cluster
        if (
            any(cluster.partitions_for(t) is None for t in all_topics)
            or self.client.metadata_age_s() * 1000 >= self.config.metadata_max_age_ms
        ):
            with contextlib.suppress(KafkaError):
                self.client.refresh(all_topics, timeout_s=self.config.request_timeout_ms / 1000)
        snapshot = self._metadata_snapshot(all_topics)
        if getattr(response, "skip_assignment", False):
            log.info(
                "group %s: skipped assignment for returning static leader at generation %s",
                self.group_id,
                response.generation_id,
            )
            self.assignment_snapshot = snapshot
            return {}
        cluster = {t: n for t, n in snapshot.items() if n > 0}
        started = time.perf_counter()
        assignments = assignor.assign(cluster, subscriptions)
        log.info(
            "group %s: leader assigned %d partitions to %d members with %s in %.1f ms",
            self.group_id,
            sum(cluster.values()),
            len(subscriptions),
            assignor.name,
            (time.perf_counter() - started) * 1000,
        )
        if self.protocol is RebalanceProtocol.COOPERATIVE and assignor.name != "cooperative-sticky":
            bad = cooperative_violations(subscriptions, assignments)
            if bad:
                raise IllegalStateError(
                    f"assignor {assignor.name} broke the cooperative protocol: "
                    f"{ {f'{t}-{p}': v for (t, p), v in bad.items()} }"
                )
        self.assignment_snapshot = snapshot
        return {m: a.encode() for m, a in assignments.items()}

    def _lookup_assignor(self, name: str | None) -> Assignor:
        for a in self.assignors:
            if a.name == name:
                return a
        raise IllegalStateError(f"coordinator selected an unknown assignment strategy {name!r}")

    def _send_sync_group(
        self, generation: Generation, assignments: dict[str, bytes]
    ) -> Future[Any]:
        version = self._api_version(ApiKey.SYNC_GROUP)
        if self.group_instance_id is not None and version < 3:
            raise UnsupportedVersionError("group_instance_id needs SyncGroup v3+")
        return self._send(
            ApiKey.SYNC_GROUP,
            {
                "group_id": self.group_id,
                "generation_id": generation.generation_id,
                "member_id": generation.member_id,
                "group_instance_id": self.group_instance_id,
                "protocol_type": CONSUMER_PROTOCOL_TYPE,
                "protocol_name": generation.protocol_name,
                "assignments": [
                    {"member_id": m, "assignment": blob} for m, blob in assignments.items()
                ],
            },
            timeout_ms=max(
                self.config.request_timeout_ms,
                self.rebalance_timeout_ms + _JOIN_GROUP_TIMEOUT_LAPSE_MS,
            ),
        )

    def _handle_sync_response(self, response: Any, sent: Generation) -> KafkaError | None:
        """SyncGroup answered (for the generation ``sent``): keep the assignment for
        ``_finish_join``, or map the error as Java's SyncGroupResponseHandler does."""
        code = _code(response.error_code)
        if code == _NONE:
            ptype = getattr(response, "protocol_type", None)
            pname = getattr(response, "protocol_name", None)
            if ptype is not None and ptype != CONSUMER_PROTOCOL_TYPE:
                self.request_rejoin("inconsistent protocol type")
                return make_error(_INCONSISTENT_GROUP_PROTOCOL, f"protocol type {ptype}")
            with self.cond:
                if self.generation != sent or self.state is not MemberState.COMPLETING_REBALANCE:
                    log.info(
                        "group %s: generation was reset (%s, %s) before the SyncGroup response",
                        self.group_id,
                        self.generation,
                        self.state.value,
                    )
                    self.request_rejoin("generation reset during sync")
                    return _RetryNow("generation reset during sync")
                if pname is not None and pname != sent.protocol_name:
                    self.request_rejoin("inconsistent protocol name")
                    return make_error(_INCONSISTENT_GROUP_PROTOCOL, f"protocol name {pname}")
                self.state = MemberState.STABLE
                self.rejoin_needed = False
                self.rejoin_reason = ""
            self.rebalances += 1
            self._join_result = (sent, bytes(response.assignment))
            return None
        self.request_rejoin(f"SyncGroup error {code}")
        if code == _REBALANCE_IN_PROGRESS:
            return _RetryNow("group began another rebalance")
        if code in (_UNKNOWN_MEMBER_ID, _ILLEGAL_GENERATION):
            with self.cond:
                if self.generation == sent:  # else the heartbeat thread reset it already
                    # Keep the member id on ILLEGAL_GENERATION: the member may still be valid.
                    self._reset_state_and_rejoin(
                        f"encountered {make_error(code)} from SYNC_GROUP",
                        reset_member_id=code != _ILLEGAL_GENERATION,
                    )
            return _RetryNow("sync failed")
        if code in _COORDINATOR_ERRORS:
            self.mark_coordinator_unknown(f"SyncGroup error {code}")
            return make_error(code, "SyncGroup")
        return make_error(code, f"SyncGroup of group {self.group_id!r}")

    # ================================================================ rebalance callbacks

    def _listener(self) -> Any:
        return self.subscriptions.listener

    def _invoke(self, method: str, partitions: set[TopicPartition]) -> BaseException | None:
        listener = self._listener()
        log.info(
            "group %s: %s %s",
            self.group_id,
            {
                "on_partitions_revoked": "revoking",
                "on_partitions_assigned": "adding newly assigned partitions",
                "on_partitions_lost": "lost",
            }[method],
            ", ".join(map(str, _sorted(partitions))) or "(none)",
        )
        if listener is None:
            return None
        try:
            getattr(listener, method)(set(partitions))
        except Exception as exc:
            log.error("group %s: user %s callback failed: %r", self.group_id, method, exc)
            return exc
        return None

    def _on_join_prepare(self, generation: Generation, deadline: float) -> bool:
        """Before (re)joining: commit, then revoke or lose partitions (seed 000 §2.4a).

        False while the commit before the rebalance is still pending (the next ``poll``
        goes on with it); the partitions are revoked only after it.
        """
        if self._join_prepare_deadline is None:
            self._join_prepare_deadline = time.monotonic() + self.rebalance_timeout_ms / 1000
        if self.auto_commit_enabled and not self._commit_before_rebalance(deadline):
            return False
        self._join_prepare_deadline = None
        subs = self.subscriptions
        exception: BaseException | None = None
        owned = subs.assigned_partitions()
        if generation.generation_id == NO_GENERATION.generation_id or not (
            generation.has_member_id
        ):
            if owned:
                log.info(
                    "group %s: giving away all assigned partitions as lost since the "
                    "generation / member id has been reset",
                    self.group_id,
                )
                exception = self._invoke("on_partitions_lost", owned)
                subs.assign_from_subscribed([])
        elif self.protocol is RebalanceProtocol.COOPERATIVE:
            revoked = {tp for tp in owned if not self._subscribed_to(tp.topic)}
            if revoked:
                exception = self._invoke("on_partitions_revoked", revoked)
                subs.assign_from_subscribed(owned - revoked)
        else:
            exception = self._invoke("on_partitions_revoked", owned)
            subs.assign_from_subscribed([])
        with self.cond:
            self.is_leader = False
        subs.group_subscription = set()
        if exception is not None:
            raise KafkaError(f"user rebalance callback raised: {exception!r}") from exception
        return True

    def _commit_before_rebalance(self, deadline: float) -> bool:
        """Auto-commit the positions before the rebalance (Java's onJoinPrepare): sent
        asynchronously and retried on retriable errors until the rebalance timeout, so
        the member never misses the rebalance waiting for it. True once done or given up.

        With EAGER the partitions are marked pending revocation first: nothing more is
        fetched or handed out from them, so the committed positions stay the last ones."""
        assert self._join_prepare_deadline is not None
        give_up_at = self._join_prepare_deadline
        if self._join_prepare_commit is None:
            if time.monotonic() < self._retry_join_at:  # backing off after a failure
                self._sleep_until(min(deadline, give_up_at), self._retry_join_at - time.monotonic())
                if time.monotonic() < self._retry_join_at:
                    return time.monotonic() >= give_up_at
            if self.protocol is RebalanceProtocol.EAGER:
                self.subscriptions.mark_pending_revocation(self.subscriptions.assigned_list())
            offsets = self.all_consumed()
            if not offsets:
                return True
            future, sent = self._send_offset_commit(offsets)
            future.add_done_callback(lambda _f: self._wakeup())
            self._join_prepare_commit = (future, sent)
        future, sent = self._join_prepare_commit
        with contextlib.suppress(FutureTimeout, Exception):
            future.result(timeout=max(0.0, min(deadline, give_up_at) - time.monotonic()))
        if not future.done():
            if time.monotonic() < give_up_at:
                return False
            log.error(
                "group %s: the commit before the rebalance did not complete within the "
                "rebalance timeout; joining the group anyway",
                self.group_id,
            )
            self._join_prepare_commit = None
            return True
        self._join_prepare_commit = None
        error = self._commit_result(future, sent)
        if error is None:
            return True
        if retriable_without_poll(error) and time.monotonic() < give_up_at:
            log.debug(
                "group %s: commit before the rebalance failed, retrying: %s", self.group_id, error
            )
            self._retry_join_at = time.monotonic() + self._backoff_s()
            return False
        log.error(
            "group %s: the commit before the rebalance failed: %s; joining the group anyway",
            self.group_id,
            error,
        )
        return True

    def _subscribed_to(self, topic: str) -> bool:
        subs = self.subscriptions
        return topic in subs.subscription or subs.matches_pattern(topic)

    def _on_join_complete(self, generation: Generation, assignment_bytes: bytes) -> None:
        if not self.is_leader:
            self.assignment_snapshot = None
        assignor = self._lookup_assignor(generation.protocol_name)
        subs = self.subscriptions
        owned = subs.assigned_partitions()
        try:
            assignment = Assignment.decode(assignment_bytes)
        except ConsumerProtocolError as exc:
            raise IllegalStateError(f"cannot read the assignment: {exc}") from exc
        assigned = {TopicPartition(t, p) for t, p in assignment.topic_partitions()}
        unmatched = {tp for tp in assigned if not self._subscribed_to(tp.topic)}
        if unmatched:
            self.request_rejoin(
                f"assigned partitions {sorted(map(str, unmatched))} do not match the current "
                f"subscription {sorted(subs.subscription)}"
            )
            return
        first: BaseException | None = None
        added = assigned - owned
        if self.protocol is RebalanceProtocol.COOPERATIVE:
            revoked = owned - assigned
            if revoked:
                first = self._invoke("on_partitions_revoked", revoked)
                self.request_rejoin(
                    f"need to revoke partitions {sorted(map(str, revoked))} as indicated by the "
                    "current assignment and re-join"
                )
        self._absorb_assigned_topics(assigned)
        try:
            assignor.on_assignment(assignment, generation.generation_id)
        except Exception as exc:
            first = first or exc
        if self.auto_commit_enabled:
            self._next_auto_commit.reset(self.auto_commit_interval_s)
        subs.assign_from_subscribed(_sorted(assigned))
        self._pending_offset_fetch = None
        exc2 = self._invoke("on_partitions_assigned", added)
        first = first or exc2
        if first is not None:
            raise KafkaError(f"user rebalance callback raised: {first!r}") from first

    def _absorb_assigned_topics(self, assigned: set[TopicPartition]) -> None:
        """Java's maybeUpdateJoinedSubscription: the leader may assign a topic that matches
        this member's pattern before this member's metadata shows it. Take it into the
        subscription now, so the metadata catching up later forces no other rebalance."""
        subs = self.subscriptions
        if subs.subscribed_pattern is None:
            return
        joined = self.joined_subscription or frozenset()
        added = {tp.topic for tp in assigned} - joined
        if added:
            log.info("group %s: the leader assigned topics %s too", self.group_id, sorted(added))
            subs.subscribe_from_pattern(set(subs.subscription) | added)
            self.joined_subscription = joined | added

    def on_leave_prepare(self) -> None:
        """Before leaving (close / unsubscribe): revoke, or lose if no longer a member."""
        with self.cond:
            generation = self.generation
            rebalancing = self.rebalance_in_progress()
        subs = self.subscriptions
        dropped = subs.assigned_partitions()
        if subs.has_auto_assigned_partitions and dropped:
            if (
                generation.generation_id == NO_GENERATION.generation_id
                or not generation.has_member_id
                or rebalancing
            ):
                exc = self._invoke("on_partitions_lost", dropped)
            else:
                exc = self._invoke("on_partitions_revoked", dropped)
            subs.assign_from_subscribed([])
            if exc is not None:
                raise KafkaError(f"user rebalance callback raised: {exc!r}") from exc

    # ================================================================ poll (CoordinatorHooks)

    def _maybe_update_subscription_metadata(self) -> None:
        """Match the pattern against new metadata (each snapshot once, as Java does: an
        unchanged snapshot must not undo topics taken from the leader's assignment)."""
        subs = self.subscriptions
        if subs.subscribed_pattern is None:
            return
        cluster = self.client.cluster
        if not cluster.updated_at:
            return
        seen = (subs.subscribed_pattern, cluster.updated_at)
        if seen == self._pattern_matched:
            return
        self._pattern_matched = seen
        matched = [
            name
            for name, meta in cluster.topics.items()
            if meta.error_code == 0
            and not (self.config.exclude_internal_topics and meta.is_internal)
            and not (self.config.exclude_internal_topics and name.startswith("__"))
            and subs.matches_pattern(name)
        ]
        if subs.subscribe_from_pattern(matched):
            log.info("group %s: pattern now matches %s", self.group_id, sorted(matched))

    def poll(self, timeout_s: float) -> bool:
        """Drive membership (join, sync, auto-commit); True when the member is stable.

        Waits (up to ``timeout_s``) only to find the coordinator. A rebalance is never
        waited for, as in Java's ``KafkaConsumer.poll``: each call starts or collects
        its next step and returns, so the consumer keeps fetching the partitions it
        still owns (all of them with COOPERATIVE, none with EAGER) until it completes.
        """
        if self._closed:
            raise IllegalStateError("the coordinator is closed")
        self._invoke_completed_commit_callbacks()
        deadline = time.monotonic() + max(0.0, timeout_s)
        subs = self.subscriptions
        if subs.has_auto_assigned_partitions:
            if self.protocol is None:
                raise IllegalStateError("partition_assignment_strategy is empty")
            self._maybe_update_subscription_metadata()
            self._poll_heartbeat()
            if self.coordinator_unknown() and not self.ensure_coordinator_ready(deadline):
                return False
            if self.rejoin_needed_or_pending():
                if (
                    subs.subscribed_pattern is not None
                    and self._pending is None
                    and self._join_result is None
                    and self._join_prepare_commit is None
                    and self.client.metadata_age_s() >= self._backoff_s()
                ):
                    # Match the pattern against fresh metadata before joining.
                    with contextlib.suppress(KafkaError):
                        self.client.refresh(
                            all_topics=True,
                            timeout_s=max(
                                0.05,
                                min(
                                    self.config.request_timeout_ms / 1000,
                                    deadline - time.monotonic(),
                                ),
                            ),
                        )
                    self._maybe_update_subscription_metadata()
                if not self.ensure_active_group(time.monotonic()):
                    return False
        self._maybe_auto_commit_async()
        return True

    def time_to_next_poll(self) -> float:
        """Seconds until ``poll`` is needed again (heartbeats, auto-commit, a join backoff)."""
        wait = (
            float("inf") if self.state_has_not_joined() else self.heartbeat.time_to_next_heartbeat()
        )
        rebalancing = (
            self.rejoin_needed or self.awaiting_response() or self._join_result is not None
        )
        if self.auto_commit_enabled and not rebalancing:
            # No auto-commit runs until the rebalance is done: its timer, expired
            # meanwhile, must not turn the consumer's wait into a busy loop.
            wait = min(wait, self._next_auto_commit.remaining())
        backoff = self._retry_join_at - time.monotonic()
        if backoff > 0 and not self.awaiting_response():
            wait = min(wait, backoff)
        return wait

    # ================================================================ committed offsets

    def _offset_fetch_body(self, tps: list[TopicPartition]) -> Callable[[int], dict[str, Any]]:
        by_topic: dict[str, list[int]] = {}
        for tp in _sorted(tps):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]

        def body(version: int) -> dict[str, Any]:
            return {
                "group_id": self.group_id,
                "topics": topics,
                "require_stable": True,
                "groups": [{"group_id": self.group_id, "topics": topics}],
            }

        return body

    def _parse_offset_fetch(
        self, response: Any, wanted: frozenset[TopicPartition]
    ) -> tuple[dict[TopicPartition, OffsetAndMetadata | None], KafkaError | None]:
        if hasattr(response, "groups"):
            group = next((g for g in response.groups if g.group_id == self.group_id), None)
            if group is None:
                return {}, make_error(_COORDINATOR_NOT_AVAILABLE, "OffsetFetch: group missing")
            top, topics = _code(group.error_code), group.topics
        else:
            top, topics = _code(getattr(response, "error_code", 0)), response.topics
        if top != _NONE:
            return {}, self._offset_fetch_error(top)
        out: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for t in topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                if tp not in wanted:
                    continue
                code = _code(p.error_code)
                if code == _UNSTABLE_OFFSET_COMMIT:
                    return {}, make_error(code, f"pending transactional offset for {tp}")
                if code == _UNKNOWN_TOPIC_OR_PARTITION:
                    out[tp] = None
                    continue
                if code != _NONE:
                    err = self._offset_fetch_error(code)
                    return {}, err
                offset = int(p.committed_offset)
                if offset < 0:
                    out[tp] = None
                else:
                    epoch = int(getattr(p, "committed_leader_epoch", -1))
                    out[tp] = OffsetAndMetadata(
                        offset, p.metadata or "", epoch if epoch >= 0 else None
                    )
        for tp in wanted:
            out.setdefault(tp, None)
        return out, None

    def _offset_fetch_error(self, code: int) -> KafkaError:
        if code in _COORDINATOR_ERRORS:
            self.mark_coordinator_unknown(f"OffsetFetch error {code}")
        return make_error(code, f"OffsetFetch for group {self.group_id!r}")

    def fetch_committed_offsets(
        self, partitions: Iterable[TopicPartition], deadline: float
    ) -> dict[TopicPartition, OffsetAndMetadata | None] | None:
        """Committed offsets (None values: nothing committed); None if ``deadline`` passes."""
        wanted = frozenset(partitions)
        if not wanted:
            return {}
        while True:
            if not self.ensure_coordinator_ready(deadline):
                return None
            pending = self._pending_offset_fetch
            generation = self.generation
            if pending is not None and pending[0] == wanted and pending[1] == generation:
                future = pending[2]
            else:
                future = self._send(ApiKey.OFFSET_FETCH, self._offset_fetch_body(list(wanted)))
                self._pending_offset_fetch = (wanted, generation, future)
            try:
                response = future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                return None
            except KafkaError as exc:
                self._pending_offset_fetch = None
                if not exc.retriable:
                    raise
                if isinstance(exc, KafkaConnectionError):
                    self.mark_coordinator_unknown(f"OffsetFetch failed: {exc}")
                if time.monotonic() >= deadline:
                    return None
                self._sleep_until(deadline, self._backoff_s())
                continue
            self._pending_offset_fetch = None
            offsets, error = self._parse_offset_fetch(response, wanted)
            if error is None:
                return offsets
            if not error.retriable:
                raise error
            if time.monotonic() >= deadline:
                return None
            self._sleep_until(deadline, self._backoff_s())

    def refresh_committed_offsets(self, timeout_s: float) -> bool:
        """Seek partitions without a position to their committed offsets."""
        subs = self.subscriptions
        missing = subs.missing_positions()
        if not missing:
            return True
        deadline = time.monotonic() + max(0.0, timeout_s)
        offsets = self.fetch_committed_offsets(missing, deadline)
        if offsets is None:
            return False
        for tp, om in offsets.items():
            if om is None or not subs.is_assigned(tp):
                continue
            with contextlib.suppress(KafkaError):
                if subs.position(tp) is None and subs.state(tp).reset_strategy is None:
                    subs.seek(tp, om.offset, om.leader_epoch)
                    log.info(
                        "group %s: setting offset for %s to the committed offset %s",
                        self.group_id,
                        tp,
                        om.offset,
                    )
        return True

    # ================================================================ commits

    @staticmethod
    def _normalize_offsets(
        offsets: Mapping[Any, int | OffsetAndMetadata],
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for key, value in offsets.items():
            tp = _tp(key)
            om = value if isinstance(value, OffsetAndMetadata) else OffsetAndMetadata(int(value))
            if om.offset < 0:
                raise ValueError(f"invalid negative offset {om.offset} for {tp}")
            out[tp] = om
        return out

    def all_consumed(self) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: OffsetAndMetadata(pos) for tp, pos in self.subscriptions.all_consumed().items()}

    def _send_offset_commit(
        self, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> tuple[Future[Any], Generation]:
        """Send OffsetCommit; a failed future when the member is not in a stable group."""
        future: Future[Any]
        if self.subscriptions.has_auto_assigned_partitions:
            generation = self.generation_if_stable()
            instance = self.group_instance_id
            if generation is None:
                future = Future()
                if self.rebalance_in_progress():
                    future.set_exception(
                        RebalanceInProgressCommitError(
                            "Offset commit cannot be completed since the consumer is undergoing "
                            "a rebalance for auto partition assignment. You can try completing "
                            "the rebalance by calling poll() and then retry the operation."
                        )
                    )
                else:
                    future.set_exception(
                        CommitFailedError(
                            "Offset commit cannot be completed since the consumer is not part "
                            "of an active group for auto partition assignment; it is likely "
                            "that the consumer was kicked out of the group."
                        )
                    )
                return future, NO_GENERATION
        else:
            generation = NO_GENERATION
            instance = None
        try:
            version = self._api_version(ApiKey.OFFSET_COMMIT)
        except KafkaError as exc:
            future = Future()
            future.set_exception(exc)
            return future, generation
        if instance is not None and version < 7:
            raise UnsupportedVersionError("group_instance_id needs OffsetCommit v7+")
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, om in offsets.items():
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": om.offset,
                    "committed_leader_epoch": -1 if om.leader_epoch is None else om.leader_epoch,
                    "committed_metadata": om.metadata,
                    "commit_timestamp": -1,
                }
            )
        body = {
            "group_id": self.group_id,
            "generation_id_or_member_epoch": generation.generation_id,
            "generation_id": generation.generation_id,
            "member_id": generation.member_id,
            "group_instance_id": instance,
            "retention_time": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        return self._send(ApiKey.OFFSET_COMMIT, body), generation

    def _commit_result(self, future: Future[Any], sent: Generation) -> BaseException | None:
        """Map a completed OffsetCommit future to None (success) or the error."""
        exc = future.exception()
        if exc is not None:
            if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
                self.mark_coordinator_unknown(f"OffsetCommit failed: {exc}")
            return exc
        response = future.result()
        for t in response.topics:
            for p in t.partitions:
                code = _code(p.error_code)
                if code == _NONE:
                    continue
                tp = TopicPartition(t.name, int(p.partition_index))
                if code in (_GROUP_AUTHORIZATION_FAILED, _TOPIC_AUTHORIZATION_FAILED):
                    return make_error(code, f"commit of {tp}")
                if code in (_OFFSET_METADATA_TOO_LARGE, _INVALID_COMMIT_OFFSET_SIZE):
                    return make_error(code, f"commit of {tp}")
                if code in (_COORDINATOR_LOAD_IN_PROGRESS, _UNKNOWN_TOPIC_OR_PARTITION):
                    return make_error(code, f"commit of {tp}")
                if code in (*_COORDINATOR_ERRORS, _REQUEST_TIMED_OUT):
                    self.mark_coordinator_unknown(f"OffsetCommit error {code}")
                    return make_error(code, f"commit of {tp}")
                if code == _FENCED_INSTANCE_ID:
                    with self.cond:
                        # Fatal only for the generation the commit carried; after a
                        # rebalance the old generation's instance id is fenced by design.
                        if self.generation == sent:
                            return make_error(code, f"group_instance_id {self.group_instance_id!r}")
                        if self.state is MemberState.PREPARING_REBALANCE:
                            return RebalanceInProgressCommitError(
                                "Offset commit cannot be completed since the consumer "
                                "member's old generation is fenced by its group instance id; "
                                "it has already joined another rebalance: call poll() and "
                                "commit again."
                            )
                    return CommitFailedError()
                if code == _REBALANCE_IN_PROGRESS:
                    self.request_rejoin("offset commit failed since group is already rebalancing")
                    return RebalanceInProgressCommitError(
                        "Offset commit cannot be completed since the consumer group is executing "
                        "a rebalance at the moment. You can try completing the rebalance by "
                        "calling poll() and then retry commit again."
                    )
                if code in (_UNKNOWN_MEMBER_ID, _ILLEGAL_GENERATION):
                    with self.cond:
                        if self.generation != sent and (
                            self.state is MemberState.PREPARING_REBALANCE
                        ):
                            return RebalanceInProgressCommitError(
                                "Offset commit cannot be completed since the consumer member's "
                                "generation is already stale: it has joined another "
                                "rebalance. Call poll() to complete it and commit again."
                            )
                        if self.generation == sent and sent != NO_GENERATION:
                            self._reset_state_and_rejoin(
                                f"encountered {make_error(code)} from OFFSET_COMMIT",
                                reset_member_id=code != _ILLEGAL_GENERATION,
                            )
                    return CommitFailedError()
                return make_error(code, f"commit of {tp}")
        return None

    def commit_sync(
        self, offsets: Mapping[Any, int | OffsetAndMetadata] | None, timeout_s: float
    ) -> None:
        """Commit (current positions when ``offsets`` is None); raise on failure / timeout."""
        self._invoke_completed_commit_callbacks()
        normalized = self.all_consumed() if offsets is None else self._normalize_offsets(offsets)
        if not normalized:
            return
        deadline = time.monotonic() + max(0.0, timeout_s)
        last: BaseException | None = None
        while True:
            if not self.ensure_coordinator_ready(deadline):
                raise KafkaTimeoutError(
                    f"commit timed out: coordinator not available (last error: "
                    f"{last or self._last_lookup_error})"
                )
            future, sent = self._send_offset_commit(normalized)
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                raise KafkaTimeoutError("commit timed out waiting for the coordinator") from None
            except Exception:  # mapped by _commit_result below
                pass
            error = self._commit_result(future, sent)
            self._invoke_completed_commit_callbacks()
            if error is None:
                return
            if not retriable_without_poll(error):
                raise error  # RebalanceInProgressCommitError included: only poll ends it
            last = error
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"commit timed out; last error: {error}") from error
            self._sleep_until(deadline, self._backoff_s())

    def commit_async(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata] | None = None,
        callback: CommitCallback | None = None,
    ) -> None:
        """Commit without waiting; ``callback(offsets, error)`` runs in a later poll."""
        self._invoke_completed_commit_callbacks()
        normalized = self.all_consumed() if offsets is None else self._normalize_offsets(offsets)
        if self.coordinator_unknown():
            try:
                ready = self.ensure_coordinator_ready(
                    time.monotonic() + self.config.request_timeout_ms / 1000
                )
            except KafkaError as exc:
                self._completed_commits.append((callback, normalized, exc))
                return
            if not ready:
                self._completed_commits.append(
                    (
                        callback,
                        normalized,
                        RetriableCommitFailedError("coordinator not available for the commit"),
                    )
                )
                return
        if not normalized:
            self._completed_commits.append((callback, normalized, None))
            return
        try:
            future, sent = self._send_offset_commit(normalized)
        except KafkaError as exc:
            self._completed_commits.append((callback, normalized, exc))
            return
        with self.cond:
            self._pending_async_commits += 1

        def done(f: Future[Any]) -> None:
            error = self._commit_result(f, sent)
            if retriable_without_poll(error):
                error = RetriableCommitFailedError(f"commit failed with a retriable error: {error}")
            with self.cond:
                self._pending_async_commits -= 1
                self._completed_commits.append((callback, normalized, error))
                self.cond.notify_all()

        future.add_done_callback(done)

    def _invoke_completed_commit_callbacks(self) -> None:
        while True:
            try:
                callback, offsets, error = self._completed_commits.popleft()
            except IndexError:
                return
            if callback is None:
                if error is not None:
                    log.warning("group %s: offset commit failed: %s", self.group_id, error)
                continue
            callback(offsets, error)

    def _auto_commit_done(
        self, offsets: dict[TopicPartition, OffsetAndMetadata], error: BaseException | None
    ) -> None:
        if error is None:
            log.debug("group %s: auto-committed %s", self.group_id, offsets)
            return
        if isinstance(error, KafkaError) and error.retriable:
            log.debug("group %s: auto-commit failed, will retry: %s", self.group_id, error)
            self._next_auto_commit.reset(self._backoff_s())
        else:
            log.warning("group %s: auto-commit of offsets failed: %s", self.group_id, error)

    def _maybe_auto_commit_async(self) -> None:
        if self.auto_commit_enabled and self._next_auto_commit.expired():
            self._next_auto_commit.reset(self.auto_commit_interval_s)
            offsets = self.all_consumed()
            if offsets:
                self.commit_async(offsets, self._auto_commit_done)

    def _maybe_auto_commit_sync(self, timeout_s: float) -> None:
        if not self.auto_commit_enabled:
            return
        offsets = self.all_consumed()
        if not offsets:
            return
        try:
            self.commit_sync(offsets, timeout_s)
        except KafkaError as exc:
            log.warning(
                "group %s: synchronous auto-commit of %s failed: %s", self.group_id, offsets, exc
            )

    def committed(
        self, partitions: Iterable[Any], timeout_s: float
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        tps = {_tp(p) for p in partitions}
        offsets = self.fetch_committed_offsets(tps, time.monotonic() + max(0.0, timeout_s))
        if offsets is None:
            raise KafkaTimeoutError(f"committed offsets of {sorted(map(str, tps))} not fetched")
        return offsets

    # ================================================================ unsubscribe / close

    def on_unsubscribe(self) -> None:
        """Java's unsubscribe: revoke (listener), leave the group."""
        try:
            self.on_leave_prepare()
        finally:
            self.maybe_leave_group("the consumer unsubscribed from all topics")
            with self.cond:
                self.joined_subscription = None
                self.assignment_snapshot = None

    def close(self, timeout_s: float) -> None:
        """Auto-commit, listener revoke, LeaveGroup (dynamic), stop heartbeats, disconnect."""
        if self._closed:
            return
        deadline = time.monotonic() + max(0.0, timeout_s)
        first: BaseException | None = None
        try:
            self._maybe_auto_commit_sync(max(0.0, deadline - time.monotonic()))
            while self._pending_async_commits > 0 and time.monotonic() < deadline:
                with self.cond:
                    self.cond.wait(min(0.05, max(0.0, deadline - time.monotonic())))
            self._invoke_completed_commit_callbacks()
        except KafkaError as exc:
            first = exc
        thread = self._heartbeat_thread
        if thread is not None:
            thread.close()
            if thread is not threading.current_thread():
                thread.join(timeout=2.0)
        try:
            self.on_leave_prepare()
        except KafkaError as exc:
            first = first or exc
        leave = self.maybe_leave_group("the consumer is being closed")
        if leave is not None:
            with contextlib.suppress(Exception):
                leave.result(timeout=max(0.0, min(deadline - time.monotonic(), 5.0)))
        self._closed = True
        with self.cond:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        if first is not None:
            raise first

    def abandon(self) -> None:
        """Test hook: stop like a killed process (no commit, no LeaveGroup, no callbacks)."""
        self._closed = True
        thread = self._heartbeat_thread
        if thread is not None:
            thread.close()
        with self.cond:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class _RetryNow(KafkaError):
    """Internal: join again immediately (no backoff)."""

    retriable = True


__all__ = [
    "NO_GENERATION",
    "CommitFailedError",
    "ConsumerCoordinator",
    "FencedInstanceIdError",
    "Generation",
    "GroupMaxSizeReachedError",
    "MemberState",
    "OffsetAndMetadata",
    "RebalanceInProgressCommitError",
    "RetriableCommitFailedError",
]
