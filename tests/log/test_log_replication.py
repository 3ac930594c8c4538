"""Replication primitives of the partition log: follower append, the leader epoch cache
(``leader-epoch-checkpoint``) and truncation (Kafka's appendAsFollower, LeaderEpochFileCache,
truncateTo and truncateFullyAndStartAt)."""

from __future__ import annotations

import tempfile
import threading
from itertools import pairwise
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.log import (
    CorruptRecordError,
    LogConfig,
    OutOfOrderSequenceError,
    PartitionLog,
)
from odradek.log.errors import OffsetMismatchError, OffsetOutOfRangeError
from odradek.log.files import shared_file_cache
from odradek.log.leader_epoch import LEADER_EPOCH_FILE, LeaderEpochCache
from odradek.log.segment import Segment
from odradek.protocol.records import (
    build_batch,
    build_end_txn_marker,
    decode_records,
    iter_batches,
)

SMALL = LogConfig(segment_bytes=300, index_interval_bytes=64)


def now() -> int:
    return 1_000_000


def open_log(path: Path, config: LogConfig = SMALL) -> PartitionLog:
    return PartitionLog.open(path, config, now_ms=now)


def batch(i: int, n: int = 1, **kw: object) -> bytes:
    return build_batch(
        [(b"k%d" % i, b"v%d-%d" % (i, j), ()) for j in range(n)],
        timestamp_ms=500_000 + i,
        **kw,  # type: ignore[arg-type]
    )


def idem(pid: int, seq: int, n: int = 1, *, transactional: bool = False) -> bytes:
    return batch(
        seq,
        n,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        transactional=transactional,
    )


def marker(pid: int, *, commit: bool) -> bytes:
    return build_end_txn_marker(pid, 0, commit=commit, timestamp_ms=600_000)


def all_bytes(log: PartitionLog, offset: int | None = None) -> bytes:
    """Every batch from ``offset`` (the log start by default), across segments."""
    out = bytearray()
    pos = log.start_offset if offset is None else offset
    while pos < log.end_offset:
        chunk = log.read(pos, 1 << 20)
        if not chunk:
            break
        out += chunk
        last = list(iter_batches(chunk))[-1][1]
        pos = last.next_offset
    return bytes(out)


