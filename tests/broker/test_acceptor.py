"""The listener's accepted connections: Nagle is off, as on Kafka's brokers; the
connection limits hold them at the door."""

from __future__ import annotations

import asyncio
import logging
import socket

import pytest

from odradek.broker.acceptor import start_acceptor
from odradek.broker.config import BrokerConfig
from odradek.broker.connection import Connection
from odradek.broker.connection_quotas import ConnectionQuotas
from odradek.ratelog import RateLimitedLog


def test_accepted_connections_have_nagle_off() -> None:
    """Pipelined responses must not wait for the client's delayed ACK (40 ms each)."""

    async def main() -> int:
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def handle(connection: Connection) -> None:
            sock = connection.get_extra_info("socket")
            seen.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            connection.close()

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

        async def handle(connection: Connection) -> None:
            served.append(1)
            with pytest.raises(asyncio.IncompleteReadError):
                await connection.wait_for(1)  # until the client closes
            connection.close()

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
