"""Values of the cluster metadata: what each etcd key holds, watch events, errors.

Every value is stored as compact, key-sorted JSON (`encode_value`); the classes
validate what they hold, so a malformed write fails before it reaches etcd. The
key each value lives under is `odradek.cluster.metadata.KeyLayout`'s business.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, Self, TypeVar

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


class MetadataError(Exception):
    """Base class of the metadata store's own errors."""


class ClusterJoinError(MetadataError):
    """A broker could not join its cluster at start-up (etcd unreachable, id taken)."""


class BrokerIdInUseError(MetadataError):
    """Another live broker holds the registration for this broker id."""


class TopicExistsError(MetadataError):
    pass


class UnknownTopicError(MetadataError):
    pass


class NotControllerError(MetadataError):
    """A write fenced by a `ControllerClaim` failed: that claim lost the role."""


class MetadataWatchLost(MetadataError):
    """A watch stream ended (etcd restart, connection loss, compaction): resnapshot."""


class LeaseLost(MetadataError):
    """The lease expired or was revoked; everything attached to it is gone."""


# ---------------------------------------------------------------------------
# Values


def encode_value(value: Mapping[str, Any]) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def decode_value(raw: bytes) -> dict[str, Any]:
    decoded = json.loads(raw)
    if not isinstance(decoded, dict):
        raise MetadataError(f"malformed metadata value: {raw!r}")
    return decoded


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One advertised listener of a broker, as Kafka's BrokerRegistration lists them
    (``BrokerRegistrationRequest.Listeners``: name, host, port, security protocol)."""

    listener: str  # upper case, as Kafka normalises listener names
    host: str
    port: int
    security_protocol: str

    def __post_init__(self) -> None:
        if not self.listener or not self.host:
            raise ValueError("an endpoint needs a listener name and a host")
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")

    def encode(self) -> dict[str, Any]:
        return {
            "name": self.listener,
            "host": self.host,
            "port": self.port,
            "protocol": self.security_protocol,
        }

    @classmethod
    def decode(cls, d: Mapping[str, Any]) -> Self:
        return cls(str(d["name"]), str(d["host"]), int(d["port"]), str(d["protocol"]))


@dataclass(frozen=True, slots=True)
class BrokerInfo:
    """What a broker publishes about itself while it lives."""

    broker_id: int
    host: str  # the first listener's advertised address (what tools show)
    port: int
    rack: str | None = None
    # The registering process on its host: tells a restarted broker's registration from
    # its killed predecessor's (still there until that lease ends), and shows operators
    # which process to look at. None from brokers that predate it.
    pid: int | None = None
    # Every advertised listener. Empty in registrations written before brokers listed
    # them: then host:port served every listener, and `address_on` says so.
    endpoints: tuple[Endpoint, ...] = ()

    def __post_init__(self) -> None:
        if self.broker_id < 0:
            raise ValueError(f"broker id must be >= 0, got {self.broker_id}")
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if not self.host:
            raise ValueError("host must not be empty")

    def endpoint(self, listener: str) -> Endpoint | None:
        """The endpoint of one listener (Kafka's Broker.endpoint(listenerName))."""
        for endpoint in self.endpoints:
            if endpoint.listener == listener:
                return endpoint
        return None

    def address_on(self, listener: str | None) -> tuple[str, int] | None:
        """(host, port) of the listener; None if this broker has no such listener.
        ``listener=None``, or a registration without endpoints: host:port."""
        if listener is None or not self.endpoints:
            return self.host, self.port
        endpoint = self.endpoint(listener)
        return (endpoint.host, endpoint.port) if endpoint is not None else None

    def encode(self) -> bytes:
        value: dict[str, Any] = {
            "id": self.broker_id,
            "host": self.host,
            "port": self.port,
            "rack": self.rack,
        }
        if self.pid is not None:
            value["pid"] = self.pid
        if self.endpoints:
            value["endpoints"] = [e.encode() for e in self.endpoints]
        return encode_value(value)

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        d = decode_value(raw)
        return cls(
            broker_id=d["id"],
            host=d["host"],
            port=d["port"],
            rack=d["rack"],
            pid=d.get("pid"),
            endpoints=tuple(Endpoint.decode(e) for e in d.get("endpoints", ())),
        )


@dataclass(frozen=True, slots=True)
class RegistrationLease:
    """The etcd lease a broker's registration hangs on, as etcd reports it (LeaseTimeToLive).

    A broker refreshes it every sixth of its TTL while it runs; one that died without
    revoking it (SIGKILL, a hung host) stays registered until `remaining_s` runs out.
    """

    broker_id: int
    ttl_s: int  # as granted: broker.session.timeout.ms in whole seconds
    remaining_s: int  # etcd ends the lease within this (+1) unless it is refreshed
    lease_id: int

    @property
    def unrefreshed_s(self) -> int:
        """Seconds since the last refresh (whole seconds, as etcd counts)."""
        return max(0, self.ttl_s - self.remaining_s)


@dataclass(frozen=True, slots=True)
class ControllerInfo:
    """The current controller and the epoch it was elected in."""

    broker_id: int
    epoch: int

    def encode(self) -> bytes:
        return encode_value({"broker_id": self.broker_id, "epoch": self.epoch})

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        d = decode_value(raw)
        return cls(broker_id=d["broker_id"], epoch=d["epoch"])


@dataclass(frozen=True, slots=True)
class ControllerClaim:
    """Proof of winning an election: fences writes made as controller.

    `create_revision` is the etcd revision at which this broker created the
    controller key; once the key is deleted (lease gone) or recreated by another
    broker, no key has that create revision and fenced writes fail.
    """

    info: ControllerInfo
    create_revision: int


@dataclass(frozen=True, slots=True)
class TopicAssignment:
    """A topic's id and, per partition, its replicas (preferred leader first).

    During a reassignment (KIP-455) a partition's `replicas` are the target
    followed by the replicas leaving; `adding` and `removing` name the replicas
    joining and leaving. Both map only partitions being reassigned (a partition
    missing from them has none); values stored before these fields existed decode
    with both empty.
    """

    name: str
    topic_id: uuid.UUID
    replicas: Mapping[int, tuple[int, ...]]
    adding: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    removing: Mapping[int, tuple[int, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        validate_topic_name(self.name)
        if not self.replicas:
            raise ValueError(f"topic {self.name!r} needs at least one partition")
        if sorted(self.replicas) != list(range(len(self.replicas))):
            raise ValueError(f"partitions of {self.name!r} must be 0..n-1")
        for partition, brokers in self.replicas.items():
            if not brokers:
                raise ValueError(f"partition {partition} of {self.name!r} has no replicas")
            if len(set(brokers)) != len(brokers):
                raise ValueError(f"partition {partition} of {self.name!r} repeats a replica")
        # canonical form: tuples, and no entries for partitions not being reassigned
        for attribute in ("adding", "removing"):
            moving = {p: tuple(r) for p, r in getattr(self, attribute).items() if r}
            object.__setattr__(self, attribute, moving)
        for partition in self.adding.keys() | self.removing.keys():
            replicas = self.replicas.get(partition)
            adding = self.adding.get(partition, ())
            removing = self.removing.get(partition, ())
            where = f"partition {partition} of {self.name!r}"
            if replicas is None:
                raise ValueError(f"{where} is reassigned but does not exist")
            if not set(adding) | set(removing) <= set(replicas):
                raise ValueError(f"{where}: adding and removing replicas must be replicas")
            if set(adding) & set(removing) or len(set(adding)) != len(adding):
                raise ValueError(f"{where}: a replica is added twice or added and removed")
            if len(set(removing)) != len(removing) or len(removing) == len(replicas):
                raise ValueError(f"{where}: removing must leave at least one replica")

    def is_reassigning(self, partition: int) -> bool:
        return partition in self.adding or partition in self.removing

    def encode(self) -> bytes:
        value: dict[str, Any] = {
            "topic_id": str(self.topic_id),
            "replicas": {str(p): list(r) for p, r in sorted(self.replicas.items())},
        }
        # written only while a reassignment runs, so other values keep their old bytes
        if self.adding:
            value["adding"] = {str(p): list(r) for p, r in sorted(self.adding.items())}
        if self.removing:
            value["removing"] = {str(p): list(r) for p, r in sorted(self.removing.items())}
        return encode_value(value)

    @classmethod
    def decode(cls, name: str, raw: bytes) -> Self:
        d = decode_value(raw)

        def per_partition(key: str) -> dict[int, tuple[int, ...]]:
            return {int(p): tuple(r) for p, r in d.get(key, {}).items()}

        return cls(
            name=name,
            topic_id=uuid.UUID(d["topic_id"]),
            replicas=per_partition("replicas"),
            adding=per_partition("adding"),
            removing=per_partition("removing"),
        )


@dataclass(frozen=True, slots=True)
class VersionedTopicAssignment:
    """A topic assignment as read, with the etcd revision a CAS compares against."""

    assignment: TopicAssignment
    mod_revision: int


@dataclass(frozen=True, slots=True)
class TopicUpdate:
    """Outcome of `update_topic_assignment`: what is stored now (ours if `succeeded`).

    `current` is None when the topic no longer exists.
    """

    succeeded: bool
    current: VersionedTopicAssignment | None


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Leadership of one partition. -1 as leader means no leader (offline)."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int = 0

    def __post_init__(self) -> None:
        if self.leader_epoch < 0 or self.partition_epoch < 0:
            raise ValueError("leader_epoch and partition_epoch must be >= 0")
        if self.leader != -1 and self.leader not in self.isr:
            raise ValueError(f"leader {self.leader} is not in the ISR {list(self.isr)}")

    def encode(self) -> bytes:
        return encode_value(
            {
                "leader": self.leader,
                "leader_epoch": self.leader_epoch,
                "isr": list(self.isr),
                "partition_epoch": self.partition_epoch,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> Self:
        d = decode_value(raw)
        return cls(
            leader=d["leader"],
            leader_epoch=d["leader_epoch"],
            isr=tuple(d["isr"]),
            partition_epoch=d["partition_epoch"],
        )


@dataclass(frozen=True, slots=True)
class VersionedPartitionState:
    """A partition state as read, with the etcd revision a CAS compares against."""

    topic: str
    partition: int
    state: PartitionState
    mod_revision: int


@dataclass(frozen=True, slots=True)
class PartitionUpdate:
    """Outcome of `update_partition`: the state now stored (ours if `succeeded`)."""

    succeeded: bool
    current: VersionedPartitionState | None


def validate_topic_name(name: str) -> None:
    if not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"invalid topic name {name!r}")


# ---------------------------------------------------------------------------
# Watch events


class ChangeKind(Enum):
    PUT = "put"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class BrokerChange:
    kind: ChangeKind
    broker_id: int
    broker: BrokerInfo | None  # None when DELETE
    revision: int


@dataclass(frozen=True, slots=True)
class ControllerChange:
    kind: ChangeKind
    controller: ControllerInfo | None  # None when DELETE: an election is due
    revision: int


@dataclass(frozen=True, slots=True)
class TopicChange:
    kind: ChangeKind
    topic: str
    assignment: TopicAssignment | None  # None when DELETE
    revision: int


@dataclass(frozen=True, slots=True)
class TopicConfigChange:
    kind: ChangeKind
    topic: str
    configs: dict[str, str] | None  # None when DELETE
    revision: int


@dataclass(frozen=True, slots=True)
class PartitionChange:
    kind: ChangeKind
    topic: str
    partition: int
    state: VersionedPartitionState | None  # None when DELETE (topic deleted)
    revision: int


@dataclass(frozen=True, slots=True)
class SecurityChange:
    """A cluster-wide security document changed: ``acls`` or ``scram`` (see SECURITY_DOCUMENTS)."""

    kind: ChangeKind
    name: str
    document: dict[str, Any] | None  # None when DELETE
    revision: int


# Cluster-wide security state, each one JSON document in etcd (the stores' own format).
SECURITY_DOCUMENTS = ("acls", "scram")

MetadataChange = (
    BrokerChange
    | ControllerChange
    | TopicChange
    | TopicConfigChange
    | PartitionChange
    | SecurityChange
)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Snapshot(Generic[T]):
    """Values read at one etcd revision; watch from ``revision + 1`` to follow them."""

    items: T
    revision: int


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """Everything under the cluster prefix, as read at one revision."""

    brokers: dict[int, BrokerInfo]
    controller: ControllerInfo | None
    controller_epoch: int
    topics: dict[str, TopicAssignment]
    topic_configs: dict[str, dict[str, str]]
    partitions: dict[tuple[str, int], VersionedPartitionState]
    # etcd mod_revision of each topic's assignment: `update_topic_assignment` compares it
    topic_revisions: dict[str, int] = field(default_factory=dict)
    # Security documents by name (SECURITY_DOCUMENTS), when one was ever written.
    security: dict[str, dict[str, Any]] = field(default_factory=dict)
