"""ListConfigResources (KIP-1142; v0 was ListClientMetricsResources, KIP-714).

As Kafka 4.1 answers it: v0 lists client-metrics subscriptions only; v1 lists the
resource types asked for (all supported ones when none is): groups with configs,
client-metrics subscriptions, broker loggers, brokers (every live broker's id) and
topics (every topic, internal ones included). A type the version does not support
makes the answer UNSUPPORTED_VERSION. Needs DESCRIBE_CONFIGS on the cluster
(CLUSTER_AUTHORIZATION_FAILED).

Odradek has no client-metrics subscriptions, no dynamic group configs and no
broker loggers as config resources (DescribeConfigs serves topics and brokers), so
those types list nothing: only resources DescribeConfigs can describe are listed.
"""

from __future__ import annotations

from typing import Any

from odradek.broker.apis.metadata import broker_entries
from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.protocol.apikeys import ApiKey

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED = {
    0: frozenset({CLIENT_METRICS}),
    1: frozenset({TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP}),
}
CLUSTER_AUTHORIZATION_FAILED = 31
UNSUPPORTED_VERSION = 35


def _resources(ctx: RequestContext, types: frozenset[int]) -> list[dict[str, Any]]:
    """Kafka's order: groups, client metrics, broker loggers, brokers, topics."""
    found: list[dict[str, Any]] = []
    if BROKER in types:
        found += [
            {"resource_name": str(b["node_id"]), "resource_type": BROKER}
            for b in broker_entries(ctx)
        ]
    if TOPIC in types:
        cluster = ctx.broker.cluster
        found += [
            {"resource_name": t.name, "resource_type": TOPIC}
            for t in ctx.broker.topics
            if cluster is None or t.name in cluster.assignments
        ]
    return found


@handles(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
def list_config_resources(ctx: RequestContext, request: Any) -> Any:
    def answer(code: int, resources: list[dict[str, Any]]) -> Any:
        return respond(
            ctx,
            {"throttle_time": NO_THROTTLE, "error_code": code, "config_resources": resources},
        )

    if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.CLUSTER, CLUSTER_NAME):
        return answer(CLUSTER_AUTHORIZATION_FAILED, [])
    supported = SUPPORTED[min(ctx.version, 1)]
    asked = frozenset(int(t) for t in getattr(request, "resource_types", ())) or supported
    if not asked <= supported:
        return answer(UNSUPPORTED_VERSION, [])
    return answer(0, _resources(ctx, asked))
