"""DescribeQuorum: the quorum that holds the cluster's metadata, as KRaft describes it.

A Kafka 4 cluster keeps its metadata in the ``__cluster_metadata`` log, replicated
by a Raft quorum of controllers; DescribeQuorum (KIP-595, KIP-853 for v2) names its
leader, epoch and high watermark, and each voter's progress. Odradek answers for
what plays that part:

* **A single node** is a standalone voter, leader of its own metadata: leader
  epoch one more at every start (as each start of a one-voter KRaft quorum is a
  new election), high watermark the number of metadata changes it has recorded
  (its topic journal's sequence), itself the only voter, caught up now.
* **A cluster** keeps its metadata in etcd, and every broker campaigns for the
  controller role: the voters are the live brokers, the leader is the controller
  etcd elected, with its epoch; the high watermark is the etcd revision this
  broker's view has reached. A broker knows its own progress only: the others'
  log end offsets are -1 (Kafka's "unknown"). Without a controller the partition
  answers NOT_LEADER_OR_FOLLOWER, as a quorum without a leader does.

Observers (Kafka's brokers that only fetch) are none: every node is a voter. As
Kafka: DESCRIBE on the cluster is needed (CLUSTER_AUTHORIZATION_FAILED), and a
request for anything but partition 0 of ``__cluster_metadata`` is INVALID_REQUEST.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from odradek.broker.context import NO_THROTTLE, RequestContext, respond
from odradek.broker.registry import handles
from odradek.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from odradek.protocol.apikeys import ApiKey

METADATA_TOPIC = "__cluster_metadata"
NOT_LEADER_OR_FOLLOWER = 6
CLUSTER_AUTHORIZATION_FAILED = 31
INVALID_REQUEST = 42
UNKNOWN = -1
ZERO_UUID = uuid.UUID(int=0)


def _asks_for_metadata_partition(request: Any) -> bool:
    topics = list(request.topics)
    return (
        len(topics) == 1
        and topics[0].topic_name == METADATA_TOPIC
        and [int(p.partition_index) for p in topics[0].partitions] == [0]
    )


def _voter(node_id: int, directory: uuid.UUID, end: int, caught_up_ms: int) -> dict[str, Any]:
    return {
        "replica_id": node_id,
        "replica_directory_id": directory,
        "log_end_offset": end,
        "last_fetch_timestamp": UNKNOWN,  # Kafka: -1 for the leader too
        "last_caught_up_timestamp": caught_up_ms,
    }


def _own_listeners(ctx: RequestContext) -> list[dict[str, Any]]:
    return [
        {"name": ln.name, "host": ln.advertised_host, "port": ln.advertised_port}
        for ln in ctx.broker.listeners
    ]


def _single_node(ctx: RequestContext, now_ms: int) -> tuple[dict[str, Any], list[Any]]:
    broker = ctx.broker
    topics = broker.topics
    end = topics.metadata_offset
    directory = topics.log_dirs.dirs[0].directory_id
    partition = {
        "error_code": 0,
        "error_message": None,
        "leader_id": broker.node_id,
        "leader_epoch": topics.leader_epoch,
        "high_watermark": end,
        "current_voters": [_voter(broker.node_id, directory, end, now_ms)],
        "observers": [],
    }
    return partition, [{"node_id": broker.node_id, "listeners": _own_listeners(ctx)}]


def _cluster(ctx: RequestContext, now_ms: int) -> tuple[dict[str, Any], list[Any]]:
    broker = ctx.broker
    cluster = broker.cluster
    assert cluster is not None
    controller = cluster.controller_info
    if controller is None:
        partition = {
            "error_code": NOT_LEADER_OR_FOLLOWER,
            "error_message": "the cluster has no controller right now",
            "leader_id": UNKNOWN,
            "leader_epoch": UNKNOWN,
            "high_watermark": UNKNOWN,
            "current_voters": [],
            "observers": [],
        }
        return partition, []
    own_directory = broker.topics.log_dirs.dirs[0].directory_id
    listener = ctx.session.listener.name if ctx.session is not None else "PLAINTEXT"
    voters, nodes = [], []
    for broker_id in sorted(cluster.brokers):
        info = cluster.brokers[broker_id]
        mine = broker_id == broker.node_id
        leads = broker_id == controller.broker_id
        voters.append(
            _voter(
                broker_id,
                own_directory if mine else ZERO_UUID,
                cluster.revision if mine or leads else UNKNOWN,
                now_ms if leads else UNKNOWN,
            )
        )
        listeners = (
            _own_listeners(ctx)
            if mine
            else [{"name": listener, "host": info.host, "port": info.port}]
        )
        nodes.append({"node_id": broker_id, "listeners": listeners})
    partition = {
        "error_code": 0,
        "error_message": None,
        "leader_id": controller.broker_id,
        "leader_epoch": controller.epoch,
        "high_watermark": cluster.revision,
        "current_voters": voters,
        "observers": [],
    }
    return partition, nodes


@handles(ApiKey.DESCRIBE_QUORUM, 0, 2)
def describe_quorum(ctx: RequestContext, request: Any) -> Any:
    def failed(code: int, message: str) -> Any:
        return respond(
            ctx,
            {
                "throttle_time": NO_THROTTLE,
                "error_code": code,
                "error_message": message,
                "topics": [],
                "nodes": [],
            },
        )

    if not ctx.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return failed(CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    if not _asks_for_metadata_partition(request):
        return failed(INVALID_REQUEST, f"only partition 0 of {METADATA_TOPIC} has a quorum")
    now_ms = int(time.time() * 1000)
    build = _single_node if ctx.broker.cluster is None else _cluster
    partition, nodes = build(ctx, now_ms)
    partition["partition_index"] = 0
    return respond(
        ctx,
        {
            "throttle_time": NO_THROTTLE,
            "error_code": 0,
            "error_message": None,
            "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}],
            "nodes": nodes,
        },
    )
