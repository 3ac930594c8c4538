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
from odradek.testing_tls import TestPki

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ADMIN, ADMIN_PASSWORD = "admin", "admin-secret"
MECHANISM = "SCRAM-SHA-512"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def secure_settings(pki: TestPki, **extra: str) -> dict[str, str]:
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
    data_dir: Path, pki: TestPki, *, extra_args: tuple[str, ...] = (), **settings: str
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
    pki: TestPki
    users: dict[str, str] = field(default_factory=dict)

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
        return AdminClient(**self.odradek(ADMIN), default_api_timeout_ms=20_000)

    def add_user(self, name: str, password: str | None = None) -> str:
        """A new SCRAM-SHA-512 user (and -256, for the PLAIN and SHA-256 tests)."""
        password = password or f"{name}-pw-{uuid.uuid4().hex[:6]}"
        with self.admin() as admin:
            changes = [
                UserScramCredentialUpsertion(name, mech, password)
                for mech in ("SCRAM-SHA-512", "SCRAM-SHA-256")
            ]
            admin.alter_user_scram_credentials(changes)[name].result()
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
        with self.admin() as admin:
            for future in admin.create_acls(acls).values():
                future.result()

    def create_topic(self, name: str, partitions: int = 1) -> str:
        from odradek.client import NewTopic

        with self.admin() as admin:
            admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
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
