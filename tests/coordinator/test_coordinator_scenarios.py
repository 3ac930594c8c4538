"""Kafka's own coordinator test scenarios (research/coordinator-protocol.md section 4.2)."""

from __future__ import annotations

from typing import Any

import pytest
from coord_ctx import (
    Ctx,
    commit,
    commit_error,
    ctx0,
    join_response,
    stable,
    subscription,
    sync_response,
)

from odradek.coordinator import (
    CoordinatorConfig,
    ErrorCode,
    GroupState,
    loading_response,
    partition_for,
)
from odradek.coordinator.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from odradek.coordinator.types import (
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetDeleteRequest,
    OffsetDeleteTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
    SyncGroupRequest,
    SyncGroupResponse,
)
from odradek.coordinator.types import OffsetCommitPartition as P

E = ErrorCode
S = GroupState


# --- 1-4: loading, routing, validation ---------------------------------------------------


def test_1_loading_responses() -> None:
    join = JoinGroupRequest("g", "", None, "c", "h", 10000, 10000, "consumer", (("r", b""),))
    assert loading_response(join).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert loading_response(HeartbeatRequest("g", 1, "m")).error_code == E.NONE
    assert loading_response(SyncGroupRequest("g", 1, "m")).error_code == E.REBALANCE_IN_PROGRESS
    assert loading_response(ListGroupsRequest()).error_code == E.COORDINATOR_LOAD_IN_PROGRESS
    assert loading_response(DeleteGroupsRequest(("g",))).results[0].error_code == 14
    assert loading_response(commit("g", "t", 0, 1)).topics[0].partitions[0].error_code == 14


def test_2_routing_matches_java() -> None:
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE, and Utils.abs maps it to 0.
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("a", 50) == 97 % 50
    assert partition_for("hello", 50) == 99162322 % 50
    assert partition_for("Aa", 7) == partition_for("BB", 7)  # the classic hash collision


def test_3_empty_group_id() -> None:
    ctx = ctx0()
    assert join_response(ctx, ctx.join("")).error_code == E.INVALID_GROUP_ID
    assert sync_response(ctx, ctx.sync("", "m", 1)).error_code == E.INVALID_GROUP_ID
    assert ctx.heartbeat("", "m", 1) == E.INVALID_GROUP_ID
    assert ctx.call(LeaveGroupRequest("", ())).error_code == E.INVALID_GROUP_ID
    # Every group API, OffsetCommit included (Kafka 4.x still takes commits for "").
    assert commit_error(ctx, commit("", "t", 0, 5)) == E.INVALID_GROUP_ID
    assert ctx.call(OffsetFetchRequest("", None)).error_code == E.INVALID_GROUP_ID
    assert ctx.call(DescribeGroupsRequest(("",))).groups[0].error_code == E.INVALID_GROUP_ID
    assert ctx.call(DeleteGroupsRequest(("",))).results[0].error_code == E.INVALID_GROUP_ID
    assert ctx.call(OffsetDeleteRequest("", ())).error_code == E.INVALID_GROUP_ID


@pytest.mark.parametrize("session", [5999, 1_800_001])
def test_4_session_timeout_bounds(session: int) -> None:
    ctx = ctx0()
    r = join_response(ctx, ctx.join(session_ms=session))
    assert r.error_code == E.INVALID_SESSION_TIMEOUT and ctx.state() is None


# --- 5-14: JoinGroup basics ---------------------------------------------------------------


def test_5_unknown_member_on_new_group() -> None:
    ctx = ctx0()
    assert join_response(ctx, ctx.join("g", "ghost")).error_code == E.UNKNOWN_MEMBER_ID
    assert ctx.state() is None


def test_6_empty_protocol_type_or_list() -> None:
    ctx = ctx0()
    assert join_response(ctx, ctx.join(protocol_type="")).error_code == 23
    assert join_response(ctx, ctx.join(protocols=())).error_code == 23


def test_7_inconsistent_protocols() -> None:
    ctx = ctx0()
    stable(ctx, 1)
    r = join_response(ctx, ctx.join(protocol_type="connect", require_known=False))
    assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL
    r = join_response(ctx, ctx.join(protocols=(("roundrobin", b""),), require_known=False))
    assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_8_9_pending_member_then_expires() -> None:
    ctx = ctx0()
    (m1,), gen = stable(ctx, 1, session_ms=10_000)
    r = join_response(ctx, ctx.join(client_id="late"))
    assert r.error_code == E.MEMBER_ID_REQUIRED and r.member_id.startswith("late-")
    group = ctx.shard.groups["g"]
    assert ctx.state() is S.STABLE and list(group.pending_members) == [r.member_id]
    for _ in range(3):
        ctx.sleep(4000)
        assert ctx.heartbeat("g", m1, gen) == E.NONE
    assert not group.pending_members and ctx.state() is S.STABLE


