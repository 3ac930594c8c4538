"""Neutral request/response shapes of the coordinator core, and ``Result``.

These are not wire types: the broker translates each wire version into them and
back. Fields that only exist in some wire versions have the value an older
client implies (e.g. ``group_instance_id=None`` below JoinGroup v5).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from odradek.protocol.errors import ErrorCode

# Opaque handle the runtime passes with a request; responses come back tagged
# with it, possibly from a later call (parked JoinGroup/SyncGroup).
RequestToken = Any

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1
NO_OFFSET = -1
NO_LEADER_EPOCH = -1
DEFAULT_RETENTION_TIME = -1


# --- JoinGroup ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    # Wire v0 has no rebalance timeout: the broker passes session_timeout_ms.
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    reason: str | None = None
    # True for wire v4+ (KIP-394); the core applies it only to dynamic members
    # joining with an empty member id.
    require_known_member_id: bool = True
    # True for wire v9+ (KIP-814 SkipAssignment).
    supports_skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class JoinGroupResponseMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResponse:
    error_code: int
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinGroupResponseMember, ...] = ()


# --- SyncGroup ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyncGroupRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    # v5+ (KIP-559); None when the wire version lacks them.
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: tuple[tuple[str, bytes], ...] = ()


@dataclass(frozen=True, slots=True)
class SyncGroupResponse:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# --- Heartbeat ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error_code: int


# --- LeaveGroup --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LeaveGroupMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroupRequest:
    """v0-2 carry one member (by member id); v3+ a batch."""

    group_id: str
    members: tuple[LeaveGroupMember, ...]


@dataclass(frozen=True, slots=True)
class LeaveGroupMemberResponse:
    member_id: str
    group_instance_id: str | None
    error_code: int


@dataclass(frozen=True, slots=True)
class LeaveGroupResponse:
    """For wire v0-2 use ``error_code`` if non-zero, else the single member's."""

    error_code: int
    members: tuple[LeaveGroupMemberResponse, ...] = ()


# --- OffsetCommit ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitPartition:
    partition: int
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str | None = None


