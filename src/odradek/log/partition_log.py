"""A durable, segmented log for one topic partition.

Layout: one directory per partition holding ``<base offset:020d>.log`` segment
files with their ``.index`` / ``.timeindex`` companions (Kafka naming), plus
``producer.snapshot`` (idempotence state), ``leader-epoch-checkpoint`` (the
leader epoch cache), ``log-start-offset`` (after DeleteRecords / retention),
``cleaner-offset-checkpoint`` (first dirty offset
of a compacted log), ``<base>.corrupt`` (a quarantined segment, see below) and
``.clean_shutdown`` (written by a clean ``close()``: start and end offsets and
the active segment's size). Compaction (``compact()``, see
``odradek.log.compaction``) rewrites non-active segments through
``<base>.log.cleaned`` and ``<base>.log.swap`` files; ``open()`` first deletes
leftover ``.cleaned`` files and completes leftover swaps.

Opening
-------
A partition shut down cleanly opens with one directory listing, one small read
(the clean-shutdown record) and one ``stat`` (is the active segment still the
size recorded?): no scan, no index read, no descriptor kept. Segments load
their indexes on first use and borrow descriptors from the shared
``FileCache`` (``log.max.open.files``), so idle partitions hold no files; an
``OSError`` during ``open`` leaves nothing open. The record stays on disk until
the first change, so a partition opened and closed again without a write stays
clean.

Durability and flush policy
---------------------------
* ``append()`` hands the bytes to the kernel with one unbuffered ``os.write``
  (no Python-level buffer) before it returns. Acknowledged data is therefore in
  the OS page cache and survives ``kill -9`` of the broker process; it survives
  a machine crash or power loss only once fsynced.
* fsync is due (a) when ``flush.messages`` records have been appended since
  the last fsync, (b) when ``flush.ms`` has elapsed since the last fsync, both
  checked on every append against the injected clock. A due fsync runs in a
  worker thread; ``AppendInfo.flushed`` is its future, which the Produce handler
  awaits before answering, so ``flush.messages=1`` still means "fsynced before
  acknowledged" without blocking the event loop. ``flush()`` and ``close()``
  fsync too. The defaults, like Kafka's, never fsync on the append path.
* A rolled segment is finished in a worker thread: its index files written and
  fsynced, the segment fsynced, the producer snapshot written. Index files are
  derived data: after a crash they are validated and rebuilt when needed.

Recovery on open, and corruption
--------------------------------
Without a clean-shutdown record (or when the active segment no longer matches
it) the last segment is scanned batch by batch, checking every CRC32C, and its
indexes are rebuilt; a torn tail (an interrupted write: a header cut short, a
length running past the end of the file, or zeros) is truncated. Any other
damage, in any segment and found by any scan or read, is *quarantined* in
place: the range stays in the file, its offsets answer CORRUPT_MESSAGE, the
rest of the segment and every later segment stay readable, ``<base>.corrupt``
records the range for the operator, and an error is logged. Nothing past a
corrupt point is ever deleted (docs/operations.md, "Recovery"). Producer state
is loaded from the newest snapshot and brought up to date by replaying batch
headers written after it.

Rolling: a new segment starts when the incoming data would push the active
segment past ``segment.bytes``, when more than ``segment.ms`` passed (injected
clock) since the active segment's first append (after a reopen, since the
open), or when relative offsets would overflow. Appended batches get their base
offset and partition leader epoch (``leader_epoch``, 0 on a single broker)
patched; both lie outside the CRC.

Threads
-------
Appends, reads and timestamp lookups are cheap and run on the caller's thread
(the event loop) under the partition's lock. The heavy work runs elsewhere:
fsyncs and the finishing of rolled segments in this module's worker threads,
and ``enforce_retention`` / ``compact`` in whatever thread calls them (the
broker's housekeeping uses ``asyncio.to_thread``). They take the lock only for
short steps (choosing segments, swapping a cleaned segment in, detaching
deleted ones): reading and writing whole segments, fsyncs and file deletion
happen outside it, on sealed segments appends never touch. One maintenance
lock per partition keeps compaction, retention and truncation from overlapping.

Replication
-----------
``append_as_follower`` writes batches fetched from a leader as they are
(offsets, leader epochs and timestamps kept); ``leader-epoch-checkpoint``
holds the leader epoch cache (``odradek.log.leader_epoch``), loaded on first
use and rebuilt from batch headers when missing; ``truncate_to`` and
``truncate_fully_and_start_at`` cut a diverged log back. See
docs/architecture.md, "Replication primitives in the log", for the rules and
the crash-safe order of the steps. If either truncation raises (a disk error),
the in-memory log no longer matches the disk: drop it and reopen the
directory, which recovers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import struct
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from odradek.log.compaction import (
    CleanerCheckpoint,
    CompactionStats,
    clamp_checkpoint,
    compact_segments,
    dirty_bytes,
    recover_leftovers,
    swap_in,
)
from odradek.log.config import LogConfig
from odradek.log.errors import (
    CorruptRecordError,
    CorruptSegmentError,
    InvalidRecordError,
    LogClosedError,
    MessageTooLargeError,
    OffsetMismatchError,
    OffsetOutOfRangeError,
)
from odradek.log.files import FileCache, FileRegion, shared_file_cache
from odradek.log.index import fsync_dir, write_file_atomic
from odradek.log.leader_epoch import LEADER_EPOCH_FILE, LeaderEpochCache
from odradek.log.producer_state import CompletedTxn, ProducerStateManager
from odradek.log.segment import Damage, Segment, segment_name
from odradek.log.txn_index import AbortedTxn
from odradek.protocol.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    RecordError,
    crc32c,
    decode_batch_records,
    iter_batches,
    marker_is_abort,
    parse_header,
    set_log_append_time,
    unpack_header,
    validate_batches_raw,
)

__all__ = ["AppendInfo", "PartitionLog"]

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".clean_shutdown"
PRODUCER_SNAPSHOT_FILE = "producer.snapshot"
LOG_START_FILE = "log-start-offset"
_LEFTOVER_SUFFIXES = (".tmp", ".cleaned", ".swap")
_MAX_REL_OFFSET = 2**31 - 1
_ITER_CHUNK = 1 << 20
# base_offset, batch_length, partition_leader_epoch: the patched, CRC-free prefix
_PREFIX = struct.Struct(">qii")
_WORKER_THREADS = 2
_EPOCHS_NOT_LOADED = -2  # ``_latest_epoch`` before the epoch cache is loaded
_CRC_START = 21  # the CRC32C covers a batch from its attributes on
_MAX_CODEC = 4  # zstd

_workers: ThreadPoolExecutor | None = None
_workers_lock = threading.Lock()


def _worker_pool() -> ThreadPoolExecutor:
    """Threads for fsyncs, finishing rolled segments and deleting files (shared by all logs)."""
    global _workers
    with _workers_lock:
        if _workers is None:
            _workers = ThreadPoolExecutor(_WORKER_THREADS, thread_name_prefix="odradek-log-io")
        return _workers


# Not frozen: one per append, and frozen construction costs 4x (one
# object.__setattr__ per field). Read-only by use.
@dataclass(slots=True)
class AppendInfo:
    """Result of an append, shaped after what a ProduceResponse partition needs.

    ``flushed`` is set when the append made an fsync due (flush.messages /
    flush.ms): it completes once that fsync has run in a worker thread.
    """

    base_offset: int
    last_offset: int
    log_append_time_ms: int
    log_start_offset: int
    duplicate: bool = False
    flushed: Future[None] | None = field(default=None, compare=False)


def _segment_bases(names: list[str]) -> list[int]:
    return sorted(
        int(n[:20]) for n in names if len(n) == 24 and n.endswith(".log") and n[:20].isdigit()
    )


def _read_clean_record(directory: str, names: list[str]) -> dict[str, int] | None:
    """The clean-shutdown record: None if absent, {} for an old empty marker or junk."""
    if CLEAN_SHUTDOWN_FILE not in names:
        return None
    try:
        with open(os.path.join(directory, CLEAN_SHUTDOWN_FILE), "rb") as f:
            record = json.loads(f.read() or b"{}")
    except (ValueError, FileNotFoundError):
        return {}
    return record if isinstance(record, dict) else {}


def _recorded_active_end(record: dict[str, int], bases: list[int]) -> int | None:
    """The end offset a clean-shutdown record gives for the segment that is still the
    last one, or None (it names another segment, or is unreadable)."""
    with contextlib.suppress(KeyError, TypeError, ValueError):
        if int(record["active_base"]) == bases[-1]:
            return int(record["end_offset"])
    return None


def _read_start_offset(directory: Path) -> int | None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        return int((directory / LOG_START_FILE).read_text().strip())
    return None


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
        start_offset: int,
        files: FileCache,
        producers: ProducerStateManager | None,
    ) -> None:
        self.directory = directory
        self._checkpoint = CleanerCheckpoint(directory)  # read once, then kept in memory
        self.config = config
        self._now_ms = now_ms
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self._files = files
        self._producers = producers  # None until first needed (loaded from the snapshot)
        self._start_offset = start_offset
        self._unflushed_messages = 0
        self._dirty_segments: set[Segment] = set()
        self._dir_dirty = False
        self._last_flush_ms = now_ms()
        self._lock = threading.RLock()
        self._maintenance = threading.Lock()
        self._finishing = threading.Lock()  # one rolled segment finished at a time
        self._snapshot_written = -1  # newest producer snapshot offset a worker wrote
        self._background: set[Future[Any]] = set()
        self._closing = False
        self._closed = False
        # Whether close() must write indexes, snapshot and fsync: False only for a log
        # opened cleanly and not changed since, whose files are already complete on disk.
        self._modified = True
        # The clean-shutdown record is still on disk: remove it before the first change.
        self._clean_record_on_disk = False
        # Whether a transaction may be open while the producer state is not loaded yet
        # (a clean open whose record says one was open at shutdown). Without one, the
        # last stable offset is the log end until a producer's batch loads the state,
        # so reads never pay for loading it (a header scan without a snapshot).
        self._maybe_open_transactions = True
        self.leader_epoch = 0
        # The leader epoch cache, loaded on first use; ``_latest_epoch`` mirrors its
        # latest epoch so the leader append path pays one integer compare for it.
        self._epochs: LeaderEpochCache | None = None
        self._latest_epoch = _EPOCHS_NOT_LOADED
        # Bumped by every truncation: a producer snapshot taken before it is stale.
        self._truncations = 0

    # ------------------------------------------------------------------ open / recovery

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        now_ms: Callable[[], int],
        files: FileCache | None = None,
    ) -> PartitionLog:
        """Create an empty log, open a cleanly closed one cheaply, or recover one."""
        directory = directory if isinstance(directory, Path) else Path(directory)
        files = files or shared_file_cache()
        where = os.fspath(directory)  # plain strings: pathlib costs show at 10,000 partitions
        try:
            names = os.listdir(where)
        except FileNotFoundError:
            directory.mkdir(parents=True, exist_ok=True)
            names = []
        bases = _segment_bases(names)
        record = _read_clean_record(where, names)
        recorded_end = None
        if record and bases and not any(n.endswith(_LEFTOVER_SUFFIXES) for n in names):
            inst = cls._open_clean(directory, config, now_ms, files, names, bases, record)
            if inst is not None:
                return inst
            # The files changed after the clean shutdown: recover, judging the active
            # segment by the end the log had acknowledged then.
            recorded_end = _recorded_active_end(record, bases)
            record = None
        return cls._open_recovering(
            directory, config, now_ms, files, record is not None, recorded_end
        )

    @classmethod
    def _open_clean(
        cls,
        directory: Path,
        config: LogConfig,
        now_ms: Callable[[], int],
        files: FileCache,
        names: list[str],
        bases: list[int],
        record: dict[str, int],
    ) -> PartitionLog | None:
        """The fast path: trust the clean-shutdown record if the active segment matches it."""
        try:
            end = int(record["end_offset"])
            active_size = int(record["active_size"])
            start = int(record["start_offset"])
            if int(record["active_base"]) != bases[-1]:
                return None
        except (KeyError, TypeError, ValueError):
            return None
        active_path = os.path.join(directory, f"{segment_name(bases[-1])}.log")
        if os.stat(active_path).st_size != active_size:
            return None
        interval = config.index_interval_bytes
        segments = [Segment.existing(directory, b, interval, files) for b in bases]
        quarantined = {n[:20] for n in names if n.endswith(".corrupt")}
        for seg in segments:  # the listing says which segments have a quarantine record
            seg.marker_on_disk = segment_name(seg.base_offset) in quarantined
        _link(segments)
        segments[-1].assume(active_size, end)
        start = max(start, bases[0])
        if LOG_START_FILE in names:
            start = max(start, _read_start_offset(directory) or 0)
        inst = cls(directory, config, now_ms, segments, min(start, end), files, None)
        inst._modified = False
        inst._clean_record_on_disk = True
        # Older records have no such key: those brokers refused transactions.
        inst._maybe_open_transactions = bool(record.get("open_transactions", False))
        segments[-1].created_ms = now_ms() if active_size else None
        return inst

    @classmethod
    def _open_recovering(
        cls,
        directory: Path,
        config: LogConfig,
        now_ms: Callable[[], int],
        files: FileCache,
        clean: bool,
        recorded_end: int | None = None,
    ) -> PartitionLog:
        """Clean up leftovers, then scan the last segment (unless shut down cleanly).

        ``recorded_end``: the end a clean shutdown recorded for the last segment,
        whose file changed since (``Segment.recover``)."""
        marker = directory / CLEAN_SHUTDOWN_FILE
        if marker.exists():  # an old-style or stale marker: gone before anything changes
            marker.unlink()
            fsync_dir(directory)
        for tmp in directory.glob("*.tmp"):
            tmp.unlink()
        for action in recover_leftovers(directory):
            log.warning("%s: interrupted compaction: %s", directory, action)
        names = os.listdir(directory)
        bases = _segment_bases(names)
        live = {segment_name(b) for b in bases}
        quarantined = {n[:20] for n in names if n.endswith(".corrupt")}
        for name in names:
            stem, _, suffix = name.partition(".")
            if suffix in ("index", "timeindex", "txnindex", "corrupt") and stem not in live:
                (directory / name).unlink()  # a companion of a deleted segment
        interval = config.index_interval_bytes
        segments: list[Segment] = []
        try:
            segments = [Segment.existing(directory, b, interval, files) for b in bases]
            for seg in segments:
                seg.marker_on_disk = segment_name(seg.base_offset) in quarantined
            if not segments:
                segments.append(Segment.create(directory, 0, interval, files))
            _link(segments)
            last = segments[-1]
            if clean:
                last.ensure_loaded()
            else:
                last.recover(truncate_torn_tail=True, recorded_end=recorded_end)
                last.write_index_files(fsync=False)
            end = last.next_offset
            start = max(segments[0].base_offset, min(_read_start_offset(directory) or 0, end))
            checkpoint = CleanerCheckpoint(directory)
            clamp_checkpoint(checkpoint, end)
            producers = cls._load_producers(directory, segments, start, end)
        except BaseException:
            for s in segments:
                s.close()
            raise
        inst = cls(directory, config, now_ms, segments, start, files, producers)
        inst._checkpoint = checkpoint
        inst._dir_dirty = True
        segments[-1].created_ms = now_ms() if not segments[-1].is_empty else None
        return inst

    @staticmethod
    def _load_producers(
        directory: Path, segments: list[Segment], start: int, end: int
    ) -> ProducerStateManager:
        """Snapshot if usable, then replay headers of every batch written after it.

        The replay also rebuilds the aborted-transaction index entries of the
        markers it passes, so an index the crash left behind (a torn or missing
        last entry) matches the log again.
        """
        loaded = ProducerStateManager.read_snapshot(directory / PRODUCER_SNAPSHOT_FILE)
        from_offset = segments[0].base_offset
        producers = ProducerStateManager()
        if loaded is not None and segments[0].base_offset <= loaded[1] <= end:
            producers, from_offset = loaded
        for seg in segments:
            if from_offset >= end:
                break
            if seg.next_segment_base is not None and seg.next_segment_base <= from_offset:
                continue  # wholly before the snapshot: not even loaded
            aborted: list[AbortedTxn] = []
            for pos, h in _headers_from(seg, max(from_offset, seg.base_offset)):
                if not h.is_control:
                    producers.replay(h)
                    continue
                done = producers.replay(h, abort=marker_is_abort(seg.read_batch_at(pos, h.size)))
                if done is not None and done.aborted:
                    aborted.append(_aborted_entry(producers, done))
            _rebuild_txn_index(seg, from_offset, aborted)
        producers.evict_below(start)
        return producers

    def _producer_state(self) -> ProducerStateManager:
        """The idempotence state, loaded on first use (call with the lock held)."""
        if self._producers is None:
            self._producers = self._load_producers(
                self.directory, self._segments, self._start_offset, self.end_offset
            )
        return self._producers

    # ------------------------------------------------------------------ properties

    @property
    def start_offset(self) -> int:
        return self._start_offset

    @property
    def end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, or the log end (Kafka's LSO).

        read_committed readers get data only below it.
        """
        with self._lock:
            end = self._segments[-1].next_offset
            if self._producers is None and not self._maybe_open_transactions:
                return end
            first = self._producer_state().first_unstable_offset()
            if first is None:
                return end
            return max(min(first, end), self._start_offset)

    @property
    def size_bytes(self) -> int:
        return sum(s.byte_size() for s in list(self._segments))

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def producer_state(self) -> ProducerStateManager:
        with self._lock:
            return self._producer_state()

    @property
    def quarantined(self) -> list[tuple[int, int, int]]:
        """(segment base, first offset, end offset) of every quarantined range known so
        far (offsets that answer CORRUPT_MESSAGE; never empty)."""
        return [
            (s.base_offset, h.first_offset, h.end_offset)
            for s in list(self._segments)
            for h in s.holes
            if h.lost
        ]

    def damage(self) -> list[Damage]:
        """Every range set aside so far at or after the log start, quarantined or skipped,
        without loading a segment (one not used yet answers from its ``.corrupt``
        record). Ranges below the log start (DeleteRecords past them) no longer count."""
        start = self._start_offset
        return [
            Damage(s.base_offset, *h)
            for s in list(self._segments)
            for h in s.recorded_holes()
            if h.end_offset > start or (not h.lost and h.end_offset == start)
        ]

    # ------------------------------------------------------------------ append

    def validate(self, data: bytes | bytearray | memoryview) -> list[Any]:
        """A client's batches checked as ``append`` checks them (headers, CRCs, records,
        decompressed within the bound), without touching the log: callable from any
        thread, so a caller can inflate compressed batches off its event loop and pass
        the result to ``append(validated=...)``."""
        return validate_batches_raw(data, max_decompressed_bytes=self.config.max_decompressed_bytes)

    def append(
        self,
        data: bytes | bytearray | memoryview,
        *,
        from_client: bool = True,
        validated: list[Any] | None = None,
    ) -> AppendInfo:
        """Validate, assign offsets, stamp, and write one or more batches.

        ``from_client=False`` (coordinator-written data) allows control batches
        and skips sequence and record checks, like Kafka's COORDINATOR append
        origin. ``validated``: what ``validate(data)`` returned for these very
        (immutable) bytes. Header fields are handled as plain tuples here: this is
        the hot path.
        """
        if self._closed:
            self._check_open()  # raises
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        cfg = self.config
        if validated is not None and from_client and isinstance(data, bytes):
            raws = validated
        else:
            raws = validate_batches_raw(
                view,
                allow_control=not from_client,
                check_records=from_client,
                max_decompressed_bytes=cfg.max_decompressed_bytes,
            )
        max_size = cfg.max_message_bytes
        count = 0
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
            count += t[6] + 1
            records += t[12]
        with self._lock:
            if self._closed:
                self._check_open()  # raises
            return self._append_locked(view, raws, count, records, idempotent, from_client)

    def _append_locked(
        self,
        view: memoryview,
        raws: list[Any],
        count: int,
        records: int,
        idempotent: bool,
        from_client: bool,
    ) -> AppendInfo:
        cfg = self.config
        seg = self._segments[-1]
        if not seg.loaded:
            seg.ensure_loaded()
        first = seg.next_offset
        nxt = first + count
        last = nxt - 1
        now = self._now_ms()
        append_time = now if cfg.log_append_time else -1

        updates = None
        if idempotent:
            producers = self._producer_state()
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
            checks: list[tuple[BatchHeader, int, int, bool]] = []
            off = first
            pos = 0
            for h in headers:
                abort = h.is_control and marker_is_abort(view, pos)
                checks.append((h, off, append_time if append_time >= 0 else h.max_timestamp, abort))
                off += h.last_offset_delta + 1
                pos += h.size
            updates = producers.prepare(checks, check_sequence=from_client)

        epoch = self.leader_epoch
        if epoch != self._latest_epoch:
            self._note_leader_epoch(epoch, first)
        if self._clean_record_on_disk or not self._modified:
            self._begin_change()
        total = len(view)
        self._maybe_roll(total, last, now)
        seg = self._segments[-1]
        seg_pos = seg.size
        if len(raws) == 1 and append_time < 0:
            # Common case: no copy of the payload, just a patched 16-byte prefix.
            t = raws[0]
            seg.write_parts((_PREFIX.pack(first, t[1], epoch), view[_PREFIX.size :]), total)
            notes: list[tuple[int, int, int, int, int]] | None = None
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
        if notes is None:
            seg.note_batch(seg_pos, first, nxt, raws[0][8], total)
        else:
            for note in notes:
                seg.note_batch(*note)
        self._dirty_segments.add(seg)
        if updates is not None:
            producers = self._producer_state()
            producers.commit(updates)
            for done in updates.completed:
                if done.aborted:
                    seg.txn_index.append(_aborted_entry(producers, done))

        self._unflushed_messages += records
        flushed = None
        if (
            self._unflushed_messages >= cfg.flush_messages
            or now - self._last_flush_ms >= cfg.flush_ms
        ):
            self._unflushed_messages = 0
            self._last_flush_ms = now
            flushed = self._submit(self.flush)
        return AppendInfo(first, last, append_time, self._start_offset, flushed=flushed)

    def _begin_change(self) -> None:
        """Before the first change after a clean open: the clean record must go."""
        self._modified = True
        if self._clean_record_on_disk:
            # No fsync needed: a record that survives a machine crash no longer
            # matches the active segment's size or base, and then open() recovers.
            with contextlib.suppress(FileNotFoundError):
                (self.directory / CLEAN_SHUTDOWN_FILE).unlink()
            self._clean_record_on_disk = False
            self._dir_dirty = True

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
        """Start a new active segment at end_offset; the old one is finished by a worker."""
        with self._lock:
            self._check_open()
            old = self._segments[-1]
            old.ensure_loaded()
            if old.is_empty:
                return
            self._begin_change()
            old.seal()
            new = Segment.create(
                self.directory, old.next_offset, self.config.index_interval_bytes, self._files
            )
            old.next_segment_base = new.base_offset
            self._segments.append(new)
            self._bases.append(new.base_offset)
            self._dir_dirty = True
            snapshot = None
            if self._producers is not None:
                snapshot = self._producers.snapshot_bytes(new.base_offset)
            self._submit(self._finish_rolled, old, new.base_offset, snapshot, self._truncations)

    def _finish_rolled(
        self, old: Segment, rolled_at: int, snapshot: bytes | None, truncations: int
    ) -> None:
        """Worker: index files, fsync of the sealed segment, producer snapshot (unless
        the log was truncated since the roll: the snapshot would describe lost data)."""
        with self._finishing:
            if old.file.retired:
                return  # deleted meanwhile (retention, topic deletion): nothing to finish
            try:
                old.release_reserved()  # appended to no more
                old.write_index_files(fsync=True)
                old.txn_index.sync()
                old.fsync()
                if (
                    snapshot is not None
                    and rolled_at > self._snapshot_written
                    and truncations == self._truncations
                ):
                    path = self.directory / PRODUCER_SNAPSHOT_FILE
                    write_file_atomic(path, snapshot, fsync=True)
                    self._snapshot_written = rolled_at
                fsync_dir(self.directory)
            except (OSError, ValueError):
                if self._closing or old.file.retired:
                    return
                raise
        with self._lock:
            self._dirty_segments.discard(old)

    # ------------------------------------------------------------------ replication

    def append_as_follower(
        self, data: bytes | bytearray | memoryview, *, allow_gaps: bool | None = None
    ) -> AppendInfo:
        """Append batches fetched from the leader, exactly as the leader wrote them.

        Base offsets, partition leader epochs and timestamps are kept (nothing is
        patched or restamped). Each batch's framing and CRC32C are checked, control
        batches allowed, records not walked; max.message.bytes does not apply (the
        leader accepted them, as Kafka's follower path). The first base offset must be
        the log end offset and each batch must start where the previous one ended,
        else ``OffsetMismatchError`` and nothing is written. ``allow_gaps`` (default:
        when the log is compacted) accepts a first batch or a batch past that point:
        a compacted leader has removed whole batches, so its log has gaps. Producer
        state follows as on the leader (sequences, open transactions, markers, the
        aborted-transaction index) without checking sequences, and the leader epoch
        cache learns each batch's epoch before the bytes are written.
        """
        self._check_open()
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        gaps = self.config.compact_enabled if allow_gaps is None else allow_gaps
        raws = _check_replicated(view, gaps)
        with self._lock:
            self._check_open()
            return self._append_as_follower_locked(view, raws, gaps)

    def _append_as_follower_locked(
        self, view: memoryview, raws: list[Any], gaps: bool
    ) -> AppendInfo:
        seg = self._segments[-1]
        seg.ensure_loaded()
        end = seg.next_offset
        first = raws[0][0]
        if first != end and not (gaps and first > end):
            raise OffsetMismatchError(
                f"fetched batches start at offset {first}, the log ends at {end}: nothing written"
            )
        last = raws[-1][0] + raws[-1][6]
        now = self._now_ms()
        producers = self._producer_state() if any(t[9] >= 0 for t in raws) else None
        self._note_batch_epochs(raws)
        self._begin_change()
        self._maybe_roll(len(view), last, now)
        seg = self._segments[-1]
        seg_pos = seg.size
        try:
            seg.write(view)
        except BaseException:
            self._truncate_epochs_from_end(end)  # the entries just written describe nothing
            raise
        if seg.created_ms is None:
            seg.created_ms = now
        records = 0
        pos = 0
        for t in raws:
            size = t[1] + LOG_OVERHEAD
            seg.note_batch(seg_pos + pos, t[0], t[0] + t[6] + 1, t[8], size)
            if producers is not None and t[9] >= 0:
                h = BatchHeader(*t)
                abort = h.is_control and marker_is_abort(view, pos)
                done = producers.replay(h, abort=abort)
                if done is not None and done.aborted:
                    seg.txn_index.append(_aborted_entry(producers, done))
            records += t[12]
            pos += size
        self._dirty_segments.add(seg)
        self._unflushed_messages += records
        flushed = None
        cfg = self.config
        if (
            self._unflushed_messages >= cfg.flush_messages
            or now - self._last_flush_ms >= cfg.flush_ms
        ):
            self._unflushed_messages = 0
            self._last_flush_ms = now
            flushed = self._submit(self.flush)
        return AppendInfo(first, last, -1, self._start_offset, flushed=flushed)

    def truncate_to(self, offset: int) -> int:
        """Remove every batch at and after ``offset``; return the new log end offset.

        For a follower whose log diverged from its new leader's. Truncation is at
        batch boundaries, as Kafka's: an ``offset`` inside a batch removes that whole
        batch, so the new end is that batch's base offset (or, in a compacted log's
        gap, the end of the batch before). ``offset`` must lie within
        [start_offset, end_offset]; at end_offset only epoch cache entries starting
        there (an epoch led without data) go. Later segments are
        deleted, the one holding the cut is cut (its indexes and aborted-transaction
        entries with it), the producer state is rebuilt as recovery does (snapshot
        below the cut plus a header replay) and the leader epoch cache loses the
        entries from the new end on. Everything is fsynced before returning. The
        steps run in an order that leaves a prefix of the old log at any crash point;
        ``open`` recovers from there (stale snapshots and cache entries past the end
        are ignored or dropped). The caller must not append concurrently (a
        follower's fetcher does both in turn).
        """
        with self._maintenance:
            self.drain()
            with self._lock:
                self._check_open()
                if offset < self._start_offset or offset > self.end_offset:
                    raise OffsetOutOfRangeError(
                        f"cannot truncate to {offset}: the log holds "
                        f"[{self._start_offset}, {self.end_offset}]"
                    )
                if offset < self.end_offset:
                    self._truncate_locked(offset)
                else:
                    # Nothing to cut, but an epoch this broker started as leader without
                    # writing anything must go (Kafka does the same).
                    self._truncate_epochs_from_end(offset)
                return self.end_offset

    def _truncate_locked(self, offset: int) -> None:
        i = max(bisect_right(self._bases, offset) - 1, 0)
        seg = self._segments[i]
        seg.ensure_loaded()
        try:
            found = seg.find_batch(offset)
        except CorruptSegmentError:
            hole = seg.hole_for_offset(offset)
            assert hole is not None
            found = (hole.position, hole.first_offset)  # the quarantined range goes whole
        cut_pos, cut_offset = found if found is not None else (seg.size, seg.next_offset)
        if cut_offset < self._start_offset:
            # The batch holding the log start is cut: nothing readable is left.
            self._truncate_fully_locked(self._start_offset)
            return
        self._begin_change()
        self._truncations += 1
        # 1. A producer snapshot taken past the cut describes data about to go.
        snapshot_path = self.directory / PRODUCER_SNAPSHOT_FILE
        saved = ProducerStateManager.read_snapshot(snapshot_path)
        if saved is not None and saved[1] > cut_offset:
            snapshot_path.unlink()
            fsync_dir(self.directory)
        # 2. Later segments, newest first (a crash leaves a prefix of the log), then the cut.
        doomed = self._segments[i + 1 :]
        del self._segments[i + 1 :]
        del self._bases[i + 1 :]
        for s in reversed(doomed):
            self._dirty_segments.discard(s)
            s.delete_files()
        if doomed:
            fsync_dir(self.directory)
        _link(self._segments)
        seg.truncate_to(cut_pos, cut_offset)
        seg.created_ms = self._now_ms() if not seg.is_empty else None
        end = seg.next_offset
        clamp_checkpoint(self._checkpoint, end)
        # 3. State derived from the log: epoch cache, producer state (and its snapshot).
        self._truncate_epochs_from_end(end)
        producers = self._load_producers(self.directory, self._segments, self._start_offset, end)
        self._producers = producers
        self._maybe_open_transactions = bool(producers.ongoing)
        producers.write_snapshot(snapshot_path, end, fsync=True)
        self._snapshot_written = end
        for s in self._segments[i:]:
            s.txn_index.sync()
        fsync_dir(self.directory)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and start it empty at ``offset`` (log start and end).

        For a follower whose log lies wholly below the leader's start offset or
        diverged past what truncation can repair. Producer state and the epoch
        cache are cleared. Crash-safe like ``truncate_to``: the epoch cache file is
        removed first (so a crash midway rebuilds it from what remains) and the
        segments go newest first.
        """
        if offset < 0:
            raise OffsetOutOfRangeError(f"cannot start a log at offset {offset}")
        with self._maintenance:
            self.drain()
            with self._lock:
                self._check_open()
                self._truncate_fully_locked(offset)

    def _truncate_fully_locked(self, offset: int) -> None:
        self._begin_change()
        self._truncations += 1
        cache = LeaderEpochCache(self.directory / LEADER_EPOCH_FILE)
        cache.delete_file()
        (self.directory / PRODUCER_SNAPSHOT_FILE).unlink(missing_ok=True)
        for s in reversed(self._segments):
            s.delete_files()
        self._dirty_segments.clear()
        fsync_dir(self.directory)
        new = Segment.create(self.directory, offset, self.config.index_interval_bytes, self._files)
        self._segments[:] = [new]
        self._bases[:] = [offset]
        _link(self._segments)
        self._start_offset = offset
        self._write_start_offset()
        clamp_checkpoint(self._checkpoint, offset)
        self._producers = ProducerStateManager()
        self._maybe_open_transactions = False
        self._snapshot_written = -1
        cache.write()  # empty: the log holds no epoch yet
        self._epochs = cache
        self._latest_epoch = cache.latest_epoch
        fsync_dir(self.directory)

    # ------------------------------------------------------------------ leader epochs

    def start_leader_epoch(self, epoch: int) -> None:
        """Become leader in ``epoch``: stamp it into appended batches and record it as
        starting at the log end now, before any data (Kafka does the same on becoming
        leader, so OffsetsForLeaderEpoch for the new epoch answers the log end)."""
        with self._lock:
            self._check_open()
            self.leader_epoch = epoch
            self._note_leader_epoch(epoch, self.end_offset)

    @property
    def latest_epoch(self) -> int:
        """The newest leader epoch in the epoch cache, -1 when it is empty."""
        with self._lock:
            self._check_open()
            return self._epoch_cache().latest_epoch

    @property
    def leader_epoch_entries(self) -> list[tuple[int, int]]:
        """The epoch cache: (epoch, start offset) pairs, oldest first."""
        with self._lock:
            self._check_open()
            return list(self._epoch_cache().entries)

    def end_offset_for_epoch(self, requested_epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for an OffsetsForLeaderEpoch request, Kafka's answer
        (see ``LeaderEpochCache.end_offset_for``)."""
        with self._lock:
            self._check_open()
            return self._epoch_cache().end_offset_for(requested_epoch, self.end_offset)

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Record ``epoch`` as starting at ``start_offset`` (Kafka's ``assign`` rules)."""
        with self._lock:
            self._check_open()
            cache = self._epoch_cache()
            if cache.assign(epoch, start_offset):
                cache.write()
            self._latest_epoch = cache.latest_epoch

    def _epoch_cache(self) -> LeaderEpochCache:
        """The epoch cache, loaded on first use (lock held): the checkpoint file fitted
        to the log, or, if it is missing or unreadable, rebuilt from batch headers."""
        if self._epochs is None:
            path = self.directory / LEADER_EPOCH_FILE
            entries = LeaderEpochCache.read_file(path)
            cache = LeaderEpochCache(path, entries)
            changed = False
            if entries is None:
                changed = self._scan_epochs(cache) or path.exists()
            if cache.clamp(self._start_offset, self.end_offset) or changed:
                cache.write()
            self._epochs = cache
            self._latest_epoch = cache.latest_epoch
        return self._epochs

    def _scan_epochs(self, cache: LeaderEpochCache) -> bool:
        """Rebuild ``cache`` from the batch headers; True if it found any epoch.

        Epochs never decrease along a log, so a segment whose first and last batches
        carry the same epoch holds no other: only segments where it changes are
        walked (a log written by one leader costs two header reads per segment).
        """
        for seg in self._segments:
            seg.ensure_loaded()
            if seg.is_empty:
                continue
            span = _epoch_span(seg)
            if span is not None and span[1] == span[2]:
                if span[1] >= 0:
                    cache.assign(span[1], span[0])
                continue
            for _, h in _headers_from(seg, seg.base_offset):
                if h.partition_leader_epoch >= 0:
                    cache.assign(h.partition_leader_epoch, h.base_offset)
        return bool(cache.entries)

    def _note_leader_epoch(self, epoch: int, offset: int) -> None:
        """A leader append (or leadership) in ``epoch`` from ``offset``: record the epoch
        if it is newer than the cache's latest (lock held; off the fast path)."""
        cache = self._epoch_cache()
        if epoch > cache.latest_epoch:
            cache.assign(epoch, offset)
            cache.write()
        self._latest_epoch = cache.latest_epoch

    def _note_batch_epochs(self, raws: list[Any]) -> None:
        """The epochs of fetched batches, recorded (durably) before they are written."""
        latest = self._latest_epoch
        if all(t[2] == latest or t[2] < 0 for t in raws):
            return
        cache = self._epoch_cache()
        changed = False
        for t in raws:
            if t[2] >= 0 and cache.assign(t[2], t[0]):
                changed = True
        if changed:
            cache.write()
        self._latest_epoch = cache.latest_epoch

    def _truncate_epochs_from_end(self, end: int) -> None:
        cache = self._epoch_cache()
        if cache.truncate_from_end(end):
            cache.write()
        self._latest_epoch = cache.latest_epoch

    def _truncate_epochs_from_start(self) -> None:
        """The log start moved: a loaded cache follows (an unloaded one is fitted on load)."""
        if self._epochs is not None and self._epochs.truncate_from_start(self._start_offset):
            self._epochs.write()

    # ------------------------------------------------------------------ background work

    def _submit(self, fn: Callable[..., None], *args: Any) -> Future[None]:
        future: Future[None] = _worker_pool().submit(fn, *args)
        self._background.add(future)
        future.add_done_callback(self._background_done)
        return future

    def _background_done(self, future: Future[None]) -> None:
        self._background.discard(future)
        if not future.cancelled() and future.exception() is not None:
            log.error("%s: background log work failed: %r", self.directory, future.exception())

    def drain(self) -> None:
        """Wait until every fsync, roll and deletion handed to a worker has finished."""
        while self._background:
            wait(list(self._background))

    # ------------------------------------------------------------------ read

    def _check_range(self, offset: int) -> None:
        if offset < self._start_offset or offset > self.end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._start_offset}, {self.end_offset}]"
            )

    def _locate(self, offset: int) -> tuple[Segment, int, int] | None:
        """(segment, position, base offset) of the first batch whose last offset >= offset."""
        i = max(bisect_right(self._bases, offset) - 1, 0)
        for seg in self._segments[i:]:
            found = seg.find_batch(offset)
            if found is not None:
                return seg, found[0], found[1]
        return None

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        region_from: int | None = None,
    ) -> bytes | bytearray | FileRegion:
        """Whole batches from the batch containing ``offset``, at least one if any exist.

        Reads stay within one segment, as Kafka's do; the caller fetches again.
        ``max_offset``: no batch starting at or after it (read_committed: the last
        stable offset). Raises CorruptSegmentError (CORRUPT_MESSAGE) for an
        offset in a quarantined range. With ``region_from``, a read of more than
        that many bytes may answer a ``FileRegion`` (``Segment.read_from``), which
        the caller must release.
        """
        with self._lock:
            self._check_open()
            self._check_range(offset)
            if offset == self.end_offset or (max_offset is not None and offset >= max_offset):
                return b""
            loc = self._locate(offset)
            if loc is None:
                if offset >= self.end_offset:  # the end moved back as a segment was loaded
                    return b""
                raise self._nothing_at(offset, "no batch holds it or follows it")
            seg, pos, base = loc
            data = seg.read_from(pos, max_bytes, base, max_offset, region_from=region_from)
            if (len(data) if not isinstance(data, FileRegion) else data.length) or (
                max_offset is not None and base >= max_offset
            ):
                return data
            # Records exist after ``offset`` but the read returned none: never answer
            # that as "no error, no records", or consumers wait there for good.
            raise self._nothing_at(
                offset, f"the batch at byte {pos} of segment {seg.base_offset} could not be read"
            )

    def _nothing_at(self, offset: int, why: str) -> CorruptSegmentError:
        log.error(
            "%s: offset %d is below the log end %d but %s; answering CORRUPT_MESSAGE",
            self.directory,
            offset,
            self.end_offset,
            why,
        )
        return CorruptSegmentError(
            f"offset {offset} cannot be read ({why})", resume_offset=offset + 1
        )

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """Aborted transactions with data in [fetch_offset, upper_bound) (read_committed).

        Looks in the transaction index of the segment holding ``fetch_offset``
        and of later ones (a marker may land segments after its data), stopping
        as Kafka does once an entry closed at or past ``upper_bound``.
        """
        with self._lock:
            self._check_open()
            i = max(bisect_right(self._bases, fetch_offset) - 1, 0)
            found: list[AbortedTxn] = []
            for seg in self._segments[i:]:
                entries, complete = seg.txn_index.collect(fetch_offset, upper_bound)
                found.extend(entries)
                if complete:
                    break
            return found

    def iter_batches_from(self, offset: int) -> Iterator[bytes | bytearray]:
        """Every readable batch from the one containing ``offset`` (coordinator replay).

        A quarantined range is logged and skipped: state rebuilt from what is
        readable beats a coordinator that cannot load at all.
        """
        self._check_range(offset)
        while offset < self.end_offset:
            try:
                chunk = self.read(offset, _ITER_CHUNK)
            except CorruptSegmentError as exc:
                log.error("%s: replay skips a corrupt range: %s", self.directory, exc)
                offset = exc.resume_offset
                continue
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

        Record granularity whenever the batch can be decoded within
        ``max_decompressed_bytes`` (uncompressed, or a codec whose library is
        installed); otherwise the batch's base offset and max timestamp (batch
        granularity). Records below the log start are skipped.
        """
        with self._lock:
            self._check_open()
            start = self._start_offset
            for seg in self._segments:
                seg.ensure_loaded()
                if seg.is_empty or seg.max_timestamp < timestamp_ms or seg.next_offset <= start:
                    continue
                rel = seg.time_index.lookup_before(timestamp_ms)
                from_off = max(seg.base_offset + (rel if rel is not None else 0), start)
                for p, h in _headers_from(seg, from_off):
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
        with self._lock:
            self._check_open()
            best: Segment | None = None
            for seg in self._segments:
                seg.ensure_loaded()
                if seg.is_empty or seg.offset_of_max_timestamp < 0:
                    continue
                if best is None or seg.max_timestamp > best.max_timestamp:
                    best = seg
            if best is None:
                return None
            target = best.max_timestamp
            for p, h in _headers_from(best, best.offset_of_max_timestamp):
                if h.max_timestamp == target:
                    off, ts = self._first_record_at_or_after(best, p, h, target, 0)
                    return max(off, self._start_offset), ts
            return max(best.offset_of_max_timestamp, self._start_offset), target

    # ------------------------------------------------------------------ retention

    def enforce_retention(self, now_ms: int) -> int:
        """Delete whole old segments by retention.ms / retention.bytes / log start offset.

        The active segment is never deleted. Time retention uses each segment's
        largest record timestamp, as Kafka does. The segments are chosen and
        detached under the lock; their files are deleted in a worker thread.
        Safe to call from any thread. Returns the number deleted.
        """
        with self._maintenance, self._lock:
            if self._closing or self._closed:
                return 0
            cfg = self.config
            segs = self._segments
            n = 0
            # Segments entirely below the log start offset (DeleteRecords) go first.
            while n < len(segs) - 1 and segs[n + 1].base_offset <= self._start_offset:
                n += 1
            if cfg.delete_enabled:
                if cfg.retention_ms >= 0:
                    while (
                        n < len(segs) - 1
                        and now_ms - segs[n].largest_timestamp() > cfg.retention_ms
                    ):
                        n += 1
                if cfg.retention_bytes >= 0:
                    sizes = [s.byte_size() for s in segs]
                    excess = sum(sizes) - cfg.retention_bytes - sum(sizes[:n])
                    while n < len(segs) - 1 and excess - sizes[n] >= 0:
                        excess -= sizes[n]
                        n += 1
            if n:
                self._delete_leading(n)
            return n

    def delete_records_before(self, offset: int) -> None:
        """Advance the log start offset (DeleteRecords); whole segments below it are removed."""
        with self._lock:
            self._check_open()
            if offset > self.end_offset or offset < 0:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: log end offset is {self.end_offset}"
                )
            if offset <= self._start_offset:
                return
            self._begin_change()
            self._start_offset = offset
            self._write_start_offset()
            self._truncate_epochs_from_start()
            n = 0
            segs = self._segments
            while n < len(segs) - 1 and segs[n + 1].base_offset <= offset:
                n += 1
            if n:
                self._delete_leading(n)
            if self._producers is not None:
                self._producers.evict_below(self._start_offset)

    def _delete_leading(self, n: int) -> None:
        """Detach the first ``n`` segments (lock held); a worker deletes their files."""
        self._begin_change()
        doomed = self._segments[:n]
        del self._segments[:n]
        del self._bases[:n]
        for s in doomed:
            self._dirty_segments.discard(s)
            s.close()
        self._dir_dirty = True
        new_start = self._segments[0].base_offset
        if new_start > self._start_offset:
            self._start_offset = new_start
            self._write_start_offset()
            self._truncate_epochs_from_start()
        if self._producers is not None:
            self._producers.evict_below(self._start_offset)
        self._submit(_delete_segment_files, doomed)

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
        Safe to call from any thread: the segments are read and rewritten
        without the lock, which is held only to swap each cleaned group in.
        Segments holding a quarantined range are never rewritten.
        """
        with self._maintenance:
            if self._closing or self._closed:
                return CompactionStats.skipped_for("the log is closed")
            self.drain()  # rolled segments finished: their index files are not rewritten later
            with self._lock:
                self._check_open()
                segments = list(self._segments)
                for s in segments:
                    s.ensure_loaded()
                active_end = segments[-1].size
                last_offsets = {
                    pid: e.last_offset
                    for pid, e in self._producer_state().entries.items()
                    if e.batches
                }
                lso = self.last_stable_offset
            try:
                stats = compact_segments(
                    self.directory,
                    self._checkpoint,
                    segments,
                    active_end,
                    self.config,
                    now_ms,
                    last_offsets,
                    self._commit_compacted,
                    lso=lso,
                    should_stop=lambda: self._closing,
                    force=force,
                )
            except (OSError, ValueError):
                if self._closing:  # the log is being closed or deleted: stop quietly
                    return CompactionStats.skipped_for("the log was closed")
                raise
            return stats

    def _commit_compacted(self, group: list[Segment], writer: Any) -> Segment | None:
        """Swap a cleaned group in, unless it changed meanwhile (then None: discard it)."""
        with self._lock:
            if self._closing or any(s not in self._segments for s in group):
                return None
            self._begin_change()
            new = swap_in(self.directory, group, writer, self._files)
            i = next(k for k, s in enumerate(self._segments) if s is group[0])
            self._segments[i : i + len(group)] = [new]
            self._bases[i : i + len(group)] = [new.base_offset]
            for s in group:
                self._dirty_segments.discard(s)
            _link(self._segments)
            return new

    @property
    def first_dirty_offset(self) -> int:
        """The cleaner checkpoint clamped to the log (where the next compaction starts)."""
        saved = self._checkpoint.get()
        start = self._segments[0].base_offset
        active = self._segments[-1].base_offset
        return min(max(start if saved is None else saved, start), active)

    def dirty_ratio(self) -> float:
        """Dirty bytes over all bytes of the non-active segments (0.0 if there are none)."""
        with self._lock:
            cleanable = self._segments[:-1]
            for s in cleanable:
                s.ensure_loaded()
            dirty, total = dirty_bytes(cleanable, self.first_dirty_offset)
        return dirty / total if total else 0.0

    # ------------------------------------------------------------------ durability

    def flush(self) -> None:
        """fsync every segment written since the last flush, and the directory if needed.

        Safe from any thread: the fsyncs run outside the lock.
        """
        with self._lock:
            self._check_open()
            dirty = list(self._dirty_segments)
            self._dirty_segments.clear()
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            self._unflushed_messages = 0
            self._last_flush_ms = self._now_ms()
        try:
            for seg in dirty:
                if not seg.file.retired:
                    seg.fsync()
            if dir_dirty:
                fsync_dir(self.directory)
        except BaseException:
            with self._lock:
                self._dirty_segments.update(s for s in dirty if not s.file.retired)
                self._dir_dirty = self._dir_dirty or dir_dirty
            raise

    def close(self) -> None:
        """Flush, write indexes and producer snapshot, then the clean-shutdown record."""
        if self._closed:
            return
        self._closing = True
        with self._maintenance:
            self.drain()
            with self._lock:
                if self._closed:
                    return
                self._close_locked()

    def _close_locked(self) -> None:
        if not self._modified:
            # Nothing changed since a clean open: the record and files are still complete.
            self._retire_files()
            self._closed = True
            return
        for seg in self._dirty_segments:
            seg.fsync()
        self._dirty_segments.clear()
        active = self._segments[-1]
        active.ensure_loaded()
        active.finalize_indexes(fsync=True)
        active.txn_index.sync()
        if self._producers is not None:
            self._producers.write_snapshot(
                self.directory / PRODUCER_SNAPSHOT_FILE, self.end_offset, fsync=True
            )
        record = {
            "start_offset": self._start_offset,
            "end_offset": self.end_offset,
            "active_base": active.base_offset,
            "active_size": active.size,
            "open_transactions": (
                bool(self._producers.ongoing)
                if self._producers is not None
                else self._maybe_open_transactions
            ),
        }
        self._retire_files()
        write_file_atomic(
            self.directory / CLEAN_SHUTDOWN_FILE, json.dumps(record).encode(), fsync=True
        )
        fsync_dir(self.directory)
        self._closed = True

    def _retire_files(self) -> None:
        for s in self._segments:
            s.close()

    def delete(self, move_to: Path | None = None) -> None:
        """Remove the partition directory entirely (topic deletion).

        ``move_to``: first rename the directory there (Kafka's ``-delete`` name), under
        the maintenance lock so no compaction or retention pass is writing in it, so a
        crash before the removal leaves a directory no topic can be served from.
        """
        self._closing = True
        with self._maintenance:
            self.drain()
            with self._lock:
                self._retire_files()
                self._closed = True
            if move_to is not None:
                try:
                    os.replace(self.directory, move_to)
                    self.directory = move_to
                except OSError as exc:
                    log.warning("cannot rename %s for deletion: %s", self.directory, exc)
        shutil.rmtree(self.directory, ignore_errors=True)

    # ------------------------------------------------------------------ relocation (JBOD)
    # For odradek.log.dir_move, which copies this log to another log directory while it
    # serves and then swaps: the object stays (everything holding it keeps working), its
    # files change.

    # What a relocated log keeps of its own: the locks other threads may be waiting on,
    # whether a close or delete has begun, pending background work (whose callbacks
    # discard from that very set), and the leader epoch replication stamps.
    _KEPT_ON_RELOCATION = (
        "_lock",
        "_maintenance",
        "_finishing",
        "_closing",
        "_background",
        "leader_epoch",
    )

    @property
    def truncations(self) -> int:
        """How many truncations this log has had: a copy of its files taken while it
        serves may only be extended, never re-read, if this has not changed since."""
        return self._truncations

    def relocate(self, finish_copy: Callable[[Path], Path]) -> None:
        """Continue from a copy of this log's files made in another directory.

        Under the maintenance lock and the lock (appends, reads and maintenance wait),
        the files are closed as ``close()`` closes them, so they are complete and quiet
        (the bulk of its fsyncs is done first, before appends have to wait);
        ``finish_copy(directory)`` then completes the copy and returns its directory, and
        the log reopens there (cheaply: the copy carries the clean-shutdown record) and
        takes that state over. If ``finish_copy`` raises, the log reopens where it was
        and the error propagates. ValueError if the log is closing or closed.
        """
        with self._maintenance:
            self.drain()
            self.flush()
            with self._lock:
                self._check_open()
                if self._closing:
                    raise ValueError(f"partition log {self.directory} is closing")
                self._close_locked()
                failure: BaseException | None = None
                try:
                    where = finish_copy(self.directory)
                except BaseException as exc:
                    where, failure = self.directory, exc
                moved = PartitionLog.open(
                    where, self.config, now_ms=self._now_ms, files=self._files
                )
                # One update, in which this object's own lock never changes: a thread
                # waiting for it keeps waiting for the one this thread holds.
                state = dict(moved.__dict__)
                state.update({name: self.__dict__[name] for name in self._KEPT_ON_RELOCATION})
                self.__dict__.update(state)
                if failure is not None:
                    raise failure

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"partition log {self.directory} is closed")

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.directory}, start={self._start_offset}, end={self.end_offset}, "
            f"segments={len(self._segments)})"
        )


