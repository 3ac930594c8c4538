"""Where a follower cuts its log after a leader change (`replication.truncation`), with
no leader, fetcher or etcd: Kafka's KIP-279 rule (`truncation_step`) and the leader's
DivergingEpoch check of a Fetch (`check_last_fetched_epoch`), case by case and against a
model of replicated logs."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.log.leader_epoch import LeaderEpochCache, end_offset_for
from odradek.protocol.errors import ErrorCode
from odradek.replication.truncation import (
    UNDEFINED_EPOCH,
    UNDEFINED_OFFSET,
    DivergingEpoch,
    TruncationStep,
    check_last_fetched_epoch,
    truncation_step,
)


def step(epochs: list[tuple[int, int]], **kw: int) -> TruncationStep:
    base = {"log_end": 100, "high_watermark": 80, "leader_epoch": 3, "leader_end_offset": 100}
    return truncation_step(epochs, **{**base, **kw})


def test_the_issue_21_sequence_cuts_the_old_leaders_suffix() -> None:
    """Replicas [A, C, B]; a-10..a-19 at epoch 0 on A and B; C led epoch 1 and wrote
    c-10..c-14; B leads epoch 2. C asks B about epoch 1; B never had it and answers
    epoch 0 ending at 20. C's own epoch 0 ends at 10: C cuts to 10 and is done."""
    c_epochs = [(0, 0), (1, 10)]
    b_epochs = [(0, 0), (2, 20)]
    leader_epoch, leader_end = end_offset_for(b_epochs, 1, 20)
    assert (leader_epoch, leader_end) == (0, 20)
    assert truncation_step(
        c_epochs,
        log_end=15,
        high_watermark=10,
        leader_epoch=leader_epoch,
        leader_end_offset=leader_end,
    ) == TruncationStep(10, complete=True)


def test_the_same_epoch_cuts_at_the_smaller_end() -> None:
    epochs = [(1, 0), (3, 50)]
    assert step(epochs) == TruncationStep(100, complete=True)  # agreed: nothing to cut
    assert step(epochs, leader_end_offset=90) == TruncationStep(90, complete=True)
    assert step(epochs, leader_end_offset=150) == TruncationStep(100, complete=True)
    # the leader answers an older epoch we also hold: our end of it (50) is smaller
    assert step(epochs, leader_epoch=1, leader_end_offset=70) == TruncationStep(50, complete=True)
    assert step(epochs, leader_epoch=1, leader_end_offset=30) == TruncationStep(30, complete=True)


def test_an_epoch_the_follower_never_had_cuts_at_its_own_older_end_and_asks_again() -> None:
    # leader answers epoch 2, we hold 1 then 3: our largest epoch <= 2 is 1, ending at 50
    epochs = [(1, 0), (3, 50)]
    assert step(epochs, leader_epoch=2, leader_end_offset=70) == TruncationStep(50, complete=False)


def test_an_epoch_older_than_all_the_follower_knows_cuts_at_both_starts() -> None:
    # Kafka's endOffsetFor below every entry: (requested, first start)
    assert step([(4, 20), (5, 40)], leader_epoch=2, leader_end_offset=30, log_end=60) == (
        TruncationStep(20, complete=True)
    )


def test_an_answer_without_an_end_offset_keeps_the_high_watermark() -> None:
    answer = {"leader_epoch": UNDEFINED_EPOCH, "leader_end_offset": UNDEFINED_OFFSET}
    assert step([(3, 0)], **answer) == TruncationStep(80, complete=True)
    assert step([(3, 0)], high_watermark=120, **answer) == TruncationStep(100, complete=True)


def test_an_answer_without_an_epoch_cuts_at_the_leaders_end() -> None:
    assert step([(3, 0)], leader_epoch=UNDEFINED_EPOCH, leader_end_offset=60) == (
        TruncationStep(60, complete=True)
    )


