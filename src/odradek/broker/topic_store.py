"""Durable topic metadata: a snapshot plus an append-only journal of changes.

Every change (topic created or deleted, partitions added, configs replaced) is
one checksummed JSON line appended to `topic-metadata.journal`; a batch of
changes, such as all the topics of one CreateTopics request, costs one write
and one fsync, however many topics it holds. When the journal has grown past
the live topics it describes, the current state is written as
`topic-metadata.snapshot` (atomically) and the journal starts over, so neither
file is ever rewritten per change and loading reads each topic about once.

Crash safety: a snapshot carries the sequence number of the last change it
contains and loading applies only later journal lines, so a crash between
writing the snapshot and emptying the journal replays nothing twice; a torn
last journal line (a crash mid-append, never acknowledged) fails its checksum
and is cut off.

Upgrade: a data directory from before the journal has `topics.json` (all
topics, rewritten whole on every change). It is read once, written as the
first snapshot, then removed.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.log.index import fsync_dir

log = logging.getLogger("odradek.topics")

SNAPSHOT_FILE = "topic-metadata.snapshot"
JOURNAL_FILE = "topic-metadata.journal"
LEGACY_FILE = "topics.json"
SNAPSHOT_FORMAT = 1
# Snapshot once the journal holds this many lines more than there are live topics.
COMPACT_SLACK = 1000


@dataclass
class TopicEntry:
    """What the metadata says about one topic: its partition count, and which of its
    partitions have a replica on this broker (``hosted``; None: all of them, a lone
    node's topics and every topic written before placement was recorded)."""

    topic_id: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)
    hosted: list[int] | None = None

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "id": self.topic_id,
            "partitions": self.partitions,
            "configs": self.configs,
        }
        if self.hosted is not None:
            data["hosted"] = self.hosted
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TopicEntry:
        return cls(
            str(data["id"]),
            int(data["partitions"]),
            dict(data.get("configs", {})),
            _hosted(data),
        )

    def hosts(self, index: int) -> bool:
        return self.hosted is None or index in self.hosted


def _hosted(data: dict[str, Any]) -> list[int] | None:
    hosted = data.get("hosted")
    return None if hosted is None else sorted(int(i) for i in hosted)