def _link(segments: list[Segment]) -> None:
    """Tell each segment where the next one starts (its offsets must stay below)."""
    for seg, nxt in pairwise(segments):
        seg.next_segment_base = nxt.base_offset
    segments[-1].next_segment_base = None


def _headers_from(seg: Segment, offset: int) -> Iterator[tuple[int, BatchHeader]]:
    """Headers of ``seg`` from the batch holding ``offset``; quarantined ranges skipped
    (several may follow one another)."""
    found = None
    seg.ensure_loaded()  # its end is known only then
    while offset < seg.next_offset:
        try:
            found = seg.find_batch(offset)
            break
        except CorruptSegmentError as exc:
            offset = exc.resume_offset
    if found is not None:
        yield from seg.iter_headers(*found)


def _delete_segment_files(segments: list[Segment]) -> None:
    """Worker: unlink detached segments (slow for big files on some filesystems)."""
    for seg in segments:
        seg.delete_files()


def _aborted_entry(producers: ProducerStateManager, done: CompletedTxn) -> AbortedTxn:
    """The index entry of an aborted transaction ``producers`` has just closed; the LSO is
    the oldest transaction still open, or the offset after the marker (Kafka's rule)."""
    first = producers.first_unstable_offset()
    lso = done.last_offset + 1 if first is None else first
    return AbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso)


