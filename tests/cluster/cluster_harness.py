"""Helpers for the cluster acceptance tests: a 3-broker `LocalCluster`, the metadata
etcd holds (the source of truth for leaders, ISRs and the controller), waits with
deadlines, and partition logs read from the brokers' data dirs after a clean stop.

Process management is `odradek.devcluster.launcher.LocalCluster`'s; nothing here
starts or signals a process by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from odradek.client.admin import AdminClient, ConsumerGroupDescription
from odradek.cluster.metadata import EtcdMetadataStore
from odradek.coordinator.routing import partition_for
from odradek.devcluster.launcher import EtcdTlsFiles, LocalCluster, run_coroutine
from odradek.log import LogConfig, PartitionLog
from odradek.protocol.internal_topics import OFFSETS_TOPIC
from odradek.protocol.records import DecodedRecord, decode_batch_records, iter_batches
from odradek.replication.model import ClusterMetadata

T = TypeVar("T")


# A broker's etcd lease lives broker.session.timeout.ms: a SIGKILLed or SIGSTOPped
# broker is declared dead (its registration and leaderships dropped) after about this.
LEASE_TTL_MS = 3000
CLUSTER_SETTINGS = {
    "broker.session.timeout.ms": str(LEASE_TTL_MS),
    "replica.lag.time.max.ms": "5000",
    "group.initial.rebalance.delay.ms": "0",
    # fewer coordinator partitions than Kafka's 50: less replication work on 2 cores,
    # and the group still lives on one partition with 3 replicas
    "offsets.topic.num.partitions": "3",
    "offsets.topic.replication.factor": "3",
}
START_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0
ETCD_READ_TIMEOUT_S = 10.0
POLL_INTERVAL_S = 0.2


@contextlib.contextmanager
def running_cluster(
    data_dir: Path,
    brokers: int = 3,
    settings: dict[str, str] | None = None,
    extra_listeners: tuple[str, ...] = (),
    etcd_members: int = 1,
    etcd_tls: EtcdTlsFiles | None = None,
) -> Iterator[LocalCluster]:
    """etcd (`etcd_members` members) and `brokers` brokers, every one registered; all
    stopped on exit, even after a failure (a paused broker gets SIGCONT with its
    SIGTERM). `settings` are added to (or override) CLUSTER_SETTINGS; `extra_listeners`
    are opened by every broker besides its PLAINTEXT one, `etcd_tls` puts etcd behind
    TLS (`LocalCluster.prepare`)."""
    cluster = LocalCluster.prepare(
        data_dir,
        brokers=brokers,
        settings={**CLUSTER_SETTINGS, **(settings or {})},
        extra_listeners=extra_listeners,
        etcd_members=etcd_members,
        etcd_tls=etcd_tls,
        wait_for_registration=True,
    )
    try:
        cluster.start_all(timeout_s=START_TIMEOUT_S)
        yield cluster
    finally:
        LocalCluster.open(data_dir).stop_all(timeout_s=STOP_TIMEOUT_S)


def log_paths(cluster: LocalCluster) -> str:
    """Where to look when an assertion fails."""
    return ", ".join(str(cluster.layout.log_path(b)) for b in cluster.broker_ids)


def wait_for(
    what: str, probe: Callable[[], T | None], timeout_s: float, context: Callable[[], str]
) -> T:
    """Poll `probe` until it returns something other than None (or raise, with `context`)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout_s:.0f} s; {context()}")
        time.sleep(POLL_INTERVAL_S)


