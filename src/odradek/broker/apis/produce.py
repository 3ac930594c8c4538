"""Produce: validate and append record batches; answer per partition.

Only the partition's leader appends (NOT_LEADER_OR_FOLLOWER otherwise: the replica
layer's check, `ReplicaManager.leader_for`). acks=all needs ``min.insync.replicas``
in the ISR before the append (NOT_ENOUGH_REPLICAS) and is answered once the high
watermark passes the batch; on a lone node, alone in its ISR, that is at once,
after the batch is written to the partition's segment file (in the OS page cache,
so a killed broker process loses nothing acknowledged; see docs/operations.md for
the fsync policy). acks=0 gets no reply at all, as in Kafka. From v13 topics
are named by topic id (KIP-516): an unknown id gets UNKNOWN_TOPIC_ID and is
never auto-created. When an append makes an fsync due (flush.messages /
flush.ms) the reply waits for it; the fsync itself runs in a worker thread,
never on the event loop.

Batches are stored as sent unless the topic's compression.type names a codec
(anything but `producer`): then, as Kafka does, batches in another codec are
recompressed to it (with the topic's compression.<codec>.level) after their
CRC is checked. This is the one case where Produce reads inside a batch.

Transactional batches need WRITE on the request's transactional id; a request
with a batch that sets the transactional attribute (whatever its producer id)
and no transactional id is refused whole with TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
as Kafka 4.1's KafkaApis.handleProduceRequest does. A transaction's first write
to a partition (its producer has no transaction open there yet) is checked with
the transaction coordinator first (KIP-890 part 1): a partition that is not in
the producer's transaction, e.g. a late request of a transaction that already
ended, would otherwise open a transaction nobody ever closes and hold the
partition's last stable offset back for good.

Requests are read by hand (``protocol/produce.py``): kio copies every
partition's records holding the GIL, and a 100 MB request stopped the event loop
for a fifth of a second; the records are now views of the request, appended
without a copy. Responses are written by hand too (``encode_produce_response``).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from concurrent.futures import Future
from typing import Any

from odradek.broker.apis.leader_hints import PRODUCE_HINTED, PRODUCE_HINTS_FROM, LeaderHints
from odradek.broker.config import topic_config_value
from odradek.broker.context import RequestContext
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.topics import Topic, TopicError, storage_failures
from odradek.log.errors import LogError
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import DecodeError, RequestHeader, skip_tagged_fields
from odradek.protocol.errors import ErrorCode
from odradek.protocol.produce import (
    FIRST_FLEXIBLE_VERSION,
    ProduceDecodeError,
    ProduceRequest,
    encode_produce_response,
    parse_produce_request,
)
from odradek.protocol.records import (
    _COMPRESSION_MASK,
    _TRANSACTIONAL_BIT,
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
    InvalidRecordError,
    recompress_batches,
    validate_batches_raw,
)
from odradek.replication.replica import Replica

log = logging.getLogger("odradek.produce")

_LENGTH = struct.Struct(">i")
_ATTRS = struct.Struct(">h")

TOPIC_IDS_FROM = 13
Records = bytes | bytearray | memoryview  # a partition's records: a view of the request
TopicResults = tuple[str, Any, list[dict[str, Any]]]
"""A topic's answer: (name, topic id, its partitions' results), as the encoder takes it."""
# compression.type -> (codec id, the config holding its level, if it has one)
CODECS = {
    "uncompressed": (COMPRESSION_NONE, None),
    "gzip": (COMPRESSION_GZIP, "compression.gzip.level"),
    "snappy": (COMPRESSION_SNAPPY, None),
    "lz4": (COMPRESSION_LZ4, "compression.lz4.level"),
    "zstd": (COMPRESSION_ZSTD, "compression.zstd.level"),
}


def _topic_setting(ctx: RequestContext, topic: Topic, name: str) -> Any:
    """One topic config's value: the topic's override, else the broker default."""
    raw = topic.configs.get(name)
    if raw is None:
        return ctx.broker.config[name]  # compression configs share the broker setting's name
    return topic_config_value(name, raw)


def _target_codec(ctx: RequestContext, topic: Topic) -> tuple[int, int | None] | None:
    """(codec, level) batches must be stored with, or None to keep the producer's."""
    target = CODECS.get(_topic_setting(ctx, topic, "compression.type"))
    if target is None:  # "producer"
        return None
    codec, level_config = target
    return codec, _topic_setting(ctx, topic, level_config) if level_config else None