def batches(data: bytes) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, partition leader epoch, max timestamp) of each batch."""
    return [
        (h.base_offset, h.last_offset, h.partition_leader_epoch, h.max_timestamp)
        for _, h in iter_batches(data)
    ]


def values(log: PartitionLog) -> list[tuple[int, bytes | None]]:
    data = all_bytes(log)
    out = []
    for pos, h in iter_batches(data):
        if h.is_control:
            continue
        out.extend((r.offset, r.value) for r in decode_records(data[pos : pos + h.size]))
    return out


def leader_with_epochs(path: Path, config: LogConfig = SMALL) -> PartitionLog:
    """A leader log: epoch 1 for offsets 0-5, epoch 4 for 6-11 (several segments)."""
    log = open_log(path, config)
    log.start_leader_epoch(1)
    for i in range(6):
        log.append(batch(i))
    log.start_leader_epoch(4)
    for i in range(6, 12):
        log.append(batch(i))
    return log


# ---------------------------------------------------------------------- follower append


def test_follower_append_keeps_offsets_epochs_and_timestamps(tmp_path: Path) -> None:
    leader = leader_with_epochs(tmp_path / "leader")
    data = all_bytes(leader)
    follower = open_log(tmp_path / "follower")
    follower.leader_epoch = 99  # must not be stamped into fetched batches
    info = follower.append_as_follower(data)
    assert (info.base_offset, info.last_offset) == (0, 11)
    assert all_bytes(follower) == data  # byte for byte: nothing patched or restamped
    assert batches(all_bytes(follower))[5][2] == 1 and batches(all_bytes(follower))[6][2] == 4
    assert follower.leader_epoch_entries == [(1, 0), (4, 6)]
    leader.close()
    follower.close()


def test_follower_append_in_pieces_equals_leader(tmp_path: Path) -> None:
    leader = leader_with_epochs(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    pos = 0
    while pos < leader.end_offset:
        chunk = leader.read(pos, 150)
        follower.append_as_follower(chunk)
        pos = follower.end_offset
    assert all_bytes(follower) == all_bytes(leader)
    assert follower.leader_epoch_entries == leader.leader_epoch_entries
    assert follower.segment_count > 1  # rolled as appends do
    leader.close()
    follower.close()


@pytest.mark.parametrize("first", [0, 4, 6])
def test_follower_append_refuses_a_start_other_than_the_log_end(tmp_path: Path, first: int) -> None:
    log = open_log(tmp_path / "p")
    log.append_as_follower(batch(0, 3, base_offset=0, partition_leader_epoch=2))
    with pytest.raises(OffsetMismatchError):
        log.append_as_follower(batch(1, base_offset=first, partition_leader_epoch=3))
    assert log.end_offset == 3
    assert batches(all_bytes(log)) == [(0, 2, 2, 500_000)]
    assert log.leader_epoch_entries == [(2, 0)]  # the refused batch's epoch is not recorded
    log.close()


@pytest.mark.parametrize("second", [1, 3, 4])
def test_follower_append_refuses_non_contiguous_batches_writing_nothing(
    tmp_path: Path, second: int
) -> None:
    log = open_log(tmp_path / "p")
    data = batch(0, 2, base_offset=0, partition_leader_epoch=1) + batch(
        1, base_offset=second, partition_leader_epoch=2
    )
    with pytest.raises(OffsetMismatchError):
        log.append_as_follower(data)
    assert log.end_offset == 0 and log.size_bytes == 0
    assert log.leader_epoch_entries == []
    log.close()


def test_follower_append_refuses_a_bad_crc_writing_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    data = bytearray(batch(0, base_offset=0) + batch(1, base_offset=1))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        log.append_as_follower(bytes(data))
    assert log.end_offset == 0 and log.size_bytes == 0
    log.close()


def test_follower_append_accepts_gaps_of_a_compacted_leader(tmp_path: Path) -> None:
    cfg = LogConfig(
        segment_bytes=400, index_interval_bytes=64, cleanup_policy="compact", segment_ms=10**12
    )
    leader = open_log(tmp_path / "leader", cfg)
    for i in range(20):  # a key of its own (kept) or not (the batch goes), and a shared one
        own = b"common" if i % 3 == 0 else b"own%d" % i
        leader.append(
            build_batch([(own, b"a%d" % i, ()), (b"common", b"b%d" % i, ())], timestamp_ms=500_000)
        )
    leader.compact(now(), force=True)
    data = all_bytes(leader)
    heads = list(iter_batches(data))
    assert any(h.records_count < h.last_offset_delta + 1 for _, h in heads)  # partly cleaned
    assert any(a.next_offset != b.base_offset for (_, a), (_, b) in pairwise(heads))
    follower = open_log(tmp_path / "follower", cfg)  # compacted: gaps allowed by default
    follower.append_as_follower(data)
    assert all_bytes(follower) == data
    assert values(follower) == values(leader)
    strict = open_log(tmp_path / "strict")  # a delete-policy log refuses the same gaps
    with pytest.raises(OffsetMismatchError):
        strict.append_as_follower(data)
    assert strict.append_as_follower(data, allow_gaps=True).last_offset == leader.end_offset - 1
    for log in (leader, follower, strict):
        log.close()


def test_follower_idempotent_state_serves_a_later_leadership(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    for seq in range(0, 6, 2):
        leader.append(idem(7, seq, 2))
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(all_bytes(leader))
    entry = follower.producer_state.entries[7]
    assert (entry.last_seq, entry.last_offset) == (5, 5)
    # The follower becomes leader: the producer's next sequence is accepted...
    follower.start_leader_epoch(5)
    assert follower.append(idem(7, 6)).base_offset == 6
    # ...a retry of a replicated batch is a duplicate answered with its offsets...
    dup = follower.append(idem(7, 2, 2))
    assert dup.duplicate and (dup.base_offset, dup.last_offset) == (2, 3)
    # ...and a gap in the sequence is refused.
    with pytest.raises(OutOfOrderSequenceError):
        follower.append(idem(7, 9))
    leader.close()
    follower.close()


def txn_history(log: PartitionLog) -> None:
    """Producer 1 aborts, producer 2 commits, producer 3 stays open."""
    log.append(idem(1, 0, 2, transactional=True))
    log.append(idem(2, 0, transactional=True))
    log.append(idem(3, 0, transactional=True))
    log.append(idem(1, 2, transactional=True))
    log.append(marker(1, commit=False), from_client=False)
    log.append(batch(50))
    log.append(marker(2, commit=True), from_client=False)
    log.append(idem(2, 1, transactional=True))
    log.append(marker(2, commit=False), from_client=False)


def test_follower_transactions_match_the_leader(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader")
    txn_history(leader)
    assert leader.last_stable_offset == 3  # producer 3's open transaction
    aborted = leader.aborted_transactions(0, leader.end_offset)
    assert [a.producer_id for a in aborted] == [1, 2]
    for name, step in (("whole", 1 << 20), ("pieces", 100)):
        follower = open_log(tmp_path / name)
        while follower.end_offset < leader.end_offset:
            follower.append_as_follower(leader.read(follower.end_offset, step))
        assert follower.last_stable_offset == leader.last_stable_offset
        assert follower.aborted_transactions(0, follower.end_offset) == aborted
        assert follower.producer_state.ongoing == leader.producer_state.ongoing
        follower.close()
        again = open_log(tmp_path / name)  # and as recovered from disk
        assert again.aborted_transactions(0, again.end_offset) == aborted
        assert again.last_stable_offset == 3
        again.close()
    leader.close()


# ---------------------------------------------------------------------- epoch cache


def test_epoch_cache_file_format_and_reopen(tmp_path: Path) -> None:
    log = leader_with_epochs(tmp_path / "p")
    text = (tmp_path / "p" / LEADER_EPOCH_FILE).read_text()
    assert text == "0\n2\n1 0\n4 6\n"
    log.close()
    again = open_log(tmp_path / "p")
    assert again.leader_epoch_entries == [(1, 0), (4, 6)]
    assert again.end_offset_for_epoch(1) == (1, 6)
    again.close()


@pytest.mark.parametrize("damage", ["delete", "garbage", "bad count", "not increasing"])
def test_epoch_cache_rebuilt_from_batches_when_file_missing_or_bad(
    tmp_path: Path, damage: str
) -> None:
    log = leader_with_epochs(tmp_path / "p")
    log.close()
    path = tmp_path / "p" / LEADER_EPOCH_FILE
    if damage == "delete":
        path.unlink()
    else:
        path.write_text(
            {"garbage": "zzz\n", "bad count": "0\n3\n1 0\n", "not increasing": "0\n2\n4 0\n1 6\n"}[
                damage
            ]
        )
    again = open_log(tmp_path / "p")
    assert again.leader_epoch_entries == [(1, 0), (4, 6)]
    assert path.read_text() == "0\n2\n1 0\n4 6\n"  # rewritten
    again.close()


def test_epoch_cache_rebuild_reads_segments_with_one_epoch_cheaply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = leader_with_epochs(tmp_path / "p")
    segments = log.segment_count
    log.close()
    (tmp_path / "p" / LEADER_EPOCH_FILE).unlink()
    walked: list[int] = []
    original = Segment.iter_headers

    def counting(self: Segment, start: int = 0, expected: int = -1):  # type: ignore[no-untyped-def]
        walked.append(self.base_offset)
        return original(self, start, expected)

    monkeypatch.setattr(Segment, "iter_headers", counting)
    again = open_log(tmp_path / "p")
    assert again.leader_epoch_entries == [(1, 0), (4, 6)]
    # each segment: its first header; only the one where the epoch changes is walked again
    assert len(walked) <= segments + 1
    again.close()


def test_end_offset_for_epoch_every_case() -> None:
    cache = LeaderEpochCache(Path("unused"))
    assert cache.end_offset_for(0, 30) == (-1, -1)  # empty cache
    assert cache.latest_epoch == -1
    for epoch, start in ((1, 0), (3, 10), (6, 20)):
        assert cache.assign(epoch, start)
    assert cache.latest_epoch == 6
    assert cache.end_offset_for(6, 30) == (6, 30)  # latest: the log end
    assert cache.end_offset_for(3, 30) == (3, 20)  # known: next epoch's start
    assert cache.end_offset_for(4, 30) == (3, 20)  # unknown, between: the largest below
    assert cache.end_offset_for(5, 30) == (3, 20)
    assert cache.end_offset_for(1, 30) == (1, 10)
    assert cache.end_offset_for(2, 30) == (1, 10)
    assert cache.end_offset_for(0, 30) == (0, 0)  # below every epoch: first start (Kafka)
    assert cache.end_offset_for(7, 30) == (-1, -1)  # newer than every epoch
    assert cache.end_offset_for(-1, 30) == (-1, -1)  # UNDEFINED requested
    assert cache.epoch_for_offset(9) == 1 and cache.epoch_for_offset(10) == 3
    assert cache.epoch_for_offset(99) == 6


def test_epoch_cache_assign_is_monotonic_as_kafka() -> None:
    cache = LeaderEpochCache(Path("unused"))
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -5)
    assert cache.assign(2, 5)
    assert not cache.assign(2, 9)  # the latest epoch again, later: nothing to record
    assert cache.assign(2, 3)  # the latest epoch, earlier: replaces it
    assert cache.entries == [(2, 3)]
    assert cache.assign(5, 10) and cache.assign(7, 20)
    assert cache.assign(6, 25)  # older than the latest: the contradicted entry goes
    assert cache.entries == [(2, 3), (5, 10), (6, 25)]
    assert cache.assign(8, 12)  # newer epoch, earlier start: entries starting later go
    assert cache.entries == [(2, 3), (5, 10), (8, 12)]


def test_epoch_cache_truncation_from_either_end() -> None:
    base = [(1, 0), (3, 10), (6, 20)]
    for start, expected in (
        (0, base),
        (5, [(1, 5), (3, 10), (6, 20)]),
        (10, [(3, 10), (6, 20)]),
        (15, [(3, 15), (6, 20)]),
        (25, [(6, 25)]),
    ):
        cache = LeaderEpochCache(Path("unused"), base)
        assert cache.truncate_from_start(start) == (expected != base)
        assert cache.entries == expected
    for end, expected in ((21, base), (20, base[:2]), (11, base[:2]), (10, base[:1]), (0, [])):
        cache = LeaderEpochCache(Path("unused"), base)
        assert cache.truncate_from_end(end) == (expected != base)
        assert cache.entries == expected


def test_epoch_cache_follows_delete_records_and_retention(tmp_path: Path) -> None:
    log = leader_with_epochs(tmp_path / "p")
    log.delete_records_before(8)
    assert log.leader_epoch_entries == [(4, 8)]
    assert (tmp_path / "p" / LEADER_EPOCH_FILE).read_text() == "0\n1\n4 8\n"
    assert log.end_offset_for_epoch(1) == (1, 8)
    log.close()


def test_epoch_cache_unaffected_by_compaction(tmp_path: Path) -> None:
    cfg = LogConfig(segment_bytes=300, index_interval_bytes=64, cleanup_policy="compact")
    log = open_log(tmp_path / "p", cfg)
    log.start_leader_epoch(2)
    for i in range(8):
        log.append(build_batch([(b"same", b"v%d" % i, ())], timestamp_ms=500_000))
    log.start_leader_epoch(3)
    for i in range(8):
        log.append(build_batch([(b"same", b"w%d" % i, ())], timestamp_ms=500_000))
    before = log.leader_epoch_entries
    log.compact(now(), force=True)
    assert log.leader_epoch_entries == before == [(2, 0), (3, 8)]
    assert {e for _, _, e, _ in batches(all_bytes(log))} <= {2, 3}
    log.close()


def test_leader_append_writes_the_cache_only_when_the_epoch_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[list[tuple[int, int]]] = []
    original = LeaderEpochCache.write

    def counting(self: LeaderEpochCache) -> None:
        writes.append(list(self.entries))
        original(self)

    monkeypatch.setattr(LeaderEpochCache, "write", counting)
    log = open_log(tmp_path / "p")
    for i in range(5):
        log.append(batch(i))
    assert writes == [[(0, 0)]]  # single broker: epoch 0, recorded once
    log.leader_epoch = 3
    log.append(batch(5))
    log.append(batch(6))
    assert writes == [[(0, 0)], [(0, 0), (3, 5)]]
    log.leader_epoch = 2  # never goes back: not recorded, and stamps stay as set
    log.append(batch(7))
    assert log.leader_epoch_entries == [(0, 0), (3, 5)]
    log.close()


# ---------------------------------------------------------------------- truncation


def segment_files(path: Path) -> list[str]:
    return sorted(p.name for p in path.glob("*.log"))


@pytest.mark.parametrize("cut", [3, 5, 7, 11])
def test_truncate_to_batch_boundaries(tmp_path: Path, cut: int) -> None:
    leader = leader_with_epochs(tmp_path / "p")
    before = all_bytes(leader)
    kept = [b for b in batches(before) if b[0] < cut]
    assert leader.truncate_to(cut) == cut
    assert leader.end_offset == cut
    assert batches(all_bytes(leader)) == kept
    assert all(int(name[:20]) <= cut for name in segment_files(tmp_path / "p"))
    expected_epochs = [(1, 0)] if cut <= 6 else [(1, 0), (4, 6)]
    assert leader.leader_epoch_entries == expected_epochs
    # reads, lookups and appends go on from the cut
    assert leader.read(cut - 1, 1000)
    assert leader.offset_for_timestamp(500_000 + cut - 1) == (cut - 1, 500_000 + cut - 1)
    assert leader.append(batch(99)).base_offset == cut
    leader.close()
    again = open_log(tmp_path / "p")
    assert again.end_offset == cut + 1
    assert batches(all_bytes(again))[:-1] == kept
    again.close()


def test_truncate_to_at_a_segment_boundary_and_across_segments(tmp_path: Path) -> None:
    log = leader_with_epochs(tmp_path / "p")
    bases = [int(n[:20]) for n in segment_files(tmp_path / "p")]
    assert len(bases) >= 3
    boundary = bases[-1]
    log.truncate_to(boundary)
    assert log.end_offset == boundary
    assert [int(n[:20]) for n in segment_files(tmp_path / "p")] == bases  # emptied, kept active
    assert (tmp_path / "p" / f"{boundary:020d}.log").stat().st_size == 0
    log.truncate_to(bases[1] - 1)  # inside the first segment: the later ones go
    assert segment_files(tmp_path / "p") == [f"{0:020d}.log"]
    assert log.end_offset == bases[1] - 1
    log.close()


def test_truncate_to_inside_a_batch_cuts_the_whole_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.start_leader_epoch(1)
    log.append(batch(0, 3))  # 0-2
    log.start_leader_epoch(2)
    log.append(batch(1, 4))  # 3-6
    assert log.truncate_to(5) == 3
    assert log.end_offset == 3
    assert log.leader_epoch_entries == [(1, 0)]
    assert log.truncate_to(3) == 3  # at the end: nothing happens
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(4)
    log.delete_records_before(1)
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate_to(0)
    log.close()


def test_truncate_to_reopens_transactions_and_drops_aborted_entries(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    txn_history(log)
    # offsets: p1 0-1, p2 2, p3 3, p1 4, ABORT(p1) 5, plain 6, COMMIT(p2) 7, p2 8, ABORT(p2) 9
    assert log.aborted_transactions(0, log.end_offset)[0].last_offset == 5
    log.truncate_to(5)  # p1's abort marker goes: its transaction is open again
    assert log.aborted_transactions(0, log.end_offset) == []
    assert log.producer_state.ongoing == {1: 0, 2: 2, 3: 3}
    assert log.last_stable_offset == 0
    log.append(marker(1, commit=True), from_client=False)
    assert log.last_stable_offset == 2
    log.close()
    again = open_log(tmp_path / "p")
    assert again.aborted_transactions(0, again.end_offset) == []
    assert again.last_stable_offset == 2
    again.close()


def test_truncate_to_lets_an_idempotent_producer_retry_its_cut_batch(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    for seq in range(3):
        log.append(idem(7, seq))
    log.truncate_to(2)  # seq 2's batch is gone
    retry = log.append(idem(7, 2))
    assert not retry.duplicate and retry.base_offset == 2
    assert log.append(idem(7, 2)).duplicate  # now it is there
    log.close()


def test_truncate_to_drops_a_producer_snapshot_taken_past_the_cut(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    for seq in range(20):  # rolls write snapshots at their offsets
        log.append(idem(7, seq))
    log.drain()
    log.truncate_to(3)
    for seq in range(3, 6):  # the same producer writes different data past the cut
        log.append(idem(7, seq))
    # no close(): a crash; the snapshot on disk must not be the old one (end past 6)
    again = open_log(tmp_path / "p")
    assert again.producer_state.entries[7].last_seq == 5
    assert again.append(idem(7, 6)).base_offset == 6
    again.close()
    log.close()


def test_reopen_after_truncation_unclean(tmp_path: Path) -> None:
    log = leader_with_epochs(tmp_path / "p")
    log.truncate_to(7)
    expected = all_bytes(log)
    # no close(): the process dies right after truncate_to returned
    again = open_log(tmp_path / "p")
    assert again.end_offset == 7
    assert all_bytes(again) == expected
    assert again.leader_epoch_entries == [(1, 0), (4, 6)]
    again.close()
    log.close()


class Crash(Exception):
    pass


@pytest.mark.parametrize(
    "crash_point", ["between deletions", "before cut", "after cut", "before snapshot"]
)
def test_crash_midway_through_truncation_recovers_a_consistent_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_point: str
) -> None:
    d = tmp_path / "p"
    log = open_log(d)
    log.start_leader_epoch(1)
    txn_history(log)  # 0-9
    log.start_leader_epoch(3)
    for seq in range(12):
        log.append(idem(5, seq))  # 10-21, several segments
    log.drain()
    full = all_bytes(log)
    assert log.segment_count >= 4
    target = {
        "between deletions": "odradek.log.segment.Segment.delete_files",
        "before cut": "odradek.log.segment.Segment.truncate_to",
        "after cut": "odradek.log.partition_log.clamp_checkpoint",
        "before snapshot": "odradek.log.producer_state.ProducerStateManager.write_snapshot",
    }[crash_point]
    original_delete = Segment.delete_files
    deleted: list[int] = []

    def crash(*args: object, **kwargs: object) -> None:
        if crash_point == "between deletions" and not deleted:
            deleted.append(1)
            original_delete(*args)  # type: ignore[arg-type]
            return
        raise Crash

    with monkeypatch.context() as m:
        m.setattr(target, crash)
        with pytest.raises(Crash):
            log.truncate_to(5)
    # the process dies here; reopen what the disk holds
    again = open_log(d)
    end = again.end_offset
    assert 5 <= end <= len(batches(full)) + 12
    kept = [b for b in batches(full) if b[1] < end]
    assert batches(all_bytes(again)) == kept  # a prefix of the old log
    # every derived structure agrees with that prefix
    epochs = [(1, 0)] if end <= 10 else [(1, 0), (3, 10)]
    assert again.leader_epoch_entries == epochs
    aborted = [a for a in again.aborted_transactions(0, end)]
    assert all(a.last_offset < end for a in aborted)
    assert again.truncate_to(5) == 5  # the truncation can be done again
    assert again.producer_state.ongoing == {1: 0, 2: 2, 3: 3}
    assert again.aborted_transactions(0, 5) == []
    assert again.leader_epoch_entries == [(1, 0)]
    again.close()  # the crashed instance is abandoned, as a dead process's would be


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    d = tmp_path / "p"
    log = leader_with_epochs(d)
    log.append(idem(7, 0))
    log.truncate_fully_and_start_at(100)
    assert (log.start_offset, log.end_offset) == (100, 100)
    assert segment_files(d) == [f"{100:020d}.log"]
    assert log.leader_epoch_entries == []
    assert log.producer_state.entries == {}
    assert log.end_offset_for_epoch(4) == (-1, -1)
    log.append_as_follower(batch(0, 2, base_offset=100, partition_leader_epoch=6))
    assert log.leader_epoch_entries == [(6, 100)]
    log.close()
    again = open_log(d)
    assert (again.start_offset, again.end_offset) == (100, 102)
    assert again.leader_epoch_entries == [(6, 100)]
    again.truncate_fully_and_start_at(3)  # below the old start works too
    assert (again.start_offset, again.end_offset) == (3, 3)
    again.close()
    third = open_log(d)
    assert (third.start_offset, third.end_offset) == (3, 3)
    third.close()


def test_truncate_fully_crash_before_new_segment_leaves_a_consistent_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    d = tmp_path / "p"
    log = leader_with_epochs(d)
    log.drain()
    original = Segment.delete_files
    deleted: list[int] = []

    def delete_two(self: Segment) -> None:
        if len(deleted) == 2:
            raise Crash
        deleted.append(self.base_offset)
        original(self)

    with monkeypatch.context() as m:
        m.setattr(Segment, "delete_files", delete_two)
        with pytest.raises(Crash):
            log.truncate_fully_and_start_at(50)
    again = open_log(d)  # the newest segments went first: a prefix is left
    assert not (d / LEADER_EPOCH_FILE).exists() or again.leader_epoch_entries
    end = again.end_offset
    assert end == min(deleted)
    assert again.leader_epoch_entries == ([(1, 0), (4, 6)] if end > 6 else [(1, 0)])
    again.close()  # the crashed instance is abandoned


# ---------------------------------------------------------------------- model check

Op = tuple[str, int, int]
OPS = st.one_of(
    st.tuples(st.just("leader"), st.integers(1, 3), st.just(0)),
    st.tuples(st.just("bump"), st.just(0), st.just(0)),
    st.tuples(st.just("follower"), st.integers(1, 3), st.integers(0, 2)),
    st.tuples(st.just("truncate"), st.integers(0, 100), st.just(0)),
    st.tuples(st.just("fully"), st.integers(0, 5), st.just(0)),
    st.tuples(st.just("reopen"), st.integers(0, 1), st.just(0)),
)


class Model:
    """What the log must hold: batches (base, last, epoch, values) and the epoch cache."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, int, int, list[bytes]]] = []
        self.start = 0
        self.end = 0
        self.epochs: list[tuple[int, int]] = []
        self.leader_epoch = 0

    @property
    def latest(self) -> int:
        return self.epochs[-1][0] if self.epochs else -1

    def add(self, epoch: int, vals: list[bytes]) -> None:
        self.batches.append((self.end, self.end + len(vals) - 1, epoch, vals))
        self.end += len(vals)

    def new_epoch(self, epoch: int, start: int) -> None:
        """A newer epoch; one starting where the latest did replaces it (no data between)."""
        if epoch > self.latest:
            self.drop_epochs_from(start)
            self.epochs.append((epoch, start))

    def drop_epochs_from(self, end: int) -> None:
        self.epochs = [e for e in self.epochs if e[1] < end]

    def answer(self, requested: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch, spelt out case by case."""
        if requested == -1 or not self.epochs:
            return -1, -1
        if requested == self.latest:
            return requested, self.end
        higher = [e for e in self.epochs if e[0] > requested]
        if not higher:
            return -1, -1
        lower = [e for e in self.epochs if e[0] <= requested]
        return (lower[-1][0] if lower else requested), higher[0][1]


def read_back(log: PartitionLog) -> list[tuple[int, int, int, list[bytes]]]:
    data = all_bytes(log)
    return [
        (h.base_offset, h.last_offset, h.partition_leader_epoch, [r.value or b"" for r in recs])
        for pos, h in iter_batches(data)
        for recs in [decode_records(data[pos : pos + h.size])]
    ]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=25))
def test_random_histories_match_the_model(ops: list[Op]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "p"
        log = open_log(d)
        m = Model()
        for n, (kind, a, b) in enumerate(ops):
            vals = [b"%d-%d" % (n, j) for j in range(a)]
            if kind == "bump" or (kind == "leader" and m.leader_epoch < m.latest):
                epoch = max(m.leader_epoch, m.latest) + 1
                log.start_leader_epoch(epoch)
                m.leader_epoch = epoch
                m.new_epoch(epoch, m.end)
            if kind == "leader":
                log.append(build_batch([(None, v, ()) for v in vals], timestamp_ms=500_000))
                m.new_epoch(m.leader_epoch, m.end)
                m.add(m.leader_epoch, vals)
            elif kind == "follower":
                epoch = max(m.latest, 0) + b
                log.append_as_follower(
                    build_batch(
                        [(None, v, ()) for v in vals],
                        timestamp_ms=500_000,
                        base_offset=m.end,
                        partition_leader_epoch=epoch,
                    )
                )
                m.new_epoch(epoch, m.end)
                m.add(epoch, vals)
            elif kind == "truncate":
                offset = m.start + a * (m.end - m.start) // 100
                m.batches = [x for x in m.batches if x[1] < offset]
                m.end = m.batches[-1][1] + 1 if m.batches else m.start
                assert log.truncate_to(offset) == m.end
                m.drop_epochs_from(m.end)
            elif kind == "fully":
                m.start = m.end = m.end + a
                m.batches = []
                m.epochs = []
                log.truncate_fully_and_start_at(m.start)
            elif kind == "reopen":
                if a:
                    log.close()
                log = open_log(d)  # a == 0: the old instance is abandoned (a crash)
                m.leader_epoch = 0
                m.drop_epochs_from(m.end)
            assert (log.start_offset, log.end_offset) == (m.start, m.end)
        assert read_back(log) == m.batches
        assert log.leader_epoch_entries == m.epochs
        for requested in range(-1, m.latest + 3):
            assert log.end_offset_for_epoch(requested) == m.answer(requested), requested
        log.close()
        again = open_log(d)
        m.drop_epochs_from(m.end)
        assert read_back(again) == m.batches
        assert again.leader_epoch_entries == m.epochs
        again.close()


def test_truncate_to_the_end_drops_an_epoch_led_without_data(tmp_path: Path) -> None:
    log = leader_with_epochs(tmp_path / "p")
    log.start_leader_epoch(9)  # leader in epoch 9, then deposed before writing anything
    assert log.leader_epoch_entries == [(1, 0), (4, 6), (9, 12)]
    assert log.truncate_to(12) == 12
    assert log.leader_epoch_entries == [(1, 0), (4, 6)]
    assert log.end_offset_for_epoch(4) == (4, 12)
    log.close()


def test_crash_after_cut_then_new_data_then_crash_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer snapshot taken past the cut must not outlive the truncation: after a
    crash, new data past its offset would make it look valid on the next recovery."""
    d = tmp_path / "p"
    log = open_log(d)
    for seq in range(20):
        log.append(idem(7, seq))  # rolls write snapshots well past offset 3
    log.drain()

    def crash(*args: object, **kwargs: object) -> None:
        raise Crash

    with monkeypatch.context() as m:
        m.setattr("odradek.log.partition_log.clamp_checkpoint", crash)
        with pytest.raises(Crash):
            log.truncate_to(3)
    unrolled = LogConfig(segment_bytes=1 << 20)  # no roll rewrites the snapshot below
    again = open_log(d, unrolled)  # crashed after the cut
    assert again.end_offset == 3
    for seq in range(25):
        again.append(idem(8, seq))  # another producer, past the old snapshot's offset
    third = open_log(d, unrolled)  # crashed again, no roll or close since
    assert third.producer_state.entries[7].last_seq == 2
    assert third.append(idem(7, 3)).base_offset == third.end_offset - 1
    third.close()


def test_segment_cut_trims_its_own_indexes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", LogConfig(index_interval_bytes=1))
    txn_history(log)  # aborted entries end at 5 and 9, all in one segment
    log.close()
    seg = Segment.existing(tmp_path / "p", 0, 1, shared_file_cache())
    seg.ensure_loaded()
    pos = next(p for p, h in seg.iter_headers() if h.base_offset == 6)
    seg.truncate_to(pos, 6)
    assert seg.next_offset == 6 and seg.size == pos
    assert [e.last_offset for e in seg.txn_index.entries] == [5]
    assert all(r < 6 for r in seg.offset_index.rel_offsets + seg.time_index.rel_offsets)
    seg.close()


def test_follower_appends_and_truncations_beside_reads_in_a_thread(tmp_path: Path) -> None:
    """A fetcher appending and truncating while another thread reads: every read sees
    whole, CRC-valid batches in offset order, and the result is what a serial run gives."""
    log = open_log(tmp_path / "p", LogConfig(segment_bytes=400, flush_messages=5))
    stop = threading.Event()
    errors: list[BaseException] = []
    reads: list[int] = []

    def read_all() -> None:
        try:
            while not stop.is_set():
                offset = log.start_offset
                try:
                    data = log.read(offset, 1 << 16)
                    log.end_offset_for_epoch(log.latest_epoch)
                except OffsetOutOfRangeError:
                    continue  # truncated under it: fine
                bases = [h.base_offset for _, h in iter_batches(data)]
                assert bases == sorted(bases)
                for pos, h in iter_batches(data):
                    decode_records(data[pos : pos + h.size])  # checks the CRC
                reads.append(len(bases))
                stop.wait(0.0005)  # let the fetcher in (the GIL favours a spinning thread)
        except BaseException as exc:
            errors.append(exc)

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    model: list[tuple[int, int, int, list[bytes]]] = []
    epoch = 0
    for i in range(150):
        if i % 10 == 9:
            cut = model[len(model) * 2 // 3][0] if model else log.end_offset
            log.truncate_to(cut)
            model = [b for b in model if b[0] < cut]
            epoch += 1
            continue
        end = log.end_offset
        vals = [b"%d-%d" % (i, j) for j in range(i % 3 + 1)]
        log.append_as_follower(
            build_batch(
                [(None, v, ()) for v in vals],
                timestamp_ms=500_000,
                base_offset=end,
                partition_leader_epoch=epoch,
            )
        )
        model.append((end, end + len(vals) - 1, epoch, vals))
    stop.set()
    reader.join(timeout=60)
    assert not errors, errors
    assert len(reads) > 10 and max(reads) > 1
    assert read_back(log) == model
    starts: dict[int, int] = {}
    for base, _, e, _ in model:
        starts.setdefault(e, base)
    assert log.leader_epoch_entries == sorted(starts.items())
    log.close()


def test_truncate_into_the_batch_holding_the_log_start_empties_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(batch(0, 3))  # 0-2
    log.append(batch(1, 2))  # 3-4
    log.delete_records_before(1)  # the log starts inside the first batch
    assert log.truncate_to(2) == 1  # that batch goes whole: nothing readable is left
    assert (log.start_offset, log.end_offset) == (1, 1)
    assert (
        log.append_as_follower(batch(2, base_offset=1, partition_leader_epoch=3)).base_offset == 1
    )
    log.close()


def test_assign_epoch_follows_kafka_and_persists(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(batch(0, 4))  # epoch 0 from offset 0
    log.assign_epoch(2, 4)
    log.assign_epoch(2, 9)  # the latest epoch again: nothing changes
    assert log.leader_epoch_entries == [(0, 0), (2, 4)]
    assert log.latest_epoch == 2
    log.close()
    assert (tmp_path / "p" / LEADER_EPOCH_FILE).read_text() == "0\n2\n0 0\n2 4\n"
