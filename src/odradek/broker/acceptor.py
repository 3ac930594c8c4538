"""A listening socket that accepts connections like `asyncio.start_server`, robustly.

asyncio's server retries a failing `accept()` (EMFILE: no descriptors left)
hundreds of times a second, logging a traceback each time, for as long as the
process is out of descriptors. `start_acceptor` takes the same arguments that
matter here (callback, host, port, backlog, ssl, ssl_handshake_timeout) and
instead backs off, 10 ms doubling to 1 s, and logs the failure once per
interval with a count.

With a `ListenerQuota` (Kafka's connection limits, `broker/connection_quotas.py`)
each accepted connection first waits for the listener's creation rate and a
free slot, as Kafka's acceptor does, so no further connection is accepted
meanwhile; one from an address at its limit is closed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl as ssl_module
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from odradek.broker.connection import Connection
from odradek.broker.connection_quotas import normalized_address
from odradek.broker.receive_buffers import BufferPool
from odradek.ratelog import RateLimitedLog

if TYPE_CHECKING:
    from odradek.broker.connection_quotas import ListenerQuota

log = logging.getLogger("odradek.broker")

ConnectionCallback = Callable[[Connection], Awaitable[None]]

# accept() failures that mean "out of descriptors or memory for now": back off and retry.
RESOURCE_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
BACKOFF_S = (0.01, 1.0)
# Bytes a connection buffers ahead of the frame the broker is reading (up to twice this
# before it stops reading: `Connection`).
READ_AHEAD_BYTES = 256 * 1024
# Receive buffers the listener's connections let go of, kept for reuse (`BufferPool`):
# room for a few producers' requests of up to twice the read-ahead each.
RECEIVE_POOL_BYTES = 16 * READ_AHEAD_BYTES


class Acceptor:
    """Accepts on one listening socket and runs the callback for each connection."""

    def __init__(
        self,
        sock: socket.socket,
        callback: ConnectionCallback,
        *,
        ssl: ssl_module.SSLContext | None,
        ssl_handshake_timeout: float | None,
        failures: RateLimitedLog,
        quota: ListenerQuota | None = None,
    ) -> None:
        self.sock = sock
        self._callback = callback
        self._ssl = ssl
        self._ssl_handshake_timeout = ssl_handshake_timeout
        self._failures = failures
        self._quota = quota
        self._starting: set[asyncio.Task[None]] = set()  # strong references until done
        self._buffers = BufferPool(RECEIVE_POOL_BYTES)
        self._task = asyncio.create_task(self._run())

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return (self.sock,)

    def close(self) -> None:
        self._task.cancel()
        self.sock.close()

    async def wait_closed(self) -> None:
        await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = BACKOFF_S[0]
        while True:
            try:
                conn, peer = await loop.sock_accept(self.sock)
            except OSError as exc:
                if exc.errno == errno.EBADF:
                    return  # the listener was closed
                if exc.errno not in RESOURCE_ERRORS:
                    # A peer gone before we took its connection (ECONNABORTED), ...
                    self._failures.log("accept-other", logging.WARNING, "accept failed: %s", exc)
                    continue
                self._failures.log(
                    "accept", logging.ERROR, "cannot accept connections: %s; retrying", exc
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, BACKOFF_S[1])
                continue
            backoff = BACKOFF_S[0]
            address = normalized_address(str(peer[0])) if isinstance(peer, tuple) else ""
            if not await self._admit(conn, address):
                continue
            task = asyncio.create_task(self._connection(conn, address))
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    async def _admit(self, conn: socket.socket, address: str) -> bool:
        """Wait for the listener's quota; False (the connection closed) when it refuses."""
        if self._quota is None:
            return True
        try:
            admitted = await self._quota.admit(address)
        except BaseException:
            conn.close()
            raise
        if not admitted:
            self._failures.log(
                "refused-per-ip",  # one key: addresses are countless, the log's keys are kept
                logging.INFO,
                "refused a connection from %s: it already has the maximum of %d connections"
                " (max.connections.per.ip)",
                address,
                self._quota.limit_for(address),
            )
            conn.close()
        return admitted

    async def _connection(self, conn: socket.socket, address: str) -> None:
        try:
            await self._serve(conn)
        finally:
            if self._quota is not None:
                self._quota.release(address)

    async def _serve(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        if conn.family in (socket.AF_INET, socket.AF_INET6):
            # Nagle off, as Kafka's SocketServer sets it: asyncio only does so for sockets
            # whose proto is IPPROTO_TCP, and an accepted socket's is 0. With Nagle, a
            # response written while the previous one is unacknowledged, or sent in parts
            # (a Fetch's header, then sendfile), waits for the client's delayed ACK (40 ms).
            with contextlib.suppress(OSError):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # uvloop answers its own TLS protocol rather than ours: keep ours at hand.
        connection = Connection(loop, READ_AHEAD_BYTES, self._buffers)
        try:
            await loop.connect_accepted_socket(
                lambda: connection,
                conn,
                ssl=self._ssl,
                ssl_handshake_timeout=self._ssl_handshake_timeout,
            )
        except (TimeoutError, OSError, ssl_module.SSLError) as exc:
            log.debug("connection setup failed: %s", exc)
            conn.close()
            return
        await self._callback(connection)


async def start_acceptor(
    callback: ConnectionCallback,
    host: str | None,
    port: int,
    *,
    failures: RateLimitedLog,
    backlog: int = 512,
    ssl: ssl_module.SSLContext | None = None,
    ssl_handshake_timeout: float | None = None,
    quota: ListenerQuota | None = None,
) -> Acceptor:
    """Listen on host:port (all interfaces for None or a wildcard) and start accepting."""
    bind_host = (host or "").strip("[]")
    family = socket.AF_INET6 if ":" in bind_host else socket.AF_INET
    sock = socket.create_server((bind_host, port), family=family, backlog=backlog)
    sock.setblocking(False)
    return Acceptor(
        sock,
        callback,
        ssl=ssl,
        ssl_handshake_timeout=ssl_handshake_timeout,
        failures=failures,
        quota=quota,
    )
