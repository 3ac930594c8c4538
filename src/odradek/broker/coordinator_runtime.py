"""One coordinator runtime for every coordinator shard (Kafka's ``coordinator-common``).

A :class:`CoordinatorRunner` is the serial executor of one partition of a
coordinator's internal topic (``__consumer_offsets``, ``__transaction_state``).
It owns a pure shard (``odradek.coordinator``, ``odradek.transaction``: the
:class:`CoordinatorShard` protocol) and a queue. Its worker takes one request,
due timer or other piece of work at a time, runs it through the shard, appends
the resulting records to the partition, replays them into the shard, and only
then answers, once the partition's high watermark covers the records: a
response never tells of state a failover could lose.

The runner reaches its log only through a :class:`PartitionWriter` (Kafka's):
append, end offset, high watermark, and a listener told when the high watermark
moves. On a lone node the high watermark is the log end, moved by the append
itself; in a cluster it follows the ISR. The runner does not know which.

Lifecycle: a runner serves only while this broker leads its partition
(``become_leader``: load by replay, COORDINATOR_LOAD_IN_PROGRESS meanwhile;
``resign``: unload, NOT_COORDINATOR to everything queued or held). A
:class:`CoordinatorRouter` owns the runners of one topic, creates them when the
topic exists here, and maps keys to partitions.

Failures stay as small as Kafka keeps them. A call into the shard is atomic: if
it raises, or its records are refused before anything is written (too large for
``max.message.bytes``, the partition no longer led here), the shard undoes it
and only the request that caused it gets an error; a failed timer call is
retried with backoff. Only when the log and memory may disagree (an append
failed half-way, or replaying appended records failed) is the partition
reloaded, failing what waited; a load that fails is retried with backoff, never
left "loading" for good. An answer held for replication longer than
``offsets.commit.timeout.ms`` gets COORDINATOR_NOT_AVAILABLE (Kafka's write
timeout, REQUEST_TIMED_OUT mapped as its coordinators map it); what its result
starts (marker jobs) still waits for the high watermark. Every failure is logged
and counted (``operation_failures``, ``reloads``, ``load_failures``: metrics).

Clocks: the shard's ``now_ms`` is the event loop's monotonic clock, the clock the
timers run on, so timers and the deadlines they guard always agree and a
wall-clock step (NTP) moves neither. The wall clock only stamps records.

Timers requested by the shard are asyncio timers that, when due, enqueue the key
on the same queue, so timers and requests never run concurrently.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from odradek.broker.config import BrokerConfig
from odradek.broker.control_plane import ControlPlane, InternalTopic
from odradek.broker.topics import Topic, TopicManager
from odradek.coordinator.routing import partition_for
from odradek.coordinator.types import CoordinatorRecord, RequestToken, Result
from odradek.log import AppendInfo
from odradek.log.errors import LogError
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import (
    build_batch,
    decode_batch_records,
    iter_batches,
    marker_is_abort,
)
from odradek.replication.replica import Replica, ReplicaManager, Role
from odradek.replication.writer import ReplicaWriter

log = logging.getLogger("odradek.coordinator.runtime")

QUEUE_BOUND = 10000
TIMER_RETRY_MS = (1_000, 30_000)  # first and largest backoff for a failed timer call
LOAD_RETRY_S = (0.5, 30.0)  # first and largest backoff for a failed load
LOAD_CHUNK_RECORDS = 2000  # records decoded in the worker thread per hop during a load
DEFAULT_WRITE_TIMEOUT_MS = 5000  # offsets.commit.timeout.ms


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


def loop_clock_ms() -> int:
    """The running event loop's monotonic clock, the one its timers fire on."""
    return int(asyncio.get_running_loop().time() * 1000)


# --- what the runtime needs from a shard and from its partition -------------------------


