"""The broker's log directories (`log.dirs`, Kafka's JBOD): locked, identified, and
where new partitions go.

Kafka spreads a broker's partitions over several directories, usually one per disk;
so does Odradek:

* **Locking**: every directory is locked (`DirectoryLock`, its ``.lock``) before
  anything in any of them is read, in the order given; all are released on close,
  and by the kernel when the process dies.
* **Identity**: each directory holds Kafka's ``meta.properties`` (``version=1``,
  ``cluster.id``, ``directory.id``), written the first time Odradek uses it. A
  directory whose ``cluster.id`` is not this broker's (another cluster's, or another
  broker's, disk) is refused with one line, as Kafka refuses it; so are two entries
  that are one directory (one ``directory.id`` under two names).
* **Metadata**: the broker's own metadata (``meta.json``, ``topic-metadata.*``,
  ``security/``) lives in the first directory only, as Kafka keeps its metadata log
  in ``metadata.log.dir``, which defaults to the first of ``log.dirs``.
* **Placement**: a new partition goes to the directory holding the fewest
  partitions (ties: the first listed), as Kafka's ``LogManager.nextLogDirs``; a
  failed directory gets none.
* **Failure**: a directory found failing (an I/O error where the broker touches it
  as a whole: creating a partition in it, moving one to it, the probe every
  DescribeLogDirs makes) is marked failed: DescribeLogDirs reports it with
  KAFKA_STORAGE_ERROR and nothing is placed or moved there until a restart. Kafka
  also takes such a directory offline (its partitions stop being served and are led
  elsewhere); Odradek does not, each request on its partitions gets the error its
  own I/O meets (docs/operations.md, "Several log directories").
"""

from __future__ import annotations

import base64
import os
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from odradek.log.dir_lock import DirectoryLock
from odradek.log.index import write_file_atomic

__all__ = [
    "META_PROPERTIES",
    "LogDir",
    "LogDirError",
    "LogDirs",
    "format_kafka_uuid",
    "parse_log_dir_list",
]

META_PROPERTIES = "meta.properties"
META_VERSION = "1"


class LogDirError(Exception):
    """A log directory that cannot be used as given; the message is one line."""


