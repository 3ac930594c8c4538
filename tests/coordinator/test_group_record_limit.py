"""A classic group's record must fit ``max.message.bytes``: members that would not fit get
GROUP_MAX_SIZE_REACHED, the group keeps serving the others and recovers.

Through the pure core on a manual clock, as the runtime drives it (the test context
checks that no call's records exceed the limit): 600 members with 2 KB of metadata
each, one member with 1 MiB, a group loaded over a smaller limit, and a neighbouring
group on the same partition that never notices.
"""

from __future__ import annotations

from dataclasses import replace

from coord_ctx import Ctx, commit, commit_error, join_response, stable, sync_response

from odradek.coordinator import CoordinatorConfig, ErrorCode, GroupState
from odradek.coordinator.history import batch_bytes, is_event_key
from odradek.coordinator.records import GroupMetadataKey, decode_key
from odradek.coordinator.types import JoinGroupResponse, LeaveGroupMember, LeaveGroupRequest

E = ErrorCode
S = GroupState
LIMIT = 1_048_588  # Kafka's default max.message.bytes
BIG = (("range", b"m" * 2_000),)


def ctx_with(**kw: int) -> Ctx:
    return Ctx(CoordinatorConfig(**kw))


def group_records(ctx: Ctx, group: str = "g") -> list[int]:
    """Sizes of the batches that held the group's records (the record alone)."""
    return [
        batch_bytes([r])
        for r in ctx.log
        if not is_event_key(r.key) and decode_key(r.key) == GroupMetadataKey(group)
    ]


def join_all(ctx: Ctx, count: int) -> tuple[dict[str, int], list[int]]:
    """``count`` members join (KIP-394's two steps): the parked tokens of those let in,
    by member id, and the numbers of those refused."""
    tokens, refused = {}, []
    for i in range(count):
        first = join_response(ctx, ctx.join("g", client_id=f"c{i}", protocols=BIG))
        if first.error_code == E.GROUP_MAX_SIZE_REACHED:
            refused.append(i)
            continue
        assert first.error_code == E.MEMBER_ID_REQUIRED
        tokens[first.member_id] = ctx.join("g", first.member_id, client_id=f"c{i}", protocols=BIG)
    return tokens, refused


def test_six_hundred_members_of_2kb_the_ones_that_fit_form_the_group() -> None:
    ctx = ctx_with()  # Kafka's initial delay: everyone joins one rebalance
    tokens, refused = join_all(ctx, 600)
    # The first ones fit (about 1 MB of 2 KB entries); the others are told at once.
    assert 400 < len(tokens) < 600 and refused == list(range(len(tokens), 600))
    # A neighbour on the same partition commits while they wait.
    assert commit_error(ctx, commit("neighbour", "foo", 0, 5)) == 0
    assert ctx.state() is S.PREPARING_REBALANCE
    ctx.sleep(10_000)  # the initial delay, extended while members arrived (to 10 s)
    answers = {m: join_response(ctx, t) for m, t in tokens.items()}
    assert {r.error_code for r in answers.values()} == {0}
    ok = list(tokens)
    assert ctx.state() is S.COMPLETING_REBALANCE
    assert max(group_records(ctx)) <= LIMIT
    gen = answers[ok[0]].generation_id
    leader = answers[ok[0]].leader
    syncs = [ctx.sync("g", m, gen) for m in ok if m != leader]
    lead = ctx.sync("g", leader, gen, tuple((m, b"a") for m in ok))
    assert all(sync_response(ctx, t).error_code == 0 for t in [*syncs, lead])
    assert ctx.state() is S.STABLE
    # Still no room: a newcomer is refused at once, and nobody rebalances for it.
    late = join_response(ctx, ctx.join("g", client_id="late", protocols=BIG))
    assert late.error_code == E.GROUP_MAX_SIZE_REACHED
    assert ctx.state() is S.STABLE
    # Fifty members leave: there is room again, and the newcomer joins the rebalance.
    gone = ok[-50:]
    ctx.call(LeaveGroupRequest("g", tuple(LeaveGroupMember(m) for m in gone)))
    newcomer, parked = ctx.join_new("g", client_id="late", protocols=BIG)
    rejoin = {m: ctx.join("g", m, client_id="x", protocols=BIG) for m in ok[:-50]}
    answers = {m: join_response(ctx, t) for m, t in {**rejoin, newcomer: parked}.items()}
    assert {r.error_code for r in answers.values()} == {0}
    assert newcomer in ctx.shard.groups["g"].members
    assert max(group_records(ctx)) <= LIMIT
    # The neighbour never noticed: it forms a group of its own as usual.
    (n,), gen = stable_after_delay(ctx, "neighbour")
    assert ctx.heartbeat("neighbour", n, gen) == 0
    assert ctx.acked["neighbour"] == {("foo", 0): 5}
    ctx.check_replay_equivalence()


