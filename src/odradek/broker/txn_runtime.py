"""The transaction coordinator runtime: the coordinator runtime (``coordinator_runtime``)
over ``__transaction_state`` with the transaction coordinator's pure shard.

What is the transaction coordinator's own: the shard (``TransactionCoordinatorShard``
with the broker's producer ids), its events (logged), its marker jobs, and one
work kind: completing a transaction once its markers are in.

Transaction markers (Kafka's TransactionMarkerChannelManager): when a
transaction's PrepareCommit / PrepareAbort record is replicated, a task writes
the COMMIT / ABORT control batch to every partition of the transaction: through
the partition's leader, which is this broker (straight into a data partition's
log, waking read_committed fetches; through the group runtime's runner for a
``__consumer_offsets`` partition, which applies the pending transactional
offsets) or another one (WriteTxnMarkers, through the control plane). A marker
that cannot be written is retried with backoff; a partition that no longer
exists is skipped, as Kafka drops markers for deleted partitions. When every
marker is in, the shard writes CompleteCommit / CompleteAbort. A crash, a
resignation or a reload in between leaves the Prepare record: loading the
partition finds it and writes the markers again (a second marker for a
transaction already closed in a partition changes nothing), so the jobs of the
previous load are stopped first.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable

from odradek.broker.config import BrokerConfig
from odradek.broker.control_plane import ControlPlane, InternalTopic
from odradek.broker.coordinator_runtime import (
    CoordinatorRouter,
    CoordinatorRunner,
    PartitionWriter,
    _Work,
    loop_clock_ms,
    wall_clock_ms,
)
from odradek.broker.group_runtime import GroupCoordinatorRuntime
from odradek.broker.topics import TopicManager
from odradek.coordinator.types import Result
from odradek.log.errors import InvalidProducerEpochError
from odradek.protocol.errors import ErrorCode
from odradek.protocol.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from odradek.protocol.records import build_end_txn_marker
from odradek.replication.replica import ReplicaManager
from odradek.transaction import (
    ProducerIdSource,
    TransactionCoordinatorShard,
    TxnConfig,
    error_response,
)
from odradek.transaction.types import MarkerJob, TopicPartition, TxnEvent

log = logging.getLogger("odradek.transaction")

# Fault injection for crash tests: wait this long before writing a transaction's markers,
# so a test can kill the broker between the Prepare record and the markers.
MARKER_DELAY_ENV = "ODRADEK_TXN_MARKER_DELAY_MS"
RETRY_S = (0.05, 30.0)  # first and largest backoff of a marker that failed
WRITTEN = "written"  # work kind: every marker of a job is in; complete the transaction
COMPLETE_RETRY_S = 1.0  # completing a transaction whose record was refused, again after
MARKER_TIMEOUT_S = 30.0  # a marker written here must be on the ISR within this

WriteMarker = Callable[[TopicPartition, int, int, bool], Awaitable[None]]


class BrokerProducerIds:
    """Producer ids from the broker's persisted id blocks (shared with idempotent producers)."""

    def __init__(self, topics: TopicManager) -> None:
        self._topics = topics

    def next_producer_id(self) -> int:
        return self._topics.allocate_producer_id()


class TxnRunner(CoordinatorRunner[TransactionCoordinatorShard]):
    """The serial executor of one ``__transaction_state`` partition."""

    topic = TRANSACTION_STATE_TOPIC
    error_response = staticmethod(error_response)

    def __init__(
        self,
        partition: int,
        writer: PartitionWriter,
        config: TxnConfig,
        *,
        producer_ids: ProducerIdSource,
        write_marker: WriteMarker,
        wall_ms: Callable[[], int] = wall_clock_ms,
        mono_ms: Callable[[], int] = loop_clock_ms,
        write_timeout_ms: int = 5000,
    ) -> None:
        self.config = config
        self.producer_ids = producer_ids
        self.write_marker = write_marker
        self._marker_tasks: set[asyncio.Task[None]] = set()
        self._marker_delay_s = int(os.environ.get(MARKER_DELAY_ENV, "0") or 0) / 1000
        super().__init__(
            partition, writer, wall_ms=wall_ms, mono_ms=mono_ms, write_timeout_ms=write_timeout_ms
        )

    def new_shard(self) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(
            self.config, timer=self.timer, producer_ids=self.producer_ids
        )

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        """KIP-890 verification of a transactional write, read from the current state."""
        if not self.leading:
            return ErrorCode.NOT_COORDINATOR
        if not self.loaded:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        return ErrorCode(self.shard.verify(transactional_id, producer_id, producer_epoch, tp))

    def after_durable(self, result: Result) -> None:
        for event in result.events:
            _log_event(event)
        for job in result.jobs:
            task = asyncio.create_task(self._write_markers(job))
            self._marker_tasks.add(task)
            task.add_done_callback(self._marker_tasks.discard)

    def on_stop(self) -> None:
        """The jobs of this load stop: the next load starts them again from the log. Left
        retrying, an old job could write its marker after the transaction completed, into
        the next transaction of the same producer id and epoch (Kafka drops such markers
        by their coordinator epoch)."""
        for task in self._marker_tasks:
            task.cancel()
        self._marker_tasks.clear()

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
        self.enqueue(WRITTEN, job)

    def run_work(self, work: _Work) -> None:
        if work.kind != WRITTEN:
            super().run_work(work)
            return
        job: MarkerJob = work.item
        result = self.shard.markers_written(
            self.mono_ms(),
            job.transactional_id,
            job.producer_id,
            job.producer_epoch,
            wall_ms=self.wall_ms(),
        )
        refused = self.commit(result, f"completing {job.transactional_id}")
        if refused is not None:
            asyncio.get_running_loop().call_later(COMPLETE_RETRY_S, self.enqueue, WRITTEN, job)


