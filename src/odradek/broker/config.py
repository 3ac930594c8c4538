"""Broker settings, by their Kafka names.

Every setting has Kafka's name and (where it makes sense for one node) Kafka's
default. `odradek serve --set name=value` overrides any of them; an unknown
name or a value of the wrong type is an error at start-up, not a surprise later.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INT = "int"
LONG = "long"
BOOL = "boolean"
STRING = "string"
LIST = "list"
DOUBLE = "double"
PASSWORD = "password"  # a string never shown: DescribeConfigs reports it as sensitive


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
        "Kafka's name; the broker makes no TLS connections, so it has no effect.",
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
)

SETTINGS: dict[str, Setting] = {s.name: s for s in _SETTINGS}
TOPIC_SETTINGS: dict[str, Setting] = {s.topic_name: s for s in _SETTINGS if s.topic_name}

# Kafka's per-listener overrides: listener.name.<listener>.<setting>, for the ssl.* and
# sasl.* settings, connections.max.reauth.ms, and <mechanism>.sasl.jaas.config.
_LISTENER_PREFIXED = re.compile(r"^listener\.name\.([a-z0-9_]+)\.(.+)$")
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
    if setting is None or not (
        base.startswith(("ssl.", "sasl.")) or base == "connections.max.reauth.ms"
    ):
        return None
    return Setting(name, setting.type, setting.default, setting.doc)


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
        setting = SETTINGS.get(name) or listener_setting(name)
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
