"""Partition assignors: validity, balance, stickiness, the cooperative two-round protocol."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.client.assignors import (
    AbstractAssignor,
    Assignor,
    CooperativeStickyAssignor,
    RangeAssignor,
    RebalanceProtocol,
    RoundRobinAssignor,
    StickyAssignor,
    available_assignors,
    cooperative_violations,
    get_assignor,
    register_assignor,
    select_rebalance_protocol,
    unregister_assignor,
)
from odradek.protocol.consumer_protocol import Assignment, Subscription, TopicPartitionPair

ALL = ["range", "roundrobin", "sticky", "cooperative-sticky"]
BALANCED = ["roundrobin", "sticky", "cooperative-sticky"]
STICKY = ["sticky", "cooperative-sticky"]
Plan = dict[str, list[TopicPartitionPair]]
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------- helpers


def flat(out: Mapping[str, Assignment]) -> Plan:
    return {m: a.topic_partitions() for m, a in out.items()}


def check_valid(
    cluster: Mapping[str, int],
    subs: Mapping[str, Subscription],
    out: Mapping[str, list[TopicPartitionPair]],
    complete: bool = True,
) -> None:
    """Each partition at most once (exactly once if ``complete``), only to subscribers."""
    assert set(out) == set(subs)
    seen: Counter[TopicPartitionPair] = Counter()
    for m, parts in out.items():
        for topic, p in parts:
            assert topic in subs[m].topics, f"{m} got {topic}-{p} without subscribing"
            assert 0 <= p < cluster[topic]
            seen[(topic, p)] += 1
    assert all(c == 1 for c in seen.values()), "a partition was assigned twice"
    if complete:
        wanted = {
            (t, p)
            for s in subs.values()
            for t in s.topics
            if t in cluster
            for p in range(cluster[t])
        }
        assert set(seen) == wanted


def check_balanced(
    subs: Mapping[str, Subscription], out: Mapping[str, list[TopicPartitionPair]]
) -> None:
    """Java's balance check: nothing can move to a subscriber with 2+ fewer partitions."""
    for a, pa in out.items():
        for b, pb in out.items():
            if len(pa) >= len(pb) + 2:
                movable = [tp for tp in pa if tp[0] in subs[b].topics]
                assert not movable, f"{movable[:3]} could move from {a} to {b}"


def spread(out: Mapping[str, list[TopicPartitionPair]]) -> int:
    sizes = [len(v) for v in out.values()]
    return max(sizes) - min(sizes) if sizes else 0


def owner_map(out: Mapping[str, list[TopicPartitionPair]]) -> dict[TopicPartitionPair, str]:
    return {tp: m for m, parts in out.items() for tp in parts}


def coop_subs(
    topics: tuple[str, ...], owned: Mapping[str, list[TopicPartitionPair]], generation: int
) -> dict[str, Subscription]:
    return {
        m: Subscription.of(topics, owned=parts, generation_id=generation)
        for m, parts in owned.items()
    }


def sticky_subs(
    topics: tuple[str, ...], owned: Mapping[str, list[TopicPartitionPair]], generation: int
) -> dict[str, Subscription]:
    """Subscriptions as eager sticky members send them: previous assignment in user data."""
    subs = {}
    for m, parts in owned.items():
        member = StickyAssignor()
        member.on_assignment(Assignment.of(parts), generation)
        subs[m] = Subscription(topics, member.subscription_user_data(topics))
    return subs


def best_kept(owned_counts: list[int], total: int, members: int) -> int:
    """Most owned partitions a balanced assignment can leave in place (identical subs)."""
    quota, extra = divmod(total, members)
    over = sum(1 for c in owned_counts if c > quota)
    return sum(min(c, quota) for c in owned_counts) + min(extra, over)


# ---------------------------------------------------------------- strategies


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, int]:
    n = draw(st.integers(1, 5))
    return {f"t{i}": draw(st.integers(0, 14)) for i in range(n)}


@st.composite
def group(draw: st.DrawFn, identical: bool) -> tuple[dict[str, int], dict[str, Subscription]]:
    cluster = draw(clusters())
    topics = [*sorted(cluster), "unknown-topic"]
    ids = draw(st.lists(st.sampled_from([f"m{i}" for i in range(12)]), min_size=1, unique=True))
    if identical:
        chosen = draw(st.lists(st.sampled_from(topics), min_size=1, unique=True))
        subs = {m: Subscription(tuple(chosen)) for m in ids}
    else:
        subs = {
            m: Subscription(tuple(draw(st.lists(st.sampled_from(topics), unique=True))))
            for m in ids
        }
    return cluster, subs


