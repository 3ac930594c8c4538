"""The transaction coordinator runtime: the I/O shell around the pure core.

One :class:`TxnShardRunner` per ``__transaction_state`` partition owns a
``TransactionCoordinatorShard`` and a queue, as the group coordinator's
runners do: one request, due timer or finished marker job at a time, run
through the core, its records appended (one batch) and replayed, and only
then its responses sent. A partition is replayed from its start before it
serves (COORDINATOR_LOAD_IN_PROGRESS meanwhile).

Transaction markers (Kafka's TransactionMarkerChannelManager, for one node):
when a transaction's PrepareCommit / PrepareAbort record is durable, a task
writes the COMMIT / ABORT control batch to every partition of the
transaction: straight into a data partition's log (waking read_committed
fetches, since its last stable offset moves), and through the group
coordinator's runner for a ``__consumer_offsets`` partition (which applies
the pending transactional offsets). A marker that cannot be written is
retried with backoff; a partition that no longer exists is skipped, as Kafka
drops markers for deleted partitions. When every marker is in, the core
writes CompleteCommit / CompleteAbort. A crash in between leaves the Prepare
record: loading the partition finds it and writes the markers again (a second
marker for a transaction already closed in a partition changes nothing).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Protocol

from odradek.broker.config import BrokerConfig
from odradek.broker.group_runtime import (
    OFFSETS_TOPIC,
    AsyncioTimer,
    GroupCoordinatorRuntime,
    ReplicationGate,
    loop_clock_ms,
    wall_clock_ms,
)
from odradek.broker.topics import Topic, TopicManager
from odradek.coordinator.types import CoordinatorRecord
from odradek.coordinator.types import Result as TxnResult
from odradek.log import PartitionLog
from odradek.log.errors import InvalidProducerEpochError, LogError, MessageTooLargeError
from odradek.protocol.records import build_batch, build_end_txn_marker, decode_batch_records
from odradek.protocol.records import iter_batches as iter_batch_headers
from odradek.transaction import (
    TransactionCoordinatorShard,
    TxnConfig,
    TxnError,
    error_response,
    loading_response,
    partition_for,
)
from odradek.transaction.types import (
    EndTxnResponse,
    InitProducerIdResponse,
    MarkerJob,
    Request,
    Response,
    TopicPartition,
    TxnEvent,
)

log = logging.getLogger("odradek.transaction")

TXN_TOPIC = "__transaction_state"
# Fault injection for crash tests: wait this long before writing a transaction's markers,
# so a test can kill the broker between the Prepare record and the markers.
MARKER_DELAY_ENV = "ODRADEK_TXN_MARKER_DELAY_MS"
QUEUE_BOUND = 10000
RETRY_S = (0.05, 30.0)  # first and largest backoff: markers, failed timers, failed loads


class BrokerProducerIds:
    """Producer ids from the broker's persisted id blocks (shared with idempotent producers)."""

    def __init__(self, topics: TopicManager) -> None:
        self._topics = topics

    def next_producer_id(self) -> int:
        return self._topics.allocate_producer_id()


class RemoteMarkerWriter(Protocol):
    """Markers in a cluster (odradek.cluster.node): where a partition is led, and the
    way to the others."""

    def leads_here(self, topic: str, partition: int) -> bool: ...

    async def write(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool
    ) -> None: ...

    async def replicated(self, topic: str, partition: int, last_offset: int) -> None: ...


class _Refused(Exception):
    """The log refused a call's records before writing any."""

    def __init__(self, reason: str, *, too_large: bool) -> None:
        super().__init__(reason)
        self.too_large = too_large


class _Diverged(Exception):
    """Records may be in the log without being in memory: reload."""


