"""The broker's connection protocol: frames cut out of the chunks as they arrived, with
at most one copy; reading paused beyond the read-ahead unless a frame is admitted; the
peer's end seen by whoever waits; deadlines that end their block with TimeoutError as
asyncio.timeout does (on a manual clock)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.broker.connection import Connection

from .manual_loop import ManualClockLoop


class FakeTransport(asyncio.Transport):
    """Records what the protocol asks of its transport."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = True
        self.pauses = 0
        self.written: list[bytes] = []

    def pause_reading(self) -> None:
        assert self.reading
        self.reading = False
        self.pauses += 1

    def resume_reading(self) -> None:
        assert not self.reading
        self.reading = True

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def is_closing(self) -> bool:
        return False


def frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


def connected(read_ahead: int = 64) -> tuple[Connection, FakeTransport]:
    loop = asyncio.new_event_loop()
    connection = Connection(loop, read_ahead)
    transport = FakeTransport()
    connection.connection_made(transport)
    return connection, transport


def test_a_frame_within_one_chunk_is_one_slice_and_one_that_is_a_chunk_is_not_copied() -> None:
    connection, _ = connected()
    connection.data_received(frame(b"first") + frame(b"second")[:3])
    assert connection.peek_size() == 5
    assert connection.take_frame(5) == b"first"
    payload = b"x" * 40
    rest = frame(b"second")[3:] + frame(payload)[:4]
    connection.data_received(rest)
    assert connection.peek_size() == 6  # the size spans two chunks
    assert connection.take_frame(6) == b"second"
    connection.data_received(payload)
    assert connection.take_frame(40) is payload  # the chunk is the payload: no copy
    assert connection.buffered == 0


