"""InitProducerId: producer ids for idempotent and transactional producers.

Ids come from blocks persisted in the data directory, so they are unique across
restarts. An idempotent producer always gets a new id at epoch 0, whatever id and
epoch it sends (KIP-360 bumps: Kafka's coordinator does the same; bumping the id a
request names would let any client fence another producer, a transactional one
included). A transactional id goes to its transaction coordinator
(``odradek.transaction``), which fences older epochs and aborts what the last
holder of the id left open.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.control_plane import ProducerIdsUnavailable
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.transaction.types import InitProducerIdRequest, InitProducerIdResponse


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


@handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        if not ctx.authorize(
            AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id
        ):
            return _refused(ctx, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        timeout = request.transaction_timeout
        init = InitProducerIdRequest(
            request.transactional_id,
            round(timeout.total_seconds() * 1000)
            if hasattr(timeout, "total_seconds")
            else int(timeout),
            int(getattr(request, "producer_id", -1)),
            int(getattr(request, "producer_epoch", -1)),
        )
        answer = await ctx.broker.txns.call(request.transactional_id, init)
        assert isinstance(answer, InitProducerIdResponse)
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": answer.error_code,
                "producer_id": answer.producer_id,
                "producer_epoch": answer.producer_epoch,
            },
        )
    # Kafka 3+: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679).
    if not ctx.authorize(
        AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
    ) and not ctx.authorize_any(AclOperation.WRITE, ResourceType.TOPIC):
        return _refused(ctx, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    try:
        producer_id = ctx.broker.topics.allocate_producer_id()
    except ProducerIdsUnavailable:
        # A cluster broker between producer-id blocks: retriable, the client asks again.
        return _refused(ctx, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": 0,
            "producer_id": producer_id,
            "producer_epoch": 0,
        },
    )
