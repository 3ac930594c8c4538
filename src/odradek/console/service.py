"""The console's work apart from the web: its settings, the feeds and the lag history it
starts, and the questions a page asks the cluster directly (a topic's offsets and
configs, messages, an offset reset, what the console's principal may do).

Calls here block (Odradek's client is threaded): the web app runs them in a thread.
On-demand calls share one admin client, one call at a time, each bounded by
``REQUEST_TIMEOUT_MS``.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.console.feed import Poller, Tail, refusal
from odradek.console.lagstore import LagStore, LagStoreError
from odradek.console.model import Model

log = logging.getLogger("odradek.console")

REQUEST_TIMEOUT_MS = 10_000
MESSAGES_MAX_BYTES = 1024 * 1024  # what one page of the message browser may carry
MESSAGES_MAX_COUNT = 500
VALUE_SHOWN_BYTES = 16 * 1024  # a longer key or value is cut on the page (its size shown)
MESSAGE_FORMATS = ("text", "json", "hex")
CLOSE_WAIT_S = 3.0


class ConsoleError(Exception):
    """A request the console cannot serve; the message is for the page, one line."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class ConsoleSettings:
    client: dict[str, Any]  # Odradek client settings: bootstrap_servers, security, ...
    lag_file: Path | None = None  # None: no lag history kept across restarts
    read_only: bool = False
    users_file: Path | None = None
    poll_interval_s: float = 5.0
    sample_interval_s: float = 60.0
    principal: str | None = None  # the SASL user the console connects as, if any
    extra: dict[str, Any] = field(default_factory=dict)


def principal_of(client: dict[str, Any]) -> str | None:
    """The principal a client with these settings authenticates as (SASL), if any."""
    user = client.get("sasl_plain_username")
    if user:
        return f"User:{user}"
    jaas = client.get("sasl_jaas_config")
    if jaas:
        from odradek.protocol.jaas import JaasError, parse_jaas

        try:
            options = parse_jaas(str(jaas)).options
        except (JaasError, AttributeError):
            return None
        if options.get("username"):
            return f"User:{options['username']}"
    return None


