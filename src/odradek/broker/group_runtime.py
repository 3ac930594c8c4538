"""The group coordinator runtime: the I/O shell around the pure coordinator core.

One :class:`ShardRunner` per ``__consumer_offsets`` partition owns a
``GroupCoordinatorShard`` and a queue. Its worker takes one request or due
timer at a time, runs it through the core, appends the resulting records to
the partition, replays them into the core, and only then answers: a response
never announces state that is not durable. Requests for a partition that is
still being replayed at start-up get COORDINATOR_LOAD_IN_PROGRESS (or the
core's other loading answers).

Timers requested by the core are asyncio timers that, when due, enqueue the
key on the same queue, so timers and requests never run concurrently.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from odradek.broker.config import BrokerConfig
from odradek.broker.topics import TopicManager
from odradek.coordinator import (
    CoordinatorConfig,
    CoordinatorRecord,
    GroupCoordinatorShard,
    Result,
    error_response,
    loading_response,
    partition_for,
)
from odradek.coordinator.types import CoordinatorEvent, Request, Response
from odradek.log import PartitionLog
from odradek.protocol.records import build_batch, decode_batch_records, iter_batches

log = logging.getLogger("odradek.coordinator.runtime")

OFFSETS_TOPIC = "__consumer_offsets"
# Coordinator events (state transitions, rebalances, ...) as JSON records keyed by group
# id: the rebalance history `odradek groups history` reads, with any Kafka consumer.
EVENTS_TOPIC = "__odradek_group_events"
EVENTS_RETENTION_MS = 7 * 24 * 3600 * 1000
COORDINATOR_NOT_AVAILABLE = 15
REPLAY_YIELD_EVERY = 2000  # records replayed between yields to the event loop
QUEUE_BOUND = 10000


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class UuidIds:
    """Random member-id suffixes, as Kafka's Uuid.randomUuid()."""

    def new_uuid(self) -> str:
        return str(uuid.uuid4())


class AsyncioTimer:
    """The core's keyed timers on the event loop; due keys go onto the shard's queue."""

    def __init__(self, fire: Callable[[str], None], now_ms: Callable[[], int]) -> None:
        self._fire = fire
        self._now_ms = now_ms
        self._handles: dict[str, asyncio.TimerHandle] = {}

    def schedule(self, key: str, deadline_ms: int) -> None:
        self.cancel(key)
        delay_s = max(deadline_ms - self._now_ms(), 0) / 1000
        loop = asyncio.get_running_loop()
        self._handles[key] = loop.call_later(delay_s, self._due, key)

    def cancel(self, key: str) -> None:
        handle = self._handles.pop(key, None)
        if handle is not None:
            handle.cancel()

    def _due(self, key: str) -> None:
        self._handles.pop(key, None)
        self._fire(key)

    def cancel_all(self) -> None:
        for handle in self._handles.values():
            handle.cancel()
        self._handles.clear()


@dataclass(slots=True)
class _Pending:
    request: Request
    future: asyncio.Future[Response]


