"""Option parsing for the ``odradek`` Spark format.

Spark hands a data source its options in a case-insensitive dict whose keys
come back lower-cased (``dict(self.options)`` gives ``"maxoffsetspertrigger"``),
so everything here looks keys up lower-cased. Names and meanings follow
Spark's own Kafka source and sink; see docs/spark.md for the table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.client.config import ConsumerConfig, ProducerConfig, setting_name, typed_setting
from odradek.client.errors import ConfigError

EARLIEST = -2
LATEST = -1

# kafka.* settings Spark's Kafka source refuses, because the source manages them.
_FORBIDDEN_CONSUMER = {
    "auto.offset.reset": "use startingOffsets instead",
    "enable.auto.commit": "the source never auto-commits; use commitOffsetsToGroup",
    "key.deserializer": "keys are always returned as binary",
    "value.deserializer": "values are always returned as binary",
    "interceptor.classes": "not supported",
    "transactional.id": "the sink sets it (deliveryMode=transactional; option transactionalId)",
}
_FORBIDDEN_PRODUCER = {
    "key.serializer": "keys are always written as binary",
    "value.serializer": "values are always written as binary",
    "interceptor.classes": "not supported",
    "transactional.id": "the sink sets it (deliveryMode=transactional; option transactionalId)",
}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {
    None: 1.0,
    "ms": 0.001,
    "s": 1.0,
    "sec": 1.0,
    "m": 60.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}


class OptionError(ValueError):
    """A bad option; the message names it."""


def lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def parse_bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    text = raw.strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise OptionError(f"option {name} must be true or false, not {raw!r}")


def parse_int(
    options: Mapping[str, str], name: str, default: int | None = None, *, minimum: int | None = None
) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(f"option {name} must be at least {minimum}, not {value}")
    return value


def parse_duration_s(text: str, name: str) -> float:
    """``"15m"``, ``"30s"``, ``"500ms"``, ``"2 min"``; a bare number is seconds."""
    m = _DURATION.match(text)
    if not m:
        raise OptionError(f"option {name} must be a duration like 30s, 15m or 500ms, not {text!r}")
    unit = m.group(2).lower() if m.group(2) else None
    return float(m.group(1)) * _DURATION_UNITS[unit]


def _client_settings(
    options: Mapping[str, str], config_cls: type, forbidden: Mapping[str, str], what: str
) -> dict[str, Any]:
    """The ``kafka.*`` options as settings of Odradek's client (dotted names), security
    ones (``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``) included."""
    known = set(config_cls.__dataclass_fields__)
    out: dict[str, Any] = {}
    for key, value in options.items():
        if not key.startswith("kafka."):
            continue
        name = key[len("kafka.") :]
        if name in ("bootstrap.servers", "group.id"):
            continue
        if name in forbidden:
            raise OptionError(
                f"option kafka.{name} is not allowed for the {what}: {forbidden[name]}"
            )
        if setting_name(name) not in known:
            raise OptionError(f"option kafka.{name} is not a setting of Odradek's {what} client")
        out[name] = value
    return out


def security_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The security settings (``security.protocol``, ``sasl.*``, ``ssl.*``) among a
    consumer's or producer's: what the driver's own clients need too."""
    return {k: v for k, v in settings.items() if k.split(".")[0] in ("security", "sasl", "ssl")}


def _coerce(config_cls: type, settings: dict[str, Any]) -> dict[str, Any]:
    """Options arrive as strings; convert to the client's field types."""
    try:
        return {name: typed_setting(config_cls, name, value) for name, value in settings.items()}
    except ConfigError as exc:
        raise OptionError(f"option kafka.{exc}") from None


def bootstrap_servers(options: Mapping[str, str]) -> str:
    servers = options.get("kafka.bootstrap.servers")
    if not servers:
        raise OptionError("option kafka.bootstrap.servers is required")
    return servers


