"""A follower's Fetch answered by its old leader after the leadership moved.

Seen in the fault suite (seed 8, soak): broker 2 followed broker 1 (epoch 2) and had
a Fetch in flight when the controller made broker 3 leader (epoch 3); the fetcher
for broker 3 checked for divergence (nothing to truncate yet), then the old
leader's answer arrived and its epoch-2 records were appended past the point the
new leader's log diverged. Every later fetch from broker 3 failed with
OffsetMismatchError and the replica never rejoined the ISR. A response from a
leader, or for an epoch, the replica no longer follows must be dropped: a Fetch's
records, and an OffsetForLeaderEpoch answer (which would otherwise mark the new
epoch as checked with the old leader's word).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from odradek.cluster.fetcher import EPOCH_VERSION, FETCH_VERSION, ReplicaFetcher
from odradek.log import LogConfig, PartitionLog
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import build, encode_response, response_type
from odradek.protocol.fetch import encode_fetch_response
from odradek.protocol.records import build_batch
from odradek.replication.model import PartitionState, VersionedPartitionState
from odradek.replication.replica import Replica, ReplicaManager

TOPIC = "t"
REPLICAS = (1, 2, 3)
TEST_DEADLINE_S = 10.0


def state(leader: int, epoch: int, isr: tuple[int, ...], revision: int) -> VersionedPartitionState:
    return VersionedPartitionState(TOPIC, 0, PartitionState(leader, epoch, isr), revision)


def fetch_answer(batch: bytes) -> bytes:
    """A Fetch v12 response payload (as `LeaderConnection.send` returns it) with `batch`."""
    partition = {
        "partition_index": 0,
        "error_code": 0,
        "high_watermark": 0,
        "last_stable_offset": 0,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": batch,
    }
    encoded = encode_fetch_response(
        FETCH_VERSION,
        1,
        throttle_ms=0,
        error_code=0,
        session_id=0,
        topics=[(TOPIC, None, [partition])],
    )
    return b"".join(bytes(p) for p in encoded.parts)[4:]  # without the size prefix


def epoch_answer(leader_epoch: int, end_offset: int) -> bytes:
    """An OffsetForLeaderEpoch v3 response payload for partition 0."""
    partition = {
        "error_code": 0,
        "partition": 0,
        "leader_epoch": leader_epoch,
        "end_offset": end_offset,
    }
    body = build(
        response_type(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION),
        {"throttle_time": 0, "topics": [{"topic": TOPIC, "partitions": [partition]}]},
    )
    return encode_response(ApiKey.OFFSET_FOR_LEADER_EPOCH, EPOCH_VERSION, 1, body)[4:]


class LeaderThatLosesLeadership:
    """Answers one request, but only after the replica was moved to another leader."""

    def __init__(self, manager: ReplicaManager, replica: Replica, answer: bytes) -> None:
        self.manager, self.replica, self.answer = manager, replica, answer

    async def send(self, api_key: int, version: int, body: Any) -> bytes:
        await asyncio.sleep(0)
        self.manager.apply_state(self.replica, REPLICAS, state(3, 3, (2, 3), 2))
        return self.answer


def follower_of_broker_1(tmp_path: Path) -> tuple[ReplicaManager, Replica, ReplicaFetcher]:
    """Broker 2 following broker 1 at epoch 2, and its fetcher for broker 1."""
    plog = PartitionLog.open(
        tmp_path / f"{TOPIC}-0", LogConfig(), now_ms=lambda: int(time.time() * 1000)
    )
    manager = ReplicaManager(
        2,
        min_insync=lambda topic: 2,
        lag_time_max_s=30.0,
        propose_isr=lambda replica, isr: None,
        wake=lambda topic, partition: None,
    )
    replica = manager.host(TOPIC, 0, plog)
    manager.apply_state(replica, REPLICAS, state(1, 2, REPLICAS, 1))
    fetcher = ReplicaFetcher(
        2,
        1,
        manager,
        lambda broker: ("127.0.0.1", 9),
        max_wait_ms=100,
        max_bytes=1 << 20,
        timeout_s=5.0,
    )
    return manager, replica, fetcher


def test_an_epoch_answer_after_the_leader_changed_does_not_count_for_the_new_leader(
    tmp_path: Path,
) -> None:
    manager, replica, fetcher = follower_of_broker_1(tmp_path)
    plog = replica.plog
    try:
        plog.append_as_follower(
            build_batch([(None, b"epoch-2", ())], timestamp_ms=0, partition_leader_epoch=2)
        )
        # broker 1 says "your epoch 2 ends where your log does": nothing to truncate
        connection = LeaderThatLosesLeadership(manager, replica, epoch_answer(2, 1))
        check = fetcher._check_truncation(connection, [replica])  # type: ignore[arg-type]
        asyncio.run(asyncio.wait_for(check, TEST_DEADLINE_S))
        assert replica.leader == 3 and replica.leader_epoch == 3
        assert replica.truncation_checked_epoch != 3, (
            "broker 1's answer marked epoch 3 as checked: broker 3 is never asked"
        )
    finally:
        plog.close()


def test_a_fetch_answered_after_the_leader_changed_is_dropped(tmp_path: Path) -> None:
    manager, replica, fetcher = follower_of_broker_1(tmp_path)
    plog = replica.plog
    replica.truncation_checked_epoch = 2  # checked against leader 1 already
    old_leaders_records = build_batch(
        [(None, b"epoch-2", ())], base_offset=0, timestamp_ms=0, partition_leader_epoch=2
    )
    connection = LeaderThatLosesLeadership(manager, replica, fetch_answer(old_leaders_records))
    try:
        asyncio.run(
            asyncio.wait_for(fetcher._fetch_once(connection, [replica]), TEST_DEADLINE_S)  # type: ignore[arg-type]
        )
        assert replica.leader == 3 and replica.leader_epoch == 3
        assert plog.end_offset == 0, "the old leader's records were appended after it lost the role"
    finally:
        plog.close()


class LeaderAnswering:
    """Answers every request with one payload."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer

    async def send(self, api_key: int, version: int, body: Any) -> bytes:
        return self.answer


