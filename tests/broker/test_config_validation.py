"""The config tables against Kafka 4.x: names, types, defaults and ranges (no broker needed)."""

from __future__ import annotations

import pytest

from odradek.broker.config import (
    TOPIC_CONFIGS,
    BrokerConfig,
    ConfigError,
    format_value,
    resolve_topic_configs,
    usable_stored_topic_configs,
    validate_topic_configs,
)

from .test_topic_configs import KAFKA_TOPIC_CONFIGS, VALID

# Values Kafka's ConfigDef refuses, one or more per kind of check.
INVALID = [
    ("segment.bytes", "0"),
    ("segment.bytes", "1048575"),
    ("segment.bytes", "2147483648"),  # not an int32
    ("segment.ms", "0"),
    ("min.cleanable.dirty.ratio", "2"),
    ("min.cleanable.dirty.ratio", "-0.1"),
    ("min.cleanable.dirty.ratio", "nan"),
    ("retention.ms", "-2"),
    ("retention.ms", "soon"),
    ("max.message.bytes", "-1"),
    ("index.interval.bytes", "-1"),
    ("delete.retention.ms", "-1"),
    ("flush.messages", "0"),
    ("segment.index.bytes", "3"),
    ("max.compaction.lag.ms", "0"),
    ("local.retention.ms", "-3"),
    ("cleanup.policy", "forever"),
    ("cleanup.policy", ","),  # empty is allowed (Kafka 4.1), empty items are not
    ("message.timestamp.type", "createtime"),
    ("compression.type", "brotli"),
    ("compression.gzip.level", "0"),
    ("compression.gzip.level", "10"),
    ("compression.lz4.level", "18"),
    ("compression.zstd.level", "23"),
    ("preallocate", "yes"),
    ("min.insync.replicas", "0"),
    ("leader.replication.throttled.replicas", "0-1"),
    ("remote.storage.enable", "true"),  # no tiered storage on this broker
    ("no.such.config", "1"),
]


def test_every_kafka_topic_config_is_known_with_its_type_and_default() -> None:
    broker = BrokerConfig()
    assert {name: d.type for name, d in TOPIC_CONFIGS.items()} == {
        name: kind for name, (kind, _) in KAFKA_TOPIC_CONFIGS.items()
    }
    defaults = resolve_topic_configs({}, broker)
    assert {name: format_value(v) for name, v in defaults.items()} == {
        name: default for name, (_, default) in KAFKA_TOPIC_CONFIGS.items()
    }


def test_every_kafka_topic_config_accepts_a_valid_value() -> None:
    assert VALID.keys() == KAFKA_TOPIC_CONFIGS.keys()
    clean = validate_topic_configs(VALID, BrokerConfig())
    assert clean.keys() == VALID.keys()


@pytest.mark.parametrize(("name", "value"), INVALID)
def test_out_of_range_and_mistyped_values_are_refused(name: str, value: str) -> None:
    with pytest.raises(ConfigError) as refused:
        validate_topic_configs({name: value}, BrokerConfig())
    assert name in str(refused.value) or "Tiered Storage" in str(refused.value)


def test_messages_name_the_config_and_the_range_as_kafka_does() -> None:
    with pytest.raises(
        ConfigError,
        match=r"^Invalid value 0 for configuration segment\.bytes: "
        r"Value must be at least 1048576$",
    ):
        validate_topic_configs({"segment.bytes": "0"}, BrokerConfig())
    with pytest.raises(ConfigError, match=r"min\.compaction\.lag\.ms \(10\) > max\.compaction"):
        validate_topic_configs(
            {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, BrokerConfig()
        )


def test_values_are_stored_in_canonical_form() -> None:
    clean = validate_topic_configs(
        {"cleanup.policy": " compact , delete ", "preallocate": "TRUE", "retention.ms": " 5 "},
        BrokerConfig(),
    )
    assert clean == {"cleanup.policy": "compact,delete", "preallocate": "true", "retention.ms": "5"}


def test_internal_topics_may_use_smaller_segments_than_clients() -> None:
    broker = BrokerConfig()
    with pytest.raises(ConfigError):
        validate_topic_configs({"segment.bytes": "2048"}, broker)
    assert validate_topic_configs({"segment.bytes": "2048"}, broker, internal=True) == {
        "segment.bytes": "2048"
    }


def test_a_stored_value_that_fails_today_is_dropped_with_a_reason() -> None:
    stored = {
        "segment.bytes": "0",
        "retention.ms": "3600000",
        "min.compaction.lag.ms": "10",
        "max.compaction.lag.ms": "5",
        "no.such.config": "x",
    }
    clean, problems = usable_stored_topic_configs(stored, BrokerConfig())
    assert clean == {"retention.ms": "3600000"}
    assert len(problems) == 3
    assert any("segment.bytes" in p for p in problems)
    assert any("no.such.config" in p for p in problems)
    assert any("min.compaction.lag.ms" in p for p in problems)


def test_topic_defaults_follow_the_broker_synonyms() -> None:
    broker = BrokerConfig.from_assignments(
        ["log.retention.hours=2", "compression.type=lz4", "log.cleanup.policy=compact"]
    )
    values = resolve_topic_configs({}, broker)
    assert values["retention.ms"] == 2 * 3600000
    assert values["compression.type"] == "lz4"
    assert values["cleanup.policy"] == ["compact"]


@pytest.mark.parametrize(
    "assignment",
    [
        "log.segment.bytes=1024",
        "log.roll.ms=0",
        "log.cleaner.min.cleanable.ratio=1.5",
        "num.partitions=0",
        "compression.type=brotli",
        "log.retention.hours=-2",
        "default.replication.factor=3",
        "remote.log.storage.system.enable=true",
        "group.min.session.timeout.ms=999999999",  # above the max session timeout
        "group.consumer.assignors=sticky",  # not a server-side assignor
        "group.consumer.migration.policy=sometimes",
        "group.consumer.session.timeout.ms=0",
        "group.consumer.heartbeat.interval.ms=45000",  # not below the session timeout
    ],
)
def test_broker_settings_are_checked_at_start_up(assignment: str) -> None:
    with pytest.raises(ConfigError):
        BrokerConfig.from_assignments([assignment])


def test_consumer_group_settings_take_kafka_names_and_class_names() -> None:
    config = BrokerConfig.from_assignments(
        [
            "group.consumer.assignors=org.apache.kafka.coordinator.group.assignor.RangeAssignor,"
            "uniform",
            "group.consumer.migration.policy=upgrade",
            "group.consumer.session.timeout.ms=6000",
            "group.consumer.heartbeat.interval.ms=1000",
        ]
    )
    assert config["group.consumer.assignors"] == [
        "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
        "uniform",
    ]
    defaults = BrokerConfig()
    assert defaults["group.consumer.session.timeout.ms"] == 45000
    assert defaults["group.consumer.heartbeat.interval.ms"] == 5000
    assert defaults["group.consumer.migration.policy"] == "bidirectional"
