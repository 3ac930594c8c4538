"""In-memory model of a consumer group (KIP-848, ``group.protocol=consumer``).

Unlike a classic group, a consumer group changes only by ``replay``: handlers
read it, compute records (and the response from what those records will
make true), and the records, once appended, are replayed into it. So the
group is always exactly what its records say, live or reloaded, and a call
that fails changes nothing of it. The few soft fields (``SOFT_FIELDS``) that
handlers set themselves are saved into the call's undo journal first, as a
classic group's are.

Hard state (from the records): the group epoch, the subscription metadata
(the subscribed topics' ids and partition counts), the target assignment and
its epoch, each member's subscription and current assignment, the resolved
regular expressions, and the committed offsets. Indexes derived from it are
kept up to date on replay: which member owns which partition at which epoch
(``partition_epochs``), static members, subscribed topic names and regexes
with their subscriber counts, the preferred server assignor, and the members
not yet reconciled to the target epoch (which make the state).
"""

from __future__ import annotations

import enum
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from odradek.coordinator.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    REGULAR_EXPRESSION,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ClassicMemberMetadata,
    CurrentAssignmentValue,
    MemberMetadataValue,
    RegexValue,
    TopicMetadata,
    consumer_record,
)
from odradek.coordinator.group import CommittedOffset
from odradek.coordinator.journal import active_journal
from odradek.coordinator.metadata import EMPTY_ASSIGNMENT, Assignment, TopicsImage
from odradek.coordinator.transitions import TransitionTable
from odradek.coordinator.types import CoordinatorRecord, OffsetCommitTopic

# Member epochs with a meaning of their own (ConsumerGroupHeartbeatRequest).
JOIN_GROUP_MEMBER_EPOCH = 0
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
NO_PARTITION_EPOCH = -1


class IllegalGroupState(RuntimeError):
    """Records that would make a partition owned by two members: a coordinator bug."""


