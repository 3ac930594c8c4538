"""Server side of the SASL mechanisms: PLAIN and SCRAM-SHA-256 / SCRAM-SHA-512.

Each mechanism is a small state machine fed the client's tokens
(``evaluate(token) -> challenge``) until ``complete``; a wrong credential raises
``SaslFailure``. The messages a client may see are Kafka's: PLAIN's are
specific, SCRAM's are the generic "invalid credentials" (Kafka does not say
whether the user exists).

PLAIN users: a listener's JAAS config (``listener.name.<l>.plain.sasl.jaas.config``
with ``user_<name>="<password>"``, as in Kafka) is checked first; a user not
listed there is checked against its SCRAM credentials, so one user store
(managed with ``odradek users``) serves both mechanisms.
"""

from __future__ import annotations

import base64
import secrets
from abc import ABC, abstractmethod

from odradek.broker.security.credentials import ScramCredentialStore
from odradek.protocol.scram import (
    MECHANISMS,
    MIN_ITERATIONS,
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ClientFinal,
    ClientFirst,
    ScramCredential,
    ScramError,
    ScramMechanism,
    ServerFirst,
    auth_message,
    server_signature,
    verify_client_proof,
)

PLAIN = "PLAIN"
SUPPORTED_MECHANISMS = (PLAIN, *MECHANISMS)


class SaslFailure(Exception):
    """Authentication failed. ``public``: the message may be shown to the client."""

    def __init__(self, message: str, *, public: bool = False) -> None:
        super().__init__(message)
        self.public = public


class SaslServer(ABC):
    mechanism: str

    def __init__(self) -> None:
        self.complete = False
        self.username: str | None = None

    @abstractmethod
    def evaluate(self, token: bytes) -> bytes:
        """The next challenge for the client's ``token`` (b"" when none)."""


class PlainServer(SaslServer):
    mechanism = PLAIN

    def __init__(self, jaas_users: dict[str, str], credentials: ScramCredentialStore) -> None:
        super().__init__()
        self.jaas_users = jaas_users
        self.credentials = credentials

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslFailure("PLAIN exchange already complete")
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise SaslFailure(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}", public=True
            )
        try:
            authzid, username, password = (p.decode() for p in parts)
        except UnicodeDecodeError:
            raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8", public=True) from None
        if not username:
            raise SaslFailure("Authentication failed: username not specified", public=True)
        if not password:
            raise SaslFailure("Authentication failed: password not specified", public=True)
        if authzid and authzid != username:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
                public=True,
            )
        if not self._valid(username, password):
            raise SaslFailure("Authentication failed: Invalid username or password", public=True)
        self.username = username
        self.complete = True
        return b""

    def _valid(self, username: str, password: str) -> bool:
        if username in self.jaas_users:
            return secrets.compare_digest(self.jaas_users[username].encode(), password.encode())
        for mech in (SCRAM_SHA_512, SCRAM_SHA_256):
            credential = self.credentials.get(username, mech)
            if credential is not None and credential.verifies(mech, password):
                return True
        return False


class ScramServer(SaslServer):
    def __init__(self, mech: ScramMechanism, credentials: ScramCredentialStore) -> None:
        super().__init__()
        self.mech = mech
        self.mechanism = mech.name
        self.credentials = credentials
        self._first: ClientFirst | None = None
        self._server_first: ServerFirst | None = None
        self._credential: ScramCredential | None = None

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._first is None:
                return self._on_client_first(token)
            if not self.complete:
                return self._on_client_final(token)
        except ScramError as exc:
            raise SaslFailure(f"SCRAM: {exc}") from None
        raise SaslFailure("SCRAM exchange already complete")

    def _on_client_first(self, token: bytes) -> bytes:
        first = ClientFirst.parse(token)
        if first.extensions.get("tokenauth", "").lower() == "true":
            raise SaslFailure("delegation token authentication is not supported")
        credential = self.credentials.get(first.username, self.mech)
        if credential is None:
            raise SaslFailure("Authentication failed: Invalid user credentials")
        if first.authzid and first.authzid != first.username:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is "
                "different from username",
                public=True,
            )
        if credential.iterations < MIN_ITERATIONS:
            raise SaslFailure(f"iterations {credential.iterations} below {MIN_ITERATIONS}")
        self._first = first
        self._credential = credential
        self._server_first = ServerFirst(
            first.nonce + secrets.token_urlsafe(18), credential.salt, credential.iterations
        )
        return self._server_first.to_bytes()

    def _on_client_final(self, token: bytes) -> bytes:
        assert self._first and self._server_first and self._credential
        final = ClientFinal.parse(token)
        if final.nonce != self._server_first.nonce:
            raise SaslFailure("Invalid client nonce in the final client message.")
        if final.channel_binding != _b64(self._first.gs2_header.encode()):
            raise SaslFailure("channel binding does not match the client-first message")
        message = auth_message(self._first, self._server_first, final)
        if not verify_client_proof(self.mech, self._credential, message, final.proof):
            raise SaslFailure("Authentication failed: Invalid client proof")
        signature = server_signature(self.mech, self._credential, message)
        self.username = self._first.username
        self.complete = True
        self._credential = None
        return b"v=" + _b64(signature).encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def new_sasl_server(
    mechanism: str, jaas_users: dict[str, str], credentials: ScramCredentialStore
) -> SaslServer:
    if mechanism == PLAIN:
        return PlainServer(jaas_users, credentials)
    return ScramServer(MECHANISMS[mechanism], credentials)
