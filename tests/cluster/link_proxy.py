"""Network partitions on loopback: one TCP proxy in front of each broker, which knows who
is calling and can blackhole any link.

Brokers find each other through the address each one registers in etcd, the address it
advertises (``--advertise``), which clients also get from Metadata. A broker started
with ``--advertise 127.0.0.1:<its proxy's port>`` is therefore reached *only* through its
proxy, by clients and by the other brokers' replica fetchers alike. There is one address
per broker, so a proxy cannot tell links apart by the port it is called on; it tells them
apart by the process at the other end: the caller's socket is found in /proc/net/tcp
(local port = the accepted connection's peer port, remote port = the proxy's) and its
inode among the brokers' open file descriptors (/proc/<pid>/fd). A connection from this
test process is the ``CLIENT`` link. So every directed link (broker -> broker, clients ->
broker) can be cut on its own. Linux only. Brokers are also given a proxy per etcd member
as their ``--etcd`` endpoints (an upstream named by a string), so a broker's links to
etcd can be cut as well; etcd's own peer traffic goes direct.

A cut link is a blackhole, as a firewall dropping packets: the proxy stops reading both
ways, so bytes in flight stay in the kernel's buffers and the callers see timeouts, not
resets; when the link heals, forwarding resumes (what TCP retransmission gives after a
partition heals). New connections on a cut link are accepted and held the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

CLIENT = "client"
UNKNOWN = "unknown"
Source = int | str  # a broker id, CLIENT or UNKNOWN
Upstream = int | str  # a broker id, or another server's name (an etcd member's)
CHUNK = 65536
START_TIMEOUT_S = 10.0


def _tcp_inode(local_port: int, remote_port: int) -> int | None:
    """The inode of the loopback socket bound to `local_port` connected to `remote_port`
    (IPv4, or IPv6 with a v4-mapped address, as gRPC's etcd client makes)."""
    for table_path in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table_path) as table:
                next(table)
                for line in table:
                    fields = line.split()
                    local, remote = fields[1], fields[2]
                    if (
                        int(local.rsplit(":", 1)[1], 16) == local_port
                        and int(remote.rsplit(":", 1)[1], 16) == remote_port
                    ):
                        return int(fields[9])
        except (OSError, StopIteration, IndexError, ValueError):
            continue
    return None


def _owns_socket(pid: int, inode: int) -> bool:
    wanted = f"socket:[{inode}]"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == wanted:
                return True
    return False


def identify_caller(peer_port: int, proxy_port: int, broker_pids: dict[int, int | None]) -> Source:
    """Which broker (or this process, CLIENT) holds the calling end of a connection."""
    inode = _tcp_inode(peer_port, proxy_port)
    if inode is None:
        return UNKNOWN
    for broker_id, pid in sorted(broker_pids.items()):
        if pid is not None and _owns_socket(pid, inode):
            return broker_id
    if _owns_socket(os.getpid(), inode):
        return CLIENT
    return UNKNOWN


@dataclass
class _Link:
    """Whether a directed link forwards; a cut link's pumps wait on `open`."""

    open: asyncio.Event


class LinkProxies:
    """A proxy per upstream (each broker, each etcd member) on free loopback ports, run
    by a thread with its own event loop.

    `broker_pids` is asked on each new connection (brokers restart with new pids)."""

    def __init__(
        self,
        upstreams: dict[Upstream, tuple[str, int]],
        broker_pids: Callable[[], dict[int, int | None]],
    ) -> None:
        self.upstreams = dict(upstreams)
        self.broker_pids = broker_pids
        self.ports: dict[Upstream, int] = {}
        self.accepted: dict[tuple[Source, Upstream], int] = {}  # (source, upstream) -> count
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="link-proxies", daemon=True
        )
        self._servers: list[asyncio.Server] = []
        self._links: dict[tuple[Source, Upstream], _Link] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- from the test's thread ---------------------------------------------------

    def start(self) -> LinkProxies:
        self._thread.start()
        self._call(self._start_servers())
        return self

    def address(self, upstream: Upstream) -> str:
        return f"127.0.0.1:{self.ports[upstream]}"

    def bootstrap_servers(self) -> str:
        """The brokers' proxies."""
        brokers = sorted(u for u in self.ports if isinstance(u, int))
        return ",".join(self.address(b) for b in brokers)

    def cut(self, links: Iterable[tuple[Source, Upstream]]) -> None:
        """Blackhole each (source, upstream) link: `source`'s connections to `upstream`."""
        self._call(self._set(list(links), False))

    def heal(self) -> None:
        """Every link forwards again."""
        self._call(self._set(list(self._links), True))

    def cut_links(self) -> list[tuple[Source, Upstream]]:
        return sorted((k for k, link in self._links.items() if not link.open.is_set()), key=str)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._call(self._close())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(START_TIMEOUT_S)
        self._loop.close()

    def _call(self, coroutine):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(START_TIMEOUT_S)

    # -- on the proxies' loop -----------------------------------------------------

    async def _start_servers(self) -> None:
        for upstream in self.upstreams:
            server = await asyncio.start_server(
                lambda r, w, u=upstream: self._accept(u, r, w), "127.0.0.1", 0
            )
            self._servers.append(server)
            self.ports[upstream] = server.sockets[0].getsockname()[1]

    def _link(self, source: Source, upstream: Upstream) -> _Link:
        link = self._links.get((source, upstream))
        if link is None:
            link = self._links[(source, upstream)] = _Link(asyncio.Event())
            link.open.set()
        return link

    async def _set(self, links: list[tuple[Source, Upstream]], open_: bool) -> None:
        for source, upstream in links:
            link = self._link(source, upstream)
            if open_:
                link.open.set()
            else:
                link.open.clear()

    async def _accept(
        self, upstream: Upstream, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        peer_port = writer.get_extra_info("peername")[1]
        source = identify_caller(peer_port, self.ports[upstream], self.broker_pids())
        self.accepted[(source, upstream)] = self.accepted.get((source, upstream), 0) + 1
        link = self._link(source, upstream)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                *self.upstreams[upstream]
            )
        except OSError:  # the server is down: as a refused connection
            writer.close()
            return
        for pump in (
            self._pump(link, reader, upstream_writer),
            self._pump(link, upstream_reader, writer),
        ):
            task = asyncio.ensure_future(pump)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _pump(
        link: _Link, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            while True:
                await link.open.wait()
                data = await reader.read(CHUNK)
                if not data:
                    break
                await link.open.wait()  # cut meanwhile: hold it, as the network would
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
