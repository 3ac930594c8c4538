"""InitProducerId: producer ids for idempotent producers.

Ids come from blocks persisted in the data directory, so they are unique across
restarts. A known (id, epoch) pair asking again (KIP-360) gets its epoch bumped.
Transactional ids are refused until Odradek has a transaction coordinator.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.protocol.apikeys import ApiKey

INVALID_REQUEST = 42
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
MAX_EPOCH = 32767


def _refused(ctx: RequestContext, error_code: int) -> Any:
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": error_code,
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )


@handles(ApiKey.INIT_PRODUCER_ID, 0, 4)
def init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        if not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        ):
            return _refused(ctx, TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        return _refused(ctx, INVALID_REQUEST)
    # Kafka 3+: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679).
    if not ctx.authorize(
        AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
    ) and not ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC):
        return _refused(ctx, CLUSTER_AUTHORIZATION_FAILED)
    producer_id = int(getattr(request, "producer_id", -1))
    epoch = int(getattr(request, "producer_epoch", -1))
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH - 1:
        new_id, new_epoch = producer_id, epoch + 1
    else:
        new_id, new_epoch = ctx.broker.topics.allocate_producer_id(), 0
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": 0,
            "producer_id": new_id,
            "producer_epoch": new_epoch,
        },
    )
