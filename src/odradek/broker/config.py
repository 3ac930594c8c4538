"""Broker settings and topic configs, by their Kafka names, validated as Kafka's ConfigDef does.

Every broker setting has Kafka's name and (where it makes sense for one node)
Kafka's default; `odradek serve --set name=value` overrides any of them. Every
topic config Kafka 4.x defines is accepted (Kafka's LogConfig): a topic config
whose default comes from a broker setting names it as its synonym
(`Setting.topic_name`); the few without one are in `_TOPIC_ONLY`.

A value is checked for its type (int32, int64, boolean, double, list) and for
its range or choices (`Setting.validator`) before it is used or stored: an
unknown name or a bad value is a `ConfigError` naming both, at start-up for
broker settings and as INVALID_CONFIG for topic configs. `validate_topic_configs`
also runs Kafka's cross-config checks. Nothing invalid is ever written, and a
stored topic config that no longer passes is reported and ignored when the
broker loads it (`odradek.broker.topics`), so no value can stop start-up.

Some topic configs are stored and described but not acted on by Odradek
(`STORED_ONLY_TOPIC_CONFIGS`, listed in docs/operations.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.broker.event_loop import EVENT_LOOPS

INT = "int"
LONG = "long"
BOOL = "boolean"
STRING = "string"
LIST = "list"
DOUBLE = "double"
PASSWORD = "password"  # a string never shown: DescribeConfigs reports it as sensitive

_TYPE_BOUNDS = {INT: (-(2**31), 2**31 - 1), LONG: (-(2**63), 2**63 - 1)}
_LONG_MAX = 2**63 - 1
MIB = 1024 * 1024
UNLIMITED = 2**31 - 1  # Kafka's Integer.MAX_VALUE default of its connection limits

# --- validators: the range / choice part of Kafka's ConfigDef -----------------------------


class ConfigError(ValueError):
    """A setting name or value that cannot be used; `names` are the configs at fault."""

    def __init__(self, message: str, names: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.names = names


Validator = Callable[[Any], str | None]
"""Takes a typed value; returns why it is invalid, or None."""


@dataclass(frozen=True, slots=True)
class Range:
    """Kafka's `Range.atLeast` / `Range.between`."""

    low: float | None = None
    high: float | None = None

    def __call__(self, value: Any) -> str | None:
        if self.low is not None and value < self.low:
            if self.high is None:
                return f"Value must be at least {_num(self.low)}"
            return f"Value must be between {_num(self.low)} and {_num(self.high)}"
        if self.high is not None and value > self.high:
            if self.low is None:
                return f"Value must be no more than {_num(self.high)}"
            return f"Value must be between {_num(self.low)} and {_num(self.high)}"
        return None

    def __str__(self) -> str:
        low = "..." if self.low is None else _num(self.low)
        high = "..." if self.high is None else _num(self.high)
        return f"[{low},...,{high}]" if self.high is not None else f"[{low},...]"


@dataclass(frozen=True, slots=True)
class OneOf:
    """Kafka's `ValidString.in` (case-sensitive, as Kafka's is)."""

    choices: tuple[str, ...]

    def __call__(self, value: Any) -> str | None:
        if value not in self.choices:
            return f"String must be one of: {', '.join(self.choices)}"
        return None

    def __str__(self) -> str:
        return "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True, slots=True)
class ListOf:
    """Kafka's `ValidList.in`: a list whose items are all allowed; empty only where
    `allow_empty` says so (Kafka 4.1 accepts an empty `cleanup.policy`)."""

    choices: tuple[str, ...]
    allow_empty: bool = False

    def __call__(self, value: Any) -> str | None:
        if not value and not self.allow_empty:
            return "Empty list is not allowed"
        bad = [v for v in value if v not in self.choices]
        if bad:
            return f"Invalid value {bad[0]}: must be one of {', '.join(self.choices)}"
        return None

    def __str__(self) -> str:
        return "[" + ", ".join(self.choices) + "]"


@dataclass(frozen=True, slots=True)
class LevelOrDefault:
    """A compression level: `default` (the codec's own choice) or within [low, high]."""

    default: int
    low: int
    high: int

    def __call__(self, value: Any) -> str | None:
        if value != self.default and not self.low <= value <= self.high:
            return f"Value must be {self.default} or between {self.low} and {self.high}"
        return None

    def __str__(self) -> str:
        return f"[{self.low},...,{self.high}] or {self.default}"


@dataclass(frozen=True, slots=True)
class Only:
    """The one value a single Odradek node supports, and why."""

    value: Any
    why: str

    def __call__(self, value: Any) -> str | None:
        if value != self.value:
            return f"Value must be {format_value(self.value)}: {self.why}"
        return None

    def __str__(self) -> str:
        return format_value(self.value)


class ThrottledReplicas:
    """`*`, or a list of `partition:broker` pairs (Kafka's ThrottledReplicaListValidator)."""

    def __call__(self, value: Any) -> str | None:
        if list(value) == ["*"]:
            return None
        for item in value:
            partition, sep, broker = item.partition(":")
            if not sep or not partition.strip().isdigit() or not broker.strip().isdigit():
                return (
                    "must be the literal '*' or a list of replicas in the form partitionId:brokerId"
                )
        return None

    def __str__(self) -> str:
        return "[partitionId]:[brokerId],[partitionId]:[brokerId],..."


ETCD_HTTPS = "https://"  # an endpoint given so is reached over TLS (etcd.ssl.enable)
ETCD_HTTP = "http://"
ETCD_SCHEMES = (ETCD_HTTP, ETCD_HTTPS)


def etcd_endpoint_scheme(item: str) -> str:
    """The scheme an etcd endpoint is given with ('' for plain HOST:PORT)."""
    return next((s for s in ETCD_SCHEMES if item.startswith(s)), "")


class EtcdEndpoints:
    """HOST:PORT entries, as etcdctl's --endpoints (an optional http:// or https://)."""

    def __call__(self, value: Any) -> str | None:
        for item in value:
            host, sep, port = item.removeprefix(etcd_endpoint_scheme(item)).rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                return f"{item!r} is not HOST:PORT"
        return None

    def __str__(self) -> str:
        return "HOST:PORT,HOST:PORT,..."


