"""Client settings with Kafka's names and defaults.

Settings are given by keyword with ``_`` for ``.`` (``linger_ms=5``), or as a
dict with Kafka's dotted names (``{"linger.ms": 5}``), or both (keywords win).
An unknown name is a ``ConfigError``, never silently ignored. Defaults are the
Java client's (Kafka 3.x/4.x), noted where they differ between the two.

Every setting listed here is honoured by the client, except those marked
"group" in ``ConsumerConfig``, which the consumer group coordinator uses.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

from odradek.client.errors import ConfigError
from odradek.protocol.jaas import JaasError, parse_jaas
from odradek.protocol.scram import MECHANISMS

_client_ids = itertools.count(1)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", *MECHANISMS)

# Java / librdkafka names (dots already turned into underscores) -> this client's names.
SETTING_ALIASES = {
    "sasl_mechanisms": "sasl_mechanism",  # librdkafka
    "sasl_username": "sasl_plain_username",  # librdkafka
    "sasl_password": "sasl_plain_password",  # librdkafka
    "ssl_ca_location": "ssl_cafile",  # librdkafka
    "ssl_certificate_location": "ssl_certfile",  # librdkafka
    "ssl_key_location": "ssl_keyfile",  # librdkafka
    "ssl_key_password": "ssl_password",  # Java, librdkafka
    "ssl_truststore_location": "ssl_cafile",  # Java, with ssl.truststore.type=PEM
    "ssl_keystore_location": "ssl_certfile",  # Java, PEM keystore: key and chain in one file
}


@dataclass
class CommonConfig:
    """Settings every client has."""

    bootstrap_servers: str | list[str] = ""
    client_id: str = ""
    request_timeout_ms: int = 30_000
    metadata_max_age_ms: int = 300_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    reconnect_backoff_ms: int = 50
    reconnect_backoff_max_ms: int = 1_000
    socket_connection_setup_timeout_ms: int = 10_000
    send_buffer_bytes: int = 131_072
    receive_buffer_bytes: int = 65_536
    # Security (checked here, used by client/security.py): kafka-python / aiokafka
    # names; the Java and librdkafka dotted names are aliases (SETTING_ALIASES).
    # Secrets stay out of repr().
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)
    sasl_jaas_config: str | None = field(default=None, repr=False)
    ssl_context: Any = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_password: str | None = field(default=None, repr=False)
    ssl_check_hostname: bool = True
    ssl_endpoint_identification_algorithm: str = "https"
    ssl_truststore_type: str = "PEM"
    ssl_keystore_type: str = "PEM"

    # Names set explicitly by the caller (Kafka treats some defaults differently
    # when a setting was chosen rather than defaulted, e.g. enable.idempotence).
    explicitly_set: frozenset[str] = field(default=frozenset(), repr=False, compare=False)

    kind = "client"

    @classmethod
    def from_settings(cls, config: Mapping[str, Any] | None = None, **kwargs: Any) -> Self:
        """Build from a dict of dotted names and/or keywords; unknown names raise."""
        known = {f.name for f in dataclasses.fields(cls) if f.name != "explicitly_set"}
        values: dict[str, Any] = {}
        for source in (config or {}), kwargs:
            for raw_name, value in source.items():
                name = setting_name(raw_name)
                if name not in known:
                    raise ConfigError(
                        f"unknown {cls.kind} setting {raw_name!r}"
                        + (f" (as {name!r})" if name != raw_name else "")
                    )
                values[name] = value
        obj = cls(**values, explicitly_set=frozenset(values))
        if not obj.client_id:
            obj.client_id = f"odradek-{cls.kind}-{next(_client_ids)}"
        obj.validate()
        return obj

    def validate(self) -> None:
        if not self.bootstrap_servers:
            raise ConfigError('bootstrap_servers is required ("host:port,host:port")')
        self._validate_security()
        for name in (
            "request_timeout_ms",
            "retry_backoff_ms",
            "reconnect_backoff_ms",
            "socket_connection_setup_timeout_ms",
        ):
            if int(getattr(self, name)) < 0:
                raise ConfigError(f"{name} must not be negative")
        self.bootstrap_addresses()

    def _validate_security(self) -> None:
        """Check the security settings (TLS and SASL run in client/security.py)."""
        protocol = str(self.security_protocol).upper()
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"security_protocol {self.security_protocol!r} must be one of "
                f"{', '.join(SECURITY_PROTOCOLS)}"
            )
        self.security_protocol = protocol
        for kind in ("truststore", "keystore"):
            store_type = str(getattr(self, f"ssl_{kind}_type")).upper()
            if store_type != "PEM":
                raise ConfigError(
                    f"ssl.{kind}.type={store_type}: Odradek's client reads PEM files only"
                )
        if protocol.startswith("SASL_"):
            mechanism = str(self.sasl_mechanism or "").upper()
            if mechanism not in SASL_MECHANISMS:
                raise ConfigError(
                    f"sasl_mechanism {self.sasl_mechanism!r} is not supported "
                    f"(use {', '.join(SASL_MECHANISMS)})"
                )
            self.sasl_mechanism = mechanism
            username, password = self.sasl_credentials()
            if not username or password is None:
                raise ConfigError(
                    f"{protocol} needs sasl_plain_username and sasl_plain_password "
                    "(or sasl.jaas.config with username and password)"
                )
        if self.ssl_keyfile and not self.ssl_certfile:
            raise ConfigError("ssl_keyfile needs ssl_certfile (the client certificate)")

    def sasl_credentials(self) -> tuple[str | None, str | None]:
        """(username, password): the explicit settings, else sasl.jaas.config's."""
        username, password = self.sasl_plain_username, self.sasl_plain_password
        if (username is None or password is None) and self.sasl_jaas_config:
            try:
                options = parse_jaas(self.sasl_jaas_config).options
            except JaasError as exc:
                raise ConfigError(f"sasl.jaas.config: {exc}") from None
            username = username if username is not None else options.get("username")
            password = password if password is not None else options.get("password")
        return username, password

    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        """``bootstrap_servers`` as (host, port) pairs; port 9092 when omitted."""
        raw = self.bootstrap_servers
        items = raw.split(",") if isinstance(raw, str) else list(raw)
        out: list[tuple[str, int]] = []
        for item in items:
            item = item.strip()
            if not item:
                continue
            if item.startswith("["):  # [ipv6]:port
                host, _, rest = item[1:].partition("]")
                port_text = rest.lstrip(":") or "9092"
            elif item.count(":") == 1:
                host, _, port_text = item.partition(":")
            else:
                host, port_text = item, "9092"
            try:
                port = int(port_text)
            except ValueError:
                raise ConfigError(f"bad port in bootstrap server {item!r}") from None
            out.append((host, port))
        if not out:
            raise ConfigError("bootstrap_servers lists no server")
        return out


