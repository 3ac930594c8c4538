"""DescribeLogDirs: each log directory, and the size on disk of each partition in it.

Every directory of `log.dirs` is described (its absolute path, as Kafka gives it),
with the partitions whose log is there: the bytes of their segment files and an
offset lag of 0 (the current replica). A partition being moved there
(AlterReplicaLogDirs) is also listed there as the *future* replica
(``is_future_key``), with the bytes copied so far and how many offsets the copy
trails by (an upper bound: the copy is counted whole segments at a time). v4 adds
the file system's total and usable bytes. A directory found failing (see
odradek.broker.log_dirs) answers KAFKA_STORAGE_ERROR with no partitions and -1
bytes, as Kafka answers for an offline directory.

Topics asked for that do not exist are left out, as Kafka leaves them out; in a
cluster, only the replicas this broker holds are listed. A request that asks for it
(Odradek's tagged field, ``protocol/log_dirs.py``) also gets each current replica's
damaged ranges: quarantined offsets and skipped bytes (``PartitionLog.damage``).
With an authorizer, DESCRIBE on the cluster is needed.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.broker.topics import Topic
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

UNKNOWN_VOLUME_BYTES = -1  # Kafka's DescribeLogDirsResponse.UNKNOWN_VOLUME_BYTES


def hosts_replica(ctx: RequestContext, topic: str, partition: int) -> bool:
    """Whether this broker holds a replica of the partition (a lone node: all of them; a
    cluster member: those assigned to it, and the topics it keeps to itself)."""
    replicas = ctx.broker.control.replicas_of(topic, partition)
    return not replicas or ctx.broker.node_id in replicas


def _wanted(ctx: RequestContext, request: Any) -> list[tuple[Topic, list[int]]]:
    """(topic, partitions) to describe: all of them when the request names none."""
    manager = ctx.broker.topics
    if request.topics is None:
        chosen = [(t, list(range(len(t.partitions)))) for t in manager]
    else:
        chosen = []
        for wanted in request.topics:
            topic = manager.get(wanted.topic)
            if topic is None:
                continue
            indexes = [int(p) for p in wanted.partitions if 0 <= int(p) < len(topic.partitions)]
            chosen.append((topic, indexes))
    return [(t, [i for i in idx if hosts_replica(ctx, t.name, i)]) for t, idx in chosen]


@handles(ApiKey.DESCRIBE_LOG_DIRS, 1, 4)
def describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        # As Kafka: no directories, and (v3+) the error at the top level.
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                "results": [],
            },
        )
    manager = ctx.broker.topics
    # log directory -> topic -> partition entries
    listed: dict[Path, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    with_damage = bool(getattr(request, "include_damage", False))
    for topic, indexes in _wanted(ctx, request):
        for index in indexes:
            plog = topic.partitions[index]
            if plog is None:  # placed here, not opened yet
                continue
            listed[plog.directory.parent][topic.name].append(
                {
                    "partition_index": index,
                    "partition_size": plog.size_bytes,
                    "offset_lag": 0,
                    "is_future_key": False,
                    "damage": [d._asdict() for d in plog.damage()] if with_damage else (),
                }
            )
            move = manager.moves.get((topic.name, index))
            if move is not None:
                listed[move.target.path][topic.name].append(
                    {
                        "partition_index": index,
                        "partition_size": move.mover.copied_bytes,
                        "offset_lag": move.mover.offset_lag,
                        "is_future_key": True,
                        "damage": (),
                    }
                )
    results = []
    for log_dir in manager.log_dirs:
        failure = manager.log_dirs.probe(log_dir)
        entry: dict[str, Any] = {
            "error_code": 0,
            "log_dir": str(log_dir.path),
            "topics": [],
            "total_bytes": UNKNOWN_VOLUME_BYTES,
            "usable_bytes": UNKNOWN_VOLUME_BYTES,
        }
        try:
            stats = os.statvfs(log_dir.path) if failure is None else None
        except OSError as exc:
            manager.log_dirs.mark_failed(log_dir, str(exc))
            stats = None
        if stats is None:
            entry["error_code"] = ErrorCode.KAFKA_STORAGE_ERROR
        else:
            entry["total_bytes"] = stats.f_frsize * stats.f_blocks
            entry["usable_bytes"] = stats.f_frsize * stats.f_bavail
            entry["topics"] = [
                {"name": name, "partitions": partitions}
                for name, partitions in listed.get(log_dir.path, {}).items()
            ]
        results.append(entry)
    return respond(ctx, {"throttle_time": NO_THROTTLE, "error_code": 0, "results": results})
