"""The request memory budget (queued.max.request.bytes) never deadlocks and never leaks.

Issue 19 item 7: a waiter cancelled after `_wake` had dropped its entry raised
ValueError, its claim was never given back, and the broker never answered
anyone again.
"""

from __future__ import annotations

import asyncio
import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.budget import ByteBudget


async def _settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


def test_a_waiter_cancelled_as_the_budget_frees_gives_nothing_back_twice() -> None:
    """The issue's trace: the waiter is cancelled, then a release runs `_wake` before it."""

    async def main() -> None:
        budget = ByteBudget(10)
        await budget.acquire(10)
        waiter = asyncio.create_task(budget.acquire(262144))
        await _settle()
        assert budget.waiting == 1
        waiter.cancel()  # its future is cancelled now; its except clause runs later
        budget.release(10)  # `_wake` drops the cancelled entry first
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        assert budget.used == 0 and budget.waiting == 0
        await asyncio.wait_for(budget.acquire(4), 1)  # the next one is served at once

    asyncio.run(main())


def test_a_waiter_granted_as_it_is_cancelled_gives_its_grant_back() -> None:
    async def main() -> None:
        budget = ByteBudget(10)
        await budget.acquire(10)
        waiter = asyncio.create_task(budget.acquire(8))
        after = asyncio.create_task(budget.acquire(8))
        await _settle()
        budget.release(10)  # grants `waiter`; `after` waits behind it
        waiter.cancel()  # before `waiter` resumed: its grant must pass on to `after`
        with contextlib.suppress(asyncio.CancelledError):
            await waiter
        await asyncio.wait_for(after, 1)
        assert budget.used == 8 and budget.waiting == 0
        budget.release(8)
        assert budget.used == 0

    asyncio.run(main())


def test_frames_are_admitted_while_the_budget_is_not_exhausted_in_arrival_order() -> None:
    """Kafka's non-strict pool: a frame fits while anything is left, so the pool may run
    over by one frame; the first to wait is the first served."""

    async def main() -> list[str]:
        budget = ByteBudget(10)
        assert budget.try_acquire(8)
        assert budget.try_acquire(8)  # 8 < 10: admitted, 16 held
        assert not budget.try_acquire(1)
        served: list[str] = []

        async def frame(name: str, size: int) -> None:
            await budget.acquire(size)
            served.append(name)

        big = asyncio.create_task(frame("big", 9))
        await _settle()
        small = asyncio.create_task(frame("small", 1))
        await _settle()
        budget.release(8)  # 8 held: `big` goes first, then the budget is exhausted again
        await _settle()
        assert served == ["big"] and budget.used == 17
        await big
        budget.release(8)
        budget.release(9)
        await asyncio.wait_for(small, 1)
        return served

    assert asyncio.run(main()) == ["big", "small"]


def test_charged_bytes_are_counted_but_never_wait() -> None:
    budget = ByteBudget(10)
    budget.charge(25)
    assert budget.used == 25 and not budget.try_acquire(1)
    budget.release(25)
    assert budget.try_acquire(1)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("acquire"), st.integers(1, 12)),
        st.tuples(st.just("charge"), st.integers(1, 12)),
        st.tuples(st.just("release"), st.integers(0, 20)),
        st.tuples(st.just("cancel"), st.integers(0, 20)),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(capacity=st.integers(1, 20), ops=OPS)
def test_no_sequence_of_frames_cancellations_and_releases_deadlocks_or_leaks(
    capacity: int, ops: list[tuple[str, int]]
) -> None:
    async def main() -> None:
        budget = ByteBudget(capacity)
        held: list[int] = []  # sizes granted and not yet released
        tasks: list[tuple[int, asyncio.Task[None]]] = []

        def collect() -> None:
            for size, task in list(tasks):
                if task.done():
                    tasks.remove((size, task))
                    if not task.cancelled():
                        held.append(size)

        for op, n in ops:
            if op == "acquire":
                tasks.append((n, asyncio.create_task(budget.acquire(n))))
            elif op == "charge":
                budget.charge(n)
                held.append(n)
            elif op == "release" and held:
                budget.release(held.pop(n % len(held)))
            elif op == "cancel" and tasks:
                tasks[n % len(tasks)][1].cancel()
            await _settle()
            collect()
            # Nobody waits while there is room.
            assert budget.waiting == 0 or budget.used >= capacity
            assert budget.used == sum(held)
        for _, task in tasks:
            task.cancel()
        await _settle()
        collect()
        for size in held:
            budget.release(size)
        assert budget.used == 0 and budget.waiting == 0

    asyncio.run(main())
