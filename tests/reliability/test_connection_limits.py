"""Kafka's connection limits on real sockets (issue 19 item 9).

`max.connections.per.ip` (and its overrides) closes a connection past the
limit at once; `max.connections` makes the listener stop accepting until a
connection closes, as Kafka's acceptor does. The other connections keep
working either way.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable
from pathlib import Path

from odradek.protocol.apikeys import ApiKey
from odradek.testing import free_port

from ..broker.test_metrics import scrape
from ..broker.wire import WireClient
from .helpers import LimitedBroker, request_frame

API_VERSIONS = request_frame(ApiKey.API_VERSIONS, 0, {})
LISTENER = '{listener="PLAINTEXT"}'


def metrics_broker(
    start_broker: Callable[..., LimitedBroker],
    settings: dict[str, str] | None = None,
    extra_args: tuple[str, ...] = (),
) -> tuple[LimitedBroker, int]:
    """A broker with its metrics endpoint, once the start-up probe's connection is gone."""
    port = free_port()
    broker = start_broker(
        settings=settings, extra_args=("--metrics", f"127.0.0.1:{port}", *extra_args)
    )
    deadline = time.monotonic() + 10
    while scrape(port).get(f"odradek_connections{LISTENER}") != 0:
        assert time.monotonic() < deadline, "the start-up probe's connection stayed open"
        time.sleep(0.05)
    return broker, port


def answered(client: WireClient) -> bool:
    return client.request(ApiKey.API_VERSIONS, 0, {}).error_code == 0


def closed_by_peer(sock: socket.socket, timeout_s: float) -> bool:
    """Whether the broker closes `sock` within `timeout_s` (with no answer)."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_a_connection_past_max_connections_per_ip_is_closed_and_the_others_work(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    broker, metrics_port = metrics_broker(start_broker, settings={"max.connections.per.ip": "2"})
    first, second = WireClient(broker.bootstrap), WireClient(broker.bootstrap)
    assert answered(first) and answered(second)
    refused = socket.create_connection((broker.host, broker.port), timeout=10)
    try:
        refused.sendall(API_VERSIONS)
        assert closed_by_peer(refused, 10), "a third connection from 127.0.0.1 was served"
    finally:
        refused.close()
    assert answered(first) and answered(second)
    samples = scrape(metrics_port)
    assert samples[f"odradek_connections_refused_total{LISTENER}"] == 1
    assert samples[f"odradek_connections{LISTENER}"] == 2
    assert "refused a connection from 127.0.0.1" in broker.log_tail(20)
    # Once one closes, a new connection is served.
    first.close()
    deadline = time.monotonic() + 10
    while scrape(metrics_port)[f"odradek_connections{LISTENER}"] != 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    third = WireClient(broker.bootstrap)
    assert answered(third) and answered(second)
    third.close()
    second.close()


def test_max_connections_holds_a_new_connection_until_another_closes(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    broker, _ = metrics_broker(start_broker, settings={"max.connections": "2"})
    first, second = WireClient(broker.bootstrap), WireClient(broker.bootstrap)
    assert answered(first) and answered(second)
    waiting = socket.create_connection((broker.host, broker.port), timeout=10)
    try:
        waiting.sendall(API_VERSIONS)
        readable, _, _ = select.select([waiting], [], [], 1.0)
        assert not readable, "a connection past max.connections was served"
        assert answered(first) and answered(second)
        first.close()  # a slot frees: the waiting connection is taken and answered
        waiting.settimeout(10)
        size = int.from_bytes(waiting.recv(4), "big")
        assert size > 0
    finally:
        waiting.close()
        second.close()


def test_limits_from_a_config_file_with_a_host_name_override(
    start_broker: Callable[..., LimitedBroker], tmp_path: Path
) -> None:
    """`--config` takes the settings as Kafka writes them; an override may name a host."""
    config = tmp_path / "server.properties"
    config.write_text(
        "max.connections=100\n"
        "max.connections.per.ip=0\n"
        "max.connections.per.ip.overrides=localhost:1\n"
        "listener.name.plaintext.max.connections=50\n"
        "max.connection.creation.rate=1000\n"
    )
    broker, metrics_port = metrics_broker(start_broker, extra_args=("--config", str(config)))
    only = WireClient(broker.bootstrap)
    assert answered(only)
    refused = socket.create_connection((broker.host, broker.port), timeout=10)
    try:
        assert closed_by_peer(refused, 10), "a second connection from localhost was served"
    finally:
        refused.close()
    assert answered(only)
    assert scrape(metrics_port)[f"odradek_connections_refused_total{LISTENER}"] == 1
    only.close()
