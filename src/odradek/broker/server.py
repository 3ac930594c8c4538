"""The asyncio broker: accept connections, split frames, dispatch, answer in order.

Each connection is served one request at a time, as Kafka does (it mutes a
channel until its response is sent): this keeps responses in request order
with no reordering buffer, while requests the client pipelines wait in the
socket. Anything malformed closes that one connection; nothing a peer sends
can stop the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from pathlib import Path
from typing import Any

from odradek.broker import apis  # noqa: F401  (registers every handler)
from odradek.broker.config import BrokerConfig
from odradek.broker.context import RequestContext
from odradek.broker.group_runtime import GroupCoordinatorRuntime
from odradek.broker.metrics import BrokerMetrics
from odradek.broker.registry import REGISTRY, advertised
from odradek.broker.topics import TopicManager
from odradek.broker.waiters import AppendWaiters
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import (
    DecodeError,
    build,
    decode_request_body,
    encode_response,
    parse_request_header,
    response_type,
)
from odradek.protocol.framing import FrameDecoder, FrameError

log = logging.getLogger("odradek.broker")

READ_CHUNK = 256 * 1024
UNSUPPORTED_VERSION = 35


class CloseConnection(Exception):
    """The request cannot be answered; close this connection."""


class Broker:
    """One Odradek node: its topics, settings and listener."""

    def __init__(
        self,
        data_dir: Path,
        config: BrokerConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        advertised_host: str | None = None,
        advertised_port: int | None = None,
        metrics_address: tuple[str, int] | None = None,
    ) -> None:
        self.config = config or BrokerConfig()
        self.host = host
        self.port = port
        self.advertised_host = advertised_host or host
        self.advertised_port = advertised_port or port
        self.node_id = int(self.config["node.id"])
        self.topics = TopicManager(Path(data_dir), self.config)
        self.waiters = AppendWaiters()
        self.groups = GroupCoordinatorRuntime(self.topics, self.config)
        self.metrics_address = metrics_address
        self.metrics: BrokerMetrics | None = None
        if metrics_address is not None:
            self.metrics = BrokerMetrics()
            self.groups.event_listeners.append(self.metrics.on_coordinator_events)
        self._api_metrics: dict[int, tuple[Any, Any]] = {}
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._ids = itertools.count(1)
        self._housekeeping: asyncio.Task[None] | None = None
        self.started_at = time.time()

    @property
    def cluster_id(self) -> str:
        return self.topics.cluster_id

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._accept, self.host, self.port, reuse_address=True, backlog=512
        )
        sockets = self._server.sockets or ()
        if sockets and self.port == 0:
            self.port = int(sockets[0].getsockname()[1])
            self.advertised_port = self.port
        self.groups.start()
        if self.metrics is not None and self.metrics_address is not None:
            self.metrics.serve(self, *self.metrics_address)
        self._housekeeping = asyncio.create_task(self._run_housekeeping())
        log.info(
            "odradek broker %d listening on %s:%d (advertised %s:%d), cluster %s",
            self.node_id,
            self.host,
            self.port,
            self.advertised_host,
            self.advertised_port,
            self.cluster_id,
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._housekeeping is not None:
            await asyncio.gather(self._housekeeping, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        await self.groups.stop()
        self.topics.close()
        log.info("odradek broker stopped")

    async def _run_housekeeping(self) -> None:
        """Retention and compaction, each on its own interval, in a worker thread.

        The partition logs make that safe (odradek.log.partition_log, "Threads"):
        reading and rewriting segments, fsyncs and deleting files happen outside
        their locks, so appends and fetches on the event loop go on meanwhile.
        """
        loop = asyncio.get_running_loop()
        retention_every = int(self.config["log.retention.check.interval.ms"]) / 1000
        cleaner_every = int(self.config["log.cleaner.backoff.ms"]) / 1000
        next_retention = loop.time() + retention_every
        next_cleaning = loop.time() + cleaner_every
        while True:
            await asyncio.sleep(max(min(next_retention, next_cleaning) - loop.time(), 0))
            now = loop.time()
            try:
                if now >= next_retention:
                    next_retention = now + retention_every
                    deleted = await asyncio.to_thread(self.topics.enforce_retention)
                    if deleted:
                        log.info("retention deleted %d segments", deleted)
                if now >= next_cleaning:
                    next_cleaning = now + cleaner_every
                    started = time.monotonic()
                    compacted = await asyncio.to_thread(self.topics.compact)
                    if compacted:
                        took = time.monotonic() - started
                        log.info("compacted %d partitions in %.2fs", compacted, took)
            except Exception:
                log.exception("log housekeeping failed")

    # --- connections -------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        connection_id = next(self._ids)
        peer = writer.get_extra_info("peername") or ("?", 0)
        try:
            await self._serve_connection(connection_id, str(peer[0]), reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection %d from %s failed", connection_id, peer)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1)

    async def _serve_connection(
        self,
        connection_id: int,
        client_host: str,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        decoder = FrameDecoder(int(self.config["socket.request.max.bytes"]))
        idle_s = int(self.config["connections.max.idle.ms"]) / 1000
        while True:
            try:
                data = await asyncio.wait_for(reader.read(READ_CHUNK), idle_s)
            except TimeoutError:
                log.debug("connection %d idle for %.0fs, closing", connection_id, idle_s)
                return
            if not data:
                return
            if self.metrics is not None:
                self.metrics.bytes_in.inc(len(data))
            try:
                frames = decoder.feed(data)
                for payload in frames:
                    response = await self._dispatch(connection_id, client_host, payload)
                    if response is not None:
                        writer.write(response)
                        if self.metrics is not None:
                            self.metrics.bytes_out.inc(len(response))
            except (FrameError, DecodeError, CloseConnection) as exc:
                log.warning("closing connection %d from %s: %s", connection_id, client_host, exc)
                with contextlib.suppress(ConnectionError):
                    await writer.drain()
                return
            await writer.drain()

    async def _dispatch(self, connection_id: int, client_host: str, payload: bytes) -> bytes | None:
        header, pos = parse_request_header(payload)
        spec = REGISTRY.get(header.api_key)
        if spec is None:
            raise CloseConnection(f"unknown API key {header.api_key}")
        if not spec.serves(header.api_version):
            if header.api_key == ApiKey.API_VERSIONS:
                return self._api_versions_fallback(header.correlation_id)
            raise CloseConnection(
                f"{spec.key.name} v{header.api_version} is not supported "
                f"(serves v{spec.parse_from}-{spec.max_version})"
            )
        body = decode_request_body(header, payload, pos)
        ctx = RequestContext(self, header, client_host, connection_id)
        started = time.perf_counter()
        try:
            result = spec.handler(ctx, body)
            if spec.is_async:
                result = await result
        except CloseConnection:
            raise
        except Exception as exc:
            log.exception("%s v%d handler failed", spec.key.name, header.api_version)
            if self.metrics is not None:
                self.metrics.request_errors.labels(spec.key.name).inc()
            raise CloseConnection(f"internal error in {spec.key.name}: {exc}") from exc
        if self.metrics is not None:
            self._observe(spec.key, time.perf_counter() - started)
        if result is None:  # acks=0 produce: no response
            return None
        return encode_response(header.api_key, header.api_version, header.correlation_id, result)

    def _observe(self, key: ApiKey, seconds: float) -> None:
        children = self._api_metrics.get(key)
        if children is None:
            assert self.metrics is not None
            name = key.name
            children = (
                self.metrics.requests.labels(name),
                self.metrics.request_seconds.labels(name),
            )
            self._api_metrics[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def _api_versions_fallback(self, correlation_id: int) -> bytes:
        """An ApiVersions version we do not know: answer in v0 with the list (KIP-511)."""
        body = build(
            response_type(ApiKey.API_VERSIONS, 0),
            {
                "error_code": UNSUPPORTED_VERSION,
                "api_keys": [
                    {"api_key": k, "min_version": lo, "max_version": hi}
                    for k, lo, hi in advertised()
                ],
            },
        )
        return encode_response(ApiKey.API_VERSIONS, 0, correlation_id, body)

    def notify_append(self, topic: str, partition: int) -> None:
        self.waiters.notify((topic, partition))


async def run_broker(broker: Broker, stop: asyncio.Event) -> None:
    """Serve until `stop` is set, then shut down cleanly."""
    await broker.start()
    try:
        await stop.wait()
    finally:
        await broker.stop()
