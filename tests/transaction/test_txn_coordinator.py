"""The transaction coordinator core on a manual clock: Kafka's TransactionCoordinator
rules (transaction version 1), fencing, KIP-360 epoch bumps, timeouts, reloads."""

from __future__ import annotations

import pytest
from txn_ctx import AppendFailed, TxnCtx

from odradek.transaction import ErrorCode, TxnConfig, TxnState
from odradek.transaction.records import (
    TxnLogValue,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
)
from odradek.transaction.types import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)

E = ErrorCode
T1 = ("orders", 0)
T2 = ("orders", 1)
OFFSETS = ("__consumer_offsets", 7)


def test_init_assigns_an_id_and_each_init_bumps_the_epoch_fencing_the_last() -> None:
    ctx = TxnCtx()
    first = ctx.init("app")
    assert (first.error_code, first.producer_epoch) == (0, 0)
    second = ctx.init("app")
    assert (second.producer_id, second.producer_epoch) == (first.producer_id, 1)
    assert ctx.add("app", first.producer_id, 0, T1) == E.PRODUCER_FENCED
    assert ctx.add("app", first.producer_id + 1, 1, T1) == E.INVALID_PRODUCER_ID_MAPPING
    assert ctx.add("nobody", first.producer_id, 1, T1) == E.INVALID_PRODUCER_ID_MAPPING
    assert ctx.add("app", first.producer_id, 1, T1) == E.NONE
    assert ctx.state("app") == "Ongoing"


def test_commit_prepares_writes_markers_then_completes() -> None:
    ctx = TxnCtx()
    p = ctx.init("app")
    pid = p.producer_id
    assert ctx.add("app", pid, 0, T1) == 0
    assert ctx.add("app", pid, 0, T1) == 0  # already in: no new record
    records = len(ctx.log)
    assert ctx.add("app", pid, 0, T1) == 0 and len(ctx.log) == records
    assert ctx.add("app", pid, 0, T2, OFFSETS) == 0
    assert ctx.end("app", pid, 0, commit=True) == 0
    assert ctx.state("app") == "PrepareCommit"
    # While the markers are written, the producer must wait.
    assert ctx.add("app", pid, 0, T1) == E.CONCURRENT_TRANSACTIONS
    assert ctx.end("app", pid, 0, commit=True) == E.CONCURRENT_TRANSACTIONS
    # An abort now (librdkafka's, for a next transaction whose AddPartitionsToTxn was
    # refused meanwhile) is refused as Kafka refuses it (transaction version 1).
    assert ctx.end("app", pid, 0, commit=False) == E.INVALID_TXN_STATE
    assert ctx.init("app").error_code == E.CONCURRENT_TRANSACTIONS
    (job,) = ctx.write_markers()
    assert job.commit and job.partitions == {T1, T2, OFFSETS}
    assert ctx.markers == {tp: [(pid, 0, True)] for tp in (T1, T2, OFFSETS)}
    assert ctx.state("app") == "CompleteCommit"
    assert ctx.end("app", pid, 0, commit=True) == 0  # a retry of the commit
    assert ctx.end("app", pid, 0, commit=False) == E.INVALID_TXN_STATE
    # The next transaction starts with the same epoch.
    assert ctx.add("app", pid, 0, T2) == 0
    assert ctx.end("app", pid, 0, commit=False) == 0
    (job,) = ctx.write_markers()
    assert not job.commit and job.partitions == {T2}
    assert ctx.state("app") == "CompleteAbort"


def test_end_without_a_transaction_is_invalid() -> None:
    ctx = TxnCtx()
    p = ctx.init("app")
    assert ctx.end("app", p.producer_id, 0, commit=True) == E.INVALID_TXN_STATE
    assert ctx.end("app", p.producer_id, 5, commit=True) == E.PRODUCER_FENCED
    assert ctx.end("", p.producer_id, 0, commit=True) == E.INVALID_REQUEST


