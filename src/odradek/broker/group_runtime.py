"""The group coordinator runtime: the coordinator runtime (``coordinator_runtime``) over
``__consumer_offsets`` with the group coordinator's pure shard.

What is the group coordinator's own: the shard (``GroupCoordinatorShard``, sized by
the partition's ``max.message.bytes``, with the topics image consumer groups
assign), how a refused write is answered (Kafka's mapping: INVALID_COMMIT_OFFSET_SIZE
for a commit too large, a fenced producer's code for TxnOffsetCommit), the events a
durable result carries (logged, and handed to in-process listeners: metrics), and
one work kind: a transaction's COMMIT / ABORT marker written into the partition
for the transaction coordinator, which makes the group's pending transactional
offsets committed or drops them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Callable
from typing import Any

from odradek.broker.config import BrokerConfig
from odradek.broker.control_plane import ControlPlane, InternalTopic
from odradek.broker.coordinator_runtime import (
    AppendRefused,
    CoordinatorRouter,
    CoordinatorRunner,
    LogAndMemoryDiverged,
    PartitionWriter,
    Transaction,
    _Work,
    loop_clock_ms,
    refused_error,
    wall_clock_ms,
)
from odradek.broker.topics import TopicManager
from odradek.coordinator import (
    CoordinatorConfig,
    GroupCoordinatorShard,
    error_response,
)
from odradek.coordinator.events import log_events
from odradek.coordinator.metadata import EMPTY_IMAGE, TopicImage, TopicsImage
from odradek.coordinator.timer import IdGenerator
from odradek.coordinator.txn_offsets import TxnOffsetCommitRequest
from odradek.coordinator.types import CoordinatorEvent, OffsetCommitRequest, Result
from odradek.protocol.errors import ErrorCode
from odradek.protocol.internal_topics import OFFSETS_TOPIC
from odradek.protocol.records import build_end_txn_marker
from odradek.replication.replica import ReplicaManager

log = logging.getLogger("odradek.coordinator.runtime")

# group.consumer.assignors takes Kafka's class names too.
ASSIGNOR_NAMES = {
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range",
}
MARKER = "marker"  # work kind: a transaction marker to write into this partition


class UuidIds:
    """Random member-id suffixes, as Kafka's Uuid.randomUuid()."""

    def new_uuid(self) -> str:
        return str(uuid.uuid4())


