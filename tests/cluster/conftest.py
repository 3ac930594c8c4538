"""Fixtures for the cluster tests: a real etcd server on free loopback ports.

Each test gets its own etcd (own temp data dir, own ports) so tests never see each
other's keys, leases or revisions; the server is killed at teardown. Start-up is
bounded by `EtcdServer.start_timeout_s`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.devcluster.etcd_server import EtcdServer

ETCD_START_TIMEOUT_S = 30.0

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # cluster_harness, whatever pytest's import mode
    sys.path.insert(0, str(HERE))


@pytest.fixture
def etcd_server(tmp_path: Path) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path / "etcd", start_timeout_s=ETCD_START_TIMEOUT_S)
    server.start()
    try:
        yield server
    finally:
        server.kill()