TXN_ABORTABLE_FROM = 11  # Produce v11+ clients know TRANSACTION_ABORTABLE (KIP-890)
_ATTRIBUTES = struct.Struct(">h")
_PRODUCER = struct.Struct(">qh")  # producer id, epoch at bytes 43..53 of a batch header


_ONE_BATCH = struct.Struct(">i9xh20xqh")  # from byte 8: length, attributes, producer id, epoch


def _single_batch(records: Records | None) -> tuple[int, int, int] | None:
    """(attributes, producer id, epoch) when ``records`` hold exactly one batch header's
    worth and its length spans them (what producers send per partition), else None:
    then the header walks below answer. For one batch they answer the same from these
    three fields, with one unpack instead of three walks."""
    if not records or len(records) < 61:
        return None
    length, attributes, producer_id, epoch = _ONE_BATCH.unpack_from(records, 8)
    if 12 + length != len(records):
        return None
    return attributes, producer_id, epoch


def _transactional_producer(records: Records | None) -> tuple[int, int] | None:
    """(producer id, epoch) when the batches are transactional, else None; malformed data
    is left to validation.

    Every batch header is read, not just the first: a transactional batch behind a
    plain one (or another producer's) would escape verification and open a
    transaction no coordinator knows, holding the last stable offset back for good.
    Kafka takes one batch per partition; mixing is refused with INVALID_RECORD.
    """
    found: tuple[int, int] | None = None
    plain = False
    pos, end = 0, len(records) if records else 0
    while records and end - pos >= 61:
        (length,) = _LENGTH.unpack_from(records, pos + 8)
        if length <= 0:
            break
        if _ATTRIBUTES.unpack_from(records, pos + 21)[0] & _TRANSACTIONAL_BIT:
            producer = _PRODUCER.unpack_from(records, pos + 43)
            if found is not None and producer != found:
                raise InvalidRecordError("a produce request's batches are of several producers")
            found = producer
        else:
            plain = True
        pos += 12 + length
    if found is not None and plain:
        raise InvalidRecordError("transactional and plain batches in one produce request")
    return found if found is not None and found[0] >= 0 else None


def _sets_transactional_bit(records: Records | None) -> bool:
    """Does any batch header carry the transactional attribute, whatever its producer id?
    (A cheap walk of the headers; anything malformed is left to validation.)"""
    one = _single_batch(records)
    if one is not None:
        return bool(one[0] & _TRANSACTIONAL_BIT)
    pos, end = 0, len(records) if records else 0
    while records and end - pos >= 61:
        (length,) = _LENGTH.unpack_from(records, pos + 8)
        if length <= 0:
            return False
        if _ATTRIBUTES.unpack_from(records, pos + 21)[0] & _TRANSACTIONAL_BIT:
            return True
        pos += 12 + length
    return False


