"""Topics and their partition logs, and the small amount of cluster metadata a
single node keeps (cluster id, topic ids, producer id blocks).

Topic metadata is a journal plus snapshot (`topic_store.py`): a request that
creates or deletes many topics costs one fsync. `meta.json` (cluster id,
producer-id block, metadata leader epoch, the log directories seen) is replaced
atomically. Partition data lives in `<topic>-<partition>/` directories, as in
Kafka: a legal name (at most 249 characters) and partition index (below 100,000)
always fit a 255-byte file name.

Placement: a lone node holds every partition; a cluster member only those with a
replica on it (`adopt`'s `hosted`, journaled with the topic): `Topic.partitions`
has one slot per partition, None where the replica is elsewhere, and a replica
moved away has its files deleted.

Log directories (`log_dirs.py`): there may be several (`log.dirs`, Kafka's JBOD),
all locked before anything is read; the metadata above lives in the first. A new
partition goes to the one holding the fewest; `move_replica` moves one to another
while it serves (`odradek.log.dir_move`, AlterReplicaLogDirs). At start-up every
directory is scanned once: the copy of each partition to open is picked there
(an interrupted move is completed or undone), and a partition the journal names
but no directory holds, while a directory seen before is missing from the list,
stops the start (its data is in that directory: it must be listed again).

Creating and deleting topics from requests (`create_topics`, `delete_topics`,
`add_partitions`) runs its file work in one worker thread, so the event loop
keeps serving other clients, and is all-or-nothing per topic: partitions
opened for a topic that cannot be completed (no descriptors left, disk full)
are closed and their directories removed. A topic exists once its journal line
is durable; deletion is durable at that point too, and a directory left behind
by a crash is never served again: creating a topic wipes any directory already
in its place, and empty leftovers are removed at start-up.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from odradek.broker.config import (
    BrokerConfig,
    ConfigError,
    format_value,
    resolve_topic_configs,
    topic_config_value,
    usable_stored_topic_configs,
    validate_topic_configs,
)
from odradek.broker.log_dirs import LogDir, LogDirError, LogDirs, format_kafka_uuid
from odradek.broker.topic_store import TopicStore, write_json_atomically
from odradek.log import LogConfig, PartitionLog, set_max_open_files
from odradek.log.dir_move import (
    DELETE_SUFFIX,
    FUTURE_SUFFIX,
    DirMove,
    DuplicatePartitionError,
    MoveCancelled,
    pick_copies,
)
from odradek.protocol.errors import ErrorCode
from odradek.ratelog import RateLimitedLog

log = logging.getLogger("odradek.topics")
storage_failures = RateLimitedLog(log)

TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")
# Where group events went before they became records of the group's own
# __consumer_offsets partition (coordinator/history.py): no longer written; a data
# directory that has it keeps it, as an internal topic, until an operator deletes it.
LEGACY_GROUP_EVENTS_TOPIC = "__odradek_group_events"
INTERNAL_TOPICS = frozenset(
    {"__consumer_offsets", LEGACY_GROUP_EVENTS_TOPIC, "__transaction_state"}
)
# the coordinator can append nor what it keeps. Anything else (cleanup.policy,
# max.message.bytes, retention, timestamps, compression) could lose offsets or fail every
# commit, so it is refused with POLICY_VIOLATION, the code of a broker policy refusal.
INTERNAL_TOPIC_ALTERABLE_CONFIGS = frozenset(
    {
        "segment.bytes",
        "segment.ms",
        "segment.jitter.ms",
        "segment.index.bytes",
        "index.interval.bytes",
        "flush.messages",
        "flush.ms",
        "file.delete.delay.ms",
        "preallocate",
        "min.cleanable.dirty.ratio",
        "delete.retention.ms",
        "min.compaction.lag.ms",
        "max.compaction.lag.ms",
    }
)
# The rebalance history is observational: its retention is the operator's choice.
INTERNAL_TOPIC_EXTRA_ALTERABLE = {
    LEGACY_GROUP_EVENTS_TOPIC: frozenset({"retention.ms", "retention.bytes"})
}
PRODUCER_ID_BLOCK = 1000
MAX_PARTITIONS = 100_000  # keeps `<249-char name>-<index>` within a 255-byte file name
MAX_FILE_NAME = 255
CLOSE_THREADS = 8
# process out of descriptors): the directory is marked failed (odradek.broker.log_dirs).
DIR_FAILURE_ERRNOS = frozenset({errno.EIO, errno.EROFS, errno.ENODEV, errno.ENXIO})


def _close_quietly(plog: PartitionLog) -> tuple[PartitionLog, Exception] | None:
    try:
        plog.close()
    except Exception as exc:  # one bad partition must not keep the others open
        return plog, exc
    return None


class TopicError(Exception):
    """A topic operation refused, with the Kafka error code to answer."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


