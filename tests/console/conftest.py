"""Fixtures for the web console's tests: one broker and one console (``odradek console``,
a process of its own, as a user runs it) for the whole session, one headless Chromium
(Debian's, driven by Playwright), and consumer-group members as processes a test can
SIGKILL.

Chromium is ``/usr/bin/chromium`` (``scripts/test-system-deps.sh`` installs it; the
README's test command runs that script first), or the one ``ODRADEK_CHROMIUM`` names.
With ``ODRADEK_CONSOLE_SCREENSHOTS=DIR`` the screenshot tests also write their PNGs
there (docs/console.md's picture is made so).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from odradek.childproc import ChildProcess
from odradek.testing import BrokerProcess, free_port, wait_for_port

T = TypeVar("T")
HERE = Path(__file__).resolve().parent
CHROMIUM_ENV = "ODRADEK_CHROMIUM"
DEFAULT_CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS_ENV = "ODRADEK_CONSOLE_SCREENSHOTS"
# Chromium as root needs --no-sandbox; the rest keep it off the (closed) network.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
START_TIMEOUT_S = 30.0
POLL_INTERVAL = "0.5"
SAMPLE_INTERVAL = "1"


class ConsoleProcess(ChildProcess):
    """``odradek console`` in a child process."""

    label = "console"

    def __init__(
        self, bootstrap: str, work: Path, *, host: str = "127.0.0.1", extra: list[str] = ()
    ) -> None:
        super().__init__()
        self.bootstrap = bootstrap
        self.host = host
        self.port = free_port()
        self.work = work
        self.extra = list(extra)
        work.mkdir(parents=True, exist_ok=True)
        self.log_path = work / "console.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ConsoleProcess:
        self._spawn(
            [
                sys.executable, "-m", "odradek", "console",
                "--bootstrap", self.bootstrap,
                "--listen", f"{self.host}:{self.port}",
                "--lag-file", str(self.work / "lag.sqlite3"),
                "--poll-interval", POLL_INTERVAL,
                "--sample-interval", SAMPLE_INTERVAL,
                *self.extra,
            ]
        )  # fmt: skip
        if not wait_for_port("127.0.0.1", self.port, START_TIMEOUT_S):
            self.kill()
            raise RuntimeError(f"the console did not start:\n{self.log_tail()}")
        return self

    def get(self, path: str, *, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """(status, decoded JSON body) of a GET."""
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            body = exc.read()
            try:
                return exc.code, json.loads(body)
            except ValueError:
                return exc.code, body.decode(errors="replace")

    def api(self, path: str) -> Any:
        status, body = self.get(path)
        assert status == 200, (status, body)
        return body


def eventually(probe: Callable[[], T | None], what: str, timeout_s: float = 30.0) -> T:
    """Poll until ``probe`` gives something other than None/False."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


class Member:
    """A group member in a process of its own (``member_process.py``)."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str, logs: Path):
        self.client_id = client_id
        self.log_path = logs / f"{client_id}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(HERE / "member_process.py"), bootstrap, group, topic,
                 client_id],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


# Module-scoped, not session: Playwright's sync API keeps an event loop running in
# the main thread while it is open (every later asyncio.run() in the session would
# fail), and an idle console would go on polling its broker through the rest of
# the suite.
@pytest.fixture(scope="module")
def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path_factory.mktemp("console-broker") / "data",
        # Members started together form one first rebalance.
        settings={"group.initial.rebalance.delay.ms": "1500"},
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def console(
    console_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    process = ConsoleProcess(console_broker.bootstrap, tmp_path_factory.mktemp("console"))
    process.start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def members(console_broker: BrokerProcess, tmp_path: Path) -> Iterator[Callable[..., Member]]:
    started: list[Member] = []

    def start(group: str, topic: str, client_id: str) -> Member:
        m = Member(console_broker.bootstrap, group, topic, client_id, tmp_path)
        started.append(m)
        return m

    yield start
    for m in started:
        m.stop()


def chromium_path() -> str:
    path = os.environ.get(CHROMIUM_ENV) or DEFAULT_CHROMIUM
    if not Path(path).exists():
        pytest.fail(
            f"no Chromium at {path}: run scripts/test-system-deps.sh (it apt-installs "
            f"Debian's chromium), or set {CHROMIUM_ENV}",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(30_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.on(
        "console",
        lambda msg: errors.append(msg.text) if msg.type == "error" else None,
    )
    try:
        yield tab
    finally:
        context.close()
    # A page that broke a script, or a Content-Security-Policy it violates, is a defect.
    assert errors == [], errors


def screenshot(tab: Any, name: str, tmp_path: Path) -> Path:
    """A full-page PNG of ``tab``: in tmp_path, and in $ODRADEK_CONSOLE_SCREENSHOTS too."""
    path = tmp_path / name
    tab.screenshot(path=str(path), full_page=True)
    target = os.environ.get(SCREENSHOTS_ENV)
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        (Path(target) / name).write_bytes(path.read_bytes())
    return path
