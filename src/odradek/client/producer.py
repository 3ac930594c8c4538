"""The producer: per-partition batching, a sender thread, idempotent retries.

How a record travels
--------------------
``send`` serializes the key and value, waits (up to ``max_block_ms``) for the
topic's metadata (cached per metadata snapshot), picks a partition (explicit,
else the partitioner), and, under the ``RecordAccumulator``'s one lock, encodes
the record straight into the body of the last open batch of that partition (a
new batch when it is full) with the compiled codec (``protocol.columns``). It
returns a thin ``RecordFuture``: the batch's one ``ProduceResult`` plus the
record's index and timestamp (Java's FutureRecordMetadata over
ProduceRequestResult), so a record costs no Future, no lock of its own and no
thread hand-off. ``send_columns`` appends many rows of one partition at once
from Arrow-layout columns (the Spark sink), one batch at a time.

The sender thread drains batches that are *ready*: full (``batch_size``), or
older than ``linger_ms``, or wanted by ``flush``/``close``, or a retry whose
backoff has passed. Ready batches are grouped by partition leader into one
Produce request per broker (one batch per partition, up to
``max_request_size``), with at most ``max_in_flight_requests_per_connection``
requests in flight per broker. Responses are handed back to the sender thread
(never processed on the connection's reader thread), which completes futures
and runs ``on_delivery(error, metadata)`` callbacks there, like the Java
client's I/O thread.

Idempotence (default, as in Java 3.x)
--------------------------------------
The sender gets a producer id and epoch with InitProducerId before the first
batch. Each batch gets the partition's next sequence number when it is first
drained and keeps it through retries. Up to 5 batches per partition are in
flight. When one fails with a retriable error (connection lost, timeout,
NOT_LEADER...), it goes back to the front of its partition's queue, in
sequence order; batches after it fail too (OUT_OF_ORDER_SEQUENCE_NUMBER, or
the same connection error) and are queued behind it. A queued batch that
already has a sequence is only sent when nothing else of that partition is in
flight, so recovery resends one batch at a time in order. A batch the broker
had already written before the failure comes back as a duplicate (the broker
answers with the original offset or DUPLICATE_SEQUENCE_NUMBER), so a retry
never writes a record twice and never reorders records.

If a batch with a sequence fails for good (non-retriable error, retries or
``delivery_timeout_ms`` exhausted), later sequences can no longer be accepted,
so the sender waits for its in-flight requests, gets a fresh producer id and
restarts every partition's sequence at 0 (Java's "reset producer id").

Transactions (``transactional_id``)
-----------------------------------
``init_transactions`` gets the producer id and epoch from the transaction
coordinator (``client.transactions.TransactionManager``); records may only be
sent between ``begin_transaction`` and ``commit_transaction`` /
``abort_transaction``, and every batch is transactional. Before the sender
sends a partition's first batch of a transaction it adds the partition
(AddPartitionsToTxn, every new partition of the round in one request).
``commit_transaction`` flushes, then ends the transaction; a batch that failed
makes the transaction abortable (commit raises, abort works), being fenced
makes the producer unusable. ``send_offsets_to_transaction`` puts a consumer
group's offsets into the transaction (KIP-447).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any

from odradek.client.cluster import ClusterMetadata, KafkaClient
from odradek.client.config import ProducerConfig
from odradek.client.errors import (
    STALE_METADATA,
    DuplicateSequenceNumberError,
    IllegalStateError,
    InvalidProducerEpochError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    OutOfOrderSequenceNumberError,
    RecordTooLargeError,
    SerializationError,
    UnknownProducerIdError,
    make_error,
)
from odradek.client.partitioner import Partitioner, resolve_partitioner
from odradek.client.structs import Header, RecordMetadata, TopicPartition
from odradek.client.transactions import (
    ConsumerGroupMetadata,
    TransactionAbortedError,
    TransactionManager,
    TxnState,
    group_metadata_of,
    offsets_of,
)
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import EncodedBody
from odradek.protocol.columns import batch_from_body, encode_columns, encode_record
from odradek.protocol.errors import ErrorCode
from odradek.protocol.produce import encode_produce_request

Column = tuple[Any, Any, Any, int]
"""A column in Arrow's layout: (validity bitmap | None, offsets or int64 values, data, offset);
see ``odradek.protocol._codec_py``."""

log = logging.getLogger(__name__)

COMPRESSION_CODES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_RECORD_OVERHEAD = 21  # worst-case varints + attributes of one record
_BATCH_OVERHEAD = 61
_MAX_PER_PARTITION_IN_FLIGHT = 5

DeliveryCallback = Callable[[KafkaError | None, RecordMetadata | None], None]


class ProduceResult:
    """The outcome of one batch, shared by its records (Java's ProduceRequestResult).

    Completed once, on the sender thread: ``base_offset`` (-1 with acks=0 or for a
    duplicate), ``log_append_time`` (None unless the topic uses LogAppendTime) or
    ``error``. ``wait`` blocks until then.
    """

    __slots__ = ("_callbacks", "_done", "_latch", "base_offset", "error", "log_append_time", "tp")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        # A one-shot latch: a lock held from birth until completion. Waiters acquire and
        # release it in turn. (A threading.Event costs ~3 us to make, one per batch.)
        self._latch = threading.Lock()
        self._latch.acquire()
        self._done = False
        self._callbacks: list[Callable[[], None]] | None = None
        self.base_offset = -1
        self.log_append_time: int | None = None
        self.error: KafkaError | None = None

    def done(self) -> bool:
        return self._done

    def wait(self, timeout: float | None = None) -> bool:
        """Block until complete or ``timeout`` seconds pass; True when complete."""
        if self._done:
            return True
        if self._latch.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            self._latch.release()
        return self._done

    def add_done_callback(self, fn: Callable[[], None]) -> None:
        """Run ``fn()`` once complete (at once if it already is), on the completing thread."""
        with _CALLBACK_LOCK:
            if not self._done:
                if self._callbacks is None:
                    self._callbacks = []
                self._callbacks.append(fn)
                return
        fn()

    def complete(
        self, base_offset: int, log_append_time: int | None, error: KafkaError | None
    ) -> None:
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.error = error
        with _CALLBACK_LOCK:
            self._done = True
            callbacks, self._callbacks = self._callbacks, None
        self._latch.release()
        for fn in callbacks or ():
            try:
                fn()
            except Exception:
                log.exception("a done callback of a produced record raised")


_CALLBACK_LOCK = threading.Lock()  # only taken when futures get done-callbacks


class RecordFuture:
    """What ``send`` returns: a record's view of its batch's ``ProduceResult``.

    The methods of ``concurrent.futures.Future`` that make sense for a record:
    ``result``, ``exception``, ``done``, ``add_done_callback`` (cancelling is
    not possible, as in the Java client).
    """

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: ProduceResult, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp

    def done(self) -> bool:
        return self._batch.done()

    def running(self) -> bool:
        return not self._batch.done()

    def cancel(self) -> bool:
        return False

    def cancelled(self) -> bool:
        return False

    def _wait(self, timeout: float | None) -> ProduceResult:
        batch = self._batch
        if not batch.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout}s")
        return batch

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """The record's metadata once acknowledged; raises its error, or TimeoutError."""
        batch = self._wait(timeout)
        if batch.error is not None:
            raise batch.error
        return self._metadata(batch)

    def exception(self, timeout: float | None = None) -> KafkaError | None:
        return self._wait(timeout).error

    def add_done_callback(self, fn: Callable[[RecordFuture], Any]) -> None:
        self._batch.add_done_callback(lambda: fn(self))

    def _metadata(self, batch: ProduceResult) -> RecordMetadata:
        base = batch.base_offset
        tp = batch.tp
        return RecordMetadata(
            tp.topic,
            tp.partition,
            base + self._index if base >= 0 else -1,
            batch.log_append_time if batch.log_append_time is not None else self._timestamp,
        )


def _record_size(key: bytes | None, value: bytes | None, headers: Iterable[Header]) -> int:
    """An upper bound of a record's encoded size (decides whether it fits a batch)."""
    size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for hk, hv in headers:
        size += len(hk) * 4 + (len(hv) if hv else 0) + 10
    return size


class ProducerBatch:
    """One partition's records, encoded as they arrive into ``body`` (a v2 records section)."""

    __slots__ = (
        "_encoded",
        "_encoded_for",
        "attempts",
        "base_sequence",
        "base_timestamp",
        "body",
        "callbacks",
        "closed",
        "count",
        "created",
        "in_flight",
        "max_timestamp",
        "producer_epoch",
        "producer_id",
        "result",
        "retry_at",
        "size",
        "tp",
    )

    def __init__(self, tp: TopicPartition, created: float) -> None:
        self.tp = tp
        self.created = created  # monotonic
        self.body = bytearray()
        self.count = 0
        self.size = _BATCH_OVERHEAD  # header + body bytes
        self.base_timestamp = -1
        self.max_timestamp = -1
        self.result = ProduceResult(tp)
        # (index, timestamp, on_delivery) of records that asked for a callback
        self.callbacks: list[tuple[int, int, DeliveryCallback]] | None = None
        self.closed = False  # no more appends (drained once)
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1
        self.attempts = 0
        self.retry_at = 0.0
        self.in_flight = False
        self._encoded: bytes | None = None
        self._encoded_for: tuple[int, int, int] = (-2, -2, -2)

    def encode(self, compression: int, transactional: bool = False) -> bytes:
        """The batch with its header and CRC, for the current producer id and sequence."""
        key = (self.producer_id, self.producer_epoch, self.base_sequence)
        if self._encoded is None or self._encoded_for != key:
            self._encoded = batch_from_body(
                self.body,
                count=self.count,
                last_offset_delta=self.count - 1,
                base_timestamp=self.base_timestamp,
                max_timestamp=self.max_timestamp,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
                compression=compression,
                transactional=transactional,
            )
            self._encoded_for = key
        return self._encoded


class RecordAccumulator:
    """Per-partition deques of batches, bounded by ``buffer_memory`` (thread-safe).

    One lock (``cond``) covers everything: a record is checked for room, placed
    and encoded in one critical section.
    """

    def __init__(self, config: ProducerConfig) -> None:
        self.config = config
        # ``lock`` is the condition's own lock: hot paths take it directly (a C-level
        # ``with``), everything that waits or notifies goes through ``cond``.
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.buffered = 0
        self.flushing = 0

    def _wait_for_room(self, size: int, max_block_s: float) -> None:
        """Block (lock held) up to ``max_block_s`` until ``size`` more bytes fit in memory."""
        deadline = time.monotonic() + max_block_s
        while self.buffered + size > self.config.buffer_memory and self.buffered > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(
                    f"buffer_memory ({self.config.buffer_memory} bytes) full for "
                    f"{self.config.max_block_ms} ms"
                )
            self.cond.wait(remaining)

    def _open_batch(self, tp: TopicPartition, size: int) -> tuple[ProducerBatch, bool]:
        """The batch of ``tp`` a ``size``-byte record goes to, and whether it is new."""
        dq = self.batches.get(tp)
        if dq is None:
            dq = self.batches[tp] = deque()
        if dq:
            last = dq[-1]
            if not (
                last.closed
                or last.base_sequence >= 0
                or (last.count and last.size + size > self.config.batch_size)
            ):
                return last, False
        last = ProducerBatch(tp, time.monotonic())
        dq.append(last)
        self.incomplete.add(last)
        return last, True

    def append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Header, ...],
        timestamp: int,
        callback: DeliveryCallback | None,
        size: int,
        max_block_s: float,
        repick: Callable[[TopicPartition], TopicPartition] | None = None,
    ) -> RecordFuture:
        """Encode one record into ``tp``'s open batch. ``repick(tp)``, when given, is asked
        for another partition when the record would open a new batch (sticky partitioning)."""
        with self.lock:
            if self.buffered + size > self.config.buffer_memory:
                self._wait_for_room(size, max_block_s)
            # Fast path: the partition's last batch takes the record.
            dq = self.batches.get(tp)
            batch = dq[-1] if dq else None
            if (
                batch is not None
                and not batch.closed
                and batch.base_sequence < 0
                and batch.size + size <= self.config.batch_size
            ):
                new_batch = False
            else:
                batch, new_batch = self._open_batch(tp, size)
            if new_batch and repick is not None:
                other = repick(tp)
                if other != tp:
                    self._drop_if_empty(batch)
                    batch, new_batch = self._open_batch(other, size)
            index = batch.count
            if index == 0:
                batch.base_timestamp = timestamp
                batch.max_timestamp = timestamp
            elif timestamp > batch.max_timestamp:
                batch.max_timestamp = timestamp
            written = encode_record(
                batch.body, index, timestamp - batch.base_timestamp, key, value, headers or None
            )
            batch.count = index + 1
            batch.size += written
            self.buffered += written
            if callback is not None:
                if batch.callbacks is None:
                    batch.callbacks = []
                batch.callbacks.append((index, timestamp, callback))
            # Wake the sender for a new batch (it recomputes when linger expires) and
            # for a full one (ready now).
            if new_batch or batch.size >= self.config.batch_size:
                self.cond.notify_all()
            return RecordFuture(batch.result, index, timestamp)

    def _drop_if_empty(self, batch: ProducerBatch) -> None:
        if batch.count == 0:
            dq = self.batches[batch.tp]
            if dq and dq[-1] is batch:
                dq.pop()
            self.incomplete.discard(batch)

    def append_columns(
        self,
        tp: TopicPartition,
        rows: int,
        keys: Column | None,
        values: Column | None,
        timestamps: Column | None,
        headers: Sequence[Any] | None,
        max_block_s: float,
    ) -> list[ProduceResult]:
        """Encode ``rows`` rows into ``tp``'s batches, one batch per critical section."""
        results: list[ProduceResult] = []
        batch_size = self.config.batch_size
        row = 0
        while row < rows:
            with self.lock:
                self._wait_for_room(batch_size, max_block_s)
                batch, new_batch = self._open_batch(tp, 0)
                if not new_batch and batch.size >= batch_size:
                    batch, new_batch = self._open_batch(tp, batch_size + 1)
                now_ms = int(time.time() * 1000)
                before = len(batch.body)
                n, base_ts, max_ts = encode_columns(
                    batch.body,
                    batch.count,
                    batch.base_timestamp if batch.count else None,
                    now_ms,
                    keys,
                    values,
                    timestamps,
                    headers,
                    row,
                    rows,
                    max(0, batch_size - batch.size),
                )
                if n == 0 and batch.count == 0:
                    # One record larger than batch_size: a batch of its own, as send() does.
                    limit = self.config.max_request_size - _BATCH_OVERHEAD
                    n, base_ts, max_ts = encode_columns(
                        batch.body,
                        0,
                        None,
                        now_ms,
                        keys,
                        values,
                        timestamps,
                        headers,
                        row,
                        row + 1,
                        limit,
                    )
                    if n == 0:
                        self._drop_if_empty(batch)
                        raise RecordTooLargeError(
                            f"row {row} exceeds max_request_size {self.config.max_request_size}"
                        )
                if n == 0:  # the open batch is full: the next pass opens a new one
                    batch.closed = batch.closed or batch.count > 0
                    continue
                if batch.count == 0:
                    batch.base_timestamp = base_ts
                    batch.max_timestamp = max_ts
                elif max_ts > batch.max_timestamp:
                    batch.max_timestamp = max_ts
                written = len(batch.body) - before
                batch.count += n
                batch.size += written
                self.buffered += written
                if new_batch or not results or results[-1] is not batch.result:
                    results.append(batch.result)
                self.cond.notify_all()
            row += n
        return results

    def requeue(self, batch: ProducerBatch) -> None:
        """Put a failed batch back at the front, keeping sequence order."""
        with self.cond:
            dq = self.batches.setdefault(batch.tp, deque())
            batch.in_flight = False
            if batch.base_sequence < 0:
                dq.appendleft(batch)
                return
            i = 0
            while i < len(dq) and 0 <= dq[i].base_sequence < batch.base_sequence:
                i += 1
            dq.insert(i, batch)
            self.cond.notify_all()

    def release(self, batch: ProducerBatch) -> None:
        with self.cond:
            self.incomplete.discard(batch)
            self.buffered -= batch.size - _BATCH_OVERHEAD
            self.cond.notify_all()