def test_init_during_a_transaction_fences_aborts_and_asks_to_retry() -> None:
    ctx = TxnCtx()
    p = ctx.init("app")
    pid = p.producer_id
    ctx.add("app", pid, 0, T1)
    again = ctx.init("app")
    assert again.error_code == E.CONCURRENT_TRANSACTIONS
    assert ctx.state("app") == "PrepareAbort"
    (job,) = ctx.write_markers()
    assert (job.producer_epoch, job.commit) == (1, False)  # the markers carry the new epoch
    retried = ctx.init("app")
    assert (retried.error_code, retried.producer_epoch) == (0, 2)
    # The zombie holding epoch 0 is fenced everywhere.
    assert ctx.end("app", pid, 0, commit=True) == E.PRODUCER_FENCED
    assert any(e.kind == "producer_fenced" for e in ctx.events)


def test_kip360_bump_with_the_current_epoch_and_retries() -> None:
    ctx = TxnCtx()
    p = ctx.init("app")
    pid = p.producer_id
    bumped = ctx.init("app", pid=pid, epoch=0)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (0, pid, 1)
    # The answer was lost: the producer retries with its old epoch and gets the same one.
    retry = ctx.init("app", pid=pid, epoch=0)
    assert (retry.error_code, retry.producer_epoch) == (0, 1)
    # An epoch that is neither current nor the last is fenced.
    assert ctx.init("app", pid=pid, epoch=7).error_code == E.PRODUCER_FENCED
    # Another producer id is fenced too.
    assert ctx.init("app", pid=pid + 50, epoch=1).error_code == E.PRODUCER_FENCED
    # Half an id/epoch pair is a malformed request.
    assert ctx.init("app", pid=pid, epoch=-1).error_code == E.INVALID_REQUEST


def test_exhausted_epoch_rotates_the_producer_id() -> None:
    ctx = TxnCtx()
    p = ctx.init("app")
    ctx.shard.txns["app"].producer_epoch = 32766  # as if bumped that often
    rotated = ctx.init("app", pid=p.producer_id, epoch=32766)
    assert rotated.error_code == 0
    assert rotated.producer_id != p.producer_id and rotated.producer_epoch == 0
    # The old id with its exhausted epoch may still re-initialize (a lost answer).
    again = ctx.init("app", pid=p.producer_id, epoch=32766)
    assert again.error_code == 0 and again.producer_id == rotated.producer_id


def test_timeouts_are_validated() -> None:
    ctx = TxnCtx(TxnConfig(max_timeout_ms=10_000))
    assert ctx.init("app", timeout_ms=10_001).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert ctx.init("app", timeout_ms=0).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert ctx.init("", timeout_ms=100).error_code == E.INVALID_REQUEST
    assert ctx.init("app", timeout_ms=10_000).error_code == 0


def test_a_transactional_id_too_long_for_a_record_is_an_invalid_request() -> None:
    """Flexible InitProducerId versions carry ids longer than the record key's int16-length
    string: a clear INVALID_REQUEST, with no producer id spent, not a failed append."""
    ctx = TxnCtx()
    first = ctx.ids.next
    assert ctx.init("x" * 32768).error_code == E.INVALID_REQUEST
    assert ctx.init("\u00e9" * 16384).error_code == E.INVALID_REQUEST  # 32768 bytes in UTF-8
    assert ctx.ids.next == first and not ctx.log
    assert ctx.init("x" * 32767).error_code == 0


def test_expired_transaction_is_aborted_with_a_fencing_epoch() -> None:
    ctx = TxnCtx()
    p = ctx.init("app", timeout_ms=5_000)
    pid = p.producer_id
    ctx.add("app", pid, 0, T1)
    ctx.sleep(3_000)
    ctx.add("app", pid, 0, T2)  # adding partitions does not extend the deadline
    ctx.sleep(1_999)
    assert ctx.state("app") == "Ongoing"
    ctx.sleep(1)
    assert ctx.state("app") == "PrepareAbort"
    (job,) = ctx.write_markers()
    assert job.partitions == {T1, T2} and not job.commit and job.producer_epoch == 1
    assert ctx.end("app", pid, 0, commit=True) == E.PRODUCER_FENCED
    assert [e.kind for e in ctx.events].count("transaction_timed_out") == 1
    # A new transaction gets a fresh deadline.
    n = ctx.init("app", timeout_ms=5_000)
    ctx.add("app", pid, n.producer_epoch, T1)
    ctx.sleep(4_999)
    assert ctx.state("app") == "Ongoing"