def test_10_rebalance_waits_for_pending_member() -> None:
    ctx = ctx0()
    (m1,), gen = stable(ctx, 1)
    pending = join_response(ctx, ctx.join(client_id="p")).member_id
    t1 = ctx.join("g", m1)  # the leader rejoins: PR, but a pending member blocks completion
    assert ctx.state() is S.PREPARING_REBALANCE and not ctx.done(t1)
    tp = ctx.join("g", pending, client_id="p")
    assert ctx.state() is S.COMPLETING_REBALANCE
    assert join_response(ctx, t1).generation_id == join_response(ctx, tp).generation_id == gen + 1
    assert not ctx.shard.groups["g"].pending_members


def test_11_pending_member_leaves() -> None:
    ctx = ctx0()
    stable(ctx, 1)
    pending = join_response(ctx, ctx.join(client_id="p")).member_id
    r = ctx.leave("g", (pending, None))
    assert r.members[0].error_code == E.NONE and not ctx.shard.groups["g"].pending_members


def test_12_group_max_size() -> None:
    ctx = ctx0(group_max_size=2)
    stable(ctx, 2)
    r = join_response(ctx, ctx.join(client_id="third"))
    assert r.error_code == E.GROUP_MAX_SIZE_REACHED and r.member_id == ""


def test_13_last_rejoiners_kicked_out() -> None:
    ctx = ctx0()
    members, _gen = stable(ctx, 4)
    ctx.shard.config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_size=2)
    tokens = {m: ctx.join("g", m) for m in members}  # the leader's rejoin starts a rebalance
    kicked = [m for m, t in tokens.items() if ctx.done(t) and ctx.responses[t].error_code == 81]
    assert kicked == members[2:]
    joined = {m: join_response(ctx, tokens[m]) for m in members[:2]}
    assert {r.error_code for r in joined.values()} == {0}
    assert set(ctx.shard.groups["g"].members) == set(members[:2])


def test_14_loaded_group_over_max_size_rebalances() -> None:
    ctx = ctx0()
    stable(ctx, 3)
    ctx.config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_size=2)
    ctx.reload()
    assert ctx.state() is S.PREPARING_REBALANCE


def test_14b_sessions_restart_when_a_new_coordinator_loads_the_group() -> None:
    """Kafka restarts every member's session on load: a member silent for most of its
    session before the failover (its coordinator was dying) keeps its place for a whole
    session after the load, and only a member that stays silent is expelled."""
    ctx = ctx0()
    (a, b), gen = stable(ctx, 2)  # sessions of 10 s
    ctx.sleep(9_000)  # no heartbeat reached the dying coordinator
    ctx.reload()
    ctx.sleep(8_000)  # 17 s since the last heartbeat: past the old deadline
    assert ctx.state() is S.STABLE and set(ctx.shard.groups["g"].members) == {a, b}
    assert ctx.heartbeat("g", a, gen) == 0
    ctx.sleep(2_000)  # b silent for a whole session since the load
    assert set(ctx.shard.groups["g"].members) == {a}


# --- 15-21: initial delay, rejoins, generations ---------------------------------------------


def test_15_initial_delay_then_generation_one() -> None:
    ctx = Ctx()
    m, t = ctx.join_new(client_id="c")
    ctx.sleep(2999)
    assert not ctx.done(t)
    ctx.sleep(1)
    r = join_response(ctx, t)
    assert (r.generation_id, r.leader, len(r.members)) == (1, m, 1)


def test_16_initial_delay_extends_up_to_rebalance_timeout() -> None:
    ctx = Ctx()
    _, t1 = ctx.join_new(client_id="a", rebalance_ms=7000)
    ctx.sleep(2000)
    _, t2 = ctx.join_new(client_id="b", rebalance_ms=7000)
    ctx.sleep(1000)  # first delay ends at 3000: a member arrived, extend by 3000
    assert not ctx.done(t1)
    ctx.sleep(2000)
    _, t3 = ctx.join_new(client_id="c", rebalance_ms=7000)
    ctx.sleep(1000)  # 6000: extend again, but only by the 1000 ms budget left
    assert not ctx.done(t1)
    ctx.sleep(1000)  # 7000 = rebalance timeout: done even though members kept coming
    assert all(join_response(ctx, t).generation_id == 1 for t in (t1, t2, t3))


