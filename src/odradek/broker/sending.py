"""Sending a response: bytes through the transport, file regions with ``sendfile``.

A handler answers bytes, or (Fetch) an ``EncodedResponse`` whose parts are
bytes and ``FileRegion`` s of segment files. The connection writes the bytes
with its transport and each region with ``loop.sendfile`` (``os.sendfile``:
the kernel copies page cache to socket, Python never sees the records). A
transport that cannot sendfile (TLS: asyncio's SSL transport encrypts in
Python) gets the region read in chunks of ``FALLBACK_CHUNK_BYTES`` and
written, each drained before the next is read, so a slow peer holds one chunk.

What a response holds in memory counts against the broker's ``ByteBudget``
(docs/operations.md, "Limits"): its bytes parts while they are being sent, and
in the fallback each chunk; a region sent by ``sendfile`` holds no memory, only
its pinned descriptor. Every region is released once the response is sent or
abandoned (timeout, closed connection, error), whatever happens.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any, Protocol

from odradek.broker.budget import ByteBudget
from odradek.log.files import FileRegion
from odradek.protocol.fetch import EncodedResponse

__all__ = [
    "FALLBACK_CHUNK_BYTES",
    "ResponseWriter",
    "ShortRegionError",
    "materialize",
    "release",
    "response_size",
    "send_response",
]

FALLBACK_CHUNK_BYTES = 256 * 1024

Response = bytes | EncodedResponse


class ResponseWriter(Protocol):
    """What a response is written with: the broker's `Connection`, or a StreamWriter."""

    @property
    def transport(self) -> Any: ...

    def write(self, data: bytes | bytearray | memoryview) -> None: ...

    async def drain(self) -> None: ...

    def get_extra_info(self, name: str, default: Any = None) -> Any: ...


class ShortRegionError(ConnectionError):
    """A segment file held less than a region promised (it was cut meanwhile): the
    frame is incomplete, so the connection must close."""


class _RegionFile:
    """What ``loop.sendfile`` takes: a file object over the region's pinned descriptor.

    asyncio moves the descriptor's file position after sending; the log never
    uses it (it reads with ``pread`` and appends with ``O_APPEND``).
    """

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        return self._fd


def response_size(response: Response) -> int:
    return response.size if isinstance(response, EncodedResponse) else len(response)


def release(response: Response) -> None:
    """Release every region of a response that will not be sent."""
    if isinstance(response, EncodedResponse):
        for part in response.parts:
            if isinstance(part, FileRegion):
                part.release()


def materialize(response: Response) -> bytes:
    """The response as one bytes object (regions read and released)."""
    if not isinstance(response, EncodedResponse):
        return response
    try:
        return b"".join(
            _read_whole(p) if isinstance(p, FileRegion) else bytes(p) for p in response.parts
        )
    finally:
        release(response)


def _read_whole(region: FileRegion) -> bytes:
    data = region.read()
    if len(data) != region.length:
        raise ShortRegionError(f"{region} holds only {len(data)} bytes")
    return data


def _cork(writer: ResponseWriter, on: bool) -> bool:
    """TCP_CORK on (or off, which sends what is queued): a response's small parts and its
    regions leave in full segments rather than a small packet per part."""
    sock = writer.get_extra_info("socket")
    if sock is None or not hasattr(socket, "TCP_CORK"):
        return False
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1 if on else 0)
    except OSError:
        return False
    return True


def _can_sendfile(writer: ResponseWriter) -> bool:
    return (
        writer.get_extra_info("sslcontext") is None and writer.get_extra_info("socket") is not None
    )


async def send_response(writer: ResponseWriter, response: Response, budget: ByteBudget) -> None:
    """Write ``response`` and wait until the transport took all of it.

    The caller bounds the time (``socket.send.timeout.ms``) and aborts the
    transport when it runs out. Regions are released in every case.
    """
    if not isinstance(response, EncodedResponse):
        size = len(response)
        budget.charge(size)
        try:
            writer.write(response)
            del response  # the transport holds the unsent part; the budget counts it
            await writer.drain()
        finally:
            budget.release(size)
        return
    parts: list[Any] = response.parts
    held = sum(len(p) for p in parts if not isinstance(p, FileRegion))
    if held == response.size:
        # No file region (a Produce answer, most small answers): the parts leave in one
        # transport write, so there is nothing to cork (two setsockopt calls saved).
        await send_response(writer, parts[0] if len(parts) == 1 else b"".join(parts), budget)
        return
    budget.charge(held)
    native = _can_sendfile(writer)
    corked = native and _cork(writer, True)
    try:
        loop = asyncio.get_running_loop()
        for part in parts:
            if not isinstance(part, FileRegion):
                writer.write(part)
                continue
            if writer.transport.is_closing():
                # The peer is gone (a reset while its Fetch long-polled): its socket is
                # closed, and sendfile on it would fail with EBADF, not as a lost peer.
                raise ConnectionResetError("the connection closed before the response was sent")
            if native:
                await _sendfile(writer, loop, part, budget)
            else:
                await _send_read(writer, part, budget)
            part.release()
        if corked:
            corked = not _cork(writer, False)  # the last part leaves now
        await writer.drain()
    finally:
        if corked:
            _cork(writer, False)
        budget.release(held)
        release(response)


async def _sendfile(
    writer: ResponseWriter,
    loop: asyncio.AbstractEventLoop,
    region: FileRegion,
    budget: ByteBudget,
) -> None:
    """Send a region with ``os.sendfile``: directly while the socket takes it (the usual
    case: one call), the rest through ``loop.sendfile``, which waits for room.

    Direct calls only when the transport has nothing buffered, so the bytes keep
    their order (asyncio's own sendfile waits for the same).
    """
    offset, remaining = region.position, region.length
    if writer.transport.get_write_buffer_size() == 0:
        fd = writer.get_extra_info("socket").fileno()
        while remaining:
            try:
                sent = os.sendfile(fd, region.fd, offset, remaining)
            except InterruptedError:
                continue
            except BlockingIOError:
                break
            if sent == 0:
                raise ShortRegionError(f"{region} ends {remaining} bytes early")
            offset += sent
            remaining -= sent
    if remaining:
        try:
            sent = await loop.sendfile(
                writer.transport,
                _RegionFile(region.fd),  # type: ignore[arg-type]
                offset,
                remaining,
                fallback=False,
            )
        except (asyncio.SendfileNotAvailableError, NotImplementedError):
            # asyncio says the first when os.sendfile failed before its first byte,
            # whatever the reason (a peer that reset, too): nothing of this part went
            # out, so plain writes carry it, and they report a dead peer as
            # ConnectionError. uvloop has no loop.sendfile at all (the second): the
            # rest of a region the socket did not take at once goes the same way.
            await _send_read(writer, region, budget, start=offset - region.position)
            return
        if sent != remaining:
            raise ShortRegionError(f"{region} sent {sent} of {remaining} bytes")


async def _send_read(
    writer: ResponseWriter, region: FileRegion, budget: ByteBudget, start: int = 0
) -> None:
    """The fallback: the region (from ``start`` on) read and written a chunk at a time."""
    offset = start
    while offset < region.length:
        size = min(FALLBACK_CHUNK_BYTES, region.length - offset)
        budget.charge(size)
        try:
            chunk = region.read_part(offset, size)
            if len(chunk) != size:
                raise ShortRegionError(f"{region} holds only {offset + len(chunk)} bytes")
            writer.write(chunk)
            del chunk
            await writer.drain()
        finally:
            budget.release(size)
        offset += size
