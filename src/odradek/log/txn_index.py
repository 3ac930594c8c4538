"""The aborted-transaction index of one segment (Kafka's ``.txnindex``).

When an ABORT marker is appended, the transaction it closes is recorded in the
index of the segment holding the marker: producer id, first offset of the
transaction's data, the marker's offset and the partition's last stable offset
once it closed. A read_committed Fetch asks every segment from the one it reads
onward for the aborted transactions overlapping what it returns, and hands them
to the client, which drops those producers' batches in those ranges.

The file uses Kafka's format: 34-byte entries, each ``version`` (int16, 0),
``producer_id``, ``first_offset``, ``last_offset``, ``last_stable_offset``
(int64 each). Entries are appended as markers arrive (one small unbuffered
write, like the log itself; no fsync), a missing file means no entry, and
after an unclean stop the entries from the producer snapshot's offset onward
are rebuilt from the log (``PartitionLog`` recovery), so a torn last entry is
dropped and rewritten.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from odradek.log.index import write_file_atomic

__all__ = ["AbortedTxn", "TxnIndex", "read_txn_index", "write_txn_index"]

log = logging.getLogger("odradek.log")

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int  # the partition's LSO once this transaction closed


def read_txn_index(path: Path) -> list[AbortedTxn]:
    """Every whole entry of a ``.txnindex`` file (none if it is missing; a torn tail is cut)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    whole = len(data) - len(data) % ENTRY_SIZE
    out = []
    for pos in range(0, whole, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != 0:
            break  # an unknown version (or garbage): nothing after it is trusted
        out.append(AbortedTxn(pid, first, last, lso))
    return out


def write_txn_index(path: Path, entries: Iterable[AbortedTxn], *, fsync: bool) -> None:
    """Replace the file with ``entries`` (removed when there are none)."""
    data = b"".join(_ENTRY.pack(0, *e) for e in entries)
    if data:
        write_file_atomic(path, data, fsync=fsync)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


class TxnIndex:
    """A segment's aborted transactions, loaded on first use."""

    __slots__ = ("_directory", "_entries", "_name", "_path", "_unwritten")

    def __init__(self, directory: Path, name: str) -> None:
        # The path is made on first use: a broker opening 10,000 partitions makes a
        # segment for each, and most never touch their transaction index.
        self._directory = directory
        self._name = name
        self._path: Path | None = None
        self._entries: list[AbortedTxn] | None = None
        self._unwritten = False  # the file lacks entries memory has: sync() rewrites it

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = Path(self._directory, self._name)
        return self._path

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = read_txn_index(self.path)
        return self._entries

    def append(self, entry: AbortedTxn) -> None:
        """Record an aborted transaction: in memory at once (its marker is already in the
        log, so readers must drop its data from now on), then in the file. A file that
        cannot be written now (no descriptor, no space) is rewritten by ``sync``."""
        entries = self.entries
        if entries and entries[-1].last_offset >= entry.last_offset:
            raise ValueError(
                f"aborted transaction ending at {entry.last_offset} after one ending at "
                f"{entries[-1].last_offset}"
            )
        entries.append(entry)
        if self._unwritten:
            self._rewrite()
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size % ENTRY_SIZE:  # a torn entry from a crash: cut it before appending
                    os.ftruncate(fd, size - size % ENTRY_SIZE)
                os.write(fd, _ENTRY.pack(0, *entry))
            finally:
                os.close(fd)
        except OSError as exc:
            self._unwritten = True
            log.error("%s: entry kept in memory, file rewritten later: %s", self.path, exc)

    def _rewrite(self) -> None:
        """Best effort now; ``sync`` insists."""
        try:
            self.replace(self.entries)
        except OSError as exc:
            log.error("%s: rewrite failed, retried at the next sync: %s", self.path, exc)

    def replace(self, entries: list[AbortedTxn]) -> None:
        """Rewrite the index with ``entries`` (recovery, compaction)."""
        write_txn_index(self.path, entries, fsync=False)
        self._entries = list(entries)
        self._unwritten = False

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping [fetch_offset, upper_bound), and whether later segments
        can hold no more (an entry closed at or after the bound: Kafka's stop rule)."""
        found = []
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                found.append(e)
            if e.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def sync(self) -> None:
        """fsync the file, if there is one (segment roll and shutdown); first write the
        entries an earlier append could not (raising if it still cannot: a clean
        shutdown must not vouch for an index that lacks them)."""
        if self._unwritten:
            write_txn_index(self.path, self.entries, fsync=True)
            self._unwritten = False
            return
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
