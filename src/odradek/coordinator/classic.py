"""Classic groups: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, their timers, their loading.

Follows Kafka's GroupCoordinator (Scala) / GroupMetadataManager (Java) per-state
rules; section references are to research/coordinator-protocol.md section 1.
"""

from __future__ import annotations

from odradek.coordinator import events as ev
from odradek.coordinator.consumer_group import ConsumerGroup
from odradek.coordinator.context import ShardContext
from odradek.coordinator.errors import ErrorCode
from odradek.coordinator.group import (
    ClassicGroup,
    ClassicMember,
    JoinMode,
    RebalanceTracking,
    Waiter,
    entry_bytes,
    member_entry_bytes,
    record_bytes_bound,
)
from odradek.coordinator.records import (
    GroupMetadataKey,
    decode_group_metadata_value,
    group_metadata_record,
)
from odradek.coordinator.state import GroupState, can_rebalance
from odradek.coordinator.timer import HEARTBEAT, JOIN, PENDING, SYNC, timer_key
from odradek.coordinator.types import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    RequestToken,
    SyncGroupRequest,
    SyncGroupResponse,
)

S = GroupState
E = ErrorCode
# A member id's uuid part, for sizing a member that has none yet (same length).
NEW_ID_PLACEHOLDER = "0" * 36
# max.message.bytes / this stays free beside a group's record, for the events written
# with it (a call's events are written only while they fit: history.py).
EVENTS_HEADROOM_DIVISOR = 32
# The leader id a record is sized with, at least (the next join phase may elect another).
LEADER_ID_BYTES = 255


def _join_error(error: ErrorCode, member_id: str = "") -> JoinGroupResponse:
    return JoinGroupResponse(int(error), member_id=member_id)