class CoordinatorShard(Protocol):
    """A pure coordinator core for one partition (Kafka's CoordinatorShard). Calls are
    atomic: one that raises changed nothing; ``abort`` undoes the last call whose
    records could not be appended."""

    def handle(
        self, now_ms: int, token: RequestToken, request: Any, *, wall_ms: int | None = None
    ) -> Result: ...

    def on_timer(self, now_ms: int, key: str, *, wall_ms: int | None = None) -> Result: ...

    def abort(self) -> None: ...

    def replay(
        self, record: CoordinatorRecord, *, producer_id: int = -1, offset: int = -1
    ) -> None: ...

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None: ...

    def on_loaded(self, now_ms: int, *, wall_ms: int | None = None) -> Result: ...

    def on_unloaded(self) -> Result: ...


HighWatermarkListener = Callable[[int], None]
"""Told the partition's new high watermark each time it moves."""


class PartitionWriter(Protocol):
    """A coordinator partition as its runner sees it (Kafka's PartitionWriter)."""

    @property
    def max_message_bytes(self) -> int: ...

    @property
    def end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int:
        """Everything below it is on every in-sync replica."""
        ...

    def append(self, batch: bytes) -> AppendInfo:
        """Append one batch as the partition's leader. A ``LogError`` means nothing was
        written (its ``error_code`` says why: too large, no longer the leader...);
        anything else may have written it."""
        ...

    def batches(self) -> Iterator[bytes | bytearray]:
        """Every batch from the log start (loading; iterated in a worker thread)."""
        ...

    def add_listener(self, listener: HighWatermarkListener) -> None: ...

    def remove_listener(self, listener: HighWatermarkListener) -> None: ...


class AsyncioTimer:
    """A shard's keyed timers on the event loop; a due key goes onto the runner's queue.

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


# --- outcomes of a write ---------------------------------------------------------------------


class AppendRefused(Exception):
    """The partition refused a call's records before writing any of them."""

    def __init__(self, reason: str, error_code: int) -> None:
        super().__init__(reason)
        self.error_code = error_code  # the Kafka error code the writer gave

    @property
    def too_large(self) -> bool:
        return self.error_code == ErrorCode.MESSAGE_TOO_LARGE


class LogAndMemoryDiverged(Exception):
    """Records may be in the log without being in memory: only a reload can tell."""


# A transactional write's producer: (producer id, epoch), or None for a plain one.
Transaction = tuple[int, int] | None


def refused_error(refused: AppendRefused) -> ErrorCode:
    """What a coordinator answers when its write was refused, as Kafka's
    CoordinatorOperationExceptionHelper maps the partition's error."""
    code = refused.error_code
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.KAFKA_STORAGE_ERROR):
        return ErrorCode.NOT_COORDINATOR
    if code in (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.NOT_ENOUGH_REPLICAS,
        ErrorCode.REQUEST_TIMED_OUT,
    ):
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    return ErrorCode.UNKNOWN_SERVER_ERROR  # too large, or anything else the log refused


# --- the runner ------------------------------------------------------------------------------


S = TypeVar("S", bound=CoordinatorShard)


@dataclass(slots=True)
class _Pending:
    request: Any
    future: asyncio.Future[Any]


@dataclass(slots=True)
class _Work:
    """One item of the runner's queue: a request, a due timer, or a runtime's own kind."""

    kind: str
    item: Any
    future: asyncio.Future[Any] | None = None


@dataclass(slots=True)
class _Held:
    """What waits for the high watermark to reach ``offset``."""

    offset: int
    deadline_s: float  # loop time: its answers time out then
    act: Callable[[], None]  # replicated: answer, start what follows
    expire: Callable[[], None]  # timed out: answer with an error (what follows still waits)
    abandon: Callable[[ErrorCode], None]  # leadership moved or a reload: fail it all


