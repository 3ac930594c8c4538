"""One client connection's bytes: what arrived, kept as received; responses written
back; and one timer per connection that bounds how long the server may wait.

The connection is an `asyncio.Protocol`, not a StreamReader: a StreamReader
copies every received chunk into its buffer and every `readexactly` out of it
again, so each request byte was copied twice in Python before a handler saw it.
Here the chunks the transport delivers are kept as they are, and a frame's
payload is cut out of them once (`take_frame`): a slice of one chunk, or one join of
the chunks it spans (for a payload of a megabyte or more, the caller joins
`take_frame_parts` in a worker thread: CPython copies a join of bytes objects of that
size without holding the GIL).

Reading ahead is bounded (`read_ahead`): reading pauses once more than twice
that is buffered beyond the frame the server has admitted (`admit`), and
resumes when what is left is at most `read_ahead`. A connection whose next
frame waits for request memory therefore stops being read, as Kafka mutes it.

Deadlines: `with connection.deadline(when):` bounds the awaits inside it; past
`when` the connection's task is cancelled and the block raises TimeoutError,
as `asyncio.timeout_at` would. One timer per connection serves every deadline:
a block only records its deadline, and the timer is moved only when the new
deadline is earlier than the one it is set for; when it fires at a deadline
that has since moved later, it is set again for that. So the deadlines of a
request (idle, receive, send) cost no timer of their own, where each
`asyncio.timeout` schedules and cancels one.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from types import TracebackType
from typing import Any

from odradek.protocol.framing import SIZE_PREFIX

__all__ = ["Connection"]


class Connection(asyncio.Protocol):
    """A server connection: received chunks, the transport to answer on, its deadline."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_ahead: int) -> None:
        self.loop = loop
        self.read_ahead = read_ahead
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # connection_made
        self.task: asyncio.Task[Any] | None = None  # cancelled when a deadline passes
        self._parts: deque[bytes] = deque()
        self._offset = 0  # bytes of _parts[0] already taken
        self.buffered = 0  # bytes received and not taken
        self._admitted = 0  # bytes of the frame being read that are read whatever read_ahead says
        self._want = 0  # the reader waits until this much is buffered
        self._waiter: asyncio.Future[None] | None = None
        self._eof = False
        self._lost: BaseException | None = None  # what ended the connection, if it failed
        self._gone = False
        self._reading_paused = False
        self._over_ssl = False
        self._writing_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._closed: asyncio.Future[None] = loop.create_future()
        self._deadline = math.inf
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf
        self._expired = False

    # --- the transport's callbacks ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._over_ssl = transport.get_extra_info("sslcontext") is not None

    def data_received(self, data: bytes) -> None:
        self._parts.append(data)
        self.buffered += len(data)
        if self.buffered >= self._want:
            self._wake(self._waiter, None)
        if not self._reading_paused and self.buffered - self._admitted > 2 * self.read_ahead:
            self._reading_paused = True
            self.transport.pause_reading()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake(self._waiter, None)
        # Keep the sending side open for the answers still due (as StreamReaderProtocol
        # does); TLS cannot half-close.
        return not self._over_ssl

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = exc  # None: closed cleanly
        self._gone = True
        self._eof = True
        self._wake(self._waiter, None)
        self._wake(self._drain_waiter, None)
        if not self._closed.done():
            self._closed.set_result(None)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._wake(self._drain_waiter, None)

    @staticmethod
    def _wake(waiter: asyncio.Future[None] | None, result: None) -> None:
        if waiter is not None and not waiter.done():
            waiter.set_result(result)

    # --- reading -----------------------------------------------------------------------

    def peek_size(self) -> int:
        """The signed 4-byte size that starts the buffered bytes (4 must be buffered)."""
        part = self._parts[0]
        if len(part) - self._offset >= 4:
            return int(SIZE_PREFIX.unpack_from(part, self._offset)[0])
        return int(SIZE_PREFIX.unpack(self._copy(0, 4))[0])

    async def wait_for(self, size: int) -> None:
        """Until `size` bytes are buffered. When the peer ends first: the error the
        transport reported, else IncompleteReadError."""
        while self.buffered < size:
            if self._eof:
                if self._lost is not None:
                    raise self._lost
                raise asyncio.IncompleteReadError(b"", size - self.buffered)
            self._want = size
            self._resume_reading()  # the caller waits only for bytes it may read
            waiter = self._waiter = self.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
                self._want = 0

    def admit(self, size: int) -> None:
        """The next `size` bytes make a frame the server takes: read them in full,
        whatever the read-ahead bound says."""
        self._admitted = size
        self._resume_reading()

    def take_frame(self, size: int) -> bytes:
        """The payload of the buffered frame that starts with a `size` prefix (all of it
        must be buffered), copied once at most."""
        part = self._parts[0]
        start = self._offset + 4
        end = start + size
        if end <= len(part):  # prefix and payload in one chunk: the usual case
            data = part[start:end]
            self._consumed(4 + size)
        else:
            data = self._copy(4, size)
            self._consumed_many(4 + size)
        self._after_take()
        return data

    def take_frame_parts(self, size: int) -> list[bytes]:
        """The same payload as the chunks it arrived in (the first and last cut to
        size), for the caller to join off the event loop."""
        self._consumed_many(4)
        parts: list[bytes] = []
        left = size
        while left:
            part = self._parts[0]
            end = self._offset + left
            if self._offset == 0 and end >= len(part):
                piece = part
            else:
                piece = part[self._offset : min(end, len(part))]
            parts.append(piece)
            self._consumed(len(piece))
            left -= len(piece)
        self._after_take()
        return parts

    def _copy(self, skip: int, size: int) -> bytes:
        """`size` buffered bytes after the first `skip`, joined from the chunks (one copy;
        the first chunk that holds any of them is returned as is when it is exactly them)."""
        if not size:
            return b""
        pieces: list[memoryview] = []
        index = 0
        offset = self._offset + skip
        while offset >= len(self._parts[index]):
            offset -= len(self._parts[index])
            index += 1
        left = size
        while left:
            part = self._parts[index]
            if offset == 0 and len(part) == left and not pieces:
                return part
            piece = memoryview(part)[offset : offset + left]
            pieces.append(piece)
            left -= len(piece)
            index += 1
            offset = 0
        data = b"".join(pieces)
        for piece in pieces:
            piece.release()
        return data

    def _consumed(self, size: int) -> None:
        """`size` bytes of the first chunk (no more than it holds) are taken."""
        self._offset += size
        self.buffered -= size
        if self._offset == len(self._parts[0]):
            self._parts.popleft()
            self._offset = 0

    def _consumed_many(self, size: int) -> None:
        while size:
            step = min(size, len(self._parts[0]) - self._offset)
            self._consumed(step)
            size -= step

    def _after_take(self) -> None:
        self._admitted = 0
        if self._reading_paused and self.buffered <= self.read_ahead:
            self._resume_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and not self._eof:
            self._reading_paused = False
            self.transport.resume_reading()

    async def linger(self) -> None:
        """Until the peer ends the connection, discarding whatever it still sends (the
        server has given its last answer; the caller bounds the wait)."""
        while True:
            self._discard_buffered()
            try:
                await self.wait_for(1)
            except (asyncio.IncompleteReadError, OSError):
                return

    def _discard_buffered(self) -> None:
        self._parts.clear()
        self._offset = 0
        self.buffered = 0
        self._resume_reading()

    # --- writing (what `sending.send_response` needs of a writer) ----------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.transport.write(data)

    @property
    def must_drain(self) -> bool:
        """Whether `drain` would wait or fail: the transport holds more than its high
        water mark, or the connection is gone."""
        return self._writing_paused or self._gone

    async def drain(self) -> None:
        """Until the transport is below its high water mark; ConnectionResetError once
        the connection is lost (as StreamWriter.drain)."""
        if self.transport.is_closing():
            await asyncio.sleep(0)  # lets connection_lost run
        while True:
            if self._gone:
                raise ConnectionResetError("connection lost")
            if not self._writing_paused:
                return
            waiter = self._drain_waiter = self.loop.create_future()
            try:
                await waiter
            finally:
                self._drain_waiter = None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.transport.get_extra_info(name, default)

    def close(self) -> None:
        self.transport.close()

    async def wait_closed(self) -> None:
        await self._closed

    # --- the deadline ------------------------------------------------------------------

    def deadline(self, when: float) -> Connection:
        """Bound the awaits of the `with` block that follows to end by `when` (loop time)."""
        self._deadline = when
        if when < self._timer_at and not self._gone:
            self._set_timer(when)
        return self

    def __enter__(self) -> Connection:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._deadline = math.inf
        if self._expired:
            self._expired = False
            task = self.task
            assert task is not None
            if task.uncancel() == 0 and exc_type is asyncio.CancelledError:
                raise TimeoutError from exc

    def _set_timer(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(when, self._on_timer)
        self._timer_at = when

    def _on_timer(self) -> None:
        fired_for = self._timer_at
        self._timer = None
        self._timer_at = math.inf
        if self._deadline == math.inf:
            return  # no block waits: the next one sets the timer again if it must
        if self._deadline > fired_for:
            self._set_timer(self._deadline)  # the deadline moved later meanwhile
            return
        if self.task is not None and not self._expired:
            self._expired = True
            self.task.cancel()
