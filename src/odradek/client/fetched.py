"""Fetched records, decoded a batch at a time and turned into records only when touched.

A ``CompletedFetch`` holds one partition's part of a Fetch response: its
records are a view of the response frame (nothing copied). The consumer
thread walks it batch by batch (``take``): each batch's header is checked
(CRC32C with ``check_crcs``), control batches are stepped over, and the batch
is decoded by the compiled codec into columns (``protocol.columns``), which is
the only per-record work until the application touches a record. ``take``
hands out *runs*, ``(columns, lo, hi)`` slices of decoded batches, and the
position they reach; a ``RecordList`` makes a poll's runs look like a list of
``ConsumerRecord`` and builds each record (key, value, headers copied out of
the frame, deserializers applied) as it is read.

Control batches are stepped over. A read_committed fetch carries a
``ReadCommittedFilter`` (``client/read_committed.py``) built from the response's
aborted transactions: it sees every transactional and control batch in offset
order (those before the position too, so an ABORT marker there closes its
transaction) and a batch of an aborted transaction is dropped whole before it is
decoded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from odradek.client.errors import CorruptRecordError, KafkaError
from odradek.client.read_committed import ReadCommittedFilter
from odradek.client.structs import ConsumerRecord, TopicPartition
from odradek.protocol.columns import BatchColumns, build_records, decode_columns_raw
from odradek.protocol.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    RecordError,
    crc32c,
    marker_is_abort,
    unpack_header,
)

__all__ = ["CompletedFetch", "RecordList", "Run"]

Run = tuple[BatchColumns, int, int]
"""Records ``lo:hi`` of one decoded batch."""

Deserializer = Callable[[bytes | None], Any] | None

_CRC_START = 21  # the CRC32C covers the batch from its attributes on
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


@dataclass(eq=False)
class CompletedFetch:
    """One partition's part of a Fetch response, and how far the consumer has read it."""

    tp: TopicPartition
    fetch_offset: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    last_stable_offset: int
    records: memoryview | bytes  # whole batches (and maybe a partial one at the end)
    aborted_transactions: Any = None  # as the response gave them (read_committed)
    committed: ReadCommittedFilter | None = None  # read_committed: drops aborted batches
    expected_position: int = -1  # the partition's position if nobody sought since
    consumed: bool = False
    # The cursor: where the next batch header is, the batch being handed out.
    _pos: int = 0
    _batch: BatchColumns | None = None
    _index: int = 0
    _batch_next: int = -1
    _error: KafkaError | None = field(default=None)

    def take(self, n: int, position: int, check_crcs: bool) -> tuple[list[Run], int, int]:
        """Up to ``n`` records from ``position`` on: (runs, count, position after them).

        The position moves past every batch walked over (control batches, dropped
        or compacted-away offsets, records before ``position``). A corrupt batch
        raises ``CorruptRecordError``, after the records before it were handed out
        (the next call raises); the position stays before it.
        """
        if self._error is not None:
            raise self._error
        runs: list[Run] = []
        count = 0
        while count < n:
            cols = self._batch
            if cols is None or self._index >= cols.count:
                if cols is not None:
                    position = max(position, self._batch_next)
                    self._batch = None
                try:
                    position = self._next_batch(position, check_crcs)
                except KafkaError as exc:
                    if count:
                        self._error = exc
                        break
                    raise
                if self._batch is None:
                    self.consumed = True
                    break
                continue
            hi = min(cols.count, self._index + (n - count))
            runs.append((cols, self._index, hi))
            count += hi - self._index
            self._index = hi
            position = cols.offsets[hi - 1] + 1
            if hi == cols.count:  # the batch is done: the position passes all of it
                position = max(position, self._batch_next)
        return runs, count, position

    def _next_batch(
        self,
        position: int,
        check_crcs: bool,
    ) -> int:
        """Decode the next batch with records at or after ``position`` into the cursor
        (none left: ``_batch`` stays None); the position reached past batches skipped."""
        data = self.records
        end = len(data)
        pos = self._pos
        tp = self.tp
        while end - pos >= BATCH_OVERHEAD:
            t = unpack_header(data, pos)
            size = t[1] + LOG_OVERHEAD
            if t[1] < MIN_BATCH_LENGTH:
                # A length no batch can have: fetching again would get the same bytes
                # forever (Java raises CorruptRecordException here too).
                self._pos = pos
                raise CorruptRecordError(
                    f"record batch at offset {t[0]} of {tp} has length {t[1]}, below the "
                    f"minimum {MIN_BATCH_LENGTH}"
                )
            if pos + size > end:
                break  # a partial batch at the end (the broker's size cut): fetched again
            next_offset = t[0] + t[6] + 1
            attributes = t[5]
            committed = self.committed
            if next_offset <= position:
                if committed is not None and attributes & _CONTROL_BIT:
                    # Markers behind the position still close their transactions.
                    committed.accept(BatchHeader(*t), abort_marker=marker_is_abort(data, pos))
                pos += size  # all before the position (fetched from inside a batch)
                continue
            if check_crcs and crc32c(memoryview(data)[pos + _CRC_START : pos + size]) != t[4]:
                self._pos = pos
                raise CorruptRecordError(
                    f"record batch at offset {t[0]} of {tp} failed its CRC32C check"
                )
            if attributes & _CONTROL_BIT:
                if committed is not None:
                    committed.accept(BatchHeader(*t), abort_marker=marker_is_abort(data, pos))
                pos += size
                position = max(position, next_offset)
                continue
            if (
                committed is not None
                and attributes & _TRANSACTIONAL_BIT
                and not committed.accept(BatchHeader(*t))
            ):
                pos += size  # a batch of an aborted transaction
                position = max(position, next_offset)
                continue
            try:
                cols = decode_columns_raw(data, pos, t)
            except (RecordError, ValueError) as exc:
                self._pos = pos
                raise CorruptRecordError(f"cannot decode a batch of {tp}: {exc}") from exc
            self._pos = pos + size
            self._batch = cols
            self._index = 0 if t[0] >= position else cols.first_at_or_after(position)
            self._batch_next = next_offset
            return position
        self._pos = pos
        return position


