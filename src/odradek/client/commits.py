"""A group's committed offsets: commits (sync, async, auto) and OffsetFetch.

The commit half of Java's ``ConsumerCoordinator`` (seed 004, section 4) and of Java 4's
``CommitRequestManager``, for both kinds of membership (classic and KIP-848):

* **Committed offsets** of newly assigned partitions come from OffsetFetch
  (``require_stable`` on v7+), cached across polls while the request is in flight.
* ``commit_sync`` retries retriable errors until its timeout and raises
  ``CommitFailedError`` when the member is no longer part of the group, and
  ``RebalanceInProgressCommitError`` (its own type: retriable, but only after a
  ``poll``, so it is raised at once) while the group rebalances: as in Java, a member
  commits only when it is stable, and a cooperative member that consumed during a
  rebalance commits after it (or in ``on_partitions_revoked``).
* ``commit_async`` callbacks run on the application thread in the next ``poll`` /
  commit call. Auto-commit runs every ``auto_commit_interval_ms`` inside ``poll``,
  before every rebalance (the membership asks) and on close.

What an error says about the *member* (a fenced instance id, an old generation or
member epoch, a rebalance) is the membership's to judge: ``CommitMembership`` is the
interface this object asks, implemented by ``ConsumerCoordinator`` (classic) and
``ConsumerGroupMembership`` (KIP-848). The coordinator connection is the membership's
``CoordinatorDiscovery``; the lock is the membership's.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from odradek.client.config import ConsumerConfig
from odradek.client.discovery import CoordinatorDiscovery
from odradek.client.errors import (
    COORDINATOR_MOVED,
    CommitFailedError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    RebalanceInProgressCommitError,
    RetriableCommitFailedError,
    UnsupportedVersionError,
    make_error,
    retriable_without_poll,
)
from odradek.client.heartbeat import Timer
from odradek.client.structs import NO_GENERATION, Generation, OffsetAndMetadata, TopicPartition
from odradek.client.subscription import SubscriptionState
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], Any]


def rebalancing_error() -> RebalanceInProgressCommitError:
    """A commit refused with REBALANCE_IN_PROGRESS (Java's message)."""
    return RebalanceInProgressCommitError(
        "Offset commit cannot be completed since the consumer group is executing "
        "a rebalance at the moment. You can try completing the rebalance by "
        "calling poll() and then retry commit again."
    )


class CommitMembership(Protocol):
    """What ``OffsetCommits`` asks of the group membership it commits for."""

    @property
    def generation(self) -> Generation:
        """The member's generation now (a cached OffsetFetch is reused only within it)."""
        ...

    def generation_if_stable(self) -> Generation | None:
        """The generation (member epoch) to commit with; None when not in a stable group."""
        ...

    def rebalance_in_progress(self) -> bool: ...

    def commit_refused(self, code: int, sent: Generation) -> BaseException | None:
        """The error for an OffsetCommit error ``code`` about the member (sent with
        ``sent``), with its effect on the membership; None when ``code`` is not one."""
        ...

    def offset_fetch_member(self) -> Generation | None:
        """Who fetches (OffsetFetch v9, KIP-848); None for a classic member."""
        ...

    def offset_fetch_refused(self, code: int) -> KafkaError | None:
        """The error for an OffsetFetch error ``code`` about the member; None if not one."""
        ...


def _tp(value: Any) -> TopicPartition:
    if isinstance(value, TopicPartition):
        return value
    topic, partition = value
    return TopicPartition(str(topic), int(partition))


def _sleep_until(deadline: float, seconds: float) -> None:
    time.sleep(max(0.0, min(seconds, deadline - time.monotonic())))


class OffsetCommits:
    """Commits and committed offsets of one group member (see module docs)."""

    def __init__(
        self,
        member: CommitMembership,
        discovery: CoordinatorDiscovery,
        subscriptions: SubscriptionState,
        config: ConsumerConfig,
        cond: threading.Condition,
    ) -> None:
        self.member = member
        self.discovery = discovery
        self.subscriptions = subscriptions
        self.config = config
        self.group_id: str = discovery.group_id
        self.group_instance_id: str | None = config.group_instance_id or None
        self._cond = cond  # the member's lock: guards the async-commit bookkeeping
        self.auto_commit_enabled = bool(config.enable_auto_commit)
        self.auto_commit_interval_s = config.auto_commit_interval_ms / 1000
        self._next_auto_commit = Timer(time.monotonic, self.auto_commit_interval_s)
        self._completed: deque[
            tuple[CommitCallback | None, dict[TopicPartition, OffsetAndMetadata], Any]
        ] = deque()
        self._pending_async = 0
        self._pending_offset_fetch: tuple[frozenset[TopicPartition], Generation, Future[Any]] | (
            None
        ) = None

    def _backoff_s(self) -> float:
        return self.config.retry_backoff_ms / 1000

    # ================================================================ the assignment

    def new_assignment(self) -> None:
        """A new assignment is in: the auto-commit interval starts again, and an offset
        fetch in flight for the old one is not reused."""
        if self.auto_commit_enabled:
            self._next_auto_commit.reset(self.auto_commit_interval_s)
        self._pending_offset_fetch = None

    def time_to_next_auto_commit(self) -> float:
        return self._next_auto_commit.remaining()

    # ================================================================ committed offsets

    def _offset_fetch_body(self, tps: list[TopicPartition]) -> Callable[[int], dict[str, Any]]:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(tps):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]

        def body(version: int) -> dict[str, Any]:
            out = {
                "group_id": self.group_id,
                "topics": topics,
                "require_stable": True,
                "groups": [{"group_id": self.group_id, "topics": topics}],
            }
            member = self.member.offset_fetch_member()
            if member is not None:
                # v9: who fetches; a stale epoch gets STALE_MEMBER_EPOCH (retried).
                for group in out["groups"]:
                    group["member_id"] = member.member_id
                    group["member_epoch"] = member.generation_id
            return out

        return body

    def _parse_offset_fetch(
        self, response: Any, wanted: frozenset[TopicPartition]
    ) -> tuple[dict[TopicPartition, OffsetAndMetadata | None], KafkaError | None]:
        if hasattr(response, "groups"):
            group = next((g for g in response.groups if g.group_id == self.group_id), None)
            if group is None:
                return {}, make_error(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, "OffsetFetch: group missing"
                )
            top, topics = int(group.error_code), group.topics
        else:
            top, topics = int(getattr(response, "error_code", 0)), response.topics
        if top != ErrorCode.NONE:
            return {}, self._offset_fetch_error(top)
        out: dict[TopicPartition, OffsetAndMetadata | None] = {}
        for t in topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, int(p.partition_index))
                if tp not in wanted:
                    continue
                code = int(p.error_code)
                if code == ErrorCode.UNSTABLE_OFFSET_COMMIT:
                    return {}, make_error(code, f"pending transactional offset for {tp}")
                if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    out[tp] = None
                    continue
                if code != ErrorCode.NONE:
                    return {}, self._offset_fetch_error(code)
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
        refused = self.member.offset_fetch_refused(code)
        if refused is not None:
            return refused
        if code in COORDINATOR_MOVED:
            self.discovery.mark_coordinator_unknown(f"OffsetFetch error {code}")
        return make_error(code, f"OffsetFetch for group {self.group_id!r}")

    def fetch_committed_offsets(
        self, partitions: Iterable[TopicPartition], deadline: float
    ) -> dict[TopicPartition, OffsetAndMetadata | None] | None:
        """Committed offsets (None values: nothing committed); None if ``deadline`` passes."""
        wanted = frozenset(partitions)
        if not wanted:
            return {}
        while True:
            if not self.discovery.ensure_ready(deadline):
                return None
            pending = self._pending_offset_fetch
            generation = self.member.generation
            if pending is not None and pending[0] == wanted and pending[1] == generation:
                future = pending[2]
            else:
                body = self._offset_fetch_body(list(wanted))
                future = self.discovery.send(ApiKey.OFFSET_FETCH, body)
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
                    self.discovery.mark_coordinator_unknown(f"OffsetFetch failed: {exc}")
                if time.monotonic() >= deadline:
                    return None
                _sleep_until(deadline, self._backoff_s())
                continue
            self._pending_offset_fetch = None
            offsets, error = self._parse_offset_fetch(response, wanted)
            if error is None:
                return offsets
            if not error.retriable:
                raise error
            if time.monotonic() >= deadline:
                return None
            _sleep_until(deadline, self._backoff_s())

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

    def committed(
        self, partitions: Iterable[Any], timeout_s: float
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        tps = {_tp(p) for p in partitions}
        offsets = self.fetch_committed_offsets(tps, time.monotonic() + max(0.0, timeout_s))
        if offsets is None:
            raise KafkaTimeoutError(f"committed offsets of {sorted(map(str, tps))} not fetched")
        return offsets

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

    def send_offset_commit(
        self, offsets: dict[TopicPartition, OffsetAndMetadata]
    ) -> tuple[Future[Any], Generation]:
        """Send OffsetCommit; a failed future when the member is not in a stable group."""
        future: Future[Any]
        if self.subscriptions.has_auto_assigned_partitions:
            generation = self.member.generation_if_stable()
            instance = self.group_instance_id
            if generation is None:
                future = Future()
                if self.member.rebalance_in_progress():
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
            version = self.discovery.api_version(ApiKey.OFFSET_COMMIT)
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
        return self.discovery.send(ApiKey.OFFSET_COMMIT, body), generation

    def commit_result(self, future: Future[Any], sent: Generation) -> BaseException | None:
        """Map a completed OffsetCommit future to None (success) or the error."""
        exc = future.exception()
        if exc is not None:
            if isinstance(exc, (KafkaConnectionError, KafkaTimeoutError)):
                self.discovery.mark_coordinator_unknown(f"OffsetCommit failed: {exc}")
            return exc
        response = future.result()
        for t in response.topics:
            for p in t.partitions:
                code = int(p.error_code)
                if code == ErrorCode.NONE:
                    continue
                refused = self.member.commit_refused(code, sent)
                if refused is not None:
                    return refused
                if code in COORDINATOR_MOVED or code == ErrorCode.REQUEST_TIMED_OUT:
                    self.discovery.mark_coordinator_unknown(f"OffsetCommit error {code}")
                tp = TopicPartition(t.name, int(p.partition_index))
                return make_error(code, f"commit of {tp}")
        return None

    def commit_sync(
        self, offsets: Mapping[Any, int | OffsetAndMetadata] | None, timeout_s: float
    ) -> None:
        """Commit (current positions when ``offsets`` is None); raise on failure / timeout."""
        self.invoke_completed_callbacks()
        normalized = self.all_consumed() if offsets is None else self._normalize_offsets(offsets)
        if not normalized:
            return
        deadline = time.monotonic() + max(0.0, timeout_s)
        last: BaseException | None = None
        while True:
            if not self.discovery.ensure_ready(deadline):
                raise KafkaTimeoutError(
                    f"commit timed out: coordinator not available (last error: "
                    f"{last or self.discovery.last_lookup_error})"
                )
            future, sent = self.send_offset_commit(normalized)
            try:
                future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                raise KafkaTimeoutError("commit timed out waiting for the coordinator") from None
            except Exception:  # mapped by commit_result below
                pass
            error = self.commit_result(future, sent)
            self.invoke_completed_callbacks()
            if error is None:
                return
            if not retriable_without_poll(error):
                raise error  # RebalanceInProgressCommitError included: only poll ends it
            last = error
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"commit timed out; last error: {error}") from error
            _sleep_until(deadline, self._backoff_s())

    def commit_async(
        self,
        offsets: Mapping[Any, int | OffsetAndMetadata] | None = None,
        callback: CommitCallback | None = None,
    ) -> None:
        """Commit without waiting; ``callback(offsets, error)`` runs in a later poll."""
        self.invoke_completed_callbacks()
        normalized = self.all_consumed() if offsets is None else self._normalize_offsets(offsets)
        if self.discovery.coordinator_unknown():
            try:
                ready = self.discovery.ensure_ready(
                    time.monotonic() + self.config.request_timeout_ms / 1000
                )
            except KafkaError as exc:
                self._completed.append((callback, normalized, exc))
                return
            if not ready:
                self._completed.append(
                    (
                        callback,
                        normalized,
                        RetriableCommitFailedError("coordinator not available for the commit"),
                    )
                )
                return
        if not normalized:
            self._completed.append((callback, normalized, None))
            return
        try:
            future, sent = self.send_offset_commit(normalized)
        except KafkaError as exc:
            self._completed.append((callback, normalized, exc))
            return
        with self._cond:
            self._pending_async += 1

        def done(f: Future[Any]) -> None:
            error = self.commit_result(f, sent)
            if retriable_without_poll(error):
                error = RetriableCommitFailedError(f"commit failed with a retriable error: {error}")
            with self._cond:
                self._pending_async -= 1
                self._completed.append((callback, normalized, error))
                self._cond.notify_all()

        future.add_done_callback(done)

    def invoke_completed_callbacks(self) -> None:
        """Run the callbacks of finished async commits (on the application thread)."""
        while True:
            try:
                callback, offsets, error = self._completed.popleft()
            except IndexError:
                return
            if callback is None:
                if error is not None:
                    log.warning("group %s: offset commit failed: %s", self.group_id, error)
                continue
            callback(offsets, error)

    # ================================================================ auto-commit

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

    def maybe_auto_commit_async(self) -> None:
        """Inside ``poll``: commit the positions when the auto-commit interval has passed."""
        if self.auto_commit_enabled and self._next_auto_commit.expired():
            self._next_auto_commit.reset(self.auto_commit_interval_s)
            offsets = self.all_consumed()
            if offsets:
                self.commit_async(offsets, self._auto_commit_done)

    def auto_commit_sync(self, timeout_s: float) -> None:
        """Before revoking partitions and on close: commit the positions, log a failure."""
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

    def commit_on_close(self, deadline: float) -> None:
        """Auto-commit, then wait (until ``deadline``) for async commits and run their
        callbacks."""
        self.auto_commit_sync(max(0.0, deadline - time.monotonic()))
        while self._pending_async > 0 and time.monotonic() < deadline:
            with self._cond:
                self._cond.wait(min(0.05, max(0.0, deadline - time.monotonic())))
        self.invoke_completed_callbacks()