def _has_transactional_records(request: Any) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: a batch with the transactional
    attribute, even one without a producer id (-1). Kafka 4.1's handleProduceRequest
    refuses the whole request with TRANSACTIONAL_ID_AUTHORIZATION_FAILED when such a
    request has no transactional id, before anything is appended."""
    for topic in request.topic_data:  # (loops, not any() over a generator: every request)
        for partition in topic.partition_data:
            if _sets_transactional_bit(partition.records):
                return True
    return False


def _unverified(
    ctx: RequestContext, txn_id: str, topic: str, index: int, producer: tuple[int, int]
) -> int:
    """KIP-890: a transaction's first write to a partition must be in the transaction.

    Checked only when the producer has no transaction open in the partition yet
    (as Kafka's ReplicaManager does); the coordinator's answer becomes the error
    Kafka gives each Produce version.
    """
    plog = ctx.broker.topics.partition(topic, index)
    if plog is None or plog.producer_state.ongoing.get(producer[0]) is not None:
        return 0
    error = ctx.broker.txns.verify(txn_id, producer[0], producer[1], (topic, index))
    if error == ErrorCode.TRANSACTION_ABORTABLE:
        if ctx.version >= TXN_ABORTABLE_FROM:
            return ErrorCode.TRANSACTION_ABORTABLE
        return ErrorCode.INVALID_TXN_STATE
    if error == ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    if error in (
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    ):
        return ErrorCode.NOT_ENOUGH_REPLICAS  # retriable for every client version
    return int(error)


_UNVERIFIED_MESSAGES = {
    ErrorCode.INVALID_TXN_STATE: "the partition is not in the producer's transaction",
    ErrorCode.TRANSACTION_ABORTABLE: "the partition is not in the producer's transaction",
    ErrorCode.INVALID_PRODUCER_ID_MAPPING: (
        "the producer id is not the transactional id's "
        "(a producer id must come from InitProducerId with this transactional id)"
    ),
    ErrorCode.INVALID_PRODUCER_EPOCH: (
        "the producer epoch is not the transactional id's current one"
    ),
    ErrorCode.NOT_ENOUGH_REPLICAS: "the transaction coordinator could not verify the partition yet",
}


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


def _has_compressed_batch(records: Records) -> bool:
    """Whether any batch header in `records` names a codec (a cheap walk of the headers;
    anything malformed counts, so the full check runs where inflating would)."""
    pos, end = 0, len(records)
    while pos < end:
        if end - pos < 23:
            return True
        (length,) = _LENGTH.unpack_from(records, pos + 8)
        (attributes,) = _ATTRS.unpack_from(records, pos + 21)
        if attributes & 0x07 or length <= 0:
            return True
        pos += 12 + length
    return False


def _recompressed(records: Records, target: tuple[int, int | None], bound: int) -> bytes:
    validate_batches_raw(records, max_decompressed_bytes=bound)  # no fresh CRC on bad data
    return recompress_batches(records, *target, max_decompressed_bytes=bound)


async def _append(
    ctx: RequestContext,
    topic_name: str,
    index: int,
    records: Records | None,
    auto_created: dict[str, Topic | TopicError],
    flushes: list[tuple[dict[str, Any], Future[None]]],
    txn_id: str | None = None,
    *,
    acks: int = 1,
    replicated: list[tuple[dict[str, Any], Replica, int]] | None = None,
) -> dict[str, Any]:
    broker = ctx.broker
    if replicated is None:
        replicated = []
    topic = broker.topics.get(topic_name)
    failed = auto_created.get(topic_name)
    if topic is None and isinstance(failed, TopicError):
        return _partition_result(index, failed.error_code, str(failed))
    if topic is None or not 0 <= index < len(topic.partitions):
        return _partition_result(
            index, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown topic or partition"
        )
    if topic.internal:
        return _partition_result(
            index, ErrorCode.INVALID_TOPIC_EXCEPTION, "cannot produce to an internal topic"
        )
    if not records:
        return _partition_result(index, ErrorCode.INVALID_RECORD, "no record batch in the request")
    plog = topic.partitions[index]
    if plog is None:  # a partition of the cluster with no replica here
        return _partition_result(index, ErrorCode.NOT_LEADER_OR_FOLLOWER, "not the leader")
    replicas = broker.replicas
    replica, refusal = replicas.leader_for(topic_name, index)
    if replica is None:
        return _partition_result(index, refusal, "not the leader")
    if acks == -1 and (refused := replicas.check_acks_all(replica)):
        return _partition_result(
            index,
            refused,
            f"{len(replica.isr)} in-sync replicas, min.insync.replicas is "
            f"{replicas.min_insync(topic_name)}",
        )
    try:
        one = _single_batch(records)
        if one is None:
            producer = _transactional_producer(records)
            compressed = _has_compressed_batch(records)
        else:
            attributes, producer_id, epoch = one
            transactional = attributes & _TRANSACTIONAL_BIT and producer_id >= 0
            producer = (producer_id, epoch) if transactional else None
            compressed = bool(attributes & _COMPRESSION_MASK)
        # Inflating is bounded (message.decompressed.max.bytes) but still costs tens of
        # milliseconds for a large batch: it runs in a worker thread, never on the loop.
        validated = None
        target = _target_codec(ctx, topic)
        if target is not None:
            bound = plog.config.max_decompressed_bytes
            records = await asyncio.to_thread(_recompressed, records, target, bound)
        elif compressed:
            # The records are a view of the request (protocol/produce.py), and `append`
            # reuses a validation for bytes only: copied before the worker reads them.
            records = bytes(records)
            validated = await asyncio.to_thread(plog.validate, records)
        if producer is not None and txn_id is not None:
            # Verified after the worker thread, with no await before the append: the
            # transaction may have ended (its markers written) while the batch inflated.
            unverified = _unverified(ctx, txn_id, topic_name, index, producer)
            if unverified:
                return _partition_result(
                    index, unverified, _UNVERIFIED_MESSAGES.get(unverified, "not verified")
                )
        info = replicas.append(replica, records, validated=validated)
    except LogError as exc:  # NotLeaderError too: leadership moved meanwhile
        log.debug("append to %s-%d refused: %s", topic_name, index, exc)
        return _partition_result(
            index, exc.error_code, str(exc), log_start_offset=plog.start_offset
        )
    except OSError as exc:
        # A full disk or an I/O error: refuse this append, keep the connection.
        storage_failures.log(
            "produce", logging.ERROR, "cannot append to %s-%d: %s", topic_name, index, exc
        )
        return _partition_result(
            index, ErrorCode.KAFKA_STORAGE_ERROR, f"storage error: {exc.strerror}"
        )
    result = {  # _partition_result's fields, written out: this is every append's answer
        "index": index,
        "error_code": 0,
        "base_offset": info.base_offset,
        "log_append_time": info.log_append_time_ms,
        "log_start_offset": info.log_start_offset,
        "record_errors": (),
        "error_message": None,
    }
    if acks == -1:
        # Answered once the high watermark passes the batch: at once when it already
        # does (a lone node, alone in its ISR), else when the followers have it.
        acked = replicas.acked(replica, info.last_offset)
        if acked is None:
            replicated.append((result, replica, info.last_offset))
        elif acked:
            result.update(error_code=acked, error_message=_REPLICATION_ERRORS.get(acked))
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
            result.update(
                error_code=ErrorCode.KAFKA_STORAGE_ERROR, error_message=f"fsync failed: {outcome}"
            )


async def _await_replication(
    ctx: RequestContext, waits: list[tuple[dict[str, Any], Replica, int]], timeout_ms: int
) -> None:
    """acks=all: each partition answers once the ISR holds its batch."""
    replicas = ctx.broker.replicas
    timeout_s = max(timeout_ms, 0) / 1000
    outcomes = await asyncio.gather(
        *(replicas.wait_replicated(replica, last, timeout_s) for _, replica, last in waits)
    )
    for (result, _, _), error in zip(waits, outcomes, strict=True):
        if error:
            result.update(error_code=error, error_message=_REPLICATION_ERRORS.get(error))


_REPLICATION_ERRORS = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: "leadership moved before the in-sync replicas had the batch",
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: "written, but fewer in-sync replicas than "
    "min.insync.replicas hold it",
    ErrorCode.REQUEST_TIMED_OUT: "the in-sync replicas did not all have the batch within the "
    "timeout",
}


def read_request(header: RequestHeader, frame: Records, pos: int) -> ProduceRequest:
    """The request body, read by hand: the records are views of ``frame``, not copies."""
    try:
        if header.api_version >= FIRST_FLEXIBLE_VERSION:
            pos = skip_tagged_fields(frame, pos)
        return parse_produce_request(frame, pos, header.api_version)
    except ProduceDecodeError as exc:
        raise DecodeError(f"malformed PRODUCE v{header.api_version}: {exc}") from exc


def _ms(value: Any) -> int:
    return round(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def _may_create(ctx: RequestContext, topic: str) -> bool:
    """Auto-creation needs CREATE on the cluster or on the topic (as Metadata's)."""
    return ctx.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME) or ctx.authorize(
        AclOperation.CREATE, ResourceType.TOPIC, topic
    )


def _topic_name(ctx: RequestContext, topic_data: Any) -> tuple[str, tuple[int, str] | None]:
    """The topic's name (v13+: from its id), or the error every partition gets."""
    if ctx.version < TOPIC_IDS_FROM:
        return topic_data.name, None
    found = ctx.broker.topics.topics_by_id.get(topic_data.topic_id)
    if found is None:
        return "", (ErrorCode.UNKNOWN_TOPIC_ID, f"no topic with id {topic_data.topic_id}")
    return found.name, None


async def _auto_create(
    ctx: RequestContext, named: list[tuple[str, tuple[int, str] | None]]
) -> dict[str, Topic | TopicError]:
    """Create the unknown topics this produce names, a bounded number, in one batch."""
    broker = ctx.broker
    topics = broker.topics
    unknown = [name for name, error in named if error is None and topics.get(name) is None]
    if not unknown or not broker.config["auto.create.topics.enable"]:
        return {}  # the common case: every topic exists
    unknown = [name for name in unknown if _may_create(ctx, name)]
    limit = max(int(broker.config["auto.create.topics.max.per.request"]), 0)
    return await broker.topics.ensure_topics(list(dict.fromkeys(unknown))[:limit])


@handles(ApiKey.PRODUCE, 0, 13, parse_from=3, reader=read_request)
async def produce(ctx: RequestContext, request: Any) -> Any:
    acks = request.acks
    if acks not in (-1, 0, 1):
        error: tuple[int, str] | None = (
            ErrorCode.INVALID_REQUIRED_ACKS,
            f"acks must be -1, 0 or 1, got {acks}",
        )
    elif (
        request.transactional_id is not None
        and not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        )
    ) or (request.transactional_id is None and _has_transactional_records(request)):
        # Kafka: transactional records need WRITE on the request's transactional id.
        error = (
            ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "not authorized for the transactional id",
        )
    else:
        error = None
    named = [_topic_name(ctx, t) for t in request.topic_data]
    writable = [
        error is not None or ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, name)
        for name, error in named
    ]
    auto_created: dict[str, Topic | TopicError] = {}
    known = ctx.broker.topics.get
    if error is None and not all(e is not None or known(n) is not None for n, e in named):
        auto_created = await _auto_create(
            ctx, [n for n, ok in zip(named, writable, strict=True) if ok]
        )
    responses: list[TopicResults] = []
    flushes: list[tuple[dict[str, Any], Future[None]]] = []
    waits: list[tuple[dict[str, Any], Replica, int]] = []
    for topic_data, (name, topic_error), may_write in zip(
        request.topic_data, named, writable, strict=True
    ):
        failure = error or topic_error
        results = []
        for part in topic_data.partition_data:
            if failure is not None:
                results.append(_partition_result(part.index, *failure))
            elif not may_write:
                results.append(_partition_result(part.index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
            else:
                result = await _append(
                    ctx,
                    name,
                    part.index,
                    part.records,
                    auto_created,
                    flushes,
                    request.transactional_id,
                    acks=acks,
                    replicated=waits,
                )
                results.append(result)

        responses.append((name, topic_data.topic_id, results))
    if acks == 0:
        return None
    if flushes:
        await _await_flushes(flushes)
    if waits:
        await _await_replication(ctx, waits, _ms(request.timeout))
    return encode_produce_response(
        ctx.version,
        ctx.header.correlation_id,
        throttle_ms=0,
        topics=responses,
        node_endpoints=_name_leaders(ctx, responses) if ctx.version >= PRODUCE_HINTS_FROM else (),
    )


def _name_leaders(ctx: RequestContext, responses: list[TopicResults]) -> list[dict[str, Any]]:
    """KIP-951: each partition refused as not led here names its current leader; the
    endpoints of those leaders, for the response (`leader_hints`)."""
    hints: LeaderHints | None = None
    for name, _, results in responses:
        for result in results:
            if result["error_code"] in PRODUCE_HINTED:
                hints = hints or LeaderHints(ctx)
                result["current_leader"] = hints.current_leader(name, result["index"])
    return hints.node_endpoints() if hints is not None else []
