"""A broker-wide budget of bytes held for requests and responses in progress.

A connection acquires each part of a request frame before reading it (so a
peer that announces a large frame and stalls holds only what it has sent) and
charges its response until the peer has taken it. Memory held by connections
therefore stays near the budget whatever peers send or fail to read: a peer
that does not read holds its share only until the send timeout closes it.

Waiters are granted as soon as their share fits, not strictly in order, so a
large frame waiting for room does not hold up small requests behind it; one
request larger than the whole budget is still served once the budget is free.
"""

from __future__ import annotations

import asyncio
from collections import deque


class ByteBudget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def _fits(self, size: int) -> bool:
        return self.used == 0 or self.used + size <= self.capacity

    async def acquire(self, size: int) -> None:
        """Take `size` bytes, waiting while they do not fit."""
        if self._fits(size):
            self.used += size
            return
        waiter = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted just as we were cancelled: give it back
            else:
                self._waiters.remove(entry)
                self._wake()
            raise

    def charge(self, size: int) -> None:
        """Account for bytes already held (a response being sent); never waits."""
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        self._wake()

    def _wake(self) -> None:
        still_waiting: deque[tuple[int, asyncio.Future[None]]] = deque()
        for size, waiter in self._waiters:
            if waiter.done():
                continue
            if self._fits(size):
                self.used += size
                waiter.set_result(None)
            else:
                still_waiting.append((size, waiter))
        self._waiters = still_waiting

    @property
    def waiting(self) -> int:
        return len(self._waiters)
