"""Sparse offset and time indexes of one segment, held in memory and written to disk.

Lookups run on in-memory lists with ``bisect`` (O(log n)); the files
(``.index``: relative offset u32 + position u32; ``.timeindex``: timestamp i64 +
relative offset u32, both big endian as in Kafka) are written whole when a
segment is rolled and at clean shutdown, through a temp file and an atomic
rename. They are derived data: a missing or inconsistent file is rebuilt by
scanning the segment, so nothing needs to be written on every append.
"""

from __future__ import annotations

import operator
import os
import struct
import threading
from bisect import bisect_left, bisect_right
from itertools import islice
from pathlib import Path

__all__ = ["IndexCorruptError", "OffsetIndex", "TimeIndex", "write_file_atomic"]

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class IndexCorruptError(Exception):
    """An index file does not describe its segment; the caller rebuilds it."""


def write_file_atomic(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Write via a temp file + rename so readers see the old or the new file, never half.

    The temp name carries the thread id: two threads writing the same file (a
    worker finishing a roll, the cleaner) never share one.
    """
    tmp = path.with_name(f"{path.name}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def fsync_dir(path: Path) -> None:
    """Make file creations, deletions and renames in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class OffsetIndex:
    """Relative offset -> file position of a batch start, one entry per index interval."""

    __slots__ = ("positions", "rel_offsets")

    def __init__(self) -> None:
        self.rel_offsets: list[int] = []
        self.positions: list[int] = []

    def __len__(self) -> int:
        return len(self.rel_offsets)

    def append(self, rel_offset: int, position: int) -> None:
        if self.rel_offsets and (
            rel_offset <= self.rel_offsets[-1] or position <= self.positions[-1]
        ):
            return  # entries must increase in both columns; skipping keeps lookups correct
        self.rel_offsets.append(rel_offset)
        self.positions.append(position)

    def lookup(self, rel_offset: int) -> tuple[int, int]:
        """Largest entry with offset <= target, else (0, 0): where to start scanning."""
        i = bisect_right(self.rel_offsets, rel_offset) - 1
        if i < 0:
            return 0, 0
        return self.rel_offsets[i], self.positions[i]

    def floor_position(self, position: int) -> tuple[int, int] | None:
        """Largest entry whose position <= ``position`` (a known batch boundary), or None."""
        i = bisect_right(self.positions, position) - 1
        if i < 0:
            return None
        return self.rel_offsets[i], self.positions[i]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or beyond ``position`` (the log was cut there)."""
        i = bisect_left(self.positions, position)
        del self.rel_offsets[i:]
        del self.positions[i:]

    def to_bytes(self) -> bytes:
        flat: list[int] = []
        for r, p in zip(self.rel_offsets, self.positions, strict=True):
            flat.append(r)
            flat.append(p)
        return struct.pack(f">{len(flat)}I", *flat)

    @classmethod
    def from_bytes(cls, data: bytes, log_size: int) -> OffsetIndex:
        """Parse and sanity-check (monotonic, positions inside the log) or raise."""
        if len(data) % _OFFSET_ENTRY.size:
            raise IndexCorruptError(f"offset index size {len(data)} is not a multiple of 8")
        n = len(data) // _OFFSET_ENTRY.size
        flat = struct.unpack(f">{2 * n}I", data)
        idx = cls()
        idx.rel_offsets = list(flat[0::2])
        idx.positions = list(flat[1::2])
        if not (_increasing(idx.rel_offsets) and _increasing(idx.positions)):
            raise IndexCorruptError("offset index entries are not increasing")
        if n and idx.positions[-1] >= log_size:
            raise IndexCorruptError(
                f"offset index points at {idx.positions[-1]}, past the log end {log_size}"
            )
        return idx


class TimeIndex:
    """Max timestamp so far -> relative offset of the batch that reached it (monotonic)."""

    __slots__ = ("rel_offsets", "timestamps")

    def __init__(self) -> None:
        self.timestamps: list[int] = []
        self.rel_offsets: list[int] = []

    def __len__(self) -> int:
        return len(self.timestamps)

    def maybe_append(self, timestamp: int, rel_offset: int) -> None:
        """Add an entry only if the timestamp grows, so lookups can bisect."""
        if timestamp < 0:
            return
        if self.timestamps and (
            timestamp <= self.timestamps[-1] or rel_offset < self.rel_offsets[-1]
        ):
            return
        self.timestamps.append(timestamp)
        self.rel_offsets.append(rel_offset)

    def last(self) -> tuple[int, int] | None:
        if not self.timestamps:
            return None
        return self.timestamps[-1], self.rel_offsets[-1]

    def lookup_before(self, timestamp: int) -> int | None:
        """Relative offset of the last entry with timestamp < target, or None.

        Every batch up to that entry has max timestamp below the target, so a
        search for the first batch reaching the target may start there.
        """
        i = bisect_left(self.timestamps, timestamp) - 1
        if i < 0:
            return None
        return self.rel_offsets[i]

    def truncate_to_rel_offset(self, rel_offset: int) -> None:
        """Drop entries pointing at or beyond ``rel_offset``."""
        i = bisect_left(self.rel_offsets, rel_offset)
        del self.timestamps[i:]
        del self.rel_offsets[i:]

    def to_bytes(self) -> bytes:
        flat = [v for pair in zip(self.timestamps, self.rel_offsets, strict=True) for v in pair]
        return struct.pack(">" + "qI" * len(self.timestamps), *flat)

    @classmethod
    def from_bytes(cls, data: bytes) -> TimeIndex:
        if len(data) % _TIME_ENTRY.size:
            raise IndexCorruptError(f"time index size {len(data)} is not a multiple of 12")
        n = len(data) // _TIME_ENTRY.size
        flat = struct.unpack(">" + "qI" * n, data)
        idx = cls()
        idx.timestamps = list(flat[0::2])
        idx.rel_offsets = list(flat[1::2])
        if not (
            _increasing(idx.timestamps)
            and all(map(operator.le, idx.rel_offsets, islice(idx.rel_offsets, 1, None)))
        ):
            raise IndexCorruptError("time index is not monotonic")
        return idx


def _increasing(values: list[int]) -> bool:
    """Strictly increasing, checked at C speed (indexes of big segments are long)."""
    return all(map(operator.lt, values, islice(values, 1, None)))