ETCD_TLS_FILES = ("etcd.ssl.cafile", "etcd.ssl.certfile", "etcd.ssl.keyfile")


class ClusterName:
    """Letters, digits, '.', '_' and '-': it becomes part of every etcd key."""

    def __call__(self, value: Any) -> str | None:
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", str(value)):
            return "must be 1 to 64 letters, digits, '.', '_' or '-'"
        return None

    def __str__(self) -> str:
        return "[A-Za-z0-9._-]{1,64}"


_VALID_HOST = re.compile(r"[0-9a-zA-Z\-%._:]*")  # Kafka's Utils.validHostPattern


def parse_host_counts(text: str) -> dict[str, int]:
    """`host:count,host:count` as Kafka's Csv.parseCsvMap reads it: entries split at
    commas, each at its last ':' (so IPv6 addresses need no brackets); a ValueError
    says what is wrong. Stricter than Kafka on counts: a whole number, at least 0."""
    counts: dict[str, int] = {}
    for item in re.split(r"\s*,\s*", text.strip()):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        host, count = host.strip(), count.strip()
        if not sep or not host:
            raise ValueError(f"{item!r} is not host:count")
        if not _VALID_HOST.fullmatch(host):
            raise ValueError(f"{host!r} is not a host name or address")
        if not count.isdigit():
            raise ValueError(f"{item!r}: the count must be a whole number, at least 0")
        counts[host] = int(count)
    return counts


class HostCounts:
    """Kafka's max.connections.per.ip.overrides format: `host:count,host:count`."""

    def __call__(self, value: Any) -> str | None:
        try:
            parse_host_counts(str(value))
        except ValueError as exc:
            return str(exc)
        return None

    def __str__(self) -> str:
        return "host:count,host:count,..."


def _num(n: float) -> str:
    return str(int(n)) if float(n).is_integer() else str(n)


def at_least(low: float) -> Range:
    return Range(low=low)


def between(low: float, high: float) -> Range:
    return Range(low=low, high=high)


COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
CLEANUP_POLICIES = ("compact", "delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
# Kafka's names and its assignor class names (the 4.0 default lists the classes).
CONSUMER_GROUP_ASSIGNORS = (
    "uniform",
    "range",
    "org.apache.kafka.coordinator.group.assignor.UniformAssignor",
    "org.apache.kafka.coordinator.group.assignor.RangeAssignor",
)
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


# --- the settings table -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setting:
    name: str
    type: str
    default: Any
    doc: str
    topic_name: str | None = None  # the per-topic override of this broker default
    validator: Validator | None = None  # range or choices, beyond the type


_SETTINGS = (
    Setting("node.id", INT, 0, "Id of this broker in Metadata responses.", None, at_least(0)),
    Setting("cluster.id", STRING, "", "Cluster id; generated once and kept in the data dir."),
    Setting(
        "num.partitions",
        INT,
        1,
        "Partitions of an auto-created topic, or of CreateTopics with -1.",
        None,
        at_least(1),
    ),
    Setting(
        "auto.create.topics.enable", BOOL, True, "Create a topic on first Metadata/Produce use."
    ),
    Setting(
        "default.replication.factor",
        INT,
        1,
        "Replicas of an auto-created topic, or of CreateTopics with -1 (one node: must be 1).",
        None,
        at_least(1),
    ),
    Setting(
        "message.decompressed.max.bytes",
        INT,
        16777216,
        "Most one compressed record batch may inflate to; a larger one is refused with "
        "RECORD_LIST_TOO_LARGE (no Kafka equivalent).",
        None,
        at_least(1024),
    ),
    Setting(
        "message.max.bytes",
        INT,
        1048588,
        "Largest record batch accepted.",
        "max.message.bytes",
        at_least(0),
    ),
    Setting(
        "socket.request.max.bytes",
        INT,
        104857600,
        "Largest request frame accepted.",
        None,
        at_least(1),
    ),
    Setting(
        "log.segment.bytes",
        INT,
        1073741824,
        "Segment file size before a roll.",
        "segment.bytes",
        at_least(MIB),
    ),
    Setting(
        "log.roll.ms", LONG, 604800000, "Segment age before a roll.", "segment.ms", at_least(1)
    ),
    Setting(
        "log.roll.jitter.ms",
        LONG,
        0,
        "Random jitter subtracted from the roll time (stored, not acted on).",
        "segment.jitter.ms",
        at_least(0),
    ),
    Setting(
        "log.retention.ms",
        LONG,
        604800000,
        "Delete segments older than this (-1: never).",
        "retention.ms",
        at_least(-1),
    ),
    Setting(
        "log.retention.bytes",
        LONG,
        -1,
        "Delete oldest segments past this size (-1: never).",
        "retention.bytes",
    ),
    Setting(
        "log.retention.check.interval.ms",
        LONG,
        300000,
        "How often retention runs.",
        None,
        at_least(1),
    ),
    Setting(
        "log.index.interval.bytes",
        INT,
        4096,
        "Bytes between offset index entries.",
        "index.interval.bytes",
        at_least(0),
    ),
    Setting(
        "log.index.size.max.bytes",
        INT,
        10485760,
        "Largest offset index file (stored, not acted on: Odradek's indexes grow as needed).",
        "segment.index.bytes",
        at_least(4),
    ),
    Setting(
        "log.flush.interval.messages",
        LONG,
        _LONG_MAX,
        "fsync after this many messages (acknowledged writes are in the page cache already).",
        "flush.messages",
        at_least(1),
    ),
    Setting(
        "log.flush.interval.ms",
        LONG,
        _LONG_MAX,
        "fsync after this long.",
        "flush.ms",
        at_least(0),
    ),
    Setting(
        "log.segment.delete.delay.ms",
        LONG,
        60000,
        "Wait before deleting a removed segment's file (stored, not acted on: deleted at once).",
        "file.delete.delay.ms",
        at_least(0),
    ),
    Setting(
        "log.preallocate",
        BOOL,
        False,
        "Preallocate segment files (stored, not acted on).",
        "preallocate",
    ),
    Setting(
        "log.message.timestamp.type",
        STRING,
        "CreateTime",
        "CreateTime or LogAppendTime.",
        "message.timestamp.type",
        OneOf(TIMESTAMP_TYPES),
    ),
    Setting(
        "log.message.timestamp.before.max.ms",
        LONG,
        _LONG_MAX,
        "Largest allowed age of a record's CreateTime (stored, not enforced).",
        "message.timestamp.before.max.ms",
        at_least(0),
    ),
    Setting(
        "log.message.timestamp.after.max.ms",
        LONG,
        3600000,
        "Largest allowed lead of a record's CreateTime over the broker clock (stored, not "
        "enforced).",
        "message.timestamp.after.max.ms",
        at_least(0),
    ),
    Setting(
        "log.message.downconversion.enable",
        BOOL,
        True,
        "No-op since Kafka 4.0 (there is no down-conversion); kept for compatibility.",
        "message.downconversion.enable",
    ),
    Setting(
        "log.cleanup.policy",
        LIST,
        "delete",
        "delete, compact, both, or neither (empty: no retention deletion, no compaction: "
        "records are kept forever, as in Kafka 4.1).",
        "cleanup.policy",
        ListOf(CLEANUP_POLICIES, allow_empty=True),
    ),
    Setting(
        "log.cleaner.delete.retention.ms",
        LONG,
        86400000,
        "How long compaction keeps tombstones.",
        "delete.retention.ms",
        at_least(0),
    ),
    Setting(
        "log.cleaner.min.cleanable.ratio",
        DOUBLE,
        0.5,
        "Compact a log once this share of it is uncompacted.",
        "min.cleanable.dirty.ratio",
        between(0, 1),
    ),
    Setting(
        "log.cleaner.min.compaction.lag.ms",
        LONG,
        0,
        "Least time a record stays uncompacted (stored, not acted on).",
        "min.compaction.lag.ms",
        at_least(0),
    ),
    Setting(
        "log.cleaner.max.compaction.lag.ms",
        LONG,
        _LONG_MAX,
        "Most time a record may stay uncompacted (stored, not acted on).",
        "max.compaction.lag.ms",
        at_least(1),
    ),
    Setting(
        "log.cleaner.enable",
        BOOL,
        True,
        "Run the log cleaner. false: compacted topics, __consumer_offsets included, are never "
        "compacted and grow without bound (as Kafka warns).",
    ),
    Setting(
        "log.cleaner.backoff.ms",
        LONG,
        15000,
        "How often compacted topics are checked.",
        None,
        at_least(0),
    ),
    Setting(
        "log.local.retention.ms",
        LONG,
        -2,
        "Local retention with tiered storage (-2: retention.ms); stored, not acted on.",
        "local.retention.ms",
        at_least(-2),
    ),
    Setting(
        "log.local.retention.bytes",
        LONG,
        -2,
        "Local retention with tiered storage (-2: retention.bytes); stored, not acted on.",
        "local.retention.bytes",
        at_least(-2),
    ),
    Setting(
        "remote.log.storage.system.enable",
        BOOL,
        False,
        "Tiered storage; Odradek has none, so topics cannot enable remote.storage.enable.",
        None,
        Only(False, "Odradek has no tiered storage"),
    ),
    Setting(
        "compression.type",
        STRING,
        "producer",
        "Codec batches are stored with: producer (as sent), uncompressed, gzip, snappy, lz4 "
        "or zstd (batches are recompressed on produce).",
        "compression.type",
        OneOf(COMPRESSION_TYPES),
    ),
    Setting(
        "compression.gzip.level",
        INT,
        -1,
        "gzip level when the broker compresses (-1: the codec's default).",
        "compression.gzip.level",
        LevelOrDefault(-1, 1, 9),
    ),
    Setting(
        "compression.lz4.level",
        INT,
        9,
        "lz4 level when the broker compresses.",
        "compression.lz4.level",
        between(1, 17),
    ),
    Setting(
        "compression.zstd.level",
        INT,
        3,
        "zstd level when the broker compresses.",
        "compression.zstd.level",
        between(-131072, 22),
    ),
    Setting(
        "min.insync.replicas",
        INT,
        1,
        "In-sync replicas an acks=all write needs (cluster mode; one node: always met).",
        "min.insync.replicas",
        at_least(1),
    ),
    Setting(
        "unclean.leader.election.enable",
        BOOL,
        False,
        "Elect a leader outside the ISR when none in it is alive (cluster mode; may lose data).",
        "unclean.leader.election.enable",
    ),
    # --- cluster mode (issue 15): unset etcd.endpoints keeps the single embedded node ---
    Setting(
        "etcd.endpoints",
        LIST,
        "",
        "etcd client endpoints HOST:PORT holding the cluster's metadata (every member): the "
        "first that accepts a connection is used, the next whenever it goes away; "
        "https://HOST:PORT for TLS (Odradek; empty: one node, no etcd).",
        None,
        EtcdEndpoints(),
    ),
    Setting(
        "etcd.cluster.name",
        STRING,
        "odradek",
        "Names this cluster's keys in etcd (/odradek/<name>/...), so clusters can share one etcd.",
        None,
        ClusterName(),
    ),
    # etcd over TLS (issue 21), named after Kafka 3.x's zookeeper.ssl.* client settings,
    # for PEM files as etcdctl's --cacert/--cert/--key (odradek.cluster.etcd_tls).
    Setting(
        "etcd.ssl.enable",
        BOOL,
        False,
        "Reach etcd over TLS (also on when etcd.endpoints are https://). Odradek's setting, "
        "as Kafka's zookeeper.ssl.client.enable.",
    ),
    Setting(
        "etcd.ssl.cafile",
        STRING,
        "",
        "PEM file of the CA certificates etcd's server certificate must chain to (empty: the "
        "system's default roots).",
    ),
    Setting(
        "etcd.ssl.certfile",
        STRING,
        "",
        "PEM client certificate presented to etcd (for etcd's --client-cert-auth; with "
        "etcd.ssl.keyfile; empty: server authentication only).",
    ),
    Setting(
        "etcd.ssl.keyfile",
        STRING,
        "",
        "PEM unencrypted private key of etcd.ssl.certfile.",
    ),
    Setting("broker.rack", STRING, "", "Rack of this broker, for rack-aware replica placement."),
    Setting(
        "broker.session.timeout.ms",
        INT,
        9000,
        "A broker whose etcd lease is not refreshed this long is dead (lease TTL, whole seconds).",
        None,
        at_least(2000),
    ),
    Setting(
        "replica.lag.time.max.ms",
        LONG,
        30000,
        "A follower that has not caught up with the leader this long leaves the ISR.",
        None,
        at_least(1),
    ),
    Setting(
        "replica.fetch.wait.max.ms",
        INT,
        500,
        "Longest a follower's fetch waits at the leader for new data.",
        None,
        at_least(0),
    ),
    Setting(
        "replica.fetch.max.bytes",
        INT,
        1048576,
        "Bytes a follower asks for per partition (the first batch comes whole).",
        None,
        at_least(0),
    ),
    Setting(
        "replica.socket.timeout.ms",
        INT,
        30000,
        "A follower's fetch or leader-epoch request gets an answer within this, or reconnects.",
        None,
        at_least(1),
    ),
    Setting(
        "offsets.topic.replication.factor",
        INT,
        3,
        "Replicas of __consumer_offsets (cluster mode). With fewer live brokers it is not "
        "created and FindCoordinator answers COORDINATOR_NOT_AVAILABLE, as Kafka.",
        None,
        at_least(1),
    ),
    Setting(
        "transaction.state.log.replication.factor",
        INT,
        3,
        "Replicas of __transaction_state (cluster mode). With fewer live brokers it is not "
        "created and FindCoordinator answers COORDINATOR_NOT_AVAILABLE, as Kafka.",
        None,
        at_least(1),
    ),
    Setting(
        "transaction.state.log.min.isr",
        INT,
        2,
        "min.insync.replicas of __transaction_state (cluster mode).",
        None,
        at_least(1),
    ),
    Setting(
        "offsets.topic.num.partitions",
        INT,
        50,
        "Partitions of __consumer_offsets.",
        None,
        at_least(1),
    ),
    Setting(
        "offsets.topic.segment.bytes",
        INT,
        104857600,
        "Segment size of __consumer_offsets.",
        None,
        at_least(1),
    ),
    Setting(
        "transaction.state.log.num.partitions",
        INT,
        50,
        "Partitions of __transaction_state.",
        None,
        at_least(1),
    ),
    Setting(
        "transaction.state.log.segment.bytes",
        INT,
        104857600,
        "Segment size of __transaction_state.",
        None,
        at_least(1),
    ),
    Setting(
        "transaction.max.timeout.ms",
        INT,
        900000,
        "Largest transaction.timeout.ms a producer may ask for (INVALID_TRANSACTION_TIMEOUT "
        "beyond).",
        None,
        at_least(1),
    ),
    Setting(
        "transactional.id.expiration.ms",
        INT,
        604800000,
        "A transactional id idle this long (no transaction open) is forgotten.",
        None,
        at_least(1),
    ),
    Setting(
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        INT,
        3600000,
        "How often idle transactional ids are looked for.",
        None,
        at_least(1),
    ),
    Setting(
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        INT,
        10000,
        "Kafka's scan interval for timed-out transactions; accepted, not acted on: Odradek "
        "aborts each transaction at its own deadline.",
        None,
        at_least(1),
    ),
    Setting(
        "transaction.partition.verification.enable",
        BOOL,
        True,
        "Check a transaction's first write to a partition against its coordinator (KIP-890).",
    ),
    Setting(
        "log.max.open.files",
        INT,
        1000,
        "Segment files open at once across all partitions; the least recently used idle "
        "one is closed beyond this (no Kafka equivalent).",
        None,
        at_least(16),
    ),
    Setting(
        "offsets.retention.minutes",
        INT,
        10080,
        "Committed offsets of empty groups expire after this.",
        None,
        at_least(1),
    ),
    Setting(
        "offsets.retention.check.interval.ms",
        LONG,
        600000,
        "How often expired offsets and empty groups without offsets are removed.",
    ),
    Setting(
        "offsets.commit.timeout.ms",
        INT,
        5000,
        "How long a coordinator's answer waits for its records to be on every in-sync replica "
        "before it is COORDINATOR_NOT_AVAILABLE (Kafka's coordinator write timeout; the "
        "records stay).",
        None,
        at_least(1),
    ),
    Setting(
        "group.initial.rebalance.delay.ms",
        INT,
        3000,
        "Wait for more members before the first rebalance.",
        None,
        at_least(0),
    ),
    Setting(
        "group.min.session.timeout.ms",
        INT,
        6000,
        "Smallest session timeout a member may ask for.",
        None,
        at_least(0),
    ),
    Setting(
        "group.max.session.timeout.ms",
        INT,
        1800000,
        "Largest session timeout a member may ask for.",
        None,
        at_least(0),
    ),
    Setting("group.max.size", INT, 2**31 - 1, "Most members in one group.", None, at_least(1)),
    Setting(
        "group.history.retention.ms",
        LONG,
        7 * 24 * 3_600_000,
        "Group events (the history `odradek groups history` shows) older than this are "
        "deleted; each group keeps at most its last 512 anyway (no Kafka equivalent).",
        None,
        at_least(1),
    ),
    # --- consumer groups (KIP-848, group.protocol=consumer; docs/coordinator.md) ---
    Setting(
        "group.consumer.session.timeout.ms",
        INT,
        45000,
        "A consumer-group member not heard from for this long is fenced.",
        None,
        at_least(1),
    ),
    Setting(
        "group.consumer.heartbeat.interval.ms",
        INT,
        5000,
        "How often consumer-group members heartbeat (sent to them in every response).",
        None,
        at_least(1),
    ),
    Setting(
        "group.consumer.max.size",
        INT,
        2**31 - 1,
        "Most members in one consumer group.",
        None,
        at_least(1),
    ),
    Setting(
        "group.consumer.assignors",
        LIST,
        "uniform,range",
        "Server-side assignors of consumer groups; the first is the default.",
        None,
        ListOf(CONSUMER_GROUP_ASSIGNORS),
    ),
    Setting(
        "group.consumer.migration.policy",
        STRING,
        "bidirectional",
        "Online migration between the classic and consumer protocols: disabled, upgrade, "
        "downgrade or bidirectional.",
        None,
        OneOf(MIGRATION_POLICIES),
    ),
    Setting("fetch.max.bytes", INT, 57671680, "Largest Fetch response.", None, at_least(1024)),
    Setting(
        "max.incremental.fetch.session.cache.slots",
        INT,
        1000,
        "Fetch sessions (KIP-227) the broker keeps; past this, new ones evict idle or"
        " smaller ones, or are not opened.",
        None,
        at_least(0),
    ),
    Setting(
        "fetch.session.cache.max.partitions",
        INT,
        1000000,
        "Partitions all fetch sessions together may cache (an Odradek bound; Kafka has"
        " none): a session that would go past it is not opened, or is closed.",
        None,
        at_least(0),
    ),
    Setting("connections.max.idle.ms", LONG, 600000, "Close connections idle this long.", None),
    # --- connection limits: Kafka's ConnectionQuotas (broker/connection_quotas.py) ---
    Setting(
        "max.connections",
        INT,
        UNLIMITED,
        "Connections over all listeners (listener.name.<l>.max.connections for one"
        " listener); at the limit a listener stops accepting until a connection closes.",
        None,
        at_least(0),
    ),
    Setting(
        "max.connections.per.ip",
        INT,
        UNLIMITED,
        "Connections from one address; past it a new connection is closed at once"
        " (0 needs max.connections.per.ip.overrides).",
        None,
        at_least(0),
    ),
    Setting(
        "max.connections.per.ip.overrides",
        STRING,
        "",
        "Per-address (or host name) exceptions to max.connections.per.ip: host:count,...",
        None,
        HostCounts(),
    ),
    Setting(
        "max.connection.creation.rate",
        INT,
        UNLIMITED,
        "New connections accepted per second over all listeners"
        " (listener.name.<l>.max.connection.creation.rate for one); faster ones wait.",
        None,
        at_least(0),
    ),
    # --- security: listeners, TLS, SASL, ACLs (docs/security.md) ---
    Setting(
        "listeners",
        STRING,
        "",
        "NAME://HOST:PORT,... to listen on (empty: one PLAINTEXT listener at --listen).",
    ),
    Setting(
        "advertised.listeners",
        STRING,
        "",
        "NAME://HOST:PORT,... clients are told to use, per listener (default: listeners).",
    ),
    Setting(
        "listener.security.protocol.map",
        STRING,
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL",
        "Security protocol of each listener name.",
    ),
    Setting(
        "controller.listener.names",
        STRING,
        "",
        "KRaft controller listeners in listeners; Odradek does not open them.",
    ),
    # Which listener brokers use among themselves (replication, transaction markers),
    # as Kafka's KafkaConfig.interBrokerListenerName; docs/security.md "Securing replication".
    Setting(
        "inter.broker.listener.name",
        STRING,
        "",
        "Listener brokers connect to each other on (empty: the one named after "
        "security.inter.broker.protocol); not with security.inter.broker.protocol.",
    ),
    Setting(
        "security.inter.broker.protocol",
        STRING,
        "PLAINTEXT",
        "Security protocol between brokers, when inter.broker.listener.name is not set: "
        "the listener of that name is used.",
    ),
    Setting(
        "sasl.mechanism.inter.broker.protocol",
        STRING,
        "GSSAPI",
        "SASL mechanism a broker authenticates to other brokers with (PLAIN, "
        "SCRAM-SHA-256, SCRAM-SHA-512); must be in the inter-broker listener's "
        "sasl.enabled.mechanisms.",
    ),
    Setting(
        "sasl.enabled.mechanisms",
        LIST,
        "SCRAM-SHA-256,SCRAM-SHA-512",
        "SASL mechanisms of SASL listeners: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
    ),
    Setting(
        "sasl.server.max.receive.size",
        INT,
        524288,
        "Largest frame accepted before a SASL connection has authenticated.",
    ),
    Setting(
        "connections.max.reauth.ms",
        LONG,
        0,
        "SASL session lifetime; clients re-authenticate before it ends (0: no limit).",
    ),
    Setting(
        "failed.authentication.delay.ms",
        INT,
        100,
        "Delay the answer to a failed SASL authentication, and the close after it, by "
        "this long (as Kafka: slows down password guessing).",
    ),
    Setting(
        "connections.authentication.timeout.ms",
        LONG,
        30000,
        "Close a connection that has not finished its TLS handshake and SASL "
        "authentication in this time (Odradek's own setting).",
    ),
    Setting("ssl.keystore.type", STRING, "PEM", "Keystore format: PEM (the only one read)."),
    Setting(
        "ssl.keystore.location",
        STRING,
        "",
        "PEM file with the listener's certificate chain and private key.",
    ),
    Setting("ssl.keystore.certificate.chain", PASSWORD, "", "Certificate chain, inline PEM."),
    Setting("ssl.keystore.key", PASSWORD, "", "Private key, inline PEM."),
    Setting("ssl.keystore.password", PASSWORD, "", "Unused for PEM keystores (Kafka's name)."),
    Setting("ssl.key.password", PASSWORD, "", "Password of an encrypted private key."),
    Setting("ssl.truststore.type", STRING, "PEM", "Truststore format: PEM (the only one read)."),
    Setting(
        "ssl.truststore.location",
        STRING,
        "",
        "PEM file of the CA certificates that sign client certificates.",
    ),
    Setting("ssl.truststore.certificates", PASSWORD, "", "Trusted CA certificates, inline PEM."),
    Setting("ssl.truststore.password", PASSWORD, "", "Unused for PEM truststores (Kafka's name)."),
    Setting(
        "ssl.client.auth",
        STRING,
        "none",
        "Client certificates: none, requested or required (the principal is the subject).",
    ),
    Setting("ssl.enabled.protocols", LIST, "TLSv1.2,TLSv1.3", "TLS versions accepted."),
    Setting(
        "ssl.protocol",
        STRING,
        "TLSv1.3",
        "Kafka's name; TLS versions follow ssl.enabled.protocols.",
    ),
    Setting("ssl.cipher.suites", LIST, "", "Cipher suites, OpenSSL names (empty: defaults)."),
    Setting(
        "ssl.endpoint.identification.algorithm",
        STRING,
        "https",
        "https: a broker connecting to another over TLS checks that the peer's certificate "
        "names the host it connects to (empty: no host name check).",
    ),
    Setting(
        "ssl.principal.mapping.rules",
        STRING,
        "DEFAULT",
        "Map a certificate subject to a principal name: DEFAULT, RULE:pattern/replacement/[LU].",
    ),
    Setting(
        "authorizer.class.name",
        STRING,
        "",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer enforces ACLs (empty: off).",
    ),
    Setting("super.users", STRING, "", "Principals allowed everything, ;-separated (User:admin)."),
    Setting(
        "allow.everyone.if.no.acl.found",
        BOOL,
        False,
        "With an authorizer: allow a resource no ACL mentions.",
    ),
    Setting(
        "queued.max.request.bytes",
        LONG,
        268435456,
        "Bytes of request frames being read or served and of responses being sent, over"
        " all connections; past it a frame over 256 KiB waits for room before it is read"
        " (smaller ones never wait). At least socket.request.max.bytes.",
        None,
        at_least(1048576),
    ),
    Setting(
        "socket.receive.timeout.ms",
        LONG,
        30000,
        "A request frame must arrive whole within this long of its first byte, time"
        " waiting for request memory included (Odradek's own setting: Kafka bounds only"
        " a connection's idle time).",
        None,
        at_least(1),
    ),
    Setting(
        "event.loop",
        STRING,
        "asyncio",
        "The broker's event loop: asyncio's own, uvloop (pip install 'odradek[uvloop]'),"
        " or auto (uvloop if installed). Odradek's own setting: docs/operations.md,"
        ' "Event loop".',
        None,
        OneOf(EVENT_LOOPS),
    ),
    Setting(
        "socket.send.timeout.ms",
        LONG,
        30000,
        "Close a connection whose peer does not take a response within this long.",
        None,
        at_least(1),
    ),
    Setting(
        "auto.create.topics.max.per.request",
        INT,
        1000,
        "Topics one Metadata/Produce request may auto-create; the rest answer"
        " LEADER_NOT_AVAILABLE until a retry creates them.",
        None,
        at_least(1),
    ),
    Setting(
        "max.request.partition.size.limit",
        INT,
        2000,
        "Most partitions one DescribeTopicPartitions response describes (the request's "
        "response_partition_limit may ask for fewer; a cursor continues).",
        None,
        at_least(1),
    ),
)


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    """A topic config: its type and checks, and where its default comes from."""

    name: str
    type: str
    doc: str
    validator: Validator | None
    synonym: str | None  # the broker setting holding the default, if any
    default: Any = None  # the default when there is no broker synonym


# Topic configs with no broker-wide default (Kafka's CONFIGS_WITH_NO_SERVER_DEFAULTS).
_TOPIC_ONLY = (
    TopicConfigDef(
        "remote.storage.enable",
        BOOL,
        "Tiered storage for this topic. Odradek has none: true is refused.",
        None,
        None,
        False,
    ),
    TopicConfigDef(
        "remote.log.copy.disable",
        BOOL,
        "Stop copying to tiered storage (stored, not acted on).",
        None,
        None,
        False,
    ),
    TopicConfigDef(
        "remote.log.delete.on.disable",
        BOOL,
        "Delete tiered data when tiered storage is disabled (stored, not acted on).",
        None,
        None,
        False,
    ),
    TopicConfigDef(
        "leader.replication.throttled.replicas",
        LIST,
        "Replicas throttled on the leader side (one node: stored, not acted on).",
        ThrottledReplicas(),
        None,
        "",
    ),
    TopicConfigDef(
        "follower.replication.throttled.replicas",
        LIST,
        "Replicas throttled on the follower side (one node: stored, not acted on).",
        ThrottledReplicas(),
        None,
        "",
    ),
)

# Topic configs Odradek keeps and describes but does not act on (docs/operations.md).
STORED_ONLY_TOPIC_CONFIGS = frozenset(
    {
        "segment.jitter.ms",
        "segment.index.bytes",
        "file.delete.delay.ms",
        "preallocate",
        "message.timestamp.before.max.ms",
        "message.timestamp.after.max.ms",
        "message.downconversion.enable",
        "min.compaction.lag.ms",
        "max.compaction.lag.ms",
        "local.retention.ms",
        "local.retention.bytes",
        "min.insync.replicas",
        "unclean.leader.election.enable",
        "remote.log.copy.disable",
        "remote.log.delete.on.disable",
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    }
)

# Kafka 4's 1 MiB floor for segment.bytes applies to what clients ask for; the broker's own
# internal topics take offsets.topic.segment.bytes, which Kafka bounds at 1.
_INTERNAL_TOPIC_VALIDATORS: dict[str, Validator] = {"segment.bytes": at_least(1)}

SETTINGS: dict[str, Setting] = {s.name: s for s in _SETTINGS}
TOPIC_CONFIGS: dict[str, TopicConfigDef] = {
    **{
        s.topic_name: TopicConfigDef(s.topic_name, s.type, s.doc, s.validator, s.name)
        for s in _SETTINGS
        if s.topic_name
    },
    **{d.name: d for d in _TOPIC_ONLY},
}

# Settings given in other units, as Kafka accepts them: (name, unit in ms, target).
_UNIT_ALIASES = {
    "log.retention.hours": (3600000, "log.retention.ms"),
    "log.retention.minutes": (60000, "log.retention.ms"),
    "log.roll.hours": (3600000, "log.roll.ms"),
    "log.roll.jitter.hours": (3600000, "log.roll.jitter.ms"),
}

# Kafka's per-listener overrides: listener.name.<listener>.<setting>, for the ssl.* and
# sasl.* settings, those below, and <mechanism>.sasl.jaas.config.
_LISTENER_PREFIXED = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")
_LISTENER_SETTINGS = frozenset(
    {"connections.max.reauth.ms", "max.connections", "max.connection.creation.rate"}
)
_JAAS = re.compile(r"^(plain|scram-sha-256|scram-sha-512)\.sasl\.jaas\.config$")


def listener_setting(name: str) -> Setting | None:
    """The Setting a ``listener.name.<l>.<setting>`` name overrides, or None."""
    match = _LISTENER_PREFIXED.match(name)
    if match is None:
        return None
    base = match.group(2)
    if _JAAS.match(base):
        return Setting(name, PASSWORD, "", "JAAS login module config of one mechanism.")
    setting = SETTINGS.get(base)
    if setting is None or not (base.startswith(("ssl.", "sasl.")) or base in _LISTENER_SETTINGS):
        return None
    return Setting(name, setting.type, setting.default, setting.doc)


# --- parsing and formatting ----------------------------------------------------------------


def _invalid(name: str, raw: Any, reason: str) -> ConfigError:
    return ConfigError(f"Invalid value {raw} for configuration {name}: {reason}", (name,))


def parse_typed(name: str, type_name: str, raw: str) -> Any:
    """A value of `type_name` from its string form, as Kafka's ConfigDef parses it."""
    text = raw.strip()
    if type_name in (INT, LONG):
        try:
            value = int(text)
        except ValueError:
            raise _invalid(name, raw, f"Not a number of type {type_name.upper()}") from None
        low, high = _TYPE_BOUNDS[type_name]
        if not low <= value <= high:
            raise _invalid(name, raw, f"Not a number of type {type_name.upper()}")
        return value
    if type_name == DOUBLE:
        try:
            number = float(text)
        except ValueError:
            raise _invalid(name, raw, "Not a number of type DOUBLE") from None
        if number != number or number in (float("inf"), float("-inf")):
            raise _invalid(name, raw, "Not a finite number")
        return number
    if type_name == BOOL:
        lowered = text.lower()
        if lowered not in ("true", "false"):
            raise _invalid(name, raw, "Expected value to be either true or false")
        return lowered == "true"
    if type_name == LIST:
        return [] if not text else [item.strip() for item in text.split(",")]
    return text


def format_value(value: Any) -> str:
    """The string Kafka shows for a typed value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def check_value(name: str, type_name: str, validator: Validator | None, raw: str) -> Any:
    """Type and range check of one value; the typed value, or a ConfigError."""
    value = parse_typed(name, type_name, raw)
    reason = validator(value) if validator is not None else None
    if reason:
        raise _invalid(name, raw.strip(), reason)
    return value


def parse_value(setting: Setting, raw: str) -> Any:
    """A broker setting's typed value from its string form (type and range checked)."""
    return check_value(setting.name, setting.type, setting.validator, raw)


# --- topic configs -------------------------------------------------------------------------


def topic_config_value(name: str, raw: str, *, internal: bool = False) -> Any:
    """Check one topic config value; `internal` for values the broker sets on its own topics."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        raise ConfigError(f"Unknown topic config name: {name}", (name,))
    validator = definition.validator
    if internal:
        validator = _INTERNAL_TOPIC_VALIDATORS.get(name, validator)
    return check_value(name, definition.type, validator, raw)


def topic_default(name: str, broker: BrokerConfig) -> Any:
    definition = TOPIC_CONFIGS[name]
    if definition.synonym is not None:
        return broker[definition.synonym]
    return parse_typed(name, definition.type, format_value(definition.default))


def resolve_topic_configs(
    overrides: Mapping[str, str], broker: BrokerConfig, *, internal: bool = False
) -> dict[str, Any]:
    """Every topic config's typed value: the override if any, else the broker default.

    Raises ConfigError for the first invalid override or cross-config conflict.
    """
    values = {name: topic_default(name, broker) for name in TOPIC_CONFIGS}
    for name, raw in overrides.items():
        values[name] = topic_config_value(name, raw, internal=internal)
    _check_topic_conflicts(values)
    return values


def validate_topic_configs(
    overrides: Mapping[str, str | None], broker: BrokerConfig, *, internal: bool = False
) -> dict[str, str]:
    """Check a topic's complete set of overrides; return them in canonical form.

    Every name must be a Kafka topic config and every value must pass its type and
    range checks and Kafka's cross-config checks (`ConfigError` otherwise).
    """
    clean: dict[str, str] = {}
    for name, raw in overrides.items():
        if raw is None:
            raise ConfigError(f"Null value not supported for topic config {name}", (name,))
        clean[name] = format_value(topic_config_value(name, raw, internal=internal))
    resolve_topic_configs(clean, broker, internal=internal)
    return clean


def usable_stored_topic_configs(
    overrides: Mapping[str, Any], broker: BrokerConfig, *, internal: bool = False
) -> tuple[dict[str, str], list[str]]:
    """The stored overrides that still pass every check, and why each other one does not.

    For loading: a value stored by an older version (or edited by hand) must never
    stop the broker; the ones left out fall back to their defaults.
    """
    clean: dict[str, str] = {}
    problems: list[str] = []
    for name, raw in overrides.items():
        try:
            clean[name] = format_value(topic_config_value(name, str(raw), internal=internal))
        except ConfigError as exc:
            problems.append(str(exc))
    while True:
        try:
            resolve_topic_configs(clean, broker, internal=internal)
            return clean, problems
        except ConfigError as exc:
            culprits = [n for n in exc.names if n in clean]
            if not culprits:
                raise
            problems.append(str(exc))
            for name in culprits:
                del clean[name]


def _check_topic_conflicts(values: Mapping[str, Any]) -> None:
    """Kafka's LogConfig.validateValues and its tiered-storage checks."""
    min_lag, max_lag = values["min.compaction.lag.ms"], values["max.compaction.lag.ms"]
    if min_lag > max_lag:
        raise ConfigError(
            f"conflict topic config setting min.compaction.lag.ms ({min_lag}) > "
            f"max.compaction.lag.ms ({max_lag})",
            ("min.compaction.lag.ms", "max.compaction.lag.ms"),
        )
    if values["remote.storage.enable"]:
        raise ConfigError(
            "Tiered Storage functionality is disabled in the broker. "
            "Topic cannot be configured with remote log storage.",
            ("remote.storage.enable",),
        )


# --- broker settings -----------------------------------------------------------------------


class BrokerConfig:
    """Effective broker settings: defaults overridden by explicit values."""

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self._explicit: dict[str, Any] = {}
        for name, value in (overrides or {}).items():
            self.set(name, value)
        self.check()

    def set(self, name: str, value: Any) -> None:
        """Set one setting from its string form (or a typed value); type and range checked."""
        raw = value if isinstance(value, str) else format_value(value)
        alias = _UNIT_ALIASES.get(name)
        if alias is not None:
            unit_ms, target = alias
            amount = check_value(name, LONG, None, raw)
            scaled = amount * unit_ms if amount >= 0 else amount  # -1 stays "never"
            self._explicit[target] = parse_value(SETTINGS[target], str(scaled))
            return
        setting = SETTINGS.get(name) or listener_setting(name)
        if setting is None:
            raise ConfigError(f"unknown broker setting {name!r}")
        self._explicit[name] = parse_value(setting, raw)

    @property
    def cluster_mode(self) -> bool:
        """Whether this broker joins a cluster through etcd (else: the single embedded node)."""
        return bool(self["etcd.endpoints"])

    def check(self) -> None:
        """Cross-setting checks (Kafka's validateBrokerLogConfigValues)."""
        if not self.cluster_mode and self["default.replication.factor"] != 1:
            raise ConfigError(
                f"default.replication.factor={self['default.replication.factor']} needs cluster "
                "mode (etcd.endpoints): a single node holds one replica of each partition"
            )
        self._check_etcd_tls()
        min_lag = self["log.cleaner.min.compaction.lag.ms"]
        max_lag = self["log.cleaner.max.compaction.lag.ms"]
        if min_lag > max_lag:
            raise ConfigError(
                f"log.cleaner.min.compaction.lag.ms ({min_lag}) must not exceed "
                f"log.cleaner.max.compaction.lag.ms ({max_lag})"
            )
        low, high = self["group.min.session.timeout.ms"], self["group.max.session.timeout.ms"]
        if low > high:
            raise ConfigError(
                f"group.min.session.timeout.ms ({low}) must not exceed "
                f"group.max.session.timeout.ms ({high})"
            )
        queued, largest = self["queued.max.request.bytes"], self["socket.request.max.bytes"]
        if queued < largest:
            # Kafka's check: a frame larger than the memory pool could never be read.
            raise ConfigError(
                f"queued.max.request.bytes ({queued}) must be at least "
                f"socket.request.max.bytes ({largest})"
            )
        if self["max.connections.per.ip"] == 0 and not parse_host_counts(
            self["max.connections.per.ip.overrides"]
        ):
            raise ConfigError(
                "max.connections.per.ip can be 0 only if max.connections.per.ip.overrides is set"
            )
        session = self["group.consumer.session.timeout.ms"]
        interval = self["group.consumer.heartbeat.interval.ms"]
        if interval >= session:
            raise ConfigError(
                f"group.consumer.heartbeat.interval.ms ({interval}) must be lower than "
                f"group.consumer.session.timeout.ms ({session})"
            )

    def _check_etcd_tls(self) -> None:
        """The etcd.ssl.* settings agree with each other and with the endpoints (the
        files are read when the broker starts: `odradek.cluster.etcd_tls`)."""
        files = [n for n in ETCD_TLS_FILES if self[n]]
        given = files + (["etcd.ssl.enable"] if self["etcd.ssl.enable"] else [])
        endpoints = [str(e) for e in self["etcd.endpoints"]]
        if given and not endpoints:
            raise ConfigError(f"{given[0]} needs etcd.endpoints (cluster mode)", (given[0],))
        schemes = {etcd_endpoint_scheme(e) for e in endpoints} - {""}
        if len(schemes) > 1:
            raise ConfigError(
                "etcd.endpoints mixes http:// and https://: TLS is for every endpoint or none",
                ("etcd.endpoints",),
            )
        if self["etcd.ssl.enable"] and ETCD_HTTP in schemes:
            raise ConfigError(
                "etcd.ssl.enable=true but etcd.endpoints are http://: give https:// or HOST:PORT",
                ("etcd.ssl.enable", "etcd.endpoints"),
            )
        https = ETCD_HTTPS in schemes
        if https and not self.is_default("etcd.ssl.enable") and not self["etcd.ssl.enable"]:
            raise ConfigError(
                "etcd.ssl.enable=false but etcd.endpoints are https://",
                ("etcd.ssl.enable", "etcd.endpoints"),
            )
        if files and not (https or self["etcd.ssl.enable"]):
            raise ConfigError(
                f"{files[0]} is set but TLS to etcd is off: set etcd.ssl.enable=true "
                "or give https:// endpoints",
                (files[0],),
            )
        cert, key = self["etcd.ssl.certfile"], self["etcd.ssl.keyfile"]
        if bool(cert) != bool(key):
            given_one, missing = (
                ("etcd.ssl.certfile", "etcd.ssl.keyfile")
                if cert
                else ("etcd.ssl.keyfile", "etcd.ssl.certfile")
            )
            raise ConfigError(
                f"{given_one} needs {missing} (a client certificate and its key)", (given_one,)
            )

    @classmethod
    def from_assignments(cls, assignments: Iterable[str]) -> BrokerConfig:
        """From `key=value` strings, as given to `--set`."""
        config = cls()
        for item in assignments:
            name, sep, value = item.partition("=")
            if not sep or not name.strip():
                raise ConfigError(f"--set expects key=value, got {item!r}")
            config.set(name.strip(), value)
        config.check()
        return config

    def __getitem__(self, name: str) -> Any:
        if name in self._explicit:
            return self._explicit[name]
        setting = SETTINGS[name]
        if setting.type == LIST:
            return parse_typed(name, LIST, setting.default)
        return setting.default

    def is_default(self, name: str) -> bool:
        return name not in self._explicit

    def items(self) -> list[tuple[Setting, Any]]:
        return [(s, self[s.name]) for s in _SETTINGS]