@given(
    payloads=st.lists(st.binary(max_size=300), min_size=1, max_size=8),
    cuts=st.lists(st.integers(min_value=1, max_value=97), min_size=1, max_size=30),
)
def test_frames_come_out_whole_and_in_order_however_the_bytes_are_cut(
    payloads: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(frame(p) for p in payloads)
    connection, _ = connected(read_ahead=1 << 20)
    pos = 0
    cut = 0
    taken: list[bytes] = []
    while pos < len(stream):
        step = cuts[cut % len(cuts)]
        cut += 1
        connection.data_received(stream[pos : pos + step])
        pos += step
        while connection.buffered >= 4 and connection.buffered >= 4 + connection.peek_size():
            size = connection.peek_size()
            if len(taken) % 2:
                taken.append(b"".join(connection.take_frame_parts(size)))
            else:
                taken.append(connection.take_frame(size))
    assert taken == payloads
    assert connection.buffered == 0


def test_reading_pauses_beyond_the_read_ahead_unless_the_frame_is_admitted() -> None:
    connection, transport = connected(read_ahead=100)
    large = bytes(500)
    connection.data_received(frame(large)[:150])
    assert transport.reading  # up to twice the read-ahead is read
    connection.data_received(frame(large)[150:250])
    assert not transport.reading  # the frame is not admitted (it waits for memory): muted
    connection.admit(4 + len(large))
    assert transport.reading  # admitted: read in full
    connection.data_received(frame(large)[250:] + bytes(150))  # and what follows it
    assert transport.reading
    assert connection.take_frame(len(large)) == large
    assert transport.reading
    connection.data_received(bytes(100))  # 250 beyond any admitted frame
    assert not transport.reading
    assert transport.pauses == 2


def test_the_peers_end_fails_a_wait_and_a_reset_fails_it_with_its_error() -> None:
    async def main() -> None:
        connection = Connection(asyncio.get_running_loop(), 64)
        connection.connection_made(FakeTransport())
        waiting = asyncio.create_task(connection.wait_for(8))
        await asyncio.sleep(0)
        connection.data_received(b"abc")
        await asyncio.sleep(0)
        assert not waiting.done()
        assert connection.eof_received()  # the sending side stays open for answers due
        with pytest.raises(asyncio.IncompleteReadError):
            await asyncio.wait_for(waiting, 1)

        reset = Connection(asyncio.get_running_loop(), 64)
        reset.connection_made(FakeTransport())
        waiting = asyncio.create_task(reset.wait_for(1))
        await asyncio.sleep(0)
        reset.connection_lost(ConnectionResetError("reset by peer"))
        with pytest.raises(ConnectionResetError, match="reset by peer"):
            await asyncio.wait_for(waiting, 1)
        assert reset.must_drain
        with pytest.raises(ConnectionResetError):
            await reset.drain()

    asyncio.run(main())


def test_drain_waits_while_the_transport_is_over_its_high_water_mark() -> None:
    async def main() -> None:
        connection = Connection(asyncio.get_running_loop(), 64)
        transport = FakeTransport()
        connection.connection_made(transport)
        connection.write(b"answer")
        assert transport.written == [b"answer"]
        assert not connection.must_drain
        await connection.drain()
        connection.pause_writing()
        assert connection.must_drain
        draining = asyncio.create_task(connection.drain())
        await asyncio.sleep(0)
        assert not draining.done()
        connection.resume_writing()
        await asyncio.wait_for(draining, 1)

    asyncio.run(main())


def run_on_manual_clock(main: Callable[[ManualClockLoop], Coroutine[Any, Any, None]]) -> None:
    loop = ManualClockLoop()
    try:
        loop.run_until_complete(main(loop))
    finally:
        loop.close()


def test_a_deadline_ends_its_block_with_timeout_error_and_leaves_the_task_uncancelled() -> None:
    async def main(loop: ManualClockLoop) -> None:
        connection = Connection(loop, 64)
        connection.connection_made(FakeTransport())
        connection.task = asyncio.current_task()
        started = loop.time()
        with pytest.raises(TimeoutError), connection.deadline(started + 30):
            await connection.wait_for(1)
        assert loop.time() - started == pytest.approx(30)
        assert connection.task is not None and connection.task.cancelling() == 0
        await asyncio.sleep(1)  # not cancelled again: the task goes on as before
        # A block that ends in time, then a block with a later deadline: neither fires
        # early, though the timer was set for the first one.
        with connection.deadline(loop.time() + 5):
            await asyncio.sleep(1)
        later = loop.time()
        with pytest.raises(TimeoutError), connection.deadline(later + 600):
            await connection.wait_for(1)
        assert loop.time() - later == pytest.approx(600)

    run_on_manual_clock(main)


def test_a_deadline_bounds_drain_and_a_block_that_finishes_keeps_what_it_got() -> None:
    async def main(loop: ManualClockLoop) -> None:
        connection = Connection(loop, 64)
        connection.connection_made(FakeTransport())
        connection.task = asyncio.current_task()
        connection.pause_writing()
        started = loop.time()
        with pytest.raises(TimeoutError), connection.deadline(started + 30):
            await connection.drain()
        assert loop.time() - started == pytest.approx(30)
        loop.call_later(10, connection.data_received, b"\x00\x00\x00\x01x")
        with connection.deadline(loop.time() + 30):
            await connection.wait_for(5)
        assert connection.take_frame(connection.peek_size()) == b"x"
        await asyncio.sleep(60)  # the old deadline is gone with its block

    run_on_manual_clock(main)


def test_a_real_cancellation_inside_a_block_stays_a_cancellation() -> None:
    async def main(loop: ManualClockLoop) -> None:
        connection = Connection(loop, 64)
        connection.connection_made(FakeTransport())

        async def wait() -> None:
            connection.task = asyncio.current_task()
            with connection.deadline(loop.time() + 30):
                await connection.wait_for(1)

        task = asyncio.create_task(wait())
        loop.call_later(5, task.cancel)  # the broker stopping, say
        with pytest.raises(asyncio.CancelledError):
            await task

    run_on_manual_clock(main)


def test_linger_discards_what_the_peer_sends_and_ends_at_its_close() -> None:
    """After a final answer the server waits for the peer to close first (a client that
    reads the answer and the close in one burst may drop the answer), reading and
    discarding meanwhile, even past the read-ahead."""

    async def main(loop: ManualClockLoop) -> None:
        connection = Connection(loop, 64)
        transport = FakeTransport()
        connection.connection_made(transport)
        connection.task = asyncio.current_task()
        loop.call_later(1, connection.data_received, bytes(500))  # beyond twice read_ahead
        loop.call_later(2, connection.data_received, b"more")
        loop.call_later(3, connection.eof_received)
        started = loop.time()
        with connection.deadline(started + 30):
            await connection.linger()
        assert loop.time() - started == pytest.approx(3)
        assert connection.buffered == 0 and transport.reading

        silent = Connection(loop, 64)  # a peer that never closes: the deadline ends it
        silent.connection_made(FakeTransport())
        silent.task = asyncio.current_task()
        started = loop.time()
        with pytest.raises(TimeoutError), silent.deadline(started + 1):
            await silent.linger()
        assert loop.time() - started == pytest.approx(1)

    run_on_manual_clock(main)
