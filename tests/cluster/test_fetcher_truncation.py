"""A follower's truncation by leader epoch through the fetcher (Kafka's KIP-279), with a
leader that answers OffsetForLeaderEpoch from its own epoch cache: no network, no
etcd. The issue 21 divergence (a follower holding an old leader's suffix the new
leader never had) and the rounds of questions when the follower missed epochs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from test_fetcher_stale_response import (
    REPLICAS,
    TEST_DEADLINE_S,
    epoch_answer,
    follower_of_broker_1,
    state,
)

from odradek.log.leader_epoch import end_offset_for
from odradek.protocol.records import build_batch
from odradek.replication.replica import Replica


class LeaderWithLog:
    """Answers OffsetForLeaderEpoch as a leader holding `epochs` and `end_offset` would,
    and records the epochs it was asked about."""

    def __init__(self, epochs: list[tuple[int, int]], end_offset: int) -> None:
        self.epochs, self.end_offset = epochs, end_offset
        self.asked: list[int] = []

    async def send(self, api_key: int, version: int, body: Any) -> bytes:
        (partition,) = body.topics[0].partitions
        self.asked.append(partition.leader_epoch)
        epoch, end = end_offset_for(self.epochs, partition.leader_epoch, self.end_offset)
        return epoch_answer(epoch, end)


def write(replica: Replica, epochs_by_offset: list[int]) -> None:
    """One batch per record, as followers get them from leaders of those epochs."""
    for offset, epoch in enumerate(epochs_by_offset):
        replica.plog.append_as_follower(
            build_batch(
                [(None, b"%d@%d" % (offset, epoch), ())],
                base_offset=offset,
                timestamp_ms=0,
                partition_leader_epoch=epoch,
            )
        )


def check_until_done(fetcher: Any, replica: Replica, leader: LeaderWithLog) -> int:
    """Run the fetcher's truncation check until it lets the replica fetch; the rounds."""
    for rounds in range(1, 6):
        check = fetcher._check_truncation(leader, [replica])
        asyncio.run(asyncio.wait_for(check, TEST_DEADLINE_S))
        if replica.truncation_checked_epoch == replica.leader_epoch:
            return rounds
    raise AssertionError(f"still truncating after 5 rounds, asked about {leader.asked}")


def test_the_issue_21_divergence_is_cut_where_the_old_leader_began(tmp_path: Path) -> None:
    """C wrote c-10..c-14 as leader of epoch 1; B, now leader (epoch 2 in the helper's
    state), holds a-10..a-19 of epoch 0 and never had epoch 1. C asks about epoch 1,
    B answers epoch 0 ending at 20, C keeps only offsets 0..9."""
    _, replica, fetcher = follower_of_broker_1(tmp_path)
    try:
        write(replica, [0] * 10 + [1] * 5)
        leader = LeaderWithLog([(0, 0), (2, 20)], end_offset=20)
        assert check_until_done(fetcher, replica, leader) == 1
        assert leader.asked == [1]
        assert replica.plog.end_offset == 10
        assert replica.plog.leader_epoch_entries == [(0, 0)]
    finally:
        replica.plog.close()


def test_a_follower_that_missed_epochs_asks_again_until_the_logs_agree(tmp_path: Path) -> None:
    """Follower: epoch 0 at 0..9, epoch 1 at 10..14, epoch 3 at 15..19. Leader: epoch 0 at
    0..11, epoch 2 from 12, now leading. About 3 the leader answers 2 (which the
    follower never had): cut at the follower's end of 1 (15), ask about 1; the
    leader answers 0 ending at 12, the follower's 0 ends at 10: cut at 10, done."""
    _, replica, fetcher = follower_of_broker_1(tmp_path)
    try:
        write(replica, [0] * 10 + [1] * 5 + [3] * 5)
        leader = LeaderWithLog([(0, 0), (2, 12), (4, 18)], end_offset=25)
        assert check_until_done(fetcher, replica, leader) == 2
        assert leader.asked == [3, 1]
        assert replica.plog.end_offset == 10
        assert replica.plog.leader_epoch_entries == [(0, 0)]
    finally:
        replica.plog.close()


def test_an_epoch_led_here_without_data_is_dropped_before_asking_again(tmp_path: Path) -> None:
    """The follower once led epoch 3 without writing (its cache starts 3 at its log end,
    10); broker 1 now leads epoch 4 with epoch 0 at 0..7, epoch 2 at 8..11. About 3 it
    answers 2, which the follower never had; the follower's epoch before (0) ends at
    10, its log end: nothing to cut, but the epoch-3 entry goes, so the next question
    is about 0 (not 3 again, for ever): 0 ends at 8 on the leader, cut there."""
    manager, replica, fetcher = follower_of_broker_1(tmp_path)
    try:
        manager.apply_state(replica, REPLICAS, state(1, 4, REPLICAS, 2))
        write(replica, [0] * 10)
        replica.plog.assign_epoch(3, 10)
        leader = LeaderWithLog([(0, 0), (2, 8), (4, 12)], end_offset=14)
        assert check_until_done(fetcher, replica, leader) == 2
        assert leader.asked == [3, 0]
        assert replica.plog.end_offset == 8
        assert replica.plog.leader_epoch_entries == [(0, 0)]
    finally:
        replica.plog.close()


def test_a_leader_with_nothing_of_ours_keeps_only_the_high_watermark(tmp_path: Path) -> None:
    manager, replica, fetcher = follower_of_broker_1(tmp_path)
    try:
        write(replica, [0] * 10)
        manager.set_high_watermark(replica, 6)
        leader = LeaderWithLog([], end_offset=0)  # answers UNDEFINED to everything
        assert check_until_done(fetcher, replica, leader) == 1
        assert leader.asked == [0]
        assert replica.plog.end_offset == 6
    finally:
        replica.plog.close()
