"""AlterReplicaLogDirs: move replicas between this broker's log directories (JBOD).

Answered as Kafka's ReplicaManager.alterReplicaLogDirs answers, per partition:
NONE once the move has started (it continues in the background, the partition
serving throughout: odradek.log.dir_move; DescribeLogDirs shows its progress as
the future replica) or when the replica is in that directory already;
LOG_DIR_NOT_FOUND for a path that is not one of ``log.dirs`` (an absolute path,
as given to or reported by DescribeLogDirs); KAFKA_STORAGE_ERROR for a
directory that failed; REPLICA_NOT_AVAILABLE for a partition this broker holds
no replica of (the code Kafka keeps for this API). A partition named twice
moves to the last directory given, as in Kafka. Needs ALTER on the cluster
(CLUSTER_AUTHORIZATION_FAILED for every partition otherwise). Versions 1-2, as
Kafka 4 (v0 was removed).
"""

from __future__ import annotations

from typing import Any

from odradek.broker.apis.describe_log_dirs import hosts_replica
from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.topics import REPLICA_NOT_AVAILABLE
from odradek.protocol.apikeys import ApiKey

CLUSTER_AUTHORIZATION_FAILED = 31


@handles(ApiKey.ALTER_REPLICA_LOG_DIRS, 1, 2)
async def alter_replica_log_dirs(ctx: RequestContext, request: Any) -> Any:
    wanted: dict[tuple[str, int], str] = {}  # the last directory named for a partition wins
    for target in request.dirs:
        for topic in target.topics:
            for partition in topic.partitions:
                wanted[str(topic.name), int(partition)] = str(target.path)
    allowed = ctx.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    results: dict[str, list[dict[str, int]]] = {}
    for (topic_name, partition), path in wanted.items():
        if not allowed:
            code = CLUSTER_AUTHORIZATION_FAILED
        elif not hosts_replica(ctx, topic_name, partition):
            code = REPLICA_NOT_AVAILABLE
        else:
            code = await ctx.broker.topics.move_replica(topic_name, partition, path)
        results.setdefault(topic_name, []).append(
            {"partition_index": partition, "error_code": code}
        )
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "results": [
                {"topic_name": name, "partitions": partitions}
                for name, partitions in results.items()
            ],
        },
    )
