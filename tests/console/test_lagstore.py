"""The lag history file: blocks round-trip, survive a reopen, expire after 7 days, and
belong to one cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.console.lagstore import (
    BLOCK_SPAN_MS,
    RETENTION_MS,
    Block,
    LagStore,
    LagStoreError,
    decode_block,
    total_lag,
)

LAYOUT = (("orders", 0), ("orders", 1))
MINUTE = 60_000


@given(
    st.lists(
        st.tuples(
            st.integers(0, 10_000),
            st.tuples(
                st.tuples(st.integers(-1, 2**40), st.integers(-1, 2**40)),
                st.tuples(st.integers(-1, 2**40), st.integers(-1, 2**40)),
            ),
        ),
        max_size=80,
    )
)
def test_a_block_gives_back_every_sample_it_was_given(rows) -> None:
    block = Block(1_000_000, LAYOUT)
    expected = []
    at = 1_000_000
    for step, values in rows:
        at += step
        block.append(at, values)
        expected.append((at, values))
    layout, samples = decode_block(1_000_000, bytes(block.data))
    assert layout == LAYOUT
    assert [(at, values) for at, _lag, values in samples] == expected
    assert [lag for _, lag, _ in samples] == [total_lag(v) for _, v in expected]
    _, totals = decode_block(1_000_000, bytes(block.data), partitions=False)
    assert [(at, lag) for at, lag, _ in totals] == [(at, total_lag(v)) for at, v in expected]


def test_a_steady_consumer_costs_a_few_bytes_a_partition_a_minute() -> None:
    block = Block(0, LAYOUT)
    for minute in range(60):
        committed = 10_000 + minute * 3_000
        block.append(minute * MINUTE, ((committed, committed + 500), (committed, committed + 20)))
    per_sample = (len(block.data) - 20) / 60
    assert per_sample < 24, per_sample  # two partitions: under 10 bytes each, and a header


def test_samples_survive_a_reopen_and_identical_ones_are_not_kept(tmp_path: Path) -> None:
    path = tmp_path / "lag.sqlite3"
    store = LagStore(path, "cluster-a")
    t0 = 1_700_000_000_000
    assert store.record("g", t0, LAYOUT, ((10, 20), (5, 5)))
    assert not store.record("g", t0 + MINUTE, LAYOUT, ((10, 20), (5, 5)))  # no change
    assert store.record("g", t0 + 2 * MINUTE, LAYOUT, ((15, 30), (5, 9)))
    store.record("other", t0, (("audit", 0),), ((1, 2),))
    store.close()

    again = LagStore(path, "cluster-a")
    series = again.series("g", t0 - MINUTE)
    assert [(s.at_ms, s.lag) for s in series] == [(t0, 10), (t0 + 2 * MINUTE, 19)]
    assert series[1].offsets[("orders", 1)] == (5, 9)
    assert [(s.lag, s.offsets) for s in again.series("g", t0, partitions=False)] == [
        (10, {}),
        (19, {}),
    ]
    assert again.partition_series("g", ("orders", 0), t0) == [(t0, 10), (t0 + 2 * MINUTE, 15)]
    # New samples after the restart go on in a block of their own.
    again.record("g", t0 + 3 * MINUTE, LAYOUT, ((30, 30), (9, 9)))
    assert [s.lag for s in again.series("g", t0)] == [10, 19, 0]
    again.close()


def test_a_changed_partition_set_starts_a_new_block(tmp_path: Path) -> None:
    store = LagStore(tmp_path / "lag.sqlite3", None)
    store.record("g", 0, LAYOUT, ((1, 2), (3, 4)))
    store.record("g", MINUTE, (("orders", 0),), ((2, 2),))
    series = store.series("g", 0)
    assert [sorted(s.offsets) for s in series] == [sorted(LAYOUT), [("orders", 0)]]
    store.close()


def test_history_older_than_seven_days_is_dropped(tmp_path: Path) -> None:
    store = LagStore(tmp_path / "lag.sqlite3", None)
    now = 100 * 24 * 3600 * 1000
    store.record("old", now - RETENTION_MS - 2 * BLOCK_SPAN_MS, LAYOUT, ((1, 2), (3, 4)))
    store.record("new", now - MINUTE, LAYOUT, ((1, 2), (3, 4)))
    store.flush()
    assert store.expire(now) == 1
    assert store.series("old", 0) == []
    assert len(store.series("new", 0)) == 1
    store.close()


def test_a_file_belongs_to_one_cluster(tmp_path: Path) -> None:
    path = tmp_path / "lag.sqlite3"
    LagStore(path, "cluster-a").close()
    with pytest.raises(LagStoreError, match="holds the lag history of cluster cluster-a"):
        LagStore(path, "cluster-b")
    other = tmp_path / "not-sqlite"
    other.write_text("hello, I am not a database" * 100)
    with pytest.raises(LagStoreError, match="not a lag history file"):
        LagStore(other, "cluster-a")
