"""Burrow's lag rules, one partition window at a time, and the time until lag clears."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from odradek.console.verdict import (
    WINDOW,
    Commit,
    CommitWindow,
    PartitionVerdict,
    Verdict,
    judge_group,
    judge_partition,
    partition_verdict,
    time_to_clear,
)


def window(*rows: tuple[int, int, int]) -> list[Commit]:
    """(seconds, offset, lag) rows as commits."""
    return [Commit(s * 1000, offset, lag) for s, offset, lag in rows]


NOW = 100_000


def test_a_window_that_touched_zero_lag_is_ok_even_if_lag_grew_since() -> None:
    commits = window((10, 100, 0), (20, 150, 30), (30, 160, 80))
    assert partition_verdict(commits, 80, 35_000) is Verdict.OK


def test_no_lag_now_is_ok_whatever_the_window_says() -> None:
    commits = window((10, 100, 50), (20, 100, 60))
    assert partition_verdict(commits, 0, NOW) is Verdict.OK


def test_offsets_going_back_are_a_rewind() -> None:
    commits = window((10, 500, 5), (20, 100, 400), (30, 150, 350))
    assert partition_verdict(commits, 350, 35_000) is Verdict.REWIND


def test_silence_longer_than_the_window_spans_is_stopped() -> None:
    commits = window((10, 100, 5), (20, 120, 7), (30, 140, 9))  # spans 20 s
    assert partition_verdict(commits, 9, 45_000) is not Verdict.STOPPED  # 15 s of silence
    assert partition_verdict(commits, 9, 51_000) is Verdict.STOPPED  # 21 s


def test_committing_the_same_offset_with_lag_is_stalled() -> None:
    commits = window((10, 100, 5), (20, 100, 9), (30, 100, 12))
    assert partition_verdict(commits, 12, 31_000) is Verdict.STALLED


def test_moving_offsets_with_lag_that_never_shrinks_is_a_warning() -> None:
    commits = window((10, 100, 5), (20, 110, 5), (30, 120, 9))
    assert partition_verdict(commits, 9, 31_000) is Verdict.WARNING


def test_lag_that_shrinks_somewhere_is_ok() -> None:
    commits = window((10, 100, 50), (20, 140, 20), (30, 150, 30))
    assert partition_verdict(commits, 30, 31_000) is Verdict.OK


def test_replayed_commits_without_a_known_lag_do_not_make_a_warning() -> None:
    commits = window((10, 100, -1), (20, 110, -1), (30, 120, 7))
    assert partition_verdict(commits, 7, 31_000) is Verdict.OK


def test_commits_closer_than_a_second_replace_the_newest_entry_which_keeps_its_time() -> None:
    w = CommitWindow()
    w.add(1_000, 10, 5)
    w.add(1_500, 11, 4)
    w.add(3_000, 12, 3)
    assert [(c.at_ms, c.offset, c.lag) for c in w.commits] == [(1_000, 11, 4), (3_000, 12, 3)]
    for i in range(30):
        w.add(10_000 + i * 2_000, 20 + i, 1)
    assert len(w) == WINDOW


def test_a_consumer_committing_every_half_second_fills_its_window_and_is_not_stopped() -> None:
    # librdkafka's auto.commit.interval.ms=500 under a steady lag: Burrow's min-distance
    # keeps an entry's time, so the window still spans the commits (it would be one entry
    # forever, and STOPPED, if each commit moved the newest entry's time).
    w = CommitWindow()
    for i in range(40):
        w.add(i * 500, 100 + i * 10, 5 + i % 4)  # the lag goes up and down
    assert len(w) == WINDOW
    assert [c.at_ms for c in w.commits] == [i * 1_000 for i in range(10, 20)]
    verdict = judge_partition(w, 5, 19_800)
    assert verdict.verdict is Verdict.OK


def test_time_to_clear_follows_the_pace_of_the_window() -> None:
    commits = window((0, 0, 1_000), (10, 2_000, 800))  # lost 200 lag in 10 s
    assert time_to_clear(commits, 800) == 40.0
    assert time_to_clear(window((0, 0, 100), (10, 50, 150)), 150) is None  # growing
    assert time_to_clear(commits, 0) == 0.0


def test_the_group_takes_its_worst_partition_and_errors_are_named() -> None:
    parts = [
        PartitionVerdict(Verdict.OK, 0, 1.0, 0.0),
        PartitionVerdict(Verdict.WARNING, 10, 1.0, 30.0),
        PartitionVerdict(Verdict.STALLED, 5, 1.0, None),
    ]
    g = judge_group(parts)
    assert g.verdict is Verdict.ERROR and g.worst is Verdict.STALLED
    assert g.label == "ERROR (STALLED)"
    assert g.counts == {"WARNING": 1, "STALLED": 1}
    assert g.seconds_to_clear is None  # one partition does not clear
    ok = judge_group([PartitionVerdict(Verdict.WARNING, 10, 1.0, 30.0)])
    assert (ok.label, ok.seconds_to_clear) == ("WARNING", 30.0)


@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.integers(0, 10**9), st.integers(-1, 10**6)),
        max_size=WINDOW,
    ).map(sorted),
    st.integers(-1, 10**6),
)
def test_every_window_gets_one_verdict_and_zero_lag_is_always_ok(rows, lag) -> None:
    commits = [Commit(at, offset, lag_then) for at, offset, lag_then in rows]
    verdict = partition_verdict(commits, lag, 2 * 10**6)
    assert isinstance(verdict, Verdict)
    if lag <= 0 or any(c.lag == 0 for c in commits):
        assert verdict is Verdict.OK