class _TopicInfo:
    """A topic's partitions in one metadata snapshot, with their TopicPartition keys."""

    __slots__ = ("available", "cluster", "partitions", "topic", "tps")

    def __init__(
        self, topic: str, cluster: ClusterMetadata, partitions: list[int], available: list[int]
    ) -> None:
        self.topic = topic
        self.cluster = cluster
        self.partitions = partitions
        self.available = available
        self.tps = {p: TopicPartition(topic, p) for p in partitions}

    def tp(self, partition: int) -> TopicPartition:
        tp = self.tps.get(partition)
        return tp if tp is not None else TopicPartition(self.topic, partition)


class Producer:
    """A Kafka producer. See the module docs for how it works.

    ``Producer(bootstrap_servers="host:port", acks="all", linger_ms=5, ...)`` or
    ``Producer({"bootstrap.servers": ..., "linger.ms": 5})``.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, **settings: Any) -> None:
        self.config = ProducerConfig.from_settings(config, **settings)
        self._partitioner: Partitioner = resolve_partitioner(self.config.partitioner)
        self._compression = COMPRESSION_CODES[self.config.compression_type]
        self._idempotent = bool(self.config.enable_idempotence)
        self._acks = -1 if self.config.acks == "all" else int(self.config.acks)
        self._client = KafkaClient(self.config, allow_auto_create_topics=True)
        self._txn: TransactionManager | None = None
        if self.config.transactional_id is not None:
            self._txn = TransactionManager(
                self._client,
                self.config.transactional_id,
                self.config.transaction_timeout_ms,
                retry_backoff_ms=self.config.retry_backoff_ms,
                request_timeout_ms=self.config.request_timeout_ms,
            )
        self._acc = RecordAccumulator(self.config)
        self._topic_cache: dict[str, _TopicInfo] = {}
        self._max_block_s = self.config.max_block_ms / 1000
        # A record larger than this can never be sent (checked before anything else).
        self._max_record_size = min(
            self.config.max_request_size - _BATCH_OVERHEAD, self.config.buffer_memory
        )
        self._completions: queue.SimpleQueue[tuple[Any, ...]] = queue.SimpleQueue()
        self._producer_id = -1
        self._producer_epoch = -1
        self._next_seq: dict[TopicPartition, int] = {}
        self._partition_in_flight: dict[TopicPartition, int] = {}
        self._node_in_flight: dict[int, int] = {}
        self._need_pid_reset = False
        self._closing = False
        self._closed = False
        self._force_close = False
        self._pid_retry_at = 0.0
        self.retry_count = 0  # batches sent again after a retriable failure (for tests/metrics)
        self._sender = threading.Thread(
            target=self._run, name=f"odradek-producer-{self.config.client_id}", daemon=True
        )
        self._sender.start()

    # ------------------------------------------------------------------ public API

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Iterable[tuple[str, bytes | str | None]] | Mapping[str, Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> RecordFuture:
        """Queue a record; the returned future resolves to its RecordMetadata once acknowledged.

        ``on_delivery(error, metadata)`` runs on the sender thread after delivery
        (``error`` is None on success). Raises at once for a closed producer, a
        record that is too large, or metadata/buffer space unavailable within
        ``max_block_ms``.
        """
        if self._closing:
            raise IllegalStateError("cannot send after the producer is closed")
        if self._txn is not None:
            self._txn.check(TxnState.IN_TRANSACTION)
        config = self.config
        if config.key_serializer is not None or (key is not None and type(key) is not bytes):
            key = self._serialize(config.key_serializer, key, "key")
        if config.value_serializer is not None or (value is not None and type(value) is not bytes):
            value = self._serialize(config.value_serializer, value, "value")
        if headers:
            hdrs = _normalize_headers(headers)
            size = _record_size(key, value, hdrs)
        else:
            hdrs = ()
            size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
        if size > self._max_record_size:
            self._record_too_large(size)
        cached = self._topic_cache.get(topic)
        if cached is None or cached.cluster is not self._client.cluster:
            cached = self._refresh_topic(topic)
        partitions = cached.partitions
        repick = None
        if partition is None:
            partitioner = self._partitioner
            available = cached.available
            chosen = partitioner.partition(topic, key, value, partitions, available)
            if key is None and partitioner.sticky:

                def repick(tp: TopicPartition) -> TopicPartition:
                    partitioner.on_new_batch(topic, partitions, available, tp.partition)
                    return cached.tp(
                        partitioner.partition(topic, None, value, partitions, available)
                    )

        elif partition in cached.tps:
            chosen = partition
        else:
            raise KafkaError(
                f"partition {partition} of topic {topic!r} does not exist "
                f"(it has {len(partitions)} partitions)"
            )
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        return self._acc.append(
            cached.tp(chosen), key, value, hdrs, ts, on_delivery, size, self._max_block_s, repick
        )

    def _record_too_large(self, size: int) -> None:
        config = self.config
        if size + _BATCH_OVERHEAD > config.max_request_size:
            raise RecordTooLargeError(
                f"record of ~{size} bytes exceeds max_request_size {config.max_request_size}"
            )
        raise RecordTooLargeError(
            f"record of ~{size} bytes exceeds buffer_memory {config.buffer_memory}"
        )

    def send_columns(
        self,
        topic: str,
        partition: int,
        rows: int,
        *,
        values: Column | None,
        keys: Column | None = None,
        timestamps: Column | None = None,
        headers: Sequence[Iterable[Header] | None] | None = None,
    ) -> list[ProduceResult]:
        """Queue ``rows`` records for one partition from columns in Arrow's layout, in bulk.

        ``values`` and ``keys`` are binary columns ``(validity bitmap or None, int32
        offsets, data, offset)`` (a missing column means null for every row),
        ``timestamps`` an int64 column of ms (null: now), ``headers`` one entry per
        row (None or ``(str, bytes | None)`` pairs). The rows fill batches of
        ``batch_size`` one critical section each, encoded by the compiled codec;
        no per-record object is made. Returns the ``ProduceResult`` of every batch
        the rows went to: after ``flush``, each has ``error`` None on success.
        """
        if self._closing:
            raise IllegalStateError("cannot send after the producer is closed")
        if self._txn is not None:
            self._txn.check(TxnState.IN_TRANSACTION)
        cached = self._topic_cache.get(topic)
        if cached is None or cached.cluster is not self._client.cluster:
            cached = self._refresh_topic(topic)
        if partition not in cached.tps:
            raise KafkaError(
                f"partition {partition} of topic {topic!r} does not exist "
                f"(it has {len(cached.partitions)} partitions)"
            )
        return self._acc.append_columns(
            cached.tp(partition), rows, keys, values, timestamps, headers, self._max_block_s
        )

    def _refresh_topic(self, topic: str) -> _TopicInfo:
        """Wait (up to ``max_block_ms``) for ``topic``'s partitions; cache them per snapshot."""
        partitions = self._client.wait_for_topic(topic, self._max_block_s)
        cluster = self._client.cluster
        info = _TopicInfo(topic, cluster, partitions, cluster.available_partitions_for(topic))
        self._topic_cache[topic] = info
        return info

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait for it to complete (or ``timeout`` seconds)."""
        with self._acc.cond:
            pending = list(self._acc.incomplete)
            self._acc.flushing += 1
            self._acc.cond.notify_all()
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            for batch in pending:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                if not batch.result.wait(remaining):
                    raise KafkaTimeoutError(f"flush did not complete in {timeout}s")
        finally:
            with self._acc.cond:
                self._acc.flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued (up to ``timeout`` seconds), then stop. Idempotent."""
        if self._closed:
            return
        self._closing = True
        with contextlib.suppress(KafkaTimeoutError):
            if timeout != 0:
                self.flush(timeout)
        self._force_close = True
        with self._acc.cond:
            self._acc.cond.notify_all()
        self._sender.join(timeout=None if timeout is None else max(1.0, timeout))
        self._fail_all(KafkaError("producer closed before the record was delivered"))
        self._client.close()
        self._closed = True

    def partitions_for(self, topic: str) -> list[int]:
        return self._client.wait_for_topic(topic, self._max_block_s)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def producer_id(self) -> tuple[int, int]:
        """(producer id, epoch) of an idempotent producer; (-1, -1) before InitProducerId."""
        return self._producer_id, self._producer_epoch

    # ------------------------------------------------------------------ transactions

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise IllegalStateError("transactions need a producer with a transactional_id")
        if self._closing:
            raise IllegalStateError("the producer is closed")
        return self._txn

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self._max_block_s if timeout is None else timeout)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id: fences every older producer with it and aborts
        the transaction it left open. Call once, before the first transaction."""
        txn = self._transactions()
        pid, epoch = txn.init(self._deadline(timeout))
        self._adopt_producer_id(pid, epoch)

    def _adopt_producer_id(self, pid: int, epoch: int) -> None:
        with self._acc.cond:
            if (pid, epoch) != (self._producer_id, self._producer_epoch):
                self._next_seq.clear()  # a new epoch restarts every sequence at 0
            self._producer_id, self._producer_epoch = pid, epoch
            self._acc.cond.notify_all()

    def begin_transaction(self) -> None:
        """Start a transaction: records sent until commit or abort belong to it."""
        self._transactions().begin()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[Any, Any] | Iterable[Any],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        """Commit a consumer group's offsets with this transaction (KIP-447).

        ``offsets``: {TopicPartition: next offset to read (int or OffsetAndMetadata)};
        ``group_metadata``: ``consumer.group_metadata()`` (its generation and member
        id let the group fence a consumer that was replaced), or a group id.
        """
        self._transactions().send_offsets(
            offsets_of(offsets), group_metadata_of(group_metadata), self._deadline(timeout)
        )

    def commit_transaction(self, timeout: float | None = None) -> None:
        """Send everything, then commit: the records and offsets become visible to
        read_committed consumers together. Raises the error that made the transaction
        abortable (call ``abort_transaction``) or fatal. A commit that timed out may be
        called again (as Java's): EndTxn is idempotent at the coordinator."""
        txn = self._transactions()
        txn.check(TxnState.IN_TRANSACTION, TxnState.COMMITTING)
        deadline = self._deadline(timeout)
        self.flush(max(0.0, deadline - time.monotonic()))
        txn.check(TxnState.IN_TRANSACTION, TxnState.COMMITTING)
        txn.end(True, deadline)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Drop what was not sent, wait for what is in flight, then abort: nothing of the
        transaction becomes visible to read_committed consumers."""
        txn = self._transactions()
        if not txn.abortable():
            txn.check(TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR)
        deadline = self._deadline(timeout)
        dropped: list[ProducerBatch] = []
        with self._acc.cond:
            for dq in self._acc.batches.values():
                kept = [b for b in dq if b.in_flight]
                dropped.extend(b for b in dq if not b.in_flight)
                dq.clear()
                dq.extend(kept)
        aborted = TransactionAbortedError("the transaction was aborted before the record was sent")
        for batch in dropped:
            self._finish_batch(batch, aborted)
        for batch in list(self._acc.incomplete):
            if not batch.result.wait(max(0.0, deadline - time.monotonic())):
                raise KafkaTimeoutError("in-flight batches did not complete before the abort")
        txn.end(False, deadline)
        self._adopt_producer_id(txn.producer_id, txn.producer_epoch)

    # ------------------------------------------------------------------ helpers

    @staticmethod
    def _serialize(
        serializer: Callable[[Any], bytes | None] | None, obj: Any, what: str
    ) -> bytes | None:
        if serializer is not None:
            try:
                obj = serializer(obj)
            except Exception as exc:
                raise SerializationError(f"cannot serialize {what}: {exc}") from exc
        if obj is None or isinstance(obj, bytes):
            return obj
        if isinstance(obj, (bytearray, memoryview)):
            return bytes(obj)
        if isinstance(obj, str):
            return obj.encode()
        raise SerializationError(
            f"{what} must be bytes, str or None without a {what}_serializer, "
            f"not {type(obj).__name__}"
        )

    # ------------------------------------------------------------------ sender thread

    def _run(self) -> None:
        try:
            while True:
                if self._force_close:
                    return
                if self._closing and not self._acc.incomplete:
                    return
                self._process_completions()
                self._client.maybe_refresh(timeout_s=self.config.request_timeout_ms / 1000)
                if self._idempotent and not self._ensure_producer_id():
                    self._wait(self.config.retry_backoff_ms / 1000)
                    continue
                self._expire_batches()
                wait = self._send_ready()
                self._wait(wait)
        except BaseException as exc:  # pragma: no cover - a bug; fail loudly, not silently
            log.exception("producer sender thread died")
            self._fail_all(KafkaError(f"producer sender thread died: {exc}"))

    def _wait(self, timeout: float) -> None:
        with self._acc.cond:
            if self._completions.empty() and not self._force_close:
                self._acc.cond.wait(max(0.0, timeout))

    def _ensure_producer_id(self) -> bool:
        if self._txn is not None:
            return self._producer_id >= 0  # from init_transactions, never reset here
        if self._need_pid_reset:
            if any(self._partition_in_flight.values()):
                return False
            self._producer_id = -1
            self._need_pid_reset = False
        if self._producer_id >= 0:
            return True
        if time.monotonic() < self._pid_retry_at:
            return False
        node = self._client.least_loaded_node()
        if node is None:
            try:
                self._client.bootstrap(timeout_s=self.config.request_timeout_ms / 1000)
            except KafkaError as exc:
                log.debug("bootstrap failed: %s", exc)
            node = self._client.least_loaded_node()
        try:
            if node is None:
                raise KafkaConnectionError("no broker known")
            resp = self._client.request(
                node,
                ApiKey.INIT_PRODUCER_ID,
                {
                    "transactional_id": None,
                    "transaction_timeout": 60_000,
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
            if int(resp.error_code) != ErrorCode.NONE:
                raise make_error(int(resp.error_code), "InitProducerId")
        except KafkaError as exc:
            log.debug("InitProducerId failed: %s", exc)
            self._pid_retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000
            if not exc.retriable:
                self._fail_all(exc)
            return False
        self._producer_id = int(resp.producer_id)
        self._producer_epoch = int(resp.producer_epoch)
        self._next_seq.clear()
        with self._acc.cond:
            for dq in self._acc.batches.values():
                for batch in dq:
                    batch.base_sequence = -1
        log.debug("producer id %s epoch %s", self._producer_id, self._producer_epoch)
        return True

    def _expire_batches(self) -> None:
        now = time.monotonic()
        limit = self.config.delivery_timeout_ms / 1000
        expired: list[ProducerBatch] = []
        with self._acc.cond:
            for dq in self._acc.batches.values():
                while dq and not dq[0].in_flight and now - dq[0].created >= limit:
                    expired.append(dq.popleft())
        for batch in expired:
            self._finish_batch(
                batch,
                KafkaTimeoutError(
                    f"{batch.count} record(s) for {batch.tp} expired after "
                    f"{self.config.delivery_timeout_ms} ms (delivery_timeout_ms)"
                ),
            )

    def _send_ready(self) -> float:
        """Drain ready batches into Produce requests; return how long the loop may sleep."""
        now = time.monotonic()
        linger = self.config.linger_ms / 1000
        next_wake = 0.1
        by_node: dict[int, list[ProducerBatch]] = {}
        cluster = self._client.cluster
        unknown_leader = False
        with self._acc.cond:
            flushing = self._acc.flushing > 0 or self._closing
            for tp, dq in self._acc.batches.items():
                if not dq:
                    continue
                head = dq[0]
                if head.retry_at > now:
                    next_wake = min(next_wake, head.retry_at - now)
                    continue
                full = len(dq) > 1 or head.size >= self.config.batch_size
                expired = now - head.created >= linger
                if not (full or expired or flushing or head.attempts > 0):
                    next_wake = min(next_wake, head.created + linger - now)
                    continue
                leader = cluster.leader_for(tp)
                if leader < 0:
                    unknown_leader = True
                    continue
                by_node.setdefault(leader, []).append(head)
        if unknown_leader:
            self._client.request_update()
        if self._txn is not None and by_node:
            self._add_partitions_to_transaction(by_node)
        for node, heads in by_node.items():
            if (
                self._node_in_flight.get(node, 0)
                >= self.config.max_in_flight_requests_per_connection
            ):
                continue
            if self._need_pid_reset:
                break
            request_batches = self._drain_node(heads)
            if request_batches:
                self._send_produce(node, request_batches)
        return max(0.0, next_wake)

    def _add_partitions_to_transaction(self, by_node: dict[int, list[ProducerBatch]]) -> None:
        """Before a partition's first batch of the transaction: AddPartitionsToTxn (one
        request for every new partition); if that fails, its batches fail with it."""
        txn = self._txn
        assert txn is not None
        new = {h.tp for heads in by_node.values() for h in heads if h.tp not in txn.partitions}
        if not new:
            return
        with txn._lock:
            txn.pending.update(new)
        error = txn.add_pending_partitions(time.monotonic() + self._max_block_s)
        if error is None:
            return
        failed: list[ProducerBatch] = []
        with self._acc.cond:
            for tp in new:
                dq = self._acc.batches.get(tp)
                if dq:
                    failed.extend(b for b in dq if not b.in_flight)
                    dq.clear()
        for batch in failed:
            self._finish_batch(batch, error)
        for node in list(by_node):
            by_node[node] = [h for h in by_node[node] if h.tp not in new]

    def _drain_node(self, heads: list[ProducerBatch]) -> list[ProducerBatch]:
        out: list[ProducerBatch] = []
        size = 0
        with self._acc.cond:
            for head in heads:
                tp = head.tp
                dq = self._acc.batches.get(tp)
                if not dq or dq[0] is not head:
                    continue
                if self._idempotent:
                    inflight = self._partition_in_flight.get(tp, 0)
                    if inflight >= _MAX_PER_PARTITION_IN_FLIGHT:
                        continue
                    if head.base_sequence >= 0 and inflight > 0:
                        continue  # a retry: resend alone, in order
                if out and size + head.size > self.config.max_request_size:
                    break
                dq.popleft()
                head.closed = True
                head.in_flight = True
                head.attempts += 1
                if self._idempotent:
                    if head.base_sequence < 0:
                        seq = self._next_seq.get(tp, 0)
                        head.base_sequence = seq
                        self._next_seq[tp] = (seq + head.count) & 0x7FFFFFFF
                    head.producer_id = self._producer_id
                    head.producer_epoch = self._producer_epoch
                    self._partition_in_flight[tp] = self._partition_in_flight.get(tp, 0) + 1
                out.append(head)
                size += head.size
        return out

    def _send_produce(self, node: int, batches: list[ProducerBatch]) -> None:
        topics: dict[str, list[tuple[int, bytes]]] = {}
        try:
            for b in batches:
                topics.setdefault(b.tp.topic, []).append(
                    (b.tp.partition, b.encode(self._compression, self._txn is not None))
                )
        except Exception as exc:  # compression library missing, etc.
            for b in batches:
                self._on_batch_result(b, node, KafkaError(f"cannot encode batch: {exc}"), None)
            return
        topic_data = list(topics.items())
        acks, timeout_ms = self._acks, self.config.request_timeout_ms
        txn_id = self.config.transactional_id

        def body(version: int) -> EncodedBody:
            # The negotiated version is known only inside the connection.
            return encode_produce_request(version, txn_id, acks, timeout_ms, topic_data)

        self._node_in_flight[node] = self._node_in_flight.get(node, 0) + 1
        future = self._client.send(node, ApiKey.PRODUCE, body, expect_response=self._acks != 0)

        def done(f: Future[Any]) -> None:
            self._completions.put((node, batches, f))
            with self._acc.cond:
                self._acc.cond.notify_all()

        future.add_done_callback(done)

    def _process_completions(self) -> None:
        while True:
            try:
                node, batches, future = self._completions.get_nowait()
            except queue.Empty:
                return
            self._node_in_flight[node] = max(0, self._node_in_flight.get(node, 1) - 1)
            exc = future.exception()
            if exc is not None:
                error = exc if isinstance(exc, KafkaError) else KafkaConnectionError(str(exc))
                for b in batches:
                    self._on_batch_result(b, node, error, None)
                continue
            response = future.result()
            if response is None:  # acks=0
                for b in batches:
                    self._on_batch_result(b, node, None, (-1, None))
                continue
            results: dict[TopicPartition, Any] = {}
            for t in response.responses:
                for p in t.partition_responses:
                    results[TopicPartition(t.name, int(p.index))] = p
            for b in batches:
                p = results.get(b.tp)
                if p is None:
                    self._on_batch_result(
                        b, node, KafkaConnectionError(f"no response for {b.tp}"), None
                    )
                    continue
                code = int(p.error_code)
                if code == ErrorCode.NONE:
                    append_time = p.log_append_time
                    ts = None if append_time is None else int(append_time.timestamp() * 1000)
                    self._on_batch_result(b, node, None, (int(p.base_offset), ts))
                else:
                    self._on_batch_result(b, node, make_error(code, p.error_message), None)

    def _on_batch_result(
        self,
        batch: ProducerBatch,
        node: int,
        error: KafkaError | None,
        result: tuple[int, int | None] | None,
    ) -> None:
        tp = batch.tp
        if self._idempotent and batch.in_flight:
            self._partition_in_flight[tp] = max(0, self._partition_in_flight.get(tp, 1) - 1)
        batch.in_flight = False
        if error is None and result is not None:
            self._finish_batch(batch, None, result)
            return
        assert error is not None
        if isinstance(error, DuplicateSequenceNumberError):
            self._finish_batch(batch, None, (-1, None))
            return
        if self._txn is not None and not error.retriable:
            # In a transaction a failed batch is not retried with a new producer id: the
            # transaction must abort (fenced: the producer is done).
            self._finish_batch(batch, error)
            return
        if (
            isinstance(error, (UnknownProducerIdError, InvalidProducerEpochError))
            and self._idempotent
        ):
            self._need_pid_reset = True
            retriable = True
        elif isinstance(error, OutOfOrderSequenceNumberError) and self._idempotent:
            retriable = self._earlier_pending(batch)
        else:
            retriable = error.retriable
        if error.code in STALE_METADATA or isinstance(error, KafkaConnectionError):
            self._client.request_update()
        age = time.monotonic() - batch.created
        if (
            retriable
            and not self._closed
            and not self._force_close
            and batch.attempts <= self.config.retries
            and age < self.config.delivery_timeout_ms / 1000
        ):
            log.debug("retrying %s (attempt %d): %s", tp, batch.attempts, error)
            self.retry_count += 1
            batch.retry_at = time.monotonic() + self.config.retry_backoff_ms / 1000
            self._acc.requeue(batch)
            return
        if self._txn is None and self._idempotent and batch.base_sequence >= 0:
            self._need_pid_reset = True
        self._finish_batch(batch, error)

    def _earlier_pending(self, batch: ProducerBatch) -> bool:
        """An earlier sequence of the same partition is queued or in flight (so OOO is ours)."""
        with self._acc.cond:
            dq = self._acc.batches.get(batch.tp, ())
            for other in dq:
                if 0 <= other.base_sequence < batch.base_sequence:
                    return True
            for other in self._acc.incomplete:
                if (
                    other.tp == batch.tp
                    and other.in_flight
                    and 0 <= other.base_sequence < batch.base_sequence
                ):
                    return True
        return False

    def _finish_batch(
        self,
        batch: ProducerBatch,
        error: KafkaError | None,
        result: tuple[int, int | None] | None = None,
    ) -> None:
        if batch.result.done():
            return
        if error is not None and self._txn is not None:
            # A record of the transaction is lost: it can only abort. Its sequences are
            # left behind, so the abort also bumps the epoch (KIP-360).
            if batch.base_sequence >= 0:
                self._txn.epoch_bump_needed = True
            if not isinstance(error, TransactionAbortedError):
                self._txn.fail(error)
        if error is None and result is not None:
            base, append_ts = result
        else:
            base, append_ts = -1, None
            if error is None:
                error = KafkaError("failed")
        batch.result.complete(base, append_ts, error)
        for index, timestamp, callback in batch.callbacks or ():
            meta: RecordMetadata | None = None
            if error is None:
                meta = RecordMetadata(
                    batch.tp.topic,
                    batch.tp.partition,
                    base + index if base >= 0 else -1,
                    append_ts if append_ts is not None else timestamp,
                )
            try:
                callback(error, meta)
            except Exception:
                log.exception("on_delivery callback raised")
        self._acc.release(batch)

    def _fail_all(self, error: KafkaError) -> None:
        with self._acc.cond:
            batches = list(self._acc.incomplete)
            for dq in self._acc.batches.values():
                dq.clear()
        for batch in batches:
            self._finish_batch(batch, error)


def _normalize_headers(
    headers: Iterable[tuple[str, bytes | str | None]] | Mapping[str, Any] | None,
) -> tuple[Header, ...]:
    if not headers:
        return ()
    items = headers.items() if isinstance(headers, Mapping) else headers
    out: list[Header] = []
    for k, v in items:
        if isinstance(v, str):
            v = v.encode()
        elif v is not None and not isinstance(v, bytes):
            v = bytes(v)
        out.append((str(k), v))
    return tuple(out)
