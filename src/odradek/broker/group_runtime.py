"""The group coordinator runtime: the I/O shell around the pure coordinator core.

One :class:`ShardRunner` per ``__consumer_offsets`` partition owns a
``GroupCoordinatorShard`` and a queue. Its worker takes one request or due
timer at a time, runs it through the core, appends the resulting records to
the partition, replays them into the core, and only then answers: a response
never announces state that is not durable. Requests for a partition that is
still being replayed at start-up get COORDINATOR_LOAD_IN_PROGRESS (or the
core's other loading answers).

Clocks: the core's ``now_ms`` is the event loop's monotonic clock, the clock
the timers run on, so timers and the deadlines they guard always agree and a
wall-clock step (NTP) moves neither. The wall clock only stamps records.

Failures stay as small as Kafka keeps them. A call into the core is atomic:
if it raises, or its records cannot be appended (too large for
``max.message.bytes``), the core undoes it and only the request that caused
it gets an error; a failed timer call is retried with backoff. Only when the
log and memory may disagree (an append failed half-way, or replaying appended
records failed) is the partition reloaded, and a load that fails is retried
with backoff, never left "loading" for good. Every failure is logged and
counted (``ShardRunner.operation_failures``, ``reloads``, ``load_failures``:
exported as metrics).

Timers requested by the core are asyncio timers that, when due, enqueue the
key on the same queue, so timers and requests never run concurrently.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from odradek.broker.config import BrokerConfig
from odradek.broker.topics import Topic, TopicManager
from odradek.coordinator import (
    CoordinatorConfig,
    CoordinatorRecord,
    ErrorCode,
    GroupCoordinatorShard,
    Result,
    error_response,
    loading_response,
    partition_for,
)
from odradek.coordinator.events import log_events
from odradek.coordinator.metadata import EMPTY_IMAGE, TopicImage, TopicsImage
from odradek.coordinator.routing import OFFSETS_TOPIC
from odradek.coordinator.timer import IdGenerator
from odradek.coordinator.txn_offsets import TxnOffsetCommitRequest
from odradek.coordinator.types import (
    CoordinatorEvent,
    OffsetCommitRequest,
    Request,
    RequestToken,
    Response,
)
from odradek.log import PartitionLog
from odradek.log.errors import LogError, MessageTooLargeError
from odradek.protocol.records import (
    build_batch,
    build_end_txn_marker,
    decode_batch_records,
    iter_batches,
    marker_is_abort,
)

log = logging.getLogger("odradek.coordinator.runtime")

REPLAY_YIELD_EVERY = 2000  # records replayed between yields to the event loop
QUEUE_BOUND = 10000
TIMER_RETRY_MS = (1_000, 30_000)  # first and largest backoff for a failed timer call
LOAD_RETRY_S = (0.5, 30.0)  # first and largest backoff for a failed load
# group.consumer.assignors takes Kafka's class names too.
ASSIGNOR_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def loop_clock_ms() -> int:
    """The running event loop's monotonic clock, the one its timers fire on."""
    return int(asyncio.get_running_loop().time() * 1000)


class UuidIds:
    """Random member-id suffixes, as Kafka's Uuid.randomUuid()."""

    def new_uuid(self) -> str:
        return str(uuid.uuid4())


