"""The asyncio broker: accept connections, split frames, dispatch, answer in order.

Each connection is served one request at a time, as Kafka does (it mutes a
channel until its response is sent): this keeps responses in request order
with no reordering buffer, while requests the client pipelines wait in the
socket. Anything malformed closes that one connection; nothing a peer sends
can stop the broker.

What one peer can hold is bounded (docs/operations.md, "Limits"): one request
frame and one response at a time; a broker-wide byte budget (Kafka's
`queued.max.request.bytes` memory pool, `broker/budget.py`) that reserves a
large frame's whole size before its payload is read, so frames waiting for
memory hold none and never deadlock, while small frames never wait; a frame
must arrive whole, waiting for memory included, within
`socket.receive.timeout.ms` of its first byte; a response must be taken within
`socket.send.timeout.ms`; and a connection yields to the others after every
request, so a pipelined burst cannot starve them. How many connections a
listener takes is bounded by Kafka's connection limits
(`broker/connection_quotas.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import math
import socket
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from odradek.broker import apis  # noqa: F401  (registers every handler)
from odradek.broker.acceptor import READ_AHEAD_BYTES, Acceptor, start_acceptor
from odradek.broker.budget import ByteBudget
from odradek.broker.config import BrokerConfig, topic_config_value, topic_default
from odradek.broker.connection import Connection
from odradek.broker.connection_quotas import ConnectionQuotas
from odradek.broker.context import CloseConnection, RequestContext
from odradek.broker.control_plane import ControlPlane
from odradek.broker.fetch_sessions import FetchSessionCache
from odradek.broker.group_runtime import GroupCoordinatorRuntime
from odradek.broker.lone_node import LoneNode
from odradek.broker.metrics import BrokerMetrics
from odradek.broker.registry import REGISTRY, advertised
from odradek.broker.security.listeners import Listener, parse_listeners
from odradek.broker.security.manager import BrokerSecurity, SecurityError
from odradek.broker.security.session import Session
from odradek.broker.sending import ShortRegionError, materialize, response_size, send_response
from odradek.broker.topics import TopicManager
from odradek.broker.txn_runtime import TransactionCoordinatorRuntime
from odradek.broker.waiters import AppendWaiters
from odradek.cancelling import cancel_and_wait
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import (
    DecodeError,
    RequestHeader,
    build,
    decode_request_body,
    encode_response,
    parse_request_header,
    response_type,
)
from odradek.protocol.error_response import answer_version, closes_instead, error_response
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch import EncodedResponse
from odradek.protocol.framing import SIZE_PREFIX, FrameError, frame_size
from odradek.ratelog import RateLimitedLog
from odradek.replication.replica import Replica, ReplicaManager

log = logging.getLogger("odradek.broker")

ControlPlaneFactory = Callable[["Broker"], ControlPlane]
LISTEN_BACKLOG = 512
WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::", "[::]"})
# Responses with more top-level entries than this are encoded off the event loop.
LARGE_RESPONSE_ENTRIES = 100
# A frame no larger than a connection's read-ahead buffer never waits for request
# memory (it is counted, but admitted at once): every connection buffers this much
# whatever the budget says, and making small requests wait would let a few peers
# holding large unfinished frames stop every client (as they can in Kafka, whose
# exhausted pool mutes every connection until those frames finish).
SMALL_FRAME_BYTES = READ_AHEAD_BYTES
# After a final answer (a refused authentication), how long the peer may take to close
# first. Closing at once sends TLS's close_notify right behind the answer, and a client
# that meets both in one read may drop the answer (kafka-python 3.0 discards what it
# read in the same burst as the end of the stream).
FINAL_ANSWER_LINGER_S = 1.0


def _entries(response: Any) -> int:
    """How many items the response's top-level lists hold (topics, results, ...)."""
    return sum(
        len(value)
        for name in getattr(response, "__dataclass_fields__", ())
        if isinstance(value := getattr(response, name), tuple)
    )


def _checked_size(size: int, max_frame: int) -> int:
    """A frame's announced size; FrameError (worded by `frame_size`) outside 0..max_frame."""
    if 0 <= size <= max_frame:
        return size
    return frame_size(SIZE_PREFIX.pack(size), max_frame)


def routable_host(listen_host: str) -> str:
    """The host to advertise for a listener: a wildcard bind advertises the host's name.

    Clients connect to what Metadata advertises, and 0.0.0.0 is not an address
    they can reach (Kafka refuses to advertise it too).
    """
    if listen_host in WILDCARD_HOSTS:
        return socket.getfqdn()
    return listen_host


