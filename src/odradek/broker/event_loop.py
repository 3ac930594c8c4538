"""Which event loop the broker runs on: asyncio's own, or uvloop when asked for.

`event.loop` (Odradek's own setting) says `asyncio` (the default), `uvloop`
or `auto` (uvloop if it imports, else asyncio's). uvloop comes with
`pip install 'odradek[uvloop]'`. It is not the default because it does not
pay: measured with bench/broker_cpu.py (docs/benchmarks.md, issue 23), with
both loops reading straight into the connection's buffers
(`broker/connection.py` is a BufferedProtocol), it was 0.88-1.09x asyncio's
loop's CPU per GB, not lower in every cell.

The environment variable `ODRADEK_EVENT_LOOP`, when set, takes the place of
the default (a `--set event.loop=...` still wins): how the test suite runs all
its brokers on uvloop (`ODRADEK_EVENT_LOOP=uvloop pytest ...`).
The broker needs nothing of uvloop that asyncio lacks, and uses nothing
uvloop lacks except `loop.sendfile`, for which `broker/sending.py` has a
fallback.
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable
from types import ModuleType

from odradek.extras import MissingExtra

__all__ = [
    "EVENT_LOOPS",
    "EVENT_LOOP_ENV",
    "EventLoopUnavailable",
    "chosen_event_loop",
    "event_loop_factory",
]

EVENT_LOOPS = ("asyncio", "uvloop", "auto")
EVENT_LOOP_ENV = "ODRADEK_EVENT_LOOP"


class EventLoopUnavailable(Exception):
    """A bad ODRADEK_EVENT_LOOP."""


def _uvloop() -> ModuleType | None:
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None


def chosen_event_loop(setting: str, *, explicit: bool = True) -> str:
    """`asyncio` or `uvloop`: the loop `event.loop` asks for here. When the setting
    was left at its default (`explicit=False`), ODRADEK_EVENT_LOOP replaces it."""
    if not explicit and os.environ.get(EVENT_LOOP_ENV):
        setting = os.environ[EVENT_LOOP_ENV]
        if setting not in EVENT_LOOPS:
            raise EventLoopUnavailable(
                f"{EVENT_LOOP_ENV}={setting}: must be one of {', '.join(EVENT_LOOPS)}"
            )
    if setting == "asyncio":
        return "asyncio"
    if _uvloop() is not None:
        return "uvloop"
    if setting == "uvloop":
        raise MissingExtra("event.loop=uvloop", "uvloop", "uvloop")
    return "asyncio"


def event_loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """What creates a loop of the kind `chosen_event_loop` named."""
    uvloop = _uvloop() if name == "uvloop" else None
    if uvloop is None:
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
