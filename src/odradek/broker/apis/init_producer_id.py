"""InitProducerId: producer ids for idempotent producers.

Ids come from blocks persisted in the data directory, so they are unique across
restarts. A known (id, epoch) pair asking again (KIP-360) gets its epoch bumped.
Transactional ids are refused until Odradek has a transaction coordinator.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.protocol.apikeys import ApiKey

INVALID_REQUEST = 42
MAX_EPOCH = 32767


@handles(ApiKey.INIT_PRODUCER_ID, 0, 4)
def init_producer_id(ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": INVALID_REQUEST,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
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
