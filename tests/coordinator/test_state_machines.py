"""Each state machine's table of legal transitions is what the coordinators do.

For every table (``transitions.py``): every pair of states goes through the
machine's one transition function, which accepts the legal ones and raises
``IllegalTransition`` on the others, changing nothing. Then the public API makes
every legal transition that Odradek makes, seen by watching the table's check;
the few legal ones it never makes are named here (the table still accepts them).
docs/coordinator.md prints each table, and must print it as the code has it.

The transaction coordinator's table is walked in tests/transaction.
"""

from __future__ import annotations

import itertools
import random
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from cg_ctx import CgMember, cg_ctx
from coord_ctx import ctx0, join_response, stable

from odradek.coordinator.consumer_group import (
    CONSUMER_GROUP_TRANSITIONS,
    MEMBER_TRANSITIONS,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    MemberState,
)
from odradek.coordinator.consumer_records import CURRENT_MEMBER_ASSIGNMENT, consumer_record
from odradek.coordinator.group import ClassicGroup
from odradek.coordinator.state import CLASSIC_GROUP_TRANSITIONS, GroupState
from odradek.coordinator.transitions import IllegalTransition, TransitionTable
from odradek.coordinator.types import DeleteGroupsRequest
from odradek.transaction.state import TXN_TRANSITIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "coordinator.md"
S = GroupState
CS = ConsumerGroupState
M = MemberState
TABLES: list[TransitionTable[Any]] = [
    CLASSIC_GROUP_TRANSITIONS,
    CONSUMER_GROUP_TRANSITIONS,
    MEMBER_TRANSITIONS,
    TXN_TRANSITIONS,
]


def every_pair(table: TransitionTable[Any]) -> list[tuple[Any, Any]]:
    return list(itertools.product(table.states, repeat=2))


def pair_id(pair: object) -> str:
    return str(pair)


def watch(table: TransitionTable[Any], monkeypatch: pytest.MonkeyPatch) -> set[tuple[Any, Any]]:
    """The transitions the code checks from now on (each one it makes is checked)."""
    seen: set[tuple[Any, Any]] = set()
    check = table.check

    def spy(src: Any, dst: Any) -> None:
        check(src, dst)
        seen.add((src, dst))

    monkeypatch.setattr(table, "check", spy)
    return seen


def labelled(table: TransitionTable[Any], pairs: set[tuple[Any, Any]]) -> list[str]:
    return sorted(f"{table.label(a)} -> {table.label(b)}" for a, b in pairs)


# --- the tables themselves ------------------------------------------------------------


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.machine)
def test_every_state_has_a_row_and_the_check_is_the_table(table: TransitionTable[Any]) -> None:
    assert set(table.valid_previous) == set(type(table.states[0]))
    for src, dst in every_pair(table):
        if table.allows(src, dst):
            table.check(src, dst)
            assert dst in table.targets(src)
        else:
            with pytest.raises(IllegalTransition, match=re.escape(table.label(dst))):
                table.check(src, dst)
            assert dst not in table.targets(src)
    for state in table.states:
        if state in table.initial:
            table.check_initial(state)
        else:
            with pytest.raises(IllegalTransition):
                table.check_initial(state)


# --- the classic group ------------------------------------------------------------------


@pytest.mark.parametrize("pair", every_pair(CLASSIC_GROUP_TRANSITIONS), ids=pair_id)
def test_classic_group_transition_to_follows_the_table(pair: tuple[GroupState, GroupState]) -> None:
    src, dst = pair
    group = ClassicGroup("g", state=src, state_timestamp_ms=5)
    if CLASSIC_GROUP_TRANSITIONS.allows(src, dst):
        assert group.transition_to(dst, 10) is src
        assert (group.state, group.previous_state, group.state_timestamp_ms) == (dst, src, 10)
    else:
        with pytest.raises(IllegalTransition, match=f"{src.value} -> {dst.value}"):
            group.transition_to(dst, 10)
        assert (group.state, group.previous_state, group.state_timestamp_ms) == (src, None, 5)


def test_a_rebuilt_classic_group_starts_stable_or_empty_only() -> None:
    for state in S:
        group = ClassicGroup("g")
        if state in (S.EMPTY, S.STABLE):
            group.start_in(state)
            assert group.state is state and group.previous_state is None
        else:
            with pytest.raises(IllegalTransition):
                group.start_in(state)
            assert group.state is S.EMPTY


# Legal in Kafka's table, never made: a Dead group is removed when its tombstone is
# replayed, before anything could unload it again.
CLASSIC_UNREACHED = {(S.DEAD, S.DEAD)}


