"""Online migration between the classic and the consumer protocol (KIP-848's upgrade path).

A classic group whose members roll over to the consumer protocol becomes a consumer
group (classic members keep working inside it: JoinGroup answered at once, SyncGroup
with the coordinator's assignment, Heartbeat asking them to rejoin), and back to a
classic group when the last consumer-protocol member leaves. Offsets stay, and no
partition is ever owned by two members.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cg_ctx import CgMember, cg_ctx, converge
from coord_ctx import Ctx, commit, join_response, sync_response

from odradek.coordinator import ErrorCode, GroupState
from odradek.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState
from odradek.coordinator.consumer_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    parse_assignment,
)
from odradek.coordinator.group import ClassicGroup
from odradek.coordinator.types import (
    HeartbeatRequest,
    JoinGroupResponse,
    OffsetFetchRequest,
    SyncGroupResponse,
)

E = ErrorCode
S = GroupState
CS = ConsumerGroupState
INITIAL_DELAY_MS = 100


def ctx_with(**kw: object) -> Ctx:
    """Consumer-group timeouts of cg_ctx, and a short initial delay for classic joins."""
    ctx = cg_ctx(group_initial_rebalance_delay_ms=INITIAL_DELAY_MS, **kw)
    ctx.set_topics(foo=6)
    return ctx


@dataclass
class Classic:
    """An eager classic consumer: it revokes everything before it rejoins."""

    ctx: Ctx
    name: str
    member_id: str = ""
    generation: int = -1
    owned: set[int] = field(default_factory=set)

    def protocols(self) -> tuple[tuple[str, bytes], ...]:
        sub = Subscription.of(["foo"], owned=[("foo", p) for p in sorted(self.owned)])
        return (("range", sub.encode()),)

    def send_join(self) -> int:
        return self.ctx.join("g", self.member_id, client_id=self.name, protocols=self.protocols())

    def join(self) -> JoinGroupResponse:
        """Join until answered (KIP-394 member id round trip included)."""
        self.owned = set()  # eager: revoke everything first
        r = join_response(self.ctx, self.send_join())
        if r.error_code == E.MEMBER_ID_REQUIRED:
            self.member_id = r.member_id
            r = join_response(self.ctx, self.send_join())
        assert r.error_code == 0, r
        self.member_id, self.generation = r.member_id, r.generation_id
        return r

    def sync(self, assignments: tuple[tuple[str, bytes], ...] = ()) -> SyncGroupResponse:
        r = sync_response(
            self.ctx, self.ctx.sync("g", self.member_id, self.generation, assignments)
        )
        if r.error_code == 0:
            self.owned = {p for _, p in parse_assignment(r.assignment).topic_partitions()}
        return r

    def heartbeat(self) -> int:
        return self.ctx.heartbeat("g", self.member_id, self.generation)


def classic_rebalance(ctx: Ctx, members: list[Classic]) -> None:
    """Every member (re)joins (eager: owning nothing), the leader assigns foo's partitions
    round robin, everyone syncs: the group is Stable."""
    for m in members:
        m.owned = set()
    tokens = {m.name: m.send_join() for m in members}
    for m in members:
        early = ctx.responses.get(tokens[m.name])
        if early is not None and early.error_code == E.MEMBER_ID_REQUIRED:  # KIP-394
            m.member_id = join_response(ctx, tokens[m.name]).member_id
            tokens[m.name] = m.send_join()
    for _ in range(10):  # a group starting from Empty waits (and extends) for more members
        if all(ctx.done(t) for t in tokens.values()):
            break
        ctx.sleep(INITIAL_DELAY_MS)
    for m in members:
        r = ctx.response(tokens[m.name])
        assert r is not None, f"{m.name}'s JoinGroup is still parked"
        assert r.error_code == 0, r
        m.generation = r.generation_id
    group = ctx.shard.groups["g"]
    assert isinstance(group, ClassicGroup)
    split = {
        m.member_id: [p for p in range(6) if p % len(members) == i] for i, m in enumerate(members)
    }
    plan = tuple(
        (mid, encode_assignment(Assignment.of([("foo", p) for p in ps])))
        for mid, ps in split.items()
    )
    leader = next(m for m in members if m.member_id == group.leader_id)
    parked = {m.name: ctx.sync("g", m.member_id, m.generation) for m in members if m is not leader}
    leader.sync(plan)
    for m in members:
        if m is not leader:
            r = sync_response(ctx, parked[m.name])
            assert r.error_code == 0, r
        m.owned = set(split[m.member_id])
    assert ctx.state() is S.STABLE


def classic_group(ctx: Ctx, n: int) -> list[Classic]:
    """n eager classic members, Stable, foo's 6 partitions split between them."""
    members = [Classic(ctx, f"c{i}") for i in range(n)]
    classic_rebalance(ctx, members)
    return members


