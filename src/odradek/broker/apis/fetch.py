"""Fetch: long poll for record batches.

Honours max_wait / min_bytes (the request parks until enough bytes are
available or the wait runs out), max_bytes for the whole response and
partition_max_bytes per partition; as in Kafka (KIP-74) the first batch of the
first partition with data is returned whole even when it is larger than both.
Fetch sessions (KIP-227) are not offered: every response carries session id 0,
which tells clients to keep sending full fetches. From v13 topics are named by
topic id (KIP-516); an id this broker does not know gets UNKNOWN_TOPIC_ID.

``isolation_level=1`` (read_committed) returns batches only below the last
stable offset, with the aborted transactions of that range (producer id and
first offset, from the segments' aborted-transaction indexes) so the client
drops their batches; every response carries the LSO.
"""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.log.errors import LogError
from odradek.protocol.apikeys import ApiKey

UNKNOWN_TOPIC_OR_PARTITION = 3
FETCH_SESSION_ID_NOT_FOUND = 70
UNKNOWN_TOPIC_ID = 100
READ_COMMITTED = 1
TOPIC_AUTHORIZATION_FAILED = 29
TOPIC_IDS_FROM = 13


def _requested_topics(ctx: RequestContext, request: Any) -> list[tuple[Any, str | None]]:
    """(requested topic, its name or None when its topic id is unknown)."""
    if ctx.version < TOPIC_IDS_FROM:
        return [(t, t.topic) for t in request.topics]
    by_id = ctx.broker.topics.topics_by_id
    out: list[tuple[Any, str | None]] = []
    for t in request.topics:
        found = by_id.get(t.topic_id)
        out.append((t, found.name if found is not None else None))
    return out


def _unreadable(ctx: RequestContext, request: Any) -> set[str]:
    """Topics this request may not read: READ on each topic for consumers; CLUSTER_ACTION
    on the cluster for a follower (replica id >= 0), or nothing is readable."""
    names = {name for _, name in _requested_topics(ctx, request) if name is not None}
    if int(getattr(request, "replica_id", -1)) >= 0:
        follower_ok = ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
        return set() if follower_ok else names
    return {n for n in names if not ctx.authorize(AclOperation.READ, ResourceType.TOPIC, n)}


def _read_partitions(
    ctx: RequestContext, request: Any, unreadable: set[str]
) -> tuple[list[dict[str, Any]], int, bool]:
    """One pass over the requested partitions: (topic responses, bytes, any error)."""
    topics = ctx.broker.topics
    remaining = int(request.max_bytes) if ctx.version >= 3 else 2**31 - 1
    remaining = min(remaining, int(ctx.broker.config["fetch.max.bytes"]))
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    aborted = () if read_committed else None
    total = 0
    any_error = False
    first_data = True
    responses = []
    for wanted, name in _requested_topics(ctx, request):
        partitions = []
        for part in wanted.partitions:
            plog = topics.partition(name, part.partition) if name is not None else None
            entry: dict[str, Any] = {
                "partition_index": part.partition,
                "error_code": 0,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": aborted,
                "preferred_read_replica": -1,
                "records": b"",
            }
            partitions.append(entry)
            if name in unreadable:
                entry["error_code"] = TOPIC_AUTHORIZATION_FAILED
                any_error = True
                continue
            if plog is None:
                entry["error_code"] = UNKNOWN_TOPIC_OR_PARTITION if name else UNKNOWN_TOPIC_ID
                any_error = True
                continue
            end = plog.end_offset
            lso = plog.last_stable_offset
            entry["high_watermark"] = end
            entry["last_stable_offset"] = lso
            entry["log_start_offset"] = plog.start_offset
            if part.fetch_offset == end or (remaining <= 0 and not first_data):
                continue
            offset = int(part.fetch_offset)
            try:
                limit = min(int(part.partition_max_bytes), remaining)
                data = plog.read(offset, max(limit, 1), max_offset=lso if read_committed else None)
                if read_committed and data:
                    entry["aborted_transactions"] = [
                        {"producer_id": a.producer_id, "first_offset": a.first_offset}
                        for a in plog.aborted_transactions(offset, lso)
                    ]
            except LogError as exc:
                entry["error_code"] = exc.error_code
                any_error = True
                continue
            if not data:
                continue
            if len(data) > limit and not first_data:
                continue  # only the very first batch may exceed the limits
            first_data = False
            entry["records"] = data
            total += len(data)
            remaining -= len(data)
        responses.append(
            {
                "topic": name,
                "topic_id": getattr(wanted, "topic_id", None),
                "partitions": partitions,
            }
        )
    return responses, total, any_error


def _response(ctx: RequestContext, responses: list[dict[str, Any]], error_code: int = 0) -> Any:
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": error_code,
            "session_id": 0,
            "responses": responses,
        },
    )


@handles(ApiKey.FETCH, 4, 18)
async def fetch(ctx: RequestContext, request: Any) -> Any:
    if ctx.version >= 7 and request.session_id != 0:
        return _response(ctx, [], FETCH_SESSION_ID_NOT_FOUND)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait.total_seconds(), 0.0)
    min_bytes = max(int(request.min_bytes), 1)
    unreadable = _unreadable(ctx, request)
    keys = [
        (name, p.partition)
        for t, name in _requested_topics(ctx, request)
        if name is not None and name not in unreadable
        for p in t.partitions
    ]
    while True:
        responses, total, any_error = _read_partitions(ctx, request, unreadable)
        remaining_s = deadline - loop.time()
        if total >= min_bytes or any_error or remaining_s <= 0 or not keys:
            return _response(ctx, responses)
        await ctx.broker.waiters.wait(keys, remaining_s)
