"""The follower's fetcher against a fake leader that holds a real log: it names its last
fetched epoch in every Fetch, truncates on a DivergingEpoch answer (KIP-320, Kafka's
truncateOnFetchResponse) and catches up; and it never spins on a partition it cannot
advance (issue 21, item 1: a follower whose suffix ended inside a leader batch looped
on OffsetMismatchError, ~1,300 error lines a second, and never rejoined the ISR).

No network, no etcd: the fake leader answers the fetcher's requests from a
`PartitionLog` as the broker would (the leader's rule is the broker's own,
`check_last_fetched_epoch`), or as an old leader would (no epoch in its
OffsetForLeaderEpoch answers, no LastFetchedEpoch check), which leaves the
divergence for the fetch path to find.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest
from test_fetcher_stale_response import (
    REPLICAS,
    TEST_DEADLINE_S,
    TOPIC,
    epoch_answer,
    follower_of_broker_1,
    state,
)

from odradek.cluster import fetcher as fetcher_module
from odradek.cluster.fetcher import FETCH_VERSION, ReplicaFetcher
from odradek.log import LogConfig, PartitionLog
from odradek.log.leader_epoch import UNDEFINED_EPOCH
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch import encode_fetch_response, parse_fetch_request
from odradek.protocol.records import build_batch, decode_batch_records, iter_batches
from odradek.replication.replica import Replica
from odradek.replication.truncation import DivergingEpoch, check_last_fetched_epoch

CATCH_UP_DEADLINE_S = 10.0
# What catching up may cost at most: a truncation or two, and nothing that repeats.
MAX_LOG_LINES = 4
MAX_FETCHES = 20


def batch(base: int, values: list[bytes], epoch: int) -> bytes:
    return build_batch(
        [(None, v, ()) for v in values],
        base_offset=base,
        timestamp_ms=0,
        partition_leader_epoch=epoch,
    )


def values_of(plog: PartitionLog) -> list[tuple[int, bytes | None]]:
    out = []
    for data in plog.iter_batches_from(plog.start_offset):
        for position, header in iter_batches(data):
            out.extend((r.offset, r.value) for r in decode_batch_records(data, position, header))
    return out


class LeaderWithRealLog:
    """Broker 1, leading epoch 2 over `log`, answering OffsetForLeaderEpoch and Fetch.

    ``names_epochs``: its OffsetForLeaderEpoch answers name the epoch (KIP-279), else
    they are a pre-KIP-279 leader's (no epoch, its log end). ``checks_last_fetched``:
    it answers a DivergingEpoch where the fetcher's last epoch says the logs part (the
    broker's rule), else it reads from the fetch offset whatever was asked.
    """

    def __init__(self, log: PartitionLog, *, names_epochs: bool, checks_last_fetched: bool):
        self.log = log
        self.names_epochs = names_epochs
        self.checks_last_fetched = checks_last_fetched
        self.fetches: list[tuple[int, int]] = []  # (fetch offset, last fetched epoch)
        self.diverging: list[DivergingEpoch] = []

    def close(self) -> None:
        pass

    async def send(self, api_key: int, version: int, body: Any) -> bytes:
        await asyncio.sleep(0)
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            (asked,) = body.topics[0].partitions
            if not self.names_epochs:
                return epoch_answer(UNDEFINED_EPOCH, self.log.end_offset)
            return epoch_answer(*self.log.end_offset_for_epoch(asked.leader_epoch))
        assert (api_key, version) == (ApiKey.FETCH, FETCH_VERSION)
        request = parse_fetch_request(body.payload, 0, version)
        (wanted,) = request.topics[0].partitions
        self.fetches.append((wanted.fetch_offset, wanted.last_fetched_epoch))
        if wanted.fetch_offset == self.log.end_offset:
            await asyncio.sleep(request.max_wait_ms / 1000)  # parked: nothing new arrives
        return self._fetch_answer(wanted.fetch_offset, wanted.last_fetched_epoch)

    def _fetch_answer(self, offset: int, last_fetched_epoch: int) -> bytes:
        log = self.log
        entry: dict[str, Any] = {
            "partition_index": 0,
            "error_code": ErrorCode.NONE,
            "high_watermark": log.end_offset,
            "last_stable_offset": log.end_offset,
            "log_start_offset": log.start_offset,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": b"",
        }
        found = None
        if self.checks_last_fetched:
            found = check_last_fetched_epoch(
                log.leader_epoch_entries,
                log_start=log.start_offset,
                log_end=log.end_offset,
                fetch_offset=offset,
                last_fetched_epoch=last_fetched_epoch,
            )
        if isinstance(found, DivergingEpoch):
            self.diverging.append(found)
            entry["diverging_epoch"] = found
        elif found is not None:
            entry["error_code"] = found
        elif not log.start_offset <= offset <= log.end_offset:
            entry["error_code"] = ErrorCode.OFFSET_OUT_OF_RANGE
        elif offset < log.end_offset:
            entry["records"] = bytes(log.read(offset, 1 << 20))
        encoded = encode_fetch_response(
            FETCH_VERSION,
            1,
            throttle_ms=0,
            error_code=0,
            session_id=0,
            topics=[(TOPIC, None, [entry])],
        )
        return b"".join(bytes(p) for p in encoded.parts)[4:]


def issue_21_logs(
    tmp_path: Path, *, leader_batch: bool
) -> tuple[PartitionLog, list[bytes], list[bytes]]:
    """The issue's sequence: offsets 0..9 in epoch 0 on both; the leader (B, leading
    epoch 2) then holds a-10..a-19 of epoch 0, in one batch if `leader_batch`; the
    follower (C) holds c-10..c-14, which it wrote as leader of epoch 1."""
    leader = PartitionLog.open(
        tmp_path / "leader" / f"{TOPIC}-0", LogConfig(), now_ms=lambda: int(time.time() * 1000)
    )
    shared = [b"v-%d" % i for i in range(10)]
    for offset, value in enumerate(shared):
        leader.append_as_follower(batch(offset, [value], 0))
    a = [b"a-%d" % i for i in range(10, 20)]
    if leader_batch:
        leader.append_as_follower(batch(10, a, 0))
    else:
        for offset, value in enumerate(a, start=10):
            leader.append_as_follower(batch(offset, [value], 0))
    leader.assign_epoch(2, 20)
    return leader, shared, a


def follower_c(tmp_path: Path, shared: list[bytes]) -> tuple[Any, Replica, ReplicaFetcher]:
    manager, replica, fetcher = follower_of_broker_1(tmp_path)
    manager.apply_state(replica, REPLICAS, state(1, 2, REPLICAS, 2))
    for offset, value in enumerate(shared):
        replica.plog.append_as_follower(batch(offset, [value], 0))
    replica.plog.append_as_follower(batch(10, [b"c-%d" % i for i in range(10, 15)], 1))
    return manager, replica, fetcher


async def run_until_caught_up(fetcher: ReplicaFetcher, replica: Replica, leader: Any) -> None:
    fetcher._connection = leader  # the fake leader stands in for the connection
    fetcher._address = ("127.0.0.1", 9)
    fetcher.add((TOPIC, 0))
    try:
        deadline = time.monotonic() + CATCH_UP_DEADLINE_S
        while replica.plog.end_offset != leader.log.end_offset:
            assert time.monotonic() < deadline, (
                f"not caught up in {CATCH_UP_DEADLINE_S} s: follower at "
                f"{replica.plog.end_offset}, leader at {leader.log.end_offset}; "
                f"fetches (offset, last epoch): {leader.fetches[:10]}..."
            )
            await asyncio.sleep(0.01)
    finally:
        await fetcher.stop()


@pytest.mark.parametrize(
    ("names_epochs", "checks_last_fetched", "leader_batch"),
    [
        (True, True, False),
        (True, True, True),
        (False, True, False),
        (False, True, True),
        (False, False, True),
    ],
    ids=[
        "kip-279-leader",
        "kip-279-leader-one-batch",
        "diverging-epoch-only",
        "diverging-epoch-only-one-batch",
        "old-leader-one-batch",
    ],
)
def test_the_issue_21_follower_catches_up_on_the_leaders_log(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    names_epochs: bool,
    checks_last_fetched: bool,
    leader_batch: bool,
) -> None:
    """Whichever of the leader's answers shows the divergence (its epoch answer, a
    DivergingEpoch, or records that begin below the follower's end inside a leader
    batch), C ends holding exactly B's log, in a bounded number of fetches and log
    lines. (An old leader with a batch per record shows nothing: only the epoch rules
    can find that divergence.)"""
    leader_log, shared, a = issue_21_logs(tmp_path, leader_batch=leader_batch)
    _, replica, fetcher = follower_c(tmp_path, shared)
    leader = LeaderWithRealLog(
        leader_log, names_epochs=names_epochs, checks_last_fetched=checks_last_fetched
    )
    caplog.set_level(logging.INFO, logger="odradek.replication")
    try:
        asyncio.run(
            asyncio.wait_for(run_until_caught_up(fetcher, replica, leader), CATCH_UP_DEADLINE_S + 5)
        )
        assert values_of(replica.plog) == values_of(leader_log)
        assert [v for _, v in values_of(replica.plog)] == shared + a
        assert leader.fetches, "the follower fetched"
        assert all(epoch >= 0 for _, epoch in leader.fetches), "every fetch names its epoch"
        if not names_epochs and checks_last_fetched:
            # C's first fetch: at 15, after a batch of epoch 1, which B never had
            assert leader.fetches[0] == (15, 1)
            assert leader.diverging[0] == DivergingEpoch(0, 20)
        assert len(leader.fetches) <= MAX_FETCHES
        lines = [r for r in caplog.records if r.name == "odradek.replication"]
        assert len(lines) <= MAX_LOG_LINES, [r.getMessage() for r in lines]
    finally:
        replica.plog.close()
        leader_log.close()


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class LeaderAnsweringAnError:
    """Agrees with the follower's epochs, then answers every Fetch with `error` (with a
    log start below the follower's end: nothing to start over at)."""

    def __init__(self, error: ErrorCode = ErrorCode.OFFSET_OUT_OF_RANGE) -> None:
        self.error = error
        self.fetches = 0
        self.epoch_questions = 0

    async def send(self, api_key: int, version: int, body: Any) -> bytes:
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            self.epoch_questions += 1
            return epoch_answer(2, 3)
        self.fetches += 1
        entry = {
            "partition_index": 0,
            "error_code": self.error,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": 0,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": None,
        }
        encoded = encode_fetch_response(
            FETCH_VERSION, 1, throttle_ms=0, error_code=0, session_id=0,
            topics=[(TOPIC, None, [entry])],
        )  # fmt: skip
        return b"".join(bytes(p) for p in encoded.parts)[4:]


