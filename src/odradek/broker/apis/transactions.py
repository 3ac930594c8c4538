"""The transaction APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions and ListTransactions (InitProducerId lives in ``init_producer_id``).

Each translates its wire versions into the transaction coordinator core's neutral
requests (or the group coordinator's, for TxnOffsetCommit) and back, after
Kafka's checks in KafkaApis: WRITE on the TRANSACTIONAL_ID to change a
transaction, WRITE on each topic added to one, READ on the group whose offsets
go into one (and on their topics), DESCRIBE on a TRANSACTIONAL_ID to see it;
AddPartitionsToTxn v4+ (the broker-to-broker form, KIP-890) needs
CLUSTER_ACTION. Partitions of unknown or unwritable topics are answered
without asking the coordinator, the others OPERATION_NOT_ATTEMPTED, as Kafka
does.
"""

from __future__ import annotations

import datetime
from collections import defaultdict
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.coordinator import partition_for
from odradek.coordinator import types as group_core
from odradek.coordinator.txn_offsets import TxnOffsetCommitRequest
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.internal_topics import OFFSETS_TOPIC
from odradek.transaction import types as core

VERIFY_ONLY_FROM = 4  # AddPartitionsToTxn v4+: batched, from brokers
TXN_ABORTABLE_FROM = 4  # TxnOffsetCommit v4+ clients know TRANSACTION_ABORTABLE


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _timestamp(ms: int) -> datetime.datetime:
    """A wall-clock ms for a non-nullable timestamp field; kio has no value for -1 ("none"),
    so -1 is the instant 1 ms before the epoch, which it writes back as -1."""
    return _EPOCH + datetime.timedelta(milliseconds=ms)


def _may_write_txn(ctx: RequestContext, transactional_id: str) -> bool:
    return ctx.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


# --- AddPartitionsToTxn --------------------------------------------------------------------


def _partition_results(errors: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (topic, partition), error in errors.items():
        by_topic[topic].append({"partition_index": partition, "partition_error_code": error})
    return [{"name": t, "results_by_partition": parts} for t, parts in by_topic.items()]


async def _add_partitions(
    ctx: RequestContext, transactional_id: str, producer_id: int, epoch: int, topics: Any
) -> dict[tuple[str, int], int]:
    """One client transaction (v0-3): Kafka's per-partition checks, then the coordinator."""
    wanted = [(t.name, int(p)) for t in topics for p in t.partitions]
    if not _may_write_txn(ctx, transactional_id):
        return dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    refused: dict[tuple[str, int], int] = {}
    for topic, partition in wanted:
        if not ctx.authorize(AclOperation.WRITE, ResourceType.TOPIC, topic):
            refused[(topic, partition)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        elif not ctx.broker.topics.has_partition(topic, partition):
            refused[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if refused:
        return {tp: refused.get(tp, ErrorCode.OPERATION_NOT_ATTEMPTED) for tp in wanted}
    request = core.AddPartitionsRequest(transactional_id, producer_id, epoch, tuple(wanted))
    response = await ctx.broker.txns.call(transactional_id, request)
    assert isinstance(response, core.AddPartitionsResponse)
    return dict.fromkeys(wanted, response.error_code)


@handles(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 5)
async def add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    if ctx.version < VERIFY_ONLY_FROM:
        errors = await _add_partitions(
            ctx,
            request.v3_and_below_transactional_id,
            int(request.v3_and_below_producer_id),
            int(request.v3_and_below_producer_epoch),
            request.v3_and_below_topics,
        )
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "results_by_topic_v3_and_below": _partition_results(errors),
            },
        )
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "results_by_transaction": [],
            },
        )
    results = []
    for txn in request.transactions:
        txn_id = txn.transactional_id
        if txn.verify_only:
            errors = {
                (t.name, int(p)): int(
                    ctx.broker.txns.verify(
                        txn_id, int(txn.producer_id), int(txn.producer_epoch), (t.name, int(p))
                    )
                )
                for t in txn.topics
                for p in t.partitions
            }
        else:
            errors = await _add_partitions(
                ctx, txn_id, int(txn.producer_id), int(txn.producer_epoch), txn.topics
            )
        results.append({"transactional_id": txn_id, "topic_results": _partition_results(errors)})
    return respond(
        ctx, {"throttle_time": NO_THROTTLE, "error_code": 0, "results_by_transaction": results}
    )


