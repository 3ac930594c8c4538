"""What a source task runs in an executor's Python worker: one offset range to Arrow.

Spark reuses Python workers across tasks and micro-batches
(``spark.python.worker.reuse``, on by default), so each worker process keeps
one ``KafkaClient`` per (bootstrap, settings): its connections, negotiated
versions and metadata outlive the task. A task then costs its Fetch round trips
and nothing else: no bootstrap, no ListOffsets unless a fetch answers
OFFSET_OUT_OF_RANGE (that is how a missing range is detected, and only then is
the log start looked up), and no closing handshake.

Fetches go through the client's public fetch API
(``odradek.client.partition_fetch.PartitionFetcher``: leader lookup, retriable errors
and back-off are the client's) and are pipelined: the next fetch of the range is on
the wire while the previous answer is decoded by the compiled codec and copied into
Arrow buffers (``arrow.add_fetched``). The log end is the high watermark of the task's
own fetches (the last stable offset with read_committed).
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from odradek.client.cluster import KafkaClient
from odradek.client.config import ConsumerConfig
from odradek.client.errors import OffsetOutOfRangeError
from odradek.client.offsets import EARLIEST_TIMESTAMP, list_offsets
from odradek.client.partition_fetch import PartitionFetcher
from odradek.client.read_committed import ReadCommittedFilter
from odradek.client.structs import TopicPartition

from .arrow import ColumnsBuilder, add_fetched
from .planning import OffsetRange

log = logging.getLogger(__name__)

ROWS_PER_ARROW_BATCH = 32_768  # emit an Arrow batch once this many rows are gathered
FETCH_MAX_WAIT_MS = 100  # the planned range exists: a fetch should not wait at the log end
MIN_PARTITION_FETCH_BYTES = 4 << 20  # a task reads one partition: ask for more per fetch


class DataLossError(RuntimeError):
    """Offsets the query needs are gone (retention, deletion, a recreated topic)."""


def data_loss(fail: bool, message: str) -> None:
    if fail:
        raise DataLossError(
            message + ". Some data may have been lost (retention, a deleted or recreated topic). "
            "Set failOnDataLoss=false to skip it instead."
        )
    log.warning("%s; skipping (failOnDataLoss=false)", message)


# ---------------------------------------------------------------------- per-worker clients

_clients: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[KafkaClient, ConsumerConfig]] = {}
_clients_lock = threading.Lock()


def worker_client(
    bootstrap: str, settings: Mapping[str, Any]
) -> tuple[KafkaClient, ConsumerConfig]:
    """This process's client for ``bootstrap`` and ``settings``, made on first use."""
    key = (bootstrap, tuple(sorted((str(k), repr(v)) for k, v in settings.items())))
    with _clients_lock:
        found = _clients.get(key)
        if found is not None and not found[0].closed:
            return found
        config = ConsumerConfig.from_settings(
            {
                **settings,
                "bootstrap.servers": bootstrap,
                "enable.auto.commit": False,
                "allow.auto.create.topics": False,
            }
        )
        found = _clients[key] = (KafkaClient(config), config)
        return found


def close_worker_clients() -> None:
    """Close every cached client (at interpreter exit; tests call it too)."""
    with _clients_lock:
        clients = [client for client, _ in _clients.values()]
        _clients.clear()
    for client in clients:
        client.close()


atexit.register(close_worker_clients)


# ---------------------------------------------------------------------- reading a range


