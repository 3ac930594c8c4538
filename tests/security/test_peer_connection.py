"""A broker's connection to another broker (``cluster/peer_connection.py``) against a
real secured listener: mutual TLS with the keystore as the client certificate, and
SASL with the broker's own credentials."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from secure import ADMIN, ADMIN_PASSWORD, MECHANISM, SecureBroker

from odradek.broker.config import BrokerConfig
from odradek.broker.security.inter_broker import InterBroker, client_ssl_context
from odradek.cluster.fetcher import LeaderConnection
from odradek.cluster.peer_connection import PeerAuthenticationError, PeerConnector
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import build, decode_response, request_type

TIMEOUT_S = 20.0


def tls_context(broker: SecureBroker, keystore: str | None) -> Any:
    config = BrokerConfig()
    config.set("ssl.truststore.location", str(broker.pki.ca_cert))
    if keystore is not None:
        config.set("ssl.keystore.location", keystore)
    return client_ssl_context(config, "SSL")


def api_versions(connector: PeerConnector, address: str) -> Any:
    """ApiVersions v0 through a connection `connector` opens."""
    host, _, port = address.rpartition(":")

    async def ask() -> Any:
        connection = LeaderConnection(host, int(port), "peer-test", TIMEOUT_S, connector.open)
        try:
            body = build(request_type(ApiKey.API_VERSIONS, 0), {})
            payload = await connection.send(ApiKey.API_VERSIONS, 0, body)
            return decode_response(ApiKey.API_VERSIONS, 0, payload)[1]
        finally:
            connection.close()

    return asyncio.run(asyncio.wait_for(ask(), TIMEOUT_S))


def test_mutual_tls_presents_the_keystore_as_the_client_certificate(
    secure_broker: SecureBroker,
) -> None:
    # The SSL listener requires a client certificate (ssl.client.auth=required).
    keystore = str(secure_broker.pki.client("broker-2").keystore)
    with_certificate = PeerConnector(
        InterBroker("SSL", "SSL", ssl_context=tls_context(secure_broker, keystore))
    )
    assert api_versions(with_certificate, secure_broker.ssl).error_code == 0

    without = PeerConnector(InterBroker("SSL", "SSL", ssl_context=tls_context(secure_broker, None)))
    # TLS 1.3 reports a refused client certificate after the handshake: on the first read
    with pytest.raises((PeerAuthenticationError, ConnectionError, asyncio.IncompleteReadError)):
        api_versions(without, secure_broker.ssl)


def test_sasl_ssl_authenticates_with_the_brokers_credentials(
    secure_broker: SecureBroker,
) -> None:
    context = tls_context(secure_broker, None)
    admin = PeerConnector(
        InterBroker("SASL_SSL", "SASL_SSL", MECHANISM, ADMIN, ADMIN_PASSWORD, context)
    )
    assert api_versions(admin, secure_broker.sasl_ssl).error_code == 0
    wrong = PeerConnector(InterBroker("SASL_SSL", "SASL_SSL", MECHANISM, ADMIN, "wrong", context))
    with pytest.raises(PeerAuthenticationError, match="refused this broker's credentials"):
        api_versions(wrong, secure_broker.sasl_ssl)
    plain = PeerConnector(
        InterBroker("SASL_SSL", "SASL_SSL", "PLAIN", ADMIN, ADMIN_PASSWORD, context)
    )
    assert api_versions(plain, secure_broker.sasl_ssl).error_code == 0