def test_timers_follow_the_monotonic_clock_not_the_wall_clock() -> None:
    ctx = TxnCtx()
    p = ctx.init("app", timeout_ms=5_000)
    ctx.add("app", p.producer_id, 0, T1)
    ctx.wall_offset += 3_600_000  # an NTP step forward: nothing expires early
    ctx.sleep(4_000)
    assert ctx.state("app") == "Ongoing"
    ctx.wall_offset -= 7_200_000  # and backward: nothing is kept alive
    ctx.sleep(1_000)
    assert ctx.state("app") == "PrepareAbort"


def test_reload_between_prepare_and_markers_completes_the_commit() -> None:
    ctx = TxnCtx()
    p = ctx.init("app")
    ctx.add("app", p.producer_id, 0, T1, OFFSETS)
    assert ctx.end("app", p.producer_id, 0, commit=True) == 0
    ctx.reload()  # the broker died after the PrepareCommit record, before any marker
    assert ctx.state("app") == "PrepareCommit"
    (job,) = ctx.write_markers()
    assert job.commit and job.partitions == {T1, OFFSETS}
    assert ctx.state("app") == "CompleteCommit"
    assert any(e.kind == "transaction_resumed" for e in ctx.events)


def test_reload_keeps_ongoing_transactions_and_their_deadline() -> None:
    ctx = TxnCtx()
    p = ctx.init("app", timeout_ms=10_000)
    ctx.add("app", p.producer_id, 0, T1)
    ctx.sleep(6_000)
    ctx.reload()
    assert ctx.state("app") == "Ongoing"
    assert ctx.add("app", p.producer_id, 0, T2) == 0  # the producer carries on
    ctx.sleep(3_999)
    assert ctx.state("app") == "Ongoing"
    ctx.sleep(1)
    assert ctx.state("app") == "PrepareAbort"


def test_stale_markers_written_report_changes_nothing() -> None:
    ctx = TxnCtx()
    p = ctx.init("app")
    ctx.add("app", p.producer_id, 0, T1)
    ctx.end("app", p.producer_id, 0, commit=True)
    jobs = list(ctx.marker_jobs)
    ctx.write_markers()
    records = len(ctx.log)
    job = jobs[0]
    result = ctx.shard.markers_written(ctx.time, "app", job.producer_id, job.producer_epoch)
    assert not result.records and len(ctx.log) == records


def test_failed_append_changes_nothing_and_a_failed_fence_does_not_bump_twice() -> None:
    ctx = TxnCtx()
    p = ctx.init("app")
    pid = p.producer_id
    ctx.fail_appends = 1
    with pytest.raises(AppendFailed):
        ctx.add("app", pid, 0, T1)
    assert ctx.state("app") == "Empty"
    assert ctx.add("app", pid, 0, T1) == 0
    ctx.fail_appends = 1
    with pytest.raises(AppendFailed):
        ctx.init("app")  # the fence's PrepareAbort record is lost
    assert ctx.state("app") == "Ongoing"
    assert ctx.init("app").error_code == E.CONCURRENT_TRANSACTIONS
    (job,) = ctx.write_markers()
    assert job.producer_epoch == 1  # not 2: the lost bump was never seen by anyone


def test_describe_and_list() -> None:
    ctx = TxnCtx()
    a = ctx.init("a")
    ctx.init("b")
    ctx.add("a", a.producer_id, 0, T1, T2)
    ctx.sleep(5_000)
    described = ctx.call(DescribeTransactionsRequest(("a", "b", "missing", "")))
    assert isinstance(described, DescribeTransactionsResponse)
    da, db, missing, empty = described.transactions
    assert (da.state, da.producer_id, da.partitions) == ("Ongoing", a.producer_id, (T1, T2))
    assert da.start_ms == ctx.wall - 5_000 and da.timeout_ms == 60_000
    assert (db.state, db.start_ms) == ("Empty", -1)
    assert missing.error_code == E.TRANSACTIONAL_ID_NOT_FOUND
    assert empty.error_code == E.INVALID_REQUEST

    def listed(**kw: object) -> list[tuple[str, str]]:
        r = ctx.call(ListTransactionsRequest(**kw))  # type: ignore[arg-type]
        assert isinstance(r, ListTransactionsResponse) and r.error_code == 0
        return sorted((t.transactional_id, t.state) for t in r.transactions)

    assert listed() == [("a", "Ongoing"), ("b", "Empty")]
    assert listed(states=("Ongoing",)) == [("a", "Ongoing")]
    assert listed(producer_ids=(a.producer_id,)) == [("a", "Ongoing")]
    assert listed(duration_ms=4_000) == [("a", "Ongoing"), ("b", "Empty")]
    assert listed(duration_ms=6_000) == [("b", "Empty")]  # Empty: start -1, "running" forever
    assert listed(id_pattern="a.*") == [("a", "Ongoing")]
    assert listed(id_pattern="(a|a)*b") == [("b", "Empty")]  # RE2: linear, never backtracks
    for bad in ("a(", "(?=a)"):  # not a pattern; lookaround is not RE2 (nor Kafka's RE2/J)
        r = ctx.call(ListTransactionsRequest(id_pattern=bad))
        assert isinstance(r, ListTransactionsResponse) and r.error_code == E.INVALID_REQUEST
    r = ctx.call(ListTransactionsRequest(states=("Nope",)))
    assert isinstance(r, ListTransactionsResponse) and r.unknown_state_filters == ("Nope",)


