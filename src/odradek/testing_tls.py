"""Throw-away TLS certificates for tests and benchmarks: a CA, a server certificate
for 127.0.0.1 / localhost, and client certificates (subject ``CN=<name>``).

Needs the ``cryptography`` package (in Odradek's ``test`` extra); imported lazily
so the pytest plugin works without it. Keys are EC P-256: quick to make, and
every client (OpenSSL, librdkafka, Java) accepts them.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class ClientCertificate:
    name: str
    cert: Path  # PEM certificate
    key: Path  # PEM private key (unencrypted)
    keystore: Path  # key + certificate in one PEM file (Kafka's PEM keystore)

    @property
    def principal(self) -> str:
        return f"User:CN={self.name}"


@dataclass
class Pki:
    """Paths of the PEM files of a test PKI (see ``make_pki``)."""

    directory: Path
    ca_cert: Path
    server_keystore: Path  # the server's key and certificate (ssl.keystore.location)
    server_cert: Path
    server_key: Path
    clients: dict[str, ClientCertificate] = field(default_factory=dict)
    _ca: tuple[Any, Any] | None = field(default=None, repr=False)

    def client(self, name: str) -> ClientCertificate:
        """The certificate of client ``name`` (made on first use)."""
        if name not in self.clients:
            assert self._ca is not None
            self.clients[name] = _client_certificate(self.directory, name, *self._ca)
        return self.clients[name]


def _key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _certificate(
    subject_cn: str,
    key: Any,
    issuer: Any | None,
    issuer_key: Any | None,
    *,
    ca: bool = False,
    sans: list[Any] | None = None,
    client: bool = False,
    server_and_client: bool = False,
) -> Any:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject_cn)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer is not None else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    else:
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        usages = [usage, ExtendedKeyUsageOID.CLIENT_AUTH] if server_and_client else [usage]
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key if issuer_key is not None else key, hashes.SHA256())


def _client_certificate(directory: Path, name: str, ca: Any, ca_key: Any) -> ClientCertificate:
    key = _key()
    cert = _certificate(name, key, ca, ca_key, client=True)
    paths = ClientCertificate(
        name,
        directory / f"client-{name}.crt",
        directory / f"client-{name}.key",
        directory / f"client-{name}.keystore.pem",
    )
    paths.cert.write_bytes(_pem_cert(cert))
    paths.key.write_bytes(_pem_key(key))
    paths.keystore.write_bytes(_pem_key(key) + _pem_cert(cert))
    for path in (paths.key, paths.keystore):
        path.chmod(0o600)
    return paths


def make_pki(
    directory: Path,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    *,
    server_and_client: bool = False,
) -> Pki:
    """A CA and a server certificate valid for ``hosts``, as PEM files in ``directory``.

    `server_and_client`: the server certificate also allows client authentication (an
    etcd member with --client-cert-auth presents its own to itself, from its gateway)."""
    from cryptography import x509

    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca = _certificate("Odradek Test CA", ca_key, None, None, ca=True)
    sans: list[Any] = []
    for host in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    server_key = _key()
    server = _certificate(
        hosts[-1], server_key, ca, ca_key, sans=sans, server_and_client=server_and_client
    )
    pki = Pki(
        directory,
        directory / "ca.crt",
        directory / "server.keystore.pem",
        directory / "server.crt",
        directory / "server.key",
        _ca=(ca, ca_key),
    )
    pki.ca_cert.write_bytes(_pem_cert(ca))
    pki.server_cert.write_bytes(_pem_cert(server))
    pki.server_key.write_bytes(_pem_key(server_key))
    pki.server_keystore.write_bytes(_pem_key(server_key) + _pem_cert(server))
    for path in (pki.server_key, pki.server_keystore):
        path.chmod(0o600)
    return pki
