"""The transaction state machine's table (``TXN_TRANSITIONS``) is what the coordinator does.

Every pair of states goes through the one transition function
(``TxnMetadata.transit``): a legal pair gives the next metadata, an illegal one
raises ``IllegalTransition``. Then producers, markers and expiration make every
legal transition Odradek makes, seen by watching the table's check; the two it
never makes are named here (Odradek fences in one record, without
PrepareEpochFence). tests/coordinator/test_state_machines.py holds
docs/coordinator.md to the table.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from txn_ctx import TxnCtx

from odradek.coordinator.transitions import IllegalTransition
from odradek.transaction import ErrorCode, TxnConfig, TxnState
from odradek.transaction.shard import TxnMetadata
from odradek.transaction.state import TXN_TRANSITIONS

S = TxnState
E = ErrorCode
T1 = ("orders", 0)
T2 = ("orders", 1)
UNREACHED = {(S.ONGOING, S.PREPARE_EPOCH_FENCE), (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT)}


def metadata(state: TxnState) -> TxnMetadata:
    return TxnMetadata("app", 1000, -1, 3, -1, 60_000, state, frozenset({T1}), 5, 6)


@pytest.mark.parametrize("pair", list(itertools.product(S, repeat=2)), ids=str)
def test_transit_follows_the_table(pair: tuple[TxnState, TxnState]) -> None:
    src, dst = pair
    meta = metadata(src)
    if TXN_TRANSITIONS.allows(src, dst):
        new = meta.transit(dst, producer_epoch=4)
        assert (new.state, new.producer_epoch) == (dst, 4)
    else:
        with pytest.raises(IllegalTransition, match=f"{src.label} -> {dst.label}"):
            meta.transit(dst, producer_epoch=4)
    assert meta == metadata(src)  # the metadata itself never changes: records do


def test_expirable_states_are_those_that_may_die() -> None:
    assert {s for s in S if s.expirable} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}


def test_every_transition_is_made_through_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: set[tuple[Any, Any]] = set()
    check = TXN_TRANSITIONS.check

    def spy(src: TxnState, dst: TxnState) -> None:
        check(src, dst)
        seen.add((src, dst))

    monkeypatch.setattr(TXN_TRANSITIONS, "check", spy)
    ctx = TxnCtx(TxnConfig(id_expiration_ms=100_000, expiration_check_interval_ms=10_000))

    def run(txn_id: str, *, commit: bool) -> int:
        """One transaction of ``txn_id``, ended and its markers written."""
        p = ctx.init(txn_id)
        assert ctx.add(txn_id, p.producer_id, p.producer_epoch, T1) == E.NONE
        assert ctx.add(txn_id, p.producer_id, p.producer_epoch, T2) == E.NONE
        assert ctx.end(txn_id, p.producer_id, p.producer_epoch, commit=commit) == E.NONE
        ctx.write_markers()
        assert ctx.state(txn_id) == ("CompleteCommit" if commit else "CompleteAbort")
        # The next transaction starts from where this one ended.
        assert ctx.add(txn_id, p.producer_id, p.producer_epoch, T1) == E.NONE
        assert ctx.end(txn_id, p.producer_id, p.producer_epoch, commit=commit) == E.NONE
        ctx.write_markers()
        return p.producer_id

    run("committer", commit=True)
    run("aborter", commit=False)
    ctx.init("committer")  # CompleteCommit -> Empty
    ctx.init("aborter")  # CompleteAbort -> Empty
    ctx.init("idle")  # Empty -> Empty, on its second init
    ctx.init("idle")
    run("committed", commit=True)
    run("aborted", commit=False)
    ctx.sleep(110_000)  # idle ids in Empty, CompleteCommit, CompleteAbort expire: Dead
    assert {t: ctx.state(t) for t in ("idle", "committed", "aborted")} == dict.fromkeys(
        ("idle", "committed", "aborted"), "-"
    )
    legal = set(TXN_TRANSITIONS.pairs())
    assert seen <= legal
    assert sorted(f"{a.label} -> {b.label}" for a, b in legal - seen) == sorted(
        f"{a.label} -> {b.label}" for a, b in UNREACHED
    )
