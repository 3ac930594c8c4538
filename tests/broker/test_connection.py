"""The broker's connection protocol: frames received into the connection's own buffers
and handed out as read-only views, with no copy but the bytes of a frame that came with
its prefix into a buffer it does not fit; payloads that never change after they are
handed out; reading paused beyond the read-ahead unless a frame is admitted; the peer's
end seen by whoever waits; deadlines that end their block with TimeoutError as
asyncio.timeout does (on a manual clock)."""

from __future__ import annotations

import asyncio
import mmap
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.broker.connection import MAPPED_BYTES, PROBE_BYTES, Connection
from odradek.broker.receive_buffers import BufferPool

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


def receive(connection: Connection, data: bytes, most: int | None = None) -> int:
    """Deliver `data` as a transport does: into the buffers `get_buffer` offers, each read
    `most` bytes at most, until reading is paused; how much was delivered. Like a careless
    transport, it first scribbles over all of the buffer it was offered, so an offer that
    overlapped a payload handed out would show."""
    pos = 0
    transport = connection.transport
    while pos < len(data) and (not isinstance(transport, FakeTransport) or transport.reading):
        buffer = connection.get_buffer(-1)
        assert len(buffer) and not buffer.readonly
        buffer[:] = b"\xee" * len(buffer)
        n = min(len(buffer), len(data) - pos, most or len(data))
        buffer[:n] = data[pos : pos + n]
        connection.buffer_updated(n)
        pos += n
    return pos


def connected(
    read_ahead: int = 64, pool: BufferPool | None = None
) -> tuple[Connection, FakeTransport]:
    loop = asyncio.new_event_loop()
    connection = Connection(loop, read_ahead, pool)
    transport = FakeTransport()
    connection.connection_made(transport)
    return connection, transport


def test_frames_are_read_only_views_of_the_buffer_they_arrived_in() -> None:
    connection, _ = connected(read_ahead=1 << 20)
    receive(connection, frame(b"first") + frame(b"second") + frame(b"third")[:6])
    receive(connection, frame(b"third")[6:])  # a frame across two reads, one buffer
    assert connection.peek_size() == 5
    first = connection.take_frame(5)
    assert first == b"first" and first.readonly
    second = connection.take_frame(connection.peek_size())
    third = connection.take_frame(connection.peek_size())
    assert (second, third) == (b"second", b"third")
    assert first.obj is second.obj is third.obj  # one shared buffer, no copy
    assert connection.copied == 0 and connection.buffered == 0


