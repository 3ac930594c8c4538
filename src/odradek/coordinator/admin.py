"""DescribeGroups, ListGroups and DeleteGroups: read the true state, delete Empty groups."""

from __future__ import annotations

from odradek.coordinator.errors import ErrorCode
from odradek.coordinator.offsets import OffsetHandlers
from odradek.coordinator.state import GroupState, parse_state
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


class AdminHandlers(OffsetHandlers):
    def _describe_groups(self, now: int, token: RequestToken, req: DescribeGroupsRequest) -> None:
        out = []
        for gid in req.group_ids:
            if not gid:
                out.append(DescribedGroup(int(E.INVALID_GROUP_ID), gid, "", "", ""))
                continue
            group = self.groups.get(gid)
            if group is None or group.state is S.DEAD:
                # v0-5: unknown groups are "Dead" with NONE (v6 wants GROUP_ID_NOT_FOUND).
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
        self._respond(token, DescribeGroupsResponse(tuple(out)))

    def _list_groups(self, now: int, token: RequestToken, req: ListGroupsRequest) -> None:
        states = {parse_state(s) for s in req.states_filter}
        types = {t.lower() for t in req.types_filter}
        listed = []
        if not types or "classic" in types:
            for gid, group in self.groups.items():
                if group.state is S.DEAD:
                    continue
                if states and group.state not in states:
                    continue
                listed.append(ListedGroup(gid, group.protocol_type, group.state.value))
        self._respond(token, ListGroupsResponse(int(E.NONE), tuple(listed)))

    def _delete_groups(self, now: int, token: RequestToken, req: DeleteGroupsRequest) -> None:
        results = []
        for gid in req.group_ids:
            group = self.groups.get(gid)
            if not gid:
                error = E.INVALID_GROUP_ID
            elif group is None or group.state is S.DEAD:
                error = E.GROUP_ID_NOT_FOUND
            elif group.state is S.EMPTY:
                self._delete_group(group, "deleted by DeleteGroups")
                error = E.NONE
            else:
                error = E.NON_EMPTY_GROUP
            results.append(DeleteGroupsResult(gid, int(error)))
        self._respond(token, DeleteGroupsResponse(tuple(results)))