def assert_no_partition_owned_twice(owners: list[set[int]]) -> None:
    seen: set[int] = set()
    for owned in owners:
        assert not owned & seen, owners
        seen |= owned


def rejoin_classic(c: Classic) -> None:
    """What an eager classic member does when told REBALANCE_IN_PROGRESS."""
    c.join()
    r = c.sync()
    assert r.error_code in (0, E.REBALANCE_IN_PROGRESS), r


def test_rolling_upgrade_to_the_consumer_protocol_and_back() -> None:
    ctx = ctx_with()
    classics = classic_group(ctx, 3)
    generation = classics[0].generation
    assert (
        ctx.call(commit("g", "foo", 0, 42, generation, classics[0].member_id))
        .topics[0]
        .partitions[0]
        .error_code
        == 0
    )

    # c0 restarts with the consumer protocol: it leaves (LeaveGroup), the other two
    # rebalance the classic way, then it rejoins as n0.
    assert ctx.leave("g", (classics[0].member_id, None)).members[0].error_code == 0
    survivors = classics[1:]
    for c in survivors:
        assert c.heartbeat() == E.REBALANCE_IN_PROGRESS
    classic_rebalance(ctx, survivors)
    n0 = CgMember(ctx, "n0")
    r = n0.join()
    assert r.error_code == 0
    group = ctx.shard.groups["g"]
    assert isinstance(group, ConsumerGroup), "the classic group was upgraded"
    assert group.classic_members == 2 and len(group.members) == 3
    ctx.check_replay_equivalence()

    # Everyone converges: classic members rejoin when their heartbeat says so.
    def settle() -> None:
        for _ in range(12):
            n0.heartbeat()
            for c in survivors:
                if c.heartbeat() == E.REBALANCE_IN_PROGRESS:
                    rejoin_classic(c)
            assert_no_partition_owned_twice([n0.partitions(), *(c.owned for c in survivors)])
        assert ctx.state() is CS.STABLE

    settle()
    owners = [n0.partitions(), *(c.owned for c in survivors)]
    assert sorted(len(o) for o in owners) == [2, 2, 2]
    # Offsets committed by the classic group are still there.
    fetched = ctx.call(OffsetFetchRequest("g", None))
    assert fetched.topics[0].partitions[0].committed_offset == 42
    ctx.check_replay_equivalence()

    # And back: the consumer-protocol member leaves; only classic members are left, so
    # the group becomes a classic group again and rebalances the classic way.
    assert n0.leave().error_code == 0
    group = ctx.shard.groups["g"]
    assert isinstance(group, ClassicGroup) and group.state is S.PREPARING_REBALANCE
    ctx.check_replay_equivalence()
    tokens = {}
    for c in survivors:
        assert c.heartbeat() == E.REBALANCE_IN_PROGRESS
        c.owned = set()
        tokens[c.name] = c.send_join()
    for c in survivors:
        r = join_response(ctx, tokens[c.name])
        assert r.error_code == 0
        c.generation = r.generation_id
    leader = next(c for c in survivors if c.member_id == group.leader_id)
    follower = next(c for c in survivors if c is not leader)
    plan = (
        (leader.member_id, encode_assignment(Assignment.of([("foo", p) for p in range(3)]))),
        (follower.member_id, encode_assignment(Assignment.of([("foo", p) for p in range(3, 6)]))),
    )
    parked = ctx.sync("g", follower.member_id, follower.generation)
    leader.sync(plan)
    follower.owned = {
        p for _, p in parse_assignment(sync_response(ctx, parked).assignment).topic_partitions()
    }
    assert ctx.state() is S.STABLE
    assert ctx.call(OffsetFetchRequest("g", None)).topics[0].partitions[0].committed_offset == 42
    ctx.check_replay_equivalence()


