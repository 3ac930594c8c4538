"""The per-broker proxies of `link_proxy`: a caller is recognised by its process (a
"broker" child process versus this test process), a cut link holds bytes without
resetting the connection and delivers them when healed, and other links keep working."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from link_proxy import CLIENT, LinkProxies

TIMEOUT_S = 5.0
# A stand-in broker: connects to the proxy named on stdin, sends each stdin line through,
# prints the lines that come back within 0.5 s, joined by "," (or "timeout" if none).
CALLER = """
import socket, sys
port = int(sys.stdin.readline())
sock = socket.create_connection(("127.0.0.1", port), timeout=5)
sock.settimeout(0.5)
print("connected", flush=True)
for line in sys.stdin:
    sock.sendall(line.encode())
    got = b""
    try:
        while True:
            got += sock.recv(100)
    except socket.timeout:
        pass
    print(",".join(got.decode().split()) or "timeout", flush=True)
"""


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(100):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()
    server.close()


@pytest.mark.timeout(30)
def test_links_are_told_apart_by_caller_and_cut_without_a_reset(echo) -> None:  # type: ignore[no-untyped-def]
    caller = subprocess.Popen(
        [sys.executable, "-c", CALLER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    proxies = LinkProxies({1: echo, 2: echo}, lambda: {7: caller.pid}).start()
    try:
        assert caller.stdin is not None and caller.stdout is not None

        def through_caller(line: str) -> str:
            caller.stdin.write(line + "\n")  # type: ignore[union-attr]
            caller.stdin.flush()  # type: ignore[union-attr]
            return caller.stdout.readline().strip()  # type: ignore[union-attr]

        caller.stdin.write(f"{proxies.ports[1]}\n")
        caller.stdin.flush()
        assert caller.stdout.readline().strip() == "connected"
        assert through_caller("one") == "one"
        mine = socket.create_connection(("127.0.0.1", proxies.ports[1]), timeout=TIMEOUT_S)
        mine.sendall(b"mine")
        assert mine.recv(100) == b"mine"
        assert proxies.accepted == {(7, 1): 1, (CLIENT, 1): 1}

        proxies.cut([(7, 1)])
        assert through_caller("two") == "timeout"  # held, not reset
        mine.sendall(b"still")
        assert mine.recv(100) == b"still"  # the client link is another link
        proxies.heal()
        assert through_caller("three") == "two,three"  # "two" delivered late, in order

        proxies.cut([(CLIENT, 2)])
        blocked = socket.create_connection(("127.0.0.1", proxies.ports[2]), timeout=0.5)
        blocked.sendall(b"x")
        with pytest.raises(TimeoutError):
            blocked.recv(100)
        assert proxies.cut_links() == [(CLIENT, 2)]
        proxies.heal()
        blocked.settimeout(TIMEOUT_S)
        assert blocked.recv(100) == b"x"
        for sock in (mine, blocked):
            sock.close()
    finally:
        proxies.stop()
        caller.kill()
        caller.wait(TIMEOUT_S)


@pytest.mark.timeout(30)
def test_a_caller_on_a_v4_mapped_ipv6_socket_is_recognised(echo) -> None:  # type: ignore[no-untyped-def]
    """gRPC (the brokers' etcd client) connects from an IPv6 socket to ::ffff:127.0.0.1."""
    proxies = LinkProxies({"etcd-0": echo}, dict).start()
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.settimeout(TIMEOUT_S)
            sock.connect(("::ffff:127.0.0.1", proxies.ports["etcd-0"]))
            sock.sendall(b"v6")
            assert sock.recv(100) == b"v6"
        assert proxies.accepted == {(CLIENT, "etcd-0"): 1}
    finally:
        proxies.stop()
