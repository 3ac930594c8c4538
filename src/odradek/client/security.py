"""The client side of Kafka security: TLS and SASL (PLAIN, SCRAM-SHA-256/512).

Settings have kafka-python / aiokafka names (``security_protocol``,
``sasl_mechanism``, ``sasl_plain_username``, ``ssl_cafile``, ...) and their
Java / librdkafka dotted names work too (``sasl.jaas.config``,
``sasl.username``, ``ssl.ca.location``, ``ssl.truststore.location`` with a PEM
truststore, ...): the settings and their checks are ``config.py``'s
(``SETTING_ALIASES``, ``CommonConfig``); this module uses them.

TLS runs over a ``MemoryBIO`` pair (``TlsSocket``) rather than an
``SSLSocket``: the connection reads on one thread and writes on others, and an
OpenSSL connection must not be used by two threads at once, so every TLS
operation here holds a lock while the socket I/O does not.

Authentication follows the Java client: ApiVersions, SaslHandshake v1, then
SaslAuthenticate requests carrying the mechanism's tokens; the session lifetime
the broker answers (KIP-368) tells the connection when to authenticate again.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from odradek.client.errors import (
    ConfigError,
    IllegalSaslStateError,
    KafkaConnectionError,
    KafkaError,
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    make_error,
)
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.sasl_client import sasl_steps
from odradek.protocol.scram import ScramError

if TYPE_CHECKING:
    from odradek.client.config import CommonConfig

Exchange = Callable[[int, int, dict[str, Any]], Any]
"""Send one request during connection setup and return its decoded response:
``exchange(api_key, version, body)``."""


class SslAuthenticationError(KafkaError):
    """The TLS handshake failed (an untrusted certificate, a refused client certificate):
    retrying cannot help (Java's SslAuthenticationException)."""


def is_authentication_error(exc: BaseException | None) -> bool:
    """Whether ``exc`` means the broker refused who we are: report it, do not retry."""
    if isinstance(exc, SslAuthenticationError):
        return True
    return isinstance(exc, KafkaError) and exc.code in (
        SaslAuthenticationFailedError.code,
        UnsupportedSaslMechanismError.code,
        IllegalSaslStateError.code,
    )


def client_ssl_context(config: CommonConfig) -> ssl.SSLContext:
    """The TLS context for SSL / SASL_SSL: ``ssl_context`` if given, else one built
    from the CA file (system CAs when none), client certificate and key."""
    if config.ssl_context is not None:
        return config.ssl_context  # type: ignore[no-any-return]
    try:
        context = ssl.create_default_context(cafile=config.ssl_cafile or None)
        algorithm = str(config.ssl_endpoint_identification_algorithm or "").lower()
        context.check_hostname = bool(config.ssl_check_hostname) and algorithm not in (
            "",
            "none",
        )
        if config.ssl_certfile:
            context.load_cert_chain(
                config.ssl_certfile, config.ssl_keyfile or None, password=config.ssl_password
            )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot build the TLS context: {exc}") from None
    return context


class TlsWantRead(Exception):
    """TLS records arrived that carried no application data (e.g. a session ticket)."""


class TlsSocket:
    """A blocking socket with TLS over memory BIOs, safe for one reader thread and
    many writer threads (see module docs). Quacks like the socket it wraps."""

    def __init__(
        self, sock: socket.socket, context: ssl.SSLContext, server_hostname: str | None
    ) -> None:
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(
            self._incoming, self._outgoing, server_side=False, server_hostname=server_hostname
        )
        self._tls_lock = threading.Lock()  # the SSLObject
        self._send_lock = threading.Lock()  # the order of encrypted bytes on the wire

    def handshake(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            with self._tls_lock:
                try:
                    self._tls.do_handshake()
                    done = True
                except ssl.SSLWantReadError:
                    done = False
            self._flush()
            if done:
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaConnectionError("TLS handshake timed out")
            self._sock.settimeout(remaining)
            raw = self._sock.recv(65536)
            if not raw:
                raise KafkaConnectionError(
                    "the broker closed the connection during the TLS handshake "
                    "(is this a TLS listener?)"
                )
            with self._tls_lock:
                self._incoming.write(raw)

    def _flush(self) -> None:
        with self._send_lock:
            with self._tls_lock:
                data = self._outgoing.read()
            if data:
                self._sock.sendall(data)

    def sendall(self, data: bytes) -> None:
        with self._send_lock:
            with self._tls_lock:
                self._tls.write(data)
                encrypted = self._outgoing.read()
            self._sock.sendall(encrypted)

    def _drain(self, limit: int) -> bytes:
        chunks = []
        size = 0
        with self._tls_lock:
            while size < limit:
                try:
                    chunk = self._tls.read(min(limit - size, 65536))
                except (ssl.SSLWantReadError, ssl.SSLZeroReturnError):
                    break
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            pending = self._outgoing.pending
        if pending:  # a TLS 1.3 key update answer, say
            self._flush()
        return b"".join(chunks)

    def recv_available(self, limit: int) -> bytes:
        """One read of the socket: decrypted bytes, b"" at end of stream, or TlsWantRead
        when the records read carried no application data."""
        data = self._drain(limit)
        if data:
            return data
        raw = self._sock.recv(65536)
        if not raw:
            return b""
        with self._tls_lock:
            self._incoming.write(raw)
        data = self._drain(limit)
        if not data:
            raise TlsWantRead
        return data

    def recv(self, limit: int) -> bytes:
        """Blocking read (within the socket timeout) of at least one byte, or b"" at EOF."""
        while True:
            with contextlib.suppress(TlsWantRead):
                return self.recv_available(limit)

    def fileno(self) -> int:
        return self._sock.fileno()

    def settimeout(self, value: float | None) -> None:
        self._sock.settimeout(value)

    def setsockopt(self, *args: Any) -> None:
        self._sock.setsockopt(*args)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()


def receive(sock: Any, limit: int) -> bytes | None:
    """For the connection's reader: bytes, b"" at end of stream, None for nothing yet."""
    if isinstance(sock, TlsSocket):
        try:
            return sock.recv_available(limit)
        except TlsWantRead:
            return None
    return bytes(sock.recv(limit))


def secure_transport(
    sock: socket.socket, config: CommonConfig, host: str, timeout_s: float
) -> socket.socket | TlsSocket:
    """The socket to speak Kafka over: TLS-wrapped for SSL and SASL_SSL."""
    if config.security_protocol not in ("SSL", "SASL_SSL"):
        return sock
    context = client_ssl_context(config)
    tls = TlsSocket(sock, context, host if context.check_hostname else None)
    try:
        tls.handshake(timeout_s)
    except ssl.SSLError as exc:
        raise SslAuthenticationError(f"TLS handshake with {host} failed: {exc}") from exc
    return tls


# --- SASL ------------------------------------------------------------------------------


def _mechanism_steps(config: CommonConfig) -> Callable[[bytes | None], bytes | None]:
    username, password = config.sasl_credentials()
    assert username is not None and password is not None
    return sasl_steps(config.sasl_mechanism, username, password)


def authenticate(
    exchange: Exchange, config: CommonConfig, versions: dict[int, int], node: str
) -> int:
    """Run SaslHandshake + SaslAuthenticate; the session lifetime in ms (0: unlimited)."""
    handshake_version = versions.get(ApiKey.SASL_HANDSHAKE)
    authenticate_version = versions.get(ApiKey.SASL_AUTHENTICATE)
    if handshake_version is None or handshake_version < 1 or authenticate_version is None:
        raise IllegalSaslStateError(
            f"{node} does not offer SaslHandshake v1 and SaslAuthenticate: "
            "not a SASL listener of a Kafka 1.0+ broker?"
        )
    reply = exchange(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": config.sasl_mechanism})
    if reply.error_code:
        if int(reply.error_code) == UnsupportedSaslMechanismError.code:
            raise UnsupportedSaslMechanismError(
                f"{node} does not enable {config.sasl_mechanism} "
                f"(enabled: {', '.join(reply.mechanisms) or 'none'})"
            )
        raise make_error(int(reply.error_code), f"SaslHandshake with {node}")
    step = _mechanism_steps(config)
    challenge: bytes | None = None
    lifetime_ms = 0
    while True:
        try:
            token = step(challenge)
        except ScramError as exc:
            raise SaslAuthenticationFailedError(f"{node}: {exc}") from None
        if token is None:
            return lifetime_ms
        reply = exchange(ApiKey.SASL_AUTHENTICATE, authenticate_version, {"auth_bytes": token})
        if reply.error_code:
            raise make_error(int(reply.error_code), reply.error_message or f"SASL with {node}")
        challenge = bytes(reply.auth_bytes)
        lifetime = getattr(reply, "session_lifetime", None)
        if lifetime is not None:
            lifetime_ms = int(lifetime.total_seconds() * 1000)


__all__ = [
    "SslAuthenticationError",
    "TlsSocket",
    "authenticate",
    "is_authentication_error",
    "receive",
    "secure_transport",
]