def _log_event(event: TxnEvent) -> None:
    fields = " ".join(f"{k}={v}" for k, v in event.fields.items())
    log.info("%s transactional_id=%s %s", event.kind, event.transactional_id, fields)


class TransactionCoordinatorRuntime(CoordinatorRouter[TxnRunner]):
    """Routes transactional ids to the runner of their ``__transaction_state`` partition."""

    topic = TRANSACTION_STATE_TOPIC
    runner_type = TxnRunner

    def __init__(
        self,
        topics: TopicManager,
        config: BrokerConfig,
        replicas: ReplicaManager,
        control: ControlPlane,
        groups: GroupCoordinatorRuntime,
    ) -> None:
        self.groups = groups
        self.control = control
        self.verification = bool(config["transaction.partition.verification.enable"])
        self.producer_ids = BrokerProducerIds(topics)
        super().__init__(
            topics, config, replicas, control, int(config["transaction.state.log.num.partitions"])
        )

    def internal_topic(self) -> InternalTopic:
        return InternalTopic(
            TRANSACTION_STATE_TOPIC,
            self.num_partitions,
            int(self.config["transaction.state.log.replication.factor"]),
            {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.config["transaction.state.log.segment.bytes"]),
            },
            min_insync_replicas=int(self.config["transaction.state.log.min.isr"]),
        )

    def new_runner(self, index: int, writer: PartitionWriter) -> TxnRunner:
        config = self.config
        core_config = TxnConfig(
            max_timeout_ms=int(config["transaction.max.timeout.ms"]),
            id_expiration_ms=int(config["transactional.id.expiration.ms"]),
            expiration_check_interval_ms=int(
                config["transaction.remove.expired.transaction.cleanup.interval.ms"]
            ),
            num_partitions=self.num_partitions,
        )
        return TxnRunner(
            index,
            writer,
            core_config,
            producer_ids=self.producer_ids,
            write_marker=self.write_marker,
            write_timeout_ms=self.write_timeout_ms,
        )

    def leads(self, transactional_id: str) -> bool:
        """Whether this broker coordinates the transactional id now."""
        runner = self.runner_for(transactional_id)
        return runner is not None and runner.leading

    def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition
    ) -> ErrorCode:
        if not self.verification:
            return ErrorCode.NONE
        runner = self.runner_for(transactional_id)
        if runner is None or not runner.leading:
            # The coordinator is another broker: Kafka asks it (AddPartitionsToTxn v4
            # verify-only); Odradek does not yet, so the write goes unverified.
            return ErrorCode.NONE
        return runner.verify(transactional_id, producer_id, producer_epoch, tp)

    async def write_marker(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """One marker into one partition, through the partition's leader: this broker if
        it leads the partition (the marker then waits for the ISR), else the leader the
        control plane knows (WriteTxnMarkers; a partition that no longer exists is
        skipped). Raises when it could not be written: the caller retries.
        """
        topic, partition = tp
        if self.replicas.leads(topic, partition):
            await self.write_local_marker(tp, producer_id, producer_epoch, commit)
        else:
            await self.control.send_marker(tp, producer_id, producer_epoch, commit)

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
        replica = self.replicas.get(topic, partition)
        if replica is None or self.topics.partition(topic, partition) is None:
            log.info("skipping the marker for %s-%d: no such partition", topic, partition)
            return
        marker = build_end_txn_marker(
            producer_id, producer_epoch, commit=commit, timestamp_ms=wall_clock_ms()
        )
        try:
            info = self.replicas.append(replica, marker, from_client=False)
        except InvalidProducerEpochError as exc:
            # A newer epoch already wrote here: this marker's transaction is over.
            log.warning("dropping a stale marker for %s-%d: %s", topic, partition, exc)
            return
        # Kafka writes markers with acks=all: written once the ISR holds it.
        error = await self.replicas.wait_replicated(replica, info.last_offset, MARKER_TIMEOUT_S)
        if error:
            raise RuntimeError(
                f"marker in {topic}-{partition} not replicated: {ErrorCode(error).name}"
            )