def test_an_empty_epoch_cache_cuts_at_the_leaders_end() -> None:
    assert step([], leader_epoch=2, leader_end_offset=60) == TruncationStep(60, complete=True)


# A model of replicated logs: each replica a list of records (epoch, id), offsets being
# positions, and an epoch cache kept by Kafka's rules. Histories come from elections
# (clean or not), leader appends, and replication that leaves a replica holding a prefix
# of its leader's log; a replica that is not replicated to keeps whatever suffix it had.


class ModelReplica:
    def __init__(self) -> None:
        self.log: list[tuple[int, int]] = []
        self.cache = LeaderEpochCache(Path("unused"))

    def truncate(self, offset: int) -> None:
        del self.log[offset:]
        self.cache.truncate_from_end(offset)

    def copy_prefix_of(self, leader: ModelReplica, length: int) -> None:
        self.log = list(leader.log[:length])
        self.cache.clear()
        for offset, (epoch, _) in enumerate(self.log):
            self.cache.assign(epoch, offset)


history_ops = st.lists(
    st.one_of(
        st.tuples(st.just("elect"), st.integers(0, 2), st.just(0)),
        st.tuples(st.just("append"), st.integers(1, 4), st.just(0)),
        st.tuples(st.just("replicate"), st.integers(0, 2), st.integers(0, 12)),
    ),
    max_size=30,
)


def run_history(ops: list[tuple[str, int, int]]) -> tuple[list[ModelReplica], int]:
    replicas = [ModelReplica() for _ in range(3)]
    leader, epoch, next_id = 0, 0, 0
    replicas[0].cache.assign(0, 0)
    for op, a, b in ops:
        if op == "elect":
            leader, epoch = a, epoch + 1
            replicas[leader].cache.assign(epoch, len(replicas[leader].log))
        elif op == "append":
            for _ in range(a):
                replicas[leader].log.append((epoch, next_id))
                next_id += 1
        elif a != leader:
            source = replicas[leader]
            common = shared_prefix(replicas[a].log, source.log)
            replicas[a].copy_prefix_of(source, min(len(source.log), common + b))
    return replicas, leader


def shared_prefix(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=400, deadline=None)
@given(history_ops)
def test_truncation_leaves_exactly_the_prefix_the_follower_shares_with_the_leader(
    ops: list[tuple[str, int, int]],
) -> None:
    """After the rounds of questions each follower holds a prefix of its leader's log,
    and all of what it shared with it: no record the leader holds at the same offset is
    cut, so nothing below a high watermark goes unless the leader's log differs there."""
    replicas, leader_index = run_history(ops)
    leader = replicas[leader_index]
    for index, follower in enumerate(replicas):
        if index == leader_index:
            continue
        keep = shared_prefix(follower.log, leader.log)
        before = list(follower.log)
        for _ in range(len(follower.cache.entries) + 1):  # each round drops an entry
            answer = end_offset_for(
                leader.cache.entries, follower.cache.latest_epoch, len(leader.log)
            )
            result = truncation_step(
                follower.cache.entries,
                log_end=len(follower.log),
                high_watermark=keep,
                leader_epoch=answer[0],
                leader_end_offset=answer[1],
            )
            assert result.offset <= len(follower.log)
            follower.truncate(result.offset)
            if result.complete:
                break
        else:
            raise AssertionError(f"no agreement after {len(before)} records: {follower.log}")
        assert follower.log == before[:keep] == leader.log[:keep]


epoch_caches = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 10)), max_size=6).map(
    lambda gaps: [
        (sum(e for e, _ in gaps[: i + 1]) + i, sum(o for _, o in gaps[:i]))
        for i in range(len(gaps))
    ]
)


