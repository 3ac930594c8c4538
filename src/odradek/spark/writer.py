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
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
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

from odradek.client import Consumer, Producer, TopicPartition
from odradek.client.partitioner import key_partition

from .arrow import HEADER_TYPE
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
        topic = pa.array([topic_option] * n, type=pa.string())
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


def iter_rows(batch: pa.RecordBatch) -> Iterator[tuple[Any, ...]]:
    """(topic, partition, key, value, headers, timestamp) tuples of a staged batch."""
    cols = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
    return zip(*cols, strict=True)


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


class _Delivery:
    """Counts acknowledgements and keeps the first error (callbacks run on the sender)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.acked = 0
        self._lock = threading.Lock()

    def __call__(self, error: Any, _meta: Any) -> None:
        with self._lock:
            if error is not None and self.error is None:
                self.error = error
            elif error is None:
                self.acked += 1


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
        return self._write_staged(iterator)

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
        delivery = _Delivery()
        rows = 0
        try:
            for batch in iterator:
                staged = normalize(batch, self.opts.topic)
                for topic, part, key, value, headers, ts in iter_rows(staged):
                    if topic is None:
                        raise SinkError("a row has no topic (null topic column, no topic option)")
                    producer.send(
                        topic,
                        value,
                        key=key,
                        headers=_headers(headers),
                        partition=part,
                        timestamp_ms=ts,
                        on_delivery=delivery,
                    )
                    rows += 1
            producer.flush()
        finally:
            producer.close()
        if delivery.error is not None:
            raise SinkError(f"producing failed: {delivery.error}")
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

    def _plan(
        self, fs: pafs.FileSystem, paths: list[str], counts: Mapping[str, int]
    ) -> Iterator[tuple[TopicPartition, Any, Any, list[Any], Any]]:
        """(target partition, key, value, headers, timestamp) for every staged row, in order."""
        for path in paths:
            for batch in _read_staged(fs, path):
                for topic, part, key, value, headers, ts in iter_rows(batch):
                    n = counts[topic]
                    if part is None:
                        # Keyed rows: murmur2 like the default partitioner. Keyless rows: a
                        # hash of the value, so a replayed batch lands the same way whatever
                        # order its rows come in.
                        part = key_partition(key if key is not None else (value or b""), n)
                    elif not 0 <= part < n:
                        raise SinkError(
                            f"partition {part} does not exist in {topic} ({n} partitions)"
                        )
                    yield TopicPartition(topic, part), key, value, _headers(headers), ts

    def _send_all(
        self,
        fs: pafs.FileSystem,
        paths: list[str],
        counts: Mapping[str, int],
        skip: Mapping[TopicPartition, Counter[bytes]],
    ) -> int:
        producer = _producer(self.opts)
        delivery = _Delivery()
        sent = 0
        try:
            for tp, key, value, headers, ts in self._plan(fs, paths, counts):
                seen = skip.get(tp)
                if seen:
                    fp = _fingerprint(key, value, headers)
                    if seen[fp] > 0:
                        seen[fp] -= 1
                        continue
                producer.send(
                    tp.topic,
                    value,
                    key=key,
                    headers=headers,
                    partition=tp.partition,
                    timestamp_ms=ts,
                    on_delivery=delivery,
                )
                sent += 1
            producer.flush()
        finally:
            producer.close()
        if delivery.error is not None:
            raise SinkError(f"publishing the batch failed: {delivery.error}")
        return sent

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
            if paths:
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