def test_17_generation_increments_by_one_per_rebalance() -> None:
    ctx = ctx0()
    members, gen = stable(ctx, 2)
    for expected in (gen + 1, gen + 2):
        tokens = {m: ctx.join("g", m) for m in members}
        responses = {m: join_response(ctx, t) for m, t in tokens.items()}
        assert {r.generation_id for r in responses.values()} == {expected}
        leader = responses[members[0]].leader
        for m in members:
            ctx.sync("g", m, expected, ((m, b"x"),) if m == leader else ())
        assert ctx.state() is S.STABLE


def test_18_19_unchanged_follower_vs_leader_rejoin() -> None:
    ctx = ctx0()
    (leader, follower), gen = stable(ctx, 2)
    r = join_response(ctx, ctx.join("g", follower))
    assert (r.error_code, r.generation_id, r.members) == (0, gen, ())
    assert ctx.state() is S.STABLE
    ctx.join("g", leader)
    assert ctx.state() is S.PREPARING_REBALANCE


def test_20_changed_metadata_rebalances() -> None:
    ctx = ctx0()
    (_, follower), _ = stable(ctx, 2)
    ctx.join("g", follower, protocols=(("range", subscription("foo", "bar")),))
    assert ctx.state() is S.PREPARING_REBALANCE


def test_21_known_member_on_empty_group() -> None:
    ctx = ctx0()
    (m,), _ = stable(ctx, 1)
    ctx.leave("g", (m, None))
    assert ctx.state() is S.EMPTY
    r = join_response(ctx, ctx.join("g", m))
    assert (r.error_code, r.generation_id) == (E.UNKNOWN_MEMBER_ID, -1)


# --- 22-27: SyncGroup --------------------------------------------------------------------


def test_23_omitted_members_get_empty_assignment() -> None:
    ctx = Ctx()
    a, _ = ctx.join_new(client_id="a")
    b, tb = ctx.join_new(client_id="b")
    ctx.sleep(10_000)
    gen = join_response(ctx, tb).generation_id
    sb = ctx.sync("g", b, gen)
    ctx.sync("g", a, gen, ((a, b"x"),))
    r = sync_response(ctx, sb)
    assert (r.error_code, r.assignment) == (0, b"")


def test_24_25_sync_validation() -> None:
    ctx = ctx0()
    (m, _), gen = stable(ctx, 2)
    assert sync_response(ctx, ctx.sync("g", m, gen + 1)).error_code == E.ILLEGAL_GENERATION
    assert sync_response(ctx, ctx.sync("g", "who", gen)).error_code == E.UNKNOWN_MEMBER_ID
    assert sync_response(ctx, ctx.sync("nope", m, gen)).error_code == E.UNKNOWN_MEMBER_ID
    bad_type = SyncGroupRequest("g", gen, m, protocol_type="connect", protocol_name="range")
    assert ctx.call(bad_type).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    bad_name = SyncGroupRequest("g", gen, m, protocol_type="consumer", protocol_name="rr")
    assert ctx.call(bad_name).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    ok = SyncGroupRequest("g", gen, m, protocol_type="consumer", protocol_name="range")
    assert ctx.call(ok).error_code == E.NONE


def test_26_parked_follower_sync_fails_when_group_rebalances() -> None:
    ctx = Ctx()
    ctx.join_new(client_id="a")
    b, tb = ctx.join_new(client_id="b")
    ctx.sleep(10_000)
    gen = join_response(ctx, tb).generation_id
    sb = ctx.sync("g", b, gen)
    ctx.join_new(client_id="c")  # a new member: CR -> PR
    assert sync_response(ctx, sb).error_code == E.REBALANCE_IN_PROGRESS


@pytest.mark.parametrize("all_sync", [False, True])
def test_27_sync_timeout_removes_laggards(all_sync: bool) -> None:
    ctx = Ctx()
    tokens = dict(ctx.join_new(client_id=c, session_ms=6000, rebalance_ms=20_000) for c in "abc")
    ctx.sleep(6000)  # initial delay, extended once because members kept arriving
    joins = {m: join_response(ctx, t) for m, t in tokens.items()}
    gen, leader = joins[next(iter(joins))].generation_id, joins[next(iter(joins))].leader
    followers = [m for m in joins if m != leader]
    # Keep the sessions alive so only the sync timeout can act.
    for _ in range(4):
        ctx.sleep(4000)
        for m in joins:
            ctx.heartbeat("g", m, gen)
    ctx.sync("g", leader, gen, ())
    if all_sync:
        for m in followers:
            ctx.sync("g", m, gen)
    ctx.sleep(4000)  # 20 s after the join completed
    if all_sync:
        assert ctx.state() is S.STABLE and len(ctx.shard.groups["g"].members) == 3
    else:
        assert ctx.heartbeat("g", followers[0], gen) == E.UNKNOWN_MEMBER_ID
        assert ctx.heartbeat("g", leader, gen) == E.REBALANCE_IN_PROGRESS