@given(
    epoch_caches, st.integers(0, 5), st.integers(-1, 30), st.integers(-1, 80), st.integers(0, 80)
)
def test_every_step_stays_in_the_log_and_an_unfinished_one_drops_an_epoch(
    epochs: list[tuple[int, int]], extra: int, leader_epoch: int, leader_end: int, hw: int
) -> None:
    """Whatever the leader answers: the cut is never past the log end, and a step that
    asks again removes the latest epoch entry, so the rounds end (the fetcher's loop)."""
    log_end = (epochs[-1][1] if epochs else 0) + extra
    result = truncation_step(
        epochs,
        log_end=log_end,
        high_watermark=hw,
        leader_epoch=leader_epoch,
        leader_end_offset=leader_end,
    )
    assert result.offset <= log_end
    if not result.complete:
        assert epochs and epochs[-1][1] >= result.offset


# --- the leader's side of Fetch v12+: DivergingEpoch -------------------------------------


def check(**kw: int) -> object:
    base = {"log_start": 0, "log_end": 30, "fetch_offset": 20, "last_fetched_epoch": 2}
    return check_last_fetched_epoch([(0, 0), (2, 10), (4, 25)], **{**base, **kw})


def test_a_fetch_that_follows_the_leaders_log_reads_on() -> None:
    assert check() is None  # epoch 2 ends at 25 here: 20 is inside it
    assert check(fetch_offset=25) is None
    assert check(last_fetched_epoch=4, fetch_offset=30) is None
    assert check(last_fetched_epoch=UNDEFINED_EPOCH) is None  # not sent


def test_a_fetch_past_the_leaders_end_of_its_epoch_diverges_there() -> None:
    assert check(fetch_offset=27) == DivergingEpoch(2, 25)
    assert check(last_fetched_epoch=4, fetch_offset=31) == DivergingEpoch(4, 30)


def test_an_epoch_the_leader_never_had_diverges_at_its_largest_below() -> None:
    """The issue 21 case as a fetch: C fetches at 15 with epoch 1, B has 0 then 2."""
    assert check_last_fetched_epoch(
        [(0, 0), (2, 20)], log_start=0, log_end=20, fetch_offset=15, last_fetched_epoch=1
    ) == DivergingEpoch(0, 20)
    assert check(last_fetched_epoch=3, fetch_offset=12) == DivergingEpoch(2, 25)


def test_what_the_leader_cannot_place_is_out_of_range() -> None:
    assert check(last_fetched_epoch=5) == ErrorCode.OFFSET_OUT_OF_RANGE  # newer than ours
    assert check(log_start=22) == ErrorCode.OFFSET_OUT_OF_RANGE  # below our log start


@settings(max_examples=300, deadline=None)
@given(history_ops)
def test_fetching_with_the_last_epoch_ends_on_the_shared_prefix(
    ops: list[tuple[str, int, int]],
) -> None:
    """Followers that fetch with their last epoch and truncate on each DivergingEpoch
    (Kafka's truncateOnFetchResponse) end, when the leader lets them read, holding
    exactly the prefix they share with it."""
    replicas, leader_index = run_history(ops)
    leader = replicas[leader_index]
    for index, follower in enumerate(replicas):
        if index == leader_index:
            continue
        keep = shared_prefix(follower.log, leader.log)
        before = list(follower.log)
        for _ in range(len(follower.cache.entries) + 1):
            answer = check_last_fetched_epoch(
                leader.cache.entries,
                log_start=0,
                log_end=len(leader.log),
                fetch_offset=len(follower.log),
                last_fetched_epoch=follower.cache.latest_epoch,
            )
            if answer is None:
                break
            assert isinstance(answer, DivergingEpoch), answer
            result = truncation_step(
                follower.cache.entries,
                log_end=len(follower.log),
                high_watermark=keep,
                leader_epoch=answer.epoch,
                leader_end_offset=answer.end_offset,
            )
            follower.truncate(result.offset)
        else:
            raise AssertionError(f"still diverging: {follower.log} against {leader.log}")
        assert follower.log == before[:keep] == leader.log[:keep]
