"""The pure read_committed batch filter, on synthetic batches and on a real log's answers."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.client.read_committed import ReadCommittedFilter
from odradek.log import LogConfig, PartitionLog
from odradek.protocol.records import (
    BatchHeader,
    build_batch,
    build_end_txn_marker,
    decode_records,
    iter_batches,
    marker_is_abort,
    parse_header,
)


def header(
    base: int, pid: int, *, count: int = 1, txn: bool = True, control: bool = False
) -> BatchHeader:
    raw = build_batch(
        [(None, b"v", ())] * count,
        base_offset=base,
        timestamp_ms=0,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0 if not control else -1,
        transactional=txn,
        control=control,
    )
    return parse_header(raw)


def test_aborted_batches_are_dropped_until_their_marker() -> None:
    keep = ReadCommittedFilter([(7, 10)])  # producer 7 aborted a transaction from offset 10
    assert keep.accept(header(0, 7))  # before it: an earlier, committed transaction
    assert not keep.accept(header(1, 7, control=True), abort_marker=False)  # COMMIT marker
    assert keep.accept(header(2, 8))  # another producer
    assert not keep.accept(header(10, 7, count=3))  # the aborted transaction's data
    assert keep.accept(header(13, 9, txn=False))  # non-transactional, in between
    assert not keep.accept(header(14, 7))
    assert not keep.accept(header(15, 7, control=True), abort_marker=True)  # closes it
    assert keep.accept(header(16, 7))  # the producer's next transaction


def test_a_range_becomes_active_inside_a_batch_and_kio_entries_work() -> None:
    class Entry:
        producer_id = 3
        first_offset = 5

    keep = ReadCommittedFilter([Entry()])
    # A batch of producer 3 spanning offsets 4-6 overlaps the aborted first offset 5.
    assert not keep.accept(header(4, 3, count=3))
    assert ReadCommittedFilter(None).accept(header(0, 3))


def test_two_aborted_transactions_of_one_producer_in_one_answer() -> None:
    keep = ReadCommittedFilter([(4, 0), (4, 5)])
    assert not keep.accept(header(0, 4, count=2))
    assert not keep.accept(header(2, 4, control=True), abort_marker=True)
    assert keep.accept(header(3, 4))  # committed in between (its marker comes later)
    assert not keep.accept(header(4, 4, control=True))  # COMMIT
    assert not keep.accept(header(5, 4))
    assert not keep.accept(header(6, 4, control=True), abort_marker=True)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(1, 3), st.sampled_from(["commit", "abort", ""])),
        min_size=1,
        max_size=25,
    )
)
def test_matches_what_the_log_says_was_committed(tmp_path_factory, steps) -> None:  # type: ignore[no-untyped-def]
    """Random transactions of three producers in a real log: the filter over a
    read_committed answer keeps exactly the committed data."""
    path: Path = tmp_path_factory.mktemp("rc")
    log = PartitionLog.open(path / "p", LogConfig(), now_ms=lambda: 0)
    seqs = [0, 0, 0]
    open_values: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    committed: list[bytes] = []
    n = 0
    for pid, count, end in steps:
        values = []
        for _ in range(count):
            n += 1
            values.append(b"%d" % n)
        log.append(
            build_batch(
                [(None, v, ()) for v in values],
                timestamp_ms=0,
                producer_id=pid,
                producer_epoch=0,
                base_sequence=seqs[pid],
                transactional=True,
            )
        )
        seqs[pid] += count
        open_values[pid] += values
        if end:
            log.append(
                build_end_txn_marker(pid, 0, commit=end == "commit", timestamp_ms=0),
                from_client=False,
            )
            if end == "commit":
                committed += open_values[pid]
            open_values[pid] = []
    for pid in range(3):  # close what is still open, so everything is below the LSO
        if open_values[pid]:
            log.append(
                build_end_txn_marker(pid, 0, commit=False, timestamp_ms=0), from_client=False
            )
    lso = log.last_stable_offset
    assert lso == log.end_offset
    data = log.read(0, 1 << 30, max_offset=lso)
    keep = ReadCommittedFilter(
        (a.producer_id, a.first_offset) for a in log.aborted_transactions(0, lso)
    )
    seen = []
    for pos, h in iter_batches(data):
        abort = h.is_control and marker_is_abort(data, pos)
        if keep.accept(h, abort_marker=abort):
            seen += [r.value for r in decode_records(data[pos : pos + h.size])]
    log.close()
    assert sorted(seen) == sorted(committed)
