"""Connections from this broker to another broker, on the inter-broker listener.

Every broker-to-broker connection (the follower's fetcher, transaction markers) is
opened here, as Kafka's replica fetcher builds its NetworkClient from the
inter-broker listener (BrokerBlockingSender: ``ChannelBuilders.clientChannelBuilder(
interBrokerSecurityProtocol, JaasContext.Type.SERVER, config, interBrokerListenerName,
saslMechanismInterBrokerProtocol, ...)``): TLS with the listener's truststore (and its
keystore as the client certificate) on SSL and SASL_SSL, then on SASL listeners
SaslHandshake v1 and SaslAuthenticate with the broker's own credentials
(``broker/security/inter_broker.py`` reads them). What flows afterwards is the caller's.

A session with a lifetime (``connections.max.reauth.ms`` on the peer's listener) is
not renewed in place: the peer closes the connection when it ends, and the caller
opens a new one (the fetcher and the marker sender both reconnect on a failed request).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from odradek.broker.security.inter_broker import InterBroker
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_type,
)
from odradek.protocol.sasl_client import sasl_steps
from odradek.protocol.scram import ScramError
from odradek.ratelog import RateLimitedLog

log = logging.getLogger("odradek.cluster")

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]
OpenPeer = Callable[[str, int], Awaitable[Streams]]
"""Opens a connection to a peer broker at (host, port), ready for requests."""

HANDSHAKE_VERSION = 1  # SaslHandshake v1: SaslAuthenticate requests follow (KIP-152)
AUTHENTICATE_VERSION = 1  # v1: the session lifetime in the answer (KIP-368)
_SIZE = struct.Struct(">i")
_CLIENT_ID = "odradek-inter-broker-auth"


class PeerAuthenticationError(ConnectionError):
    """The peer refused this broker's credentials or certificate (logged by the caller,
    retried like any failed connection: the peer's credentials may be on their way)."""


async def open_plain(host: str, port: int) -> Streams:
    """A PLAINTEXT connection (a broker without inter-broker security settings)."""
    return await asyncio.open_connection(host, port)


class PeerConnector:
    """Opens authenticated connections to the inter-broker listener of other brokers."""

    def __init__(self, inter: InterBroker | None) -> None:
        self.inter = inter
        self._ids = itertools.count(1)
        self._refusals = RateLimitedLog(log)  # a refusal repeats on every retry
        # Told of every refused connection (nothing listening there: a dead broker?).
        self.on_refused: Callable[[str, int], None] | None = None

    async def open(self, host: str, port: int) -> Streams:
        try:
            return await self._open(host, port)
        except PeerAuthenticationError as exc:
            self._refusals.log(f"{host}:{port}", logging.ERROR, "%s", exc)
            raise
        except ConnectionRefusedError:
            if self.on_refused is not None:
                self.on_refused(host, port)
            raise

    async def _open(self, host: str, port: int) -> Streams:
        inter = self.inter
        if inter is None or inter.protocol == "PLAINTEXT":
            return await open_plain(host, port)
        context = inter.ssl_context
        try:
            reader, writer = await asyncio.open_connection(
                host,
                port,
                ssl=context,
                server_hostname=host if context is not None else None,
            )
        except OSError as exc:
            if isinstance(exc, ssl.SSLError | ssl.CertificateError):
                raise PeerAuthenticationError(f"TLS with broker at {host}:{port}: {exc}") from exc
            raise
        if inter.uses_sasl:
            try:
                await self._authenticate(reader, writer, inter, f"{host}:{port}")
            except BaseException:
                writer.close()
                raise
        return reader, writer

    async def _authenticate(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        inter: InterBroker,
        where: str,
    ) -> None:
        """SaslHandshake then SaslAuthenticate rounds, as Kafka's SaslClientAuthenticator."""
        assert inter.mechanism is not None and inter.username is not None
        assert inter.password is not None
        reply = await self._exchange(
            reader,
            writer,
            ApiKey.SASL_HANDSHAKE,
            HANDSHAKE_VERSION,
            {"mechanism": inter.mechanism},
        )
        if int(reply.error_code):
            raise PeerAuthenticationError(
                f"broker at {where} refused SASL {inter.mechanism} "
                f"(error {int(reply.error_code)}; it enables {', '.join(reply.mechanisms)})"
            )
        step = sasl_steps(inter.mechanism, inter.username, inter.password)
        challenge: bytes | None = None
        while True:
            try:
                token = step(challenge)
            except ScramError as exc:
                raise PeerAuthenticationError(f"broker at {where}: {exc}") from None
            if token is None:
                return
            reply = await self._exchange(
                reader,
                writer,
                ApiKey.SASL_AUTHENTICATE,
                AUTHENTICATE_VERSION,
                {"auth_bytes": token},
            )
            if int(reply.error_code):
                raise PeerAuthenticationError(
                    f"broker at {where} refused this broker's credentials as "
                    f"{inter.username!r}: error {int(reply.error_code)} "
                    f"{reply.error_message or ''}".rstrip()
                )
            challenge = bytes(reply.auth_bytes)

    async def _exchange(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        api_key: int,
        version: int,
        values: dict[str, Any],
    ) -> Any:
        correlation = next(self._ids)
        body = build(request_type(api_key, version), values)
        writer.write(encode_request(RequestHeader(api_key, version, correlation, _CLIENT_ID), body))
        await writer.drain()
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        answered, response = decode_response(api_key, version, await reader.readexactly(size))
        if answered != correlation:
            raise ConnectionError(f"response {answered} to request {correlation}")
        return response
