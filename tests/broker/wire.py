"""A minimal blocking wire client for broker tests: one request, one response."""

from __future__ import annotations

import socket
import struct
from typing import Any

from odradek.protocol.codec import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_type,
)


class WireClient:
    def __init__(self, bootstrap: str, timeout_s: float = 10.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.correlation = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        size = struct.unpack(">i", self._read_exact(4))[0]
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes:
        chunks = bytearray()
        while len(chunks) < n:
            chunk = self.sock.recv(n - len(chunks))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            chunks += chunk
        return bytes(chunks)

    def request(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        self.correlation += 1
        body = build(request_type(api_key, version), values)
        header = RequestHeader(api_key, version, self.correlation, "odradek-tests")
        self.send_raw(encode_request(header, body))
        correlation, response = decode_response(api_key, version, self.read_frame())
        assert correlation == self.correlation
        return response

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
