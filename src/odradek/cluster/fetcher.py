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
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import struct
from collections.abc import Callable
from typing import Any

from odradek.cluster.peer_connection import OpenPeer, open_plain
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import RequestHeader, build, decode_response, encode_request
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch import encode_fetch_request, parse_fetch_response
from odradek.replication.replica import Replica, ReplicaManager, Role
from odradek.replication.truncation import truncation_step

log = logging.getLogger("odradek.replication")

FETCH_VERSION = 12  # replica id in the body (v15 moved it to ReplicaState)
EPOCH_VERSION = 3  # OffsetForLeaderEpoch with replica id
RETRY_BACKOFF_S = 0.2
_SIZE = struct.Struct(">i")


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
            self._reader, self._writer = await asyncio.wait_for(
                self.connect(self.host, self.port), self.timeout_s
            )
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
            await asyncio.wait_for(writer.drain(), self.timeout_s)
            (size,) = _SIZE.unpack(await asyncio.wait_for(reader.readexactly(4), self.timeout_s))
            payload = await asyncio.wait_for(reader.readexactly(size), self.timeout_s)
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

    def add(self, key: tuple[str, int]) -> None:
        self.partitions.add(key)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def remove(self, key: tuple[str, int]) -> None:
        self.partitions.discard(key)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
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

    async def _run(self) -> None:
        while True:
            replicas = self._following()
            connection = self._leader_connection()
            if not replicas or connection is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), 1.0)
                continue
            try:
                await self._check_truncation(connection, replicas)
                await self._fetch_once(connection, self._following())
            except asyncio.CancelledError:
                raise
            except (OSError, ConnectionError, TimeoutError, asyncio.IncompleteReadError) as exc:
                log.debug("fetch from broker %d failed: %r", self.leader_id, exc)
                connection.close()
                await asyncio.sleep(RETRY_BACKOFF_S)
            except Exception:
                log.exception("replica fetcher for leader %d failed", self.leader_id)
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
                continue  # asked again next round (the leader may not know its role yet)
            plog = replica.plog
            epochs = plog.leader_epoch_entries
            step = truncation_step(
                epochs,
                log_end=plog.end_offset,
                high_watermark=replica.high_watermark,
                leader_epoch=answer.leader_epoch,
                leader_end_offset=answer.end_offset,
            )
            if step.offset < plog.end_offset:
                log.warning(
                    "%s-%d: truncating from %d to %d: the log diverged from leader %d (epoch %d)",
                    replica.topic,
                    replica.partition,
                    plog.end_offset,
                    step.offset,
                    self.leader_id,
                    replica.leader_epoch,
                )
            if step.offset < plog.start_offset:
                await self.manager.start_over_at(replica, step.offset)  # Kafka's truncateFully
            elif step.offset < plog.end_offset or (epochs and epochs[-1][1] >= step.offset):
                # at the log end this drops only epochs led here without data: the next
                # question must be about an older epoch
                await self.manager.truncate(replica, step.offset)
            if replica.leader != self.leader_id or replica.leader_epoch != asked_in_epoch:
                continue  # leadership moved while the cut ran: check again
            if step.complete:
                replica.truncation_checked_epoch = asked_in_epoch
            # else (KIP-279): the leader never had our epoch; ask again next round about
            # the latest epoch left after the cut

    async def _fetch_once(self, connection: LeaderConnection, replicas: list[Replica]) -> None:
        ready = [r for r in replicas if r.truncation_checked_epoch == r.leader_epoch]
        if not ready:
            await asyncio.sleep(RETRY_BACKOFF_S)
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
                if (
                    replica is None
                    or replica.role is not Role.FOLLOWER
                    # leadership moved while the fetch was in flight: what the old
                    # leader sent may be past where the new leader's log diverges,
                    # and the truncation check for the new epoch may already be done
                    or replica.leader != self.leader_id
                    or replica.leader_epoch != asked_in_epoch[key]
                ):
                    continue
                try:
                    await self._apply(replica, part)
                except Exception as exc:
                    # One partition's failure (a disk error, a batch that does not
                    # follow on) must not stall the others fetched from this leader:
                    # check it against the leader again before its next fetch.
                    log.error(
                        "%s-%d: applying a fetch from broker %d failed: %r",
                        replica.topic,
                        replica.partition,
                        self.leader_id,
                        exc,
                    )
                    replica.truncation_checked_epoch = -1

    async def _apply(self, replica: Replica, part: Any) -> None:
        plog = replica.plog
        if part.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            # Our end is outside the leader's log: below its start (retention moved
            # it), or past its end (should not happen after the epoch check).
            if plog.end_offset < part.log_start_offset:
                log.warning(
                    "%s-%d: behind the leader's log start %d: starting over there",
                    replica.topic,
                    replica.partition,
                    part.log_start_offset,
                )
                await self.manager.start_over_at(replica, part.log_start_offset)
            else:
                replica.truncation_checked_epoch = -1  # check again against the leader
            return
        if part.error_code != ErrorCode.NONE:
            replica.truncation_checked_epoch = -1  # leadership moved: check again once known
            return
        records = part.records
        if records is not None and len(records):
            # Nobody waits on a follower's appends: consumers read the leader, below its
            # high watermark, and are woken when that moves.
            plog.append_as_follower(bytes(records))
        if plog.start_offset < part.log_start_offset <= plog.end_offset:
            # The leader's log start moved (DeleteRecords, retention): follow it.
            plog.delete_records_before(part.log_start_offset)
        high_watermark = min(part.high_watermark, plog.end_offset)
        if high_watermark > replica.high_watermark:
            self.manager.set_high_watermark(replica, high_watermark)


def _epoch_request_type() -> Any:
    from odradek.protocol.codec import request_type

    return request_type(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION)