def test_one_partition_that_cannot_take_its_records_does_not_stall_the_others(
    tmp_path: Path,
) -> None:
    """Partition 0's records do not follow on its log (OffsetMismatchError): partition 1,
    in the same response, still gets its records, and partition 0 is checked against
    the leader again before its next fetch."""
    manager = ReplicaManager(
        2,
        min_insync=lambda topic: 2,
        lag_time_max_s=30.0,
        propose_isr=lambda replica, isr: None,
        wake=lambda topic, partition: None,
    )
    replicas = []
    for index in (0, 1):
        plog = PartitionLog.open(
            tmp_path / f"{TOPIC}-{index}", LogConfig(), now_ms=lambda: int(time.time() * 1000)
        )
        replica = manager.host(TOPIC, index, plog)
        versioned = VersionedPartitionState(TOPIC, index, PartitionState(1, 2, REPLICAS), 1)
        manager.apply_state(replica, REPLICAS, versioned)
        replica.truncation_checked_epoch = 2
        replicas.append(replica)
    fetcher = ReplicaFetcher(
        2,
        1,
        manager,
        lambda broker: ("127.0.0.1", 9),
        max_wait_ms=100,
        max_bytes=1 << 20,
        timeout_s=5.0,
    )
    entries = []
    for index, base in ((0, 5), (1, 0)):  # partition 0's batch starts past its log end
        batch = build_batch(
            [(None, b"r%d" % index, ())], base_offset=base, timestamp_ms=0, partition_leader_epoch=2
        )
        entries.append(
            {
                "partition_index": index,
                "error_code": 0,
                "high_watermark": 0,
                "last_stable_offset": 0,
                "log_start_offset": 0,
                "aborted_transactions": None,
                "preferred_read_replica": -1,
                "records": batch,
            }
        )
    encoded = encode_fetch_response(
        FETCH_VERSION, 1, throttle_ms=0, error_code=0, session_id=0, topics=[(TOPIC, None, entries)]
    )
    answer = b"".join(bytes(p) for p in encoded.parts)[4:]
    try:
        asyncio.run(
            asyncio.wait_for(
                fetcher._fetch_once(LeaderAnswering(answer), replicas),  # type: ignore[arg-type]
                TEST_DEADLINE_S,
            )
        )
        assert replicas[1].plog.end_offset == 1, "partition 1 took its records"
        assert replicas[0].plog.end_offset == 0
        assert replicas[0].truncation_checked_epoch == -1, "partition 0 is checked again"
    finally:
        for replica in replicas:
            replica.plog.close()
