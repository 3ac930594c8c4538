"""Seed 001's rebalance scenarios, with the exact sequence of group states.

The seed describes a coordinator without group.initial.rebalance.delay.ms
(the first consumer's join completes at once) and calls the initial state of a
new group "Stable"; modern Kafka starts a group in Empty, so our sequences
begin with Empty where the seed writes Stable. The delay is set to 0 here; the
default 3000 ms delay is covered by ``test_default_initial_delay_*``.
"""

from __future__ import annotations

from coord_ctx import Ctx, join_response, sync_response

from odradek.coordinator import CoordinatorConfig, ErrorCode, GroupState
from odradek.coordinator.types import DeleteGroupsRequest, OffsetCommitRequest, OffsetCommitTopic
from odradek.coordinator.types import OffsetCommitPartition as P

E = ErrorCode
EMPTY, PR, CR, STABLE, DEAD = (s.value for s in GroupState)


def no_delay() -> Ctx:
    return Ctx(CoordinatorConfig(group_initial_rebalance_delay_ms=0))


def test_three_consumers_one_rebalance() -> None:
    ctx = no_delay()
    # (1)-(2) consumer-3 is handled first and completes the join alone.
    c3, t3 = ctx.join_new(client_id="consumer-3")
    r3 = join_response(ctx, t3)
    assert (r3.error_code, r3.generation_id, r3.leader) == (0, 1, c3)
    # (3) consumer-2 joins while the group awaits consumer-3's sync: back to PR.
    c2, t2 = ctx.join_new(client_id="consumer-2")
    assert ctx.state() is GroupState.PREPARING_REBALANCE and not ctx.done(t2)
    # (4) consumer-1 joins; consumer-3's stale SyncGroup is refused.
    c1, t1 = ctx.join_new(client_id="consumer-1")
    assert not ctx.done(t1)
    assert sync_response(ctx, ctx.sync("g", c3, 1)).error_code == E.REBALANCE_IN_PROGRESS
    # (5)-(6) consumer-3 rejoins: everyone has joined, all three get responses.
    t3 = ctx.join("g", c3, client_id="consumer-3")
    responses = {m: join_response(ctx, t) for m, t in ((c1, t1), (c2, t2), (c3, t3))}
    assert {r.generation_id for r in responses.values()} == {2}
    assert {r.leader for r in responses.values()} == {c3}
    assert len(responses[c3].members) == 3 and not responses[c1].members
    # (7)-(8) followers sync first and wait; the leader's sync answers everyone.
    s1, s2 = ctx.sync("g", c1, 2), ctx.sync("g", c2, 2)
    assert not ctx.done(s1) and not ctx.done(s2)
    s3 = ctx.sync("g", c3, 2, ((c1, b"a1"), (c2, b"a2"), (c3, b"a3")))
    assert [sync_response(ctx, s).assignment for s in (s1, s2, s3)] == [b"a1", b"a2", b"a3"]
    assert ctx.history() == [EMPTY, PR, CR, PR, CR, STABLE]
    # (9) the application closes: all three leave, the group ends Empty...
    for m in (c1, c2, c3):
        assert ctx.leave("g", (m, None)).members[0].error_code == E.NONE
    assert ctx.history()[-2:] == [PR, EMPTY]
    assert ctx.state() is GroupState.EMPTY
    ctx.check_replay_equivalence()
    # ...and is removed once the retention check finds it without offsets.
    ctx.sleep(ctx.config.offsets_retention_check_interval_ms)
    assert ctx.history()[-1] == DEAD and ctx.state() is None
    ctx.check_replay_equivalence()


def _stable_single(ctx: Ctx, client: str) -> str:
    m, t = ctx.join_new(client_id=client)
    r = join_response(ctx, t)
    assert r.leader == m
    assert sync_response(ctx, ctx.sync("g", m, r.generation_id, ((m, b"all"),))).error_code == 0
    return m