@st.composite
def previous(
    draw: st.DrawFn, cluster: Mapping[str, int], members: list[str]
) -> dict[str, list[TopicPartitionPair]]:
    """An arbitrary (possibly unbalanced) disjoint previous ownership."""
    owned: dict[str, list[TopicPartitionPair]] = {m: [] for m in members}
    for t, n in cluster.items():
        for p in range(n):
            who = draw(st.integers(-1, len(members) - 1))
            if who >= 0:
                owned[members[who]].append((t, p))
    return owned


# ---------------------------------------------------------------- validity and balance


@pytest.mark.parametrize("name", ALL)
@SETTINGS
@given(data=group(identical=False))
def test_valid_for_random_subscriptions(
    name: str, data: tuple[dict[str, int], dict[str, Subscription]]
) -> None:
    cluster, subs = data
    out = get_assignor(name).assign(cluster, subs)
    check_valid(cluster, subs, flat(out))
    if name in STICKY:
        check_balanced(subs, flat(out))


@pytest.mark.parametrize("name", BALANCED)
@SETTINGS
@given(data=group(identical=True))
def test_balanced_within_one_for_identical_subscriptions(
    name: str, data: tuple[dict[str, int], dict[str, Subscription]]
) -> None:
    cluster, subs = data
    out = flat(get_assignor(name).assign(cluster, subs))
    check_valid(cluster, subs, out)
    assert spread(out) <= 1


@pytest.mark.parametrize("name", ALL)
@SETTINGS
@given(data=group(identical=False), seed=st.randoms(use_true_random=False))
def test_result_does_not_depend_on_member_order(
    name: str, data: tuple[dict[str, int], dict[str, Subscription]], seed: object
) -> None:
    cluster, subs = data
    items = list(subs.items())
    seed.shuffle(items)  # type: ignore[attr-defined]
    assert get_assignor(name).assign(cluster, dict(items)) == get_assignor(name).assign(
        cluster, subs
    )


# ---------------------------------------------------------------- Java's documented examples


def test_range_java_example() -> None:
    subs = {m: Subscription(("t0", "t1")) for m in ("C1", "C0")}
    out = flat(RangeAssignor().assign({"t0": 3, "t1": 3}, subs))
    assert out == {
        "C0": [("t0", 0), ("t0", 1), ("t1", 0), ("t1", 1)],
        "C1": [("t0", 2), ("t1", 2)],
    }


def test_range_first_members_get_the_extra_partitions() -> None:
    subs = {m: Subscription(("t",)) for m in ("c2", "c0", "c1")}
    out = flat(RangeAssignor().assign({"t": 4}, subs))
    assert out == {"c0": [("t", 0), ("t", 1)], "c1": [("t", 2)], "c2": [("t", 3)]}


def test_range_and_roundrobin_put_static_members_first() -> None:
    subs = {
        "a-dynamic": Subscription(("t",)),
        "z-static": Subscription(("t",), group_instance_id="instance-1"),
    }
    assert flat(RangeAssignor().assign({"t": 3}, subs))["z-static"] == [("t", 0), ("t", 1)]
    assert flat(RoundRobinAssignor().assign({"t": 3}, subs))["z-static"] == [("t", 0), ("t", 2)]


def test_roundrobin_java_examples() -> None:
    same = {m: Subscription(("t0", "t1")) for m in ("C0", "C1")}
    assert flat(RoundRobinAssignor().assign({"t0": 3, "t1": 3}, same)) == {
        "C0": [("t0", 0), ("t0", 2), ("t1", 1)],
        "C1": [("t0", 1), ("t1", 0), ("t1", 2)],
    }
    different = {
        "C0": Subscription(("t0",)),
        "C1": Subscription(("t0", "t1")),
        "C2": Subscription(("t0", "t1", "t2")),
    }
    assert flat(RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, different)) == {
        "C0": [("t0", 0)],
        "C1": [("t1", 0)],
        "C2": [("t1", 1), ("t2", 0), ("t2", 1), ("t2", 2)],
    }


