"""Each call into the core is atomic: an exception, or an append that fails, changes nothing.

Kafka's runtime generates records against a snapshot and reverts it when the
operation throws or its append fails; only that request fails. Here the
shard's undo log does the same (``coordinator/journal.py``): these tests break
calls at their worst moment and check that the shard, member by member and
timer by timer, is exactly what it was, and that other groups never notice.
"""

from __future__ import annotations

from typing import Any

import pytest
from coord_ctx import Ctx, commit, ctx0, join_response, shard_fingerprint, stable, sync_response

from odradek.coordinator import ErrorCode, GroupState
from odradek.coordinator.records import RecordFormatError
from odradek.coordinator.timer import HEARTBEAT, timer_key
from odradek.coordinator.types import SyncGroupRequest

E = ErrorCode
S = GroupState


class InjectedFault(RuntimeError):
    pass


def break_after(ctx: Ctx, monkeypatch: pytest.MonkeyPatch, method: str) -> None:
    """Make the classic groups' ``<method>`` do its work and then raise, once."""
    manager = ctx.shard.classic
    original = getattr(manager, method)

    def broken(*args: Any, **kwargs: Any) -> Any:
        original(*args, **kwargs)
        monkeypatch.setattr(manager, method, original)
        raise InjectedFault(method)

    monkeypatch.setattr(manager, method, broken)


def in_completing_rebalance(ctx: Ctx) -> tuple[str, str, int, int]:
    """Two members, CompletingRebalance, the follower's SyncGroup parked."""
    (a, b), _ = stable(ctx, 2)
    ta, tb = ctx.join("g", a), ctx.join("g", b)
    ja, jb = join_response(ctx, ta), join_response(ctx, tb)
    assert ja.leader == a and ctx.state() is S.COMPLETING_REBALANCE
    parked = ctx.sync("g", b, jb.generation_id)
    assert not ctx.done(parked)
    return a, b, ja.generation_id, parked


def test_commit_that_cannot_be_encoded_changes_nothing() -> None:
    """A topic name over 32767 bytes cannot be a record key: only that commit fails."""
    ctx = ctx0()
    (a,), gen = stable(ctx, 1, group="b")
    _, parked = ctx.join_new("other", client_id="x")  # another group of the partition
    before = shard_fingerprint(ctx)
    with pytest.raises(RecordFormatError):
        ctx.send(commit("b", "t" * 40_000, 0, 1, gen, a))  # counts as a heartbeat first
    assert shard_fingerprint(ctx) == before
    assert ctx.done(parked) or ctx.state("other") is S.COMPLETING_REBALANCE


def test_exception_after_the_transition_rolls_the_whole_call_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ctx = ctx0()
    a, b, gen, parked = in_completing_rebalance(ctx)
    before = shard_fingerprint(ctx)
    break_after(ctx, monkeypatch, "transition")  # the leader's sync dies going Stable
    with pytest.raises(InjectedFault):
        ctx.send(SyncGroupRequest("g", gen, a, assignments=((a, b"A"), (b, b"B"))))
    assert shard_fingerprint(ctx) == before
    assert not ctx.done(parked)  # the follower is still waiting, unharmed
    # The leader's retry goes through as if nothing happened.
    retry = ctx.sync("g", a, gen, ((a, b"A"), (b, b"B")))
    assert sync_response(ctx, retry).assignment == b"A"
    assert sync_response(ctx, parked).assignment == b"B"
    ctx.check_replay_equivalence()


def test_abort_undoes_a_call_whose_append_failed() -> None:
    ctx = ctx0()
    a, _b, gen, parked = in_completing_rebalance(ctx)
    before = shard_fingerprint(ctx)
    result = ctx.shard.handle(ctx.time, 999, SyncGroupRequest("g", gen, a, assignments=()))
    assert result.records and ctx.shard.group_state("g") is S.STABLE
    ctx.shard.abort()  # the runtime could not append the records: drop the call
    assert shard_fingerprint(ctx) == before and not ctx.done(parked)
    with pytest.raises(RuntimeError):
        ctx.shard.abort()  # a call is undone once


def test_abort_of_the_join_that_created_a_group_removes_it() -> None:
    ctx = ctx0()
    before = shard_fingerprint(ctx)
    result = ctx.shard.handle(ctx.time, 1, ctx_join_request("new"))
    assert ctx.state("new") is not None and result.records
    ctx.shard.abort()
    assert ctx.state("new") is None and shard_fingerprint(ctx) == before


def test_replayed_call_cannot_be_aborted() -> None:
    ctx = ctx0()
    stable(ctx, 1)
    with pytest.raises(RuntimeError):
        ctx.shard.abort()


def test_failed_timer_keeps_its_state_and_its_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    ctx = ctx0()
    (a, b), gen = stable(ctx, 2, session_ms=10_000)
    ctx.sleep(5000)
    assert ctx.heartbeat("g", b, gen) == E.NONE  # only a will expire
    key = timer_key(HEARTBEAT, "g", a)
    deadline = ctx.timer.deadline(key)
    assert deadline is not None
    ctx.time = deadline
    before = shard_fingerprint(ctx)
    break_after(ctx, monkeypatch, "prepare_rebalance")  # a expires, then the rebalance dies
    due = ctx.timer.pop_due(ctx.time)
    assert due == (key, deadline)
    with pytest.raises(InjectedFault):
        ctx.shard.on_timer(ctx.time, key)
    # Nothing happened, and the expiry is still due: the runtime retries it.
    assert shard_fingerprint(ctx) == before and ctx.timer.deadline(key) == deadline
    ctx.sleep(0)
    assert ctx.state() is S.PREPARING_REBALANCE and a not in ctx.shard.groups["g"].members


def ctx_join_request(group: str) -> Any:
    from odradek.coordinator.types import JoinGroupRequest

    return JoinGroupRequest(
        group, "", None, "c", "/h", 10_000, 10_000, "consumer", (("range", b""),), None, False
    )