class GroupRunner(CoordinatorRunner[GroupCoordinatorShard]):
    """The serial executor of one ``__consumer_offsets`` partition."""

    topic = OFFSETS_TOPIC
    error_response = staticmethod(error_response)

    def __init__(
        self,
        partition: int,
        writer: PartitionWriter,
        config: CoordinatorConfig,
        *,
        wall_ms: Callable[[], int] = wall_clock_ms,
        mono_ms: Callable[[], int] = loop_clock_ms,
        ids: IdGenerator | None = None,
        on_events: Callable[[list[CoordinatorEvent]], None] | None = None,
        write_timeout_ms: int = 5000,
    ) -> None:
        # The core sizes what it writes by this partition's own max.message.bytes.
        self.config = dataclasses.replace(config, max_message_bytes=writer.max_message_bytes)
        self.ids = ids or UuidIds()
        self.image: TopicsImage = EMPTY_IMAGE  # the topics consumer groups assign
        self._on_events = on_events
        super().__init__(
            partition, writer, wall_ms=wall_ms, mono_ms=mono_ms, write_timeout_ms=write_timeout_ms
        )

    def new_shard(self) -> GroupCoordinatorShard:
        shard = GroupCoordinatorShard(self.config, timer=self.timer, ids=self.ids)
        shard.update_metadata(self.image)
        return shard

    def update_metadata(self, image: TopicsImage) -> None:
        """The topics changed: the shard sees them from its next call on (never mid-call:
        calls run synchronously on this event loop)."""
        self.image = image
        self.shard.update_metadata(image)

    def transaction_of(self, request: Any) -> Transaction:
        if isinstance(request, TxnOffsetCommitRequest):
            return (request.producer_id, request.producer_epoch)
        return None

    def refused_answer(self, request: Any, refused: AppendRefused) -> ErrorCode:
        """Kafka's: a commit too large is INVALID_COMMIT_OFFSET_SIZE (its classic
        coordinator's mapping); a fenced transactional producer gets its own code."""
        commits = OffsetCommitRequest | TxnOffsetCommitRequest
        if refused.too_large and isinstance(request, commits):
            return ErrorCode.INVALID_COMMIT_OFFSET_SIZE
        if isinstance(request, TxnOffsetCommitRequest) and refused.error_code in (
            ErrorCode.INVALID_PRODUCER_EPOCH,
            ErrorCode.INVALID_TXN_STATE,
        ):
            return ErrorCode(refused.error_code)
        return refused_error(refused)

    def after_durable(self, result: Result) -> None:
        if result.events:
            log_events(result.events)
            if self._on_events is not None:
                try:
                    self._on_events(result.events)
                except Exception:
                    # Events are observations: they must never fail a group operation.
                    log.exception("%s: event listener failed", self.name)

    # --- transaction markers (for the transaction coordinator) ------------------------------

    async def complete_transaction(
        self, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """Write a transaction's COMMIT or ABORT marker here and apply it. Raises if the
        marker could not be written (also when this broker does not lead the partition)."""
        if not self.leading or not self.loaded:
            raise RuntimeError(f"{self.name} is not served here now")
        await self.submit(MARKER, (producer_id, producer_epoch, commit))

    def run_work(self, work: _Work) -> None:
        if work.kind != MARKER:
            super().run_work(work)
            return
        future = work.future
        assert future is not None
        if future.cancelled():
            return
        producer_id, producer_epoch, commit = work.item
        marker = build_end_txn_marker(
            producer_id, producer_epoch, commit=commit, timestamp_ms=self.wall_ms()
        )
        try:
            self.writer.append(marker)
        except Exception as exc:
            future.set_exception(exc)
            return
        # Written; the transaction coordinator hears of it once it is replicated.
        self.hold_until_replicated(
            lambda: _resolve(future),
            lambda: _fail(future, TimeoutError(f"{self.name}: marker not replicated in time")),
            lambda error: _fail(future, ConnectionError(f"{self.name}: {error.name}")),
        )
        try:
            self.shard.replay_end_transaction(producer_id, commit)
        except Exception as exc:
            raise LogAndMemoryDiverged("replay of a transaction marker failed") from exc


def _resolve(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_result(None)


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class GroupCoordinatorRuntime(CoordinatorRouter[GroupRunner]):
    """Routes group requests to the runner of the group's partition, as Kafka does."""

    topic = OFFSETS_TOPIC
    runner_type = GroupRunner

    def __init__(
        self,
        topics: TopicManager,
        config: BrokerConfig,
        replicas: ReplicaManager,
        control: ControlPlane,
    ) -> None:
        num_partitions = int(config["offsets.topic.num.partitions"])
        self.core_config = CoordinatorConfig(
            group_min_session_timeout_ms=int(config["group.min.session.timeout.ms"]),
            group_max_session_timeout_ms=int(config["group.max.session.timeout.ms"]),
            group_initial_rebalance_delay_ms=int(config["group.initial.rebalance.delay.ms"]),
            group_max_size=int(config["group.max.size"]),
            offsets_retention_ms=int(config["offsets.retention.minutes"]) * 60_000,
            offsets_retention_check_interval_ms=int(config["offsets.retention.check.interval.ms"]),
            offsets_topic_num_partitions=num_partitions,
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
        # In-process observers of coordinator events (metrics); the events themselves are
        # written by the core into each group's partition (coordinator/history.py).
        self.event_listeners: list[Callable[[list[CoordinatorEvent]], None]] = []
        self._image_version = 0
        self._image = EMPTY_IMAGE
        super().__init__(topics, config, replicas, control, num_partitions)

    def internal_topic(self) -> InternalTopic:
        return InternalTopic(
            OFFSETS_TOPIC,
            self.num_partitions,
            int(self.config["offsets.topic.replication.factor"]),
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.config["offsets.topic.segment.bytes"]),
            },
        )

    def new_runner(self, index: int, writer: PartitionWriter) -> GroupRunner:
        runner = GroupRunner(
            index,
            writer,
            self.core_config,
            on_events=self._tell_listeners,
            write_timeout_ms=self.write_timeout_ms,
        )
        runner.update_metadata(self._image)
        return runner

    def _topics_changed(self) -> None:
        """Hand every shard a new image of the topics (consumer groups assign them)."""
        super()._topics_changed()
        self._image_version += 1
        self._image = TopicsImage.of(
            self._image_version,
            (TopicImage(t.name, t.topic_id, len(t.partitions), t.internal) for t in self.topics),
        )
        for runner in self.runners:
            runner.update_metadata(self._image)

    def _tell_listeners(self, events: list[CoordinatorEvent]) -> None:
        """Durable events reach the in-process listeners (metrics)."""
        for listener in self.event_listeners:
            listener(events)

    async def complete_transaction(
        self, partition: int, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """Write a transaction marker to ``__consumer_offsets-<partition>`` and apply it."""
        await self.runners[partition].complete_transaction(producer_id, producer_epoch, commit)