# --- 28-34: heartbeats and timeouts -----------------------------------------------------------


def test_28_heartbeat_errors_by_state() -> None:
    ctx = ctx0()
    assert ctx.heartbeat("nope", "m", 1) == E.UNKNOWN_MEMBER_ID
    (a, b), gen = stable(ctx, 2)
    assert ctx.heartbeat("g", a, gen + 1) == E.ILLEGAL_GENERATION
    ctx.join("g", a)
    assert ctx.heartbeat("g", b, gen) == E.REBALANCE_IN_PROGRESS
    ctx.join("g", b)
    assert ctx.state() is S.COMPLETING_REBALANCE
    assert ctx.heartbeat("g", b, gen + 1) == E.NONE
    ctx.leave("g", (a, None), (b, None))
    assert ctx.heartbeat("g", a, gen + 1) == E.UNKNOWN_MEMBER_ID  # Empty


def test_29_session_timeout_and_commit_keeps_alive() -> None:
    ctx = ctx0()
    (a, b), gen = stable(ctx, 2, session_ms=6000)
    for _ in range(3):
        ctx.sleep(5000)
        assert ctx.heartbeat("g", a, gen) == E.NONE
        assert commit_error(ctx, commit("g", "foo", 0, 1, gen, b)) == E.NONE
    assert ctx.state() is S.STABLE
    ctx.sleep(5000)
    assert ctx.heartbeat("g", a, gen) == E.NONE
    ctx.sleep(1000)  # b's last commit was 6 s ago
    assert ctx.state() is S.PREPARING_REBALANCE
    assert ctx.heartbeat("g", b, gen) == E.UNKNOWN_MEMBER_ID


def test_30_old_member_that_never_rejoins_is_dropped() -> None:
    ctx = ctx0()
    (a,), gen = stable(ctx, 1, session_ms=6000, rebalance_ms=60_000)
    _, tn = ctx.join_new(client_id="new", session_ms=6000, rebalance_ms=60_000)
    assert ctx.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    ctx.sleep(6000)  # a's session expires while the rebalance waits for it
    r = join_response(ctx, tn)
    assert r.error_code == 0 and len(r.members) == 1 and r.generation_id == gen + 1


def test_31_new_member_join_expiration() -> None:
    ctx = ctx0()
    (a,), gen = stable(ctx, 1, session_ms=6000, rebalance_ms=600_000)
    _, tn = ctx.join_new(client_id="new", session_ms=6000, rebalance_ms=600_000)
    for _ in range(60):  # a keeps its session but never rejoins
        ctx.sleep(5000)
        ctx.heartbeat("g", a, gen)
    assert join_response(ctx, tn).error_code == E.UNKNOWN_MEMBER_ID
    assert len(ctx.shard.groups["g"].members) == 1


def test_32_34_static_follower_kept_dynamic_dropped_new_leader() -> None:
    ctx = ctx0()
    kw: dict[str, Any] = {"session_ms": 30_000, "rebalance_ms": 10_000}
    a = join_response(ctx, ctx.join(instance_id="ia", client_id="a", **kw)).member_id
    ctx.sync("g", a, 1, ())
    d, td = ctx.join_new(client_id="d", **kw)
    e, te = ctx.join_new(client_id="e", **kw)
    ta = ctx.join("g", a, instance_id="ia", **kw)
    for t in (td, te, ta):
        assert join_response(ctx, t).generation_id == 2
    ctx.sync("g", d, 2)
    ctx.sync("g", e, 2)
    ctx.sync("g", a, 2, ())
    assert ctx.state() is S.STABLE
    # A new static member joins; only d rejoins. At the rebalance timeout the dynamic
    # e is dropped, the static a is kept, and d leads because the leader a did not rejoin.
    tb = ctx.join(instance_id="ib", client_id="b", **kw)
    td = ctx.join("g", d, **kw)
    ctx.sleep(9_999)
    assert not ctx.done(td)
    ctx.sleep(1)
    b = join_response(ctx, tb).member_id
    rd = join_response(ctx, td)
    assert rd.leader == d and len(rd.members) == 3
    assert set(ctx.shard.groups["g"].members) == {a, d, b}


