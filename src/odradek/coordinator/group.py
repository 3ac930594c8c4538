"""In-memory model of one classic group and its members.

Hard state (``offsets`` and ``persisted``, the last GroupMetadata record) is
changed only by ``replay``; everything else is soft state driven by requests
and timers, rebuilt from ``persisted`` when the partition is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from odradek.coordinator.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    subscribed_topics,
)
from odradek.coordinator.errors import ErrorCode
from odradek.coordinator.history import BATCH_HEADER_BYTES, RECORD_FRAMING_BYTES
from odradek.coordinator.journal import active_journal
from odradek.coordinator.records import GroupMetadataValue, MemberMetadataValue
from odradek.coordinator.state import CLASSIC_GROUP_TRANSITIONS, GroupState
from odradek.coordinator.types import RequestToken


@dataclass(frozen=True, slots=True)
class Waiter:
    """A parked JoinGroup or SyncGroup, answered when the rebalance moves on."""

    token: RequestToken


@dataclass(slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None
    record_offset: int = -1  # where its record is in __consumer_offsets (-1: unknown)


@dataclass(slots=True)
class ClassicMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_waiter: Waiter | None = None
    sync_waiter: Waiter | None = None
    # A member whose first JoinGroup is still parked (no generation yet).
    is_new: bool = False
    # Monotonic deadline of the session (or of a new member's parked join).
    heartbeat_deadline_ms: int | None = None
    # (protocols, entry bytes) last computed by ``member_entry_bytes``: a cache, valid
    # while that object is the member's protocols.
    _entry_bytes: tuple[Any, int] | None = field(default=None, repr=False, compare=False)

    def __setattr__(self, name: str, value: Any) -> None:
        # Inside a coordinator call, save the member before its first change (undo log).
        journal = active_journal()
        if journal is not None:
            journal.save_object(self)
        object.__setattr__(self, name, value)

    def save_fields(self) -> tuple[Any, ...]:
        return _member_fields(self)  # type: ignore[no-any-return]

    def restore_fields(self, saved: tuple[Any, ...]) -> None:
        for name, value in zip(_MEMBER_FIELDS, saved, strict=True):
            object.__setattr__(self, name, value)

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return tuple(protocols) == tuple(self.protocols)

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")


def entry_bytes(
    member_id: str,
    group_instance_id: str | None,
    client_id: str,
    client_host: str,
    protocols: tuple[tuple[str, bytes], ...],
) -> int:
    """An upper bound on a member's entry in its group's record (GroupMetadataValue v3)
    as a join phase writes it: with no assignment yet, and the member's largest protocol
    metadata (the record keeps that of the protocol the join phase chooses)."""
    metadata = max((len(meta) for _, meta in protocols), default=0)
    strings = (member_id, group_instance_id or "", client_id, client_host)
    # Four int16-prefixed strings, two int32 timeouts, two int32-prefixed byte arrays.
    return sum(2 + len(v.encode()) for v in strings) + 8 + 4 + metadata + 4


def member_entry_bytes(member: ClassicMember) -> int:
    """``entry_bytes`` of the member, cached on it while its protocols stay the same."""
    cached = member._entry_bytes
    if cached is not None and cached[0] is member.protocols:
        return cached[1]
    size = entry_bytes(
        member.member_id,
        member.group_instance_id,
        member.client_id,
        member.client_host,
        member.protocols,
    )
    object.__setattr__(member, "_entry_bytes", (member.protocols, size))
    return size


def record_bytes_bound(
    group_id: str, protocol_type: str, protocols: Any, entries: int, leader_bytes: int
) -> int:
    """An upper bound on the batch that holds a group's record: framing, key, header (the
    protocol one of ``protocols``, which every member supports; a leader id of at most
    ``leader_bytes``) and member entries of ``entries`` bytes in all."""
    key = 2 + 2 + len(group_id.encode())
    protocol = max((len(name.encode()) for name, _ in protocols), default=0)
    # version, protocol type, generation, protocol, leader, state timestamp, member count
    header = 2 + (2 + len(protocol_type.encode())) + 4 + (2 + protocol) + (2 + leader_bytes) + 12
    return BATCH_HEADER_BYTES + RECORD_FRAMING_BYTES + key + header + entries


_MEMBER_FIELDS = tuple(f.name for f in fields(ClassicMember) if f.name != "_entry_bytes")
_member_fields = attrgetter(*_MEMBER_FIELDS)


class JoinMode:
    INITIAL = "initial"  # InitialDelayedJoin: never completes early
    REGULAR = "regular"  # DelayedJoin: completes once everyone rejoined


@dataclass(frozen=True, slots=True)
class RebalanceTracking:
    """Kept from the first PreparingRebalance until Stable/Empty, for the rebalance event."""

    started_ms: int  # monotonic
    members_before: tuple[str, ...]
    reasons: tuple[str, ...] = ()


class _GroupDict(dict[Any, Any]):
    """A dict field of a group that saves its group into the undo log before changing.

    Every way to change a dict in place goes through one of these methods.
    """

    __slots__ = ("_group",)

    def __init__(self, group: ClassicGroup, items: Any = ()) -> None:
        super().__init__(items)
        self._group = group

    def _touch(self) -> None:
        journal = active_journal()
        if journal is not None:
            journal.save_group(self._group)

    def __setitem__(self, key: Any, value: Any) -> None:
        self._touch()
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        self._touch()
        super().__delitem__(key)

    def __ior__(self, other: Any) -> _GroupDict:  # type: ignore[override,misc]
        self._touch()
        super().update(other)
        return self

    def pop(self, *args: Any) -> Any:
        self._touch()
        return super().pop(*args)

    def popitem(self) -> Any:
        self._touch()
        return super().popitem()

    def clear(self) -> None:
        self._touch()
        super().clear()

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._touch()
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        self._touch()
        super().update(*args, **kwargs)


@dataclass(slots=True)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState | None = None
    state_timestamp_ms: int | None = None
    protocol_type: str = ""  # "" until a member joins: a "simple" group
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, ClassicMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    # KIP-394: member id -> expiry deadline.
    pending_members: dict[str, int] = field(default_factory=dict)
    pending_sync: dict[str, None] = field(default_factory=dict)
    new_member_added: bool = False
    subscribed_topics: frozenset[str] | None = None
    # Delayed join bookkeeping.
    join_mode: str | None = None
    join_deadline_ms: int | None = None
    initial_delay_ms: int = 0
    initial_remaining_ms: int = 0
    sync_deadline_ms: int | None = None
    sync_generation: int | None = None
    rebalance: RebalanceTracking | None = None
    # Sum of the members' ``member_entry_bytes``: what they take in the group's record
    # (kept by add_member, remove_member, replace_static_member, set_protocols).
    members_bytes: int = 0
    # Hard state.
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    persisted: GroupMetadataValue | None = None

    # --- undo log support (see journal.py) ----------------------------------------
    #
    # Inside a coordinator call the group saves itself before its first change:
    # an attribute set (here) or an in-place change of one of its dicts
    # (_GroupDict). A call that only reads the group, or changes one member (a
    # heartbeat), copies nothing of it.

    def __setattr__(self, name: str, value: Any) -> None:
        journal = active_journal()
        if journal is not None:
            journal.save_group(self)
        if name in _GROUP_DICT_FIELDS and type(value) is not _GroupDict:
            value = _GroupDict(self, value)
        object.__setattr__(self, name, value)

    def save_fields(self) -> tuple[Any, ...]:
        """The soft state, copied deep enough that later changes cannot reach the copy.

        Members are saved on their own when they change; hard state is changed
        only by replay, never inside a call. Raises AttributeError while the
        group is being constructed (nothing to save yet).
        """
        values = _group_soft_fields(self)
        return tuple(dict(v) if type(v) is _GroupDict else v for v in values)

    def restore_fields(self, saved: tuple[Any, ...]) -> None:
        for name, value in zip(_GROUP_SOFT_FIELDS, saved, strict=True):
            setattr(self, name, value)

    # --- state (the table: state.py) ----------------------------------------------

    def transition_to(self, state: GroupState, wall_ms: int) -> GroupState:
        """Move to ``state`` (Kafka's ``transitionTo``), the one way a live group changes
        state: checked against ``CLASSIC_GROUP_TRANSITIONS``. Returns the state it left."""
        previous = self.state
        CLASSIC_GROUP_TRANSITIONS.check(previous, state)
        self.previous_state = previous
        self.state = state
        self.state_timestamp_ms = wall_ms  # persisted: KIP-211 retention reads it
        return previous

    def start_in(self, state: GroupState) -> None:
        """A group rebuilt from its record (a load) or from a consumer group (a downgrade)
        starts in ``state``: not a transition, so no previous state and no timestamp."""
        CLASSIC_GROUP_TRANSITIONS.check_initial(state)
        self.state = state

    # --- queries ---------------------------------------------------------------

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.join_waiter is not None)

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def static_member_id(self, instance_id: str | None) -> str | None:
        return None if instance_id is None else self.static_members.get(instance_id)

    def is_static_member_fenced(self, instance_id: str | None, member_id: str) -> bool:
        current = self.static_member_id(instance_id)
        return current is not None and current != member_id

    def validate_member(self, member_id: str, instance_id: str | None) -> ErrorCode | None:
        """Kafka's ``ClassicGroup.validateMember``: None if ``member_id`` (with its
        instance id) is a member, else the error its request gets."""
        if instance_id is not None:
            current = self.static_members.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        common: set[str] | None = None
        for m in self.members.values():
            names = {name for name, _ in m.protocols}
            common = names if common is None else common & names
        return common or set()

    def supports_protocols(
        self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]
    ) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocols)
        if protocol_type != self.protocol_type:
            return False
        # "Supported by every current member": vacuously true for a group with no
        # members left (e.g. all of them left during the initial delay).
        return any(
            all(name in {n for n, _ in m.protocols} for m in self.members.values())
            for name, _ in protocols
        )

    def select_protocol(self) -> str:
        """Vote: each member picks its first candidate; most votes wins.

        Kafka breaks ties by hash-map order; we break them by the order of the
        first member's preference list so the outcome is deterministic.
        """
        candidates = self.candidate_protocols()
        if not candidates:
            raise ValueError(f"group {self.group_id} has no common protocol")
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        first = next(iter(self.members.values()))
        order = [name for name, _ in first.protocols if name in candidates]
        return max(order, key=lambda name: (votes.get(name, 0), -order.index(name)))

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """Topics the members consume (Kafka's computeSubscribedTopics); None = unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics |= subscribed_topics(m.metadata(self.protocol_name))
        except (ConsumerProtocolError, KeyError):
            return None
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        # Unknown subscriptions count as "subscribed to everything", as in Kafka.
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # --- membership changes (no responses here: the handlers answer waiters) ----

    def add_member(self, member: ClassicMember) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.members_bytes += member_entry_bytes(member)
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove_member(self, member_id: str) -> ClassicMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self.members_bytes -= member_entry_bytes(member)
        iid = member.group_instance_id if member is not None else None
        if iid is not None and self.static_members.get(iid) == member_id:
            del self.static_members[iid]
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        self.pending_members.pop(member_id, None)
        self.pending_sync.pop(member_id, None)
        return member

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> ClassicMember:
        """Swap in a fresh member under a new id (Kafka's replaceStaticMember).

        The new member keeps the old one's identity, timeouts, protocols and
        assignment, but nothing of its progress: it is not "new" (its first
        JoinGroup is not pending), has no parked request and no deadline. The
        caller fences the old id's parked requests.
        """
        old = self.members.pop(old_id)
        member = ClassicMember(
            member_id=new_id,
            group_instance_id=old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            rebalance_timeout_ms=old.rebalance_timeout_ms,
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,
            protocols=old.protocols,
            assignment=old.assignment,
        )
        self.members[new_id] = member
        self.members_bytes += member_entry_bytes(member) - member_entry_bytes(old)
        if self.leader_id == old_id:
            self.leader_id = new_id
        self.static_members[instance_id] = new_id
        if old_id in self.pending_sync:
            del self.pending_sync[old_id]
            self.pending_sync[new_id] = None
        return member

    def set_protocols(
        self, member: ClassicMember, protocols: tuple[tuple[str, bytes], ...]
    ) -> None:
        """A member's protocols change (a JoinGroup): its entry in the record with them."""
        before = member_entry_bytes(member)
        member.protocols = protocols
        self.members_bytes += member_entry_bytes(member) - before

    def count_members_bytes(self) -> int:
        """``members_bytes`` computed afresh (a loaded group, and the tests' check)."""
        return sum(member_entry_bytes(m) for m in self.members.values())

    def maybe_elect_new_joined_leader(self) -> bool:
        """If the leader did not rejoin, make the first rejoined member leader."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.join_waiter is not None:
            return True
        for mid, m in self.members.items():
            if m.join_waiter is not None:
                self.leader_id = mid
                return True
        return False

    def current_member_metadata(self) -> tuple[tuple[str, str | None, bytes], ...]:
        assert self.protocol_name is not None
        return tuple(
            (m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        )

    # --- durable projection -------------------------------------------------------

    def to_value(self) -> GroupMetadataValue:
        """The GroupMetadata record for the group as it is now."""
        members = tuple(
            MemberMetadataValue(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata(self.protocol_name) if self.protocol_name else b"",
                assignment=m.assignment,
            )
            for m in self.members.values()
        )
        return GroupMetadataValue(
            protocol_type=self.protocol_type,
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=(
                -1 if self.state_timestamp_ms is None else self.state_timestamp_ms
            ),
            members=members,
        )


_GROUP_SOFT_FIELDS = tuple(
    f.name for f in fields(ClassicGroup) if f.name not in ("group_id", "offsets", "persisted")
)
_GROUP_DICT_FIELDS = frozenset(("members", "static_members", "pending_members", "pending_sync"))
_group_soft_fields = attrgetter(*_GROUP_SOFT_FIELDS)


def membership_view(value: GroupMetadataValue) -> tuple[object, ...]:
    """Order- and timestamp-insensitive view of a group record, for equality checks."""
    return (
        value.protocol_type,
        value.generation,
        value.protocol,
        value.leader,
        tuple(sorted(value.members, key=lambda m: m.member_id)),
    )