class ConsoleService:
    def __init__(self, settings: ConsoleSettings, *, clock: Callable[[], float] = time.time):
        self.settings = settings
        self.model = Model(clock)
        self.store: LagStore | None = None
        self.store_error: str | None = None
        self._stop = threading.Event()
        client = dict(settings.client)
        client.setdefault("client_id", "odradek-console")
        client.setdefault("request_timeout_ms", REQUEST_TIMEOUT_MS)
        client.setdefault("default_api_timeout_ms", REQUEST_TIMEOUT_MS)
        client.setdefault("reconnect_backoff_max_ms", 1_000)
        self.client_settings = client
        self.tail = Tail(self.model, client, self._stop)
        self.poller = Poller(
            self.model,
            client,
            self._stop,
            store=None,
            poll_interval_s=settings.poll_interval_s,
            sample_interval_s=settings.sample_interval_s,
            clock=clock,
        )
        self._admin: Any = None
        self._admin_lock = threading.Lock()
        self._started = False

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the feeds. The lag history opens once the cluster's id is known (a file
        belongs to one cluster)."""
        if self._started:
            return
        self._started = True
        self.poller.on_cluster_id = self._open_store
        self.poller.start()
        self.tail.start()

    def _open_store(self, cluster_id: str | None) -> None:
        if self.store is not None or self.store_error is not None:
            return
        if self.settings.lag_file is None:
            return
        try:
            self.store = LagStore(self.settings.lag_file, cluster_id)
        except LagStoreError as exc:
            self.store_error = str(exc)
            log.error("console: lag history not kept: %s", exc)
            return
        self.poller.store = self.store

    def close(self) -> None:
        """Stop the feeds (waiting a little: they are daemon threads, and one may be in a
        call to a broker that is going away) and write the lag history."""
        self._stop.set()
        self.poller.wake.set()
        for thread in (self.poller, self.tail):
            if thread.is_alive():
                thread.join(timeout=CLOSE_WAIT_S)
        with self._admin_lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None
        if self.store is not None:
            self.store.close()

    # --- on demand ------------------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[Any], Any]) -> Any:
        from odradek.client import AdminClient
        from odradek.client.errors import KafkaError

        with self._admin_lock:
            try:
                if self._admin is None:
                    self._admin = AdminClient(**self.client_settings)
                return fn(self._admin)
            except KafkaError as exc:
                from odradek.cli.common import describe_error

                why = refusal(exc, what)
                raise ConsoleError(
                    why or f"{what}: {describe_error(exc)}", 403 if why else 502
                ) from None

    def describe_group(self, group_id: str) -> bool:
        """Describe one group now (and read its commits where the tail cannot); False when
        the cluster does not know it."""
        self.poller.viewed(group_id)

        def ask(admin: Any) -> bool:
            d = admin.describe_consumer_groups([group_id])[group_id]
            committed = admin.list_consumer_group_offsets(group_id)
            if not d.exists and not committed:
                return False
            self.model.apply_description(d)
            if committed or not self.model.tail_readable:
                g = self.model.group(group_id)
                if g is not None and (not g.committed or not self.model.tail_readable):
                    self.model.apply_committed(
                        group_id, {tp: o.offset for tp, o in committed.items()}
                    )
            return True

        return bool(self._call(f"cannot describe group '{group_id}'", ask))

    def topic(self, name: str) -> dict[str, Any]:
        from odradek.client.admin import ConfigResource
        from odradek.client.errors import UnknownTopicOrPartitionError

        def ask(admin: Any) -> dict[str, Any]:
            try:
                t = admin.describe_topics([name])[name]
            except UnknownTopicOrPartitionError:
                raise ConsoleError(f"topic '{name}' does not exist", 404) from None
            try:
                configs = admin.describe_configs([ConfigResource.topic(name)])
                entries = next(iter(configs.values())).values()
                config_rows = [
                    {
                        "name": e.name,
                        "value": None if e.is_sensitive else e.value,
                        "source": e.source.name.lower(),
                        "default": e.is_default,
                        "sensitive": e.is_sensitive,
                    }
                    for e in sorted(entries, key=lambda e: e.name)
                ]
                config_error = None
            except Exception as exc:  # shown on the page: the partitions still are
                config_rows = []
                config_error = refusal(exc, "cannot read the topic's configs") or str(exc)
            return {
                "topic": name,
                "internal": t.internal,
                "topic_id": str(t.topic_id) if t.topic_id is not None else None,
                "partitions": [
                    {
                        "partition": p.partition,
                        "leader": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replicas": list(p.replicas),
                        "isr": list(p.isr),
                        "offline_replicas": list(p.offline_replicas),
                        "log_start_offset": p.log_start_offset,
                        "log_end_offset": p.log_end_offset,
                        "under_replicated": len(p.isr) < len(p.replicas),
                    }
                    for p in t.partitions
                ],
                "configs": config_rows,
                "configs_error": config_error,
            }

        return dict(self._call(f"cannot describe topic '{name}'", ask))

    def messages(
        self,
        topic: str,
        partition: int,
        *,
        offset: int | None = None,
        timestamp_ms: int | None = None,
        limit: int = 50,
        fmt: str = "text",
        max_bytes: int = MESSAGES_MAX_BYTES,
    ) -> dict[str, Any]:
        """Up to ``limit`` records of one partition from ``offset`` (or the first at or
        after ``timestamp_ms``; default: the last ``limit``), at most ``max_bytes`` of
        keys and values in all."""
        from odradek.client import Consumer, TopicPartition
        from odradek.client.errors import KafkaError

        if fmt not in MESSAGE_FORMATS:
            raise ConsoleError(f"format is one of {', '.join(MESSAGE_FORMATS)}, got {fmt!r}")
        limit = max(1, min(limit, MESSAGES_MAX_COUNT))
        max_bytes = max(1024, min(max_bytes, MESSAGES_MAX_BYTES))
        tp = TopicPartition(topic, partition)
        consumer = Consumer(
            auto_offset_reset="earliest",
            allow_auto_create_topics=False,
            max_partition_fetch_bytes=max_bytes,
            fetch_max_bytes=max_bytes,
            max_poll_records=limit,
            **self.client_settings,
        )
        try:
            parts = consumer.partitions_for_topic(topic, timeout=5.0)
            if not parts:
                raise ConsoleError(f"topic '{topic}' does not exist", 404)
            if partition not in parts:
                raise ConsoleError(
                    f"topic '{topic}' has partitions 0-{max(parts)}, not {partition}", 404
                )
            consumer.assign([tp])
            start = consumer.beginning_offsets([tp], 5.0)[tp]
            end = consumer.end_offsets([tp], 5.0)[tp]
            if timestamp_ms is not None:
                found = consumer.offsets_for_times({tp: timestamp_ms}, 5.0).get(tp)
                position = found.offset if found is not None else end
            elif offset is not None:
                position = offset
            else:
                position = max(end - limit, start)
            position = min(max(position, start), end)
            consumer.seek(tp, position)
            records: list[dict[str, Any]] = []
            used = 0
            truncated_by_bytes = False
            deadline = time.monotonic() + 5.0
            while len(records) < limit and position < end and time.monotonic() < deadline:
                batch = consumer.poll(0.5)
                for r in batch:
                    size = len(r.key or b"") + len(r.value or b"")
                    if records and used + size > max_bytes:
                        truncated_by_bytes = True
                        break
                    used += size
                    records.append(render_record(r, fmt))
                    position = r.offset + 1
                    if len(records) >= limit:
                        break
                if truncated_by_bytes:
                    break
                if not batch:
                    position = max(position, consumer.position(tp, 5.0))
        except KafkaError as exc:
            from odradek.cli.common import describe_error

            why = refusal(exc, f"cannot read topic '{topic}'")
            raise ConsoleError(
                why or f"cannot read {topic}-{partition}: {describe_error(exc)}",
                403 if why else 502,
            ) from None
        finally:
            consumer.close(timeout=1.0)
        return {
            "topic": topic,
            "partition": partition,
            "log_start_offset": start,
            "log_end_offset": end,
            "format": fmt,
            "limit": limit,
            "max_bytes": max_bytes,
            "bytes": used,
            "truncated_by_bytes": truncated_by_bytes,
            "next_offset": position,
            "records": records,
        }

    def reset(
        self,
        group_id: str,
        target: Any,
        scope: dict[str, list[int] | None] | None,
        *,
        execute: bool,
    ) -> dict[str, Any]:
        """Plan (and with ``execute`` commit) new offsets for the group: refused while it
        has members, as ``odradek groups reset-offsets`` and Kafka's tool refuse."""
        from odradek.client import TopicPartition
        from odradek.client.errors import UnknownMemberIdError, UnknownTopicOrPartitionError
        from odradek.offset_reset import ResetError, plan, read_bounds, refusal, scope_partitions

        if execute and self.settings.read_only:
            raise ConsoleError("this console is read-only (--read-only)", 403)

        def ask(admin: Any) -> dict[str, Any]:
            d = admin.describe_consumer_groups([group_id])[group_id]
            why = refusal(group_id, d.state, len(d.members))
            committed = admin.list_consumer_group_offsets(group_id)
            if not d.exists and not committed:
                raise ConsoleError(f"group '{group_id}' does not exist", 404)
            if scope:
                try:
                    described = admin.describe_topics(list(scope), include_offsets=False)
                except UnknownTopicOrPartitionError:
                    raise ConsoleError("a topic of the reset does not exist", 404) from None
                counts = {topic: len(described[topic].partitions) for topic in scope}
                try:
                    tps = [TopicPartition(t, p) for t, p in scope_partitions(scope, counts)]
                except ResetError as exc:
                    raise ConsoleError(str(exc)) from None
            else:
                tps = sorted(committed)
            if not tps:
                raise ConsoleError(
                    f"group '{group_id}' has no committed offsets: name the topics to reset"
                )
            bounds = read_bounds(admin, tps, target)
            try:
                new = plan(
                    group_id, tps, target, bounds, {tp: c.offset for tp, c in committed.items()}
                )
            except ResetError as exc:
                raise ConsoleError(str(exc)) from None
            rows = [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "current_offset": committed[tp].offset if tp in committed else None,
                    "new_offset": offset,
                }
                for tp, offset in sorted(new.items())
            ]
            result = {
                "group": group_id,
                "state": d.state,
                "members": len(d.members),
                "refused": why,
                "executed": False,
                "partitions": rows,
            }
            if execute and why is None:
                errors = []
                for tp, future in admin.alter_consumer_group_offsets(group_id, new).items():
                    try:
                        future.result()
                    except Exception as exc:
                        errors.append((tp, exc))
                if errors:
                    tp, exc = errors[0]
                    if isinstance(exc, UnknownMemberIdError):
                        raise ConsoleError(
                            f"group '{group_id}' became active: offsets were not reset "
                            "(stop its consumers first)",
                            409,
                        )
                    raise ConsoleError(
                        f"could not commit {len(errors)} of {len(new)} offsets: {exc}", 502
                    )
                result["executed"] = True
            return result

        return dict(self._call(f"cannot reset the offsets of group '{group_id}'", ask))

    def access(self) -> dict[str, Any]:
        """Who the console is on the cluster, and what the ACLs let it do."""
        principal = principal_of(self.client_settings)
        out: dict[str, Any] = {
            "principal": principal or "the cluster's anonymous principal (no SASL)",
            "security_protocol": self.client_settings.get("security_protocol", "PLAINTEXT"),
            "acls": None,
            "acls_error": None,
            "offsets_topic": self.model.tail_state,
        }
        if principal is None:
            return out

        def ask(admin: Any) -> Any:
            from odradek.client import AclBindingFilter

            return admin.describe_acls(AclBindingFilter(principal=principal))

        try:
            bindings = self._call("cannot list the ACLs", ask)
        except ConsoleError as exc:
            out["acls_error"] = str(exc)
            return out
        out["acls"] = [
            {
                "resource": f"{b.resource_type.name.lower()}:{b.resource_name}",
                "pattern": b.pattern_type.name.lower(),
                "operation": b.operation.name,
                "permission": b.permission.name,
                "host": b.host,
            }
            for b in bindings
        ]
        return out