def test_33_nobody_rejoined_extends_join_phase() -> None:
    ctx = ctx0()
    a, b, gen = static_pair(ctx)  # static members: never dropped at join completion
    ctx.leave("g", (b, "ib"))
    assert ctx.state() is S.PREPARING_REBALANCE
    ctx.sleep(5_000)
    assert ctx.heartbeat("g", a, gen, "ia") == E.REBALANCE_IN_PROGRESS  # alive, not rejoining
    ctx.sleep(5_000)  # the rebalance timeout passes with nobody rejoined
    group = ctx.shard.groups["g"]
    assert ctx.state() is S.PREPARING_REBALANCE and group.generation_id == gen
    assert any(e.kind == "join_phase_extended" for e in ctx.events)
    ctx.sleep(10_000)  # a's session (10 s) ran out meanwhile: the group empties
    assert ctx.state() is S.EMPTY and group.generation_id == gen + 1


# --- 35-39: offsets ------------------------------------------------------------------------


def test_35_simple_group_commits() -> None:
    ctx = ctx0()
    assert commit_error(ctx, commit("s", "t", 0, 10)) == E.NONE
    assert ctx.state("s") is S.EMPTY
    assert commit_error(ctx, commit("x", "t", 0, 10, gen=1)) == E.ILLEGAL_GENERATION
    v9 = commit("x", "t", 0, 10, gen=1, unknown_group_is_not_found=True)
    assert commit_error(ctx, v9) == E.GROUP_ID_NOT_FOUND
    assert ctx.state("x") is None


def test_36_commit_after_group_empty_and_member_only_rule() -> None:
    ctx = ctx0()
    (a,), _gen = stable(ctx, 1)
    assert commit_error(ctx, commit("g", "t", 0, 1)) == E.UNKNOWN_MEMBER_ID
    ctx.leave("g", (a, None))
    assert commit_error(ctx, commit("g", "t", 0, 99)) == E.NONE
    r = ctx.call(OffsetFetchRequest("g", (OffsetFetchTopic("t", (0,)),)))
    assert r.topics[0].partitions[0].committed_offset == 99


def test_37_commit_by_state() -> None:
    ctx = Ctx()
    a, ta = ctx.join_new(client_id="a")
    ctx.sleep(3000)
    join_response(ctx, ta)
    assert commit_error(ctx, commit("g", "t", 0, 1, 1, a)) == E.REBALANCE_IN_PROGRESS
    assert commit_error(ctx, commit("g", "t", 0, 1, 1, "zz")) == E.UNKNOWN_MEMBER_ID
    assert commit_error(ctx, commit("g", "t", 0, 1, 7, a)) == E.ILLEGAL_GENERATION
    ctx.sync("g", a, 1, ())
    ctx.join_new(client_id="b")  # PR: the old generation may still commit
    assert ctx.state() is S.PREPARING_REBALANCE
    assert commit_error(ctx, commit("g", "t", 0, 1, 1, a)) == E.NONE


def test_38_metadata_too_large_partial() -> None:
    ctx = ctx0()
    req = OffsetCommitRequest(
        "s", (OffsetCommitTopic("t", (P(0, 1, metadata="x" * 4097), P(1, 2, metadata="ok"))),)
    )
    parts = ctx.call(req).topics[0].partitions
    assert [p.error_code for p in parts] == [E.OFFSET_METADATA_TOO_LARGE, E.NONE]
    assert len(ctx.state_log) == 1


def test_39_fetch_unknown() -> None:
    ctx = ctx0()
    r = ctx.call(OffsetFetchRequest("nope", (OffsetFetchTopic("t", (0, 1)),), require_stable=True))
    assert [(p.committed_offset, p.metadata, p.error_code) for p in r.topics[0].partitions] == [
        (-1, "", 0),
        (-1, "", 0),
    ]
    ctx.call(commit("s", "t", 3, 30))
    r = ctx.call(OffsetFetchRequest("s", None))
    assert [(t.name, [p.partition for p in t.partitions]) for t in r.topics] == [("t", [3])]


# --- 40-44: static membership -----------------------------------------------------------------


def static_pair(ctx: Ctx) -> tuple[str, str, int]:
    ta = ctx.join(instance_id="ia", client_id="a")
    a = join_response(ctx, ta).member_id
    ctx.sync("g", a, 1, ())
    tb = ctx.join(instance_id="ib", client_id="b")
    ta = ctx.join("g", a, instance_id="ia")
    b = join_response(ctx, tb).member_id
    assert join_response(ctx, ta).leader == a
    sb = ctx.sync("g", b, 2, instance_id="ib")
    ctx.sync("g", a, 2, ((a, b"A"), (b, b"B")), instance_id="ia")
    assert sync_response(ctx, sb).assignment == b"B"
    return a, b, 2


