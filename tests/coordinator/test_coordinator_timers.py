"""The core's timers: an early fire re-arms, deadlines live on the monotonic clock.

The runtime's timer and the clock it passes as ``now_ms`` may disagree (a
different clock, a stale fire left in the queue): whatever the cause, a timer
that fires before its deadline must be re-armed at that deadline, never dropped.
Record timestamps follow the wall clock (``wall_ms``), which may step either way
without moving any deadline.
"""

from __future__ import annotations

import pytest
from coord_ctx import Ctx, commit, commit_error, ctx0, join_response, stable

from odradek.coordinator import ErrorCode, GroupState
from odradek.coordinator.records import decode_group_metadata_value, decode_offset_commit_value
from odradek.coordinator.timer import HEARTBEAT, JOIN, PENDING, SYNC, timer_key

E = ErrorCode
S = GroupState


def fire_early(ctx: Ctx, key: str, early_ms: int) -> int:
    """The runtime fires ``key`` ``early_ms`` before its deadline; returns the deadline."""
    deadline = ctx.timer.deadline(key)
    assert deadline is not None, key
    ctx.timer.cancel(key)  # a fired timer is gone from the runtime's timer
    ctx._apply(ctx.shard.on_timer(deadline - early_ms, key))
    return deadline


def test_early_heartbeat_expiry_rearms() -> None:
    ctx = ctx0()
    (a, b), gen = stable(ctx, 2, session_ms=10_000)
    key = timer_key(HEARTBEAT, "g", a)
    deadline = fire_early(ctx, key, 4000)
    assert ctx.timer.deadline(key) == deadline and ctx.state() is S.STABLE
    ctx.sleep(deadline - ctx.time - 1)
    assert ctx.heartbeat("g", b, gen) == E.NONE
    ctx.sleep(1)  # a never heartbeat: it expires exactly at its deadline
    assert ctx.state() is S.PREPARING_REBALANCE
    assert ctx.heartbeat("g", a, gen) == E.UNKNOWN_MEMBER_ID


def test_early_join_expiry_rearms() -> None:
    ctx = ctx0()
    (a, b), gen = stable(ctx, 2, session_ms=30_000, rebalance_ms=20_000)
    ta = ctx.join("g", a, session_ms=30_000, rebalance_ms=20_000)  # b does not rejoin
    key = timer_key(JOIN, "g")
    deadline = fire_early(ctx, key, 5000)
    assert ctx.timer.deadline(key) == deadline and not ctx.done(ta)
    ctx.sleep(deadline - ctx.time)
    r = join_response(ctx, ta)
    assert (r.generation_id, [m.member_id for m in r.members]) == (gen + 1, [a])
    assert b not in ctx.shard.groups["g"].members


def test_early_sync_expiry_rearms() -> None:
    ctx = ctx0()
    kw = {"session_ms": 60_000, "rebalance_ms": 20_000}
    (a, b), gen = stable(ctx, 2, **kw)
    ta, tb = ctx.join("g", a, **kw), ctx.join("g", b, **kw)
    assert join_response(ctx, ta).generation_id == join_response(ctx, tb).generation_id
    ctx.sync("g", a, gen + 1, ((a, b"x"), (b, b"y")))  # leader syncs, b never does
    key = timer_key(SYNC, "g")
    deadline = fire_early(ctx, key, 7000)
    assert ctx.timer.deadline(key) == deadline
    ctx.sleep(deadline - ctx.time)
    assert b not in ctx.shard.groups["g"].members and ctx.state() is S.PREPARING_REBALANCE


def test_early_pending_member_expiry_rearms() -> None:
    ctx = ctx0()
    stable(ctx, 1)
    pending = join_response(ctx, ctx.join(client_id="p", session_ms=10_000)).member_id
    key = timer_key(PENDING, "g", pending)
    deadline = fire_early(ctx, key, 3000)
    assert ctx.timer.deadline(key) == deadline
    assert pending in ctx.shard.groups["g"].pending_members
    ctx.sleep(deadline - ctx.time)
    assert pending not in ctx.shard.groups["g"].pending_members


@pytest.mark.parametrize("step_ms", [-3_600_000, 3_600_000])
def test_wall_clock_step_moves_no_deadline_but_stamps_records(step_ms: int) -> None:
    ctx = ctx0()
    (a, b), gen = stable(ctx, 2, session_ms=10_000)
    ctx.sleep(6000)
    assert ctx.heartbeat("g", b, gen) == E.NONE  # a last heard of at t=0
    ctx.step_wall(step_ms)
    assert commit_error(ctx, commit("g", "foo", 0, 7, gen, b)) == E.NONE
    stamped = decode_offset_commit_value(ctx.state_log[-1].value or b"")
    assert stamped.commit_timestamp == ctx.wall == ctx.time + step_ms
    ctx.sleep(3999)
    assert ctx.state() is S.STABLE  # a's deadline is 10 s of monotonic time, step or not
    ctx.sleep(1)
    assert ctx.state() is S.PREPARING_REBALANCE
    assert ctx.heartbeat("g", a, gen) == E.UNKNOWN_MEMBER_ID
    ctx.leave("g", (b, None))  # Empty: the group record carries the wall-clock state time
    value = decode_group_metadata_value(ctx.state_log[-1].value or b"")
    assert value.current_state_timestamp == ctx.wall
