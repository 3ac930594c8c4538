"""One connection's security state: its listener, its principal, and on SASL
listeners the authentication exchange (Kafka's SaslServerAuthenticator).

On a SASL listener a connection may send only ApiVersions and SaslHandshake
until it has authenticated; anything else closes it, as in Kafka. SaslHandshake
v1 is followed by SaslAuthenticate requests (KIP-152); after v0 the client
sends bare size-prefixed SASL tokens instead (``raw_tokens``). A failed
authentication is answered, then the connection closes.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` set, a session
lasts that long (the SaslAuthenticate response says so); the client must
authenticate again on the same connection, with the same mechanism and
principal, before it ends. A request on an expired session closes the
connection.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from odradek.broker.closing import CloseConnection
from odradek.broker.security.principal import KafkaPrincipal
from odradek.broker.security.sasl import SaslFailure, SaslServer
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.framing import frame

if TYPE_CHECKING:
    from odradek.broker.security import BrokerSecurity
    from odradek.broker.security.listeners import Listener

log = logging.getLogger("odradek.security")

MIN_REAUTH_INTERVAL_S = 1.0  # Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS


class AuthState(enum.Enum):
    HANDSHAKE = "awaiting SaslHandshake"
    AUTHENTICATING = "authenticating"
    AUTHENTICATED = "authenticated"


class Session:
    """Security state of one connection (see module docs)."""

    def __init__(
        self,
        security: BrokerSecurity,
        listener: Listener,
        client_host: str,
        principal: KafkaPrincipal,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.security = security
        self.listener = listener
        self.client_host = client_host
        self.principal = principal
        self.clock = clock
        self.state = AuthState.HANDSHAKE if listener.uses_sasl else AuthState.AUTHENTICATED
        self.ever_authenticated = not listener.uses_sasl
        self.mechanism: str | None = None
        self.raw_tokens = False  # SaslHandshake v0: bare SASL tokens follow
        self.expires_at: float | None = None
        self.reauthenticating = False
        self._reauth_started = 0.0
        self._bad_reauth_mechanism = False
        self._sasl: SaslServer | None = None
        self.close_reason: str | None = None  # answer this request, then close
        self.credentials_refused = False  # the close follows a failed authentication

    # --- the gate in front of every request ------------------------------------------

    def admit(self, api_key: int) -> None:
        """Raise CloseConnection for a request this connection may not send now."""
        if self.state is AuthState.HANDSHAKE:
            if api_key not in (ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE):
                raise CloseConnection(self._unexpected(api_key, "before authenticating"))
        elif self.state is AuthState.AUTHENTICATING:
            if api_key != ApiKey.SASL_AUTHENTICATE:
                raise CloseConnection(self._unexpected(api_key, "during SASL authentication"))
        elif (
            self.expires_at is not None
            and self.clock() > self.expires_at
            and api_key != ApiKey.SASL_HANDSHAKE
        ):
            raise CloseConnection(
                f"session of {self.principal} expired (connections.max.reauth.ms) "
                "without re-authentication"
            )

    def _unexpected(self, api_key: int, when: str) -> str:
        name = ApiKey(api_key).name if api_key in ApiKey._value2member_map_ else str(api_key)
        return f"unexpected {name} {when} on SASL listener {self.listener.name}"

    # --- SaslHandshake ---------------------------------------------------------------

    def handshake(self, version: int, mechanism: str) -> tuple[int, list[str]]:
        """(error code, enabled mechanisms) for a SaslHandshake."""
        if not self.listener.uses_sasl:
            return ErrorCode.ILLEGAL_SASL_STATE, []
        enabled = self.security.mechanisms[self.listener.name]
        if self.state is AuthState.AUTHENTICATED:
            now = self.clock()
            if self.expires_at is None or now - self._reauth_started < MIN_REAUTH_INTERVAL_S:
                return (
                    ErrorCode.ILLEGAL_SASL_STATE,
                    [],
                )  # no re-authentication without a session limit
            self._reauth_started = now
            self.reauthenticating = True
            self._bad_reauth_mechanism = mechanism != self.mechanism
        if mechanism not in enabled:
            self.close_reason = f"client asked for SASL mechanism {mechanism!r}, not enabled"
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, enabled
        self.state = AuthState.AUTHENTICATING
        self.raw_tokens = version == 0
        if not self.reauthenticating:
            self.mechanism = mechanism
        self._sasl = self.security.sasl_server(self.listener, mechanism)
        return 0, enabled

    # --- SaslAuthenticate and bare tokens ---------------------------------------------

    def authenticate(self, version: int, token: bytes) -> tuple[int, str | None, bytes, int]:
        """(error code, error message, challenge, session lifetime ms) for a
        SaslAuthenticate request."""
        if self.state is not AuthState.AUTHENTICATING or self._sasl is None:
            return (
                ErrorCode.ILLEGAL_SASL_STATE,
                "SaslAuthenticate request received after successful authentication",
                b"",
                0,
            )
        try:
            challenge = self._evaluate(token)
        except SaslFailure as exc:
            self._log_failure(str(exc))
            message = (
                str(exc)
                if exc.public
                else f"Authentication failed during {self._what()} due to invalid credentials "
                f"with SASL mechanism {self._sasl.mechanism}"
            )
            self.close_reason = f"{self._what()} failed: {exc}"
            self.credentials_refused = True
            return ErrorCode.SASL_AUTHENTICATION_FAILED, message, b"", 0
        lifetime_ms = self._finish() if self._sasl.complete else 0
        return 0, None, challenge, lifetime_ms

    def raw_token(self, token: bytes) -> bytes:
        """A bare SASL token after SaslHandshake v0: the framed challenge to send back."""
        assert self._sasl is not None
        try:
            challenge = self._evaluate(token)
        except SaslFailure as exc:
            self._log_failure(str(exc))
            raise CloseConnection(f"{self._what()} failed: {exc}") from None
        if self._sasl.complete:
            self._finish()
        return frame(challenge)

    def _evaluate(self, token: bytes) -> bytes:
        assert self._sasl is not None
        if self._bad_reauth_mechanism:
            raise SaslFailure(
                f"SASL mechanism {self._sasl.mechanism!r} requested by client is not supported "
                f"for re-authentication of mechanism {self.mechanism!r}",
                public=True,
            )
        challenge = self._sasl.evaluate(token)
        if self._sasl.complete and self.reauthenticating:
            renewed = KafkaPrincipal("User", self._sasl.username or "")
            if renewed != self.principal:
                raise SaslFailure(
                    f"Cannot change principals during re-authentication from {self.principal}: "
                    f"{renewed}",
                    public=True,
                )
        return challenge

    def _finish(self) -> int:
        """Authentication complete: set the principal and the session's end."""
        assert self._sasl is not None and self._sasl.username is not None
        self.principal = KafkaPrincipal("User", self._sasl.username)
        was = self._what()
        self.state = AuthState.AUTHENTICATED
        self.ever_authenticated = True
        self.reauthenticating = False
        self.raw_tokens = False
        self._sasl = None
        lifetime_ms = self.security.max_reauth_ms(self.listener)
        self.expires_at = self.clock() + lifetime_ms / 1000 if lifetime_ms > 0 else None
        log.debug(
            "%s of %s via %s on %s from %s%s",
            was,
            self.principal,
            self.mechanism,
            self.listener.name,
            self.client_host,
            f", session {lifetime_ms} ms" if lifetime_ms else "",
        )
        return lifetime_ms

    def _what(self) -> str:
        return "re-authentication" if self.reauthenticating else "authentication"

    def _log_failure(self, reason: str) -> None:
        log.info(
            "failed %s from %s on %s with %s: %s",
            self._what(),
            self.client_host,
            self.listener.name,
            self._sasl.mechanism if self._sasl else "?",
            reason,
        )
