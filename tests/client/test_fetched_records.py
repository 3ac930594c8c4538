"""Fetched records: batches decoded as records are handed out, records built when read;
the client's fetch session state; the Fetch request the fetcher writes."""

from __future__ import annotations

import pytest

from odradek.client.errors import CorruptRecordError
from odradek.client.fetch_session import FetchSessionHandler, PartitionFetch
from odradek.client.fetched import CompletedFetch, RecordList
from odradek.client.read_committed import ReadCommittedFilter
from odradek.client.structs import ConsumerRecord, TopicPartition
from odradek.protocol.codec import RequestHeader, encode_request, parse_request_header
from odradek.protocol.fetch import encode_fetch_request, parse_fetch_request
from odradek.protocol.records import COMPRESSION_GZIP, Record, build_batch

TP = TopicPartition("t", 3)


def batch(base: int, values: list[bytes], **kw) -> bytes:
    return build_batch(
        [(b"k%d" % (base + i), v, ()) for i, v in enumerate(values)],
        base_offset=base,
        timestamp_ms=1_000 + base,
        **kw,
    )


def fetched(data: bytes, fetch_offset: int = 0) -> CompletedFetch:
    cf = CompletedFetch(TP, fetch_offset, 0, 100, 0, 100, memoryview(data))
    cf.expected_position = fetch_offset
    return cf


def take_all(cf: CompletedFetch, position: int, n: int) -> tuple[list, int]:
    """Every record of ``cf``, ``n`` at a time, as a consumer takes them: (records, position)."""
    out: list[ConsumerRecord] = []
    while not cf.consumed:
        runs, count, position = cf.take(n, position, True)
        records = RecordList(TP, None, None)
        records.extend_runs(runs, count)
        assert len(records) == count
        out.extend(records)
    return out, position


@pytest.mark.parametrize("n", [1, 2, 3, 500])
def test_records_are_handed_out_in_order_with_positions(n: int) -> None:
    data = batch(0, [b"a", b"b", b"c"]) + batch(3, [b"d", b"e"])
    records, position = take_all(fetched(data), 0, n)
    assert [r.value for r in records] == [b"a", b"b", b"c", b"d", b"e"]
    assert [r.offset for r in records] == [0, 1, 2, 3, 4]
    assert [r.key for r in records] == [b"k0", b"k1", b"k2", b"k3", b"k4"]
    assert records[0] == ConsumerRecord("t", 3, 0, b"k0", b"a", 1_000, [], 0)
    assert position == 5


