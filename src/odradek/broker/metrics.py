"""Prometheus metrics for the broker (`odradek serve --metrics HOST:PORT`).

Counters and histograms are updated on the event loop as requests complete.
Gauges that describe state (groups, lag, log sizes) are computed at scrape
time: the HTTP server thread asks the event loop for a snapshot, so state is
never read while the loop is changing it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from odradek.broker.security.metrics_http import serve_metrics
from odradek.coordinator.consumer_group import ConsumerGroup
from odradek.coordinator.events import REBALANCE_COMPLETED
from odradek.coordinator.types import CoordinatorEvent

if TYPE_CHECKING:
    from odradek.broker.budget import ByteBudget
    from odradek.broker.connection_quotas import ConnectionQuotas
    from odradek.broker.control_plane import ControlPlane
    from odradek.broker.group_runtime import GroupCoordinatorRuntime
    from odradek.broker.security.listeners import Listener
    from odradek.broker.topics import TopicManager
    from odradek.replication.replica import ReplicaManager


class MeasuredBroker(Protocol):
    """What the metrics read of their broker (``server.Broker`` is one)."""

    listeners: list[Listener]
    connection_quotas: ConnectionQuotas
    budget: ByteBudget
    topics: TopicManager
    replicas: ReplicaManager
    control: ControlPlane
    groups: GroupCoordinatorRuntime


log = logging.getLogger("odradek.metrics")

SNAPSHOT_TIMEOUT_S = 5.0
GROUP_STATES = ("Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead")
# KIP-848 consumer groups (group.protocol=consumer) have states of their own.
CONSUMER_GROUP_STATES = ("Empty", "Assigning", "Reconciling", "Stable", "Dead")
PROTOCOLS = ("classic", "consumer")


@dataclass
class Snapshot:
    """Broker state at one instant, taken on the event loop."""

    group_state: dict[str, str] = field(default_factory=dict)
    group_members: dict[str, int] = field(default_factory=dict)
    # The generation of a classic group, the group epoch of a consumer group.
    group_generation: dict[str, int] = field(default_factory=dict)
    group_protocol: dict[str, str] = field(default_factory=dict)  # "classic" or "consumer"
    assignment_epoch: dict[str, int] = field(default_factory=dict)  # consumer groups only
    lag: list[tuple[str, str, int, int, int]] = field(
        default_factory=list
    )  # group, topic, p, committed, lag
    logs: list[tuple[str, int, int, int, int]] = field(
        default_factory=list
    )  # topic, p, start, end, bytes
    # topic, p, quarantined ranges, offsets in them, skipped ranges (PartitionLog.damage)
    damage: list[tuple[str, int, int, int, int]] = field(default_factory=list)
    # Coordinator failures summed over the __consumer_offsets partitions.
    coordinator_operation_failures: int = 0
    coordinator_reloads: int = 0
    coordinator_load_failures: int = 0
    # Connections open and refused (max.connections.per.ip), per listener.
    connections: dict[str, int] = field(default_factory=dict)
    connections_refused: dict[str, int] = field(default_factory=dict)
    # The request memory budget (queued.max.request.bytes).
    request_memory_used: int = 0
    request_memory_waiting: int = 0
    # Replication and control plane (every node: a lone one leads all, alone in its ISR).
    replication: ReplicationFigures = field(
        default_factory=lambda: ReplicationFigures(0, 0, 0, 0, 0, 0, 0, 0)
    )


@dataclass
class ReplicationFigures:
    """Replication and controller figures of a broker (Kafka's names in docs)."""

    under_replicated: int  # partitions led here whose ISR is smaller than their replicas
    leaders: int
    offline: int  # partitions without a leader (as this broker's view says)
    isr_shrinks: int
    isr_expands: int
    active_controller: int  # 1 on the controller
    leader_elections: int  # leadership changes this broker made as controller
    unclean_elections: int


def _replication_figures(broker: MeasuredBroker) -> ReplicationFigures:
    replicas = broker.replicas
    control = broker.control.figures()
    return ReplicationFigures(
        under_replicated=replicas.under_replicated(),
        leaders=replicas.leaders(),
        offline=control.offline_partitions,
        isr_shrinks=replicas.isr_shrinks,
        isr_expands=replicas.isr_expands,
        active_controller=int(control.active_controller),
        leader_elections=control.leader_elections,
        unclean_elections=control.unclean_elections,
    )


def take_snapshot(broker: MeasuredBroker) -> Snapshot:
    snap = Snapshot()
    snap.replication = _replication_figures(broker)
    quotas = broker.connection_quotas
    for listener in broker.listeners:
        snap.connections[listener.name] = quotas.by_listener[listener.name]
        snap.connections_refused[listener.name] = quotas.refused[listener.name]
    snap.request_memory_used = broker.budget.used
    snap.request_memory_waiting = broker.budget.waiting
    for runner in broker.groups.runners:
        snap.coordinator_operation_failures += runner.operation_failures
        snap.coordinator_reloads += runner.reloads
        snap.coordinator_load_failures += runner.load_failures
        if not runner.loaded:
            continue
        for group_id, group in runner.shard.groups.items():
            snap.group_state[group_id] = group.state.value
            snap.group_members[group_id] = len(group.members)
            if isinstance(group, ConsumerGroup):
                snap.group_protocol[group_id] = "consumer"
                snap.group_generation[group_id] = group.group_epoch
                snap.assignment_epoch[group_id] = group.target_assignment_epoch
            else:
                snap.group_protocol[group_id] = "classic"
                snap.group_generation[group_id] = group.generation_id
            for (topic, partition), committed in group.offsets.items():
                plog = broker.topics.partition(topic, partition)
                if plog is None:
                    continue
                lag = max(plog.end_offset - committed.offset, 0)
                snap.lag.append((group_id, topic, partition, committed.offset, lag))
    for topic in broker.topics:
        for index, plog in enumerate(topic.partitions):
            if plog is None:  # no replica here
                continue
            snap.logs.append(
                (topic.name, index, plog.start_offset, plog.end_offset, plog.size_bytes)
            )
            damage = plog.damage()
            lost = [d for d in damage if d.lost]
            snap.damage.append(
                (
                    topic.name,
                    index,
                    len(lost),
                    sum(d.end_offset - d.first_offset for d in lost),
                    len(damage) - len(lost),
                )
            )
    return snap


class StateCollector(Collector):
    """Gauges computed from a snapshot taken on the broker's event loop."""

    def __init__(self, broker: MeasuredBroker, loop: asyncio.AbstractEventLoop) -> None:
        self.broker = broker
        self.loop = loop

    def _snapshot(self) -> Snapshot | None:
        async def take() -> Snapshot:
            return take_snapshot(self.broker)

        try:
            return asyncio.run_coroutine_threadsafe(take(), self.loop).result(SNAPSHOT_TIMEOUT_S)
        except Exception:
            log.warning("metrics snapshot failed", exc_info=True)
            return None

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        if snap is None:
            return
        state = GaugeMetricFamily(
            "odradek_group_state",
            "1 for the state each consumer group is in",
            labels=["group", "state"],
        )
        members = GaugeMetricFamily("odradek_group_members", "Members per group", labels=["group"])
        generation = GaugeMetricFamily(
            "odradek_group_generation",
            "Current generation per group (the group epoch of a consumer-protocol group)",
            labels=["group"],
        )
        assignment_epoch = GaugeMetricFamily(
            "odradek_group_assignment_epoch",
            "Epoch of the target assignment of each consumer-protocol (KIP-848) group",
            labels=["group"],
        )
        groups = GaugeMetricFamily(
            "odradek_groups", "Groups by rebalance protocol", labels=["protocol"]
        )
        by_protocol = dict.fromkeys(PROTOCOLS, 0)
        for group_id, current in snap.group_state.items():
            protocol = snap.group_protocol.get(group_id, "classic")
            by_protocol[protocol] += 1
            names = CONSUMER_GROUP_STATES if protocol == "consumer" else GROUP_STATES
            for name in names:
                state.add_metric([group_id, name], 1.0 if name == current else 0.0)
            members.add_metric([group_id], snap.group_members[group_id])
            generation.add_metric([group_id], snap.group_generation[group_id])
            if group_id in snap.assignment_epoch:
                assignment_epoch.add_metric([group_id], snap.assignment_epoch[group_id])
        for protocol, count in by_protocol.items():
            groups.add_metric([protocol], count)
        committed = GaugeMetricFamily(
            "odradek_group_committed_offset",
            "Committed offset per group and partition",
            labels=["group", "topic", "partition"],
        )
        lag = GaugeMetricFamily(
            "odradek_group_lag",
            "Log end offset minus committed offset, per group and partition",
            labels=["group", "topic", "partition"],
        )
        for group_id, topic, partition, offset, behind in snap.lag:
            committed.add_metric([group_id, topic, str(partition)], offset)
            lag.add_metric([group_id, topic, str(partition)], behind)
        start = GaugeMetricFamily(
            "odradek_log_start_offset", "Log start offset", labels=["topic", "partition"]
        )
        end = GaugeMetricFamily(
            "odradek_log_end_offset", "Log end offset", labels=["topic", "partition"]
        )
        size = GaugeMetricFamily(
            "odradek_log_size_bytes", "Bytes in segment files", labels=["topic", "partition"]
        )
        for topic, partition, log_start, log_end, size_bytes in snap.logs:
            start.add_metric([topic, str(partition)], log_start)
            end.add_metric([topic, str(partition)], log_end)
            size.add_metric([topic, str(partition)], size_bytes)
        labels = ["topic", "partition"]
        ranges = GaugeMetricFamily(
            "odradek_log_quarantined_ranges",
            "Quarantined ranges found so far in the partition's log: their offsets answer "
            "CORRUPT_MESSAGE (docs/operations.md, Recovery)",
            labels=labels,
        )
        offsets = GaugeMetricFamily(
            "odradek_log_quarantined_offsets",
            "Offsets in the partition's quarantined ranges",
            labels=labels,
        )
        skipped = GaugeMetricFamily(
            "odradek_log_skipped_ranges",
            "Ranges readers skip that hold no missing offset: copies of batches the log "
            "holds, another writer's batches, unreadable bytes between batches",
            labels=labels,
        )
        for topic, partition, lost, lost_offsets, passed in snap.damage:
            ranges.add_metric([topic, str(partition)], lost)
            offsets.add_metric([topic, str(partition)], lost_offsets)
            skipped.add_metric([topic, str(partition)], passed)
        yield from (state, members, generation, assignment_epoch, groups, committed, lag)
        yield from (start, end, size, ranges, offsets, skipped)
        yield CounterMetricFamily(
            "odradek_coordinator_operation_failures",
            "Group requests or timers that failed alone and were undone (error in the "
            "coordinator, records over max.message.bytes)",
            value=snap.coordinator_operation_failures,
        )
        yield CounterMetricFamily(
            "odradek_coordinator_partition_reloads",
            "__consumer_offsets partitions reloaded because log and memory may have diverged",
            value=snap.coordinator_reloads,
        )
        yield CounterMetricFamily(
            "odradek_coordinator_load_failures",
            "Loads of a __consumer_offsets partition that failed (each is retried)",
            value=snap.coordinator_load_failures,
        )
        yield from _connection_metrics(snap)
        yield from _replication_metrics(snap.replication)


def _connection_metrics(snap: Snapshot) -> Iterator[Metric]:
    connections = GaugeMetricFamily(
        "odradek_connections", "Connections open, per listener", labels=["listener"]
    )
    refused = CounterMetricFamily(
        "odradek_connections_refused",
        "Connections closed on arrival because their address had max.connections.per.ip"
        " (or its override), per listener",
        labels=["listener"],
    )
    for listener, count in snap.connections.items():
        connections.add_metric([listener], count)
        refused.add_metric([listener], snap.connections_refused[listener])
    yield from (connections, refused)
    yield GaugeMetricFamily(
        "odradek_request_memory_used_bytes",
        "Bytes of request frames and responses held against queued.max.request.bytes"
        " (Kafka's MemoryPoolUsed)",
        value=snap.request_memory_used,
    )
    yield GaugeMetricFamily(
        "odradek_request_memory_waiting_frames",
        "Request frames waiting for room in queued.max.request.bytes before they are read",
        value=snap.request_memory_waiting,
    )


def _replication_metrics(figures: ReplicationFigures) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "odradek_replication_under_replicated_partitions",
        "Partitions this broker leads whose ISR is smaller than their replica set "
        "(Kafka's UnderReplicatedPartitions)",
        value=figures.under_replicated,
    )
    yield GaugeMetricFamily(
        "odradek_replication_leader_partitions",
        "Partitions this broker leads (Kafka's LeaderCount)",
        value=figures.leaders,
    )
    yield GaugeMetricFamily(
        "odradek_replication_offline_partitions",
        "Partitions without a live leader, as this broker sees the cluster",
        value=figures.offline,
    )
    yield CounterMetricFamily(
        "odradek_replication_isr_shrinks",
        "ISR shrinks this broker proposed as leader (Kafka's IsrShrinksPerSec)",
        value=figures.isr_shrinks,
    )
    yield CounterMetricFamily(
        "odradek_replication_isr_expands",
        "ISR expansions this broker proposed as leader (Kafka's IsrExpandsPerSec)",
        value=figures.isr_expands,
    )
    yield GaugeMetricFamily(
        "odradek_controller_active",
        "1 while this broker is the controller (Kafka's ActiveControllerCount)",
        value=figures.active_controller,
    )
    yield CounterMetricFamily(
        "odradek_controller_leader_elections",
        "Leadership changes this broker made as controller (Kafka's LeaderElectionRate)",
        value=figures.leader_elections,
    )
    yield CounterMetricFamily(
        "odradek_controller_unclean_leader_elections",
        "Leaders elected outside the ISR (unclean.leader.election.enable)",
        value=figures.unclean_elections,
    )


