"""`ReplicaManager`: the leader's rules, with a real partition log and a manual clock.

High watermark = the smallest log end among the ISR; followers leave the ISR after
replica.lag.time.max.ms without catching up and come back once they reach the
high watermark; acks=all waits for the high watermark and answers the ISR's
state; roles follow the partition state; leader epochs are checked. A lone node's
partitions lead alone (their high watermark is the log end after each append);
only a leader appends; a follower's truncation runs off the event loop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from odradek.log import LogConfig, PartitionLog
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch
from odradek.replication.model import PartitionState, VersionedPartitionState
from odradek.replication.replica import NotLeaderError, Replica, ReplicaManager, Role

ME = 1
LAG_S = 10.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """What the manager asks of its broker: ISR proposals and high-watermark moves."""

    def __init__(self) -> None:
        self.proposals: list[tuple[int, ...]] = []
        self.moves: list[int] = []


@pytest.fixture
def plog(tmp_path: Path) -> PartitionLog:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), now_ms=lambda: int(time.time() * 1000))
    yield log
    log.close()


def run(scenario: Any, plog: PartitionLog) -> None:
    asyncio.run(asyncio.wait_for(scenario(plog), 10))


def manager(clock: Clock, recorder: Recorder, min_insync: int = 2) -> ReplicaManager:
    def propose(replica: Replica, isr: tuple[int, ...]) -> None:
        recorder.proposals.append(isr)

    def moved(topic: str, partition: int) -> None:
        recorder.moves.append(partition)

    return ReplicaManager(
        ME,
        min_insync=lambda topic: min_insync,
        lag_time_max_s=LAG_S,
        propose_isr=propose,
        wake=moved,
        clock=clock,
    )


def state(
    leader: int, epoch: int, isr: tuple[int, ...], revision: int = 1
) -> VersionedPartitionState:
    return VersionedPartitionState("t", 0, PartitionState(leader, epoch, isr), revision)


def append(plog: PartitionLog, count: int) -> int:
    """Append `count` records; the log end after."""
    plog.append(build_batch([(None, b"v", ())] * count, timestamp_ms=0), from_client=False)
    return plog.end_offset


def lead_append(mgr: ReplicaManager, replica: Replica, count: int) -> int:
    """Append `count` records as the leader (the high watermark moves as the ISR allows)."""
    batch = build_batch([(None, b"v", ())] * count, timestamp_ms=0)
    mgr.append(replica, batch, from_client=False)
    return replica.plog.end_offset


def leading(
    plog: PartitionLog, clock: Clock, recorder: Recorder, **kw: int
) -> tuple[ReplicaManager, Replica]:
    mgr = manager(clock, recorder, **kw)
    replica = mgr.host("t", 0, plog)
    assert mgr.apply_state(replica, (1, 2, 3), state(ME, 5, (1, 2, 3))) is Role.LEADER
    return mgr, replica


def test_high_watermark_is_the_smallest_log_end_in_the_isr(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr, replica = leading(plog, clock, recorder)
    end = lead_append(mgr, replica, 10)
    assert replica.high_watermark == 0  # followers have nothing yet
    mgr.record_follower_fetch(replica, 2, 10)
    assert replica.high_watermark == 0  # broker 3 is in the ISR and has nothing
    mgr.record_follower_fetch(replica, 3, 4)
    assert replica.high_watermark == 4
    mgr.record_follower_fetch(replica, 3, end)
    assert replica.high_watermark == end
    assert recorder.moves, "consumers and coordinators hear of each move"


def test_a_fetch_past_the_leaders_end_is_ignored(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr, replica = leading(plog, clock, recorder)
    append(plog, 3)
    mgr.record_follower_fetch(replica, 2, 1_000_000)
    mgr.record_follower_fetch(replica, 3, 1_000_000)
    assert replica.high_watermark == 0


def test_a_lagging_follower_leaves_the_isr_after_the_lag_time(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr, replica = leading(plog, clock, recorder)
    append(plog, 5)
    mgr.record_follower_fetch(replica, 2, 5)  # caught up
    mgr.record_follower_fetch(replica, 3, 0)  # behind
    clock.now += LAG_S - 1
    mgr.shrink_lagging()
    assert recorder.proposals == []
    clock.now += 2
    mgr.record_follower_fetch(replica, 2, 5)  # still caught up: stays
    mgr.shrink_lagging()
    assert recorder.proposals == [(1, 2)]
    assert mgr.isr_shrinks == 1
    mgr.shrink_lagging()
    assert recorder.proposals == [(1, 2)], "one proposal at a time"


def test_a_follower_that_reaches_the_high_watermark_rejoins(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr = manager(clock, recorder)
    replica = mgr.host("t", 0, plog)
    mgr.apply_state(replica, (1, 2, 3), state(ME, 5, (1, 2)))
    append(plog, 8)
    mgr.record_follower_fetch(replica, 2, 8)
    assert replica.high_watermark == 8
    mgr.record_follower_fetch(replica, 3, 7)
    assert recorder.proposals == []  # below the high watermark
    mgr.record_follower_fetch(replica, 3, 8)
    assert recorder.proposals == [(1, 2, 3)]
    assert mgr.isr_expands == 1


def test_acks_all_waits_for_the_isr(plog: PartitionLog) -> None:
    run(_acks_all_waits_for_the_isr, plog)


async def _acks_all_waits_for_the_isr(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr, replica = leading(plog, clock, recorder)
    assert mgr.check_acks_all(replica) == 0
    lead_append(mgr, replica, 3)
    waiting = asyncio.ensure_future(mgr.wait_replicated(replica, 2, 5.0))
    await asyncio.sleep(0)
    assert not waiting.done()
    mgr.record_follower_fetch(replica, 2, 3)
    await asyncio.sleep(0)
    assert not waiting.done()
    mgr.record_follower_fetch(replica, 3, 3)
    assert await waiting == 0


def test_acks_all_after_the_isr_shrank_below_the_minimum(plog: PartitionLog) -> None:
    run(_acks_all_after_the_isr_shrank_below_the_minimum, plog)


async def _acks_all_after_the_isr_shrank_below_the_minimum(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr, replica = leading(plog, clock, recorder, min_insync=3)
    append(plog, 2)
    waiting = asyncio.ensure_future(mgr.wait_replicated(replica, 1, 5.0))
    await asyncio.sleep(0)
    # The ISR drops to the leader alone: the high watermark jumps to the log end.
    mgr.apply_state(replica, (1, 2, 3), state(ME, 5, (1,), revision=2))
    assert await waiting == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert mgr.check_acks_all(replica) == ErrorCode.NOT_ENOUGH_REPLICAS


def test_acks_all_times_out_and_fails_when_leadership_moves(plog: PartitionLog) -> None:
    run(_acks_all_times_out_and_fails_when_leadership_moves, plog)


async def _acks_all_times_out_and_fails_when_leadership_moves(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr, replica = leading(plog, clock, recorder)
    append(plog, 1)
    assert await mgr.wait_replicated(replica, 0, 0.05) == ErrorCode.REQUEST_TIMED_OUT
    waiting = asyncio.ensure_future(mgr.wait_replicated(replica, 0, 5.0))
    await asyncio.sleep(0)
    assert mgr.apply_state(replica, (1, 2, 3), state(2, 6, (2, 3), revision=2)) is Role.FOLLOWER
    assert await waiting == ErrorCode.NOT_LEADER_OR_FOLLOWER


def test_a_cancel_as_the_isr_catches_up_is_not_swallowed(plog: PartitionLog) -> None:
    run(_a_cancel_as_the_isr_catches_up_is_not_swallowed, plog)


async def _a_cancel_as_the_isr_catches_up_is_not_swallowed(plog: PartitionLog) -> None:
    """A broker stopping cancels a connection whose produce waits for acks=all. If the
    followers catch up in the same loop iteration, the wait must still end cancelled:
    Python 3.11's asyncio.wait_for returned the result instead, and the connection's
    task went on to its next request, so shutdown never finished (found by
    bench/cluster.py's SIGTERM failover: 5 brokers of 24 hung)."""
    clock, recorder = Clock(), Recorder()
    mgr, replica = leading(plog, clock, recorder)
    lead_append(mgr, replica, 3)
    waiting = asyncio.ensure_future(mgr.wait_replicated(replica, 2, 5.0))
    await asyncio.sleep(0)
    mgr.record_follower_fetch(replica, 2, 3)
    mgr.record_follower_fetch(replica, 3, 3)  # completes the waiter's future now
    waiting.cancel()  # and the cancel arrives in the same iteration
    with pytest.raises(asyncio.CancelledError):
        await waiting


def test_roles_and_leader_epochs(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr = manager(clock, recorder)
    replica = mgr.host("t", 0, plog)
    assert mgr.apply_state(replica, (2, 3), state(2, 1, (2, 3))) is Role.NONE  # not a replica
    assert mgr.apply_state(replica, (1, 2, 3), state(2, 1, (2, 3))) is Role.FOLLOWER
    assert mgr.apply_state(replica, (1, 2, 3), state(-1, 2, (2,))) is Role.NONE  # offline
    assert mgr.apply_state(replica, (1, 2, 3), state(ME, 3, (1, 2))) is Role.LEADER
    assert plog.leader_epoch == 3
    assert plog.latest_epoch == 3  # recorded before any data (OffsetForLeaderEpoch)
    assert replica.check_epoch(-1) == 0
    assert replica.check_epoch(3) == 0
    assert replica.check_epoch(2) == ErrorCode.FENCED_LEADER_EPOCH
    assert replica.check_epoch(4) == ErrorCode.UNKNOWN_LEADER_EPOCH


def test_resign_all_gives_up_leadership_until_the_state_comes_back(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr, replica = leading(plog, clock, recorder)
    seen: list[tuple[Role, Role]] = []
    mgr.role_listeners.append(lambda r, before: seen.append((before, r.role)))
    mgr.resign_all()
    assert replica.role is Role.NONE
    assert mgr.leaders() == 0
    mgr.apply_state(replica, (1, 2, 3), state(ME, 5, (1, 2, 3), revision=3))
    assert replica.role is Role.LEADER
    assert seen == [(Role.LEADER, Role.NONE), (Role.NONE, Role.LEADER)]


# --- every node: a lone node's replicas, leader appends, truncation off the loop ----------


def test_a_partition_led_alone_moves_its_high_watermark_with_each_append(
    plog: PartitionLog,
) -> None:
    """A lone node: leader in the log's own epoch (nothing written to the epoch file),
    alone in its ISR, so the high watermark is the log end after every append, and each
    move is told to the broker and to the partition's listeners."""
    clock, recorder = Clock(), Recorder()
    mgr = manager(clock, recorder, min_insync=1)
    heard: list[int] = []
    mgr.add_listener("t", 0, heard.append)
    replica = mgr.lead_alone("t", 0, plog)
    assert (replica.role, replica.isr, replica.leader_epoch) == (Role.LEADER, (ME,), 0)
    assert not (plog.directory / "leader-epoch-checkpoint").exists()
    assert mgr.leader_for("t", 0, 0) == (replica, 0)
    assert lead_append(mgr, replica, 4) == replica.high_watermark == 4
    assert lead_append(mgr, replica, 2) == replica.high_watermark == 6
    assert heard == [4, 6] and recorder.moves == [0, 0]
    assert mgr.acked(replica, 5) == 0  # acks=all: answered at once
    assert mgr.lead_alone("t", 0, plog) is replica  # idempotent


def test_a_leader_append_is_refused_where_this_broker_does_not_lead(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr = manager(clock, recorder)
    replica = mgr.host("t", 0, plog)
    mgr.apply_state(replica, (1, 2), state(2, 1, (1, 2)))
    batch = build_batch([(None, b"v", ())], timestamp_ms=0)
    with pytest.raises(NotLeaderError):
        mgr.append(replica, batch, from_client=False)
    assert plog.end_offset == 0
    assert mgr.leader_for("t", 0) == (None, ErrorCode.NOT_LEADER_OR_FOLLOWER)


def test_truncation_runs_off_the_event_loop_and_holds_leader_appends(plog: PartitionLog) -> None:
    run(_truncation_runs_off_the_event_loop, plog)


async def _truncation_runs_off_the_event_loop(plog: PartitionLog) -> None:
    clock, recorder = Clock(), Recorder()
    mgr, replica = leading(plog, clock, recorder)
    lead_append(mgr, replica, 10)
    started = threading.Event()
    release = threading.Event()
    cut = plog.truncate_to

    def slow_cut(offset: int) -> int:
        assert threading.current_thread() is not threading.main_thread()
        started.set()
        release.wait(5)
        return cut(offset)

    plog.truncate_to = slow_cut  # type: ignore[method-assign]
    truncating = asyncio.ensure_future(mgr.truncate(replica, 4))
    while not started.is_set():
        await asyncio.sleep(0.01)
    # The loop runs meanwhile; the replica takes no leader append until the cut is done.
    assert mgr.leader_for("t", 0) == (None, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    with pytest.raises(NotLeaderError):
        mgr.append(replica, build_batch([(None, b"v", ())], timestamp_ms=0), from_client=False)
    release.set()
    await truncating
    assert plog.end_offset == 0  # one batch of ten: cut whole at its base offset
    assert replica.high_watermark <= plog.end_offset
    assert mgr.leader_for("t", 0) == (replica, 0)