def test_control_batches_are_stepped_over_and_move_the_position() -> None:
    marker = build_batch(
        [Record(0, 0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
        base_offset=2,
        timestamp_ms=5,
        producer_id=7,
        producer_epoch=0,
        transactional=True,
        control=True,
    )
    trailing = build_batch(
        [Record(0, 0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")],
        base_offset=4,
        timestamp_ms=5,
        producer_id=7,
        producer_epoch=0,
        transactional=True,
        control=True,
    )
    data = batch(0, [b"a", b"b"]) + marker + batch(3, [b"c"]) + trailing
    records, position = take_all(fetched(data), 0, 10)
    assert [r.offset for r in records] == [0, 1, 3]
    assert position == 5  # past the trailing marker too


def marker(offset: int, producer_id: int, abort: bool) -> bytes:
    """A transaction's end marker (control batch): ABORT (type 0) or COMMIT (type 1)."""
    return build_batch(
        [Record(0, 0, b"\x00\x00\x00\x00" if abort else b"\x00\x00\x00\x01", b"\x00" * 6)],
        base_offset=offset,
        timestamp_ms=5,
        producer_id=producer_id,
        producer_epoch=0,
        transactional=True,
        control=True,
    )


def txn_batch(offset: int, values: list[bytes], producer_id: int) -> bytes:
    return batch(offset, values, producer_id=producer_id, producer_epoch=0, transactional=True)


def read_committed(
    data: bytes, aborted: list[tuple[int, int]], fetch_offset: int = 0
) -> CompletedFetch:
    """A read_committed fetch of ``data`` with the response's (producer id, first offset)."""
    cf = fetched(data, fetch_offset)
    cf.committed = ReadCommittedFilter(aborted)
    return cf


def test_read_committed_drops_the_batches_of_aborted_transactions() -> None:
    # Producer 9 aborts [2, 3] (marker at 4), producer 8 commits [5] (marker 7), producer 9
    # then writes [8, 9] in a new, committed transaction (marker 10); plain batches between.
    data = (
        batch(0, [b"a", b"b"])
        + txn_batch(2, [b"x", b"y"], 9)
        + marker(4, 9, abort=True)
        + txn_batch(5, [b"c"], 8)
        + batch(6, [b"d"])
        + marker(7, 8, abort=False)
        + txn_batch(8, [b"e", b"f"], 9)
        + marker(10, 9, abort=False)
    )
    records, position = take_all(read_committed(data, [(9, 2)]), 0, 10)
    assert [r.value for r in records] == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert position == 11
    # read_uncommitted: the aborted records too, never the markers
    records, _ = take_all(fetched(data), 0, 10)
    assert [r.value for r in records] == [b"a", b"b", b"x", b"y", b"c", b"d", b"e", b"f"]


def test_an_abort_marker_behind_the_position_still_ends_its_transaction() -> None:
    """Fetched from inside a compressed batch past producer 9's abort marker: its next,
    committed transaction is read."""
    data = (
        txn_batch(0, [b"x"], 9)
        + marker(1, 9, abort=True)
        + batch(2, [b"a", b"b"], compression=COMPRESSION_GZIP)
        + txn_batch(4, [b"e"], 9)
        + marker(5, 9, abort=False)
    )
    records, position = take_all(read_committed(data, [(9, 0)], 3), 3, 10)
    assert [r.value for r in records] == [b"b", b"e"]
    assert position == 6


def test_records_before_the_position_are_skipped() -> None:
    """A compressed batch fetched from its middle: the records before the position go."""
    data = batch(0, [b"a", b"b", b"c", b"d"], compression=COMPRESSION_GZIP) + batch(4, [b"e"])
    records, position = take_all(fetched(data, 2), 2, 10)
    assert [r.offset for r in records] == [2, 3, 4]
    assert position == 5


def test_a_partial_batch_at_the_end_is_left_for_the_next_fetch() -> None:
    second = batch(2, [b"c"])
    data = batch(0, [b"a", b"b"]) + second[: len(second) - 3]
    records, position = take_all(fetched(data), 0, 10)
    assert [r.value for r in records] == [b"a", b"b"]
    assert position == 2


def test_a_corrupt_batch_fails_after_the_records_before_it() -> None:
    bad = bytearray(batch(2, [b"c", b"d"]))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    cf = fetched(batch(0, [b"a", b"b"]) + bytes(bad))
    _, count, position = cf.take(10, 0, True)
    assert count == 2 and position == 2
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        cf.take(10, position, True)
    # The position stays before the bad batch: the next fetch meets it again.
    assert cf.consumed is False


def test_record_lists_are_lazy_sequences_with_deserializers() -> None:
    cf = fetched(batch(0, [b"1", b"2", b"3"]) + batch(3, [None, b"5"]))
    runs, count, _ = cf.take(10, 0, True)
    records = RecordList(TP, lambda k: k.decode(), lambda v: None if v is None else int(v))
    records.extend_runs(runs, count)
    assert len(records) == 5 and bool(records)
    assert [r.value for r in records] == [1, 2, 3, None, 5]
    assert records[-1].key == "k4" and records[3].offset == 3
    assert [r.offset for r in records[1:3]] == [1, 2]
    with pytest.raises(IndexError):
        records[5]


def test_headers_are_read_with_their_records() -> None:
    data = build_batch(
        [(None, b"v", (("h1", b"x"), ("h2", None))), (b"k", None, ())],
        base_offset=0,
        timestamp_ms=1,
    )
    records, _ = take_all(fetched(data), 0, 10)
    assert records[0].headers == [("h1", b"x"), ("h2", None)]
    assert records[1].headers == [] and records[1].value is None and records[1].key == b"k"


# ---------------------------------------------------------------------- fetch sessions

A, B, C = (TopicPartition("t", i) for i in range(3))


def test_sessions_send_only_what_changed_and_forget_what_is_gone() -> None:
    session = FetchSessionHandler()
    first = session.build({A: PartitionFetch(0, 100), B: PartitionFetch(5, 100)}, 12)
    assert first.full and (first.session_id, first.epoch) == (0, 0)
    assert set(first.to_send) == {A, B}
    assert session.handle_response(first, 0, 42)
    nxt = session.build({A: PartitionFetch(0, 100), B: PartitionFetch(9, 100)}, 12)
    assert (nxt.session_id, nxt.epoch) == (42, 1) and not nxt.full
    assert nxt.to_send == {B: PartitionFetch(9, 100)} and nxt.to_forget == []
    assert nxt.session_partitions == {A: PartitionFetch(0, 100), B: PartitionFetch(9, 100)}
    assert session.handle_response(nxt, 0, 42)
    third = session.build({B: PartitionFetch(9, 100), C: PartitionFetch(1, 100)}, 12)
    assert third.epoch == 2
    assert third.to_send == {C: PartitionFetch(1, 100)} and third.to_forget == [A]


def test_session_errors_and_brokers_without_sessions() -> None:
    session = FetchSessionHandler()
    want = {A: PartitionFetch(0, 100)}
    assert session.handle_response(session.build(want, 12), 0, 42)
    # The broker forgot the session: the next fetch is full and opens a new one.
    assert not session.handle_response(session.build(want, 12), 70, 0)
    again = session.build(want, 12)
    assert again.full and (again.session_id, again.epoch) == (0, 0)
    assert session.handle_response(again, 0, 43)
    # A wrong epoch: close session 43 while opening a new one.
    assert not session.handle_response(session.build(want, 12), 71, 0)
    close = session.build(want, 12)
    assert close.full and (close.session_id, close.epoch) == (43, 0)
    # A lost connection: the same.
    session.handle_error()
    assert session.build(want, 12).epoch == 0
    # A broker answering session id 0 (no room, or no sessions): every fetch stays full.
    plain = FetchSessionHandler()
    for _ in range(3):
        request = plain.build(want, 12)
        assert request.full and request.to_send == want
        assert plain.handle_response(request, 0, 0)
    # Before Fetch v7 there are no sessions at all.
    old = FetchSessionHandler().build(want, 6)
    assert (old.session_id, old.epoch) == (0, -1)


def test_the_fetch_request_carries_the_consumer_settings_and_the_session() -> None:
    body = encode_fetch_request(
        12,
        max_wait_ms=321,
        min_bytes=7,
        max_bytes=9_000,
        isolation_level=1,
        session_id=42,
        session_epoch=3,
        topics=[("t", [(2, 10, 4_096)])],
        forgotten=[("t", [0, 1])],
        rack_id="r1",
    )
    frame = encode_request(RequestHeader(1, 12, 5, "c"), body)[4:]
    _, pos = parse_request_header(frame)
    request = parse_fetch_request(frame, pos + 1, 12)
    assert (request.max_wait_ms, request.min_bytes, request.max_bytes) == (321, 7, 9_000)
    assert (request.session_id, request.session_epoch, request.isolation_level) == (42, 3, 1)
    (topic,) = request.topics
    (partition,) = topic.partitions
    assert (topic.topic, partition.partition, partition.fetch_offset) == ("t", 2, 10)
    assert partition.partition_max_bytes == 4_096
    assert [(t.topic, t.partitions) for t in request.forgotten_topics_data] == [("t", [0, 1])]
    assert request.rack_id == "r1"


def test_a_batch_length_below_the_minimum_is_corrupt_not_a_partial_tail() -> None:
    """Read as a cut-off tail, the consumer would fetch the same bytes forever."""
    bad = bytearray(batch(2, [b"c"]))
    bad[8:12] = (20).to_bytes(4, "big")  # batch_length 20 < 49
    cf = fetched(batch(0, [b"a", b"b"]) + bytes(bad))
    _, count, position = cf.take(10, 0, True)
    assert count == 2 and position == 2
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        cf.take(10, position, True)
