"""The sink: batch and stream writers.

Two delivery modes (option ``deliveryMode``):

``staged`` (default)
    Each task writes its rows to an Arrow IPC file in a staging location and
    returns the file's path in its commit message; it publishes nothing.
    Only the driver's ``commit`` publishes, with one idempotent producer, and
    only the files of the tasks Spark accepted. A failed task attempt, or an
    aborted batch, therefore never reaches the topic. For streams, a
    ``(checkpoint, batchId)`` marker makes a repeated ``commit`` (Spark calls it
    again for the last batch after a crash) publish nothing twice, and an
    *intent* record written before publishing lets a commit that died half-way
    resume where it stopped (see ``_publish``). The delivery guarantee is in
    docs/spark.md.

``direct``
    Each task produces straight to the topic with an idempotent producer and
    flushes before it reports success (Spark's own Kafka sink): fast, scales
    with executors, at-least-once (a retried task or a replayed batch writes
    its rows again).

``transactional``
    Tasks stage as in ``staged``; the driver's ``commit`` publishes the whole
    micro-batch in one Kafka transaction, together with the batch id, written
    as the committed offset of the query's sink group (``send_offsets_to_
    transaction``). read_committed readers see the batch all at once or not at
    all. The transactional id is derived from the checkpoint location (or the
    ``transactionalId`` option), so a restarted driver's ``init_transactions``
    aborts whatever its predecessor left open, and a replayed commit of a batch
    whose transaction did commit finds its id in the sink group and publishes
    nothing (see ``_publish_transactionally``).

Either way rows leave Arrow in bulk: target partitions are computed per batch
(murmur2 in the compiled codec), rows are grouped by partition with Arrow
kernels, and ``Producer.send_columns`` encodes them from the Arrow buffers
straight into record batches. Only headers, when present, become Python
objects row by row.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from odradek.client import (
    AdminClient,
    Consumer,
    OffsetAndMetadata,
    Producer,
    ProduceResult,
    TopicPartition,
)
from odradek.protocol.columns import murmur2_partitions

from .arrow import HEADER_TYPE, codec_column
from .cluster import ClusterView
from .options import WriteOptions

log = logging.getLogger(__name__)

STAGED_SCHEMA = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
        pa.field("timestamp", pa.int64()),  # ms since the epoch; null: the producer's clock
    ]
)
_KEEP_DONE_MARKERS = 100


class SinkError(RuntimeError):
    pass


# ---------------------------------------------------------------------- input columns


def validate_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's Kafka sink rules: value required; key, headers, topic, partition optional."""
    by_name = {f.name: f.dataType for f in schema.fields}

    def check(name: str, ok: tuple[type[DataType], ...], what: str) -> None:
        if name in by_name and not isinstance(by_name[name], ok):
            raise SinkError(
                f"the sink's {name} column must be {what}, not {by_name[name].simpleString()}"
            )

    if "value" not in by_name:
        raise SinkError("the sink needs a value column (string or binary)")
    check("value", (StringType, BinaryType), "string or binary")
    check("key", (StringType, BinaryType), "string or binary")
    check("topic", (StringType,), "string")
    check("partition", (IntegerType,), "int")
    check("timestamp", (TimestampType, TimestampNTZType), "timestamp")
    if "headers" in by_name:
        h = by_name["headers"]
        ok = isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
        if ok:
            names = [f.name for f in h.elementType.fields]  # type: ignore[union-attr]
            types = [f.dataType for f in h.elementType.fields]  # type: ignore[union-attr]
            ok = (
                names == ["key", "value"]
                and isinstance(types[0], StringType)
                and isinstance(types[1], (BinaryType, StringType))
            )
        if not ok:
            raise SinkError(
                "the sink's headers column must be array<struct<key:string,value:binary>>"
            )
    if topic_option is None and "topic" not in by_name:
        raise SinkError("the sink needs a topic: set the topic option or add a topic column")


