"""Which event loop the broker runs on: uvloop where it is installed, else asyncio's own.

`event.loop` (Odradek's own setting) says `auto` (the default), `asyncio` or
`uvloop`. `auto` takes uvloop when it imports, unless the environment variable
`ODRADEK_NO_UVLOOP` is set (how the test suite runs its brokers on asyncio's
loop). uvloop is a dependency of Odradek wherever it publishes wheels (not on
Windows, not on PyPy); everywhere else `auto` is asyncio's loop.
The broker needs nothing of uvloop that asyncio lacks, and uses nothing
uvloop lacks except `loop.sendfile`, for which `broker/sending.py` has a
fallback (docs/benchmarks.md, issue 23: the CPU each loop costs).
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable
from types import ModuleType

__all__ = [
    "EVENT_LOOPS",
    "NO_UVLOOP_ENV",
    "EventLoopUnavailable",
    "chosen_event_loop",
    "event_loop_factory",
]

EVENT_LOOPS = ("auto", "asyncio", "uvloop")
NO_UVLOOP_ENV = "ODRADEK_NO_UVLOOP"


class EventLoopUnavailable(Exception):
    """`event.loop=uvloop` where uvloop does not import."""


def _uvloop() -> ModuleType | None:
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None


def chosen_event_loop(setting: str) -> str:
    """`asyncio` or `uvloop`: the loop the `event.loop` setting asks for, here."""
    if setting == "asyncio":
        return "asyncio"
    if setting == "uvloop":
        if _uvloop() is None:
            raise EventLoopUnavailable(
                "event.loop=uvloop but uvloop is not installed (pip install uvloop),"
                " or use event.loop=auto"
            )
        return "uvloop"
    if os.environ.get(NO_UVLOOP_ENV) or _uvloop() is None:
        return "asyncio"
    return "uvloop"


def event_loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """What creates a loop of the kind `chosen_event_loop` named."""
    uvloop = _uvloop() if name == "uvloop" else None
    if uvloop is None:
        return asyncio.new_event_loop
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory
