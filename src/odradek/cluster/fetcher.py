"""Followers fetch from leaders with Kafka's own protocol (Kafka's ReplicaFetcherThread).

One `ReplicaFetcher` per leader broker fetches every partition this broker follows
there, in one Fetch request (v12, ``replica_id`` = this broker's id, each partition
with the leader epoch the follower knows). Before a partition's first fetch under a
new leader epoch the follower asks the leader where its own latest epoch ends
(OffsetForLeaderEpoch) and truncates anything past that point: a suffix an old
leader wrote that the new leader never had. Fetched batches are appended as they
are (offsets, epochs and producer ids kept: `PartitionLog.append_as_follower`), so
idempotent producer state replicates with the log; the follower's high watermark
is ``min(leader's, own log end)``. Where to truncate is the replica layer's pure rule
(`odradek.replication.truncation`, Kafka's KIP-279: when the leader answers with an
older epoch than asked, the follower cuts at its own end of that epoch and asks
again, round after round, until the logs agree); the cut itself runs in a worker
thread (`ReplicaManager.truncate`), awaited before the next fetch of that partition.

Each partition of a Fetch names the epoch of the follower's last batch
(``LastFetchedEpoch``, KIP-320); where the logs part anyway (a divergence the epoch
question could not see, or one within a leader epoch) the leader answers a
``DivergingEpoch`` instead of records, and the follower truncates by the same rule
and fetches again, as Kafka 4.1's ``AbstractFetcherThread.truncateOnFetchResponse``
(the high watermark waits for the next fetch, as there).

A follower never spins on a partition it cannot advance. Fetched records that begin
below its log end, inside a batch of the leader's (the follower's end falls inside
it: what it holds from that batch's base on is not what the leader holds, as
replicas copy whole batches) are taken after cutting back to the batch's base.
Any other answer it cannot use (OFFSET_OUT_OF_RANGE within the leader's log,
records that do not follow on, an error, a failed append) sends the partition back
to the epoch check after a backoff that doubles up to ``MAX_BACKOFF_S`` (Kafka
delays such partitions by ``replica.fetch.backoff.ms``), and is logged at most once
per ``ERROR_LOG_INTERVAL_S`` per partition and kind (`odradek.ratelog`). Kafka marks
a partition whose records do not follow on as failed until the next leader change;
here it keeps trying, slowly.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.cancelling import cancel_and_wait
from odradek.cluster.peer_connection import OpenPeer, open_plain
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import RequestHeader, build, decode_response, encode_request
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch import encode_fetch_request, parse_fetch_response
from odradek.protocol.records import BATCH_OVERHEAD, parse_header
from odradek.ratelog import RateLimitedLog
from odradek.replication.replica import Replica, ReplicaManager, Role
from odradek.replication.truncation import TruncationStep, truncation_step

log = logging.getLogger("odradek.replication")

FETCH_VERSION = 12  # replica id in the body (v15 moved it to ReplicaState); LastFetchedEpoch
EPOCH_VERSION = 3  # OffsetForLeaderEpoch with replica id
RETRY_BACKOFF_S = 0.2  # after a failed request, and a partition's first backoff
MAX_BACKOFF_S = 2.0  # a partition's backoff doubles up to this
ERROR_LOG_INTERVAL_S = 10.0  # one line per partition and kind of failure at most this often
_SIZE = struct.Struct(">i")


@dataclass(slots=True)
class _Backoff:
    until: float  # the partition is not fetched (nor asked about) before this
    delay_s: float
    leader_epoch: int  # a new leader epoch starts afresh: a new leader, or a new term


class LeaderConnection:
    """One connection to another broker (opened by `connect`: on the inter-broker
    listener, authenticated, `odradek.cluster.peer_connection`), one request at a time."""

    def __init__(
        self, host: str, port: int, client_id: str, timeout_s: float, connect: OpenPeer = open_plain
    ) -> None:
        self.host, self.port = host, port
        self.connect = connect
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()  # one request at a time on the connection

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._reader is None or self._writer is None:
            async with asyncio.timeout(self.timeout_s):
                self._reader, self._writer = await self.connect(self.host, self.port)
        return self._reader, self._writer

    async def send(self, api_key: int, version: int, body: Any) -> bytes:
        """The response payload (correlation id first, size prefix removed)."""
        async with self._lock:
            return await self._send(api_key, version, body)

    async def _send(self, api_key: int, version: int, body: Any) -> bytes:
        reader, writer = await self._connect()
        correlation = next(self._ids)
        writer.write(
            encode_request(RequestHeader(api_key, version, correlation, self.client_id), body)
        )
        try:
            async with asyncio.timeout(self.timeout_s):
                await writer.drain()
            async with asyncio.timeout(self.timeout_s):
                (size,) = _SIZE.unpack(await reader.readexactly(4))
            async with asyncio.timeout(self.timeout_s):
                payload = await reader.readexactly(size)
        except BaseException:
            self.close()
            raise
        (answered,) = _SIZE.unpack_from(payload, 0)
        if answered != correlation:
            self.close()
            raise ConnectionError(f"response {answered} to request {correlation}")
        return payload

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


class ReplicaFetcher:
    """Fetches, for every partition this broker follows on one leader, in a loop."""

    def __init__(
        self,
        broker_id: int,
        leader_id: int,
        manager: ReplicaManager,
        address_of: Callable[[int], tuple[str, int] | None],
        *,
        max_wait_ms: int,
        max_bytes: int,
        timeout_s: float,
        connect: OpenPeer = open_plain,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.connect = connect
        self.broker_id = broker_id
        self.leader_id = leader_id
        self.manager = manager
        self.address_of = address_of
        self.max_wait_ms = max_wait_ms
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.partitions: set[tuple[str, int]] = set()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._connection: LeaderConnection | None = None
        self._address: tuple[str, int] | None = None
        self.clock = clock
        self._backoff: dict[tuple[str, int], _Backoff] = {}
        self._errors = RateLimitedLog(log, ERROR_LOG_INTERVAL_S, clock=clock)

    def add(self, key: tuple[str, int]) -> None:
        self.partitions.add(key)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.discard(key)
        self._backoff.pop(key, None)

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_and_wait([self._task], f"replica fetchers from broker {self.leader_id}")
            self._task = None
        if self._connection is not None:
            self._connection.close()

    def _following(self) -> list[Replica]:
        found = []
        for key in sorted(self.partitions):
            replica = self.manager.get(*key)
            if (
                replica is not None
                and replica.role is Role.FOLLOWER
                and replica.leader == self.leader_id
            ):
                found.append(replica)
        return found

    def _leader_connection(self) -> LeaderConnection | None:
        address = self.address_of(self.leader_id)
        if address is None:
            return None
        if self._connection is None or address != self._address:
            if self._connection is not None:
                self._connection.close()
            self._address = address
            self._connection = LeaderConnection(
                *address, f"odradek-replica-{self.broker_id}", self.timeout_s, self.connect
            )
        return self._connection

    def _due(self, replicas: list[Replica]) -> list[Replica]:
        """The replicas not backing off."""
        if not self._backoff:
            return replicas
        now = self.clock()
        due = []
        for r in replicas:
            backoff = self._backoff.get((r.topic, r.partition))
            if backoff is None or backoff.until <= now or backoff.leader_epoch != r.leader_epoch:
                due.append(r)
        return due

    def _back_off(self, replica: Replica, *, grow: bool = True) -> None:
        """Leave the partition alone for a while: RETRY_BACKOFF_S, doubling each time in
        a row in one leader epoch up to MAX_BACKOFF_S if `grow` (an answer that did not
        help), else RETRY_BACKOFF_S (a leadership still moving: soon settled)."""
        key = (replica.topic, replica.partition)
        previous = self._backoff.get(key)
        if previous is None or previous.leader_epoch != replica.leader_epoch:
            delay = RETRY_BACKOFF_S
        elif grow:
            delay = min(previous.delay_s * 2, MAX_BACKOFF_S)
        else:
            delay = previous.delay_s
        self._backoff[key] = _Backoff(self.clock() + delay, delay, replica.leader_epoch)

    def _retry_later(
        self,
        replica: Replica,
        kind: str,
        level: int,
        message: str,
        *args: Any,
        grow: bool = True,
    ) -> None:
        """A fetch answer the partition cannot use: check it against the leader again
        (OffsetForLeaderEpoch) after a backoff; logged once per interval per kind."""
        replica.truncation_checked_epoch = -1
        self._back_off(replica, grow=grow)
        self._errors.log(
            f"{replica.topic}-{replica.partition}:{kind}",
            level,
            "%s-%d: " + message + "; checking against leader %d again in %.1f s",
            replica.topic,
            replica.partition,
            *args,
            self.leader_id,
            self._backoff[(replica.topic, replica.partition)].delay_s,
        )

    async def _idle(self, replicas: list[Replica]) -> None:
        """Until a partition is added or the first backoff ends (at most a second)."""
        self._wake.clear()
        timeout = 1.0
        keys = {(r.topic, r.partition) for r in replicas}
        ends = [b.until for key, b in self._backoff.items() if key in keys]
        if ends:
            timeout = max(0.0, min(timeout, min(ends) - self.clock()))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._wake.wait()

    async def _run(self) -> None:
        while True:
            replicas = self._following()
            connection = self._leader_connection()
            due = self._due(replicas)
            if not due or connection is None:
                await self._idle(replicas)
                continue
            try:
                await self._check_truncation(connection, due)
                await self._fetch_once(connection, self._due(self._following()))
            except asyncio.CancelledError:
                raise
            except (OSError, ConnectionError, TimeoutError, asyncio.IncompleteReadError) as exc:
                log.debug("fetch from broker %d failed: %r", self.leader_id, exc)
                connection.close()
                await asyncio.sleep(RETRY_BACKOFF_S)
            except Exception:
                self._errors.log(
                    "fetcher",
                    logging.ERROR,
                    "replica fetcher for leader %d failed",
                    self.leader_id,
                    exc_info=True,
                )
                connection.close()
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _check_truncation(
        self, connection: LeaderConnection, replicas: list[Replica]
    ) -> None:
        """OffsetForLeaderEpoch for partitions new to this leader epoch; truncate divergence."""
        due = [r for r in replicas if r.truncation_checked_epoch != r.leader_epoch]
        if not due:
            return
        asked_in_epochs = [r.leader_epoch for r in due]
        by_topic: dict[str, list[Replica]] = {}
        for replica in due:
            by_topic.setdefault(replica.topic, []).append(replica)
        request = build(
            _epoch_request_type(),
            {
                "replica_id": self.broker_id,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": r.partition,
                                "current_leader_epoch": r.leader_epoch,
                                "leader_epoch": r.plog.latest_epoch,
                            }
                            for r in members
                        ],
                    }
                    for topic, members in by_topic.items()
                ],
            },
        )
        payload = await connection.send(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, request)
        _, response = decode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, payload)
        answers = {(t.topic, p.partition): p for t in response.topics for p in t.partitions}
        for replica, asked_in_epoch in zip(due, asked_in_epochs, strict=True):
            if replica.leader != self.leader_id or replica.leader_epoch != asked_in_epoch:
                continue  # leadership moved meanwhile: the new leader is asked next round
            answer = answers.get((replica.topic, replica.partition))
            if answer is None or answer.error_code != ErrorCode.NONE:
                # asked again after a backoff (the leader may not know its role yet)
                self._back_off(replica, grow=False)
                self._errors.log(
                    f"{replica.topic}-{replica.partition}:epoch",
                    logging.INFO,
                    "%s-%d: leader %d answered OffsetForLeaderEpoch with %s; asking again",
                    replica.topic,
                    replica.partition,
                    self.leader_id,
                    "nothing" if answer is None else f"error {answer.error_code}",
                )
                continue
            step, _ = await self._truncate_to_leader(
                replica, answer.leader_epoch, answer.end_offset, "OffsetForLeaderEpoch"
            )
            if replica.leader != self.leader_id or replica.leader_epoch != asked_in_epoch:
                continue  # leadership moved while the cut ran: check again
            if step.complete:
                replica.truncation_checked_epoch = asked_in_epoch
            # else (KIP-279): the leader never had our epoch; ask again next round about
            # the latest epoch left after the cut

    async def _truncate_to_leader(
        self, replica: Replica, leader_epoch: int, leader_end_offset: int, source: str
    ) -> tuple[TruncationStep, bool]:
        """Cut the log where the leader's (epoch, end offset) answer says it parts from the
        leader's (`truncation_step`): the step, and whether anything changed (the log or
        its epoch cache)."""
        plog = replica.plog
        epochs = plog.leader_epoch_entries
        end = plog.end_offset
        step = truncation_step(
            epochs,
            log_end=end,
            high_watermark=replica.high_watermark,
            leader_epoch=leader_epoch,
            leader_end_offset=leader_end_offset,
        )
        if step.offset < end:
            log.warning(
                "%s-%d: truncating from %d to %d: the log diverged from leader %d's "
                "(epoch %d; %s: epoch %d ends at %d)",
                replica.topic,
                replica.partition,
                end,
                step.offset,
                self.leader_id,
                replica.leader_epoch,
                source,
                leader_epoch,
                leader_end_offset,
            )
        if step.offset < plog.start_offset:
            await self.manager.start_over_at(replica, step.offset)  # Kafka's truncateFully
        elif step.offset < end or (epochs and epochs[-1][1] >= step.offset):
            # at the log end this drops only epochs led here without data: the next
            # question must be about an older epoch
            await self.manager.truncate(replica, step.offset)
        else:
            return step, False
        return step, True

    async def _fetch_once(self, connection: LeaderConnection, replicas: list[Replica]) -> None:
        ready = [r for r in replicas if r.truncation_checked_epoch == r.leader_epoch]
        if not ready:
            return
        by_topic: dict[str, list[tuple[int, ...]]] = {}
        for r in ready:
            by_topic.setdefault(r.topic, []).append(
                (
                    r.partition,
                    r.plog.end_offset,
                    self.max_bytes,
                    r.leader_epoch,
                    r.plog.start_offset,
                    r.plog.latest_epoch,  # LastFetchedEpoch: the leader checks our log ends
                )
            )
        body = encode_fetch_request(
            FETCH_VERSION,
            max_wait_ms=self.max_wait_ms,
            min_bytes=1,
            max_bytes=max(self.max_bytes, 1) * 10,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,  # no fetch session: every partition every time
            topics=list(by_topic.items()),
            replica_id=self.broker_id,
        )
        asked_in_epoch = {(r.topic, r.partition): r.leader_epoch for r in ready}
        payload = await connection.send(ApiKey.FETCH, FETCH_VERSION, body)
        response = parse_fetch_response(payload, FETCH_VERSION)
        by_key = {(r.topic, r.partition): r for r in ready}
        for topic in response.responses:
            for part in topic.partitions:
                key = (topic.topic or "", part.partition_index)
                replica = by_key.get(key)
                if replica is None or not self._still_following(replica, asked_in_epoch[key]):
                    # leadership moved while the fetch was in flight: what the old
                    # leader sent may be past where the new leader's log diverges,
                    # and the truncation check for the new epoch may already be done
                    continue
                try:
                    await self._apply(replica, part, asked_in_epoch[key])
                except Exception as exc:
                    # One partition's failure (a disk error, a batch that does not
                    # follow on) must not stall the others fetched from this leader.
                    self._retry_later(
                        replica, "apply", logging.ERROR, "applying a fetch failed: %r", exc
                    )

    def _still_following(self, replica: Replica, asked_in_epoch: int) -> bool:
        return (
            replica.role is Role.FOLLOWER
            and replica.leader == self.leader_id
            and replica.leader_epoch == asked_in_epoch
        )

    async def _apply(self, replica: Replica, part: Any, asked_in_epoch: int) -> None:
        plog = replica.plog
        key = (replica.topic, replica.partition)
        if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            # Our end is outside the leader's log, or the leader cannot place our last
            # epoch (Kafka's handleOutOfRangeError): below its start (retention moved
            # it) we start over there; otherwise the epoch check decides.
            if plog.end_offset < part.log_start_offset:
                log.warning(
                    "%s-%d: behind the leader's log start %d: starting over there",
                    replica.topic,
                    replica.partition,
                    part.log_start_offset,
                )
                await self.manager.start_over_at(replica, part.log_start_offset)
                return
            self._retry_later(
                replica,
                "range",
                logging.WARNING,
                "leader answered OFFSET_OUT_OF_RANGE at %d (epoch %d)",
                plog.end_offset,
                plog.latest_epoch,
            )
            return
        if part.error_code != ErrorCode.NONE:
            # leadership moving (NOT_LEADER_OR_FOLLOWER, FENCED or UNKNOWN_LEADER_EPOCH),
            # or the leader's own trouble: check again once known
            self._retry_later(
                replica, "error", logging.INFO, "error %d", part.error_code, grow=False
            )
            return
        diverging = part.diverging_epoch
        if diverging.epoch >= 0:
            # Kafka's truncateOnFetchResponse: cut, and let the next fetch (naming the
            # epoch left after the cut) bring the records and the high watermark.
            _, changed = await self._truncate_to_leader(
                replica, diverging.epoch, diverging.end_offset, "DivergingEpoch"
            )
            if not changed:  # a leader's answer that cannot end: do not ask it in a loop
                self._retry_later(
                    replica,
                    "diverging",
                    logging.WARNING,
                    "DivergingEpoch (%d, %d) changes nothing at %d",
                    diverging.epoch,
                    diverging.end_offset,
                    plog.end_offset,
                )
            return
        records = part.records
        if records is not None and len(records) >= BATCH_OVERHEAD:
            first = parse_header(records)
            end = plog.end_offset
            if first.base_offset < end <= first.last_offset:
                # Our end falls inside the leader's batch: what we hold from its base on
                # is not what the leader holds (replicas copy whole batches).
                log.warning(
                    "%s-%d: the log ends at %d inside leader %d's batch %d..%d: truncating to %d",
                    replica.topic,
                    replica.partition,
                    end,
                    self.leader_id,
                    first.base_offset,
                    first.last_offset,
                    first.base_offset,
                )
                if first.base_offset < plog.start_offset:
                    await self.manager.start_over_at(replica, first.base_offset)
                else:
                    await self.manager.truncate(replica, first.base_offset)
                if not self._still_following(replica, asked_in_epoch):
                    return  # the leader changed while the cut ran: its records are stale
        if records is not None and len(records):
            # Nobody waits on a follower's appends: consumers read the leader, below its
            # high watermark, and are woken when that moves. A batch that does not
            # follow on raises (OffsetMismatchError): _fetch_once retries later.
            plog.append_as_follower(bytes(records))
        self._backoff.pop(key, None)
        if plog.start_offset < part.log_start_offset <= plog.end_offset:
            # The leader's log start moved (DeleteRecords, retention): follow it.
            plog.delete_records_before(part.log_start_offset)
        high_watermark = min(part.high_watermark, plog.end_offset)
        if high_watermark > replica.high_watermark:
            self.manager.set_high_watermark(replica, high_watermark)


def _epoch_request_type() -> Any:
    from odradek.protocol.codec import request_type

    return request_type(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION)
