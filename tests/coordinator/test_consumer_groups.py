"""Consumer groups (KIP-848) in the core: epochs, reconciliation, errors, timers, records.

Scenarios after Kafka's GroupMetadataManagerTest (consumerGroupHeartbeat*), on a
manual clock; each ends with the group rebuilt from its records alone.
"""

from __future__ import annotations

import pytest
from cg_ctx import CgMember, cg_ctx, converge

from odradek.coordinator import ErrorCode
from odradek.coordinator.consumer_group import ConsumerGroupState, MemberState
from odradek.coordinator.types import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    ListGroupsRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
)

E = ErrorCode
CS = ConsumerGroupState


@pytest.fixture
def ctx():  # type: ignore[no-untyped-def]
    c = cg_ctx()
    c.set_topics(foo=6, bar=3)
    return c


def test_first_member_gets_every_partition_at_epoch_one(ctx) -> None:  # type: ignore[no-untyped-def]
    a = CgMember(ctx, "a")
    r = a.join()
    assert r.error_code == 0 and r.member_epoch == 1 and r.heartbeat_interval_ms == 1000
    assert a.partitions() == set(range(6))
    assert ctx.state() is CS.STABLE
    group = ctx.shard.groups["g"]
    assert group.group_epoch == 1 and group.target_assignment_epoch == 1
    # Nothing changed: the next heartbeat carries no assignment.
    assert a.heartbeat().assignment is None
    ctx.check_replay_equivalence()


def test_a_partition_moves_only_after_its_owner_revoked_it(ctx) -> None:  # type: ignore[no-untyped-def]
    a, b = CgMember(ctx, "a"), CgMember(ctx, "b")
    a.join()
    r = b.join()
    # The target moved half of a's partitions to b, but a still owns them: b waits.
    assert r.member_epoch == 2 and not b.owned
    assert ctx.shard.groups["g"].members["b"].state is MemberState.UNRELEASED_PARTITIONS
    assert ctx.state() is CS.RECONCILING
    # a hears of it: it must revoke, and stays at its epoch meanwhile.
    r = a.heartbeat()
    assert r.member_epoch == 1 and len(a.owned) == 3
    assert ctx.shard.groups["g"].members["a"].state is MemberState.UNREVOKED_PARTITIONS
    # b still gets nothing: a has not said it revoked.
    assert b.heartbeat().assignment is None and not b.owned
    # a acknowledges (owned without the revoked ones): it moves to epoch 2, they are free.
    assert a.heartbeat().member_epoch == 2
    b.heartbeat()
    assert b.partitions() == set(range(6)) - a.partitions() and len(b.owned) == 3
    assert ctx.state() is CS.STABLE
    ctx.check_replay_equivalence()


def test_members_converge_to_a_balanced_split(ctx) -> None:  # type: ignore[no-untyped-def]
    members = [CgMember(ctx, f"m{i}") for i in range(3)]
    for m in members:
        m.join()
    converge(members)
    assert sorted(len(m.owned) for m in members) == [2, 2, 2]
    assert set().union(*(m.owned for m in members)) == {(ctx.topic_id("foo"), p) for p in range(6)}
    assert ctx.state() is CS.STABLE
    ctx.check_replay_equivalence()


def test_member_epoch_validation(ctx) -> None:  # type: ignore[no-untyped-def]
    members = [CgMember(ctx, m) for m in "abc"]
    for m in members:
        m.join()
    converge(members)
    a = members[0]
    member = ctx.shard.groups["g"].members["a"]
    # a revoked at epoch 1 and went straight to 3.
    assert (member.member_epoch, member.previous_member_epoch) == (3, 1)
    assert a.heartbeat(epoch=4).error_code == E.FENCED_MEMBER_EPOCH
    # The previous epoch with a subset of the assignment is accepted (a lost response)...
    assert a.heartbeat(epoch=1).error_code == 0
    # ...another older one, or the previous one claiming partitions it was not given, is not.
    assert a.heartbeat(epoch=2).error_code == E.FENCED_MEMBER_EPOCH
    foreign = {(ctx.topic_id("foo"), p) for p in members[1].partitions()}
    a.owned |= foreign
    assert a.heartbeat(epoch=1).error_code == E.FENCED_MEMBER_EPOCH
    assert CgMember(ctx, "nobody").heartbeat(epoch=3).error_code == E.UNKNOWN_MEMBER_ID
    assert CgMember(ctx, "x", group="nope").heartbeat(epoch=1).error_code == E.GROUP_ID_NOT_FOUND


