"""The listener's accepted connections: Nagle is off, as on Kafka's brokers; the
connection limits hold them at the door."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from odradek.broker.acceptor import FrameReader, start_acceptor
from odradek.broker.config import BrokerConfig
from odradek.broker.connection_quotas import ConnectionQuotas
from odradek.ratelog import RateLimitedLog


def test_accepted_connections_have_nagle_off() -> None:
    """Pipelined responses must not wait for the client's delayed ACK (40 ms each)."""

    async def main() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            sock = writer.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        failures = RateLimitedLog(logging.getLogger("test"))
        server = await start_acceptor(handle, "127.0.0.1", 0, failures=failures)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()
            await server.wait_closed()

    assert asyncio.run(main()) != 0


def test_a_connection_waiting_for_a_slot_is_closed_with_the_listener_and_counts_nothing() -> None:
    """At max.connections the acceptor holds the connection it took (Kafka's acceptor
    blocks); closing the listener meanwhile closes it, never served."""

    async def main() -> tuple[int, bytes, int]:
        quotas = ConnectionQuotas(BrokerConfig.from_assignments(["max.connections=1"]), ["L"])
        served: list[int] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            served.append(1)
            await reader.read()  # until the client closes
            writer.close()

        failures = RateLimitedLog(logging.getLogger("test"))
        server = await start_acceptor(
            handle, "127.0.0.1", 0, failures=failures, quota=quotas.listener("L")
        )
        port = server.sockets[0].getsockname()[1]
        _, first = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(500):
            if served:
                break
            await asyncio.sleep(0.01)
        second_reader, second = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.sleep(0.2)
        waiting_served = len(served)
        server.close()
        await server.wait_closed()
        closed = await asyncio.wait_for(second_reader.read(), 5)
        first.close()
        second.close()

        async def released() -> None:
            while quotas.total:
                await asyncio.sleep(0.01)

        await asyncio.wait_for(released(), 5)  # the served connection gave its slot back
        return waiting_served, closed, len(served)

    waiting_served, closed, total_served = asyncio.run(main())
    assert waiting_served == 1 and total_served == 1
    assert closed == b""


def test_frame_reader_hands_over_a_payload_as_delivered_and_keeps_what_follows() -> None:
    async def main() -> None:
        reader = FrameReader(16, asyncio.get_running_loop())
        reader.feed_data(b"\x00\x00\x00\x0aAB")  # a size, then the payload's first bytes
        assert await reader.readexactly(4) == b"\x00\x00\x00\x0a"
        task = asyncio.create_task(reader.read_chunks(10))
        await asyncio.sleep(0)
        second = b"CDEFG"
        reader.feed_data(second)
        reader.feed_data(b"HIJnext")  # the payload's end, and the next frame's start
        parts = await asyncio.wait_for(task, 1)
        assert parts[0] == b"AB" and parts[1] is second  # delivered chunks, not copies
        assert b"".join(parts) == b"ABCDEFGHIJ"
        assert await reader.readexactly(4) == b"next"
        # The peer goes away inside a payload: the read fails, as readexactly's would.
        task = asyncio.create_task(reader.read_chunks(8))
        await asyncio.sleep(0)
        reader.feed_data(b"abc")
        reader.feed_eof()
        with pytest.raises(asyncio.IncompleteReadError):
            await asyncio.wait_for(task, 1)

    asyncio.run(main())