class MemberState(enum.IntEnum):
    """Where a member is in its reconciliation (Kafka's MemberState; values are persisted)."""

    STABLE = 0  # owns exactly its share of the target at its epoch
    UNREVOKED_PARTITIONS = 1  # must revoke partitions before it moves to the next epoch
    UNRELEASED_PARTITIONS = 2  # at the target epoch, waiting for partitions others still own
    UNKNOWN = 127  # a state written by a newer coordinator: fenced on its next heartbeat

    @classmethod
    def of(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN

    @property
    def label(self) -> str:
        return self.name.lower()


M = MemberState

# A member's moves, by target state (Kafka keeps no table: its CurrentAssignmentBuilder
# makes them). ``reconciliation.reconcile`` checks each one it makes; a member that
# starts over (it rejoins from scratch) becomes Stable from any state. Revoking keeps
# the member's epoch, every other move takes it to the target epoch (so a state may
# follow itself: Stable at a newer epoch, more to revoke, other partitions to wait
# for). Nothing enters Unknown: only a newer coordinator's record holds it, and the
# member leaves it at once, without revoking (it must own nothing by then).
MEMBER_TRANSITIONS: TransitionTable[MemberState] = TransitionTable(
    "consumer group member",
    {
        M.STABLE: {M.STABLE, M.UNREVOKED_PARTITIONS, M.UNRELEASED_PARTITIONS, M.UNKNOWN},
        M.UNREVOKED_PARTITIONS: {M.STABLE, M.UNREVOKED_PARTITIONS, M.UNRELEASED_PARTITIONS},
        M.UNRELEASED_PARTITIONS: {
            M.STABLE,
            M.UNREVOKED_PARTITIONS,
            M.UNRELEASED_PARTITIONS,
            M.UNKNOWN,
        },
        M.UNKNOWN: set(),
    },
    initial={M.STABLE},
    label=lambda state: state.label,
)


class ConsumerGroupState(enum.StrEnum):
    """Derived from the group's epochs and members (Kafka's ``maybeUpdateGroupState``),
    never stored; Dead is what a deleted or unknown group is described as."""

    EMPTY = "Empty"  # no members
    ASSIGNING = "Assigning"  # the group epoch is ahead of the target assignment
    RECONCILING = "Reconciling"  # some member has not reached the target assignment
    STABLE = "Stable"  # every member owns its target at the target epoch
    DEAD = "Dead"  # what a group that does not exist is described as


CS = ConsumerGroupState

# A consumer group's state changes, call by call, by target state (Kafka keeps no
# table: the state is derived). Its records may take a live group from any state to
# any other: members come and go, targets are computed, members reconcile. A join
# computes the new target at once, so Empty -> Assigning is legal but Odradek never
# makes it; Assigning is seen when members are fenced and the next heartbeat has not
# computed their partitions' new owners yet. Only an Empty group is deleted (Dead),
# and a Dead one is gone: its id starts a new group. A group starts Empty, or Stable
# when converted from a classic group (every member keeps its assignment).
CONSUMER_GROUP_TRANSITIONS: TransitionTable[ConsumerGroupState] = TransitionTable(
    "consumer group",
    {
        CS.EMPTY: {CS.ASSIGNING, CS.RECONCILING, CS.STABLE},
        CS.ASSIGNING: {CS.EMPTY, CS.RECONCILING, CS.STABLE},
        CS.RECONCILING: {CS.EMPTY, CS.ASSIGNING, CS.STABLE},
        CS.STABLE: {CS.EMPTY, CS.ASSIGNING, CS.RECONCILING},
        CS.DEAD: {CS.EMPTY},
    },
    initial={CS.EMPTY, CS.STABLE},
    label=lambda state: state.value,
)


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """One member, as its two records (subscription, current assignment) describe it."""

    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    classic: ClassicMemberMetadata | None = None  # set for classic-protocol members
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def subscription_value(self) -> MemberMetadataValue:
        return MemberMetadataValue(
            self.instance_id,
            self.rack_id,
            self.client_id,
            self.client_host,
            tuple(sorted(self.subscribed_topic_names)),
            self.subscribed_topic_regex,
            self.rebalance_timeout_ms,
            self.server_assignor,
            self.classic,
        )

    def assignment_value(self) -> CurrentAssignmentValue:
        return CurrentAssignmentValue(
            self.member_epoch,
            self.previous_member_epoch,
            int(self.state),
            self.assigned,
            self.pending_revocation,
        )

    def with_subscription(self, value: MemberMetadataValue) -> ConsumerGroupMember:
        return replace(
            self,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=tuple(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex,
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor,
            classic=value.classic,
        )

    def with_assignment(self, value: CurrentAssignmentValue) -> ConsumerGroupMember:
        return replace(
            self,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState.of(value.state),
            assigned=value.assigned,
            pending_revocation=value.pending_revocation,
        )

    def move_to(
        self, epoch: int, state: MemberState, assigned: Assignment, pending: Assignment
    ) -> ConsumerGroupMember:
        """The member at ``epoch`` in ``state``, owning ``assigned`` and revoking
        ``pending``: the one way reconciliation moves a member, checked against
        ``MEMBER_TRANSITIONS`` (the same object when nothing moves). The previous epoch
        moves only when the epoch does (Kafka's updateMemberEpoch)."""
        if epoch == self.member_epoch:
            if (
                self.state is state
                and self.assigned == assigned
                and self.pending_revocation == pending
            ):
                return self  # no move
            MEMBER_TRANSITIONS.check(self.state, state)
            return replace(self, state=state, assigned=assigned, pending_revocation=pending)
        MEMBER_TRANSITIONS.check(self.state, state)
        return replace(
            self,
            member_epoch=epoch,
            previous_member_epoch=self.member_epoch,
            state=state,
            assigned=assigned,
            pending_revocation=pending,
        )

    def subscription_equals(self, other: ConsumerGroupMember) -> bool:
        return self.subscription_value() == other.subscription_value()

    def owns_all(self, image: TopicsImage, topics: Iterable[OffsetCommitTopic]) -> bool:
        """Whether the member owns (or is still revoking) every partition of ``topics``."""
        for topic in topics:
            topic_image = image.by_name.get(topic.name)
            if topic_image is None:
                return False
            owned = self.assigned.get(topic_image.topic_id, frozenset()) | (
                self.pending_revocation.get(topic_image.topic_id, frozenset())
            )
            if any(p.partition not in owned for p in topic.partitions):
                return False
        return True


@dataclass(frozen=True, slots=True)
class ConsumerRebalance:
    """From a group-epoch bump until the group is Stable again, for the rebalance event."""

    started_ms: int  # monotonic
    members_before: tuple[str, ...]
    reasons: tuple[str, ...] = ()


SOFT_FIELDS = ("metadata_version", "rebalance")


class ConsumerGroup:
    """A consumer group: hard state changed by ``replay`` only; see the module docs."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        # --- hard state (replay) ---
        self.group_epoch = 0
        self.subscription_metadata: dict[str, TopicMetadata] = {}
        self.target_assignment_epoch = 0
        self.target_assignment: dict[str, Assignment] = {}
        self.members: dict[str, ConsumerGroupMember] = {}
        self.resolved_regexes: dict[str, RegexValue] = {}
        self.offsets: dict[tuple[str, int], CommittedOffset] = {}
        # --- indexes derived on replay ---
        self.static_members: dict[str, str] = {}
        # (topic id, partition) -> (owning member, the epoch it owns it at)
        self.partition_owners: dict[tuple[uuid.UUID, int], tuple[str, int]] = {}
        self.unreconciled: set[str] = set()
        self.subscribed_names: Counter[str] = Counter()
        self.subscribed_regexes: Counter[str] = Counter()
        self.assignors: Counter[str] = Counter()
        self.classic_members = 0
        # --- soft state, journaled ---
        self.metadata_version = -1  # the topics image version the subscription was checked at
        self.rebalance: ConsumerRebalance | None = None

    # --- undo log support (journal.py): only the soft fields ever change inside a call ----

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SOFT_FIELDS:
            journal = active_journal()
            if journal is not None:
                journal.save_group(self)
        object.__setattr__(self, name, value)

    def save_fields(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in SOFT_FIELDS)

    def restore_fields(self, saved: tuple[Any, ...]) -> None:
        for name, value in zip(SOFT_FIELDS, saved, strict=True):
            object.__setattr__(self, name, value)

    # --- queries ----------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.target_assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if self.unreconciled:
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        member_id = None if instance_id is None else self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def target_of(self, member_id: str) -> Assignment:
        return self.target_assignment.get(member_id, EMPTY_ASSIGNMENT)

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        owner = self.partition_owners.get((topic_id, partition))
        return NO_PARTITION_EPOCH if owner is None else owner[1]

    def preferred_assignor(self) -> str | None:
        """The server assignor most members ask for (ties: the first name alphabetically)."""
        if not self.assignors:
            return None
        return min(self.assignors.items(), key=lambda item: (-item[1], item[0]))[0]

    def all_members_use_classic_protocol_except(self, member_ids: set[str]) -> bool:
        return all(
            m.uses_classic_protocol for mid, m in self.members.items() if mid not in member_ids
        )

    def subscribed_topic_names(self) -> set[str]:
        """Topics subscribed by name or matched by a resolved regex."""
        names = set(self.subscribed_names)
        for regex in self.subscribed_regexes:
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None:
                names.update(resolved.topics)
        return names

    def tombstone_records(self) -> list[CoordinatorRecord]:
        """Every record that makes the group, as tombstones in Kafka's order
        (``createGroupTombstoneRecords``), plus the resolved regexes."""
        gid = self.group_id
        records = [consumer_record(CURRENT_MEMBER_ASSIGNMENT, gid, None, m) for m in self.members]
        records += [consumer_record(TARGET_ASSIGNMENT_MEMBER, gid, None, m) for m in self.members]
        records.append(consumer_record(TARGET_ASSIGNMENT_METADATA, gid, None))
        records += [consumer_record(MEMBER_METADATA, gid, None, m) for m in self.members]
        records += [
            consumer_record(REGULAR_EXPRESSION, gid, None, r) for r in self.resolved_regexes
        ]
        records.append(consumer_record(PARTITION_METADATA, gid, None))
        records.append(consumer_record(GROUP_METADATA, gid, None))
        return records

    def member_topic_names(self, member: ConsumerGroupMember) -> set[str]:
        names = set(member.subscribed_topic_names)
        regex = member.subscribed_topic_regex
        if regex:
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None:
                names.update(resolved.topics)
        return names

    # --- replay ----------------------------------------------------------------------

    def set_group_epoch(self, epoch: int) -> None:
        self.group_epoch = epoch

    def set_subscription_metadata(self, topics: tuple[TopicMetadata, ...]) -> None:
        self.subscription_metadata = {t.name: t for t in topics}

    def set_target_assignment_epoch(self, epoch: int) -> None:
        self.target_assignment_epoch = epoch
        self.unreconciled = {
            mid for mid, m in self.members.items() if not m.is_reconciled_to(epoch)
        }

    def set_target(self, member_id: str, assignment: Assignment | None) -> None:
        if assignment is None:
            self.target_assignment.pop(member_id, None)
        else:
            self.target_assignment[member_id] = assignment

    def set_regex(self, regex: str, value: RegexValue | None) -> None:
        if value is None:
            self.resolved_regexes.pop(regex, None)
        else:
            self.resolved_regexes[regex] = value

    def update_subscription(self, member_id: str, value: MemberMetadataValue) -> None:
        old = self.members.get(member_id)
        new = (old or ConsumerGroupMember(member_id)).with_subscription(value)
        self._update_member(old, new)

    def update_assignment(self, member_id: str, value: CurrentAssignmentValue | None) -> None:
        old = self.members.get(member_id)
        if value is None:
            if old is None:
                return
            # Kafka keeps the member, at epoch -1 with nothing, until its subscription's
            # tombstone removes it.
            value = CurrentAssignmentValue(
                LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_MEMBER_EPOCH, 0, {}, {}
            )
        new = (old or ConsumerGroupMember(member_id)).with_assignment(value)
        self._update_member(old, new)

    def remove_member(self, member_id: str) -> None:
        old = self.members.get(member_id)
        if old is not None:
            self._update_member(old, None)

    def _update_member(
        self, old: ConsumerGroupMember | None, new: ConsumerGroupMember | None
    ) -> None:
        if old is not None:
            self._unindex(old)
        if new is None:
            assert old is not None
            del self.members[old.member_id]
            self.unreconciled.discard(old.member_id)
            return
        self.members[new.member_id] = new
        self._index(new)
        if new.is_reconciled_to(self.target_assignment_epoch):
            self.unreconciled.discard(new.member_id)
        else:
            self.unreconciled.add(new.member_id)

    def _index(self, m: ConsumerGroupMember) -> None:
        if m.instance_id is not None:
            self.static_members[m.instance_id] = m.member_id
        self.subscribed_names.update(m.subscribed_topic_names)
        if m.subscribed_topic_regex:
            self.subscribed_regexes[m.subscribed_topic_regex] += 1
        if m.server_assignor:
            self.assignors[m.server_assignor] += 1
        if m.classic is not None:
            self.classic_members += 1
        owner = (m.member_id, m.member_epoch)
        for owned in (m.assigned, m.pending_revocation):
            for topic_id, partitions in owned.items():
                for p in partitions:
                    previous = self.partition_owners.setdefault((topic_id, p), owner)
                    if previous[0] != m.member_id:
                        # Revocation comes before assignment: a coordinator bug, as in Kafka.
                        raise IllegalGroupState(
                            f"group {self.group_id}: {topic_id}-{p} assigned to {m.member_id} "
                            f"while {previous[0]} still owns it"
                        )

    def _unindex(self, m: ConsumerGroupMember) -> None:
        if m.instance_id is not None and self.static_members.get(m.instance_id) == m.member_id:
            del self.static_members[m.instance_id]
        self.subscribed_names.subtract(m.subscribed_topic_names)
        self.subscribed_names += Counter()  # drop the names nobody subscribes to any more
        if m.subscribed_topic_regex:
            self.subscribed_regexes[m.subscribed_topic_regex] -= 1
            self.subscribed_regexes += Counter()
        if m.server_assignor:
            self.assignors[m.server_assignor] -= 1
            self.assignors += Counter()
        if m.classic is not None:
            self.classic_members -= 1
        for owned in (m.assigned, m.pending_revocation):
            for topic_id, partitions in owned.items():
                for p in partitions:
                    key = (topic_id, p)
                    owner = self.partition_owners.get(key)
                    if owner is not None and owner[0] == m.member_id:
                        del self.partition_owners[key]
