"""WriteTxnMarkers: a transaction coordinator asks a partition's leader to write markers.

Inter-broker: the coordinator of a transaction sends each partition leader it is not
itself the COMMIT or ABORT marker of its partitions (``transaction_result`` true
is COMMIT). The leader appends it as a control batch and answers once the ISR
holds it; a ``__consumer_offsets`` partition applies it through its group
coordinator (pending transactional offsets become visible or are dropped). Needs
CLUSTER_ACTION on the cluster, as in Kafka.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.context import RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode


async def _write(ctx: RequestContext, marker: Any, topic: str, partition: int) -> int:
    if not ctx.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    if not ctx.broker.replicas.leads(topic, partition):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    try:
        await ctx.broker.txns.write_local_marker(
            (topic, partition),
            int(marker.producer_id),
            int(marker.producer_epoch),
            bool(marker.transaction_result),
        )
    except Exception as exc:
        code = getattr(exc, "error_code", None)
        return int(code) if isinstance(code, int) and code > 0 else ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


@handles(ApiKey.WRITE_TXN_MARKERS, 1, 1)
async def write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    results = []
    for marker in request.markers:
        topics = []
        for t in marker.topics:
            partitions = [
                {"partition_index": int(p), "error_code": await _write(ctx, marker, t.name, int(p))}
                for p in t.partition_indexes
            ]
            topics.append({"name": t.name, "partitions": partitions})
        results.append({"producer_id": marker.producer_id, "topics": topics})
    return respond(ctx, {"markers": results})
