"""DescribeCluster: this one node is the whole cluster and its controller."""

from __future__ import annotations

from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.protocol.apikeys import ApiKey


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
def describe_cluster(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": 0,
            "error_message": None,
            "endpoint_type": getattr(request, "endpoint_type", 1),
            "cluster_id": broker.cluster_id,
            "controller_id": broker.node_id,
            "brokers": [
                {
                    "broker_id": broker.node_id,
                    "host": broker.advertised_host,
                    "port": broker.advertised_port,
                    "rack": None,
                    "is_fenced": False,
                }
            ],
            "cluster_authorized_operations": -2147483648,
        },
    )
