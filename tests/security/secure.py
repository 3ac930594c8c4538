"""A secured Odradek broker for the security tests, and client settings for it in each
client library's own dialect (no fixtures here; see conftest.py)."""

from __future__ import annotations

import ssl
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.client import (
    AclBinding,
    AclOperation,
    AclPermission,
    AdminClient,
    PatternType,
    ResourceType,
    UserScramCredentialUpsertion,
)
from odradek.testing import BrokerProcess
from odradek.testing_tls import Pki

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
MECHANISM = "SCRAM-SHA-512"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def secure_settings(pki: Pki, **extra: str) -> dict[str, str]:
    """Broker settings: TLS from the test PKI, client certificates required on the SSL
    listener, SCRAM on SASL listeners, ACLs enforced, ``User:admin`` and the ``admin``
    certificate super users."""
    settings = {
        "ssl.keystore.location": str(pki.server_keystore),
        "ssl.truststore.location": str(pki.ca_cert),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": f"User:{ADMIN};User:CN=admin",
        "group.initial.rebalance.delay.ms": "0",
    }
    settings.update(extra)
    return settings


def start_secure_broker(
    data_dir: Path, pki: Pki, *, extra_args: tuple[str, ...] = (), **settings: str
) -> BrokerProcess:
    return BrokerProcess(
        data_dir,
        listeners={"SASL_SSL": "SASL_SSL", "SSL": "SSL", "SASL_PLAINTEXT": "SASL_PLAINTEXT"},
        settings=secure_settings(pki, **settings),
        extra_args=[
            "--add-scram",
            f"{MECHANISM}=[name={ADMIN},password={ADMIN_PASSWORD}]",
            *extra_args,
        ],
    ).start()


