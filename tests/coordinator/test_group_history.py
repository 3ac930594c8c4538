"""A group's events are records of its own ``__consumer_offsets`` partition (history.py).

Through the pure core on a manual clock: events become records after their call's own
records, numbered per group; the ring of slots wraps, and compaction (newest record per
key) keeps exactly the last HISTORY_SLOTS events in order; old events are tombstoned by
the periodic sweep, a deleted group's history with it; replay rebuilds the sequences;
events never make a call too large. And, as a property, the slot arithmetic of writer,
replay and reader agree with a plain model whatever the order of writes, expiries and
deletions, before and after compaction.
"""

from __future__ import annotations

import json
from typing import Any

from coord_ctx import Ctx, commit, ctx0, join_response, stable
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.coordinator import CoordinatorConfig, GroupState
from odradek.coordinator.events import make_event
from odradek.coordinator.history import (
    EVENT_LIST_LIMIT,
    EVENT_VALUE_MAX_BYTES,
    HISTORY_SLOTS,
    GroupHistories,
    GroupHistoryReader,
    StoredEvent,
    decode_event_key,
    encode_fields,
    event_record,
    event_tombstone,
    is_event_key,
    iter_group_events,
    member_count,
)
from odradek.coordinator.types import (
    CoordinatorRecord,
    DeleteGroupsRequest,
    JoinGroupRequest,
    LeaveGroupMember,
    LeaveGroupRequest,
)

S = GroupState
DAY_MS = 24 * 3_600_000


def history(log: list[CoordinatorRecord], group: str = "g") -> list[StoredEvent]:
    reader = GroupHistoryReader(group)
    for record in log:
        reader.add(record.key, record.value)
    return reader.events()


def compacted(log: list[CoordinatorRecord]) -> list[CoordinatorRecord]:
    """What log compaction leaves: the newest record of each key, in log order (its
    tombstones too: they go only after delete.retention.ms)."""
    newest = {record.key: index for index, record in enumerate(log)}
    return [record for index, record in enumerate(log) if newest[record.key] == index]


def plain(fields: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(fields, default=str))  # type: ignore[no-any-return]


def events_of(ctx: Ctx, group: str = "g") -> list[tuple[str, int, dict[str, Any]]]:
    return [(e.kind, e.at_ms, plain(e.fields)) for e in ctx.events if e.group_id == group]


def cycle(ctx: Ctx, group: str = "g") -> None:
    """One member joins (a rebalance) and leaves (another): about eight events."""
    (member,), _ = stable(ctx, 1, group)
    ctx.leave(group, (member, None))


def test_events_are_records_after_the_calls_own_records() -> None:
    ctx = ctx0()
    (_, b), _ = stable(ctx, 2)
    ctx.leave("g", (b, None))
    stored = history(ctx.log)
    assert [(s.kind, s.at_ms, s.fields) for s in stored] == events_of(ctx)
    assert [s.sequence for s in stored] == list(range(len(stored)))
    kinds = {s.kind for s in stored}
    assert {"state_transition", "rebalance_completed", "member_removed"} <= kinds
    # Within each call the group's own records come first, then its events.
    keys = [is_event_key(r.key) for r in ctx.log]
    group_record = max(i for i, r in enumerate(ctx.log) if not keys[i])
    assert keys[group_record + 1 :] and all(keys[group_record + 1 :])
    # Any reader of the partition can pick them out (the Burrow-style tail).
    assert [e.kind for e in iter_group_events((r.key, r.value) for r in ctx.log)] == [
        s.kind for s in stored
    ]


def test_the_ring_keeps_the_last_slots_in_order_and_compaction_agrees() -> None:
    ctx = ctx0()
    while len(events_of(ctx)) <= HISTORY_SLOTS + 40:
        cycle(ctx)
    written = events_of(ctx)
    total = len(written)
    for log in (ctx.log, compacted(ctx.log)):
        stored = history(log)
        assert [s.sequence for s in stored] == list(range(total - HISTORY_SLOTS, total))
        assert [(s.kind, s.at_ms, s.fields) for s in stored] == written[-HISTORY_SLOTS:]
    slots = {decode_event_key(r.key) for r in ctx.history_log}
    assert slots == {("g", slot) for slot in range(HISTORY_SLOTS)}
    assert len([r for r in compacted(ctx.log) if is_event_key(r.key)]) == HISTORY_SLOTS
    # A coordinator loading the compacted partition numbers the next event on.
    ctx.log = compacted(ctx.log)
    ctx.reload()
    ctx.check_replay_equivalence()
    assert ctx.shard.histories.next_sequence("g") == total + 1  # + its group_loaded
    cycle(ctx)
    assert history(ctx.log)[-1].sequence == len(events_of(ctx)) - 1


