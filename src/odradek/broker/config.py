"""Broker settings, by their Kafka names.

Every setting has Kafka's name and (where it makes sense for one node) Kafka's
default. `odradek serve --set name=value` overrides any of them; an unknown
name or a value of the wrong type is an error at start-up, not a surprise later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INT = "int"
LONG = "long"
BOOL = "boolean"
STRING = "string"
LIST = "list"
DOUBLE = "double"


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    type: str
    default: Any
    doc: str
    topic_name: str | None = None  # the per-topic override of this broker default


_SETTINGS = (
    Setting("node.id", INT, 0, "Id of this broker in Metadata responses."),
    Setting("cluster.id", STRING, "", "Cluster id; generated once and kept in the data dir."),
    Setting(
        "num.partitions", INT, 1, "Partitions of an auto-created topic, or of CreateTopics with -1."
    ),
    Setting(
        "auto.create.topics.enable", BOOL, True, "Create a topic on first Metadata/Produce use."
    ),
    Setting("default.replication.factor", INT, 1, "Replication factor reported (one node: 1)."),
    Setting(
        "message.max.bytes", INT, 1048588, "Largest record batch accepted.", "max.message.bytes"
    ),
    Setting(
        "message.decompressed.max.bytes",
        INT,
        16777216,
        "Most one compressed record batch may inflate to; a larger one is refused with "
        "RECORD_LIST_TOO_LARGE (no Kafka equivalent).",
    ),
    Setting("socket.request.max.bytes", INT, 104857600, "Largest request frame accepted."),
    Setting(
        "log.segment.bytes", INT, 1073741824, "Segment file size before a roll.", "segment.bytes"
    ),
    Setting("log.roll.ms", LONG, 604800000, "Segment age before a roll.", "segment.ms"),
    Setting(
        "log.retention.ms",
        LONG,
        604800000,
        "Delete segments older than this (-1: never).",
        "retention.ms",
    ),
    Setting(
        "log.retention.bytes",
        LONG,
        -1,
        "Delete oldest segments past this size (-1: never).",
        "retention.bytes",
    ),
    Setting("log.retention.check.interval.ms", LONG, 300000, "How often retention runs."),
    Setting(
        "log.index.interval.bytes",
        INT,
        4096,
        "Bytes between offset index entries.",
        "index.interval.bytes",
    ),
    Setting(
        "log.flush.interval.messages",
        LONG,
        2**63 - 1,
        "fsync after this many messages (acknowledged writes are in the page cache already).",
        "flush.messages",
    ),
    Setting("log.flush.interval.ms", LONG, 2**63 - 1, "fsync after this long.", "flush.ms"),
    Setting(
        "log.message.timestamp.type",
        STRING,
        "CreateTime",
        "CreateTime or LogAppendTime.",
        "message.timestamp.type",
    ),
    Setting("log.cleanup.policy", LIST, "delete", "delete, compact, or both.", "cleanup.policy"),
    Setting(
        "log.cleaner.delete.retention.ms",
        LONG,
        86400000,
        "How long compaction keeps tombstones.",
        "delete.retention.ms",
    ),
    Setting(
        "log.cleaner.min.cleanable.ratio",
        DOUBLE,
        0.5,
        "Compact a log once this share of it is uncompacted.",
        "min.cleanable.dirty.ratio",
    ),
    Setting("log.cleaner.backoff.ms", LONG, 15000, "How often compacted topics are checked."),
    Setting(
        "log.max.open.files",
        INT,
        1000,
        "Segment files open at once across all partitions; the least recently used idle "
        "one is closed beyond this (no Kafka equivalent).",
    ),
    Setting("offsets.topic.num.partitions", INT, 50, "Partitions of __consumer_offsets."),
    Setting("offsets.topic.segment.bytes", INT, 104857600, "Segment size of __consumer_offsets."),
    Setting(
        "offsets.retention.minutes",
        INT,
        10080,
        "Committed offsets of empty groups expire after this.",
    ),
    Setting(
        "group.initial.rebalance.delay.ms",
        INT,
        3000,
        "Wait for more members before the first rebalance.",
    ),
    Setting(
        "group.min.session.timeout.ms", INT, 6000, "Smallest session timeout a member may ask for."
    ),
    Setting(
        "group.max.session.timeout.ms",
        INT,
        1800000,
        "Largest session timeout a member may ask for.",
    ),
    Setting("group.max.size", INT, 2**31 - 1, "Most members in one group."),
    Setting("fetch.max.bytes", INT, 57671680, "Largest Fetch response."),
    Setting("connections.max.idle.ms", LONG, 600000, "Close connections idle this long."),
)

SETTINGS: dict[str, Setting] = {s.name: s for s in _SETTINGS}
TOPIC_SETTINGS: dict[str, Setting] = {s.topic_name: s for s in _SETTINGS if s.topic_name}


class ConfigError(ValueError):
    """A setting name or value that cannot be used."""


def parse_value(setting: Setting, raw: str) -> Any:
    raw = raw.strip()
    try:
        if setting.type in (INT, LONG):
            return int(raw)
        if setting.type == DOUBLE:
            return float(raw)
        if setting.type == BOOL:
            lowered = raw.lower()
            if lowered not in ("true", "false"):
                raise ValueError(raw)
            return lowered == "true"
    except ValueError:
        raise ConfigError(f"{setting.name} expects a {setting.type}, got {raw!r}") from None
    if setting.name.endswith("timestamp.type") and raw not in ("CreateTime", "LogAppendTime"):
        raise ConfigError(f"{setting.name} must be CreateTime or LogAppendTime, got {raw!r}")
    if setting.name.endswith("cleanup.policy"):
        parts = [p.strip() for p in raw.split(",") if p.strip()]
        if not parts or any(p not in ("delete", "compact") for p in parts):
            raise ConfigError(f"{setting.name} must be delete, compact or both, got {raw!r}")
        return ",".join(parts)
    return raw


def format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class BrokerConfig:
    """Effective broker settings: defaults overridden by explicit values."""

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self._explicit: dict[str, Any] = {}
        for name, value in (overrides or {}).items():
            self.set(name, value)

    def set(self, name: str, value: Any) -> None:
        setting = SETTINGS.get(name)
        if setting is None:
            if name == "log.retention.hours":
                self._explicit["log.retention.ms"] = int(value) * 3600000
                return
            if name == "log.retention.minutes":
                self._explicit["log.retention.ms"] = int(value) * 60000
                return
            raise ConfigError(f"unknown broker setting {name!r}")
        self._explicit[name] = parse_value(setting, value) if isinstance(value, str) else value

    @classmethod
    def from_assignments(cls, assignments: list[str]) -> BrokerConfig:
        """From `key=value` strings, as given to `--set`."""
        config = cls()
        for item in assignments:
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"--set expects key=value, got {item!r}")
            config.set(name.strip(), value)
        return config

    def __getitem__(self, name: str) -> Any:
        if name in self._explicit:
            return self._explicit[name]
        return SETTINGS[name].default

    def is_default(self, name: str) -> bool:
        return name not in self._explicit

    def items(self) -> list[tuple[Setting, Any]]:
        return [(s, self[s.name]) for s in _SETTINGS]
