"""Topics and their partition logs, and the small amount of cluster metadata a
single node keeps (cluster id, topic ids, producer id blocks).

Metadata lives in two JSON files in the data directory, each replaced
atomically (write, fsync, rename) so a crash leaves the old or the new version.
Partition data lives in `<topic>-<partition>/` directories, as in Kafka.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.broker.config import (
    BrokerConfig,
    ConfigError,
    format_value,
    resolve_topic_configs,
    topic_config_value,
    usable_stored_topic_configs,
    validate_topic_configs,
)
from odradek.log import LogConfig, PartitionLog

log = logging.getLogger("odradek.topics")

TOPIC_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__odradek_group_events"})
INVALID_CONFIG = 40
POLICY_VIOLATION = 44
# Configs of internal topics a client may change: housekeeping that changes neither what
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
    "__odradek_group_events": frozenset({"retention.ms", "retention.bytes"})
}
PRODUCER_ID_BLOCK = 1000
CLOSE_THREADS = 8


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
    partitions: list[PartitionLog] = field(default_factory=list)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


def _write_json_atomically(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w") as out:
        json.dump(data, out, indent=1, sort_keys=True)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class TopicManager:
    """Owns every partition log of this node and the metadata that names them."""

    def __init__(
        self,
        data_dir: Path,
        config: BrokerConfig,
        *,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.data_dir = Path(data_dir)
        self.config = config
        self.now_ms = now_ms
        self.topics: dict[str, Topic] = {}
        self.topics_by_id: dict[uuid.UUID, Topic] = {}
        # Called after a topic is created, deleted or grows (the group coordinator's
        # consumer groups assign partitions themselves and must hear of it).
        self.change_listeners: list[Callable[[], None]] = []
        self._meta_path = self.data_dir / "meta.json"
        self._topics_path = self.data_dir / "topics.json"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._meta = self._load_meta()
        self._next_producer_id = self._meta["producer_id_block"]
        self._reserve_producer_ids()
        self._load_topics()

    # --- cluster metadata ---------------------------------------------------------------

    def _load_meta(self) -> dict[str, Any]:
        if self._meta_path.exists():
            meta = json.loads(self._meta_path.read_text())
        else:
            meta = {"producer_id_block": 0}
        configured = self.config["cluster.id"]
        if configured:
            meta["cluster_id"] = configured
        meta.setdefault("cluster_id", uuid.uuid4().hex[:22])
        return meta

    @property
    def cluster_id(self) -> str:
        return str(self._meta["cluster_id"])

    def _reserve_producer_ids(self) -> None:
        # Producer ids are handed out from blocks persisted ahead of use, so a
        # restart never reuses an id a producer may still hold.
        self._meta["producer_id_block"] = self._next_producer_id + PRODUCER_ID_BLOCK
        _write_json_atomically(self._meta_path, self._meta)

    def allocate_producer_id(self) -> int:
        if self._next_producer_id >= self._meta["producer_id_block"]:
            self._reserve_producer_ids()
        pid = self._next_producer_id
        self._next_producer_id += 1
        return int(pid)

    # --- topics ------------------------------------------------------------------------

    def _load_topics(self) -> None:
        if not self._topics_path.exists():
            return
        stored = json.loads(self._topics_path.read_text())
        for name, entry in stored.items():
            topic = Topic(name, uuid.UUID(entry["id"]), self._stored_configs(name, entry))
            log_config = self.log_config(topic)
            for index in range(int(entry["partitions"])):
                topic.partitions.append(
                    PartitionLog.open(
                        self._partition_dir(name, index), log_config, now_ms=self.now_ms
                    )
                )
            self._register(topic)
        for stale in self.data_dir.glob("*-delete"):
            shutil.rmtree(stale, ignore_errors=True)

    def _save_topics(self) -> None:
        _write_json_atomically(
            self._topics_path,
            {
                t.name: {
                    "id": str(t.topic_id),
                    "partitions": len(t.partitions),
                    "configs": t.configs,
                }
                for t in self.topics.values()
            },
        )

    def _register(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.topics_by_id[topic.topic_id] = topic

    def _partition_dir(self, topic: str, partition: int) -> Path:
        return self.data_dir / f"{topic}-{partition}"

    def _stored_configs(self, name: str, entry: dict[str, Any]) -> dict[str, str]:
        """A topic's stored overrides; any that fails today's checks is reported and ignored,
        so no stored value can stop start-up (the default applies until it is set again)."""
        stored = dict(entry.get("configs", {}))
        internal = name in INTERNAL_TOPICS
        clean, problems = usable_stored_topic_configs(stored, self.config, internal=internal)
        for problem in problems:
            log.error(
                "%s: topic %r: ignoring a stored config, its default is used: %s",
                self._topics_path,
                name,
                problem,
            )
        try:
            self._build_log_config(resolve_topic_configs(clean, self.config, internal=internal))
        except ValueError as exc:  # a check the log layer makes and config.py does not
            log.error(
                "%s: topic %r: ignoring every stored config, defaults are used: %s",
                self._topics_path,
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

    @staticmethod
    def _build_log_config(values: dict[str, Any]) -> LogConfig:
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
            raise TopicError(INVALID_CONFIG, str(exc)) from None
        return clean

    def get(self, name: str) -> Topic | None:
        return self.topics.get(name)

    def partition(self, topic: str, index: int) -> PartitionLog | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            return None
        return t.partitions[index]

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
        """Create a topic; `internal_configs` for configs the broker sets on its own topics."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError(36, f"topic {name!r} already exists")  # TOPIC_ALREADY_EXISTS
        if num_partitions == -1:
            num_partitions = int(self.config["num.partitions"])
        if num_partitions < 1:
            raise TopicError(37, f"number of partitions must be at least 1, got {num_partitions}")
        if num_partitions > 100000:
            raise TopicError(37, f"{num_partitions} partitions is more than one node should hold")
        if replication_factor not in (-1, 1):
            raise TopicError(
                38,  # INVALID_REPLICATION_FACTOR
                f"replication factor {replication_factor} is larger than the 1 available broker",
            )
        clean = self.validate_configs(configs or {}, internal=internal_configs)
        topic = Topic(name, uuid.uuid4(), clean)
        if validate_only:
            topic.partitions = []
            return topic
        log_config = self.log_config(topic)
        for index in range(num_partitions):
            topic.partitions.append(
                PartitionLog.open(self._partition_dir(name, index), log_config, now_ms=self.now_ms)
            )
        self._register(topic)
        self._save_topics()
        log.info("created topic %s with %d partitions", name, num_partitions)
        self._notify_change()
        return topic

    def create_internal(self, name: str, num_partitions: int, configs: dict[str, str]) -> Topic:
        existing = self.topics.get(name)
        if existing:
            return existing
        return self.create(name, num_partitions, configs=dict(configs), internal_configs=True)

    def delete(self, name: str) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(3, f"topic {name!r} does not exist")  # UNKNOWN_TOPIC_OR_PARTITION
        if topic.internal:
            raise TopicError(42, f"internal topic {name!r} cannot be deleted")  # INVALID_REQUEST
        del self.topics[name]
        del self.topics_by_id[topic.topic_id]
        self._save_topics()
        for index, plog in enumerate(topic.partitions):
            plog.close()
            path = self._partition_dir(name, index)
            doomed = path.with_name(f"{path.name}.{topic.topic_id.hex}-delete")
            os.replace(path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
        log.info("deleted topic %s", name)
        self._notify_change()

    def add_partitions(self, name: str, total: int, *, validate_only: bool = False) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError(3, f"topic {name!r} does not exist")
        if topic.internal:
            # Group routing is hash % partition count: more partitions would move every
            # group's coordinator state out of reach after the next restart.
            raise TopicError(
                POLICY_VIOLATION, f"the partition count of internal topic {name!r} is fixed"
            )
        current = len(topic.partitions)
        if total <= current:
            raise TopicError(
                37,  # INVALID_PARTITIONS
                f"topic {name!r} has {current} partitions; the new count must be larger: {total}",
            )
        if validate_only:
            return
        log_config = self.log_config(topic)
        for index in range(current, total):
            topic.partitions.append(
                PartitionLog.open(self._partition_dir(name, index), log_config, now_ms=self.now_ms)
            )
        self._save_topics()
        log.info("topic %s now has %d partitions", name, total)
        self._notify_change()

    def _notify_change(self) -> None:
        for listener in self.change_listeners:
            try:
                listener()
            except Exception:  # a listener must never fail a topic operation
                log.exception("topic change listener failed")

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
            raise TopicError(3, f"topic {name!r} does not exist")
        updated = dict(topic.configs) if incremental else {}
        for key, value in configs.items():
            if value is None:
                updated.pop(key, None)
            else:
                try:  # what a client sends gets Kafka's full checks, even on internal topics
                    topic_config_value(key, value)
                except ConfigError as exc:
                    raise TopicError(INVALID_CONFIG, str(exc)) from None
                updated[key] = value
        clean = self.validate_configs(updated, internal=topic.internal)
        if topic.internal:
            self._check_internal_change(topic, clean)
        if validate_only:
            return clean
        log_config = self._build_log_config(
            resolve_topic_configs(clean, self.config, internal=topic.internal)
        )
        topic.configs = clean
        self._save_topics()
        for plog in topic.partitions:
            plog.config = log_config
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
                POLICY_VIOLATION,
                f"configs {', '.join(refused)} of internal topic {topic.name!r} cannot be "
                f"changed; these can: {', '.join(sorted(allowed))}",
            )

    def __iter__(self) -> Iterator[Topic]:
        return iter(list(self.topics.values()))

    def enforce_retention(self) -> int:
        now = self.now_ms()
        return sum(p.enforce_retention(now) for t in self for p in t.partitions)

    def compact(self) -> int:
        """One cleaner pass over compacted partitions; returns how many were compacted."""
        now = self.now_ms()
        done = 0
        for topic in self:
            for plog in topic.partitions:
                if plog.config.compact_enabled and plog.compact(now).ran:
                    done += 1
        return done

    def close(self) -> None:
        """Close every log, in parallel: closing is fsync-bound and fsync releases the GIL."""
        logs = [plog for topic in self for plog in topic.partitions]
        with ThreadPoolExecutor(max_workers=CLOSE_THREADS) as pool:
            for failure in pool.map(_close_quietly, logs):
                if failure is not None:
                    log.error("closing %s failed: %s", failure[0], failure[1])