class CoordinatorRunner(Generic[S]):
    """The serial executor of one coordinator partition (see the module docstring).

    A runtime subclasses it to say what differs: ``new_shard`` (construction),
    ``error_response`` / ``loading_response`` (its responses' shapes),
    ``refused_answer`` (the error a refused write earns a request),
    ``after_durable`` (what follows a durable result: events, jobs), and any work
    kinds of its own (``run_work``).
    """

    topic = ""  # the coordinator's internal topic (for logs)

    def __init__(
        self,
        partition: int,
        writer: PartitionWriter,
        *,
        wall_ms: Callable[[], int] = wall_clock_ms,
        mono_ms: Callable[[], int] = loop_clock_ms,
        write_timeout_ms: int = DEFAULT_WRITE_TIMEOUT_MS,
    ) -> None:
        self.partition = partition
        self.writer = writer
        self.wall_ms = wall_ms
        self.mono_ms = mono_ms
        self.write_timeout_s = write_timeout_ms / 1000
        self.loaded = False
        self.leading = False  # serving: this broker leads the partition
        self._queue: asyncio.Queue[_Work] = asyncio.Queue(QUEUE_BOUND)
        self.timer = AsyncioTimer(self._enqueue_timer, mono_ms)
        self._pending: dict[int, _Pending] = {}
        self._next_token = 0
        self._held: collections.deque[_Held] = collections.deque()
        self._timeout: asyncio.TimerHandle | None = None
        self._worker: asyncio.Task[None] | None = None
        self._timer_failures: dict[str, int] = {}
        # Counters, exported as metrics.
        self.operation_failures = 0  # calls that failed alone (shard exception, refused)
        self.reloads = 0  # reloads after the log and memory may have diverged
        self.load_failures = 0  # loads that failed and were retried
        self.shard: S = self.new_shard()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # --- what a runtime says --------------------------------------------------------------

    def new_shard(self) -> S:
        raise NotImplementedError

    @staticmethod
    def error_response(request: Any, error: ErrorCode) -> Any:
        """A response of the request's shape carrying ``error`` everywhere."""
        raise NotImplementedError

    def loading_response(self, request: Any) -> Any:
        return self.error_response(request, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)

    def refused_answer(self, request: Any, refused: AppendRefused) -> ErrorCode:
        """The error a request gets when the partition refused its records."""
        return refused_error(refused)

    def transaction_of(self, request: Any) -> Transaction:
        """The producer whose transactional batch a request's records go in (None: plain)."""
        return None

    def after_durable(self, result: Result) -> None:
        """The result's records are replicated and its answers sent: log its events,
        start its jobs."""

    def run_work(self, work: _Work) -> None:
        """A work kind of the runtime's own (markers, completions)."""
        raise ValueError(f"unknown work {work.kind!r}")

    def on_stop(self) -> None:
        """The worker stopped (resign, reload, stop): stop what it started."""

    # --- lifecycle -------------------------------------------------------------------------

    def become_leader(self) -> None:
        """This broker leads the partition now: load it (LOAD_IN_PROGRESS meanwhile)."""
        self.leading = True
        if self._worker is None:
            self.loaded = False
            self.writer.add_listener(self.on_high_watermark)
            self._worker = asyncio.create_task(self._run(), name=f"coordinator-{self.name}")

    async def resign(self) -> None:
        """Another broker leads the partition: unload it; everything queued or held is
        answered NOT_COORDINATOR, so clients look for the new coordinator at once."""
        self.leading = False
        await self._stop_worker()
        self._timer_failures.clear()
        if self.loaded:
            self._answer_now(self.shard.on_unloaded())
        self.loaded = False
        self._fail_all(ErrorCode.NOT_COORDINATOR)
        self.shard = self.new_shard()
        log.info("%s: unloaded (no longer leader)", self.name)

    async def stop(self) -> None:
        """The broker shuts down: as resign, answering COORDINATOR_NOT_AVAILABLE."""
        self.leading = False
        await self._stop_worker()
        self._fail_all(ErrorCode.COORDINATOR_NOT_AVAILABLE)

    async def _stop_worker(self) -> None:
        """Stop the serial executor and its timers (what it was doing is abandoned)."""
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        self.writer.remove_listener(self.on_high_watermark)
        self.timer.cancel_all()
        self.on_stop()

    def _fail_all(self, error: ErrorCode) -> None:
        """Answer everything queued, held or pending with ``error``."""
        while not self._queue.empty():
            work = self._queue.get_nowait()
            if work.future is None or work.future.done():
                continue
            if work.kind == "request":
                work.future.set_result(self.error_response(work.item, error))
            else:
                work.future.set_exception(ConnectionError(f"{self.name}: {error.name}"))
        self._fail_waiting(error)

    def _fail_waiting(self, error: ErrorCode) -> None:
        """Answer what is held for replication or pending in the shard with ``error``."""
        self._abandon_held(error)
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_result(self.error_response(pending.request, error))
        self._pending.clear()

    def _abandon_held(self, error: ErrorCode) -> None:
        held, self._held = self._held, collections.deque()
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None
        for entry in held:
            entry.abandon(error)

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
                    "loading %s failed (%d failures so far); retrying in %.1fs",
                    self.name,
                    self.load_failures,
                    delay_s,
                )
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, max_delay_s)

    async def _load(self) -> None:
        """Replay the partition from its start into a fresh shard; state is what records
        say. Batches are read and decoded in a worker thread, a chunk at a time, and
        replayed here between chunks, so a long partition never stalls the loop."""
        started = time.monotonic()
        shard = self.new_shard()
        count = 0
        batches = iter(self.writer.batches())
        while True:
            chunk = await asyncio.to_thread(_decode_some, batches, LOAD_CHUNK_RECORDS)
            if not chunk:
                break
            for entry in chunk:
                if isinstance(entry, _Marker):
                    shard.replay_end_transaction(entry.producer_id, entry.commit)
                else:
                    record, producer_id, offset = entry
                    shard.replay(record, producer_id=producer_id, offset=offset)
                    count += 1
        result = shard.on_loaded(self.mono_ms(), wall_ms=self.wall_ms())
        self.shard = shard
        self._append_and_replay(result)  # e.g. a loaded group over group.max.size rebalances
        self.loaded = True
        self._deliver(result)
        if count:
            log.info("loaded %s: %d records in %.3fs", self.name, count, time.monotonic() - started)

    async def _reload(self) -> None:
        """The log and memory may disagree: fail what waits and rebuild from the log.

        Held answers are failed and what their results would have started is dropped:
        the load starts it again from what the log says (a transaction's markers),
        and a second copy would race it.
        """
        self.reloads += 1
        self.loaded = False
        log.error("reloading %s from its log", self.name)
        self.timer.cancel_all()
        self.on_stop()
        self._answer_now(self.shard.on_unloaded())
        self._fail_waiting(ErrorCode.COORDINATOR_NOT_AVAILABLE)  # the queue is served after
        self._timer_failures.clear()
        await self._load_until_loaded()

    # --- entry points ----------------------------------------------------------------------

    async def call(self, request: Any) -> Any:
        """Run ``request`` through the shard; resolves when its response is ready."""
        if not self.leading:
            return self.error_response(request, ErrorCode.NOT_COORDINATOR)
        if not self.loaded:
            return self.loading_response(request)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Work("request", request, future))
        return await future

    async def submit(self, kind: str, item: Any) -> Any:
        """Queue a runtime's own work with a future (e.g. a marker to write here)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Work(kind, item, future))
        return await future

    def enqueue(self, kind: str, item: Any) -> None:
        """Queue a runtime's own work without a waiter; never dropped when full."""
        try:
            self._queue.put_nowait(_Work(kind, item))
        except asyncio.QueueFull:
            asyncio.get_running_loop().call_later(0.01, self.enqueue, kind, item)

    def _enqueue_timer(self, key: str, seq: int) -> None:
        self.enqueue("timer", (key, seq))  # never dropped: the shard re-checks deadlines

    # --- the serial executor ---------------------------------------------------------------

    async def _run(self) -> None:
        await self._load_until_loaded()
        while True:
            work = await self._queue.get()
            try:
                if work.kind == "request":
                    assert work.future is not None
                    self._serve(work.item, work.future)
                elif work.kind == "timer":
                    key, seq = work.item
                    if self.timer.take_fired(key, seq):
                        self._expire(key)
                else:
                    self.run_work(work)
            except Exception:
                # LogAndMemoryDiverged, or a bug in this loop: either way only the log
                # can say what is true now.
                log.exception("%s: log and memory may disagree", self.name)
                await self._reload()

    def _serve(self, request: Any, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return
        token = self._next_token
        self._next_token += 1
        self._pending[token] = _Pending(request, future)
        try:
            result = self.shard.handle(self.mono_ms(), token, request, wall_ms=self.wall_ms())
        except Exception:
            # The shard undid the call: only this request fails.
            self.operation_failures += 1
            log.exception(
                "%s: %s failed; answered UNKNOWN_SERVER_ERROR, nothing changed",
                self.name,
                type(request).__name__,
            )
            self._answer(token, self.error_response(request, ErrorCode.UNKNOWN_SERVER_ERROR))
            return
        refused = self.commit(result, type(request).__name__, self.transaction_of(request))
        if refused is not None:
            self._answer(token, self.error_response(request, self.refused_answer(request, refused)))

    def _expire(self, key: str) -> None:
        try:
            result = self.shard.on_timer(self.mono_ms(), key, wall_ms=self.wall_ms())
        except Exception:
            self.operation_failures += 1
            log.exception("%s: timer %s failed", self.name, key)
            self._retry_timer(key)
            return
        if self.commit(result, f"timer {key}") is None:
            self._timer_failures.pop(key, None)
        else:
            self._retry_timer(key)

    def _retry_timer(self, key: str) -> None:
        """The shard kept the failed timer's state; fire it again after a growing backoff."""
        failures = self._timer_failures.get(key, 0) + 1
        self._timer_failures[key] = failures
        first, largest = TIMER_RETRY_MS
        backoff = min(first * 2 ** (failures - 1), largest)
        self.timer.schedule(key, self.mono_ms() + backoff)
        log.warning("%s: timer %s retried in %d ms", self.name, key, backoff)

    def commit(self, result: Result, what: str, txn: Transaction = None) -> AppendRefused | None:
        """Append, replay, then answer (once replicated): the order that keeps answers
        truthful.

        Returns why, if the partition refused the records before writing any: the
        shard has undone the call and its responses are dropped (the caller answers
        the request that caused it). Raises LogAndMemoryDiverged when only a reload
        can tell what is durable.
        """
        try:
            self._append_and_replay(result, txn)
        except AppendRefused as refused:
            self.shard.abort()
            self.operation_failures += 1
            log.error("%s: %s undone: %s", self.name, what, refused)
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
                info = self.writer.append(batch)
            except LogError as exc:
                if index == 0:  # refused before anything was written
                    raise AppendRefused(str(exc), exc.error_code) from exc
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
        its producer. A batch over max.message.bytes is refused here, before the log."""
        limit = self.writer.max_message_bytes
        now = self.wall_ms()
        producer: dict[str, Any] = {}
        if txn is not None:
            producer = {
                "producer_id": txn[0],
                "producer_epoch": txn[1],
                "base_sequence": 0,
                "transactional": True,
            }

        def encode(records: list[CoordinatorRecord]) -> list[tuple[bytes, int]]:
            batch = build_batch(
                [(r.key, r.value, ()) for r in records], timestamp_ms=now, **producer
            )
            if len(batch) <= limit:
                return [(batch, len(records))]
            if result.atomic or len(records) == 1:
                raise AppendRefused(
                    f"{len(records)} records need a {len(batch)}-byte batch; "
                    f"max.message.bytes is {limit}",
                    ErrorCode.MESSAGE_TOO_LARGE,
                )
            half = len(records) // 2
            return encode(records[:half]) + encode(records[half:])

        return encode(result.records)

    # --- answers held until replicated ----------------------------------------------------

    def _deliver(self, result: Result) -> None:
        """Answer and act on a result whose records are in the log: now if the high
        watermark covers them and nothing is held before it, else once it does."""

        def act() -> None:
            self._answer_now(result)
            self.after_durable(result)

        def expire() -> None:
            for token, _ in result.responses:
                self._fail_token(token, ErrorCode.COORDINATOR_NOT_AVAILABLE)

        def abandon(error: ErrorCode) -> None:
            for token, _ in result.responses:
                self._fail_token(token, error)

        self.hold_until_replicated(act, expire, abandon)

    def hold_until_replicated(
        self,
        act: Callable[[], None],
        expire: Callable[[], None],
        abandon: Callable[[ErrorCode], None],
    ) -> None:
        """Run ``act`` once the high watermark covers everything written so far and all
        held before it has run (at once when it already does)."""
        end = self.writer.end_offset
        if not self._held and self.writer.high_watermark >= end:
            act()
            return
        deadline = asyncio.get_running_loop().time() + self.write_timeout_s
        self._held.append(_Held(end, deadline, act, expire, abandon))
        if self._timeout is None:
            self._arm_timeout()

    def on_high_watermark(self, offset: int) -> None:
        """The writer's listener: the high watermark moved to ``offset``."""
        if not self._held or self._held[0].offset > offset:
            return
        while self._held and self._held[0].offset <= offset:
            self._held.popleft().act()
        self._arm_timeout()

    def _arm_timeout(self) -> None:
        """One timer, for the first held entry whose answers have not timed out yet
        (entries are held in the order of their deadlines)."""
        if self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None
        for held in self._held:
            if held.deadline_s != math.inf:
                self._timeout = asyncio.get_running_loop().call_at(held.deadline_s, self._time_out)
                return

    def _time_out(self) -> None:
        """Held answers past offsets.commit.timeout.ms: COORDINATOR_NOT_AVAILABLE (the
        client retries); what their results start still waits for the high watermark."""
        self._timeout = None
        now = asyncio.get_running_loop().time()
        for held in self._held:
            if held.deadline_s <= now:
                held.deadline_s = math.inf
                held.expire()
        self._arm_timeout()

    # --- answering -------------------------------------------------------------------------

    def _answer_now(self, result: Result) -> None:
        for token, response in result.responses:
            self._answer(token, response)

    def _answer(self, token: RequestToken, response: Any) -> None:
        pending = self._pending.pop(token, None)
        if pending is not None and not pending.future.done():
            pending.future.set_result(response)

    def _fail_token(self, token: RequestToken, error: ErrorCode) -> None:
        pending = self._pending.pop(token, None)
        if pending is not None and not pending.future.done():
            pending.future.set_result(self.error_response(pending.request, error))


@dataclass(frozen=True, slots=True)
class _Marker:
    producer_id: int
    commit: bool


def _decode_some(
    batches: Iterator[bytes | bytearray], limit: int
) -> list[_Marker | tuple[CoordinatorRecord, int, int]]:
    """The next batches' records (and transaction markers), at least ``limit`` records
    unless the log ends first (worker thread: reading and decoding)."""
    out: list[_Marker | tuple[CoordinatorRecord, int, int]] = []
    records = 0
    for batch in batches:
        for pos, header in iter_batches(batch):
            if header.is_control:
                if header.producer_id >= 0:  # a transaction marker (TxnOffsetCommit)
                    out.append(_Marker(header.producer_id, not marker_is_abort(batch, pos)))
                continue
            producer_id = header.producer_id if header.is_transactional else -1
            for record in decode_batch_records(batch, pos, header):
                if record.key is not None:
                    out.append(
                        (CoordinatorRecord(record.key, record.value), producer_id, record.offset)
                    )
                    records += 1
        if records >= limit:
            break
    return out


# --- the router --------------------------------------------------------------------------------


R = TypeVar("R", bound=CoordinatorRunner[Any])


class CoordinatorRouter(Generic[R]):
    """The runners of one coordinator topic: keys to partitions (Kafka's hash), runners
    created when the topic exists here, serving while this broker leads their partitions.

    The topic is the control plane's to create (a lone node at once, a cluster on the
    first FindCoordinator); the runners appear when this broker holds it, and follow
    the roles the replica layer gives its partitions.
    """

    topic = ""
    runner_type: type[CoordinatorRunner[Any]] = CoordinatorRunner

    def __init__(
        self,
        topics: TopicManager,
        config: BrokerConfig,
        replicas: ReplicaManager,
        control: ControlPlane,
        num_partitions: int,
    ) -> None:
        self.topics = topics
        self.config = config
        self.replicas = replicas
        self.num_partitions = num_partitions
        self.write_timeout_ms = int(config["offsets.commit.timeout.ms"])
        self.runners: list[R] = []
        self._started = False
        topics.change_listeners.append(self._topics_changed)
        replicas.role_listeners.append(self._role_changed)
        control.want_internal_topic(self.internal_topic())
        self._topics_changed()

    # --- what a runtime says ---------------------------------------------------------------

    def internal_topic(self) -> InternalTopic:
        """The coordinator's topic as it wants it created."""
        raise NotImplementedError

    def new_runner(self, index: int, writer: PartitionWriter) -> R:
        raise NotImplementedError

    def runners_created(self) -> None:
        """The topic's runners exist now (a runtime's own set-up of them)."""

    # --- runners -----------------------------------------------------------------------------

    def _topics_changed(self) -> None:
        if not self.runners:
            topic = self.topics.get(self.topic)
            if topic is not None:
                self._create_runners(topic)

    def _create_runners(self, topic: Topic) -> None:
        if len(topic.partitions) != self.num_partitions:
            # Routing depends on the partition count: keep what the topic was created with.
            log.warning(
                "%s has %d partitions; the configured %d is ignored",
                self.topic,
                len(topic.partitions),
                self.num_partitions,
            )
            self.num_partitions = len(topic.partitions)
        self.runners = [
            self.new_runner(index, ReplicaWriter(self.replicas, self.topic, index, plog))
            for index, plog in enumerate(topic.partitions)
        ]
        self.runners_created()
        self._follow_roles()

    def start(self) -> None:
        self._started = True
        self._follow_roles()

    def _follow_roles(self) -> None:
        """Runners whose partition this broker leads serve (once started)."""
        if not self._started:
            return
        for index, runner in enumerate(self.runners):
            if self.replicas.leads(self.topic, index) and not runner.leading:
                runner.become_leader()

    def _role_changed(self, replica: Replica, before: Role) -> None:
        """The replica layer's listener: a partition's role changed (leadership only
        matters here; the high watermark reaches a runner through its writer)."""
        if replica.topic != self.topic or not 0 <= replica.partition < len(self.runners):
            return
        runner = self.runners[replica.partition]
        if replica.role is Role.LEADER:
            if self._started:
                runner.become_leader()
        elif runner.leading:
            asyncio.get_running_loop().create_task(runner.resign())

    async def stop(self) -> None:
        await asyncio.gather(*(runner.stop() for runner in self.runners))

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def runner_for(self, key: str) -> R | None:
        """The runner of the key's partition (None before the topic exists here)."""
        if not self.runners:
            return None
        return self.runners[self.partition_of(key)]

    async def call(self, key: str, request: Any) -> Any:
        runner = self.runner_for(key)
        if runner is None:
            return self.runner_type.error_response(request, ErrorCode.NOT_COORDINATOR)
        return await runner.call(request)

    async def call_all(self, make_request: Callable[[], Any]) -> list[Any]:
        """A request to every partition led here (ListGroups, ListTransactions): each
        answers for its own keys."""
        leading = [r for r in self.runners if r.leading]
        return list(await asyncio.gather(*(r.call(make_request()) for r in leading)))