def test_sticky_java_example_2() -> None:
    """KIP-54's second example: sticky balances where round-robin does not."""
    subs = {
        "C0": Subscription(("t0",)),
        "C1": Subscription(("t0", "t1")),
        "C2": Subscription(("t0", "t1", "t2")),
    }
    cluster = {"t0": 1, "t1": 2, "t2": 3}
    out = flat(StickyAssignor().assign(cluster, subs))
    assert sorted(len(v) for v in out.values()) == [1, 2, 3]
    assert out["C2"] == [("t2", 0), ("t2", 1), ("t2", 2)]
    # C0 leaves: sticky keeps all 5 remaining assignments.
    later = sticky_subs(("t0", "t1"), {"C1": out["C1"]}, 1)
    later["C2"] = sticky_subs(("t0", "t1", "t2"), {"C2": out["C2"]}, 1)["C2"]
    again = flat(StickyAssignor().assign(cluster, later))
    assert set(out["C1"]) <= set(again["C1"]) and set(out["C2"]) <= set(again["C2"])


# ---------------------------------------------------------------- stickiness


@pytest.mark.parametrize("name", STICKY)
@SETTINGS
@given(data=st.data())
def test_minimal_movement_from_any_previous_assignment(name: str, data: st.DataObject) -> None:
    """Identical subscriptions: the partitions kept are the most balance allows."""
    cluster, subs = data.draw(group(identical=True))
    topics = next(iter(subs.values())).topics
    owned = data.draw(previous(cluster, sorted(subs)))
    for m in owned:  # owned partitions of topics the group no longer reads are dropped
        owned[m] = [tp for tp in owned[m] if tp[0] in topics]
    make = coop_subs if name == "cooperative-sticky" else sticky_subs
    assignor = get_assignor(name)
    result = (
        assignor.plan(cluster, make(topics, owned, 3)).target  # type: ignore[attr-defined]
        if name == "cooperative-sticky"
        else flat(assignor.assign(cluster, make(topics, owned, 3)))
    )
    check_valid(cluster, subs, result)
    assert spread(result) <= 1
    total = sum(cluster.get(t, 0) for t in topics)
    kept = sum(len(set(owned[m]) & set(result[m])) for m in owned)
    assert kept == best_kept([len(v) for v in owned.values()], total, len(owned))


@pytest.mark.parametrize("name", STICKY)
@SETTINGS
@given(
    data=group(identical=True),
    joining=st.integers(0, 3),
    leaving=st.integers(0, 3),
)
def test_membership_change_moves_only_what_balance_requires(
    name: str,
    data: tuple[dict[str, int], dict[str, Subscription]],
    joining: int,
    leaving: int,
) -> None:
    cluster, subs = data
    topics = next(iter(subs.values())).topics
    first = flat(get_assignor(name).assign(cluster, subs))
    members = sorted(first)
    gone = members[:leaving] if leaving < len(members) else members[1:]
    stay = {m: first[m] for m in members if m not in gone}
    stay.update({f"new{i}": [] for i in range(joining)})
    make = coop_subs if name == "cooperative-sticky" else sticky_subs
    assignor = get_assignor(name)
    if name == "cooperative-sticky":
        result = assignor.plan(cluster, make(topics, stay, 1)).target  # type: ignore[attr-defined]
    else:
        result = flat(assignor.assign(cluster, make(topics, stay, 1)))
    assert spread(result) <= 1
    total = sum(cluster.get(t, 0) for t in topics)
    kept = sum(len(set(stay[m]) & set(result[m])) for m in stay)
    assert kept == best_kept([len(v) for v in stay.values()], total, len(stay))
    moved = sum(len(v) for v in stay.values()) - kept
    if not joining:
        assert moved == 0  # members only left: survivors keep everything
    if not joining and not gone:
        assert result == {m: sorted(v) for m, v in first.items()}


@pytest.mark.parametrize("name", STICKY)
@SETTINGS
@given(data=group(identical=False))
def test_stable_when_nothing_changes(
    name: str, data: tuple[dict[str, int], dict[str, Subscription]]
) -> None:
    cluster, subs = data
    first = flat(get_assignor(name).assign(cluster, subs))
    if name == "cooperative-sticky":
        again = {
            m: Subscription(
                s.topics, owned_partitions=Assignment.of(first[m]).partitions, generation_id=1
            )
            for m, s in subs.items()
        }
    else:
        again = {}
        for m, s in subs.items():
            a = StickyAssignor()
            a.on_assignment(Assignment.of(first[m]), 1)
            again[m] = Subscription(s.topics, a.subscription_user_data(s.topics))
    second = flat(get_assignor(name).assign(cluster, again))
    assert {m: sorted(v) for m, v in second.items()} == {m: sorted(v) for m, v in first.items()}