def setting_name(raw: str) -> str:
    """A Java / librdkafka dotted name, or a keyword name, as this client's field name."""
    name = raw.replace(".", "_").replace("-", "_")
    return SETTING_ALIASES.get(name, name)


def typed_setting(config_cls: type, raw_name: str, text: str) -> Any:
    """A setting given as text (a properties file, a Spark option) as its field's type."""
    name = setting_name(raw_name)
    fields = config_cls.__dataclass_fields__  # type: ignore[attr-defined]
    if name not in fields:
        raise ConfigError(f"unknown {getattr(config_cls, 'kind', 'client')} setting {raw_name!r}")
    kind = str(fields[name].type).split("|")[0].strip()
    try:
        if kind == "int":
            return int(text)
        if kind == "float":
            return float(text)
    except ValueError:
        raise ConfigError(f"{raw_name} expects a number, got {text!r}") from None
    if kind == "bool":
        lowered = str(text).strip().lower()
        if lowered not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(f"{raw_name} expects true or false, got {text!r}")
        return lowered in ("true", "1", "yes")
    return text


Partitioner = Any  # a Partitioner instance, a callable, or None (see producer.py)
Serializer = Callable[[Any], bytes | None] | None
Deserializer = Callable[[bytes | None], Any] | None


@dataclass
class ProducerConfig(CommonConfig):
    acks: str | int = "all"
    linger_ms: int = 5  # Kafka 4.0 (KIP-1030); 0 in Kafka 3.x
    batch_size: int = 16_384
    compression_type: str = "none"
    enable_idempotence: bool = True
    retries: int = 2_147_483_647
    delivery_timeout_ms: int = 120_000
    max_in_flight_requests_per_connection: int = 5
    max_request_size: int = 1_048_576
    buffer_memory: int = 33_554_432
    max_block_ms: int = 60_000
    partitioner: Partitioner = None
    key_serializer: Serializer = None
    value_serializer: Serializer = None
    send_buffer_bytes: int = 131_072
    receive_buffer_bytes: int = 32_768
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000

    kind = "producer"

    def validate(self) -> None:
        super().validate()
        acks = str(self.acks).lower()
        if acks not in ("all", "-1", "0", "1"):
            raise ConfigError(f"acks must be 'all', -1, 0 or 1, not {self.acks!r}")
        self.acks = "all" if acks in ("all", "-1") else int(acks)
        codec = str(self.compression_type).lower()
        if codec not in ("none", "gzip", "snappy", "lz4", "zstd"):
            raise ConfigError(f"unknown compression_type {self.compression_type!r}")
        self.compression_type = codec
        if self.batch_size < 0 or self.linger_ms < 0 or self.max_request_size <= 0:
            raise ConfigError("batch_size and linger_ms must be >= 0, max_request_size > 0")
        if self.max_in_flight_requests_per_connection < 1:
            raise ConfigError("max_in_flight_requests_per_connection must be at least 1")
        if self.delivery_timeout_ms < self.linger_ms + self.request_timeout_ms:
            raise ConfigError("delivery_timeout_ms must be at least linger_ms + request_timeout_ms")
        # Java: an explicitly enabled idempotence with conflicting settings is an error;
        # the default (enabled) quietly turns off instead.
        conflicts = []
        if self.acks != "all":
            conflicts.append("acks must be 'all'")
        if self.max_in_flight_requests_per_connection > 5:
            conflicts.append("max_in_flight_requests_per_connection must be <= 5")
        if self.retries == 0:
            conflicts.append("retries must be > 0")
        if self.transactional_id is not None:
            # Transactions need idempotence (Java: a conflicting setting is an error).
            if not self.transactional_id:
                raise ConfigError("transactional_id must not be empty")
            if "enable_idempotence" in self.explicitly_set and not self.enable_idempotence:
                raise ConfigError("transactional_id needs enable_idempotence=True")
            if conflicts:
                raise ConfigError("transactional_id needs " + ", ".join(conflicts))
            if self.transaction_timeout_ms <= 0:
                raise ConfigError("transaction_timeout_ms must be positive")
            self.enable_idempotence = True
        if self.enable_idempotence and conflicts:
            if "enable_idempotence" in self.explicitly_set:
                raise ConfigError("enable_idempotence=True needs " + ", ".join(conflicts))
            self.enable_idempotence = False


