"""Listeners: where the broker accepts connections, and with which security protocol.

Kafka's settings, Kafka's format::

    listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093,INTERNAL://:9094
    listener.security.protocol.map=INTERNAL:SSL,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,...
    advertised.listeners=PLAINTEXT://127.0.0.1:9092,SASL_SSL://broker.example.com:9093,...

A listener whose name is in ``controller.listener.names`` is a KRaft controller
listener and is not opened (Odradek has no separate controller). An empty host
binds every interface and advertises this machine's name; port 0 picks a free
port and advertises it. Metadata, FindCoordinator and DescribeCluster answer
with the advertised address of the listener the request came in on.

Per-listener settings use Kafka's prefix: ``listener.name.<name>.<setting>``
(e.g. ``listener.name.sasl_ssl.ssl.client.auth=required``) wins over ``<setting>``.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any

from odradek.broker.config import BrokerConfig, ConfigError, format_value

PLAINTEXT = "PLAINTEXT"
SSL = "SSL"
SASL_PLAINTEXT = "SASL_PLAINTEXT"
SASL_SSL = "SASL_SSL"
PROTOCOLS = (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)

_URL = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9a-fA-F:.]+\]|[^:\[\]/]*):(\d{1,5})$")


@dataclass(slots=True)
class Listener:
    name: str  # upper case, as Kafka normalises it
    protocol: str
    host: str  # "" binds every interface
    port: int  # 0 until bound when asked for a free port
    advertised_host: str
    advertised_port: int

    @property
    def uses_tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port} ({self.protocol})"


def listener_value(config: BrokerConfig, listener: str, name: str) -> Any:
    """``listener.name.<listener>.<name>`` if set, else ``<name>``."""
    prefixed = f"listener.name.{listener.lower()}.{name}"
    if not config.is_default(prefixed):
        return config[prefixed]
    return config[name]


def _split_url(text: str, setting: str) -> tuple[str, str, int]:
    match = _URL.match(text.strip())
    if match is None:
        raise ConfigError(f"{setting}: expected NAME://HOST:PORT, got {text.strip()!r}")
    host = match.group(2)
    if host.startswith("["):
        host = host[1:-1]
    port = int(match.group(3))
    if port > 65535:
        raise ConfigError(f"{setting}: port {port} out of range")
    return match.group(1).upper(), host, port


def _protocol_map(config: BrokerConfig) -> dict[str, str]:
    mapping: dict[str, str] = {}
    for item in str(config["listener.security.protocol.map"]).split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in PROTOCOLS:
            raise ConfigError(
                f"listener.security.protocol.map: {item.strip()!r} must be NAME:PROTOCOL "
                f"with PROTOCOL one of {', '.join(PROTOCOLS)}"
            )
        mapping[name.strip().upper()] = protocol
    return mapping


def parse_listeners(
    config: BrokerConfig,
    default_address: tuple[str, int],
    default_advertised: tuple[str, int] | None = None,
) -> list[Listener]:
    """The listeners to open: from ``listeners`` (and friends), else one PLAINTEXT
    listener on ``default_address`` (``--listen``)."""
    text = str(config["listeners"]).strip()
    if not text:
        host, port = default_address
        adv_host, adv_port = default_advertised or default_address
        return [Listener(PLAINTEXT, PLAINTEXT, host, port, adv_host, adv_port)]
    mapping = _protocol_map(config)
    controllers = {
        n.strip().upper() for n in str(config["controller.listener.names"]).split(",") if n.strip()
    }
    listeners: dict[str, Listener] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        name, host, port = _split_url(item, "listeners")
        if name in controllers:
            continue
        if name in listeners:
            raise ConfigError(f"listeners: {name} appears twice")
        protocol = mapping.get(name)
        if protocol is None:
            raise ConfigError(
                f"listeners: no security protocol for {name}; add {name}:<PROTOCOL> to "
                "listener.security.protocol.map"
            )
        if port and any(lst.port == port for lst in listeners.values()):
            raise ConfigError(f"listeners: port {port} is used twice")
        listeners[name] = Listener(name, protocol, host, port, host, port)
    if not listeners:
        raise ConfigError("listeners names no listener Odradek can open")
    advertised = str(config["advertised.listeners"]).strip()
    for item in advertised.split(",") if advertised else ():
        if not item.strip():
            continue
        name, host, port = _split_url(item, "advertised.listeners")
        if name not in listeners:
            raise ConfigError(f"advertised.listeners: {name} is not in listeners")
        listeners[name].advertised_host = host
        listeners[name].advertised_port = port
    for listener in listeners.values():
        if listener.advertised_host in ("0.0.0.0", "::"):
            raise ConfigError(
                f"listener {listener.name} would advertise the non-routable address "
                f"{listener.advertised_host}: set advertised.listeners"
            )
        if not listener.advertised_host:
            listener.advertised_host = socket.getfqdn()
    return list(listeners.values())


# --- TLS ---------------------------------------------------------------------------------

_TLS_VERSIONS = {
    "TLSV1.2": ssl.TLSVersion.TLSv1_2,
    "TLSV1.3": ssl.TLSVersion.TLSv1_3,
}


def _pem_file(path: str, setting: str) -> str:
    if not os.path.isfile(path):
        raise ConfigError(f"{setting}: no file at {path}")
    return path


def server_ssl_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The TLS context of one SSL / SASL_SSL listener, from Kafka's ``ssl.*`` settings.

    Keystores and truststores are PEM (``ssl.keystore.type=PEM``): the keystore file
    holds the certificate chain and the private key (encrypted with
    ``ssl.key.password`` or not), or the two are given inline with
    ``ssl.keystore.certificate.chain`` and ``ssl.keystore.key``.
    """

    def get(name: str) -> str:
        return format_value(listener_value(config, listener, name) or "").strip()

    for kind in ("keystore", "truststore"):
        store_type = get(f"ssl.{kind}.type").upper()
        if store_type != "PEM":
            raise ConfigError(
                f"ssl.{kind}.type={store_type}: Odradek reads PEM files only; convert with "
                "`openssl pkcs12 -in store.p12 -nodes` (or keytool -importkeystore to "
                "PKCS12 first) and set ssl." + kind + ".type=PEM"
            )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = []
    for item in get("ssl.enabled.protocols").split(","):
        if item.strip():
            version = _TLS_VERSIONS.get(item.strip().upper())
            if version is None:
                raise ConfigError(
                    f"ssl.enabled.protocols: {item.strip()} is not supported (TLSv1.2, TLSv1.3)"
                )
            versions.append(version)
    if versions:
        context.minimum_version = min(versions)
        context.maximum_version = max(versions)
    ciphers = get("ssl.cipher.suites")
    if ciphers:
        try:
            context.set_ciphers(ciphers.replace(",", ":"))
        except ssl.SSLError:
            raise ConfigError(
                f"ssl.cipher.suites: OpenSSL knows none of {ciphers!r} (use OpenSSL names)"
            ) from None
    password = get("ssl.key.password") or None
    location = get("ssl.keystore.location")
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    try:
        if location:
            context.load_cert_chain(_pem_file(location, "ssl.keystore.location"), password=password)
        elif chain and key:
            _load_inline_chain(context, chain, key, password)
        else:
            raise ConfigError(
                f"listener {listener} uses TLS: set ssl.keystore.location (a PEM file with the "
                "certificate chain and the private key)"
            )
    except ssl.SSLError as exc:
        raise ConfigError(f"listener {listener}: cannot load the keystore: {exc}") from None
    client_auth = get("ssl.client.auth").lower() or "none"
    if client_auth not in ("none", "requested", "required"):
        raise ConfigError("ssl.client.auth must be none, requested or required")
    trust_location, trust_inline = (
        get("ssl.truststore.location"),
        get("ssl.truststore.certificates"),
    )
    try:
        if trust_location:
            context.load_verify_locations(
                cafile=_pem_file(trust_location, "ssl.truststore.location")
            )
        elif trust_inline:
            context.load_verify_locations(cadata=trust_inline)
    except ssl.SSLError as exc:
        raise ConfigError(f"listener {listener}: cannot load the truststore: {exc}") from None
    if client_auth != "none":
        if not (trust_location or trust_inline):
            raise ConfigError(
                f"ssl.client.auth={client_auth} needs ssl.truststore.location: the CA that "
                "signs client certificates"
            )
        context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return context


def _load_inline_chain(context: ssl.SSLContext, chain: str, key: str, password: str | None) -> None:
    """load_cert_chain reads files only: write the PEM text to a private temporary file."""
    fd, path = tempfile.mkstemp(prefix="odradek-keystore-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(key.strip() + "\n" + chain.strip() + "\n")
        context.load_cert_chain(path, password=password)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