def stable_after_delay(ctx: Ctx, group: str) -> tuple[list[str], int]:
    member, token = ctx.join_new(group)
    ctx.sleep(10_000)
    r = join_response(ctx, token)
    assert r.error_code == 0
    assert sync_response(ctx, ctx.sync(group, member, r.generation_id, ((member, b"a"),)))
    return [member], r.generation_id


def test_one_member_with_1mib_of_metadata_is_refused_and_leaves_no_group() -> None:
    ctx = ctx_with(group_initial_rebalance_delay_ms=0)
    huge = (("range", b"m" * (1 << 20)),)
    r = ctx.response(ctx.join("g", protocols=huge))
    assert isinstance(r, JoinGroupResponse) and r.error_code == E.GROUP_MAX_SIZE_REACHED
    assert "g" not in ctx.shard.groups and not ctx.log
    # The same member with ordinary metadata is welcome.
    (member,), _ = stable(ctx, 1)
    assert ctx.shard.groups["g"].members[member]


def test_a_member_that_grows_past_the_limit_is_refused_and_leaves() -> None:
    ctx = ctx_with(group_initial_rebalance_delay_ms=0, max_message_bytes=20_000)
    small = (("range", b"m" * 4_000),)
    (a, b), _ = stable(ctx, 2, protocols=small)
    grown = join_response(ctx, ctx.join("g", b, protocols=(("range", b"m" * 16_000),)))
    assert grown.error_code == E.GROUP_MAX_SIZE_REACHED
    assert list(ctx.shard.groups["g"].members) == [a]  # b left; a rebalances alone
    assert join_response(ctx, ctx.join("g", a, protocols=small)).error_code == 0
    # b comes back as it was: room again.
    _, token = ctx.join_new("g", client_id="b", protocols=small)
    assert join_response(ctx, ctx.join("g", a, protocols=small)).error_code == 0
    assert join_response(ctx, token).error_code == 0
    assert max(group_records(ctx)) <= 20_000
    ctx.check_replay_equivalence()


def test_a_group_loaded_over_a_smaller_limit_sheds_members_at_its_next_join() -> None:
    ctx = ctx_with(group_initial_rebalance_delay_ms=0)
    members, _ = stable(ctx, 6, protocols=(("range", b"m" * 20_000),))
    ctx.config = replace(ctx.config, max_message_bytes=64_000)  # e.g. an operator's change
    ctx.reload()
    assert ctx.state() is S.STABLE
    tokens = {m: ctx.join("g", m, protocols=(("range", b"m" * 20_000),)) for m in members}
    answers = {m: join_response(ctx, t) for m, t in tokens.items()}
    kept = [m for m in members if answers[m].error_code == 0]
    assert kept == members[:3]  # 3 x 20 KB fit 64 KB less the events' share
    assert {answers[m].error_code for m in members[3:]} == {E.GROUP_MAX_SIZE_REACHED}
    assert group_records(ctx)[-1] <= 64_000
    ctx.check_replay_equivalence()
