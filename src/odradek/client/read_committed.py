"""Which batches a read_committed consumer returns (Kafka's Fetcher rules), as a pure filter.

A read_committed Fetch answer holds batches below the partition's last stable
offset, and the aborted transactions that overlap them: (producer id, first
offset) pairs. The consumer walks the batches in offset order: an aborted
transaction becomes *active* for its producer once the walk reaches its first
offset, and stays active until that producer's ABORT marker; while it is
active the producer's transactional batches are dropped. Control batches
(COMMIT / ABORT markers) are never returned. Batches of other producers, and
non-transactional ones, are returned as they are.

One ``ReadCommittedFilter`` per partition and fetch answer::

    keep = ReadCommittedFilter(partition_response.aborted_transactions)
    for pos, header in iter_batches(records):
        if keep.accept(header, abort_marker=header.is_control and marker_is_abort(records, pos)):
            ...  # decode and return the batch's records

The consumer's fetcher gives each read_committed ``CompletedFetch`` one of these
(``client/fetched.py``), which asks it about every transactional and control batch
before decoding, so the records of an aborted transaction are never decoded.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any, Protocol

__all__ = ["BatchView", "ReadCommittedFilter"]


class BatchView(Protocol):
    """The batch header fields the filter reads (``records.BatchHeader`` has them)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def last_offset(self) -> int: ...

    @property
    def producer_id(self) -> int: ...

    @property
    def is_transactional(self) -> bool: ...

    @property
    def is_control(self) -> bool: ...


def _pairs(aborted: Iterable[Any] | None) -> list[tuple[int, int]]:
    """(first offset, producer id) from tuples or kio entries with those fields."""
    out = []
    for entry in aborted or ():
        if isinstance(entry, tuple):
            producer_id, first_offset = entry
        else:
            producer_id, first_offset = entry.producer_id, entry.first_offset
        out.append((int(first_offset), int(producer_id)))
    return out


class ReadCommittedFilter:
    """Feed it the batches of one fetched partition in order; it says which to keep."""

    def __init__(self, aborted_transactions: Iterable[Any] | None) -> None:
        self._upcoming = _pairs(aborted_transactions)
        heapq.heapify(self._upcoming)
        self._aborting: set[int] = set()  # producers inside an aborted transaction

    def accept(self, batch: BatchView, *, abort_marker: bool = False) -> bool:
        """Whether the batch's records reach the application.

        ``abort_marker``: the batch is a control batch holding an ABORT marker
        (``records.marker_is_abort``); it closes its producer's aborted transaction.
        """
        while self._upcoming and self._upcoming[0][0] <= batch.last_offset:
            _, producer_id = heapq.heappop(self._upcoming)
            self._aborting.add(producer_id)
        if batch.is_control:
            if abort_marker:
                self._aborting.discard(batch.producer_id)
            return False
        return not (batch.is_transactional and batch.producer_id in self._aborting)