@dataclass
class ConsumerConfig(CommonConfig):
    group_id: str | None = None
    group_instance_id: str | None = None  # group
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True  # group
    auto_commit_interval_ms: int = 5_000  # group
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 52_428_800
    fetch_max_wait_ms: int = 500
    max_partition_fetch_bytes: int = 1_048_576
    max_poll_records: int = 500
    max_poll_interval_ms: int = 300_000  # group
    session_timeout_ms: int = 45_000  # group
    heartbeat_interval_ms: int = 3_000  # group
    partition_assignment_strategy: list[Any] = field(
        default_factory=lambda: ["range", "cooperative-sticky"]
    )  # group
    # "classic" (JoinGroup / SyncGroup, the default) or "consumer" (KIP-848:
    # ConsumerGroupHeartbeat, assignments computed by the coordinator). With "consumer",
    # session_timeout_ms, heartbeat_interval_ms and partition_assignment_strategy are the
    # broker's business, as in Java 4.x.
    group_protocol: str = "classic"  # group
    group_remote_assignor: str | None = None  # group (consumer protocol): uniform, range
    isolation_level: str = "read_uncommitted"
    check_crcs: bool = True
    exclude_internal_topics: bool = True  # group (pattern subscriptions)
    allow_auto_create_topics: bool = True
    client_rack: str = ""
    default_api_timeout_ms: int = 60_000
    key_deserializer: Deserializer = None
    value_deserializer: Deserializer = None

    kind = "consumer"

    def validate(self) -> None:
        super().validate()
        reset = str(self.auto_offset_reset).lower()
        if reset == "smallest":
            reset = "earliest"
        elif reset == "largest":
            reset = "latest"
        if reset not in ("earliest", "latest", "none"):
            raise ConfigError(
                "auto_offset_reset must be earliest, latest or none, "
                f"not {self.auto_offset_reset!r}"
            )
        self.auto_offset_reset = reset
        level = str(self.isolation_level).lower()
        if level not in ("read_uncommitted", "read_committed"):
            raise ConfigError(f"unknown isolation_level {self.isolation_level!r}")
        self.isolation_level = level
        if self.max_poll_records < 1:
            raise ConfigError("max_poll_records must be at least 1")
        if isinstance(self.partition_assignment_strategy, str):
            self.partition_assignment_strategy = [
                s.strip() for s in self.partition_assignment_strategy.split(",") if s.strip()
            ]
        protocol = str(self.group_protocol).lower()
        if protocol not in ("classic", "consumer"):
            raise ConfigError(f"group_protocol must be classic or consumer, not {protocol!r}")
        self.group_protocol = protocol
        if self.group_remote_assignor is not None and protocol != "consumer":
            raise ConfigError("group_remote_assignor needs group_protocol='consumer'")
        if self.group_id is None and "enable_auto_commit" not in self.explicitly_set:
            self.enable_auto_commit = False  # Java: no group, no auto-commit


@dataclass
class AdminConfig(CommonConfig):
    default_api_timeout_ms: int = 60_000
    retries: int = 2_147_483_647

    kind = "admin"
