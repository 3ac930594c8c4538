"""The listener's accepted connections: Nagle is off, as on Kafka's brokers."""

from __future__ import annotations

import asyncio
import logging
import socket

from odradek.broker.acceptor import start_acceptor
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