# --- AddOffsetsToTxn -------------------------------------------------------------------------


@handles(ApiKey.ADD_OFFSETS_TO_TXN, 0, 4)
async def add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    if not _may_write_txn(ctx, request.transactional_id):
        error = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    elif not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        error = ErrorCode.GROUP_AUTHORIZATION_FAILED
    else:
        offsets = (OFFSETS_TOPIC, partition_for(request.group_id, ctx.broker.groups.num_partitions))
        added = core.AddPartitionsRequest(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            (offsets,),
        )
        response = await ctx.broker.txns.call(request.transactional_id, added)
        assert isinstance(response, core.AddPartitionsResponse)
        error = response.error_code
    return respond(ctx, {"throttle_time": NO_THROTTLE, "error_code": error})


# --- EndTxn ----------------------------------------------------------------------------------


@handles(ApiKey.END_TXN, 0, 5)
async def end_txn(ctx: RequestContext, request: Any) -> Any:
    if not _may_write_txn(ctx, request.transactional_id):
        response = core.EndTxnResponse(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    else:
        ended = core.EndTxnRequest(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            bool(request.committed),
        )
        response = await ctx.broker.txns.call(request.transactional_id, ended)  # type: ignore[assignment]
        assert isinstance(response, core.EndTxnResponse)
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": response.error_code,
            "producer_id": response.producer_id,
            "producer_epoch": response.producer_epoch,
        },
    )


# --- TxnOffsetCommit -------------------------------------------------------------------------


