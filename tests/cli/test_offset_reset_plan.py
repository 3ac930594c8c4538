"""The reset plan shared by `groups reset-offsets` and the console (pure)."""

from __future__ import annotations

import pytest

from odradek.client import TopicPartition
from odradek.offset_reset import LogBounds, ResetError, ResetTarget, parse_datetime, plan, refusal

A, B = TopicPartition("orders", 0), TopicPartition("orders", 1)
BOUNDS = LogBounds({A: 10, B: 0}, {A: 100, B: 50}, {A: 40, B: None})


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (ResetTarget("earliest"), {A: 10, B: 0}),
        (ResetTarget("latest"), {A: 100, B: 50}),
        (ResetTarget("offset", 70), {A: 70, B: 50}),  # kept within each log
        (ResetTarget("offset", 0), {A: 10, B: 0}),
        (ResetTarget("datetime", 1), {A: 40, B: 50}),  # nothing that late: the log end
        (ResetTarget("shift", -30), {A: 30, B: 0}),
    ],
)
def test_every_target_is_kept_within_the_log(target: ResetTarget, expected) -> None:
    assert plan("g", [A, B], target, BOUNDS, {A: 60, B: 5}) == expected


def test_a_shift_needs_a_committed_offset_and_targets_are_checked() -> None:
    with pytest.raises(ResetError, match="cannot shift orders:1: group 'g' has no committed"):
        plan("g", [A, B], ResetTarget("shift", 1), BOUNDS, {A: 60})
    with pytest.raises(ResetError, match="needs a value"):
        ResetTarget("offset")
    with pytest.raises(ResetError, match="0 or more"):
        ResetTarget("offset", -1)
    with pytest.raises(ResetError, match="ISO 8601"):
        parse_datetime("yesterday")
    assert parse_datetime("1970-01-01T00:00:01Z") == 1000


def test_only_an_inactive_group_may_be_reset() -> None:
    assert refusal("g", "Empty", 0) is None and refusal("g", "Dead", 0) is None
    assert refusal("g", "Stable", 1) == (
        "cannot reset the offsets of group 'g': it is Stable with 1 member; offsets can only "
        "be changed while the group is inactive (Empty): stop its consumers first"
    )
