"""One log segment: an append-only ``.log`` file of whole record batches plus its indexes.

A segment costs nothing until it is used: it learns its size, indexes and end
offset on first use (``ensure_loaded``), and borrows a file descriptor from the
shared ``FileCache`` for each operation, so idle partitions hold no files.

Every walk over the batch chain checks each header against what must hold for
a chain of batches written by this log (length, magic, offsets increasing and
inside the segment). A walk that breaks has found damage and sets the broken
range aside in place (``Hole``), recorded with its reason in ``<base>.corrupt``
(kept until an operator acts) and logged; reads jump it from then on:

- a range that held offsets is *quarantined*: reads answer for those offsets
  with ``CorruptSegmentError`` (CORRUPT_MESSAGE), never with nothing;
- a range that holds no offset the log is missing is *skipped* silently for
  readers: a byte-identical copy of a batch the log holds (a doubled or replayed
  write), or unreadable bytes between two batches whose offsets follow on;
- a CRC-valid batch whose offsets go back but that is not such a copy is a
  second writer's: set aside too (logged as an error), the log's own batches at
  those offsets stay what readers get, and its offsets past the log's, which
  nothing else holds, are quarantined (``_overlap``).

A quarantined range is never empty, so no offset below the end answers "no
error, no records". Nothing is truncated or deleted here, except a torn tail by
``recover(truncate_torn_tail=True)`` and a replica's diverged tail by ``truncate_to``.

Not thread-safe on its own: the partition log serializes access; the fields a
worker thread reads without that lock (a sealed segment's size, indexes, holes)
only ever change by replacement.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from odradek.log.errors import CorruptSegmentError
from odradek.log.files import FileCache, FileRegion, SegmentFile
from odradek.log.index import IndexCorruptError, OffsetIndex, TimeIndex, write_file_atomic
from odradek.log.reserve import RESERVE_BYTES, release, reserve
from odradek.log.txn_index import TxnIndex
from odradek.protocol.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    RawHeader,
    crc32c,
    unpack_header,
)

__all__ = ["Damage", "Hole", "Segment", "segment_name"]

log = logging.getLogger(__name__)

_SCAN_CHUNK = 1 << 20  # recovery / resync / full scans read 1 MiB at a time
_IN_PLACE_LOOKAHEAD = 8  # batches a damaged base offset's judgement looks ahead
_MAX_REL_OFFSET = 2**32 - 1
_CRC_START = 21
_MAGIC_POS = 16
_MAGIC = b"\x02"


def segment_name(base_offset: int) -> str:
    """Kafka's file naming: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


class Hole(NamedTuple):
    """A byte range reads jump over, and the offsets it held: [first_offset, end_offset).

    With offsets (``lost``) it is *quarantined*: those offsets answer
    CORRUPT_MESSAGE. Without any (first_offset == end_offset) it is only
    *skipped*: bytes that hold no offset the log is missing (a copy of a batch
    the log already holds, or unreadable bytes between two batches whose offsets
    follow on), so reads pass it and nothing answers with an error.
    """

    position: int
    end_position: int
    first_offset: int
    end_offset: int
    reason: str = ""

    @property
    def lost(self) -> bool:
        """Does the range hold offsets that cannot be read (a quarantine, not a skip)?"""
        return self.end_offset > self.first_offset


class Damage(NamedTuple):
    """A range set aside in a partition's log (``PartitionLog.damage``): a ``Hole`` and
    the base offset of the segment holding it."""

    segment: int
    position: int
    end_position: int
    first_offset: int
    end_offset: int
    reason: str = ""

    @property
    def lost(self) -> bool:
        """Quarantined (offsets answer CORRUPT_MESSAGE), not only skipped."""
        return self.end_offset > self.first_offset


