"""A durable, segmented log for one topic partition.

Layout: one directory per partition holding ``<base offset:020d>.log`` segment
files with their ``.index`` / ``.timeindex`` companions (Kafka naming), plus
``producer.snapshot`` (idempotence state), ``log-start-offset`` (after
DeleteRecords / retention), ``cleaner-offset-checkpoint`` (first dirty offset
of a compacted log) and ``.clean_shutdown`` (present only between a clean
``close()`` and the next ``open()``). Compaction (``compact()``, see
``odradek.log.compaction``) rewrites non-active segments through
``<base>.log.cleaned`` and ``<base>.log.swap`` files; ``open()`` first deletes
leftover ``.cleaned`` files and completes leftover swaps.

Durability and flush policy
---------------------------
* ``append()`` hands the bytes to the kernel with one unbuffered ``os.write``
  (no Python-level buffer) before it returns. Acknowledged data is therefore in
  the OS page cache and survives ``kill -9`` of the broker process; it survives
  a machine crash or power loss only once fsynced.
* fsync happens (a) when ``flush.messages`` records have been appended since
  the last fsync, (b) when ``flush.ms`` has elapsed since the last fsync, both
  checked on every append against the injected clock, (c) on ``flush()`` and
  (d) on ``close()``. The defaults, like Kafka's, never fsync on the append
  path and rely on the page cache (Kafka relies on replication for the rest;
  a single Odradek broker has none, so set ``flush.messages=1`` for
  fsync-per-append durability at a large throughput cost).
* Index files are derived data. They are written when a segment rolls and at
  clean shutdown; after a crash they are validated and rebuilt when needed.

Recovery on open
----------------
Without a clean-shutdown marker the last segment is scanned batch by batch,
checking every CRC32C; the file is truncated after the last complete, valid
batch (a torn tail) and its indexes are rebuilt. Any segment whose index files
are missing or inconsistent is rebuilt the same way; if that finds corruption
in an older segment, every later segment is discarded, because the log must
stay a contiguous valid prefix. Producer state is loaded from the newest
snapshot and brought up to date by replaying batch headers written after it
(cost: one header-only scan of data since the last roll, or of the whole log
when no usable snapshot exists).

Rolling: a new segment starts when the incoming data would push the active
segment past ``segment.bytes``, when more than ``segment.ms`` passed (injected
clock) since the active segment's first append (after a reopen, since the
open), or when relative offsets would overflow. Appended batches get their base
offset and partition leader epoch (``leader_epoch``, 0 on a single broker)
patched; both lie outside the CRC.

Reads never decode records; they locate the batch through the sparse offset
index and a short header scan with ``os.pread``, then return whole batches.
Not thread-safe: callers serialize access per partition (an asyncio broker
does so naturally).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import struct
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from odradek.log.compaction import (
    CompactionStats,
    clamp_checkpoint,
    compact_segments,
    dirty_bytes,
    read_checkpoint,
    recover_leftovers,
)
from odradek.log.config import LogConfig
from odradek.log.errors import MessageTooLargeError, OffsetOutOfRangeError
from odradek.log.index import write_file_atomic
from odradek.log.producer_state import ProducerStateManager
from odradek.log.segment import Segment
from odradek.protocol.records import (
    LOG_OVERHEAD,
    BatchHeader,
    RecordError,
    decode_batch_records,
    iter_batches,
    parse_header,
    set_log_append_time,
    validate_batches_raw,
)

__all__ = ["AppendInfo", "PartitionLog"]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
PRODUCER_SNAPSHOT_FILE = "producer.snapshot"
LOG_START_FILE = "log-start-offset"
_MAX_REL_OFFSET = 2**31 - 1
_ITER_CHUNK = 1 << 20
# base_offset, batch_length, partition_leader_epoch: the patched, CRC-free prefix
_PREFIX = struct.Struct(">qii")


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Result of an append, shaped after what a ProduceResponse partition needs."""

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False


