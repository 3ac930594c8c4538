"""SCRAM (RFC 5802, RFC 7677) as Kafka uses it: SCRAM-SHA-256 and SCRAM-SHA-512.

Shared by the broker (which verifies a client's proof against stored keys) and
Odradek's client (which computes the proof), so both sides use one
implementation of the key derivation and of the message formats. No I/O here;
nonces and salts come from the caller's source of randomness.

Key derivation (RFC 5802 section 3)::

    SaltedPassword = PBKDF2-HMAC-H(password, salt, iterations)
    ClientKey      = HMAC(SaltedPassword, "Client Key")
    StoredKey      = H(ClientKey)
    ServerKey      = HMAC(SaltedPassword, "Server Key")

A server stores only (salt, StoredKey, ServerKey, iterations), never the password.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, for both hashes
MAX_ITERATIONS = 16384  # Kafka's ScramControlManager.MAX_ITERATIONS
DEFAULT_ITERATIONS = 4096  # kafka-storage --add-scram and kafka-configs default


class ScramError(ValueError):
    """A malformed SCRAM message or a failed verification."""


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str  # "SCRAM-SHA-256"
    hash_name: str  # hashlib name
    type_code: int  # Kafka's ScramMechanism type, as in AlterUserScramCredentials

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def salted_password(self, password: str, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password.encode(), salt, iterations)

    def client_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Client Key")

    def stored_key(self, client_key: bytes) -> bytes:
        return self.digest(client_key)

    def server_key(self, salted_password: bytes) -> bytes:
        return self.hmac(salted_password, b"Server Key")


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
MECHANISMS_BY_TYPE: dict[int, ScramMechanism] = {m.type_code: m for m in MECHANISMS.values()}


def mechanism(name: str) -> ScramMechanism:
    try:
        return MECHANISMS[name.upper()]
    except KeyError:
        raise ScramError(
            f"unknown SCRAM mechanism {name!r} (use {' or '.join(MECHANISMS)})"
        ) from None


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a server keeps for one user and mechanism."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mech: ScramMechanism, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        return cls(
            salt,
            mech.stored_key(mech.client_key(salted_password)),
            mech.server_key(salted_password),
            iterations,
        )

    @classmethod
    def from_password(
        cls,
        mech: ScramMechanism,
        password: str,
        iterations: int = DEFAULT_ITERATIONS,
        salt: bytes | None = None,
    ) -> ScramCredential:
        salt = salt if salt is not None else secrets.token_bytes(32)
        return cls.from_salted_password(
            mech, salt, mech.salted_password(password, salt, iterations), iterations
        )

    def verifies(self, mech: ScramMechanism, password: str) -> bool:
        """Whether ``password`` is the one these keys were derived from."""
        salted = mech.salted_password(password, self.salt, self.iterations)
        return hmac.compare_digest(mech.stored_key(mech.client_key(salted)), self.stored_key)


# --- message formats ---------------------------------------------------------------------

_ATTRIBUTE = re.compile(r"^([a-zA-Z])=(.*)$", re.S)


def escape_name(name: str) -> str:
    """saslname (RFC 5802): ',' and '=' are written =2C and =3D."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_name(name: str) -> str:
    if re.search(r"=(?!2C|3D)", name):
        raise ScramError("invalid '=' escape in SCRAM user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _attributes(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        match = _ATTRIBUTE.match(part)
        if match is None:
            raise ScramError(f"malformed SCRAM attribute {part[:20]!r}")
        out.append((match.group(1), match.group(2)))
    return out


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:
        raise ScramError(f"{what} is not base64") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@dataclass(frozen=True, slots=True)
class ClientFirst:
    gs2_header: str  # "n,," or "n,a=<authzid>,"
    authzid: str
    username: str
    nonce: str
    extensions: dict[str, str]

    @property
    def bare(self) -> str:
        extra = "".join(f",{k}={v}" for k, v in self.extensions.items())
        return f"n={escape_name(self.username)},r={self.nonce}{extra}"

    def to_bytes(self) -> bytes:
        return (self.gs2_header + self.bare).encode()

    @classmethod
    def parse(cls, data: bytes) -> ClientFirst:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise ScramError("SCRAM client-first message is not UTF-8") from None
        # gs2-header: channel binding flag, optional authzid, then the bare message.
        flag, sep, rest = text.partition(",")
        if not sep or flag != "n":
            raise ScramError("SCRAM channel binding is not supported (expected 'n,')")
        authz, sep, bare = rest.partition(",")
        if not sep:
            raise ScramError("malformed SCRAM client-first message")
        authzid = ""
        if authz:
            if not authz.startswith("a="):
                raise ScramError("malformed SCRAM authorization id")
            authzid = unescape_name(authz[2:])
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r":
            raise ScramError("SCRAM client-first message needs n= and r=")
        nonce = attributes[1][1]
        if not nonce:
            raise ScramError("empty SCRAM client nonce")
        return cls(
            f"n,{authz},",
            authzid,
            unescape_name(attributes[0][1]),
            nonce,
            dict(attributes[2:]),
        )


@dataclass(frozen=True, slots=True)
class ServerFirst:
    nonce: str  # client nonce + server nonce
    salt: bytes
    iterations: int

    def to_bytes(self) -> bytes:
        return f"r={self.nonce},s={_b64(self.salt)},i={self.iterations}".encode()

    @classmethod
    def parse(cls, data: bytes) -> ServerFirst:
        attributes = dict(_attributes(data.decode(errors="replace")))
        if "e" in attributes:
            raise ScramError(f"server refused: {attributes['e']}")
        try:
            return cls(attributes["r"], _b64decode(attributes["s"], "salt"), int(attributes["i"]))
        except (KeyError, ValueError):
            raise ScramError("malformed SCRAM server-first message") from None


@dataclass(frozen=True, slots=True)
class ClientFinal:
    channel_binding: str  # base64 of the gs2 header
    nonce: str
    proof: bytes

    @property
    def without_proof(self) -> str:
        return f"c={self.channel_binding},r={self.nonce}"

    def to_bytes(self) -> bytes:
        return f"{self.without_proof},p={_b64(self.proof)}".encode()

    @classmethod
    def parse(cls, data: bytes) -> ClientFinal:
        try:
            text = data.decode()
        except UnicodeDecodeError:
            raise ScramError("SCRAM client-final message is not UTF-8") from None
        attributes = _attributes(text)
        names = [name for name, _ in attributes]
        if names[:2] != ["c", "r"] or names[-1] != "p":
            raise ScramError("SCRAM client-final message needs c=, r= and p=")
        return cls(attributes[0][1], attributes[1][1], _b64decode(attributes[-1][1], "proof"))


def auth_message(first: ClientFirst, server_first: ServerFirst, final: ClientFinal) -> bytes:
    return f"{first.bare},{server_first.to_bytes().decode()},{final.without_proof}".encode()


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


def verify_client_proof(
    mech: ScramMechanism, credential: ScramCredential, message: bytes, proof: bytes
) -> bool:
    """RFC 5802: ClientKey = proof XOR HMAC(StoredKey, AuthMessage); H(ClientKey) == StoredKey."""
    signature = mech.hmac(credential.stored_key, message)
    if len(proof) != len(signature):
        return False
    client_key = _xor(proof, signature)
    return hmac.compare_digest(mech.digest(client_key), credential.stored_key)


def server_signature(mech: ScramMechanism, credential: ScramCredential, message: bytes) -> bytes:
    return mech.hmac(credential.server_key, message)


class ScramClient:
    """The client side of one SCRAM exchange: ``first()``, ``final(server_first)``,
    then ``verify(server_final)``."""

    def __init__(
        self, mech: ScramMechanism, username: str, password: str, nonce: str | None = None
    ) -> None:
        self.mech = mech
        self.password = password
        self._first = ClientFirst("n,,", "", username, nonce or secrets.token_urlsafe(24), {})
        self._message = b""
        self._salted = b""

    def first(self) -> bytes:
        return self._first.to_bytes()

    def final(self, server_first_bytes: bytes) -> bytes:
        server_first = ServerFirst.parse(server_first_bytes)
        if not server_first.nonce.startswith(self._first.nonce):
            raise ScramError("server nonce does not extend the client nonce")
        if server_first.iterations < MIN_ITERATIONS:
            raise ScramError(f"server asks for {server_first.iterations} iterations, too few")
        self._salted = self.mech.salted_password(
            self.password, server_first.salt, server_first.iterations
        )
        channel = _b64(self._first.gs2_header.encode())
        unsigned = ClientFinal(channel, server_first.nonce, b"")
        self._message = auth_message(self._first, server_first, unsigned)
        client_key = self.mech.client_key(self._salted)
        signature = self.mech.hmac(self.mech.stored_key(client_key), self._message)
        return ClientFinal(channel, server_first.nonce, _xor(client_key, signature)).to_bytes()

    def verify(self, server_final_bytes: bytes) -> None:
        attributes = dict(_attributes(server_final_bytes.decode(errors="replace")))
        if "e" in attributes:
            raise ScramError(f"server refused: {attributes['e']}")
        expected = self.mech.hmac(self.mech.server_key(self._salted), self._message)
        got = _b64decode(attributes.get("v", ""), "server signature")
        if not hmac.compare_digest(expected, got):
            raise ScramError("the server's SCRAM signature does not verify: wrong server")
