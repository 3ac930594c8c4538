"""One connection to one broker: many requests in flight, matched by correlation id.

Design
------
* Blocking socket. Callers write whole request frames under a write lock
  (``sendall`` with the request timeout as the socket timeout), so any thread
  may send. One reader thread per connection waits on ``select`` with a short
  tick, reads frames, decodes each response with the version it was sent with,
  and completes the request's ``concurrent.futures.Future``. On every tick it
  also expires requests past their deadline: as in the Java client, a request
  timeout fails that request with ``KafkaTimeoutError`` and closes the
  connection (which fails everything else in flight with a retriable
  ``KafkaConnectionError``).
* Future callbacks run on the reader thread: they must be quick and must not
  block on another response from the same connection.
* ``connect()`` negotiates versions with ApiVersions before the connection is
  usable: for each API the client knows, the highest version both sides (the
  client's table, which is bounded by kio's schemas and by what Odradek's
  broker handles, and the broker's reply) support. A broker that does not
  know our ApiVersions version answers UNSUPPORTED_VERSION in the v0 format
  with its own range; we retry with the highest version it names.
* Security (``client/security.py``): for SSL / SASL_SSL the socket is wrapped
  in TLS before ApiVersions; for SASL_* the connection authenticates after
  ApiVersions (SaslHandshake, SaslAuthenticate) and, when the broker gives the
  session a lifetime (KIP-368), authenticates again in-band before it ends: the
  next send after 85-95% of the lifetime does so while holding the write lock,
  so no other request interleaves with the exchange.
* Reconnection: a closed connection can be connected again. ``ensure_ready``
  does so, honouring an exponential backoff with jitter between
  ``reconnect_backoff_ms`` and ``reconnect_backoff_max_ms`` after failures.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import random
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from odradek.client.config import CommonConfig
from odradek.client.errors import (
    IncompatibleBrokerVersionError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
    make_error,
)
from odradek.client.security import TlsSocket, authenticate, receive, secure_transport
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_type,
)
from odradek.protocol.errors import ErrorCode
from odradek.protocol.fetch import parse_fetch_response
from odradek.protocol.framing import FrameDecoder, FrameError

log = logging.getLogger(__name__)

Body = dict[str, Any] | Callable[[int], dict[str, Any]]
"""A request body: a dict holding the union of every version's fields, or a function
of the negotiated version returning one. ``codec.build`` keeps the fields the
version has."""

# The versions this client can speak: within kio's schemas, and (for the broker APIs
# Odradek implements) within what Odradek's broker handles, so every pair is tested.
CLIENT_API_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 9),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (1, 12),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
}

Transport = socket.socket | TlsSocket

CLIENT_SOFTWARE_NAME = "odradek-python"
CLIENT_SOFTWARE_VERSION = "0.1.0"

_TICK_S = 0.05
_RECV_BYTES = 256 * 1024


class ConnectionState(enum.Enum):
    DISCONNECTED = "disconnected"
    CONNECTING = "connecting"
    READY = "ready"
    CLOSED = "closed"  # closed for good by the owner


@dataclass(slots=True)
class _InFlight:
    api_key: int
    version: int
    future: Future[Any]
    deadline: float


def _negotiate(
    broker: dict[int, tuple[int, int]], client: dict[int, tuple[int, int]]
) -> dict[int, int]:
    """Highest common version per API both sides support (APIs without overlap are left out)."""
    out: dict[int, int] = {}
    for key, (cmin, cmax) in client.items():
        if key not in broker:
            continue
        bmin, bmax = broker[key]
        best = min(cmax, bmax)
        if best >= max(cmin, bmin):
            out[key] = best
    return out


class BrokerConnection:
    """A thread-safe connection to one broker (see module docs)."""

    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        config: CommonConfig,
        *,
        client_versions: dict[int, tuple[int, int]] | None = None,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.config = config
        self.client_versions = dict(client_versions or CLIENT_API_VERSIONS)
        self.versions: dict[int, int] = {}
        self.broker_versions: dict[int, tuple[int, int]] = {}
        self.state = ConnectionState.DISCONNECTED
        self._lock = threading.RLock()
        self._write_lock = threading.Lock()
        self._connect_lock = threading.Lock()
        self._sock: Transport | None = None
        self._reauth_at: float | None = None  # monotonic time to authenticate again
        self._reader: threading.Thread | None = None
        self._in_flight: dict[int, _InFlight] = {}
        self._correlation = 0
        self._generation = 0  # bumps on every (re)connect; stale readers exit
        self._failures = 0
        self._next_attempt = 0.0
        self.last_error: BaseException | None = None

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port} {self.state.value}>"

    # ------------------------------------------------------------------ state

    @property
    def ready(self) -> bool:
        return self.state is ConnectionState.READY

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    def backoff_remaining(self) -> float:
        """Seconds until a reconnect may be attempted (0 when it may now)."""
        return max(0.0, self._next_attempt - time.monotonic())

    def api_version(self, api_key: int) -> int:
        """The negotiated version for ``api_key``; raises if there is none."""
        try:
            return self.versions[api_key]
        except KeyError:
            cmin, cmax = self.client_versions.get(api_key, (-1, -1))
            bmin, bmax = self.broker_versions.get(api_key, (-1, -1))
            raise IncompatibleBrokerVersionError(
                f"broker {self.node_id} ({self.host}:{self.port}) and client share no version "
                f"of {ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else api_key}"
                f" (client {cmin}..{cmax}, broker {bmin}..{bmax})"
            ) from None

    def supports(self, api_key: int) -> bool:
        return api_key in self.versions

    # ------------------------------------------------------------------ connect

    def ensure_ready(self, timeout_s: float | None = None) -> None:
        """Connect (and negotiate) unless ready; respects the reconnect backoff."""
        if self.state is ConnectionState.READY:
            return
        if self.state is ConnectionState.CLOSED:
            raise KafkaConnectionError(f"connection to node {self.node_id} is closed")
        with self._connect_lock:
            if self.state is ConnectionState.READY:
                return
            wait = self.backoff_remaining()
            if wait > 0:
                if timeout_s is not None and wait > timeout_s:
                    raise KafkaConnectionError(
                        f"node {self.node_id} ({self.host}:{self.port}) is backing off after "
                        f"{self._failures} failed connects: {self.last_error}"
                    )
                time.sleep(wait)
            try:
                self._connect(timeout_s)
            except BaseException as exc:
                self._failures += 1
                self.last_error = exc
                base = self.config.reconnect_backoff_ms / 1000
                cap = self.config.reconnect_backoff_max_ms / 1000
                delay = min(cap, base * (2 ** (self._failures - 1)))
                self._next_attempt = time.monotonic() + delay * random.uniform(0.8, 1.2)
                with self._lock:
                    if self.state is not ConnectionState.CLOSED:
                        self.state = ConnectionState.DISCONNECTED
                if isinstance(exc, KafkaError):
                    raise
                raise KafkaConnectionError(
                    f"cannot connect to node {self.node_id} ({self.host}:{self.port}): {exc}"
                ) from exc
            self._failures = 0
            self._next_attempt = 0.0

    def _connect(self, timeout_s: float | None) -> None:
        setup = self.config.socket_connection_setup_timeout_ms / 1000
        if timeout_s is not None:
            setup = max(0.001, min(setup, timeout_s))
        with self._lock:
            self.state = ConnectionState.CONNECTING
        raw = socket.create_connection((self.host, self.port), timeout=setup)
        sock: Transport = raw
        try:
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.config.send_buffer_bytes)
                raw.setsockopt(
                    socket.SOL_SOCKET, socket.SO_RCVBUF, self.config.receive_buffer_bytes
                )
            sock = secure_transport(raw, self.config, self.host, setup)
            decoder = FrameDecoder()
            self._negotiate_versions(sock, decoder, setup)
            if self.config.security_protocol.startswith("SASL_"):
                lifetime_ms = authenticate(
                    self._setup_exchange(sock, decoder),
                    self.config,
                    self.versions,
                    f"node {self.node_id} ({self.host}:{self.port})",
                )
                self._schedule_reauthentication(lifetime_ms)
            sock.settimeout(max(1.0, self.config.request_timeout_ms / 1000))
        except BaseException:
            sock.close()
            raise
        with self._lock:
            self._generation += 1
            self._sock = sock
            self.state = ConnectionState.READY
            generation = self._generation
        self._reader = threading.Thread(
            target=self._read_loop,
            args=(sock, decoder, generation),
            name=f"odradek-conn-{self.node_id}",
            daemon=True,
        )
        self._reader.start()
        log.debug("connected to node %s at %s:%s", self.node_id, self.host, self.port)

    def _next_correlation(self) -> int:
        self._correlation = (self._correlation + 1) & 0x7FFFFFFF
        return self._correlation

    def _setup_exchange(
        self, sock: Transport, decoder: FrameDecoder
    ) -> Callable[[int, int, dict[str, Any]], Any]:
        """One request at a time before the reader thread runs (authentication)."""

        def exchange(api_key: int, version: int, body: dict[str, Any]) -> Any:
            entity = build(request_type(api_key, version), body)
            payload = self._sync_request(sock, decoder, api_key, version, entity)
            return decode_response(api_key, version, payload)[1]

        return exchange

    def _schedule_reauthentication(self, lifetime_ms: int) -> None:
        """Java's rule: re-authenticate at a random 85-95% of the session lifetime."""
        if lifetime_ms <= 0:
            self._reauth_at = None
            return
        self._reauth_at = time.monotonic() + lifetime_ms / 1000 * random.uniform(0.85, 0.95)

    def _maybe_reauthenticate(self) -> None:
        """Called with the write lock held, before a send."""
        if self._reauth_at is None or time.monotonic() < self._reauth_at:
            return
        if threading.current_thread() is self._reader:
            return  # a callback on the reader thread cannot wait for replies; next send will
        self._reauth_at = None

        def exchange(api_key: int, version: int, body: dict[str, Any]) -> Any:
            future: Future[Any] = Future()
            timeout_s = self.config.request_timeout_ms / 1000
            self._write(
                api_key,
                version,
                build(request_type(api_key, version), body),
                future,
                expect_response=True,
                timeout_s=timeout_s,
            )
            return future.result(timeout=timeout_s + 1.0)

        sock = self._sock
        try:
            lifetime_ms = authenticate(exchange, self.config, self.versions, f"node {self.node_id}")
        except (KafkaError, TimeoutError) as exc:
            log.warning("node %s: re-authentication failed: %s", self.node_id, exc)
            if sock is not None:
                self._fail(sock, KafkaConnectionError(f"node {self.node_id}: {exc}"))
            return
        log.debug("node %s: re-authenticated", self.node_id)
        self._schedule_reauthentication(lifetime_ms)

    def _sync_request(
        self, sock: Transport, decoder: FrameDecoder, api_key: int, version: int, body: Any
    ) -> bytes:
        with self._lock:
            correlation = self._next_correlation()
        frame = encode_request(
            RequestHeader(api_key, version, correlation, self.config.client_id), body
        )
        sock.sendall(frame)
        while True:
            data = sock.recv(_RECV_BYTES)
            if not data:
                raise KafkaConnectionError(
                    f"connection closed during {ApiKey(api_key).name} (connection setup)"
                )
            frames = decoder.feed(data)
            if frames:
                (got,) = struct.unpack_from(">i", frames[0], 0)
                if got != correlation:
                    raise KafkaConnectionError(
                        f"{ApiKey(api_key).name} reply with a wrong correlation id"
                    )
                return bytes(frames[0])

    def _negotiate_versions(self, sock: Transport, decoder: FrameDecoder, timeout_s: float) -> None:
        sock.settimeout(timeout_s)
        version = self.client_versions[ApiKey.API_VERSIONS][1]
        for _attempt in range(3):
            body = build(
                request_type(ApiKey.API_VERSIONS, version),
                {
                    "client_software_name": CLIENT_SOFTWARE_NAME,
                    "client_software_version": CLIENT_SOFTWARE_VERSION,
                },
            )
            payload = self._sync_request(sock, decoder, ApiKey.API_VERSIONS, version, body)
            # The response header of ApiVersions is always v0 and the body starts with
            # the error code in every version, so it can be read before choosing a schema.
            (error_code,) = struct.unpack_from(">h", payload, 4)
            if error_code == UnsupportedVersionError.code:
                reply: Any
                _, reply = decode_response(ApiKey.API_VERSIONS, 0, payload)
                ranges = {
                    int(k.api_key): (int(k.min_version), int(k.max_version)) for k in reply.api_keys
                }
                broker_max = ranges.get(ApiKey.API_VERSIONS, (0, 0))[1]
                new_version = min(broker_max, self.client_versions[ApiKey.API_VERSIONS][1])
                if new_version >= version:
                    new_version = version - 1
                if new_version < 0:
                    break
                version = new_version
                continue
            if error_code != ErrorCode.NONE:
                raise make_error(error_code, "ApiVersions")
            _, final = decode_response(ApiKey.API_VERSIONS, version, payload)
            reply = final
            self.broker_versions = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in reply.api_keys
            }
            self.versions = _negotiate(self.broker_versions, self.client_versions)
            return
        raise IncompatibleBrokerVersionError(
            f"node {self.node_id}: no ApiVersions version in common with the broker"
        )

    # ------------------------------------------------------------------ send

    def send(
        self,
        api_key: int,
        body: Body | Any,
        *,
        version: int | None = None,
        expect_response: bool = True,
        timeout_ms: int | None = None,
    ) -> Future[Any]:
        """Send a request; the future completes with the decoded response entity.

        ``body`` is a dict (or a function of the version returning one) built into
        the negotiated version's entity, or a ready kio entity of that version.
        With ``expect_response=False`` (Produce with acks=0) the future completes
        with None once the bytes are written.
        """
        future: Future[Any] = Future()
        if self.state is not ConnectionState.READY:
            future.set_exception(
                KafkaConnectionError(f"node {self.node_id} is not connected ({self.state.value})")
            )
            return future
        if version is None:
            version = self.api_version(api_key)
        if callable(body):
            body = body(version)
        if isinstance(body, dict):
            body = build(request_type(api_key, version), body)
        timeout_s = (
            timeout_ms if timeout_ms is not None else self.config.request_timeout_ms
        ) / 1000
        with self._write_lock:
            self._maybe_reauthenticate()
            self._write(
                api_key, version, body, future, expect_response=expect_response, timeout_s=timeout_s
            )
        return future

    def _write(
        self,
        api_key: int,
        version: int,
        body: Any,
        future: Future[Any],
        *,
        expect_response: bool,
        timeout_s: float,
    ) -> None:
        """Frame and write one request; the caller holds the write lock."""
        with self._lock:
            sock = self._sock
            if self.state is not ConnectionState.READY or sock is None:
                future.set_exception(KafkaConnectionError(f"node {self.node_id} disconnected"))
                return
            correlation = self._next_correlation()
            if expect_response:
                self._in_flight[correlation] = _InFlight(
                    api_key, version, future, time.monotonic() + timeout_s
                )
        frame = encode_request(
            RequestHeader(api_key, version, correlation, self.config.client_id), body
        )
        try:
            sock.sendall(frame)
        except OSError as exc:
            self._fail(sock, KafkaConnectionError(f"send to node {self.node_id} failed: {exc}"))
            if not future.done():
                future.set_exception(
                    KafkaConnectionError(f"send to node {self.node_id} failed: {exc}")
                )
            return
        if not expect_response:
            future.set_result(None)

    def request(self, api_key: int, body: Body | Any, *, timeout_ms: int | None = None) -> Any:
        """Send and wait for the response (blocking convenience)."""
        future = self.send(api_key, body, timeout_ms=timeout_ms)
        wait = (timeout_ms if timeout_ms is not None else self.config.request_timeout_ms) / 1000
        return future.result(timeout=wait + 1.0)

    # ------------------------------------------------------------------ receive

    def _read_loop(self, sock: Transport, decoder: FrameDecoder, generation: int) -> None:
        try:
            while True:
                with self._lock:
                    if self._generation != generation or self._sock is not sock:
                        return
                try:
                    readable, _, _ = select.select([sock], [], [], _TICK_S)
                except (OSError, ValueError) as exc:
                    self._fail(sock, KafkaConnectionError(f"node {self.node_id}: {exc}"))
                    return
                if readable:
                    try:
                        frames = self._receive(sock, decoder)
                    except (OSError, ValueError) as exc:
                        self._fail(
                            sock, KafkaConnectionError(f"receive from node {self.node_id}: {exc}")
                        )
                        return
                    except FrameError as exc:
                        self._fail(sock, KafkaConnectionError(f"node {self.node_id}: {exc}"))
                        return
                    if frames is None:
                        self._fail(
                            sock, KafkaConnectionError(f"node {self.node_id} closed the connection")
                        )
                        return
                    for payload in frames:
                        self._complete(sock, payload)
                self._expire(sock)
        except Exception as exc:  # never let the reader die silently
            log.exception("reader thread for node %s failed", self.node_id)
            self._fail(sock, KafkaConnectionError(f"node {self.node_id}: reader failed: {exc}"))

    def _receive(self, sock: Transport, decoder: FrameDecoder) -> list[bytes | bytearray] | None:
        """One read: the frames it completed; None at the end of the stream.

        A plain socket reads straight into the decoder's target (a large frame's
        bytes land in its own buffer, which the Fetch parser then slices).
        """
        if isinstance(sock, socket.socket):
            n = sock.recv_into(decoder.read_target(_RECV_BYTES))
            return decoder.received(n) if n else None
        data = receive(sock, _RECV_BYTES)
        if data is None:  # TLS records without application data
            return []
        return decoder.feed(data) if data else None

    def _complete(self, sock: Transport, payload: bytes | bytearray) -> None:
        (correlation,) = struct.unpack_from(">i", payload, 0)
        with self._lock:
            entry = self._in_flight.pop(correlation, None)
        if entry is None:
            log.warning(
                "node %s: response for unknown correlation id %s", self.node_id, correlation
            )
            return
        try:
            if entry.api_key == ApiKey.FETCH:
                body = parse_fetch_response(payload, entry.version)  # records: views, no copy
            else:
                _, body = decode_response(entry.api_key, entry.version, bytes(payload))
        except Exception as exc:
            error = KafkaConnectionError(
                f"node {self.node_id}: cannot decode {ApiKey(entry.api_key).name} "
                f"v{entry.version} response: {exc}"
            )
            if not entry.future.done():
                entry.future.set_exception(error)
            self._fail(sock, error)
            return
        if not entry.future.done():
            entry.future.set_result(body)

    def _expire(self, sock: Transport) -> None:
        if not self._in_flight:
            return
        now = time.monotonic()
        with self._lock:
            expired = [(c, e) for c, e in self._in_flight.items() if e.deadline <= now]
            for c, _ in expired:
                del self._in_flight[c]
        if not expired:
            return
        for _, entry in expired:
            if not entry.future.done():
                entry.future.set_exception(
                    KafkaTimeoutError(
                        f"{ApiKey(entry.api_key).name} to node {self.node_id} timed out"
                    )
                )
        self._fail(sock, KafkaConnectionError(f"node {self.node_id}: request timed out"))

    # ------------------------------------------------------------------ close

    def _fail(self, sock: Transport, error: KafkaError) -> None:
        """Tear down ``sock`` (if still current) and fail every request in flight."""
        with self._lock:
            if self._sock is not sock:
                return
            self._sock = None
            self._generation += 1
            in_flight, self._in_flight = self._in_flight, {}
            if self.state is not ConnectionState.CLOSED:
                self.state = ConnectionState.DISCONNECTED
            self.last_error = error
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)  # wakes the reader's select now, not at its tick
        with contextlib.suppress(OSError):
            sock.close()
        if in_flight:
            log.info(
                "node %s: %s; failing %d in-flight requests", self.node_id, error, len(in_flight)
            )
        for entry in in_flight.values():
            if not entry.future.done():
                entry.future.set_exception(type(error)(str(error)))

    def disconnect(self, reason: str = "disconnected by the client") -> None:
        """Drop the current socket (requests in flight fail); a later send may reconnect."""
        with self._lock:
            sock = self._sock
        if sock is not None:
            self._fail(sock, KafkaConnectionError(f"node {self.node_id}: {reason}"))

    def close(self) -> None:
        """Close for good."""
        with self._lock:
            self.state = ConnectionState.CLOSED
        self.disconnect("connection closed")
        reader = self._reader
        if reader is not None and reader is not threading.current_thread():
            reader.join(timeout=1.0)