def test_40_static_follower_rejoin_keeps_assignment() -> None:
    ctx = ctx0()
    a, b, gen = static_pair(ctx)
    r = join_response(ctx, ctx.join(instance_id="ib", client_id="b"))
    assert r.error_code == 0 and r.generation_id == gen and r.member_id != b
    assert r.leader == a and ctx.state() is S.STABLE
    assert sync_response(ctx, ctx.sync("g", r.member_id, gen, instance_id="ib")).assignment == b"B"
    assert ctx.heartbeat("g", b, gen, "ib") == E.FENCED_INSTANCE_ID
    ctx.check_replay_equivalence()


@pytest.mark.parametrize("v9", [True, False])
def test_41_static_leader_rejoin_skip_assignment(v9: bool) -> None:
    ctx = ctx0()
    a, _b, _gen = static_pair(ctx)
    r = join_response(ctx, ctx.join(instance_id="ia", client_id="a", skip=v9))
    assert ctx.state() is S.STABLE
    if v9:
        assert r.skip_assignment and r.leader == r.member_id and len(r.members) == 2
    else:
        assert not r.skip_assignment and r.leader == a and r.members == ()


def test_42_duplicate_static_member_fences_parked_join() -> None:
    ctx = ctx0()
    a, b, gen = static_pair(ctx)
    ctx.join_new(client_id="c")  # a new member: PR
    tb_old = ctx.join("g", b, instance_id="ib")
    tb_new = ctx.join(instance_id="ib", client_id="b")
    assert join_response(ctx, tb_old).error_code == E.FENCED_INSTANCE_ID
    assert not ctx.done(tb_new) and ctx.state() is S.PREPARING_REBALANCE
    ta = ctx.join("g", a, instance_id="ia")
    new_b = join_response(ctx, tb_new)
    assert new_b.error_code == 0 and new_b.member_id != b
    assert join_response(ctx, ta).generation_id == gen + 1


def test_43_static_member_id_checks() -> None:
    ctx = ctx0()
    a, _b, gen = static_pair(ctx)
    assert join_response(ctx, ctx.join("g", "other", instance_id="ib")).error_code == 82
    assert sync_response(ctx, ctx.sync("g", "other", gen, instance_id="ia")).error_code == 82
    assert ctx.heartbeat("g", "other", gen, "ia") == E.FENCED_INSTANCE_ID
    assert commit_error(ctx, commit("g", "t", 0, 1, gen, "other", group_instance_id="ia")) == 82
    assert join_response(ctx, ctx.join("g", a, instance_id="zz")).error_code == 25
    assert ctx.leave("g", ("other", "ia")).members[0].error_code == 82


def test_44_static_rejoin_in_completing_rebalance_and_protocol_change() -> None:
    ctx = ctx0()
    a, b, _gen = static_pair(ctx)
    ctx.join("g", a, instance_id="ia")
    ctx.join("g", b, instance_id="ib")
    assert ctx.state() is S.COMPLETING_REBALANCE
    ctx.join(instance_id="ib", client_id="b")
    assert ctx.state() is S.PREPARING_REBALANCE
    ctx2 = ctx0()
    static_pair(ctx2)
    protocols = (("roundrobin", b"x"), ("range", subscription("foo")))
    ctx2.join(instance_id="ib", client_id="b", protocols=protocols)
    assert ctx2.state() is S.STABLE  # "range" still wins the vote: no rebalance
    ctx2.join(instance_id="ia", client_id="a", protocols=protocols)
    assert ctx2.state() is S.PREPARING_REBALANCE  # now "roundrobin" would win


# --- 45-53: leave, delete, describe, list, records -----------------------------------------------


def test_45_batch_leave_by_instance_id() -> None:
    ctx = ctx0()
    a, _b, _gen = static_pair(ctx)
    r = ctx.leave("g", ("", "ib"), ("", "unknown"), ("wrong", "ia"))
    assert r.error_code == 0
    assert [m.error_code for m in r.members] == [E.NONE, E.UNKNOWN_MEMBER_ID, 82]
    assert set(ctx.shard.groups["g"].members) == {a}


def test_46_leave_unknown_group_and_last_member() -> None:
    ctx = ctx0()
    r = ctx.leave("nope", ("m", None))
    assert (r.error_code, r.members[0].error_code) == (0, E.UNKNOWN_MEMBER_ID)
    (a,), gen = stable(ctx, 1)
    ctx.leave("g", (a, None))
    assert ctx.history()[-2:] == ["PreparingRebalance", "Empty"]
    assert ctx.shard.groups["g"].generation_id == gen + 1


def test_47_delete_groups() -> None:
    ctx = ctx0()
    stable(ctx, 1)
    ctx.call(commit("s", "t", 0, 1))
    r = ctx.call(DeleteGroupsRequest(("g", "s", "nope")))
    assert [x.error_code for x in r.results] == [E.NON_EMPTY_GROUP, E.NONE, E.GROUP_ID_NOT_FOUND]
    tail = [decode_key(rec.key) for rec in ctx.state_log[-2:]]
    assert tail == [OffsetCommitKey("s", "t", 0), GroupMetadataKey("s")]
    assert all(rec.value is None for rec in ctx.state_log[-2:])


