"""The leader epoch cache of one partition (Kafka's ``LeaderEpochFileCache``).

An ordered list of ``(epoch, start offset)``: the first offset of the log written
in each leader epoch, both columns strictly increasing. A follower whose log
may have diverged from a new leader's asks the leader for the end offset of its
own latest epoch (OffsetsForLeaderEpoch) and truncates there; the leader answers
from this cache (``end_offset_for``).

Persisted as Kafka's ``leader-epoch-checkpoint`` text file in the partition
directory: a version line ``0``, a count line, then one ``epoch start_offset``
line per entry. Every change rewrites it whole through a temp file, fsync,
rename and a directory fsync, so a crash leaves the old or the new file. The
partition log writes it *before* the data it describes, so after a crash the
file may hold entries past the log end (dropped on load, ``clamp``) but never
lacks one for data that survived; a missing or unreadable file is rebuilt from
the batch headers.

Not thread-safe on its own: the partition log's lock serializes access.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise
from pathlib import Path

from odradek.log.index import fsync_dir, write_file_atomic

__all__ = [
    "LEADER_EPOCH_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "LeaderEpochCache",
    "end_offset_for",
]

log = logging.getLogger(__name__)

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_OFFSET = -1  # OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET
_VERSION = 0


class LeaderEpochCache:
    """``(epoch, start offset)`` entries, strictly increasing in both; see the module doc."""

    __slots__ = ("entries", "path")

    def __init__(self, path: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self.path = path
        self.entries: list[tuple[int, int]] = list(entries or [])

    # ------------------------------------------------------------------ file

    @staticmethod
    def read_file(path: Path) -> list[tuple[int, int]] | None:
        """The entries of a checkpoint file; None if it is missing or not a valid one."""
        try:
            lines = path.read_text(encoding="ascii").splitlines()
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        try:
            if len(lines) < 2 or int(lines[0]) != _VERSION:
                return None
            count = int(lines[1])
            body = lines[2:]
            if count < 0 or len(body) != count:
                return None
            entries: list[tuple[int, int]] = []
            for line in body:
                epoch_text, offset_text = line.split()
                entries.append((int(epoch_text), int(offset_text)))
        except ValueError:
            return None
        if not _strictly_increasing(entries) or any(e < 0 or o < 0 for e, o in entries):
            return None
        return entries

    def write(self) -> None:
        """Replace the file with the current entries, durably (fsync, rename, dir fsync)."""
        lines = [str(_VERSION), str(len(self.entries))]
        lines.extend(f"{epoch} {offset}" for epoch, offset in self.entries)
        write_file_atomic(self.path, ("\n".join(lines) + "\n").encode("ascii"), fsync=True)
        fsync_dir(self.path.parent)

    # ------------------------------------------------------------------ queries

    @property
    def latest_epoch(self) -> int:
        """The newest epoch with an entry, or -1 (UNDEFINED) for an empty cache."""
        return self.entries[-1][0] if self.entries else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as Kafka answers OffsetsForLeaderEpoch (``end_offset_for``)."""
        return end_offset_for(self.entries, requested_epoch, log_end_offset)

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch the record at ``offset`` was written in per the cache, or -1."""
        i = bisect_right([o for _, o in self.entries], offset)
        return self.entries[i - 1][0] if i else UNDEFINED_EPOCH

    # ------------------------------------------------------------------ changes

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (in memory); True if it changed.

        Kafka's rules: nothing changes for the latest epoch at or after its start. A
        newer epoch is appended. Anything else (the latest epoch starting earlier, an
        older epoch) first removes the entries it contradicts (epoch >= it or start
        >= its start), logging a warning when that drops real history, so both
        columns stay strictly increasing.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self.entries:
            latest_epoch, latest_start = self.entries[-1]
            if epoch == latest_epoch and start_offset >= latest_start:
                return False
            if epoch < latest_epoch or start_offset <= latest_start:
                removed = []
                while self.entries and (
                    self.entries[-1][0] >= epoch or self.entries[-1][1] >= start_offset
                ):
                    removed.append(self.entries.pop())
                if len(removed) > 1 or (removed and removed[0][1] != start_offset):
                    log.warning(
                        "%s: epoch entry (%d, %d) replaces conflicting entries %s",
                        self.path,
                        epoch,
                        start_offset,
                        removed[::-1],
                    )
        self.entries.append((epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or after ``end_offset`` (the log lost its tail)."""
        n = len(self.entries)
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()
        return len(self.entries) != n

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: entries starting at or before it
        collapse into one, the newest of them, moved to start there (Kafka's rule)."""
        i = bisect_right([o for _, o in self.entries], start_offset)
        if i == 0 or (i == 1 and self.entries[0][1] == start_offset):
            return False  # nothing starts before it, or only the first entry, exactly there
        self.entries[:i] = [(self.entries[i - 1][0], start_offset)]
        return True

    def clamp(self, start_offset: int, end_offset: int) -> bool:
        """Fit the entries to a log holding [start_offset, end_offset) (used on load)."""
        changed = self.truncate_from_end(end_offset)
        return self.truncate_from_start(start_offset) or changed

    def clear(self) -> bool:
        changed = bool(self.entries)
        self.entries.clear()
        return changed

    def delete_file(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            return
        fsync_dir(self.path.parent)


def end_offset_for(
    entries: Sequence[tuple[int, int]], requested_epoch: int, log_end_offset: int
) -> tuple[int, int]:
    """(epoch, end offset) of ``requested_epoch`` in an epoch cache holding ``entries``,
    as Kafka's ``LeaderEpochFileCache.endOffsetFor``: a leader answers
    OffsetsForLeaderEpoch with it, a follower asks its own cache the same (KIP-279).

    * the latest epoch: (it, the log end offset);
    * an epoch with a newer one after it: (the largest known epoch <= requested,
      the start offset of the first epoch > requested);
    * below every known epoch: (requested, the first entry's start offset): the
      data of older epochs is gone, the follower can start from there (Kafka
      since 2.x; older releases answered UNDEFINED);
    * UNDEFINED requested, newer than every known epoch, or an empty cache:
      (UNDEFINED_EPOCH, UNDEFINED_OFFSET).
    """
    if requested_epoch == UNDEFINED_EPOCH or not entries:
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    if requested_epoch == entries[-1][0]:
        return requested_epoch, log_end_offset
    i = bisect_right(entries, (requested_epoch, 2**63))  # first epoch > requested
    if i == len(entries):
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET
    higher_start = entries[i][1]
    if i == 0:
        return requested_epoch, higher_start
    return entries[i - 1][0], higher_start


def _strictly_increasing(entries: list[tuple[int, int]]) -> bool:
    return all(a[0] < b[0] and a[1] < b[1] for a, b in pairwise(entries))