class TxnShardRunner:
    """The serial executor of one ``__transaction_state`` partition."""

    def __init__(
        self,
        partition: int,
        plog: PartitionLog,
        config: TxnConfig,
        *,
        producer_ids: BrokerProducerIds,
        write_marker: Callable[[TopicPartition, int, int, bool], Any],
        wall_ms: Callable[[], int] = wall_clock_ms,
        mono_ms: Callable[[], int] = loop_clock_ms,
    ) -> None:
        self.partition = partition
        self.plog = plog
        self.config = config
        self.producer_ids = producer_ids
        self.write_marker = write_marker
        self.wall_ms = wall_ms
        self.mono_ms = mono_ms
        self.loaded = False
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(QUEUE_BOUND)
        self.timer = AsyncioTimer(self._enqueue_timer, mono_ms)
        self.shard = self._new_shard()
        self._worker: asyncio.Task[None] | None = None
        self._marker_tasks: set[asyncio.Task[None]] = set()
        self._marker_delay_s = int(os.environ.get(MARKER_DELAY_ENV, "0") or 0) / 1000
        self._timer_failures: dict[str, int] = {}
        self.operation_failures = 0
        self.reloads = 0
        # Cluster mode, as ShardRunner: serve only while leading the partition, and act on
        # a result (answer, write markers) only once the ISR holds its records.
        self.gate: ReplicationGate | None = None
        self.leading = True
        self._deferred: collections.deque[tuple[int, TxnResult]] = collections.deque()

    def _new_shard(self) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(
            self.config, timer=self.timer, producer_ids=self.producer_ids
        )

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._worker = asyncio.create_task(self._run(), name=f"txn-coordinator-{self.partition}")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
            self._worker = None
        await self._cancel_marker_jobs()
        self.timer.cancel_all()
        self._fail_queued()

    # --- cluster mode: following leadership of the partition ----------------------------

    def become_leader(self) -> None:
        """This broker leads the partition now: load it (LOAD_IN_PROGRESS meanwhile); the
        load restarts the markers of every transaction that was completing."""
        self.leading = True
        if self._worker is None:
            self.loaded = False
            self.start()

    async def resign(self) -> None:
        """Another broker leads the partition: drop its state, answer NOT_COORDINATOR."""
        self.leading = False
        await self.stop()
        self._deferred.clear()
        self._fail_queued(TxnError.NOT_COORDINATOR)
        if self.loaded:
            self.shard.on_unloaded()
        self.loaded = False
        self.shard = self._new_shard()
        log.info("%s-%d: unloaded (no longer leader)", TXN_TOPIC, self.partition)

    def replicated(self, high_watermark: int) -> None:
        """The ISR holds everything below `high_watermark`: act on what waited for it."""
        while self._deferred and self._deferred[0][0] <= high_watermark:
            _, result = self._deferred.popleft()
            self._act(result)

    async def _cancel_marker_jobs(self) -> None:
        tasks = list(self._marker_tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _fail_queued(self, error: TxnError = TxnError.COORDINATOR_NOT_AVAILABLE) -> None:
        while not self._queue.empty():
            kind, item = self._queue.get_nowait()
            if kind == "request" and not item[1].done():
                item[1].set_result(error_response(item[0], error))
        for _, result in self._deferred:
            for future, response in result.responses:
                if not future.done():
                    future.set_result(_failed(response, error))
        self._deferred.clear()

    async def _load_until_loaded(self) -> None:
        delay_s = 0.5
        while True:
            try:
                await self._load()
                return
            except Exception:
                self.timer.cancel_all()
                log.exception(
                    "loading %s-%d failed; retrying in %.1fs", TXN_TOPIC, self.partition, delay_s
                )
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, RETRY_S[1])

    async def _load(self) -> None:
        started = time.monotonic()
        shard = self._new_shard()
        count = 0
        for batch in self.plog.iter_batches_from(self.plog.start_offset):
            for pos, header in iter_batch_headers(batch):
                if header.is_control:
                    continue
                for record in decode_batch_records(batch, pos, header):
                    if record.key is None:
                        continue
                    shard.replay(CoordinatorRecord(record.key, record.value))
                    count += 1
                    if count % 2000 == 0:
                        await asyncio.sleep(0)
        result = shard.on_loaded(self.mono_ms(), wall_ms=self.wall_ms())
        self.shard = shard
        self.loaded = True
        self._after(result)
        if count:
            log.info(
                "loaded %s-%d: %d records, %d transactional ids in %.3fs",
                TXN_TOPIC,
                self.partition,
                count,
                len(shard.txns),
                time.monotonic() - started,
            )

    async def _reload(self) -> None:
        self.reloads += 1
        self.loaded = False
        log.error("reloading %s-%d from its log", TXN_TOPIC, self.partition)
        # The load restarts the jobs of every transaction still preparing. An old job left
        # retrying could write its marker after the transaction completed, into the next
        # transaction of the same producer id and epoch (Kafka drops such markers by their
        # coordinator epoch).
        await self._cancel_marker_jobs()
        self.shard.on_unloaded()
        self.timer.cancel_all()
        self._timer_failures.clear()
        await self._load_until_loaded()

    # --- entry points ------------------------------------------------------------------

    async def call(self, request: Request) -> Response:
        if not self.leading:
            return error_response(request, TxnError.NOT_COORDINATOR)
        if not self.loaded:
            return loading_response(request)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        await self._queue.put(("request", (request, future)))
        return await future

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> TxnError:
        """KIP-890 verification of a transactional write, read from the current state."""
        if not self.leading:
            return TxnError.NOT_COORDINATOR
        if not self.loaded:
            return TxnError.COORDINATOR_LOAD_IN_PROGRESS
        return self.shard.verify(transactional_id, producer_id, producer_epoch, tp)

    def _enqueue_timer(self, key: str, seq: int) -> None:
        try:
            self._queue.put_nowait(("timer", (key, seq)))
        except asyncio.QueueFull:
            asyncio.get_running_loop().call_later(0.01, self._enqueue_timer, key, seq)

    # --- the serial executor -----------------------------------------------------------

    async def _run(self) -> None:
        await self._load_until_loaded()
        while True:
            kind, item = await self._queue.get()
            try:
                if kind == "request":
                    self._serve(*item)
                elif kind == "written":
                    self._markers_written(item)
                else:
                    key, seq = item
                    if self.timer.take_fired(key, seq):
                        self._expire(key)
            except Exception:
                log.exception("%s-%d: log and memory may disagree", TXN_TOPIC, self.partition)
                await self._reload()

    def _serve(self, request: Request, future: asyncio.Future[Response]) -> None:
        if future.cancelled():
            return
        try:
            result = self.shard.handle(self.mono_ms(), future, request, wall_ms=self.wall_ms())
        except Exception:
            self.operation_failures += 1
            log.exception("%s-%d: %s failed", TXN_TOPIC, self.partition, type(request).__name__)
            future.set_result(error_response(request, TxnError.UNKNOWN_SERVER_ERROR))
            return
        try:
            self._append_and_replay(result)
        except _Refused as refused:
            self.shard.abort()
            self.operation_failures += 1
            log.error(
                "%s-%d: %s undone: %s", TXN_TOPIC, self.partition, type(request).__name__, refused
            )
            error = TxnError.UNKNOWN_SERVER_ERROR if refused.too_large else TxnError.NOT_COORDINATOR
            future.set_result(error_response(request, error))
            return
        self._after(result)

    def _expire(self, key: str) -> None:
        try:
            result = self.shard.on_timer(self.mono_ms(), key, wall_ms=self.wall_ms())
            self._append_and_replay(result)
        except _Refused as refused:
            self.shard.abort()
            self._retry_timer(key, refused)
            return
        except _Diverged:
            raise
        except Exception as exc:
            self._retry_timer(key, exc)
            return
        self._timer_failures.pop(key, None)
        self._after(result)

    def _retry_timer(self, key: str, why: BaseException) -> None:
        self.operation_failures += 1
        failures = self._timer_failures.get(key, 0) + 1
        self._timer_failures[key] = failures
        backoff_ms = min(1000 * 2 ** (failures - 1), 30_000)
        log.warning(
            "%s-%d: timer %s failed (%s); retried in %d ms",
            TXN_TOPIC,
            self.partition,
            key,
            why,
            backoff_ms,
        )
        self.timer.schedule(key, self.mono_ms() + backoff_ms)

    def _markers_written(self, job: MarkerJob) -> None:
        try:
            result = self.shard.markers_written(
                self.mono_ms(),
                job.transactional_id,
                job.producer_id,
                job.producer_epoch,
                wall_ms=self.wall_ms(),
            )
            self._append_and_replay(result)
        except _Refused as refused:
            self.shard.abort()
            log.warning(
                "%s-%d: completing %s failed: %s",
                TXN_TOPIC,
                self.partition,
                job.transactional_id,
                refused,
            )
            asyncio.get_running_loop().call_later(1.0, self._enqueue_written, job)
            return
        self._after(result)

    def _append_and_replay(self, result: TxnResult) -> None:
        if not result.records:
            return
        records = [(r.key, r.value, ()) for r in result.records]
        batch = build_batch(records, timestamp_ms=self.wall_ms())
        try:
            self.plog.append(batch, from_client=False)
        except LogError as exc:
            raise _Refused(str(exc), too_large=isinstance(exc, MessageTooLargeError)) from exc
        except OSError as exc:
            raise _Refused(f"storage error: {exc}", too_large=False) from exc
        except Exception as exc:
            raise _Diverged("append failed") from exc
        try:
            for record in result.records:
                self.shard.replay(record)
        except Exception as exc:
            raise _Diverged("replay of appended records failed") from exc

    def _after(self, result: TxnResult) -> None:
        """The records are written: once durable (in a cluster: on the whole ISR), answer,
        log what happened, write the markers."""
        gate = self.gate
        if gate is not None:
            if result.records:
                gate.appended()
            end = self.plog.end_offset
            if self._deferred or gate.high_watermark() < end:
                self._deferred.append((end, result))
                return
        self._act(result)

    def _act(self, result: TxnResult) -> None:
        for future, response in result.responses:
            if not future.done():
                future.set_result(response)
        for event in result.events:
            _log_event(event)
        for job in result.jobs:
            task = asyncio.create_task(self._write_markers(job))
            self._marker_tasks.add(task)
            task.add_done_callback(self._marker_tasks.discard)

    # --- markers -----------------------------------------------------------------------

    async def _write_markers(self, job: MarkerJob) -> None:
        """Write the job's marker to each of its partitions (retrying), then report it."""
        if self._marker_delay_s:
            await asyncio.sleep(self._marker_delay_s)
        pending = sorted(job.partitions)
        delay_s, max_delay_s = RETRY_S
        while pending:
            failed = []
            for tp in pending:
                try:
                    await self.write_marker(tp, job.producer_id, job.producer_epoch, job.commit)
                except Exception as exc:
                    log.warning(
                        "marker for %s to %s-%d failed (%s); retrying",
                        job.transactional_id,
                        tp[0],
                        tp[1],
                        exc,
                    )
                    failed.append(tp)
            pending = failed
            if pending:
                await asyncio.sleep(delay_s)
                delay_s = min(delay_s * 2, max_delay_s)
        self._enqueue_written(job)

    def _enqueue_written(self, job: MarkerJob) -> None:
        try:
            self._queue.put_nowait(("written", job))
        except asyncio.QueueFull:
            asyncio.get_running_loop().call_later(0.01, self._enqueue_written, job)