class AsyncioTimer:
    """The core's keyed timers on the event loop; a due key goes onto the shard's queue.

    Each schedule gets a sequence number that travels with its fire, so the
    worker can drop a fire whose key was rescheduled or cancelled while the
    fire waited in the queue (``take_fired``).
    """

    def __init__(self, fire: Callable[[str, int], None], now_ms: Callable[[], int]) -> None:
        self._fire = fire
        self._now_ms = now_ms
        self._handles: dict[str, asyncio.TimerHandle] = {}
        self._fired: dict[str, int] = {}  # key -> sequence of its fire still in the queue
        self._seq = 0

    def schedule(self, key: str, deadline_ms: int) -> None:
        self.cancel(key)
        self._seq += 1
        delay_s = max(deadline_ms - self._now_ms(), 0) / 1000
        loop = asyncio.get_running_loop()
        self._handles[key] = loop.call_later(delay_s, self._due, key, self._seq)

    def cancel(self, key: str) -> None:
        self._fired.pop(key, None)
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _due(self, key: str, seq: int) -> None:
        self._handles.pop(key, None)
        self._fired[key] = seq
        self._fire(key, seq)

    def take_fired(self, key: str, seq: int) -> bool:
        """True once for the latest fire of ``key``; False for a superseded one."""
        if self._fired.get(key) != seq:
            return False
        del self._fired[key]
        return True

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()
        self._fired.clear()


@dataclass(slots=True)
class _Pending:
    request: Request
    future: asyncio.Future[Response]


# A transactional write's producer: (producer id, epoch), or None for a plain one.
Transaction = tuple[int, int] | None


class AppendRefused(Exception):
    """The log refused a call's records before writing any of them."""

    def __init__(self, reason: str, *, too_large: bool, error_code: int = -1) -> None:
        super().__init__(reason)
        self.too_large = too_large  # over max.message.bytes (else: any other refusal)
        self.error_code = error_code  # the log's Kafka error code (-1: unknown)


class LogAndMemoryDiverged(Exception):
    """Records may be in the log without being in memory: only a reload can tell."""


class ReplicationGate(Protocol):
    """How a coordinator partition's runner sees replication (cluster mode)."""

    def high_watermark(self) -> int:
        """Everything below this offset is on every ISR member."""
        ...

    def appended(self) -> None:
        """The runner appended records: followers should fetch them now."""
        ...


