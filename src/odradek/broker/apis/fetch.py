"""Fetch: long poll for record batches, in fetch sessions, sent with sendfile.

Honours max_wait / min_bytes (the request parks until enough bytes are
available or the wait runs out), max_bytes for the whole response and
partition_max_bytes per partition; as in Kafka (KIP-74) the first batch of the
first partition with data is returned whole even when it is larger than both.
From v13 topics are named by topic id (KIP-516); an id this broker does not
know gets UNKNOWN_TOPIC_ID.

Fetch sessions (KIP-227, v7+): ``broker/fetch_sessions.py`` turns the request
into the partitions to read (an incremental fetch reads every partition of its
session) and, once they are read, into the partitions to answer.

Records leave without being copied into Python where they can
(``broker/sending.py``): on a listener without TLS, a partition's read of more
than ``SENDFILE_MIN_BYTES`` is a region of its segment file (checked against
the batch chain from the headers alone, ``Segment.read_from``), written into
the response by ``protocol/fetch.py`` as a spliced part that the connection
sends with ``sendfile``. Smaller reads, and every read for a TLS listener, are
bytes, as before.

An offset the log cannot serve answers with an error, never with nothing: one
in (or just before) a quarantined range CORRUPT_MESSAGE, which consumers report
(``odradek.log.segment``; docs/operations.md, Recovery), a disk error
KAFKA_STORAGE_ERROR as Kafka answers for an I/O error. Below the high watermark
an empty answer means only what it means in Kafka: the response's byte budget
was spent on earlier partitions, or (read_committed) the last stable offset.

``isolation_level=1`` (read_committed) returns batches only below the last
stable offset, with the aborted transactions of that range (producer id and
first offset, from the segments' aborted-transaction indexes) so the client
drops their batches; every response carries the LSO.

A fetch that names the epoch of the last batch it holds (``LastFetchedEpoch``, v12+,
KIP-320), a follower's or a consumer's alike, is first checked against the leader's
epoch cache (``replication.truncation.check_last_fetched_epoch``), as Kafka 4.1's
``Partition.readRecords``: where the logs part, the partition answers a
``DivergingEpoch`` and no records, the follower's position is not recorded (Kafka
updates a follower's fetch state only without one) and the response is not held
back (Kafka's ``ReplicaManager.fetchMessages`` answers at once); an epoch the leader
cannot place, or an offset below its log start, answers OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

from odradek.broker.apis.leader_hints import FETCH_HINTED, FETCH_HINTS_FROM, LeaderHints
from odradek.broker.context import RequestContext
from odradek.broker.fetch_sessions import (
    FetchContext,
    PartitionKey,
    PartitionRequest,
    SessionError,
)
from odradek.broker.registry import handles
from odradek.broker.security.acl import AclOperation, ResourceType
from odradek.broker.topics import storage_failures
from odradek.log.errors import LogError
from odradek.log.files import FileRegion
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import DecodeError, RequestHeader, skip_tagged_fields
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch import (
    FIRST_FLEXIBLE_VERSION,
    EncodedResponse,
    FetchDecodeError,
    FetchRequest,
    encode_fetch_response,
    parse_fetch_request,
)
from odradek.replication.truncation import DivergingEpoch, check_last_fetched_epoch

READ_COMMITTED = 1
TOPIC_IDS_FROM = 13
SENDFILE_MIN_BYTES = 64 * 1024  # smaller reads are copied: one pread beats a sendfile call

ReadEntry = tuple[PartitionKey, dict[str, Any], int]
"""(partition key, response entry, records size) of one partition read."""

NO_EPOCH = -1  # LastFetchedEpoch not sent (before v12, or by a fetcher that has none)


def read_request(header: RequestHeader, frame: bytes | memoryview, pos: int) -> FetchRequest:
    """The request body, read by hand (``protocol/fetch.py``): kio's reader takes ten
    times as long, and Fetch is the broker's busiest request."""
    try:
        if header.api_version >= FIRST_FLEXIBLE_VERSION:
            pos = skip_tagged_fields(frame, pos)
        return parse_fetch_request(frame, pos, header.api_version)
    except FetchDecodeError as exc:
        raise DecodeError(f"malformed FETCH v{header.api_version}: {exc}") from exc


def _requested(
    ctx: RequestContext, request: FetchRequest
) -> tuple[OrderedDict[PartitionKey, PartitionRequest], list[PartitionKey]]:
    """The partitions this request lists, and those it forgets (v7+), keyed by topic name
    (by topic id from v13)."""
    by_id = ctx.version >= TOPIC_IDS_FROM
    wanted: OrderedDict[PartitionKey, PartitionRequest] = OrderedDict()
    for t in request.topics:
        topic: Hashable = t.topic_id if by_id else t.topic
        for p in t.partitions:
            wanted[(topic, p.partition)] = PartitionRequest(
                p.fetch_offset,
                p.partition_max_bytes,
                p.log_start_offset,
                p.current_leader_epoch,
                p.last_fetched_epoch,
            )
    forgotten: list[PartitionKey] = []
    for t in request.forgotten_topics_data:
        topic = t.topic_id if by_id else t.topic
        forgotten.extend((topic, p) for p in t.partitions)
    return wanted, forgotten


