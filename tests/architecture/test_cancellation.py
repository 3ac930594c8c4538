"""Shutdown never waits for good on a task that swallowed a cancel.

Python 3.11's ``asyncio.wait_for`` returns the result instead of raising when the
awaited future completes at the moment the task is cancelled; a loop around it
then carries on, and whoever awaits the cancelled task waits for good (a SIGTERMed
cluster broker's replica fetcher did: the broker never exited). So ``src`` uses
``asyncio.timeout`` instead, and shutdown goes through `cancel_and_wait`, which
cancels again and gives up after a few tries.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import logging
import sys
from pathlib import Path

import pytest

import odradek
from odradek.cancelling import cancel_and_wait

ROOT = Path(odradek.__file__).parent


def test_no_module_uses_asyncio_wait_for() -> None:
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "wait_for"
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_wait_for_swallows_a_cancel_that_meets_its_result() -> None:
    """Why the rule above: the cancel and the result in one loop step, and the task
    goes on (asyncio.timeout raises CancelledError in the same case)."""

    async def scenario(use_timeout: bool) -> bool:
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        carried_on = False

        async def waiter() -> None:
            nonlocal carried_on
            if use_timeout:
                async with asyncio.timeout(5):
                    await ready
            else:
                await asyncio.wait_for(ready, 5)  # the behaviour under test
            carried_on = True

        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)  # the waiter waits now
        ready.set_result(None)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return carried_on

    if sys.version_info < (3, 12):
        assert asyncio.run(scenario(use_timeout=False)) is True
    assert asyncio.run(scenario(use_timeout=True)) is False


def test_a_task_that_swallowed_one_cancel_is_cancelled_again() -> None:
    async def scenario() -> tuple[list[asyncio.Task[None]], int]:
        cancels = 0

        async def swallows_once() -> None:
            nonlocal cancels
            while True:
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    cancels += 1
                    if cancels > 1:
                        raise

        task = asyncio.create_task(swallows_once())
        await asyncio.sleep(0)
        left = await cancel_and_wait([task], "test tasks", wait_s=0.05)
        return left, cancels

    left, cancels = asyncio.run(scenario())
    assert left == []
    assert cancels == 2


def test_a_task_that_never_ends_is_left_and_named(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> tuple[int, bool]:
        release = asyncio.Event()

        async def stubborn() -> None:
            while not release.is_set():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(60)

        task = asyncio.create_task(stubborn(), name="stubborn-one")
        await asyncio.sleep(0)
        left = await cancel_and_wait([task], "test tasks", attempts=2, wait_s=0.05)
        release.set()
        task.cancel()  # it ends now that it may
        await asyncio.gather(task, return_exceptions=True)
        return len(left), left[0] is task

    with caplog.at_level(logging.WARNING, logger="odradek"):
        assert asyncio.run(scenario()) == (1, True)
    assert "1 test tasks did not end on shutdown" in caplog.text
    assert "stubborn-one" in caplog.text