def _records_of(
    cols: BatchColumns,
    lo: int,
    hi: int,
    topic: str,
    partition: int,
    kd: Deserializer,
    vd: Deserializer,
) -> list[ConsumerRecord]:
    """Records ``lo:hi`` of a batch (built by the compiled codec when there is one)."""
    return build_records(  # type: ignore[no-any-return]
        ConsumerRecord,
        cols.buffer,
        cols.raw_arrays,
        lo,
        hi,
        topic,
        partition,
        cols.timestamp_type,
        kd,
        vd,
    )


class RecordList(Sequence[ConsumerRecord]):
    """One partition's records of a poll: a list of ``ConsumerRecord`` built on access.

    ``len()`` costs nothing per record; iterating builds each record as it goes;
    indexing builds the one asked for.
    """

    __slots__ = ("_count", "_key_deserializer", "_runs", "_tp", "_value_deserializer")

    def __init__(
        self, tp: TopicPartition, key_deserializer: Deserializer, value_deserializer: Deserializer
    ) -> None:
        self._tp = tp
        self._runs: list[Run] = []
        self._count = 0
        self._key_deserializer = key_deserializer
        self._value_deserializer = value_deserializer

    def extend_runs(self, runs: list[Run], count: int) -> None:
        self._runs.extend(runs)
        self._count += count

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[ConsumerRecord]:
        topic, partition = self._tp
        kd, vd = self._key_deserializer, self._value_deserializer
        for cols, lo, hi in self._runs:
            yield from _records_of(cols, lo, hi, topic, partition, kd, vd)

    @overload
    def __getitem__(self, index: int) -> ConsumerRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[ConsumerRecord]: ...

    def __getitem__(self, index: int | slice) -> ConsumerRecord | list[ConsumerRecord]:
        if isinstance(index, slice):
            return list(self)[index]
        if index < 0:
            index += self._count
        if not 0 <= index < self._count:
            raise IndexError("record index out of range")
        topic, partition = self._tp
        for cols, lo, hi in self._runs:
            if index < hi - lo:
                return _records_of(
                    cols,
                    lo + index,
                    lo + index + 1,
                    topic,
                    partition,
                    self._key_deserializer,
                    self._value_deserializer,
                )[0]
            index -= hi - lo
        raise IndexError("record index out of range")  # unreachable: counts agree

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordList | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<RecordList {self._count} records of {self._tp}>"