@dataclass
class SecureBroker:
    """The broker, its PKI, and settings for each client as a given principal."""

    process: BrokerProcess
    pki: Pki
    users: dict[str, str] = field(default_factory=dict)
    _admin: AdminClient | None = None

    @property
    def sasl_ssl(self) -> str:
        return self.process.address("SASL_SSL")

    @property
    def ssl(self) -> str:
        return self.process.address("SSL")

    # --- Odradek's client (kafka-python names) ------------------------------------

    def odradek(self, user: str = ADMIN, password: str | None = None) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.sasl_ssl,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": password if password is not None else self.users[user],
            "ssl_cafile": str(self.pki.ca_cert),
        }

    def odradek_cert(self, name: str) -> dict[str, Any]:
        cert = self.pki.client(name)
        return {
            "bootstrap_servers": self.ssl,
            "security_protocol": "SSL",
            "ssl_cafile": str(self.pki.ca_cert),
            "ssl_certfile": str(cert.cert),
            "ssl_keyfile": str(cert.key),
        }

    # --- confluent-kafka (librdkafka names) ---------------------------------------

    def confluent(self, user: str = ADMIN, password: str | None = None) -> dict[str, Any]:
        return {
            "bootstrap.servers": self.sasl_ssl,
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": MECHANISM,
            "sasl.username": user,
            "sasl.password": password if password is not None else self.users[user],
            "ssl.ca.location": str(self.pki.ca_cert),
        }

    def confluent_cert(self, name: str) -> dict[str, Any]:
        cert = self.pki.client(name)
        return {
            "bootstrap.servers": self.ssl,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.pki.ca_cert),
            "ssl.certificate.location": str(cert.cert),
            "ssl.key.location": str(cert.key),
        }

    # --- kafka-python -------------------------------------------------------------

    def kafka_python(self, user: str = ADMIN, password: str | None = None) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.sasl_ssl,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": password if password is not None else self.users[user],
            "ssl_cafile": str(self.pki.ca_cert),
        }

    def kafka_python_cert(self, name: str) -> dict[str, Any]:
        cert = self.pki.client(name)
        return {
            "bootstrap_servers": self.ssl,
            "security_protocol": "SSL",
            "ssl_cafile": str(self.pki.ca_cert),
            "ssl_certfile": str(cert.cert),
            "ssl_keyfile": str(cert.key),
        }

    # --- aiokafka (an ssl.SSLContext) ---------------------------------------------

    def aiokafka(self, user: str = ADMIN, password: str | None = None) -> dict[str, Any]:
        return {
            "bootstrap_servers": self.sasl_ssl,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": MECHANISM,
            "sasl_plain_username": user,
            "sasl_plain_password": password if password is not None else self.users[user],
            "ssl_context": ssl.create_default_context(cafile=str(self.pki.ca_cert)),
        }

    def aiokafka_cert(self, name: str) -> dict[str, Any]:
        cert = self.pki.client(name)
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(cert.cert), str(cert.key))
        return {
            "bootstrap_servers": self.ssl,
            "security_protocol": "SSL",
            "ssl_context": context,
        }

    # --- administration as the super user -----------------------------------------

    def admin(self) -> AdminClient:
        """The super user's admin client (one, kept open: each connection costs a TLS
        handshake and a SCRAM exchange)."""
        if self._admin is None:
            self._admin = AdminClient(**self.odradek(ADMIN), default_api_timeout_ms=20_000)
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()

    def add_user(self, name: str, password: str | None = None) -> str:
        """A new SCRAM-SHA-512 user (and -256, for the PLAIN and SHA-256 tests)."""
        password = password or f"{name}-pw-{uuid.uuid4().hex[:6]}"
        changes = [
            UserScramCredentialUpsertion(name, mech, password)
            for mech in ("SCRAM-SHA-512", "SCRAM-SHA-256")
        ]
        self.admin().alter_user_scram_credentials(changes)[name].result()
        self.users[name] = password
        return password

    def grant(
        self,
        principal: str,
        resource_type: ResourceType,
        name: str,
        *operations: AclOperation,
        pattern: PatternType = PatternType.LITERAL,
        permission: AclPermission = AclPermission.ALLOW,
    ) -> None:
        acls = [
            AclBinding(resource_type, name, pattern, principal, "*", op, permission)
            for op in operations
        ]
        for future in self.admin().create_acls(acls).values():
            future.result()

    def create_topic(self, name: str, partitions: int = 1) -> str:
        from odradek.client import NewTopic

        self.admin().create_topics([NewTopic(name, partitions, 1)])[name].result()
        return name

    def properties(self, path: Path, user: str) -> Path:
        """A --command-config file for ``user`` (Java names, PEM truststore)."""
        path.write_text(
            "security.protocol=SASL_SSL\n"
            f"sasl.mechanism={MECHANISM}\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required \\\n    username="{user}" password="{self.users[user]}";\n'
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={self.pki.ca_cert}\n"
        )
        return path


class Wire:
    """One blocking connection speaking raw Kafka requests (optionally over TLS)."""

    def __init__(
        self, address: str, context: ssl.SSLContext | None = None, timeout_s: float = 10.0
    ) -> None:
        import socket

        host, _, port = address.rpartition(":")
        raw = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock = context.wrap_socket(raw, server_hostname=host) if context else raw
        self.correlation = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self) -> bytes:
        import struct

        (size,) = struct.unpack(">i", self._read_exact(4))
        return self._read_exact(size)

    def _read_exact(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            data += chunk
        return bytes(data)

    def request(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        from odradek.protocol.codec import (
            RequestHeader,
            build,
            decode_response,
            encode_request,
            request_type,
        )

        self.correlation += 1
        body = build(request_type(api_key, version), values)
        self.send_raw(encode_request(RequestHeader(api_key, version, self.correlation, "t"), body))
        correlation, response = decode_response(api_key, version, self.read_frame())
        assert correlation == self.correlation
        return response

    def is_closed_by_broker(self, timeout_s: float = 10.0) -> bool:
        """Whether the broker closes the connection (EOF or reset) within the time."""
        self.sock.settimeout(timeout_s)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Wire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def client_tls(pki: Pki, name: str | None = None) -> ssl.SSLContext:
    """A client TLS context trusting the test CA, with client ``name``'s certificate."""
    context = ssl.create_default_context(cafile=str(pki.ca_cert))
    if name is not None:
        cert = pki.client(name)
        context.load_cert_chain(str(cert.cert), str(cert.key))
    return context
