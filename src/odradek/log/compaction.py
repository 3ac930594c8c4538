"""Log compaction (``cleanup.policy=compact``): keep only the latest record of each key.

Used for ``__consumer_offsets``, whose group coordinator rebuilds its state by
replaying the partition: without compaction replay time grows with history.

What a compaction pass does (``PartitionLog.compact`` calls ``compact_segments``)
------------------------------------------------------------------------------
1. The *cleaner checkpoint* (``cleaner-offset-checkpoint`` in the partition
   directory, one decimal offset) is the first dirty offset: everything below it
   was cleaned before, so each key appears there at most once. The dirty ratio is
   the bytes of non-active segments at or after it over all non-active bytes; a
   pass runs when it reaches ``min.cleanable.dirty.ratio`` or when forced.
2. An offset map ``key -> latest offset`` is built from every batch of the
   segments holding dirty data, *including the active segment*, so a key whose
   newest record is in the active segment is dropped from older segments. The
   clean part below the checkpoint needs no scan (its keys are unique there and
   anything newer is in the map). Kafka stores 16-byte key hashes in a bounded
   map and may need several passes; here it is a plain dict of the key bytes, so
   one pass always covers the whole dirty range (memory: the dirty keys).
3. The non-active segments are rewritten oldest first, in groups of adjacent
   segments whose original sizes sum to at most ``segment.bytes`` (and whose
   offsets fit a relative index entry). A record is kept when its offset is the
   latest for its key; records with a null key are dropped (Kafka rejects them
   for compacted topics at produce time; Odradek's produce path does not check
   yet, so the cleaner removes them); a tombstone (null value) that is the latest
   for its key is removed once ``now - segment max timestamp`` (file mtime when
   the segment has no timestamps) exceeds ``delete.retention.ms``.
   The active segment is never rewritten.
4. Offsets never change. A batch keeping all records is copied byte for byte. A
   batch losing some keeps its base offset, last offset delta (Kafka does the
   same so the producer's last sequence survives), base timestamp, partition
   leader epoch, attributes and producer id / epoch / base sequence; its records
   count and max timestamp (CreateTime) follow the kept records. Uncompressed
   batches copy the kept records' bytes unchanged; compressed batches are decoded
   with ``decode_batch_records`` and re-encoded with ``build_batch`` using the
   same codec (not uncompressed: that could grow a group past ``segment.bytes``).
   A batch that loses every record disappears, except the batch holding the last
   offset of a producer known to the producer state, which stays as an empty
   batch (records count 0) so the producer's epoch and sequence survive a full
   replay of the log (Kafka's ``RETAIN_EMPTY``). Control batches are copied
   unchanged, and batches that cannot be decoded (codec library missing,
   corrupt) are copied unchanged and left out of the map.
5. Each group is written to ``<base>.log.cleaned``, fsynced, renamed to
   ``<base>.log.swap`` (the commit point, directory fsynced), then the old
   segments' files are deleted and the swap file is renamed over
   ``<base>.log``. ``recover_leftovers`` (run by ``PartitionLog.open``) deletes
   ``.cleaned`` files and completes any ``.swap``: it deletes every old ``.log``
   whose base offset lies in the swap's offset range and renames the swap in.
   An old segment past that range only holds records the pass dropped; leaving
   it is harmless (its offsets follow the swap's), only less compact. Groups go
   oldest first, so a removed tombstone never leaves an older value of its key
   behind in a segment that was not rewritten yet.
6. The checkpoint moves to the active segment's base offset after the last swap.
   The file is the cleaner's own (nothing else writes it), so each log reads it
   once and keeps it in memory (``CleanerCheckpoint``), writing it through: a pass
   that finds nothing to clean, every ``log.cleaner.backoff.ms`` for every
   compacted partition, reads no file.

Threads: ``PartitionLog.compact`` may run in a worker thread while the event
loop appends and reads. The pass reads sealed segments (which appends never
touch) and the active segment only up to its size when the pass began, writes
the ``.cleaned`` file and fsyncs it without the log's lock, and takes the lock
only to commit each group (``swap_in``); a group whose segments changed
meanwhile (DeleteRecords) is discarded. Segments holding a quarantined
(corrupt) range are never rewritten: their bytes stay for the operator.

Transactions (Kafka's LogCleaner rules): only segments wholly below the last
stable offset are cleaned, and the offset map ignores records at or past it, so
an open transaction can neither be cleaned nor shadow a committed record it
may yet abort. Records of aborted transactions (known from the segments'
aborted-transaction indexes) never enter the map and are removed; the batch
keeps Kafka's RETAIN_EMPTY rule. A COMMIT or ABORT marker stays as long as any
batch of its transaction remains, and past that until its segment is older
than ``delete.retention.ms`` (as tombstones); a segment with a quarantined
range keeps every later marker, since what it holds is unknown. The merged
segment's aborted-transaction index is the union of its parts' (written before
their files go, and merged again by ``recover_leftovers`` after a crash).

Not covered: ``min.compaction.lag.ms`` / ``max.compaction.lag.ms``, and the
KIP-534 delete horizon stamped into batches.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from odradek.log.config import LogConfig
from odradek.log.files import FileCache
from odradek.log.index import fsync_dir, write_file_atomic
from odradek.log.segment import Segment, segment_name
from odradek.log.txn_index import AbortedTxn, read_txn_index, write_txn_index
from odradek.protocol.records import (
    BATCH_OVERHEAD,
    COMPRESSION_NONE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    CorruptRecordError,
    DecodedRecord,
    Record,
    RecordError,
    build_batch,
    crc32c,
    decode_batch_records,
    parse_header,
)

__all__ = [
    "CLEANER_CHECKPOINT_FILE",
    "CleanerCheckpoint",
    "CompactionStats",
    "clamp_checkpoint",
    "compact_segments",
    "dirty_bytes",
    "read_checkpoint",
    "recover_leftovers",
    "swap_in",
    "write_checkpoint",
]

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
_CLEANED = ".log.cleaned"
_SWAP = ".log.swap"
_HEADER = struct.Struct(">qiibIhiqqqhii")  # the v2 batch header, as in records.py
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_CRC_POS = 17
_CRC_START = 21
_LOD_POS = 23
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 20
_MAX_GROUP_OFFSETS = 2**31 - 1  # relative offsets in one segment, as for rolling
_COMPRESSION_MASK = 0x07

# A scanned record: (offset, timestamp, key, is_tombstone, start, end). For an
# uncompressed batch start/end bound the record's bytes in the batch; for a
# compressed one start is the record's index in the decoded list.
_Rec = tuple[int, int, bytes | None, bool, int, int]


@dataclass(frozen=True, slots=True)
class CompactionStats:
    """What one ``PartitionLog.compact`` call did (``ran`` False: skipped, see ``reason``)."""

    ran: bool
    reason: str
    dirty_ratio: float
    first_dirty_offset: int  # checkpoint before the pass
    next_dirty_offset: int  # checkpoint after the pass
    segments_before: int
    segments_after: int
    bytes_before: int
    bytes_after: int
    keys_in_map: int = 0
    groups_rewritten: int = 0
    batches_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    superseded_removed: int = 0
    tombstones_removed: int = 0
    null_keys_removed: int = 0
    empty_batches_retained: int = 0
    batches_copied_undecoded: int = 0
    aborted_batches_removed: int = 0
    markers_removed: int = 0

    @classmethod
    def skipped_for(cls, reason: str) -> CompactionStats:
        """A pass that did not run (or stopped before committing anything)."""
        return cls(False, reason, 0.0, -1, -1, 0, 0, 0, 0)


@dataclass(slots=True)
class _Counters:
    keys_in_map: int = 0
    groups_rewritten: int = 0
    batches_read: int = 0
    records_read: int = 0
    records_kept: int = 0
    superseded_removed: int = 0
    tombstones_removed: int = 0
    null_keys_removed: int = 0
    empty_batches_retained: int = 0
    batches_copied_undecoded: int = 0
    aborted_batches_removed: int = 0
    markers_removed: int = 0


# --------------------------------------------------------------------------- checkpoint


def read_checkpoint(directory: Path) -> int | None:
    """The saved first dirty offset, or None if there is none (or it is unreadable)."""
    try:
        return int((directory / CLEANER_CHECKPOINT_FILE).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def write_checkpoint(directory: Path, offset: int, *, fsync: bool = True) -> None:
    write_file_atomic(directory / CLEANER_CHECKPOINT_FILE, f"{offset}\n".encode(), fsync=fsync)


class CleanerCheckpoint:
    """A partition directory's cleaner checkpoint, read from its file on first use and
    then kept in memory; every change is written through to the file (fsynced)."""

    __slots__ = ("_loaded", "_offset", "directory")

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._loaded = False
        self._offset: int | None = None

    def get(self) -> int | None:
        """The saved first dirty offset, or None if there is none."""
        if not self._loaded:
            self._offset = read_checkpoint(self.directory)
            self._loaded = True
        return self._offset

    def set(self, offset: int) -> None:
        write_checkpoint(self.directory, offset)
        self._offset = offset
        self._loaded = True


def clamp_checkpoint(checkpoint: CleanerCheckpoint, end_offset: int) -> None:
    """After recovery cut the log below the checkpoint, pull the checkpoint back.

    Data appended later at those offsets is new and must count as dirty.
    """
    saved = checkpoint.get()
    if saved is not None and saved > end_offset:
        checkpoint.set(end_offset)


def dirty_bytes(cleanable: list[Segment], first_dirty: int) -> tuple[int, int]:
    """(dirty, total) bytes of the non-active segments; a segment reaching the
    first dirty offset counts as dirty as a whole (Kafka measures whole segments too)."""
    total = 0
    dirty = 0
    for s in cleanable:
        total += s.size
        if s.next_offset > first_dirty:
            dirty += s.size
    return dirty, total


# --------------------------------------------------------------------------- recovery


def _base_of(name: str, suffix: str) -> int | None:
    stem = name[: -len(suffix)] if name.endswith(suffix) else ""
    if len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


def _unlink_segment_files(directory: Path, base: int, *, keep_log: bool = False) -> None:
    """A segment's files; ``keep_log``: its ``.log`` and ``.txnindex`` stay (the swapped-in
    segment at the same base offset owns them)."""
    name = segment_name(base)
    suffixes = (
        (".index", ".timeindex") if keep_log else (".log", ".index", ".timeindex", ".txnindex")
    )
    for suffix in suffixes:
        with contextlib.suppress(FileNotFoundError):
            (directory / f"{name}{suffix}").unlink()


def _next_offset_of(path: Path, base: int) -> int:
    """Next offset after the last CRC-valid batch of a segment-format file."""
    data = path.read_bytes()
    nxt = base
    pos = 0
    while len(data) - pos >= BATCH_OVERHEAD:
        h = parse_header(data, pos)
        end = pos + h.size
        if h.batch_length < MIN_BATCH_LENGTH or end > len(data):
            break
        if crc32c(memoryview(data)[pos + _CRC_START : end]) != h.crc:
            break
        nxt = h.next_offset
        pos = end
    return nxt


def recover_leftovers(directory: Path) -> list[str]:
    """Undo or finish a compaction cut short by a crash; returns what was done.

    ``.cleaned`` files were never committed and are deleted. A ``.swap`` file is
    committed: old segments whose base offset lies in its offset range are
    deleted and the swap file becomes the segment at its base offset.
    """
    actions: list[str] = []
    for p in sorted(directory.glob(f"*{_CLEANED}")):
        p.unlink()
        actions.append(f"deleted uncommitted {p.name}")
    swaps = sorted(directory.glob(f"*{_SWAP}"))
    for swap in swaps:
        base = _base_of(swap.name, _SWAP)
        if base is None:
            swap.unlink()
            actions.append(f"deleted stray {swap.name}")
            continue
        end = _next_offset_of(swap, base)
        replaced = sorted(
            b
            for p in directory.glob("*.log")
            if (b := _base_of(p.name, ".log")) is not None and (b == base or base < b < end)
        )
        _merge_txn_indexes(directory, base, replaced)
        for b in replaced:
            _unlink_segment_files(directory, b, keep_log=b == base)
        os.replace(swap, directory / f"{segment_name(base)}.log")
        actions.append(f"completed swap of segment {base} (offsets {base}..{end})")
    if actions:
        fsync_dir(directory)
    return actions


def _merge_txn_indexes(directory: Path, base: int, bases: list[int]) -> None:
    """Give the segment at ``base`` the aborted-transaction entries of all of ``bases``."""
    merged: list[AbortedTxn] = []
    for b in bases:
        merged.extend(read_txn_index(directory / f"{segment_name(b)}.txnindex"))
    merged = sorted(set(merged), key=lambda e: e.last_offset)
    own = directory / f"{segment_name(base)}.txnindex"
    if merged != read_txn_index(own):
        write_txn_index(own, merged, fsync=True)


# --------------------------------------------------------------------------- batch I/O


class _Stopped(Exception):
    """The log is closing: the pass stops and commits nothing more."""


class _SegmentWriter:
    """Buffered writer of a ``.cleaned`` file that remembers each batch for the indexes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self.buf = bytearray()
        self.pos = 0
        self.notes: list[tuple[int, int, int, int, int]] = []

    def add(self, data: bytes, h: BatchHeader) -> None:
        self.notes.append((self.pos, h.base_offset, h.next_offset, h.max_timestamp, len(data)))
        self.buf += data
        self.pos += len(data)
        if len(self.buf) >= _WRITE_CHUNK:
            self._drain()

    def _drain(self) -> None:
        view = memoryview(self.buf)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
        view.release()
        self.buf.clear()

    def finish(self, mtime_ns: int) -> None:
        """Write the rest, keep the old segments' mtime (retention clock), fsync, close."""
        self._drain()
        os.utime(self.fd, ns=(mtime_ns, mtime_ns))
        os.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1

    def abort(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


# --------------------------------------------------------------------------- records


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint at ``pos``; IndexError when it runs past the end."""
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    raw = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint is longer than 10 bytes")


def _scan_uncompressed(raw: bytes, h: BatchHeader) -> list[_Rec]:
    """Offset, timestamp, key and tombstone flag of each record, plus its byte span.

    Only what compaction needs is parsed; headers and values are skipped via the
    record length, and kept records are later copied byte for byte.
    """
    out: list[_Rec] = []
    end = len(raw)
    pos = BATCH_OVERHEAD
    base = h.base_offset
    base_ts = h.base_timestamp
    log_append_ts = h.max_timestamp if h.timestamp_type == 1 else None
    try:
        for _ in range(h.records_count):
            start = pos
            length, pos = _varint(raw, pos)
            rec_end = pos + length
            if length < 0 or rec_end > end:
                raise CorruptRecordError("record length runs past the end of the batch")
            pos += 1  # record attributes
            ts_delta, pos = _varint(raw, pos)
            off_delta, pos = _varint(raw, pos)
            key_len, pos = _varint(raw, pos)
            key: bytes | None = None
            if key_len >= 0:
                key = raw[pos : pos + key_len]
                pos += key_len
            value_len, pos = _varint(raw, pos)
            if pos + max(value_len, 0) > rec_end:
                raise CorruptRecordError("record fields run past the record length")
            ts = log_append_ts if log_append_ts is not None else base_ts + ts_delta
            out.append((base + off_delta, ts, key, value_len < 0, start, rec_end))
            pos = rec_end
    except IndexError as exc:
        raise CorruptRecordError("record runs past the end of the batch") from exc
    if pos != end:
        raise CorruptRecordError("trailing bytes after the last record of a batch")
    return out


def _scan(
    h: BatchHeader, raw: bytes, max_decompressed: int
) -> tuple[list[_Rec], list[DecodedRecord] | None]:
    if h.compression == COMPRESSION_NONE:
        return _scan_uncompressed(raw, h), None
    decoded = decode_batch_records(raw, 0, h, max_decompressed_bytes=max_decompressed)
    recs = [(r.offset, r.timestamp, r.key, r.value is None, i, 0) for i, r in enumerate(decoded)]
    return recs, decoded


def _pack(h: BatchHeader, base_ts: int, max_ts: int, count: int, payload: bytes) -> bytes:
    """An uncompressed batch with ``h``'s identity fields and the given records."""
    out = bytearray(BATCH_OVERHEAD)
    _HEADER.pack_into(
        out,
        0,
        h.base_offset,
        MIN_BATCH_LENGTH + len(payload),
        h.partition_leader_epoch,
        2,
        0,
        h.attributes & ~_COMPRESSION_MASK,
        h.last_offset_delta,
        base_ts,
        max_ts,
        h.producer_id,
        h.producer_epoch,
        h.base_sequence,
        count,
    )
    out += payload
    _U32.pack_into(out, _CRC_POS, crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def _rebuild(
    h: BatchHeader, raw: bytes, kept: list[_Rec], decoded: list[DecodedRecord] | None
) -> bytes:
    """The batch with only ``kept`` records; base offset and last offset delta unchanged."""
    if not kept:
        return _pack(h, h.max_timestamp, h.max_timestamp, 0, b"")
    if decoded is None:
        max_ts = h.max_timestamp if h.timestamp_type == 1 else max(r[1] for r in kept)
        payload = b"".join([raw[r[4] : r[5]] for r in kept])
        return _pack(h, h.base_timestamp, max_ts, len(kept), payload)
    base = h.base_offset
    base_ts = h.base_timestamp
    records = []
    for r in kept:
        d = decoded[r[4]]
        records.append(Record(d.offset - base, d.timestamp - base_ts, d.key, d.value, d.headers))
    out = build_batch(
        records,
        base_offset=base,
        timestamp_ms=base_ts,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        compression=h.compression,
        partition_leader_epoch=h.partition_leader_epoch,
        transactional=h.is_transactional,
        log_append_time=h.timestamp_type == 1,
    )
    if records[-1].offset_delta != h.last_offset_delta:
        buf = bytearray(out)
        _I32.pack_into(buf, _LOD_POS, h.last_offset_delta)
        _U32.pack_into(buf, _CRC_POS, crc32c(memoryview(buf)[_CRC_START:]))
        out = bytes(buf)
    return out


# --------------------------------------------------------------------------- transactions


class _Transactions:
    """What the cleaner knows of transactions: the aborted ranges of each producer, and,
    during the filter pass, whether the transaction a producer has open in the
    output so far kept any batch (its marker must then stay)."""

    def __init__(self, aborted: list[AbortedTxn]) -> None:
        self.aborted: dict[int, list[tuple[int, int]]] = {}
        for e in aborted:
            self.aborted.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))
        self.kept_batches: dict[int, bool] = {}
        self.uncertain = False  # a skipped (quarantined) segment: keep every later marker

    def is_aborted(self, h: BatchHeader) -> bool:
        if not h.is_transactional or h.producer_id < 0:
            return False
        ranges = self.aborted.get(h.producer_id)
        if not ranges:
            return False
        offset = h.base_offset
        return any(first <= offset <= last for first, last in ranges)

    def batch_kept(self, h: BatchHeader) -> None:
        if h.is_transactional and h.producer_id >= 0:
            self.kept_batches[h.producer_id] = True

    def marker_needed(self, h: BatchHeader) -> bool:
        """A marker was read: whether its transaction still has a batch before it."""
        return self.kept_batches.pop(h.producer_id, False) or self.uncertain


