"""Consumer groups (KIP-848): ConsumerGroupHeartbeat, leaving, fencing, timers, describe.

Follows Kafka 4.0's GroupMetadataManager (``consumerGroupHeartbeat`` and its
helpers); see docs/coordinator.md for the protocol. A heartbeat does three things
in order, all as records (nothing of the group changes before replay):

1. update the member (subscription record); a new member, a changed
   subscription, a regex resolving to other topics, or subscribed topics that
   changed (created, deleted, grown: the topics image moved on) **bump the group
   epoch**;
2. if the group epoch is past the target assignment epoch, run the server-side
   assignor for the whole group: a new **target assignment**;
3. **reconcile** this member towards its target (``reconciliation``): revoke
   first, then take partitions as their previous owners release them.

Errors are ``ApiError``: the call is undone and answered with the error alone.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from odradek.coordinator import events as ev
from odradek.coordinator.consumer_group import (
    CONSUMER_GROUP_TRANSITIONS,
    JOIN_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    MEMBER_TRANSITIONS,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    ConsumerRebalance,
    MemberState,
)
from odradek.coordinator.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    REGULAR_EXPRESSION,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ConsumerRecordKey,
    CurrentAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    RegexValue,
    TargetAssignmentEpochValue,
    TargetAssignmentMemberValue,
    TopicMetadata,
    consumer_record,
    decode_consumer_value,
)
from odradek.coordinator.context import ShardContext
from odradek.coordinator.errors import ApiError, ErrorCode
from odradek.coordinator.group import ClassicGroup
from odradek.coordinator.metadata import EMPTY_ASSIGNMENT, Assignment, by_name
from odradek.coordinator.reconciliation import FencedMemberError, reconcile
from odradek.coordinator.target_assignment import (
    InvalidRegex,
    compile_regex,
    compute_target,
    member_topic_ids,
    resolve_regex,
    subscription_metadata,
)
from odradek.coordinator.timer import CG_JOIN, CG_REBALANCE, CG_SESSION, CG_SYNC, timer_key
from odradek.coordinator.types import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
    DescribedConsumerMember,
    DescribedTopicPartitions,
    RequestToken,
    TopicIdPartitions,
)

if TYPE_CHECKING:
    from odradek.coordinator.migration import MigrationManager

E = ErrorCode
CS = ConsumerGroupState
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1


def topic_id_partitions(assignment: Assignment) -> TopicIdPartitions:
    return tuple(
        (topic_id, tuple(sorted(ps)))
        for topic_id, ps in sorted(assignment.items(), key=lambda item: item[0].bytes)
    )


def is_subset(owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None, target: Assignment) -> bool:
    """Every partition the member says it owns is in ``target`` (None: it did not say)."""
    if owned is None:
        return False
    for topic_id, partitions in owned:
        have = target.get(topic_id)
        if have is None or any(p not in have for p in partitions):
            return False
    return True


@dataclass
class GroupChange:
    """What one call does to a consumer group, before it is written down.

    Handlers compute on the group as it is plus these changes (members added,
    updated or removed; regexes resolved), then write records for them.
    """

    group: ConsumerGroup
    members: dict[str, ConsumerGroupMember | None] = field(default_factory=dict)
    regexes: dict[str, RegexValue | None] = field(default_factory=dict)
    targets: dict[str, Assignment | None] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    # The subscription metadata this call writes (None: unchanged).
    subscription: dict[str, TopicMetadata] | None = None
    # The topics the member behind the call may DESCRIBE (None: all), for regexes.
    describable: frozenset[str] | None = None

    def member_count(self) -> int:
        n = len(self.group.members)
        for mid, m in self.members.items():
            n += (m is not None) - (mid in self.group.members)
        return n

    def target_of(self, member_id: str) -> Assignment:
        if member_id in self.targets:
            return self.targets[member_id] or EMPTY_ASSIGNMENT
        return self.group.target_of(member_id)

    def member_ids(self) -> set[str]:
        ids = set(self.group.members)
        for mid, m in self.members.items():
            if m is None:
                ids.discard(mid)
            else:
                ids.add(mid)
        return ids

    def all_members(self) -> dict[str, ConsumerGroupMember]:
        out = dict(self.group.members)
        for mid, m in self.members.items():
            if m is None:
                out.pop(mid, None)
            else:
                out[mid] = m
        return out

    def resolved(self) -> dict[str, RegexValue]:
        out = dict(self.group.resolved_regexes)
        for regex, value in self.regexes.items():
            if value is None:
                out.pop(regex, None)
            else:
                out[regex] = value
        return out

    def current_targets(self) -> dict[str, Assignment]:
        out = dict(self.group.target_assignment)
        for mid, t in self.targets.items():
            if t is None:
                out.pop(mid, None)
            else:
                out[mid] = t
        return out

    def _counts(self) -> tuple[Counter[str], Counter[str]]:
        names = Counter(self.group.subscribed_names)
        regexes = Counter(self.group.subscribed_regexes)
        for mid, new in self.members.items():
            old = self.group.members.get(mid)
            for m, sign in ((old, -1), (new, 1)):
                if m is None:
                    continue
                for name in m.subscribed_topic_names:
                    names[name] += sign
                if m.subscribed_topic_regex:
                    regexes[m.subscribed_topic_regex] += sign
        return +names, +regexes

    def subscribed_regexes(self) -> Counter[str]:
        return self._counts()[1]

    def subscribed_topic_names(self) -> set[str]:
        names, regexes = self._counts()
        resolved = self.resolved()
        out = set(names)
        for regex in regexes:
            found = resolved.get(regex)
            if found is not None:
                out.update(found.topics)
        return out

    def partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        owner = self.group.partition_owners.get((topic_id, partition))
        if owner is None:
            return -1
        member_id, epoch = owner
        if member_id in self.members:
            changed = self.members[member_id]
            if changed is None:
                return -1  # removed in this call: its partitions are free
            if partition not in changed.assigned.get(topic_id, frozenset()) and (
                partition not in changed.pending_revocation.get(topic_id, frozenset())
            ):
                return -1
            return changed.member_epoch
        return epoch


class ConsumerGroupManager:
    """Consumer groups (KIP-848): their requests, timers, replay and loading.

    Holds no state of its own: the groups, timer, ids and configuration are the
    shard's (``ShardContext``). ``migration`` (set by the shard) converts groups
    between the protocols: a heartbeat that joins a classic group upgrades it, and
    fencing the last consumer-protocol member may downgrade the group.
    """

    migration: MigrationManager

    def __init__(self, ctx: ShardContext) -> None:
        self.ctx = ctx
        self.groups = ctx.groups
        self.timer = ctx.timer
        self.ids = ctx.ids

    # ================================================================= ConsumerGroupHeartbeat

    def heartbeat(self, now: int, token: RequestToken, req: ConsumerGroupHeartbeatRequest) -> None:
        self._validate_heartbeat(req)
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            self.ctx.respond(token, self._consumer_group_leave(now, req))
        else:
            self.ctx.respond(token, self._heartbeat_member(now, req))

    def _validate_heartbeat(self, req: ConsumerGroupHeartbeatRequest) -> None:
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid (INVALID_REQUEST unless said)."""

        def invalid(message: str) -> ApiError:
            return ApiError(E.INVALID_REQUEST, message)

        epoch = req.member_epoch
        if (req.member_id_required or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) and (
            not req.member_id.strip()
        ):
            raise invalid("MemberId can't be empty.")
        if not req.group_id.strip():
            raise invalid("GroupId can't be empty.")
        if req.instance_id is not None and not req.instance_id.strip():
            raise invalid("InstanceId can't be empty.")
        if req.rack_id is not None and not req.rack_id.strip():
            raise invalid("RackId can't be empty.")
        if epoch == JOIN_GROUP_MEMBER_EPOCH:
            if req.rebalance_timeout_ms == -1:
                raise invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.owned is None or req.owned:
                raise invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
                raise invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                    "when (re-)joining."
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if req.instance_id is None:
                raise invalid("InstanceId can't be null.")
        elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise invalid("MemberEpoch is invalid.")
        assignor = req.server_assignor
        if assignor is not None and assignor not in self.ctx.config.consumer_group_assignors:
            raise ApiError(
                E.UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {assignor} is not supported. Supported assignors: "
                f"{', '.join(self.ctx.config.consumer_group_assignors)}.",
            )

    def _heartbeat_member(
        self, now: int, req: ConsumerGroupHeartbeatRequest
    ) -> ConsumerGroupHeartbeatResponse:
        joining = req.member_epoch == JOIN_GROUP_MEMBER_EPOCH
        group = self._consumer_group(now, req.group_id, create=joining)
        member_id = req.member_id or self.ids.new_uuid()  # v0: the coordinator names it
        self.check_group_size(group, member_id)
        change = GroupChange(group, describable=req.describable_topics)
        if req.instance_id is None:
            member = self._dynamic_member(group, member_id, req)
        else:
            member = self._static_member(group, member_id, req, change)
        updated = replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=(
                req.rebalance_timeout_ms
                if req.rebalance_timeout_ms != -1
                else member.rebalance_timeout_ms
            ),
            server_assignor=(
                req.server_assignor if req.server_assignor is not None else member.server_assignor
            ),
            subscribed_topic_names=(
                tuple(sorted(set(req.subscribed_topic_names)))
                if req.subscribed_topic_names is not None
                else member.subscribed_topic_names
            ),
            subscribed_topic_regex=(
                (req.subscribed_topic_regex or None)
                if req.subscribed_topic_regex is not None
                else member.subscribed_topic_regex
            ),
            client_id=req.client_id,
            client_host=req.client_host,
            classic=None,
        )
        result = self.update_group_member(now, change, member, updated, req.owned)
        self.schedule_session(group.group_id, member_id, now + self.session_timeout(result))
        previous = group.members.get(member_id)
        full = joining or (
            req.rebalance_timeout_ms != -1
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
            and req.owned is not None
        )
        changed = previous is None or result.assigned != previous.assigned
        return ConsumerGroupHeartbeatResponse(
            int(E.NONE),
            member_id=member_id,
            member_epoch=result.member_epoch,
            heartbeat_interval_ms=self.ctx.config.consumer_group_heartbeat_interval_ms,
            assignment=topic_id_partitions(result.assigned) if full or changed else None,
        )

    def _consumer_group(self, now: int, group_id: str, *, create: bool) -> ConsumerGroup:
        """The consumer group, maybe created now, or converted from a classic group."""
        group = self.groups.get(group_id)
        if isinstance(group, ConsumerGroup):
            return group
        if group is None:
            if not create:
                raise ApiError(E.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
            return self.install_group(ConsumerGroup(group_id))
        if not create:
            raise ApiError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        return self.migration.upgrade_classic_group(now, group)

    def install_group(self, group: ConsumerGroup) -> ConsumerGroup:
        """Put a new consumer group in place now (undone with the call); its records make it."""
        old = self.groups.get(group.group_id)
        if old is not None:
            group.offsets = old.offsets  # hard state: offsets survive a conversion
        self.ctx.replace_group(group)
        return group

    def check_group_size(self, group: ConsumerGroup, member_id: str) -> None:
        limit = self.ctx.config.consumer_group_max_size
        if len(group.members) >= limit and member_id not in group.members:
            raise ApiError(
                E.GROUP_MAX_SIZE_REACHED,
                f"The consumer group has reached its maximum capacity of {limit} members.",
            )

    def _dynamic_member(
        self, group: ConsumerGroup, member_id: str, req: ConsumerGroupHeartbeatRequest
    ) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            if req.member_epoch != JOIN_GROUP_MEMBER_EPOCH:
                raise ApiError(
                    E.UNKNOWN_MEMBER_ID,
                    f"Member {member_id} is not a member of group {group.group_id}.",
                )
            return ConsumerGroupMember(member_id)
        if member.uses_classic_protocol:
            return member
        if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH and not self._epoch_accepted(
            member, JOIN_GROUP_MEMBER_EPOCH, req.owned
        ):
            return self._restarted(member)
        self._check_member_epoch(member, req.member_epoch, req.owned)
        return member

    @staticmethod
    def _restarted(member: ConsumerGroupMember) -> ConsumerGroupMember:
        """A live member that joins again from scratch (a join owns nothing): it starts over,
        releasing its partitions, where Kafka fences it until its session expires."""
        MEMBER_TRANSITIONS.check(member.state, MemberState.STABLE)
        return replace(
            member,
            member_epoch=0,
            previous_member_epoch=0,
            state=MemberState.STABLE,
            assigned={},
            pending_revocation={},
        )

    @staticmethod
    def _epoch_accepted(
        member: ConsumerGroupMember,
        epoch: int,
        owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None,
    ) -> bool:
        """The member's epoch, or its previous one with a subset of its assignment (the
        response that moved it on may have been lost)."""
        if epoch == member.member_epoch:
            return True
        return (
            epoch < member.member_epoch
            and epoch == member.previous_member_epoch
            and is_subset(owned, member.assigned)
        )

    @classmethod
    def _check_member_epoch(
        cls,
        member: ConsumerGroupMember,
        epoch: int,
        owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None,
    ) -> None:
        """Kafka's throwIfConsumerGroupMemberEpochIsInvalid."""
        if cls._epoch_accepted(member, epoch, owned):
            return
        relation = "greater" if epoch > member.member_epoch else "smaller"
        raise ApiError(
            E.FENCED_MEMBER_EPOCH,
            f"The consumer group member has a {relation} member epoch ({epoch}) than the one "
            f"known by the group coordinator ({member.member_epoch}). The member must abandon "
            "all its partitions and rejoin.",
        )

    def _static_member(
        self,
        group: ConsumerGroup,
        member_id: str,
        req: ConsumerGroupHeartbeatRequest,
        change: GroupChange,
    ) -> ConsumerGroupMember:
        existing = group.static_member(req.instance_id)
        if req.member_epoch == JOIN_GROUP_MEMBER_EPOCH:
            if existing is None:
                return group.members.get(member_id) or ConsumerGroupMember(member_id)
            if existing.member_id == member_id:
                if self._epoch_accepted(existing, JOIN_GROUP_MEMBER_EPOCH, req.owned):
                    return existing
                return self._restarted(existing)
            if (
                not existing.uses_classic_protocol
                and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH
            ):
                # Unlike the classic protocol, the newcomer is refused, not the old one.
                raise ApiError(
                    E.UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {req.instance_id} cannot join "
                    f"the group because the instance id is owned by {existing.member_id} member.",
                )
            return self.replace_static_member(change, existing, member_id)
        if existing is None:
            raise ApiError(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise ApiError(
                E.FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {req.instance_id} was fenced by "
                f"member {existing.member_id}.",
            )
        self._check_member_epoch(existing, req.member_epoch, req.owned)
        return existing

    def replace_static_member(
        self, change: GroupChange, old: ConsumerGroupMember, new_id: str
    ) -> ConsumerGroupMember:
        """The instance comes back under a new member id: it takes the old one's place,
        assignment and target, at epoch 0 (Kafka's replaceMember)."""
        group = change.group
        new = replace(old, member_id=new_id, member_epoch=0, previous_member_epoch=0)
        self._remove_member_records(group.group_id, old.member_id)
        self.cancel_member_timers(group.group_id, old.member_id)
        gid = group.group_id
        self.ctx.record(consumer_record(MEMBER_METADATA, gid, new.subscription_value(), new_id))
        target = group.target_of(old.member_id)
        self.ctx.record(
            consumer_record(
                TARGET_ASSIGNMENT_MEMBER, gid, TargetAssignmentMemberValue(target), new_id
            )
        )
        self.ctx.record(
            consumer_record(CURRENT_MEMBER_ASSIGNMENT, gid, new.assignment_value(), new_id)
        )
        change.members[old.member_id] = None
        change.members[new_id] = new
        change.targets[old.member_id] = None
        change.targets[new_id] = target
        self.ctx.event(
            ev.STATIC_MEMBER_REPLACED,
            gid,
            instance_id=old.instance_id,
            old_member_id=old.member_id,
            new_member_id=new_id,
            state=group.state.value,
        )
        return new

    # --- the three steps ----------------------------------------------------------------

    def update_group_member(
        self,
        now: int,
        change: GroupChange,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
        owned: TopicIdPartitions | None,
    ) -> ConsumerGroupMember:
        """Write the member's subscription, maybe bump the epoch and compute the target,
        then reconcile the member; returns the member as its records will make it."""
        group = change.group
        gid = group.group_id
        mid = updated.member_id
        is_new = mid not in group.members and mid not in change.members
        state_before = group.state
        if is_new or not updated.subscription_equals(member):
            self.ctx.record(
                consumer_record(MEMBER_METADATA, gid, updated.subscription_value(), mid)
            )
        if updated.subscribed_topic_names != member.subscribed_topic_names:
            change.reasons.append(
                f"member {mid} joined" if is_new else f"member {mid} changed its subscription"
            )
        change.members[mid] = updated
        if group.group_epoch == 0:
            change.reasons.append("new group")
        self._update_regexes(change, member, updated)
        self._refresh_subscription(change)
        epoch = group.group_epoch
        if change.reasons:
            epoch = self._bump_group_epoch(now, change)
        target_epoch, target = group.target_assignment_epoch, change.target_of(mid)
        if epoch > group.target_assignment_epoch:
            target = self._compute_target(change, epoch, mid)
            target_epoch = epoch
        reconciled = self._reconcile(now, change, updated, target_epoch, target, owned)
        self._emit_group_state(now, change, state_before, epoch, target_epoch)
        return reconciled

    def _update_regexes(
        self, change: GroupChange, member: ConsumerGroupMember, updated: ConsumerGroupMember
    ) -> None:
        old, new = member.subscribed_topic_regex, updated.subscribed_topic_regex
        if old == new:
            return
        group = change.group
        counts = change.subscribed_regexes()  # with the update
        if old and counts.get(old, 0) == 0 and old in group.resolved_regexes:
            self.ctx.record(consumer_record(REGULAR_EXPRESSION, group.group_id, None, old))
            change.regexes[old] = None
        if new:
            try:
                compile_regex(new)
            except InvalidRegex as exc:
                raise ApiError(E.INVALID_REGULAR_EXPRESSION, str(exc)) from exc
            change.reasons.append(f"member {updated.member_id} subscribed to regex {new!r}")

    def _refresh_subscription(self, change: GroupChange) -> None:
        """Resolve the regexes and look the subscribed topics up, if anything moved: the
        group's subscriptions changed in this call, or the topics image did since the
        group last looked. A difference bumps the group epoch."""
        group = change.group
        image = self.ctx.image
        if not change.reasons and group.metadata_version == image.version:
            return
        resolved = change.resolved()
        for regex in sorted(change.subscribed_regexes()):
            topics = resolve_regex(regex, image, change.describable)
            found = resolved.get(regex)
            if found is None or found.topics != topics:
                value = RegexValue(topics, image.version, self.ctx.wall_ms)
                self.ctx.record(consumer_record(REGULAR_EXPRESSION, group.group_id, value, regex))
                change.regexes[regex] = value
                if found is not None:
                    change.reasons.append(f"regex {regex!r} now matches {_topics_phrase(topics)}")
        subscription = subscription_metadata(change.subscribed_topic_names(), image)
        if subscription != tuple(group.subscription_metadata.values()):
            self.ctx.record(
                consumer_record(
                    PARTITION_METADATA, group.group_id, PartitionMetadataValue(subscription)
                )
            )
            change.subscription = {t.name: t for t in subscription}
            if not change.reasons:
                change.reasons.append("subscribed topics changed")
        group.metadata_version = image.version

    @staticmethod
    def _subscription(change: GroupChange) -> Mapping[str, TopicMetadata]:
        if change.subscription is not None:
            return change.subscription
        return change.group.subscription_metadata

    def _bump_group_epoch(self, now: int, change: GroupChange) -> int:
        group = change.group
        epoch = group.group_epoch + 1
        self.ctx.record(consumer_record(GROUP_METADATA, group.group_id, GroupEpochValue(epoch)))
        reasons = tuple(change.reasons)
        track = group.rebalance
        if track is None:
            group.rebalance = ConsumerRebalance(now, tuple(sorted(group.members)), reasons)
        else:
            group.rebalance = replace(track, reasons=track.reasons + reasons)
        self.ctx.event(
            ev.GROUP_EPOCH_BUMPED,
            group.group_id,
            group_epoch=epoch,
            members=change.member_count(),
            reasons=list(reasons),
        )
        return epoch

    def _compute_target(self, change: GroupChange, epoch: int, member_id: str | None) -> Assignment:
        """Run the group's assignor over every member; returns ``member_id``'s new target."""
        group = change.group
        members = change.all_members()
        wanted = Counter(m.server_assignor for m in members.values() if m.server_assignor)
        name = (
            min(wanted.items(), key=lambda item: (-item[1], item[0]))[0]
            if wanted
            else self.ctx.config.consumer_group_assignors[0]
        )
        targets = change.current_targets()
        records, new = compute_target(
            group.group_id,
            epoch,
            name,
            members,
            targets,
            change.resolved(),
            self._subscription(change),
        )
        for record in records:
            self.ctx.record(record)
        change.targets.update(new)
        self.ctx.event(
            ev.TARGET_ASSIGNMENT_COMPUTED,
            group.group_id,
            assignment_epoch=epoch,
            assignor=name,
            members=len(members),
            members_changed=sum(1 for mid in members if new.get(mid) != targets.get(mid)),
        )
        return new.get(member_id, EMPTY_ASSIGNMENT) if member_id is not None else EMPTY_ASSIGNMENT

    def _reconcile(
        self,
        now: int,
        change: GroupChange,
        member: ConsumerGroupMember,
        target_epoch: int,
        target: Assignment,
        owned: TopicIdPartitions | None,
    ) -> ConsumerGroupMember:
        group = change.group
        if member.is_reconciled_to(target_epoch) and member.member_id in group.members:
            change.members[member.member_id] = member
            return member
        topic_ids = member_topic_ids(member, change.resolved(), self._subscription(change))
        try:
            new = reconcile(member, target_epoch, target, change.partition_epoch, owned, topic_ids)
        except FencedMemberError as exc:
            raise ApiError(E.FENCED_MEMBER_EPOCH, str(exc)) from exc
        existing = group.members.get(member.member_id)
        if existing is None or new.assignment_value() != existing.assignment_value():
            gid = group.group_id
            self.ctx.record(
                consumer_record(
                    CURRENT_MEMBER_ASSIGNMENT, gid, new.assignment_value(), new.member_id
                )
            )
            if not new.uses_classic_protocol:
                key = timer_key(CG_REBALANCE, gid, new.member_id)
                if new.state is MemberState.UNREVOKED_PARTITIONS:
                    self.timer.schedule(key, now + max(new.rebalance_timeout_ms, 0))
                else:
                    self.timer.cancel(key)
            before = existing.assigned if existing is not None else EMPTY_ASSIGNMENT
            if new.assigned != before or new.state is not (
                existing.state if existing is not None else MemberState.STABLE
            ):
                image = self.ctx.image
                self.ctx.event(
                    ev.MEMBER_RECONCILED,
                    gid,
                    member_id=new.member_id,
                    member_epoch=new.member_epoch,
                    member_state=new.state.label,
                    assigned=by_name(new.assigned, image),
                    revoking=by_name(new.pending_revocation, image),
                )
        change.members[new.member_id] = new
        return new

    def _emit_group_state(
        self, now: int, change: GroupChange, before: ConsumerGroupState, epoch: int, target: int
    ) -> None:
        """The state transition (and completed rebalance) the call's records will make."""
        group = change.group
        after = self._state_after(change, epoch, target)
        if after is not before:
            CONSUMER_GROUP_TRANSITIONS.check(before, after)
            self.ctx.event(
                ev.STATE_TRANSITION,
                group.group_id,
                from_state=before.value,
                to_state=after.value,
                generation=epoch,
                members=sorted(change.member_ids()),
                leader=None,
                reason="; ".join(change.reasons) or "members reconciled",
                protocol="consumer",
            )
        track = group.rebalance
        if track is not None and after in (CS.STABLE, CS.EMPTY):
            group.rebalance = None
            before_ids = set(track.members_before)
            now_ids = change.member_ids()
            self.ctx.event(
                ev.REBALANCE_COMPLETED,
                group.group_id,
                generation=epoch,
                state=after.value,
                duration_ms=now - track.started_ms,
                joined=sorted(now_ids - before_ids),
                left=sorted(before_ids - now_ids),
                kept=sorted(now_ids & before_ids),
                reasons=list(track.reasons),
                protocol="consumer",
            )

    @staticmethod
    def _state_after(change: GroupChange, epoch: int, target: int) -> ConsumerGroupState:
        group = change.group
        if change.member_count() == 0:
            return CS.EMPTY
        if epoch > target:
            return CS.ASSIGNING
        changed = change.members
        if target != group.target_assignment_epoch:
            # Every member the call leaves alone is still at an older epoch.
            untouched = len(group.members) - sum(1 for mid in changed if mid in group.members)
            if untouched > 0:
                return CS.RECONCILING
        elif any(mid not in changed for mid in group.unreconciled):
            return CS.RECONCILING
        if any(m is not None and not m.is_reconciled_to(target) for m in changed.values()):
            return CS.RECONCILING
        return CS.STABLE

    # ================================================================= leaving and fencing

    def _consumer_group_leave(
        self, now: int, req: ConsumerGroupHeartbeatRequest
    ) -> ConsumerGroupHeartbeatResponse:
        group = self._consumer_group(now, req.group_id, create=False)
        response = ConsumerGroupHeartbeatResponse(
            int(E.NONE), member_id=req.member_id, member_epoch=req.member_epoch
        )
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise ApiError(
                    E.UNKNOWN_MEMBER_ID,
                    f"Member {req.member_id} is not a member of group {group.group_id}.",
                )
            self.fence_members(now, group, [member], "member left the group")
            return response
        member = group.static_member(req.instance_id)
        if member is None:
            raise ApiError(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if member.member_id != req.member_id:
            raise ApiError(
                E.FENCED_INSTANCE_ID,
                f"Static member {req.member_id} with instance id {req.instance_id} was fenced "
                f"by member {member.member_id}.",
            )
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            # Leaving for a while: keep the assignment, at epoch -2, until it is back or its
            # session expires.
            leaving = replace(
                member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={}
            )
            self.ctx.record(
                consumer_record(
                    CURRENT_MEMBER_ASSIGNMENT,
                    group.group_id,
                    leaving.assignment_value(),
                    member.member_id,
                )
            )
            self.timer.cancel(timer_key(CG_REBALANCE, group.group_id, member.member_id))
            return replace(response, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH)
        self.fence_members(now, group, [member], "static member left the group")
        return response

    def fence_members(
        self, now: int, group: ConsumerGroup, members: list[ConsumerGroupMember], why: str
    ) -> None:
        """Remove members and bump the group epoch; or, when only classic-protocol members
        would be left, turn the group back into a classic group (migration.py)."""
        if self.migration.maybe_downgrade(now, group, {m.member_id for m in members}, why):
            return
        state_before = group.state
        change = GroupChange(group)
        for m in members:
            self._remove_member_records(group.group_id, m.member_id)
            self.cancel_member_timers(group.group_id, m.member_id)
            change.members[m.member_id] = None
            change.targets[m.member_id] = None
            change.reasons.append(f"member {m.member_id} removed: {why}")
            self.ctx.event(
                ev.MEMBER_REMOVED,
                group.group_id,
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                reason=why,
            )
        counts = change.subscribed_regexes()
        for m in members:
            regex = m.subscribed_topic_regex
            if regex and counts.get(regex, 0) == 0 and regex in group.resolved_regexes:
                self.ctx.record(consumer_record(REGULAR_EXPRESSION, group.group_id, None, regex))
                change.regexes[regex] = None
        subscription = subscription_metadata(change.subscribed_topic_names(), self.ctx.image)
        if subscription != tuple(group.subscription_metadata.values()):
            self.ctx.record(
                consumer_record(
                    PARTITION_METADATA, group.group_id, PartitionMetadataValue(subscription)
                )
            )
        epoch = self._bump_group_epoch(now, change)
        self._emit_group_state(now, change, state_before, epoch, group.target_assignment_epoch)

    def _remove_member_records(self, group_id: str, member_id: str) -> None:
        """Kafka's removeMember: the order matters on replay."""
        self.ctx.record(consumer_record(CURRENT_MEMBER_ASSIGNMENT, group_id, None, member_id))
        self.ctx.record(consumer_record(TARGET_ASSIGNMENT_MEMBER, group_id, None, member_id))
        self.ctx.record(consumer_record(MEMBER_METADATA, group_id, None, member_id))

    # ================================================================= timers

    def session_timeout(self, member: ConsumerGroupMember) -> int:
        if member.classic is not None:
            return member.classic.session_timeout_ms
        return self.ctx.config.consumer_group_session_timeout_ms

    def schedule_session(self, group_id: str, member_id: str, deadline_ms: int) -> None:
        self.timer.schedule(timer_key(CG_SESSION, group_id, member_id), deadline_ms)

    def cancel_member_timers(self, group_id: str, member_id: str) -> None:
        for kind in (CG_SESSION, CG_REBALANCE, CG_JOIN, CG_SYNC):
            self.timer.cancel(timer_key(kind, group_id, member_id))

    def on_timer(self, now: int, key: str, kind: str, parts: list[str]) -> None:
        """A member timer fired. Its deadline is the timer's own (``JournaledTimer``): a
        fire before it re-arms, a fire for a key no longer scheduled is stale."""
        deadline = self.timer.deadlines.get(key)
        if deadline is None:
            return  # cancelled or replaced: stale
        if now < deadline:
            self.timer.schedule(key, deadline)  # early: re-arm, never drop
            return
        self.timer.fired(key)
        self._on_consumer_timer(now, kind, parts[0], parts[1])

    def _on_consumer_timer(self, now: int, kind: str, group_id: str, member_id: str) -> None:
        """A member timer fired at its deadline."""
        group = self.groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            return
        member = group.members.get(member_id)
        if member is None:
            return
        if kind == CG_SESSION:
            self.fence_members(now, group, [member], "the member session expired")
        elif kind == CG_REBALANCE:
            if member.state is MemberState.UNREVOKED_PARTITIONS:
                self.fence_members(
                    now,
                    group,
                    [member],
                    f"it did not revoke its partitions within {member.rebalance_timeout_ms} ms",
                )
        elif kind == CG_JOIN:
            self.fence_members(
                now,
                group,
                [member],
                "the classic member did not rejoin within the rebalance timeout",
            )
        elif kind == CG_SYNC:
            self.fence_members(
                now, group, [member], "the classic member did not sync within the rebalance timeout"
            )

    def on_loaded(self, now: int) -> None:
        """After a load: every member must heartbeat within its session; a member that was
        revoking gets a new rebalance timeout."""
        for group in list(self.groups.values()):
            if not isinstance(group, ConsumerGroup):
                continue
            self.ctx.event(
                ev.GROUP_LOADED,
                group.group_id,
                state=group.state.value,
                generation=group.group_epoch,
                members=list(group.members),
                offsets=len(group.offsets),
                protocol="consumer",
            )
            for mid, member in group.members.items():
                self.schedule_session(group.group_id, mid, now + self.session_timeout(member))
                if member.state is MemberState.UNREVOKED_PARTITIONS and member.classic is None:
                    self.timer.schedule(
                        timer_key(CG_REBALANCE, group.group_id, mid),
                        now + max(member.rebalance_timeout_ms, 0),
                    )

    def on_unloaded(self) -> None:
        """The partition moved away: every member timer stops."""
        for group in self.groups.values():
            if isinstance(group, ConsumerGroup):
                for mid in group.members:
                    self.cancel_member_timers(group.group_id, mid)

    # ================================================================= replay

    def replay(self, key: ConsumerRecordKey, raw: bytes | None) -> None:
        """A consumer-group record: the only way a consumer group's hard state changes."""
        found = self.groups.get(key.group)
        if raw is None:
            if isinstance(found, ConsumerGroup):
                self._replay_tombstone(found, key)
            # Else the group was turned back into a classic group in this call: its
            # tombstones have nothing left to delete.
            return
        if isinstance(found, ConsumerGroup):
            group = found
        elif found is None or found.persisted is None:
            # New, or a classic group whose record was tombstoned (an upgrade) or that
            # only holds offsets: a consumer group takes its place, with its offsets.
            group = ConsumerGroup(key.group)
            if found is not None:
                group.offsets = found.offsets
            self.groups[key.group] = group
        else:
            raise ValueError(f"consumer group record for live classic group {key.group}")
        value = decode_consumer_value(key.kind, raw)
        member = key.member or ""
        if isinstance(value, GroupEpochValue):
            group.set_group_epoch(value.epoch)
        elif isinstance(value, PartitionMetadataValue):
            group.set_subscription_metadata(value.topics)
        elif isinstance(value, MemberMetadataValue):
            group.update_subscription(member, value)
        elif isinstance(value, TargetAssignmentEpochValue):
            group.set_target_assignment_epoch(value.assignment_epoch)
        elif isinstance(value, TargetAssignmentMemberValue):
            group.set_target(member, value.partitions)
        elif isinstance(value, CurrentAssignmentValue):
            group.update_assignment(member, value)
        elif isinstance(value, RegexValue):
            group.set_regex(member, value)

    def _replay_tombstone(self, group: ConsumerGroup, key: ConsumerRecordKey) -> None:
        kind, member = key.kind, key.member or ""
        if kind == CURRENT_MEMBER_ASSIGNMENT:
            group.update_assignment(member, None)
        elif kind == TARGET_ASSIGNMENT_MEMBER:
            group.set_target(member, None)
        elif kind == MEMBER_METADATA:
            group.remove_member(member)
        elif kind == TARGET_ASSIGNMENT_METADATA:
            group.set_target_assignment_epoch(-1)
        elif kind == PARTITION_METADATA:
            group.set_subscription_metadata(())
        elif kind == REGULAR_EXPRESSION:
            group.set_regex(member, None)
        elif kind == GROUP_METADATA:
            # The group is gone (deleted, or converted to classic): its offsets stay, held
            # by an offsets-only classic group as Kafka's "simple" groups are.
            del self.groups[group.group_id]
            if group.offsets:
                shell = ClassicGroup(group.group_id)
                shell.offsets = group.offsets
                self.groups[group.group_id] = shell

    # ================================================================= ConsumerGroupDescribe

    def describe(self, now: int, token: RequestToken, req: ConsumerGroupDescribeRequest) -> None:
        out = []
        for gid in req.group_ids:
            group = self.groups.get(gid)
            if not gid:
                out.append(DescribedConsumerGroup(int(E.INVALID_GROUP_ID), gid))
            elif group is None:
                out.append(
                    DescribedConsumerGroup(
                        int(E.GROUP_ID_NOT_FOUND), gid, f"Group {gid} not found."
                    )
                )
            elif not isinstance(group, ConsumerGroup):
                out.append(
                    DescribedConsumerGroup(
                        int(E.GROUP_ID_NOT_FOUND), gid, f"Group {gid} is not a consumer group."
                    )
                )
            else:
                out.append(self._describe_consumer_group(group))
        self.ctx.respond(token, ConsumerGroupDescribeResponse(tuple(out)))

    def _describe_consumer_group(self, group: ConsumerGroup) -> DescribedConsumerGroup:
        image = self.ctx.image

        def described(assignment: Assignment) -> tuple[DescribedTopicPartitions, ...]:
            out = []
            for topic_id, partitions in sorted(assignment.items(), key=lambda i: i[0].bytes):
                name = image.name_of(topic_id)
                if name is not None:
                    out.append(DescribedTopicPartitions(topic_id, name, tuple(sorted(partitions))))
            return tuple(sorted(out, key=lambda t: t.topic_name))

        members = tuple(
            DescribedConsumerMember(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=m.subscribed_topic_names,
                subscribed_topic_regex=m.subscribed_topic_regex,
                assignment=described(m.assigned),
                target_assignment=described(group.target_of(m.member_id)),
                member_type=CLASSIC_MEMBER_TYPE
                if m.uses_classic_protocol
                else CONSUMER_MEMBER_TYPE,
                state=m.state.label,
                pending_revocation=described(m.pending_revocation),
            )
            for m in group.members.values()
        )
        return DescribedConsumerGroup(
            int(E.NONE),
            group.group_id,
            state=group.state.value,
            group_epoch=group.group_epoch,
            assignment_epoch=group.target_assignment_epoch,
            assignor_name=group.preferred_assignor() or self.ctx.config.consumer_group_assignors[0],
            members=members,
        )


def _topics_phrase(topics: Iterable[str]) -> str:
    """Topic names as prose: "topics a, b", "topic a" or "no topic"."""
    names = sorted(topics)
    if not names:
        return "no topic"
    return f"{'topic' if len(names) == 1 else 'topics'} {', '.join(names)}"
