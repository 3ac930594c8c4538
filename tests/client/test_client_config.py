"""Settings: keywords with _, dicts with dotted names, unknown names refused, Kafka defaults."""

from __future__ import annotations

import pytest

from odradek.client.config import AdminConfig, ConsumerConfig, ProducerConfig
from odradek.client.errors import ConfigError

pytestmark = pytest.mark.timeout(30)


def test_keywords_and_dotted_names() -> None:
    cfg = ProducerConfig.from_settings(
        {"bootstrap.servers": "h1:1,h2:2", "linger.ms": 7}, batch_size=100
    )
    assert cfg.linger_ms == 7
    assert cfg.batch_size == 100
    assert cfg.bootstrap_addresses() == [("h1", 1), ("h2", 2)]


def test_keywords_override_dict() -> None:
    cfg = ProducerConfig.from_settings({"linger.ms": 7}, bootstrap_servers="h:1", linger_ms=9)
    assert cfg.linger_ms == 9


def test_unknown_names_are_errors() -> None:
    with pytest.raises(ConfigError, match="lingerms"):
        ProducerConfig.from_settings(bootstrap_servers="h:1", lingerms=5)
    with pytest.raises(ConfigError, match=r"group\.id"):
        ProducerConfig.from_settings({"bootstrap.servers": "h:1", "group.id": "g"})
    with pytest.raises(ConfigError):
        ConsumerConfig.from_settings(bootstrap_servers="h:1", acks="all")


def test_bootstrap_required_and_parsed() -> None:
    with pytest.raises(ConfigError):
        AdminConfig.from_settings()
    cfg = AdminConfig.from_settings(bootstrap_servers="example.com, [::1]:9093")
    assert cfg.bootstrap_addresses() == [("example.com", 9092), ("::1", 9093)]


def test_kafka_defaults() -> None:
    p = ProducerConfig.from_settings(bootstrap_servers="h:1")
    assert p.acks == "all"
    assert p.enable_idempotence is True
    assert p.batch_size == 16_384
    assert p.delivery_timeout_ms == 120_000
    assert p.max_in_flight_requests_per_connection == 5
    assert p.retries == 2_147_483_647
    assert p.buffer_memory == 33_554_432
    assert p.compression_type == "none"
    c = ConsumerConfig.from_settings(bootstrap_servers="h:1", group_id="g")
    assert c.auto_offset_reset == "latest"
    assert c.enable_auto_commit is True
    assert c.max_poll_records == 500
    assert c.fetch_max_bytes == 52_428_800
    assert c.max_partition_fetch_bytes == 1_048_576
    assert c.session_timeout_ms == 45_000
    assert c.heartbeat_interval_ms == 3_000
    assert c.max_poll_interval_ms == 300_000
    assert c.partition_assignment_strategy == ["range", "cooperative-sticky"]
    assert p.metadata_max_age_ms == 300_000
    assert p.request_timeout_ms == 30_000


def test_idempotence_conflicts() -> None:
    # Defaulted idempotence turns off quietly when acks != all (as in Java) ...
    p = ProducerConfig.from_settings(bootstrap_servers="h:1", acks=1)
    assert p.enable_idempotence is False
    assert p.acks == 1
    # ... an explicit request is an error.
    with pytest.raises(ConfigError, match="acks"):
        ProducerConfig.from_settings(bootstrap_servers="h:1", acks=0, enable_idempotence=True)


def test_value_validation() -> None:
    with pytest.raises(ConfigError):
        ProducerConfig.from_settings(bootstrap_servers="h:1", compression_type="brotli")
    with pytest.raises(ConfigError):
        ProducerConfig.from_settings(bootstrap_servers="h:1", acks="some")
    with pytest.raises(ConfigError):
        ConsumerConfig.from_settings(bootstrap_servers="h:1", auto_offset_reset="middle")
    assert ProducerConfig.from_settings(bootstrap_servers="h:1", acks=-1).acks == "all"
    assert (
        ConsumerConfig.from_settings(
            bootstrap_servers="h:1", auto_offset_reset="smallest"
        ).auto_offset_reset
        == "earliest"
    )
