"""An open-file budget for segment files: one LRU of descriptors shared by every log.

A broker with thousands of partitions cannot keep every segment file open: the
process has ``RLIMIT_NOFILE`` descriptors and its sockets need some too. A
segment opens its file on first use; when more than ``max_open`` files are open
the least recently used one that nobody is using is closed, and reopened later
if needed (``log.max.open.files``, docs/operations.md).

A descriptor is *pinned* while a caller uses it (``with files.use(f) as fd``),
so a worker thread never has its descriptor closed, and the number reused, by
the event loop's eviction or by the segment being deleted. When ``open`` fails
with EMFILE / ENFILE every idle descriptor is closed and the open retried once.

A ``FileRegion`` (bytes of a segment file a Fetch response sends with
``sendfile``) holds its own pin from the read until it is released after the
send: meanwhile the file may be retired (retention, compaction, topic deletion)
and even unlinked, but its descriptor stays open and its bytes, which an
append-only log never rewrites, stay what the read checked.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import OrderedDict

__all__ = [
    "DEFAULT_MAX_OPEN_FILES",
    "FileCache",
    "FileRegion",
    "SegmentFile",
    "set_max_open_files",
    "shared_file_cache",
]

DEFAULT_MAX_OPEN_FILES = 1000
_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})


class SegmentFile:
    """One segment's ``.log`` file: its path and, while open, its descriptor."""

    __slots__ = ("fd", "path", "pins", "retired")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1
        self.pins = 0
        self.retired = False

    def __repr__(self) -> str:
        return f"SegmentFile({self.path}, fd={self.fd}, pins={self.pins})"


class FileCache:
    """Least-recently-used descriptors of segment files, at most ``max_open`` idle ones."""

    def __init__(self, max_open: int = DEFAULT_MAX_OPEN_FILES) -> None:
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self.max_open = max_open
        self._lock = threading.Lock()
        self._open: OrderedDict[SegmentFile, None] = OrderedDict()

    @property
    def open_count(self) -> int:
        return len(self._open)

    def use(self, file: SegmentFile, *, create: bool = False) -> _Use:
        """The file's descriptor, pinned for the ``with`` block (opened, maybe created)."""
        return _Use(self, file, create)

    def _acquire(self, file: SegmentFile, create: bool) -> int:
        with self._lock:
            if file.fd >= 0:
                self._open.move_to_end(file)
                file.pins += 1
                return file.fd
            if file.retired:
                raise ValueError(f"segment file {file.path} was closed for good")
            self._shrink_to(self.max_open - 1)
            flags = _FLAGS | os.O_CREAT if create else _FLAGS
            try:
                fd = os.open(file.path, flags, 0o644)
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                self._shrink_to(0)
                fd = os.open(file.path, flags, 0o644)
            file.fd = fd
            file.pins = 1
            self._open[file] = None
            return fd

    def _release(self, file: SegmentFile) -> None:
        with self._lock:
            file.pins -= 1
            if file.pins == 0 and (file.retired or len(self._open) > self.max_open):
                self._close(file)

    def retire(self, file: SegmentFile) -> None:
        """Close for good: now, or when its last user is done (never reopened after)."""
        with self._lock:
            file.retired = True
            if file.fd >= 0 and file.pins == 0:
                self._close(file)

    def close_idle(self) -> None:
        """Close every descriptor nobody is using."""
        with self._lock:
            self._shrink_to(0)

    def _shrink_to(self, target: int) -> None:
        """Close least recently used idle descriptors until at most ``target`` are open."""
        excess = len(self._open) - target
        if excess <= 0:
            return
        victims = []
        for file in self._open:  # oldest first
            if file.pins == 0:
                victims.append(file)
                excess -= 1
                if excess == 0:
                    break
        for file in victims:
            self._close(file)

    def _close(self, file: SegmentFile) -> None:
        del self._open[file]
        fd, file.fd = file.fd, -1
        os.close(fd)


class _Use:
    """``FileCache.use``'s context manager (a class: reads take several per fetch, and a
    generator-based one costs several times as much)."""

    __slots__ = ("_cache", "_create", "_file")

    def __init__(self, cache: FileCache, file: SegmentFile, create: bool) -> None:
        self._cache = cache
        self._file = file
        self._create = create

    def __enter__(self) -> int:
        return self._cache._acquire(self._file, self._create)

    def __exit__(self, *exc: object) -> None:
        self._cache._release(self._file)


class FileRegion:
    """Bytes ``[position, position + length)`` of a segment file, pinned until ``release``.

    Made while the caller holds the file in use (so it is open); ``fd`` stays
    valid until ``release()``, which must be called exactly once the region is
    sent or dropped (a second call does nothing).
    """

    __slots__ = ("_cache", "_file", "fd", "length", "position")

    def __init__(self, cache: FileCache, file: SegmentFile, position: int, length: int) -> None:
        self._cache: FileCache | None = cache
        self._file = file
        self.fd = cache._acquire(file, False)
        self.position = position
        self.length = length

    @property
    def released(self) -> bool:
        return self._cache is None

    def read(self) -> bytes:
        """The region's bytes (for a transport that cannot sendfile, e.g. TLS)."""
        return self.read_part(0, self.length)

    def read_part(self, start: int, size: int) -> bytes:
        """``size`` bytes from ``start`` within the region; short only if the file is."""
        if self._cache is None:
            raise ValueError("the region was released")
        chunks = []
        pos = self.position + start
        end = pos + min(size, self.length - start)
        while pos < end:
            chunk = os.pread(self.fd, end - pos, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def release(self) -> None:
        cache, self._cache = self._cache, None
        if cache is not None:
            cache._release(self._file)

    def __repr__(self) -> str:
        return f"FileRegion({self._file.path}, {self.position}+{self.length})"


_shared = FileCache()


def shared_file_cache() -> FileCache:
    """The process-wide cache: descriptors are a per-process resource."""
    return _shared


def set_max_open_files(max_open: int) -> None:
    """Set the process-wide budget (the broker applies ``log.max.open.files``)."""
    if max_open < 1:
        raise ValueError("log.max.open.files must be at least 1")
    _shared.max_open = max_open
    with _shared._lock:
        _shared._shrink_to(max_open)
