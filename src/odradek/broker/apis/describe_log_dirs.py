"""DescribeLogDirs: the data directory, and the size on disk of each partition in it.

One Odradek node has one log directory (`--data-dir`). Sizes are the bytes of
each partition's segment files; offset lag is 0 (there is no future replica),
and v4 adds the file system's total and usable bytes. Topics asked for that do
not exist are left out, as Kafka leaves them out. A request that asks for it
(Odradek's tagged field, ``protocol/log_dirs.py``) also gets each partition's
damaged ranges: quarantined offsets and skipped bytes (``PartitionLog.damage``).
With an authorizer, DESCRIBE on the cluster is needed.
"""

from __future__ import annotations

import os
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.topics import Topic
from odradek.protocol.apikeys import ApiKey

CLUSTER_AUTHORIZATION_FAILED = 31


def _wanted(ctx: RequestContext, request: Any) -> list[tuple[Topic, list[int]]]:
    """(topic, partitions) to describe: all of them when the request names none."""
    manager = ctx.broker.topics
    if request.topics is None:
        return [(t, list(range(len(t.partitions)))) for t in manager]
    out = []
    for wanted in request.topics:
        topic = manager.get(wanted.topic)
        if topic is None:
            continue
        indexes = [int(p) for p in wanted.partitions if 0 <= int(p) < len(topic.partitions)]
        out.append((topic, indexes))
    return out


@handles(ApiKey.DESCRIBE_LOG_DIRS, 1, 4)
def describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # As Kafka: no directories, and (v3+) the error at the top level.
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": CLUSTER_AUTHORIZATION_FAILED,
                "results": [],
            },
        )
    manager = ctx.broker.topics
    with_damage = bool(getattr(request, "include_damage", False))
    topics = []
    for topic, indexes in _wanted(ctx, request):
        plogs = topic.partitions
        topics.append(
            {
                "name": topic.name,
                "partitions": [
                    {
                        "partition_index": i,
                        "partition_size": plogs[i].size_bytes,
                        "offset_lag": 0,
                        "is_future_key": False,
                        "damage": [d._asdict() for d in plogs[i].damage()] if with_damage else (),
                    }
                    for i in indexes
                ],
            }
        )
    data_dir = manager.data_dir.resolve()
    stats = os.statvfs(data_dir)
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": 0,
            "results": [
                {
                    "error_code": 0,
                    "log_dir": str(data_dir),
                    "topics": topics,
                    "total_bytes": stats.f_frsize * stats.f_blocks,
                    "usable_bytes": stats.f_frsize * stats.f_bavail,
                }
            ],
        },
    )