__all__ = ["Broker", "CloseConnection", "run_broker"]


class Broker:
    """One Odradek node: its topics, replicas, coordinators, settings and listeners.

    ``control_plane`` builds what decides what brokers share: by default the node's
    own (`LoneNode`); `odradek.wiring.new_broker` gives a cluster member etcd's.
    """

    def __init__(
        self,
        data_dir: Path | Sequence[Path],  # several: the log directories, metadata in the first
        config: BrokerConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 9092,
        advertised_host: str | None = None,
        advertised_port: int | None = None,
        metrics_address: tuple[str, int] | None = None,
        listeners: list[Listener] | None = None,
        metrics_token: str | None = None,
        control_plane: ControlPlaneFactory = LoneNode,
    ) -> None:
        self.config = config or BrokerConfig()
        # The `listeners` setting, else one PLAINTEXT listener at host:port (`--listen`).
        self.listeners = listeners or parse_listeners(
            self.config,
            (host, port),
            (advertised_host or routable_host(host), advertised_port or port),
        )
        first = self.listeners[0]
        self.host, self.port = first.host, first.port
        self.advertised_host, self.advertised_port = first.advertised_host, first.advertised_port
        # Resolves the per-ip override host names: a bad one fails before any file opens.
        self.connection_quotas = ConnectionQuotas(self.config, [lst.name for lst in self.listeners])
        self.node_id = int(self.config["node.id"])
        # Locks the data directory first (DirectoryInUseError if another broker has it).
        self.topics = TopicManager(data_dir, self.config)
        try:
            self._assemble(self.topics.data_dir, control_plane, metrics_address, metrics_token)
        except BaseException:
            self.topics.close()  # gives the directory back
            raise

    def _assemble(
        self,
        data_dir: Path,
        control_plane: ControlPlaneFactory,
        metrics_address: tuple[str, int] | None,
        metrics_token: str | None,
    ) -> None:
        self.security = BrokerSecurity(Path(data_dir), self.config, self.listeners)
        self._sessions: dict[int, Session] = {}
        self.waiters = AppendWaiters()
        self.fetch_sessions = FetchSessionCache(
            int(self.config["max.incremental.fetch.session.cache.slots"]),
            max_partitions=int(self.config["fetch.session.cache.max.partitions"]),
        )
        # Every partition held here has a replica: its role, leader epoch and high
        # watermark, whatever the control plane that gives it its role.
        self.replicas = ReplicaManager(
            self.node_id,
            min_insync=self._min_insync,
            lag_time_max_s=int(self.config["replica.lag.time.max.ms"]) / 1000,
            propose_isr=self._propose_isr,
            wake=self.notify_append,
        )
        self.control: ControlPlane = control_plane(self)
        self.topics.control = self.control
        self.groups = GroupCoordinatorRuntime(self.topics, self.config, self.replicas, self.control)
        self.txns = TransactionCoordinatorRuntime(
            self.topics, self.config, self.replicas, self.control, self.groups
        )
        self.metrics_address = metrics_address
        self.metrics_token = metrics_token
        self.metrics: BrokerMetrics | None = None
        if metrics_address is not None:
            self.metrics = BrokerMetrics()
            self.groups.event_listeners.append(self.metrics.on_coordinator_events)
        self._api_metrics: dict[int, tuple[Any, Any]] = {}
        self._servers: list[Acceptor] = []
        self._connections: set[asyncio.Task[None]] = set()
        self.budget = ByteBudget(int(self.config["queued.max.request.bytes"]))
        self.failures = RateLimitedLog(log)
        self._ids = itertools.count(1)
        self._housekeeping: asyncio.Task[None] | None = None
        self._started = False
        self.started_at = time.time()

    @property
    def cluster_id(self) -> str:
        return self.control.cluster_id

    def _min_insync(self, topic: str) -> int:
        """min.insync.replicas of a topic: its override, else the broker's default."""
        local = self.topics.get(topic)
        raw = local.configs.get("min.insync.replicas") if local is not None else None
        if raw is None:
            return int(topic_default("min.insync.replicas", self.config))
        return int(topic_config_value("min.insync.replicas", raw))

    def _propose_isr(self, replica: Replica, isr: tuple[int, ...]) -> None:
        self.control.propose_isr(replica, isr)

    # --- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        # The metrics endpoint binds before any Kafka listener opens, so whoever waits
        # for the Kafka port (an operator's probe, the test fixtures) finds it up too.
        if self.metrics is not None and self.metrics_address is not None:
            self.metrics.serve(self, *self.metrics_address, token=self.metrics_token)
        handshake_s = int(self.config["connections.authentication.timeout.ms"]) / 1000
        for listener in self.listeners:
            tls = self.security.ssl_contexts.get(listener.name)
            server = await start_acceptor(
                functools.partial(self._accept, listener),
                listener.host or None,
                listener.port,
                backlog=LISTEN_BACKLOG,
                ssl=tls,
                ssl_handshake_timeout=handshake_s if tls is not None else None,
                failures=self.failures,
                quota=self.connection_quotas.listener(listener.name),
            )
            self._servers.append(server)
            sockets = server.sockets
            if sockets and listener.port == 0:
                listener.port = int(sockets[0].getsockname()[1])
                if listener.advertised_port == 0:
                    listener.advertised_port = listener.port
        first = self.listeners[0]
        self.port, self.advertised_port = first.port, first.advertised_port
        await self.control.start()  # a cluster member registers its address: after binding
        self.groups.start()
        self.txns.start()
        self._housekeeping = asyncio.create_task(self._run_housekeeping())
        for listener in self.listeners:
            log.info(
                "odradek broker %d listening on %s (advertised %s:%d), cluster %s",
                self.node_id,
                listener,
                listener.advertised_host,
                listener.advertised_port,
                self.cluster_id,
            )
        self._started = True

    async def stop(self) -> None:
        await self.control.stop()  # leave first: others take over the partitions at once
        for server in self._servers:
            server.close()
            await server.wait_closed()
        if self._housekeeping is not None:
            self._housekeeping.cancel()
        await self._end_connections()
        if self._housekeeping is not None:
            await asyncio.gather(self._housekeeping, return_exceptions=True)
        await self.txns.stop()
        await self.groups.stop()
        self.topics.close()
        if self._started:
            log.info("odradek broker stopped")
        else:
            log.info("odradek broker did not start; its data directory is closed")

    async def _end_connections(self) -> None:
        """Cancel every connection's task and wait for them, but not for good: a
        connection waiting for its client must not hold up shutdown."""
        await cancel_and_wait(list(self._connections), "connections")

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
        if not self.config["log.cleaner.enable"]:
            next_cleaning = math.inf  # no compaction pass ever comes due
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

    async def _accept(self, listener: Listener, connection: Connection) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        connection.task = task  # what the connection's deadlines cancel
        connection_id = next(self._ids)
        peer = connection.get_extra_info("peername") or ("?", 0)
        watchdog: asyncio.TimerHandle | None = None
        try:
            try:
                session = self.security.session(
                    listener, str(peer[0]), connection.get_extra_info("peercert")
                )
            except SecurityError as exc:
                log.warning("refusing connection from %s on %s: %s", peer[0], listener.name, exc)
                return
            self._sessions[connection_id] = session
            if not session.ever_authenticated:
                # Whoever has not authenticated in time is dropped with what it buffered.
                timeout_s = int(self.config["connections.authentication.timeout.ms"]) / 1000
                watchdog = asyncio.get_running_loop().call_later(
                    timeout_s, self._authentication_timed_out, task, session
                )
            await self._serve_connection(connection_id, str(peer[0]), connection)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            self.failures.log(
                "connection",
                logging.ERROR,
                "connection %d from %s failed",
                connection_id,
                peer,
                exc_info=True,
            )
        finally:
            if watchdog is not None:
                watchdog.cancel()
            self._sessions.pop(connection_id, None)
            self._connections.discard(task)
            connection.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1):
                    await connection.wait_closed()

    def _authentication_timed_out(self, task: asyncio.Task[None], session: Session) -> None:
        if not session.ever_authenticated:
            log.info(
                "closing connection from %s on %s: not authenticated within "
                "connections.authentication.timeout.ms",
                session.client_host,
                session.listener.name,
            )
            task.cancel()

    def _max_frame(self, connection_id: int) -> int:
        """socket.request.max.bytes; before a SASL connection has authenticated,
        sasl.server.max.receive.size (as Kafka)."""
        session = self._sessions.get(connection_id)
        if session is None or session.ever_authenticated:
            return int(self.config["socket.request.max.bytes"])
        return int(self.config["sasl.server.max.receive.size"])

    async def _serve_connection(
        self, connection_id: int, client_host: str, connection: Connection
    ) -> None:
        idle_s = int(self.config["connections.max.idle.ms"]) / 1000
        receive_s = int(self.config["socket.receive.timeout.ms"]) / 1000
        send_s = int(self.config["socket.send.timeout.ms"]) / 1000
        while True:
            try:
                frame = self._buffered_frame(connection_id, connection)
            except FrameError as exc:
                log.warning("closing connection %d from %s: %s", connection_id, client_host, exc)
                return
            if frame is None:
                frame = await self._read_frame(
                    connection_id, client_host, connection, idle_s, receive_s
                )
                if frame is None:
                    return
            payload, held = frame
            try:
                if not await self._answer(connection_id, client_host, payload, connection, send_s):
                    return
            finally:
                del payload  # not kept alive while the connection waits for its next request
                self.budget.release(held)
            if connection.buffered:
                # Let other connections run between two requests of a pipelined burst.
                await asyncio.sleep(0)

    def _buffered_frame(
        self, connection_id: int, connection: Connection
    ) -> tuple[memoryview, int] | None:
        """The next frame when all of it has arrived and it never waits for request
        memory (the usual case: nothing to wait for), and the budget bytes it holds."""
        if connection.buffered < 4:
            return None
        size = connection.peek_size()
        if size > SMALL_FRAME_BYTES or connection.buffered < 4 + size:
            return None
        _checked_size(size, self._max_frame(connection_id))
        self.budget.charge(size)  # never waits: see SMALL_FRAME_BYTES
        return connection.take_frame(size), size

    async def _read_frame(
        self,
        connection_id: int,
        client_host: str,
        connection: Connection,
        idle_s: float,
        receive_s: float,
    ) -> tuple[memoryview, int] | None:
        """The next frame, and the budget bytes it holds; None when the connection
        must close (then the frame holds nothing).

        The first byte must come within `idle_s`; everything from there to the
        frame's last byte (its size, waiting for request memory, its payload)
        within `receive_s` (socket.receive.timeout.ms).
        """
        loop = connection.loop
        if not connection.buffered:
            try:
                with connection.deadline(loop.time() + idle_s):
                    await connection.wait_for(1)
            except TimeoutError:
                log.debug("connection %d idle for %.0fs, closing", connection_id, idle_s)
                return None
        held = 0
        size = -1
        waited = 0.0
        try:
            with connection.deadline(loop.time() + receive_s):
                await connection.wait_for(4)
                size = _checked_size(connection.peek_size(), self._max_frame(connection_id))
                if size <= SMALL_FRAME_BYTES:
                    self.budget.charge(size)  # never waits: see SMALL_FRAME_BYTES
                elif not self.budget.try_acquire(size):
                    # Muted, as Kafka mutes a channel whose frame its memory pool cannot
                    # take yet: nothing more is read from this connection meanwhile.
                    started = loop.time()
                    try:
                        await self.budget.acquire(size)
                    finally:
                        waited = loop.time() - started
                held = size
                connection.admit(4 + size)
                await connection.wait_for(4 + size)
                payload = connection.take_frame(size)
        except TimeoutError:
            self.budget.release(held)
            what = "a frame's size" if size < 0 else f"a {size}-byte frame"
            if waited:
                what += f" ({waited:.1f}s of it waiting for request memory)"
            self._close_slow(connection_id, client_host, what)
            return None
        except FrameError as exc:
            log.warning("closing connection %d from %s: %s", connection_id, client_host, exc)
            return None
        except BaseException:
            self.budget.release(held)
            raise
        return payload, held

    async def _answer(
        self,
        connection_id: int,
        client_host: str,
        payload: memoryview,
        connection: Connection,
        send_s: float,
    ) -> bool:
        if self.metrics is not None:
            self.metrics.bytes_in.inc(4 + len(payload))
        try:
            response = await self._dispatch(connection_id, client_host, payload)
        except (DecodeError, CloseConnection) as exc:
            log.warning("closing connection %d from %s: %s", connection_id, client_host, exc)
            if isinstance(exc, CloseConnection) and exc.final_response:
                await self._answer_then_close(connection, exc, send_s)
            return False
        if response is None:
            return True
        size = response_size(response)
        try:
            with connection.deadline(connection.loop.time() + send_s):
                await send_response(connection, response, self.budget)
        except TimeoutError:
            log.warning(
                "closing connection %d from %s: it took no response for %.0fs"
                " (socket.send.timeout.ms)",
                connection_id,
                client_host,
                send_s,
            )
            connection.transport.abort()  # drop the unsent bytes now
            return False
        except ShortRegionError as exc:
            log.error("closing connection %d from %s: %s", connection_id, client_host, exc)
            connection.transport.abort()
            return False
        if self.metrics is not None:
            self.metrics.bytes_out.inc(size)
        return True

    @staticmethod
    async def _answer_then_close(
        connection: Connection, close: CloseConnection, send_s: float
    ) -> None:
        """Kafka answers a failed SASL authentication, then closes: after
        failed.authentication.delay.ms, the answer; then the peer is given a moment
        to close first (`Connection.linger`) before the caller closes."""
        bound = connection.deadline(connection.loop.time() + close.delay_s + send_s)
        with contextlib.suppress(ConnectionError, TimeoutError), bound:
            if close.delay_s:
                await asyncio.sleep(close.delay_s)
            connection.write(close.final_response or b"")
            await connection.drain()
        bound = connection.deadline(connection.loop.time() + FINAL_ANSWER_LINGER_S)
        with contextlib.suppress(ConnectionError, TimeoutError), bound:
            await connection.linger()

    def _close_slow(self, connection_id: int, client_host: str, what: str) -> None:
        log.warning(
            "closing connection %d from %s: %s did not arrive in time (socket.receive.timeout.ms)",
            connection_id,
            client_host,
            what,
        )

    async def _dispatch(
        self, connection_id: int, client_host: str, payload: bytes | memoryview
    ) -> bytes | EncodedResponse | None:
        session = self._sessions.get(connection_id)
        if session is not None and session.raw_tokens:
            return session.raw_token(bytes(payload))  # SaslHandshake v0: bare SASL tokens
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
        if session is not None:
            session.admit(header.api_key)
        if spec.reader is not None:
            body = spec.reader(header, payload, pos)
        else:
            body = decode_request_body(header, payload, pos)
        ctx = RequestContext(self, header, client_host, connection_id, session)
        started = time.perf_counter()
        try:
            result = spec.handler(ctx, body)
            if spec.is_async:
                result = await result
        except CloseConnection:
            raise
        except Exception as exc:
            self.failures.log(
                f"handler:{spec.key.name}:{type(exc).__name__}",
                logging.ERROR,
                "%s v%d handler failed",
                spec.key.name,
                header.api_version,
                exc_info=True,
            )
            if self.metrics is not None:
                self.metrics.request_errors.labels(spec.key.name).inc()
            return self._error_answer(header, body, exc)
        if self.metrics is not None:
            self._observe(spec.key, time.perf_counter() - started)
        if result is None:  # acks=0 produce: no response
            return None
        response: bytes | EncodedResponse
        if isinstance(result, EncodedResponse):  # Fetch: framed by its handler
            response = result
        elif _entries(result) > LARGE_RESPONSE_ENTRIES:
            # Metadata for every topic, CreateTopics of hundreds: encoding takes tens of
            # milliseconds of Python; in a thread the loop keeps serving meanwhile.
            response = await asyncio.to_thread(
                encode_response, header.api_key, header.api_version, header.correlation_id, result
            )
        else:
            response = encode_response(
                header.api_key, header.api_version, header.correlation_id, result
            )
        if session is not None and session.close_reason is not None:
            delay_ms = int(self.config["failed.authentication.delay.ms"])
            raise CloseConnection(
                session.close_reason,
                final_response=materialize(response),
                delay_s=delay_ms / 1000 if session.credentials_refused else 0.0,
            )
        return response

    def _error_answer(self, header: RequestHeader, body: Any, exc: Exception) -> bytes:
        """The answer to a request whose handler failed: UNKNOWN_SERVER_ERROR on what it
        named (Kafka's getErrorResponse, ``protocol/error_response.py``); the connection
        stays open. It closes only where Kafka closes it: a Produce with acks=0 expects
        no answer, so closing is the only way to tell its producer."""
        key = ApiKey(header.api_key)
        if closes_instead(key, body):
            raise CloseConnection(f"internal error in {key.name} (acks=0)") from exc
        try:
            answer = encode_response(
                key,
                answer_version(key, header.api_version),
                header.correlation_id,
                error_response(key, header.api_version, body),
            )
        except Exception as failed:  # a schema the walk cannot answer: say so, then close
            log.error("no error response for %s v%d: %s", key.name, header.api_version, failed)
            raise CloseConnection(f"internal error in {key.name}") from exc
        if key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE):
            # An authentication that failed half-way cannot go on: answer, then close
            # (Kafka's SaslServerAuthenticator sends its failure response and closes).
            raise CloseConnection(f"internal error in {key.name}", final_response=answer)
        return answer

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
                "error_code": ErrorCode.UNSUPPORTED_VERSION,
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
    try:
        await broker.start()
    except BaseException:
        # Half started (e.g. it could not join its cluster): close what is open.
        with contextlib.suppress(Exception):
            await broker.stop()
        raise
    try:
        await stop.wait()
    finally:
        await broker.stop()
