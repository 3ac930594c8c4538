"""Large request frames against the request memory budget (queued.max.request.bytes).

Issue 19 item 7: frames together over the budget deadlocked the broker for good.
Issue 24 item 1: connections that stop (or trickle) inside large frames stalled
every other client until the receive timeout closed them.

Frames here are 4 MiB against a budget of 8 MiB (the smallest Kafka allows
with socket.request.max.bytes at 4 MiB), so each test runs in seconds; the
100 MB figures are bench/hostile.py's ("stalled frames", "3 x 100 MB frames").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.server import Broker
from odradek.protocol.apikeys import ApiKey

from ..broker.wire import WireClient
from .helpers import LimitedBroker, request_frame

FRAME_MAX = 4 << 20
BUDGET = 8 << 20
SMALL_BUDGET = {"socket.request.max.bytes": str(FRAME_MAX), "queued.max.request.bytes": str(BUDGET)}


def produce_frame(size: int, correlation: int = 1) -> bytes:
    """A Produce request of `size` bytes in all (answered CORRUPT_MESSAGE: its records
    are zeros), to show that a large frame was read and served."""
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 10_000,
        "topic_data": [{"name": "big", "partition_data": [{"index": 0, "records": b""}]}],
    }
    overhead = len(request_frame(ApiKey.PRODUCE, 3, body, correlation))
    body["topic_data"][0]["partition_data"][0]["records"] = bytes(size - overhead)
    frame = request_frame(ApiKey.PRODUCE, 3, body, correlation)
    assert len(frame) == size
    return frame


LARGE = produce_frame(FRAME_MAX)
API_VERSIONS = request_frame(ApiKey.API_VERSIONS, 0, {})


async def read_response(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


async def until(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def test_frames_together_over_the_budget_are_answered_and_peers_that_give_up_free_it(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        broker = Broker(tmp_path / "data", BrokerConfig(SMALL_BUDGET), port=0)
        await broker.start()
        budget = broker.budget

        async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            return await asyncio.open_connection("127.0.0.1", broker.port)

        try:
            # Three whole frames at once, 12 MiB against 8: every one is answered.
            peers = [await connect() for _ in range(3)]
            for _, writer in peers:
                writer.write(LARGE)
            for reader, _ in peers:
                await asyncio.wait_for(read_response(reader), 30)
            # Three peers stop inside their frames: together they exhaust the budget.
            stalled = [await connect() for _ in range(3)]
            for _, writer in stalled:
                writer.write(LARGE[: FRAME_MAX * 9 // 10])
            await until(lambda: budget.used >= BUDGET)
            # Two more frames wait for memory; small requests are served meanwhile.
            waiting = [await connect() for _ in range(2)]
            for _, writer in waiting:
                writer.write(LARGE)
            await until(lambda: budget.waiting == 2)
            client_reader, client = peers[0]
            client.write(API_VERSIONS)
            await asyncio.wait_for(read_response(client_reader), 5)
            # Every peer holding or waiting for memory gives up and closes.
            for _, writer in stalled + waiting:
                writer.transport.abort()
            await until(lambda: budget.used == 0 and budget.waiting == 0)
            # Nothing is held: the next large frame is answered at once.
            client.write(LARGE)
            await asyncio.wait_for(read_response(client_reader), 10)
            for _, writer in peers:
                writer.close()
        finally:
            await broker.stop()

    asyncio.run(scenario())


def _attack(address: tuple[str, int], stop: threading.Event, *, trickle: bool) -> None:
    """One connection inside a large frame until `stop`: 90% of it sent at once, then
    nothing; or (`trickle`) 64 KiB every 100 ms (a 4 MiB frame would take 6.4 s)."""
    with socket.create_connection(address, timeout=30) as sock:
        try:
            if not trickle:
                sock.sendall(LARGE[: FRAME_MAX * 9 // 10])  # blocks while muted
            sent = 0
            while trickle and not stop.wait(0.1):
                sock.sendall(LARGE[sent : sent + (64 << 10)])
                sent += 64 << 10
        except OSError:
            return  # closed by the broker (it should not be within the test)
        stop.wait()


def start_attacks(address: tuple[str, int], stop: threading.Event) -> list[threading.Thread]:
    """Five connections that stall inside large frames and five that trickle them."""
    threads = [
        threading.Thread(target=_attack, args=(address, stop), kwargs={"trickle": i % 2 == 1})
        for i in range(10)
    ]
    for thread in threads:
        thread.start()
    return threads


def test_unfinished_large_frames_do_not_delay_other_clients(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    """Issue 24 item 1: five connections stop inside large frames and five trickle theirs;
    the other clients' requests stay under 50 ms at the 99th percentile."""
    broker = start_broker(settings=SMALL_BUDGET)
    stop = threading.Event()
    attacks = start_attacks((broker.host, broker.port), stop)
    try:
        time.sleep(0.5)  # the attackers' frames have started and exhausted the budget
        clients = [WireClient(broker.bootstrap) for _ in range(5)]
        latencies = []
        for i in range(500):
            started = time.perf_counter()
            assert clients[i % 5].request(ApiKey.API_VERSIONS, 0, {}).error_code == 0
            latencies.append(time.perf_counter() - started)
        for client in clients:
            client.close()
        assert all(thread.is_alive() for thread in attacks), "an attacker was closed"
    finally:
        stop.set()
        for thread in attacks:
            thread.join(10)
    p99 = sorted(latencies)[int(0.99 * len(latencies))]
    assert p99 < 0.050, f"other clients' p99 {p99 * 1000:.1f} ms"