@dataclass(frozen=True)
class Subscription:
    """Exactly one of assign / subscribe / subscribePattern."""

    kind: str  # "assign" | "subscribe" | "subscribepattern"
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[tuple[str, int], ...] = ()

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> Subscription:
        given = [k for k in ("assign", "subscribe", "subscribepattern") if options.get(k)]
        if len(given) != 1:
            raise OptionError(
                "exactly one of the options assign, subscribe, subscribePattern must be set"
                + (f" (got {', '.join(given)})" if given else "")
            )
        kind = given[0]
        raw = options[kind]
        if kind == "subscribe":
            topics = tuple(t.strip() for t in raw.split(",") if t.strip())
            if not topics:
                raise OptionError("option subscribe lists no topic")
            return cls(kind, topics=topics)
        if kind == "subscribepattern":
            try:
                re.compile(raw)
            except re.error as exc:
                raise OptionError(f"option subscribePattern is not a regex: {exc}") from None
            return cls(kind, pattern=raw)
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise OptionError(f'option assign must be JSON like {{"t":[0,1]}}: {exc}') from None
        if not isinstance(parsed, dict) or not all(isinstance(v, list) for v in parsed.values()):
            raise OptionError('option assign must be JSON like {"t":[0,1]}')
        parts = tuple(sorted((str(t), int(p)) for t, ps in parsed.items() for p in ps))
        return cls(kind, topics=tuple(sorted(parsed)), partitions=parts)