class RangeReader:
    """Reads ``[from, until)`` of one partition into Arrow RecordBatches."""

    def __init__(
        self,
        client: KafkaClient,
        config: ConsumerConfig,
        rng: OffsetRange,
        *,
        include_headers: bool,
        fail_on_data_loss: bool,
        poll_timeout_s: float,
    ) -> None:
        self.client = client
        self.config = config
        self.range = rng
        self.tp = TopicPartition(rng.topic, rng.partition)
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.poll_timeout_s = poll_timeout_s
        self.read_committed = config.isolation_level == "read_committed"
        self.fetcher = PartitionFetcher(
            client,
            config,
            self.tp,
            max_wait_ms=min(config.fetch_max_wait_ms, FETCH_MAX_WAIT_MS),
            partition_max_bytes=max(
                config.max_partition_fetch_bytes,
                min(MIN_PARTITION_FETCH_BYTES, config.fetch_max_bytes),
            ),
        )

    def _log_start(self) -> int:
        found = list_offsets(
            self.client,
            {self.tp: EARLIEST_TIMESTAMP},
            timeout_s=self.config.request_timeout_ms / 1000,
        )[self.tp]
        return found.offset if found is not None else 0

    # --- the loop

    def batches(self) -> Iterator[pa.RecordBatch]:
        rng, tp, fetcher = self.range, self.tp, self.fetcher
        position, until = rng.from_offset, rng.until_offset
        builder = ColumnsBuilder(rng.topic, rng.partition, self.include_headers)
        check_crcs = bool(self.config.check_crcs)
        last_progress = time.monotonic()
        future = fetcher.send(position) if position < until else None
        while position < until:
            try:
                answer = fetcher.receive(future)
            except OffsetOutOfRangeError:
                position = self._out_of_range(position)
                future = fetcher.send(position) if position < until else None
                continue
            future = None
            if answer is None:  # retriable: the fetcher backed off
                self._check_idle(position, last_progress)
                future = fetcher.send(position)
                continue
            before = position
            rows_before = len(builder)
            committed = (
                ReadCommittedFilter(answer.aborted_transactions) if self.read_committed else None
            )
            position = add_fetched(builder, answer.records, position, until, check_crcs, committed)
            # The next fetch goes out before this one's rows are turned into Arrow.
            if position < until:
                future = fetcher.send(position)
            if len(builder) > rows_before or position > before:
                last_progress = time.monotonic()
            if len(builder) >= ROWS_PER_ARROW_BATCH:
                yield builder.build()
            if position == before and position < until:
                if answer.log_end <= position:
                    data_loss(
                        self.fail_on_data_loss,
                        f"{tp}: the log ends at {answer.log_end}, before the planned end "
                        f"offset {until}",
                    )
                    break
                self._check_idle(position, last_progress)
        # A fetch still in flight (after a data-loss stop) is answered and dropped.
        if len(builder):
            yield builder.build()

    def _out_of_range(self, position: int) -> int:
        """The fetch offset is outside the log: skip to its start, or stop at its end."""
        tp, until = self.tp, self.range.until_offset
        start = self._log_start()
        if start > position:
            data_loss(
                self.fail_on_data_loss,
                f"{tp}: offsets [{position}, {min(start, until)}) are no longer available "
                f"(log start offset is {start})",
            )
            return start
        data_loss(
            self.fail_on_data_loss,
            f"{tp}: offset {position} is out of range, the log ends before the planned end "
            f"offset {until}",
        )
        return until

    def _check_idle(self, position: int, last_progress: float) -> None:
        if time.monotonic() - last_progress > self.poll_timeout_s:
            rng = self.range
            raise TimeoutError(
                f"{self.tp}: no records for {self.poll_timeout_s:.0f}s while reading offset "
                f"{position} of [{rng.from_offset}, {rng.until_offset}) "
                "(kafkaConsumer.pollTimeoutMs)"
            )


def read_range(
    rng: OffsetRange,
    bootstrap: str,
    consumer_settings: Mapping[str, Any],
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_s: float,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of ``rng``, read with this worker's cached client."""
    client, config = worker_client(bootstrap, consumer_settings)
    reader = RangeReader(
        client,
        config,
        rng,
        include_headers=include_headers,
        fail_on_data_loss=fail_on_data_loss,
        poll_timeout_s=poll_timeout_s,
    )
    return reader.batches()