def test_waiting_for_request_memory_counts_against_the_receive_timeout(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> float:
        config = BrokerConfig({**SMALL_BUDGET, "socket.receive.timeout.ms": "1000"})
        broker = Broker(tmp_path / "data", config, port=0)
        await broker.start()
        broker.budget.charge(BUDGET)  # held all along (as by responses being sent)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            writer.write(LARGE)  # all of it sent: the frame only waits for memory
            started = time.monotonic()
            with contextlib.suppress(ConnectionResetError):  # closed with the frame unread
                assert await asyncio.wait_for(reader.read(), 10) == b"", "answered"
            took = time.monotonic() - started
            writer.close()
            # Small requests were never held up by it.
            reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
            writer.write(API_VERSIONS)
            await asyncio.wait_for(read_response(reader), 5)
            writer.close()
            return took
        finally:
            broker.budget.release(BUDGET)
            await broker.stop()

    with caplog.at_level(logging.WARNING, logger="odradek.broker"):
        took = asyncio.run(scenario())
    assert 0.9 <= took < 5, took
    assert "waiting for request memory" in caplog.text, caplog.text
    assert "socket.receive.timeout.ms" in caplog.text


def test_produce_requests_with_large_records_are_stored_intact(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    """Records of 1 MiB or more are read without a copy (views of the request); plain and
    compressed ones are appended and read back byte for byte."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = start_broker(settings={"message.max.bytes": str(8 << 20)})
    values = [os.urandom(3 << 20), os.urandom(2 << 20)]
    for codec in ("none", "gzip"):
        producer = Producer(
            {
                "bootstrap.servers": broker.bootstrap,
                "compression.type": codec,
                "message.max.bytes": 10 << 20,
                "linger.ms": 50,
            }
        )
        for value in values:
            producer.produce(f"large-{codec}", value)
        assert producer.flush(30) == 0
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": f"large-{codec}",
                "auto.offset.reset": "earliest",
                "fetch.max.bytes": 32 << 20,
                "max.partition.fetch.bytes": 16 << 20,
            }
        )
        consumer.assign([TopicPartition(f"large-{codec}", 0, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < len(values) and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                got.append(message.value())
        consumer.close()
        assert got == values, codec
