"""An event loop on a manual clock, for the coordinator runtime's tests.

Its clock moves only when every task waits, and then straight to the next due
timer: no real sleeping and no flakiness under load, so fifty seconds of session
timeouts take milliseconds. If nothing is ready and no timer is scheduled, only
a worker thread can still wake the loop: it waits for one for real, a few seconds
at most, then raises, so a broken test fails rather than hangs.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any

WORKER_WAIT_S = 10.0


class ManualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self.now_s = 10_000.0
        self._selector = _JumpingSelector(self._selector, self)

    def time(self) -> float:
        return self.now_s


class _JumpingSelector:
    def __init__(self, inner: selectors.BaseSelector, loop: ManualClockLoop) -> None:
        self._inner = inner
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = self._inner.select(0)
        if ready:
            return ready
        if timeout is None:
            # Only a worker thread (a load reading its partition) can still wake the loop.
            ready = self._inner.select(WORKER_WAIT_S)
            if not ready:
                raise RuntimeError("deadlock: no task can run and no timer is scheduled")
            return ready
        self._loop.now_s += timeout
        return self._inner.select(0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
