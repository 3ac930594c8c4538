"""A single node is a cluster of one: its partitions answer through the same replica
layer as a cluster member's (leader checks, leader epochs, the high watermark, the
ISR), with a single node's answers, on the wire."""

from __future__ import annotations

import time
import uuid

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch
from odradek.testing import Broker

from .wire import WireClient


def _create(wire: WireClient, topic: str, configs: dict[str, str]) -> None:
    created = wire.request(
        ApiKey.CREATE_TOPICS,
        5,
        {
            "topics": [
                {
                    "name": topic,
                    "num_partitions": 1,
                    "replication_factor": -1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "timeout_ms": 10_000,
            "validate_only": False,
        },
    )
    assert created.topics[0].error_code == ErrorCode.NONE


def _produce(wire: WireClient, topic: str, acks: int) -> int:
    batch = build_batch([(None, b"v", ())], timestamp_ms=int(time.time() * 1000))
    answer = wire.request(
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    return int(answer.responses[0].partition_responses[0].error_code)


def _latest(wire: WireClient, topic: str, current_epoch: int) -> tuple[int, int, int]:
    answer = wire.request(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "current_leader_epoch": current_epoch,
                            "timestamp": -1,
                        }
                    ],
                }
            ],
        },
    )
    part = answer.topics[0].partitions[0]
    return int(part.error_code), int(part.offset), int(part.leader_epoch)


def test_a_lone_node_leads_every_partition_alone_in_its_isr(
    odradek_session_broker: Broker,
) -> None:
    topic = f"lone-{uuid.uuid4().hex[:8]}"
    with WireClient(odradek_session_broker.bootstrap) as wire:
        _create(wire, topic, {})
        metadata = wire.request(
            ApiKey.METADATA,
            12,
            {
                "topics": [{"name": topic, "topic_id": uuid.UUID(int=0)}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        (partition,) = metadata.topics[0].partitions
        node = metadata.brokers[0].node_id
        assert (partition.leader_id, partition.leader_epoch) == (node, 0)
        assert list(partition.replica_nodes) == list(partition.isr_nodes) == [node]
        assert _produce(wire, topic, acks=-1) == ErrorCode.NONE  # answered at once
        # The high watermark is the log end; the leader epoch is checked as a cluster's.
        assert _latest(wire, topic, current_epoch=0) == (ErrorCode.NONE, 1, 0)
        assert _latest(wire, topic, current_epoch=1)[0] == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_acks_all_needs_min_insync_replicas_on_a_lone_node_too(
    odradek_session_broker: Broker,
) -> None:
    """As a one-broker Kafka: an ISR of one is below min.insync.replicas=2, so acks=all is
    refused before anything is written; acks=1 is not asked about the ISR."""
    topic = f"lone-isr-{uuid.uuid4().hex[:8]}"
    with WireClient(odradek_session_broker.bootstrap) as wire:
        _create(wire, topic, {"min.insync.replicas": "2"})
        assert _produce(wire, topic, acks=-1) == ErrorCode.NOT_ENOUGH_REPLICAS
        assert _latest(wire, topic, current_epoch=-1)[1] == 0  # nothing written
        assert _produce(wire, topic, acks=1) == ErrorCode.NONE
        assert _latest(wire, topic, current_epoch=-1)[1] == 1
