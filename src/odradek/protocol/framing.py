"""Split a byte stream into Kafka frames: a 4-byte big-endian size, then the payload.

Sans-IO: the connection feeds bytes in and takes whole frames out, so the same
code serves the broker, the client and byte-at-a-time tests.
"""

from __future__ import annotations

import struct

SIZE_PREFIX = struct.Struct(">i")
DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


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
    """Accumulates bytes and yields complete frame payloads, checking each size."""

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()
        self._needed: int | None = None  # payload size of the frame in progress

    def feed(self, data: bytes) -> list[bytes]:
        """Add received bytes; return every frame payload now complete, in order."""
        self._buffer += data
        frames: list[bytes] = []
        while True:
            if self._needed is None:
                if len(self._buffer) < 4:
                    return frames
                size = frame_size(self._buffer, self.max_frame_bytes)
                del self._buffer[:4]
                self._needed = size
            if len(self._buffer) < self._needed:
                return frames
            frames.append(bytes(self._buffer[: self._needed]))
            del self._buffer[: self._needed]
            self._needed = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its size."""
    return SIZE_PREFIX.pack(len(payload)) + payload