def test_a_fenced_member_rejoining_with_its_id_starts_over(ctx) -> None:  # type: ignore[no-untyped-def]
    """Kafka fences it until its session expires; Odradek lets it start over at once (it
    owns nothing when it joins), so a client that was fenced is back within a heartbeat."""
    a, b = CgMember(ctx, "a"), CgMember(ctx, "b")
    a.join()
    b.join()
    converge([a, b])
    mine = set(a.owned)
    r = a.join()  # epoch 0, same member id, owning nothing
    assert r.error_code == 0 and a.owned == mine
    converge([a, b])
    assert not a.owned & b.owned and len(a.owned | b.owned) == 6
    ctx.check_replay_equivalence()


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"member_id": ""}, E.INVALID_REQUEST),
        ({"group_id": ""}, E.INVALID_REQUEST),
        ({"rebalance_timeout_ms": -1}, E.INVALID_REQUEST),
        ({"owned": None}, E.INVALID_REQUEST),
        ({"subscribed_topic_names": None}, E.INVALID_REQUEST),
        ({"instance_id": ""}, E.INVALID_REQUEST),
        ({"member_epoch": -3}, E.INVALID_REQUEST),
        ({"server_assignor": "sticky"}, E.UNSUPPORTED_ASSIGNOR),
        ({"subscribed_topic_regex": "foo("}, E.INVALID_REGULAR_EXPRESSION),
        # RE2 syntax, as Kafka's RE2/J: no lookaround, no backreferences
        ({"subscribed_topic_regex": "(?<=a)b"}, E.INVALID_REGULAR_EXPRESSION),
        ({"subscribed_topic_regex": "(a)\\1"}, E.INVALID_REGULAR_EXPRESSION),
    ],
)
def test_invalid_joins_are_refused_and_change_nothing(ctx, change, error) -> None:  # type: ignore[no-untyped-def]
    fields = {
        "group_id": "g",
        "member_id": "a",
        "member_epoch": 0,
        "rebalance_timeout_ms": 30_000,
        "subscribed_topic_names": ("foo",),
        "owned": (),
        **change,
    }
    r = ctx.call(ConsumerGroupHeartbeatRequest(**fields))
    assert r.error_code == error and r.error_message
    assert "g" not in ctx.shard.groups and not ctx.state_log


def test_v0_member_id_is_generated_by_the_coordinator(ctx) -> None:  # type: ignore[no-untyped-def]
    r = ctx.call(
        ConsumerGroupHeartbeatRequest(
            "g",
            "",
            0,
            rebalance_timeout_ms=1000,
            subscribed_topic_names=("foo",),
            owned=(),
            member_id_required=False,
        )
    )
    assert r.error_code == 0 and r.member_id


def test_leave_frees_the_partitions_and_bumps_the_epoch(ctx) -> None:  # type: ignore[no-untyped-def]
    a, b = CgMember(ctx, "a"), CgMember(ctx, "b")
    a.join()
    b.join()
    converge([a, b])
    epoch = ctx.shard.groups["g"].group_epoch
    assert b.leave().member_epoch == -1
    assert ctx.shard.groups["g"].group_epoch == epoch + 1
    a.heartbeat()
    assert a.partitions() == set(range(6))
    assert ctx.state() is CS.STABLE
    assert a.leave().error_code == 0 and ctx.state() is CS.EMPTY
    ctx.check_replay_equivalence()


def test_session_timeout_fences_a_silent_member(ctx) -> None:  # type: ignore[no-untyped-def]
    a, b = CgMember(ctx, "a"), CgMember(ctx, "b")
    a.join()
    b.join()
    converge([a, b])
    for _ in range(5):
        ctx.sleep(1500)
        a.heartbeat()  # a keeps heartbeating, b is silent
    assert "b" not in ctx.shard.groups["g"].members
    a.heartbeat()
    assert a.partitions() == set(range(6))
    assert b.heartbeat().error_code == E.UNKNOWN_MEMBER_ID
    ctx.check_replay_equivalence()


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(ctx) -> None:  # type: ignore[no-untyped-def]
    a, b = CgMember(ctx, "a"), CgMember(ctx, "b")
    a.join()
    b.join()
    a.heartbeat()  # told to revoke
    assert ctx.shard.groups["g"].members["a"].state is MemberState.UNREVOKED_PARTITIONS
    stuck = a.owned | {(ctx.topic_id("foo"), p) for p in range(6)}
    for _ in range(40):  # heartbeats that still claim the revoked partitions
        ctx.sleep(1000)
        a.owned = set(stuck)
        a.heartbeat()
        b.heartbeat()
        if "a" not in ctx.shard.groups["g"].members:
            break
    assert "a" not in ctx.shard.groups["g"].members
    assert b.partitions() == set(range(6))