def _rejoin_all(ctx: Ctx, parked: dict[str, int], generation: int) -> int:
    """Existing members learn of the rebalance by heartbeat and rejoin; all sync."""
    for m in list(ctx.shard.groups["g"].members):
        if m not in parked:
            assert ctx.heartbeat("g", m, generation) == E.REBALANCE_IN_PROGRESS
            parked[m] = ctx.join("g", m)
    joins = {m: join_response(ctx, t) for m, t in parked.items()}
    gen = joins[next(iter(joins))].generation_id
    leader = joins[next(iter(joins))].leader
    followers = [ctx.sync("g", m, gen) for m in joins if m != leader]
    lt = ctx.sync("g", leader, gen, tuple((m, m.encode()) for m in joins))
    for t in [*followers, lt]:
        assert sync_response(ctx, t).error_code == 0
    return gen


def test_three_consumers_one_second_apart_two_rebalances() -> None:
    ctx = no_delay()
    c1 = _stable_single(ctx, "consumer-1")  # first rebalance: consumer-1 alone
    ctx.sleep(1000)
    c2, t2 = ctx.join_new(client_id="consumer-2")
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    ctx.sleep(1000)
    c3, t3 = ctx.join_new(client_id="consumer-3")
    assert not ctx.done(t2) and not ctx.done(t3)
    gen = _rejoin_all(ctx, {c2: t2, c3: t3}, 1)
    assert gen == 2
    assert ctx.history() == [EMPTY, PR, CR, STABLE, PR, CR, STABLE]
    assert set(ctx.shard.groups["g"].members) == {c1, c2, c3}
    ctx.check_replay_equivalence()


def test_three_consumers_three_rebalances() -> None:
    ctx = no_delay()
    _stable_single(ctx, "consumer-1")
    ctx.sleep(1000)
    c2, t2 = ctx.join_new(client_id="consumer-2")
    assert _rejoin_all(ctx, {c2: t2}, 1) == 2
    ctx.sleep(2000)
    c3, t3 = ctx.join_new(client_id="consumer-3")
    assert _rejoin_all(ctx, {c3: t3}, 2) == 3
    assert ctx.history() == [EMPTY, PR, CR, STABLE, PR, CR, STABLE, PR, CR, STABLE]
    ctx.check_replay_equivalence()


def _three_in_completing(ctx: Ctx) -> tuple[list[str], dict[str, int]]:
    """Three members join together (default initial delay) and reach CompletingRebalance."""
    ids, tokens = [], {}
    for name in ("consumer-1", "consumer-2", "consumer-3"):
        m, t = ctx.join_new(client_id=name)
        ids.append(m)
        tokens[m] = t
    delay = ctx.config.group_initial_rebalance_delay_ms
    ctx.sleep(delay)
    # Members kept arriving during the first delay, so it was extended once.
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    ctx.sleep(delay)
    assert ctx.state() is GroupState.COMPLETING_REBALANCE
    return ids, tokens


def test_default_initial_delay_three_consumers_one_rebalance() -> None:
    ctx = Ctx()
    ids, tokens = _three_in_completing(ctx)
    joins = {m: join_response(ctx, t) for m, t in tokens.items()}
    assert {j.generation_id for j in joins.values()} == {1}
    leader = joins[ids[0]].leader
    syncs = [ctx.sync("g", m, 1) for m in ids if m != leader]
    syncs.append(ctx.sync("g", leader, 1, tuple((m, m.encode()) for m in ids)))
    assert all(sync_response(ctx, s).error_code == 0 for s in syncs)
    assert ctx.history() == [EMPTY, PR, CR, STABLE]


def test_follower_missed_join_response() -> None:
    ctx = Ctx()
    (c1, c2, c3), tokens = _three_in_completing(ctx)
    leader = join_response(ctx, tokens[c1]).leader
    assert leader == c1
    join_response(ctx, tokens[c2])
    ctx.response(tokens[c3])  # lost on the way to consumer-3
    s2 = ctx.sync("g", c2, 1)  # the follower's sync is parked
    assert not ctx.done(s2)
    s1 = ctx.sync("g", c1, 1, ((c1, b"p0"), (c2, b"p1"), (c3, b"p2")))
    assert sync_response(ctx, s1).assignment == b"p0"
    assert sync_response(ctx, s2).assignment == b"p1"
    assert ctx.state() is GroupState.STABLE
    # consumer-3 rejoins: the group is Stable, so the answer is immediate.
    r3 = join_response(ctx, ctx.join("g", c3, client_id="consumer-3"))
    assert (r3.error_code, r3.generation_id, r3.leader, r3.members) == (0, 1, c1, ())
    assert sync_response(ctx, ctx.sync("g", c3, 1)).assignment == b"p2"
    assert ctx.history() == [EMPTY, PR, CR, STABLE]


