"""Receive buffers that connections let go of, kept for reuse by the connections of one
event loop.

A fresh `bytearray` is zero-filled when it is made: for a Produce request of a few
hundred KB that `memset` is a few percent of the broker's CPU, and it touches memory
that is cold in the caches. A buffer a connection moved on from (or let go of while
idle) goes to the pool; the next connection that needs one of about its size takes it,
so a steady stream of requests is received into the same few buffers.

A buffer is taken again only when nothing views it any more: payloads handed out of it
are read-only `memoryview`s, and while any of them (or any view of the connection's)
is alive, CPython's reference count of the buffer is above what the pool itself holds.
So a payload a handler still keeps is never overwritten; its buffer just waits (or is
dropped from the pool, and freed with the last view).

The pool is bounded (`max_bytes`): what does not fit is dropped, as before. Anonymous
memory maps (frames of `connection.MAPPED_BYTES` or more) are not kept: their pages go
back to the kernel when they are freed.
"""

from __future__ import annotations

import sys

__all__ = ["BufferPool"]

# sys.getrefcount of a pooled buffer that nothing else references: the pool's list,
# the local name in `take`, and getrefcount's own argument.
_UNVIEWED_REFCOUNT = 3
# A buffer is handed out for a need at most this many times smaller than it, so a
# small frame does not pin a large buffer.
_MAX_OVERSIZE = 4


class BufferPool:
    """Retired receive buffers (`bytearray`s), newest last; at most `max_bytes` of them."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._free: list[bytearray] = []
        self._bytes = 0
        self.reused = 0  # buffers handed out again (what the pool saved)
        self.made = 0  # buffers made because none was free

    def take(self, capacity: int) -> bytearray:
        """A buffer of at least `capacity` bytes, of old contents: one that no view of it
        outlived, else a new one. The newest fitting one first (warmest in the caches)."""
        free = self._free
        for i in range(len(free) - 1, -1, -1):
            buffer = free[i]
            if (
                capacity <= len(buffer) <= _MAX_OVERSIZE * capacity
                and sys.getrefcount(buffer) == _UNVIEWED_REFCOUNT
            ):
                del free[i]
                self._bytes -= len(buffer)
                self.reused += 1
                return buffer
        self.made += 1
        return bytearray(capacity)

    def give(self, buffer: object) -> None:
        """Keep a buffer a connection moved on from, if it is a bytearray and there is
        room; the oldest kept ones make room (they are freed with their last view)."""
        if not isinstance(buffer, bytearray) or len(buffer) > self.max_bytes:
            return
        free = self._free
        while free and self._bytes + len(buffer) > self.max_bytes:
            self._bytes -= len(free.pop(0))
        free.append(buffer)
        self._bytes += len(buffer)

    @property
    def held_bytes(self) -> int:
        return self._bytes