@dataclass(frozen=True, slots=True)
class OffsetCommitTopic:
    name: str
    partitions: tuple[OffsetCommitPartition, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    topics: tuple[OffsetCommitTopic, ...]
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    # v2-4 RetentionTimeMs; -1 means "broker default".
    retention_time_ms: int = DEFAULT_RETENTION_TIME
    # v9+ answers a commit with a generation to an unknown group with
    # GROUP_ID_NOT_FOUND instead of ILLEGAL_GENERATION; v9 is also the first
    # version a consumer-protocol member (KIP-848) may commit with.
    unknown_group_is_not_found: bool = False


@dataclass(frozen=True, slots=True)
class OffsetCommitPartitionResponse:
    partition: int
    error_code: int


@dataclass(frozen=True, slots=True)
class OffsetCommitTopicResponse:
    name: str
    partitions: tuple[OffsetCommitPartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class OffsetCommitResponse:
    topics: tuple[OffsetCommitTopicResponse, ...]


# --- OffsetFetch -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetFetchTopic:
    name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchRequest:
    """One group (the runtime splits v8+ multi-group requests)."""

    group_id: str
    topics: tuple[OffsetFetchTopic, ...] | None  # None = all committed partitions
    require_stable: bool = False
    # v9+ (KIP-848): a member fetching its group's offsets says who it is; None / -1
    # for the admin client and consumers outside group management.
    member_id: str | None = None
    member_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OffsetFetchPartitionResponse:
    partition: int
    committed_offset: int
    committed_leader_epoch: int
    metadata: str
    error_code: int = int(ErrorCode.NONE)


@dataclass(frozen=True, slots=True)
class OffsetFetchTopicResponse:
    name: str
    partitions: tuple[OffsetFetchPartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchResponse:
    error_code: int
    topics: tuple[OffsetFetchTopicResponse, ...] = ()


# --- DescribeGroups / ListGroups / DeleteGroups / OffsetDelete ----------------


@dataclass(frozen=True, slots=True)
class DescribeGroupsRequest:
    group_ids: tuple[str, ...]
    # v6+ (KIP-1043): a group that does not exist (or is not a classic group) is
    # GROUP_ID_NOT_FOUND instead of an empty "Dead" group.
    not_found_error: bool = False


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error_code: int
    group_id: str
    state: str
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedMember, ...] = ()
    error_message: str | None = None  # v6+ (KIP-1043)


@dataclass(frozen=True, slots=True)
class DescribeGroupsResponse:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class ListGroupsRequest:
    states_filter: tuple[str, ...] = ()  # v4+, case-insensitive; empty = all
    types_filter: tuple[str, ...] = ()  # v5+, case-insensitive; empty = all


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class ListGroupsResponse:
    error_code: int
    groups: tuple[ListedGroup, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteGroupsRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroupsResult:
    group_id: str
    error_code: int


@dataclass(frozen=True, slots=True)
class DeleteGroupsResponse:
    results: tuple[DeleteGroupsResult, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteTopic:
    name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteRequest:
    group_id: str
    topics: tuple[OffsetDeleteTopic, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeletePartitionResponse:
    partition: int
    error_code: int


@dataclass(frozen=True, slots=True)
class OffsetDeleteTopicResponse:
    name: str
    partitions: tuple[OffsetDeletePartitionResponse, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResponse:
    error_code: int
    topics: tuple[OffsetDeleteTopicResponse, ...] = ()


# --- ConsumerGroupHeartbeat / ConsumerGroupDescribe (KIP-848) -----------------------

# Partitions by topic id, as the consumer-group APIs carry them.
TopicIdPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatRequest:
    """Fields a member leaves unchanged since its last heartbeat are None (or -1)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None  # v1+
    server_assignor: str | None = None
    owned: TopicIdPartitions | None = None
    client_id: str = ""
    client_host: str = ""
    # v1+ (KIP-1082): the member generates its own id; an empty one is refused.
    member_id_required: bool = True
    # With an authorizer: the topics this member may DESCRIBE, which is all a regex it
    # makes the coordinator resolve may match (None: every topic).
    describable_topics: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeatResponse:
    error_code: int
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    heartbeat_interval_ms: int = 0
    assignment: TopicIdPartitions | None = None  # None: unchanged since the last one


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeRequest:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DescribedTopicPartitions:
    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class DescribedConsumerMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[DescribedTopicPartitions, ...]
    target_assignment: tuple[DescribedTopicPartitions, ...]
    member_type: int  # v1+: 0 classic protocol, 1 consumer protocol
    # Odradek's own detail (CLI): where the member is in its reconciliation.
    state: str = "stable"
    pending_revocation: tuple[DescribedTopicPartitions, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    error_code: int
    group_id: str
    error_message: str | None = None
    state: str = ""
    group_epoch: int = -1
    assignment_epoch: int = -1
    assignor_name: str = ""
    members: tuple[DescribedConsumerMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeResponse:
    groups: tuple[DescribedConsumerGroup, ...]


Request = (
    JoinGroupRequest
    | SyncGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | OffsetCommitRequest
    | OffsetFetchRequest
    | DescribeGroupsRequest
    | ListGroupsRequest
    | DeleteGroupsRequest
    | OffsetDeleteRequest
    | ConsumerGroupHeartbeatRequest
    | ConsumerGroupDescribeRequest
)

Response = (
    JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
    | DescribeGroupsResponse
    | ListGroupsResponse
    | DeleteGroupsResponse
    | OffsetDeleteResponse
    | ConsumerGroupHeartbeatResponse
    | ConsumerGroupDescribeResponse
)


# --- Records, events, Result ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    """One ``__consumer_offsets`` record: Kafka's binary key and value (None = tombstone)."""

    key: bytes
    value: bytes | None


@dataclass(frozen=True, slots=True)
class CoordinatorEvent:
    """Structured observation (state transition, completed rebalance, expiry...).

    ``kind`` names the event; ``fields`` holds plain JSON-able values.
    """

    kind: str
    group_id: str
    at_ms: int
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class Result:
    """What one call produced.

    The runtime must append ``records`` to the partition, ``replay`` each of them
    into the shard (in order), and only then send ``responses``.
    """

    records: list[CoordinatorRecord] = field(default_factory=list)
    responses: list[tuple[RequestToken, Response]] = field(default_factory=list)
    events: list[CoordinatorEvent] = field(default_factory=list)
    # True: the records are one unit and must be appended in one batch (requests).
    # False: independent records that may be split over several batches (cleanup).
    atomic: bool = True
