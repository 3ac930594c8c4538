"""Odradek's Kafka client: producer, consumer, admin client.

    from odradek.client import Producer, Consumer, AdminClient, TopicPartition

Settings take Kafka's names with ``_`` for ``.`` as keywords, or a dict with
the dotted names. See each module's docstring for how the pieces work.
"""

from odradek.client.admin import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
)
from odradek.client.consumer import Consumer, ConsumerRecords
from odradek.client.coordinator import (
    CommitFailedError,
    OffsetAndMetadata,
    RebalanceInProgressCommitError,
    RetriableCommitFailedError,
)
from odradek.client.errors import KafkaError
from odradek.client.listener import ConsumerRebalanceListener
from odradek.client.partitioner import DefaultPartitioner, Partitioner, murmur2
from odradek.client.producer import Producer, ProduceResult, RecordFuture
from odradek.client.structs import (
    ConsumerRecord,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)

__all__ = [
    "AdminClient",
    "AlterConfigOp",
    "AlterConfigOpType",
    "CommitFailedError",
    "ConfigResource",
    "ConfigResourceType",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerRecords",
    "DefaultPartitioner",
    "KafkaError",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Partitioner",
    "ProduceResult",
    "Producer",
    "RebalanceInProgressCommitError",
    "RecordFuture",
    "RecordMetadata",
    "RetriableCommitFailedError",
    "TopicPartition",
    "murmur2",
]
