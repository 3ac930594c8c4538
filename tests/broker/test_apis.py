"""Broker API behaviour checked on the wire and through confluent-kafka's admin client."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from kio.schema.errors import ErrorCode

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import RequestHeader, decode_response
from odradek.testing import Broker

from .wire import WireClient


@pytest.fixture
def admin(odradek_session_broker: Broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


def test_api_versions_unknown_version_gets_v0_reply_with_list(
    odradek_session_broker: Broker,
) -> None:
    with WireClient(odradek_session_broker.bootstrap) as client:
        # ApiVersions v99: header v2 framing, a body we cannot know; the reply is v0.
        header = RequestHeader(ApiKey.API_VERSIONS, 99, 7, "probe")
        import struct

        client_id = b"probe"
        payload = struct.pack(">hhih", 18, 99, 7, len(client_id)) + client_id + b"\x00\x00"
        client.send_raw(struct.pack(">i", len(payload)) + payload)
        correlation, response = decode_response(ApiKey.API_VERSIONS, 0, client.read_frame())
        assert correlation == header.correlation_id
        assert response.error_code == ErrorCode.unsupported_version
        keys = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert keys[ApiKey.FIND_COORDINATOR][0] == 0
        assert keys[ApiKey.JOIN_GROUP] == (0, 9)
        # The connection stays usable.
        again = client.request(
            ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
        assert again.error_code == ErrorCode.none


def test_unknown_api_closes_only_that_connection(odradek_session_broker: Broker) -> None:
    import struct

    with (
        WireClient(odradek_session_broker.bootstrap) as bad,
        WireClient(odradek_session_broker.bootstrap) as good,
    ):
        payload = struct.pack(">hhih", 9999, 0, 1, -1)
        bad.send_raw(struct.pack(">i", len(payload)) + payload)
        with pytest.raises(ConnectionError):
            bad.read_frame()
        reply = good.request(ApiKey.API_VERSIONS, 0, {})
        assert reply.error_code == ErrorCode.none


def test_fetch_long_poll_wakes_on_produce(
    odradek_session_broker: Broker, admin: AdminClient
) -> None:
    topic = unique("longpoll")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=10)
    fetch = {
        "replica_id": -1,
        "max_wait": 20_000,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }

    def produce_soon() -> None:
        time.sleep(0.3)  # a real wall-clock gap is the point: the fetch must be parked
        producer = Producer({"bootstrap.servers": odradek_session_broker.bootstrap})
        producer.produce(topic, b"wake up")
        producer.flush(10)

    thread = threading.Thread(target=produce_soon)
    with WireClient(odradek_session_broker.bootstrap, timeout_s=30) as client:
        thread.start()
        started = time.monotonic()
        response = client.request(ApiKey.FETCH, 11, fetch)
        elapsed = time.monotonic() - started
    thread.join(10)
    partition = response.responses[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    assert partition.high_watermark == 1
    assert b"wake up" in bytes(partition.records)
    assert elapsed < 15, "the fetch waited out max_wait instead of waking on the append"


def test_fetch_past_end_is_offset_out_of_range(
    odradek_session_broker: Broker, admin: AdminClient
) -> None:
    topic = unique("pastend")
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=10)
    with WireClient(odradek_session_broker.bootstrap) as client:
        response = client.request(
            ApiKey.FETCH,
            4,
            {
                "replica_id": -1,
                "max_wait": 0,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "fetch_offset": 5, "partition_max_bytes": 1024}
                        ],
                    }
                ],
            },
        )
    assert response.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range


def test_topic_admin_round_trip(admin: AdminClient) -> None:
    topic = unique("admin")
    created = admin.create_topics(
        [NewTopic(topic, 2, 1, config={"retention.ms": "3600000", "cleanup.policy": "delete"})]
    )
    created[topic].result(timeout=10)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["segment.bytes"].is_default

    change = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([change])[change].result(timeout=10)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["retention.ms"].value == "7200000"

    admin.create_partitions([NewPartitions(topic, 5)])[topic].result(timeout=10)
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 5

    cluster = admin.describe_cluster().result(timeout=10)
    assert len(cluster.nodes) == 1

    admin.delete_topics([topic])[topic].result(timeout=10)
    deadline = time.monotonic() + 10
    while topic in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in admin.list_topics(timeout=10).topics


@pytest.mark.parametrize(
    ("new_topic", "error"),
    [
        (lambda name: NewTopic(name, 1, 3), "INVALID_REPLICATION_FACTOR"),
        (lambda name: NewTopic(name + "/bad", 1, 1), "TOPIC_EXCEPTION"),
        (lambda name: NewTopic(name, 1, 1, config={"no.such.config": "1"}), "INVALID_CONFIG"),
        (lambda name: NewTopic(name, 1, 1, config={"retention.ms": "soon"}), "INVALID_CONFIG"),
    ],
)
def test_create_topic_errors(
    admin: AdminClient, new_topic: Callable[[str], NewTopic], error: str
) -> None:
    spec = new_topic(unique("bad"))
    future = admin.create_topics([spec])[spec.topic]
    with pytest.raises(Exception, match=error):
        future.result(timeout=10)


def test_existing_topic_and_shrinking_partitions_are_refused(admin: AdminClient) -> None:
    topic = unique("twice")
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=10)
    with pytest.raises(Exception, match="TOPIC_ALREADY_EXISTS"):
        admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=10)
    with pytest.raises(Exception, match="INVALID_PARTITIONS"):
        admin.create_partitions([NewPartitions(topic, 1)])[topic].result(timeout=10)


def test_internal_topic_cannot_be_produced_to(odradek_session_broker: Broker) -> None:
    errors: list[str] = []
    producer = Producer(
        {"bootstrap.servers": odradek_session_broker.bootstrap, "message.timeout.ms": 5000}
    )
    producer.produce(
        "__consumer_offsets",
        b"x",
        partition=0,
        on_delivery=lambda err, msg: errors.append(str(err)),
    )
    producer.flush(10)
    assert errors and "INVALID_TOPIC" in errors[0].upper().replace(" ", "_")
