"""The producer: per-partition batching, a sender thread, idempotent retries.

How a record travels
--------------------
``send`` serializes the key and value, waits (up to ``max_block_ms``) for the
topic's metadata, picks a partition (explicit, else the partitioner), and
appends the record to the last open batch of that partition in the
``RecordAccumulator`` (a new batch when it is full). It returns a
``concurrent.futures.Future`` of ``RecordMetadata``.

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
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from odradek.client.cluster import KafkaClient
from odradek.client.config import ProducerConfig
from odradek.client.errors import (
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
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.records import Record, build_batch

log = logging.getLogger(__name__)

COMPRESSION_CODES = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_RECORD_OVERHEAD = 21  # worst-case varints + attributes of one record
_BATCH_OVERHEAD = 61
_MAX_PER_PARTITION_IN_FLIGHT = 5

DeliveryCallback = Callable[[KafkaError | None, RecordMetadata | None], None]


@dataclass(slots=True)
class _PendingRecord:
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int
    future: Future[RecordMetadata]
    callback: DeliveryCallback | None


def _record_size(key: bytes | None, value: bytes | None, headers: Iterable[Header]) -> int:
    size = _RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for hk, hv in headers:
        size += len(hk) + (len(hv) if hv else 0) + 10
    return size


@dataclass(eq=False)
class ProducerBatch:
    tp: TopicPartition
    created: float  # monotonic
    records: list[_PendingRecord] = field(default_factory=list)
    size: int = _BATCH_OVERHEAD
    closed: bool = False  # no more appends (drained once)
    base_sequence: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    attempts: int = 0
    retry_at: float = 0.0
    in_flight: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    _encoded: bytes | None = None
    _encoded_for: tuple[int, int, int] = (-2, -2, -2)

    def encode(self, compression: int) -> bytes:
        key = (self.producer_id, self.producer_epoch, self.base_sequence)
        if self._encoded is None or self._encoded_for != key:
            base_ts = self.records[0].timestamp
            recs = [
                Record(i, r.timestamp - base_ts, r.key, r.value, r.headers)
                for i, r in enumerate(self.records)
            ]
            self._encoded = build_batch(
                recs,
                timestamp_ms=base_ts,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=self.base_sequence,
                compression=compression,
            )
            self._encoded_for = key
        return self._encoded

    @property
    def count(self) -> int:
        return len(self.records)


class RecordAccumulator:
    """Per-partition deques of batches, bounded by ``buffer_memory`` (thread-safe)."""

    def __init__(self, config: ProducerConfig) -> None:
        self.config = config
        self.cond = threading.Condition()
        self.batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self.incomplete: set[ProducerBatch] = set()
        self.buffered = 0
        self.flushing = 0

    def would_open_batch(self, tp: TopicPartition, size: int) -> bool:
        """True when appending ``size`` bytes to ``tp`` needs a new batch (sticky hint)."""
        with self.cond:
            dq = self.batches.get(tp)
            if not dq:
                return True
            last = dq[-1]
            return last.closed or last.size + size > self.config.batch_size

    def append(self, tp: TopicPartition, rec: _PendingRecord, size: int, deadline: float) -> None:
        with self.cond:
            while self.buffered + size > self.config.buffer_memory and self.buffered > 0:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise KafkaTimeoutError(
                        f"buffer_memory ({self.config.buffer_memory} bytes) full for "
                        f"{self.config.max_block_ms} ms"
                    )
                self.cond.wait(remaining)
            dq = self.batches.setdefault(tp, deque())
            last = dq[-1] if dq else None
            if (
                last is None
                or last.closed
                or last.base_sequence >= 0
                or (last.records and last.size + size > self.config.batch_size)
            ):
                last = ProducerBatch(tp, time.monotonic())
                dq.append(last)
                self.incomplete.add(last)
                new_batch = True
            else:
                new_batch = False
            last.records.append(rec)
            last.size += size
            self.buffered += size
            # Wake the sender for a new batch (it recomputes when linger expires) and
            # for a full one (ready now).
            if new_batch or last.size >= self.config.batch_size:
                self.cond.notify_all()

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
        self._acc = RecordAccumulator(self.config)
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
        self._sender_error: BaseException | None = None
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
    ) -> Future[RecordMetadata]:
        """Queue a record; the future resolves to its RecordMetadata once acknowledged.

        ``on_delivery(error, metadata)`` runs on the sender thread after delivery
        (``error`` is None on success). Raises at once for a closed producer, a
        record that is too large, or metadata/buffer space unavailable within
        ``max_block_ms``.
        """
        if self._closing:
            raise IllegalStateError("cannot send after the producer is closed")
        key_bytes = self._serialize(self.config.key_serializer, key, "key")
        value_bytes = self._serialize(self.config.value_serializer, value, "value")
        hdrs = _normalize_headers(headers)
        size = _record_size(key_bytes, value_bytes, hdrs)
        if size + _BATCH_OVERHEAD > self.config.max_request_size:
            raise RecordTooLargeError(
                f"record of ~{size} bytes exceeds max_request_size {self.config.max_request_size}"
            )
        if size > self.config.buffer_memory:
            raise RecordTooLargeError(
                f"record of ~{size} bytes exceeds buffer_memory {self.config.buffer_memory}"
            )
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        partitions = self._client.wait_for_topic(topic, self.config.max_block_ms / 1000)
        if partition is not None:
            if partition not in partitions:
                raise KafkaError(
                    f"partition {partition} of topic {topic!r} does not exist "
                    f"(it has {len(partitions)} partitions)"
                )
            chosen = partition
        else:
            available = self._client.cluster.available_partitions_for(topic)
            chosen = self._partitioner.partition(
                topic, key_bytes, value_bytes, partitions, available
            )
            if key_bytes is None and self._partitioner.sticky:
                tp = TopicPartition(topic, chosen)
                if self._acc.would_open_batch(tp, size):
                    self._partitioner.on_new_batch(topic, partitions, available, chosen)
                    chosen = self._partitioner.partition(
                        topic, key_bytes, value_bytes, partitions, available
                    )
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        future: Future[RecordMetadata] = Future()
        rec = _PendingRecord(key_bytes, value_bytes, hdrs, ts, future, on_delivery)
        self._acc.append(TopicPartition(topic, chosen), rec, size, deadline)
        return future

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
                if not batch.done.wait(remaining):
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
        return self._client.wait_for_topic(topic, self.config.max_block_ms / 1000)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def producer_id(self) -> tuple[int, int]:
        """(producer id, epoch) of an idempotent producer; (-1, -1) before InitProducerId."""
        return self._producer_id, self._producer_epoch

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
            self._sender_error = exc
            self._fail_all(KafkaError(f"producer sender thread died: {exc}"))

    def _wait(self, timeout: float) -> None:
        with self._acc.cond:
            if self._completions.empty() and not self._force_close:
                self._acc.cond.wait(max(0.0, timeout))

    def _ensure_producer_id(self) -> bool:
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
            if int(resp.error_code) != 0:
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
        topics: dict[str, list[dict[str, Any]]] = {}
        try:
            for b in batches:
                topics.setdefault(b.tp.topic, []).append(
                    {"index": b.tp.partition, "records": b.encode(self._compression)}
                )
        except Exception as exc:  # compression library missing, etc.
            for b in batches:
                self._on_batch_result(b, node, KafkaError(f"cannot encode batch: {exc}"), None)
            return
        body = {
            "transactional_id": None,
            "acks": self._acks,
            "timeout": self.config.request_timeout_ms,
            "topic_data": [
                {"name": name, "partition_data": parts} for name, parts in topics.items()
            ],
        }
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
                if code == 0:
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
        if error.code in (3, 5, 6) or isinstance(error, KafkaConnectionError):
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
        if self._idempotent and batch.base_sequence >= 0:
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
        if batch.done.is_set():
            return
        for i, rec in enumerate(batch.records):
            meta: RecordMetadata | None = None
            if error is None and result is not None:
                base, append_ts = result
                meta = RecordMetadata(
                    batch.tp.topic,
                    batch.tp.partition,
                    base + i if base >= 0 else -1,
                    append_ts if append_ts is not None else rec.timestamp,
                )
                if not rec.future.done():
                    rec.future.set_result(meta)
            elif not rec.future.done():
                rec.future.set_exception(error if error is not None else KafkaError("failed"))
            if rec.callback is not None:
                try:
                    rec.callback(error, meta)
                except Exception:
                    log.exception("on_delivery callback raised")
        self._acc.release(batch)
        batch.done.set()

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
