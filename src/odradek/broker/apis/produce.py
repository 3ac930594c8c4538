"""Produce: validate and append record batches; answer per partition.

acks=all and acks=1 are the same on one node: the reply is sent after the
batch is written to the partition's segment file (in the OS page cache, so a
killed broker process loses nothing acknowledged; see docs/operations.md for
the fsync policy). acks=0 gets no reply at all, as in Kafka. When an append
makes an fsync due (flush.messages / flush.ms) the reply waits for it; the
fsync itself runs in a worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Future
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.topics import TopicError
from odradek.log.errors import LogError
from odradek.protocol.apikeys import ApiKey

log = logging.getLogger("odradek.produce")

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
INVALID_RECORD = 87
KAFKA_STORAGE_ERROR = 56
TRANSACTIONS_UNSUPPORTED = 42  # INVALID_REQUEST: Odradek has no transaction coordinator yet


def _partition_result(
    index: int, error_code: int, message: str | None = None, **offsets: int
) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": error_code,
        "base_offset": offsets.get("base_offset", -1),
        "log_append_time": offsets.get("log_append_time", -1),
        "log_start_offset": offsets.get("log_start_offset", -1),
        "record_errors": (),
        "error_message": message,
    }


def _append(
    ctx: RequestContext,
    topic_name: str,
    index: int,
    records: bytes | None,
    flushes: list[tuple[dict[str, Any], Future[None]]],
) -> dict[str, Any]:
    broker = ctx.broker
    topic = broker.topics.get(topic_name)
    if topic is None and broker.config["auto.create.topics.enable"]:
        try:
            topic = broker.topics.create(topic_name)
        except TopicError as exc:
            return _partition_result(index, exc.error_code, str(exc))
    if topic is None or not 0 <= index < len(topic.partitions):
        return _partition_result(index, UNKNOWN_TOPIC_OR_PARTITION, "unknown topic or partition")
    if topic.internal:
        return _partition_result(
            index, INVALID_TOPIC_EXCEPTION, "cannot produce to an internal topic"
        )
    if not records:
        return _partition_result(index, INVALID_RECORD, "no record batch in the request")
    plog = topic.partitions[index]
    try:
        info = plog.append(records)
    except LogError as exc:
        log.debug("append to %s-%d refused: %s", topic_name, index, exc)
        return _partition_result(
            index, exc.error_code, str(exc), log_start_offset=plog.start_offset
        )
    if not info.duplicate:
        broker.notify_append(topic_name, index)
    result = _partition_result(
        index,
        0,
        base_offset=info.base_offset,
        log_append_time=info.log_append_time_ms,
        log_start_offset=info.log_start_offset,
    )
    if info.flushed is not None:
        flushes.append((result, info.flushed))
    return result


async def _await_flushes(flushes: list[tuple[dict[str, Any], Future[None]]]) -> None:
    """Wait for the fsyncs these appends made due; a failed one fails its partition."""
    outcomes = await asyncio.gather(
        *(asyncio.wrap_future(f) for _, f in flushes), return_exceptions=True
    )
    for (result, _), outcome in zip(flushes, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            log.error("fsync after an append failed: %r", outcome)
            result.update(error_code=KAFKA_STORAGE_ERROR, error_message=f"fsync failed: {outcome}")


@handles(ApiKey.PRODUCE, 0, 9, parse_from=3)
async def produce(ctx: RequestContext, request: Any) -> Any:
    acks = request.acks
    if acks not in (-1, 0, 1):
        error: tuple[int, str] | None = (
            INVALID_REQUIRED_ACKS,
            f"acks must be -1, 0 or 1, got {acks}",
        )
    elif request.transactional_id is not None:
        error = (TRANSACTIONS_UNSUPPORTED, "transactional produce is not supported by Odradek yet")
    else:
        error = None
    responses = []
    flushes: list[tuple[dict[str, Any], Future[None]]] = []
    for topic_data in request.topic_data:
        results = []
        for part in topic_data.partition_data:
            if error is not None:
                results.append(_partition_result(part.index, *error))
            else:
                results.append(_append(ctx, topic_data.name, part.index, part.records, flushes))
        responses.append({"name": topic_data.name, "partition_responses": results})
    if acks == 0:
        return None
    if flushes:
        await _await_flushes(flushes)
    return respond(ctx, {"responses": responses, "throttle_time": NO_THROTTLE})
