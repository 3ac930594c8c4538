"""Lag over time: every group's committed offsets and log ends, one sample a minute, for
seven days, in a local SQLite file that outlives the console.

Why a local file, and not a topic on the cluster: a page asks for one group's week
(``series``), and a file indexed by (group, time) answers that by reading that group's
rows; a topic can only be read from its start, so a console would replay every group's
week before it could show one. The file also needs nothing from the cluster (no topic
to create, no WRITE in the ACLs: a read-only principal still gets history), and it
works air-gapped. What it costs: history is the console's own, not shared by two
consoles, and it stays on the machine the console ran on (docs/console.md).

Size. Samples are kept in blocks, one per group and hour (``BLOCK_SPAN_MS``), each a
header naming the group's partitions, then per sample the milliseconds since the last,
the total lag, and per partition the change of committed offset and log end as zigzag
varints: a consumer that moves a few thousand records a minute costs 5-7 bytes a
partition a minute. A sample equal to the previous one is not written (the chart holds the last
value), so an idle group costs one sample an hour. 20,000 groups of one busy partition
each come to about 20,000 x 168 blocks x ~450 bytes, 1.5 GB a week; idle ones, 20,000 x
168 x ~40 bytes, 130 MB. The open blocks (this hour's) are written every
``flush`` (the console calls it each minute), so a crash loses at most that minute.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

RETENTION_MS = 7 * 24 * 3600 * 1000
BLOCK_SPAN_MS = 3600 * 1000
FORMAT_VERSION = 1
UNKNOWN = -1  # no committed offset (or log end) for that partition at that time

Layout = tuple[tuple[str, int], ...]  # (topic, partition), in the block's order
Values = tuple[tuple[int, int], ...]  # (committed, log end), aligned with the layout


class LagStoreError(Exception):
    """The file cannot be used (another cluster's, or not a lag file)."""


# --- the block codec (pure) -------------------------------------------------------------


def _uvarint(out: bytearray, n: int) -> None:
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(out: bytearray, n: int) -> None:
    _uvarint(out, (n << 1) if n >= 0 else ((-n) << 1) - 1)


def _read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(data):
            raise LagStoreError("truncated lag block")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise LagStoreError("bad varint in lag block")


def _read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    n, pos = _read_uvarint(data, pos)
    return (n >> 1) ^ -(n & 1), pos


def total_lag(values: Values) -> int:
    """The group's lag in a sample: the sum over partitions where both offsets are known."""
    return sum(max(end - c, 0) for c, end in values if c >= 0 and end >= 0)


@dataclass
class Block:
    """One group's samples from ``start_ms`` on, over one layout of partitions.

    After the header (its length, then the layout), each sample is: milliseconds since
    the previous one, the total lag (so a chart of it reads no partition), the length of
    what follows, and per partition the change of committed offset and of log end."""

    start_ms: int
    layout: Layout
    data: bytearray = field(default_factory=bytearray)
    last_ms: int = 0
    last: Values = ()
    samples: int = 0

    def __post_init__(self) -> None:
        if not self.data:
            header = bytearray()
            _uvarint(header, len(self.layout))
            for topic, partition in self.layout:
                name = topic.encode()
                _uvarint(header, len(name))
                header += name
                _uvarint(header, partition)
            _uvarint(self.data, len(header))  # so that a reader of totals can skip it
            self.data += header
            self.last_ms = self.start_ms
            self.last = tuple((0, 0) for _ in self.layout)

    def append(self, at_ms: int, values: Values) -> None:
        if len(values) != len(self.layout):
            raise ValueError("values do not match the block's layout")
        payload = bytearray()
        for (committed, end), (c0, e0) in zip(values, self.last, strict=True):
            _zigzag(payload, committed - c0)
            _zigzag(payload, end - e0)
        _uvarint(self.data, max(at_ms - self.last_ms, 0))
        _uvarint(self.data, total_lag(values))
        _uvarint(self.data, len(payload))
        self.data += payload
        self.last_ms = max(at_ms, self.last_ms)
        self.last = values
        self.samples += 1


def decode_block(
    start_ms: int, data: bytes, *, partitions: bool = True
) -> tuple[Layout, list[tuple[int, int, Values | None]]]:
    """(layout, [(at_ms, total lag, values)]) of a stored block; ``partitions=False``
    skips every partition's offsets (values None): what a chart of the total needs."""
    header, pos = _read_uvarint(data, 0)
    if not partitions:
        pos += header
        count = 0
    else:
        count, pos = _read_uvarint(data, pos)
    layout = []
    for _ in range(count):
        length, pos = _read_uvarint(data, pos)
        topic = data[pos : pos + length].decode(errors="replace")
        pos += length
        partition, pos = _read_uvarint(data, pos)
        layout.append((topic, partition))
    samples: list[tuple[int, int, Values | None]] = []
    at = start_ms
    last = [(0, 0)] * count
    while pos < len(data):
        delta, pos = _read_uvarint(data, pos)
        lag, pos = _read_uvarint(data, pos)
        size, pos = _read_uvarint(data, pos)
        at += delta
        if not partitions:
            pos += size
            samples.append((at, lag, None))
            continue
        end = pos + size
        row = []
        for i in range(count):
            dc, pos = _read_zigzag(data, pos)
            de, pos = _read_zigzag(data, pos)
            row.append((last[i][0] + dc, last[i][1] + de))
        if pos != end:
            raise LagStoreError("bad sample length in lag block")
        last = row
        samples.append((at, lag, tuple(row)))
    return tuple(layout), samples


# --- the file ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Sample:
    at_ms: int
    lag: int  # the group's total
    # (topic, partition) -> (committed, end); empty when read without partitions
    offsets: dict[tuple[str, int], tuple[int, int]]


class LagStore:
    """The lag history file. Thread-safe: the sampler writes, page handlers read."""

    def __init__(self, path: str | Path, cluster_id: str | None) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._open: dict[str, Block] = {}
        self._dirty: set[str] = set()
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(
                """
                CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS blocks (
                    group_id TEXT, start_ms INTEGER, data BLOB,
                    PRIMARY KEY (group_id, start_ms)) WITHOUT ROWID;
                CREATE INDEX IF NOT EXISTS blocks_by_time ON blocks (start_ms);
                """
            )
            self._check_owner(cluster_id)
        except sqlite3.DatabaseError as exc:
            raise LagStoreError(f"{self.path}: not a lag history file ({exc})") from None

    def _check_owner(self, cluster_id: str | None) -> None:
        rows = dict(self._db.execute("SELECT name, value FROM meta").fetchall())
        version = rows.get("format")
        if version is not None and version != str(FORMAT_VERSION):
            raise LagStoreError(f"{self.path}: lag history format {version} is not known")
        owner = rows.get("cluster_id")
        if owner is not None and cluster_id is not None and owner != cluster_id:
            raise LagStoreError(
                f"{self.path} holds the lag history of cluster {owner}, not of this cluster "
                f"({cluster_id}): give another file"
            )
        with self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('format', ?)", (str(FORMAT_VERSION),)
            )
            if cluster_id is not None:
                self._db.execute(
                    "INSERT OR REPLACE INTO meta VALUES ('cluster_id', ?)", (cluster_id,)
                )

    def record(self, group: str, at_ms: int, layout: Layout, values: Values) -> bool:
        """Add a sample of ``group``; False when it equals the previous one (not kept)."""
        with self._lock:
            block = self._open.get(group)
            if (
                block is not None
                and block.layout == layout
                and block.last == values
                and block.samples
                and at_ms - block.start_ms < BLOCK_SPAN_MS
            ):
                return False
            if (
                block is None
                or block.layout != layout
                or at_ms - block.start_ms >= BLOCK_SPAN_MS
                or at_ms < block.last_ms
            ):
                if block is not None and group in self._dirty:
                    self._write([(group, block)])
                    self._dirty.discard(group)
                block = self._open[group] = Block(at_ms, layout)
            block.append(at_ms, values)
            self._dirty.add(group)
            return True

    def _write(self, blocks: Sequence[tuple[str, Block]]) -> None:
        with self._db:
            self._db.executemany(
                "INSERT OR REPLACE INTO blocks VALUES (?, ?, ?)",
                [(g, b.start_ms, bytes(b.data)) for g, b in blocks],
            )

    def flush(self) -> int:
        """Write the blocks changed since the last flush; how many were written."""
        with self._lock:
            blocks = [(g, self._open[g]) for g in self._dirty if g in self._open]
            self._write(blocks)
            self._dirty.clear()
            return len(blocks)

    def forget(self, group: str) -> None:
        """The group was deleted: drop its history."""
        with self._lock, self._db:
            self._open.pop(group, None)
            self._dirty.discard(group)
            self._db.execute("DELETE FROM blocks WHERE group_id = ?", (group,))

    def expire(self, now_ms: int) -> int:
        """Drop blocks wholly older than the retention; how many."""
        cutoff = now_ms - RETENTION_MS - BLOCK_SPAN_MS
        with self._lock, self._db:
            cursor = self._db.execute("DELETE FROM blocks WHERE start_ms < ?", (cutoff,))
            return cursor.rowcount

    def series(
        self,
        group: str,
        since_ms: int,
        until_ms: int | None = None,
        *,
        partitions: bool = True,
    ) -> list[Sample]:
        """The group's samples from ``since_ms`` (to ``until_ms``), oldest first; with
        ``partitions=False`` only the totals (much less to read at 10,000 partitions)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT start_ms, data FROM blocks WHERE group_id = ? AND start_ms >= ? "
                "ORDER BY start_ms",
                (group, since_ms - BLOCK_SPAN_MS),
            ).fetchall()
            block = self._open.get(group)
            if block is not None and group in self._dirty:
                rows = [r for r in rows if r[0] != block.start_ms]
                rows.append((block.start_ms, bytes(block.data)))
        out: list[Sample] = []
        for start_ms, data in sorted(rows):
            layout, samples = decode_block(start_ms, data, partitions=partitions)
            for at_ms, lag, values in samples:
                if at_ms < since_ms or (until_ms is not None and at_ms > until_ms):
                    continue
                offsets = dict(zip(layout, values, strict=True)) if values is not None else {}
                out.append(Sample(at_ms, lag, offsets))
        return out

    def partition_series(
        self, group: str, tp: tuple[str, int], since_ms: int
    ) -> list[tuple[int, int | None]]:
        """(at_ms, lag) of one partition of the group (None where an offset is unknown)."""
        out = []
        for s in self.series(group, since_ms):
            offsets = s.offsets.get(tp)
            if offsets is None:
                continue
            c, end = offsets
            out.append((s.at_ms, max(end - c, 0) if c >= 0 and end >= 0 else None))
        return out

    def size_bytes(self) -> int:
        with self._lock:
            pages = self._db.execute("PRAGMA page_count").fetchone()[0]
            size = self._db.execute("PRAGMA page_size").fetchone()[0]
        return int(pages) * int(size)

    def close(self) -> None:
        with self._lock:
            if self._dirty:
                self._write([(g, self._open[g]) for g in self._dirty if g in self._open])
                self._dirty.clear()
            self._db.close()
