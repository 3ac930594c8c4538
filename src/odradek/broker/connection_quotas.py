"""Kafka's connection limits (its SocketServer's ConnectionQuotas), with Kafka's behaviour.

- `max.connections`: connections over all listeners, and
  `listener.name.<l>.max.connections` on one listener (the broker-wide value
  when unset). At either limit the listener stops accepting: the connection it
  has just accepted waits, unserved, until another one closes, and newer ones
  wait in the listen backlog, as Kafka's acceptor thread blocks. Kafka exempts
  its inter-broker listener when it has several listeners; Odradek has no
  inter-broker listener setting, so every listener counts.
- `max.connections.per.ip`, and `max.connections.per.ip.overrides`
  (`host:count,...`; a host name counts for each address it resolves to when
  the broker starts, Kafka resolves it once too): a new connection from an
  address that already has its maximum is closed at once (Kafka's
  TooManyConnectionsException), logged, and counted in `refused`. Kafka checks
  this after waiting for a slot, and so does `admit`.
- `max.connection.creation.rate`, and `listener.name.<l>.max.connection.creation.rate`:
  new connections per second; past it the listener waits before taking the
  next one. Kafka measures the rate over its quota windows (11 of 1 s) and
  delays by at most one window; here a token bucket that holds one second of
  connections does the same job.

Kafka's defaults (Integer.MAX_VALUE) mean no limit. Settings are read at start;
Kafka's dynamic updates are not supported.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterable

from odradek.broker.config import UNLIMITED, BrokerConfig, ConfigError, parse_host_counts
from odradek.broker.security.listeners import listener_value

__all__ = ["ConnectionQuotas", "ListenerQuota", "TokenBucket", "normalized_address"]

MAX_DELAY_S = 1.0


def normalized_address(host: str) -> str:
    """The address connections are counted under: an IPv4-mapped IPv6 address as
    IPv4, without an IPv6 scope."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(address)


def _resolve(host: str) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError as exc:
        raise ConfigError(
            f"max.connections.per.ip.overrides: cannot resolve {host!r}: {exc}"
        ) from None
    return sorted({normalized_address(str(info[4][0])) for info in infos})


class TokenBucket:
    """At most `rate` takes a second in the long run, with up to one second's worth at once.

    No take waits longer than `MAX_DELAY_S`, as Kafka throttles a connection by at
    most one quota window (`quota.window.size.seconds`, 1 s): a rate of 0 lets one
    connection in a second.
    """

    def __init__(self, rate: int, clock: Callable[[], float]) -> None:
        self.rate = float(rate)
        self._clock = clock
        self._tokens = self.rate
        self._last = clock()

    def take(self) -> float:
        """Take one token; the seconds to wait before using it (0: now)."""
        if self.rate <= 0:
            return MAX_DELAY_S
        now = self._clock()
        self._tokens = min(self.rate, self._tokens + (now - self._last) * self.rate)
        self._last = now
        self._tokens = max(self._tokens - 1, -MAX_DELAY_S * self.rate)
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate


class ConnectionQuotas:
    """Connection counts by listener and by address, and the limits on them."""

    def __init__(
        self,
        config: BrokerConfig,
        listeners: Iterable[str],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_connections = int(config["max.connections"])
        self.max_per_ip = int(config["max.connections.per.ip"])
        self.per_ip_overrides: dict[str, int] = {}
        for host, count in parse_host_counts(config["max.connections.per.ip.overrides"]).items():
            for address in _resolve(host):
                self.per_ip_overrides[address] = count
        self.total = 0
        self.by_listener: Counter[str] = Counter()
        self.by_address: Counter[str] = Counter()
        self.refused: Counter[str] = Counter()  # per listener: closed at the per-ip limit
        self._listener_max: dict[str, int] = {}
        self._rates: dict[str, list[TokenBucket]] = {}
        broker_rate = int(config["max.connection.creation.rate"])
        broker_bucket = TokenBucket(broker_rate, clock) if broker_rate < UNLIMITED else None
        for name in listeners:
            self._listener_max[name] = int(listener_value(config, name, "max.connections"))
            rate = int(listener_value(config, name, "max.connection.creation.rate"))
            buckets = [broker_bucket] if broker_bucket is not None else []
            if rate < UNLIMITED and rate != broker_rate:
                buckets.append(TokenBucket(rate, clock))
            self._rates[name] = buckets
        self._slot_waiters: list[asyncio.Future[None]] = []

    def listener(self, name: str) -> ListenerQuota:
        return ListenerQuota(self, name)

    def limit_for(self, address: str) -> int:
        return self.per_ip_overrides.get(address, self.max_per_ip)

    def slot_available(self, listener: str) -> bool:
        return (
            self.by_listener[listener] < self._listener_max[listener]
            and self.total < self.max_connections
        )

    def creation_delay(self, listener: str) -> float:
        """Record a new connection on `listener`; seconds it must wait for the rate limits."""
        return max((bucket.take() for bucket in self._rates[listener]), default=0.0)

    async def wait_for_slot(self, listener: str) -> None:
        while not self.slot_available(listener):
            waiter = asyncio.get_running_loop().create_future()
            self._slot_waiters.append(waiter)
            try:
                await waiter
            finally:
                if waiter in self._slot_waiters:
                    self._slot_waiters.remove(waiter)

    def admit(self, listener: str, address: str) -> bool:
        """Count a connection from `address`, or refuse it (False) at the address's limit."""
        if self.by_address[address] >= self.limit_for(address):
            self.refused[listener] += 1
            return False
        self.by_address[address] += 1
        self.by_listener[listener] += 1
        self.total += 1
        return True

    def release(self, listener: str, address: str) -> None:
        """A connection `admit` counted has closed."""
        self.by_address[address] -= 1
        if self.by_address[address] <= 0:
            del self.by_address[address]
        self.by_listener[listener] -= 1
        self.total -= 1
        waiters, self._slot_waiters = self._slot_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class ListenerQuota:
    """One listener's view of the quotas, for its acceptor."""

    def __init__(self, quotas: ConnectionQuotas, name: str) -> None:
        self.quotas = quotas
        self.name = name

    async def admit(self, address: str) -> bool:
        """Wait for the rate limits and a free slot, then count the connection from
        `address`; False when it must be closed (its address is at its limit)."""
        delay = self.quotas.creation_delay(self.name)
        if delay > 0:
            await asyncio.sleep(delay)
        await self.quotas.wait_for_slot(self.name)
        return self.quotas.admit(self.name, address)

    def release(self, address: str) -> None:
        self.quotas.release(self.name, address)

    def limit_for(self, address: str) -> int:
        return self.quotas.limit_for(address)