def _verified(ctx: RequestContext, request: Any, offsets_partition: int) -> int:
    """KIP-890: the transaction's first offsets in this partition must be in the transaction.

    Verified only when no transaction of the producer is open there yet, as
    Kafka's partition writer does; the coordinator's errors map as Kafka maps them.
    """
    pid, epoch = int(request.producer_id), int(request.producer_epoch)
    plog = ctx.broker.topics.partition(OFFSETS_TOPIC, offsets_partition)
    if plog is None:
        return int(ErrorCode.COORDINATOR_NOT_AVAILABLE)  # a cluster broker not holding it yet
    if plog.producer_state.ongoing.get(pid) is not None:
        return 0
    error = ctx.broker.txns.verify(
        request.transactional_id, pid, epoch, (OFFSETS_TOPIC, offsets_partition)
    )
    if error == ErrorCode.TRANSACTION_ABORTABLE and ctx.version < TXN_ABORTABLE_FROM:
        return int(ErrorCode.INVALID_TXN_STATE)
    if error == ErrorCode.PRODUCER_FENCED:
        return int(ErrorCode.INVALID_PRODUCER_EPOCH)
    if error in (
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE  # retriable for every client version
    return int(error)


@handles(ApiKey.TXN_OFFSET_COMMIT, 0, 5)
async def txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    wanted = [(t.name, int(p.partition_index)) for t in request.topics for p in t.partitions]

    def answer(errors: dict[tuple[str, int], int]) -> Any:
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for (topic, partition), error in errors.items():
            by_topic[topic].append({"partition_index": partition, "error_code": error})
        topics = [{"name": t, "partitions": parts} for t, parts in by_topic.items()]
        return respond(ctx, {"throttle_time": NO_THROTTLE, "topics": topics})

    if not _may_write_txn(ctx, request.transactional_id):
        return answer(dict.fromkeys(wanted, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not ctx.authorize(AclOperation.READ, ResourceType.GROUP, request.group_id):
        return answer(dict.fromkeys(wanted, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    errors: dict[tuple[str, int], int] = {}
    known: list[group_core.OffsetCommitTopic] = []
    for t in request.topics:
        readable = ctx.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)
        partitions = []
        for p in t.partitions:
            index = int(p.partition_index)
            if not readable:
                errors[(t.name, index)] = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif not ctx.broker.topics.has_partition(t.name, index):
                errors[(t.name, index)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            else:
                partitions.append(
                    group_core.OffsetCommitPartition(
                        index,
                        int(p.committed_offset),
                        int(getattr(p, "committed_leader_epoch", -1)),
                        p.committed_metadata,
                    )
                )
        if partitions:
            known.append(group_core.OffsetCommitTopic(t.name, tuple(partitions)))
    if known and request.group_id:
        offsets_partition = partition_for(request.group_id, ctx.broker.groups.num_partitions)
        refused = _verified(ctx, request, offsets_partition)
        if refused:
            errors.update(((t.name, p.partition), refused) for t in known for p in t.partitions)
            known = []
    if known:
        committed = TxnOffsetCommitRequest(
            transactional_id=request.transactional_id,
            group_id=request.group_id,
            producer_id=int(request.producer_id),
            producer_epoch=int(request.producer_epoch),
            topics=tuple(known),
            generation_id=int(getattr(request, "generation_id", -1)),
            member_id=getattr(request, "member_id", "") or "",
            group_instance_id=getattr(request, "group_instance_id", None),
        )
        response = await ctx.broker.groups.call(request.group_id, committed)
        assert isinstance(response, group_core.OffsetCommitResponse)
        for topic in response.topics:
            for part in topic.partitions:
                errors[(topic.name, part.partition)] = part.error_code
    elif not request.group_id:
        errors.update(dict.fromkeys((tp for tp in wanted if tp not in errors), 24))
    return answer({tp: errors[tp] for tp in wanted})


# --- DescribeTransactions / ListTransactions (KIP-664) --------------------------------------


@handles(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0)
async def describe_transactions(ctx: RequestContext, request: Any) -> Any:
    txns = ctx.broker.txns
    described: dict[str, core.DescribedTransaction] = {}
    by_runner: dict[int, list[str]] = defaultdict(list)
    for txn_id in request.transactional_ids:
        if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, txn_id):
            by_runner[txns.partition_of(txn_id)].append(txn_id)
        else:
            described[txn_id] = core.DescribedTransaction(
                txn_id, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            )
    for ids in by_runner.values():
        response = await txns.call(ids[0], core.DescribeTransactionsRequest(tuple(ids)))
        assert isinstance(response, core.DescribeTransactionsResponse)
        described.update({d.transactional_id: d for d in response.transactions})
    states = []
    for txn_id in request.transactional_ids:
        d = described[txn_id]
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic, partition in d.partitions:
            by_topic[topic].append(partition)
        if d.error_code:  # Kafka fills in only the id and the error (the rest are defaults)
            d = core.DescribedTransaction(txn_id, d.error_code, "", 0, 0, 0, 0)
        states.append(
            {
                "error_code": d.error_code,
                "transactional_id": txn_id,
                "transaction_state": d.state,
                "transaction_timeout": d.timeout_ms,
                "transaction_start_time": _timestamp(d.start_ms),
                "producer_id": d.producer_id,
                "producer_epoch": d.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            }
        )
    return respond(ctx, {"throttle_time": NO_THROTTLE, "transaction_states": states})


@handles(ApiKey.LIST_TRANSACTIONS, 0, 2)
async def list_transactions(ctx: RequestContext, request: Any) -> Any:
    listed = core.ListTransactionsRequest(
        states=tuple(request.state_filters),
        producer_ids=tuple(int(p) for p in request.producer_id_filters),
        duration_ms=int(getattr(request, "duration_filter", -1)),
        id_pattern=getattr(request, "transactional_id_pattern", None),
    )
    error = 0
    unknown: tuple[str, ...] = ()
    found: list[core.ListedTransaction] = []
    # Each partition led here answers for its own ids (a cluster broker lists what it
    # coordinates).
    for response in await ctx.broker.txns.call_all(lambda: listed):
        assert isinstance(response, core.ListTransactionsResponse)
        if response.error_code:
            error = error or response.error_code
            continue
        unknown = response.unknown_state_filters
        found.extend(response.transactions)
    visible = [
        t
        for t in found
        if ctx.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id)
    ]
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": error,
            "unknown_state_filters": list(unknown),
            "transaction_states": [
                {
                    "transactional_id": t.transactional_id,
                    "producer_id": t.producer_id,
                    "transaction_state": t.state,
                }
                for t in visible
            ],
        },
    )
