"""Wake-ups for long-polling Fetch requests when data is appended."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

PartitionKey = tuple[str, int]


class AppendWaiters:
    """Fetches park a future on the partitions they read; an append resolves it."""

    def __init__(self) -> None:
        self._waiting: dict[PartitionKey, set[asyncio.Future[None]]] = defaultdict(set)

    def notify(self, key: PartitionKey) -> None:
        futures = self._waiting.pop(key, None)
        if futures:
            for future in futures:
                if not future.done():
                    future.set_result(None)

    async def wait(self, keys: Iterable[PartitionKey], timeout_s: float) -> None:
        """Return when any of `keys` gets an append, or after `timeout_s`."""
        if timeout_s <= 0:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        keys = list(keys)
        for key in keys:
            self._waiting[key].add(future)
        try:
            async with asyncio.timeout(timeout_s):
                await future
        except TimeoutError:
            pass
        finally:
            for key in keys:
                waiting = self._waiting.get(key)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._waiting[key]

    def wake_all(self) -> None:
        for key in list(self._waiting):
            self.notify(key)
