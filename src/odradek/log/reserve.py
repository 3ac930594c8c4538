"""Disk blocks reserved ahead of a busy segment's appends.

A buffered append to ext4 (and other delayed-allocation filesystems) reserves space
page by page as it copies: for a Produce request of a few hundred KB that bookkeeping
(`ext4_da_write_begin`, `ext4_da_get_block_prep`) cost more kernel time than the copy
itself. Blocks allocated beforehand with `fallocate(FALLOC_FL_KEEP_SIZE)` skip it: the
appends into them cost about a quarter less (bench/log_append.py's figures are in
docs/benchmarks.md), and the extents are allocated a chunk at a time instead of
page by page at writeback.

KEEP_SIZE leaves the file's size alone, so readers, recovery and retention see only
what was appended; the reservation shows in `du`, not in `ls -l`. It is released
(`ftruncate` to the size, which frees blocks past the end) when the segment stops being
appended to: rolled, closed or truncated. After a crash an active segment may keep up
to one chunk reserved past its end until it is rolled or deleted.

Only Linux has `fallocate`; elsewhere, and on filesystems without it (EOPNOTSUPP), a
segment simply appends without reserving.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable

__all__ = ["RESERVE_BYTES", "release", "reserve"]

# How far ahead a busy segment's blocks are reserved, and how large a segment must be
# before it is (so idle and small partitions never hold a reservation).
RESERVE_BYTES = 4 << 20

_FALLOC_FL_KEEP_SIZE = 0x01


def _load_fallocate() -> Callable[[int, int, int, int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).fallocate
    except (OSError, AttributeError):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)
    function.restype = ctypes.c_int
    return function


_fallocate = _load_fallocate()


def reserve(fd: int, offset: int, length: int) -> bool:
    """Allocate the blocks of [offset, offset + length) of the file, its size unchanged.
    False when that is not possible (no fallocate, a filesystem without it, no space):
    the caller appends without a reservation."""
    if _fallocate is None or length <= 0:
        return False
    return _fallocate(fd, _FALLOC_FL_KEEP_SIZE, offset, length) == 0


def release(fd: int, size: int) -> None:
    """Free the blocks reserved past `size`, the file's size (truncating to it does)."""
    os.ftruncate(fd, size)
