"""Where the security state lives: small JSON files in ``<data dir>/security/``, each
replaced atomically (write, fsync, rename, fsync the directory) like the topic
metadata, so a crash leaves the old or the new version and never a torn file.

A change asked for by a request (CreateAcls, DeleteAcls, AlterUserScramCredentials)
goes through its store's ``SaveQueue``: the change and its save run in a worker thread,
so the fsyncs never block the event loop, and the queue runs the changes one at a time
in the order they were asked for, so two saves never interleave and an older state
never replaces a newer one on disk. A store makes a new state visible only after the
file holding it is durable (the request is answered after that too), as the save on
the event loop did before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

from odradek.broker.topic_store import write_json_atomically

SECURITY_DIR = "security"

T = TypeVar("T")


class SaveQueue:
    """Runs one store's changes in a worker thread, one at a time, in arrival order."""

    def __init__(self) -> None:
        self._turn = asyncio.Lock()  # FIFO: waiters get it in the order they asked

    async def run(self, change: Callable[[], T]) -> T:
        async with self._turn:
            return await asyncio.to_thread(change)


__all__ = ["SECURITY_DIR", "SaveQueue", "write_json_atomically"]
