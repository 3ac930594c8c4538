"""The console is safe by default: loopback unless told otherwise, a login anywhere else
(in Chromium), CSRF tokens on mutations, a strict Content-Security-Policy, every asset
from the package, ``--read-only``; and ``odradek serve --console`` runs it inside the
broker's process, which still stops cleanly on SIGTERM."""

from __future__ import annotations

import http.cookiejar
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.testing import BrokerProcess, free_port, wait_for_port

from .conftest import ConsoleProcess, eventually

pytestmark = pytest.mark.timeout(120)
PASSWORD = "correct horse battery"


def request(
    opener: urllib.request.OpenerDirector,
    url: str,
    *,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], str]:
    req = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with opener.open(req, timeout=30) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def browser_like() -> urllib.request.OpenerDirector:
    """An opener that keeps cookies, as a browser does."""
    return urllib.request.build_opener(
        urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
    )


def test_pages_and_api_carry_a_strict_csp_and_load_nothing_from_elsewhere(
    console: ConsoleProcess,
) -> None:
    opener = browser_like()
    for path in ("/groups", "/topics", "/cluster", "/api/groups", "/api/cluster"):
        status, headers, body = request(opener, console.url + path)
        assert status == 200, (path, body)
        csp = headers["Content-Security-Policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert headers["X-Content-Type-Options"] == "nosniff"
        if path.startswith("/api/"):
            json.loads(body)
        else:  # every script, style and link is the console's own
            refs = re.findall(r'(?:src|href|action)="([^"]*)"', body)
            assert refs and all(r.startswith(("/", "?", "#")) for r in refs), refs
            assert "style=" not in body and "<script>" not in body
    for asset, kind in (("console.js", "javascript"), ("console.css", "text/css")):
        status, headers, body = request(opener, f"{console.url}/static/{asset}")
        assert status == 200 and kind in headers["Content-Type"] and len(body) > 500


def test_mutations_need_the_session_csrf_token(console: ConsoleProcess) -> None:
    opener = browser_like()
    form = b"target=earliest&execute=0"
    kind = {"Content-Type": "application/x-www-form-urlencoded"}
    # No token (as a form another site made a visitor's browser send): refused.
    status, _, body = request(
        opener, f"{console.url}/groups/anything/reset", data=form, headers=kind
    )
    assert status == 403 and "did not come from this console" in body
    status, _, body = request(
        opener,
        f"{console.url}/api/groups/anything/reset",
        data=b'{"target": "earliest"}',
        headers={"Content-Type": "application/json"},
    )
    assert status == 403 and "CSRF" in json.loads(body)["error"]
    # The session's token: accepted (the group does not exist: a one-line 404).
    _, _, session = request(opener, f"{console.url}/api/session")
    token = json.loads(session)["csrf"]
    status, _, body = request(
        opener,
        f"{console.url}/api/groups/no-such-group/reset",
        data=b'{"target": "earliest"}',
        headers={"Content-Type": "application/json", "X-CSRF-Token": token},
    )
    assert status == 404 and json.loads(body) == {"error": "group 'no-such-group' does not exist"}
    # Someone else's token: refused.
    status, _, _ = request(
        opener,
        f"{console.url}/groups/anything/reset",
        data=form + b"&csrf=" + token[::-1].encode(),
        headers=kind,
    )
    assert status == 403


def run_cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_another_address_than_loopback_needs_a_users_file(
    console_broker: BrokerProcess, tmp_path: Path
) -> None:
    port = free_port()
    refused = run_cli(
        "console", "--bootstrap", console_broker.bootstrap, "--listen", f"0.0.0.0:{port}"
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("odradek: --listen 0.0.0.0:") and "--users FILE" in (
        refused.stderr
    )
    assert len(refused.stderr.splitlines()) == 1
    short = run_cli("console", "--users", str(tmp_path / "u"), "--set-password", "bob", stdin="x\n")
    assert short.returncode == 2 and "at least 8 characters" in short.stderr
    empty = tmp_path / "empty"
    empty.write_text("# nobody\n")
    no_users = run_cli("console", "--listen", f"0.0.0.0:{port}", "--users", str(empty))
    assert no_users.returncode == 2 and "has no users" in no_users.stderr


@pytest.fixture(scope="module")
def guarded_console(
    console_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    """A console on every interface (0.0.0.0: only reached here through 127.0.0.1), which
    therefore asks for a login, and is read-only."""
    work = tmp_path_factory.mktemp("guarded")
    users = work / "users.txt"
    added = run_cli("console", "--users", str(users), "--set-password", "alice", stdin=PASSWORD)
    assert added.returncode == 0 and "Added alice" in added.stdout, added.stderr
    assert users.stat().st_mode & 0o077 == 0  # readable by its owner only
    assert PASSWORD not in users.read_text()
    process = ConsoleProcess(
        console_broker.bootstrap,
        work,
        host="0.0.0.0",
        extra=["--users", str(users), "--read-only"],
    )
    process.start()
    try:
        yield process
    finally:
        process.stop()


def test_a_console_on_another_address_asks_for_a_login(
    guarded_console: ConsoleProcess, page: Any
) -> None:
    url = guarded_console.url
    status, body = guarded_console.get("/api/groups")
    assert status == 401 and body == {"error": "sign in first (POST /login)"}
    page.goto(f"{url}/cluster")
    assert page.url.startswith(f"{url}/login?next=")
    page.fill("#username", "alice")
    page.fill("#password", "not the password")
    page.click("form.login button")
    assert "Wrong user or password." in page.locator(".error").inner_text()
    page.fill("#username", "alice")
    page.fill("#password", PASSWORD)
    page.click("form.login button")
    assert page.url == f"{url}/cluster"  # back where the visitor was going
    assert "signed in as alice" in page.locator("header").inner_text()
    assert page.locator("#cluster-brokers table.brokers tbody tr").count() == 1
    page.goto(f"{url}/groups")
    assert "read-only" in page.locator("header").inner_text()
    page.click("form.logout button")
    assert page.url.startswith(f"{url}/login")
    page.goto(f"{url}/groups")
    assert page.url.startswith(f"{url}/login")


def test_a_read_only_console_changes_nothing(guarded_console: ConsoleProcess) -> None:
    opener = browser_like()
    url = guarded_console.url
    _, _, login = request(opener, f"{url}/login")
    csrf = re.search(r'name="csrf" value="([^"]+)"', login)
    assert csrf is not None
    status, _, _ = request(
        opener,
        f"{url}/login",
        data=f"csrf={csrf[1]}&username=alice&password={PASSWORD}&next=/groups".encode(),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 200
    _, _, session = request(opener, f"{url}/api/session")
    info = json.loads(session)
    assert info["user"] == "alice" and info["read_only"] is True
    status, _, body = request(
        opener,
        f"{url}/api/groups/any/reset",
        data=b'{"target": "earliest", "execute": true}',
        headers={"Content-Type": "application/json", "X-CSRF-Token": info["csrf"]},
    )
    assert status == 403 and "read-only" in json.loads(body)["error"]


def test_serve_console_runs_in_the_brokers_process_and_stops_with_it(tmp_path: Path) -> None:
    port = free_port()
    broker = BrokerProcess(tmp_path / "data", extra_args=["--console", str(port)])
    broker.start()
    try:
        assert wait_for_port("127.0.0.1", port, 30)
        url = f"http://127.0.0.1:{port}"

        def cluster() -> Any:
            with urllib.request.urlopen(f"{url}/api/cluster", timeout=10) as response:
                body = json.loads(response.read())
            return body["brokers"] and body

        body = eventually(cluster, "the embedded console to see its broker")
        assert [b["port"] for b in body["brokers"]] == [broker.port]
        assert (tmp_path / "data" / "console-lag.sqlite3").exists()
    finally:
        code = broker.stop()
    assert code == 0, broker.log_tail()
    assert "Traceback" not in broker.log_path.read_text()
    bad = run_cli("serve", "--data-dir", str(tmp_path / "x"), "--console", "0.0.0.0:1")
    assert bad.returncode == 2 and "--console-users" in bad.stderr
