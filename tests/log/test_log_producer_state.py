"""Idempotent producer checks: duplicates, gaps, epoch fencing, and persistence."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.log import (
    InvalidProducerEpochError,
    LogConfig,
    OutOfOrderSequenceError,
    PartitionLog,
)
from odradek.protocol.records import build_batch

PID = 4242


def now() -> int:
    return 50_000


def pbatch(seq: int, n: int = 1, *, epoch: int = 0, pid: int = PID) -> bytes:
    return build_batch(
        [(None, b"v%d" % (seq + i), ()) for i in range(n)],
        timestamp_ms=1000 + seq,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def open_log(path: Path, **cfg: object) -> PartitionLog:
    return PartitionLog.open(path, LogConfig(**cfg), now_ms=now)  # type: ignore[arg-type]


def test_in_sequence_batches_accepted(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    assert log.append(pbatch(0, 3)).base_offset == 0
    assert log.append(pbatch(3, 2)).base_offset == 3
    assert log.append(pbatch(5)).base_offset == 5
    log.close()


def test_duplicate_of_recent_batches_returns_original_offsets(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(build_batch([(None, b"x", ())], timestamp_ms=1))  # offset 0, non-idempotent
    infos = [log.append(pbatch(seq * 2, 2)) for seq in range(6)]  # seqs 0..11
    end = log.end_offset
    for i in range(1, 6):  # the last 5 batches are remembered
        dup = log.append(pbatch(i * 2, 2))
        assert dup.duplicate
        assert (dup.base_offset, dup.last_offset) == (infos[i].base_offset, infos[i].last_offset)
    assert log.end_offset == end  # nothing written
    # the oldest batch fell out of the cache: it is now out of order, not a duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(0, 2))
    # same first sequence but a different range is not a duplicate
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(10, 1))
    log.close()


def test_gap_is_out_of_order(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(pbatch(0, 2))
    with pytest.raises(OutOfOrderSequenceError) as ei:
        log.append(pbatch(3))
    assert ei.value.error_code == 45
    assert log.end_offset == 2
    log.append(pbatch(2))
    log.close()


def test_epoch_fencing_and_bump(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(pbatch(0, 2, epoch=3))
    with pytest.raises(InvalidProducerEpochError) as ei:
        log.append(pbatch(2, epoch=2))
    assert ei.value.error_code == 47
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(5, epoch=4))  # a new epoch must restart at 0
    assert log.append(pbatch(0, epoch=4)).base_offset == 2
    with pytest.raises(InvalidProducerEpochError):
        log.append(pbatch(1, epoch=3))  # the old epoch is now fenced
    # a retry of the old epoch's batch is no longer recognised as a duplicate
    with pytest.raises(InvalidProducerEpochError):
        log.append(pbatch(0, 2, epoch=3))
    log.close()


def test_unknown_producer_accepted_at_any_sequence(tmp_path: Path) -> None:
    """Kafka >= 2.5 (KIP-360) accepts a producer with no state at any sequence."""
    log = open_log(tmp_path / "p")
    assert log.append(pbatch(17, 2, pid=1)).base_offset == 0
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(20, pid=1))
    log.append(pbatch(19, pid=1))
    log.close()


def test_sequence_wraps_at_int32_max(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(pbatch(2**31 - 2, 2))
    assert log.append(pbatch(0)).base_offset == 2
    log.close()


def test_producers_are_independent(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(pbatch(0, pid=1))
    log.append(pbatch(0, pid=2))
    log.append(pbatch(1, pid=1))
    assert log.append(pbatch(0, pid=2)).duplicate
    log.close()


def test_failed_append_leaves_state_untouched(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(pbatch(0))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(1) + pbatch(5))  # second batch of the request is out of order
    assert log.end_offset == 1
    assert log.append(pbatch(1)).base_offset == 1
    log.close()


@pytest.mark.parametrize("shutdown", ["clean", "crash", "crash-no-snapshot", "bad-snapshot"])
def test_producer_state_survives_reopen(tmp_path: Path, shutdown: str) -> None:
    d = tmp_path / "p"
    log = open_log(d, segment_bytes=400)
    infos = [log.append(pbatch(i * 3, 3)) for i in range(12)]
    log.append(pbatch(0, epoch=1, pid=77))
    assert log.segment_count > 2
    log.drain()  # the rolls' workers have written the producer snapshot
    if shutdown == "clean":
        log.close()
    elif shutdown == "crash-no-snapshot":
        (d / "producer.snapshot").unlink()
    elif shutdown == "bad-snapshot":
        (d / "producer.snapshot").write_bytes(b"\x00" * 40)
    log = open_log(d, segment_bytes=400)
    dup = log.append(pbatch(33, 3))
    assert dup.duplicate and dup.base_offset == infos[-1].base_offset
    with pytest.raises(OutOfOrderSequenceError):
        log.append(pbatch(40))
    with pytest.raises(InvalidProducerEpochError):
        log.append(pbatch(1, epoch=0, pid=77))
    assert log.append(pbatch(36)).base_offset == log.end_offset - 1
    log.close()


def test_producer_evicted_when_retention_removes_its_batches(tmp_path: Path) -> None:
    d = tmp_path / "p"
    log = open_log(d, segment_bytes=300)
    log.append(pbatch(0, 2, pid=5))
    for i in range(10):
        log.append(pbatch(i, pid=6))
    log.delete_records_before(log.end_offset - 1)
    assert 5 not in log.producer_state.entries
    assert 6 in log.producer_state.entries
    # with no state left, producer 5 is accepted at any sequence (as in Kafka)
    log.append(pbatch(9, pid=5))
    log.close()