def parse_offsets_json(
    raw: str, name: str, *, allow_earliest: bool = True
) -> dict[str, dict[int, int]]:
    """``{"t": {"0": 23, "1": -2}}`` -> ``{"t": {0: 23, 1: -2}}`` (-2 earliest, -1 latest)."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(f"option {name} must be earliest, latest or JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise OptionError(f'option {name} must be JSON like {{"t":{{"0":23}}}}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict):
            raise OptionError(f'option {name} must be JSON like {{"t":{{"0":23}}}}')
        out[str(topic)] = {}
        for p, off in parts.items():
            off = int(off)
            if off == EARLIEST and not allow_earliest:
                raise OptionError(f"option {name} cannot use -2 (earliest)")
            if off < EARLIEST:
                raise OptionError(f"option {name} has a bad offset {off} for {topic}-{p}")
            out[str(topic)][int(p)] = off
    return out


@dataclass(frozen=True)
class OffsetSpec:
    """Where a query starts or a batch read ends.

    ``kind``: "earliest" | "latest" | "offsets" (per partition, -2/-1 allowed) |
    "timestamp" (one timestamp for every partition) | "timestamps" (per partition).
    """

    kind: str
    offsets: dict[str, dict[int, int]] = field(default_factory=dict)
    timestamp: int | None = None
    strategy: str = "error"  # what if no offset has a timestamp that late: error | latest

    @classmethod
    def parse(cls, options: Mapping[str, str], prefix: str, default: str) -> OffsetSpec:
        """``prefix`` is "starting" or "ending"."""
        strategy = options.get(f"{prefix}offsetsbytimestampstrategy", "error").strip().lower()
        if strategy not in ("error", "latest"):
            raise OptionError(
                f"option {prefix}OffsetsByTimestampStrategy must be error or latest, "
                f"not {strategy!r}"
            )
        ts = options.get(f"{prefix}timestamp")
        if ts is not None:
            try:
                value = int(ts)
            except ValueError:
                raise OptionError(
                    f"option {prefix}Timestamp must be milliseconds since the epoch, not {ts!r}"
                ) from None
            return cls("timestamp", timestamp=value, strategy=strategy)
        by_ts = options.get(f"{prefix}offsetsbytimestamp")
        if by_ts is not None:
            return cls(
                "timestamps",
                offsets=parse_offsets_json(by_ts, f"{prefix}OffsetsByTimestamp"),
                strategy=strategy,
            )
        raw = options.get(f"{prefix}offsets", default).strip()
        if raw.lower() in ("earliest", "latest"):
            if prefix == "ending" and raw.lower() == "earliest":
                raise OptionError("option endingOffsets cannot be earliest")
            return cls(raw.lower())
        return cls(
            "offsets",
            offsets=parse_offsets_json(
                raw, f"{prefix}Offsets", allow_earliest=(prefix != "ending")
            ),
        )


@dataclass(frozen=True)
class ReadOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    fail_on_data_loss: bool
    include_headers: bool
    min_partitions: int | None
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    max_trigger_delay_s: float
    poll_timeout_s: float
    fetch_retries: int
    fetch_retry_interval_s: float
    group_id: str | None
    commit_to_group: bool
    consumer_settings: dict[str, Any]  # dotted names for Odradek's Consumer

    @property
    def security(self) -> dict[str, Any]:
        return security_settings(self.consumer_settings)

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, streaming: bool) -> ReadOptions:
        opts = lower(options)
        bootstrap = bootstrap_servers(opts)
        sub = Subscription.parse(opts)
        starting = OffsetSpec.parse(opts, "starting", "latest" if streaming else "earliest")
        if not streaming and starting.kind == "latest":
            raise OptionError("option startingOffsets cannot be latest for a batch query")
        if streaming and any(
            k in opts for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")
        ):
            raise OptionError("ending offsets options are for batch queries only")
        ending = OffsetSpec.parse(opts, "ending", "latest")
        max_per = parse_int(opts, "maxOffsetsPerTrigger", minimum=1)
        min_per = parse_int(opts, "minOffsetsPerTrigger", minimum=1)
        if max_per is not None and min_per is not None and min_per > max_per:
            raise OptionError("minOffsetsPerTrigger must not be larger than maxOffsetsPerTrigger")
        delay = parse_duration_s(opts.get("maxtriggerdelay", "15m"), "maxTriggerDelay")
        poll_ms = parse_int(opts, "kafkaConsumer.pollTimeoutMs", 120_000, minimum=1)
        settings = _coerce(
            ConsumerConfig,
            _client_settings(opts, ConsumerConfig, _FORBIDDEN_CONSUMER, "consumer"),
        )
        group_id = opts.get("kafka.group.id") or None
        commit = parse_bool(opts, "commitOffsetsToGroup", False)
        if commit and not group_id:
            raise OptionError("commitOffsetsToGroup needs kafka.group.id")
        return cls(
            bootstrap=bootstrap,
            subscription=sub,
            starting=starting,
            ending=ending,
            fail_on_data_loss=parse_bool(opts, "failOnDataLoss", True),
            include_headers=parse_bool(opts, "includeHeaders", False),
            min_partitions=parse_int(opts, "minPartitions", minimum=1),
            max_offsets_per_trigger=max_per,
            min_offsets_per_trigger=min_per,
            max_trigger_delay_s=delay,
            poll_timeout_s=poll_ms / 1000,
            fetch_retries=parse_int(opts, "fetchOffset.numRetries", 3, minimum=0),
            fetch_retry_interval_s=parse_int(opts, "fetchOffset.retryIntervalMs", 10, minimum=0)
            / 1000,
            group_id=group_id,
            commit_to_group=commit,
            consumer_settings=settings,
        )


SINK_MODES = ("staged", "direct", "transactional")


@dataclass(frozen=True)
class WriteOptions:
    bootstrap: str
    topic: str | None
    mode: str  # staged (default) | direct | transactional
    staging_location: str | None
    checkpoint_location: str | None
    query_name: str | None
    producer_settings: dict[str, Any]
    transactional_id: str | None = None  # deliveryMode=transactional; default: from the query

    @property
    def security(self) -> dict[str, Any]:
        return security_settings(self.producer_settings)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> WriteOptions:
        opts = lower(options)
        mode = opts.get("deliverymode", "staged").strip().lower()
        if mode not in SINK_MODES:
            raise OptionError(
                f"option deliveryMode must be staged, direct or transactional, not {mode!r}"
            )
        settings = _coerce(
            ProducerConfig,
            _client_settings(opts, ProducerConfig, _FORBIDDEN_PRODUCER, "producer"),
        )
        return cls(
            bootstrap=bootstrap_servers(opts),
            topic=opts.get("topic") or None,
            mode=mode,
            staging_location=opts.get("staginglocation") or None,
            checkpoint_location=opts.get("checkpointlocation") or None,
            query_name=opts.get("queryname") or None,
            producer_settings=settings,
            transactional_id=opts.get("transactionalid") or None,
        )