def test_an_answer_that_never_helps_is_asked_ever_more_slowly_and_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """60 s of a leader answering every fetch OFFSET_OUT_OF_RANGE (on a manual clock, a
    round every 100 ms): the partition backs off (doubling to MAX_BACKOFF_S) instead of
    asking 600 times, and the failure is logged once per ERROR_LOG_INTERVAL_S."""
    manager, replica, _ = follower_of_broker_1(tmp_path)
    clock = ManualClock()
    fetcher = ReplicaFetcher(
        2, 1, manager, lambda broker: ("127.0.0.1", 9),
        max_wait_ms=100, max_bytes=1 << 20, timeout_s=5.0, clock=clock,
    )  # fmt: skip
    for offset in range(3):
        replica.plog.append_as_follower(batch(offset, [b"x"], 2))
    leader = LeaderAnsweringAnError()
    caplog.set_level(logging.INFO, logger="odradek.replication")

    async def rounds(seconds: float) -> None:
        for _ in range(int(seconds / 0.1)):
            due = fetcher._due(fetcher._following())
            if due:
                await fetcher._check_truncation(leader, due)  # type: ignore[arg-type]
                await fetcher._fetch_once(leader, fetcher._due(fetcher._following()))  # type: ignore[arg-type]
            clock.now += 0.1

    fetcher.partitions.add((TOPIC, 0))
    try:
        asyncio.run(asyncio.wait_for(rounds(60.0), TEST_DEADLINE_S))
        # 0.2 + 0.4 + 0.8 + 1.6, then every 2 s: about 30 in 60 s, not 600
        assert 25 <= leader.fetches <= 35, leader.fetches
        assert leader.epoch_questions == leader.fetches  # each retry checks epochs first
        out_of_range = [r for r in caplog.records if "OFFSET_OUT_OF_RANGE" in r.getMessage()]
        expected_lines = 60 // fetcher_module.ERROR_LOG_INTERVAL_S
        assert expected_lines - 1 <= len(out_of_range) <= expected_lines, len(out_of_range)
        assert "more like this" in out_of_range[-1].getMessage()
        assert replica.plog.end_offset == 3, "nothing was cut: the leader gave no reason"

        # A new leader epoch starts without the backoff.
        fetches = leader.fetches
        manager.apply_state(replica, REPLICAS, state(1, 3, REPLICAS, 3))
        asyncio.run(asyncio.wait_for(rounds(0.1), TEST_DEADLINE_S))
        assert leader.fetches == fetches + 1
    finally:
        replica.plog.close()


