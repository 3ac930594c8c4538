"""The fetcher: Fetch requests to partition leaders, buffered responses, positions.

Follows the Java client's ``Fetcher`` (seed 004, section 2.3):

* ``send_fetches`` sends one Fetch request to each leader that has fetchable
  partitions and no fetch already in flight. A partition is fetchable when it
  is assigned, not paused, has a position, and has no undrained data buffered
  here (so a partition that returned more than ``max_poll_records`` is not
  fetched again until its records are handed out). Each request carries
  ``fetch_min_bytes``, ``fetch_max_wait_ms``, ``fetch_max_bytes`` and, per
  partition, ``max_partition_fetch_bytes``.
* Fetch sessions (KIP-227, ``fetch_session.py``): per broker, the first fetch
  is full and opens a session; the next ones list only partitions whose offset
  changed and those to forget. A broker without sessions (session id 0 in its
  answers, or Fetch below v7) keeps getting full fetches.
* Responses are parsed on the connection's reader thread without copying
  their records (``protocol.fetch``) and only queued (``CompletedFetch``);
  batches are decoded on the consumer thread, one at a time, as
  ``fetched_records`` hands out at most ``max_records`` records, advancing
  positions as it goes; records become objects only when the application
  reads them (``fetched.py``).
* Pipelining: the consumer calls ``send_fetches`` again right before
  returning records from ``poll``, so the next fetch is on the wire while the
  application processes the current records.
* A fetch whose offset no longer equals the partition's position (the user
  sought meanwhile) or whose partition is no longer assigned, paused or pending
  revocation (an EAGER member committing before a rebalance) is dropped.
* ``wait_for_fetches`` also ends on ``wakeup()``, which the group coordinator calls
  when a rebalance step can go on.

Batches are decoded by ``protocol.columns`` (every codec Kafka has), CRCs
checked when ``check_crcs``; control batches are skipped, with read_committed
the batches of aborted transactions too (``client/read_committed.py``, one
filter per fetched partition), and records before the position (a compressed
batch fetched from its middle) are dropped.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from odradek.client.cluster import KafkaClient
from odradek.client.config import ConsumerConfig
from odradek.client.errors import (
    STALE_METADATA,
    KafkaError,
    OffsetOutOfRangeError,
    make_error,
)
from odradek.client.fetch_session import FetchRequestData, FetchSessionHandler, PartitionFetch
from odradek.client.fetched import CompletedFetch, RecordList
from odradek.client.offsets import list_offsets
from odradek.client.read_committed import ReadCommittedFilter
from odradek.client.structs import TopicPartition
from odradek.client.subscription import (
    NoOffsetForPartitionError,
    OffsetResetStrategy,
    SubscriptionState,
)
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import EncodedBody
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch import encode_fetch_request

log = logging.getLogger(__name__)


class Fetcher:
    def __init__(
        self, client: KafkaClient, subscriptions: SubscriptionState, config: ConsumerConfig
    ) -> None:
        self._client = client
        self._subs = subscriptions
        self.config = config
        self._cond = threading.Condition()
        self._completed: deque[CompletedFetch] = deque()
        self._next_in_line: CompletedFetch | None = None
        self._nodes_in_flight: set[int] = set()
        self._sessions: dict[int, FetchSessionHandler] = {}  # by node; used under _cond
        self._woken = False
        self._isolation = 1 if config.isolation_level == "read_committed" else 0
        self._key_deserializer: Callable[[bytes | None], Any] | None = config.key_deserializer
        self._value_deserializer: Callable[[bytes | None], Any] | None = config.value_deserializer
        subscriptions.add_assignment_listener(self._on_unassigned)

    # ------------------------------------------------------------------ sending

    def _buffered_partitions(self) -> set[TopicPartition]:
        with self._cond:
            out = {cf.tp for cf in self._completed}
            if self._next_in_line is not None and not self._next_in_line.consumed:
                out.add(self._next_in_line.tp)
            return out

    def send_fetches(self) -> int:
        """Send a Fetch to every leader with fetchable partitions and none in flight."""
        buffered = self._buffered_partitions()
        cluster = self._client.cluster
        by_node: dict[int, list[TopicPartition]] = {}
        unknown_leader = False
        with self._cond:
            in_flight = set(self._nodes_in_flight)
        for tp in self._subs.fetchable_partitions(lambda tp: tp in buffered):
            leader = cluster.leader_for(tp)
            if leader < 0:
                unknown_leader = True
                continue
            if leader not in in_flight:
                by_node.setdefault(leader, []).append(tp)
        if unknown_leader:
            self._client.request_update()
        sent = 0
        max_bytes = self.config.max_partition_fetch_bytes
        busy_nodes = {cluster.leader_for(tp) for tp in buffered}
        for node, tps in by_node.items():
            wanted: dict[TopicPartition, PartitionFetch] = {}
            caught_up = True
            for tp in tps:
                try:
                    pos = self._subs.position(tp)
                except KafkaError:
                    continue
                if pos is not None:
                    wanted[tp] = PartitionFetch(pos, max_bytes)
                    high_watermark = self._subs.state(tp).high_watermark
                    caught_up = caught_up and high_watermark is not None and pos >= high_watermark
            if not wanted or (caught_up and node in busy_nodes):
                # Only partitions at their log end, while others of this broker still have
                # records buffered: the broker would park this fetch up to fetch_max_wait_ms,
                # and the others could not be fetched meanwhile (one fetch per broker).
                # Send it once they are drained, with them.
                continue
            with self._cond:
                self._nodes_in_flight.add(node)
                session = self._sessions.setdefault(node, FetchSessionHandler())
            built: list[FetchRequestData] = []

            def body(version: int, session=session, wanted=wanted, built=built) -> EncodedBody:
                # Built once the connection knows the broker's Fetch version (sessions: v7+).
                with self._cond:
                    request = session.build(wanted, version)
                built.append(request)
                return self._fetch_body(request, version)

            future = self._client.send(
                node,
                ApiKey.FETCH,
                body,
                timeout_ms=self.config.request_timeout_ms + self.config.fetch_max_wait_ms,
            )
            future.add_done_callback(functools.partial(self._on_response, node, built))
            sent += 1
        return sent

    def _fetch_body(self, request: FetchRequestData, version: int) -> EncodedBody:
        topics: dict[str, list[tuple[int, int, int]]] = {}
        for tp, want in request.to_send.items():
            topics.setdefault(tp.topic, []).append(
                (tp.partition, want.fetch_offset, want.max_bytes)
            )
        forgotten: dict[str, list[int]] = {}
        for tp in request.to_forget:
            forgotten.setdefault(tp.topic, []).append(tp.partition)
        return encode_fetch_request(
            version,
            max_wait_ms=self.config.fetch_max_wait_ms,
            min_bytes=self.config.fetch_min_bytes,
            max_bytes=self.config.fetch_max_bytes,
            isolation_level=self._isolation,
            session_id=request.session_id,
            session_epoch=request.epoch,
            topics=list(topics.items()),
            forgotten=list(forgotten.items()),
            rack_id=self.config.client_rack,
        )

    def _on_response(self, node: int, built: list[FetchRequestData], future: Future[Any]) -> None:
        """Reader thread: queue the partition results, nothing more."""
        fetches: list[CompletedFetch] = []
        exc = future.exception()
        with self._cond:
            session = self._sessions.setdefault(node, FetchSessionHandler())
            if exc is not None or not built:
                session.handle_error()
                usable = False
            else:
                request = built[0]
                response = future.result()
                top_error = int(getattr(response, "error_code", 0))
                usable = session.handle_response(
                    request, top_error, int(getattr(response, "session_id", 0))
                )
        if exc is not None:
            log.debug("fetch from node %s failed: %s", node, exc)
            self._client.request_update()
        elif not usable:
            log.debug("fetch from node %s failed: error %s", node, top_error)
            if top_error in STALE_METADATA:
                self._client.request_update()
        else:
            partitions = request.session_partitions
            for t in response.responses:
                for p in t.partitions:
                    tp = TopicPartition(t.topic, int(p.partition_index))
                    want = partitions.get(tp)
                    if want is None:
                        continue
                    fetches.append(
                        CompletedFetch(
                            tp,
                            want.fetch_offset,
                            int(p.error_code),
                            int(p.high_watermark),
                            int(p.log_start_offset),
                            int(p.last_stable_offset),
                            p.records if p.records is not None else b"",
                            p.aborted_transactions,
                            committed=(
                                ReadCommittedFilter(p.aborted_transactions)
                                if self._isolation
                                else None
                            ),
                        )
                    )
        with self._cond:
            self._nodes_in_flight.discard(node)
            self._completed.extend(fetches)
            self._cond.notify_all()

    # ------------------------------------------------------------------ receiving

    def has_available_fetches(self) -> bool:
        with self._cond:
            return bool(self._completed) or (
                self._next_in_line is not None and not self._next_in_line.consumed
            )

    def has_in_flight(self) -> bool:
        with self._cond:
            return bool(self._nodes_in_flight)

    def wait_for_fetches(self, timeout_s: float) -> bool:
        """Block until a completed fetch is buffered, ``wakeup()`` is called, or timeout.

        True when a completed fetch is buffered. A wakeup that came while nobody waited
        ends the next wait at once (so none is lost between two checks).
        """
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self._completed and not self._woken:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
            self._woken = False
            return bool(self._completed)

    def wakeup(self) -> None:
        """End the consumer's wait for fetches early (e.g. a JoinGroup response arrived)."""
        with self._cond:
            self._woken = True
            self._cond.notify_all()

    def fetched_records(self, max_records: int) -> dict[TopicPartition, RecordList]:
        """Hand out up to ``max_records`` buffered records, advancing positions.

        The records are decoded batch by batch as they are handed out, and built
        as objects only when read (``RecordList``).
        """
        out: dict[TopicPartition, RecordList] = {}
        remaining = max_records
        while remaining > 0:
            with self._cond:
                cf = self._next_in_line
                if cf is None or cf.consumed:
                    if not self._completed:
                        break
                    cf = self._completed.popleft()
                    self._next_in_line = cf
                    fresh = True
                else:
                    fresh = False
            if fresh:
                self._initialize(cf)
                if cf.consumed:
                    continue
            taken = self._take(cf, remaining)
            if taken:
                runs, count = taken
                records = out.get(cf.tp)
                if records is None:
                    records = out[cf.tp] = RecordList(
                        cf.tp, self._key_deserializer, self._value_deserializer
                    )
                records.extend_runs(runs, count)
                remaining -= count
        return out

    def _initialize(self, cf: CompletedFetch) -> None:
        """Check a fresh CompletedFetch against the current state (nothing is decoded yet)."""
        tp = cf.tp
        if not self._subs.is_assigned(tp) or self._subs.is_pending_revocation(tp):
            cf.consumed = True  # dropped undecoded
            return
        try:
            position = self._subs.position(tp)
        except KafkaError:
            cf.consumed = True
            return
        if position != cf.fetch_offset:
            cf.consumed = True  # the user sought meanwhile: stale data
            return
        code = cf.error_code
        if code == ErrorCode.NONE:
            self._subs.update_high_watermark(
                tp, cf.high_watermark, cf.log_start_offset, cf.last_stable_offset
            )
            cf.expected_position = cf.fetch_offset
            if not cf.records:
                cf.consumed = True
            return
        cf.consumed = True
        self._subs.move_to_end(tp)
        if code in STALE_METADATA:
            self._client.request_update()
        elif code == OffsetOutOfRangeError.code:
            if self._subs.default_reset is OffsetResetStrategy.NONE:
                raise OffsetOutOfRangeError(
                    f"fetch position {cf.fetch_offset} is out of range for {tp} "
                    f"and auto_offset_reset is 'none'"
                )
            log.info("fetch offset %s out of range for %s; resetting", cf.fetch_offset, tp)
            self._subs.request_reset([tp])
        else:
            error = make_error(code, f"fetch {tp}")
            if not error.retriable:
                raise error
            log.debug("retriable fetch error for %s: %s", tp, error)

    def _take(self, cf: CompletedFetch, n: int) -> tuple[list[Any], int] | None:
        """Up to ``n`` records of ``cf`` as runs, the position moved past them; None when
        nothing was taken."""
        tp = cf.tp
        # Partition revoked, paused, about to be revoked or sought since: give nothing and
        # drop the rest (pause keeps the data in Java; we drop and refetch, which is
        # equivalent).
        if not self._subs.is_fetchable(tp):
            cf.consumed = True
            return None
        try:
            position = self._subs.position(tp)
        except KafkaError:
            cf.consumed = True
            return None
        if position != cf.expected_position:
            cf.consumed = True  # the user sought since these records were fetched
            return None
        try:
            runs, count, new_position = cf.take(n, position, self.config.check_crcs)
        except KafkaError:
            cf.consumed = True
            raise
        if new_position != position:
            self._subs.seek(tp, new_position)
            cf.expected_position = new_position
        if count:
            self._subs.move_to_end(tp)
        return (runs, count) if count else None

    # ------------------------------------------------------------------ positions

    def reset_offsets_if_needed(self, timeout_s: float) -> None:
        """Reset partitions with a pending strategy through ListOffsets (blocking)."""
        needing = self._subs.partitions_needing_reset()
        if not needing:
            return
        timestamps = {tp: strategy.timestamp for tp, strategy in needing.items()}
        try:
            offsets = list_offsets(
                self._client,
                {tp: ts for tp, ts in timestamps.items() if ts is not None},
                timeout_s=timeout_s,
                isolation_level=self._isolation,
            )
        except KafkaError as exc:
            log.debug("offset reset failed: %s", exc)
            retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000
            for tp in needing:
                self._subs.reset_failed(tp, retry_at)
            if not exc.retriable:
                raise
            return
        for tp, strategy in needing.items():
            found = offsets.get(tp)
            if found is not None:
                self._subs.maybe_seek_unvalidated(tp, found.offset, strategy)

    def clear_buffered_data(self, keep: Callable[[TopicPartition], bool] | None = None) -> None:
        """Drop buffered fetches (all, or those ``keep`` rejects)."""
        with self._cond:
            self._completed = deque(
                cf for cf in self._completed if keep is not None and keep(cf.tp)
            )
            if self._next_in_line is not None and not (
                keep is not None and keep(self._next_in_line.tp)
            ):
                self._next_in_line.consumed = True

    def _on_unassigned(self, removed: set[TopicPartition]) -> None:
        if removed:
            self.clear_buffered_data(lambda tp: tp not in removed)


def check_no_offset(subs: SubscriptionState) -> None:
    """Raise NoOffsetForPartitionError when a partition can never get a position."""
    subs.reset_missing_positions()


__all__ = ["CompletedFetch", "Fetcher", "NoOffsetForPartitionError", "check_no_offset"]
