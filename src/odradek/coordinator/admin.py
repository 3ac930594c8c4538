"""DescribeGroups, ListGroups and DeleteGroups: read the true state, delete Empty groups."""

from __future__ import annotations

from odradek.coordinator import events as ev
from odradek.coordinator.classic import ClassicGroupManager
from odradek.coordinator.consumer_group import (
    CONSUMER_GROUP_TRANSITIONS,
    ConsumerGroup,
    ConsumerGroupState,
)
from odradek.coordinator.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from odradek.coordinator.context import ShardContext
from odradek.coordinator.errors import ErrorCode
from odradek.coordinator.group import ClassicGroup
from odradek.coordinator.records import group_tombstone, offset_tombstone
from odradek.coordinator.state import GroupState
from odradek.coordinator.types import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    RequestToken,
)

S = GroupState
E = ErrorCode


class GroupAdminManager:
    """DescribeGroups, ListGroups and DeleteGroups, and deleting a group."""

    def __init__(self, ctx: ShardContext, classic: ClassicGroupManager) -> None:
        self.ctx = ctx
        self.groups = ctx.groups
        self.classic = classic

    def describe_groups(self, now: int, token: RequestToken, req: DescribeGroupsRequest) -> None:
        out = []
        for gid in req.group_ids:
            if not gid:
                out.append(DescribedGroup(int(E.INVALID_GROUP_ID), gid, "", "", ""))
                continue
            group = self.groups.get(gid)
            if group is None or group.state is S.DEAD or isinstance(group, ConsumerGroup):
                # v0-5: an unknown group (or one that is not a classic group) is "Dead" with
                # NONE; v6 (KIP-1043) says GROUP_ID_NOT_FOUND.
                if req.not_found_error:
                    message = (
                        f"Group {gid} is not a classic group."
                        if isinstance(group, ConsumerGroup)
                        else f"Group {gid} not found."
                    )
                    out.append(
                        DescribedGroup(int(E.GROUP_ID_NOT_FOUND), gid, "", "", "", (), message)
                    )
                else:
                    out.append(DescribedGroup(int(E.NONE), gid, S.DEAD.value, "", ""))
                continue
            stable = group.state is S.STABLE and group.protocol_name is not None
            members = tuple(
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(group.protocol_name) if stable and group.protocol_name else b"",
                    m.assignment if stable else b"",
                )
                for m in group.members.values()
            )
            out.append(
                DescribedGroup(
                    int(E.NONE),
                    gid,
                    group.state.value,
                    group.protocol_type,
                    (group.protocol_name or "") if stable else "",
                    members,
                )
            )
        self.ctx.respond(token, DescribeGroupsResponse(tuple(out)))

    def list_groups(self, now: int, token: RequestToken, req: ListGroupsRequest) -> None:
        """Every group, classic and consumer (KIP-848), filtered by state and type (KIP-518,
        KIP-1043), names compared case-insensitively."""
        states = {s.lower() for s in req.states_filter}
        types = {t.lower() for t in req.types_filter}
        listed = []
        for gid, group in self.groups.items():
            if group.state is S.DEAD:
                continue
            if isinstance(group, ConsumerGroup):
                kind, protocol_type = "consumer", CONSUMER_PROTOCOL_TYPE
            else:
                kind, protocol_type = "classic", group.protocol_type
            if types and kind not in types:
                continue
            if states and group.state.value.lower() not in states:
                continue
            listed.append(ListedGroup(gid, protocol_type, group.state.value, kind))
        self.ctx.respond(token, ListGroupsResponse(int(E.NONE), tuple(listed)))

    def delete_groups(self, now: int, token: RequestToken, req: DeleteGroupsRequest) -> None:
        results = []
        for gid in req.group_ids:
            group = self.groups.get(gid)
            if not gid:
                error = E.INVALID_GROUP_ID
            elif group is None or group.state is S.DEAD:
                error = E.GROUP_ID_NOT_FOUND
            elif group.state in (S.EMPTY, ConsumerGroupState.EMPTY):
                self.delete_group(group, "deleted by DeleteGroups")
                error = E.NONE
            else:
                error = E.NON_EMPTY_GROUP
            results.append(DeleteGroupsResult(gid, int(error)))
        self.ctx.respond(token, DeleteGroupsResponse(tuple(results)))

    def delete_group(self, group: ClassicGroup | ConsumerGroup, reason: str) -> None:
        """Tombstone an Empty group, whatever offsets it still has, and its history."""
        self.ctx.delete_history(group.group_id)
        for topic, partition in sorted(group.offsets):
            self.ctx.record(offset_tombstone(group.group_id, topic, partition))
        if isinstance(group, ConsumerGroup):
            CONSUMER_GROUP_TRANSITIONS.check(group.state, ConsumerGroupState.DEAD)
            for record in group.tombstone_records():
                self.ctx.record(record)
            self.ctx.event(
                ev.STATE_TRANSITION,
                group.group_id,
                from_state=group.state.value,
                to_state=ConsumerGroupState.DEAD.value,
                generation=group.group_epoch,
                members=[],
                leader=None,
                reason=reason,
                protocol="consumer",
            )
            return
        self.classic.cancel_all_timers(group)
        group.pending_members.clear()
        self.classic.transition(group, S.DEAD, reason)
        self.ctx.record(group_tombstone(group.group_id))