def _fsync_dir(path: Path) -> None:
    """Make file creations / deletions / renames in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PartitionLog:
    """Segmented append-only log of opaque record batches for one partition."""

    leader_epoch: int
    """Stamped into every appended batch's partition_leader_epoch (single broker: 0)."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        now_ms: Callable[[], int],
        segments: list[Segment],
        producers: ProducerStateManager,
        start_offset: int,
    ) -> None:
        self.directory = directory
        self.config = config
        self._now_ms = now_ms
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._producers = producers
        self._start_offset = start_offset
        self._size = sum(s.size for s in segments)
        self._unflushed_messages = 0
        self._dirty_segments: set[Segment] = set()
        self._dir_dirty = False
        self._last_flush_ms = now_ms()
        self._closed = False
        # Whether close() must write indexes, snapshot and fsync: False only for a log
        # opened cleanly and not changed since, whose files are already complete on disk.
        self._modified = True
        self.leader_epoch = 0

    # ------------------------------------------------------------------ open / recovery

    @classmethod
    def open(cls, directory: Path, config: LogConfig, *, now_ms: Callable[[], int]) -> PartitionLog:
        """Create an empty log or recover an existing one (see the module docstring)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        marker = directory / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        if clean:
            marker.unlink()
            _fsync_dir(directory)
        for tmp in directory.glob("*.tmp"):
            tmp.unlink()
        for action in recover_leftovers(directory):
            log.warning("%s: interrupted compaction: %s", directory, action)

        bases = sorted(
            int(p.stem) for p in directory.glob("*.log") if p.stem.isdigit() and len(p.stem) == 20
        )
        live = {f"{b:020d}" for b in bases}
        for p in [*directory.glob("*.index"), *directory.glob("*.timeindex")]:
            if p.stem not in live:
                p.unlink()  # orphan index of a deleted segment
        segments: list[Segment] = []
        interval = config.index_interval_bytes
        try:
            for i, base in enumerate(bases):
                seg = Segment.open(directory, base, interval)
                segments.append(seg)
                is_last = i == len(bases) - 1
                if (not clean and is_last) or not seg.load_indexes():
                    truncated = seg.recover()
                    seg.finalize_indexes(fsync=False)
                    if truncated:
                        log.warning(
                            "%s: truncated %d bytes of torn or corrupt data from segment %d",
                            directory,
                            truncated,
                            base,
                        )
                        if not is_last:
                            for later in bases[i + 1 :]:
                                s = Segment.open(directory, later, interval)
                                s.delete_files()
                            log.warning(
                                "%s: discarded %d segments after a corrupt segment",
                                directory,
                                len(bases) - i - 1,
                            )
                            break
        except BaseException:
            for s in segments:
                s.close()
            raise
        if not segments:
            segments.append(Segment.open(directory, 0, interval))
        now = now_ms()
        segments[-1].created_ms = now if not segments[-1].is_empty else None

        end = segments[-1].next_offset
        start = segments[0].base_offset
        with contextlib.suppress(FileNotFoundError, ValueError):
            saved = int((directory / LOG_START_FILE).read_text().strip())
            start = max(start, min(saved, end))

        clamp_checkpoint(directory, end)
        producers = cls._load_producers(directory, segments, start, end)
        inst = cls(directory, config, now_ms, segments, producers, start)
        if not clean:
            inst._dir_dirty = True
        inst._modified = not clean
        return inst

    @staticmethod
    def _load_producers(
        directory: Path, segments: list[Segment], start: int, end: int
    ) -> ProducerStateManager:
        """Snapshot if usable, then replay headers of every batch written after it."""
        loaded = ProducerStateManager.read_snapshot(directory / PRODUCER_SNAPSHOT_FILE)
        from_offset = segments[0].base_offset
        producers = ProducerStateManager()
        if loaded is not None and segments[0].base_offset <= loaded[1] <= end:
            producers, from_offset = loaded
        for seg in segments:
            if seg.next_offset <= from_offset:
                continue
            pos = seg.find_batch(from_offset) if from_offset > seg.base_offset else 0
            if pos is None:
                continue
            for _, h in seg.iter_headers(pos):
                producers.replay(h)
        producers.evict_below(start)
        return producers

    # ------------------------------------------------------------------ properties

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return self._size

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producers

    # ------------------------------------------------------------------ append

    def append(
        self, data: bytes | bytearray | memoryview, *, from_client: bool = True
    ) -> AppendInfo:
        """Validate, assign offsets, stamp, and write one or more batches.

        ``from_client=False`` (coordinator-written data) allows control batches
        and skips sequence checks, like Kafka's COORDINATOR append origin.
        Header fields are handled as plain tuples here: this is the hot path.
        """
        self._check_open()
        self._modified = True
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        cfg = self.config
        raws = validate_batches_raw(
            view,
            allow_control=not from_client,
            check_records=from_client,
            max_decompressed_bytes=cfg.max_decompressed_bytes,
        )
        max_size = cfg.max_message_bytes
        first = self.end_offset
        nxt = first
        records = 0
        idempotent = False
        for t in raws:
            if t[1] + LOG_OVERHEAD > max_size:
                raise MessageTooLargeError(
                    f"record batch of {t[1] + LOG_OVERHEAD} bytes exceeds max.message.bytes "
                    f"{max_size}"
                )
            if t[9] >= 0:
                idempotent = True
            nxt += t[6] + 1
            records += t[12]
        last = nxt - 1
        now = self._now_ms()
        append_time = now if cfg.log_append_time else -1

        updates = None
        if idempotent:
            producers = self._producers
            headers = [BatchHeader(*t) for t in raws]
            if from_client:
                for h in headers:
                    dup = producers.find_duplicate(h)
                    if dup is not None:
                        return AppendInfo(
                            dup.first_offset,
                            dup.last_offset,
                            dup.timestamp if cfg.log_append_time else -1,
                            self._start_offset,
                            duplicate=True,
                        )
            triples: list[tuple[BatchHeader, int, int]] = []
            off = first
            for h in headers:
                triples.append((h, off, append_time if append_time >= 0 else h.max_timestamp))
                off += h.last_offset_delta + 1
            updates = producers.prepare(triples, check_sequence=from_client)

        total = len(view)
        self._maybe_roll(total, last, now)
        seg = self._segments[-1]
        seg_pos = seg.size
        epoch = self.leader_epoch
        if len(raws) == 1 and append_time < 0:
            # Common case: no copy of the payload, just a patched 16-byte prefix.
            t = raws[0]
            seg.write_parts((_PREFIX.pack(first, t[1], epoch), view[_PREFIX.size :]), total)
            notes = [(seg_pos, first, nxt, t[8], total)]
        else:
            buf = bytearray(view)
            pos = 0
            off = first
            notes = []
            for t in raws:
                size = t[1] + LOG_OVERHEAD
                _PREFIX.pack_into(buf, pos, off, t[1], epoch)
                max_ts = t[8]
                if append_time >= 0:
                    set_log_append_time(buf, pos, append_time, size)
                    max_ts = append_time
                end_off = off + t[6] + 1
                notes.append((seg_pos + pos, off, end_off, max_ts, size))
                pos += size
                off = end_off
            seg.write(buf)
        if seg.created_ms is None:
            seg.created_ms = now
        for note in notes:
            seg.note_batch(*note)
        self._size += total
        self._dirty_segments.add(seg)
        if updates:
            self._producers.commit(updates)

        self._unflushed_messages += records
        if (
            self._unflushed_messages >= cfg.flush_messages
            or now - self._last_flush_ms >= cfg.flush_ms
        ):
            self._flush(now)
        return AppendInfo(first, last, append_time, self._start_offset, duplicate=False)

    def _maybe_roll(self, incoming: int, last_offset: int, now: int) -> None:
        """Roll when size, age (segment.ms since first append) or offset range demand it."""
        seg = self._segments[-1]
        if seg.is_empty:
            return
        cfg = self.config
        if (
            seg.size + incoming > cfg.segment_bytes
            or (seg.created_ms is not None and now - seg.created_ms > cfg.segment_ms)
            or last_offset - seg.base_offset > _MAX_REL_OFFSET
        ):
            self.roll()

    def roll(self) -> None:
        """Close the active segment for writing and start a new one at end_offset."""
        self._check_open()
        self._modified = True
        old = self._segments[-1]
        if old.is_empty:
            return
        old.finalize_indexes(fsync=False)
        new = Segment.open(self.directory, old.next_offset, self.config.index_interval_bytes)
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._dir_dirty = True
        self._producers.write_snapshot(
            self.directory / PRODUCER_SNAPSHOT_FILE, new.base_offset, fsync=False
        )

    # ------------------------------------------------------------------ read

    def _check_range(self, offset: int) -> None:
        if offset < self._start_offset or offset > self.end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._start_offset}, {self.end_offset}]"
            )

    def _locate(self, offset: int) -> tuple[int, int] | None:
        """(segment index, position) of the first batch whose last offset >= offset."""
        i = max(bisect_right(self._bases, offset) - 1, 0)
        segs = self._segments
        while i < len(segs):
            pos = segs[i].find_batch(offset)
            if pos is not None:
                return i, pos
            i += 1
        return None

    def read(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from the batch containing ``offset``, at least one if any exist.

        Reads stay within one segment, as Kafka's do; the caller fetches again.
        """
        self._check_open()
        self._check_range(offset)
        if offset == self.end_offset:
            return b""
        loc = self._locate(offset)
        if loc is None:
            return b""
        i, pos = loc
        return self._segments[i].read_from(pos, max_bytes)

    def iter_batches_from(self, offset: int) -> Iterator[bytes]:
        """Every batch from the one containing ``offset`` to the end (coordinator replay)."""
        self._check_range(offset)
        while offset < self.end_offset:
            chunk = self.read(offset, _ITER_CHUNK)
            if not chunk:
                return
            nxt = offset
            for pos, h in iter_batches(chunk):
                yield chunk[pos : pos + h.size]
                nxt = h.next_offset
            if nxt <= offset:
                return
            offset = max(nxt, self._start_offset)

    # ------------------------------------------------------------------ timestamps

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= target, or None.

        Record granularity whenever the batch can be decoded (uncompressed, or a
        codec whose library is installed); otherwise the batch's base offset and
        max timestamp (batch granularity). Records below the log start are skipped.
        """
        self._check_open()
        start = self._start_offset
        for seg in self._segments:
            if seg.is_empty or seg.max_timestamp < timestamp_ms or seg.next_offset <= start:
                continue
            rel = seg.time_index.lookup_before(timestamp_ms)
            from_off = max(seg.base_offset + (rel if rel is not None else 0), start)
            pos = seg.find_batch(from_off)
            if pos is None:
                continue
            for p, h in seg.iter_headers(pos, chunk=64 * 1024):
                if h.max_timestamp < timestamp_ms or h.last_offset < start:
                    continue
                return self._first_record_at_or_after(seg, p, h, timestamp_ms, start)
        return None

    def _first_record_at_or_after(
        self, seg: Segment, pos: int, h: BatchHeader, timestamp_ms: int, start: int
    ) -> tuple[int, int]:
        limit = self.config.max_decompressed_bytes
        try:
            raw = seg.read_batch_at(pos, h.size)
            for r in decode_batch_records(raw, 0, parse_header(raw), max_decompressed_bytes=limit):
                if r.timestamp >= timestamp_ms and r.offset >= start:
                    return r.offset, r.timestamp
        except RecordError:
            pass
        return max(h.base_offset, start), h.max_timestamp

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record carrying the largest timestamp."""
        self._check_open()
        best: Segment | None = None
        for seg in self._segments:
            if seg.is_empty or seg.offset_of_max_timestamp < 0:
                continue
            if best is None or seg.max_timestamp > best.max_timestamp:
                best = seg
        if best is None:
            return None
        target = best.max_timestamp
        pos = best.find_batch(best.offset_of_max_timestamp)
        if pos is not None:
            for p, h in best.iter_headers(pos, chunk=64 * 1024):
                if h.max_timestamp == target:
                    off, ts = self._first_record_at_or_after(best, p, h, target, 0)
                    return max(off, self._start_offset), ts
        return max(best.offset_of_max_timestamp, self._start_offset), target

    # ------------------------------------------------------------------ retention

    def enforce_retention(self, now_ms: int) -> int:
        """Delete whole old segments by retention.ms / retention.bytes / log start offset.

        The active segment is never deleted. Time retention uses each segment's
        largest record timestamp, as Kafka does. Returns the number deleted.
        """
        self._check_open()
        cfg = self.config
        segs = self._segments
        n = 0
        # Segments entirely below the log start offset (DeleteRecords) go first.
        while n < len(segs) - 1 and segs[n + 1].base_offset <= self._start_offset:
            n += 1
        if cfg.delete_enabled:
            if cfg.retention_ms >= 0:
                while n < len(segs) - 1 and now_ms - segs[n].largest_timestamp() > cfg.retention_ms:
                    n += 1
            if cfg.retention_bytes >= 0:
                excess = self._size - cfg.retention_bytes - sum(s.size for s in segs[:n])
                while n < len(segs) - 1 and excess - segs[n].size >= 0:
                    excess -= segs[n].size
                    n += 1
        if n:
            self._delete_leading(n)
        return n

    def delete_records_before(self, offset: int) -> None:
        """Advance the log start offset (DeleteRecords); whole segments below it are removed."""
        self._check_open()
        self._modified = True
        if offset > self.end_offset or offset < 0:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: log end offset is {self.end_offset}"
            )
        if offset <= self._start_offset:
            return
        self._start_offset = offset
        self._write_start_offset()
        n = 0
        segs = self._segments
        while n < len(segs) - 1 and segs[n + 1].base_offset <= offset:
            n += 1
        if n:
            self._delete_leading(n)
        self._producers.evict_below(self._start_offset)

    def _delete_leading(self, n: int) -> None:
        self._modified = True
        doomed = self._segments[:n]
        del self._segments[:n]
        del self._bases[:n]
        for s in doomed:
            self._size -= s.size
            self._dirty_segments.discard(s)
            s.delete_files()
        self._dir_dirty = True
        new_start = self._segments[0].base_offset
        if new_start > self._start_offset:
            self._start_offset = new_start
            self._write_start_offset()
        self._producers.evict_below(self._start_offset)

    def _write_start_offset(self) -> None:
        write_file_atomic(
            self.directory / LOG_START_FILE, f"{self._start_offset}\n".encode(), fsync=False
        )

    # ------------------------------------------------------------------ compaction

    def compact(self, now_ms: int, *, force: bool = False) -> CompactionStats:
        """Keep only the latest record per key in the non-active segments.

        Runs when ``cleanup.policy`` includes ``compact`` and the dirty ratio
        reaches ``min.cleanable.dirty.ratio`` (or ``force``). Offsets, the log
        start and end offsets never change; ``now_ms`` is the clock for
        ``delete.retention.ms``. See ``odradek.log.compaction`` for the rules.
        """
        self._check_open()
        last_offsets = {
            pid: e.last_offset for pid, e in self._producers.entries.items() if e.batches
        }
        stats = compact_segments(
            self.directory,
            self._segments,
            self.config,
            now_ms,
            last_offsets,
            self._replace_segments,
            force=force,
        )
        if stats.ran:
            self._modified = True
        return stats

    def _replace_segments(self, old: list[Segment], new: Segment) -> None:
        """Swap a compacted group for its rewritten segment in the in-memory list."""
        i = next(k for k, s in enumerate(self._segments) if s is old[0])
        self._segments[i : i + len(old)] = [new]
        self._bases[i : i + len(old)] = [new.base_offset]
        for s in old:
            self._size -= s.size
            self._dirty_segments.discard(s)
        self._size += new.size

    @property
    def first_dirty_offset(self) -> int:
        """The cleaner checkpoint clamped to the log (where the next compaction starts)."""
        saved = read_checkpoint(self.directory)
        start = self._segments[0].base_offset
        active = self._segments[-1].base_offset
        return min(max(start if saved is None else saved, start), active)

    def dirty_ratio(self) -> float:
        """Dirty bytes over all bytes of the non-active segments (0.0 if there are none)."""
        dirty, total = dirty_bytes(self._segments[:-1], self.first_dirty_offset)
        return dirty / total if total else 0.0

    # ------------------------------------------------------------------ durability

    def flush(self) -> None:
        """fsync every segment written since the last flush, and the directory if needed."""
        self._check_open()
        self._flush(self._now_ms())

    def _flush(self, now: int) -> None:
        for seg in self._dirty_segments:
            seg.fsync()
        self._dirty_segments.clear()
        if self._dir_dirty:
            _fsync_dir(self.directory)
            self._dir_dirty = False
        self._unflushed_messages = 0
        self._last_flush_ms = now

    def close(self) -> None:
        """Flush, write indexes and producer snapshot, then the clean-shutdown marker."""
        if self._closed:
            return
        if not self._modified:
            # Nothing changed since a clean open: the files on disk are complete. The
            # marker needs no fsync; losing it only costs a recovery scan.
            for s in self._segments:
                s.close()
            write_file_atomic(self.directory / CLEAN_SHUTDOWN_FILE, b"", fsync=False)
            self._closed = True
            return
        self._flush(self._now_ms())
        active = self._segments[-1]
        active.finalize_indexes(fsync=True)
        self._producers.write_snapshot(
            self.directory / PRODUCER_SNAPSHOT_FILE, self.end_offset, fsync=True
        )
        for s in self._segments:
            s.close()
        write_file_atomic(self.directory / CLEAN_SHUTDOWN_FILE, b"", fsync=True)
        _fsync_dir(self.directory)
        self._closed = True

    def delete(self) -> None:
        """Remove the partition directory entirely (topic deletion)."""
        for s in self._segments:
            s.close()
        self._closed = True
        shutil.rmtree(self.directory, ignore_errors=True)

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"partition log {self.directory} is closed")

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.directory}, start={self._start_offset}, end={self.end_offset}, "
            f"segments={len(self._segments)}, bytes={self._size})"
        )
