"""An exclusive lock on a data directory, held for as long as a process uses it.

Two brokers on one directory interleave their writes in the same segments and
destroy acknowledged records, so, like Kafka's LogManager (``.lock`` in every
log directory), whoever opens a data directory locks it before reading or
writing anything else in it, and a second process stops there.

The lock is ``flock(LOCK_EX | LOCK_NB)`` on ``<dir>/.lock``: the kernel drops it
when its holder exits, however it exits (``kill -9`` included), so there is
never a stale lock to clear by hand. It belongs to the open file description,
not to the process: a second open in the same process is refused too, and the
descriptor is not inherited by child processes. The holder writes its pid into
the file so that the refusal can name it; the file's content is only a hint,
the lock is what counts.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

__all__ = ["LOCK_FILE", "DirectoryInUseError", "DirectoryLock"]

LOCK_FILE = ".lock"


class DirectoryInUseError(Exception):
    """Another process (or another open in this one) holds the directory's lock."""

    def __init__(self, directory: Path, holder_pid: int | None) -> None:
        self.directory = directory
        self.holder_pid = holder_pid
        holder = f"process {holder_pid}" if holder_pid is not None else "another process"
        super().__init__(
            f"data directory {directory} is in use by {holder}: one directory serves one "
            "broker at a time (stop that one first, or give this one another --data-dir)"
        )


class DirectoryLock:
    """The held lock of one directory; `release()` (or process exit) gives it up."""

    def __init__(self, directory: Path, fd: int) -> None:
        self.directory = directory
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, directory: Path) -> DirectoryLock:
        """Lock `directory` (created if missing) or raise DirectoryInUseError.

        Only the directory itself and its ``.lock`` file are created; nothing
        else in it is read or written before the lock is held.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            raise DirectoryInUseError(directory.resolve(), holder) from None
        except BaseException:
            os.close(fd)
            raise
        with contextlib.suppress(OSError):  # the pid is a courtesy; the lock is held anyway
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(directory, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Give the lock up (closing the descriptor drops it); idempotent."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