def validate_topic_name(name: str) -> None:
    if name in (".", "..") or not TOPIC_NAME.match(name):
        raise TopicError(
            17,  # INVALID_TOPIC_EXCEPTION
            f"topic name {name!r} must be 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'",
        )


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]  # explicit per-topic overrides, Kafka topic-config names
    # One slot per partition of the topic: its log, or None where this broker holds
    # no replica of it (a cluster places each partition's replicas on a few brokers).
    partitions: list[PartitionLog | None] = field(default_factory=list)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS

    def logs(self) -> Iterator[PartitionLog]:
        """The logs of the partitions hosted here."""
        return (plog for plog in self.partitions if plog is not None)

    def hosted(self) -> list[int]:
        return [index for index, plog in enumerate(self.partitions) if plog is not None]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """One topic a request asks for; -1 partitions / replication factor mean the defaults."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str | None] = field(default_factory=dict)
    internal_configs: bool = False  # configs the broker sets on its own topics
    # Manual replica assignment (CreateTopics `assignments`): partition -> broker ids.
    assignments: dict[int, tuple[int, ...]] | None = None


class TopicControl(Protocol):
    """Who decides which topics exist (the broker's control plane: `control_plane.py`):
    a lone node here, on its own disk (`lone_node.py`, through the ``*_here`` methods
    below); a cluster member in etcd, every broker then opening or dropping the topic
    from the watch (`adopt`, `forget`)."""

    async def create_topics(
        self, wanted: list[NewTopic], *, existing_ok: bool = False
    ) -> list[Topic | TopicError]:
        """Create topics; ``existing_ok`` (auto-creation): one that exists already, or
        that someone creates meanwhile, is returned instead of refused."""
        ...

    async def delete_topics(self, names: list[str]) -> dict[str, TopicError | None]: ...

    def next_producer_id(self) -> int: ...

    async def add_partitions(self, name: str, total: int) -> None: ...

    def placement_error(self, wanted: NewTopic) -> TopicError | None:
        """Why the topic's replicas cannot be placed as asked (checked before anything
        is written, for validate_only too), or None."""
        ...


class LocalTopics:
    """Topic decisions made here, on this node's disk: a lone node's (`LoneNode` is one),
    and a TopicManager's own until a broker gives it its control plane."""

    def __init__(self, topics: TopicManager) -> None:
        self.topics = topics
        self.node_id = int(topics.config["node.id"])

    async def create_topics(
        self, wanted: list[NewTopic], *, existing_ok: bool = False
    ) -> list[Topic | TopicError]:
        # Auto-creation of a topic another request is creating waits in TopicManager.
        return await self.topics.create_here(wanted)

    async def delete_topics(self, names: list[str]) -> dict[str, TopicError | None]:
        return await self.topics.delete_here(names)

    async def add_partitions(self, name: str, total: int) -> None:
        await self.topics.add_partitions_here(name, total)

    def next_producer_id(self) -> int:
        return self.topics.next_local_producer_id()

    def placement_error(self, wanted: NewTopic) -> TopicError | None:
        """One node holds one replica of each partition."""
        if wanted.replication_factor not in (-1, 1):
            return TopicError(
                ErrorCode.INVALID_REPLICATION_FACTOR,
                f"replication factor {wanted.replication_factor} is larger than the 1 available"
                " broker",
            )
        if wanted.assignments is not None and any(
            replicas != (self.node_id,) for replicas in wanted.assignments.values()
        ):
            return TopicError(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                f"replicas must be [{self.node_id}] on a single node",
            )
        return None


def deletion_dir_name(partition_dir: str, topic_id: uuid.UUID) -> str:
    """`<topic>-<p>.<id>-delete`, the topic cut short so the name fits (as Kafka does)."""
    topic, _, index = partition_dir.rpartition("-")
    suffix = f"-{index}.{topic_id.hex}-delete"
    return topic[: MAX_FILE_NAME - len(suffix)] + suffix


def _remove_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@dataclass
class ReplicaMove:
    """A partition moving to another log directory (AlterReplicaLogDirs)."""

    topic: str
    partition: int
    target: LogDir
    mover: DirMove
    finished: asyncio.Future[BaseException | None]