def _failed(response: Response, error: TxnError) -> Response:
    """`response` (held back until replicated) turned into `error`: leadership moved first."""
    if dataclasses.is_dataclass(response) and hasattr(response, "error_code"):
        if isinstance(response, InitProducerIdResponse | EndTxnResponse):
            return type(response)(int(error))
        return dataclasses.replace(response, error_code=int(error))
    return response


def _log_event(event: TxnEvent) -> None:
    fields = " ".join(f"{k}={v}" for k, v in event.fields.items())
    log.info("%s transactional_id=%s %s", event.kind, event.transactional_id, fields)


class TransactionCoordinatorRuntime:
    """Routes transactional ids to the runner of their ``__transaction_state`` partition."""

    def __init__(
        self,
        topics: TopicManager,
        config: BrokerConfig,
        groups: GroupCoordinatorRuntime,
        notify_append: Callable[[str, int], None],
    ) -> None:
        self.topics = topics
        self.groups = groups
        self.notify_append = notify_append
        self.verification = bool(config["transaction.partition.verification.enable"])
        self.config = config
        self.cluster_mode = config.cluster_mode
        self.num_partitions = int(config["transaction.state.log.num.partitions"])
        self.runners: list[TxnShardRunner] = []
        self._started = False
        # Cluster mode: markers for partitions other brokers lead go there (WriteTxnMarkers).
        self.remote_marker: RemoteMarkerWriter | None = None
        if not self.cluster_mode:
            self._create_runners(
                topics.create_internal(TXN_TOPIC, self.num_partitions, self.topic_configs())
            )
        else:
            # The topic is created in etcd on the first FindCoordinator, as Kafka does;
            # the runners appear when this broker holds it, and run while it leads.
            topics.change_listeners.append(self._topics_changed)

    def topic_configs(self) -> dict[str, str]:
        configs = {
            "cleanup.policy": "compact",
            "segment.bytes": str(self.config["transaction.state.log.segment.bytes"]),
        }
        if self.cluster_mode:
            configs["min.insync.replicas"] = str(self.config["transaction.state.log.min.isr"])
        return configs

    def _topics_changed(self) -> None:
        if not self.runners:
            topic = self.topics.get(TXN_TOPIC)
            if topic is not None:
                self._create_runners(topic)

    def _create_runners(self, topic: Topic) -> None:
        if len(topic.partitions) != self.num_partitions:
            log.warning(
                "%s has %d partitions; transaction.state.log.num.partitions=%d is ignored",
                TXN_TOPIC,
                len(topic.partitions),
                self.num_partitions,
            )
        self.num_partitions = len(topic.partitions)
        config = self.config
        self.core_config = TxnConfig(
            max_timeout_ms=int(config["transaction.max.timeout.ms"]),
            id_expiration_ms=int(config["transactional.id.expiration.ms"]),
            expiration_check_interval_ms=int(
                config["transaction.remove.expired.transaction.cleanup.interval.ms"]
            ),
            num_partitions=self.num_partitions,
        )
        ids = BrokerProducerIds(self.topics)
        self.runners = [
            TxnShardRunner(
                index, plog, self.core_config, producer_ids=ids, write_marker=self.write_marker
            )
            for index, plog in enumerate(topic.partitions)
        ]
        for runner in self.runners:
            runner.leading = not self.cluster_mode
            if self._started and not self.cluster_mode:
                runner.start()

    def start(self) -> None:
        self._started = True
        if not self.cluster_mode:  # in a cluster, runners start when they lead
            for runner in self.runners:
                runner.start()

    async def stop(self) -> None:
        await asyncio.gather(*(runner.stop() for runner in self.runners))

    def partition_of(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def runner_for(self, transactional_id: str) -> TxnShardRunner:
        return self.runners[self.partition_of(transactional_id)]

    def leads(self, transactional_id: str) -> bool:
        """Whether this broker coordinates the transactional id now."""
        return bool(self.runners) and self.runner_for(transactional_id).leading

    async def call(self, transactional_id: str, request: Request) -> Response:
        if not self.runners:
            return error_response(request, TxnError.COORDINATOR_NOT_AVAILABLE)
        return await self.runner_for(transactional_id).call(request)

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> TxnError:
        if not self.verification:
            return TxnError.NONE
        if self.cluster_mode and not self.leads(transactional_id):
            # The coordinator is another broker: Kafka asks it (AddPartitionsToTxn v4
            # verify-only); Odradek does not yet, so the write goes unverified.
            return TxnError.NONE
        return self.runner_for(transactional_id).verify(
            transactional_id, producer_id, producer_epoch, tp
        )

    async def write_marker(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """One marker into one partition (``__consumer_offsets`` through its coordinator).

        In a cluster, through the partition's leader: this broker if it leads the
        partition (the marker then waits for the ISR), else a WriteTxnMarkers request
        to the leader (`remote_marker`). Raises when it could not be written: the
        caller retries.
        """
        topic, partition = tp
        if self.remote_marker is not None and not self.remote_marker.leads_here(topic, partition):
            await self.remote_marker.write(tp, producer_id, producer_epoch, commit)
            return
        await self.write_local_marker(tp, producer_id, producer_epoch, commit)

    async def write_local_marker(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """A marker into a partition this broker leads (WriteTxnMarkers lands here too)."""
        topic, partition = tp
        if topic == OFFSETS_TOPIC:
            if 0 <= partition < self.groups.num_partitions:
                await self.groups.complete_transaction(
                    partition, producer_id, producer_epoch, commit
                )
            return
        plog = self.topics.partition(topic, partition)
        if plog is None:
            log.info("skipping the marker for %s-%d: no such partition", topic, partition)
            return
        marker = build_end_txn_marker(
            producer_id, producer_epoch, commit=commit, timestamp_ms=wall_clock_ms()
        )
        try:
            info = plog.append(marker, from_client=False)
        except InvalidProducerEpochError as exc:
            # A newer epoch already wrote here: this marker's transaction is over.
            log.warning("dropping a stale marker for %s-%d: %s", topic, partition, exc)
            return
        self.notify_append(topic, partition)
        if self.remote_marker is not None:
            await self.remote_marker.replicated(topic, partition, info.last_offset)
