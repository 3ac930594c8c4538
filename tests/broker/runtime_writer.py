"""A partition writer for the coordinator runtime's tests: a real partition log whose
high watermark the test moves, as a leader's followers would (Kafka's tests use an
in-memory PartitionWriter the same way).

``following=True`` (the default) is a lone node: the high watermark follows every
append. ``hold()`` stops it where it is (followers stalled); ``replicate()`` moves
it to the log end and tells the listeners; ``follow()`` does, and follows again.
``refuse_next(error)`` makes the next append refuse with a log error (nothing
written); ``break_next()`` makes it raise after writing (the log and memory may
differ).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from odradek.log import AppendInfo, PartitionLog
from odradek.log.errors import LogError


class TestWriter:
    __test__ = False  # not a test class

    def __init__(self, plog: PartitionLog) -> None:
        self.plog = plog
        self.following = True
        self._high_watermark = plog.end_offset
        self._listeners: list[Callable[[int], None]] = []
        self._refusal: LogError | None = None
        self._break = False

    @property
    def max_message_bytes(self) -> int:
        return self.plog.config.max_message_bytes

    @property
    def end_offset(self) -> int:
        return self.plog.end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    def append(self, batch: bytes) -> AppendInfo:
        if self._refusal is not None:
            refusal, self._refusal = self._refusal, None
            raise refusal
        info = self.plog.append(batch, from_client=False)
        if self.following:
            self._move(self.plog.end_offset)
        if self._break:
            self._break = False
            raise OSError("injected: written, then failed")
        return info

    def batches(self) -> Iterator[bytes | bytearray]:
        return self.plog.iter_batches_from(self.plog.start_offset)

    def add_listener(self, listener: Callable[[int], None]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[int], None]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    # --- what the tests do ---------------------------------------------------------------

    def hold(self) -> None:
        self.following = False

    def follow(self) -> None:
        self.following = True
        self.replicate()

    def replicate(self) -> None:
        self._move(self.plog.end_offset)

    def refuse_next(self, error: LogError) -> None:
        self._refusal = error

    def break_next(self) -> None:
        self._break = True

    def _move(self, offset: int) -> None:
        self._high_watermark = offset
        for listener in list(self._listeners):
            listener(offset)