def test_a_leadership_still_moving_is_asked_again_at_a_steady_pace(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """NOT_LEADER_OR_FOLLOWER (the leader does not know its role yet) is soon settled:
    asked again every RETRY_BACKOFF_S, not ever more slowly, and logged once per
    ERROR_LOG_INTERVAL_S."""
    manager, replica, _ = follower_of_broker_1(tmp_path)
    clock = ManualClock()
    fetcher = ReplicaFetcher(
        2, 1, manager, lambda broker: ("127.0.0.1", 9),
        max_wait_ms=100, max_bytes=1 << 20, timeout_s=5.0, clock=clock,
    )  # fmt: skip
    leader = LeaderAnsweringAnError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    caplog.set_level(logging.INFO, logger="odradek.replication")

    async def rounds(seconds: float) -> None:
        for _ in range(int(seconds / 0.1)):
            due = fetcher._due(fetcher._following())
            if due:
                await fetcher._check_truncation(leader, due)  # type: ignore[arg-type]
                await fetcher._fetch_once(leader, fetcher._due(fetcher._following()))  # type: ignore[arg-type]
            clock.now += 0.1

    fetcher.partitions.add((TOPIC, 0))
    try:
        asyncio.run(asyncio.wait_for(rounds(10.0), TEST_DEADLINE_S))
        # a fetch every 0.2 s (or 0.3 s, as the 0.1 s rounds fall): 33 to 50 in 10 s,
        # the same pace throughout (a doubling backoff would ask 8 times)
        assert 33 <= leader.fetches <= 50, leader.fetches
        errors = [r for r in caplog.records if "error" in r.getMessage()]
        assert len(errors) == 1, [r.getMessage() for r in errors]
    finally:
        replica.plog.close()