# ---------------------------------------------------------------- cooperative two rounds


def _two_rounds(
    cluster: dict[str, int],
    subs: dict[str, Subscription],
    owned: dict[str, list[TopicPartitionPair]],
) -> tuple[dict[str, Subscription], Plan, Plan]:
    coop = CooperativeStickyAssignor()
    round1_subs = {
        m: Subscription.of(s.topics, owned=owned[m], generation_id=4) for m, s in subs.items()
    }
    plan = coop.plan(cluster, round1_subs)
    round1 = flat(coop.assign(cluster, round1_subs))
    assert round1 == {m: sorted(v) for m, v in plan.round_one.items()}
    # Round 1 never hands a member a partition another member still owns.
    assert cooperative_violations(round1_subs, coop.assign(cluster, round1_subs)) == {}
    for tp, new_owner in plan.transferring.items():
        assert tp in plan.target[new_owner] and tp not in round1[new_owner]
    check_valid(cluster, subs, round1, complete=False)
    # Round 2: owners revoked what they lost and report what round 1 gave them.
    round2_subs = {
        m: Subscription.of(s.topics, owned=round1[m], generation_id=5) for m, s in subs.items()
    }
    round2 = flat(coop.assign(cluster, round2_subs))
    assert cooperative_violations(round2_subs, coop.assign(cluster, round2_subs)) == {}
    return round2_subs, round1, round2


@SETTINGS
@given(data=st.data())
def test_cooperative_two_rounds_identical_subscriptions(data: st.DataObject) -> None:
    cluster, subs = data.draw(group(identical=True))
    owned = data.draw(previous(cluster, sorted(subs)))
    _, round1, round2 = _two_rounds(cluster, subs, owned)
    check_valid(cluster, subs, round2)  # complete after the second round
    assert spread(round2) <= 1
    # Round 2 takes nothing away: every member keeps what round 1 gave it.
    assert all(set(round1[m]) <= set(round2[m]) for m in subs)


@SETTINGS
@given(data=st.data())
def test_cooperative_rounds_converge_for_any_subscriptions(data: st.DataObject) -> None:
    cluster, subs = data.draw(group(identical=False))
    owned = data.draw(previous(cluster, sorted(subs)))
    round2_subs, _, round2 = _two_rounds(cluster, subs, owned)
    check_valid(cluster, subs, round2, complete=False)
    # Usually complete after round 2; with unequal subscriptions the greedy deal of the
    # revoked partitions can occasionally force one more hand-over, hence one more round.
    coop = CooperativeStickyAssignor()
    current, current_subs = round2, round2_subs
    for generation in (6, 7):
        if not coop.plan(cluster, current_subs).transferring:
            break
        current_subs = {
            m: Subscription.of(s.topics, owned=current[m], generation_id=generation)
            for m, s in subs.items()
        }
        current = flat(coop.assign(cluster, current_subs))
    check_valid(cluster, subs, current)
    check_balanced(subs, current)


def test_cooperative_member_leaving_hands_over_at_once_joining_takes_two_rounds() -> None:
    coop = CooperativeStickyAssignor()
    cluster = {"t": 6}
    start = {"a": [("t", 0), ("t", 1), ("t", 2)], "b": [("t", 3), ("t", 4), ("t", 5)]}
    # c joins: a and b each give up one partition, which c gets only in round 2.
    round1 = coop.plan(cluster, coop_subs(("t",), {**start, "c": []}, 2))
    assert round1.round_one["c"] == []
    assert sorted(round1.transferring) == [("t", 2), ("t", 5)]
    round2 = flat(coop.assign(cluster, coop_subs(("t",), round1.round_one, 3)))
    assert round2 == {
        "a": [("t", 0), ("t", 1)],
        "b": [("t", 3), ("t", 4)],
        "c": [("t", 2), ("t", 5)],
    }
    # b leaves: its partitions are unowned, so they are handed out in one round.
    after = coop.plan(cluster, coop_subs(("t",), {"a": round2["a"], "c": round2["c"]}, 4))
    assert after.transferring == {}
    assert sorted(after.round_one["a"] + after.round_one["c"]) == [("t", p) for p in range(6)]


