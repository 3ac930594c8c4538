"""A Fetch v12+ naming its last fetched epoch is checked against the leader's epoch cache
(KIP-320, Kafka 4.1's ``Partition.readRecords``), for a consumer as for a follower:
on a real broker, over the wire."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.fetch_sessions import CachedPartition, PartitionRequest
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import RequestHeader, encode_request
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch import (
    NO_DIVERGING_EPOCH,
    EpochEndOffset,
    FetchPartition,
    encode_fetch_request,
    parse_fetch_response,
)
from odradek.protocol.records import parse_header
from odradek.replication.truncation import DivergingEpoch
from odradek.testing import Broker

from .wire import WireClient

VERSION = 12
RECORDS = 5
# A fetch that must be answered at once waits this long if parked: longer than the
# client's socket timeout, so a parked fetch fails the test instead of passing late.
PARKED_WAIT_MS = 60_000
SOCKET_TIMEOUT_S = 10.0


def fetch(
    client: WireClient, topic: str, offset: int, last_fetched_epoch: int, max_wait_ms: int = 0
) -> FetchPartition:
    body = encode_fetch_request(
        VERSION,
        max_wait_ms=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[(topic, [(0, offset, 1 << 20, -1, -1, last_fetched_epoch)])],
    )
    client.correlation += 1
    client.send_raw(
        encode_request(RequestHeader(ApiKey.FETCH, VERSION, client.correlation, "t"), body)
    )
    response = parse_fetch_response(client.read_frame(), VERSION)
    (partition,) = response.responses[0].partitions
    return partition


@pytest.fixture
def topic_with_records(odradek_session_broker: Broker) -> tuple[str, int]:
    """A topic with RECORDS records, and the leader epoch they were written in."""
    topic = f"diverging-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=10)
    producer = Producer({"bootstrap.servers": odradek_session_broker.bootstrap, "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(topic, b"v%d" % i)
        producer.flush(10)
    with WireClient(odradek_session_broker.bootstrap, SOCKET_TIMEOUT_S) as client:
        first = fetch(client, topic, 0, -1)
    assert first.records is not None and len(first.records)
    return topic, parse_header(first.records).partition_leader_epoch


def test_a_fetch_past_where_its_epoch_ends_gets_the_diverging_epoch_at_once(
    odradek_session_broker: Broker, topic_with_records: tuple[str, int]
) -> None:
    """At offset 7 after a batch of epoch e the fetcher's log disagrees with a leader
    whose epoch e ends at 5: DivergingEpoch (e, 5), no records, and no waiting."""
    topic, epoch = topic_with_records
    with WireClient(odradek_session_broker.bootstrap, SOCKET_TIMEOUT_S) as client:
        answer = fetch(client, topic, RECORDS + 2, epoch, max_wait_ms=PARKED_WAIT_MS)
    assert answer.error_code == ErrorCode.NONE
    assert answer.diverging_epoch == EpochEndOffset(epoch, RECORDS)
    assert answer.records is not None and not len(answer.records)
    assert answer.high_watermark == RECORDS


def test_a_fetch_that_agrees_with_the_leader_reads_on(
    odradek_session_broker: Broker, topic_with_records: tuple[str, int]
) -> None:
    topic, epoch = topic_with_records
    with WireClient(odradek_session_broker.bootstrap, SOCKET_TIMEOUT_S) as client:
        middle = fetch(client, topic, 2, epoch)
        at_end = fetch(client, topic, RECORDS, epoch)
    assert middle.diverging_epoch is NO_DIVERGING_EPOCH
    assert middle.records is not None and len(middle.records)
    assert (at_end.error_code, at_end.diverging_epoch) == (ErrorCode.NONE, NO_DIVERGING_EPOCH)


@pytest.mark.parametrize(
    ("offset", "epoch_delta"),
    [(RECORDS, 1), (-1, 0)],
    ids=["an epoch newer than the leader's", "an offset below the log start"],
)
def test_what_the_leader_cannot_place_is_out_of_range(
    odradek_session_broker: Broker,
    topic_with_records: tuple[str, int],
    offset: Any,
    epoch_delta: int,
) -> None:
    topic, epoch = topic_with_records
    with WireClient(odradek_session_broker.bootstrap, SOCKET_TIMEOUT_S) as client:
        answer = fetch(client, topic, offset, epoch + epoch_delta)
    assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    assert answer.diverging_epoch is NO_DIVERGING_EPOCH


def test_an_incremental_fetch_session_always_answers_a_diverging_epoch() -> None:
    """Nothing else changed since the last answer (high watermark, log start, LSO, no
    records, no error): an incremental response would leave the partition out, but a
    DivergingEpoch must reach the fetcher (Kafka's CachedPartition.maybeUpdateResponseData)."""
    cached = CachedPartition(PartitionRequest(7, 1 << 20, last_fetched_epoch=1), 5, 0, 5)
    entry = {
        "error_code": ErrorCode.NONE,
        "high_watermark": 5,
        "log_start_offset": 0,
        "last_stable_offset": 5,
        "preferred_read_replica": -1,
    }
    assert not cached.must_respond(entry, 0, True)
    assert cached.must_respond({**entry, "diverging_epoch": DivergingEpoch(0, 5)}, 0, True)
