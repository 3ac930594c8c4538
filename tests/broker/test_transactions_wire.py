"""The transaction protocol on the wire, request by request, with Kafka's error codes:
coordinator lookup, InitProducerId, AddPartitionsToTxn, KIP-890 verification of
transactional produce, read_committed Fetch and ListOffsets (LSO, aborted transactions),
AddOffsetsToTxn + TxnOffsetCommit with OffsetFetch require_stable, EndTxn,
DescribeTransactions and ListTransactions."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.config import BrokerConfig
from odradek.broker.server import Broker as InProcessBroker
from odradek.log import PartitionLog
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.records import COMPRESSION_GZIP, COMPRESSION_NONE, build_batch, iter_batches
from odradek.testing import Broker

from .wire import WireClient

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TXN_STATE = 48
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
UNSTABLE_OFFSET_COMMIT = 88
TRANSACTION_ABORTABLE = 120


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


def txn_batch(
    pid: int, epoch: int, seq: int, *values: bytes, compression: int = COMPRESSION_NONE
) -> bytes:
    return build_batch(
        [(None, v, ()) for v in values],
        timestamp_ms=int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        compression=compression,
        transactional=True,
    )


class Txn:
    """One transactional producer speaking raw requests."""

    def __init__(self, wire: WireClient, txn_id: str, topic: str) -> None:
        self.wire = wire
        self.txn_id = txn_id
        self.topic = topic
        self.pid = -1
        self.epoch = -1
        self.seq = 0

    def init(self) -> None:
        r = self.wire.request(
            ApiKey.INIT_PRODUCER_ID,
            4,
            {"transactional_id": self.txn_id, "transaction_timeout": 60_000},
        )
        assert r.error_code == 0, r
        self.pid, self.epoch = int(r.producer_id), int(r.producer_epoch)

    def add(self, *partitions: int, topic: str | None = None) -> dict[tuple[str, int], int]:
        r = self.wire.request(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            {
                "v3_and_below_transactional_id": self.txn_id,
                "v3_and_below_producer_id": self.pid,
                "v3_and_below_producer_epoch": self.epoch,
                "v3_and_below_topics": [
                    {"name": topic or self.topic, "partitions": list(partitions)}
                ],
            },
        )
        return {
            (t.name, int(p.partition_index)): int(p.partition_error_code)
            for t in r.results_by_topic_v3_and_below
            for p in t.results_by_partition
        }

    def produce(
        self, partition: int, *values: bytes, version: int = 9, compression: int = COMPRESSION_NONE
    ) -> int:
        r = self.wire.request(
            ApiKey.PRODUCE,
            version,
            {
                "transactional_id": self.txn_id,
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [
                    {
                        "name": self.topic,
                        "partition_data": [
                            {
                                "index": partition,
                                "records": txn_batch(
                                    self.pid, self.epoch, self.seq, *values, compression=compression
                                ),
                            }
                        ],
                    }
                ],
            },
        )
        code = int(r.responses[0].partition_responses[0].error_code)
        if code == 0:
            self.seq += len(values)
        return code

    def end(self, *, commit: bool) -> int:
        r = self.wire.request(
            ApiKey.END_TXN,
            3,
            {
                "transactional_id": self.txn_id,
                "producer_id": self.pid,
                "producer_epoch": self.epoch,
                "committed": commit,
            },
        )
        return int(r.error_code)


def fetch(wire: WireClient, topic: str, partition: int, *, committed: bool) -> Any:
    r = wire.request(
        ApiKey.FETCH,
        11,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": 1 << 20,
            "isolation_level": 1 if committed else 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
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
        },
    )
    return r.responses[0].partitions[0]


def latest(wire: WireClient, topic: str, *, committed: bool) -> int:
    r = wire.request(
        ApiKey.LIST_OFFSETS,
        7,
        {
            "replica_id": -1,
            "isolation_level": 1 if committed else 0,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
    )
    return int(r.topics[0].partitions[0].offset)


def offset_fetch(wire: WireClient, group: str, topic: str, *, stable: bool) -> tuple[int, int]:
    r = wire.request(
        ApiKey.OFFSET_FETCH,
        7,
        {
            "group_id": group,
            "topics": [{"name": topic, "partition_indexes": [0]}],
            "require_stable": stable,
        },
    )
    p = r.topics[0].partitions[0]
    return int(p.committed_offset), int(p.error_code)


def until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 20
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def values(records: bytes) -> list[int]:
    """Base offsets of the data batches in a fetch answer."""
    return [h.base_offset for _, h in iter_batches(records) if not h.is_control]


@pytest.fixture
def topic(odradek_session_broker: Broker) -> str:
    name = unique("txn-wire")
    admin = AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(timeout=10)
    return name


def test_transaction_protocol_walkthrough(odradek_session_broker: Broker, topic: str) -> None:
    group = unique("txn-group")
    with WireClient(odradek_session_broker.bootstrap, timeout_s=30) as wire:
        found = wire.request(
            ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": ["t1"]}
        )
        assert found.coordinators[0].error_code == 0 and found.coordinators[0].node_id == 0
        txn = Txn(wire, unique("txn"), topic)
        txn.init()
        # A partition of an unknown topic spoils the request: the rest is not attempted.
        assert txn.add(0, topic="no-such-topic") == {
            ("no-such-topic", 0): UNKNOWN_TOPIC_OR_PARTITION
        }
        # KIP-890: a transactional write to a partition not in the transaction.
        assert txn.produce(0, b"early", version=9) == INVALID_TXN_STATE
        assert txn.produce(0, b"early", version=11) == TRANSACTION_ABORTABLE
        assert txn.add(0, 1) == {(topic, 0): 0, (topic, 1): 0}
        assert txn.produce(0, b"c1", b"c2") == 0
        # The open transaction holds the LSO at its first offset.
        assert latest(wire, topic, committed=False) == 2
        assert latest(wire, topic, committed=True) == 0
        pending = fetch(wire, topic, 0, committed=True)
        assert (pending.high_watermark, pending.last_stable_offset) == (2, 0)
        assert not pending.records
        assert values(fetch(wire, topic, 0, committed=False).records) == [0]
        # Offsets in the transaction: pending until the marker.
        added = wire.request(
            ApiKey.ADD_OFFSETS_TO_TXN,
            3,
            {
                "transactional_id": txn.txn_id,
                "producer_id": txn.pid,
                "producer_epoch": txn.epoch,
                "group_id": group,
            },
        )
        assert added.error_code == 0
        committed = wire.request(
            ApiKey.TXN_OFFSET_COMMIT,
            3,
            {
                "transactional_id": txn.txn_id,
                "group_id": group,
                "producer_id": txn.pid,
                "producer_epoch": txn.epoch,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "committed_offset": 42,
                                "committed_metadata": "m",
                            }
                        ],
                    }
                ],
            },
        )
        assert committed.topics[0].partitions[0].error_code == 0
        assert offset_fetch(wire, group, topic, stable=True) == (-1, UNSTABLE_OFFSET_COMMIT)
        assert offset_fetch(wire, group, topic, stable=False) == (-1, 0)
        described = wire.request(
            ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [txn.txn_id]}
        )
        state = described.transaction_states[0]
        assert (state.transaction_state, int(state.producer_id)) == ("Ongoing", txn.pid)
        in_txn = {t.topic: sorted(t.partitions) for t in state.topics}
        assert in_txn[topic] == [0, 1] and len(in_txn["__consumer_offsets"]) == 1
        listed = wire.request(
            ApiKey.LIST_TRANSACTIONS,
            1,
            {"state_filters": ["Ongoing"], "producer_id_filters": [txn.pid], "duration_filter": -1},
        )
        assert [t.transactional_id for t in listed.transaction_states] == [txn.txn_id]

        assert txn.end(commit=True) == 0
        until(lambda: latest(wire, topic, committed=True) == 3, "the commit marker")
        assert values(fetch(wire, topic, 0, committed=True).records) == [0]
        until(lambda: offset_fetch(wire, group, topic, stable=True) == (42, 0), "the offsets")

        # An aborted transaction: its data is returned with the aborted range to drop.
        assert txn.add(0) == {(topic, 0): 0}
        assert txn.produce(0, b"a1") == 0
        assert txn.end(commit=False) == 0
        until(lambda: latest(wire, topic, committed=True) == 5, "the abort marker")
        after = fetch(wire, topic, 0, committed=True)
        assert values(after.records) == [0, 3]
        assert [(int(a.producer_id), int(a.first_offset)) for a in after.aborted_transactions] == [
            (txn.pid, 3)
        ]
        # Transactional records without a transactional id: refused as Kafka refuses them.
        anonymous = wire.request(
            ApiKey.PRODUCE,
            9,
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [
                    {
                        "name": topic,
                        "partition_data": [
                            {"index": 1, "records": txn_batch(txn.pid, txn.epoch, 0, b"x")}
                        ],
                    }
                ],
            },
        )
        code = anonymous.responses[0].partition_responses[0].error_code
        assert code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def test_a_new_producer_fences_the_old_and_aborts_its_transaction(
    odradek_session_broker: Broker, topic: str
) -> None:
    txn_id = unique("fenced")
    with WireClient(odradek_session_broker.bootstrap, timeout_s=30) as wire:
        old = Txn(wire, txn_id, topic)
        old.init()
        assert old.add(1) == {(topic, 1): 0}
        assert old.produce(1, b"zombie") == 0
        new = Txn(wire, txn_id, topic)
        first = wire.request(
            ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": txn_id, "transaction_timeout": 60_000}
        )
        assert first.error_code == 51  # CONCURRENT_TRANSACTIONS: the old one is being aborted
        until(lambda: _try_init(new), "the fencing abort")
        assert (new.pid, new.epoch) == (old.pid, old.epoch + 2)
        assert old.end(commit=True) == 90  # PRODUCER_FENCED
        assert old.produce(1, b"late") == 47  # INVALID_PRODUCER_EPOCH: the marker fenced it
        assert latest(wire, topic, committed=True) == latest(wire, topic, committed=False)
        assert fetch(wire, topic, 1, committed=True).aborted_transactions[0].producer_id == old.pid


def _try_init(txn: Txn) -> bool:
    r = txn.wire.request(
        ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": txn.txn_id, "transaction_timeout": 60_000}
    )
    if r.error_code == 51:
        return False
    assert r.error_code == 0, r
    txn.pid, txn.epoch = int(r.producer_id), int(r.producer_epoch)
    return True


def test_a_transaction_that_ends_while_its_batch_inflates_does_not_take_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Produce inflates compressed batches in a worker thread; the KIP-890 check runs after
    it, right before the append. Checked before, a transaction aborted meanwhile would get
    its late batch appended after its abort marker: a transaction nobody ever ends, and the
    partition's last stable offset held back for good."""
    entered, release = threading.Event(), threading.Event()
    validate = PartitionLog.validate

    def held_validate(self: PartitionLog, data: Any) -> Any:
        entered.set()
        assert release.wait(30), "the test never released the inflating batch"
        return validate(self, data)

    monkeypatch.setattr(PartitionLog, "validate", held_validate)

    async def scenario() -> tuple[int, int, int]:
        broker = InProcessBroker(tmp_path / "data", BrokerConfig(), port=0)
        await broker.start()
        try:
            topic = unique("inflating")
            await broker.topics.ensure_topics([topic])
            bootstrap = f"127.0.0.1:{broker.port}"
            with WireClient(bootstrap, 30) as producing, WireClient(bootstrap, 30) as control:
                txn = Txn(producing, unique("txn"), topic)
                await asyncio.to_thread(txn.init)
                assert await asyncio.to_thread(txn.add, 0) == {(topic, 0): 0}
                produced = asyncio.create_task(
                    asyncio.to_thread(txn.produce, 0, b"late", compression=COMPRESSION_GZIP)
                )
                assert await asyncio.to_thread(entered.wait, 30)
                aborter = Txn(control, txn.txn_id, topic)
                aborter.pid, aborter.epoch = txn.pid, txn.epoch
                assert await asyncio.to_thread(aborter.end, commit=False) == 0
                deadline = time.monotonic() + 20
                while await asyncio.to_thread(latest, control, topic, committed=False) < 1:
                    assert time.monotonic() < deadline, "the abort marker never arrived"
                    await asyncio.sleep(0.02)
                release.set()
                code = await produced
                end = await asyncio.to_thread(latest, control, topic, committed=False)
                stable = await asyncio.to_thread(latest, control, topic, committed=True)
                return code, end, stable
        finally:
            release.set()
            await broker.stop()

    code, end, stable = asyncio.run(scenario())
    assert code == INVALID_TXN_STATE
    assert (end, stable) == (1, 1)  # the abort marker alone; nothing holds the LSO back
