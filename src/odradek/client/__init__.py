"""Odradek's Kafka client: producer, consumer, admin client.

    from odradek.client import Producer, Consumer, AdminClient, TopicPartition

Settings take Kafka's names with ``_`` for ``.`` as keywords, or a dict with
the dotted names. See each module's docstring for how the pieces work.

To read one partition at offsets of your choosing, with no consumer and no group (as
the Spark source's executors do), use ``partition_fetch.PartitionFetcher`` over a
``cluster.KafkaClient``: pipelined Fetches, with the client's handling of moved
leaders and retriable errors.
"""

from odradek.client.admin import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    LogDamage,
    LogDirDescription,
    NewPartitions,
    NewTopic,
    ReplicaLogDirInfo,
)
from odradek.client.admin_security import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
    ScramCredentialInfo,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from odradek.client.admin_transactions import TransactionDescription, TransactionListing
from odradek.client.consumer import Consumer, ConsumerRecords
from odradek.client.errors import (
    CommitFailedError,
    KafkaError,
    RebalanceInProgressCommitError,
    RetriableCommitFailedError,
)
from odradek.client.listener import ConsumerRebalanceListener
from odradek.client.partitioner import DefaultPartitioner, Partitioner, murmur2
from odradek.client.producer import Producer, ProduceResult, RecordFuture
from odradek.client.structs import (
    ConsumerRecord,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    RecordMetadata,
    TopicPartition,
)
from odradek.client.transactions import ConsumerGroupMetadata

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermission",
    "AdminClient",
    "AlterConfigOp",
    "AlterConfigOpType",
    "CommitFailedError",
    "ConfigResource",
    "ConfigResourceType",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "ConsumerRecords",
    "DefaultPartitioner",
    "KafkaError",
    "LogDamage",
    "LogDirDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Partitioner",
    "PatternType",
    "ProduceResult",
    "Producer",
    "RebalanceInProgressCommitError",
    "RecordFuture",
    "RecordMetadata",
    "ReplicaLogDirInfo",
    "ResourceType",
    "RetriableCommitFailedError",
    "ScramCredentialInfo",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "murmur2",
]