def _text(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _hex(data: bytes) -> str:
    return " ".join(data[i : i + 2].hex() for i in range(0, len(data), 2))


def render_bytes(data: bytes | None, fmt: str) -> dict[str, Any]:
    """A key or value for the page: ``text`` (UTF-8; hex where it is not), ``json``
    (pretty; text where it is not JSON), or ``hex``; cut after VALUE_SHOWN_BYTES."""
    if data is None:
        return {"null": True, "size": 0, "format": fmt, "shown": None, "cut": False}
    size = len(data)
    cut = size > VALUE_SHOWN_BYTES
    part = data[:VALUE_SHOWN_BYTES]
    shown_as = fmt
    shown: str
    if fmt == "hex":
        shown = _hex(part)
    else:
        text = _text(part) if not cut else part.decode("utf-8", errors="replace")
        if text is None:
            shown, shown_as = _hex(part), "hex"
        elif fmt == "json" and not cut:
            try:
                shown = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
            except ValueError:
                shown, shown_as = text, "text"
        else:
            shown, shown_as = text, "text"
    return {"null": False, "size": size, "format": shown_as, "shown": shown, "cut": cut}


def render_record(r: Any, fmt: str) -> dict[str, Any]:
    headers = []
    for name, value in r.headers or ():
        text = _text(value) if value is not None else None
        headers.append(
            {
                "name": name,
                "value": text if text is not None or value is None else None,
                "base64": base64.b64encode(value).decode()
                if value is not None and text is None
                else None,
            }
        )
    return {
        "offset": r.offset,
        "timestamp_ms": r.timestamp,
        "timestamp_type": "log append" if r.timestamp_type == 1 else "create",
        "key": render_bytes(r.key, fmt),
        "value": render_bytes(r.value, fmt),
        "headers": headers,
    }
