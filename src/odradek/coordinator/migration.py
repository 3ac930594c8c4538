"""Online migration between the classic and the consumer protocol (KIP-848's upgrade path).

``group.consumer.migration.policy`` (bidirectional by default, as Kafka 4.0):

* **upgrade**: the first ConsumerGroupHeartbeat to a classic group converts it into
  a consumer group. Every classic member becomes a member of it that still speaks
  the classic protocol, at the classic generation as its epoch, owning what its
  last SyncGroup gave it; committed offsets stay. Parked JoinGroup / SyncGroup
  requests get REBALANCE_IN_PROGRESS, so those members rejoin.
* **classic members inside a consumer group**: JoinGroup is answered at once, with
  the member's epoch as the generation and no leader; SyncGroup returns the
  member's current assignment as the coordinator reconciled it; Heartbeat answers
  REBALANCE_IN_PROGRESS when the member must rejoin to move on (a newer group
  epoch, partitions to revoke, or released partitions to take). An eager member
  revokes everything before it rejoins, a cooperative one what it was told to:
  either way its JoinGroup's owned partitions tell the coordinator what it still
  owns, so nothing is given to two members.
* **downgrade**: when the last consumer-protocol member leaves (or is fenced) and
  only classic members are left, the group becomes a classic group again (its
  members keep their targets as their assignments) and a classic rebalance starts.
  A classic JoinGroup to an empty consumer group replaces it by a classic group.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from odradek.coordinator import events as ev
from odradek.coordinator.classic import ClassicGroupManager
from odradek.coordinator.consumer_group import (
    CONSUMER_GROUP_TRANSITIONS,
    ConsumerGroup,
    ConsumerGroupMember,
    IllegalGroupState,
    MemberState,
)
from odradek.coordinator.consumer_handlers import ConsumerGroupManager, GroupChange
from odradek.coordinator.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    parse_assignment,
    parse_subscription,
)
from odradek.coordinator.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ClassicMemberMetadata,
    GroupEpochValue,
    TargetAssignmentEpochValue,
    TargetAssignmentMemberValue,
    consumer_record,
)
from odradek.coordinator.context import ShardContext
from odradek.coordinator.errors import ApiError, ErrorCode
from odradek.coordinator.group import ClassicGroup, ClassicMember
from odradek.coordinator.metadata import Assignment as TopicIdAssignment
from odradek.coordinator.metadata import normalize
from odradek.coordinator.records import group_metadata_record, group_tombstone
from odradek.coordinator.state import GroupState
from odradek.coordinator.timer import CG_JOIN, CG_SYNC, timer_key
from odradek.coordinator.types import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    RequestToken,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicIdPartitions,
)

E = ErrorCode
S = GroupState


class MigrationManager:
    """Conversions between the protocols, and the classic APIs of consumer groups.

    Works through the two protocols' managers: the classic one for a classic group's
    timers, waiters and rebalances, the consumer one for a consumer group's members.
    """

    def __init__(
        self, ctx: ShardContext, classic: ClassicGroupManager, consumer: ConsumerGroupManager
    ) -> None:
        self.ctx = ctx
        self.timer = ctx.timer
        self.ids = ctx.ids
        self.classic = classic
        self.consumer = consumer

    # ================================================================= classic -> consumer

    def upgrade_classic_group(self, now: int, group: ClassicGroup) -> ConsumerGroup:
        """A consumer-protocol member joins a classic group: convert it, if allowed."""
        if not group.members:
            # An empty classic group simply makes way (its offsets stay).
            self._retire_classic_group(group)
            return self.consumer.install_group(ConsumerGroup(group.group_id))
        refusal = self._upgrade_refusal(group)
        if refusal is not None:
            raise ApiError(E.GROUP_ID_NOT_FOUND, f"Group {group.group_id} {refusal}.")
        try:
            converted = self._consumer_group_from_classic(group)
        except (ConsumerProtocolError, KeyError, IllegalGroupState) as exc:
            raise ApiError(
                E.GROUP_ID_NOT_FOUND,
                f"Cannot upgrade the classic group {group.group_id} to a consumer group: {exc}.",
            ) from exc
        CONSUMER_GROUP_TRANSITIONS.check_initial(converted.state)
        for member in group.members.values():
            self.classic.fail_waiters(member, E.REBALANCE_IN_PROGRESS)
        self._retire_classic_group(group)
        self._write_consumer_group(converted)
        self.consumer.install_group(converted)
        for mid, member in converted.members.items():
            self.consumer.schedule_session(
                group.group_id, mid, now + self.consumer.session_timeout(member)
            )
        self.ctx.event(
            ev.GROUP_CONVERTED,
            group.group_id,
            from_protocol="classic",
            to_protocol="consumer",
            group_epoch=converted.group_epoch,
            members=sorted(converted.members),
        )
        return converted

    def _upgrade_refusal(self, group: ClassicGroup) -> str | None:
        if not self.ctx.config.upgrade_enabled:
            return "is a classic group and group.consumer.migration.policy forbids upgrades"
        if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return f"is a classic group of protocol type {group.protocol_type!r}"
        if len(group.members) > self.ctx.config.consumer_group_max_size:
            return "has more members than group.consumer.max.size"
        return None

    def _retire_classic_group(self, group: ClassicGroup) -> None:
        """Stop the classic group's timers and tombstone its record (offsets are kept)."""
        self.classic.cancel_all_timers(group)
        group.pending_members.clear()
        if group.persisted is not None:
            self.ctx.record(group_tombstone(group.group_id))

    def _consumer_group_from_classic(self, classic: ClassicGroup) -> ConsumerGroup:
        """Kafka's ConsumerGroup.fromClassicGroup: each member at the classic generation,
        Stable, with its last assignment as both its target and what it owns."""
        group = ConsumerGroup(classic.group_id)
        group.offsets = classic.offsets
        epoch = classic.generation_id
        group.set_group_epoch(epoch)
        for m in classic.members.values():
            protocol = classic.protocol_name or m.protocols[0][0]
            subscription = parse_subscription(m.metadata(protocol))
            assigned = self._ids_of(parse_assignment(m.assignment).topic_partitions())
            member = ConsumerGroupMember(
                m.member_id,
                instance_id=m.group_instance_id,
                rack_id=subscription.rack_id,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=tuple(sorted(set(subscription.topics))),
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                classic=ClassicMemberMetadata(m.session_timeout_ms, m.protocols),
                member_epoch=epoch,
                previous_member_epoch=epoch,
                state=MemberState.STABLE,
                assigned=assigned,
            )
            group.update_subscription(member.member_id, member.subscription_value())
            group.update_assignment(member.member_id, member.assignment_value())
            group.set_target(member.member_id, assigned)
        group.set_target_assignment_epoch(epoch)
        return group

    def _write_consumer_group(self, group: ConsumerGroup) -> None:
        """Kafka's createConsumerGroupRecords."""
        gid = group.group_id
        for mid, m in group.members.items():
            self.ctx.record(consumer_record(MEMBER_METADATA, gid, m.subscription_value(), mid))
        self.ctx.record(consumer_record(GROUP_METADATA, gid, GroupEpochValue(group.group_epoch)))
        for mid in group.members:
            target = TargetAssignmentMemberValue(group.target_of(mid))
            self.ctx.record(consumer_record(TARGET_ASSIGNMENT_MEMBER, gid, target, mid))
        self.ctx.record(
            consumer_record(
                TARGET_ASSIGNMENT_METADATA,
                gid,
                TargetAssignmentEpochValue(group.target_assignment_epoch),
            )
        )
        for mid, m in group.members.items():
            self.ctx.record(
                consumer_record(CURRENT_MEMBER_ASSIGNMENT, gid, m.assignment_value(), mid)
            )

    def _ids_of(self, partitions: list[tuple[str, int]]) -> TopicIdAssignment:
        """Topic names to ids; partitions of topics that no longer exist are dropped."""
        by_id: dict[uuid.UUID, set[int]] = {}
        for topic, p in partitions:
            topic_image = self.ctx.image.by_name.get(topic)
            if topic_image is not None and 0 <= p < topic_image.partitions:
                by_id.setdefault(topic_image.topic_id, set()).add(p)
        return normalize(by_id)

    def _owned_of(self, partitions: list[tuple[str, int]]) -> TopicIdPartitions:
        return tuple((t, tuple(sorted(ps))) for t, ps in self._ids_of(partitions).items())

    # ================================================================= consumer -> classic

    def maybe_downgrade(self, now: int, group: ConsumerGroup, leaving: set[str], why: str) -> bool:
        """Members leave: turn the group back into a classic group if that is due (True)."""
        remaining = len(group.members) - len(leaving & set(group.members))
        if (
            remaining <= 0
            or not self.ctx.config.downgrade_enabled
            or remaining > self.ctx.config.group_max_size
            or not group.all_members_use_classic_protocol_except(leaving)
        ):
            return False
        gid = group.group_id
        members = [m for mid, m in group.members.items() if mid not in leaving]
        classic = ClassicGroup(gid, state_timestamp_ms=self.ctx.wall_ms)
        classic.offsets = group.offsets
        classic.protocol_type = CONSUMER_PROTOCOL_TYPE
        classic.generation_id = group.group_epoch
        for m in members:
            assert m.classic is not None
            classic.add_member(
                ClassicMember(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.classic.session_timeout_ms,
                    protocol_type=CONSUMER_PROTOCOL_TYPE,
                    protocols=m.classic.protocols,
                )
            )
        classic.start_in(S.STABLE)
        classic.protocol_name = classic.select_protocol()
        for m in members:
            member = classic.members[m.member_id]
            member.assignment = self._classic_assignment(
                group.target_of(m.member_id), member.metadata(classic.protocol_name)
            )
        classic.subscribed_topics = classic.compute_subscribed_topics()
        # Tombstones for everything the consumer group wrote, then the classic group.
        for record in group.tombstone_records():
            self.ctx.record(record)
        for mid in group.members:
            self.consumer.cancel_member_timers(gid, mid)
        self.ctx.record(group_metadata_record(gid, classic.to_value()))
        self.ctx.replace_group(classic)
        for member in classic.members.values():
            self.classic.schedule_heartbeat(classic, member, now + member.session_timeout_ms)
        self.ctx.event(
            ev.GROUP_CONVERTED,
            gid,
            from_protocol="consumer",
            to_protocol="classic",
            generation=classic.generation_id,
            members=sorted(classic.members),
            reason=why,
        )
        self.classic.prepare_rebalance(classic, now, f"downgraded from a consumer group: {why}")
        return True

    def _classic_assignment(self, assigned: TopicIdAssignment, subscription_blob: bytes) -> bytes:
        """An assignment as a classic member reads it, in its subscription's version."""
        pairs = []
        for topic_id, partitions in assigned.items():
            name = self.ctx.image.name_of(topic_id)
            if name is not None:
                pairs.extend((name, p) for p in sorted(partitions))
        try:
            version = min(parse_subscription(subscription_blob).version, 3)
        except ConsumerProtocolError:
            version = 0
        return Assignment.of(sorted(pairs)).encode(version)

    # ================================================================= classic APIs

    def join_consumer_group(
        self, now: int, token: RequestToken, req: JoinGroupRequest, group: ConsumerGroup
    ) -> None:
        """Kafka's classicGroupJoinToConsumerGroup (the group has members)."""
        self.ctx.respond(token, self._classic_join(now, req, group))

    def _classic_join(
        self, now: int, req: JoinGroupRequest, group: ConsumerGroup
    ) -> JoinGroupResponse:
        if not req.group_id:
            raise ApiError(E.INVALID_GROUP_ID)
        cfg = self.ctx.config
        if (
            not cfg.group_min_session_timeout_ms
            <= req.session_timeout_ms
            <= (cfg.group_max_session_timeout_ms)
        ):
            raise ApiError(E.INVALID_SESSION_TIMEOUT)
        unknown = req.member_id == ""
        member_id = self.ids.new_uuid() if unknown else req.member_id
        self.consumer.check_group_size(group, member_id)
        if not self._supports_classic_protocols(group, req):
            raise ApiError(E.INCONSISTENT_GROUP_PROTOCOL)
        if unknown and req.require_known_member_id and req.group_instance_id is None:
            return JoinGroupResponse(int(E.MEMBER_ID_REQUIRED), member_id=member_id)
        try:
            subscription = parse_subscription(req.protocols[0][1])
        except ConsumerProtocolError as exc:
            raise ApiError(E.INCONSISTENT_GROUP_PROTOCOL, str(exc)) from exc
        change = GroupChange(group)
        member = self._classic_member(group, member_id, req, unknown, change)
        updated = replace(
            member,
            instance_id=req.group_instance_id,
            rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            subscribed_topic_names=tuple(sorted(set(subscription.topics))),
            client_id=req.client_id,
            client_host=req.client_host,
            classic=ClassicMemberMetadata(req.session_timeout_ms, tuple(req.protocols)),
        )
        owned = self._owned_of(subscription.owned())
        result = self.consumer.update_group_member(now, change, member, updated, owned)
        gid = group.group_id
        self.timer.cancel(timer_key(CG_JOIN, gid, member_id))
        self.consumer.schedule_session(gid, member_id, now + req.session_timeout_ms)
        self.timer.schedule(timer_key(CG_SYNC, gid, member_id), now + req.rebalance_timeout_ms)
        return JoinGroupResponse(
            int(E.NONE),
            generation_id=result.member_epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=req.protocols[0][0],
            leader="",
            member_id=member_id,
        )

    @staticmethod
    def _supports_classic_protocols(group: ConsumerGroup, req: JoinGroupRequest) -> bool:
        """Kafka's ConsumerGroup.supportsClassicProtocols."""
        if req.protocol_type != CONSUMER_PROTOCOL_TYPE or not req.protocols:
            return False
        classic = [m for m in group.members.values() if m.classic is not None]
        if not classic:
            return True
        names = {name for name, _ in req.protocols}
        return any(
            all(name in {n for n, _ in m.classic.protocols} for m in classic if m.classic)
            for name in names
        )

    def _classic_member(
        self,
        group: ConsumerGroup,
        member_id: str,
        req: JoinGroupRequest,
        unknown: bool,
        change: GroupChange,
    ) -> ConsumerGroupMember:
        if req.group_instance_id is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id)
        existing = group.static_member(req.group_instance_id)
        if unknown:
            if existing is None:
                return ConsumerGroupMember(member_id)
            return self.consumer.replace_static_member(change, existing, member_id)
        if existing is None:
            raise ApiError(E.UNKNOWN_MEMBER_ID, f"Instance id {req.group_instance_id} is unknown.")
        if existing.member_id != member_id:
            raise ApiError(E.FENCED_INSTANCE_ID)
        return existing

    def _classic_member_of(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> ConsumerGroupMember:
        """Kafka's validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise ApiError(E.UNKNOWN_MEMBER_ID)
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise ApiError(E.UNKNOWN_MEMBER_ID)
            if member.member_id != member_id:
                raise ApiError(E.FENCED_INSTANCE_ID)
        if member.classic is None:
            raise ApiError(
                E.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol."
            )
        return member

    def _must_rejoin(self, now: int, group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        """Whether a classic member must rejoin to move on; arms its join timeout if so."""
        rejoin = (
            member.member_epoch < group.group_epoch
            or member.state is MemberState.UNREVOKED_PARTITIONS
            or (
                member.state is MemberState.UNRELEASED_PARTITIONS
                and not self._waiting_on_unreleased(group, member)
            )
        )
        if rejoin:
            key = timer_key(CG_JOIN, group.group_id, member.member_id)
            if key not in self.timer.deadlines:
                self.timer.schedule(key, now + member.rebalance_timeout_ms)
        return rejoin

    @staticmethod
    def _waiting_on_unreleased(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
        for topic_id, partitions in group.target_of(member.member_id).items():
            have = member.assigned.get(topic_id, frozenset())
            for p in partitions:
                if p not in have and group.partition_epoch(topic_id, p) != -1:
                    return True
        return False

    def sync_consumer_group(
        self, now: int, token: RequestToken, req: SyncGroupRequest, group: ConsumerGroup
    ) -> None:
        member = self._classic_member_of(group, req.member_id, req.group_instance_id)
        if req.generation_id != member.member_epoch:
            raise ApiError(E.ILLEGAL_GENERATION)
        assert member.classic is not None
        protocol = member.classic.protocols[0]
        if req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE:
            raise ApiError(E.INCONSISTENT_GROUP_PROTOCOL)
        if req.protocol_name is not None and req.protocol_name != protocol[0]:
            raise ApiError(E.INCONSISTENT_GROUP_PROTOCOL)
        if group.group_epoch > member.member_epoch and (
            member.state is not MemberState.UNREVOKED_PARTITIONS
        ):
            key = timer_key(CG_JOIN, group.group_id, member.member_id)
            if key not in self.timer.deadlines:
                self.timer.schedule(key, now + member.rebalance_timeout_ms)
            raise ApiError(E.REBALANCE_IN_PROGRESS)
        gid = group.group_id
        self.timer.cancel(timer_key(CG_SYNC, gid, member.member_id))
        self.consumer.schedule_session(
            gid, member.member_id, now + member.classic.session_timeout_ms
        )
        self.ctx.respond(
            token,
            SyncGroupResponse(
                int(E.NONE),
                req.protocol_type,
                req.protocol_name,
                self._classic_assignment(member.assigned, protocol[1]),
            ),
        )

    def heartbeat_consumer_group(
        self, now: int, token: RequestToken, req: HeartbeatRequest, group: ConsumerGroup
    ) -> None:
        member = self._classic_member_of(group, req.member_id, req.group_instance_id)
        if req.generation_id != member.member_epoch:
            raise ApiError(E.ILLEGAL_GENERATION)
        assert member.classic is not None
        gid = group.group_id
        self.consumer.schedule_session(
            gid, member.member_id, now + member.classic.session_timeout_ms
        )
        error = E.REBALANCE_IN_PROGRESS if self._must_rejoin(now, group, member) else E.NONE
        self.ctx.respond(token, HeartbeatResponse(int(error)))

    def leave_consumer_group(
        self, now: int, token: RequestToken, req: LeaveGroupRequest, group: ConsumerGroup
    ) -> None:
        results = []
        leaving: list[ConsumerGroupMember] = []
        for lm in req.members:
            try:
                if lm.group_instance_id is None:
                    member = self._classic_member_of(group, lm.member_id, None)
                else:
                    found = group.static_member(lm.group_instance_id)
                    if found is None:
                        raise ApiError(E.UNKNOWN_MEMBER_ID)
                    member = self._classic_member_of(
                        group, lm.member_id or found.member_id, lm.group_instance_id
                    )
            except ApiError as error:
                results.append(
                    LeaveGroupMemberResponse(lm.member_id, lm.group_instance_id, int(error.code))
                )
                continue
            if member not in leaving:
                leaving.append(member)
            results.append(
                LeaveGroupMemberResponse(member.member_id, lm.group_instance_id, int(E.NONE))
            )
        if leaving:
            self.consumer.fence_members(now, group, leaving, "member left the group")
        self.ctx.respond(token, LeaveGroupResponse(int(E.NONE), tuple(results)))

    def replace_empty_consumer_group(self, group: ConsumerGroup) -> None:
        """A classic member joins an empty consumer group: it becomes a classic group."""
        for record in group.tombstone_records():
            self.ctx.record(record)
        classic = ClassicGroup(group.group_id, state_timestamp_ms=self.ctx.wall_ms)
        classic.offsets = group.offsets
        self.ctx.replace_group(classic)
        self.classic.write_group(classic)
        self.ctx.event(
            ev.GROUP_CONVERTED,
            group.group_id,
            from_protocol="consumer",
            to_protocol="classic",
            generation=0,
            members=[],
            reason="a classic member joined the empty consumer group",
        )
