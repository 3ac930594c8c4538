"""What every kind of group member shares (Java's ``AbstractCoordinator`` skeleton).

A ``Consumer`` with a ``group_id`` has one group member: ``ConsumerCoordinator``
(``coordinator.py``, the classic protocol: JoinGroup / SyncGroup / Heartbeat) or
``ConsumerGroupMembership`` (``membership.py``, KIP-848: ConsumerGroupHeartbeat). Both
derive from ``GroupMember``, which owns:

* the **lock** (``cond``, a condition over a re-entrant lock) that guards the
  membership state; the heartbeat thread and response callbacks on connection reader
  threads take it, the application thread takes it around state changes but never
  while waiting for the network or running user callbacks;
* the **heartbeat timers** (``heartbeat.Heartbeat``) and the **heartbeat thread**
  (``heartbeat.HeartbeatThread``): the member starts the thread when it first joins,
  stops and joins it on close, and is the ``HeartbeatOwner`` the thread asks for its
  next duty (``heartbeat_step``), so whether heartbeats are enabled and a fatal
  heartbeat error are the member's state, not the thread's;
* its collaborators, each with an explicit interface: ``discovery``
  (``discovery.CoordinatorDiscovery``: FindCoordinator and the coordinator
  connection) and ``commits`` (``commits.OffsetCommits``: commits, auto-commit and
  committed offsets, which asks the member through ``commits.CommitMembership``);
* closing: auto-commit, revoke (the listener), leave, stop heartbeating, disconnect.

The membership itself (``poll``, joining, heartbeats, leaving, what a commit or offset
fetch error says about the member) is each subclass's.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any

from odradek.client.assignors import (
    Assignor,
    RebalanceProtocol,
    get_assignor,
    select_rebalance_protocol,
)
from odradek.client.cluster import KafkaClient
from odradek.client.commits import OffsetCommits
from odradek.client.config import ConsumerConfig
from odradek.client.discovery import CoordinatorDiscovery
from odradek.client.errors import IllegalStateError, KafkaError
from odradek.client.heartbeat import Heartbeat, HeartbeatThread, Wait
from odradek.client.structs import NO_GENERATION, Generation, TopicPartition
from odradek.client.subscription import SubscriptionState

log = logging.getLogger(__name__)

_LISTENER_VERBS = {
    "on_partitions_revoked": "revoking",
    "on_partitions_assigned": "adding newly assigned partitions",
    "on_partitions_lost": "lost",
}


def sorted_partitions(tps: Iterable[TopicPartition]) -> list[TopicPartition]:
    return sorted(tps, key=lambda tp: (tp.topic, tp.partition))


class GroupMember:
    """The shared skeleton of a group member (see module docs); subclasses add the
    membership protocol."""

    heartbeat_thread_name = "odradek-heartbeat"

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
        # The heartbeat thread and the state it acts on (guarded by cond).
        self._heartbeat_thread: HeartbeatThread | None = None
        self._heartbeats_enabled = False
        self._heartbeat_failure: BaseException | None = None
        # Ends the consumer's wait for fetches when a rebalance step can go on.
        self._wakeup: Callable[[], None] = wakeup or (lambda: None)
        self.generation: Generation = NO_GENERATION
        self._closed = False
        self.discovery = CoordinatorDiscovery(
            client, config, self.group_id, self.cond, on_found=self.heartbeat.reset_session_timeout
        )
        self.commits = OffsetCommits(self, self.discovery, subscriptions, config, self.cond)

    def _backoff_s(self) -> float:
        return self.config.retry_backoff_ms / 1000

    # ================================================================ the membership

    @property
    def member_id(self) -> str:
        return self.generation.member_id

    def state_has_not_joined(self) -> bool:
        raise NotImplementedError

    def rebalance_in_progress(self) -> bool:
        raise NotImplementedError

    def generation_if_stable(self) -> Generation | None:
        raise NotImplementedError

    def request_rejoin(self, reason: str) -> None:
        raise NotImplementedError

    def awaiting_response(self) -> bool:
        """A rebalance step waits for the coordinator (its answer calls ``wakeup``)."""
        raise NotImplementedError

    def poll(self, timeout_s: float) -> bool:
        """Drive the membership and auto-commit; True when the member may fetch."""
        raise NotImplementedError

    def time_to_next_poll(self) -> float:
        """Seconds until ``poll`` is needed again (heartbeats, auto-commit, a backoff)."""
        raise NotImplementedError

    def on_leave_prepare(self) -> None:
        """Before leaving (close / unsubscribe): revoke, or lose if no longer a member."""
        raise NotImplementedError

    def maybe_leave_group(self, reason: str) -> Future[Any] | None:
        """Leave the group (when the member should tell the coordinator); lock-safe."""
        raise NotImplementedError

    def on_unsubscribe(self) -> None:
        """Java's unsubscribe: revoke (listener), leave the group."""
        raise NotImplementedError

    # What the commits ask (commits.CommitMembership).

    def commit_refused(self, code: int, sent: Generation) -> BaseException | None:
        raise NotImplementedError

    def offset_fetch_member(self) -> Generation | None:
        raise NotImplementedError

    def offset_fetch_refused(self, code: int) -> KafkaError | None:
        raise NotImplementedError

    # ================================================================ the listener

    def invoke_listener(self, method: str, partitions: set[TopicPartition]) -> BaseException | None:
        """Call the rebalance listener's ``method`` (on the application thread); what it
        raised, if anything."""
        listener = self.subscriptions.listener
        log.info(
            "group %s: %s %s",
            self.group_id,
            _LISTENER_VERBS[method],
            ", ".join(map(str, sorted_partitions(partitions))) or "(none)",
        )
        if listener is None:
            return None
        try:
            getattr(listener, method)(set(partitions))
        except Exception as exc:
            log.error("group %s: user %s callback failed: %r", self.group_id, method, exc)
            return exc
        return None

    # ================================================================ the heartbeat thread

    def _start_heartbeat_thread_if_needed(self) -> None:
        with self.cond:
            if self._heartbeat_thread is None and not self._closed:
                self._heartbeats_enabled = False
                self._heartbeat_failure = None
                self._heartbeat_thread = HeartbeatThread(
                    self, f"{self.heartbeat_thread_name}-{self.group_id}"
                )
                self._heartbeat_thread.start()

    def _stop_heartbeat_thread(self, *, join: bool) -> None:
        thread = self._heartbeat_thread
        if thread is not None:
            thread.stop()
            if join and thread is not threading.current_thread():
                thread.join(timeout=2.0)

    def heartbeat_step(self) -> Wait:
        """Heartbeat thread, lock held: the next heartbeat duty (``HeartbeatOwner``)."""
        raise NotImplementedError

    def look_up_coordinator(self) -> float:
        """Heartbeat thread, lock not held: one lookup; seconds to wait after it."""
        if not self._closed:
            self.discovery.look_up_quietly()
        return self.heartbeat.retry_backoff_s

    def heartbeat_thread_failed(self, error: BaseException) -> None:
        """Heartbeat thread, lock held: the loop failed; ``poll`` raises ``error``."""
        self._heartbeat_failure = error
        self._heartbeats_enabled = False

    # ================================================================ close

    def close(self, timeout_s: float) -> None:
        """Auto-commit, listener revoke, leave the group, stop heartbeats, disconnect."""
        if self._closed:
            return
        deadline = time.monotonic() + max(0.0, timeout_s)
        first: BaseException | None = None
        try:
            self.commits.commit_on_close(deadline)
        except KafkaError as exc:
            first = exc
        self._stop_heartbeat_thread(join=True)
        try:
            self.on_leave_prepare()
        except KafkaError as exc:
            first = first or exc
        leave = self.maybe_leave_group("the consumer is being closed")
        if leave is not None:
            with contextlib.suppress(Exception):
                leave.result(timeout=max(0.0, min(deadline - time.monotonic(), 5.0)))
        self._closed = True
        self.discovery.close()
        if first is not None:
            raise first

    def abandon(self) -> None:
        """Test hook: stop like a killed process (no commit, no leave, no callbacks)."""
        self._closed = True
        self._stop_heartbeat_thread(join=False)
        self.discovery.close()
