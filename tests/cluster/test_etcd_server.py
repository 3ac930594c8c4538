"""`odradek.devcluster.etcd_server`: start, health, stop, restart, clear start failures."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest

from odradek.devcluster.etcd_server import EtcdServer, EtcdStartError, find_etcd_binary


def test_server_is_healthy_after_start_and_restarts_on_the_same_endpoint(
    etcd_server: EtcdServer,
) -> None:
    assert etcd_server.running and etcd_server.healthy()
    endpoint = etcd_server.endpoint
    assert endpoint[0] == "127.0.0.1"
    # etcd handles SIGTERM (closes its store), then re-raises it on itself
    assert etcd_server.stop() in (0, -signal.SIGTERM)
    assert not etcd_server.running
    assert not etcd_server.healthy()
    etcd_server.start()
    assert etcd_server.endpoint == endpoint and etcd_server.healthy()


def test_start_fails_clearly_when_the_client_port_is_taken(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        server = EtcdServer(
            tmp_path / "etcd", client_port=taken.getsockname()[1], start_timeout_s=30.0
        )
        try:
            with pytest.raises(EtcdStartError, match="exited during start"):
                server.start()
        finally:
            server.kill()
    assert not server.running


def test_start_fails_clearly_without_an_etcd_binary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ODRADEK_ETCD_BINARY", str(tmp_path / "no-such-etcd"))
    assert find_etcd_binary() == str(tmp_path / "no-such-etcd")
    with pytest.raises(FileNotFoundError):
        EtcdServer(tmp_path / "etcd").start()


def test_bad_arguments_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must differ"):
        EtcdServer(tmp_path, client_port=23790, peer_port=23790)
    with pytest.raises(ValueError, match="positive"):
        EtcdServer(tmp_path, start_timeout_s=0)