def eventually(predicate: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    """Poll `predicate` until it returns something true; an exception (a broker still
    electing or restarting) counts as not yet. Raises AssertionError naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except Exception:
            value = None
        if value:
            return value
        time.sleep(POLL_INTERVAL_S)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


# ---------------------------------------------------------------------------
# What etcd says


def cluster_metadata(cluster: LocalCluster) -> ClusterMetadata:
    """Everything the cluster's etcd holds, read at one revision."""

    async def read() -> ClusterMetadata:
        async with EtcdMetadataStore.for_endpoints(
            cluster.etcd_endpoints(),
            cluster_name=cluster.cluster_name,
            tls=cluster.etcd_client_tls(),
        ) as store:
            return (await store.cluster()).items

    return run_coroutine(lambda: asyncio.wait_for(read(), ETCD_READ_TIMEOUT_S))


def describe_metadata(md: ClusterMetadata) -> str:
    parts = [
        f"{t}-{p}: leader {v.state.leader} isr {list(v.state.isr)}"
        for (t, p), v in sorted(md.partitions.items())
    ]
    controller = md.controller.broker_id if md.controller else None
    return f"registered {sorted(md.brokers)}, controller {controller}; " + "; ".join(parts)


def unhealthy_partitions(md: ClusterMetadata, brokers: list[int]) -> list[str]:
    """Partitions whose leader is not a registered broker or whose ISR lacks a replica."""
    problems = []
    for (topic, partition), versioned in sorted(md.partitions.items()):
        assignment = md.topics.get(topic)
        replicas = assignment.replicas[partition] if assignment else ()
        state = versioned.state
        if state.leader not in md.brokers or set(state.isr) != set(replicas):
            problems.append(f"{topic}-{partition} leader {state.leader} isr {list(state.isr)}")
    if sorted(md.brokers) != sorted(brokers):
        problems.append(f"registered {sorted(md.brokers)} of {sorted(brokers)}")
    return problems


def wait_fully_replicated(
    cluster: LocalCluster, timeout_s: float, context: Callable[[], str] = str
) -> ClusterMetadata:
    """Until every broker is registered and every partition's ISR holds all its replicas
    (`context` adds to the message if not)."""
    last: list[ClusterMetadata] = []

    def probe() -> ClusterMetadata | None:
        md = cluster_metadata(cluster)
        last[:] = [md]
        return None if unhealthy_partitions(md, cluster.broker_ids) else md

    def state() -> str:
        seen = describe_metadata(last[0]) if last else "etcd never answered"
        return f"{seen}\n{context()}\nbroker logs: {log_paths(cluster)}"

    return wait_for("every ISR full again", probe, timeout_s, state)


def controller_id(md: ClusterMetadata) -> int | None:
    return md.controller.broker_id if md.controller else None


def partition_leader(md: ClusterMetadata, topic: str, partition: int) -> int | None:
    versioned = md.partitions.get((topic, partition))
    return versioned.state.leader if versioned else None


def group_partition(md: ClusterMetadata, group_id: str) -> int:
    """The `__consumer_offsets` partition that holds `group_id` (the topic must exist)."""
    return partition_for(group_id, len(md.topics[OFFSETS_TOPIC].replicas))


def coordinator_id(md: ClusterMetadata, group_id: str) -> int | None:
    """The group's coordinator: the leader of its `__consumer_offsets` partition."""
    if OFFSETS_TOPIC not in md.topics:
        return None
    return partition_leader(md, OFFSETS_TOPIC, group_partition(md, group_id))


# ---------------------------------------------------------------------------
# What the brokers answer


class GroupProbe:
    """DescribeGroups / OffsetFetch through Odradek's admin client (re-created after an
    error, so a dead broker it was talking to does not stick)."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        self._admin: AdminClient | None = None
        self.last_error: str | None = None

    def _client(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(
                bootstrap_servers=self.bootstrap_servers,
                request_timeout_ms=3000,
                default_api_timeout_ms=3000,
                socket_connection_setup_timeout_ms=1000,
            )
        return self._admin

    def _reset(self, exc: Exception) -> None:
        self.last_error = repr(exc)
        self.close()

    def describe(self, group_id: str) -> ConsumerGroupDescription | None:
        try:
            return self._client().describe_consumer_groups([group_id], timeout_ms=3000)[group_id]
        except Exception as exc:  # any failure means "not answered now"
            self._reset(exc)
            return None

    def stable_members(self, group_id: str) -> int | None:
        """How many members the group has when its coordinator says Stable, else None."""
        description = self.describe(group_id)
        if description is None or description.state != "Stable":
            return None
        return len(description.members)

    def controller_id(self) -> int | None:
        """The controller a broker's Metadata answer names."""
        try:
            return self._client().describe_cluster(timeout_ms=3000).controller_id
        except Exception as exc:
            self._reset(exc)
            return None

    def committed(self, group_id: str) -> dict[tuple[str, int], int] | None:
        try:
            offsets = self._client().list_consumer_group_offsets(group_id, timeout_ms=3000)
        except Exception as exc:
            self._reset(exc)
            return None
        return {(tp.topic, tp.partition): om.offset for tp, om in offsets.items()}

    def close(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None


# ---------------------------------------------------------------------------
# Logs on disk (read after the cluster stopped)


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    broker_id: int
    start_offset: int
    end_offset: int
    records: list[DecodedRecord]


def read_replica_log(
    cluster: LocalCluster, broker_id: int, topic: str, partition: int
) -> ReplicaLog:
    directory = cluster.layout.broker_dir(broker_id) / f"{topic}-{partition}"
    assert directory.is_dir(), f"broker {broker_id} has no {directory}"
    log = PartitionLog.open(directory, LogConfig(), now_ms=lambda: int(time.time() * 1000))
    try:
        records: list[DecodedRecord] = []
        for batch in log.iter_batches_from(log.start_offset):
            for position, header in iter_batches(batch):
                records.extend(decode_batch_records(batch, position, header))
        return ReplicaLog(broker_id, log.start_offset, log.end_offset, records)
    finally:
        log.close()
