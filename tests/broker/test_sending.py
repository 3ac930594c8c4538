"""Sending responses in parts: bytes through the transport, file regions with sendfile
(or read in chunks where a transport cannot sendfile), over a real loopback socket."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from odradek.broker import sending
from odradek.broker.budget import ByteBudget
from odradek.log.files import FileCache, FileRegion, SegmentFile
from odradek.protocol.fetch import EncodedResponse

pytestmark = pytest.mark.timeout(60)


def region_of(path: Path, data: bytes, position: int, length: int) -> tuple[FileRegion, FileCache]:
    path.write_bytes(data)
    cache = FileCache(4)
    file = SegmentFile(str(path))
    with cache.use(file):
        region = FileRegion(cache, file, position, length)
    return region, cache


async def exchange(
    send: Callable[[asyncio.StreamWriter], Awaitable[None]], expect: int
) -> tuple[bytes, BaseException | None]:
    """Run ``send`` on the server side of a loopback TCP connection; what the peer got."""
    done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await send(writer)
            done.set_result(None)
        except Exception as exc:  # the test looks at it
            done.set_result(exc)
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    got = bytearray()
    while len(got) < expect:
        chunk = await reader.read(1 << 20)
        if not chunk:
            break
        got += chunk
    error = await done
    writer.close()
    server.close()
    await server.wait_closed()
    return bytes(got), error


@pytest.mark.parametrize("native", [True, False])
def test_parts_arrive_in_order_and_everything_is_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    if not native:  # as a TLS transport: regions read in chunks
        monkeypatch.setattr(sending, "_can_sendfile", lambda writer: False)
        monkeypatch.setattr(sending, "FALLBACK_CHUNK_BYTES", 1000)
    content = os.urandom(3 << 20)
    first, cache = region_of(tmp_path / "a.log", content, 1000, 2 << 20)
    second, _ = region_of(tmp_path / "b.log", content, 0, 5000)
    parts = [bytearray(b"\x00\x00\x00\x00head"), first, b"middle", second, b"tail"]
    size = sum(p.length if isinstance(p, FileRegion) else len(p) for p in parts)
    budget = ByteBudget(1 << 30)
    response = EncodedResponse(parts, size)

    got, error = asyncio.run(exchange(lambda w: sending.send_response(w, response, budget), size))
    assert error is None
    assert got == (
        b"\x00\x00\x00\x00head"
        + content[1000 : 1000 + (2 << 20)]
        + b"middle"
        + content[:5000]
        + b"tail"
    )
    assert first.released and second.released
    assert budget.used == 0
    assert cache.open_count <= 1


@pytest.mark.parametrize(
    "parts", [[b"\x00\x00\x00\x06answer"], [bytearray(b"\x00\x00"), b"\x00\x06ans", b"wer"]]
)
def test_a_response_without_regions_is_written_whole_and_never_corked(
    monkeypatch: pytest.MonkeyPatch, parts: list[bytes | bytearray]
) -> None:
    """A Produce answer (all bytes, one part) needs no TCP_CORK around it: the two
    setsockopt calls cost more than the answer's own send."""
    corks: list[bool] = []
    monkeypatch.setattr(sending, "_cork", lambda writer, on: corks.append(on) or True)
    budget = ByteBudget(1 << 20)
    response = EncodedResponse(list(parts), 10)

    got, error = asyncio.run(exchange(lambda w: sending.send_response(w, response, budget), 10))
    assert error is None
    assert got == b"\x00\x00\x00\x06answer"
    assert corks == []
    assert budget.used == 0


def test_a_region_its_file_no_longer_holds_closes_the_connection(tmp_path: Path) -> None:
    region, _ = region_of(tmp_path / "short.log", b"x" * 100, 50, 200)  # 150 bytes missing
    budget = ByteBudget(1 << 20)
    response = EncodedResponse([bytearray(b"\x00\x00\x00\x00"), region], 204)
    _, error = asyncio.run(exchange(lambda w: sending.send_response(w, response, budget), 204))
    assert isinstance(error, sending.ShortRegionError)
    assert region.released and budget.used == 0


def test_regions_are_released_when_the_peer_is_gone(tmp_path: Path) -> None:
    region, _ = region_of(tmp_path / "gone.log", os.urandom(8 << 20), 0, 8 << 20)
    budget = ByteBudget(1 << 30)
    response = EncodedResponse([bytearray(b"\x00\x00\x00\x00"), region], 4 + (8 << 20))

    async def run() -> BaseException | None:
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await sending.send_response(writer, response, budget)
                done.set_result(None)
            except Exception as exc:
                done.set_result(exc)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        peer = socket.create_connection(("127.0.0.1", port))
        await asyncio.sleep(0.3)  # the server fills the socket and waits for room
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        peer.close()  # a reset, unread bytes and all: the server's send fails
        error = await asyncio.wait_for(done, 30)
        server.close()
        return error

    assert isinstance(asyncio.run(run()), ConnectionError)
    assert region.released and budget.used == 0


def test_materialize_reads_regions(tmp_path: Path) -> None:
    region, _ = region_of(tmp_path / "m.log", b"0123456789", 2, 5)
    response = EncodedResponse([bytearray(b"ab"), region, b"cd"], 9)
    assert sending.materialize(response) == b"ab23456cd"
    assert region.released


def test_a_peer_gone_before_the_response_is_a_connection_error(tmp_path: Path) -> None:
    """A consumer that reset its connection while its Fetch long-polled: the response's
    regions meet a closed transport, which is the ordinary ConnectionError the server
    closes quietly on (not an EBADF OSError logged as a failed connection)."""
    region, _ = region_of(tmp_path / "early.log", os.urandom(1 << 20), 0, 1 << 20)
    budget = ByteBudget(1 << 30)
    response = EncodedResponse([bytearray(b"\x00\x00\x00\x00"), region, b"tail"], 8 + (1 << 20))

    async def run() -> BaseException | None:
        done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                await reader.read(100)  # sees the reset
            deadline = asyncio.get_running_loop().time() + 10
            while not writer.transport.is_closing():
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            await asyncio.sleep(0)  # the transport's socket is closed now
            try:
                await sending.send_response(writer, response, budget)
                done.set_result(None)
            except Exception as exc:
                done.set_result(exc)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        peer = socket.create_connection(("127.0.0.1", port))
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        peer.close()
        error = await asyncio.wait_for(done, 30)
        server.close()
        return error

    error = asyncio.run(run())
    assert isinstance(error, ConnectionError), repr(error)
    assert region.released and budget.used == 0
