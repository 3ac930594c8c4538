"""Where a follower cuts its log after a leader change (`replication.truncation`), with
no leader, fetcher or etcd: the pure rule the fetcher applies to OffsetForLeaderEpoch."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from odradek.replication.truncation import UNDEFINED_EPOCH, divergence_offset


def cut(**kw: int) -> int | None:
    base = {
        "latest_epoch": 3,
        "log_start": 0,
        "log_end": 100,
        "high_watermark": 80,
        "leader_epoch": 3,
        "leader_end_offset": 100,
    }
    return divergence_offset(**{**base, **kw})


def test_nothing_diverged_when_the_leader_holds_our_epoch_to_our_end_or_beyond() -> None:
    assert cut() is None
    assert cut(leader_end_offset=150) is None


def test_a_suffix_past_the_leaders_end_of_our_epoch_goes() -> None:
    assert cut(leader_end_offset=90) == 90
    assert cut(leader_epoch=2, leader_end_offset=60) == 60  # the leader's largest epoch below


def test_a_log_without_epochs_cannot_diverge() -> None:
    assert cut(latest_epoch=UNDEFINED_EPOCH, leader_end_offset=10) is None


def test_a_leader_that_knows_nothing_that_old_keeps_only_the_high_watermark() -> None:
    assert cut(leader_epoch=UNDEFINED_EPOCH, leader_end_offset=-1) == 80
    assert cut(leader_epoch=UNDEFINED_EPOCH, leader_end_offset=-1, high_watermark=120) is None


def test_never_below_the_log_start() -> None:
    assert cut(log_start=95, leader_end_offset=90) == 95
    assert cut(log_start=100, leader_end_offset=90) is None  # nothing left to cut


@given(
    st.integers(0, 50),
    st.integers(0, 100),
    st.integers(0, 120),
    st.integers(-1, 5),
    st.integers(-1, 5),
    st.integers(-1, 150),
)
def test_a_cut_is_inside_the_log_and_below_its_end(
    start: int, length: int, hw: int, latest: int, epoch: int, end_offset: int
) -> None:
    end = start + length
    offset = divergence_offset(
        latest_epoch=latest,
        log_start=start,
        log_end=end,
        high_watermark=hw,
        leader_epoch=epoch,
        leader_end_offset=end_offset,
    )
    assert offset is None or start <= offset < end
