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


@given(
    st.lists(st.binary(max_size=200_000), max_size=6),
    st.lists(st.integers(min_value=1, max_value=300_000), min_size=1, max_size=20),
)
def test_reading_into_targets_gives_the_same_frames(
    payloads: list[bytes], reads: list[int]
) -> None:
    """recv_into the decoder's targets, in reads of any size, as a socket would deliver."""
    stream = memoryview(b"".join(frame(p) for p in payloads))
    decoder = FrameDecoder()
    out: list[bytes] = []
    pos = 0
    i = 0
    while pos < len(stream):
        target = decoder.read_target(scratch_bytes=1024)
        n = min(len(target), reads[i % len(reads)], len(stream) - pos)
        target[:n] = stream[pos : pos + n]
        pos += n
        i += 1
        out += [bytes(f) for f in decoder.received(n)]
    assert out == payloads
    assert decoder.buffered == 0


def test_a_large_frame_is_received_into_its_own_buffer() -> None:
    payload = bytes(range(256)) * 1000
    decoder = FrameDecoder()
    assert decoder.feed(frame(payload)[:100]) == []
    target = decoder.read_target()
    assert len(target) == len(payload) - 96  # the rest of the frame, not a scratch buffer
    target[:] = payload[96:]
    (got,) = decoder.received(len(target))
    assert got == payload and target.obj is got