def _rebuild_txn_index(seg: Segment, from_offset: int, aborted: list[AbortedTxn]) -> None:
    """Make ``seg``'s index entries from ``from_offset`` on exactly what a replay found."""
    current = seg.txn_index.entries
    kept = [e for e in current if e.last_offset < from_offset]
    if kept + aborted != current:
        seg.txn_index.replace(kept + aborted)


def _epoch_span(seg: Segment) -> tuple[int, int, int] | None:
    """(base offset and epoch of the first batch, epoch of the last batch) of a
    non-empty segment, or None if it cannot be read that cheaply."""
    try:
        first = next(_headers_from(seg, seg.base_offset), None)
        found = seg.find_batch(seg.next_offset - 1)
    except CorruptSegmentError:
        return None
    if first is None or found is None:
        return None
    raw = seg.pread(BATCH_OVERHEAD, found[0])
    if len(raw) < BATCH_OVERHEAD:
        return None
    h = first[1]
    return h.base_offset, h.partition_leader_epoch, unpack_header(raw)[2]


def _check_replicated(view: memoryview, gaps: bool) -> list[Any]:
    """Raw headers of batches fetched from a leader, after the checks a follower makes.

    Framing, magic and CRC32C as ``validate_batches_raw``; a records count may be
    below last_offset_delta + 1, even 0 (a compacted batch keeps its offset range);
    each batch starts at the previous one's next offset (or later, with ``gaps``).
    """
    end = len(view)
    if end == 0:
        raise InvalidRecordError("no record batch in fetched data")
    headers: list[Any] = []
    pos = 0
    expected = -1
    while pos < end:
        if end - pos < BATCH_OVERHEAD:
            raise CorruptRecordError(f"fetched data ends in a cut batch header at byte {pos}")
        t = unpack_header(view, pos)
        size = t[1] + LOG_OVERHEAD
        if t[1] < MIN_BATCH_LENGTH or pos + size > end:
            raise CorruptRecordError(f"fetched batch at byte {pos} has a bad length {t[1]}")
        if t[3] != 2:
            raise CorruptRecordError(f"fetched batch at byte {pos} has magic {t[3]}")
        if crc32c(view[pos + _CRC_START : pos + size]) != t[4]:
            raise CorruptRecordError(f"fetched batch at byte {pos} failed CRC32C")
        if t[5] & 0x07 > _MAX_CODEC or t[6] < 0 or not 0 <= t[12] <= t[6] + 1:
            raise InvalidRecordError(
                f"fetched batch at byte {pos}: codec {t[5] & 0x07}, last_offset_delta {t[6]}, "
                f"records_count {t[12]}"
            )
        if expected >= 0 and t[0] != expected and not (gaps and t[0] > expected):
            raise OffsetMismatchError(
                f"fetched batch at byte {pos} starts at offset {t[0]}, expected {expected}: "
                "nothing written"
            )
        expected = t[0] + t[6] + 1
        headers.append(t)
        pos += size
    return headers
