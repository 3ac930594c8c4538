"""Topic and broker configs through real admin clients: checked in full before anything is
stored, every Kafka 4.x topic config accepted and described as Kafka describes it,
compression.type applied, and internal topics protected."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from kio.schema.errors import ErrorCode

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.records import iter_batches
from odradek.testing import Broker

from .wire import WireClient

pytestmark = pytest.mark.timeout(90)

LONG_MAX = str(2**63 - 1)

# Kafka 4.x LogConfig: every topic config, its type and its default (from the broker
# synonym's default where there is one), as kafka-configs --describe --all shows them.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": ("list", "delete"),
    "compression.gzip.level": ("int", "-1"),
    "compression.lz4.level": ("int", "9"),
    "compression.type": ("string", "producer"),
    "compression.zstd.level": ("int", "3"),
    "delete.retention.ms": ("long", "86400000"),
    "file.delete.delay.ms": ("long", "60000"),
    "flush.messages": ("long", LONG_MAX),
    "flush.ms": ("long", LONG_MAX),
    "follower.replication.throttled.replicas": ("list", ""),
    "index.interval.bytes": ("int", "4096"),
    "leader.replication.throttled.replicas": ("list", ""),
    "local.retention.bytes": ("long", "-2"),
    "local.retention.ms": ("long", "-2"),
    "max.compaction.lag.ms": ("long", LONG_MAX),
    "max.message.bytes": ("int", "1048588"),
    "message.downconversion.enable": ("boolean", "true"),
    "message.timestamp.after.max.ms": ("long", "3600000"),
    "message.timestamp.before.max.ms": ("long", LONG_MAX),
    "message.timestamp.type": ("string", "CreateTime"),
    "min.cleanable.dirty.ratio": ("double", "0.5"),
    "min.compaction.lag.ms": ("long", "0"),
    "min.insync.replicas": ("int", "1"),
    "preallocate": ("boolean", "false"),
    "remote.log.copy.disable": ("boolean", "false"),
    "remote.log.delete.on.disable": ("boolean", "false"),
    "remote.storage.enable": ("boolean", "false"),
    "retention.bytes": ("long", "-1"),
    "retention.ms": ("long", "604800000"),
    "segment.bytes": ("int", "1073741824"),
    "segment.index.bytes": ("int", "10485760"),
    "segment.jitter.ms": ("long", "0"),
    "segment.ms": ("long", "604800000"),
    "unclean.leader.election.enable": ("boolean", "false"),
}

# One valid, non-default value per config.
VALID = {
    "cleanup.policy": "compact,delete",
    "compression.gzip.level": "9",
    "compression.lz4.level": "17",
    "compression.type": "zstd",
    "compression.zstd.level": "-5",
    "delete.retention.ms": "0",
    "file.delete.delay.ms": "0",
    "flush.messages": "1",
    "flush.ms": "0",
    "follower.replication.throttled.replicas": "0:0,1:0",
    "index.interval.bytes": "0",
    "leader.replication.throttled.replicas": "*",
    "local.retention.bytes": "100",
    "local.retention.ms": "-1",
    "max.compaction.lag.ms": "60000",
    "max.message.bytes": "0",
    "message.downconversion.enable": "false",
    "message.timestamp.after.max.ms": "0",
    "message.timestamp.before.max.ms": "0",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "1.0",
    "min.compaction.lag.ms": "60000",
    "min.insync.replicas": "2",
    "preallocate": "true",
    "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true",
    "remote.storage.enable": "false",
    "retention.bytes": "-5",
    "retention.ms": "-1",
    "segment.bytes": "1048576",
    "segment.index.bytes": "4",
    "segment.jitter.ms": "10",
    "segment.ms": "1",
    "unclean.leader.election.enable": "true",
}

# DescribeConfigs config_type ids (Kafka's DescribeConfigsResponse.ConfigType)
CONFIG_TYPE_IDS = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}
BRICKING_VALUES = [
    ("segment.bytes", "0"),
    ("segment.ms", "0"),
    ("min.cleanable.dirty.ratio", "2"),
]


@pytest.fixture
def admin(odradek_session_broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


def topic_resource(name: str, *changes: tuple[str, str | None, AlterConfigOpType]) -> Any:
    return ConfigResource(
        ConfigResource.Type.TOPIC,
        name,
        incremental_configs=[
            ConfigEntry(key, value, incremental_operation=op) for key, value, op in changes
        ],
    )


def describe(admin: AdminClient, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    return admin.describe_configs([resource])[resource].result(timeout=10)


def incremental_set(admin: AdminClient, name: str, key: str, value: str, **kw: Any) -> None:
    resource = topic_resource(name, (key, value, AlterConfigOpType.SET))
    admin.incremental_alter_configs([resource], **kw)[resource].result(timeout=10)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
@pytest.mark.parametrize(("key", "value"), BRICKING_VALUES)
def test_out_of_range_values_are_invalid_config_and_never_stored(
    admin: AdminClient, key: str, value: str
) -> None:
    topic = unique("brick")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=10)
    before = describe(admin, topic)[key].value

    with pytest.raises(Exception, match="INVALID_CONFIG") as incremental:
        incremental_set(admin, topic, key, value)
    assert key in str(incremental.value)

    whole = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={key: value})
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        admin.alter_configs([whole])[whole].result(timeout=10)

    other = unique("brick-new")
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        admin.create_topics([NewTopic(other, 1, 1, config={key: value})])[other].result(10)
    assert other not in admin.list_topics(timeout=10).topics

    after = describe(admin, topic)[key]
    assert after.value == before and after.is_default


def test_every_kafka_topic_config_is_stored_and_described_as_kafka_does(
    odradek_session_broker: Broker, admin: AdminClient
) -> None:
    topic = unique("allconfigs")
    admin.create_topics([NewTopic(topic, 1, 1, config=VALID)])[topic].result(timeout=10)
    plain = unique("defaults")
    admin.create_topics([NewTopic(plain, 1, 1)])[plain].result(timeout=10)
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": name, "configuration_keys": None}
            for name in (topic, plain)
        ],
        "include_synonyms": True,
        "include_documentation": True,
    }
    with WireClient(odradek_session_broker.bootstrap) as client:
        response = client.request(ApiKey.DESCRIBE_CONFIGS, 4, body)
    overridden, defaults = ({c.name: c for c in r.configs} for r in response.results)

    assert overridden.keys() == defaults.keys() == KAFKA_TOPIC_CONFIGS.keys()
    for name, (kind, default) in KAFKA_TOPIC_CONFIGS.items():
        entry = overridden[name]
        expected = VALID[name].replace(" ", "")
        assert entry.value == expected, name
        assert entry.config_source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name
        assert entry.config_type == CONFIG_TYPE_IDS[kind], name
        assert entry.documentation, name
        assert entry.synonyms[0].name == name and entry.synonyms[0].source == 1

        entry = defaults[name]
        assert entry.value == default, name
        # Kafka 4.1's controller writes min.insync.replicas as the cluster-wide dynamic
        # default (KIP-966): every topic reports it from there, not as a default.
        source = (
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
            if name == "min.insync.replicas"
            else ConfigSource.DEFAULT_CONFIG
        )
        assert entry.config_source == source.value, name
        assert not entry.read_only, name
    # A default names the broker setting it comes from, as Kafka's synonyms do.
    assert [s.name for s in defaults["retention.ms"].synonyms] == ["log.retention.ms"]
    assert [s.name for s in defaults["compression.type"].synonyms] == ["compression.type"]
    assert defaults["remote.storage.enable"].synonyms == ()


def test_compression_type_is_accepted_and_recompresses_on_produce(
    odradek_session_broker: Broker, admin: AdminClient
) -> None:
    topic = unique("codec")
    admin.create_topics([NewTopic(topic, 1, 1, config={"compression.type": "gzip"})])[topic].result(
        timeout=10
    )
    assert describe(admin, topic)["compression.type"].value == "gzip"

    def produce(values: list[bytes], codec: str) -> None:
        producer = Producer(
            {
                "bootstrap.servers": odradek_session_broker.bootstrap,
                "compression.type": codec,
                "enable.idempotence": True,  # sequences must survive recompression
                "linger.ms": 50,
            }
        )
        for value in values:
            producer.produce(topic, value)
        assert producer.flush(10) == 0

    plain = [b"plain-%d " % i * 50 for i in range(5)]
    lz4 = [b"lz4-%d " % i * 50 for i in range(5)]  # compressible: librdkafka keeps lz4
    produce(plain, "none")
    incremental_set(admin, topic, "compression.type", "producer")
    produce(lz4, "lz4")

    with WireClient(odradek_session_broker.bootstrap) as client:
        response = client.request(ApiKey.FETCH, 4, fetch_body(topic, 0))
    data = bytes(response.responses[0].partitions[0].records)
    codecs = [h.compression for _, h in iter_batches(data)]
    assert codecs and codecs[0] == 1, codecs  # gzip: recompressed by the broker
    assert codecs[-1] == 3, codecs  # lz4 as sent, once compression.type is producer

    consumer = Consumer(
        {
            "bootstrap.servers": odradek_session_broker.bootstrap,
            "group.id": unique("codec-reader"),
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < 10 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                seen.append(message.value())
    finally:
        consumer.close()
    assert seen == plain + lz4


def fetch_body(topic: str, offset: int) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}
                ],
            }
        ],
    }


def test_list_configs_take_append_and_subtract(admin: AdminClient) -> None:
    topic = unique("lists")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=10)
    append = topic_resource(topic, ("cleanup.policy", "compact", AlterConfigOpType.APPEND))
    admin.incremental_alter_configs([append])[append].result(timeout=10)
    assert describe(admin, topic)["cleanup.policy"].value == "delete,compact"
    subtract = topic_resource(topic, ("cleanup.policy", "delete", AlterConfigOpType.SUBTRACT))
    admin.incremental_alter_configs([subtract])[subtract].result(timeout=10)
    assert describe(admin, topic)["cleanup.policy"].value == "compact"
    on_number = topic_resource(topic, ("retention.ms", "1", AlterConfigOpType.APPEND))
    with pytest.raises(Exception, match="INVALID_CONFIG"):
        admin.incremental_alter_configs([on_number])[on_number].result(timeout=10)
    # Kafka 4.1 accepts the empty list SUBTRACT leaves (no retention, no compaction).
    emptied = topic_resource(topic, ("cleanup.policy", "compact", AlterConfigOpType.SUBTRACT))
    admin.incremental_alter_configs([emptied])[emptied].result(timeout=10)
    entry = describe(admin, topic)["cleanup.policy"]
    assert (entry.value, entry.is_default) == ("", False)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
@pytest.mark.parametrize(
    "change",
    [
        lambda admin: admin.create_partitions([NewPartitions("__consumer_offsets", 60)])[
            "__consumer_offsets"
        ].result(timeout=10),
        lambda admin: incremental_set(admin, "__consumer_offsets", "max.message.bytes", "10"),
        lambda admin: incremental_set(admin, "__consumer_offsets", "cleanup.policy", "delete"),
        lambda admin: [
            f.result(timeout=10)
            for f in admin.incremental_alter_configs(
                [
                    topic_resource(
                        "__consumer_offsets", ("cleanup.policy", None, AlterConfigOpType.DELETE)
                    )
                ]
            ).values()
        ],
        lambda admin: [
            f.result(timeout=10)
            for f in admin.alter_configs(
                [
                    ConfigResource(
                        ConfigResource.Type.TOPIC,
                        "__consumer_offsets",
                        set_config={"segment.ms": "604800000"},  # drops cleanup.policy
                    )
                ]
            ).values()
        ],
    ],
    ids=[
        "more-partitions",
        "max-message-bytes",
        "cleanup-policy",
        "delete-cleanup-policy",
        "replace-all",
    ],
)
def test_internal_topics_refuse_changes_that_break_the_coordinator(
    admin: AdminClient, change: Callable[[AdminClient], object]
) -> None:
    before = describe(admin, "__consumer_offsets")
    partitions = len(admin.list_topics(timeout=10).topics["__consumer_offsets"].partitions)
    with pytest.raises(Exception, match="POLICY_VIOLATION"):
        change(admin)
    after = describe(admin, "__consumer_offsets")
    assert {k: v.value for k, v in after.items()} == {k: v.value for k, v in before.items()}
    assert after["cleanup.policy"].value == "compact"
    assert len(admin.list_topics(timeout=10).topics["__consumer_offsets"].partitions) == partitions


def test_internal_topics_allow_housekeeping_configs(admin: AdminClient) -> None:
    # validate_only: checked exactly as a real change, nothing changes on the shared broker
    incremental_set(admin, "__consumer_offsets", "segment.ms", "3600000", validate_only=True)
    with pytest.raises(Exception, match="INVALID_CONFIG"):  # the client floor still applies
        incremental_set(admin, "__consumer_offsets", "segment.bytes", "2048", validate_only=True)


def test_broker_configs_include_what_clients_read(
    odradek_session_broker: Broker, admin: AdminClient
) -> None:
    resource = ConfigResource(ConfigResource.Type.BROKER, "0")
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    address = f"PLAINTEXT://{odradek_session_broker.bootstrap}"
    assert configs["advertised.listeners"].value == address
    assert configs["listeners"].value == address
    assert configs["log.dirs"].value
    assert configs["broker.id"].value == "0"
    assert configs["compression.type"].value == "producer"
    assert configs["log.segment.bytes"].value == "1073741824"
    assert configs["log.message.timestamp.after.max.ms"].value == "3600000"
    assert all(entry.is_read_only for entry in configs.values())

    change = ConfigResource(
        ConfigResource.Type.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry("num.partitions", "3", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    with pytest.raises(Exception, match="INVALID_REQUEST"):
        admin.incremental_alter_configs([change])[change].result(timeout=10)


def test_describe_configs_of_a_missing_topic_is_unknown_topic(
    odradek_session_broker: Broker,
) -> None:
    body = {
        "resources": [
            {"resource_type": 2, "resource_name": unique("nope"), "configuration_keys": None}
        ],
        "include_synonyms": False,
        "include_documentation": False,
    }
    with WireClient(odradek_session_broker.bootstrap) as client:
        response = client.request(ApiKey.DESCRIBE_CONFIGS, 4, body)
    assert response.results[0].error_code == ErrorCode.unknown_topic_or_partition
