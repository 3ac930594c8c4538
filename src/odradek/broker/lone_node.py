"""A lone node's control plane: a cluster of one (`control_plane.ControlPlane`).

It decides alone, on its own disk: topics are created, deleted and grown here
(`TopicManager`'s ``*_here`` methods), producer ids come from blocks reserved in
``meta.json``, ACLs and SCRAM credentials are its own files, and topic configs
are applied as soon as they are checked.

Every partition it holds gets a replica that leads, in the log's own leader
epoch, with the node alone in its ISR (`ReplicaManager.apply_state`, as a
cluster member's partition states do): its high watermark is its log end,
moved by each append. So Produce, Fetch, ListOffsets, DeleteRecords and
OffsetForLeaderEpoch ask the replica layer the same questions as on a cluster,
and get a single node's answers.

What a cluster of one cannot do: place more than one replica (INVALID_REPLICATION_FACTOR,
INVALID_REPLICA_ASSIGNMENT for anything but [this node]), reassign a replica
elsewhere, need an election (ELECTION_NOT_NEEDED), or lead a partition elsewhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from odradek.broker.control_plane import (
    BrokerAddress,
    ControllerFigures,
    InternalTopic,
    PartitionInfo,
    Quorum,
    Voter,
)
from odradek.broker.security.manager import BrokerSecurity
from odradek.broker.topics import LocalTopics, TopicError, TopicManager
from odradek.protocol.errors import ErrorCode
from odradek.replication.decisions import (
    ElectionNotNeeded,
    InvalidReplicaAssignment,
    NoReassignmentInProgress,
    Reassignment,
)
from odradek.replication.replica import Replica, ReplicaManager

T = TypeVar("T")


class Node(Protocol):
    """What a lone node decides for: the broker's topics, replicas, security stores and
    advertised address (`odradek.broker.server.Broker`, without importing it back)."""

    topics: TopicManager
    replicas: ReplicaManager
    security: BrokerSecurity
    advertised_host: str
    advertised_port: int


class LoneNode(LocalTopics):
    """The control plane of a broker without a cluster (see the module docstring)."""

    def __init__(self, broker: Node) -> None:
        super().__init__(broker.topics)
        self.broker = broker
        self.replicas = broker.replicas
        # (topic id, partitions) of each topic whose replicas lead here.
        self._led: dict[str, tuple[uuid.UUID, int]] = {}
        self.topics.change_listeners.append(self._lead_what_is_held)
        self._lead_what_is_held()

    @property
    def cluster_id(self) -> str:
        return self.topics.cluster_id

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def wait_ready(self) -> None:
        pass

    # --- the replicas: every partition held here leads, alone in its ISR ------------------

    def _lead_what_is_held(self) -> None:
        held = {t.name: t for t in self.topics}
        for name in [n for n in self._led if n not in held]:
            del self._led[name]
            self.replicas.forget(name)
        for name, topic in held.items():
            seen = self._led.get(name)
            if seen is not None and seen == (topic.topic_id, len(topic.partitions)):
                continue
            if seen is not None and seen[0] != topic.topic_id:
                self.replicas.forget(name)  # deleted and created again under the same name
            for index, plog in enumerate(topic.partitions):
                if plog is not None:  # a lone node hosts every partition it has
                    self.replicas.lead_alone(name, index, plog)
            self._led[name] = (topic.topic_id, len(topic.partitions))

    def propose_isr(self, replica: Replica, isr: tuple[int, ...]) -> None:
        """Never asked: alone in every ISR, no follower ever joins or lags."""
        self.replicas.isr_change_failed(replica)

    # --- topics: LocalTopics decides them here -------------------------------------------

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        try:
            self.topics.apply_configs(topic, configs)
        except OSError as exc:
            raise TopicError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot record configs: {exc}"
            ) from exc

    async def change_security(self, document: str, change: Callable[[Any], T]) -> T:
        """Applied to this node's own store, saved (with fsync) in a worker thread."""
        security = self.broker.security
        store: Any = security.acls if document == "acls" else security.credentials
        result: T = await store.change(change)
        return result

    # --- partitions -----------------------------------------------------------------------------

    def _known(self, topic: str, partition: int) -> None:
        if self.topics.partition(topic, partition) is None:
            raise LookupError(f"unknown partition {topic}-{partition}")

    async def reassign(self, topic: str, partition: int, target: list[int] | None) -> None:
        self._known(topic, partition)
        if target is None:
            raise NoReassignmentInProgress("none runs")
        if target != [self.node_id]:
            raise InvalidReplicaAssignment(
                f"a single node holds the only replica: [{self.node_id}]"
            )

    def reassignments(self) -> dict[tuple[str, int], Reassignment]:
        return {}

    async def elect(self, topic: str, partition: int, *, preferred: bool) -> None:
        self._known(topic, partition)
        raise ElectionNotNeeded("a single node leads all")

    # --- coordinators ---------------------------------------------------------------------------

    def want_internal_topic(self, topic: InternalTopic) -> None:
        """Created at once, with one replica; min.insync.replicas is a cluster's setting."""
        self.topics.create_internal(topic.name, topic.partitions, topic.configs)

    async def coordinator_for(self, topic: str, partition: int) -> tuple[ErrorCode, int, str]:
        return ErrorCode.NONE, self.node_id, ""

    async def send_marker(
        self, tp: tuple[str, int], producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        # Every partition held here leads here: a marker for one that does not is for a
        # partition that no longer exists.
        raise LookupError(f"{tp[0]}-{tp[1]} is not held here")

    # --- views ------------------------------------------------------------------------------------

    def live_brokers(self, listener: str | None = None) -> list[BrokerAddress]:
        host, port = self.broker.advertised_host, self.broker.advertised_port
        return [BrokerAddress(self.node_id, host, port, None)]

    def address_of(self, broker_id: int, listener: str | None = None) -> tuple[str, int] | None:
        if broker_id != self.node_id:
            return None
        return self.broker.advertised_host, self.broker.advertised_port

    def controller_id(self) -> int:
        return self.node_id

    def partition_info(self, topic: str, partition: int) -> PartitionInfo:
        replica = self.replicas.get(topic, partition)
        epoch = replica.leader_epoch if replica is not None else 0
        alone = (self.node_id,)
        return PartitionInfo(ErrorCode.NONE, self.node_id, epoch, alone, alone)

    def replicas_of(self, topic: str, partition: int) -> tuple[int, ...]:
        return (self.node_id,) if self.topics.partition(topic, partition) is not None else ()

    def lists_topic(self, name: str) -> bool:
        return True

    def quorum(self) -> Quorum:
        """A standalone voter, leader of its own metadata: the epoch one more at every
        start, the high watermark the number of metadata changes recorded."""
        end = self.topics.metadata_offset
        voter = Voter(self.node_id, end, caught_up=True)
        return Quorum(self.node_id, self.topics.leader_epoch, end, (voter,))

    def figures(self) -> ControllerFigures:
        return ControllerFigures(
            active_controller=True, offline_partitions=0, leader_elections=0, unclean_elections=0
        )
