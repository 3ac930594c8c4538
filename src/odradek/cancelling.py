"""Ending background tasks on shutdown without waiting for good.

A task may swallow one cancel and go on (Python 3.11's ``asyncio.wait_for``
does when the awaited future completes at the moment of the cancel; a loop
around it then carries on), so a shutdown that awaits a cancelled task can hang.
`cancel_and_wait` cancels again whatever still runs after a while and gives up
after a few tries, naming what it left behind.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

log = logging.getLogger("odradek")

CANCEL_ATTEMPTS = 3
CANCEL_WAIT_S = 2.0


async def cancel_and_wait(
    tasks: Iterable[asyncio.Task[Any]],
    what: str,
    *,
    attempts: int = CANCEL_ATTEMPTS,
    wait_s: float = CANCEL_WAIT_S,
) -> list[asyncio.Task[Any]]:
    """Cancel `tasks` and wait until they end, cancelling again every `wait_s`, at most
    `attempts` times. The tasks still running then (logged as `what`) are returned."""
    pending = [task for task in tasks if not task.done()]
    for _ in range(attempts):
        if not pending:
            return []
        for task in pending:
            task.cancel()
        await asyncio.wait(pending, timeout=wait_s)
        pending = [task for task in pending if not task.done()]
    if pending:
        names = ", ".join(sorted(task.get_name() for task in pending))
        log.warning("%d %s did not end on shutdown; leaving them (%s)", len(pending), what, names)
    return pending
