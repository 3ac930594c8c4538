"""etcd over TLS (issue 21): which PEM files a broker or a command reaches etcd with, read
and checked once at start, and what a failed TLS handshake with etcd means in words.

The settings follow Kafka's ZooKeeper TLS settings of the 3.x brokers
(``zookeeper.ssl.client.enable``, ``zookeeper.ssl.truststore.location``,
``zookeeper.ssl.keystore.location``), for PEM files as etcd and etcdctl take them
(``--cacert``, ``--cert``, ``--key``): ``etcd.ssl.enable`` (or ``https://``
endpoints), ``etcd.ssl.cafile``, ``etcd.ssl.certfile``, ``etcd.ssl.keyfile``.
Their cross-checks (a key without a certificate, TLS files with TLS off, ...) are
`odradek.broker.config.BrokerConfig.check`'s; the files themselves are read here.

No gRPC or aetcd import at module level: `odradek.cli` checks settings with it before
it knows whether the ``cluster`` extra is installed.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from odradek.broker.config import ETCD_HTTPS, ConfigError, etcd_endpoint_scheme

if TYPE_CHECKING:
    import grpc

    from odradek.broker.config import BrokerConfig


def uses_tls(config: BrokerConfig) -> bool:
    """Whether the broker reaches etcd over TLS: ``etcd.ssl.enable``, or ``https://``
    endpoints (`BrokerConfig.check` refuses the two disagreeing)."""
    return bool(config["etcd.ssl.enable"]) or any(
        etcd_endpoint_scheme(str(e)) == ETCD_HTTPS for e in config["etcd.endpoints"]
    )


@dataclass(frozen=True, slots=True)
class EtcdTls:
    """The PEM contents a TLS connection to etcd is made with (`load`).

    `root_certificates`: the CA certificates etcd's server certificate must chain to
    (None: gRPC's bundled roots, as for a public CA). `private_key` and
    `certificate_chain`: this client's certificate, for an etcd started with
    ``--client-cert-auth`` (None: server authentication only).
    """

    root_certificates: bytes | None
    private_key: bytes | None
    certificate_chain: bytes | None
    cafile: str = ""  # the files they came from
    certfile: str = ""
    keyfile: str = ""

    @classmethod
    def from_config(cls, config: BrokerConfig) -> EtcdTls | None:
        """The TLS material the settings name (None: plaintext); `ConfigError` in one
        line for a file that is missing, unreadable, not PEM, or a key that does not
        belong to its certificate."""
        if not uses_tls(config):
            return None
        return cls.load(
            str(config["etcd.ssl.cafile"]),
            str(config["etcd.ssl.certfile"]),
            str(config["etcd.ssl.keyfile"]),
        )

    @classmethod
    def load(cls, cafile: str = "", certfile: str = "", keyfile: str = "") -> EtcdTls:
        """Read and check the files (empty: not given). The stdlib's TLS loader checks
        them, so a bad file is named here rather than in a failed handshake later. A
        certificate comes with its key (`BrokerConfig.check` says so first)."""
        if bool(certfile) != bool(keyfile):
            raise ValueError("a client certificate needs its key, and a key its certificate")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        root = _read("etcd.ssl.cafile", cafile) if cafile else None
        if cafile:
            try:
                context.load_verify_locations(cafile=cafile)
            except (ssl.SSLError, ValueError) as exc:
                raise ConfigError(
                    f"etcd.ssl.cafile {cafile}: no PEM CA certificate in it ({_ssl_reason(exc)})",
                    ("etcd.ssl.cafile",),
                ) from None
        key = chain = None
        if certfile:
            chain = _read("etcd.ssl.certfile", certfile)
            key = _read("etcd.ssl.keyfile", keyfile)
            try:
                # no password: an encrypted key fails here instead of prompting on a tty
                context.load_cert_chain(certfile, keyfile, password=b"")
            except (ssl.SSLError, ValueError) as exc:
                raise ConfigError(
                    f"etcd.ssl.certfile {certfile} with etcd.ssl.keyfile {keyfile}: not a PEM "
                    f"certificate and its unencrypted private key ({_ssl_reason(exc)})",
                    ("etcd.ssl.certfile", "etcd.ssl.keyfile"),
                ) from None
        return cls(root, key, chain, cafile, certfile, keyfile)

    def channel_credentials(self) -> grpc.ChannelCredentials:
        import grpc

        return grpc.ssl_channel_credentials(
            self.root_certificates, self.private_key, self.certificate_chain
        )


def _read(setting: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting} {path}: {exc.strerror or exc}", (setting,)) from None


def _ssl_reason(exc: Exception) -> str:
    reason: Any = getattr(exc, "reason", None)
    return str(reason or exc).strip() or type(exc).__name__


# What gRPC's one-line status details say when the TLS handshake with etcd fails, and
# what that means for the settings (BoringSSL's names, as grpcio reports them).
_HANDSHAKE_HINTS = (
    (
        "BAD_CERTIFICATE",
        "etcd refused this client's certificate: it requires one (--client-cert-auth) "
        "signed by a CA it trusts (etcd.ssl.certfile, etcd.ssl.keyfile)",
    ),
    (
        "CERTIFICATE_REQUIRED",
        "etcd requires a client certificate (etcd.ssl.certfile, etcd.ssl.keyfile)",
    ),
    (
        "Hostname Verification",
        "etcd's certificate does not name the host connected to",
    ),
    (
        "CERTIFICATE_VERIFY_FAILED",
        "etcd's certificate is not signed by a CA of etcd.ssl.cafile",
    ),
    (
        "certificate signature failure",
        "etcd's certificate is not signed by a CA of etcd.ssl.cafile",
    ),
    (
        "WRONG_VERSION_NUMBER",
        "etcd does not speak TLS there (plaintext endpoint: drop etcd.ssl.enable / https://)",
    ),
)
# A plaintext client whose first bytes a TLS-only etcd rejects sees only the socket close.
_PLAINTEXT_HINT = "etcd may require TLS (etcd.ssl.enable, or https:// endpoints)"


def failure_hint(details: str, *, tls: bool) -> str | None:
    """Why connecting to etcd failed, in the settings' words, when gRPC's `details` say
    it was the TLS handshake (None: nothing to add)."""
    if tls:
        for marker, hint in _HANDSHAKE_HINTS:
            if marker in details:
                return hint
        return None
    if "Socket closed" in details:
        return _PLAINTEXT_HINT
    return None