class BrokerMetrics:
    """The broker's metrics registry and the counters the server updates."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "odradek_requests", "Requests handled, by API", ["api"], registry=self.registry
        )
        self.request_errors = Counter(
            "odradek_request_failures",
            "Requests that closed their connection, by API",
            ["api"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "odradek_request_duration_seconds",
            "Time from a request's arrival to its response, by API (Fetch includes its long poll)",
            ["api"],
            buckets=(
                0.0005,
                0.001,
                0.0025,
                0.005,
                0.01,
                0.025,
                0.05,
                0.1,
                0.25,
                0.5,
                1,
                2.5,
                5,
                10,
                30,
            ),
            registry=self.registry,
        )
        self.bytes_in = Counter(
            "odradek_network_received_bytes", "Bytes received from clients", registry=self.registry
        )
        self.bytes_out = Counter(
            "odradek_network_sent_bytes", "Bytes sent to clients", registry=self.registry
        )
        self.rebalances = Counter(
            "odradek_group_rebalances",
            "Completed rebalances, by group and protocol (classic, or consumer: a KIP-848 "
            "group converging on a new target assignment)",
            ["group", "protocol"],
            registry=self.registry,
        )
        self.rebalance_seconds = Histogram(
            "odradek_group_rebalance_duration_seconds",
            "From the start of a rebalance to its completion",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
            registry=self.registry,
        )

    def on_coordinator_events(self, events: list[CoordinatorEvent]) -> None:
        for event in events:
            if event.kind == REBALANCE_COMPLETED:
                protocol = str(event.fields.get("protocol") or "classic")
                self.rebalances.labels(event.group_id, protocol).inc()
                duration_ms = event.fields.get("duration_ms")
                if isinstance(duration_ms, int | float):
                    self.rebalance_seconds.observe(duration_ms / 1000)

    def serve(self, broker: MeasuredBroker, host: str, port: int, token: str | None = None) -> None:
        """Start the HTTP endpoint (a daemon thread) for this broker's loop; with a
        token, scrapes must send it as a bearer token."""
        self.registry.register(StateCollector(broker, asyncio.get_running_loop()))
        serve_metrics(self.registry, host, port, token)
        log.info(
            "metrics on http://%s:%d/metrics%s", host, port, " (bearer token)" if token else ""
        )
