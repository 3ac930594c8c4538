"""The broker's side of authentication, on the wire: what an unauthenticated
connection may do, SaslHandshake v0 (bare tokens) and v1 (SaslAuthenticate),
failures answered then closed, plaintext on a TLS port, handshakes that never
finish, session expiry and re-authentication (KIP-368), PLAIN users, durable
credentials and ACLs, and passwords kept out of the log."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from secure import (
    ADMIN,
    ADMIN_PASSWORD,
    MECHANISM,
    SecureBroker,
    Wire,
    client_tls,
    start_secure_broker,
    unique,
)

from odradek.client import AclOperation, AdminClient, Producer, ResourceType
from odradek.client.errors import SaslAuthenticationFailedError
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.framing import frame
from odradek.protocol.scram import MECHANISMS, ScramClient
from odradek.testing_tls import Pki

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(120)]

AUTH_TIMEOUT_MS = 1500
REAUTH_MS = 2500
JAAS_PASSWORD = "jaas-only-password"
API_VERSIONS_BODY = {"client_software_name": "tests", "client_software_version": "1"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    f'user_jaasuser="{JAAS_PASSWORD}";'
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[SecureBroker]:
    process = start_secure_broker(
        tmp_path_factory.mktemp("sec-broker") / "data",
        pki,
        extra_args=("--log-level", "DEBUG"),
        **{
            "connections.authentication.timeout.ms": str(AUTH_TIMEOUT_MS),
            "listener.name.sasl_plaintext.connections.max.reauth.ms": str(REAUTH_MS),
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        },
    )
    secured = SecureBroker(process, pki, {ADMIN: ADMIN_PASSWORD})
    try:
        yield secured
    finally:
        secured.close()
        process.stop()


def _sasl_plaintext(broker: SecureBroker) -> Wire:
    return Wire(broker.process.address("SASL_PLAINTEXT"))


def _scram_v1(wire: Wire, user: str, password: str, version: int = 2) -> tuple[int, int]:
    """SaslHandshake v1 + SaslAuthenticate; (error code of the last step, lifetime ms)."""
    reply = wire.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})
    assert int(reply.error_code) == 0 and MECHANISM in reply.mechanisms
    scram = ScramClient(MECHANISMS[MECHANISM], user, password)
    first = wire.request(ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": scram.first()})
    assert int(first.error_code) == 0
    final = wire.request(
        ApiKey.SASL_AUTHENTICATE, version, {"auth_bytes": scram.final(bytes(first.auth_bytes))}
    )
    if int(final.error_code) == 0:
        scram.verify(bytes(final.auth_bytes))
    lifetime = getattr(final, "session_lifetime", None)
    return int(final.error_code), int(lifetime.total_seconds() * 1000) if lifetime else 0


def _metadata(wire: Wire) -> object:
    return wire.request(
        ApiKey.METADATA, 12, {"topics": None, "include_topic_authorized_operations": False}
    )


def test_before_authenticating_only_api_versions_and_sasl_handshake(
    broker: SecureBroker,
) -> None:
    with _sasl_plaintext(broker) as wire:
        versions = wire.request(ApiKey.API_VERSIONS, 3, API_VERSIONS_BODY)
        advertised = {int(k.api_key) for k in versions.api_keys}
        assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= advertised
        with pytest.raises(ConnectionError):
            _metadata(wire)
    for api, version, body in (
        (ApiKey.METADATA, 12, {"topics": None, "include_topic_authorized_operations": False}),
        (ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"n,,n=admin,r=abc"}),
        (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": None}),
    ):
        with _sasl_plaintext(broker) as wire, pytest.raises(ConnectionError):
            wire.request(api, version, body)


def test_scram_with_sasl_authenticate_then_requests_are_served(broker: SecureBroker) -> None:
    with _sasl_plaintext(broker) as wire:
        assert _scram_v1(wire, ADMIN, ADMIN_PASSWORD) == (0, REAUTH_MS)
        assert _metadata(wire).cluster_id
        again = wire.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"x"})
        assert int(again.error_code) == 34  # ILLEGAL_SASL_STATE after authentication


def test_sasl_handshake_v0_then_bare_tokens(broker: SecureBroker) -> None:
    """The pre-KIP-152 framing aiokafka and kafka-python 2.0.2 still use."""
    with _sasl_plaintext(broker) as wire:
        reply = wire.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": MECHANISM})
        assert int(reply.error_code) == 0
        scram = ScramClient(MECHANISMS[MECHANISM], ADMIN, ADMIN_PASSWORD)
        wire.send_raw(frame(scram.first()))
        wire.send_raw(frame(scram.final(wire.read_frame())))
        scram.verify(wire.read_frame())
        assert _metadata(wire).cluster_id
    with _sasl_plaintext(broker) as wire:  # PLAIN, against a JAAS user
        wire.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
        wire.send_raw(frame(b"\x00jaasuser\x00" + JAAS_PASSWORD.encode()))
        assert wire.read_frame() == b""
        assert _metadata(wire).cluster_id


def test_failures_are_answered_then_the_connection_closes(broker: SecureBroker) -> None:
    with _sasl_plaintext(broker) as wire:
        assert _scram_v1(wire, ADMIN, "wrong-password")[0] == 58  # SASL_AUTHENTICATION_FAILED
        assert wire.is_closed_by_broker()
    with _sasl_plaintext(broker) as wire:
        reply = wire.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert int(reply.error_code) == 33  # UNSUPPORTED_SASL_MECHANISM
        assert sorted(reply.mechanisms) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert wire.is_closed_by_broker()
    with _sasl_plaintext(broker) as wire:  # an unknown user fails at its first message
        wire.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})
        scram = ScramClient(MECHANISMS[MECHANISM], "nobody-at-all", "x")
        first = wire.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first()})
        assert int(first.error_code) == 58
        assert wire.is_closed_by_broker()


def test_a_refused_password_is_answered_late_and_the_broker_waits_for_the_client_to_close(
    broker: SecureBroker,
) -> None:
    """failed.authentication.delay.ms (100) before the answer, as Kafka; then the broker
    waits for the client to close first, up to a second, so the answer is not followed
    at once by the end of the stream (kafka-python over TLS drops an answer that arrives
    together with it)."""
    with _sasl_plaintext(broker) as wire:
        wire.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})
        scram = ScramClient(MECHANISMS[MECHANISM], ADMIN, "wrong-password")
        first = wire.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": scram.first()})
        proof = scram.final(bytes(first.auth_bytes))
        sent = time.monotonic()
        final = wire.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": proof})
        answered = time.monotonic()
        assert int(final.error_code) == 58
        assert answered - sent >= 0.09
        assert wire.is_closed_by_broker()
        assert time.monotonic() - sent >= 1.0  # not before the linger ran out


def test_plain_users_from_jaas_and_from_scram_credentials(broker: SecureBroker) -> None:
    address = broker.process.address("SASL_PLAINTEXT")
    for user, password in (("jaasuser", JAAS_PASSWORD), (ADMIN, ADMIN_PASSWORD)):
        with AdminClient(
            bootstrap_servers=address,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username=user,
            sasl_plain_password=password,
        ) as admin:
            assert admin.describe_cluster().cluster_id
    with (
        pytest.raises(SaslAuthenticationFailedError, match="Invalid username or password"),
        AdminClient(
            bootstrap_servers=address,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="jaasuser",
            sasl_plain_password="guess",
            default_api_timeout_ms=10_000,
        ) as admin,
    ):
        admin.describe_cluster()


def test_plaintext_on_a_tls_port_is_refused_cleanly(broker: SecureBroker) -> None:
    with Wire(broker.sasl_ssl) as wire:  # no TLS
        wire.send_raw(frame(struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 1, -1)))
        assert wire.is_closed_by_broker()
    with Wire(broker.sasl_ssl, client_tls(broker.pki)) as wire:  # the broker still serves
        assert wire.request(ApiKey.API_VERSIONS, 3, API_VERSIONS_BODY).error_code == 0


def test_half_finished_handshakes_are_closed_in_time(broker: SecureBroker) -> None:
    host, _, port = broker.ssl.rpartition(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=10) as silent:  # never says hello
        silent.settimeout(10)
        assert silent.recv(1) == b""
    waited = time.monotonic() - started
    assert AUTH_TIMEOUT_MS / 1000 * 0.8 < waited < 10
    with _sasl_plaintext(broker) as wire:  # starts SASL, never finishes
        wire.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": MECHANISM})
        assert wire.is_closed_by_broker(timeout_s=10)
    with _sasl_plaintext(broker) as wire:  # announces a 10 MB frame before authenticating
        wire.send_raw(struct.pack(">i", 10 * 1024 * 1024) + b"\x00" * 1024)
        assert wire.is_closed_by_broker(timeout_s=5)
    log = broker.process.log_path.read_text()
    assert "not authenticated within connections.authentication.timeout.ms" in log
    assert "sasl.server.max.receive.size" in log or "frame size 10485760" in log


def test_expired_session_is_closed_and_clients_reauthenticate(broker: SecureBroker) -> None:
    with _sasl_plaintext(broker) as wire:
        assert _scram_v1(wire, ADMIN, ADMIN_PASSWORD) == (0, REAUTH_MS)
        deadline = time.monotonic() + REAUTH_MS / 1000 + 0.3
        while time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(ConnectionError):
            _metadata(wire)
    # Odradek's client and kafka-python re-authenticate in-band and carry on.
    user = unique("reauth")
    broker.add_user(user)
    topic = broker.create_topic(unique("reauth"))
    broker.grant(f"User:{user}", ResourceType.TOPIC, topic, AclOperation.WRITE)
    address = broker.process.address("SASL_PLAINTEXT")
    common = {
        "bootstrap_servers": address,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": MECHANISM,
        "sasl_plain_username": user,
        "sasl_plain_password": broker.users[user],
    }
    from kafka import KafkaProducer

    def reauthentications() -> int:
        text = broker.process.log_path.read_text()
        return text.count(f"re-authentication of User:{user} via {MECHANISM}")

    def keep_sending(send: object) -> None:
        end = time.monotonic() + 2 * REAUTH_MS / 1000
        while time.monotonic() < end:
            send()  # type: ignore[operator]
            time.sleep(0.2)

    with Producer(**common, linger_ms=0) as ours:
        keep_sending(lambda: ours.send(topic, value=b"ours").result(10))
    after_ours = reauthentications()
    assert after_ours > 0
    theirs = KafkaProducer(**common)
    try:
        keep_sending(lambda: theirs.send(topic, value=b"kafka-python").get(10))
    finally:
        theirs.close()
    assert reauthentications() > after_ours
    assert f"session of User:{user} expired" not in broker.process.log_path.read_text()


def test_credentials_and_acls_survive_a_restart(tmp_path: Path, pki: Pki) -> None:
    process = start_secure_broker(tmp_path / "data", pki)
    broker = SecureBroker(process, pki, {ADMIN: ADMIN_PASSWORD})
    try:
        broker.add_user("durable", "same-password")
        broker.add_user("twin", "same-password")
        topic = broker.create_topic(unique("durable"))
        broker.grant("User:durable", ResourceType.TOPIC, topic, AclOperation.WRITE)
        broker.close()
        broker._admin = None
        process.restart()
        with Producer(**broker.odradek("durable")) as producer:
            producer.send(topic, value=b"after restart").result(20)
        acls = broker.admin().describe_acls()
        assert [(a.principal, a.resource_name, a.operation) for a in acls] == [
            ("User:durable", topic, AclOperation.WRITE)
        ]
    finally:
        broker.close()
        process.stop()
    stored = json.loads((tmp_path / "data" / "security" / "scram-credentials.json").read_text())
    entries = {(e["user"], e["mechanism"]): e for e in stored["credentials"]}
    assert all(e["iterations"] >= 4096 for e in entries.values())
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):  # same password, different salts and keys
        durable, twin = entries[("durable", mech)], entries[("twin", mech)]
        assert durable["salt"] != twin["salt"]
        assert durable["stored_key"] != twin["stored_key"]
    text = (tmp_path / "data" / "security" / "scram-credentials.json").read_text()
    assert "same-password" not in text and ADMIN_PASSWORD not in text


def test_passwords_never_reach_the_log(broker: SecureBroker) -> None:
    """Run last in this module: every password used against this DEBUG-level broker
    above (the admin's from --add-scram, users', wrong ones, the JAAS one)."""
    secrets = [ADMIN_PASSWORD, JAAS_PASSWORD, "wrong-password", "guess", *broker.users.values()]
    log = broker.process.log_path.read_text()
    assert "DEBUG" in log and "authentication of User:" in log
    for secret in secrets:
        assert secret not in log, f"a password is in the broker log: {secret[:3]}..."
