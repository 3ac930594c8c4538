"""docs/coordinator.md's per-state answer table is what the coordinator does."""

from __future__ import annotations

from pathlib import Path

import pytest
from coord_ctx import Ctx, commit, ctx0, join_response, stable

from odradek.coordinator import ErrorCode, GroupState
from odradek.coordinator.types import HeartbeatRequest, SyncGroupRequest

DOC = Path(__file__).resolve().parents[2] / "docs" / "coordinator.md"
S = GroupState
STATES = [s.value for s in (S.EMPTY, S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE, S.STABLE)]
REQUESTS = ["Heartbeat", "SyncGroup", "OffsetCommit", "JoinGroup (same metadata)"]


def documented() -> dict[tuple[str, str], str]:
    """The table whose header is ``| Request | Empty | ... | Stable |``, cell by cell."""
    lines = DOC.read_text().splitlines()
    header = "| Request | " + " | ".join(STATES) + " |"
    assert header in lines, f"{DOC.name} has no table {header!r}"
    cells: dict[tuple[str, str], str] = {}
    for line in lines[lines.index(header) + 2 :]:
        if not line.startswith("|"):
            break
        request, *answers = (c.strip() for c in line.strip("|").split("|"))
        cells.update({(request, state): a for state, a in zip(STATES, answers, strict=True)})
    assert {r for r, _ in cells} == set(REQUESTS), cells
    return cells


def group_in(state: str) -> tuple[Ctx, str, int]:
    """Three members; returns the context, the member asking, and its generation."""
    ctx = ctx0()
    (a, b, c), gen = stable(ctx, 3)
    if state == GroupState.EMPTY.value:
        ctx.leave("g", (a, None), (b, None), (c, None))
    elif state == GroupState.PREPARING_REBALANCE.value:
        ctx.join("g", a)  # the leader rejoins; c has not: the join phase waits
    elif state == GroupState.COMPLETING_REBALANCE.value:
        tokens = [ctx.join("g", m) for m in (a, b, c)]
        gen = join_response(ctx, tokens[1]).generation_id
    assert ctx.state() is GroupState(state)
    return ctx, b, gen


def answer(ctx: Ctx, request: str, member: str, gen: int) -> str:
    if request == "Heartbeat":
        code = ctx.call(HeartbeatRequest("g", gen, member)).error_code
    elif request == "OffsetCommit":
        code = ctx.call(commit("g", "foo", 0, 1, gen, member)).topics[0].partitions[0].error_code
    else:
        if request == "SyncGroup":
            token = ctx.send(SyncGroupRequest("g", gen, member))
        else:
            token = ctx.join("g", member)
        if not ctx.done(token):
            return "parked"
        code = ctx.response(token).error_code
    return ErrorCode(code).name


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("request_name", REQUESTS)
def test_documented_answer_by_state(request_name: str, state: str) -> None:
    ctx, member, gen = group_in(state)
    assert answer(ctx, request_name, member, gen) == documented()[(request_name, state)]