class Segment:
    """A segment file, its in-memory sparse indexes, and any quarantined ranges."""

    __slots__ = (
        "_hint_offset",
        "_hint_pos",
        "_hole_lock",
        "_recorded_end",
        "_truncate_torn_tail",
        "assumed",
        "base_offset",
        "bytes_since_index",
        "created_ms",
        "directory",
        "file",
        "files",
        "holes",
        "index_interval",
        "loaded",
        "marker_on_disk",
        "max_timestamp",
        "next_offset",
        "next_segment_base",
        "offset_index",
        "offset_of_max_timestamp",
        "reserved_end",
        "size",
        "time_index",
        "truncated",
        "txn_index",
    )

    def __init__(
        self, directory: Path, base_offset: int, index_interval: int, files: FileCache
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval = index_interval
        self.files = files
        self.file = SegmentFile(os.path.join(directory, f"{segment_name(base_offset)}.log"))
        self.loaded = False
        self.assumed = False  # size and end offset taken from a clean shutdown's record
        self.marker_on_disk: bool | None = None  # is there a .corrupt file? None: unknown
        self.size = -1  # unknown until loaded (or assumed, or stat'ed by byte_size)
        # Blocks are reserved up to here (reserve.py); -1: reserving failed, do not retry.
        self.reserved_end = 0
        self.next_offset = base_offset
        self.next_segment_base: int | None = None  # offsets here stay below it
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.bytes_since_index = 0
        self.created_ms: int | None = None  # injected-clock time of the first append
        self.offset_index = OffsetIndex()
        self.time_index = TimeIndex()
        self.holes: tuple[Hole, ...] = ()
        self._hole_lock = threading.RLock()
        self._recorded_end: int | None = None  # while a clean shutdown's end is being checked
        self._truncate_torn_tail = False  # only while recover(truncate_torn_tail=True) runs
        self.truncated = 0
        self._hint_offset = -1
        self._hint_pos = -1
        self.txn_index = TxnIndex(directory, f"{segment_name(base_offset)}.txnindex")

    # ------------------------------------------------------------------ files

    @property
    def log_path(self) -> Path:
        return Path(self.file.path)

    @property
    def index_path(self) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}.index"

    @property
    def timeindex_path(self) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}.timeindex"

    @property
    def txnindex_path(self) -> Path:
        return self.txn_index.path

    @property
    def corrupt_path(self) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}.corrupt"

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, index_interval: int, files: FileCache
    ) -> Segment:
        """A new, empty segment file (its descriptor stays in the cache for the appends)."""
        seg = cls(directory, base_offset, index_interval, files)
        with files.use(seg.file, create=True) as fd:
            seg.size = os.fstat(fd).st_size
        seg.loaded = True
        if seg.size:  # a leftover file of that name: learn what it holds
            seg.loaded = False
            seg.ensure_loaded()
        return seg

    @classmethod
    def existing(
        cls, directory: Path, base_offset: int, index_interval: int, files: FileCache
    ) -> Segment:
        """A segment file on disk, not read until first used."""
        return cls(directory, base_offset, index_interval, files)

    def assume(self, size: int, next_offset: int) -> None:
        """What a clean shutdown recorded: size and end offset, without reading anything."""
        self.size = size
        self.next_offset = next_offset
        self.assumed = True

    def close(self) -> None:
        if self.reserved_end > 0:
            with contextlib.suppress(OSError):  # a file gone already holds no blocks
                self.release_reserved()
        self.files.retire(self.file)

    def delete_files(self) -> None:
        self.close()
        paths = (
            self.log_path,
            self.index_path,
            self.timeindex_path,
            self.txnindex_path,
            self.corrupt_path,
        )
        for p in paths:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def fsync(self) -> None:
        with self.files.use(self.file) as fd:
            os.fsync(fd)

    def pread(self, n: int, pos: int) -> bytes:
        with self.files.use(self.file) as fd:
            return os.pread(fd, n, pos)

    def mtime_ns(self) -> int:
        return os.stat(self.log_path).st_mtime_ns

    def byte_size(self) -> int:
        """The file's size; a stat, not a load, for a segment not used yet."""
        if self.size < 0:
            self.size = os.stat(self.log_path).st_size
        return self.size

    # ------------------------------------------------------------------ state

    @property
    def is_empty(self) -> bool:
        return self.byte_size() == 0

    def ensure_loaded(self) -> None:
        """Learn size, indexes and end offset: index files if they check out, else a scan."""
        if self.loaded:
            return
        assumed_end = self.next_offset if self.assumed else None
        self._recorded_end = assumed_end  # what damage at the tail held (``_quarantine``)
        self.size = os.stat(self.log_path).st_size
        if self.marker_on_disk is not False:
            self.holes = self._read_corrupt_marker()
        if not self.load_indexes():
            self.recover(truncate_torn_tail=False)
            self.write_index_files(fsync=False)
        if assumed_end is not None:
            self._check_recorded_end(assumed_end)
        self.loaded = True
        self._recorded_end = None

    def _check_recorded_end(self, recorded_end: int) -> None:
        if recorded_end != self.next_offset:
            log.error(
                "%s: segment %d ends at offset %d, not at %d as recorded at shutdown",
                self.directory,
                self.base_offset,
                self.next_offset,
                recorded_end,
            )

    def note_batch(
        self, pos: int, base_offset: int, next_offset: int, max_ts: int, size: int
    ) -> None:
        """Account for a batch written at ``pos``: sparse index entries and max timestamp.

        Mirrors Kafka: an index entry is added when more than index_interval
        bytes were written since the previous one, pointing at this batch.
        """
        if self.bytes_since_index > self.index_interval:
            self.offset_index.append(base_offset - self.base_offset, pos)
            if self.offset_of_max_timestamp >= 0:
                self.time_index.maybe_append(
                    self.max_timestamp, self.offset_of_max_timestamp - self.base_offset
                )
            self.bytes_since_index = 0
        self.bytes_since_index += size
        if max_ts > self.max_timestamp:
            self.max_timestamp = max_ts
            self.offset_of_max_timestamp = base_offset
        self.next_offset = next_offset

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Write all bytes with unbuffered os.write; on failure cut back to the old size."""
        view = memoryview(data)
        old = self.size
        with self.files.use(self.file) as fd:
            self._maybe_reserve(fd, old + len(view))
            try:
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            except BaseException:
                self._cut_back(fd, old)
                raise
        self.size = old + len(data)

    def write_parts(self, parts: tuple[bytes | memoryview, ...], total: int) -> None:
        """One os.writev of several buffers (avoids copying the payload to patch it)."""
        old = self.size
        with self.files.use(self.file) as fd:
            self._maybe_reserve(fd, old + total)
            try:
                n = os.writev(fd, parts)
                if n < total:  # short write (signal, disk nearly full): finish the rest
                    rest = memoryview(b"".join(parts))[n:]
                    while rest:
                        k = os.write(fd, rest)
                        rest = rest[k:]
            except BaseException:
                self._cut_back(fd, old)
                raise
        self.size = old + total

    def _maybe_reserve(self, fd: int, end: int) -> None:
        """Before a write that grows the segment to `end`: a busy segment (RESERVE_BYTES
        long already) whose reserved blocks end before that reserves up to a chunk past it
        (reserve.py says why); one whose reserving failed appends without."""
        if end <= self.reserved_end or self.reserved_end < 0 or self.size < RESERVE_BYTES:
            return
        start = max(self.reserved_end, self.size)
        if reserve(fd, start, end + RESERVE_BYTES - start):
            self.reserved_end = end + RESERVE_BYTES
        else:
            self.reserved_end = -1

    def _cut_back(self, fd: int, size: int) -> None:
        """A failed write: the file back to `size` (which frees any reservation too)."""
        os.ftruncate(fd, size)
        if self.reserved_end > 0:
            self.reserved_end = 0

    def release_reserved(self) -> None:
        """No more appends here for now (rolled, closing): free the blocks reserved past
        the end of what was appended."""
        if self.reserved_end > 0:
            with self.files.use(self.file) as fd:
                release(fd, self.size)
        self.reserved_end = 0

    def seal(self) -> None:
        """No more appends: record the final max timestamp in the time index (in memory)."""
        if self.offset_of_max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp - self.base_offset
            )

    def write_index_files(self, *, fsync: bool) -> None:
        write_file_atomic(self.index_path, self.offset_index.to_bytes(), fsync=fsync)
        write_file_atomic(self.timeindex_path, self.time_index.to_bytes(), fsync=fsync)

    def finalize_indexes(self, *, fsync: bool) -> None:
        """Seal and write both index files."""
        self.seal()
        self.write_index_files(fsync=fsync)

    def truncate_to(self, position: int, offset: int) -> None:
        """Cut the file at ``position``, the boundary of the batch based at ``offset``
        (replica truncation): everything from there goes, fsynced; the indexes,
        quarantined ranges and aborted-transaction entries follow, and size, end
        offset and max timestamp are learnt again from the kept part."""
        self.ensure_loaded()
        if position < self.size or self.reserved_end > position:
            with self.files.use(self.file) as fd:
                os.ftruncate(fd, position)  # frees any reserved blocks as well
                os.fsync(fd)
            self.reserved_end = 0
        kept_holes = tuple(h for h in self.holes if h.end_position <= position)
        if kept_holes != self.holes:
            self.holes = kept_holes
            if kept_holes:
                self._write_corrupt_marker()
            else:
                self.corrupt_path.unlink(missing_ok=True)
        self.offset_index.truncate_to_position(position)
        self.time_index.truncate_to_rel_offset(offset - self.base_offset)
        self.write_index_files(fsync=True)
        entries = self.txn_index.entries
        kept = [e for e in entries if e.last_offset < offset]
        if kept != entries:
            self.txn_index.replace(kept)
            self.txn_index.sync()
        # Relearn size, end offset and max timestamp: the index files just written
        # check out, so this walks only the kept tail after their last entry.
        self.loaded = False
        self.assumed = False
        self.drop_read_hint()
        self.ensure_loaded()

    # ------------------------------------------------------------------ the batch chain

    def _chain(
        self,
        start: int,
        expected: int,
        stop: int = -1,
        chunk: int = _SCAN_CHUNK,
        *,
        verify_crc: bool = False,
        prefetch: tuple[bytes | bytearray, int] | None = None,
    ) -> Iterator[tuple[int, RawHeader]]:
        """(position, raw header) of every valid batch from ``start`` to ``stop``.

        ``start`` is a batch boundary whose batch has base offset >= ``expected``.
        A batch is yielded only once the chain after it lines up (the next header
        starts at its next offset, or it ends the file or meets a quarantined
        range); otherwise its CRC32C must check out (always, with
        ``verify_crc``), since a damaged length would pass for a gap left by
        compaction. When the next header goes back to offsets the pending batch
        claims, the pending batch's own base offset (outside the CRC) is the
        damaged one. Known holes are jumped; anything broken is quarantined
        (``_quarantine``) and the walk goes on after it. Stops before a batch
        that would cross ``stop`` (default: the end of the file). ``prefetch``:
        bytes already read and their position, used before reading more.
        """
        pos = start
        pending: tuple[int, RawHeader, int] | None = None  # yielded once confirmed
        copies_from = -1  # where the ranges passed while judging the pending batch start
        buf, buf_start = prefetch if prefetch is not None else (b"", start)
        base = self.base_offset
        with self.files.use(self.file) as fd:
            stale = True  # the limits below change only when something is quarantined
            while True:
                if stale:
                    size_now = self.size
                    end = size_now if stop < 0 else min(stop, size_now)
                    upper = self._offset_bound()
                    holes = self.holes
                    stale = False
                hole = self._hole_at(pos) if holes else None
                t: RawHeader | None = None
                reason: str | None = None
                if hole is None and pos < size_now:
                    off = pos - buf_start
                    if off < 0 or off + BATCH_OVERHEAD > len(buf):
                        buf = os.pread(fd, max(min(chunk, size_now - pos), BATCH_OVERHEAD), pos)
                        buf_start, off = pos, 0
                    if len(buf) - off < BATCH_OVERHEAD:
                        reason = "a batch header is cut off by the file end"
                    else:
                        t = unpack_header(buf, off)
                        if not _fits(t, pos, size_now, expected, upper, base):
                            size = t[1] + LOG_OVERHEAD
                            reason = _broken(t, pos, size, size_now, expected, upper, base)
                if pending is not None:
                    # Bytes that hold nothing (a copy of a batch the chain holds, or a
                    # range already skipped) say nothing about the pending batch: it is
                    # judged by what comes after them, and the walk comes back to them
                    # once it is (so a copy is recorded where the chain then stands).
                    passed = (hole is not None and not hole.lost) or (
                        hole is None
                        and t is not None
                        and t[0] < expected
                        and self._copy_of(fd, pos, t, upper) is not None
                    )
                    if passed:
                        if copies_from < 0:
                            copies_from = pos
                        pos = hole.end_position if hole is not None else pos + t[1] + LOG_OVERHEAD
                        continue
                    p0, t0, expected0 = pending
                    pending = None
                    continued = t is not None and reason is None and t[0] == expected
                    # A batch that jumped ahead of the chain and that nothing continues
                    # (the file ends, or a torn or damaged tail follows) would, had it
                    # started where the chain was, end exactly where the clean shutdown
                    # said the segment ends: its base offset is damaged. (The file changed
                    # after that shutdown, so the recorded end is evidence, not a bound.)
                    ends_off_record = (
                        not continued
                        and hole is None
                        and not self.loaded
                        and self._recorded_end is not None
                        and t0[0] > expected0
                        and expected0 + t0[6] + 1 == self._recorded_end
                    )
                    lined_up = not ends_off_record and (
                        pos == size_now or (hole is not None and pos == hole.position) or continued
                    )
                    # The pending batch jumped ahead of the chain and its base is damaged
                    # when, started where the chain was, it (and any batches after it
                    # whose offsets cannot be the segment's) ends exactly where a later
                    # batch starts and the chain goes on from there. Or when the next base
                    # falls inside what it claims. Unless the next batch is the odd one
                    # (another writer's: see ``_overlap``): one claiming the same base
                    # offset (a base damaged into exactly the next batch's cannot be told
                    # from another writer's batch behind a gap: left as a gap), or one
                    # after which the chain goes on from the pending batch's end.
                    # Unreadable bytes in between are looked past, as copies are.
                    nxt = None
                    if not lined_up and t0[0] > expected0:
                        nxt = self._next_batch(fd, pos, t, expected0, upper)
                    goes_back_into_it = (
                        nxt is not None
                        and nxt[1][0] != t0[0]
                        and (
                            self._in_place(fd, nxt, expected0 + t0[6] + 1, upper, then_no_gap=True)
                            or (
                                expected0 <= nxt[1][0] < expected
                                and _broken(
                                    nxt[1],
                                    nxt[0],
                                    nxt[1][1] + LOG_OVERHEAD,
                                    size_now,
                                    expected0,
                                    upper,
                                    base,
                                )
                                is None
                                and not _resumes_at(
                                    fd,
                                    self._past_copies(fd, nxt[0] + nxt[1][1] + LOG_OVERHEAD, upper),
                                    size_now,
                                    expected,
                                )
                            )
                        )
                    )
                    if goes_back_into_it:
                        why = "the next batch goes back into its offsets"
                    elif ends_off_record and _crc_ok(fd, p0, t0):
                        why = f"the segment ended at {self._recorded_end} at a clean shutdown"
                    elif (verify_crc or not lined_up) and not _crc_ok(fd, p0, t0):
                        why = "CRC32C mismatch"
                    else:
                        why = None
                    if why is not None:
                        self._quarantine(p0, expected0, why, t0)
                        pos, expected, stale, copies_from = p0, expected0, True, -1
                        continue
                    yield p0, t0
                    if copies_from >= 0:  # back to the copies the judgement passed
                        pos, copies_from = copies_from, -1
                        continue
                if hole is not None:
                    pos = max(pos, hole.end_position)
                    expected = max(expected, hole.end_offset)
                    continue
                if pos >= end:
                    return
                if reason is not None or t is None:
                    self._quarantine(pos, expected, reason or "unreadable header", t)
                    stale = True
                    continue
                size = t[1] + LOG_OVERHEAD
                if pos + size > end:
                    return
                pending = (pos, t, expected)
                expected = t[0] + t[6] + 1
                pos += size

    def _offset_bound(self) -> int | None:
        """Offsets in this segment stay below this (next segment, or the known end: while
        a cleanly closed segment, still the size it was then, is loaded, the end its
        clean shutdown recorded)."""
        if self.next_segment_base is not None:
            return self.next_segment_base
        if self.loaded:
            return self.next_offset
        return self._recorded_end if self.assumed else None

    def _hole_at(self, pos: int) -> Hole | None:
        for hole in self.holes:
            if hole.position <= pos < hole.end_position:
                return hole
        return None

    def recorded_holes(self) -> tuple[Hole, ...]:
        """The ranges set aside in this segment, without loading it: one not used yet
        answers from its ``.corrupt`` record, if the directory listing showed one."""
        if self.loaded or self.holes or not self.marker_on_disk:
            return self.holes
        return self._read_corrupt_marker()

    def hole_for_offset(self, offset: int) -> Hole | None:
        for hole in self.holes:
            if hole.first_offset <= offset < hole.end_offset:
                return hole
        return None

    def check_readable(self, offset: int) -> None:
        """Raise CorruptSegmentError when ``offset`` lies in a quarantined range."""
        hole = self.hole_for_offset(offset)
        if hole is not None:
            raise self._corrupt_error(offset, hole)

    def _corrupt_error(self, offset: int, hole: Hole) -> CorruptSegmentError:
        where = "in" if hole.first_offset <= offset else "just before"
        return CorruptSegmentError(
            f"offset {offset} is {where} a corrupt part of segment {self.base_offset} "
            f"({self.log_path}, bytes {hole.position}-{hole.end_position}, offsets "
            f"{hole.first_offset}-{hole.end_offset - 1}: {hole.reason or 'damaged'}), "
            f"quarantined: see {self.corrupt_path}",
            resume_offset=hole.end_offset,
        )

    def _quarantine(
        self, pos: int, expected: int, reason: str, header: RawHeader | None
    ) -> Hole | None:
        """Record the broken range starting at ``pos`` (idempotent, thread-safe).

        A CRC-valid batch whose offsets go back is a copy or a second writer's
        batch (``_overlap``). Anything else ends at the next CRC-valid batch, or
        at the end of the file; its offsets run from ``expected`` to that batch's
        base (or, at the end, past whatever the damaged header plausibly claims),
        and none at all when that batch's base is ``expected`` (a skip). During a
        recovery that may truncate, a torn tail is cut off instead (returns None).
        """
        with self._hole_lock:
            existing = self._hole_at(pos)
            if existing is not None:
                return existing
            upper = self._offset_bound()
            hole = None
            if header is not None and header[0] < expected:
                hole = self._overlap(pos, expected, header, upper)
            if hole is None and header is not None:
                hole = self._misplaced(pos, expected, reason, header, upper)
            if hole is None:
                found = self._find_next_batch(pos + 1, expected, upper)
                if found is None and self._truncate_torn_tail and self._torn_from(pos, header):
                    log.warning(
                        "%s: truncating %d bytes of a torn write from segment %d",
                        self.directory,
                        self.size - pos,
                        self.base_offset,
                    )
                    with self.files.use(self.file) as fd:
                        os.ftruncate(fd, pos)
                    self.truncated += self.size - pos
                    self.size = pos
                    return None
                if found is not None:
                    end_pos, end_offset = found
                else:
                    end_pos = self.size
                    end_offset = max(expected, _claimed_end(header, expected, upper))
                    if self.loaded:
                        end_offset = max(end_offset, self.next_offset)
                    elif self._recorded_end is not None:  # acknowledged up to there
                        end_offset = max(end_offset, self._recorded_end)
                    if self.next_segment_base is not None:
                        end_offset = max(end_offset, self.next_segment_base)
                hole = Hole(pos, end_pos, expected, end_offset, reason)
            hole = self._add_hole(hole)
        self._report(hole)
        return hole

    def _overlap(self, pos: int, expected: int, t: RawHeader, upper: int | None) -> Hole | None:
        """The range to set aside for a well-formed, CRC-valid batch at ``pos`` whose
        offsets go back (below ``expected``), or None if it is no such batch.

        A single writer never goes back, so this is a copy or another writer's
        batch. A copy (same base offset, length, CRC32C and bytes, the leader
        epoch aside, as the log's own batch at that base) holds nothing new: its
        bytes are skipped. Another writer's batch for offsets the log already
        holds is set aside the same way, but logged as an error: the log's own
        batches at those offsets (written first) stay what readers get, and its
        records are left in place for the operator. Its offsets past the log's
        (from ``expected`` on), which nothing else holds, are quarantined.
        """
        size = t[1] + LOG_OVERHEAD
        first, last = t[0], t[0] + t[6]
        if _broken(t, pos, size, self.size, first, upper, self.base_offset) is not None:
            return None
        with self.files.use(self.file) as fd:
            original = self._copy_of(fd, pos, t, upper)
            if original is not None:
                return Hole(
                    pos,
                    pos + size,
                    expected,
                    expected,
                    f"a copy of the batch at byte {original} (offsets {first}-{last})",
                )
            if not _crc_ok(fd, pos, t):
                return None
            # The chain's own batch with a damaged base offset (outside the CRC) looks
            # the same, but what follows it goes on from where it would end had it
            # started at ``expected``: that is damage, its offsets quarantined.
            # (Copies after it are passed: they say nothing either way.)
            own_end = expected + t[6] + 1
            after = self._past_copies(fd, pos + size, upper)
            if after == self.size:
                known = self.next_offset if self.loaded else self._recorded_end
                if own_end in (known, self.next_segment_base):
                    return None
            elif after + BATCH_OVERHEAD <= self.size and self._in_place(
                fd, (after, unpack_header(os.pread(fd, BATCH_OVERHEAD, after))), own_end, upper
            ):
                return None
        return Hole(
            pos,
            pos + size,
            expected,
            max(expected, last + 1),
            f"another writer's batch? offsets {first}-{last}, written when the log had "
            f"reached {expected - 1}; its records are not served",
        )

    def _copy_of(self, fd: int, pos: int, t: RawHeader, upper: int | None) -> int | None:
        """Where the chain's batch that the CRC-valid batch at ``pos`` copies is (same
        base offset, length and bytes, the leader epoch aside), or None."""
        size = t[1] + LOG_OVERHEAD
        if _broken(t, pos, size, self.size, t[0], upper, self.base_offset) is not None:
            return None
        original = self._batch_based_at(fd, t[0], pos)
        if original is None:
            return None
        data = os.pread(fd, size, pos)
        if len(data) != size or crc32c(memoryview(data)[_CRC_START:]) != t[4]:
            return None
        held = os.pread(fd, size, original)
        if held[:12] == data[:12] and held[_MAGIC_POS:] == data[_MAGIC_POS:]:
            return original
        return None

    def _next_batch(
        self, fd: int, pos: int, t: RawHeader | None, expected: int, upper: int | None
    ) -> tuple[int, RawHeader] | None:
        """The batch at ``pos`` (header ``t``) if it is whole and based at ``expected`` or
        later, or whole and CRC-valid (whatever its base offset), else the first CRC-valid
        one based at ``expected`` or later after the unreadable bytes there, or None."""
        if t is not None:
            size = t[1] + LOG_OVERHEAD
            if _broken(t, pos, size, self.size, expected, upper, self.base_offset) is None:
                return pos, t
            whole = t[1] >= MIN_BATCH_LENGTH and t[3] == 2 and t[6] >= 0
            if whole and pos + size <= self.size and _crc_ok(fd, pos, t):
                return pos, t
        found = self._find_next_batch(pos + 1, expected, upper)
        if found is None:
            return None
        return found[0], unpack_header(os.pread(fd, BATCH_OVERHEAD, found[0]))

    def _in_place(
        self,
        fd: int,
        nxt: tuple[int, RawHeader],
        at: int,
        upper: int | None,
        *,
        then_no_gap: bool = False,
    ) -> bool:
        """Do the batches from ``nxt`` meet the chain at ``at`` (where it would stand had
        a batch with a damaged base offset been where the chain was)? Whole, CRC-valid
        batches whose offsets cannot be this segment's at all (damaged bases too) are
        counted in place, at most ``_IN_PLACE_LOOKAHEAD`` of them; any other batch ends
        the look-ahead (it may be another writer's, or a gap's end). ``then_no_gap``:
        the batch met must also be followed by the file's end or by its next offset (in
        a log with gaps, meeting ``at`` may be a second writer's coincidence)."""
        pos, t = nxt
        for _ in range(_IN_PLACE_LOOKAHEAD):
            if t[0] == at:
                if not then_no_gap:
                    return True
                after = self._past_copies(fd, pos + t[1] + LOG_OVERHEAD, upper)
                return after >= self.size or _resumes_at(fd, after, self.size, t[0] + t[6] + 1)
            size = t[1] + LOG_OVERHEAD
            if (
                _broken(t, pos, size, self.size, t[0], upper, self.base_offset) is None
                or t[1] < MIN_BATCH_LENGTH
                or t[3] != 2
                or t[6] < 0
                or pos + size > self.size
                or not _crc_ok(fd, pos, t)
            ):
                return False
            at += t[6] + 1
            pos = self._past_copies(fd, pos + size, upper)
            raw = os.pread(fd, BATCH_OVERHEAD, pos)
            if len(raw) < BATCH_OVERHEAD:
                return False
            t = unpack_header(raw)
        return False

    def _past_copies(self, fd: int, pos: int, upper: int | None) -> int:
        """``pos``, or where the copies and skipped ranges starting there end."""
        while pos < self.size:
            hole = self._hole_at(pos)
            if hole is not None:
                if hole.lost:
                    return pos
                pos = hole.end_position
                continue
            raw = os.pread(fd, BATCH_OVERHEAD, pos)
            if len(raw) < BATCH_OVERHEAD:
                return pos
            t = unpack_header(raw)
            if self._copy_of(fd, pos, t, upper) is None:
                return pos
            pos += t[1] + LOG_OVERHEAD
        return pos

    def _misplaced(
        self, pos: int, expected: int, reason: str, t: RawHeader, upper: int | None
    ) -> Hole | None:
        """A whole batch that passes its CRC32C but whose base offset (outside the CRC)
        does not fit the chain is the chain's next batch with a damaged base offset:
        the offsets it held, from ``expected``, are quarantined (its own bytes only).
        None when the header is not such a batch."""
        size = t[1] + LOG_OVERHEAD
        held = t[6] + 1
        if (
            t[1] < MIN_BATCH_LENGTH
            or t[3] != 2
            or t[6] < 0
            or pos + size > self.size
            or (upper is not None and expected + held > upper)
            or expected + held - self.base_offset > _MAX_REL_OFFSET
        ):
            return None
        with self.files.use(self.file) as fd:
            if not _crc_ok(fd, pos, t):
                return None
        return Hole(
            pos, pos + size, expected, expected + held, f"{reason}: its base offset is damaged"
        )

    def _batch_based_at(self, fd: int, offset: int, before: int) -> int | None:
        """Position of the chain's batch based at ``offset`` before byte ``before``, or None
        (a walk of headers from the offset index's entry, jumping set-aside ranges)."""
        _, p = self.offset_index.lookup(max(offset - self.base_offset, 0))
        while p < before:
            hole = self._hole_at(p)
            if hole is not None:
                p = hole.end_position
                continue
            raw = os.pread(fd, BATCH_OVERHEAD, p)
            if len(raw) < BATCH_OVERHEAD:
                return None
            h = unpack_header(raw)
            if h[0] >= offset or h[1] < MIN_BATCH_LENGTH or h[3] != 2:
                return p if h[0] == offset else None
            p += h[1] + LOG_OVERHEAD
        return None

    def _report(self, hole: Hole) -> None:
        """One log line per range set aside, with what it costs readers."""
        where = (
            f"{self.directory}: segment {self.base_offset}, bytes "
            f"{hole.position}-{hole.end_position}"
        )
        if hole.lost:
            log.error(
                "%s (%s): offsets %d-%d quarantined in place, nothing deleted; reading them "
                "fails with CORRUPT_MESSAGE until an operator acts (docs/operations.md, Recovery)",
                where,
                hole.reason,
                hole.first_offset,
                hole.end_offset - 1,
            )
        elif hole.reason.startswith("a copy of"):
            log.warning("%s (%s): skipped, the log already holds those records", where, hole.reason)
        else:
            log.error(
                "%s (%s): set aside in place, readers pass it; no offset is missing (the "
                "offsets around it follow on); see docs/operations.md, Recovery",
                where,
                hole.reason,
            )

    def _add_hole(self, hole: Hole) -> Hole:
        before = [h for h in self.holes if h.end_position <= hole.position]
        after = [h for h in self.holes if h.position >= hole.end_position]
        for h in self.holes:
            if h not in before and h not in after:  # overlapping: merge
                reasons = dict.fromkeys(r for r in (h.reason, hole.reason) if r)
                hole = Hole(
                    min(h.position, hole.position),
                    max(h.end_position, hole.end_position),
                    min(h.first_offset, hole.first_offset),
                    max(h.end_offset, hole.end_offset),
                    "; ".join(reasons),
                )
        self.holes = (*before, hole, *after)
        self.next_offset = max(self.next_offset, hole.end_offset)
        self._hint_offset = -1
        self._write_corrupt_marker()
        return hole

    def _write_corrupt_marker(self) -> None:
        body = json.dumps([h._asdict() for h in self.holes], indent=1).encode()
        try:
            write_file_atomic(self.corrupt_path, body, fsync=True)
        except OSError as exc:  # the quarantine holds in memory; say the file is missing
            log.error("%s: cannot write %s: %s", self.directory, self.corrupt_path, exc)

    def _read_corrupt_marker(self) -> tuple[Hole, ...]:
        try:
            entries = json.loads(self.corrupt_path.read_bytes())
            return tuple(sorted(Hole(**e) for e in entries))
        except FileNotFoundError:
            return ()
        except (ValueError, TypeError) as exc:
            log.error("%s: unreadable %s (%s): rescanning", self.directory, self.corrupt_path, exc)
            return ()

    def _find_next_batch(
        self, start: int, expected: int, upper: int | None
    ) -> tuple[int, int] | None:
        """(position, base offset) of the first CRC-valid batch at or after ``start``.

        Candidates are positions whose magic byte is 2 (found with ``bytes.find``),
        whose header fits the chain, and whose CRC32C matches: a false match needs
        all of that by chance.
        """
        pos = start
        with self.files.use(self.file) as fd:
            while pos + BATCH_OVERHEAD <= self.size:
                buf = os.pread(fd, min(_SCAN_CHUNK + BATCH_OVERHEAD, self.size - pos), pos)
                limit = len(buf) - BATCH_OVERHEAD
                i = buf.find(_MAGIC, _MAGIC_POS)
                while 0 <= i - _MAGIC_POS <= limit:
                    p = i - _MAGIC_POS
                    t = unpack_header(buf, p)
                    size = t[1] + LOG_OVERHEAD
                    where = pos + p
                    if (
                        _broken(t, where, size, self.size, expected, upper, self.base_offset)
                        is None
                    ) and _crc_ok(fd, where, t):
                        return where, t[0]
                    i = buf.find(_MAGIC, i + 1)
                pos += max(limit + 1, 1)
        return None

    # ------------------------------------------------------------------ recovery

    def recover(self, *, truncate_torn_tail: bool, recorded_end: int | None = None) -> int:
        """Rebuild indexes by a CRC-checked scan, quarantining what does not check out.

        A tail that is plainly a torn write (a header cut off, a length running
        past the end of the file, or zeros) is cut off when ``truncate_torn_tail``
        (the last segment after an unclean stop); anything else that fails is
        quarantined in place. Returns the number of bytes truncated.

        ``recorded_end``: the end offset a clean shutdown recorded for this segment
        whose file changed after it (its size differs: a copy or another writer's
        bytes were written into it). What the log had acknowledged, so the scan
        judges its last batch and a damaged tail by it; not a bound on the offsets
        the file now holds.
        """
        if recorded_end is not None:
            self._recorded_end = recorded_end
            try:
                truncated = self.recover(truncate_torn_tail=truncate_torn_tail)
            finally:
                self._recorded_end = None
            self._check_recorded_end(recorded_end)
            return truncated
        self.offset_index = OffsetIndex()
        self.time_index = TimeIndex()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.bytes_since_index = 0
        self._hint_offset = -1
        self.holes = ()
        self.loaded = False
        self.size = os.stat(self.log_path).st_size
        self.truncated = 0
        self._truncate_torn_tail = truncate_torn_tail
        try:
            for pos, t in self._chain(0, self.base_offset, verify_crc=True):
                self.note_batch(pos, t[0], t[0] + t[6] + 1, t[8], t[1] + LOG_OVERHEAD)
        finally:
            self._truncate_torn_tail = False
        if self.holes:
            self.next_offset = max(self.next_offset, self.holes[-1].end_offset)
        else:  # a quarantine recorded earlier that the data no longer shows (repaired)
            self.corrupt_path.unlink(missing_ok=True)
        self.loaded = True
        return self.truncated

    def _torn_from(self, pos: int, t: RawHeader | None) -> bool:
        """Does the file from ``pos`` look like an interrupted write rather than damage?"""
        remaining = self.size - pos
        if t is None or remaining < BATCH_OVERHEAD or t[1] + LOG_OVERHEAD > remaining:
            return True
        if remaining > _SCAN_CHUNK:
            return False
        tail = self.pread(remaining, pos)
        return tail.count(0) == len(tail)

    def load_indexes(self) -> bool:
        """Load index files and walk the tail after the last entry; False if unusable.

        A False answer means the caller must run ``recover()`` (full rebuild).
        """
        try:
            oi = OffsetIndex.from_bytes(self.index_path.read_bytes(), max(self.size, 1))
            ti = TimeIndex.from_bytes(self.timeindex_path.read_bytes())
        except (FileNotFoundError, IndexCorruptError):
            return False
        with self.files.use(self.file) as fd:
            for i in {0, len(oi) - 1} if len(oi) else ():
                raw = os.pread(fd, BATCH_OVERHEAD, oi.positions[i])
                if len(raw) < BATCH_OVERHEAD:
                    return False
                if unpack_header(raw)[0] != self.base_offset + oi.rel_offsets[i]:
                    return False
        self.offset_index = oi
        self.time_index = ti
        last = ti.last()
        if last is not None:
            self.max_timestamp = last[0]
            self.offset_of_max_timestamp = self.base_offset + last[1]
        else:
            self.max_timestamp = -1
            self.offset_of_max_timestamp = -1
        self.bytes_since_index = 0
        start = oi.positions[-1] if len(oi) else 0
        self.next_offset = self.base_offset + (oi.rel_offsets[-1] if len(oi) else 0)
        end = start
        holes_before = len(self.holes)
        for pos, t in self._chain(start, self.next_offset):
            self.note_batch(pos, t[0], t[0] + t[6] + 1, t[8], t[1] + LOG_OVERHEAD)
            end = pos + t[1] + LOG_OVERHEAD
        if len(self.holes) != holes_before:
            return True  # the walk quarantined damage; the indexes describe the rest
        tail_hole = self.holes[-1] if self.holes else None
        if end != self.size and not (tail_hole and tail_hole.end_position == self.size):
            return False
        return not (last is not None and self.base_offset + last[1] >= self.next_offset)

    # ------------------------------------------------------------------ reads

    def iter_headers(self, start: int = 0, expected: int = -1) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of every valid batch from the boundary ``start``.

        ``expected``: the least base offset the batch at ``start`` may have (what
        ``find_batch`` answered with; the segment's base offset by default).
        """
        self.ensure_loaded()
        for pos, t in self._chain(start, max(expected, self.base_offset)):
            yield pos, BatchHeader(*t)

    def iter_raw_batches(self, stop: int) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every valid batch that ends by byte ``stop``, with its bytes (compaction)."""
        buf = b""
        buf_start = 0
        for pos, t in self._chain(0, self.base_offset, stop):
            size = t[1] + LOG_OVERHEAD
            off = pos - buf_start
            if off + size > len(buf):
                buf = self.pread(max(min(_SCAN_CHUNK, stop - pos), size), pos)
                buf_start, off = pos, 0
            yield BatchHeader(*t), buf[off : off + size]

    def find_batch(self, offset: int) -> tuple[int, int] | None:
        """(position, base offset) of the first batch whose last offset >= ``offset``.

        None when this segment has no such batch. Raises CorruptSegmentError when
        ``offset`` is in a quarantined range.
        """
        self.ensure_loaded()
        if offset >= self.next_offset:
            return None
        self.check_readable(offset)
        if offset == self._hint_offset:
            return self._hint_pos, offset
        rel, pos = self.offset_index.lookup(max(offset - self.base_offset, 0))
        chunk = max(self.index_interval, 4096) + 2 * BATCH_OVERHEAD
        for p, t in self._chain(pos, self.base_offset + rel, chunk=chunk):
            if t[0] + t[6] >= offset:
                if t[0] > offset:  # a gap (compaction) or a range quarantined on the way
                    self.check_readable(offset)
                return p, t[0]
        self.check_readable(offset)
        return None

    def read_from(
        self,
        pos: int,
        max_bytes: int,
        expected: int,
        stop_offset: int | None = None,
        *,
        region_from: int | None = None,
    ) -> bytearray | FileRegion:
        """Whole, checked batches starting at ``pos`` up to ``max_bytes``; at least one.

        ``stop_offset``: no batch starting at or after it is returned (read_committed
        reads stop at the last stable offset), not even the first.

        Every returned batch went through ``_chain``, so a damaged length can
        neither return garbage nor skip data silently: the read stops before a
        quarantined range (the next fetch asks for its first offset and gets the
        error). ``expected``: the base offset ``find_batch`` gave for ``pos``.

        Up to ``region_from`` bytes (always, when it is None) one read covers
        the data and the header after it, which the walk checks. A larger read
        walks the same chain reading only the batch headers (one ``pread`` of 61
        bytes each; a batch whose chain does not line up is still read whole for
        its CRC32C) and answers a ``FileRegion``: the checked bytes, left in the
        file for ``sendfile``, the descriptor pinned until the region is released.
        """
        while True:
            if self.holes:  # a read never starts on bytes that hold nothing (a skipped copy)
                pos = self._past_skips(pos)
            data = self._read_at(pos, max_bytes, expected, stop_offset, region_from)
            empty = not (data.length if isinstance(data, FileRegion) else len(data))
            if not (empty and self.holes and self._past_skips(pos) != pos):
                return data
            # This read found a skipped range right where it started: again, after it.

    def _read_at(
        self,
        pos: int,
        max_bytes: int,
        expected: int,
        stop_offset: int | None,
        region_from: int | None,
    ) -> bytearray | FileRegion:
        limit = pos + max(max_bytes, 0)
        if region_from is not None and limit - pos > region_from:
            return self._read_region(pos, limit, expected, region_from, stop_offset)
        # A bytearray, so the answer is this buffer cut short, not a copy of it.
        buf = bytearray(min(max(limit, pos + 1) + BATCH_OVERHEAD, self.size) - pos)
        with self.files.use(self.file) as fd:
            del buf[os.preadv(fd, [buf], pos) :]
        if len(buf) >= BATCH_OVERHEAD:  # the first batch is returned whole, however large
            limit = max(limit, pos + unpack_header(buf)[1] + LOG_OVERHEAD)
        end = self._checked_end(pos, expected, limit, _SCAN_CHUNK, (buf, pos), stop_offset)
        if end == pos:
            return bytearray()
        n = end - pos
        if n <= len(buf):
            del buf[n:]
        else:  # a first batch larger than the limit
            buf = bytearray(self.pread(n, pos))
        return buf

    def _read_region(
        self, pos: int, limit: int, expected: int, region_from: int, stop_offset: int | None
    ) -> bytearray | FileRegion:
        with self.files.use(self.file) as fd:  # open, and pinned while the region is made
            head = os.pread(fd, BATCH_OVERHEAD, pos)
            if len(head) == BATCH_OVERHEAD:  # the first batch is returned whole
                limit = max(limit, pos + unpack_header(head)[1] + LOG_OVERHEAD)
            # A read_committed read stops at the LSO: the full walk knows where.
            end = (
                -1
                if stop_offset is not None
                else self._lined_up_end(fd, pos, expected, limit, head)
            )
            if end < 0:  # anything out of the ordinary: the full walk decides
                end = self._checked_end(
                    pos, expected, limit, BATCH_OVERHEAD, (head, pos), stop_offset
                )
            n = end - pos
            if n == 0:
                return bytearray()
            if n <= region_from:  # the segment held less than asked: not worth a region
                return bytearray(os.pread(fd, n, pos))
            return FileRegion(self.files, self.file, pos, n)

    def _lined_up_end(self, fd: int, pos: int, expected: int, limit: int, head: bytes) -> int:
        """``_chain``'s walk for a region when nothing is out of the ordinary, reading only
        headers: where the whole batches from ``pos`` up to ``limit`` end, or -1.

        -1 when anything would need ``_chain``'s judgement: a quarantined range in the
        segment, a header that fails the checks, or a batch the next header does not
        line up with (whose CRC32C ``_chain`` would then read). What it accepts,
        ``_chain`` would have yielded the same way.
        """
        if self.holes or len(head) < BATCH_OVERHEAD:
            return -1
        size_now = self.size
        stop = min(limit, size_now)
        upper = self._offset_bound()
        base = self.base_offset
        start = pos
        t = unpack_header(head)
        next_off = -1
        while True:
            if not _fits(t, pos, size_now, expected, upper, base):
                return -1
            if pos != start and t[0] != expected:
                return -1  # the previous batch is not lined up: _chain checks its CRC
            end = pos + t[1] + LOG_OVERHEAD
            if end > stop:
                break  # this batch crosses the limit; it lined up the previous one
            next_off = t[0] + t[6] + 1
            expected = next_off
            pos = end
            if pos == size_now:
                break  # the file's end lines up the last batch
            head = os.pread(fd, BATCH_OVERHEAD, pos)
            if len(head) < BATCH_OVERHEAD:
                return -1
            t = unpack_header(head)
        if pos == start:
            return -1
        self._hint_offset = next_off
        self._hint_pos = pos
        return pos

    def _checked_end(
        self,
        pos: int,
        expected: int,
        limit: int,
        chunk: int,
        prefetch: tuple[bytes | bytearray, int],
        stop_offset: int | None = None,
    ) -> int:
        """Where the whole, checked batches from ``pos`` up to ``limit`` end (none
        starting at or after ``stop_offset``).

        Raises CorruptSegmentError when the batch at ``pos`` itself is quarantined.
        Remembers where the next read of this segment will start.
        """
        end = pos
        next_off = -1
        for p, t in self._chain(pos, expected, limit, chunk, prefetch=prefetch):
            if p != end:
                break  # a quarantined range lies between: stop before it
            if stop_offset is not None and t[0] >= stop_offset:
                break
            end = p + t[1] + LOG_OVERHEAD
            next_off = t[0] + t[6] + 1
        if end == pos:
            self._raise_if_quarantined(pos, expected, stop_offset)
            return pos
        self._hint_offset = next_off
        self._hint_pos = self._past_skips(end) if self.holes else end
        return end

    def _raise_if_quarantined(self, pos: int, expected: int, stop_offset: int | None) -> None:
        """A read from ``pos`` found nothing to return: if a quarantined range is what
        comes first (just found, or after a gap), answer with its error, never with
        nothing. Offsets at or past ``stop_offset`` are not this read's to answer for."""
        if stop_offset is not None and expected >= stop_offset:
            return
        self.check_readable(expected)
        hole = self._hole_at(pos)
        if (
            hole is not None
            and hole.lost
            and (stop_offset is None or hole.first_offset < stop_offset)
        ):
            raise self._corrupt_error(expected, hole)

    def _past_skips(self, pos: int) -> int:
        """``pos``, or where the skipped ranges (no offsets of their own) starting there end."""
        hole = self._hole_at(pos)
        while hole is not None and not hole.lost:
            pos = hole.end_position
            hole = self._hole_at(pos)
        return pos

    def read_batch_at(self, pos: int, size: int) -> bytes:
        return self.pread(size, pos)

    def largest_timestamp(self) -> int:
        """Kafka's retention clock: max record timestamp, or file mtime if there is none.

        A segment not loaded yet answers from the last entry of its time index
        file (written when it was sealed), so retention does not load segments.
        """
        if not self.loaded:
            try:
                with open(self.timeindex_path, "rb") as f:
                    size = os.fstat(f.fileno()).st_size
                    if size and size % 12 == 0:
                        f.seek(size - 12)
                        ts = int.from_bytes(f.read(8), "big", signed=True)
                        if ts >= 0:
                            return ts
            except FileNotFoundError:
                pass
            self.ensure_loaded()
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return self.mtime_ns() // 1_000_000

    def drop_read_hint(self) -> None:
        self._hint_offset = -1
        self._hint_pos = -1


def _fits(
    t: RawHeader, pos: int, file_size: int, expected: int, upper: int | None, segment_base: int
) -> bool:
    """The common case of the chain's checks (``_broken`` says what is wrong otherwise)."""
    last = t[0] + t[6]
    return (
        t[1] >= MIN_BATCH_LENGTH
        and t[3] == 2
        and pos + t[1] + LOG_OVERHEAD <= file_size
        and t[0] >= expected
        and t[6] >= 0
        and last - segment_base <= _MAX_REL_OFFSET
        and (upper is None or last < upper)
    )


def _broken(
    t: RawHeader,
    pos: int,
    size: int,
    file_size: int,
    expected: int,
    upper: int | None,
    segment_base: int,
) -> str | None:
    """Why the header ``t`` at ``pos`` cannot be the next batch of the chain, or None."""
    if t[1] < MIN_BATCH_LENGTH:
        return f"batch_length {t[1]} is below the minimum"
    if t[3] != 2:
        return f"magic {t[3]}"
    if pos + size > file_size:
        return f"batch_length {t[1]} runs past the end of the file"
    if t[0] < expected:
        return f"base offset {t[0]} goes back (expected {expected} or more)"
    if t[6] < 0:
        return f"last_offset_delta {t[6]}"
    if t[0] + t[6] - segment_base > _MAX_REL_OFFSET:
        return f"offsets reach {t[0] + t[6]}, beyond what one segment holds"
    if upper is not None and t[0] + t[6] >= upper:
        return f"offsets reach {t[0] + t[6]}, past the segment's end {upper}"
    return None


def _resumes_at(fd: int, pos: int, file_size: int, offset: int) -> bool:
    """Does a batch based at ``offset`` start at ``pos``?"""
    if pos + BATCH_OVERHEAD > file_size:
        return False
    raw = os.pread(fd, BATCH_OVERHEAD, pos)
    return len(raw) == BATCH_OVERHEAD and unpack_header(raw)[0] == offset


def _crc_ok(fd: int, pos: int, t: RawHeader) -> bool:
    data = os.pread(fd, t[1] + LOG_OVERHEAD, pos)
    return len(data) == t[1] + LOG_OVERHEAD and crc32c(memoryview(data)[_CRC_START:]) == t[4]


def _claimed_end(t: RawHeader | None, expected: int, upper: int | None) -> int:
    """End offset of a damaged tail: what its header claims, if that fits the chain."""
    if t is None or t[0] != expected or not 0 <= t[6] < _MAX_REL_OFFSET:
        return expected
    end = t[0] + t[6] + 1
    return min(end, upper) if upper is not None else end