# ---------------------------------------------------------------- conflicting claims


def test_conflicting_claims_higher_generation_wins() -> None:
    cluster = {"t": 4}
    subs = {
        "old": Subscription.of(("t",), owned=[("t", 0), ("t", 1)], generation_id=3),
        "new": Subscription.of(("t",), owned=[("t", 0), ("t", 2)], generation_id=5),
    }
    plan = CooperativeStickyAssignor().plan(cluster, subs)
    assert ("t", 0) in plan.target["new"] and ("t", 2) in plan.target["new"]
    assert plan.target["old"] == [("t", 1), ("t", 3)]
    # "new" keeps t-0 (it owned it); t-3 is free; nothing has to wait.
    assert plan.transferring == {}
    # The eager sticky assignor reads the same claims from user data.
    eager = {}
    for m, parts, gen in (("old", [("t", 0), ("t", 1)], 3), ("new", [("t", 0), ("t", 2)], 5)):
        a = StickyAssignor()
        a.on_assignment(Assignment.of(parts), gen)
        eager[m] = Subscription(("t",), a.subscription_user_data(["t"]))
    out = flat(StickyAssignor().assign(cluster, eager))
    assert out == {"new": [("t", 0), ("t", 2)], "old": [("t", 1), ("t", 3)]}


def test_conflicting_claims_same_generation_are_invalidated() -> None:
    cluster = {"t": 2}
    subs = {
        "a": Subscription.of(("t",), owned=[("t", 0)], generation_id=5),
        "b": Subscription.of(("t",), owned=[("t", 0)], generation_id=5),
    }
    plan = CooperativeStickyAssignor().plan(cluster, subs)
    owner = owner_map(plan.target)
    # Both must revoke t-0 before anyone gets it; t-1 is free and handed out now.
    assert plan.transferring == {("t", 0): owner[("t", 0)]}
    assert sorted(plan.round_one["a"] + plan.round_one["b"]) == [("t", 1)]


@SETTINGS
@given(
    gens=st.lists(st.integers(-1, 4), min_size=2, max_size=5),
)
def test_random_conflicts_go_to_the_unique_highest_generation(gens: list[int]) -> None:
    cluster = {"t": 1, "u": len(gens) - 1}
    subs = {
        f"m{i}": Subscription.of(("t", "u"), owned=[("t", 0)], generation_id=g)
        for i, g in enumerate(gens)
    }
    plan = CooperativeStickyAssignor().plan(cluster, subs)
    top = max(gens)
    winners = [f"m{i}" for i, g in enumerate(gens) if g == top]
    owner = owner_map(plan.target)[("t", 0)]
    if len(winners) == 1:
        assert owner == winners[0] and ("t", 0) in plan.round_one[owner]
    else:
        assert ("t", 0) in plan.transferring  # nobody gets it until all claimants revoke


def test_cooperative_reads_generation_from_user_data_for_old_subscriptions() -> None:
    subs = {
        "a": Subscription(("t",), b"\x00\x00\x00\x07", (("t", (0,)),), -1, None, 1),
        "b": Subscription(("t",), b"\x00\x00\x00\x02", (("t", (0,)),), -1, None, 1),
    }
    plan = CooperativeStickyAssignor().plan({"t": 2}, subs)
    assert ("t", 0) in plan.target["a"]


# ---------------------------------------------------------------- user data and state


def test_sticky_user_data_follows_assignments() -> None:
    a = StickyAssignor()
    assert a.subscription_user_data(["t"]) is None
    a.on_assignment(Assignment.of([("t", 1)]), 8)
    sub = Subscription(("t",), a.subscription_user_data(["t"]))
    assert StickyAssignor.member_data(sub).partitions == [("t", 1)]
    assert StickyAssignor.member_data(sub).generation == 8
    c = CooperativeStickyAssignor()
    assert c.subscription_user_data(["t"]) == b"\xff\xff\xff\xff"
    c.on_assignment(Assignment.of([]), 3)
    assert c.subscription_user_data(["t"]) == b"\x00\x00\x00\x03"