def normalize(batch: pa.RecordBatch, topic_option: str | None) -> pa.RecordBatch:
    """The input batch as STAGED_SCHEMA (the option ``topic`` overrides the column)."""
    n = batch.num_rows
    names = batch.schema.names

    def col(name: str, typ: pa.DataType) -> pa.Array:
        if name not in names:
            return pa.nulls(n, type=typ)
        arr = batch.column(names.index(name))
        return arr if arr.type == typ else arr.cast(typ)

    if topic_option is not None:
        topic = pa.repeat(topic_option, n) if n else pa.array([], type=pa.string())
    else:
        topic = col("topic", pa.string())
    if "timestamp" in names:
        ts = batch.column(names.index("timestamp"))
        ts = ts.cast(pa.timestamp("ms", tz=getattr(ts.type, "tz", None))).cast(pa.int64())
    else:
        ts = pa.nulls(n, type=pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            topic,
            col("partition", pa.int32()),
            col("key", pa.binary()),
            col("value", pa.binary()),
            col("headers", HEADER_TYPE),
            ts,
        ],
        schema=STAGED_SCHEMA,
    )


def _headers(raw: Any) -> list[tuple[str, bytes | None]]:
    if not raw:
        return []
    return [(h["key"], h["value"]) for h in raw]


def _fingerprint(key: Any, value: Any, headers: list[tuple[str, bytes | None]]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in (key, value):
        if part is None:
            h.update(b"\x00")
        else:
            h.update(b"\x01" + len(part).to_bytes(4, "big") + part)
    for hk, hv in headers:
        h.update(hk.encode() + b"\x00" + (hv if hv is not None else b"\xff"))
    return h.digest()


# ---------------------------------------------------------------------- bulk publishing


def _by_topic(batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
    """The rows of a staged batch per topic (one slice when there is one topic)."""
    topics = batch.column(0)
    if topics.null_count:
        raise SinkError("a row has no topic (null topic column, no topic option)")
    names = pc.unique(topics).to_pylist()
    if len(names) == 1:
        yield names[0], batch
        return
    for name in names:
        yield name, batch.filter(pc.equal(topics, name))


def target_partitions(
    batch: pa.RecordBatch, topic: str, num_partitions: int, keyless: int | None
) -> pa.Array:
    """Each row's partition: the partition column; else murmur2 of the key (Kafka's default
    partitioner); else ``keyless``, or, when that is None, murmur2 of the value (so a replayed
    batch lands the same way whatever the order of its rows). Computed in bulk."""
    n = batch.num_rows
    explicit = batch.column(1)
    if explicit.null_count < n:
        bad = pc.or_(pc.less(explicit, 0), pc.greater_equal(explicit, num_partitions))
        if pc.any(bad).as_py():
            part = pc.filter(explicit, bad)[0].as_py()
            raise SinkError(
                f"partition {part} does not exist in {topic} ({num_partitions} partitions)"
            )
        if explicit.null_count == 0:
            return explicit
    hashed = _murmur2_partitions(batch.column(2), num_partitions)
    if keyless is not None:
        fallback: Any = pa.scalar(keyless, pa.int32())
    else:
        values = pc.fill_null(batch.column(3), b"")
        fallback = _murmur2_partitions(values, num_partitions)
    by_key = pc.if_else(pc.greater_equal(hashed, 0), hashed, fallback)
    return pc.coalesce(explicit, by_key)


def _murmur2_partitions(column: pa.Array, num_partitions: int) -> pa.Array:
    raw = murmur2_partitions(codec_column(column), len(column), num_partitions)
    return pa.Array.from_buffers(pa.int32(), len(column), [None, pa.py_buffer(raw)])


def send_batch(
    producer: Producer, topic: str, batch: pa.RecordBatch, partitions: pa.Array
) -> list[ProduceResult]:
    """Queue the rows of a staged batch, grouped by partition (input order kept within
    each), through the producer's bulk path: Arrow buffers go straight to the codec."""
    results: list[ProduceResult] = []
    if batch.num_rows == 0:
        return results
    counts = pc.value_counts(partitions).to_pylist()
    if len(counts) > 1:
        order = pc.sort_indices(partitions)  # stable: input order within a partition
        batch = batch.take(order)
        counts.sort(key=lambda c: c["values"])
    start = 0
    for entry in counts:
        part, rows = int(entry["values"]), int(entry["counts"])
        chunk = batch.slice(start, rows)
        start += rows
        headers_col = chunk.column(4)
        headers = None
        if headers_col.null_count < rows:
            headers = [_headers(h) for h in headers_col.to_pylist()]
        timestamps = chunk.column(5)
        results.extend(
            producer.send_columns(
                topic,
                part,
                rows,
                values=codec_column(chunk.column(3)),
                keys=codec_column(chunk.column(2)) if chunk.column(2).null_count < rows else None,
                timestamps=codec_column(timestamps) if timestamps.null_count < rows else None,
                headers=headers,
            )
        )
    return results


def _check_delivered(results: list[ProduceResult], what: str) -> None:
    for r in results:
        if r.error is not None:
            raise SinkError(f"{what} failed: {r.error}")
        if not r.done():
            raise SinkError(f"{what} failed: a batch for {r.tp} was not acknowledged")


# ---------------------------------------------------------------------- staging storage


def _filesystem(location: str) -> tuple[pafs.FileSystem, str]:
    if "://" not in location and not location.startswith("file:"):
        location = os.path.abspath(location)
    return pafs.FileSystem.from_uri(location)


def _write_small(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write a marker file so that it appears whole (write aside, then rename)."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with fs.open_output_stream(tmp) as out:
        out.write(data)
    fs.move(tmp, path)


def _read_small(fs: pafs.FileSystem, path: str) -> bytes | None:
    info = fs.get_file_info(path)
    if info.type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as f:
        return f.read()


@dataclass
class StagedMessage(WriterCommitMessage):
    paths: list[str] = field(default_factory=list)
    rows: int = 0


@dataclass
class DirectMessage(WriterCommitMessage):
    rows: int = 0


def _producer(opts: WriteOptions, **extra: Any) -> Producer:
    settings = {
        "linger.ms": 5,
        "batch.size": 262_144,
        **opts.producer_settings,
        **extra,
        "bootstrap.servers": opts.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
    }
    return Producer(settings)


# ---------------------------------------------------------------------- writers


class _WriterBase:
    def __init__(self, options: WriteOptions, schema: StructType, *, streaming: bool) -> None:
        validate_schema(schema, options.topic)
        self.opts = options
        self.streaming = streaming
        if options.staging_location:
            root = options.staging_location
        elif streaming and options.checkpoint_location:
            root = options.checkpoint_location.rstrip("/") + "/odradek-sink"
        elif streaming:
            raise SinkError(
                "the streaming sink needs checkpointLocation (or stagingLocation) to stage "
                "rows and keep its commit markers"
            )
        else:
            root = os.path.join(tempfile.gettempdir(), "odradek-spark-staging")
        if "://" not in root and not root.startswith("file:"):
            root = os.path.abspath(root)
        self.root = root.rstrip("/")
        # One directory per writer instance: Spark builds one instance per batch or job on
        # the driver and pickles it to every task of that batch.
        self.instance = uuid.uuid4().hex

    # --- tasks (executors)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        if self.opts.mode == "direct":
            return self._write_direct(iterator)
        return self._write_staged(iterator)  # staged and transactional

    def _write_staged(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        fs, base = _filesystem(self.root)
        directory = f"{base}/staged/{self.instance}"
        path = f"{directory}/{uuid.uuid4().hex}.arrow"
        rows = 0
        stream = writer = None
        try:
            for batch in iterator:
                if batch.num_rows == 0:
                    continue
                staged = normalize(batch, self.opts.topic)
                if writer is None:
                    fs.create_dir(directory, recursive=True)
                    stream = fs.open_output_stream(path)
                    writer = pa.ipc.new_stream(stream, STAGED_SCHEMA)
                writer.write_batch(staged)
                rows += staged.num_rows
        finally:
            if writer is not None:
                writer.close()
            if stream is not None:
                stream.close()
        return StagedMessage([path] if rows else [], rows)

    def _write_direct(self, iterator: Iterator[pa.RecordBatch]) -> DirectMessage:
        producer = _producer(self.opts)
        results: list[ProduceResult] = []
        rows = 0
        keyless_turn = 0
        try:
            for batch in iterator:
                staged = normalize(batch, self.opts.topic)
                for topic, rows_of_topic in _by_topic(staged):
                    count = len(producer.partitions_for(topic))
                    # Keyless rows stick to one partition per input batch, then move on
                    # (Kafka's sticky partitioner, one input batch at a time).
                    keyless = keyless_turn % count
                    keyless_turn += 1
                    parts = target_partitions(rows_of_topic, topic, count, keyless)
                    results.extend(send_batch(producer, topic, rows_of_topic, parts))
                rows += staged.num_rows
            producer.flush()
        finally:
            producer.close()
        _check_delivered(results, "producing")
        return DirectMessage(rows)

    # --- driver

    def _staged_paths(self, messages: list[WriterCommitMessage | None]) -> list[str]:
        paths: list[str] = []
        for m in messages:
            if isinstance(m, StagedMessage):
                paths.extend(m.paths)
        return paths

    def _cleanup(self, fs: pafs.FileSystem, paths: list[str]) -> None:
        for d in sorted({p.rsplit("/", 1)[0] for p in paths}):
            with contextlib.suppress(OSError, FileNotFoundError):
                fs.delete_dir(d)

    def _publish(self, fs: pafs.FileSystem, paths: list[str], intent_path: str | None) -> int:
        """Publish staged rows in a fixed order; resumable through the intent file.

        Every row's partition is fixed before anything is sent (explicit column; the key's
        murmur2 hash, as the default partitioner; keyless rows round-robin in staged order),
        so the per-partition sequence of a batch is deterministic. The intent file holds the
        partition counts and each target partition's end offset before publishing. If it
        already exists, an earlier commit of this batch died part-way: each target partition
        is read from that offset and the batch's rows found there, in order, are skipped.
        """
        view = ClusterView(
            self.opts.bootstrap,
            client_id="odradek-spark-sink",
            allow_auto_create_topics=True,
            security=self.opts.security,
        )
        try:
            topics: set[str] = set()
            for path in paths:
                for batch in _read_staged(fs, path):
                    col = batch.column(0)
                    if col.null_count:
                        raise SinkError("a row has no topic (null topic column, no topic option)")
                    topics.update(col.unique().to_pylist())
            raw = _read_small(fs, intent_path) if intent_path else None
            intent = json.loads(raw) if raw else None
            if intent is None:
                counts = view.partition_counts(sorted(topics))
                before = view.latest(
                    [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
                )
                intent = {
                    "partitions": counts,
                    "before": [[tp.topic, tp.partition, off] for tp, off in before.items()],
                }
                if intent_path:
                    _write_small(fs, intent_path, json.dumps(intent).encode())
                skip: dict[TopicPartition, Counter[bytes]] = {}
            else:
                counts = {t: int(n) for t, n in intent["partitions"].items()}
                before = {TopicPartition(t, int(p)): int(o) for t, p, o in intent["before"]}
                skip = self._already_published(before, view.latest(list(before)))
                log.warning(
                    "resuming an interrupted sink commit; %d rows were already published",
                    sum(c.total() for c in skip.values()),
                )
            return self._send_all(fs, paths, counts, skip)
        finally:
            view.close()

    def _send_all(
        self,
        fs: pafs.FileSystem,
        paths: list[str],
        counts: Mapping[str, int],
        skip: Mapping[TopicPartition, Counter[bytes]],
    ) -> int:
        """Publish every staged row, in staged order within each target partition."""
        producer = _producer(self.opts)
        results: list[ProduceResult] = []
        sent = 0
        try:
            for path in paths:
                for batch in _read_staged(fs, path):
                    for topic, rows in _by_topic(batch):
                        parts = target_partitions(rows, topic, counts[topic], None)
                        if skip:
                            rows, parts = _skip_published(rows, topic, parts, skip)
                        results.extend(send_batch(producer, topic, rows, parts))
                        sent += rows.num_rows
            producer.flush()
        finally:
            producer.close()
        _check_delivered(results, "publishing the batch")
        return sent

    def _publish_transactionally(
        self, fs: pafs.FileSystem, paths: list[str], txn_id: str, batch_id: int | None
    ) -> int:
        """Publish the staged rows in one transaction; for a stream, with the batch id.

        ``init_transactions`` first: it fences any older driver with this
        transactional id and aborts the transaction it left open (a driver that died
        mid-publish), or waits for one it had already committed to complete. Then
        the sink group's committed offset says the last batch id committed (+1): a
        replayed ``commit`` of a batch at or below it publishes nothing. Otherwise
        the rows and the new batch id go out in one transaction.
        """
        producer = _producer(self.opts, **{"transactional.id": txn_id})
        try:
            producer.init_transactions()
            group = _sink_group(txn_id)
            if batch_id is not None and self._last_committed_batch(group) >= batch_id:
                log.info("batch %s was already committed; skipping the repeated commit", batch_id)
                return 0
            view = ClusterView(
                self.opts.bootstrap,
                client_id="odradek-spark-sink",
                allow_auto_create_topics=True,
                security=self.opts.security,
            )
            try:
                topics = sorted(
                    {t for p in paths for b in _read_staged(fs, p) for t in _topics_of(b)}
                )
                counts = view.partition_counts(topics)
            finally:
                view.close()
            producer.begin_transaction()
            try:
                results: list[ProduceResult] = []
                sent = 0
                for path in paths:
                    for batch in _read_staged(fs, path):
                        for topic, rows in _by_topic(batch):
                            parts = target_partitions(rows, topic, counts[topic], None)
                            results.extend(send_batch(producer, topic, rows, parts))
                            sent += rows.num_rows
                producer.flush()
                _check_delivered(results, "publishing the batch")
                if batch_id is not None and topics:
                    # The batch id rides in the transaction as a committed offset.
                    marker = {TopicPartition(topics[0], 0): OffsetAndMetadata(batch_id + 1, "")}
                    producer.send_offsets_to_transaction(marker, group)
                producer.commit_transaction()
            except BaseException:
                with contextlib.suppress(Exception):
                    producer.abort_transaction()
                raise
            return sent
        finally:
            producer.close()

    def _last_committed_batch(self, group: str) -> int:
        """The highest batch id the sink group has committed (-1: none yet)."""
        admin = AdminClient(
            {**self.opts.security, "bootstrap.servers": self.opts.bootstrap},
            client_id="odradek-spark-sink",
        )
        try:
            offsets = admin.list_consumer_group_offsets(group)
        finally:
            admin.close()
        return max((o.offset - 1 for o in offsets.values()), default=-1)

    def _transactional_id(self) -> str:
        if self.opts.transactional_id:
            return self.opts.transactional_id
        if self.streaming:
            digest = hashlib.sha256(self.root.encode()).hexdigest()[:20]
            return f"odradek-spark-{digest}"
        return f"odradek-spark-batch-{self.instance}"

    def _already_published(
        self, before: Mapping[TopicPartition, int], ends: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, Counter[bytes]]:
        """Fingerprints of the records written to each target partition since the intent.

        A row of the batch whose fingerprint (key, value, headers) is found there was
        published by the interrupted commit and is skipped. Matching ignores order, so it
        holds even if the replayed batch produced its rows in another order.
        """
        found: dict[TopicPartition, Counter[bytes]] = {}
        consumer = Consumer(
            {
                **self.opts.security,
                "bootstrap.servers": self.opts.bootstrap,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "max.poll.records": 5000,
            }
        )
        try:
            for tp, start in before.items():
                end = ends.get(tp, start)
                seen: Counter[bytes] = Counter()
                if end > start:
                    consumer.assign([tp])
                    consumer.seek(tp, start)
                    deadline = time.monotonic() + 60
                    while consumer.position(tp) < end:
                        for r in consumer.poll(timeout=1.0).records(tp):
                            if r.offset < end:
                                seen[_fingerprint(r.key, r.value, list(r.headers))] += 1
                        if time.monotonic() > deadline:
                            raise SinkError(f"timed out reading back {tp} to resume a commit")
                found[tp] = seen
        finally:
            consumer.close()
        return found


def _skip_published(
    rows: pa.RecordBatch,
    topic: str,
    parts: pa.Array,
    skip: Mapping[TopicPartition, Counter[bytes]],
) -> tuple[pa.RecordBatch, pa.Array]:
    """Drop the rows an interrupted commit already published (resume only: row by row)."""
    targets = parts.to_pylist()
    if not any(skip.get(TopicPartition(topic, p)) for p in set(targets)):
        return rows, parts
    keys = rows.column(2).to_pylist()
    values = rows.column(3).to_pylist()
    headers = rows.column(4).to_pylist()
    keep = []
    for i, part in enumerate(targets):
        seen = skip.get(TopicPartition(topic, part))
        if seen:
            fp = _fingerprint(keys[i], values[i], _headers(headers[i]))
            if seen[fp] > 0:
                seen[fp] -= 1
                keep.append(False)
                continue
        keep.append(True)
    mask = pa.array(keep, type=pa.bool_())
    return rows.filter(mask), parts.filter(mask)


def _topics_of(batch: pa.RecordBatch) -> list[str]:
    col = batch.column(0)
    if col.null_count:
        raise SinkError("a row has no topic (null topic column, no topic option)")
    return [str(t) for t in col.unique().to_pylist()]


def _sink_group(transactional_id: str) -> str:
    """The group whose committed offset records the stream's last committed batch id."""
    return f"{transactional_id}-sink"


def _read_staged(fs: pafs.FileSystem, path: str) -> Iterator[pa.RecordBatch]:
    with fs.open_input_stream(path) as f:
        reader = pa.ipc.open_stream(f)
        yield from reader


class OdradekBatchWriter(_WriterBase, DataSourceArrowWriter):
    """``df.write.format("odradek")``: staged rows are published when the job commits."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        super().__init__(options, schema, streaming=False)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.mode == "direct":
            return
        paths = self._staged_paths(messages)
        fs, _ = _filesystem(self.root)
        try:
            if paths and self.opts.mode == "transactional":
                self._publish_transactionally(fs, paths, self._transactional_id(), None)
            elif paths:
                self._publish(fs, paths, None)
        finally:
            self._cleanup(fs, paths)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.opts.mode == "direct":
            return
        fs, _ = _filesystem(self.root)
        self._cleanup(fs, self._staged_paths(messages))


class OdradekStreamWriter(_WriterBase, DataSourceStreamArrowWriter):
    """``df.writeStream.format("odradek")``: each micro-batch is published once, in commit."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        super().__init__(options, schema, streaming=True)

    def _marker_dir(self) -> tuple[pafs.FileSystem, str]:
        fs, base = _filesystem(self.root)
        d = f"{base}/commits"
        fs.create_dir(d, recursive=True)
        return fs, d

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.mode == "direct":
            return
        paths = self._staged_paths(messages)
        if self.opts.mode == "transactional":
            fs, _ = _filesystem(self.root)
            try:
                if paths:
                    self._publish_transactionally(fs, paths, self._transactional_id(), batchId)
            finally:
                self._cleanup(fs, paths)
            return
        fs, markers = self._marker_dir()
        done = f"{markers}/{batchId}.done"
        if fs.get_file_info(done).type == pafs.FileType.File:
            log.info("batch %s was already published; skipping the repeated commit", batchId)
            self._cleanup(fs, paths)
            return
        intent = f"{markers}/{batchId}.intent"
        rows = self._publish(fs, paths, intent) if paths else 0
        _write_small(
            fs, done, json.dumps({"batchId": batchId, "rows": rows, "time": time.time()}).encode()
        )
        self._cleanup(fs, paths)
        for stale in (intent, f"{markers}/{batchId - _KEEP_DONE_MARKERS}.done"):
            with contextlib.suppress(OSError, FileNotFoundError):
                fs.delete_file(stale)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.opts.mode == "direct":
            return
        fs, _ = _filesystem(self.root)
        self._cleanup(fs, self._staged_paths(messages))