# --------------------------------------------------------------------------- the pass


def _build_offset_map(
    segments: list[Segment],
    active_end: int,
    first_dirty: int,
    lso: int,
    txns: _Transactions,
    max_decompressed: int,
    c: _Counters,
    should_stop: Callable[[], bool],
) -> dict[bytes, int]:
    """key -> latest offset over every segment that holds data at or after ``first_dirty``.

    The active segment is read only up to ``active_end`` (its size when the pass
    began): appends may go on meanwhile, and records newer than that simply do
    not shadow anything in this pass. Records at or past the last stable offset
    ``lso`` and records of aborted transactions shadow nothing either.
    """
    latest: dict[bytes, int] = {}
    last = segments[-1]
    for seg in segments:
        if seg.next_offset <= first_dirty:
            continue
        stop = active_end if seg is last else seg.size
        for h, raw in seg.iter_raw_batches(stop):
            if should_stop():
                raise _Stopped
            if h.is_control or h.records_count <= 0 or h.base_offset >= lso:
                continue
            if txns.is_aborted(h):
                continue
            try:
                recs, _ = _scan(h, raw, max_decompressed)
            except RecordError:
                continue  # copied unchanged later; its keys simply stay unshadowed
            for r in recs:
                if r[2] is not None:
                    latest[r[2]] = r[0]
    c.keys_in_map = len(latest)
    return latest