def test_empty_inputs() -> None:
    for name in ALL:
        assert get_assignor(name).assign({"t": 3}, {}) == {}
        out = get_assignor(name).assign({}, {"m": Subscription(("t",))})
        assert out == {"m": Assignment(())}


# ---------------------------------------------------------------- registry and protocol


def test_registry_names_and_java_class_names() -> None:
    assert set(ALL) <= set(available_assignors())
    assert isinstance(
        get_assignor("org.apache.kafka.clients.consumer.RangeAssignor"), RangeAssignor
    )
    a, b = get_assignor("sticky"), get_assignor("sticky")
    assert a is not b  # fresh state per consumer
    assert get_assignor(a) is a
    with pytest.raises(KeyError):
        get_assignor("no-such")
    for name in ALL:
        assert isinstance(get_assignor(name), Assignor)
        assert get_assignor(name).name == name


def test_custom_assignor_plugs_in() -> None:
    @register_assignor
    class EverythingToFirst(AbstractAssignor):
        name = "everything-to-first"

        def assign_partitions(
            self, cluster: Mapping[str, int], subscriptions: Mapping[str, Subscription]
        ) -> dict[str, list[TopicPartitionPair]]:
            first = min(subscriptions)
            return {
                first: [
                    (t, p) for t in subscriptions[first].topics for p in range(cluster.get(t, 0))
                ]
            }

    try:
        with pytest.raises(ValueError):
            register_assignor(RangeAssignor, "everything-to-first")
        out = get_assignor("everything-to-first").assign(
            {"t": 2}, {"x": Subscription(("t",)), "y": Subscription(("t",))}
        )
        assert flat(out) == {"x": [("t", 0), ("t", 1)], "y": []}
    finally:
        unregister_assignor("everything-to-first")


def test_select_rebalance_protocol() -> None:
    coop = get_assignor("cooperative-sticky")
    assert select_rebalance_protocol([coop]) is RebalanceProtocol.COOPERATIVE
    assert select_rebalance_protocol([coop, get_assignor("range")]) is RebalanceProtocol.EAGER

    class CoopOnly(AbstractAssignor):
        name = "coop-only"
        supported_protocols = (RebalanceProtocol.COOPERATIVE,)

        def assign_partitions(
            self, cluster: Mapping[str, int], subscriptions: Mapping[str, Subscription]
        ) -> Plan:
            return {member: [] for member in subscriptions}

    with pytest.raises(ValueError):
        select_rebalance_protocol([CoopOnly(), get_assignor("range")])
    with pytest.raises(ValueError):
        select_rebalance_protocol([])


# ---------------------------------------------------------------- mixed groups (kafka-python)


def test_odradek_leader_keeps_kafka_python_sticky_members_assignments() -> None:
    from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor as KpCoop
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KpAssignment

    cluster = {"t": 6}
    previous = {"a": [("t", 0), ("t", 3), ("t", 4)], "b": [("t", 1), ("t", 2), ("t", 5)]}
    eager: dict[str, Subscription] = {}
    coop: dict[str, Subscription] = {}
    for m, parts in previous.items():
        kp_assignment = KpAssignment(
            version=0, assigned_partitions=[("t", [p for _, p in parts])], user_data=b""
        )
        kp_sticky = StickyPartitionAssignor()
        kp_sticky.on_assignment(kp_assignment, 3)
        eager[m] = Subscription.decode(kp_sticky.metadata({"t"}).encode(version=0))
        kp_coop = KpCoop()
        kp_coop.on_assignment(kp_assignment, 3)
        coop[m] = Subscription.decode(kp_coop.metadata({"t"}).encode())
    eager["c"] = coop["c"] = Subscription(("t",))

    out = flat(StickyAssignor().assign(cluster, eager))
    assert all(len(v) == 2 for v in out.values())
    assert all(set(out[m]) <= set(previous[m]) for m in previous)

    plan = CooperativeStickyAssignor().plan(cluster, coop)
    assert plan.round_one["c"] == [] and len(plan.transferring) == 2
    # kafka-python members read the assignment Odradek's leader sends.
    for m, a in CooperativeStickyAssignor().assign(cluster, coop).items():
        decoded = KpAssignment.decode(a.encode())
        assert sorted((tp.topic, tp.partition) for tp in decoded.partitions()) == sorted(
            plan.round_one[m]
        )
