"""One log segment: an append-only ``.log`` file of whole record batches plus its indexes.

Reads use ``os.pread`` on a file descriptor kept open for the segment's life,
so concurrent appends (``O_APPEND`` writes) never move a shared file position.
Only batch headers are ever parsed here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from odradek.log.index import IndexCorruptError, OffsetIndex, TimeIndex, write_file_atomic
from odradek.protocol.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    crc32c,
    parse_header,
)

__all__ = ["Segment", "segment_name"]

_SCAN_CHUNK = 1 << 20  # recovery / full scans read 1 MiB at a time
_MAX_REL_OFFSET = 2**32 - 1


def segment_name(base_offset: int) -> str:
    """Kafka's file naming: the base offset zero-padded to 20 digits."""
    return f"{base_offset:020d}"


class Segment:
    """A segment file and its in-memory sparse indexes; not thread-safe on its own."""

    __slots__ = (
        "_hint_offset",
        "_hint_pos",
        "base_offset",
        "bytes_since_index",
        "created_ms",
        "directory",
        "fd",
        "index_interval",
        "max_timestamp",
        "next_offset",
        "offset_index",
        "offset_of_max_timestamp",
        "size",
        "time_index",
    )

    def __init__(self, directory: Path, base_offset: int, index_interval: int, fd: int) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval = index_interval
        self.fd = fd
        self.size = os.fstat(fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.bytes_since_index = 0
        self.created_ms: int | None = None  # injected-clock time of the first append
        self.offset_index = OffsetIndex()
        self.time_index = TimeIndex()
        self._hint_offset = -1
        self._hint_pos = -1

    # ------------------------------------------------------------------ files

    @property
    def log_path(self) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}.log"

    @property
    def index_path(self) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}.index"

    @property
    def timeindex_path(self) -> Path:
        return self.directory / f"{segment_name(self.base_offset)}.timeindex"

    @classmethod
    def open(cls, directory: Path, base_offset: int, index_interval: int) -> Segment:
        """Open (creating if needed) the segment's log file for append and pread."""
        path = directory / f"{segment_name(base_offset)}.log"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        return cls(directory, base_offset, index_interval, fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def delete_files(self) -> None:
        self.close()
        for p in (self.log_path, self.index_path, self.timeindex_path):
            with contextlib.suppress(FileNotFoundError):
                p.unlink()

    def fsync(self) -> None:
        os.fsync(self.fd)

    # ------------------------------------------------------------------ state

    @property
    def is_empty(self) -> bool:
        return self.size == 0

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
        try:
            while view:
                n = os.write(self.fd, view)
                view = view[n:]
        except BaseException:
            os.ftruncate(self.fd, old)
            raise
        self.size = old + len(data)

    def write_parts(self, parts: tuple[bytes | memoryview, ...], total: int) -> None:
        """One os.writev of several buffers (avoids copying the payload to patch it)."""
        old = self.size
        try:
            n = os.writev(self.fd, parts)
            if n < total:  # short write (signal, disk nearly full): finish the rest
                rest = memoryview(b"".join(parts))[n:]
                while rest:
                    k = os.write(self.fd, rest)
                    rest = rest[k:]
        except BaseException:
            os.ftruncate(self.fd, old)
            raise
        self.size = old + total

    def finalize_indexes(self, *, fsync: bool) -> None:
        """Record the final max timestamp in the time index and write both index files."""
        if self.offset_of_max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp - self.base_offset
            )
        write_file_atomic(self.index_path, self.offset_index.to_bytes(), fsync=fsync)
        write_file_atomic(self.timeindex_path, self.time_index.to_bytes(), fsync=fsync)

    # ------------------------------------------------------------------ scanning

    def iter_headers(
        self, start: int = 0, *, check_crc: bool = False, chunk: int = _SCAN_CHUNK
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of whole batches from ``start``; stop at anything torn.

        With ``check_crc`` every batch's CRC32C is verified and the walk stops
        at the first mismatch, which is how recovery finds the valid prefix.
        """
        end = self.size
        fd = self.fd
        buf = b""
        buf_start = start
        pos = start
        while end - pos >= BATCH_OVERHEAD:
            off = pos - buf_start
            if off + BATCH_OVERHEAD > len(buf):
                buf = os.pread(fd, min(max(chunk, BATCH_OVERHEAD), end - pos), pos)
                buf_start = pos
                off = 0
                if len(buf) < BATCH_OVERHEAD:
                    return
            h = parse_header(buf, off)
            size = h.batch_length + LOG_OVERHEAD
            if h.batch_length < MIN_BATCH_LENGTH or h.magic != 2 or pos + size > end:
                return
            if check_crc:
                if off + size > len(buf):
                    buf = os.pread(fd, min(max(chunk, size), end - pos), pos)
                    buf_start = pos
                    off = 0
                    if len(buf) < size:
                        return
                if crc32c(memoryview(buf)[off + 21 : off + size]) != h.crc:
                    return
            yield pos, h
            pos += size

    def recover(self) -> int:
        """Rebuild indexes by a CRC-checked scan; cut the file after the last valid batch.

        Returns the number of bytes truncated (0 when the whole file was valid).
        """
        self.offset_index = OffsetIndex()
        self.time_index = TimeIndex()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.bytes_since_index = 0
        self._hint_offset = -1
        valid_end = 0
        expected = self.base_offset
        for pos, h in self.iter_headers(0, check_crc=True):
            if (
                h.base_offset < expected
                or h.last_offset_delta < 0
                or h.records_count < 0
                or h.last_offset - self.base_offset > _MAX_REL_OFFSET
            ):
                break
            self.note_batch(pos, h.base_offset, h.next_offset, h.max_timestamp, h.size)
            expected = h.next_offset
            valid_end = pos + h.size
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self.fd, valid_end)
            self.size = valid_end
        return truncated

    def load_indexes(self) -> bool:
        """Load index files and scan the tail after the last entry; False if unusable.

        A False answer means the caller must run ``recover()`` (full rebuild).
        """
        try:
            oi = OffsetIndex.from_bytes(self.index_path.read_bytes(), max(self.size, 1))
            ti = TimeIndex.from_bytes(self.timeindex_path.read_bytes())
        except (FileNotFoundError, IndexCorruptError):
            return False
        for i in {0, len(oi) - 1} if len(oi) else ():
            raw = os.pread(self.fd, BATCH_OVERHEAD, oi.positions[i])
            if len(raw) < BATCH_OVERHEAD:
                return False
            if parse_header(raw).base_offset != self.base_offset + oi.rel_offsets[i]:
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
        end = start
        self.next_offset = self.base_offset + (oi.rel_offsets[-1] if len(oi) else 0)
        for pos, h in self.iter_headers(start):
            self.note_batch(pos, h.base_offset, h.next_offset, h.max_timestamp, h.size)
            end = pos + h.size
        if end != self.size:
            return False
        return not (last is not None and self.base_offset + last[1] >= self.next_offset)

    # ------------------------------------------------------------------ reads

    def find_batch(self, offset: int) -> int | None:
        """Position of the first batch whose last offset >= ``offset``, or None."""
        if offset >= self.next_offset:
            return None
        if offset == self._hint_offset:
            return self._hint_pos
        _, pos = self.offset_index.lookup(max(offset - self.base_offset, 0))
        chunk = max(self.index_interval, 4096) + 2 * BATCH_OVERHEAD
        for p, h in self.iter_headers(pos, chunk=chunk):
            if h.base_offset + h.last_offset_delta >= offset:
                return p
        return None

    def read_from(self, pos: int, max_bytes: int) -> bytes:
        """Whole batches starting at ``pos`` up to ``max_bytes``; at least one batch."""
        size = self.size
        limit = pos + max(max_bytes, 0)
        if limit >= size:
            end = size
            next_off = self.next_offset
        else:
            start = pos
            end = pos
            next_off = -1
            entry = self.offset_index.floor_position(limit)
            if entry is not None and entry[1] > pos:
                start = end = entry[1]
                next_off = self.base_offset + entry[0]
            chunk = max(self.index_interval, 4096) + 2 * BATCH_OVERHEAD
            for p, h in self.iter_headers(start, chunk=chunk):
                if p + h.size > limit and p > pos:
                    break
                end = p + h.size
                next_off = h.base_offset + h.last_offset_delta + 1
                if end >= limit:
                    break
        if end <= pos:
            return b""
        data = os.pread(self.fd, end - pos, pos)
        if next_off >= 0 and len(data) == end - pos:
            self._hint_offset = next_off
            self._hint_pos = end
        return data

    def read_batch_at(self, pos: int, size: int) -> bytes:
        return os.pread(self.fd, size, pos)

    def largest_timestamp(self) -> int:
        """Kafka's retention clock: max record timestamp, or file mtime if there is none."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(os.fstat(self.fd).st_mtime * 1000)

    def drop_read_hint(self) -> None:
        self._hint_offset = -1
        self._hint_pos = -1
