"""Transactions in the partition log: open transactions, the last stable offset, markers,
the aborted-transaction index, crash recovery and compaction (Kafka's rules)."""

from __future__ import annotations

from pathlib import Path

import pytest

from odradek.log import InvalidProducerEpochError, LogConfig, PartitionLog
from odradek.log.errors import InvalidTxnStateError
from odradek.log.txn_index import ENTRY_SIZE, AbortedTxn, read_txn_index
from odradek.protocol.records import (
    build_batch,
    build_end_txn_marker,
    decode_records,
    iter_batches,
)

RETENTION = 10_000


class Clock:
    def __init__(self, t: int = 1_000_000) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


def txn_batch(
    pid: int, seq: int, values: list[tuple[bytes | None, bytes]], *, epoch: int = 0, ts: int = 0
) -> bytes:
    return build_batch(
        [(k, v, ()) for k, v in values],
        timestamp_ms=ts or 1_000_000,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=True,
    )


def plain(values: list[tuple[bytes | None, bytes]], ts: int = 1_000_000) -> bytes:
    return build_batch([(k, v, ()) for k, v in values], timestamp_ms=ts)


def marker(pid: int, *, commit: bool, epoch: int = 0, ts: int = 1_000_000) -> bytes:
    return build_end_txn_marker(pid, epoch, commit=commit, timestamp_ms=ts)


def open_log(path: Path, clock: Clock | None = None, **cfg: object) -> PartitionLog:
    config = LogConfig(**cfg)  # type: ignore[arg-type]
    return PartitionLog.open(path, config, now_ms=clock or Clock())


def values_read_committed(log: PartitionLog, start: int = 0) -> list[bytes]:
    """What a read_committed consumer sees: up to the LSO, aborted batches and markers dropped."""
    lso = log.last_stable_offset
    out: list[bytes] = []
    offset = start
    while offset < lso:  # reads stay within one segment: fetch again, as a consumer does
        data = log.read(offset, 1 << 30, max_offset=lso)
        aborted = log.aborted_transactions(offset, lso)
        for pos, h in iter_batches(data):
            offset = h.next_offset
            if h.is_control or (
                h.is_transactional
                and any(
                    a.producer_id == h.producer_id
                    and a.first_offset <= h.base_offset <= a.last_offset
                    for a in aborted
                )
            ):
                continue
            out += [r.value for r in decode_records(data[pos : pos + h.size]) if r.value]
    return out


def kinds(log: PartitionLog) -> list[tuple[int, bool]]:
    """(base offset, is a marker) of every batch, across segments."""
    out = []
    offset = log.start_offset
    while offset < log.end_offset:
        for _, h in iter_batches(log.read(offset, 1 << 30)):
            out.append((h.base_offset, h.is_control))
            offset = h.next_offset
    return out