def format_kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: 22 characters of unpadded URL-safe base64."""
    return base64.urlsafe_b64encode(value.bytes).decode("ascii").rstrip("=")


def _parse_kafka_uuid(text: str) -> uuid.UUID:
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"not a Kafka uuid: {text!r}")
    return uuid.UUID(bytes=raw)


def parse_log_dir_list(values: Sequence[str]) -> list[Path]:
    """Directories from ``log.dirs``-style values (each may be a comma list), in order.

    Raises LogDirError for an empty list or one directory given twice.
    """
    paths: list[Path] = []
    seen: dict[str, str] = {}
    for value in values:
        for item in str(value).split(","):
            text = item.strip()
            if not text:
                continue
            path = Path(os.path.abspath(os.path.expanduser(text)))
            key = os.path.realpath(path)
            if key in seen:
                raise LogDirError(f"log directory {text} is given twice (as {seen[key]})")
            seen[key] = text
            paths.append(path)
    if not paths:
        raise LogDirError("no log directory given")
    return paths


def _read_properties(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if not text or text.startswith(("#", "!")):
            continue
        key, sep, value = text.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    return values


@dataclass
class LogDir:
    """One log directory: its lock, its identity and whether it failed."""

    path: Path
    lock: DirectoryLock
    directory_id: uuid.UUID = field(default_factory=uuid.uuid4)
    failure: str | None = None  # why it was marked failed; None while it works

    @property
    def online(self) -> bool:
        return self.failure is None


class LogDirs:
    """Every log directory of the broker, locked; the first holds the metadata."""

    def __init__(self, dirs: list[LogDir]) -> None:
        self.dirs = dirs
        self._hosted: dict[Path, int] = {d.path: 0 for d in dirs}
        self._counting = threading.Lock()  # placement runs in the topic worker thread

    @classmethod
    def lock(cls, paths: Sequence[Path | str]) -> LogDirs:
        """Lock every directory (created if missing) before anything in them is read.

        Raises DirectoryInUseError (another process holds one) or OSError, with every
        lock taken so far released.
        """
        normalized = parse_log_dir_list([os.fspath(p) for p in paths])
        dirs: list[LogDir] = []
        try:
            for path in normalized:
                dirs.append(LogDir(path, DirectoryLock.acquire(path)))
        except BaseException:
            for held in dirs:
                held.lock.release()
            raise
        return cls(dirs)

    def __iter__(self) -> Iterator[LogDir]:
        return iter(self.dirs)

    def __len__(self) -> int:
        return len(self.dirs)

    @property
    def metadata_dir(self) -> Path:
        """Where the broker's metadata lives: the first log directory."""
        return self.dirs[0].path

    @property
    def paths(self) -> list[Path]:
        return [d.path for d in self.dirs]

    # --- identity --------------------------------------------------------------------------

    def stored_cluster_id(self) -> str | None:
        """The cluster id the first directory's ``meta.properties`` records, if any."""
        path = self.metadata_dir / META_PROPERTIES
        try:
            return _read_properties(path).get("cluster.id") or None
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise LogDirError(f"{path} cannot be used: {exc}") from None

    def identify(self, cluster_id: str) -> None:
        """Check each directory's ``meta.properties``, then write it where it is missing.

        Raises LogDirError naming the directory that belongs elsewhere (having written
        nothing).
        """
        owners: dict[uuid.UUID, Path] = {}
        missing = []
        for log_dir in self.dirs:
            path = log_dir.path / META_PROPERTIES
            if path.exists():
                log_dir.directory_id = self._check_properties(log_dir.path, path, cluster_id)
            else:
                missing.append(log_dir)
            other = owners.get(log_dir.directory_id)
            if other is not None:
                raise LogDirError(
                    f"log directories {other} and {log_dir.path} have the same directory.id "
                    f"in {META_PROPERTIES}: they are one directory (or a copy); list it once"
                )
            owners[log_dir.directory_id] = log_dir.path
        for log_dir in missing:
            self._write_properties(log_dir.path / META_PROPERTIES, cluster_id, log_dir.directory_id)

    @staticmethod
    def _check_properties(where: Path, path: Path, cluster_id: str) -> uuid.UUID:
        try:
            values = _read_properties(path)
            if values.get("version") != META_VERSION:
                raise ValueError(f"version {values.get('version')!r}, not {META_VERSION}")
            stored_cluster = values["cluster.id"]
            directory_id = _parse_kafka_uuid(values["directory.id"])
        except (OSError, UnicodeDecodeError, KeyError, ValueError) as exc:
            detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc)
            raise LogDirError(f"{path} cannot be used: {detail}") from None
        if stored_cluster != cluster_id:
            raise LogDirError(
                f"log directory {where} belongs to cluster {stored_cluster}, not to this "
                f"broker's cluster {cluster_id} ({META_PROPERTIES}): give each broker its "
                "own directories"
            )
        return directory_id

    @staticmethod
    def _write_properties(path: Path, cluster_id: str, directory_id: uuid.UUID) -> None:
        text = (
            "#\n#Written by Odradek: this directory's identity (Kafka's meta.properties)\n"
            f"cluster.id={cluster_id}\n"
            f"directory.id={format_kafka_uuid(directory_id)}\n"
            f"version={META_VERSION}\n"
        )
        write_file_atomic(path, text.encode("utf-8"), fsync=True)

    # --- lookup ----------------------------------------------------------------------------

    def find(self, path: str | Path) -> LogDir | None:
        """The log directory named by an absolute path, as clients give it (or None)."""
        text = os.fspath(path)
        if not os.path.isabs(text):
            return None
        wanted = os.path.normpath(text)
        for log_dir in self.dirs:
            if wanted == os.fspath(log_dir.path):
                return log_dir
        real = os.path.realpath(wanted)
        for log_dir in self.dirs:
            if real == os.path.realpath(log_dir.path):
                return log_dir
        return None

    def holding(self, partition_dir: Path) -> LogDir:
        """The log directory a partition directory is in."""
        parent = Path(partition_dir).parent
        for log_dir in self.dirs:
            if log_dir.path == parent:
                return log_dir
        raise KeyError(f"{partition_dir} is in no log directory")

    # --- placement -------------------------------------------------------------------------

    def hosted(self, log_dir: LogDir) -> int:
        with self._counting:
            return self._hosted[log_dir.path]

    def count(self, path: Path, delta: int) -> None:
        """A partition (or a copy being moved in) appeared in or left `path`."""
        with self._counting:
            if path in self._hosted:
                self._hosted[path] = max(self._hosted[path] + delta, 0)

    def place(self) -> LogDir:
        """The directory a new partition goes to, counted as holding it from now on.

        Raises LogDirError when every directory failed.
        """
        with self._counting:
            online = [d for d in self.dirs if d.online]
            if not online:
                raise LogDirError("every log directory has failed")
            chosen = min(online, key=lambda d: self._hosted[d.path])  # first of the least
            self._hosted[chosen.path] += 1
            return chosen

    # --- failure ---------------------------------------------------------------------------

    def mark_failed(self, log_dir: LogDir, reason: str) -> None:
        if log_dir.failure is None:
            log_dir.failure = reason

    def probe(self, log_dir: LogDir) -> str | None:
        """Check a directory is still there and usable (marking it failed if not); why not."""
        if log_dir.failure is None:
            try:
                if not os.path.isdir(log_dir.path):
                    raise FileNotFoundError(f"{log_dir.path} is gone")
                os.statvfs(log_dir.path)
                if not os.access(log_dir.path, os.W_OK | os.X_OK):
                    raise PermissionError(f"{log_dir.path} is not writable")
            except OSError as exc:
                self.mark_failed(log_dir, str(exc))
        return log_dir.failure

    def release(self) -> None:
        for log_dir in self.dirs:
            log_dir.lock.release()