class ShardRunner:
    """The serial executor of one ``__consumer_offsets`` partition."""

    def __init__(
        self,
        partition: int,
        plog: PartitionLog,
        config: CoordinatorConfig,
        *,
        now_ms: Callable[[], int] = wall_clock_ms,
        on_events: Callable[[list[CoordinatorEvent]], None] | None = None,
    ) -> None:
        self.partition = partition
        self.plog = plog
        self.now_ms = now_ms
        self.loaded = False
        self._queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(QUEUE_BOUND)
        self.timer = AsyncioTimer(self._enqueue_timer, now_ms)
        self.shard = GroupCoordinatorShard(config, timer=self.timer, ids=UuidIds())
        self._pending: dict[int, _Pending] = {}
        self._next_token = 0
        self._on_events = on_events
        self._worker: asyncio.Task[None] | None = None

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        self._worker = asyncio.create_task(self._run(), name=f"coordinator-{self.partition}")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        self.timer.cancel_all()
        self._fail_pending()

    def _fail_pending(self) -> None:
        """Answer every request still waiting with COORDINATOR_NOT_AVAILABLE (clients retry)."""
        for pending in self._pending.values():
            if not pending.future.done():
                response = error_response(pending.request, COORDINATOR_NOT_AVAILABLE)
                pending.future.set_result(response)
        self._pending.clear()

    async def _load(self) -> None:
        """Replay the partition from its start; the core's state is what the records say."""
        started = time.monotonic()
        count = 0
        for batch in self.plog.iter_batches_from(self.plog.start_offset):
            for pos, header in iter_batches(batch):
                if header.is_control:
                    continue
                for record in decode_batch_records(batch, pos, header):
                    if record.key is None:
                        continue
                    self.shard.replay(CoordinatorRecord(record.key, record.value))
                    count += 1
                    if count % REPLAY_YIELD_EVERY == 0:
                        await asyncio.sleep(0)
        self._apply(self.shard.on_loaded(self.now_ms()))
        self.loaded = True
        if count:
            log.info(
                "loaded %s-%d: %d records in %.3fs",
                OFFSETS_TOPIC,
                self.partition,
                count,
                time.monotonic() - started,
            )

    # --- entry points ------------------------------------------------------------------

    async def call(self, request: Request) -> Response:
        """Run `request` through the core; resolves when its response is ready."""
        if not self.loaded:
            return loading_response(request)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        await self._queue.put(("request", (request, future)))
        return await future

    def _enqueue_timer(self, key: str) -> None:
        try:
            self._queue.put_nowait(("timer", key))
        except asyncio.QueueFull:
            # Never drop a timer: retry shortly (the core re-checks deadlines anyway).
            asyncio.get_running_loop().call_later(0.01, self._enqueue_timer, key)

    # --- the serial executor -----------------------------------------------------------

    async def _run(self) -> None:
        try:
            await self._load()
        except Exception:
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, self.partition)
            return
        while True:
            kind, item = await self._queue.get()
            try:
                if kind == "request":
                    request, future = item
                    if future.cancelled():
                        continue
                    token = self._next_token
                    self._next_token += 1
                    self._pending[token] = _Pending(request, future)
                    self._apply(self.shard.handle(self.now_ms(), token, request))
                else:
                    self._apply(self.shard.on_timer(self.now_ms(), item))
            except Exception:
                log.exception("coordinator partition %d failed; reloading it", self.partition)
                await self._reload()

    def _apply(self, result: Result) -> None:
        """Append, replay, then answer: the order that keeps responses truthful."""
        if result.records:
            batch = build_batch(
                [(r.key, r.value, ()) for r in result.records], timestamp_ms=self.now_ms()
            )
            self.plog.append(batch, from_client=False)
            for record in result.records:
                self.shard.replay(record)
        for token, response in result.responses:
            pending = self._pending.pop(token, None)
            if pending is not None and not pending.future.done():
                pending.future.set_result(response)
        if result.events and self._on_events is not None:
            self._on_events(result.events)

    async def _reload(self) -> None:
        """After a failure the in-memory state may be ahead of the log: rebuild it."""
        self.loaded = False
        unloaded = self.shard.on_unloaded()
        for token, response in unloaded.responses:
            pending = self._pending.pop(token, None)
            if pending is not None and not pending.future.done():
                pending.future.set_result(response)
        self._fail_pending()
        self.timer.cancel_all()
        self.shard = GroupCoordinatorShard(self.shard.config, timer=self.timer, ids=UuidIds())
        await self._load()


def encode_event(event: CoordinatorEvent) -> bytes:
    """One event as the JSON value of a history record."""
    payload = {"kind": event.kind, "group": event.group_id, "at_ms": event.at_ms, **event.fields}
    return json.dumps(payload, separators=(",", ":"), default=str).encode()


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
        )
        topic = topics.create_internal(
            OFFSETS_TOPIC,
            self.num_partitions,
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(config["offsets.topic.segment.bytes"]),
            },
        )
        if len(topic.partitions) != self.num_partitions:
            # Routing depends on the partition count: keep what the topic was created with.
            log.warning(
                "%s has %d partitions; offsets.topic.num.partitions=%d is ignored",
                OFFSETS_TOPIC,
                len(topic.partitions),
                self.num_partitions,
            )
            self.num_partitions = len(topic.partitions)
        self.events_log = topics.create_internal(
            EVENTS_TOPIC, 1, {"retention.ms": str(EVENTS_RETENTION_MS), "cleanup.policy": "delete"}
        ).partitions[0]
        self.event_listeners: list[Callable[[list[CoordinatorEvent]], None]] = []
        self.runners = [
            ShardRunner(index, plog, self.core_config, on_events=self._record_events)
            for index, plog in enumerate(topic.partitions)
        ]

    def _record_events(self, events: list[CoordinatorEvent]) -> None:
        """Append events to the history topic and tell in-process listeners (metrics)."""
        now = wall_clock_ms()
        records = [(e.group_id.encode(), encode_event(e), ()) for e in events]
        try:
            self.events_log.append(build_batch(records, timestamp_ms=now), from_client=False)
        except Exception:
            # History is an observation: losing it must never fail a group operation.
            log.exception("could not append %d coordinator events", len(events))
        for listener in self.event_listeners:
            listener(events)

    def start(self) -> None:
        for runner in self.runners:
            runner.start()

    async def stop(self) -> None:
        await asyncio.gather(*(runner.stop() for runner in self.runners))

    def runner_for(self, group_id: str) -> ShardRunner:
        return self.runners[partition_for(group_id, self.num_partitions)]

    async def call(self, group_id: str, request: Request) -> Response:
        return await self.runner_for(group_id).call(request)

    async def call_all(self, make_request: Callable[[], Request]) -> list[Response]:
        """Send a request to every shard (ListGroups): each answers for its groups."""
        return list(await asyncio.gather(*(r.call(make_request()) for r in self.runners)))