def write_json_atomically(path: Path, data: Any) -> None:
    """Write, fsync, rename, fsync the directory: a crash leaves the old or the new file."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as out:
        json.dump(data, out, separators=(",", ":"), sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def _encode_line(change: dict[str, Any]) -> bytes:
    body = json.dumps(change, separators=(",", ":"), sort_keys=True).encode()
    return b"%08x %s\n" % (zlib.crc32(body), body)


def _decode_line(line: bytes) -> dict[str, Any] | None:
    """The change a journal line holds, or None when it is torn or corrupt."""
    if len(line) < 10 or line[8:9] != b" " or not line.endswith(b"\n"):
        return None
    body = line[9:-1]
    try:
        if int(line[:8], 16) != zlib.crc32(body):
            return None
        change = json.loads(body)
    except ValueError:
        return None
    return change if isinstance(change, dict) else None


class TopicStore:
    """The topic metadata of one data directory. Thread-safe: changes are serialised."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.snapshot_path = data_dir / SNAPSHOT_FILE
        self.journal_path = data_dir / JOURNAL_FILE
        self.topics: dict[str, TopicEntry] = {}
        self._seq = 0
        self._journal_lines = 0
        self._lock = threading.Lock()
        self._load()
        created = not self.journal_path.exists()
        self._journal_fd = os.open(
            self.journal_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644
        )
        if created:
            fsync_dir(data_dir)

    @property
    def seq(self) -> int:
        """The sequence number of the last change recorded (0 before any)."""
        return self._seq

    # --- loading ----------------------------------------------------------------------

    def _load(self) -> None:
        legacy = self.data_dir / LEGACY_FILE
        if self.snapshot_path.exists():
            stored = json.loads(self.snapshot_path.read_bytes())
            self._seq = int(stored["seq"])
            self.topics = {n: TopicEntry.from_json(e) for n, e in stored["topics"].items()}
            legacy.unlink(missing_ok=True)  # a crash came between upgrade and this cleanup
        elif legacy.exists():
            stored = json.loads(legacy.read_bytes())
            self.topics = {n: TopicEntry.from_json(e) for n, e in stored.items()}
            self._write_snapshot()
            legacy.unlink()
            log.info("upgraded %s to %s (%d topics)", LEGACY_FILE, SNAPSHOT_FILE, len(self.topics))
        self._replay_journal()

    def _replay_journal(self) -> None:
        try:
            data = self.journal_path.read_bytes()
        except FileNotFoundError:
            return
        position = 0
        for line in data.splitlines(keepends=True):
            change = _decode_line(line)
            if change is None:
                break
            if int(change["seq"]) > self._seq:
                self._apply(change)
                self._seq = int(change["seq"])
            self._journal_lines += 1
            position += len(line)
        if position < len(data):
            log.warning(
                "%s: cut %d bytes of a torn or corrupt change after sequence %d",
                self.journal_path,
                len(data) - position,
                self._seq,
            )
            os.truncate(self.journal_path, position)

    def _apply(self, change: dict[str, Any]) -> None:
        op, name = change["op"], str(change["name"])
        if op == "create":
            self.topics[name] = TopicEntry(
                str(change["id"]),
                int(change["partitions"]),
                dict(change["configs"]),
                _hosted(change),
            )
        elif op == "delete":
            self.topics.pop(name, None)
        elif op == "partitions":
            self.topics[name].partitions = int(change["partitions"])
            if "hosted" in change:
                self.topics[name].hosted = _hosted(change)
        elif op == "hosted":  # replicas placed here or moved away (a reassignment)
            self.topics[name].hosted = _hosted(change)
        elif op == "configs":
            self.topics[name].configs = dict(change["configs"])
        else:
            raise ValueError(f"unknown topic metadata change {op!r}")

    # --- changes ----------------------------------------------------------------------

    def commit(self, changes: list[dict[str, Any]]) -> None:
        """Make a batch of changes durable (one write, one fsync), then apply them.

        Each change is a dict with "op" (create, delete, partitions, hosted, configs),
        "name", and the op's fields (create and partitions may carry "hosted", the
        partitions with a replica here; absent: all). Raises OSError (disk full, ...) with the
        metadata unchanged.
        """
        if not changes:
            return
        with self._lock:
            lines = []
            for offset, change in enumerate(changes, start=1):
                lines.append(_encode_line({**change, "seq": self._seq + offset}))
            payload = b"".join(lines)
            size_before = os.fstat(self._journal_fd).st_size
            try:
                view = memoryview(payload)
                while view:
                    view = view[os.write(self._journal_fd, view) :]
                os.fsync(self._journal_fd)
            except OSError:
                # Leave no partial batch behind for a later append to follow.
                os.ftruncate(self._journal_fd, size_before)
                raise
            for change in changes:
                self._apply(change)
            self._seq += len(changes)
            self._journal_lines += len(changes)
            if self._journal_lines > len(self.topics) + COMPACT_SLACK:
                self._compact()

    def _compact(self) -> None:
        """Snapshot the state and empty the journal. A failure leaves the journal in use."""
        try:
            self._write_snapshot()
            os.ftruncate(self._journal_fd, 0)
            self._journal_lines = 0
        except OSError as exc:
            log.warning("cannot snapshot topic metadata (the journal keeps growing): %s", exc)

    def _write_snapshot(self) -> None:
        write_json_atomically(
            self.snapshot_path,
            {
                "format": SNAPSHOT_FORMAT,
                "seq": self._seq,
                "topics": {n: e.to_json() for n, e in self.topics.items()},
            },
        )

    def close(self) -> None:
        with self._lock:
            if self._journal_fd >= 0:
                os.close(self._journal_fd)
                self._journal_fd = -1
