"""The broker's request memory: Kafka's `queued.max.request.bytes` memory pool.

Kafka (its Selector with a SimpleMemoryPool) reserves a request frame's whole
size as soon as the frame's 4-byte size has arrived, before reading the rest,
and mutes the connection (reads nothing more from it) while the pool is
exhausted. Reserving whole frames is what keeps this free of deadlock: a frame
that holds memory can finish with what it holds and then gives it back, and a
frame that waits holds nothing. Like Kafka's pool (created non-strict by its
SocketServer), a frame is admitted whenever the pool is not exhausted
(`used < capacity`), so the pool may run over by one frame; and frames are
admitted in the order they asked, so a large one is never overtaken forever.
Kafka requires `queued.max.request.bytes >= socket.request.max.bytes`, so no
single frame is larger than the pool (`BrokerConfig.check` does the same).

`charge` counts bytes that are held without waiting: Odradek counts the
responses being sent, and the small frames the server never makes wait
(`server.SMALL_FRAME_BYTES`, docs/operations.md "Limits").

A waiter that is cancelled (its connection closed, timed out, or the broker
stops) holds nothing afterwards, whenever the cancellation lands: before its
turn it leaves the queue; granted just as it was cancelled, it gives the grant
back and wakes the next waiter.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class ByteBudget:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        # Futures of the frames waiting, in arrival order. Invariant (after every
        # method returns): a live waiter exists only while used >= capacity.
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    def try_acquire(self, size: int) -> bool:
        """Take `size` bytes if the budget admits a frame now (and nobody waits before it)."""
        self._wake()  # a no-op while the invariant holds; restores it if it ever did not
        if self._waiters or self.used >= self.capacity:
            return False
        self.used += size
        return True

    async def acquire(self, size: int) -> None:
        """Take `size` bytes, waiting in arrival order while the budget is exhausted."""
        if self.try_acquire(size):
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
                with contextlib.suppress(ValueError):  # `_wake` may have dropped it already
                    self._waiters.remove(entry)
                self._wake()
            raise

    def charge(self, size: int) -> None:
        """Account for bytes held without waiting (a response, a small frame)."""
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.used < self.capacity:
            size, waiter = self._waiters.popleft()
            if waiter.done():
                continue  # cancelled while waiting
            self.used += size
            waiter.set_result(None)

    @property
    def waiting(self) -> int:
        """Frames waiting for room."""
        return sum(1 for _, waiter in self._waiters if not waiter.done())
