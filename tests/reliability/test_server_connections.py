"""Connections that misbehave: never read, trickle bytes, pipeline bursts, exhaust fds.

Each test drives the attack as a peer would (raw frames on a socket) against a
broker subprocess, and checks what it must not be able to do: pin memory, hold
a connection open forever, starve other clients, or flood the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import socket
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer

from odradek.broker.config import BrokerConfig
from odradek.broker.server import Broker
from odradek.protocol.apikeys import ApiKey

from ..broker.wire import WireClient
from .helpers import LimitedBroker, open_fds, proc_status, request_frame

METADATA_V1_ALL = {"topics": None}


def wait_until(condition: Callable[[], bool], timeout_s: float, step_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step_s)
    return condition()


def fetch_frame(topic: str, max_bytes: int, correlation: int) -> bytes:
    return request_frame(
        ApiKey.FETCH,
        4,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": max_bytes}
                    ],
                }
            ],
        },
        correlation,
    )


def produce_bytes(bootstrap: str, topic: str, total: int, size: int = 16_384) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20, "acks": 1}
    )
    payload = os.urandom(size)
    for _ in range(total // size):
        producer.produce(topic, payload)
        producer.poll(0)
    assert producer.flush(60) == 0


def test_pipelined_fetches_never_read_hold_one_response_and_get_closed(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    broker = start_broker(settings={"socket.send.timeout.ms": "2000"})
    assert broker.pid is not None
    produce_bytes(broker.bootstrap, "big", 6 << 20)
    baseline_kb = proc_status(broker.pid, "VmRSS")

    attacker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    attacker.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    attacker.connect((broker.host, broker.port))
    # 40 fetches of the whole 6 MiB log, pipelined, and never a byte read back.
    attacker.sendall(b"".join(fetch_frame("big", 64 << 20, i) for i in range(40)))

    # Other clients are still served while the attacker holds its connection.
    with WireClient(broker.bootstrap) as victim:
        assert victim.request(ApiKey.METADATA, 1, METADATA_V1_ALL).topics
    closed = wait_until(lambda: "socket.send.timeout.ms" in broker.log_tail(200), 30)
    peak_kb = proc_status(broker.pid, "VmHWM")
    attacker.settimeout(10)
    received = 0
    try:
        while chunk := attacker.recv(1 << 20):
            received += len(chunk)
    except (ConnectionResetError, TimeoutError):
        pass
    attacker.close()
    assert closed, "a peer that reads nothing kept its connection:\n" + broker.log_tail()
    # Without a bound the broker buffers all 40 responses (240 MiB); it may hold one.
    assert (peak_kb - baseline_kb) < 48 * 1024, (baseline_kb, peak_kb)
    assert received < 2 * (6 << 20)


def test_a_frame_trickled_one_byte_at_a_time_is_closed(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    broker = start_broker(settings={"socket.receive.timeout.ms": "1500"})
    frame = request_frame(ApiKey.API_VERSIONS, 0, {})
    sock = socket.create_connection((broker.host, broker.port), timeout=10)
    sent = 0
    closed = False
    try:
        for byte in frame:
            sock.sendall(bytes([byte]))
            sent += 1
            readable, _, _ = select.select([sock], [], [], 0.4)
            if readable:
                try:
                    closed = sock.recv(4096) == b""
                except ConnectionResetError:
                    closed = True
                break
    except (BrokenPipeError, ConnectionResetError):
        closed = True
    finally:
        sock.close()
    assert closed, f"the broker answered a frame trickled over {0.4 * len(frame):.0f}s"
    assert sent < len(frame)
    assert "did not arrive in time" in broker.log_tail()


def test_a_pipelined_burst_yields_to_other_connections(tmp_path: Path) -> None:
    """20,000 pipelined requests on one connection do not keep another waiting behind them."""
    burst = 20_000

    async def scenario() -> tuple[list[int], int, int]:
        broker = Broker(tmp_path / "data", BrokerConfig(), port=0)
        await broker.start()
        order: list[int] = []
        dispatch = broker._dispatch

        async def recording(connection_id: int, client_host: str, payload: bytes) -> bytes | None:
            order.append(connection_id)
            return await dispatch(connection_id, client_host, payload)

        broker._dispatch = recording  # type: ignore[method-assign]
        frame = request_frame(ApiKey.API_VERSIONS, 0, {})
        try:
            a_reader, a_writer = await asyncio.open_connection("127.0.0.1", broker.port)
            b_reader, b_writer = await asyncio.open_connection("127.0.0.1", broker.port)
            for writer, reader in ((a_writer, a_reader), (b_writer, b_reader)):
                writer.write(frame)
                await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
            a_id, b_id = order[0], order[1]

            async def read_responses(reader: asyncio.StreamReader, count: int) -> None:
                for _ in range(count):
                    size = int.from_bytes(await reader.readexactly(4), "big")
                    await reader.readexactly(size)

            a_drain = asyncio.create_task(read_responses(a_reader, burst))
            a_writer.write(frame * burst)
            b_writer.write(frame)
            await asyncio.wait_for(read_responses(b_reader, 1), 60)
            await asyncio.wait_for(a_drain, 120)
            for writer in (a_writer, b_writer):
                writer.close()
            return order, a_id, b_id
        finally:
            await broker.stop()

    order, a_id, b_id = asyncio.run(scenario())
    after_warmup = order[2:]
    position = after_warmup.index(b_id)
    served_first = after_warmup[:position].count(a_id)
    assert after_warmup.count(a_id) == burst
    # Before the fix every frame of a 256 KiB read (about 11,000 here) ran first.
    assert served_first < 1000, served_first


def test_out_of_descriptors_accept_backs_off_and_logs_once(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    broker = start_broker(rlimits={"RLIMIT_NOFILE": 300})
    assert broker.pid is not None
    spare = 300 - open_fds(broker.pid)
    held = [socket.create_connection((broker.host, broker.port), timeout=5) for _ in range(spare)]
    # Every descriptor is taken; keep knocking for a while, as reconnecting clients do.
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            socket.create_connection((broker.host, broker.port), timeout=0.2).close()
    for sock in held:
        sock.close()
    log_text = broker.log_path.read_text(errors="replace")
    accept_errors = log_text.count("Too many open files")
    assert 1 <= accept_errors <= 3, f"{accept_errors} accept errors logged"
    assert "Traceback" not in log_text
    # Once descriptors are free again the broker serves new connections.
    with WireClient(broker.bootstrap, timeout_s=20) as client:
        assert client.request(ApiKey.METADATA, 1, METADATA_V1_ALL).brokers


def test_wildcard_listener_advertises_the_host_name(tmp_path: Path) -> None:
    class WildcardBroker(LimitedBroker):
        def command(self) -> list[str]:
            cmd = super().command()
            cmd[cmd.index("--listen") + 1] = f"0.0.0.0:{self.port}"
            return cmd

    broker = WildcardBroker(tmp_path / "data").start()
    try:
        with WireClient(broker.bootstrap) as client:
            (advertised,) = client.request(ApiKey.METADATA, 1, METADATA_V1_ALL).brokers
    finally:
        broker.stop()
    assert advertised.host == socket.getfqdn()
    assert advertised.host != "0.0.0.0"
    assert advertised.port == broker.port
