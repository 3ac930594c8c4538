"""Topic creation and deletion under attack or accident, driven over the wire.

A Metadata request naming thousands of unknown topics must not stall other
clients; a topic with a long (legal) name must be deletable without its data
coming back; a creation that runs out of file descriptors must leave nothing
behind; a full disk answers KAFKA_STORAGE_ERROR and keeps the connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.records import build_batch

from ..broker.wire import WireClient
from .helpers import LimitedBroker, open_fds

NONE = 0
LEADER_NOT_AVAILABLE = 5
KAFKA_STORAGE_ERROR = 56


def metadata_request(names: list[str]) -> dict[str, Any]:
    return {
        "topics": [{"name": n} for n in names],
        "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }


def produce_request(topic: str, partition: int, values: list[bytes]) -> dict[str, Any]:
    batch = build_batch(
        [(None, value, ()) for value in values], timestamp_ms=int(time.time() * 1000)
    )
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": batch}]}],
    }


def fetch_request(topic: str, partitions: int) -> dict[str, Any]:
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
                    {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20}
                    for p in range(partitions)
                ],
            }
        ],
    }


def test_metadata_for_thousands_of_unknown_topics_does_not_stall_other_clients(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    broker = start_broker(settings={"auto.create.topics.max.per.request": "1500"})
    names = [f"unknown-{i:05d}-" + "x" * 20 for i in range(2000)]
    answers_during: list[int] = []
    big: list[Any] = []

    def attacker() -> None:
        with WireClient(broker.bootstrap, timeout_s=300) as client:
            big.append(client.request(ApiKey.METADATA, 9, metadata_request(names)))

    with WireClient(broker.bootstrap) as victim:
        victim.request(ApiKey.METADATA, 9, metadata_request(["known"]))
        thread = threading.Thread(target=attacker)
        thread.start()
        answered = 0
        while thread.is_alive():
            topics = victim.request(ApiKey.METADATA, 9, metadata_request(["known"])).topics
            assert topics[0].error_code == NONE
            answered += 1
        thread.join()
        answers_during.append(answered)
    (response,) = big
    errors = [t.error_code for t in response.topics]
    # The first 1,500 are created; the rest wait for a retry, as while Kafka creates them.
    assert errors[:1500] == [NONE] * 1500
    assert errors[1500:] == [LEADER_NOT_AVAILABLE] * 500
    # The victim kept being answered while the broker created 1,500 topics.
    assert answers_during[0] >= 5, answers_during
    with WireClient(broker.bootstrap, timeout_s=120) as client:
        retry = client.request(ApiKey.METADATA, 9, metadata_request(names))
    assert {t.error_code for t in retry.topics} == {NONE}


@pytest.mark.parametrize("length", [214, 249])
def test_deleting_a_long_named_topic_removes_its_records_for_good(
    start_broker: Callable[..., LimitedBroker], length: int
) -> None:
    broker = start_broker()
    name = ("t" * length)[:length]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=30)
    with WireClient(broker.bootstrap) as client:
        produced = client.request(ApiKey.PRODUCE, 9, produce_request(name, 1, [b"old"] * 3))
        assert produced.responses[0].partition_responses[0].error_code == NONE
    admin.delete_topics([name])[name].result(timeout=30)
    assert name not in admin.list_topics(timeout=10).topics
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=30)
    with WireClient(broker.bootstrap) as client:
        fetched = client.request(ApiKey.FETCH, 4, fetch_request(name, 2))
    partitions = fetched.responses[0].partitions
    assert [p.error_code for p in partitions] == [NONE, NONE]
    assert [p.high_watermark for p in partitions] == [0, 0]
    assert all(not p.records for p in partitions)
    # And the same after a restart: nothing of the old topic is served again.
    broker.restart()
    with WireClient(broker.bootstrap) as client:
        fetched = client.request(ApiKey.FETCH, 4, fetch_request(name, 2))
    assert [p.high_watermark for p in fetched.responses[0].partitions] == [0, 0]
    leftovers = [p.name for p in broker.data_dir.iterdir() if p.name.endswith("-delete")]
    assert leftovers == []


def test_create_topics_out_of_descriptors_is_all_or_nothing(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    limit = 400
    broker = start_broker(rlimits={"RLIMIT_NOFILE": limit})
    assert broker.pid is not None
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("before", 1, 1)])["before"].result(timeout=30)
    fds_before = open_fds(broker.pid)
    wide = limit  # more partitions than the process may open files
    future = admin.create_topics([NewTopic("wide", wide, 1)])["wide"]
    try:
        future.result(timeout=60)
        created = True
    except Exception as exc:  # the broker's error, as confluent-kafka raises it
        created = False
        assert "KAFKA_STORAGE_ERROR" in str(exc), exc
    topics = admin.list_topics(timeout=10).topics
    wide_dirs = [p for p in broker.data_dir.iterdir() if p.name.startswith("wide-")]
    if created:
        # With descriptor-frugal logs the creation may succeed: then it is complete.
        assert len(topics["wide"].partitions) == wide
        assert len(wide_dirs) == wide
    else:
        assert "wide" not in topics
        assert wide_dirs == []
        assert open_fds(broker.pid) <= fds_before + 5
    # The broker goes on creating topics and serving them.
    admin.create_topics([NewTopic("after", 3, 1)])["after"].result(timeout=30)
    with WireClient(broker.bootstrap) as client:
        produced = client.request(ApiKey.PRODUCE, 9, produce_request("after", 2, [b"v"]))
    assert produced.responses[0].partition_responses[0].error_code == NONE
    assert "Traceback" not in broker.log_path.read_text(errors="replace")


def test_full_disk_answers_storage_error_and_keeps_the_connection(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    # RLIMIT_FSIZE stands in for a full disk: writes past it fail (EFBIG) as on ENOSPC.
    broker = start_broker(rlimits={"RLIMIT_FSIZE": 4 << 20})
    value = b"v" * 100_000
    codes = []
    with WireClient(broker.bootstrap) as client:
        for _ in range(80):  # 8 MB: the segment file fills up halfway
            response = client.request(ApiKey.PRODUCE, 9, produce_request("full", 0, [value]))
            codes.append(response.responses[0].partition_responses[0].error_code)
        # Still connected, still answering.
        assert client.request(ApiKey.METADATA, 9, metadata_request(["full"])).topics
    assert codes[0] == NONE
    assert codes[-1] == KAFKA_STORAGE_ERROR
    assert set(codes) == {NONE, KAFKA_STORAGE_ERROR}
    log_text = broker.log_path.read_text(errors="replace")
    assert log_text.count("cannot append to full-0") == 1, log_text[-3000:]
    assert "Traceback" not in log_text
