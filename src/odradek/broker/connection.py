"""One client connection's bytes: received into buffers the connection owns, handed
to the server as read-only views; responses written back; and one timer per connection
that bounds how long the server may wait.

The connection is an `asyncio.BufferedProtocol`: the transport reads straight
into the buffer `get_buffer` offers, so no received byte is copied in Python.
(asyncio's socket transport `recv_into`s it, its TLS transport decrypts into
it, uvloop's TCP and TLS transports do the same; for a plain `Protocol` each
read made a new bytes object, which uvloop also copied out of libuv's buffer,
and each payload was then cut out of those chunks with one more copy. Over
TLS the ciphertext is still copied into OpenSSL's memory BIO, as before, by
both loops' TLS protocols; the plaintext is decrypted into our buffer.) A
frame's payload is a read-only `memoryview` of the buffer it arrived in
(`take_frame`): a frame never spans two buffers.

Buffers. Frames that fit one after the other share a buffer; one that does
not fit in what is left gets a new buffer once its size prefix is in (its own,
sized to it, or a shared one it starts), and the bytes of it that came in the
read that brought its prefix move there: the only copy (`copied` counts
them), bounded because a read reaches at most `PROBE_BYTES` past the end of the
frame in progress, or, while the next frame's size is not in yet, as far as the
connection's last frame was long (`_typical`, at most twice `read_ahead`): a
producer's next request, sized like its last, then comes in one read. A frame
larger than twice `read_ahead` gets its
buffer only once the server admits it (`admit`, after checking its size and
reserving its request memory): until then its bytes, within the read-ahead
bound, go to a buffer with room for that much, and they move once more when it
is admitted. A shared buffer starts at `PROBE_BYTES` (at most `read_ahead`), or
the last frame's size after an idle wait, and doubles up to `read_ahead` while
the peer keeps sending; when everything
received has been taken and the server waits for more, the connection lets go
of its buffer, so an idle connection holds none. Buffers the connection moves on
from go to the loop's `BufferPool` (`receive_buffers.py`), which hands them out
again once no payload views them: no `memset` of a fresh bytearray per request,
and memory that is warm in the caches. A buffer
of `MAPPED_BYTES` or more is an anonymous memory map, whose pages the kernel
provides as reads reach them: a 100 MB frame costs the loop no 100 MB
`memset` up front (a bytearray is zero-filled when made).

Handed-out payloads never change: a buffer is written only past the bytes
received so far (`get_buffer` offers part of `[end, capacity)`, `end` only
grows, and the transports call `buffer_updated` right after the read that
`get_buffer` prepared), never rewound nor reused, and a payload lies wholly
before `end`. A buffer is freed when the connection has moved on and the last
payload viewing it is gone: a payload keeps its whole buffer alive, so
handlers keep views only while they serve the request (the log writes
appended records out; nothing holds them).

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
import mmap
from collections import deque
from types import TracebackType
from typing import Any

from odradek.broker.receive_buffers import BufferPool
from odradek.protocol.framing import SIZE_PREFIX

__all__ = ["MAPPED_BYTES", "MAX_READ_BYTES", "PROBE_BYTES", "Connection"]

# How far a read reaches past the end of the frame in progress, and the size of the
# first buffer after an idle wait: the next frames' size prefixes (and small frames
# whole) come with it, and a frame that then does not fit in its buffer has at most this
# much to move. A large frame costs a read more, no more (a peer that sends one large
# request at a time leaves the connection idle before each: with 64 KiB a 256 KiB
# frame moved a quarter of itself).
PROBE_BYTES = 16 * 1024
# A buffer this large or larger is an anonymous memory map rather than a bytearray,
# which is zero-filled when made, holding the loop (~1.4 ms a MiB of fresh memory here).
MAPPED_BYTES = 4 << 20
# One read takes at most this much, so a callback that reads into a large buffer
# (faulting its pages in) stays short.
MAX_READ_BYTES = 1 << 20
_NO_BUFFER = memoryview(b"")


def _allocate(capacity: int, pool: BufferPool) -> bytearray | mmap.mmap:
    if capacity < MAPPED_BYTES:
        return pool.take(capacity)
    return mmap.mmap(-1, capacity, flags=mmap.MAP_PRIVATE)  # anonymous, this process's


class Connection(asyncio.BufferedProtocol):
    """A server connection: its receive buffers, the transport to answer on, its deadline."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, read_ahead: int, pool: BufferPool | None = None
    ) -> None:
        self.loop = loop
        self.read_ahead = read_ahead
        # Where buffers come from and go back to: the loop's, shared by its connections
        # (none given: a pool that keeps nothing, every buffer made afresh).
        self._pool = pool if pool is not None else BufferPool(0)
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # connection_made
        self.task: asyncio.Task[Any] | None = None  # cancelled when a deadline passes
        # The buffer being received into: written through _write, read through _view.
        self._write = self._view = _NO_BUFFER
        self._capacity = 0
        self._start = 0  # first byte not taken
        self._scan = 0  # start of the first frame not received whole (all before it are)
        self._scan_total = -1  # that frame's size with its prefix, once the prefix is in
        self._end = 0  # end of the bytes received
        self._shared = min(PROBE_BYTES, read_ahead)  # the size of the next shared buffer
        self._typical = 0  # the last frame's size with its prefix (at most 2 * read_ahead)
        # Earlier buffers with frames received whole and not taken: (view, start, end).
        self._earlier: deque[tuple[memoryview, int, int]] = deque()
        self.buffered = 0  # bytes received and not taken
        self.copied = 0  # bytes moved from one buffer to the next (see the module's doc)
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

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the next read lands: the current buffer from the end of what was received,
        after a move to a new buffer when it is full or the frame in progress no longer
        fits in it; no further than `PROBE_BYTES` past the end of the frame in progress
        (while its size is not in, as far as the last frame was long)."""
        total = self._scan_total
        if self._end == self._capacity or (
            total > self._capacity - self._scan and self._may_size(total)
        ):
            self._next_buffer()
            total = self._scan_total
        end = self._end
        if total > 0:
            reach = self._scan + total + PROBE_BYTES
        else:
            reach = end + max(PROBE_BYTES, self._typical)
        return self._write[end : min(self._capacity, reach, end + MAX_READ_BYTES)]

    def buffer_updated(self, nbytes: int) -> None:
        end = self._end = self._end + nbytes
        self.buffered += nbytes
        # Where the frame in progress starts, and its size once its prefix is in.
        scan = self._scan
        total = self._scan_total
        while True:
            if total < 0:
                if end - scan < 4:
                    break
                size = SIZE_PREFIX.unpack_from(self._view, scan)[0]
                if size < 0:
                    break  # not a frame: the server refuses the prefix when it reaches it
                total = 4 + size
            if scan + total > end:
                break
            scan += total
            total = -1
        self._scan = scan
        self._scan_total = total
        if self.buffered >= self._want:
            self._wake(self._waiter, None)
        if not self._reading_paused and self.buffered - self._admitted > 2 * self.read_ahead:
            self._reading_paused = True
            self.transport.pause_reading()

    def _may_size(self, total: int) -> bool:
        """Whether the frame in progress, `total` bytes with its prefix, may have a buffer
        of its size: it is within the read-ahead bound, or the server admitted it."""
        return total <= 2 * self.read_ahead or (
            total <= self._admitted and self._scan == self._start and not self._earlier
        )

    def _next_buffer(self) -> None:
        """Receive into a new buffer from here on. The bytes of the frame in progress move
        there; the frames received whole stay where they are until taken."""
        total = self._scan_total
        tail = self._end - self._scan
        shared = self._shared
        bounded = False  # only `capacity` of the buffer may be used, however large it is
        if total > 0 and self._may_size(total):
            capacity = max(total, shared)  # its own buffer, or a shared one it starts
        elif total > 0:  # not admitted yet: room for what the read-ahead bound lets in
            capacity = min(total, tail + 2 * self.read_ahead)
            bounded = True
        else:  # its size not in yet (or not a size at all): room for one like the last
            capacity = tail + max(shared, self._typical)
        if capacity > total:  # frames after it share this buffer
            self._shared = min(2 * shared, self.read_ahead)
        buffer = _allocate(capacity, self._pool)
        write = memoryview(buffer)
        if tail:
            write[:tail] = self._write[self._scan : self._end]
            self.copied += tail
        if self._scan > self._start:
            self._earlier.append((self._view, self._start, self._scan))
        self._pool.give(self._write.obj)  # reused once no view of it is left
        self._write = write
        self._view = write.toreadonly()
        # A pooled buffer may be larger than asked: all of it is used, except for a frame
        # not admitted yet, of which no more than the read-ahead bound is read.
        self._capacity = capacity if bounded else len(buffer)
        self._start = self._scan = 0
        self._end = tail

    def _let_go(self) -> None:
        """Nothing is buffered and the server waits: hold no buffer meanwhile (the next
        read gets a new one; payloads handed out keep theirs)."""
        self._pool.give(self._write.obj)
        self._write = self._view = _NO_BUFFER
        self._capacity = self._start = self._scan = self._end = 0
        self._scan_total = -1
        self._shared = min(PROBE_BYTES, self.read_ahead)

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
        if self._earlier:
            view, start, _ = self._earlier[0]
            return int(SIZE_PREFIX.unpack_from(view, start)[0])
        return int(SIZE_PREFIX.unpack_from(self._view, self._start)[0])

    async def wait_for(self, size: int) -> None:
        """Until `size` bytes are buffered. When the peer ends first: the error the
        transport reported, else IncompleteReadError."""
        while self.buffered < size:
            if self._eof:
                if self._lost is not None:
                    raise self._lost
                raise asyncio.IncompleteReadError(b"", size - self.buffered)
            if not self.buffered and self._capacity:
                self._let_go()
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
        whatever the read-ahead bound says, into a buffer of their own."""
        self._admitted = size
        self._resume_reading()

    def take_frame(self, size: int) -> memoryview:
        """The payload of the buffered frame that starts with a `size` prefix (all of it
        must be buffered): a read-only view of the buffer it arrived in, not a copy."""
        total = 4 + size
        if self._earlier:
            view, start, end = self._earlier[0]
            if start + total == end:
                self._earlier.popleft()
            else:
                self._earlier[0] = (view, start + total, end)
        else:
            view = self._view
            start = self._start
            self._start = start + total
        self.buffered -= total
        self._typical = min(total, 2 * self.read_ahead)
        self._after_take()
        return view[start + 4 : start + total]

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
        self._earlier.clear()
        self._let_go()
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