def test_static_member_leaves_for_a_while_and_gets_its_partitions_back(ctx) -> None:  # type: ignore[no-untyped-def]
    a = CgMember(ctx, "a1", instance_id="i-a")
    b = CgMember(ctx, "b1", instance_id="i-b")
    a.join()
    b.join()
    converge([a, b])
    kept = set(a.owned)
    epoch = ctx.shard.groups["g"].group_epoch
    assert a.leave(static_pause=True).member_epoch == -2
    # Nobody else gets its partitions while it is away.
    b.heartbeat()
    assert not b.owned & kept
    # A new incarnation (new member id, same instance): same partitions, no rebalance.
    a2 = CgMember(ctx, "a2", instance_id="i-a")
    r = a2.join()
    assert r.error_code == 0 and a2.owned == kept
    assert ctx.shard.groups["g"].group_epoch == epoch
    assert "a1" not in ctx.shard.groups["g"].members
    assert a.heartbeat(epoch=r.member_epoch).error_code == E.FENCED_INSTANCE_ID
    ctx.check_replay_equivalence()


def test_a_second_instance_with_a_live_instance_id_is_refused(ctx) -> None:  # type: ignore[no-untyped-def]
    CgMember(ctx, "a1", instance_id="i").join()
    r = CgMember(ctx, "a2", instance_id="i").join()
    assert r.error_code == E.UNRELEASED_INSTANCE_ID


def test_group_max_size(ctx) -> None:  # type: ignore[no-untyped-def]
    c = cg_ctx(consumer_group_max_size=1)
    c.set_topics(foo=1)
    CgMember(c, "a").join()
    assert CgMember(c, "b").join().error_code == E.GROUP_MAX_SIZE_REACHED


def test_new_partitions_and_topics_bump_the_epoch(ctx) -> None:  # type: ignore[no-untyped-def]
    a = CgMember(ctx, "a", topics=("foo", "baz"))
    a.join()
    epoch = ctx.shard.groups["g"].group_epoch
    assert a.partitions("foo") == set(range(6))
    ctx.set_topics(foo=8, bar=3, baz=2)  # foo grew, baz was created
    a.heartbeat()
    assert ctx.shard.groups["g"].group_epoch == epoch + 1
    assert a.partitions("foo") == set(range(8)) and a.partitions("baz") == {0, 1}
    ctx.set_topics(foo=8, bar=3)  # baz deleted
    a.heartbeat()
    assert ctx.shard.groups["g"].group_epoch == epoch + 2
    assert {t for t, _ in a.owned} == {ctx.topic_id("foo")}
    ctx.check_replay_equivalence()


def test_regex_subscription_is_resolved_on_the_coordinator(ctx) -> None:  # type: ignore[no-untyped-def]
    a = CgMember(ctx, "a", topics=None, regex="b.*")
    a.join()
    assert a.partitions("bar") == {0, 1, 2} and not a.partitions("foo")
    group = ctx.shard.groups["g"]
    assert group.resolved_regexes["b.*"].topics == ("bar",)
    ctx.set_topics(foo=6, bar=3, bazooka=1)
    a.heartbeat()
    assert a.partitions("bazooka") == {0}
    ctx.check_replay_equivalence()
    a.leave()
    assert not ctx.shard.groups["g"].resolved_regexes


def test_the_most_wanted_server_assignor_is_used(ctx) -> None:  # type: ignore[no-untyped-def]
    a = CgMember(ctx, "a", topics=("foo", "bar"), assignor="range")
    b = CgMember(ctx, "b", topics=("foo", "bar"), assignor="range")
    a.join()
    b.join()
    converge([a, b])
    # range: each member a contiguous half of each topic.
    halves = sorted((sorted(m.partitions("foo")), sorted(m.partitions("bar"))) for m in (a, b))
    assert halves == [([0, 1, 2], [0, 1]), ([3, 4, 5], [2])]
    assert ctx.call(ConsumerGroupDescribeRequest(("g",))).groups[0].assignor_name == "range"


