"""What a broker needs from whoever decides what brokers share (its control plane).

The broker defines the protocol; it is given an implementation at start-up and
never asks which one it has (``odradek.wiring``):

* a lone node's, `odradek.broker.lone_node.LoneNode`: it decides alone, on its own
  disk, and leads every partition it holds;
* a cluster member's, `odradek.cluster.node.ClusterNode`: it asks etcd, follows
  the cluster's metadata, and gives each replica the role its partition state says.

What is decided there: topics (creation, deletion, new partitions, configs),
producer-id blocks, the ACL and SCRAM documents, replica reassignments and leader
elections, ISR changes a leader proposes, where a coordinator's partition is led;
and what Metadata, FindCoordinator, DescribeQuorum and the metrics describe: the
live brokers, each partition's leader, replicas and ISR, the metadata quorum.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from odradek.broker.topics import TopicControl
from odradek.protocol.errors import ErrorCode
from odradek.replication.decisions import Reassignment
from odradek.replication.replica import Replica

T = TypeVar("T")


class ProducerIdsUnavailable(Exception):
    """No producer-id block is at hand right now (the next is on its way): retriable."""


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """A live broker as clients reach it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as Metadata describes it."""

    error_code: ErrorCode  # LEADER_NOT_AVAILABLE while it has no live leader
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Voter:
    """One voter of the metadata quorum (KRaft's terms; every node is one)."""

    node_id: int
    log_end_offset: int  # -1: unknown
    caught_up: bool
    host: str = ""
    port: int = -1


@dataclass(frozen=True, slots=True)
class Quorum:
    """Who holds the metadata (DescribeQuorum): its leader (None: none now), the leader's
    epoch, the high watermark of the metadata, the voters."""

    leader: int | None
    leader_epoch: int
    high_watermark: int
    voters: tuple[Voter, ...]


@dataclass(frozen=True, slots=True)
class ControllerFigures:
    """The control plane's own metrics (Kafka's controller figures)."""

    active_controller: bool
    offline_partitions: int
    leader_elections: int
    unclean_elections: int


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """A coordinator's topic, as its runtime wants it: a lone node creates it at once;
    a cluster on the first FindCoordinator that needs it, as Kafka does."""

    name: str
    partitions: int
    replication_factor: int  # a cluster's (offsets.topic.replication.factor, ...)
    configs: dict[str, str]
    min_insync_replicas: int | None = None  # a cluster's (transaction.state.log.min.isr)


class ControlPlane(TopicControl, Protocol):
    """See the module docstring. Topic creation, deletion, new partitions, producer ids
    and placement checks come from `TopicControl` (``broker/topics.py``)."""

    @property
    def cluster_id(self) -> str: ...

    async def start(self) -> None:
        """Join (a cluster member registers and loads the metadata); after the listeners
        bound, so the advertised address answers."""
        ...

    async def stop(self) -> None: ...

    async def wait_ready(self) -> None:
        """Until the view is loaded (bounded: then answer with what there is)."""
        ...

    # --- shared documents ------------------------------------------------------------------

    async def alter_topic_configs(self, name: str, configs: dict[str, str]) -> None:
        """Store a topic's new overrides (already checked); returns once this broker has
        them. Raises TopicError."""
        ...

    async def change_security(self, document: str, change: Callable[[Any], T]) -> T:
        """Apply ``change`` to the ACLs ("acls") or the SCRAM credentials ("scram");
        ``change``'s result once this broker holds the new document."""
        ...

    # --- partitions ------------------------------------------------------------------------

    async def reassign(self, topic: str, partition: int, target: list[int] | None) -> None:
        """Start (None: cancel) moving a partition's replicas (KIP-455). Raises
        DecisionError (Kafka's error code) or LookupError (unknown partition)."""
        ...

    def reassignments(self) -> dict[tuple[str, int], Reassignment]: ...

    async def elect(self, topic: str, partition: int, *, preferred: bool) -> None:
        """ElectLeaders. Raises DecisionError or LookupError."""
        ...

    def propose_isr(self, replica: Replica, isr: tuple[int, ...]) -> None:
        """A leader's ISR change (Kafka's AlterPartition); the new state comes back as a
        role change of the replica, or not at all when the proposal lost."""
        ...

    # --- coordinators ----------------------------------------------------------------------

    def want_internal_topic(self, topic: InternalTopic) -> None: ...

    async def coordinator_for(self, topic: str, partition: int) -> tuple[ErrorCode, int, str]:
        """(error, leader broker id, message) of a coordinator's partition, creating the
        internal topic first if it does not exist yet."""
        ...

    async def send_marker(
        self, tp: tuple[str, int], producer_id: int, producer_epoch: int, commit: bool
    ) -> None:
        """A transaction marker for a partition another broker leads (WriteTxnMarkers);
        raises unless that leader wrote it."""
        ...

    # --- what Metadata, DescribeQuorum and the metrics describe ----------------------------

    def live_brokers(self, listener: str | None = None) -> list[BrokerAddress]:
        """Live brokers at their address on `listener` (None: each one's first); brokers
        without that listener are left out, as Kafka's metadata cache does."""
        ...

    def address_of(self, broker_id: int, listener: str | None = None) -> tuple[str, int] | None:
        """A live broker's address on `listener`; None if not live or without it."""
        ...

    def controller_id(self) -> int: ...

    def partition_info(self, topic: str, partition: int) -> PartitionInfo: ...

    def replicas_of(self, topic: str, partition: int) -> tuple[int, ...]:
        """The partition's replicas; () for a topic the control plane does not share."""
        ...

    def lists_topic(self, name: str) -> bool:
        """Whether the topic is one every broker shares (a cluster member keeps some to
        itself: the group history topic of older versions)."""
        ...

    def quorum(self) -> Quorum: ...

    def figures(self) -> ControllerFigures: ...
