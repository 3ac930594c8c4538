"""Odradek's transactional producer and the admin client's transaction calls, against
Odradek; what read_committed readers see is checked with confluent-kafka (Odradek's
consumer still reads as read_uncommitted)."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer as CConsumer
from confluent_kafka import TopicPartition as CTopicPartition

from odradek.client import (
    AdminClient,
    CommitFailedError,
    Consumer,
    ConsumerGroupMetadata,
    Producer,
    TopicPartition,
)
from odradek.client.errors import IllegalStateError, KafkaError

pytestmark = pytest.mark.timeout(90)


def read_committed(bootstrap: str, topic: str, partitions: int, expect: int) -> list[bytes]:
    consumer = CConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + 15
    quiet = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if len(got) >= expect and time.monotonic() - quiet > 0.8:
                    break
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
            quiet = time.monotonic()
    finally:
        consumer.close()
    return sorted(got)


def test_commit_and_abort_and_the_state_rules(bootstrap: str, topic_name: str, make_topic) -> None:
    make_topic(bootstrap, topic_name, 3)
    with Producer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic_name}") as producer:
        with pytest.raises(IllegalStateError):
            producer.begin_transaction()  # before init_transactions
        producer.init_transactions()
        with pytest.raises(IllegalStateError):
            producer.send(topic_name, b"outside")  # no transaction open
        producer.begin_transaction()
        with pytest.raises(IllegalStateError):
            producer.begin_transaction()
        for i in range(9):
            producer.send(topic_name, b"c%d" % i, partition=i % 3)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(6):
            producer.send(topic_name, b"a%d" % i, partition=i % 3)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic_name, b"last", partition=2)
        producer.commit_transaction()
        with pytest.raises(IllegalStateError):
            producer.commit_transaction()  # nothing open
    expected = sorted([b"c%d" % i for i in range(9)] + [b"last"])
    assert read_committed(bootstrap, topic_name, 3, len(expected)) == expected


def test_a_new_instance_fences_the_old_one(bootstrap: str, topic_name: str, make_topic) -> None:
    make_topic(bootstrap, topic_name, 1)
    txn_id = f"tx-{topic_name}"
    old = Producer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    new = Producer(bootstrap_servers=bootstrap, transactional_id=txn_id)
    try:
        old.init_transactions()
        old.begin_transaction()
        old.send(topic_name, b"zombie").result(10)
        new.init_transactions()  # aborts the old one's transaction with a bumped epoch
        assert new.producer_id[0] == old.producer_id[0]
        assert new.producer_id[1] == old.producer_id[1] + 2
        new.begin_transaction()
        new.send(topic_name, b"alive")
        new.commit_transaction()
        with pytest.raises(KafkaError) as fenced:
            old.commit_transaction()
        assert type(fenced.value).__name__ in ("ProducerFencedError", "InvalidProducerEpochError")
        with pytest.raises(KafkaError):
            old.begin_transaction()  # fatal: the old instance is done
    finally:
        old.close(0)
        new.close()
    assert read_committed(bootstrap, topic_name, 1, 1) == [b"alive"]


def test_offsets_in_the_transaction_and_a_refused_commit_is_abortable(
    bootstrap: str, topic_name: str, make_topic
) -> None:
    make_topic(bootstrap, topic_name, 1)
    group = f"g-{topic_name}"
    tp = TopicPartition(topic_name, 0)
    with Producer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic_name}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic_name, b"x")
        producer.send_offsets_to_transaction({tp: 7}, group)  # a group without members
        producer.commit_transaction()
        # An old generation of a group that does not exist: the group refuses the offsets.
        producer.begin_transaction()
        stale = ConsumerGroupMetadata(f"{group}-other", generation_id=5, member_id="gone")
        with pytest.raises(CommitFailedError):
            producer.send_offsets_to_transaction({tp: 9}, stale)
        with pytest.raises(CommitFailedError):
            producer.commit_transaction()  # abortable: only abort works now
        producer.abort_transaction()
        producer.begin_transaction()  # and then the producer carries on
        producer.send(topic_name, b"y")
        producer.commit_transaction()
    with Consumer(bootstrap_servers=bootstrap, group_id=group) as consumer:
        assert consumer.committed([tp])[tp].offset == 7
    assert read_committed(bootstrap, topic_name, 1, 2) == [b"x", b"y"]


def test_an_expired_transaction_is_aborted_and_described(
    bootstrap: str, topic_name: str, make_topic
) -> None:
    make_topic(bootstrap, topic_name, 2)
    txn_id = f"tx-{topic_name}"
    producer = Producer(
        bootstrap_servers=bootstrap, transactional_id=txn_id, transaction_timeout_ms=1000
    )
    admin = AdminClient(bootstrap_servers=bootstrap)
    try:
        producer.init_transactions()
        pid, epoch = producer.producer_id
        assert admin.describe_transactions([txn_id])[txn_id].start_time_ms is None  # Empty
        producer.begin_transaction()
        producer.send(topic_name, b"too slow", partition=1).result(10)
        described = admin.describe_transactions([txn_id])[txn_id]
        assert (described.state, described.producer_id) == ("Ongoing", pid)
        assert described.partitions == (TopicPartition(topic_name, 1),)
        assert described.timeout_ms == 1000 and described.start_time_ms is not None
        listed = admin.list_transactions(states=["Ongoing"], producer_ids=[pid])
        assert [t.transactional_id for t in listed] == [txn_id]
        deadline = time.monotonic() + 20
        while admin.describe_transactions([txn_id])[txn_id].state != "CompleteAbort":
            assert time.monotonic() < deadline, "the broker did not abort the expired transaction"
            time.sleep(0.1)
        assert admin.describe_transactions([txn_id])[txn_id].producer_epoch == epoch + 1
        with pytest.raises(KafkaError):
            producer.commit_transaction()  # fenced by the abort's epoch bump
    finally:
        producer.close(0)
        admin.close()
    assert read_committed(bootstrap, topic_name, 2, 0) == []


def test_a_commit_that_timed_out_can_be_retried(
    bootstrap: str, topic_name: str, make_topic
) -> None:
    """As Java's commitTransaction: a TimeoutException leaves the commit to be retried
    (EndTxn is idempotent at the coordinator), not a producer that can neither commit
    nor abort until it is closed."""
    make_topic(bootstrap, topic_name, 1)
    with Producer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic_name}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic_name, b"retried").result(10)
        with pytest.raises(KafkaError) as timed_out:
            producer.commit_transaction(timeout=0)
        assert type(timed_out.value).__name__ == "KafkaTimeoutError"
        producer.commit_transaction()
        producer.begin_transaction()  # the next transaction starts as usual
        producer.send(topic_name, b"next").result(10)
        producer.commit_transaction()
    assert read_committed(bootstrap, topic_name, 1, 2) == [b"next", b"retried"]