def test_offset_commit_and_fetch_check_the_member_epoch(ctx) -> None:  # type: ignore[no-untyped-def]
    a, b = CgMember(ctx, "a"), CgMember(ctx, "b")
    a.join()
    mine = sorted(a.partitions())[0]

    def commit(epoch: int, member: str = "a", v9: bool = True, partition: int = mine) -> int:
        req = OffsetCommitRequest(
            "g",
            (OffsetCommitTopic("foo", (OffsetCommitPartition(partition, 5),)),),
            epoch,
            member,
            unknown_group_is_not_found=v9,
        )
        return int(ctx.call(req).topics[0].partitions[0].error_code)

    assert commit(a.epoch) == 0
    assert commit(a.epoch, v9=False) == E.UNSUPPORTED_VERSION
    assert commit(a.epoch, member="ghost") == E.UNKNOWN_MEMBER_ID
    assert commit(a.epoch + 5) == E.STALE_MEMBER_EPOCH
    b.join()
    converge([a, b])
    old = ctx.shard.groups["g"].members["a"].previous_member_epoch
    kept = sorted(a.partitions())[0]
    # The previous epoch is fine for a partition the member still owns...
    assert commit(old, partition=kept) == 0
    # ...not for one it gave away.
    gone = sorted(b.partitions())[0]
    assert commit(old, partition=gone) == E.STALE_MEMBER_EPOCH

    def fetch(member: str | None, epoch: int) -> int:
        r = ctx.call(
            OffsetFetchRequest("g", (OffsetFetchTopic("foo", (0,)),), False, member, epoch)
        )
        return int(r.error_code)

    assert fetch("a", a.epoch) == 0
    assert fetch("a", a.epoch - 1) == E.STALE_MEMBER_EPOCH
    assert fetch("ghost", 1) == E.UNKNOWN_MEMBER_ID
    assert fetch(None, -1) == 0  # the admin client


def test_list_describe_and_delete(ctx) -> None:  # type: ignore[no-untyped-def]
    a = CgMember(ctx, "a")
    a.join()
    listed = ctx.call(ListGroupsRequest()).groups
    assert [(g.group_id, g.group_type, g.protocol_type, g.state) for g in listed] == [
        ("g", "consumer", "consumer", "Stable")
    ]
    assert not ctx.call(ListGroupsRequest(types_filter=("classic",))).groups
    assert ctx.call(ListGroupsRequest(types_filter=("Consumer",), states_filter=("STABLE",))).groups
    # The classic DescribeGroups does not describe consumer groups (KIP-1043 v6: says so).
    d = ctx.call(DescribeGroupsRequest(("g",))).groups[0]
    assert (d.error_code, d.state) == (0, "Dead")
    d = ctx.call(DescribeGroupsRequest(("g",), not_found_error=True)).groups[0]
    assert d.error_code == E.GROUP_ID_NOT_FOUND and "not a classic group" in (d.error_message or "")
    described = ctx.call(ConsumerGroupDescribeRequest(("g", "nope"))).groups
    assert described[0].state == "Stable" and described[0].members[0].member_type == 1
    assert described[1].error_code == E.GROUP_ID_NOT_FOUND
    assert ctx.call(DeleteGroupsRequest(("g",))).results[0].error_code == E.NON_EMPTY_GROUP
    a.leave()
    assert ctx.call(DeleteGroupsRequest(("g",))).results[0].error_code == 0
    assert "g" not in ctx.shard.groups
    ctx.check_replay_equivalence()


def test_reload_keeps_members_and_timers(ctx) -> None:  # type: ignore[no-untyped-def]
    a, b = CgMember(ctx, "a"), CgMember(ctx, "b")
    a.join()
    b.join()
    a.heartbeat()  # a is revoking when the coordinator fails over
    ctx.reload()
    group = ctx.shard.groups["g"]
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    converge([a, b])
    assert sorted(len(m.owned) for m in (a, b)) == [3, 3]
    # Sessions restart on load: a member that never comes back is fenced.
    for _ in range(8):
        ctx.sleep(1000)
        a.heartbeat()
    assert list(ctx.shard.groups["g"].members) == ["a"]


def test_a_catastrophic_regex_resolves_in_linear_time() -> None:
    """`(a|a)*b` against a 40-character topic name: hours for a backtracking engine (and
    the broker's loop stopped meanwhile), microseconds for RE2."""
    import time
    import uuid

    from odradek.coordinator.metadata import TopicImage, TopicsImage
    from odradek.coordinator.target_assignment import resolve_regex

    name = "a" * 40
    image = TopicsImage.of(1, [TopicImage(n, uuid.uuid4(), 1) for n in (name, name + "b")])
    started = time.perf_counter()
    assert resolve_regex("(a|a)*b", image) == (name + "b",)
    assert time.perf_counter() - started < 5  # generous on a loaded machine: re takes hours