def test_a_frame_that_does_not_fit_moves_only_what_came_with_its_prefix() -> None:
    """The buffer the first frames share has no room for the next: it gets a buffer of
    its own, and only its bytes that arrived with its prefix are moved; the rest is read
    into that buffer directly, and the frames before stay valid where they are."""
    connection, _ = connected(read_ahead=1 << 20)  # shared buffers start at PROBE_BYTES
    small = [bytes([i]) * 1000 for i in range(PROBE_BYTES // 1004 - 1)]
    large = bytes(range(256)) * 1024  # 256 KiB
    stream = b"".join(map(frame, small)) + frame(large)
    taken = []
    receive(connection, stream[: PROBE_BYTES - 100])  # the small ones, and 40 bytes of it
    while connection.buffered >= 4 + connection.peek_size():
        taken.append(connection.take_frame(connection.peek_size()))
    receive(connection, stream[PROBE_BYTES - 100 :])
    payload = connection.take_frame(len(large))
    assert payload == large and taken == small
    assert connection.copied == len(stream) - sum(map(len, map(frame, small))) - (
        len(stream) - (PROBE_BYTES - 100)
    )  # the first bytes of the large frame only
    assert len(payload.obj) == len(frame(large)) and payload.obj is not taken[0].obj


def test_a_large_frame_is_moved_once_when_admitted_and_read_in_place_after() -> None:
    connection, transport = connected(read_ahead=100)
    large = bytes(range(256)) * 4  # 1 KiB: larger than twice the read-ahead
    stream = frame(large)
    pos = receive(connection, stream[:150], most=40)
    assert pos == 150 and transport.reading  # up to twice the read-ahead is read
    pos += receive(connection, stream[pos:], most=40)
    assert 200 < pos < 300 and not transport.reading  # not admitted (waits for memory): muted
    before = connection.copied
    connection.admit(4 + len(large))
    assert transport.reading
    receive(connection, stream[pos:])
    assert connection.copied - before == pos  # what came before it was admitted, once
    payload = connection.take_frame(len(large))
    assert payload == large and len(payload.obj) == 4 + len(large)


def test_a_frame_not_admitted_is_read_no_further_into_a_large_pooled_buffer() -> None:
    """A pooled buffer may be larger than asked for; a frame waiting for admission still
    gets no more read than the read-ahead bound, whatever room the buffer has."""
    pool = BufferPool(1 << 20)
    pool.give(bytearray(900))  # room for most of the frame: more than it may read yet
    connection, transport = connected(read_ahead=100, pool=pool)
    large = bytes(range(256)) * 4  # 1 KiB: larger than twice the read-ahead
    pos = receive(connection, frame(large))  # reads as large as the buffers offered
    assert pos <= 300 and not transport.reading  # muted at the bound, as without a pool
    connection.admit(4 + len(large))
    receive(connection, frame(large)[pos:])
    assert connection.take_frame(len(large)) == large


def test_a_frame_of_mapped_size_is_received_into_a_memory_map() -> None:
    connection, _ = connected(read_ahead=256 * 1024)
    large = bytes(range(256)) * (MAPPED_BYTES // 256)
    connection.admit(4 + len(large))
    receive(connection, frame(large), most=64 * 1024)
    payload = connection.take_frame(len(large))
    assert isinstance(payload.obj, mmap.mmap) and payload.readonly
    assert payload == large
    assert connection.copied <= PROBE_BYTES  # what came in the read with its prefix


def test_a_buffer_is_reused_only_once_no_payload_views_it() -> None:
    """An idle connection gives its buffer to the pool; the next request is received into
    it only if the last payload from it is gone, and never over a payload still held."""

    async def main() -> None:
        pool = BufferPool(1 << 20)
        connection = Connection(asyncio.get_running_loop(), 1 << 20, pool)
        connection.connection_made(FakeTransport())

        async def request(data: bytes) -> memoryview:
            waiting = asyncio.create_task(connection.wait_for(1))
            await asyncio.sleep(0)  # the server waits: the connection lets go of its buffer
            receive(connection, frame(data))
            await asyncio.wait_for(waiting, 1)
            return connection.take_frame(connection.peek_size())

        first = await request(b"a" * 1000)
        held = id(first.obj)  # (a reference to it would keep it from reuse, as a view does)
        second = await request(b"b" * 1000)  # `first` still held: a new buffer
        assert id(second.obj) != held and first == b"a" * 1000 and pool.reused == 0
        del first
        third = await request(b"c" * 1000)  # `first`'s buffer is free again: reused
        assert id(third.obj) == held and third == b"c" * 1000 and pool.reused == 1
        assert second == b"b" * 1000
        assert len(connection._view) > 0 and pool.held_bytes <= pool.max_bytes

    asyncio.run(main())


def test_after_an_idle_wait_a_request_like_the_last_comes_in_one_read() -> None:
    """A producer's requests are of a size: after the connection let go of its buffer, the
    next one offered has room for a frame as long as the last, so it is read in one go
    (not a probe's worth first and the rest into a buffer it then moves to)."""

    async def main() -> None:
        connection = Connection(asyncio.get_running_loop(), 256 * 1024, BufferPool(1 << 20))
        connection.connection_made(FakeTransport())
        data = bytes(range(256)) * 800  # 200 KiB, far more than PROBE_BYTES
        receive(connection, frame(data))  # the first: a probe's worth, then the rest
        assert connection.take_frame(connection.peek_size()) == data
        copied = connection.copied
        for _ in range(3):
            waiting = asyncio.create_task(connection.wait_for(1))
            await asyncio.sleep(0)
            offered = connection.get_buffer(-1)
            assert len(offered) >= len(frame(data))  # the whole next frame: one read
            offered[: len(frame(data))] = frame(data)
            del offered
            connection.buffer_updated(len(frame(data)))
            await asyncio.wait_for(waiting, 1)
            assert connection.take_frame(connection.peek_size()) == data
        assert connection.copied == copied  # nothing moved

    asyncio.run(main())


def test_an_idle_connection_holds_no_buffer() -> None:
    async def main() -> None:
        connection = Connection(asyncio.get_running_loop(), 1 << 20)
        connection.connection_made(FakeTransport())
        receive(connection, frame(b"request"))
        payload = connection.take_frame(7)
        waiting = asyncio.create_task(connection.wait_for(1))
        await asyncio.sleep(0)
        assert len(connection._view) == 0  # let go while the server waits
        assert payload == b"request"  # the payload keeps its buffer
        receive(connection, frame(b"next"))
        await asyncio.wait_for(waiting, 1)
        assert connection.take_frame(connection.peek_size()) == b"next"

    asyncio.run(main())


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(
        st.one_of(st.integers(0, 40), st.integers(41, 200), st.integers(201, 700)),
        min_size=1,
        max_size=12,
    ),
    reads=st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=20),
    eager=st.lists(st.booleans(), min_size=1, max_size=10),
    keep=st.lists(st.booleans(), min_size=1, max_size=10),
    seed=st.integers(0, 255),
)
def test_frames_come_out_whole_in_order_and_never_change_however_the_bytes_are_cut(
    sizes: list[int], reads: list[int], eager: list[bool], keep: list[bool], seed: int
) -> None:
    """However the transport cuts the stream and whenever the server takes frames (at
    once, or after several have piled up, admitting the ones it waits for as the server
    does), every payload comes out whole and in order, read-only, and still holds its
    bytes at the end (no later read landed on it). Buffers are reused from a pool: the
    server drops some payloads as soon as it has read them (their buffers may then be
    reused) and keeps the others to the end, and no reuse lands on a kept one."""
    payloads = [bytes((seed + i + j) % 256 for j in range(n)) for i, n in enumerate(sizes)]
    stream = b"".join(frame(p) for p in payloads)
    read_ahead = 64
    pool = BufferPool(4 * read_ahead)
    connection, transport = connected(read_ahead, pool)
    taken: list[memoryview] = []
    seen: list[bytes] = []

    def serve(all_buffered: bool) -> None:
        """The server's part: take the frames received whole; admit the one it waits for."""
        while connection.buffered >= 4:
            size = connection.peek_size()
            if connection.buffered < 4 + size:
                connection.admit(4 + size)
                return
            payload = connection.take_frame(size)
            seen.append(bytes(payload))
            if keep[len(seen) % len(keep)]:
                taken.append(payload)
            del payload  # a dropped one's buffer may be reused from here on
            if not all_buffered:
                return

    pos = 0
    step = 0
    while pos < len(stream):
        if transport.reading:
            n = min(reads[step % len(reads)], len(stream) - pos)
            pos += receive(connection, stream[pos : pos + n], most=reads[-step % len(reads)])
        serve(eager[step % len(eager)] or not transport.reading)
        step += 1
    serve(True)
    assert seen == payloads
    kept = [p for i, p in enumerate(payloads, start=1) if keep[i % len(keep)]]
    assert [bytes(p) for p in taken] == kept
    assert all(p.readonly for p in taken)
    assert connection.buffered == 0
    # Bounded copying: a frame moves at most once, or twice when it is larger than the
    # read-ahead bound (before it is admitted, and when it is).
    assert connection.copied <= sum(4 + n if 4 + n <= 2 * read_ahead else 8 + 2 * n for n in sizes)


def test_the_peers_end_fails_a_wait_and_a_reset_fails_it_with_its_error() -> None:
    async def main() -> None:
        connection = Connection(asyncio.get_running_loop(), 64)
        connection.connection_made(FakeTransport())
        waiting = asyncio.create_task(connection.wait_for(8))
        await asyncio.sleep(0)
        receive(connection, b"abc")
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
        loop.call_later(10, receive, connection, b"\x00\x00\x00\x01x")
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
        loop.call_later(1, receive, connection, bytes(500))  # beyond twice read_ahead
        loop.call_later(2, receive, connection, b"more")
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