def _names(ctx: RequestContext, keys: Any) -> dict[Hashable, str | None]:
    """Topic name of each key's topic (None for a topic id this broker does not know)."""
    if ctx.version < TOPIC_IDS_FROM:
        return {topic: topic for topic, _ in keys}
    names: dict[Hashable, str | None] = {}
    for topic, _ in keys:
        if topic not in names:
            names[topic] = _name_of(ctx, topic)
    return names


def _name_of(ctx: RequestContext, topic: Hashable) -> str | None:
    """A request's topic (its name, or from v13 its id) as a name; None if unknown."""
    if ctx.version < TOPIC_IDS_FROM:
        return topic if isinstance(topic, str) else None
    found = ctx.broker.topics.topics_by_id.get(topic)
    return found.name if found is not None else None


def _unreadable(ctx: RequestContext, request: FetchRequest, names: set[str]) -> set[str]:
    """Topics this request may not read: READ on each topic for consumers; for a follower
    (replica id >= 0) everything or nothing (`ctx.may_act_as_replica`: the inter-broker
    listener and CLUSTER_ACTION), checked before any read or ISR bookkeeping."""
    if request.replica_id >= 0:
        return set() if ctx.may_act_as_replica() else names
    return {n for n in names if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, n)}


def _release(entries: list[ReadEntry]) -> None:
    for _, entry, _ in entries:
        records = entry["records"]
        if isinstance(records, FileRegion):
            records.release()
            entry["records"] = b""