def test_the_sweep_tombstones_events_older_than_the_retention() -> None:
    ctx = Ctx(
        CoordinatorConfig(
            group_initial_rebalance_delay_ms=0,
            group_history_retention_ms=60_000,
            offsets_retention_check_interval_ms=10_000,
        )
    )
    (a,), gen = stable(ctx, 1)
    ctx.call(commit("g", "foo", 0, 7, gen, a))  # offsets keep the Empty group alive
    ctx.leave("g", (a, None))
    first = len(events_of(ctx))
    ctx.sleep(30_000)
    cycle(ctx)
    assert len(history(ctx.log)) == len(events_of(ctx))
    ctx.sleep(40_000)  # the first events are 70 s old, the others 40 s
    stored = history(ctx.log)
    assert [s.sequence for s in stored] == list(range(first, len(events_of(ctx))))
    assert sum(1 for r in ctx.history_log if r.value is None) == first
    assert ctx.state() is S.EMPTY  # the group itself stays
    ctx.check_replay_equivalence()
    ctx.sleep(60_000)
    assert history(ctx.log) == [] and ctx.shard.histories.next_sequence("g") == 0
    cycle(ctx)
    assert history(ctx.log)[0].sequence == 0  # nothing left: the count starts over
    ctx.check_replay_equivalence()


def test_a_deleted_groups_history_is_tombstoned() -> None:
    ctx = ctx0()
    cycle(ctx)
    assert history(ctx.log)
    response = ctx.call(DeleteGroupsRequest(("g",)))
    assert response.results[0].error_code == 0
    assert history(ctx.log) == [] and history(compacted(ctx.log)) == []
    assert ctx.shard.histories.next_sequence("g") == 0
    ctx.check_replay_equivalence()
    cycle(ctx)  # the same name again: a new group, a new history
    assert history(ctx.log)[0].sequence == 0
    assert history(ctx.log)[0].fields["from_state"] == "Empty"


def test_events_never_make_a_call_too_large() -> None:
    ctx = Ctx(CoordinatorConfig(group_initial_rebalance_delay_ms=0, max_message_bytes=2_048))
    reason = "r" * 1_700  # the join's first event takes most of the 2 KiB batch
    first = ctx.response(ctx.send(join_request("g", "", reason)))
    second = ctx.response(ctx.send(join_request("g", first.member_id, reason)))
    assert second.error_code == 0 and second.generation_id == 1
    assert len(events_of(ctx)) > len(history(ctx.log)) > 0
    ctx.check_replay_equivalence()


def join_request(group: str, member_id: str, reason: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        member_id=member_id,
        group_instance_id=None,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=(("range", b"m"),),
        reason=reason,
    )


def test_long_lists_are_shortened_and_still_counted() -> None:
    members = [f"member-{i:04d}-{'x' * 40}" for i in range(600)]
    fields = json.loads(encode_fields({"members": members, "reason": "join phase completed"}))
    assert fields["members"] == members[:EVENT_LIST_LIMIT]
    assert member_count(fields, "members") == 600
    huge = {"members": members, "reasons": ["y" * 10_000] * 10, "generation": 4}
    encoded = encode_fields(huge)
    assert len(encoded) <= EVENT_VALUE_MAX_BYTES
    kept = json.loads(encoded)
    assert kept["generation"] == 4 and member_count(kept, "members") == 600


def test_reasons_read_as_prose() -> None:
    ctx = ctx0()
    (a, b, c), _ = stable(ctx, 3)
    ctx.call(LeaveGroupRequest("g", (LeaveGroupMember(a, None, "closing"),)))
    reasons = [e.fields.get("reason") for e in ctx.events if e.kind == "state_transition"]
    assert f"member {a} left the group (client reason: closing)" in reasons
    for token in [ctx.join("g", m) for m in (b, c)]:
        join_response(ctx, token)
    ctx.leave("g", (b, None), (c, None))
    reasons = [e.fields.get("reason") for e in ctx.events if e.kind == "state_transition"]
    assert any(r and r.startswith(f"members {b}, {c} left the group") for r in reasons)
    assert not any("[" in str(r) for r in reasons)


# --- the slot arithmetic, as a property ------------------------------------------------

Op = tuple[str, int]  # ("write", n events) | ("expire", keep the last n stamps) | ("delete", 0)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("write"), st.integers(1, 300)),
            st.tuples(st.just("expire"), st.integers(0, 600)),
            st.tuples(st.just("delete"), st.just(0)),
        ),
        max_size=12,
    )
)
def test_writer_replay_and_reader_agree_with_a_model(ops: list[Op]) -> None:
    """The writer numbers events as the core does (from the replayed state), an expiry
    tombstones the events stamped before a cutoff, a deletion all of them. Reader and
    replay, on the log and on its compaction, must all see the model: the newest
    HISTORY_SLOTS written since the last deletion, less the expired ones."""
    log: list[CoordinatorRecord] = []
    state = GroupHistories()
    model: list[tuple[int, int]] = []  # live (sequence, stamp), oldest first
    clock = 0

    def append(record: CoordinatorRecord) -> None:
        log.append(record)
        state.replay(record)

    for op, n in ops:
        if op == "write":
            for _ in range(n):
                sequence = state.next_sequence("g")
                clock += 1
                append(event_record("g", sequence, make_event("e", "g", clock)))
                model.append((sequence, clock))
                model[:] = model[-HISTORY_SLOTS:]
        elif op == "expire":
            cutoff = clock - n + 1
            for slot in state.slots_older_than("g", cutoff):
                append(event_tombstone("g", slot))
            model[:] = [(seq, at) for seq, at in model if at >= cutoff]
        else:
            for slot in state.live_slots("g"):
                append(event_tombstone("g", slot))
            model.clear()
        assert [(e.sequence, e.at_ms) for e in history(log)] == model
    for view in (log, compacted(log)):
        assert [(e.sequence, e.at_ms) for e in history(view)] == model
        again = GroupHistories()
        for record in view:
            again.replay(record)
        assert again == state
