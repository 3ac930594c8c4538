import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.protocol.framing import FrameDecoder, FrameError, frame


@given(st.lists(st.binary(max_size=300), max_size=20), st.integers(min_value=1, max_value=64))
def test_frames_survive_any_chunking(payloads: list[bytes], chunk: int) -> None:
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder()
    out: list[bytes] = []
    for start in range(0, len(stream), chunk):
        out += decoder.feed(stream[start : start + chunk])
    assert out == payloads
    assert decoder.buffered == 0


def test_byte_by_byte() -> None:
    decoder = FrameDecoder()
    stream = frame(b"hello") + frame(b"") + frame(b"world")
    out = [f for byte in stream for f in decoder.feed(bytes([byte]))]
    assert out == [b"hello", b"", b"world"]


@pytest.mark.parametrize("size", [-1, -(2**31), 101, 2**31 - 1])
def test_bad_sizes_are_refused(size: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    with pytest.raises(FrameError):
        decoder.feed(struct.pack(">i", size))


def test_size_exactly_at_limit_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_bytes=100)
    assert decoder.feed(frame(b"x" * 100)) == [b"x" * 100]
