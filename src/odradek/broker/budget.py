"""A broker-wide budget of bytes held for requests and responses in progress.

A connection acquires the size of its next request frame before reading it
(waiting, in arrival order, while the budget is spent) and charges its response
until the peer has taken it. Memory held by connections therefore stays near
the budget whatever peers send or fail to read: a peer that does not read holds
its share only until the send timeout closes it. One request larger than the
whole budget is still served, alone, so no valid request can wait forever.
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
        """Take `size` bytes, waiting behind earlier waiters while they do not fit."""
        if not self._waiters and self._fits(size):
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
        while self._waiters and self._fits(self._waiters[0][0]):
            size, waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self.used += size
            waiter.set_result(None)

    @property
    def waiting(self) -> int:
        return len(self._waiters)