class ClassicGroupManager:
    """Classic groups: their requests, timers, loading, and their state machine.

    Holds no state of its own: the groups, timer, ids and configuration are the
    shard's (``ShardContext``), shared with the other managers.
    """

    def __init__(self, ctx: ShardContext) -> None:
        self.ctx = ctx
        self.groups = ctx.groups
        self.timer = ctx.timer
        self.ids = ctx.ids

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        return group if isinstance(group, ClassicGroup) else None

    # ================================================================= JoinGroup

    def join_group(self, now: int, token: RequestToken, req: JoinGroupRequest) -> None:
        if not req.group_id:
            self.ctx.respond(token, _join_error(E.INVALID_GROUP_ID, req.member_id))
            return
        cfg = self.ctx.config
        if not (
            cfg.group_min_session_timeout_ms
            <= req.session_timeout_ms
            <= cfg.group_max_session_timeout_ms
        ):
            self.ctx.respond(token, _join_error(E.INVALID_SESSION_TIMEOUT, req.member_id))
            return
        unknown = req.member_id == ""
        group = self.groups.get(req.group_id)
        if group is None:
            if not unknown:
                self.ctx.respond(token, _join_error(E.UNKNOWN_MEMBER_ID, req.member_id))
                return
            # Validate before creating so a bad first join leaves no group behind.
            if not req.protocol_type or not req.protocols:
                self.ctx.respond(token, _join_error(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
                return
            if not self._record_fits(None, req):
                self.ctx.respond(token, _join_error(E.GROUP_MAX_SIZE_REACHED))
                return
            group = ClassicGroup(req.group_id, state_timestamp_ms=self.ctx.wall_ms)
            self.groups[req.group_id] = group
            # Like Kafka's new coordinator, persist the group as soon as it exists.
            self.write_group(group)

        if not self._accept_joining_member(group, req.member_id):
            member = group.members.get(req.member_id)
            if member is not None:
                group.remove_member(member.member_id)
                self._cancel_heartbeat(group, member.member_id)
            self.ctx.respond(token, _join_error(E.GROUP_MAX_SIZE_REACHED))
        elif not self._record_fits(group, req):
            self._refuse_oversized(group, now, token, req)
        elif unknown:
            self._join_new_member(group, now, token, req)
        else:
            self._join_existing_member(group, now, token, req)

        if group.state is S.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        max_size = self.ctx.config.group_max_size
        if group.state in (S.EMPTY, S.DEAD):
            return True
        if group.state is S.PREPARING_REBALANCE:
            member = group.members.get(member_id)
            if member is not None and member.join_waiter is not None:
                return True
            return group.num_awaiting_join < max_size
        return member_id in group.members or len(group.members) < max_size

    # --- the group's record must fit max.message.bytes -------------------------------
    #
    # A classic group is one record (GroupMetadataValue: every member's metadata and
    # assignment), written when a join phase completes. Kafka fails that write with
    # MESSAGE_TOO_LARGE, answered as UNKNOWN_SERVER_ERROR (GroupMetadataManager's
    # appendGroupMetadataErrorToResponseError), and the group rebalances again and again.
    # Odradek refuses the member that would not fit, as group.max.size refuses one
    # member too many (acceptJoiningMember): GROUP_MAX_SIZE_REACHED, fatal for that
    # member only, answered at once. The group keeps serving the others, and takes the
    # member once others leave or it joins with smaller metadata. Assignments are not
    # counted (a join phase writes none; a leader's SyncGroup whose assignment does not
    # fit fails alone). A share of max.message.bytes stays free for the events written
    # with the record (history.py).

    def _record_budget(self) -> int:
        limit = self.ctx.config.max_message_bytes
        return limit - limit // EVENTS_HEADROOM_DIVISOR

    def _record_fits(self, group: ClassicGroup | None, req: JoinGroupRequest) -> bool:
        """Whether the group's record fits with the joining member as it asks, in place
        of the member it is (or, static, replaces), beside every other member. A member
        whose entry does not grow always fits (a group loaded over the limit sheds at
        the end of its join phase instead: ``_shed_oversized``)."""
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        member_id = req.member_id or f"{prefix}-{NEW_ID_PLACEHOLDER}"
        protocols = tuple(req.protocols)
        joiner = entry_bytes(
            member_id, req.group_instance_id, req.client_id, req.client_host, protocols
        )
        entries = joiner
        leader = len(member_id.encode())
        if group is not None:
            replaced_bytes = 0
            for replaced in {req.member_id, group.static_member_id(req.group_instance_id)}:
                member = group.members.get(replaced or "")
                if member is not None:
                    replaced_bytes += member_entry_bytes(member)
            if replaced_bytes and joiner <= replaced_bytes:
                return True
            entries += group.members_bytes - replaced_bytes
            leader = max(leader, len((group.leader_id or "").encode()), LEADER_ID_BYTES)
        size = record_bytes_bound(req.group_id, req.protocol_type, protocols, entries, leader)
        return size <= self._record_budget()

    def _refuse_oversized(
        self, group: ClassicGroup, now: int, token: RequestToken, req: JoinGroupRequest
    ) -> None:
        """GROUP_MAX_SIZE_REACHED to a member the group's record cannot hold; one that was
        a member leaves (the others rebalance without it)."""
        mid = req.member_id
        if mid in group.pending_members:  # KIP-394's second JoinGroup
            del group.pending_members[mid]
            self._cancel_pending(group, mid)
        elif mid in group.members and not group.is_static_member_fenced(req.group_instance_id, mid):
            self._remove_member_and_update(
                group, group.members[mid], now, self._too_large_reason(f"member {mid}")
            )
        self.ctx.respond(token, _join_error(E.GROUP_MAX_SIZE_REACHED))

    def _too_large_reason(self, who: str) -> str:
        return (
            f"{who} removed: with its metadata the group's record would exceed "
            f"max.message.bytes ({self.ctx.config.max_message_bytes})"
        )

    def _shed_oversized(self, group: ClassicGroup, now: int) -> None:
        """Before a generation is written: refuse the members that joined last until the
        group's record fits (their JoinGroup gets GROUP_MAX_SIZE_REACHED). Joins are
        checked as they come; only a group loaded over the limit (an operator lowered
        max.message.bytes) gets here with too much."""
        members = list(group.members.values())
        if not members:
            return
        leader = max(len(m.member_id.encode()) for m in members)
        size = record_bytes_bound(
            group.group_id, group.protocol_type, members[0].protocols, group.members_bytes, leader
        )
        budget = self._record_budget()
        while members and size > budget:
            member = members.pop()
            size -= member_entry_bytes(member)
            self._answer_join_waiter(member, _join_error(E.GROUP_MAX_SIZE_REACHED))
            self._drop_member(group, member, now, self._too_large_reason("member"))

    def _join_new_member(
        self, group: ClassicGroup, now: int, token: RequestToken, req: JoinGroupRequest
    ) -> None:
        if group.state is S.DEAD:
            self.ctx.respond(token, _join_error(E.COORDINATOR_NOT_AVAILABLE, req.member_id))
            return
        if not group.supports_protocols(req.protocol_type, req.protocols):
            self.ctx.respond(token, _join_error(E.INCONSISTENT_GROUP_PROTOCOL, req.member_id))
            return
        prefix = req.group_instance_id if req.group_instance_id is not None else req.client_id
        new_id = f"{prefix}-{self.ids.new_uuid()}"
        if req.group_instance_id is not None:
            old_id = group.static_member_id(req.group_instance_id)
            if old_id is not None:
                self._update_static_member(group, now, token, req, old_id, new_id)
            else:
                self._add_member_and_rebalance(group, now, token, req, new_id)
        elif req.require_known_member_id:
            # KIP-394: hand out an id and wait for the member to come back with it.
            deadline = now + req.session_timeout_ms
            group.pending_members[new_id] = deadline
            self.timer.schedule(timer_key(PENDING, group.group_id, new_id), deadline)
            self.ctx.respond(token, _join_error(E.MEMBER_ID_REQUIRED, new_id))
        else:
            self._add_member_and_rebalance(group, now, token, req, new_id)

    def _join_existing_member(
        self, group: ClassicGroup, now: int, token: RequestToken, req: JoinGroupRequest
    ) -> None:
        mid = req.member_id
        if group.state is S.DEAD:
            self.ctx.respond(token, _join_error(E.COORDINATOR_NOT_AVAILABLE, mid))
            return
        if not group.supports_protocols(req.protocol_type, req.protocols):
            self.ctx.respond(token, _join_error(E.INCONSISTENT_GROUP_PROTOCOL, mid))
            return
        if mid in group.pending_members:
            if req.group_instance_id is not None:
                # Kafka raises IllegalStateException here: static members are never pending.
                self.ctx.respond(token, _join_error(E.UNKNOWN_SERVER_ERROR, mid))
                return
            self._cancel_pending(group, mid)
            self._add_member_and_rebalance(group, now, token, req, mid)
            return
        instance_unknown = (
            req.group_instance_id is not None and req.group_instance_id not in group.static_members
        )
        if group.is_static_member_fenced(req.group_instance_id, mid):
            self.ctx.respond(token, _join_error(E.FENCED_INSTANCE_ID, mid))
            return
        if mid not in group.members or instance_unknown:
            self.ctx.respond(token, _join_error(E.UNKNOWN_MEMBER_ID, mid))
            return
        member = group.members[mid]
        state = group.state
        if state is S.PREPARING_REBALANCE:
            self._update_member_and_rebalance(
                group, member, now, token, req, f"member {mid} joining during {state.value}"
            )
        elif state is S.COMPLETING_REBALANCE:
            if member.matches(req.protocols):
                # The member missed its JoinGroup response: resend it.
                self.ctx.respond(
                    token, self._current_join_response(group, member, with_members=True)
                )
            else:
                self._update_member_and_rebalance(
                    group, member, now, token, req, f"member {mid} changed its protocols"
                )
        elif state is S.STABLE:
            if group.is_leader(mid):
                self._update_member_and_rebalance(
                    group, member, now, token, req, f"leader {mid} re-joining the group"
                )
            elif not member.matches(req.protocols):
                self._update_member_and_rebalance(
                    group, member, now, token, req, f"member {mid} changed its protocols"
                )
            else:
                self.ctx.respond(
                    token, self._current_join_response(group, member, with_members=False)
                )
        else:
            self.ctx.respond(token, _join_error(E.UNKNOWN_MEMBER_ID, mid))

    def _current_join_response(
        self, group: ClassicGroup, member: ClassicMember, *, with_members: bool
    ) -> JoinGroupResponse:
        members: tuple[JoinGroupResponseMember, ...] = ()
        if with_members and group.is_leader(member.member_id):
            members = self._member_list(group)
        return JoinGroupResponse(
            error_code=int(E.NONE),
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member.member_id,
            members=members,
        )

    @staticmethod
    def _member_list(group: ClassicGroup) -> tuple[JoinGroupResponseMember, ...]:
        return tuple(
            JoinGroupResponseMember(mid, iid, meta)
            for mid, iid, meta in group.current_member_metadata()
        )

    def _add_member_and_rebalance(
        self,
        group: ClassicGroup,
        now: int,
        token: RequestToken,
        req: JoinGroupRequest,
        member_id: str,
    ) -> None:
        member = ClassicMember(
            member_id=member_id,
            group_instance_id=req.group_instance_id,
            client_id=req.client_id,
            client_host=req.client_host,
            rebalance_timeout_ms=req.rebalance_timeout_ms,
            session_timeout_ms=req.session_timeout_ms,
            protocol_type=req.protocol_type,
            protocols=tuple(req.protocols),
            join_waiter=Waiter(token),
            is_new=True,
        )
        # Lets the initial delayed join extend while new members keep arriving: any
        # rebalance that started from Empty, whatever the generation (Kafka 4.x).
        if group.state is S.PREPARING_REBALANCE and group.previous_state is S.EMPTY:
            group.new_member_added = True
        group.add_member(member)
        # A new member cannot heartbeat yet; bound how long its JoinGroup may stay parked.
        self.schedule_heartbeat(group, member, now + self.ctx.config.new_member_join_timeout_ms)
        reason = f"adding new member {member_id}"
        if req.reason:
            reason += f" (client reason: {req.reason})"
        self._maybe_prepare_rebalance(group, now, reason)

    def _update_member(
        self,
        group: ClassicGroup,
        member: ClassicMember,
        protocols: tuple[tuple[str, bytes], ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        waiter: Waiter | None,
    ) -> None:
        if member.join_waiter is not None and waiter is not None:
            # A retried JoinGroup replaces the parked one; answer the old so no token leaks.
            self._answer_join_waiter(member, _join_error(E.REBALANCE_IN_PROGRESS, member.member_id))
        group.set_protocols(member, tuple(protocols))
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.join_waiter = waiter

    def _update_member_and_rebalance(
        self,
        group: ClassicGroup,
        member: ClassicMember,
        now: int,
        token: RequestToken,
        req: JoinGroupRequest,
        reason: str,
    ) -> None:
        self._update_member(
            group,
            member,
            req.protocols,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            Waiter(token),
        )
        if req.reason:
            reason += f" (client reason: {req.reason})"
        self._maybe_prepare_rebalance(group, now, reason)

    def _update_static_member(
        self,
        group: ClassicGroup,
        now: int,
        token: RequestToken,
        req: JoinGroupRequest,
        old_id: str,
        new_id: str,
    ) -> None:
        """KIP-345: a known instance id rejoined with an empty member id."""
        instance_id = req.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id
        old = group.members[old_id]
        # The old incarnation is fenced: its parked requests fail at once.
        self.fail_waiters(old, E.FENCED_INSTANCE_ID)
        self._cancel_heartbeat(group, old_id)
        member = group.replace_static_member(instance_id, old_id, new_id)
        self.schedule_heartbeat(group, member, now + member.session_timeout_ms)
        self._update_member(
            group,
            member,
            req.protocols,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            Waiter(token),
        )
        self.ctx.event(
            ev.STATIC_MEMBER_REPLACED,
            group.group_id,
            instance_id=instance_id,
            old_member_id=old_id,
            new_member_id=new_id,
            state=group.state.value,
        )
        reason = f"static member {instance_id} rejoined as {new_id}"
        state = group.state
        if state is S.STABLE:
            if group.select_protocol() == group.protocol_name:
                # Same protocol: keep the assignment, persist the new member id, no rebalance.
                self.write_group(group)
                member.join_waiter = None
                is_leader = group.is_leader(new_id)
                if req.supports_skip_assignment:
                    response = JoinGroupResponse(
                        error_code=int(E.NONE),
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=group.leader_id or "",
                        skip_assignment=is_leader,
                        member_id=new_id,
                        members=self._member_list(group) if is_leader else (),
                    )
                else:
                    # Before v9, report the old leader id so the member does not run
                    # an assignment that a Stable group would ignore.
                    response = JoinGroupResponse(
                        error_code=int(E.NONE),
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=current_leader or "",
                        member_id=new_id,
                    )
                self.ctx.respond(token, response)
            else:
                self._maybe_prepare_rebalance(group, now, reason + " with a protocol change")
        elif state is S.COMPLETING_REBALANCE:
            # The leader may be assigning to the old id: start over.
            self.prepare_rebalance(group, now, reason)
        elif state is S.PREPARING_REBALANCE:
            pass
        else:
            raise AssertionError(f"static member found in a {state.value} group")

    # ================================================================= rebalance core

    def _maybe_prepare_rebalance(self, group: ClassicGroup, now: int, reason: str) -> None:
        if can_rebalance(group.state):
            self.prepare_rebalance(group, now, reason)

    def prepare_rebalance(self, group: ClassicGroup, now: int, reason: str) -> None:
        if group.state is S.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(group, now, E.REBALANCE_IN_PROGRESS)
        self._cancel_sync(group)
        initial = group.state is S.EMPTY
        self._start_rebalance_tracking(group, now, reason)
        self.transition(group, S.PREPARING_REBALANCE, reason)
        if initial:
            delay = self.ctx.config.group_initial_rebalance_delay_ms
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(group.rebalance_timeout_ms - delay, 0)
            if delay <= 0:
                # A zero delay expires before anything else can happen.
                self._complete_join(group, now)
            else:
                self._schedule_join(group, JoinMode.INITIAL, now + delay)
        else:
            self._schedule_join(group, JoinMode.REGULAR, now + group.rebalance_timeout_ms)
            self._maybe_complete_join(group, now)

    def _maybe_complete_join(self, group: ClassicGroup, now: int) -> None:
        if (
            group.state is S.PREPARING_REBALANCE
            and group.join_mode == JoinMode.REGULAR
            and group.has_all_members_joined()
        ):
            self._complete_join(group, now)

    def _complete_join(self, group: ClassicGroup, now: int) -> None:
        self._cancel_join(group)
        for member in list(group.members.values()):
            # Dynamic members that did not rejoin are gone; static ones wait for
            # their session timeout.
            if member.join_waiter is None and not member.is_static:
                self._drop_member(group, member, now, "did not rejoin before the rebalance timeout")
        if group.state is S.DEAD:
            return
        self._shed_oversized(group, now)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout for session expiry to clean up.
            self._schedule_join(group, JoinMode.REGULAR, now + group.rebalance_timeout_ms)
            self.ctx.event(ev.JOIN_PHASE_EXTENDED, group.group_id, members=list(group.members))
            return
        self._init_next_generation(group, now)
        if group.state is S.EMPTY:
            self._finish_rebalance(group, now)
            return
        for member in group.members.values():
            self._answer_join_waiter(
                member, self._current_join_response(group, member, with_members=True)
            )
            self.schedule_heartbeat(group, member, now + member.session_timeout_ms)
            member.is_new = False
            group.pending_sync[member.member_id] = None
        self._schedule_sync(group, now + group.rebalance_timeout_ms)

    def _init_next_generation(self, group: ClassicGroup, now: int) -> None:
        """Open the next generation and write it down before anyone hears of it.

        Kafka persists a generation only at the leader's SyncGroup (or on
        Empty), so a coordinator that fails over during CompletingRebalance
        hands the same generation number out again to a different membership,
        and a stale member's commit at that number would be accepted. Writing
        the group here, with the previous generation's assignments cleared
        (they are void now), keeps generation numbers unique across reloads;
        a loaded group whose members have no assignment rebalances at once
        (see ``on_loaded``).
        """
        group.generation_id += 1
        group.new_member_added = False
        if group.members:
            group.protocol_name = group.select_protocol()
            group.subscribed_topics = group.compute_subscribed_topics()
            for member in group.members.values():
                member.assignment = b""
            self.transition(group, S.COMPLETING_REBALANCE, "join phase completed")
        else:
            group.protocol_name = None
            group.subscribed_topics = group.compute_subscribed_topics()
            self.transition(group, S.EMPTY, "join phase completed with no members")
        group.pending_sync.clear()
        self.write_group(group)

    def _reset_and_propagate_assignment_error(
        self, group: ClassicGroup, now: int, error: ErrorCode
    ) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, now, error)

    def _propagate_assignment(self, group: ClassicGroup, now: int, error: ErrorCode) -> None:
        ok = error is E.NONE
        for member in group.members.values():
            if member.sync_waiter is None:
                continue
            self._answer_sync_waiter(
                member,
                SyncGroupResponse(
                    int(error),
                    group.protocol_type if ok else None,
                    group.protocol_name if ok else None,
                    member.assignment,
                ),
            )
            self.schedule_heartbeat(group, member, now + member.session_timeout_ms)

    def _drop_member(self, group: ClassicGroup, member: ClassicMember, now: int, why: str) -> None:
        """Remove without triggering a rebalance (the caller decides what follows)."""
        self.fail_waiters(member, E.UNKNOWN_MEMBER_ID)
        group.remove_member(member.member_id)
        self._cancel_heartbeat(group, member.member_id)
        self.ctx.event(
            ev.MEMBER_REMOVED,
            group.group_id,
            member_id=member.member_id,
            group_instance_id=member.group_instance_id,
            reason=why,
        )

    def _remove_member_and_update(
        self, group: ClassicGroup, member: ClassicMember, now: int, reason: str
    ) -> None:
        self._drop_member(group, member, now, reason)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, now, reason)
        elif group.state is S.PREPARING_REBALANCE:
            self._maybe_complete_join(group, now)

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.pop(member_id, None)
        if group.state in (S.STABLE, S.COMPLETING_REBALANCE) and not group.pending_sync:
            self._cancel_sync(group)

    # ================================================================= SyncGroup

    def sync_group(self, now: int, token: RequestToken, req: SyncGroupRequest) -> None:
        error = self._validate_sync(req)
        if error is not None:
            self.ctx.respond(token, SyncGroupResponse(int(error)))
            return
        group = self.groups[req.group_id]
        member = group.members[req.member_id]
        state = group.state
        if state is S.PREPARING_REBALANCE:
            self.ctx.respond(token, SyncGroupResponse(int(E.REBALANCE_IN_PROGRESS)))
        elif state is S.COMPLETING_REBALANCE:
            if member.sync_waiter is not None:
                self._answer_sync_waiter(member, SyncGroupResponse(int(E.REBALANCE_IN_PROGRESS)))
            member.sync_waiter = Waiter(token)
            self._remove_pending_sync(group, member.member_id)
            if group.is_leader(member.member_id):
                assignments = dict(req.assignments)
                for m in group.members.values():
                    # Members the leader left out get an empty assignment.
                    m.assignment = assignments.get(m.member_id, b"")
                self.write_group(group)
                self._propagate_assignment(group, now, E.NONE)
                self.transition(group, S.STABLE, f"leader {member.member_id} synced")
                self._finish_rebalance(group, now)
        elif state is S.STABLE:
            self._remove_pending_sync(group, member.member_id)
            self.ctx.respond(
                token,
                SyncGroupResponse(
                    int(E.NONE), group.protocol_type, group.protocol_name, member.assignment
                ),
            )
            self.schedule_heartbeat(group, member, now + member.session_timeout_ms)
        else:
            self.ctx.respond(token, SyncGroupResponse(int(E.UNKNOWN_MEMBER_ID)))

    def _validate_sync(self, req: SyncGroupRequest) -> ErrorCode | None:
        if not req.group_id:
            return E.INVALID_GROUP_ID
        group = self.groups.get(req.group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not None:
            return error
        if req.generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if req.protocol_type is not None and req.protocol_type != group.protocol_type:
            return E.INCONSISTENT_GROUP_PROTOCOL
        if req.protocol_name is not None and req.protocol_name != group.protocol_name:
            return E.INCONSISTENT_GROUP_PROTOCOL
        return None

    # ================================================================= Heartbeat

    def heartbeat(self, now: int, token: RequestToken, req: HeartbeatRequest) -> None:
        self.ctx.respond(token, HeartbeatResponse(int(self._do_heartbeat(now, req))))

    def _do_heartbeat(self, now: int, req: HeartbeatRequest) -> ErrorCode:
        if not req.group_id:
            return E.INVALID_GROUP_ID
        group = self.groups.get(req.group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        error = group.validate_member(req.member_id, req.group_instance_id)
        if error is not None:
            return error
        if req.generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if group.state is S.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        member = group.members[req.member_id]
        self.schedule_heartbeat(group, member, now + member.session_timeout_ms)
        if group.state is S.PREPARING_REBALANCE:
            # This is how members learn that they must rejoin.
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    # ================================================================= LeaveGroup

    def leave_group(self, now: int, token: RequestToken, req: LeaveGroupRequest) -> None:
        if not req.group_id:
            self.ctx.respond(token, LeaveGroupResponse(int(E.INVALID_GROUP_ID)))
            return
        group = self.groups.get(req.group_id)
        if group is None:
            self.ctx.respond(
                token,
                LeaveGroupResponse(
                    int(E.NONE),
                    tuple(
                        LeaveGroupMemberResponse(
                            m.member_id, m.group_instance_id, int(E.UNKNOWN_MEMBER_ID)
                        )
                        for m in req.members
                    ),
                ),
            )
            return
        if group.state is S.DEAD:
            self.ctx.respond(token, LeaveGroupResponse(int(E.COORDINATOR_NOT_AVAILABLE)))
            return
        # Remove every listed member first, then move the group on once (Kafka 4.x):
        # completing the join phase after each removal could hand a generation to
        # a member that is leaving in the same request.
        results = []
        removed: list[str] = []
        client_reasons: set[str | None] = set()
        for lm in req.members:
            why = "member left the group"
            if lm.reason:
                why += f" (client reason: {lm.reason})"
            client_reasons.add(lm.reason)
            if lm.member_id == "":
                # KIP-345 admin removal by instance id.
                current = group.static_member_id(lm.group_instance_id)
                if current is not None:
                    self._drop_member(group, group.members[current], now, why)
                    removed.append(current)
                    error = E.NONE
                else:
                    error = E.UNKNOWN_MEMBER_ID
            elif lm.member_id in group.pending_members:
                del group.pending_members[lm.member_id]
                self._cancel_pending(group, lm.member_id)
                removed.append(lm.member_id)
                error = E.NONE
            elif group.is_static_member_fenced(lm.group_instance_id, lm.member_id):
                error = E.FENCED_INSTANCE_ID
            elif lm.member_id in group.members:
                self._drop_member(group, group.members[lm.member_id], now, why)
                removed.append(lm.member_id)
                error = E.NONE
            else:
                error = E.UNKNOWN_MEMBER_ID
            results.append(LeaveGroupMemberResponse(lm.member_id, lm.group_instance_id, int(error)))
        if removed:
            reason = f"{ev.members_phrase(removed)} left the group"
            shared = next(iter(client_reasons)) if len(client_reasons) == 1 else None
            if shared:
                reason += f" (client reason: {shared})"
            if group.state in (S.STABLE, S.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance(group, now, reason)
            elif group.state is S.PREPARING_REBALANCE:
                self._maybe_complete_join(group, now)
        self.ctx.respond(token, LeaveGroupResponse(int(E.NONE), tuple(results)))

    # ================================================================= timers

    # Each expiry first checks that its deadline (kept in the group, on the monotonic
    # clock) has passed. A fire before the deadline is not stale by itself: the
    # runtime's timer and the clock it passes may disagree, so re-arm at the
    # deadline instead of dropping the timer. A missing deadline means the timer
    # was replaced or cancelled.

    def _on_join_timer(self, now: int, group: ClassicGroup) -> None:
        deadline = group.join_deadline_ms
        if group.state is not S.PREPARING_REBALANCE or deadline is None:
            return
        if now < deadline:
            self.timer.schedule(timer_key(JOIN, group.group_id), deadline)
            return
        if (
            group.join_mode == JoinMode.INITIAL
            and group.new_member_added
            and group.initial_remaining_ms != 0
        ):
            # Members are still arriving: extend, never past the rebalance timeout.
            group.new_member_added = False
            delay = min(
                self.ctx.config.group_initial_rebalance_delay_ms, group.initial_remaining_ms
            )
            group.initial_remaining_ms = max(group.initial_remaining_ms - group.initial_delay_ms, 0)
            group.initial_delay_ms = delay
            self._schedule_join(group, JoinMode.INITIAL, now + delay)
            return
        self._complete_join(group, now)

    def _on_sync_timer(self, now: int, group: ClassicGroup) -> None:
        deadline = group.sync_deadline_ms
        if deadline is None:
            return
        if now < deadline:
            self.timer.schedule(timer_key(SYNC, group.group_id), deadline)
            return
        generation = group.sync_generation
        self._cancel_sync(group)
        if generation != group.generation_id:
            return
        if group.state in (S.COMPLETING_REBALANCE, S.STABLE) and group.pending_sync:
            laggards = list(group.pending_sync)
            for mid in laggards:
                member = group.members.get(mid)
                if member is not None:
                    self._drop_member(
                        group, member, now, "no SyncGroup before the rebalance timeout"
                    )
            self.prepare_rebalance(
                group,
                now,
                f"{ev.members_phrase(laggards)} did not sync before the rebalance timeout",
            )

    def _on_heartbeat_timer(self, now: int, group: ClassicGroup, member_id: str) -> None:
        if group.state is S.DEAD:
            return
        member = group.members.get(member_id)
        if member is None or member.heartbeat_deadline_ms is None:
            return
        if now < member.heartbeat_deadline_ms:
            self.timer.schedule(
                timer_key(HEARTBEAT, group.group_id, member_id), member.heartbeat_deadline_ms
            )
            return
        if member.is_new:
            self._remove_member_and_update(
                group, member, now, f"new member {member_id} join timed out"
            )
        elif member.join_waiter is not None or member.sync_waiter is not None:
            # Members parked in the rebalance count as alive (hasSatisfiedHeartbeat);
            # completing the join or the sync schedules their next deadline.
            return
        else:
            self._remove_member_and_update(
                group, member, now, f"member {member_id} session timed out"
            )

    def _on_pending_timer(self, now: int, group: ClassicGroup, member_id: str) -> None:
        deadline = group.pending_members.get(member_id)
        if group.state is S.DEAD or deadline is None:
            return
        if now < deadline:
            self.timer.schedule(timer_key(PENDING, group.group_id, member_id), deadline)
            return
        del group.pending_members[member_id]
        self.ctx.event(
            ev.MEMBER_REMOVED,
            group.group_id,
            member_id=member_id,
            reason="pending member expired",
        )
        self._maybe_complete_join(group, now)

    def on_timer(self, now: int, kind: str, parts: list[str]) -> None:
        """A classic group's timer fired (``JOIN``, ``SYNC``: the group; ``HEARTBEAT``,
        ``PENDING``: one member of it)."""
        group = self.classic_group(parts[0]) if parts else None
        if group is None:
            return
        if kind == JOIN:
            self._on_join_timer(now, group)
        elif kind == SYNC:
            self._on_sync_timer(now, group)
        elif kind == HEARTBEAT:
            self._on_heartbeat_timer(now, group, parts[1])
        elif kind == PENDING:
            self._on_pending_timer(now, group, parts[1])

    # ================================================================= the state machine

    def transition(self, group: ClassicGroup, dst: GroupState, reason: str) -> None:
        """Move ``group`` to ``dst`` (checked against the table) and tell the history."""
        src = group.transition_to(dst, self.ctx.wall_ms)
        self.ctx.event(
            ev.STATE_TRANSITION,
            group.group_id,
            from_state=src.value,
            to_state=dst.value,
            generation=group.generation_id,
            members=list(group.members),
            leader=group.leader_id,
            reason=reason,
        )

    def _start_rebalance_tracking(self, group: ClassicGroup, now: int, reason: str) -> None:
        track = group.rebalance
        if track is None:
            before: tuple[str, ...] = ()
            if group.persisted is not None:
                before = tuple(m.group_instance_id or m.member_id for m in group.persisted.members)
            track = RebalanceTracking(started_ms=now, members_before=before)
        group.rebalance = RebalanceTracking(
            track.started_ms, track.members_before, (*track.reasons, reason)
        )

    def _finish_rebalance(self, group: ClassicGroup, now: int) -> None:
        track = group.rebalance
        if track is None:
            return
        group.rebalance = None
        before = set(track.members_before)
        after = {m.group_instance_id or m.member_id for m in group.members.values()}
        self.ctx.event(
            ev.REBALANCE_COMPLETED,
            group.group_id,
            generation=group.generation_id,
            state=group.state.value,
            duration_ms=now - track.started_ms,
            joined=sorted(after - before),
            left=sorted(before - after),
            kept=sorted(after & before),
            reasons=list(track.reasons),
        )

    def write_group(self, group: ClassicGroup) -> None:
        """The group's record, as it is now (the only record a classic group has)."""
        self.ctx.record(group_metadata_record(group.group_id, group.to_value()))

    # --- timers ---------------------------------------------------------------------

    def schedule_heartbeat(self, group: ClassicGroup, member: ClassicMember, deadline: int) -> None:
        member.heartbeat_deadline_ms = deadline
        self.timer.schedule(timer_key(HEARTBEAT, group.group_id, member.member_id), deadline)

    def _cancel_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        self.timer.cancel(timer_key(HEARTBEAT, group.group_id, member_id))

    def _schedule_join(self, group: ClassicGroup, mode: str, deadline: int) -> None:
        group.join_mode = mode
        group.join_deadline_ms = deadline
        self.timer.schedule(timer_key(JOIN, group.group_id), deadline)

    def _cancel_join(self, group: ClassicGroup) -> None:
        group.join_mode = None
        group.join_deadline_ms = None
        self.timer.cancel(timer_key(JOIN, group.group_id))

    def _schedule_sync(self, group: ClassicGroup, deadline: int) -> None:
        group.sync_deadline_ms = deadline
        group.sync_generation = group.generation_id
        self.timer.schedule(timer_key(SYNC, group.group_id), deadline)

    def _cancel_sync(self, group: ClassicGroup) -> None:
        group.sync_deadline_ms = None
        group.sync_generation = None
        self.timer.cancel(timer_key(SYNC, group.group_id))

    def _cancel_pending(self, group: ClassicGroup, member_id: str) -> None:
        self.timer.cancel(timer_key(PENDING, group.group_id, member_id))

    def cancel_all_timers(self, group: ClassicGroup) -> None:
        self._cancel_join(group)
        self._cancel_sync(group)
        for mid in group.members:
            self._cancel_heartbeat(group, mid)
        for mid in group.pending_members:
            self._cancel_pending(group, mid)

    # --- waiters -----------------------------------------------------------------------

    def _answer_join_waiter(self, member: ClassicMember, response: JoinGroupResponse) -> None:
        if member.join_waiter is not None:
            waiter, member.join_waiter = member.join_waiter, None
            self.ctx.respond(waiter.token, response)

    def _answer_sync_waiter(self, member: ClassicMember, response: SyncGroupResponse) -> None:
        if member.sync_waiter is not None:
            waiter, member.sync_waiter = member.sync_waiter, None
            self.ctx.respond(waiter.token, response)

    def fail_waiters(self, member: ClassicMember, error: ErrorCode) -> None:
        """Answer the member's parked JoinGroup and SyncGroup with ``error``."""
        self._answer_join_waiter(member, JoinGroupResponse(int(error), member_id=member.member_id))
        self._answer_sync_waiter(member, SyncGroupResponse(int(error)))

    # ================================================================= replay and loading

    def replay_group(self, key: GroupMetadataKey, value: bytes | None) -> None:
        """A classic group's record (None: its tombstone)."""
        group = self.groups.get(key.group)
        if isinstance(group, ConsumerGroup):
            if value is None:
                return  # a classic group upgraded in this call: its successor stays
            raise ValueError(f"classic group record for consumer group {key.group}")
        if value is None:
            if group is not None:
                group.persisted = None
                if group.state is S.DEAD or not group.offsets:
                    del self.groups[key.group]
            return
        decoded = decode_group_metadata_value(value)
        if group is None:
            group = self.get_or_create(key.group)
            group.persisted = decoded
            if self.ctx.loaded:
                self._materialize(group)
        else:
            # Live groups already hold this state in memory; only the durable copy moves.
            group.persisted = decoded

    def get_or_create(self, group_id: str) -> ClassicGroup:
        """The group, or a new one holding only offsets (Kafka's "simple" group)."""
        group = self.groups.get(group_id)
        if group is None:
            group = ClassicGroup(group_id)
            self.groups[group_id] = group
        return group

    def maybe_forget_shell(self, group: ClassicGroup) -> None:
        """An offsets-only group with no offsets left is gone, live or reloaded alike."""
        if (
            not group.offsets
            and group.persisted is None
            and not group.members
            and not group.pending_members
            and group.state is S.EMPTY
        ):
            del self.groups[group.group_id]

    def _materialize(self, group: ClassicGroup) -> None:
        value = group.persisted
        if value is None:
            return
        group.protocol_type = value.protocol_type
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        ts = value.current_state_timestamp
        group.state_timestamp_ms = ts if ts >= 0 else None
        group.members = {}
        group.static_members = {}
        for m in value.members:
            protocols = ((value.protocol, m.subscription),) if value.protocol else ()
            group.members[m.member_id] = ClassicMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=m.assignment,
            )
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.members_bytes = group.count_members_bytes()
        # In-flight rebalances are not persisted: a loaded group is Stable or Empty.
        group.start_in(S.STABLE if group.members else S.EMPTY)
        group.subscribed_topics = group.compute_subscribed_topics()

    def on_loaded(self, now: int) -> None:
        """Every record was replayed: rebuild each classic group and start its timers."""
        for group in list(self.groups.values()):
            if not isinstance(group, ClassicGroup):
                continue
            self._materialize(group)
            self.ctx.event(
                ev.GROUP_LOADED,
                group.group_id,
                state=group.state.value,
                generation=group.generation_id,
                members=list(group.members),
                offsets=len(group.offsets),
            )
            # Members must heartbeat (or rejoin) the new coordinator within their session.
            for member in group.members.values():
                self.schedule_heartbeat(group, member, now + member.session_timeout_ms)
            if len(group.members) > self.ctx.config.group_max_size:
                self.prepare_rebalance(group, now, "loaded group is over group.max.size")
            elif group.members and not any(m.assignment for m in group.members.values()):
                # Written when its join phase completed, before the leader's assignment:
                # that rebalance was lost with the old coordinator, so start another.
                self.prepare_rebalance(
                    group, now, "loaded group has no assignment (rebalance interrupted)"
                )

    def on_unloaded(self) -> None:
        """The partition moved away: parked requests get NOT_COORDINATOR, timers stop."""
        for group in self.groups.values():
            if not isinstance(group, ClassicGroup):
                continue
            for member in group.members.values():
                self.fail_waiters(member, E.NOT_COORDINATOR)
            self.cancel_all_timers(group)
            group.transition_to(S.DEAD, self.ctx.wall_ms)
