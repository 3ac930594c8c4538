"""A real Odradek broker for pytest, on a free loopback port.

Installed as a pytest plugin (entry point ``pytest11``), so any project that
installs Odradek gets these fixtures:

- ``odradek_broker``: a fresh broker per test, in a subprocess, with its own
  data directory. ``kill()`` (SIGKILL), ``stop()`` (SIGTERM), ``start()`` and
  ``restart()`` let a test exercise crashes and recovery.
- ``odradek_session_broker``: one broker shared by every test of the run.

``BrokerProcess(..., listeners={"SASL_SSL": "SASL_SSL", "CLIENT": "SSL"})`` starts
a broker with several listeners (name -> security protocol), each on its own free
port (``address(name)``); ``config_file=`` passes a Kafka ``server.properties``
(when it sets ``listeners``, give ``port=`` the one to wait for).

Set ``ODRADEK_TEST_BOOTSTRAP=host:port`` to run the same tests against another
Kafka-compatible broker: the fixtures then hand out that address, and tests
marked ``embedded`` (they kill, restart or read the data directory) are
deselected, because nothing can be done to a broker we did not start.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from odradek.childproc import ChildProcess

EXTERNAL_BOOTSTRAP_ENV = "ODRADEK_TEST_BOOTSTRAP"
START_TIMEOUT_S = 30.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class BrokerProcess(ChildProcess):
    """An Odradek broker in a child process, bound to 127.0.0.1."""

    external = False
    label = "broker"

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        settings: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        extra_args: Sequence[str] = (),
        listeners: Mapping[str, str] | None = None,
        config_file: Path | None = None,
    ) -> None:
        super().__init__()
        self.host = host
        self.listeners = dict(listeners or {})  # name -> security protocol
        self.ports = {name: free_port(host) for name in self.listeners}
        self.port = port or (next(iter(self.ports.values())) if self.ports else free_port(host))
        self.data_dir = Path(data_dir)
        self.settings = dict(settings or {})
        self.extra_args = list(extra_args)
        self.config_file = config_file
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.broker.log"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def address(self, listener: str) -> str:
        """HOST:PORT of one of ``listeners``."""
        return f"{self.host}:{self.ports[listener]}"

    def command(self) -> list[str]:
        cmd = [sys.executable, "-m", "odradek", "serve", "--data-dir", str(self.data_dir)]
        if self.listeners:
            urls = ",".join(f"{n}://{self.host}:{p}" for n, p in self.ports.items())
            protocols = ",".join(f"{n}:{proto}" for n, proto in self.listeners.items())
            cmd += ["--set", f"listeners={urls}"]
            cmd += ["--set", f"listener.security.protocol.map={protocols}"]
        elif not self._file_sets_listeners():
            cmd += ["--listen", self.bootstrap]
        if self.config_file is not None:
            cmd += ["--config", str(self.config_file)]
        for key, value in self.settings.items():
            cmd += ["--set", f"{key}={value}"]
        return cmd + self.extra_args

    def _file_sets_listeners(self) -> bool:
        """A config file with `listeners` says where to listen (give port= to wait on)."""
        if self.config_file is None:
            return False
        from odradek.cli.properties import read_properties

        return bool(read_properties(self.config_file, "config_file").get("listeners"))

    def start(self) -> BrokerProcess:
        if self.running:
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._spawn(self.command())
        for port in self.ports.values() or (self.port,):
            if not wait_for_port(self.host, port, START_TIMEOUT_S):
                self.kill()
                raise RuntimeError(
                    f"broker did not start in {START_TIMEOUT_S}s:\n{self.log_tail()}"
                )
        return self


class ExternalBroker:
    """A broker somebody else runs (ODRADEK_TEST_BOOTSTRAP): address only."""

    external = True

    def __init__(self, bootstrap: str) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.host = host
        self.port = int(port)
        self.bootstrap = bootstrap


Broker = BrokerProcess | ExternalBroker


def _external() -> ExternalBroker | None:
    bootstrap = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    return ExternalBroker(bootstrap) if bootstrap else None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "embedded: needs a broker this test run starts itself (kill, restart, data)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _external() is None:
        return
    kept, deselected = [], []
    for item in items:
        (deselected if item.get_closest_marker("embedded") else kept).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture
def odradek_broker(tmp_path: Path) -> Iterator[Broker]:
    """A fresh broker for one test (or the external one, see module docs)."""
    external = _external()
    if external is not None:
        yield external
        return
    broker = BrokerProcess(tmp_path / "broker-data")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def odradek_session_broker() -> Iterator[Broker]:
    """One broker for the whole test run; tests must use unique topic names."""
    external = _external()
    if external is not None:
        yield external
        return
    with tempfile.TemporaryDirectory(prefix="odradek-session-") as tmp:
        broker = BrokerProcess(Path(tmp) / "broker-data")
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()


def start_broker(data_dir: Path, settings: dict[str, str] | None = None) -> BrokerProcess:
    """Start a broker outside pytest (scripts, benchmarks)."""
    return BrokerProcess(data_dir, settings=settings).start()


__all__: Sequence[str] = (
    "Broker",
    "BrokerProcess",
    "ExternalBroker",
    "free_port",
    "odradek_broker",
    "odradek_session_broker",
    "start_broker",
)
