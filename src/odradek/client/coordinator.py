"""Classic group membership (Java's ``ConsumerCoordinator`` on ``AbstractCoordinator``).

The member of a consumer group with ``group_protocol="classic"``: JoinGroup, SyncGroup,
Heartbeat and LeaveGroup, and the rebalance listener's calls, in the order of seed 004
(section 2.2), seed 000 (section 2) and seed 002. What it shares with the KIP-848 member
(the lock, the heartbeat thread and timers, the coordinator connection, the commits,
closing) is ``group_member.GroupMember``'s; finding the coordinator is
``discovery.py``'s, commits and committed offsets are ``commits.py``'s.

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
* **Heartbeats** run on the member's ``heartbeat.HeartbeatThread`` (session, heartbeat
  and poll timers), which asks ``heartbeat_step`` for its next duty. Heartbeats are
  enabled once a JoinGroup is answered and disabled while one is in flight. Heartbeat
  errors are mapped like Java's ``HeartbeatResponseHandler``: REBALANCE_IN_PROGRESS
  requests a rejoin (the member stays valid), ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID
  reset the generation (so the next ``poll`` reports the partitions as *lost*),
  FENCED_INSTANCE_ID is fatal and re-raised by the next ``poll``, coordinator errors mark
  it unknown. When ``max_poll_interval_ms`` passes without a ``poll`` the thread leaves
  the group; the next ``poll`` reports the partitions lost and rejoins.
* **Commit errors about the member** (``commit_refused``): ``CommitFailedError`` when the
  member is no longer part of the group (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, or
  FENCED_INSTANCE_ID for a generation that has passed), ``RebalanceInProgressCommitError``
  while the group rebalances.
* **Static membership** (``group_instance_id``, KIP-345): JoinGroup v5+, no
  MEMBER_ID_REQUIRED round trip, no LeaveGroup on close or when the poll timer expires.
* **Metadata.** A pattern subscription is matched against every topic the cluster has
  (metadata for all topics) and a change of the matched set triggers a rejoin; the leader
  remembers the partition count of every topic the group subscribes to and rejoins when
  it changes (a partition increase or a topic deletion).
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from odradek.client.assignors import Assignor, RebalanceProtocol, cooperative_violations
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
    RebalanceInProgressCommitError,
    UnsupportedVersionError,
    make_error,
    retriable_without_poll,
)
from odradek.client.group_member import GroupMember, sorted_partitions
from odradek.client.heartbeat import LOOK_UP_COORDINATOR, Wait
from odradek.client.structs import NO_GENERATION, Generation, TopicPartition
from odradek.client.subscription import SubscriptionState
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
)
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

_JOIN_GROUP_TIMEOUT_LAPSE_MS = 5_000  # Java's AbstractCoordinator.JOIN_GROUP_TIMEOUT_LAPSE


class MemberState(enum.Enum):
    UNJOINED = "unjoined"
    PREPARING_REBALANCE = "preparing_rebalance"
    COMPLETING_REBALANCE = "completing_rebalance"
    STABLE = "stable"


def _sleep_until(deadline: float, seconds: float) -> None:
    time.sleep(max(0.0, min(seconds, deadline - time.monotonic())))


class ConsumerCoordinator(GroupMember):
    """Classic group membership and rebalances for one ``Consumer`` (see module docs)."""

    def __init__(
        self,
        client: KafkaClient,
        subscriptions: SubscriptionState,
        config: ConsumerConfig,
        *,
        wakeup: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(client, subscriptions, config, wakeup=wakeup)
        # Membership state (guarded by cond).
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

    # ================================================================ small helpers

    def __repr__(self) -> str:
        return (
            f"<ConsumerCoordinator group={self.group_id} member={self.generation.member_id!r} "
            f"generation={self.generation.generation_id} state={self.state.value}>"
        )

    def state_has_not_joined(self) -> bool:
        return self.state in (MemberState.UNJOINED, MemberState.PREPARING_REBALANCE)

    def rebalance_in_progress(self) -> bool:
        return self.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE)

    def generation_if_stable(self) -> Generation | None:
        with self.cond:
            return self.generation if self.state is MemberState.STABLE else None

    def _is_dynamic(self) -> bool:
        return self.group_instance_id is None

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

    # ================================================================ heartbeats

    def heartbeat_step(self) -> Wait:
        """Heartbeat thread, lock held (seed 004 section 3.3): coordinator unknown (look
        it up), session expired (mark the coordinator unknown), poll timer expired (leave
        the group), heartbeat not yet due (wait), else send a Heartbeat."""
        if not self._heartbeats_enabled:
            return None
        if self.state_has_not_joined() or self._heartbeat_failure is not None:
            self._heartbeats_enabled = False
            return 0.0
        hb = self.heartbeat
        if self.discovery.coordinator_unknown():
            return LOOK_UP_COORDINATOR
        if hb.session_timeout_expired():
            self.discovery.mark_coordinator_unknown(
                "session timed out without receiving a heartbeat response"
            )
            return 0.0
        if hb.poll_timeout_expired():
            log.warning(
                "consumer poll timeout has expired: the time between polls was "
                "longer than max_poll_interval_ms (%s ms); leaving group %s. "
                "Lower max_poll_records or raise max_poll_interval_ms.",
                int(hb.max_poll_interval_s * 1000),
                self.group_id,
            )
            self.maybe_leave_group("consumer poll timeout has expired.")
            return 0.0
        if not hb.should_heartbeat():
            return min(hb.retry_backoff_s, max(0.001, hb.time_to_next_heartbeat()))
        hb.sent_heartbeat()
        self.send_heartbeat_request()
        return 0.0

    def _poll_heartbeat(self) -> None:
        with self.cond:
            thread = self._heartbeat_thread
            if thread is not None:
                if self._heartbeat_failure is not None:
                    # Raise once; the next ensure_active_group starts a new thread.
                    cause = self._heartbeat_failure
                    self._heartbeat_thread = None
                    thread.stop()
                    raise cause
                if self.heartbeat.should_heartbeat():
                    self.cond.notify_all()
            self.heartbeat.poll()

    def send_heartbeat_request(self) -> None:
        """Heartbeat thread, lock held: send one Heartbeat, handle the reply on arrival."""
        generation = self.generation
        instance = self.group_instance_id
        try:
            version = self.discovery.api_version(ApiKey.HEARTBEAT)
        except KafkaError as exc:
            self.heartbeat.fail_heartbeat()
            self.discovery.mark_coordinator_unknown(str(exc))
            return
        if instance is not None and version < 3:
            self._fail_heartbeat_thread(
                UnsupportedVersionError("group_instance_id needs Heartbeat v3 (broker too old)")
            )
            return
        future = self.discovery.send(
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
            if self._heartbeat_thread is not None:
                self._heartbeat_failure = exc
                self._heartbeats_enabled = False

    def _on_heartbeat_response(self, future: Future[Any], sent: Generation) -> None:
        with self.cond:
            hb = self.heartbeat
            try:
                exc = future.exception()
                if exc is not None:
                    log.debug("group %s: heartbeat failed: %s", self.group_id, exc)
                    if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
                        self.discovery.mark_coordinator_unknown(f"heartbeat failed: {exc}")
                    hb.fail_heartbeat()
                    return
                code = int(future.result().error_code)
                if code == ErrorCode.NONE:
                    hb.receive_heartbeat()
                elif code in COORDINATOR_MOVED:
                    self.discovery.mark_coordinator_unknown(f"heartbeat error {code}")
                    hb.fail_heartbeat()
                elif code == ErrorCode.REBALANCE_IN_PROGRESS:
                    # Keep heartbeating while the group rebalances: the member stays valid.
                    if self.state is MemberState.STABLE:
                        self.request_rejoin("group is already rebalancing")
                    hb.receive_heartbeat()
                elif code in (
                    ErrorCode.ILLEGAL_GENERATION,
                    ErrorCode.UNKNOWN_MEMBER_ID,
                    ErrorCode.FENCED_INSTANCE_ID,
                ):
                    if self.generation == sent:
                        self._reset_state_and_rejoin(
                            f"encountered {make_error(code)} from HEARTBEAT response",
                            reset_member_id=code != ErrorCode.ILLEGAL_GENERATION,
                        )
                        if code == ErrorCode.FENCED_INSTANCE_ID:
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
                elif code == ErrorCode.GROUP_AUTHORIZATION_FAILED:
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
                and not self.discovery.coordinator_unknown()
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
                future = self.discovery.send(
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
        """Java's rejoinNeededOrPending. The joined subscription and the leader's metadata
        snapshot stay until the next join replaces them (never cleared here): a change
        seen while a join is in flight must still count once that join's SyncGroup has
        cleared ``rejoin_needed``, or the member stays in a generation that never saw it
        (a pattern matched just after the JoinGroup was sent kept a member with no
        partitions for good)."""
        if not self.subscriptions.has_auto_assigned_partitions:
            return False
        with self.cond:
            snapshot = self.assignment_snapshot
            if snapshot is not None and self._metadata_snapshot(snapshot) != snapshot:
                now = self._metadata_snapshot(snapshot)
                self._request_rejoin_if_necessary(
                    f"cached metadata has changed from {snapshot} at the beginning of the "
                    f"rebalance to {now}"
                )
                return True
            joined = self.joined_subscription
            if joined is not None and joined != frozenset(self.subscriptions.subscription):
                self._request_rejoin_if_necessary(
                    f"subscription has changed from {sorted(joined)} to "
                    f"{sorted(self.subscriptions.subscription)}"
                )
                return True
            return self.rejoin_needed or self._pending is not None or self._join_result is not None

    def _request_rejoin_if_necessary(self, reason: str) -> None:
        """Asked on every poll while the change stands: request (and wake) only once."""
        if not self.rejoin_needed:
            self.request_rejoin(reason)

    def _subscription_metadata(self) -> list[dict[str, Any]]:
        """One protocol per assignor, each carrying this member's Subscription."""
        subs = self.subscriptions
        topics = sorted(subs.subscription)
        self.joined_subscription = frozenset(topics)
        owned = sorted_partitions(subs.assigned_partitions())
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
        version = self.discovery.api_version(ApiKey.JOIN_GROUP)
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
        return self.discovery.send(ApiKey.JOIN_GROUP, body, timeout_ms=timeout_ms)

    def _initiate_join_group(self) -> None:
        with self.cond:
            self.state = MemberState.PREPARING_REBALANCE
            self._heartbeats_enabled = False
            generation = self.generation
        future = self._send_join_group()
        future.add_done_callback(lambda _f: self._wakeup())
        self._pending = ("join", future, generation)

    def ensure_active_group(self, deadline: float) -> bool:
        """Join (or rejoin) and sync; False if ``deadline`` passes first (state is kept).

        ``poll`` passes a deadline of now: each step of the rebalance is started or
        collected without waiting, and the consumer keeps fetching meanwhile.
        """
        if not self.discovery.ensure_ready(deadline):
            return False
        self._start_heartbeat_thread_if_needed()
        return self._join_group_if_needed(deadline)

    def _join_group_if_needed(self, deadline: float) -> bool:
        """Java's joinGroupIfNeeded: prepare, JoinGroup, SyncGroup, complete, as far as
        ``deadline`` allows; every step in flight is kept for the next call."""
        while self.rejoin_needed_or_pending():
            if not self.discovery.ensure_ready(deadline):
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
                self.discovery.mark_coordinator_unknown(f"{kind} request failed: {exc}")
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

    def _handle_join_response(self, response: Any, sent: Generation) -> KafkaError | None:
        code = int(response.error_code)
        if code == ErrorCode.NONE:
            protocol_type = getattr(response, "protocol_type", None)
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE:
                return make_error(
                    ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"protocol type {protocol_type}"
                )
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
                if self._heartbeat_thread is not None:
                    self.heartbeat.reset_timeouts()
                    self._heartbeats_enabled = True
                    self.cond.notify_all()
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
        if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            return make_error(code, "JoinGroup")
        if code == ErrorCode.UNKNOWN_MEMBER_ID:
            with self.cond:
                if self.generation == sent:  # else the generation moved on meanwhile
                    self._reset_state_and_rejoin(
                        "encountered UNKNOWN_MEMBER_ID from JOIN_GROUP", True
                    )
            return _RetryNow("unknown member id")
        if code in COORDINATOR_MOVED:
            self.discovery.mark_coordinator_unknown(f"JoinGroup error {code}")
            return make_error(code, "JoinGroup")
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            with self.cond:
                self.generation = Generation(-1, str(response.member_id), None)
            log.info(
                "group %s: broker assigned member id %s; rejoining",
                self.group_id,
                response.member_id,
            )
            return _RetryNow("member id required")
        if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
            return _RetryNow("rebalance in progress")
        if code == ErrorCode.FENCED_INSTANCE_ID:
            return make_error(code, f"group_instance_id {self.group_instance_id!r} was fenced")
        if code == ErrorCode.GROUP_MAX_SIZE_REACHED:
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
        version = self.discovery.api_version(ApiKey.SYNC_GROUP)
        if self.group_instance_id is not None and version < 3:
            raise UnsupportedVersionError("group_instance_id needs SyncGroup v3+")
        return self.discovery.send(
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
        code = int(response.error_code)
        if code == ErrorCode.NONE:
            ptype = getattr(response, "protocol_type", None)
            pname = getattr(response, "protocol_name", None)
            if ptype is not None and ptype != CONSUMER_PROTOCOL_TYPE:
                self.request_rejoin("inconsistent protocol type")
                return make_error(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"protocol type {ptype}")
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
                    return make_error(
                        ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"protocol name {pname}"
                    )
                self.state = MemberState.STABLE
                self.rejoin_needed = False
                self.rejoin_reason = ""
            self._join_result = (sent, bytes(response.assignment))
            return None
        self.request_rejoin(f"SyncGroup error {code}")
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            return _RetryNow("group began another rebalance")
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            with self.cond:
                if self.generation == sent:  # else the heartbeat thread reset it already
                    # Keep the member id on ILLEGAL_GENERATION: the member may still be valid.
                    self._reset_state_and_rejoin(
                        f"encountered {make_error(code)} from SYNC_GROUP",
                        reset_member_id=code != ErrorCode.ILLEGAL_GENERATION,
                    )
            return _RetryNow("sync failed")
        if code in COORDINATOR_MOVED:
            self.discovery.mark_coordinator_unknown(f"SyncGroup error {code}")
            return make_error(code, "SyncGroup")
        return make_error(code, f"SyncGroup of group {self.group_id!r}")

    def _on_join_prepare(self, generation: Generation, deadline: float) -> bool:
        """Before (re)joining: commit, then revoke or lose partitions (seed 000 §2.4a).

        False while the commit before the rebalance is still pending (the next ``poll``
        goes on with it); the partitions are revoked only after it.
        """
        if self._join_prepare_deadline is None:
            self._join_prepare_deadline = time.monotonic() + self.rebalance_timeout_ms / 1000
        if self.commits.auto_commit_enabled and not self._commit_before_rebalance(deadline):
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
                exception = self.invoke_listener("on_partitions_lost", owned)
                subs.assign_from_subscribed([])
        elif self.protocol is RebalanceProtocol.COOPERATIVE:
            revoked = {tp for tp in owned if not self._subscribed_to(tp.topic)}
            if revoked:
                exception = self.invoke_listener("on_partitions_revoked", revoked)
                subs.assign_from_subscribed(owned - revoked)
        else:
            exception = self.invoke_listener("on_partitions_revoked", owned)
            subs.assign_from_subscribed([])
        with self.cond:
            self.is_leader = False
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
                _sleep_until(min(deadline, give_up_at), self._retry_join_at - time.monotonic())
                if time.monotonic() < self._retry_join_at:
                    return time.monotonic() >= give_up_at
            if self.protocol is RebalanceProtocol.EAGER:
                self.subscriptions.mark_pending_revocation(self.subscriptions.assigned_list())
            offsets = self.commits.all_consumed()
            if not offsets:
                return True
            future, sent = self.commits.send_offset_commit(offsets)
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
        error = self.commits.commit_result(future, sent)
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
                first = self.invoke_listener("on_partitions_revoked", revoked)
                self.request_rejoin(
                    f"need to revoke partitions {sorted(map(str, revoked))} as indicated by the "
                    "current assignment and re-join"
                )
        self._absorb_assigned_topics(assigned)
        try:
            assignor.on_assignment(assignment, generation.generation_id)
        except Exception as exc:
            first = first or exc
        subs.assign_from_subscribed(sorted_partitions(assigned))
        self.commits.new_assignment()
        exc2 = self.invoke_listener("on_partitions_assigned", added)
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
                exc = self.invoke_listener("on_partitions_lost", dropped)
            else:
                exc = self.invoke_listener("on_partitions_revoked", dropped)
            subs.assign_from_subscribed([])
            if exc is not None:
                raise KafkaError(f"user rebalance callback raised: {exc!r}") from exc

    # ================================================================ poll

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
            if meta.error_code == ErrorCode.NONE
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
        self.commits.invoke_completed_callbacks()
        deadline = time.monotonic() + max(0.0, timeout_s)
        subs = self.subscriptions
        if subs.has_auto_assigned_partitions:
            if self.protocol is None:
                raise IllegalStateError("partition_assignment_strategy is empty")
            self._maybe_update_subscription_metadata()
            self._poll_heartbeat()
            if self.discovery.coordinator_unknown() and not self.discovery.ensure_ready(deadline):
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
        self.commits.maybe_auto_commit_async()
        return True

    def time_to_next_poll(self) -> float:
        """Seconds until ``poll`` is needed again (heartbeats, auto-commit, a join backoff)."""
        wait = (
            float("inf") if self.state_has_not_joined() else self.heartbeat.time_to_next_heartbeat()
        )
        rebalancing = (
            self.rejoin_needed or self.awaiting_response() or self._join_result is not None
        )
        if self.commits.auto_commit_enabled and not rebalancing:
            # No auto-commit runs until the rebalance is done: its timer, expired
            # meanwhile, must not turn the consumer's wait into a busy loop.
            wait = min(wait, self.commits.time_to_next_auto_commit())
        backoff = self._retry_join_at - time.monotonic()
        if backoff > 0 and not self.awaiting_response():
            wait = min(wait, backoff)
        return wait

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

    # ================================================================ what commits ask

    def commit_refused(self, code: int, sent: Generation) -> BaseException | None:
        """OffsetCommit errors about the member, as Java's OffsetCommitResponseHandler."""
        if code == ErrorCode.FENCED_INSTANCE_ID:
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
        if code == ErrorCode.REBALANCE_IN_PROGRESS:
            self.request_rejoin("offset commit failed since group is already rebalancing")
            return rebalancing_error()
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.ILLEGAL_GENERATION):
            with self.cond:
                if self.generation != sent and self.state is MemberState.PREPARING_REBALANCE:
                    return RebalanceInProgressCommitError(
                        "Offset commit cannot be completed since the consumer member's "
                        "generation is already stale: it has joined another "
                        "rebalance. Call poll() to complete it and commit again."
                    )
                if self.generation == sent and sent != NO_GENERATION:
                    self._reset_state_and_rejoin(
                        f"encountered {make_error(code)} from OFFSET_COMMIT",
                        reset_member_id=code != ErrorCode.ILLEGAL_GENERATION,
                    )
            return CommitFailedError()
        return None

    def offset_fetch_member(self) -> Generation | None:
        return None  # a classic OffsetFetch does not say who fetches

    def offset_fetch_refused(self, code: int) -> KafkaError | None:
        return None


class _RetryNow(KafkaError):
    """Internal: join again immediately (no backoff)."""

    retriable = True


__all__ = ["ConsumerCoordinator", "MemberState"]
