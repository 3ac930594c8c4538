"""Log a recurring failure once per interval, with a count of the ones left out.

A fault that repeats on every request or accept (a full disk, no file
descriptors left) must not flood the log: the first occurrence is logged, with
its traceback, and later ones only as a count when the interval has passed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

DEFAULT_INTERVAL_S = 10.0


class RateLimitedLog:
    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float = DEFAULT_INTERVAL_S,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def log(
        self, key: str, level: int, message: str, *args: object, exc_info: bool = False
    ) -> bool:
        """Log under `key` unless it was logged less than an interval ago; True if logged."""
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._last[key] = now
        skipped = self._suppressed.pop(key, 0)
        if skipped:
            message += f" ({skipped} more like this in the last %.0fs)"
            args = (*args, now - last if last is not None else 0.0)
        self.logger.log(level, message, *args, exc_info=exc_info)
        return True
