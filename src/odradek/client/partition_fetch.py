"""Reading one partition from its leader at offsets the caller chooses (no group, no
consumer): the public fetch API the Spark source's executors use.

    fetcher = PartitionFetcher(client, config, TopicPartition("t", 0))
    future = fetcher.send(position)        # a Fetch on the wire (None: no leader yet)
    ...                                     # decode the previous answer meanwhile
    answer = fetcher.receive(future)        # FetchedPartition, or None: retry

``send`` puts a full Fetch (no fetch session: one partition, whose offsets the caller
plans) on the leader's connection and returns at once, so a caller can pipeline: the
next fetch travels while it decodes the last one. ``receive`` waits for the answer and
sorts out what went wrong the way the consumer's ``Fetcher`` does:

* a retriable failure (a connection or request timeout, a leader that moved, an
  unknown leader epoch, a topic the broker does not know yet) asks for fresh
  metadata, backs off ``retry_backoff_ms`` and returns None: send again at the same
  position (Java's ``InvalidMetadataException`` handling);
* anything else raises its ``KafkaError``; OFFSET_OUT_OF_RANGE raises
  ``OffsetOutOfRangeError`` (the caller decides: skip to the log start, or stop);
* otherwise a ``FetchedPartition``: the record batches as the broker sent them
  (undecoded: ``fetched.py`` and ``spark/arrow.py`` decode them), the aborted
  transactions for ``read_committed``, and the log end the answer reports (the high
  watermark, or the last stable offset with ``read_committed``).
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any, NamedTuple

from odradek.client.cluster import KafkaClient
from odradek.client.config import ConsumerConfig
from odradek.client.errors import KafkaError, make_error
from odradek.client.offsets import fetch_request_body
from odradek.client.structs import TopicPartition
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

READ_UNCOMMITTED, READ_COMMITTED = 0, 1  # Fetch's isolation_level


class FetchedPartition(NamedTuple):
    """One partition's answer to a Fetch."""

    log_end: int  # high watermark; last stable offset with read_committed
    records: bytes  # record batches, undecoded
    aborted_transactions: Any  # (producer id, first offset) entries; None if none


class PartitionFetcher:
    """Fetches one partition from its leader (see module docs). Thread-compatible: one
    user at a time; the ``KafkaClient`` it uses may be shared."""

    def __init__(
        self,
        client: KafkaClient,
        config: ConsumerConfig,
        tp: TopicPartition,
        *,
        max_wait_ms: int | None = None,
        partition_max_bytes: int | None = None,
    ) -> None:
        self.client = client
        self.config = config
        self.tp = tp
        self.read_committed = config.isolation_level == "read_committed"
        self.max_wait_ms = config.fetch_max_wait_ms if max_wait_ms is None else max_wait_ms
        self.partition_max_bytes = (
            config.max_partition_fetch_bytes if partition_max_bytes is None else partition_max_bytes
        )
        self._timeout_ms = config.request_timeout_ms + self.max_wait_ms

    def send(self, position: int) -> Future[Any] | None:
        """Send a Fetch at ``position`` to the leader; None when the leader is unknown
        even after a metadata refresh (``receive(None)`` backs off)."""
        client, tp, config = self.client, self.tp, self.config
        leader = client.cluster.leader_for(tp)
        if leader < 0:
            client.refresh([tp.topic], timeout_s=config.request_timeout_ms / 1000)
            leader = client.cluster.leader_for(tp)
            if leader < 0:
                return None
        body = fetch_request_body(
            {tp: position},
            max_wait_ms=self.max_wait_ms,
            min_bytes=1,
            max_bytes=max(config.fetch_max_bytes, self.partition_max_bytes),
            partition_max_bytes=self.partition_max_bytes,
            isolation_level=READ_COMMITTED if self.read_committed else READ_UNCOMMITTED,
            rack_id=config.client_rack,
        )
        return client.send(leader, ApiKey.FETCH, body, timeout_ms=self._timeout_ms)

    def receive(self, future: Future[Any] | None) -> FetchedPartition | None:
        """The answer to ``send``'s fetch; None (after backing off) when it failed in a way
        that retrying fixes; raises any other error (see module docs)."""
        if future is None:
            self.back_off()
            return None
        try:
            response = future.result(timeout=self.config.request_timeout_ms / 1000 + 1.0)
        except (KafkaError, TimeoutError) as exc:
            if isinstance(exc, KafkaError) and not exc.retriable:
                raise
            log.debug("fetch of %s failed: %s", self.tp, exc)
            self.back_off()
            return None
        top = int(getattr(response, "error_code", 0))
        if top != ErrorCode.NONE:
            return self._failed(top)
        tp = self.tp
        for t in response.responses:
            if t.topic != tp.topic:
                continue
            for p in t.partitions:
                if int(p.partition_index) != tp.partition:
                    continue
                code = int(p.error_code)
                if code != ErrorCode.NONE:
                    return self._failed(code)
                end = int(p.high_watermark)
                lso = int(getattr(p, "last_stable_offset", -1))
                if self.read_committed and lso >= 0:
                    end = lso
                blob = bytes(p.records) if p.records else b""
                return FetchedPartition(end, blob, getattr(p, "aborted_transactions", None))
        self.back_off()  # the broker left the partition out: ask again
        return None

    def _failed(self, code: int) -> None:
        error = make_error(code, f"Fetch {self.tp}")
        if not error.retriable:
            raise error
        self.back_off()
        return None

    def back_off(self) -> None:
        """Ask for fresh metadata, wait ``retry_backoff_ms``, refresh if it is due."""
        client, config = self.client, self.config
        client.request_update()
        time.sleep(config.retry_backoff_ms / 1000)
        client.maybe_refresh(timeout_s=config.request_timeout_ms / 1000)
