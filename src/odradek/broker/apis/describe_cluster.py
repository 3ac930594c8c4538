"""DescribeCluster: the live brokers and the controller (a single node: itself)."""

from __future__ import annotations

from typing import Any

from odradek.broker.apis.metadata import broker_entries, controller_id
from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.protocol.apikeys import ApiKey


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
def describe_cluster(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    operations = -2147483648  # not asked for
    if request.include_cluster_authorized_operations:
        operations = (
            ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
            if ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
            else 0
        )
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": 0,
            "error_message": None,
            "endpoint_type": getattr(request, "endpoint_type", 1),
            "cluster_id": broker.cluster_id,
            "controller_id": controller_id(ctx),
            "brokers": [
                {
                    "broker_id": b["node_id"],
                    "host": b["host"],
                    "port": b["port"],
                    "rack": b["rack"],
                    "is_fenced": False,
                }
                for b in broker_entries(ctx)
            ],
            "cluster_authorized_operations": operations,
        },
    )