def _read_partitions(
    ctx: RequestContext,
    request: FetchRequest,
    partitions: OrderedDict[PartitionKey, PartitionRequest],
    names: dict[Hashable, str | None],
    unreadable: set[str],
) -> tuple[list[ReadEntry], int, bool]:
    """One pass over the partitions: (entries, bytes, answer now: an error or a diverging
    epoch). Entries may hold FileRegions: the caller releases them (``_release``) or
    sends them."""
    topics = ctx.broker.topics
    remaining = min(request.max_bytes, int(ctx.broker.config["fetch.max.bytes"]))
    read_committed = request.isolation_level == READ_COMMITTED
    aborted = () if read_committed else None
    session = ctx.session
    region_from = None if session is not None and session.listener.uses_tls else SENDFILE_MIN_BYTES
    replicas = ctx.broker.replicas
    follower = request.replica_id
    total = 0
    answer_now = False
    first_data = True
    entries: list[ReadEntry] = []
    try:
        for key, wanted in partitions.items():
            name = names[key[0]]
            plog = topics.partition(name, key[1]) if name is not None else None
            entry: dict[str, Any] = {
                "partition_index": key[1],
                "error_code": 0,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": aborted,
                "preferred_read_replica": -1,
                "records": b"",
            }
            size = 0
            entries.append((key, entry, 0))
            if name in unreadable:
                entry["error_code"] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                answer_now = True
                continue
            if plog is None or name is None:
                # A partition of the cluster hosted elsewhere: NOT_LEADER_OR_FOLLOWER.
                entry["error_code"] = (
                    topics.absent_error(name, key[1]) if name else ErrorCode.UNKNOWN_TOPIC_ID
                )
                answer_now = True
                continue
            # Only the leader answers, in the epoch the request names (the replica layer's
            # check, whatever the control plane).
            replica, refusal = replicas.leader_for(name, key[1], wanted.current_leader_epoch)
            if replica is None:
                entry["error_code"] = refusal
                answer_now = True
                continue
            end = plog.end_offset
            diverged = None
            if wanted.last_fetched_epoch != NO_EPOCH:
                diverged = check_last_fetched_epoch(
                    plog.leader_epoch_entries,
                    log_start=plog.start_offset,
                    log_end=end,
                    fetch_offset=wanted.fetch_offset,
                    last_fetched_epoch=wanted.last_fetched_epoch,
                )
            if follower >= 0 and diverged is None:
                replicas.record_follower_fetch(replica, follower, wanted.fetch_offset)
            lso = plog.last_stable_offset
            # What this reader may see: a follower everything, a consumer what is below
            # the high watermark (alone in its ISR, a leader's is its log end).
            high_watermark = replica.high_watermark
            upper = lso if read_committed else None
            if follower < 0:
                lso = min(lso, high_watermark)
                if read_committed:
                    upper = lso
                elif high_watermark < end:
                    # Only then is there something to hide: a read that must stop at an
                    # offset walks every header, one that may run to the end does not.
                    upper = high_watermark
            entry["high_watermark"] = high_watermark
            entry["last_stable_offset"] = lso
            entry["log_start_offset"] = plog.start_offset
            if diverged is not None:
                # no records: the fetcher truncates first (and says where it is next time)
                if isinstance(diverged, DivergingEpoch):
                    entry["diverging_epoch"] = diverged
                else:
                    entry["error_code"] = diverged
                answer_now = True
                continue
            if wanted.fetch_offset == end or (upper is not None and wanted.fetch_offset == upper):
                continue
            if remaining <= 0 and not first_data:
                # No room to read, but an offset outside the log is still reported (Kafka
                # checks it with a read of zero bytes), or the consumer never learns it.
                if not plog.start_offset <= wanted.fetch_offset <= end:
                    entry["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
                    answer_now = True
                continue
            offset = wanted.fetch_offset
            try:
                limit = min(wanted.max_bytes, remaining)
                data = plog.read(offset, max(limit, 1), region_from=region_from, max_offset=upper)
            except LogError as exc:  # a quarantined range: CORRUPT_MESSAGE, never nothing
                entry["error_code"] = exc.error_code
                answer_now = True
                continue
            except OSError as exc:
                # A disk error: Kafka's answer (its log directory goes offline there).
                storage_failures.log(
                    "fetch", logging.ERROR, "cannot read %s-%d: %s", name, key[1], exc
                )
                entry["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
                answer_now = True
                continue
            size = data.length if isinstance(data, FileRegion) else len(data)
            if not size:
                continue
            if size > limit and not first_data:
                if isinstance(data, FileRegion):
                    data.release()
                continue  # only the very first batch may exceed the limits
            first_data = False
            entry["records"] = data
            entries[-1] = (key, entry, size)
            if read_committed:  # after the records are held: _release frees them on errors
                entry["aborted_transactions"] = [
                    {"producer_id": a.producer_id, "first_offset": a.first_offset}
                    for a in plog.aborted_transactions(offset, lso)
                ]
            total += size
            remaining -= size
    except BaseException:
        _release(entries)
        raise
    return entries, total, answer_now


def _encode(
    ctx: RequestContext, entries: list[ReadEntry], error_code: int, session_id: int
) -> EncodedResponse:
    """The response frame; consecutive partitions of one topic share a topic entry."""
    by_id = ctx.version >= TOPIC_IDS_FROM
    topics: list[tuple[str | None, Any, list[dict[str, Any]]]] = []
    last: Hashable = object()
    hints = LeaderHints(ctx) if ctx.version >= FETCH_HINTS_FROM else None
    for (topic, partition), entry, _ in entries:
        if topic != last:
            topics.append((None if by_id else topic, topic if by_id else None, []))
            last = topic
        topics[-1][2].append(entry)
        if hints is not None and entry["error_code"] in FETCH_HINTED:
            # KIP-951: where the partition's leader is now (`leader_hints`)
            name = _name_of(ctx, topic)
            if name is not None:
                entry["current_leader"] = hints.current_leader(name, partition)
    return encode_fetch_response(
        ctx.version,
        ctx.header.correlation_id,
        throttle_ms=0,
        error_code=error_code,
        session_id=session_id,
        topics=topics,
        node_endpoints=hints.node_endpoints() if hints is not None else (),
    )


@handles(ApiKey.FETCH, 4, 18, reader=read_request)
async def fetch(ctx: RequestContext, request: FetchRequest) -> EncodedResponse:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    min_bytes = max(request.min_bytes, 1)
    wanted, forgotten = _requested(ctx, request)
    try:
        context: FetchContext = ctx.broker.fetch_sessions.new_context(
            ctx.version,
            request.session_id,
            request.session_epoch,
            wanted,
            forgotten,
            privileged=request.replica_id >= 0,
            now_ms=int(loop.time() * 1000),
        )
    except SessionError as exc:
        return _encode(ctx, [], exc.error_code, 0)
    names = _names(ctx, context.partitions)
    unreadable = _unreadable(ctx, request, {n for n in names.values() if n is not None})
    keys = [
        (name, partition)
        for topic, partition in context.partitions
        if (name := names[topic]) is not None and name not in unreadable
    ]
    while True:
        entries, total, answer_now = _read_partitions(
            ctx, request, context.partitions, names, unreadable
        )
        remaining_s = deadline - loop.time()
        if total >= min_bytes or answer_now or remaining_s <= 0 or not keys:
            break
        _release(entries)
        await ctx.broker.waiters.wait(keys, remaining_s)
    try:
        error_code, session_id, answered = context.finish(entries, int(loop.time() * 1000))
        if len(answered) != len(entries):
            kept = {id(entry) for _, entry, _ in answered}
            _release([e for e in entries if id(e[1]) not in kept])
        return _encode(ctx, answered, error_code, session_id)
    except BaseException:
        _release(entries)
        raise