def test_leader_missed_join_response() -> None:
    ctx = Ctx()
    (c1, c2, c3), tokens = _three_in_completing(ctx)
    ctx.response(tokens[c1])  # the leader's response is lost
    s2, s3 = ctx.sync("g", c2, 1), ctx.sync("g", c3, 1)
    assert not ctx.done(s2) and not ctx.done(s3)
    # The leader rejoins while CompletingRebalance: immediate answer with the member list.
    r1 = join_response(ctx, ctx.join("g", c1, client_id="consumer-1"))
    assert r1.leader == c1 and len(r1.members) == 3 and r1.generation_id == 1
    assert ctx.state() is GroupState.COMPLETING_REBALANCE
    s1 = ctx.sync("g", c1, 1, ((c1, b"x"), (c2, b"y"), (c3, b"z")))
    assert [sync_response(ctx, s).assignment for s in (s1, s2, s3)] == [b"x", b"y", b"z"]
    assert ctx.history() == [EMPTY, PR, CR, STABLE]


def test_sync_in_preparing_rebalance_gets_rebalance_in_progress() -> None:
    ctx = no_delay()
    c1, t1 = ctx.join_new(client_id="consumer-1")
    assert join_response(ctx, t1).leader == c1  # (1) the leader is assigning...
    _c2, t2 = ctx.join_new(client_id="consumer-2")  # (2) ...when consumer-2 joins
    assert ctx.state() is GroupState.PREPARING_REBALANCE
    s1 = sync_response(ctx, ctx.sync("g", c1, 1, ((c1, b"all"),)))  # (3)-(4)
    assert s1.error_code == E.REBALANCE_IN_PROGRESS
    t1 = ctx.join("g", c1, client_id="consumer-1")  # (5) it rejoins
    assert join_response(ctx, t1).generation_id == 2
    assert join_response(ctx, t2).generation_id == 2
    assert ctx.history() == [EMPTY, PR, CR, PR, CR]


def test_sync_in_stable_returns_assignment_at_once() -> None:
    ctx = Ctx()
    (c1, c2, c3), tokens = _three_in_completing(ctx)
    for t in tokens.values():
        join_response(ctx, t)
    s2 = ctx.sync("g", c2, 1)  # (1) parked
    s1 = ctx.sync("g", c1, 1, ((c1, b"a"), (c2, b"b"), (c3, b"c")))  # (2)
    assert sync_response(ctx, s2).assignment == b"b"  # (3)
    assert sync_response(ctx, s1).assignment == b"a"
    assert ctx.state() is GroupState.STABLE  # (4)
    r3 = sync_response(ctx, ctx.sync("g", c3, 1))  # (5) immediate
    assert (r3.error_code, r3.assignment, r3.protocol_name) == (0, b"c", "range")


def test_all_members_leaving_with_offsets_then_delete() -> None:
    ctx = Ctx()
    (c1, c2, c3), tokens = _three_in_completing(ctx)
    for t in tokens.values():
        join_response(ctx, t)
    ctx.sync("g", c1, 1, ((c1, b"a"),))
    commit = OffsetCommitRequest("g", (OffsetCommitTopic("foo", (P(0, 42),)),), 1, c1)
    assert ctx.call(commit).topics[0].partitions[0].error_code == 0
    ctx.leave("g", (c1, None), (c2, None), (c3, None))
    assert ctx.state() is GroupState.EMPTY
    assert ctx.shard.groups["g"].generation_id == 2
    # Offsets keep the Empty group alive through the retention check...
    ctx.sleep(ctx.config.offsets_retention_check_interval_ms)
    assert ctx.state() is GroupState.EMPTY
    # ...until the group is deleted.
    assert ctx.call(DeleteGroupsRequest(("g",))).results[0].error_code == 0
    assert ctx.state() is None and ctx.history()[-2:] == [EMPTY, DEAD]
    ctx.check_replay_equivalence()
    ctx.reload()
    assert ctx.state() is None