class ShardRunner:
    """The serial executor of one ``__consumer_offsets`` partition."""

    def __init__(
        self,
        partition: int,
        plog: PartitionLog,
        config: CoordinatorConfig,
        *,
        wall_ms: Callable[[], int] = wall_clock_ms,
        mono_ms: Callable[[], int] = loop_clock_ms,
        ids: IdGenerator | None = None,
        on_events: Callable[[list[CoordinatorEvent]], None] | None = None,
    ) -> None:
        self.partition = partition
        self.plog = plog
        # The core sizes what it writes by this partition's own max.message.bytes.
        self.config = dataclasses.replace(config, max_message_bytes=plog.config.max_message_bytes)
        self.wall_ms = wall_ms
        self.mono_ms = mono_ms
        self.ids = ids or UuidIds()
        self.image: TopicsImage = EMPTY_IMAGE  # the topics consumer groups assign
        self.loaded = False
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(QUEUE_BOUND)
        self.timer = AsyncioTimer(self._enqueue_timer, mono_ms)
        self.shard = self._new_shard()
        self._pending: dict[int, _Pending] = {}
        self._next_token = 0
        self._on_events = on_events
        # Cluster mode (odradek.cluster): set when this broker hosts the partition. The
        # runner serves only while its broker leads it, and answers only once the
        # ISR holds what it wrote (acks=all): responses wait in `_deferred`, in order.
        self.gate: ReplicationGate | None = None
        self.leading = True  # a single node leads every partition
        # (offset the high watermark must pass, what to do then, what to do if leadership
        # goes first), in offset order.
        self._deferred: collections.deque[tuple[int, Callable[[], None], Callable[[], None]]] = (
            collections.deque()
        )
        self._worker: asyncio.Task[None] | None = None
        self._timer_failures: dict[str, int] = {}
        # Counters, exported as metrics.
        self.operation_failures = 0  # calls that failed alone (core exception, too large)
        self.reloads = 0  # reloads after the log and memory may have diverged
        self.load_failures = 0  # loads that failed and were retried

    def _new_shard(self) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(self.config, timer=self.timer, ids=self.ids)
        shard.update_metadata(self.image)
        return shard

    def update_metadata(self, image: TopicsImage) -> None:
        """The topics changed: the shard sees them from its next call on (never mid-call:
        calls run synchronously on this event loop)."""
        self.image = image
        self.shard.update_metadata(image)

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._worker = asyncio.create_task(self._run(), name=f"coordinator-{self.partition}")

    async def stop(self) -> None:
        await self._stop_worker()
        self._fail_queued(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        self._fail_pending()

    async def _stop_worker(self) -> None:
        """Stop the serial executor and its timers (what it was doing is abandoned)."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        self.timer.cancel_all()

    def _fail_queued(self, error: ErrorCode) -> None:
        """Answer what still waits in the queue: the executor was stopped and will not
        take it (timers are armed again by the next load)."""
        while not self._queue.empty():
            kind, item = self._queue.get_nowait()
            future = item[-1] if kind != "timer" else None
            if future is None or future.done():
                continue
            if kind == "request":
                future.set_result(error_response(item[0], error))
            else:  # a transaction marker: not written
                future.set_exception(
                    ConnectionError(f"{OFFSETS_TOPIC}-{self.partition}: {error.name}")
                )

    def _fail_pending(self, error: ErrorCode = ErrorCode.COORDINATOR_NOT_AVAILABLE) -> None:
        """Answer every request still waiting with `error` (clients retry or rediscover)."""
        while self._deferred:
            _, _, abandon = self._deferred.popleft()
            abandon()
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_result(error_response(pending.request, error))
        self._pending.clear()

    # --- cluster mode: following leadership of the partition ----------------------------

    def become_leader(self) -> None:
        """This broker now leads the partition: load its groups (LOAD_IN_PROGRESS meanwhile)."""
        self.leading = True
        if self._worker is None:
            self.loaded = False
            self.start()

    async def resign(self) -> None:
        """Another broker leads the partition now: unload its groups (NOT_COORDINATOR)."""
        self.leading = False
        await self._stop_worker()
        self._timer_failures.clear()
        if self.loaded:
            unloaded = self.shard.on_unloaded()
            self._answer_all(unloaded)
            self._deliver_events(unloaded)
        self.loaded = False
        self._fail_queued(ErrorCode.NOT_COORDINATOR)
        self._fail_pending(ErrorCode.NOT_COORDINATOR)
        self.shard = self._new_shard()
        log.info("%s-%d: unloaded (no longer leader)", OFFSETS_TOPIC, self.partition)

    def replicated(self, high_watermark: int) -> None:
        """The ISR holds everything below `high_watermark`: answer what waited for it."""
        while self._deferred and self._deferred[0][0] <= high_watermark:
            _, act, _ = self._deferred.popleft()
            act()

    def _when_replicated(
        self, act: Callable[[], None], abandon: Callable[[], None] = lambda: None
    ) -> bool:
        """In a cluster, hold `act` until the ISR has everything written so far (and
        everything held before it has run); True if held."""
        gate = self.gate
        if gate is None:
            return False
        end = self.plog.end_offset
        if not self._deferred and gate.high_watermark() >= end:
            return False
        self._deferred.append((end, act, abandon))
        return True

    async def _load_until_loaded(self) -> None:
        """Load the partition; a failed load is reported, counted and retried with backoff."""
        delay_s, max_delay_s = LOAD_RETRY_S
        while True:
            try:
                await self._load()
                return
            except Exception:
                self.load_failures += 1
                self.timer.cancel_all()
                log.exception(
                    "loading %s-%d failed (%d failures so far); retrying in %.1fs",
                    OFFSETS_TOPIC,
                    self.partition,
                    self.load_failures,
                    delay_s,
                )
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, max_delay_s)

    async def _load(self) -> None:
        """Replay the partition from its start into a fresh shard; state is what records say."""
        started = time.monotonic()
        shard = self._new_shard()
        count = 0
        for batch in self.plog.iter_batches_from(self.plog.start_offset):
            for pos, header in iter_batches(batch):
                if header.is_control:
                    if header.producer_id >= 0:  # a transaction marker (TxnOffsetCommit)
                        commit = not marker_is_abort(batch, pos)
                        shard.replay_end_transaction(header.producer_id, commit)
                    continue
                producer_id = header.producer_id if header.is_transactional else -1
                for record in decode_batch_records(batch, pos, header):
                    if record.key is None:
                        continue
                    shard.replay(
                        CoordinatorRecord(record.key, record.value),
                        producer_id=producer_id,
                        offset=record.offset,
                    )
                    count += 1
                    if count % REPLAY_YIELD_EVERY == 0:
                        await asyncio.sleep(0)
        result = shard.on_loaded(self.mono_ms(), wall_ms=self.wall_ms())
        self.shard = shard
        self._append_and_replay(result)  # e.g. a loaded group over group.max.size rebalances
        self._deliver(result)
        self.loaded = True
        if count:
            log.info(
                "loaded %s-%d: %d records in %.3fs",
                OFFSETS_TOPIC,
                self.partition,
                count,
                time.monotonic() - started,
            )

    async def _reload(self) -> None:
        """The log and memory may disagree: fail what waits and rebuild from the log."""
        self.reloads += 1
        self.loaded = False
        log.error("reloading %s-%d from its log", OFFSETS_TOPIC, self.partition)
        self._deliver(self.shard.on_unloaded())
        self._fail_pending()
        self.timer.cancel_all()
        self._timer_failures.clear()
        await self._load_until_loaded()

    # --- entry points ------------------------------------------------------------------

    async def call(self, request: Request) -> Response:
        """Run `request` through the core; resolves when its response is ready."""
        if not self.leading:
            return error_response(request, ErrorCode.NOT_COORDINATOR)
        if not self.loaded:
            return loading_response(request)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        await self._queue.put(("request", (request, future)))
        return await future

    async def complete_transaction(
        self, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """Write a transaction's COMMIT or ABORT marker here and apply it (the transaction
        coordinator's marker for this partition). Raises if the marker could not be written
        (in a cluster: also when this broker does not lead the partition)."""
        if not self.leading or not self.loaded:
            raise RuntimeError(f"{OFFSETS_TOPIC}-{self.partition} is not served here now")
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        await self._queue.put(("marker", (producer_id, producer_epoch, commit, future)))
        await future

    def _enqueue_timer(self, key: str, seq: int) -> None:
        try:
            self._queue.put_nowait(("timer", (key, seq)))
        except asyncio.QueueFull:
            # Never drop a timer: retry shortly (the core re-checks deadlines anyway).
            asyncio.get_running_loop().call_later(0.01, self._enqueue_timer, key, seq)

    # --- the serial executor -----------------------------------------------------------

    async def _run(self) -> None:
        await self._load_until_loaded()
        while True:
            kind, item = await self._queue.get()
            try:
                if kind == "request":
                    self._serve(*item)
                elif kind == "marker":
                    self._write_marker(*item)
                else:
                    key, seq = item
                    if self.timer.take_fired(key, seq):
                        self._expire(key)
            except Exception:
                # LogAndMemoryDiverged, or a bug in this loop: either way only the log
                # can say what is true now.
                log.exception("%s-%d: log and memory may disagree", OFFSETS_TOPIC, self.partition)
                await self._reload()

    def _serve(self, request: Request, future: asyncio.Future[Response]) -> None:
        if future.cancelled():
            return
        token = self._next_token
        self._next_token += 1
        self._pending[token] = _Pending(request, future)
        try:
            result = self.shard.handle(self.mono_ms(), token, request, wall_ms=self.wall_ms())
        except Exception:
            # The core undid the call: only this request fails.
            self.operation_failures += 1
            log.exception(
                "%s-%d: %s failed; answered UNKNOWN_SERVER_ERROR, nothing changed",
                OFFSETS_TOPIC,
                self.partition,
                type(request).__name__,
            )
            self._answer(token, error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR))
            return
        txn = None
        if isinstance(request, TxnOffsetCommitRequest):
            txn = (request.producer_id, request.producer_epoch)
        refused = self._commit(result, type(request).__name__, txn)
        if refused is not None:
            self._answer(token, error_response(request, _refused_error(request, refused)))

    def _write_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, future: asyncio.Future[Response]
    ) -> None:
        if future.cancelled():
            return
        marker = build_end_txn_marker(
            producer_id, producer_epoch, commit=commit, timestamp_ms=self.wall_ms()
        )
        try:
            self.plog.append(marker, from_client=False)
        except Exception as exc:
            future.set_exception(exc)
            return
        if self.gate is not None:
            self.gate.appended()
        # Written (in a cluster: once on the whole ISR); a failed replay below reloads.
        lost = RuntimeError(f"{OFFSETS_TOPIC}-{self.partition}: leadership moved")
        if not self._when_replicated(lambda: _resolve(future), lambda: _fail(future, lost)):
            _resolve(future)
        try:
            self.shard.replay_end_transaction(producer_id, commit)
        except Exception as exc:
            raise LogAndMemoryDiverged("replay of a transaction marker failed") from exc

    def _expire(self, key: str) -> None:
        try:
            result = self.shard.on_timer(self.mono_ms(), key, wall_ms=self.wall_ms())
        except Exception:
            self.operation_failures += 1
            log.exception("%s-%d: timer %s failed", OFFSETS_TOPIC, self.partition, key)
            self._retry_timer(key)
            return
        if self._commit(result, f"timer {key}") is None:
            self._timer_failures.pop(key, None)
        else:
            self._retry_timer(key)

    def _retry_timer(self, key: str) -> None:
        """The core kept the failed timer's state; fire it again after a growing backoff."""
        failures = self._timer_failures.get(key, 0) + 1
        self._timer_failures[key] = failures
        first, largest = TIMER_RETRY_MS
        backoff = min(first * 2 ** (failures - 1), largest)
        self.shard.timer.schedule(key, self.mono_ms() + backoff)
        log.warning("%s-%d: timer %s retried in %d ms", OFFSETS_TOPIC, self.partition, key, backoff)

    def _commit(self, result: Result, what: str, txn: Transaction = None) -> AppendRefused | None:
        """Append, replay, then answer: the order that keeps responses truthful.

        Returns why, if the log refused the records before writing any: the
        core has undone the call and its responses are dropped (the caller
        answers the request that caused it). Raises LogAndMemoryDiverged when
        only a reload can tell what is durable.
        """
        try:
            self._append_and_replay(result, txn)
        except AppendRefused as refused:
            self.shard.abort()
            self.operation_failures += 1
            log.error("%s-%d: %s undone: %s", OFFSETS_TOPIC, self.partition, what, refused)
            return refused
        self._deliver(result)
        return None

    def _append_and_replay(self, result: Result, txn: Transaction = None) -> None:
        if not result.records:
            return
        batches = self._batches(result, txn)
        offsets: list[int] = []
        for index, (batch, count) in enumerate(batches):
            try:
                info = self.plog.append(batch, from_client=False)
            except LogError as exc:
                if index == 0:  # validated before anything was written
                    too_large = isinstance(exc, MessageTooLargeError)
                    raise AppendRefused(
                        str(exc), too_large=too_large, error_code=exc.error_code
                    ) from exc
                raise LogAndMemoryDiverged(f"append of batch {index + 1}") from exc
            except Exception as exc:
                raise LogAndMemoryDiverged("append failed") from exc
            offsets.extend(range(info.base_offset, info.base_offset + count))
        producer_id = txn[0] if txn is not None else -1
        try:
            for record, offset in zip(result.records, offsets, strict=True):
                self.shard.replay(record, producer_id=producer_id, offset=offset)
        except Exception as exc:
            raise LogAndMemoryDiverged("replay of appended records failed") from exc

    def _batches(self, result: Result, txn: Transaction = None) -> list[tuple[bytes, int]]:
        """(batch, records in it): one batch for an atomic result; as many as needed for
        the others. A transactional write (TxnOffsetCommit) is one transactional batch of
        its producer."""
        limit = self.plog.config.max_message_bytes
        now = self.wall_ms()
        producer = {}
        if txn is not None:
            producer = {
                "producer_id": txn[0],
                "producer_epoch": txn[1],
                "base_sequence": 0,
                "transactional": True,
            }

        def encode(records: list[CoordinatorRecord]) -> list[tuple[bytes, int]]:
            batch = build_batch(
                [(r.key, r.value, ()) for r in records],
                timestamp_ms=now,
                **producer,  # type: ignore[arg-type]
            )
            if len(batch) <= limit:
                return [(batch, len(records))]
            if result.atomic or len(records) == 1:
                raise AppendRefused(
                    f"{len(records)} records need a {len(batch)}-byte batch; "
                    f"max.message.bytes is {limit}",
                    too_large=True,
                )
            half = len(records) // 2
            return encode(records[:half]) + encode(records[half:])

        return encode(result.records)

    def _deliver(self, result: Result) -> None:
        if self.gate is not None and result.records:
            self.gate.appended()
        # Behind an answer still waiting, or above what the ISR holds: wait too, so
        # answers leave in order and never tell of state a failover could lose.
        if not (result.responses and self._when_replicated(lambda: self._answer_all(result))):
            self._answer_all(result)
        self._deliver_events(result)

    def _answer_all(self, result: Result) -> None:
        for token, response in result.responses:
            self._answer(token, response)

    def _deliver_events(self, result: Result) -> None:
        if result.events:
            log_events(result.events)
            if self._on_events is not None:
                try:
                    self._on_events(result.events)
                except Exception:
                    # Events are observations: they must never fail a group operation.
                    log.exception("%s-%d: event listener failed", OFFSETS_TOPIC, self.partition)

    def _answer(self, token: RequestToken, response: Response) -> None:
        pending = self._pending.pop(token, None)
        if pending is not None and not pending.future.done():
            pending.future.set_result(response)


INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48


def _resolve(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_result(None)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _refused_error(request: Request, refused: AppendRefused) -> ErrorCode | int:
    """What Kafka answers when the log refuses a call's records."""
    if refused.too_large and isinstance(request, OffsetCommitRequest | TxnOffsetCommitRequest):
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE  # as Kafka's classic coordinator maps it
    if isinstance(request, TxnOffsetCommitRequest) and refused.error_code in (
        INVALID_PRODUCER_EPOCH,
        INVALID_TXN_STATE,
    ):
        return refused.error_code  # a fenced producer
    return ErrorCode.UNKNOWN_SERVER_ERROR  # appendGroupMetadataErrorToResponseError


class GroupCoordinatorRuntime:
    """Routes group requests to the shard that owns the group, as Kafka does."""

    def __init__(self, topics: TopicManager, config: BrokerConfig) -> None:
        self.num_partitions = int(config["offsets.topic.num.partitions"])
        self.core_config = CoordinatorConfig(
            group_min_session_timeout_ms=int(config["group.min.session.timeout.ms"]),
            group_max_session_timeout_ms=int(config["group.max.session.timeout.ms"]),
            group_initial_rebalance_delay_ms=int(config["group.initial.rebalance.delay.ms"]),
            group_max_size=int(config["group.max.size"]),
            offsets_retention_ms=int(config["offsets.retention.minutes"]) * 60_000,
            offsets_retention_check_interval_ms=int(config["offsets.retention.check.interval.ms"]),
            offsets_topic_num_partitions=self.num_partitions,
            consumer_group_session_timeout_ms=int(config["group.consumer.session.timeout.ms"]),
            consumer_group_heartbeat_interval_ms=int(
                config["group.consumer.heartbeat.interval.ms"]
            ),
            consumer_group_max_size=int(config["group.consumer.max.size"]),
            consumer_group_assignors=tuple(
                dict.fromkeys(
                    ASSIGNOR_NAMES.get(name, name) for name in config["group.consumer.assignors"]
                )
            ),
            consumer_group_migration_policy=str(config["group.consumer.migration.policy"]),
            group_history_retention_ms=int(config["group.history.retention.ms"]),
        )
        self.topics = topics
        self.config = config
        self.cluster_mode = config.cluster_mode
        # In-process observers of coordinator events (metrics); the events themselves are
        # written by the core into each group's partition (coordinator/history.py).
        self.event_listeners: list[Callable[[list[CoordinatorEvent]], None]] = []
        self.runners: list[ShardRunner] = []
        self._started = False
        if not self.cluster_mode:
            self._create_runners(
                topics.create_internal(
                    OFFSETS_TOPIC, self.num_partitions, self.offsets_topic_configs()
                )
            )
        # In a cluster the topic is created in etcd on the first FindCoordinator (as
        # Kafka does) and the runners appear when this broker holds it (`_topics_changed`).
        self._image_version = 0
        self._topics_changed()
        topics.change_listeners.append(self._topics_changed)

    def offsets_topic_configs(self) -> dict[str, str]:
        return {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.config["offsets.topic.segment.bytes"]),
        }

    def _create_runners(self, topic: Topic) -> None:
        if len(topic.partitions) != self.num_partitions:
            # Routing depends on the partition count: keep what the topic was created with.
            log.warning(
                "%s has %d partitions; offsets.topic.num.partitions=%d is ignored",
                OFFSETS_TOPIC,
                len(topic.partitions),
                self.num_partitions,
            )
            self.num_partitions = len(topic.partitions)
        self.runners = [
            ShardRunner(index, plog, self.core_config, on_events=self._tell_listeners)
            for index, plog in enumerate(topic.partitions)
        ]
        for runner in self.runners:
            runner.leading = not self.cluster_mode
        if self._started and not self.cluster_mode:
            for runner in self.runners:
                runner.start()

    def _topics_changed(self) -> None:
        """Hand every shard a new image of the topics (consumer groups assign them)."""
        if not self.runners and self.cluster_mode:
            offsets = self.topics.get(OFFSETS_TOPIC)
            if offsets is not None:
                self._create_runners(offsets)
        self._image_version += 1
        image = TopicsImage.of(
            self._image_version,
            (TopicImage(t.name, t.topic_id, len(t.partitions), t.internal) for t in self.topics),
        )
        for runner in self.runners:
            runner.update_metadata(image)

    def _tell_listeners(self, events: list[CoordinatorEvent]) -> None:
        """Durable events reach the in-process listeners (metrics)."""
        for listener in self.event_listeners:
            listener(events)

    def start(self) -> None:
        self._started = True
        if not self.cluster_mode:  # in a cluster, runners start when they lead (become_leader)
            for runner in self.runners:
                runner.start()

    async def stop(self) -> None:
        await asyncio.gather(*(runner.stop() for runner in self.runners))

    def partition_of(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def runner_for(self, group_id: str) -> ShardRunner | None:
        """The runner of the group's partition (None in a cluster before the topic exists)."""
        if not self.runners:
            return None
        return self.runners[self.partition_of(group_id)]

    async def call(self, group_id: str, request: Request) -> Response:
        runner = self.runner_for(group_id)
        if runner is None:
            return error_response(request, ErrorCode.NOT_COORDINATOR)
        return await runner.call(request)

    async def complete_transaction(
        self, partition: int, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """Write a transaction marker to ``__consumer_offsets-<partition>`` and apply it."""
        await self.runners[partition].complete_transaction(producer_id, producer_epoch, commit)

    async def call_all(self, make_request: Callable[[], Request]) -> list[Response]:
        """Send a request to every shard (ListGroups): each answers for its groups."""
        leading = [r for r in self.runners if r.leading]  # a cluster broker answers for its own
        return list(await asyncio.gather(*(r.call(make_request()) for r in leading)))