def test_every_classic_group_transition_is_made_through_the_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = watch(CLASSIC_GROUP_TRANSITIONS, monkeypatch)
    ctx = ctx0()
    # Empty -> PreparingRebalance -> CompletingRebalance -> Stable: two members form it.
    (a, b), _ = stable(ctx, 2)
    # Stable -> PreparingRebalance -> CompletingRebalance: both rejoin.
    ta, tb = ctx.join("g", a), ctx.join("g", b)
    join_response(ctx, ta), join_response(ctx, tb)
    assert ctx.state() is S.COMPLETING_REBALANCE
    # CompletingRebalance -> PreparingRebalance: b leaves before the leader's assignment.
    ctx.leave("g", (b, None))
    assert ctx.state() is S.PREPARING_REBALANCE
    # PreparingRebalance -> Empty: a leaves too, and the join phase ends with nobody.
    ctx.leave("g", (a, None))
    assert ctx.state() is S.EMPTY
    # Empty -> Dead: deleted.
    assert ctx.call(DeleteGroupsRequest(("g",))).results[0].error_code == 0
    # Unloading: a group in any live state goes Dead.
    stable(ctx, 1, group="stable")
    (p0, _), _ = stable(ctx, 2, group="preparing")
    ctx.join("preparing", p0)
    (c0, c1), _ = stable(ctx, 2, group="completing")
    ctx.join("completing", c0), ctx.join("completing", c1)
    ctx.join_new("empty")
    ctx.leave("empty", *((m, None) for m in ctx.shard.groups["empty"].members))
    states = {g: ctx.state(g) for g in ("stable", "preparing", "completing", "empty")}
    assert states == {
        "stable": S.STABLE,
        "preparing": S.PREPARING_REBALANCE,
        "completing": S.COMPLETING_REBALANCE,
        "empty": S.EMPTY,
    }
    ctx.reload()
    legal = set(CLASSIC_GROUP_TRANSITIONS.pairs())
    assert seen <= legal
    assert labelled(CLASSIC_GROUP_TRANSITIONS, legal - seen) == labelled(
        CLASSIC_GROUP_TRANSITIONS, CLASSIC_UNREACHED
    )


# --- the consumer group and its members ------------------------------------------------


@pytest.mark.parametrize("pair", every_pair(MEMBER_TRANSITIONS), ids=pair_id)
def test_a_member_moves_only_as_the_table_allows(pair: tuple[MemberState, MemberState]) -> None:
    src, dst = pair
    tid = uuid.UUID(int=1)
    member = ConsumerGroupMember("m", member_epoch=1, state=src, assigned={tid: frozenset({0})})
    for epoch in (1, 2):  # a move at the member's epoch (revoking), or to a new one
        assigned = {tid: frozenset({0, epoch})}
        if MEMBER_TRANSITIONS.allows(src, dst):
            moved = member.move_to(epoch, dst, assigned, {})
            assert (moved.state, moved.member_epoch, moved.assigned) == (dst, epoch, assigned)
            assert moved.previous_member_epoch == (1 if epoch == 2 else 0)
        else:
            with pytest.raises(IllegalTransition, match=f"{src.label} -> {dst.label}"):
                member.move_to(epoch, dst, assigned, {})
    assert member.move_to(1, src, member.assigned, {}) is member  # not a move


@pytest.mark.parametrize("pair", every_pair(CONSUMER_GROUP_TRANSITIONS), ids=pair_id)
def test_consumer_group_state_changes_are_checked(
    pair: tuple[ConsumerGroupState, ConsumerGroupState],
) -> None:
    src, dst = pair
    if CONSUMER_GROUP_TRANSITIONS.allows(src, dst):
        CONSUMER_GROUP_TRANSITIONS.check(src, dst)
    else:
        with pytest.raises(IllegalTransition, match=f"{src.value} -> {dst.value}"):
            CONSUMER_GROUP_TRANSITIONS.check(src, dst)


# Legal, never made: a join computes its new target assignment in the same call, so a
# group that had no members goes straight to Stable (its first member takes every
# partition, owned by nobody).
CONSUMER_GROUP_UNREACHED = {(CS.EMPTY, CS.ASSIGNING), (CS.EMPTY, CS.RECONCILING)}
MEMBER_UNREACHED: set[tuple[MemberState, MemberState]] = set()


def random_walk(seed: int, steps: int) -> None:
    """Members join, heartbeat (acknowledging what they were told), leave, go silent
    (fenced when their session expires) and rejoin from scratch."""
    rng = random.Random(seed)
    ctx = cg_ctx()
    ctx.set_topics(foo=6, bar=3)
    members: list[CgMember] = []
    joined = 0
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.25 or not members:
            joined += 1
            m = CgMember(ctx, f"m{joined}", topics=rng.choice([("foo",), ("foo", "bar")]))
            members.append(m)
            m.join()
        elif roll < 0.7:
            rng.choice(members).heartbeat()
        elif roll < 0.85:
            members.pop(rng.randrange(len(members))).leave()
        elif roll < 0.95:
            members.pop(rng.randrange(len(members)))  # goes silent
            ctx.sleep(3_000)
            for m in members:
                m.heartbeat()
            ctx.sleep(3_500)  # the silent one's 6 s session expires
        else:
            rng.choice(members).join()  # restarts from scratch
        group = ctx.shard.groups.get("g")
        alive = group.members if isinstance(group, ConsumerGroup) else {}
        members = [m for m in members if m.member_id in alive]
    ctx.check_replay_equivalence()