def test_open_transaction_holds_the_lso_until_its_marker(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(plain([(None, b"a")]))  # 0
    log.append(txn_batch(7, 0, [(None, b"t1"), (None, b"t2")]))  # 1-2
    log.append(plain([(None, b"b")]))  # 3
    assert log.end_offset == 4
    assert log.last_stable_offset == 1
    assert log.read(0, 1 << 20, max_offset=1) == log.read(0, 1 << 20)[: len(plain([(None, b"a")]))]
    assert values_read_committed(log) == [b"a"]
    log.append(marker(7, commit=True), from_client=False)  # 4
    assert log.last_stable_offset == 5 == log.end_offset
    assert values_read_committed(log) == [b"a", b"t1", b"t2", b"b"]
    assert log.aborted_transactions(0, 5) == []
    log.close()


def test_aborted_transaction_is_indexed_and_lso_follows_the_oldest_open_one(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path / "p")
    log.append(txn_batch(1, 0, [(None, b"x1")]))  # 0 (pid 1)
    log.append(txn_batch(2, 0, [(None, b"y1")]))  # 1 (pid 2)
    log.append(txn_batch(1, 1, [(None, b"x2")]))  # 2
    assert log.last_stable_offset == 0
    log.append(marker(1, commit=False), from_client=False)  # 3: abort pid 1
    assert log.last_stable_offset == 1  # pid 2 still open
    assert log.aborted_transactions(0, 4) == [AbortedTxn(1, 0, 3, 1)]
    log.append(marker(2, commit=True), from_client=False)  # 4
    assert log.last_stable_offset == 5
    assert values_read_committed(log) == [b"y1"]
    # A fetch starting after the aborted range does not get it.
    assert log.aborted_transactions(4, 5) == []
    log.close()
    assert read_txn_index(tmp_path / "p" / "00000000000000000000.txnindex") == [
        AbortedTxn(1, 0, 3, 1)
    ]


def test_marker_in_a_later_segment_is_found_from_the_data_segment(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(txn_batch(3, 0, [(None, b"gone")]))  # 0
    log.roll()
    log.append(plain([(None, b"kept")]))  # 1
    log.roll()
    log.append(marker(3, commit=False), from_client=False)  # 2
    assert log.aborted_transactions(0, 1) == [AbortedTxn(3, 0, 2, 3)]
    assert values_read_committed(log) == [b"kept"]
    log.close()


def test_producer_rules_inside_a_transaction(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.append(txn_batch(5, 0, [(None, b"t")], epoch=2))
    with pytest.raises(InvalidTxnStateError) as err:
        log.append(
            build_batch(
                [(None, b"n", ())],
                timestamp_ms=1,
                producer_id=5,
                producer_epoch=2,
                base_sequence=1,
            )
        )
    assert err.value.error_code == 48
    with pytest.raises(InvalidProducerEpochError):
        log.append(marker(5, commit=True, epoch=1), from_client=False)
    # The coordinator fences with a bumped epoch and aborts; the old epoch is then refused.
    log.append(marker(5, commit=False, epoch=3), from_client=False)
    with pytest.raises(InvalidProducerEpochError):
        log.append(txn_batch(5, 1, [(None, b"zombie")], epoch=2))
    assert log.last_stable_offset == log.end_offset
    # A marker for a producer with nothing open changes nothing but its epoch.
    log.append(marker(99, commit=True, epoch=0), from_client=False)
    assert log.aborted_transactions(0, log.end_offset) == [AbortedTxn(5, 0, 1, 2)]
    log.close()


def test_open_transaction_survives_clean_and_unclean_restarts(tmp_path: Path) -> None:
    d = tmp_path / "p"
    log = open_log(d)
    log.append(plain([(None, b"a")]))
    log.append(txn_batch(4, 0, [(None, b"t")]))  # 1
    log.close()
    log = open_log(d)
    assert log.last_stable_offset == 1
    log.append(plain([(None, b"b")]))  # 2
    # no close: the process dies; recovery replays the log from the last snapshot
    again = open_log(d)
    assert again.last_stable_offset == 1
    again.append(marker(4, commit=False), from_client=False)  # 3
    assert again.last_stable_offset == 4
    assert values_read_committed(again) == [b"a", b"b"]
    again.close()


def test_lost_or_torn_index_entries_are_rebuilt_by_recovery(tmp_path: Path) -> None:
    d = tmp_path / "p"
    log = open_log(d)
    log.append(txn_batch(1, 0, [(None, b"x")]))
    log.append(marker(1, commit=False), from_client=False)
    log.append(txn_batch(2, 0, [(None, b"y")]))
    log.append(marker(2, commit=False), from_client=False)
    expected = log.aborted_transactions(0, log.end_offset)
    assert len(expected) == 2
    index = d / "00000000000000000000.txnindex"
    # The process dies with the last entry torn (or the file gone): recovery restores it.
    for damage in ("torn", "missing"):
        data = index.read_bytes()
        if damage == "torn":
            index.write_bytes(data[: ENTRY_SIZE + 5])
        else:
            index.unlink()
        again = open_log(d)
        assert again.aborted_transactions(0, again.end_offset) == expected
        assert read_txn_index(index) == expected
    again.close()


def test_data_past_the_lso_is_neither_cleaned_nor_shadowing(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock, cleanup_policy="compact", delete_retention_ms=RETENTION)
    log.append(plain([(b"k", b"committed")]))  # 0
    log.roll()
    log.append(txn_batch(8, 0, [(b"k", b"pending")]))  # 1: open, newer value of k
    log.roll()
    log.append(plain([(b"other", b"x")]))  # 2
    log.compact(clock.t, force=True)
    # The open transaction may abort: the committed value must survive.
    log.append(marker(8, commit=False), from_client=False)  # 3
    log.roll()
    log.compact(clock.t, force=True)
    assert values_read_committed(log) == [b"committed", b"x"]
    log.close()


def test_compaction_removes_aborted_data_and_then_its_marker(tmp_path: Path) -> None:
    clock = Clock()
    d = tmp_path / "p"
    log = open_log(d, clock, cleanup_policy="compact", delete_retention_ms=RETENTION)
    log.append(plain([(b"k", b"v0")]))  # 0
    log.append(txn_batch(6, 0, [(b"k", b"aborted")]))  # 1
    log.append(marker(6, commit=False), from_client=False)  # 2
    log.append(txn_batch(9, 0, [(b"j", b"committed")]))  # 3
    log.append(marker(9, commit=True), from_client=False)  # 4
    log.append(plain([(b"z", b"z")]))  # 5: producer 6 / 9 last batches are before this
    log.roll()
    stats = log.compact(clock.t, force=True)
    assert stats.aborted_batches_removed == 1
    assert stats.markers_removed == 0  # not past delete.retention.ms yet
    found = kinds(log)
    # The aborted batch is the producer's last: kept empty (RETAIN_EMPTY), so its marker stays.
    assert (1, False) in found and (2, True) in found and (4, True) in found
    assert values_read_committed(log) == [b"v0", b"committed", b"z"]
    # Producer 9 writes again: its committed batch keeps its marker forever (data retained).
    clock.t += RETENTION * 2
    log.append(plain([(b"zz", b"zz")], ts=clock.t))
    log.roll()
    log.compact(clock.t, force=True)
    assert (4, True) in kinds(log)
    assert values_read_committed(log) == [b"v0", b"committed", b"z", b"zz"]
    log.close()


def test_marker_goes_once_its_transaction_has_no_batch_left(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock, cleanup_policy="compact", delete_retention_ms=RETENTION)
    log.append(txn_batch(6, 0, [(b"k", b"old")]))  # 0
    log.append(marker(6, commit=True), from_client=False)  # 1
    log.append(txn_batch(6, 1, [(b"k", b"new")]))  # 2: supersedes offset 0
    log.append(marker(6, commit=True), from_client=False)  # 3
    log.roll()
    clock.t += RETENTION * 2
    log.append(plain([(b"x", b"x")], ts=clock.t))
    stats = log.compact(clock.t, force=True)
    assert stats.markers_removed == 1
    assert kinds(log) == [(2, False), (3, True), (4, False)]
    log.close()


def test_merged_segments_keep_every_aborted_entry(tmp_path: Path) -> None:
    clock = Clock()
    d = tmp_path / "p"
    log = open_log(d, clock, cleanup_policy="compact", delete_retention_ms=RETENTION)
    for pid in (1, 2, 3):
        log.append(txn_batch(pid, 0, [(b"k%d" % pid, b"v")]))
        log.append(marker(pid, commit=False), from_client=False)
        log.append(plain([(b"p%d" % pid, b"v")]))
        log.roll()
    before = log.aborted_transactions(0, log.end_offset)
    assert len(before) == 3
    log.compact(clock.t, force=True)
    assert log.segment_count == 2  # three small segments merged into one
    assert log.aborted_transactions(0, log.end_offset) == before
    log.close()
    again = open_log(d, clock, cleanup_policy="compact")
    assert again.aborted_transactions(0, again.end_offset) == before
    again.close()


def test_reads_of_a_clean_log_without_transactions_load_no_producer_state(
    tmp_path: Path,
) -> None:
    d = tmp_path / "p"
    log = open_log(d)
    for i in range(50):
        log.append(plain([(None, b"%d" % i)]))
    log.close()
    again = open_log(d)
    assert again.last_stable_offset == again.end_offset == 50
    assert again._producers is None  # not loaded: no header scan for the LSO
    again.append(txn_batch(3, 0, [(None, b"t")]))  # a producer's batch loads it
    assert again.last_stable_offset == 50
    again.close()
    third = open_log(d)  # the record says a transaction is open: the LSO must look
    assert third.last_stable_offset == 50 and third.end_offset == 51
    third.close()


def test_an_abort_whose_index_entry_cannot_be_written_still_hides_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The marker is in the log once its bytes are written; an index file that cannot be
    opened then (EMFILE, ENOSPC) must not make the aborted data visible: the entry is kept
    in memory and written by the next sync (roll, close)."""
    import errno
    import os

    from odradek.log import txn_index

    d = tmp_path / "p"
    log = open_log(d)
    log.append(txn_batch(9, 0, [(None, b"aborted")]))  # 0
    real_open = os.open

    def no_descriptors(path: object, *args: object, **kwargs: object) -> int:
        if str(path).endswith(".txnindex"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(txn_index.os, "open", no_descriptors)
    log.append(marker(9, commit=False), from_client=False)  # 1: its bytes are in the log
    monkeypatch.setattr(txn_index.os, "open", real_open)
    log.append(plain([(None, b"after")]))
    assert values_read_committed(log) == [b"after"]
    log.close()
    assert read_txn_index(d / "00000000000000000000.txnindex") == [AbortedTxn(9, 0, 1, 2)]
    again = open_log(d)
    assert values_read_committed(again) == [b"after"]
    again.close()
