"""Finding a group's coordinator and holding the connection to it.

Java's ``AbstractCoordinator.lookupCoordinator`` / ``ensureCoordinatorReady`` (seed 002,
step 1; seed 004 section 2.2), and the coordinator half of Java 4's
``CoordinatorRequestManager``: FindCoordinator (key type GROUP) goes to the least
loaded broker; the answer gets its *own* connection (Java uses the node id
``Integer.MAX_VALUE - id``), so a JoinGroup parked for a whole rebalance never delays
fetches to the same broker. COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR /
COORDINATOR_LOAD_IN_PROGRESS and connection failures mark the coordinator unknown and
are retried after ``retry_backoff_ms``.

The group member (``group_member.GroupMember``) owns this object and its lock: the
connection is guarded by the member's condition, because the heartbeat thread and
response callbacks on connection reader threads mark the coordinator unknown while they
hold it. Every request the member sends to the coordinator goes through ``send``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from odradek.client.cluster import KafkaClient
from odradek.client.config import ConsumerConfig
from odradek.client.connection import BrokerConnection, ConnectionState
from odradek.client.errors import KafkaError, NoBrokersAvailableError, make_error
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

COORDINATOR_NODE_BASE = 2**31 - 1  # Java: the coordinator connection id is MAX_VALUE - id
# FindCoordinator's key types (KIP-98): whose coordinator is looked up.
KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


class CoordinatorDiscovery:
    """The coordinator of one group: looked up on demand, one connection to it."""

    def __init__(
        self,
        client: KafkaClient,
        config: ConsumerConfig,
        group_id: str,
        cond: threading.Condition,
        *,
        on_found: Callable[[], None],
    ) -> None:
        self.client = client
        self.config = config
        self.group_id = group_id
        self._cond = cond  # the owning member's lock: guards _conn
        self._on_found = on_found  # called with the lock held when a coordinator is found
        self._conn: BrokerConnection | None = None
        self._lookup_lock = threading.Lock()
        self.last_lookup_error: BaseException | None = None

    def _backoff_s(self) -> float:
        return self.config.retry_backoff_ms / 1000

    def coordinator_unknown(self) -> bool:
        with self._cond:
            conn = self._conn
            if conn is None:
                return True
            if conn.state is not ConnectionState.READY:
                self.mark_coordinator_unknown("coordinator connection lost")
                return True
            return False

    def mark_coordinator_unknown(self, reason: str) -> None:
        with self._cond:
            conn, self._conn = self._conn, None
        if conn is not None:
            log.info(
                "group %s: coordinator %s:%s is unavailable or invalid due to %s; "
                "will attempt rediscovery",
                self.group_id,
                conn.host,
                conn.port,
                reason,
            )
            # Close without joining the reader thread (we may be on it, or hold the lock
            # a callback on it needs); in-flight requests fail with a connection error.
            conn.state = ConnectionState.CLOSED
            conn.disconnect(f"coordinator marked unknown: {reason}")

    def _find_coordinator(self, timeout_s: float) -> None:
        """One FindCoordinator round trip; installs the coordinator or raises."""
        self.client.bootstrap(timeout_s=timeout_s)
        node = self.client.least_loaded_node()
        if node is None:
            raise NoBrokersAvailableError("no broker to send FindCoordinator to")
        gid = self.group_id
        response = self.client.request(
            node,
            ApiKey.FIND_COORDINATOR,
            {"key": gid, "key_type": KEY_TYPE_GROUP, "coordinator_keys": [gid]},
            timeout_ms=max(1, int(timeout_s * 1000)),
        )
        if hasattr(response, "coordinators"):
            entry = next((c for c in response.coordinators if c.key == gid), None)
            if entry is None:
                raise make_error(
                    ErrorCode.COORDINATOR_NOT_AVAILABLE, "FindCoordinator: group missing"
                )
        else:
            entry = response
        code = int(entry.error_code)
        if code != ErrorCode.NONE:
            raise make_error(code, f"FindCoordinator for group {gid!r}")
        node_id, host, port = int(entry.node_id), str(entry.host), int(entry.port)
        conn = BrokerConnection(COORDINATOR_NODE_BASE - node_id, host, port, self.config)
        try:
            conn.ensure_ready(timeout_s)
        except KafkaError:
            conn.close()
            raise
        with self._cond:
            old, self._conn = self._conn, conn
            self._on_found()
        if old is not None:
            old.state = ConnectionState.CLOSED
            old.disconnect("replaced by a new coordinator")
        log.info("group %s: discovered coordinator %s:%s (id %s)", gid, host, port, node_id)

    def look_up_quietly(self) -> None:
        """Heartbeat thread: try one lookup, keep retriable errors for later."""
        if not self._lookup_lock.acquire(blocking=False):
            return
        try:
            if not self.coordinator_unknown():
                return
            self._find_coordinator(self.config.request_timeout_ms / 1000)
        except KafkaError as exc:
            self.last_lookup_error = exc
            log.debug("group %s: coordinator lookup failed: %s", self.group_id, exc)
        finally:
            self._lookup_lock.release()

    def ensure_ready(self, deadline: float) -> bool:
        """Block until the coordinator is known and connected, or ``deadline`` passes."""
        while self.coordinator_unknown():
            remaining = deadline - time.monotonic()
            with self._lookup_lock:
                if not self.coordinator_unknown():
                    return True
                try:
                    self._find_coordinator(
                        max(0.05, min(self.config.request_timeout_ms / 1000, remaining))
                    )
                    return True
                except KafkaError as exc:
                    self.last_lookup_error = exc
                    if not exc.retriable and not isinstance(exc, NoBrokersAvailableError):
                        raise
                    log.debug("group %s: coordinator lookup failed: %s", self.group_id, exc)
                    if exc.code == ErrorCode.COORDINATOR_NOT_AVAILABLE:
                        self.client.request_update()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self._backoff_s(), remaining))
        return True

    def send(self, api_key: int, body: Any, *, timeout_ms: int | None = None) -> Future[Any]:
        """Send to the coordinator; a failed future (COORDINATOR_NOT_AVAILABLE) when unknown."""
        with self._cond:
            conn = self._conn
        if conn is None:
            future: Future[Any] = Future()
            future.set_exception(
                make_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "coordinator unknown")
            )
            return future
        return conn.send(api_key, body, timeout_ms=timeout_ms)

    def api_version(self, api_key: int) -> int:
        """The version of ``api_key`` the coordinator speaks; raises when it is unknown."""
        with self._cond:
            conn = self._conn
        if conn is None:
            raise make_error(ErrorCode.COORDINATOR_NOT_AVAILABLE, "coordinator unknown")
        return conn.api_version(api_key)

    def close(self) -> None:
        """Drop the coordinator connection."""
        with self._cond:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
