"""Plain value types shared by the producer, consumer and admin client."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

Header = tuple[str, bytes | None]


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class RecordMetadata(NamedTuple):
    """Where a produced record landed. ``offset`` is -1 with acks=0."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: object
    value: object
    timestamp: int
    headers: list[Header]
    timestamp_type: int = 0  # 0 CreateTime, 1 LogAppendTime


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int | None = None


class OffsetAndMetadata(NamedTuple):
    """A committed offset (Java's ``OffsetAndMetadata``)."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class Generation:
    """The group generation a member belongs to (KIP-848: its member epoch), its member id
    and (classic groups) the chosen assignor."""

    generation_id: int
    member_id: str
    protocol_name: str | None

    @property
    def has_member_id(self) -> bool:
        return bool(self.member_id)


NO_GENERATION = Generation(-1, "", None)


class BrokerMetadata(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class PartitionMetadata(NamedTuple):
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()
    error_code: int = 0