def test_48_offset_delete() -> None:
    ctx = ctx0()
    (a,), gen = stable(ctx, 1)  # subscribed to "foo"
    ctx.call(commit("g", "foo", 0, 1, gen, a))
    ctx.call(commit("g", "bar", 0, 1, gen, a))
    r = ctx.call(
        OffsetDeleteRequest("g", (OffsetDeleteTopic("foo", (0,)), OffsetDeleteTopic("bar", (0,))))
    )
    assert [t.partitions[0].error_code for t in r.topics] == [E.GROUP_SUBSCRIBED_TO_TOPIC, E.NONE]
    assert set(ctx.shard.groups["g"].offsets) == {("foo", 0)}
    assert ctx.call(OffsetDeleteRequest("nope", ())).error_code == E.GROUP_ID_NOT_FOUND
    ctx2 = ctx0()
    stable(ctx2, 1, protocol_type="connect")
    assert ctx2.call(OffsetDeleteRequest("g", ())).error_code == E.NON_EMPTY_GROUP


def test_49_describe_groups() -> None:
    ctx = ctx0()
    (a, _b), _gen = stable(ctx, 2)
    d = ctx.call(DescribeGroupsRequest(("g", "nope"))).groups
    assert (d[0].state, d[0].protocol_type, d[0].protocol_data) == ("Stable", "consumer", "range")
    assert d[0].members[0].assignment == a.encode() and d[0].members[0].metadata
    assert (d[1].error_code, d[1].state, d[1].members) == (0, "Dead", ())
    ctx.join("g", a)
    d = ctx.call(DescribeGroupsRequest(("g",))).groups[0]
    assert (d.state, d.protocol_data) == ("PreparingRebalance", "")
    assert all(m.metadata == b"" and m.assignment == b"" for m in d.members)


def test_50_list_groups_with_states_filter() -> None:
    ctx = ctx0()
    (a,), _ = stable(ctx, 1)
    ctx.call(commit("s", "t", 0, 1))
    ctx.join("g", a)
    ctx.join_new("h", client_id="x")  # completes immediately (no delay): CompletingRebalance
    listed = ctx.call(ListGroupsRequest()).groups
    assert {(g.group_id, g.state) for g in listed} == {
        ("g", "CompletingRebalance"),
        ("s", "Empty"),
        ("h", "CompletingRebalance"),
    }
    only = ctx.call(ListGroupsRequest(states_filter=("empty",))).groups
    assert [g.group_id for g in only] == ["s"]
    assert ctx.call(ListGroupsRequest(types_filter=("consumer",))).groups == ()


def test_51_replay_tombstones_and_offsets_without_group() -> None:
    ctx = ctx0()
    ctx.call(commit("s", "t", 0, 1))
    ctx.call(commit("s", "t", 1, 2))
    ctx.call(OffsetDeleteRequest("s", (OffsetDeleteTopic("t", (0,)),)))
    stable(ctx, 1)
    ctx.call(commit("dead", "t", 0, 1))
    ctx.call(DeleteGroupsRequest(("dead",)))
    ctx.reload()
    assert ctx.state("s") is S.EMPTY and set(ctx.shard.groups["s"].offsets) == {("t", 1)}
    assert ctx.state("g") is S.STABLE and ctx.state("dead") is None


def test_52_unload_answers_parked_requests() -> None:
    ctx = Ctx()
    _, tj = ctx.join_new(client_id="a")
    res = ctx.shard.on_unloaded()
    assert [(t, r.error_code) for t, r in res.responses] == [(tj, E.NOT_COORDINATOR)]
    assert ctx.timer.deadlines == {}


def test_53_record_versions_written() -> None:
    ctx = ctx0()
    (a,), gen = stable(ctx, 1)
    ctx.call(commit("g", "t", 0, 5, gen, a))
    ctx.call(commit("g", "t", 1, 6, gen, a, retention_time_ms=1000))
    versions = [(decode_key(r.key), r.value[:2] if r.value else None) for r in ctx.state_log]
    group_versions = {v for k, v in versions if isinstance(k, GroupMetadataKey)}
    assert group_versions == {b"\x00\x03"}
    assert [v for k, v in versions if isinstance(k, OffsetCommitKey)] == [b"\x00\x03", b"\x00\x01"]
    value = decode_group_metadata_value(ctx.state_log[-3].value or b"")
    assert value.generation == gen and value.members[0].member_id == a
    assert (
        decode_offset_commit_value(ctx.state_log[-1].value or b"").expire_timestamp
        == ctx.time + 1000
    )