def test_classic_members_inside_a_consumer_group() -> None:
    ctx = ctx_with()
    n = CgMember(ctx, "n")
    n.join()
    c = Classic(ctx, "c")
    r = c.join()
    # Answered at once, with its member epoch as the generation and no leader.
    assert (
        r.leader == ""
        and r.generation_id == ctx.shard.groups["g"].members[c.member_id].member_epoch
    )
    assert r.protocol_type == "consumer" and r.protocol_name == "range"
    assert c.sync().error_code == 0 and not c.owned  # n still owns everything
    n.heartbeat()  # n revokes half...
    n.heartbeat()  # ...and says so
    assert c.heartbeat() == E.REBALANCE_IN_PROGRESS  # its partitions are free: rejoin
    rejoin_classic(c)
    assert len(c.owned) == 3 and not c.owned & n.partitions()
    assert c.heartbeat() == 0
    # Errors as Kafka maps them for classic members of a consumer group.
    assert ctx.heartbeat("g", c.member_id, c.generation + 7) == E.ILLEGAL_GENERATION
    assert ctx.heartbeat("g", "ghost", c.generation) == E.UNKNOWN_MEMBER_ID
    assert ctx.call(HeartbeatRequest("g", n.epoch, "n")).error_code == E.UNKNOWN_MEMBER_ID
    bad = commit("g", "foo", 0, 1, c.generation + 1, c.member_id)
    assert ctx.call(bad).topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION
    ok = commit("g", "foo", sorted(c.owned)[0], 1, c.generation, c.member_id)
    assert ctx.call(ok).topics[0].partitions[0].error_code == 0
    ctx.check_replay_equivalence()


def test_a_classic_member_joining_an_empty_consumer_group_makes_it_classic() -> None:
    ctx = ctx_with()
    n = CgMember(ctx, "n")
    n.join()
    ctx.call(commit("g", "foo", 1, 7, n.epoch, "n", unknown_group_is_not_found=True))
    n.leave()
    assert ctx.state() is CS.EMPTY
    classic_rebalance(ctx, [Classic(ctx, "c")])
    group = ctx.shard.groups["g"]
    assert isinstance(group, ClassicGroup) and group.offsets[("foo", 1)].offset == 7
    ctx.check_replay_equivalence()


def test_the_migration_policy_can_forbid_upgrades() -> None:
    ctx = ctx_with(consumer_group_migration_policy="downgrade")
    classic_group(ctx, 2)
    r = CgMember(ctx, "n").join()
    assert r.error_code == E.GROUP_ID_NOT_FOUND and "migration.policy" in (r.error_message or "")
    assert isinstance(ctx.shard.groups["g"], ClassicGroup)


def test_upgrade_answers_parked_classic_requests() -> None:
    ctx = ctx_with()
    members = classic_group(ctx, 2)
    # The leader rejoins: a rebalance starts, its JoinGroup waits for the other member.
    b = next(m for m in members if m.member_id == ctx.shard.groups["g"].leader_id)
    b.owned = set()
    parked = b.send_join()
    assert ctx.response(parked) is None
    CgMember(ctx, "n").join()
    assert join_response(ctx, parked).error_code == E.REBALANCE_IN_PROGRESS
    assert isinstance(ctx.shard.groups["g"], ConsumerGroup)
    ctx.check_replay_equivalence()
    converge([CgMember(ctx, "n", epoch=ctx.shard.groups["g"].members["n"].member_epoch)])