def _group(cleanable: list[Segment], max_bytes: int) -> list[list[Segment]]:
    """Adjacent segments whose original sizes together fit one segment (Kafka does the same).

    A segment with a quarantined range is never rewritten: it stands alone and is skipped.
    """
    groups: list[list[Segment]] = []
    after_hole = False
    for seg in cleanable:
        if seg.holes:
            after_hole = True
            continue
        if groups and not after_hole:
            g = groups[-1]
            size = sum(s.size for s in g) + seg.size
            span = max(seg.next_offset, seg.base_offset + 1) - 1 - g[0].base_offset
            if size <= max_bytes and span <= _MAX_GROUP_OFFSETS:
                g.append(seg)
                continue
        groups.append([seg])
        after_hole = False
    return groups


def _filter_group(
    group: list[Segment],
    writer: _SegmentWriter,
    latest: dict[bytes, int],
    now_ms: int,
    config: LogConfig,
    producer_last_offsets: dict[int, int],
    txns: _Transactions,
    c: _Counters,
    should_stop: Callable[[], bool],
) -> bool:
    """Write the group's surviving batches; True if anything differs from the input."""
    changed = len(group) > 1
    for seg in group:
        tombstones_expire = now_ms - seg.largest_timestamp() > config.delete_retention_ms
        for h, raw in seg.iter_raw_batches(seg.size):
            if should_stop():
                raise _Stopped
            c.batches_read += 1
            if h.is_control:
                if h.producer_id < 0 or txns.marker_needed(h) or not tombstones_expire:
                    writer.add(raw, h)
                else:
                    c.markers_removed += 1
                    changed = True
                continue
            if txns.is_aborted(h):
                # Every record goes; Kafka's RETAIN_EMPTY keeps the producer's last batch.
                c.records_read += h.records_count
                c.aborted_batches_removed += 1
                changed = True
                if h.producer_id >= 0 and producer_last_offsets.get(h.producer_id) == h.last_offset:
                    c.empty_batches_retained += 1
                    out = _pack(h, h.max_timestamp, h.max_timestamp, 0, b"")
                    writer.add(out, parse_header(out))
                    txns.batch_kept(h)
                continue
            try:
                recs, decoded = _scan(h, raw, config.max_decompressed_bytes)
            except RecordError:
                c.batches_copied_undecoded += 1
                writer.add(raw, h)
                txns.batch_kept(h)
                continue
            c.records_read += len(recs)
            kept: list[_Rec] = []
            for r in recs:
                key = r[2]
                if key is None:
                    c.null_keys_removed += 1
                elif latest.get(key, r[0]) > r[0]:
                    c.superseded_removed += 1
                elif r[3] and tombstones_expire:
                    c.tombstones_removed += 1
                else:
                    kept.append(r)
            c.records_kept += len(kept)
            if kept and len(kept) == len(recs):
                writer.add(raw, h)
                txns.batch_kept(h)
                continue
            # Kafka's RETAIN_EMPTY: the batch holding a live producer's last offset
            # stays (possibly empty) so its epoch and sequence survive a replay.
            producer_last = (
                h.producer_id >= 0 and producer_last_offsets.get(h.producer_id) == h.last_offset
            )
            if not recs and producer_last:  # already an empty batch, still needed
                c.empty_batches_retained += 1
                writer.add(raw, h)
                txns.batch_kept(h)
                continue
            changed = True
            if not kept:
                if not producer_last:
                    continue  # nothing left and no producer state to carry: drop it
                c.empty_batches_retained += 1
            out = _rebuild(h, raw, kept, decoded)
            writer.add(out, parse_header(out))
            txns.batch_kept(h)
    return changed