def test_heartbeat_response_type() -> None:
    ctx = ctx0()
    assert isinstance(ctx.call(HeartbeatRequest("g", 1, "m")), HeartbeatResponse)
    assert isinstance(ctx.call(SyncGroupRequest("g", 1, "m")), SyncGroupResponse)


# --- Kafka 4.x rules the classic coordinator follows ------------------------------------------


def test_initial_delay_extends_for_any_rebalance_from_empty() -> None:
    """A fleet restarting into an existing (Empty) group gets one rebalance, not one per arrival.

    Kafka 4.x sets newMemberAdded whenever the rebalance started from Empty
    (previousState == EMPTY), not only for generation 0.
    """
    ctx = Ctx()  # default 3000 ms initial delay
    kw: dict[str, Any] = {"rebalance_ms": 30_000}
    m, t = ctx.join_new(client_id="old", **kw)
    ctx.sleep(3000)
    gen = join_response(ctx, t).generation_id
    ctx.leave("g", (m, None))
    assert ctx.state() is S.EMPTY and ctx.shard.groups["g"].generation_id == gen + 1
    tokens = []
    for name in ("a", "b", "c"):  # arrivals 2 s apart: each lands inside the running delay
        tokens.append(ctx.join_new(client_id=name, **kw)[1])
        ctx.sleep(2000)
    ctx.sleep(30_000)
    generations = {join_response(ctx, t).generation_id for t in tokens}
    assert generations == {gen + 2}, generations
    assert ctx.history().count("CompletingRebalance") == 2  # the first group, then the fleet


def test_static_member_replaced_while_first_join_parked_is_not_new() -> None:
    """Kafka 4.x replaceStaticMember builds a fresh member: not expelled at session timeout."""
    ctx = ctx0()
    kw: dict[str, Any] = {"session_ms": 10_000, "rebalance_ms": 60_000}
    (a,), gen = stable(ctx, 1, **kw)
    first = ctx.join(instance_id="s", client_id="s", **kw)  # new static member: parked, PR
    assert ctx.state() is S.PREPARING_REBALANCE and not ctx.done(first)
    second = ctx.join(instance_id="s", client_id="s", **kw)  # its process restarted
    assert join_response(ctx, first).error_code == E.FENCED_INSTANCE_ID
    for _ in range(6):  # 30 s: three session timeouts of the parked replacement
        ctx.sleep(5000)
        assert ctx.heartbeat("g", a, gen) == E.REBALANCE_IN_PROGRESS
    assert not ctx.done(second), ctx.response(second)
    ta = ctx.join("g", a, **kw)
    r = join_response(ctx, second)
    assert r.error_code == E.NONE and r.generation_id == gen + 1
    assert join_response(ctx, ta).generation_id == gen + 1


def test_batched_leave_removes_all_then_completes_join_once() -> None:
    ctx = ctx0()
    (a, b, c), gen = stable(ctx, 3)
    ta, tb = ctx.join("g", a), ctx.join("g", b)  # PR, waiting for c
    r = ctx.leave("g", (c, None), (b, None))
    assert [m.error_code for m in r.members] == [E.NONE, E.NONE]
    assert join_response(ctx, tb).error_code == E.UNKNOWN_MEMBER_ID
    ra = join_response(ctx, ta)
    assert (ra.generation_id, [m.member_id for m in ra.members]) == (gen + 1, [a])
    assert ctx.state() is S.COMPLETING_REBALANCE
    assert ctx.shard.groups["g"].generation_id == gen + 1


@pytest.mark.parametrize("member", ["m", ""])
@pytest.mark.parametrize("instance", [None, "i"])
def test_simple_commit_accepted_whatever_the_member_id(member: str, instance: str | None) -> None:
    """validateOffsetCommit: generation -1 to an Empty or missing group skips member checks."""
    ctx = ctx0()
    missing = commit("new", "t", 0, 1, member=member, group_instance_id=instance)
    assert commit_error(ctx, missing) == E.NONE
    (a,), _gen = stable(ctx, 1)
    ctx.leave("g", (a, None))
    assert ctx.state() is S.EMPTY
    empty = commit("g", "t", 0, 2, member=member or a, group_instance_id=instance)
    assert commit_error(ctx, empty) == E.NONE


def test_offset_delete_empty_group_id() -> None:
    ctx = ctx0()
    r = ctx.call(OffsetDeleteRequest("", (OffsetDeleteTopic("t", (0,)),)))
    assert r.error_code == E.INVALID_GROUP_ID