def test_idle_transactional_ids_expire() -> None:
    ctx = TxnCtx(TxnConfig(id_expiration_ms=100_000, expiration_check_interval_ms=10_000))
    p = ctx.init("idle")
    q = ctx.init("busy", timeout_ms=200_000)
    ctx.add("busy", q.producer_id, 0, T1)
    ctx.sleep(110_000)
    assert ctx.state("idle") == "-" and ctx.state("busy") == "Ongoing"
    assert ctx.log[-1].key == encode_txn_key("idle") and ctx.log[-1].value is None
    # Once forgotten, the id starts over with a new producer id.
    again = ctx.init("idle")
    assert again.producer_id != p.producer_id and again.producer_epoch == 0


def test_records_round_trip_in_kafkas_format() -> None:
    value = TxnLogValue(42, 3, 60_000, TxnState.ONGOING, frozenset({T1, T2}), 1000, 900)
    encoded = encode_txn_value(value)
    # version 0: producer id, epoch, timeout, state, partitions, last update, start
    assert encoded[:2] == b"\x00\x00" and encoded[2:10] == (42).to_bytes(8, "big")
    assert decode_txn_value(encoded) == value
    assert decode_txn_key(encode_txn_key("app")) == "app"
    assert decode_txn_key(b"\x00\x05\x00\x01x") is None  # an unknown key version
    empty = TxnLogValue(42, 3, 60_000, TxnState.EMPTY, frozenset(), 1000, -1)
    assert decode_txn_value(encode_txn_value(empty)) == empty
    # A v1 (flexible) value with a previous producer id as tagged field 0.
    flexible = (
        b"\x00\x01"
        + (42).to_bytes(8, "big")
        + b"\x00\x03"
        + (60_000).to_bytes(4, "big")
        + b"\x04"  # CompleteCommit
        + b"\x01"  # empty compact array
        + (1000).to_bytes(8, "big")
        + (900).to_bytes(8, "big")
        + b"\x01\x00\x08"
        + (41).to_bytes(8, "big")
    )
    v1 = decode_txn_value(flexible)
    assert (v1.state, v1.previous_producer_id, v1.partitions) == (
        TxnState.COMPLETE_COMMIT,
        41,
        frozenset(),
    )


def test_verification_of_transactional_writes() -> None:
    ctx = TxnCtx()
    p = ctx.init("app")
    pid = p.producer_id
    verify = ctx.shard.verify
    assert verify("app", pid, 0, T1) == E.TRANSACTION_ABORTABLE  # not added yet
    ctx.add("app", pid, 0, T1)
    assert verify("app", pid, 0, T1) == E.NONE
    assert verify("app", pid, 0, T2) == E.TRANSACTION_ABORTABLE
    assert verify("app", pid, 1, T1) == E.PRODUCER_FENCED
    assert verify("app", pid + 1, 0, T1) == E.INVALID_PRODUCER_ID_MAPPING
    ctx.end("app", pid, 0, commit=False)
    assert verify("app", pid, 0, T1) == E.CONCURRENT_TRANSACTIONS
    ctx.write_markers()
    assert verify("app", pid, 0, T1) == E.TRANSACTION_ABORTABLE  # a late write after the end
