"""A consumer group's lag verdict, judged the way Burrow judges it: no thresholds.

Each partition keeps a sliding window of the group's last ``WINDOW`` commits, each with
the lag at the time it was seen (log end then, minus the offset). The window alone says
whether the consumer is keeping up, slowing down, stuck or gone, so nothing has to be
configured per group. The rules, checked in this order (Burrow's, read in
``core/internal/evaluator/caching.go``; written anew here):

1. a partition whose lag is now 0, or was 0 at any commit of the window, is OK;
2. REWIND: an offset of the window is lower than the one before it (a reset, or a
   consumer that went back);
3. STOPPED: the time since the newest commit is longer than the window spans (newest
   minus oldest commit): the consumer has stopped committing;
4. STALLED: every commit of the window has the same offset: the consumer is alive
   (it commits) but does not move;
5. WARNING: the offsets move but the lag never went down from one commit to the next:
   the consumer is slower than the producers;
6. otherwise OK.

The group's verdict is its worst partition's, with REWIND, STOPPED and STALLED
counted as ERROR (Burrow's group status), and the partitions' own verdicts stay
visible. ``time_to_clear`` estimates how long the lag takes to reach 0 at the pace of
the window: the lag it lost per second, from the oldest commit to the newest.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise

WINDOW = 10
# A commit closer than this to the window's newest entry replaces that entry's offset and
# lag instead of adding one (Burrow's min-distance): a consumer committing after every
# record does not push the whole window out within a second. The entry keeps its time, as
# Burrow's does: else a consumer auto-committing more often than this would never add an
# entry, and its window of one would look STOPPED as soon as it had lag.
MIN_DISTANCE_MS = 1_000


class Verdict(enum.IntEnum):
    """Ordered by severity; the group's verdict is the worst of its partitions'."""

    OK = 0
    WARNING = 1
    ERROR = 2
    STALLED = 3
    STOPPED = 4
    REWIND = 5

    @property
    def group_level(self) -> Verdict:
        return Verdict.ERROR if self >= Verdict.ERROR else self


@dataclass(frozen=True, slots=True)
class Commit:
    """One committed offset as the console saw it; ``lag`` is -1 while the log end is
    unknown."""

    at_ms: int
    offset: int
    lag: int


class CommitWindow:
    """The last ``WINDOW`` commits of one partition by one group."""

    __slots__ = ("commits",)

    def __init__(self, commits: Iterable[Commit] = ()) -> None:
        self.commits: deque[Commit] = deque(commits, maxlen=WINDOW)

    def add(self, at_ms: int, offset: int, lag: int) -> None:
        if self.commits and at_ms - self.commits[-1].at_ms < MIN_DISTANCE_MS:
            at_ms = self.commits.pop().at_ms
        self.commits.append(Commit(at_ms, offset, lag))

    def __len__(self) -> int:
        return len(self.commits)


@dataclass(frozen=True, slots=True)
class PartitionVerdict:
    verdict: Verdict
    lag: int
    complete: float  # how full the window is (1.0: WINDOW commits seen)
    seconds_to_clear: float | None  # None: not clearing at the window's pace (or no lag)


def partition_verdict(commits: Sequence[Commit], current_lag: int, now_ms: int) -> Verdict:
    """The verdict of one partition: ``commits`` oldest first, ``current_lag`` the lag
    now (log end now minus the newest committed offset; -1 unknown)."""
    if not commits or current_lag <= 0:
        return Verdict.OK
    # Commits replayed from before the console started have no known lag (-1): they
    # count for the offsets and the times, not for the lag rules.
    lags = [c.lag for c in commits if c.lag >= 0]
    if 0 in lags:
        return Verdict.OK
    offsets = [c.offset for c in commits]
    if any(b < a for a, b in pairwise(offsets)):
        return Verdict.REWIND
    first, last = commits[0].at_ms, commits[-1].at_ms
    if now_ms - last > last - first:
        return Verdict.STOPPED
    if len(set(offsets)) == 1:
        return Verdict.STALLED
    if len(lags) >= 2 and all(b >= a for a, b in pairwise(lags)):
        return Verdict.WARNING
    return Verdict.OK


def time_to_clear(commits: Sequence[Commit], current_lag: int) -> float | None:
    """Seconds until the lag reaches 0 at the window's pace; 0.0 without lag, None when
    the lag is not shrinking (or the window is too short to tell)."""
    if current_lag <= 0:
        return 0.0
    known = [c for c in commits if c.lag >= 0]
    if len(known) < 2:
        return None
    span_s = (known[-1].at_ms - known[0].at_ms) / 1000
    shrunk = known[0].lag - known[-1].lag
    if span_s <= 0 or shrunk <= 0:
        return None
    return current_lag / (shrunk / span_s)


def judge_partition(window: CommitWindow, current_lag: int, now_ms: int) -> PartitionVerdict:
    commits = list(window.commits)
    return PartitionVerdict(
        partition_verdict(commits, current_lag, now_ms),
        max(current_lag, 0),
        len(commits) / WINDOW,
        time_to_clear(commits, current_lag),
    )


@dataclass(frozen=True, slots=True)
class GroupVerdict:
    verdict: Verdict  # OK, WARNING or ERROR
    worst: Verdict  # the worst partition's own verdict (STALLED, STOPPED, ...)
    counts: dict[str, int]  # partitions per verdict name, for those not OK
    seconds_to_clear: float | None  # the slowest partition's; None if one is not clearing

    @property
    def label(self) -> str:
        """ "OK", "WARNING", or "ERROR (STALLED)": readable without colour."""
        if self.worst > Verdict.ERROR:
            return f"{self.verdict.name} ({self.worst.name})"
        return self.verdict.name


def judge_group(partitions: Iterable[PartitionVerdict]) -> GroupVerdict:
    worst = Verdict.OK
    counts: dict[str, int] = {}
    clear: float | None = 0.0
    for p in partitions:
        worst = max(worst, p.verdict)
        if p.verdict is not Verdict.OK:
            counts[p.verdict.name] = counts.get(p.verdict.name, 0) + 1
        if p.lag > 0:
            clear = (
                None
                if clear is None or p.seconds_to_clear is None
                else max(clear, p.seconds_to_clear)
            )
    return GroupVerdict(worst.group_level, worst, counts, clear)
