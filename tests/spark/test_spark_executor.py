"""The source's executor path without a SparkSession: fetched bytes to Arrow, and whole
ranges read against a broker with a client kept per worker process.

``ColumnsBuilder`` (compiled codec, Arrow buffers in bulk) must give exactly the
RecordBatch that ``BatchBuilder`` builds from record objects, for any mix of
batches: compressed, LogAppendTime, control, headers, null keys and values, a
window cut anywhere, a torn last batch.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("pyspark")

from odradek.client.errors import CorruptRecordError
from odradek.client.structs import ConsumerRecord
from odradek.protocol.records import build_batch, decode_records
from odradek.spark import executor
from odradek.spark.arrow import BatchBuilder, ColumnsBuilder, add_fetched, arrow_schema
from odradek.spark.executor import DataLossError, read_range, worker_client
from odradek.spark.planning import OffsetRange

from .conftest import create_topic, produce

maybe_bytes = st.none() | st.binary(max_size=12)
headers_st = st.lists(st.tuples(st.text(max_size=5), maybe_bytes), max_size=2).map(tuple)


@st.composite
def fetched(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int, bool, bool]]]:
    """Batches back to back as a Fetch returns them; (base, count, control, log append)."""
    blob = b""
    offset = draw(st.integers(0, 1_000))
    layout = []
    for _ in range(draw(st.integers(1, 5))):
        n = draw(st.integers(1, 6))
        control, log_append = draw(st.booleans()), draw(st.booleans())
        records = [(draw(maybe_bytes), draw(maybe_bytes), draw(headers_st)) for _ in range(n)]
        blob += build_batch(
            records,
            base_offset=offset,
            timestamp_ms=draw(st.integers(0, 2**41)),
            compression=draw(st.sampled_from([0, 1, 2, 3, 4])),
            control=control,
            log_append_time=log_append,
        )
        layout.append((offset, n, control, log_append))
        offset += n + draw(st.integers(0, 3))  # compaction gaps
    return blob, layout


def reference(blob: bytes, layout, position: int, until: int, topic: str, include_headers: bool):
    """What the record-object path builds for the same window."""
    log_append = {o: int(la) for base, n, _, la in layout for o in range(base, base + n)}
    builder = BatchBuilder(topic, 7, include_headers)
    builder.add(
        ConsumerRecord(
            topic, 7, r.offset, r.key, r.value, r.timestamp, list(r.headers), log_append[r.offset]
        )
        for r in decode_records(blob)
        if not r.is_control and position <= r.offset < until
    )
    return builder.build()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fetched(), st.data(), st.booleans(), st.integers(0, 60))
def test_columns_path_equals_the_record_path(batches, data, include_headers, cut) -> None:
    blob, layout = batches
    first, last = layout[0][0], layout[-1][0] + layout[-1][1]
    position = data.draw(st.integers(first, last))
    until = data.draw(st.integers(position, last + 2))
    torn = blob + blob[:cut]  # a partial batch at the end, as a size-capped fetch leaves it
    builder = ColumnsBuilder("t", 7, include_headers)
    next_position = add_fetched(builder, torn, position, until, True)
    got = builder.build()
    assert got.schema == arrow_schema(include_headers)
    assert got.equals(reference(blob, layout, position, until, "t", include_headers))
    # The position moves past every complete batch that reaches it, control batches too.
    ends = [base + n for base, n, _, _ in layout if base + n > position]
    assert next_position == (ends[-1] if ends else position)
    assert len(builder) == 0  # build() empties the builder


def test_crc_and_magic_errors() -> None:
    good = build_batch([(b"k", b"v", ())], base_offset=5, timestamp_ms=0)
    bad_crc = bytearray(good)
    bad_crc[good.rindex(b"v")] = ord("w")  # the value changes, the stored CRC does not
    with pytest.raises(CorruptRecordError, match="CRC32C"):
        add_fetched(ColumnsBuilder("t", 0, False), bytes(bad_crc), 0, 10, True)
    # Without check.crcs the damaged value is read as it is.
    builder = ColumnsBuilder("t", 0, False)
    assert add_fetched(builder, bytes(bad_crc), 0, 10, False) == 6
    assert builder.build().column("value").to_pylist() == [b"w"]
    old_magic = bytearray(good)
    old_magic[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        add_fetched(ColumnsBuilder("t", 0, False), bytes(old_magic), 0, 10, False)
    garbled = bytearray(good)
    garbled[61] = 0x7F  # the first record's length now runs past the batch
    with pytest.raises(CorruptRecordError, match="cannot decode a batch of t-0"):
        add_fetched(ColumnsBuilder("t", 0, False), bytes(garbled), 0, 10, False)


def test_empty_builder_builds_an_empty_batch() -> None:
    for headers in (False, True):
        batch = ColumnsBuilder("t", 0, headers).build()
        assert batch.num_rows == 0 and batch.schema == arrow_schema(headers)


# --------------------------------------------------------------------------- against a broker


def _read(bootstrap: str, rng: OffsetRange, **kw) -> pa.Table:
    options = {"include_headers": True, "fail_on_data_loss": True, "poll_timeout_s": 20.0}
    options.update(kw)
    batches = list(read_range(rng, bootstrap, {}, **options))
    return pa.Table.from_batches(batches, schema=arrow_schema(options["include_headers"]))


def test_read_range_returns_exactly_the_range(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 3_000, headers=True, timestamp_ms=1_000_000)
    table = _read(bootstrap, OffsetRange(topic, 0, 17, 2_950))
    assert table.column("offset").to_pylist() == list(range(17, 2_950))
    assert table.column("key").to_pylist()[:2] == [b"key-17", b"key-18"]
    assert table.column("value").to_pylist()[-1] == b"value-2949"
    assert table.column("headers").to_pylist()[0] == [
        {"key": "i", "value": b"17"},
        {"key": "empty", "value": None},
    ]
    assert set(table.column("topic").to_pylist()) == {topic}
    assert table.column("timestamp")[0].value == 1_000_000_000


def test_read_committed_ranges_leave_out_aborted_transactions(bootstrap: str, topic: str) -> None:
    """kafka.isolation.level=read_committed: a task's rows hold no record of an aborted
    transaction (the Fetch answer's aborted transactions drop their batches)."""
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{topic}-txn"})
    producer.init_transactions(30)
    for i, commit in enumerate([True, False, True, False, True]):
        producer.begin_transaction()
        for j in range(3):
            producer.produce(topic, value=b"%s-%d-%d" % (b"ok" if commit else b"no", i, j))
        assert producer.flush(10) == 0  # written, so an abort leaves aborted batches
        (producer.commit_transaction if commit else producer.abort_transaction)(30)
    # 5 transactions of 3 records and 5 markers: offsets 0..19.
    whole = OffsetRange(topic, 0, 0, 20)

    def values(settings: dict[str, str]) -> list[bytes]:
        options = {"include_headers": False, "fail_on_data_loss": True, "poll_timeout_s": 20.0}
        batches = list(read_range(whole, bootstrap, settings, **options))
        table = pa.Table.from_batches(batches, schema=arrow_schema(False))
        return table.column("value").to_pylist()

    committed = values({"isolation.level": "read_committed"})
    assert committed == [b"ok-%d-%d" % (i, j) for i in (0, 2, 4) for j in range(3)]
    everything = values({})
    assert len(everything) == 15 and set(committed) < set(everything)


def test_tasks_in_one_worker_share_one_client(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 40, partitions=2)
    client, _ = worker_client(bootstrap, {})
    assert _read(bootstrap, OffsetRange(topic, 0, 0, 20)).num_rows == 20
    conns = dict(client._conns)
    assert conns
    assert _read(bootstrap, OffsetRange(topic, 1, 0, 20)).num_rows == 20
    assert worker_client(bootstrap, {})[0] is client
    assert dict(client._conns) == conns  # the same connections served the second task
    assert worker_client(bootstrap, {"fetch.max.wait.ms": 50})[0] is not client


def test_a_range_past_the_log_end_is_data_loss(bootstrap: str, topic: str) -> None:
    create_topic(bootstrap, topic, 1)
    produce(bootstrap, topic, 10)
    with pytest.raises(DataLossError, match="the log ends at 10"):
        _read(bootstrap, OffsetRange(topic, 0, 5, 15))
    # failOnDataLoss=false: what exists is read, the rest skipped.
    table = _read(bootstrap, OffsetRange(topic, 0, 5, 15), fail_on_data_loss=False)
    assert table.column("offset").to_pylist() == [5, 6, 7, 8, 9]
    # A start beyond the end: the fetch is out of range.
    with pytest.raises(DataLossError, match="offset 12 is out of range"):
        _read(bootstrap, OffsetRange(topic, 0, 12, 15))
    assert _read(bootstrap, OffsetRange(topic, 0, 12, 15), fail_on_data_loss=False).num_rows == 0


def test_worker_clients_close(bootstrap: str) -> None:
    client, _ = worker_client(bootstrap, {"client.id": "closing"})
    executor.close_worker_clients()
    assert client._closed
    assert worker_client(bootstrap, {"client.id": "closing"})[0] is not client
