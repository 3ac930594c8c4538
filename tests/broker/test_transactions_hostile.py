"""Hostile and unlucky transactional input on the wire: what a client must not be able to
do to a partition's last stable offset or to another producer's transaction."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.records import build_batch
from odradek.testing import Broker

from .test_transactions_wire import Txn, latest, unique, until
from .wire import WireClient

INVALID_RECORD = 87
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


@pytest.fixture
def topic(odradek_session_broker: Broker) -> str:
    name = unique("txn-hostile")
    admin = AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=10)
    return name


def _plain_batch(*values: bytes) -> bytes:
    return build_batch([(None, v, ()) for v in values], timestamp_ms=int(time.time() * 1000))


def _txn_batch(pid: int, epoch: int, seq: int, *values: bytes) -> bytes:
    return build_batch(
        [(None, v, ()) for v in values],
        timestamp_ms=int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def _produce(wire: WireClient, topic: str, records: bytes, txn_id: str | None) -> int:
    r = wire.request(
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": txn_id,
            "acks": -1,
            "timeout": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return int(r.responses[0].partition_responses[0].error_code)


def test_a_transactional_batch_behind_a_plain_one_opens_no_transaction(
    odradek_session_broker: Broker, topic: str
) -> None:
    """Kafka takes exactly one batch per partition from Produce v3+; a transactional batch
    hidden behind a plain first batch must not open a transaction that no coordinator
    knows (nothing would ever write its marker: the LSO would stay there for good)."""
    with WireClient(odradek_session_broker.bootstrap, timeout_s=30) as wire:
        txn = Txn(wire, unique("hostile"), topic)
        txn.init()
        smuggled = _plain_batch(b"cover") + _txn_batch(txn.pid + 1000, 0, 0, b"hidden")
        assert _produce(wire, topic, smuggled, None) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        assert _produce(wire, topic, smuggled, txn.txn_id) == INVALID_RECORD
        two_producers = _txn_batch(txn.pid, txn.epoch, 0, b"a") + _txn_batch(
            txn.pid + 1, 0, 0, b"b"
        )
        assert txn.add(0) == {(topic, 0): 0}
        assert _produce(wire, topic, two_producers, txn.txn_id) == INVALID_RECORD
        assert txn.end(commit=False) == 0
        assert _produce(wire, topic, _plain_batch(b"after"), None) == 0
        end = latest(wire, topic, committed=False)
        until(lambda: latest(wire, topic, committed=True) == end, "a stable partition")


def test_an_idempotent_init_producer_id_cannot_take_over_a_transactional_producer(
    odradek_session_broker: Broker, topic: str
) -> None:
    """Without a transactional id, InitProducerId always gets a new producer id (Kafka's
    coordinator ignores the id and epoch sent): bumping whatever id a client names would
    let it fence a transactional producer out of its partitions."""
    with WireClient(odradek_session_broker.bootstrap, timeout_s=30) as wire:
        victim = Txn(wire, unique("victim"), topic)
        victim.init()
        taken = wire.request(
            ApiKey.INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": None,
                "transaction_timeout": 60_000,
                "producer_id": victim.pid,
                "producer_epoch": victim.epoch,
            },
        )
        assert taken.error_code == 0
        assert (int(taken.producer_id), int(taken.producer_epoch)) != (victim.pid, victim.epoch + 1)
        assert int(taken.producer_id) != victim.pid
        hijack = build_batch(
            [(None, b"hijack", ())],
            timestamp_ms=int(time.time() * 1000),
            producer_id=int(taken.producer_id),
            producer_epoch=int(taken.producer_epoch),
            base_sequence=0,
        )
        assert _produce(wire, topic, hijack, None) == 0
        assert victim.add(0) == {(topic, 0): 0}
        assert victim.produce(0, b"mine") == 0
        assert victim.end(commit=True) == 0


INVALID_PRODUCER_ID_MAPPING = 49


def _init_idempotent(wire: WireClient) -> tuple[int, int]:
    """A producer id from InitProducerId without a transactional id (an idempotent one)."""
    r = wire.request(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {"transactional_id": None, "transaction_timeout": 60_000},
    )
    assert r.error_code == 0
    return int(r.producer_id), int(r.producer_epoch)


def test_a_transactional_batch_of_a_producer_without_a_transactional_id_is_refused(
    odradek_session_broker: Broker, topic: str
) -> None:
    """Issue 24 item 3. Kafka 4.1 (KafkaApis.handleProduceRequest) refuses a Produce whose
    batches set the transactional attribute and that names no transactional id with
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED, whatever the batch's producer id (-1 included:
    RequestUtils.hasTransactionalRecords looks at the attribute alone). With a
    transactional id, a producer id the id does not map to is refused by the coordinator's
    verification (KIP-890) with INVALID_PRODUCER_ID_MAPPING. Nothing is appended."""
    with WireClient(odradek_session_broker.bootstrap, timeout_s=30) as wire:
        end = latest(wire, topic, committed=False)
        no_producer = _txn_batch(-1, -1, -1, b"no producer id")
        assert _produce(wire, topic, no_producer, None) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        pid, epoch = _init_idempotent(wire)
        idempotent = _txn_batch(pid, epoch, 0, b"idempotent producer")
        assert _produce(wire, topic, idempotent, None) == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        owner = Txn(wire, unique("owner"), topic)
        owner.init()
        assert _produce(wire, topic, idempotent, owner.txn_id) == INVALID_PRODUCER_ID_MAPPING
        assert _produce(wire, topic, idempotent, unique("never-initialised")) == (
            INVALID_PRODUCER_ID_MAPPING
        )
        assert latest(wire, topic, committed=False) == end, "nothing was appended"
        assert latest(wire, topic, committed=True) == end, "no transaction was opened"
        # The same producer's plain (idempotent) batch is fine.
        plain = build_batch(
            [(None, b"plain", ())],
            timestamp_ms=int(time.time() * 1000),
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
        )
        assert _produce(wire, topic, plain, None) == 0
        assert latest(wire, topic, committed=True) == end + 1


def test_a_refused_transactional_batch_fails_the_whole_request(
    odradek_session_broker: Broker, topic: str
) -> None:
    """As Kafka, the refusal is for the request: a plain batch for another partition in the
    same Produce is not written either."""
    other = unique("txn-hostile-other")
    admin = AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})
    admin.create_topics([NewTopic(other, 1, 1)])[other].result(timeout=10)
    with WireClient(odradek_session_broker.bootstrap, timeout_s=30) as wire:
        r = wire.request(
            ApiKey.PRODUCE,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [
                    {
                        "name": other,
                        "partition_data": [{"index": 0, "records": _plain_batch(b"plain")}],
                    },
                    {
                        "name": topic,
                        "partition_data": [
                            {"index": 0, "records": _txn_batch(-1, -1, -1, b"smuggled")}
                        ],
                    },
                ],
            },
        )
        codes = [int(p.error_code) for t in r.responses for p in t.partition_responses]
        assert codes == [TRANSACTIONAL_ID_AUTHORIZATION_FAILED] * 2
        assert latest(wire, other, committed=False) == 0
        assert latest(wire, topic, committed=False) == 0
