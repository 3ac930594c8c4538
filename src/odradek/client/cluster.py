"""Cluster view and connection pool shared by the producer, consumer and admin client.

``KafkaClient`` bootstraps from ``bootstrap_servers`` (connections to bootstrap
addresses get negative node ids, as in the Java client, and are dropped once
real broker ids are known), keeps one ``BrokerConnection`` per node, and holds a
``ClusterMetadata`` snapshot that is replaced on each refresh. A refresh
happens when someone asks for it (``request_update``; unknown topics, leader
errors) or when the snapshot is older than ``metadata_max_age_ms``
(``maybe_refresh``). Refreshes are synchronous on the calling thread and
coalesced: concurrent callers wait for the one in progress.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from odradek.client.config import CommonConfig
from odradek.client.connection import Body, BrokerConnection
from odradek.client.errors import (
    InvalidTopicError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    UnknownTopicOrPartitionError,
    make_error,
)
from odradek.client.security import is_authentication_error
from odradek.client.structs import BrokerMetadata, PartitionMetadata, TopicPartition
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

# A topic's metadata error that only means "not there yet" (created a moment ago).
_NOT_YET = frozenset(
    {ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.LEADER_NOT_AVAILABLE}
)


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    error_code: int
    is_internal: bool
    partitions: dict[int, PartitionMetadata]
    topic_id: Any = None


@dataclass(frozen=True)
class ClusterMetadata:
    """An immutable snapshot of brokers, controller and topic partitions."""

    brokers: dict[int, BrokerMetadata] = field(default_factory=dict)
    topics: dict[str, TopicMetadata] = field(default_factory=dict)
    controller_id: int = -1
    cluster_id: str | None = None
    updated_at: float = 0.0  # time.monotonic() of the response

    def partitions_for(self, topic: str) -> list[int] | None:
        meta = self.topics.get(topic)
        if meta is None or meta.error_code != ErrorCode.NONE:
            return None
        return sorted(meta.partitions)

    def available_partitions_for(self, topic: str) -> list[int]:
        meta = self.topics.get(topic)
        if meta is None:
            return []
        return sorted(p for p, pm in meta.partitions.items() if pm.leader >= 0)

    def leader_for(self, tp: TopicPartition) -> int:
        """Leader node id of ``tp``; -1 when unknown or leaderless."""
        meta = self.topics.get(tp.topic)
        if meta is None:
            return -1
        pm = meta.partitions.get(tp.partition)
        return pm.leader if pm is not None else -1

    def partition(self, tp: TopicPartition) -> PartitionMetadata | None:
        meta = self.topics.get(tp.topic)
        return None if meta is None else meta.partitions.get(tp.partition)


def metadata_request_body(topics: Iterable[str] | None, allow_auto_create: bool) -> Body:
    names = None if topics is None else sorted(set(topics))

    def body(version: int) -> dict[str, Any]:
        topic_list: Any = None if names is None else [{"name": n, "topic_id": None} for n in names]
        return {
            "topics": topic_list,
            "allow_auto_topic_creation": allow_auto_create,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        }

    return body


def parse_metadata(response: Any, now: float) -> ClusterMetadata:
    brokers = {
        int(b.node_id): BrokerMetadata(
            int(b.node_id), b.host, int(b.port), getattr(b, "rack", None)
        )
        for b in response.brokers
    }
    topics: dict[str, TopicMetadata] = {}
    for t in response.topics:
        if t.name is None:
            continue
        parts: dict[int, PartitionMetadata] = {}
        for p in t.partitions:
            parts[int(p.partition_index)] = PartitionMetadata(
                topic=t.name,
                partition=int(p.partition_index),
                leader=int(p.leader_id),
                leader_epoch=int(getattr(p, "leader_epoch", -1)),
                replicas=tuple(int(r) for r in p.replica_nodes),
                isr=tuple(int(r) for r in p.isr_nodes),
                offline_replicas=tuple(int(r) for r in getattr(p, "offline_replicas", ())),
                error_code=int(p.error_code),
            )
        topics[t.name] = TopicMetadata(
            t.name,
            int(t.error_code),
            bool(getattr(t, "is_internal", False)),
            parts,
            getattr(t, "topic_id", None),
        )
    return ClusterMetadata(
        brokers=brokers,
        topics=topics,
        controller_id=int(getattr(response, "controller_id", -1)),
        cluster_id=getattr(response, "cluster_id", None),
        updated_at=now,
    )


class KafkaClient:
    """Connections to every broker plus the metadata cache (thread-safe)."""

    def __init__(self, config: CommonConfig, *, allow_auto_create_topics: bool = False) -> None:
        self.config = config
        self.allow_auto_create_topics = allow_auto_create_topics
        self._bootstrap = config.bootstrap_addresses()
        self._lock = threading.RLock()
        self._refresh_lock = threading.Lock()
        self._conns: dict[int, BrokerConnection] = {}
        self._bootstrap_conns: dict[int, BrokerConnection] = {}
        self.cluster = ClusterMetadata()
        self._topics: set[str] = set()  # topics whose metadata we keep
        self._want_all_topics = False
        self._update_requested = True
        self._refresh_failures = 0
        self._closed = False

    # ------------------------------------------------------------------ topics of interest

    def add_topics(self, topics: Iterable[str]) -> None:
        with self._lock:
            new = set(topics) - self._topics
            if new:
                self._topics |= new
                self._update_requested = True

    def set_topics(self, topics: Iterable[str]) -> None:
        with self._lock:
            topics = set(topics)
            if topics != self._topics:
                self._topics = topics
                self._update_requested = True

    def request_update(self) -> None:
        self._update_requested = True

    # ------------------------------------------------------------------ connections

    def _connection(self, node_id: int) -> BrokerConnection:
        with self._lock:
            if self._closed:
                raise KafkaConnectionError("client is closed")
            conn = self._conns.get(node_id) or self._bootstrap_conns.get(node_id)
            if conn is not None:
                return conn
            broker = self.cluster.brokers.get(node_id)
            if broker is None:
                raise KafkaConnectionError(f"unknown broker node {node_id}")
            conn = BrokerConnection(node_id, broker.host, broker.port, self.config)
            self._conns[node_id] = conn
            return conn

    def connection(self, node_id: int, timeout_s: float | None = None) -> BrokerConnection:
        """The connection to ``node_id``, connected and negotiated (may block)."""
        conn = self._connection(node_id)
        conn.ensure_ready(timeout_s)
        return conn

    def send(
        self,
        node_id: int,
        api_key: int,
        body: Body | Any,
        *,
        expect_response: bool = True,
        timeout_ms: int | None = None,
    ) -> Future[Any]:
        """Send to a node, connecting first if needed; connection errors fail the future."""
        try:
            conn = self.connection(node_id, self._connect_timeout(timeout_ms))
        except KafkaError as exc:
            future: Future[Any] = Future()
            future.set_exception(exc)
            return future
        return conn.send(api_key, body, expect_response=expect_response, timeout_ms=timeout_ms)

    def request(
        self, node_id: int, api_key: int, body: Body | Any, *, timeout_ms: int | None = None
    ) -> Any:
        """Blocking send; raises the connection / timeout error, returns the response."""
        future = self.send(node_id, api_key, body, timeout_ms=timeout_ms)
        wait = (timeout_ms if timeout_ms is not None else self.config.request_timeout_ms) / 1000
        try:
            return future.result(timeout=wait + 1.0)
        except TimeoutError:
            raise KafkaTimeoutError(f"{ApiKey(api_key).name} to node {node_id} timed out") from None

    def api_version(self, node_id: int, api_key: int) -> int:
        return self.connection(node_id).api_version(api_key)

    def _connect_timeout(self, timeout_ms: int | None) -> float:
        setup = self.config.socket_connection_setup_timeout_ms
        if timeout_ms is not None:
            setup = min(setup, timeout_ms)
        return setup / 1000

    def in_flight(self, node_id: int) -> int:
        conn = self._conns.get(node_id)
        return conn.in_flight_count if conn is not None else 0

    def least_loaded_node(self) -> int | None:
        """A broker with the fewest requests in flight, preferring connected ones.

        Brokers backing off after failed connects come last; with no metadata
        yet, a bootstrap address (negative id) in random order.
        """
        with self._lock:
            brokers = list(self.cluster.brokers)
        if not brokers:
            return None
        random.shuffle(brokers)
        best: int | None = None
        best_score: tuple[int, int, int] | None = None
        for node_id in brokers:
            conn = self._conns.get(node_id)
            if conn is None:
                score = (0, 1, 0)
            else:
                backing_off = 1 if (not conn.ready and conn.backoff_remaining() > 0) else 0
                score = (backing_off, 0 if conn.ready else 1, conn.in_flight_count)
            if best_score is None or score < best_score:
                best, best_score = node_id, score
        return best

    # ------------------------------------------------------------------ metadata

    def metadata_age_s(self) -> float:
        return time.monotonic() - self.cluster.updated_at

    def maybe_refresh(self, timeout_s: float | None = None) -> None:
        """Refresh if an update was requested or the cache is older than metadata_max_age_ms."""
        if (
            self._update_requested
            or self.metadata_age_s() * 1000 >= self.config.metadata_max_age_ms
        ):
            backoff = (
                min(
                    self.config.retry_backoff_max_ms,
                    self.config.retry_backoff_ms * (2 ** min(self._refresh_failures, 10)),
                )
                / 1000
            )
            if self.cluster.updated_at and self.metadata_age_s() < backoff:
                return
            try:
                self.refresh(timeout_s=timeout_s)
            except KafkaError as exc:
                log.debug("metadata refresh failed: %s", exc)

    def refresh(
        self,
        topics: Iterable[str] | None = None,
        *,
        all_topics: bool = False,
        timeout_s: float | None = None,
    ) -> ClusterMetadata:
        """Fetch metadata now (for the tracked topics plus ``topics``) and return the snapshot."""
        if topics is not None:
            topics = list(topics)
            self.add_topics(topics)
        timeout_s = self.config.request_timeout_ms / 1000 if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        started = time.monotonic()
        wanted_now = set(topics) if topics is not None else set()
        with self._refresh_lock:
            if (
                self.cluster.updated_at > started
                and not all_topics
                and wanted_now.issubset(self.cluster.topics)
            ):
                return self.cluster  # someone refreshed, for our topics too, while we waited
            with self._lock:
                wanted: list[str] | None = (
                    None if (all_topics or self._want_all_topics) else sorted(self._topics)
                )
                self._update_requested = False
            last_error: BaseException | None = None
            snapshot: ClusterMetadata | None = None
            for node_id in self._refresh_candidates():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    conn = self._any_connection(node_id, remaining)
                    response = conn.request(
                        ApiKey.METADATA,
                        metadata_request_body(wanted, self.allow_auto_create_topics),
                        timeout_ms=max(1, int(remaining * 1000)),
                    )
                except (KafkaError, TimeoutError, OSError) as exc:
                    last_error = exc
                    continue
                snapshot = parse_metadata(response, time.monotonic())
                break
            if snapshot is None:
                self._refresh_failures += 1
                self._update_requested = True
                if last_error is None:
                    raise KafkaTimeoutError("metadata refresh timed out")
                if is_authentication_error(last_error):
                    raise last_error  # the broker refused who we are: retrying cannot help
                raise NoBrokersAvailableError(f"no broker answered Metadata: {last_error}")
            stale = self._install(snapshot)
            self._refresh_failures = 0
        # Closing waits for each reader thread: not while others wait for the refresh lock.
        for conn in stale:
            conn.close()
        return snapshot

    def _refresh_candidates(self) -> list[int]:
        """Known brokers (least loaded first), then the bootstrap addresses."""
        out: list[int] = []
        first = self.least_loaded_node()
        if first is not None:
            out.append(first)
        out += [b for b in self.cluster.brokers if b != first]
        with self._lock:
            for i, (host, port) in enumerate(self._bootstrap):
                node_id = -(i + 1)
                if node_id not in self._bootstrap_conns:
                    self._bootstrap_conns[node_id] = BrokerConnection(
                        node_id, host, port, self.config
                    )
            boot = list(self._bootstrap_conns)
        random.shuffle(boot)
        return out + boot

    def _any_connection(self, node_id: int, timeout_s: float) -> BrokerConnection:
        if node_id < 0:
            conn = self._bootstrap_conns[node_id]
            conn.ensure_ready(timeout_s)
            return conn
        return self.connection(node_id, timeout_s)

    def _install(self, snapshot: ClusterMetadata) -> list[BrokerConnection]:
        """Make ``snapshot`` current; return the connections it made stale (to close)."""
        stale: list[BrokerConnection] = []
        with self._lock:
            old = self.cluster
            self.cluster = snapshot
            # Brokers that moved or left: drop their connections.
            for node_id, conn in list(self._conns.items()):
                b = snapshot.brokers.get(node_id)
                if b is None or (b.host, b.port) != (conn.host, conn.port):
                    del self._conns[node_id]
                    stale.append(conn)
            # Bootstrap connections are only for the first metadata.
            if snapshot.brokers and self._bootstrap_conns:
                stale.extend(self._bootstrap_conns.values())
                self._bootstrap_conns.clear()
        if old.cluster_id and snapshot.cluster_id and old.cluster_id != snapshot.cluster_id:
            log.warning("cluster id changed from %s to %s", old.cluster_id, snapshot.cluster_id)
        return stale

    def wait_for_topic(
        self, topic: str, timeout_s: float, *, raise_unknown: bool = False
    ) -> list[int]:
        """Partitions of ``topic``, refreshing metadata until known or ``timeout_s`` passes."""
        self.add_topics([topic])
        deadline = time.monotonic() + timeout_s
        delay = self.config.retry_backoff_ms / 1000
        while True:
            parts = self.cluster.partitions_for(topic)
            if parts:
                return parts
            meta = self.cluster.topics.get(topic)
            if meta is not None and meta.error_code not in _NOT_YET:
                raise make_error(meta.error_code, f"metadata for topic {topic!r}")
            if meta is not None and meta.error_code == InvalidTopicError.code:
                raise make_error(meta.error_code, topic)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if raise_unknown:
                    raise UnknownTopicOrPartitionError(f"topic {topic!r} not present in metadata")
                raise KafkaTimeoutError(
                    f"topic {topic!r} not present in metadata after {timeout_s:.1f}s"
                )
            with contextlib.suppress(KafkaError):
                self.refresh([topic], timeout_s=remaining)
            if self.cluster.partitions_for(topic):
                continue
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, self.config.retry_backoff_max_ms / 1000)

    def bootstrap(self, timeout_s: float | None = None) -> ClusterMetadata:
        """Make sure some metadata is known (brokers at least)."""
        if self.cluster.brokers:
            return self.cluster
        return self.refresh(timeout_s=timeout_s)

    # ------------------------------------------------------------------ close

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called (a closed client sends nothing)."""
        return self._closed

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._conns.values()) + list(self._bootstrap_conns.values())
            self._conns.clear()
            self._bootstrap_conns.clear()
        for conn in conns:
            conn.close()