def swap_in(
    directory: Path, group: list[Segment], writer: _SegmentWriter, files: FileCache
) -> Segment:
    """Commit a finished ``.cleaned`` file crash-safely; the replacement segment, loaded.

    The caller holds the log's lock: this is a handful of renames, unlinks and
    two directory fsyncs. The new segment's index files are the caller's to write.
    """
    base = group[0].base_offset
    name = segment_name(base)
    swap = directory / f"{name}{_SWAP}"
    os.replace(writer.path, swap)
    fsync_dir(directory)  # commit point: recovery now completes the swap
    interval = group[0].index_interval
    merged = sorted({e for s in group for e in s.txn_index.entries}, key=lambda e: e.last_offset)
    if merged != group[0].txn_index.entries:
        write_txn_index(group[0].txnindex_path, merged, fsync=True)
    for s in group:
        s.close()
    for s in group[1:]:
        _unlink_segment_files(directory, s.base_offset)
    _unlink_segment_files(directory, base, keep_log=True)
    os.replace(swap, directory / f"{name}.log")
    fsync_dir(directory)
    new = Segment.existing(directory, base, interval, files)
    new.size = writer.pos
    new.loaded = True
    for note in writer.notes:
        new.note_batch(*note)
    new.seal()
    return new


def compact_segments(
    directory: Path,
    checkpoint: CleanerCheckpoint,
    segments: list[Segment],
    active_end: int,
    config: LogConfig,
    now_ms: int,
    producer_last_offsets: dict[int, int],
    commit: Callable[[list[Segment], _SegmentWriter], Segment | None],
    *,
    lso: int | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    force: bool = False,
) -> CompactionStats:
    """One compaction pass over ``segments`` (the last one is active and left alone).

    ``lso``: the last stable offset; only segments wholly below it are cleaned
    (None: no transaction is open).

    ``commit(old_group, writer)`` swaps each finished group in (``swap_in``, under
    the log's lock) and returns the new segment, or None when the group changed
    meanwhile and the cleaned file must be dropped. ``should_stop`` is polled
    between batches: when it turns true the pass ends, committing nothing more.
    """
    active = segments[-1]
    if lso is None:
        lso = 2**63 - 1
    cleanable = [s for s in segments[:-1] if s.next_offset <= lso]
    unstable = segments[len(cleanable) : -1]  # hold an open transaction: not cleaned
    saved = checkpoint.get()
    first_dirty = segments[0].base_offset if saved is None else saved
    first_dirty = min(max(first_dirty, segments[0].base_offset), active.base_offset)
    dirty, total = dirty_bytes(cleanable, first_dirty)
    ratio = dirty / total if total else 0.0
    seg_before = len(segments)
    bytes_before = sum(s.size for s in segments[:-1]) + active_end

    def skipped(reason: str) -> CompactionStats:
        return CompactionStats(
            False,
            reason,
            ratio,
            first_dirty,
            first_dirty,
            seg_before,
            seg_before,
            bytes_before,
            bytes_before,
        )

    if not config.compact_enabled:
        return skipped(f"cleanup.policy {config.cleanup_policy!r} does not compact")
    if not cleanable or total == 0:
        return skipped("no non-active data to clean")
    if not force and ratio < config.min_cleanable_dirty_ratio:
        return skipped(
            f"dirty ratio {ratio:.3f} below min.cleanable.dirty.ratio "
            f"{config.min_cleanable_dirty_ratio}"
        )

    c = _Counters()
    limit = config.max_decompressed_bytes
    txns = _Transactions([e for s in segments for e in s.txn_index.entries])
    try:
        latest = _build_offset_map(
            segments, active_end, first_dirty, lso, txns, limit, c, should_stop
        )
    except _Stopped:
        return skipped("stopped: the log is closing")
    after: list[Segment] = [s for s in cleanable if s.holes] + unstable
    for group in _group(cleanable, config.segment_bytes):
        if any(s.holes for s in cleanable if s.base_offset < group[0].base_offset):
            txns.uncertain = True
        cleaned = directory / f"{segment_name(group[0].base_offset)}{_CLEANED}"
        writer = _SegmentWriter(cleaned)
        try:
            changed = _filter_group(
                group, writer, latest, now_ms, config, producer_last_offsets, txns, c, should_stop
            )
            if changed and not any(s.holes for s in group):  # no damage found on the way
                writer.finish(max(s.mtime_ns() for s in group))
                new = commit(group, writer)
            else:
                new = None
        except _Stopped:
            writer.abort()
            return skipped("stopped: the log is closing")
        except BaseException:
            writer.abort()
            raise
        if new is None:
            writer.abort()
            after.extend(group)
            continue
        new.write_index_files(fsync=False)
        after.append(new)
        c.groups_rewritten += 1
    next_dirty = unstable[0].base_offset if unstable else active.base_offset
    checkpoint.set(next_dirty)
    return CompactionStats(
        True,
        "forced" if force else f"dirty ratio {ratio:.3f}",
        ratio,
        first_dirty,
        next_dirty,
        seg_before,
        len(after) + 1,
        bytes_before,
        sum(s.size for s in after) + active_end,
        c.keys_in_map,
        c.groups_rewritten,
        c.batches_read,
        c.records_read,
        c.records_kept,
        c.superseded_removed,
        c.tombstones_removed,
        c.null_keys_removed,
        c.empty_batches_retained,
        c.batches_copied_undecoded,
        c.aborted_batches_removed,
        c.markers_removed,
    )
