"""Producer state of one partition (Kafka's ProducerStateManager, simplified).

For each producer id the log remembers the current epoch, the metadata of its
last 5 batches (first/last sequence, first/last offset, timestamp) and, for a
transactional producer, the first offset of its open transaction. That is
enough to answer a retried batch with its original offsets, to detect gaps
(OUT_OF_ORDER_SEQUENCE_NUMBER), to fence old epochs (INVALID_PRODUCER_EPOCH)
and to know the partition's last stable offset (LSO): the first offset of the
oldest open transaction, or the log end when none is open.

Rules, checked against Kafka's ``ProducerAppendInfo`` / ``ProducerStateEntry``:

* producer_id -1: not idempotent, no checks.
* A batch whose epoch equals the cached epoch and whose exact (first, last)
  sequence range is one of the cached 5 is a duplicate: nothing is written and
  the original offsets are returned. This check runs before any other.
* epoch < cached epoch -> InvalidProducerEpochError (markers included).
* epoch > cached epoch (a bump) -> the cached batches are dropped and the first
  sequence must be 0, unless the producer had no epoch at all.
* same epoch -> first sequence must be last sequence + 1 (int32 wrap to 0).
* A producer with no state (never seen, or evicted when retention removed all
  of its batches) is accepted at any sequence. This is what Kafka has done
  since 2.5 (KIP-360); UNKNOWN_PRODUCER_ID is no longer returned.
* Transactions: the first transactional batch of a producer opens its
  transaction at that batch's offset; a non-transactional batch while one is
  open is INVALID_TXN_STATE. A COMMIT or ABORT marker (a control batch the
  transaction coordinator writes) closes it and yields a ``CompletedTxn``
  (the partition log records aborted ones in the segment's transaction index);
  a marker for a producer with nothing open changes only its epoch.

State is rebuilt on open by replaying batch headers (no record decoding),
starting from the newest snapshot (written at roll and at clean shutdown), so
the cost after a crash is one header scan of the segments written since the
last roll. Snapshots record open transactions too.
"""

from __future__ import annotations

import contextlib
import struct
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from odradek.log.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from odradek.log.index import write_file_atomic
from odradek.protocol.records import BatchHeader, crc32c

__all__ = [
    "BATCHES_TO_RETAIN",
    "BatchMetadata",
    "CompletedTxn",
    "PreparedAppend",
    "ProducerEntry",
    "ProducerStateManager",
]

BATCHES_TO_RETAIN = 5
_INT32_MAX = 2**31 - 1

_SNAP_MAGIC = b"ODPS"
_SNAP_HEAD = struct.Struct(">4sHqi")  # magic, version, end offset, entry count
_SNAP_ENTRY = struct.Struct(">qhB")  # producer id, epoch, batch count
_SNAP_TXN = struct.Struct(">q")  # v2: first offset of the open transaction, -1 if none
_SNAP_BATCH = struct.Struct(">iiqqq")  # first seq, last seq, first offset, last offset, ts
_SNAP_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one idempotent batch."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed: its producer, first data offset and marker offset."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool


class ProducerEntry:
    """Epoch, the last few batches and the open transaction of one producer id."""

    __slots__ = ("batches", "epoch", "producer_id", "txn_first_offset")

    def __init__(self, producer_id: int, epoch: int = -1) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=BATCHES_TO_RETAIN)
        self.txn_first_offset = -1  # first offset of the open transaction, -1: none

    def copy(self) -> ProducerEntry:
        e = ProducerEntry(self.producer_id, self.epoch)
        e.batches.extend(self.batches)
        e.txn_first_offset = self.txn_first_offset
        return e

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def update_epoch(self, epoch: int) -> None:
        """A new epoch forgets the old epoch's batches (Kafka maybeUpdateProducerEpoch)."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def add_batch(self, epoch: int, meta: BatchMetadata) -> None:
        self.update_epoch(epoch)
        self.batches.append(meta)

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


@dataclass(slots=True)
class PreparedAppend:
    """What an append will change, validated but not yet applied (``commit`` applies it)."""

    entries: dict[int, ProducerEntry]
    completed: list[CompletedTxn]


class ProducerStateManager:
    """Per-partition map producer_id -> ProducerEntry with validate/commit split.

    ``prepare`` validates a whole append against a scratch copy and returns the
    updated entries; ``commit`` installs them only after the bytes are written,
    so a failed write never leaves state ahead of the log.
    """

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    def __len__(self) -> int:
        return len(self.entries)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None when none is open."""
        return min(self.ongoing.values()) if self.ongoing else None

    def find_duplicate(self, h: BatchHeader) -> BatchMetadata | None:
        if h.producer_id < 0 or h.is_control:
            return None
        e = self.entries.get(h.producer_id)
        if e is None:
            return None
        return e.find_duplicate(h.producer_epoch, h.base_sequence, h.last_sequence)

    def prepare(
        self,
        batches: list[tuple[BatchHeader, int, int, bool]],
        *,
        check_sequence: bool = True,
    ) -> PreparedAppend:
        """Validate (header, assigned base offset, timestamp, is an ABORT marker) tuples;
        return the changes.

        Raises InvalidProducerEpochError / OutOfOrderSequenceError / InvalidTxnStateError.
        """
        updated: dict[int, ProducerEntry] = {}
        completed: list[CompletedTxn] = []
        for h, base, ts, abort in batches:
            pid = h.producer_id
            if pid < 0:
                continue
            entry = updated.get(pid)
            current = self.entries.get(pid)
            if entry is None:
                entry = current.copy() if current is not None else ProducerEntry(pid)
                updated[pid] = entry
            epoch = h.producer_epoch
            if epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid} epoch {epoch} is older than the current epoch {entry.epoch}"
                )
            if h.is_control:
                done = _end_transaction(entry, epoch, base, abort)
                if done is not None:
                    completed.append(done)
                continue
            if h.is_transactional:
                if entry.txn_first_offset < 0:
                    entry.txn_first_offset = base
            elif entry.txn_first_offset >= 0:
                raise InvalidTxnStateError(
                    f"producer {pid} has an open transaction: expected a transactional write"
                )
            first_seq = h.base_sequence
            if check_sequence:
                committed_epoch = current.epoch if current is not None else -1
                if epoch != entry.epoch:
                    if first_seq != 0 and entry.epoch != -1:
                        raise OutOfOrderSequenceError(
                            f"producer {pid}: new epoch {epoch} must start at sequence 0, "
                            f"got {first_seq} (current epoch {entry.epoch})"
                        )
                elif committed_epoch != -1 and not _in_sequence(entry.last_seq, first_seq):
                    raise OutOfOrderSequenceError(
                        f"producer {pid} epoch {epoch}: expected sequence "
                        f"{(entry.last_seq + 1) & _INT32_MAX}, got {first_seq}"
                    )
            entry.add_batch(
                epoch,
                BatchMetadata(first_seq, h.last_sequence, base, base + h.last_offset_delta, ts),
            )
        return PreparedAppend(updated, completed)

    def commit(self, prepared: PreparedAppend) -> None:
        for pid, entry in prepared.entries.items():
            self.entries[pid] = entry
            self._track(entry)

    def _track(self, entry: ProducerEntry) -> None:
        if entry.txn_first_offset >= 0:
            self.ongoing[entry.producer_id] = entry.txn_first_offset
        else:
            self.ongoing.pop(entry.producer_id, None)

    def replay(self, h: BatchHeader, *, abort: bool = False) -> CompletedTxn | None:
        """Apply a batch read back from the log during recovery (no validation).

        ``abort``: the batch is an ABORT marker. Returns the transaction a marker
        closed, if any.
        """
        pid = h.producer_id
        if pid < 0:
            return None
        e = self.entries.get(pid)
        if e is None:
            e = self.entries[pid] = ProducerEntry(pid)
        if h.is_control:
            done = _end_transaction(e, h.producer_epoch, h.base_offset, abort)
            self._track(e)
            return done
        if h.is_transactional and e.txn_first_offset < 0:
            e.txn_first_offset = h.base_offset
            self._track(e)
        e.add_batch(
            h.producer_epoch,
            BatchMetadata(
                h.base_sequence, h.last_sequence, h.base_offset, h.last_offset, h.max_timestamp
            ),
        )
        return None

    def evict_below(self, start_offset: int) -> None:
        """Forget producers whose every batch lies below the log start (Kafka does the same);
        a producer with an open transaction stays until a marker closes it."""
        for pid in [
            p
            for p, e in self.entries.items()
            if e.last_offset < start_offset and e.txn_first_offset < 0
        ]:
            del self.entries[pid]

    def truncate_from(self, offset: int) -> None:
        """Forget batches at or after ``offset`` (used if the log loses its tail)."""
        for pid in list(self.entries):
            e = self.entries[pid]
            if e.txn_first_offset >= offset:
                e.txn_first_offset = -1
                self._track(e)
            kept = [b for b in e.batches if b.last_offset < offset]
            if not kept and e.txn_first_offset < 0:
                del self.entries[pid]
                continue
            e.batches.clear()
            e.batches.extend(kept)

    # ------------------------------------------------------------------ snapshot

    def write_snapshot(self, path: Path, end_offset: int, *, fsync: bool) -> None:
        """Persist the state as of ``end_offset`` so reopening need not rescan old segments."""
        write_file_atomic(path, self.snapshot_bytes(end_offset), fsync=fsync)

    def snapshot_bytes(self, end_offset: int) -> bytes:
        """The snapshot file's contents (taken under the log's lock, written by a worker)."""
        parts = [_SNAP_HEAD.pack(_SNAP_MAGIC, 2, end_offset, len(self.entries))]
        for e in self.entries.values():
            parts.append(_SNAP_ENTRY.pack(e.producer_id, e.epoch, len(e.batches)))
            parts.append(_SNAP_TXN.pack(e.txn_first_offset))
            for b in e.batches:
                parts.append(
                    _SNAP_BATCH.pack(
                        b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp
                    )
                )
        body = b"".join(parts)
        return body + _SNAP_CRC.pack(crc32c(body))

    @classmethod
    def read_snapshot(cls, path: Path) -> tuple[ProducerStateManager, int] | None:
        """Load (state, end offset) or None if the file is missing or damaged."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        if len(data) < _SNAP_HEAD.size + _SNAP_CRC.size:
            return None
        body = data[: -_SNAP_CRC.size]
        if _SNAP_CRC.unpack(data[-_SNAP_CRC.size :])[0] != crc32c(body):
            return None
        with contextlib.suppress(struct.error):
            magic, version, end_offset, count = _SNAP_HEAD.unpack_from(body, 0)
            if magic != _SNAP_MAGIC or version not in (1, 2):
                return None
            pos = _SNAP_HEAD.size
            mgr = cls()
            for _ in range(count):
                pid, epoch, nb = _SNAP_ENTRY.unpack_from(body, pos)
                pos += _SNAP_ENTRY.size
                e = ProducerEntry(pid, epoch)
                if version >= 2:
                    (e.txn_first_offset,) = _SNAP_TXN.unpack_from(body, pos)
                    pos += _SNAP_TXN.size
                    mgr._track(e)
                for _ in range(nb):
                    e.batches.append(BatchMetadata(*_SNAP_BATCH.unpack_from(body, pos)))
                    pos += _SNAP_BATCH.size
                mgr.entries[pid] = e
            if pos != len(body):
                return None
            return mgr, end_offset
        return None


def _end_transaction(
    entry: ProducerEntry, epoch: int, marker_offset: int, aborted: bool
) -> CompletedTxn | None:
    """A marker for ``entry``'s producer: close its open transaction, if it has one.

    A marker with no open transaction (a transaction without data in this
    partition, or one already closed) leaves nothing to complete.
    """
    entry.update_epoch(epoch)
    if entry.txn_first_offset < 0:
        return None
    first, entry.txn_first_offset = entry.txn_first_offset, -1
    return CompletedTxn(entry.producer_id, first, marker_offset, aborted)