def forged_unknown(ctx: Any, member: CgMember) -> None:
    """A newer coordinator's record puts ``member`` in a state this one does not know."""
    current = ctx.shard.groups["g"].members[member.member_id]
    value = current.assignment_value()
    record = consumer_record(
        CURRENT_MEMBER_ASSIGNMENT,
        "g",
        type(value)(value.member_epoch, value.previous_member_epoch, 99, value.assigned, {}),
        member.member_id,
    )
    ctx.log.append(record)
    ctx.shard.replay(record)
    assert ctx.shard.groups["g"].members[member.member_id].state is M.UNKNOWN


def test_every_consumer_group_and_member_transition_is_made_through_the_api(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    groups = watch(CONSUMER_GROUP_TRANSITIONS, monkeypatch)
    moves = watch(MEMBER_TRANSITIONS, monkeypatch)
    for seed in range(4):
        random_walk(seed, 150)
    # A member a newer coordinator left in an unknown state starts over, owning nothing:
    # b still waits for a's partitions (Unreleased), then a gets back what it keeps.
    ctx = cg_ctx()
    ctx.set_topics(foo=6)
    a, b = CgMember(ctx, "a"), CgMember(ctx, "b")
    a.join()
    b.join()  # b waits for a's partitions
    forged_unknown(ctx, b)
    b.owned = set()
    b.heartbeat()
    assert ctx.shard.groups["g"].members["b"].state is M.UNRELEASED_PARTITIONS
    a.heartbeat()  # told to revoke
    forged_unknown(ctx, a)
    a.owned = set()
    a.heartbeat()
    assert ctx.shard.groups["g"].members["a"].state is M.STABLE
    # What a walk rarely makes: the last member leaves while it still owes a revocation
    # (Reconciling -> Empty), and the empty group is deleted (Empty -> Dead).
    ctx = cg_ctx()
    ctx.set_topics(foo=6)
    a, b = CgMember(ctx, "a"), CgMember(ctx, "b")
    a.join()
    b.join()
    everything = set(a.owned)
    a.heartbeat()  # told to revoke half...
    a.owned = everything  # ...which it has not done yet
    b.leave()
    a.heartbeat()  # its new target is every partition, but it still owes that revocation
    assert ctx.state() is CS.RECONCILING
    a.leave()
    assert ctx.state() is CS.EMPTY
    assert ctx.call(DeleteGroupsRequest(("g",))).results[0].error_code == 0
    for table, seen, unreached in (
        (CONSUMER_GROUP_TRANSITIONS, groups, CONSUMER_GROUP_UNREACHED),
        (MEMBER_TRANSITIONS, moves, MEMBER_UNREACHED),
    ):
        legal = set(table.pairs())
        assert seen <= legal
        assert labelled(table, legal - seen) == labelled(table, unreached)


# --- docs/coordinator.md prints every table ----------------------------------------------


def matrix(table: TransitionTable[Any]) -> list[str]:
    """The table as the page prints it: a row per state, a column per next state."""
    labels = [table.label(s) for s in table.states]
    lines = [
        f"<!-- transitions: {table.machine} -->",
        "| From \\ to | " + " | ".join(labels) + " |",
        "|---" * (len(labels) + 1) + "|",
    ]
    for src in table.states:
        cells = ["✓" if table.allows(src, dst) else "" for dst in table.states]
        lines.append(f"| **{table.label(src)}** | " + " | ".join(cells) + " |")
    return lines


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.machine)
def test_the_page_prints_the_table_the_code_has(table: TransitionTable[Any]) -> None:
    lines = DOC.read_text().splitlines()
    expected = matrix(table)
    assert expected[0] in lines, f"{DOC.name} has no table for the {table.machine}"
    start = lines.index(expected[0])
    printed = lines[start : start + len(expected)]
    assert printed == expected, "\n".join(["docs/coordinator.md should say:", *expected])


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.machine)
def test_the_page_names_the_initial_states(table: TransitionTable[Any]) -> None:
    lines = DOC.read_text().splitlines()
    start = lines.index(f"<!-- transitions: {table.machine} -->")
    after = " ".join(lines[start : start + len(table.states) + 5])
    initial = ", ".join(sorted(table.label(s) for s in table.initial))
    assert f"Starts in: {initial}." in after
