"""Split a byte stream into Kafka frames: a 4-byte big-endian size, then the payload.

Sans-IO: the connection feeds bytes in and takes whole frames out, so the same
code serves the broker, the client and byte-at-a-time tests.
"""

from __future__ import annotations

import struct

SIZE_PREFIX = struct.Struct(">i")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
DIRECT_READ_BYTES = 64 * 1024  # a frame missing this much is read into its own buffer


class FrameError(Exception):
    """The peer sent a size prefix no valid frame can have; the connection must close."""


def frame_size(prefix: bytes | bytearray, max_frame_bytes: int) -> int:
    """The payload size a frame's 4-byte prefix announces, checked against the limit."""
    (size,) = SIZE_PREFIX.unpack_from(prefix, 0)
    if size < 0 or size > max_frame_bytes:
        raise FrameError(
            f"frame size {size} outside 0..{max_frame_bytes} (socket.request.max.bytes)"
        )
    return int(size)


class FrameDecoder:
    """Accumulates bytes and yields complete frame payloads, checking each size.

    Two ways in: ``feed(data)`` with bytes already received, or, to receive
    without an extra copy, ``read_target()`` (a buffer to ``recv_into``) then
    ``received(n)``: while a large frame is being assembled, the target is the
    rest of that frame's own buffer, so its bytes land where they stay.
    Payloads are ``bytes`` when they arrived in one piece, else the
    ``bytearray`` they were assembled in.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._prefix = bytearray()  # a size prefix in progress
        self._frame: bytearray | None = None  # the payload being assembled
        self._filled = 0
        self._scratch: bytearray | None = None
        self._direct = False  # the last read_target was the frame's own buffer

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | bytearray]:
        """Add received bytes; return every frame payload now complete, in order."""
        view = memoryview(data)
        end = len(view)
        pos = 0
        frames: list[bytes | bytearray] = []
        while pos < end:
            frame = self._frame
            if frame is None:
                take = min(4 - len(self._prefix), end - pos)
                self._prefix += view[pos : pos + take]
                pos += take
                if len(self._prefix) < 4:
                    break
                size = frame_size(self._prefix, self.max_frame_bytes)
                self._prefix.clear()
                if end - pos >= size:  # the whole payload is here: one copy
                    frames.append(bytes(view[pos : pos + size]))
                    pos += size
                    continue
                frame = self._frame = bytearray(size)
                self._filled = 0
            take = min(len(frame) - self._filled, end - pos)
            frame[self._filled : self._filled + take] = view[pos : pos + take]
            self._filled += take
            pos += take
            if self._filled == len(frame):
                frames.append(frame)
                self._frame = None
        return frames

    def read_target(self, scratch_bytes: int = 256 * 1024) -> memoryview:
        """Where the next socket read should land (``sock.recv_into(target)``)."""
        frame = self._frame
        if frame is not None and len(frame) - self._filled >= DIRECT_READ_BYTES:
            self._direct = True
            return memoryview(frame)[self._filled :]
        self._direct = False
        if self._scratch is None or len(self._scratch) != scratch_bytes:
            self._scratch = bytearray(scratch_bytes)
        return memoryview(self._scratch)

    def received(self, n: int) -> list[bytes | bytearray]:
        """``n`` bytes were read into the last ``read_target()``: the frames now complete."""
        if not self._direct:
            assert self._scratch is not None
            return self.feed(memoryview(self._scratch)[:n])
        frame = self._frame
        assert frame is not None
        self._filled += n
        if self._filled < len(frame):
            return []
        self._frame = None
        return [frame]

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._prefix) + (self._filled if self._frame is not None else 0)


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its size."""
    return SIZE_PREFIX.pack(len(payload)) + payload