class TopicManager:
    """Owns every partition log of this node and the metadata that names them."""

    def __init__(
        self,
        data_dir: Path | Sequence[Path],
        config: BrokerConfig,
        *,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        dirs = [data_dir] if isinstance(data_dir, str | os.PathLike) else list(data_dir)
        # Every log directory is locked before anything in any of them is read or
        # written: a second broker stops here (DirectoryInUseError).
        self.log_dirs = LogDirs.lock(dirs)
        self.data_dir = self.log_dirs.metadata_dir  # meta.json, topic metadata, security
        try:
            self._open(config, now_ms)
        except BaseException:
            self.log_dirs.release()
            raise

    def _open(self, config: BrokerConfig, now_ms: Callable[[], int]) -> None:
        self.config = config
        self.now_ms = now_ms
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[uuid.UUID, Topic] = {}
        # Names being created or deleted by a request still in the worker thread.
        self._pending: dict[str, asyncio.Future[Topic | TopicError]] = {}
        self._deleting: set[str] = set()
        set_max_open_files(int(config["log.max.open.files"]))  # descriptors are per process
        # Called after a topic is created, deleted or grows (the group coordinator's
        # consumer groups assign partitions themselves and must hear of it).
        self.change_listeners: list[Callable[[], None]] = []
        self._meta_path = self.data_dir / "meta.json"
        self._meta = self._load_meta()
        self.log_dirs.identify(self.cluster_id)
        self._next_producer_id = self._meta["producer_id_block"]
        # Each start is a new term of this node as the metadata's only leader (the epoch
        # DescribeQuorum reports on a single node, as KRaft bumps it on every election).
        self._meta["leader_epoch"] = int(self._meta.get("leader_epoch", 0)) + 1
        self.store = TopicStore(self.data_dir)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-topics")
        # Moves between log directories, one at a time in their own thread (a copy may
        # take minutes and must not hold up topic creation).
        self._mover = ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-dir-move")
        self.moves: dict[tuple[str, int], ReplicaMove] = {}
        # Who decides which topics exist: this node alone, until the broker hands over
        # its control plane (built after this manager, which it needs).
        self.control: TopicControl = LocalTopics(self)
        self._load_topics()
        # Written once the directories are known good: the ones seen, for the next start.
        self._meta["log_dirs"] = {
            format_kafka_uuid(d.directory_id): str(d.path) for d in self.log_dirs
        }
        self._reserve_producer_ids()

    # --- cluster metadata ---------------------------------------------------------------

    def _load_meta(self) -> dict[str, Any]:
        if self._meta_path.exists():
            meta = json.loads(self._meta_path.read_text())
        else:
            meta = {"producer_id_block": 0}
            # A start cut short after the directories got their identity, before this.
            stored = self.log_dirs.stored_cluster_id()
            if stored is not None:
                meta["cluster_id"] = stored
        configured = self.config["cluster.id"]
        if configured:
            meta["cluster_id"] = configured
        meta.setdefault("cluster_id", uuid.uuid4().hex[:22])
        return meta

    @property
    def cluster_id(self) -> str:
        return str(self._meta["cluster_id"])

    @property
    def leader_epoch(self) -> int:
        """This node's term as its metadata's leader: one more at every start."""
        return int(self._meta["leader_epoch"])

    @property
    def metadata_offset(self) -> int:
        """How many metadata changes this node has recorded (its metadata log's end)."""
        return self.store.seq

    def _reserve_producer_ids(self) -> None:
        # Producer ids are handed out from blocks persisted ahead of use, so a
        # restart never reuses an id a producer may still hold.
        self._meta["producer_id_block"] = self._next_producer_id + PRODUCER_ID_BLOCK
        write_json_atomically(self._meta_path, self._meta)

    def allocate_producer_id(self) -> int:
        """A producer id from the control plane's blocks (a lone node's are in meta.json,
        a cluster's reserved in etcd)."""
        return self.control.next_producer_id()

    def next_local_producer_id(self) -> int:
        """A producer id from the blocks this node reserves on its own disk."""
        if self._next_producer_id >= self._meta["producer_id_block"]:
            self._reserve_producer_ids()
        pid = self._next_producer_id
        self._next_producer_id += 1
        return int(pid)

    # --- topics ------------------------------------------------------------------------

    def _load_topics(self) -> None:
        found = self._scan_log_dirs()
        wanted = [
            f"{n}-{i}"
            for n, e in self.store.topics.items()
            for i in range(e.partitions)
            if e.hosts(i)
        ]
        missing = [key for key in wanted if key not in found]
        if missing:
            self._check_missing(missing)
        # The partitions found, counted per log directory before any missing one is placed:
        # once per directory, not one Path hashed per partition (10,000 at start-up).
        found_in = Counter(os.path.dirname(found[key]) for key in wanted if key in found)
        for log_dir, count in found_in.items():
            self.log_dirs.count(Path(log_dir), count)
        for name, entry in self.store.topics.items():
            topic = Topic(
                name, uuid.UUID(entry.topic_id), self._stored_configs(name, entry.configs)
            )
            log_config = self.log_config(topic)
            for index in range(entry.partitions):
                if not entry.hosts(index):
                    topic.partitions.append(None)  # its directory, if any, is a leftover
                    continue
                path = found.pop(f"{name}-{index}", None)
                if path is None:  # reported by _check_missing: starts empty, as before
                    path = self.log_dirs.place().path / f"{name}-{index}"
                topic.partitions.append(PartitionLog.open(path, log_config, now_ms=self.now_ms))
            self._register(topic)
        self._clean_leftovers(found)

    def _scan_log_dirs(self) -> dict[str, Path]:
        """Every partition directory in the log directories, one place each.

        What interrupted deletions (`*-delete`) and moves (`*-future`, unfinished
        copies) left is removed; a partition found in two directories is an interrupted
        move, resolved by `pick_copies` (any other duplicate stops the start).
        """
        places: dict[str, list[Path]] = {}
        for log_dir in self.log_dirs:
            with os.scandir(log_dir.path) as entries:
                for entry in entries:
                    if not entry.is_dir(follow_symlinks=False):
                        continue
                    if entry.name.endswith((DELETE_SUFFIX, FUTURE_SUFFIX)):
                        _remove_dir(Path(entry.path))
                    elif PARTITION_DIR.match(entry.name):
                        places.setdefault(entry.name, []).append(Path(entry.path))
        try:
            return pick_copies(places)
        except DuplicatePartitionError as exc:
            raise LogDirError(str(exc)) from None

    def _check_missing(self, missing: list[str]) -> None:
        """Partitions the metadata names and no log directory holds: if a directory this
        broker used before is not listed now, they are there: refuse to start."""
        present = {format_kafka_uuid(d.directory_id) for d in self.log_dirs}
        absent = {i: p for i, p in dict(self._meta.get("log_dirs", {})).items() if i not in present}
        names = ", ".join(sorted(missing)[:5]) + (" ..." if len(missing) > 5 else "")
        if absent:
            ident, path = sorted(absent.items())[0]
            raise LogDirError(
                f"{len(missing)} partitions ({names}) are in none of the log directories, and "
                f"{path} (directory.id {ident}), which held partitions before, is not one of "
                "them: list it in log.dirs again"
            )
        log.warning(
            "%d partitions are in no log directory and start empty: %s", len(missing), names
        )

    def _clean_leftovers(self, unowned: dict[str, Path]) -> None:
        """Remove the partition directories no live topic owns, unless they hold records.

        They come from a creation or deletion cut short by a crash: an empty one is
        removed; one holding records is kept (it is never served, and creating that
        topic again wipes it) and reported.
        """
        kept = []
        for name, path in unowned.items():
            if any(p.stat().st_size for p in path.glob("*.log")):
                kept.append(name)
            else:
                _remove_dir(path)
        if kept:
            log.warning(
                "%d partition directories belong to no topic and are not served: %s%s",
                len(kept),
                ", ".join(sorted(kept)[:10]),
                " ..." if len(kept) > 10 else "",
            )

    def _register(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.topics_by_id[topic.topic_id] = topic

    def _stored_configs(self, name: str, stored: dict[str, str]) -> dict[str, str]:
        """A topic's stored overrides; any that fails today's checks is reported and ignored,
        so no stored value can stop start-up (the default applies until it is set again)."""
        internal = name in INTERNAL_TOPICS
        clean, problems = usable_stored_topic_configs(dict(stored), self.config, internal=internal)
        where = self.store.snapshot_path.parent
        for problem in problems:
            log.error(
                "%s: topic %r: ignoring a stored config, its default is used: %s",
                where,
                name,
                problem,
            )
        try:
            self._build_log_config(resolve_topic_configs(clean, self.config, internal=internal))
        except ValueError as exc:  # a check the log layer makes and config.py does not
            log.error(
                "%s: topic %r: ignoring every stored config, defaults are used: %s",
                where,
                name,
                exc,
            )
            return {}
        return clean

    def resolved_configs(self, topic: Topic) -> dict[str, Any]:
        """Every topic config's typed value for this topic (override, else broker default)."""
        return resolve_topic_configs(topic.configs, self.config, internal=topic.internal)

    def log_config(self, topic: Topic) -> LogConfig:
        return self._build_log_config(self.resolved_configs(topic))

    def _build_log_config(self, values: dict[str, Any]) -> LogConfig:
        def value(topic_name: str) -> Any:
            raw = values[topic_name]
            return ",".join(raw) if isinstance(raw, list) else raw

        return LogConfig(
            segment_bytes=int(value("segment.bytes")),
            segment_ms=int(value("segment.ms")),
            retention_ms=int(value("retention.ms")),
            retention_bytes=int(value("retention.bytes")),
            index_interval_bytes=int(value("index.interval.bytes")),
            flush_messages=int(value("flush.messages")),
            flush_ms=int(value("flush.ms")),
            max_message_bytes=int(value("max.message.bytes")),
            message_timestamp_type=str(value("message.timestamp.type")),
            cleanup_policy=str(value("cleanup.policy")),
            delete_retention_ms=int(value("delete.retention.ms")),
            min_cleanable_dirty_ratio=float(value("min.cleanable.dirty.ratio")),
            max_decompressed_bytes=int(self.config["message.decompressed.max.bytes"]),
        )

    def effective_topic_configs(self, topic: Topic) -> list[tuple[str, str, bool]]:
        """(name, value, is_default) for every topic config, sorted by name."""
        values = self.resolved_configs(topic)
        return [
            (name, format_value(values[name]), name not in topic.configs) for name in sorted(values)
        ]

    def validate_configs(
        self, configs: dict[str, str | None], *, internal: bool = False
    ) -> dict[str, str]:
        """A complete set of overrides, checked in full (INVALID_CONFIG otherwise) and
        known to make a valid log config; canonical values."""
        try:
            clean = validate_topic_configs(configs, self.config, internal=internal)
            self._build_log_config(resolve_topic_configs(clean, self.config, internal=internal))
        except (ConfigError, ValueError) as exc:
            raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        return clean

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def partition(self, topic: str, index: int) -> PartitionLog | None:
        """The partition's log, or None: no such partition, or no replica of it here."""
        t = self.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            return None
        return t.partitions[index]

    def has_partition(self, topic: str, index: int) -> bool:
        """Whether the topic has that partition, hosted here or not (a commit, a
        transaction names partitions of the cluster, wherever their replicas are)."""
        t = self.topics.get(topic)
        return t is not None and 0 <= index < len(t.partitions)

    def absent_error(self, topic: str, index: int) -> ErrorCode:
        """Why `partition` gave None, as Kafka's ReplicaManager says it: a partition of
        the cluster with no replica here is NOT_LEADER_OR_FOLLOWER (the client's
        metadata is stale), one that does not exist UNKNOWN_TOPIC_OR_PARTITION."""
        t = self.topics.get(topic)
        if t is not None and 0 <= index < len(t.partitions):
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # --- creating -----------------------------------------------------------------------

    def prepare(self, wanted: NewTopic) -> tuple[Topic, int]:
        """Validate a creation (on the event loop, cheap); the topic and its partition count."""
        validate_topic_name(wanted.name)
        if wanted.name in self.topics or wanted.name in self._pending:
            raise TopicError(
                ErrorCode.TOPIC_ALREADY_EXISTS, f"topic {wanted.name!r} already exists"
            )
        num_partitions = wanted.num_partitions
        if num_partitions == -1:
            num_partitions = int(self.config["num.partitions"])
        if num_partitions < 1:
            raise TopicError(37, f"number of partitions must be at least 1, got {num_partitions}")
        if num_partitions > MAX_PARTITIONS:
            raise TopicError(37, f"{num_partitions} partitions is more than one node should hold")
        refused = self.control.placement_error(wanted)
        if refused is not None:
            raise refused
        clean = self.validate_configs(dict(wanted.configs), internal=wanted.internal_configs)
        return Topic(wanted.name, uuid.uuid4(), clean), num_partitions

    def _open_partitions(
        self, topic: Topic, first: int, end: int, hosted: Collection[int] | None = None
    ) -> list[PartitionLog | None]:
        """Open fresh logs for partitions first..end-1 (blocking file work), each in the
        log directory holding the fewest partitions; only those in `hosted` (None: all),
        the others' slots are None.

        A directory already in a new partition's place, in any log directory, is a
        leftover no topic owns (see `_clean_leftovers`) and is wiped, so old records
        never come back. On failure every log opened here is closed and its directory
        removed.
        """
        log_config = self.log_config(topic)
        opened: list[PartitionLog | None] = []
        path: Path | None = None
        try:
            for index in range(first, end):
                if hosted is not None and index not in hosted:
                    opened.append(None)
                    continue
                name = f"{topic.name}-{index}"
                for log_dir in self.log_dirs:
                    leftover = log_dir.path / name
                    if leftover.exists():
                        log.warning("wiping leftover directory %s for new partition", leftover)
                        shutil.rmtree(leftover)
                path = self.log_dirs.place().path / name
                opened.append(PartitionLog.open(path, log_config, now_ms=self.now_ms))
                path = None
        except Exception as exc:
            if isinstance(exc, OSError):
                self._note_dir_failure(exc)
            self._discard(opened, failed=path)
            storage_failures.log(
                "create", logging.ERROR, "cannot create partitions of %s: %s", topic.name, exc
            )
            raise TopicError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot create partitions of {topic.name!r}: {exc}"
            ) from exc
        return opened

    def _discard(self, logs: list[PartitionLog | None], *, failed: Path | None = None) -> None:
        """Undo `_open_partitions`: close every log first (out of descriptors, removing
        a directory needs some), then remove their directories (and `failed`, the one
        that could not be opened)."""
        opened = [plog for plog in logs if plog is not None]
        paths = [plog.directory for plog in opened] + ([failed] if failed is not None else [])
        for plog in opened:
            plog.delete()
        for path in paths:
            _remove_dir(path)
            self.log_dirs.count(path.parent, -1)

    def _note_dir_failure(self, exc: OSError) -> None:
        """Mark the log directory an I/O error happened in as failed, if it is one that
        says the directory (not the request, not the process) is broken."""
        if exc.errno not in DIR_FAILURE_ERRNOS or exc.filename is None:
            return
        where = os.path.abspath(os.fsdecode(exc.filename))
        for log_dir in self.log_dirs:
            if where == str(log_dir.path) or where.startswith(str(log_dir.path) + os.sep):
                self.log_dirs.mark_failed(log_dir, f"{exc.strerror} ({where})")
                log.error("log directory %s failed: %s", log_dir.path, exc)

    def _materialize(
        self, batch: list[tuple[Topic, int]], hosted: Collection[int] | None = None
    ) -> list[tuple[Topic, list[PartitionLog | None]] | TopicError]:
        """Open every topic's partitions (those in `hosted`, a cluster's placement; None:
        all), then journal the topics complete (worker thread)."""
        results: list[tuple[Topic, list[PartitionLog | None]] | TopicError] = []
        for topic, count in batch:
            try:
                results.append((topic, self._open_partitions(topic, 0, count, hosted)))
            except TopicError as exc:
                results.append(exc)
        created = [r for r in results if not isinstance(r, TopicError)]
        changes = [
            {
                "op": "create",
                "name": topic.name,
                "id": str(topic.topic_id),
                "partitions": len(logs),
                "configs": topic.configs,
                **({} if hosted is None else {"hosted": sorted(hosted)}),
            }
            for topic, logs in created
        ]
        try:
            self.store.commit(changes)
        except OSError as exc:
            storage_failures.log("create", logging.ERROR, "cannot record new topics: %s", exc)
            for _, logs in created:
                self._discard(logs)
            failure = TopicError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot record the new topic: {exc}"
            )
            return [r if isinstance(r, TopicError) else failure for r in results]
        return results

    def _install(self, topic: Topic, logs: list[PartitionLog | None]) -> Topic:
        topic.partitions = logs
        self._register(topic)
        here = sum(plog is not None for plog in logs)
        if here == len(logs):
            log.info("created topic %s with %d partitions", topic.name, len(logs))
        else:
            log.info(
                "created topic %s with %d partitions, %d of them here", topic.name, len(logs), here
            )
        self._notify_change()
        return topic

    def create(
        self,
        name: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        configs: dict[str, str | None] | None = None,
        *,
        validate_only: bool = False,
        internal_configs: bool = False,
    ) -> Topic:
        """Create one topic in the calling thread (start-up: internal topics; tests);
        `internal_configs` for configs the broker sets on its own topics."""
        topic, count = self.prepare(
            NewTopic(
                name, num_partitions, replication_factor, dict(configs or {}), internal_configs
            )
        )
        if validate_only:
            return topic
        (result,) = self._materialize([(topic, count)])
        if isinstance(result, TopicError):
            raise result
        return self._install(*result)

    async def create_topics(self, wanted: list[NewTopic]) -> list[Topic | TopicError]:
        """Create topics, as the control plane decides."""
        return await self.control.create_topics(wanted)

    async def create_here(self, wanted: list[NewTopic]) -> list[Topic | TopicError]:
        """Create topics on this node (a lone node's decision); the file work runs in the
        worker thread, one fsync for them all.

        The result is installed by a callback when the worker finishes, so a request
        cancelled meanwhile (its connection closed) cannot leave a journaled topic
        unregistered.
        """
        results: list[Topic | TopicError] = []
        batch: list[tuple[Topic, int]] = []
        loop = asyncio.get_running_loop()
        for request in wanted:
            try:
                prepared = self.prepare(request)
            except TopicError as exc:
                results.append(exc)
                continue
            self._pending[request.name] = loop.create_future()
            batch.append(prepared)
            results.append(prepared[0])
        if not batch:
            return results
        futures = {t.name: self._pending[t.name] for t, _ in batch}
        work = loop.run_in_executor(self._worker, self._materialize, batch)
        work.add_done_callback(functools.partial(self._finish_creation, batch))
        outcome = {name: await asyncio.shield(future) for name, future in futures.items()}
        return [outcome[r.name] if isinstance(r, Topic) else r for r in results]

    def _finish_creation(self, batch: list[tuple[Topic, int]], work: asyncio.Future[Any]) -> None:
        if work.cancelled() or work.exception() is not None:
            reason = "cancelled" if work.cancelled() else repr(work.exception())
            log.error("topic creation failed: %s", reason)
            done: list[Any] = [
                TopicError(ErrorCode.KAFKA_STORAGE_ERROR, f"creation failed: {reason}")
            ] * len(batch)
        else:
            done = work.result()
        for (topic, _), result in zip(batch, done, strict=True):
            installed = result if isinstance(result, TopicError) else self._install(*result)
            self._pending.pop(topic.name).set_result(installed)

    async def ensure_topics(self, names: list[str]) -> dict[str, Topic | TopicError]:
        """Auto-creation: the named topics, created with the defaults where missing."""
        found: dict[str, Topic | TopicError] = {}
        missing: list[str] = []
        waits: dict[str, asyncio.Future[Topic | TopicError]] = {}
        for name in dict.fromkeys(names):
            topic = self.topics.get(name)
            if topic is not None:
                found[name] = topic
            elif name in self._pending:
                waits[name] = self._pending[name]
            else:
                missing.append(name)
        created: list[Topic | TopicError] = []
        if missing:
            # Another broker may have created it a moment ago: wait for it here instead
            # of answering TOPIC_ALREADY_EXISTS to a client that only wanted to use it.
            created = await self.control.create_topics(
                [NewTopic(n) for n in missing], existing_ok=True
            )
        found.update(zip(missing, created, strict=True))
        for name, future in waits.items():
            found[name] = await asyncio.shield(future)
        return found

    def create_internal(self, name: str, num_partitions: int, configs: dict[str, str]) -> Topic:
        existing = self.topics.get(name)
        if existing:
            return existing
        return self.create(name, num_partitions, configs=dict(configs), internal_configs=True)

    # --- deleting -----------------------------------------------------------------------

    async def delete_topics(self, names: list[str]) -> dict[str, TopicError | None]:
        """Delete topics: one durable journal write for all, then their files, off the loop.

        A topic is gone for clients once the journal says so; if that write fails,
        the topic is untouched (KAFKA_STORAGE_ERROR). Its directories are renamed
        to `*-delete` names and removed; what a crash leaves is cleaned at start-up.
        """
        return await self.control.delete_topics(names)

    async def delete_here(
        self, names: list[str], *, internal_too: bool = False
    ) -> dict[str, TopicError | None]:
        outcome: dict[str, TopicError | None] = {}
        doomed: list[Topic] = []
        for name in dict.fromkeys(names):
            topic = self.topics.get(name)
            if topic is None or name in self._deleting:
                outcome[name] = TopicError(
                    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist"
                )
            elif topic.internal and not internal_too:
                outcome[name] = TopicError(42, f"internal topic {name!r} cannot be deleted")
            else:
                doomed.append(topic)
                self._deleting.add(name)
        if not doomed:
            return outcome
        for (moving, _), move in self.moves.items():  # a deleted partition stops moving
            if moving in self._deleting:
                move.mover.cancel()
        loop = asyncio.get_running_loop()
        changes = [{"op": "delete", "name": t.name} for t in doomed]
        work = loop.run_in_executor(self._worker, self.store.commit, changes)
        removed: asyncio.Future[BaseException | None] = loop.create_future()
        work.add_done_callback(functools.partial(self._finish_deletion, doomed, removed))
        failure = await asyncio.shield(removed)
        for topic in doomed:
            outcome[topic.name] = (
                None
                if failure is None
                else TopicError(
                    ErrorCode.KAFKA_STORAGE_ERROR, f"cannot delete {topic.name!r}: {failure}"
                )
            )
        return outcome

    def _finish_deletion(
        self,
        doomed: list[Topic],
        removed: asyncio.Future[BaseException | None],
        work: asyncio.Future[None],
    ) -> None:
        """On the loop once the journal write is done: unregister, then remove the files."""
        self._deleting.difference_update(t.name for t in doomed)
        failure = work.exception() if not work.cancelled() else asyncio.CancelledError()
        if failure is not None:
            storage_failures.log("delete", logging.ERROR, "cannot record deletions: %s", failure)
            removed.set_result(failure)
            return
        for topic in doomed:
            del self.topics[topic.name]
            del self.topics_by_id[topic.topic_id]
            log.info("deleted topic %s", topic.name)
        self._notify_change()
        files = asyncio.get_running_loop().run_in_executor(self._worker, self._remove_files, doomed)
        files.add_done_callback(lambda _: removed.set_result(None))

    def _remove_files(self, doomed: list[Topic]) -> None:
        for topic in doomed:
            for plog in topic.logs():
                path = plog.directory
                plog.delete(move_to=path.with_name(deletion_dir_name(path.name, topic.topic_id)))
                self.log_dirs.count(path.parent, -1)

    # --- cluster mode: mirroring what etcd says ------------------------------------------

    async def adopt(
        self,
        name: str,
        topic_id: uuid.UUID,
        partitions: int,
        configs: dict[str, str],
        hosted: Collection[int] | None = None,
    ) -> Topic:
        """Hold the topic etcd describes: open the logs of its partitions placed here
        (`hosted`; None: all) and journal it.

        Idempotent. A partition placed here since opens a fresh log; one no longer
        placed here (a reassignment that moved it away has completed) has its log
        deleted, as Kafka's StopReplica with delete does: the caller stops replicating
        it first. A local topic of that name with another id is a deleted incarnation
        (this broker was away when it was deleted and recreated): it goes first, files
        and all. Raises TopicError when the files cannot be made.
        """
        existing = self.topics.get(name)
        if existing is not None and existing.topic_id != topic_id:
            log.warning("topic %s was recreated while this broker was away: dropping ours", name)
            await self.forget(name)
            existing = None
        wanted = None if hosted is None else frozenset(hosted)
        loop = asyncio.get_running_loop()
        if existing is None:
            topic = Topic(name, topic_id, self._stored_configs(name, configs))
            (result,) = await loop.run_in_executor(
                self._worker, self._materialize, [(topic, partitions)], wanted
            )
            if isinstance(result, TopicError):
                raise result
            return self._install(*result)
        await self._place(existing, max(partitions, len(existing.partitions)), wanted)
        self.take_configs(name, configs)
        return existing

    async def _place(self, topic: Topic, total: int, hosted: frozenset[int] | None) -> None:
        """Give `topic` `total` partitions with logs for those in `hosted` (None: all):
        new ones opened, those no longer hosted taken out of service at once and their
        files deleted in the worker thread; one journal line."""
        current = len(topic.partitions)

        def placed(index: int) -> bool:
            return hosted is None or index in hosted

        arriving = [i for i in range(current) if topic.partitions[i] is None and placed(i)]
        leaving = [i for i in range(current) if topic.partitions[i] is not None and not placed(i)]
        if total == current and not arriving and not leaving:
            return
        dropped: dict[int, PartitionLog] = {}
        for index in leaving:  # out of service before its files go
            plog = topic.partitions[index]
            assert plog is not None
            move = self.moves.get((topic.name, index))
            if move is not None:
                move.mover.cancel()
            topic.partitions[index] = None
            dropped[index] = plog
        loop = asyncio.get_running_loop()
        try:
            opened, grown = await loop.run_in_executor(
                self._worker,
                self._replace_replicas,
                topic,
                arriving,
                (current, total),
                hosted,
                list(dropped.values()),
            )
        except TopicError:
            for index, plog in dropped.items():  # nothing was recorded: they stay
                topic.partitions[index] = plog
            raise
        for index, plog in opened.items():
            topic.partitions[index] = plog
        topic.partitions.extend(grown)
        if leaving:
            log.info(
                "deleted %d replicas of %s moved away: %s",
                len(leaving),
                topic.name,
                ", ".join(str(i) for i in leaving[:20]) + (" ..." if len(leaving) > 20 else ""),
            )
        self._notify_change()

    def _replace_replicas(
        self,
        topic: Topic,
        arriving: list[int],
        growth: tuple[int, int],
        hosted: frozenset[int] | None,
        dropped: list[PartitionLog],
    ) -> tuple[dict[int, PartitionLog], list[PartitionLog | None]]:
        """Worker thread: open the arriving replicas' and the new partitions' logs, record
        the topic's partitions and placement, then delete the dropped replicas' files."""
        opened: dict[int, PartitionLog] = {}
        try:
            for index in arriving:
                (plog,) = self._open_partitions(topic, index, index + 1)
                assert plog is not None
                opened[index] = plog
            grown = self._open_partitions(topic, growth[0], growth[1], hosted)
        except TopicError:
            self._discard(list(opened.values()))
            raise
        change: dict[str, Any] = {"op": "partitions", "name": topic.name, "partitions": growth[1]}
        if hosted is not None:
            change["hosted"] = sorted(i for i in hosted if i < growth[1])
        try:
            self.store.commit([change])
        except OSError as exc:
            self._discard([*opened.values(), *grown])
            raise TopicError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot record the placement of {topic.name}: {exc}"
            ) from exc
        for plog in dropped:
            path = plog.directory
            plog.delete(move_to=path.with_name(deletion_dir_name(path.name, topic.topic_id)))
            self.log_dirs.count(path.parent, -1)
        return opened, grown

    async def forget(self, name: str) -> None:
        """Drop a topic etcd no longer has (internal ones too), files and all."""
        outcome = await self.delete_here([name], internal_too=True)
        failure = outcome.get(name)
        if failure is not None and failure.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise failure

    def take_configs(self, name: str, stored: dict[str, str]) -> None:
        """A topic's configs as the cluster stores them: checked as stored values are
        (a bad one is reported and its default used), then applied."""
        topic = self.topics.get(name)
        if topic is None:
            return
        clean = self._stored_configs(name, stored)
        if clean != topic.configs:
            self.apply_configs(topic, clean)

    def apply_configs(self, topic: Topic, clean: dict[str, str]) -> None:
        """Take configs already checked (and, in a cluster, already stored in etcd)."""
        log_config = self._build_log_config(
            resolve_topic_configs(clean, self.config, internal=topic.internal)
        )
        self.store.commit([{"op": "configs", "name": topic.name, "configs": clean}])
        topic.configs = clean
        for plog in topic.logs():
            plog.config = log_config

    # --- changing -----------------------------------------------------------------------

    async def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
        if topic is None or name in self._deleting:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        if topic.internal:
            # Group routing is hash % partition count: more partitions would move every
            # group's coordinator state out of reach after the next restart.
            raise TopicError(
                ErrorCode.POLICY_VIOLATION,
                f"the partition count of internal topic {name!r} is fixed",
            )
        current = len(topic.partitions)
        if total <= current:
            raise TopicError(
                37,  # INVALID_PARTITIONS
                f"topic {name!r} has {current} partitions; the new count must be larger: {total}",
            )
        if total > MAX_PARTITIONS:
            raise TopicError(37, f"{total} partitions is more than one node should hold")
        if validate_only or name in self._pending:
            return
        await self.control.add_partitions(name, total)

    async def add_partitions_here(self, name: str, total: int) -> None:
        """Open a topic's new partitions on this node (a lone node's decision)."""
        topic = self.topics[name]
        current = len(topic.partitions)
        loop = asyncio.get_running_loop()
        self._pending[name] = loop.create_future()
        work = loop.run_in_executor(
            self._worker, self._open_and_record_partitions, topic, current, total
        )

        def finish(work: asyncio.Future[list[PartitionLog]]) -> None:
            pending = self._pending.pop(name)
            if work.cancelled() or work.exception() is not None:
                pending.set_result(
                    TopicError(ErrorCode.KAFKA_STORAGE_ERROR, "adding partitions failed")
                )
                return
            topic.partitions.extend(work.result())
            log.info("topic %s now has %d partitions", name, total)
            pending.set_result(topic)
            self._notify_change()

        work.add_done_callback(finish)
        try:
            await asyncio.shield(work)
        except TopicError:
            raise
        except Exception as exc:
            raise TopicError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"adding partitions failed: {exc}"
            ) from exc

    def _open_and_record_partitions(
        self, topic: Topic, current: int, total: int
    ) -> list[PartitionLog]:
        logs = self._open_partitions(topic, current, total)
        try:
            self.store.commit([{"op": "partitions", "name": topic.name, "partitions": total}])
        except OSError as exc:
            self._discard(logs)
            raise TopicError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot record new partitions: {exc}"
            ) from exc
        return logs

    def alter_configs(
        self,
        name: str,
        configs: dict[str, str | None],
        *,
        incremental: bool,
        validate_only: bool = False,
    ) -> dict[str, str]:
        """Replace (AlterConfigs) or patch (IncrementalAlterConfigs; None deletes) topic
        configs; returns the new overrides. Everything is checked before anything is
        written: the new set in full, and for internal topics, that only
        INTERNAL_TOPIC_ALTERABLE_CONFIGS change."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic {name!r} does not exist")
        updated = dict(topic.configs) if incremental else {}
        for key, value in configs.items():
            if value is None:
                updated.pop(key, None)
            else:
                try:  # what a client sends gets Kafka's full checks, even on internal topics
                    topic_config_value(key, value)
                except ConfigError as exc:
                    raise TopicError(ErrorCode.INVALID_CONFIG, str(exc)) from None
                updated[key] = value
        clean = self.validate_configs(updated, internal=topic.internal)
        if topic.internal:
            self._check_internal_change(topic, clean)
        if validate_only:
            return clean
        try:
            self.apply_configs(topic, clean)
        except OSError as exc:
            raise TopicError(
                ErrorCode.KAFKA_STORAGE_ERROR, f"cannot record configs: {exc}"
            ) from exc
        return clean

    @staticmethod
    def _check_internal_change(topic: Topic, new: dict[str, str]) -> None:
        allowed = INTERNAL_TOPIC_ALTERABLE_CONFIGS | INTERNAL_TOPIC_EXTRA_ALTERABLE.get(
            topic.name, frozenset()
        )
        changed = {
            k for k in topic.configs.keys() | new.keys() if topic.configs.get(k) != new.get(k)
        }
        refused = sorted(changed - allowed)
        if refused:
            raise TopicError(
                ErrorCode.POLICY_VIOLATION,
                f"configs {', '.join(refused)} of internal topic {topic.name!r} cannot be "
                f"changed; these can: {', '.join(sorted(allowed))}",
            )

    def _notify_change(self) -> None:
        for listener in self.change_listeners:
            try:
                listener()
            except Exception:  # a listener must never fail a topic operation
                log.exception("topic change listener failed")

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self.topics.values()))

    def enforce_retention(self) -> int:
        now = self.now_ms()
        return sum(p.enforce_retention(now) for t in self for p in t.logs())

    def compact(self) -> int:
        """One cleaner pass over compacted partitions; returns how many were compacted."""
        now = self.now_ms()
        done = 0
        for topic in self:
            for plog in topic.logs():
                if plog.config.compact_enabled and plog.compact(now).ran:
                    done += 1
        return done

    # --- moving between log directories ---------------------------------------------------

    async def move_replica(self, topic: str, index: int, path: str) -> int:
        """Start moving a partition to the log directory `path` (AlterReplicaLogDirs).

        Returns Kafka's error code for it, as ReplicaManager.alterReplicaLogDirs answers:
        0 once the move has started (it continues in the background, and
        DescribeLogDirs shows the copy as the future replica) or when the partition is
        there already; LOG_DIR_NOT_FOUND for a path that is no log directory,
        KAFKA_STORAGE_ERROR for a failed one, REPLICA_NOT_AVAILABLE for a partition
        this broker does not hold. A move to another directory replaces one in progress.
        """
        target = self.log_dirs.find(path)
        if target is None:
            return ErrorCode.LOG_DIR_NOT_FOUND
        if not target.online:
            return ErrorCode.KAFKA_STORAGE_ERROR
        plog = self.partition(topic, index)
        if plog is None or topic in self._deleting:
            return ErrorCode.REPLICA_NOT_AVAILABLE
        key = (topic, index)
        current = self.moves.get(key)
        if current is not None:
            if current.target is target:
                return 0
            current.mover.cancel()
            await asyncio.shield(current.finished)
            if self.partition(topic, index) is not plog:
                return ErrorCode.REPLICA_NOT_AVAILABLE
        if plog.directory.parent == target.path:
            return 0
        loop = asyncio.get_running_loop()
        mover = DirMove(plog, target.path)
        move = ReplicaMove(topic, index, target, mover, loop.create_future())
        self.moves[key] = move
        self.log_dirs.count(target.path, +1)  # as Kafka counts a future replica
        log.info("moving %s-%d from %s to %s", topic, index, mover.source.parent, target.path)
        work = loop.run_in_executor(self._mover, mover.run)
        work.add_done_callback(functools.partial(self._finish_move, move))
        return 0

    def _finish_move(self, move: ReplicaMove, work: asyncio.Future[None]) -> None:
        key = (move.topic, move.partition)
        if self.moves.get(key) is move:
            del self.moves[key]
        failure = asyncio.CancelledError() if work.cancelled() else work.exception()
        source = move.mover.source
        if failure is None:
            self.log_dirs.count(source.parent, -1)
            log.info("moved %s-%d from %s to %s", *key, source.parent, move.target.path)
        else:
            self.log_dirs.count(move.target.path, -1)
            if move.mover.cancelled or isinstance(failure, MoveCancelled | asyncio.CancelledError):
                log.info("moving %s-%d to %s stopped: %s", *key, move.target.path, failure)
            else:
                if isinstance(failure, OSError):
                    self._note_dir_failure(failure)
                log.error("moving %s-%d to %s failed: %s", *key, move.target.path, failure)
        move.finished.set_result(failure)

    def log_dir_of(self, plog: PartitionLog) -> LogDir:
        """The log directory a partition's log is in."""
        return self.log_dirs.holding(plog.directory)

    def close(self) -> None:
        """Close every log, in parallel: closing is fsync-bound and fsync releases the GIL."""
        for move in list(self.moves.values()):  # a move cut short leaves its source whole
            move.mover.cancel()
        self._mover.shutdown(wait=True, cancel_futures=True)
        logs = [plog for topic in self for plog in topic.logs()]
        with ThreadPoolExecutor(max_workers=CLOSE_THREADS) as pool:
            for failure in pool.map(_close_quietly, logs):
                if failure is not None:
                    log.error("closing %s failed: %s", failure[0], failure[1])
        self._worker.shutdown(wait=True)
        self.store.close()
        self.log_dirs.release()  # last: every file of every directory is closed
