"""Moving a partition's log to another log directory while it keeps serving
(AlterReplicaLogDirs; Kafka's "future replica").

Kafka creates a *future* log in the destination directory, has a thread fetch
into it from the current log as a follower would, and swaps the two once it has
caught up. Odradek copies the files instead, in three steps:

1. **Copy while serving**, into ``<dest>/<topic>-<p>.<id>-future``. Each pass
   copies what is new since the last one: of a ``.log`` segment file only the
   bytes appended since (a segment only grows, or goes away whole), of any other
   file (indexes, checkpoints, snapshot) the whole file when it changed. Passes
   repeat until a pass finds little to copy (`CATCH_UP_BYTES`), then the copy is
   fsynced and one more pass copies what came meanwhile. A partition written
   faster than it can be copied stays in this step (as Kafka's future replica
   stays behind until it catches up): the swap never copies much. Three things can change a
   file behind a pass, and each is caught: compaction and index rewrites replace
   a file (a new inode: copied again whole), retention and DeleteRecords remove
   segments (removed from the copy), a follower's truncation cuts a segment back
   (counted by ``PartitionLog.truncations``: the copy starts over).
2. **Swap**, inside ``PartitionLog.relocate``, under the partition's locks, so
   appends and reads wait only for this step: the log is closed as ``close()``
   closes it (indexes, producer snapshot and clean-shutdown record written), the
   last pass copies what is left and fsyncs it, ``.moved-from`` is written into the
   copy, the copy is renamed to ``<topic>-<p>``, the source to
   ``<topic>-<p>.<id>-delete``, and the log continues from the copy (the same
   object: whoever holds it keeps working; offsets, producer state and epochs are
   the copy's, which are the source's).
3. **Clean up**: the source directory is removed, then the marker.

A crash at any point leaves one complete copy named ``<topic>-<p>``, which
start-up keeps (`pick_copies`):

* before the destination's rename, only the source has the name; the
  ``-future`` directory is an unfinished copy and is removed;
* between the two renames both have it, and they are identical (nothing was
  appended since the swap began): the one holding ``.moved-from`` is kept, the
  other removed;
* after them, the ``-delete`` source is removed and the marker dropped.

A move that fails (no space, an I/O error) or is cancelled removes its
``-future`` directory and the log stays where it was (reopened in place if the
swap had begun).
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from odradek.log.index import fsync_dir
from odradek.log.partition_log import PartitionLog

__all__ = [
    "DELETE_SUFFIX",
    "FUTURE_SUFFIX",
    "MOVED_FROM_FILE",
    "DirMove",
    "DuplicatePartitionError",
    "MoveCancelled",
    "pick_copies",
    "side_name",
]

log = logging.getLogger(__name__)

FUTURE_SUFFIX = "-future"
DELETE_SUFFIX = "-delete"
MOVED_FROM_FILE = ".moved-from"
MAX_FILE_NAME = 255
CATCH_UP_BYTES = 4 << 20  # swap once a pass had at most this much to copy
MAX_ATTEMPTS = 3  # copies started over after a truncation, before giving up
CHUNK = 1 << 20
# Files a log writes and renames in place of others: never copied.
_TRANSIENT = (".tmp", ".cleaned", ".swap")


class MoveCancelled(Exception):
    """The move was cancelled (the broker is stopping, or another move replaced it)."""


class _CopyOutdated(Exception):
    """The log was truncated under the copy: the copy must start over."""


class DuplicatePartitionError(Exception):
    """A partition directory is in two log directories and neither is a finished move."""


def side_name(name: str, suffix: str) -> str:
    """``<topic>-<p>.<id><suffix>``, the topic cut short so the name fits (as Kafka's)."""
    topic, _, index = name.rpartition("-")
    tail = f"-{index}.{uuid.uuid4().hex}{suffix}"
    return topic[: MAX_FILE_NAME - len(tail)] + tail


@dataclass
class _Copied:
    inode: int
    size: int
    mtime_ns: int


class DirMove:
    """One partition's move to ``dest_root`` (run `run` in a thread; `cancel` stops it)."""

    def __init__(self, plog: PartitionLog, dest_root: Path) -> None:
        self.plog = plog
        self.source = plog.directory
        self.dest_root = Path(dest_root)
        self.name = self.source.name
        self.future = self.dest_root / side_name(self.name, FUTURE_SUFFIX)
        self.final = self.dest_root / self.name
        self.copied_bytes = 0  # bytes in the copy so far
        self.left_bytes = 0  # bytes the last pass saw still to copy
        self.copied_through = 0  # offsets below this are in the copy (segment granularity)
        self.done = False
        self.swap_s = 0.0  # how long the swap held the partition's locks (at most)
        self._retired: Path | None = None  # the source, renamed for removal, after the swap
        self._cancel = threading.Event()
        self._copied: dict[str, _Copied] = {}
        self._unsynced: dict[str, int] = {}  # name -> bytes copied into it since its fsync

    # --- driving ----------------------------------------------------------------------

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    @property
    def offset_lag(self) -> int:
        """How far the copy trails the log, in offsets (an upper bound while copying)."""
        return 0 if self.done else max(self.plog.end_offset - self.copied_through, 0)

    def run(self) -> None:
        """Copy, swap, clean up (blocking). Raises MoveCancelled, or the I/O error that
        stopped the move; either way the log stays where it was and the copy is gone."""
        swapped = False
        try:
            for attempt in range(1, MAX_ATTEMPTS + 1):
                self._start_copy()
                truncations = self.plog.truncations
                self._catch_up()
                # What the swap would wait for before taking the locks (finishing rolled
                # segments, fsyncs), done now, then the copy caught up again: the swap
                # finds little to copy.
                self.plog.drain()
                self.plog.flush()
                self._catch_up()
                began = time.monotonic()
                try:
                    self.plog.relocate(functools.partial(self._swap, truncations=truncations))
                except _CopyOutdated:
                    log.info("%s: truncated while copying, copying again (%d)", self.name, attempt)
                    continue
                swapped = True
                # An upper bound of the partition's pause (it includes waiting for a
                # compaction or retention pass in progress, before the lock).
                self.swap_s = time.monotonic() - began
                break
            else:
                raise OSError(f"{self.name} kept being truncated while it was copied")
        finally:
            if not swapped:
                shutil.rmtree(self.future, ignore_errors=True)
        self.done = True
        self._finish()
        log.info(
            "moved %s to %s: %d bytes copied, the swap took %.1f ms",
            self.name,
            self.dest_root,
            self.copied_bytes,
            self.swap_s * 1000,
        )

    # --- step 1: copy while serving ------------------------------------------------------

    def _start_copy(self) -> None:
        shutil.rmtree(self.future, ignore_errors=True)
        self.future.mkdir(parents=True)
        self._copied.clear()
        self._unsynced.clear()
        self.copied_bytes = 0

    def _catch_up(self) -> None:
        """Copy and fsync outside the locks until a pass finds little to copy and little
        is left unsynced: the swap then copies and fsyncs at most that little."""
        while True:
            self._sync()
            if self.left_bytes > CATCH_UP_BYTES:
                continue
            if sum(self._unsynced.values()) <= CATCH_UP_BYTES:
                break
            self._fsync_copy()

    def _sync(self) -> None:
        """One pass: bring the copy up to the source's files."""
        source = self.plog.directory
        present: dict[str, os.stat_result] = {}
        with os.scandir(source) as entries:
            for entry in entries:
                if entry.name == MOVED_FROM_FILE or entry.name.endswith(_TRANSIENT):
                    continue
                try:
                    info = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed while listed (retention, a rename)
                if stat.S_ISREG(info.st_mode):
                    present[entry.name] = info
        for name in set(self._copied) - set(present):  # removed since: retention, etc.
            (self.future / name).unlink(missing_ok=True)
            self.copied_bytes -= self._copied.pop(name).size
            self._unsynced.pop(name, None)
        self.left_bytes = sum(
            max(info.st_size - self._copied[n].size, 0) if n in self._copied else info.st_size
            for n, info in present.items()
        )
        for name in sorted(present):
            if self._cancel.is_set():
                raise MoveCancelled(f"moving {self.name} was cancelled")
            copied = self._copy_file(source / name, name, present[name])
            if copied:
                self._unsynced[name] = self._unsynced.get(name, 0) + copied
        self.copied_through = self._copied_through(present)

    def _copy_file(self, src: Path, name: str, info: os.stat_result) -> int:
        """Copy what changed of one file; how many bytes were copied."""
        done = self._copied.get(name)
        append_only = name.endswith(".log")
        if done is not None and done.inode == info.st_ino:
            if append_only and done.size == info.st_size:
                return 0
            if not append_only and (done.size, done.mtime_ns) == (info.st_size, info.st_mtime_ns):
                return 0
        start = 0
        if (
            done is not None
            and append_only
            and done.inode == info.st_ino
            and done.size <= info.st_size
        ):
            start = done.size  # a segment only grows: copy the new bytes
        try:
            src_fd = os.open(src, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return 0  # removed since the listing: the next pass drops the copy
        try:
            now = os.fstat(src_fd)
            if now.st_ino != info.st_ino:
                start = 0  # replaced since the listing
            flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (0 if start else os.O_TRUNC)
            dst_fd = os.open(self.future / name, flags, 0o644)
            try:
                os.ftruncate(dst_fd, start)
                size = self._copy_bytes(src_fd, dst_fd, start, now.st_size)
            finally:
                os.close(dst_fd)
        finally:
            os.close(src_fd)
        previous = done.size if done is not None else 0
        self.copied_bytes += size - previous
        self._copied[name] = _Copied(now.st_ino, size, now.st_mtime_ns)
        return max(size - start, 1)  # 1: a file emptied still needs its fsync

    def _copy_bytes(self, src_fd: int, dst_fd: int, start: int, end: int) -> int:
        """Copy [start, end) and return the size copied up to (end, or less if cut)."""
        position = start
        while position < end:
            if self._cancel.is_set():
                raise MoveCancelled(f"moving {self.name} was cancelled")
            want = min(CHUNK, end - position)
            try:
                sent = os.copy_file_range(src_fd, dst_fd, want, position, position)
            except OSError:
                chunk = os.pread(src_fd, want, position)
                sent = os.pwrite(dst_fd, chunk, position) if chunk else 0
            if sent == 0:
                break  # the source is shorter than it was (truncated): caught at the swap
            position += sent
        return position

    def _copied_through(self, present: dict[str, os.stat_result]) -> int:
        """The base offset of the first segment not yet whole in the copy, else the end."""
        for name in sorted(n for n in present if n.endswith(".log")):
            done = self._copied.get(name)
            if done is None or done.size < present[name].st_size:
                stem = name.removesuffix(".log")
                return int(stem) if stem.isdigit() else 0
        return self.plog.end_offset

    def _fsync_copy(self) -> None:
        """fsync what was copied since the last time, and the directory."""
        for name in sorted(self._unsynced):
            _fsync_file(self.future / name)
        self._unsynced.clear()
        fsync_dir(self.future)

    # --- step 2: swap (called by PartitionLog.relocate, its locks held) -------------------

    def _swap(self, source: Path, truncations: int) -> Path:
        if self.plog.truncations != truncations:
            raise _CopyOutdated()
        if self._cancel.is_set():
            raise MoveCancelled(f"moving {self.name} was cancelled")
        self._sync()
        (self.future / MOVED_FROM_FILE).write_text(f"{source}\n")
        self._unsynced[MOVED_FROM_FILE] = 1
        self._fsync_copy()
        if self.final.exists():
            raise FileExistsError(f"{self.final} already exists")
        os.rename(self.future, self.final)
        try:
            fsync_dir(self.dest_root)
            retired = source.with_name(side_name(self.name, DELETE_SUFFIX))
            os.rename(source, retired)
        except BaseException:
            # The source keeps serving: the copy must not stay under the partition's name.
            os.rename(self.final, self.future)
            raise
        self._retired = retired
        try:
            fsync_dir(source.parent)
        except OSError as exc:  # renamed already: start-up removes it either way
            log.warning("cannot fsync %s after moving %s out: %s", source.parent, self.name, exc)
        return self.final

    # --- step 3: clean up -------------------------------------------------------------------

    def _finish(self) -> None:
        if self._retired is not None:
            shutil.rmtree(self._retired, ignore_errors=True)
        try:
            (self.final / MOVED_FROM_FILE).unlink(missing_ok=True)
            fsync_dir(self.final)
        except OSError as exc:  # start-up drops a marker without a second copy
            log.warning("cannot remove %s: %s", self.final / MOVED_FROM_FILE, exc)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pick_copies(found: dict[str, list[Path]]) -> dict[str, Path]:
    """The one directory to open for each partition name found in the log directories.

    A name in one place is that place (a leftover move marker is dropped). A name in
    several places is a move the broker did not finish cleaning up: the copy with
    ``.moved-from`` is kept and the others removed. Raises DuplicatePartitionError
    when no copy, or more than one, carries the marker (not something a move leaves).
    """
    chosen: dict[str, Path] = {}
    for name, places in found.items():
        if len(places) == 1:
            chosen[name] = places[0]
        else:
            marked = [p for p in places if (p / MOVED_FROM_FILE).exists()]
            if len(marked) != 1:
                listed = " and ".join(str(p) for p in places)
                raise DuplicatePartitionError(
                    f"partition {name} is in {listed}, and no interrupted move says which to "
                    "keep: remove the stale one (docs/operations.md, 'Several log directories')"
                )
            chosen[name] = marked[0]
            _remove_all(p for p in places if p != marked[0])
            log.warning("completed an interrupted move: %s kept, other copies removed", marked[0])
        # os.path on strings: this runs for every partition at start-up.
        marker = os.path.join(chosen[name], MOVED_FROM_FILE)
        if os.path.exists(marker):
            os.unlink(marker)
    return chosen


def _remove_all(paths: Iterable[Path]) -> None:
    for path in paths:
        retired = path.with_name(side_name(path.name, DELETE_SUFFIX))
        os.rename(path, retired)
        fsync_dir(path.parent)
        shutil.rmtree(retired, ignore_errors=True)
