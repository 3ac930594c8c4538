"""The security pieces without a broker: SCRAM (RFC 7677's test vector), the SASL
server mechanisms, the authorizer's decision rules, principals of certificates, and
the formats (JAAS, properties, --add-scram, listeners, settings)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.broker.security import acl as acl_module
from odradek.broker.security import credentials as credentials_module
from odradek.broker.security.acl import (
    AclBinding,
    AclError,
    AclFilter,
    AclStore,
    StandardAuthorizer,
)
from odradek.broker.security.credentials import ScramCredentialStore, parse_add_scram
from odradek.broker.security.listeners import listener_value, parse_listeners
from odradek.broker.security.principal import (
    KafkaPrincipal,
    PrincipalError,
    SslPrincipalMapper,
    subject_dn,
)
from odradek.broker.security.sasl import PlainServer, SaslFailure, ScramServer
from odradek.cli.properties import parse_properties
from odradek.client.config import ConsumerConfig, ProducerConfig
from odradek.client.errors import ConfigError as ClientConfigError
from odradek.protocol.acl import AclOperation as Op
from odradek.protocol.acl import AclPermission, PatternType
from odradek.protocol.acl import ResourceType as Res
from odradek.protocol.jaas import JaasError, parse_jaas
from odradek.protocol.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramClient,
    ScramCredential,
    ScramError,
)

# --- SCRAM ---------------------------------------------------------------------------

RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)


def test_scram_client_matches_rfc7677_test_vector() -> None:
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert client.final(RFC7677_SERVER_FIRST) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    client.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(ScramError, match="wrong server"):
        client.verify(b"v=" + base64.b64encode(b"\x00" * 32))


def _store(tmp_path: Path, user: str, password: str) -> ScramCredentialStore:
    store = ScramCredentialStore(tmp_path / "scram.json")
    store.apply(
        [
            (user, mech, ScramCredential.from_password(mech, password, 4096))
            for mech in (SCRAM_SHA_256, SCRAM_SHA_512)
        ],
        [],
    )
    return store


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512], ids=lambda m: m.name)
def test_scram_server_and_client_agree_and_wrong_passwords_fail(tmp_path: Path, mech) -> None:
    store = _store(tmp_path, "alice", "alice-pw")
    server, client = ScramServer(mech, store), ScramClient(mech, "alice", "alice-pw")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.complete and server.username == "alice"

    server, client = ScramServer(mech, store), ScramClient(mech, "alice", "guess")
    challenge = server.evaluate(client.first())
    with pytest.raises(SaslFailure) as failure:
        server.evaluate(client.final(challenge))
    assert not failure.value.public  # the client gets Kafka's generic message

    with pytest.raises(SaslFailure):  # unknown user: refused at the first message
        ScramServer(mech, store).evaluate(ScramClient(mech, "bob", "x").first())
    with pytest.raises(SaslFailure):  # a replayed nonce cannot finish someone else's exchange
        server = ScramServer(mech, store)
        server.evaluate(ScramClient(mech, "alice", "alice-pw", nonce="n1").first())
        other = ScramClient(mech, "alice", "alice-pw", nonce="n2")
        other.first()
        server.evaluate(other.final(b"r=n2xyz,s=" + base64.b64encode(b"salt") + b",i=4096"))


def test_credentials_are_salted_and_keep_no_password(tmp_path: Path) -> None:
    store = _store(tmp_path, "alice", "same")
    store.apply([("bob", SCRAM_SHA_512, ScramCredential.from_password(SCRAM_SHA_512, "same"))], [])
    alice, bob = store.get("alice", SCRAM_SHA_512), store.get("bob", SCRAM_SHA_512)
    assert alice and bob and alice.salt != bob.salt and alice.stored_key != bob.stored_key
    assert len(alice.salt) >= 16 and alice.iterations >= 4096
    reloaded = ScramCredentialStore(tmp_path / "scram.json")
    assert reloaded.users() == {
        "alice": {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096},
        "bob": {"SCRAM-SHA-512": 4096},
    }
    assert b"same" not in (tmp_path / "scram.json").read_bytes()


def test_plain_checks_jaas_users_then_scram_credentials(tmp_path: Path) -> None:
    store = _store(tmp_path, "alice", "alice-pw")
    jaas = {"svc": "svc-pw"}

    def attempt(token: bytes) -> str | None:
        server = PlainServer(jaas, store)
        server.evaluate(token)
        return server.username

    assert attempt(b"\x00svc\x00svc-pw") == "svc"
    assert attempt(b"\x00alice\x00alice-pw") == "alice"
    assert attempt(b"alice\x00alice\x00alice-pw") == "alice"  # authzid == username
    for bad in (b"\x00alice\x00nope", b"\x00svc\x00alice-pw", b"bob\x00alice\x00alice-pw", b"x"):
        with pytest.raises(SaslFailure):
            attempt(bad)


# --- the authorizer ---------------------------------------------------------------------

ALICE = KafkaPrincipal("User", "alice")


def _authorizer(tmp_path: Path, *acls: AclBinding, allow_if_none: bool = False):
    store = AclStore(tmp_path / "acls.json")
    store.add(acls)
    return StandardAuthorizer(store, ["User:admin"], allow_if_none)


def _acl(
    name: str,
    op: Op,
    *,
    principal: str = "User:alice",
    pattern: PatternType = PatternType.LITERAL,
    permission: AclPermission = AclPermission.ALLOW,
    host: str = "*",
    rtype: Res = Res.TOPIC,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


def test_authorizer_rules(tmp_path: Path) -> None:
    authorizer = _authorizer(
        tmp_path,
        _acl("orders", Op.READ),
        _acl("logs-", Op.WRITE, pattern=PatternType.PREFIXED),
        _acl("logs-secret", Op.WRITE, permission=AclPermission.DENY),
        _acl("*", Op.DESCRIBE, principal="User:*"),
        _acl("cfg", Op.ALTER_CONFIGS),
        _acl("local", Op.READ, host="10.0.0.1"),
    )

    def allowed(op: Op, name: str, principal: KafkaPrincipal = ALICE, host: str = "1.2.3.4"):
        return authorizer.authorize(principal, host, op, Res.TOPIC, name)

    assert allowed(Op.READ, "orders") and not allowed(Op.WRITE, "orders")
    assert allowed(Op.WRITE, "logs-app") and not allowed(Op.WRITE, "logs-secret")  # DENY wins
    assert allowed(Op.DESCRIBE, "logs-secret")  # a DENY on WRITE implies nothing
    assert allowed(Op.DESCRIBE, "anything", KafkaPrincipal("User", "bob"))  # User:* and '*'
    assert allowed(Op.DESCRIBE_CONFIGS, "cfg") and not allowed(Op.DESCRIBE_CONFIGS, "orders")
    assert not allowed(Op.READ, "local") and allowed(Op.READ, "local", host="10.0.0.1")
    assert allowed(Op.DELETE, "orders", KafkaPrincipal("User", "admin"))  # super user
    # READ gives READ and DESCRIBE; ALTER_CONFIGS gives DESCRIBE_CONFIGS too.
    bits = authorizer.authorized_operations(ALICE, "1.2.3.4", Res.TOPIC, "orders")
    assert bits == (1 << Op.READ) | (1 << Op.DESCRIBE)
    assert authorizer.authorize_any(ALICE, "1.2.3.4", Op.WRITE, Res.TOPIC)  # logs-*
    assert not authorizer.authorize_any(KafkaPrincipal("User", "bob"), "h", Op.WRITE, Res.TOPIC)


def test_allow_everyone_if_no_acl_found_only_where_no_acl_exists(tmp_path: Path) -> None:
    authorizer = _authorizer(tmp_path, _acl("orders", Op.READ), allow_if_none=True)
    bob = KafkaPrincipal("User", "bob")
    assert authorizer.authorize(bob, "h", Op.WRITE, Res.TOPIC, "unmentioned")
    assert not authorizer.authorize(bob, "h", Op.READ, Res.TOPIC, "orders")


def test_acl_validation_and_filters(tmp_path: Path) -> None:
    with pytest.raises(AclError, match="kafka-cluster"):
        _acl("my-cluster", Op.ALTER, rtype=Res.CLUSTER).validate()
    for bad in (
        _acl("t", Op.ANY),
        _acl("t", Op.READ, pattern=PatternType.MATCH),
        _acl("t", Op.READ, principal="alice"),
        _acl("", Op.READ),
    ):
        with pytest.raises(AclError):
            bad.validate()
    store = AclStore(tmp_path / "acls.json")
    store.add([_acl("logs-", Op.WRITE, pattern=PatternType.PREFIXED), _acl("orders", Op.READ)])
    match = AclFilter(Res.TOPIC, "logs-app", PatternType.MATCH)
    assert [a.resource_name for a in store.matching(match)] == ["logs-"]
    removed = store.remove([AclFilter(Res.ANY, None, PatternType.ANY, "User:alice", None, Op.READ)])
    assert [a.resource_name for a in removed[0]] == ["orders"]
    assert [a.resource_name for a in AclStore(tmp_path / "acls.json")] == ["logs-"]


def test_request_saves_run_off_the_loop_one_at_a_time_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CreateAcls / DeleteAcls / AlterUserScramCredentials save in a worker thread (the
    event loop keeps running through the fsync), never two writes at once, in the order
    the changes were asked for; a change is visible only once its file is written."""
    writing = threading.Lock()
    written: list[list[str]] = []
    real_write = acl_module.write_json_atomically

    def slow_write(path: Path, document: dict) -> None:
        assert writing.acquire(blocking=False), "two saves at once"
        try:
            assert threading.current_thread() is not threading.main_thread()
            time.sleep(0.05)
            real_write(path, document)
            written.append([a["resource_name"] for a in document.get("acls", [])])
        finally:
            writing.release()

    monkeypatch.setattr(acl_module, "write_json_atomically", slow_write)
    monkeypatch.setattr(credentials_module, "write_json_atomically", slow_write)
    store = AclStore(tmp_path / "acls.json")
    orders, logs = _acl("orders", Op.READ), _acl("logs", Op.WRITE)
    orders_filter = AclFilter(Res.TOPIC, "orders", PatternType.LITERAL)

    async def main() -> list[int]:
        ticks = [0]

        async def tick() -> None:
            while True:
                ticks[0] += 1
                await asyncio.sleep(0.005)

        ticker = asyncio.create_task(tick())
        first = asyncio.create_task(store.change(lambda s: s.add([orders])))
        await asyncio.sleep(0.01)  # the first write is under way
        assert list(store) == []  # not visible before its file is written
        # Asked for in this order: add, delete, add. Reordered, "orders" would survive.
        changes = [
            asyncio.create_task(store.change(lambda s: s.remove([orders_filter]))),
            asyncio.create_task(store.change(lambda s: s.add([logs]))),
        ]
        await first
        await asyncio.gather(*changes)
        ticker.cancel()
        return ticks

    ticks = asyncio.run(main())
    assert ticks[0] >= 10  # the loop ran while the three 50 ms saves did
    assert written == [["orders"], [], ["logs"]]
    assert [a.resource_name for a in store] == ["logs"]
    on_disk = json.loads((tmp_path / "acls.json").read_text())
    assert [a["resource_name"] for a in on_disk["acls"]] == ["logs"]
    # SCRAM credentials take the same path.
    scram = ScramCredentialStore(tmp_path / "scram.json")
    credential = ScramCredential.from_password(SCRAM_SHA_256, "pw", 4096)
    asyncio.run(scram.change(lambda s: s.apply([("alice", SCRAM_SHA_256, credential)], [])))
    assert ScramCredentialStore(tmp_path / "scram.json").get("alice", SCRAM_SHA_256) == credential


# --- principals of certificates --------------------------------------------------------


def test_subject_dn_is_written_as_java_does() -> None:
    cert = {
        "subject": (
            (("countryName", "US"),),
            (("organizationName", "Acme, Inc."),),
            (("organizationalUnitName", "eng"),),
            (("commonName", "alice"),),
        )
    }
    assert subject_dn(cert) == "CN=alice,OU=eng,O=Acme\\, Inc.,C=US"


def test_ssl_principal_mapping_rules() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$2/L, DEFAULT")
    assert mapper.name("CN=Alice,OU=Eng,O=Acme,C=US") == "alice@eng"
    assert mapper.name("CN=service") == "CN=service"
    with pytest.raises(PrincipalError):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("O=x")
    with pytest.raises(PrincipalError):
        SslPrincipalMapper("NOT-A-RULE")


# --- formats and settings ---------------------------------------------------------------


def test_jaas_config() -> None:
    entry = parse_jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule required\n"
        '  username="admin" password="a \\"quoted\\" secret" user_alice="alice-pw";'
    )
    assert entry.options["password"] == 'a "quoted" secret'
    assert entry.plain_users == {"alice": "alice-pw"}
    assert "secret" not in repr(entry)
    with pytest.raises(JaasError):
        parse_jaas('org.X required username="a"')  # no ';'


def test_java_properties() -> None:
    props = parse_properties(
        "# comment\n! also\nlisteners = SASL_SSL://:9093\nsasl.jaas.config=a \\\n    b;\n"
        "key:value\nspaced value\nesc\\=aped=\\u0041\n"
    )
    assert props == {
        "listeners": "SASL_SSL://:9093",
        "sasl.jaas.config": "a b;",
        "key": "value",
        "spaced": "value",
        "esc=aped": "A",
    }


def test_add_scram_argument() -> None:
    user = parse_add_scram('SCRAM-SHA-512=[name=admin,password="a,b=c",iterations=8192]')
    assert (user.mechanism.name, user.name, user.password, user.iterations) == (
        "SCRAM-SHA-512",
        "admin",
        "a,b=c",
        8192,
    )
    assert "a,b=c" not in repr(user)
    for bad in (
        "SCRAM-SHA-1=[name=a,password=b]",
        "SCRAM-SHA-256=[name=a]",
        "x",
        "SCRAM-SHA-256=[name=a,password=b,iterations=100]",
    ):
        with pytest.raises(ScramError):
            parse_add_scram(bad)


def test_listeners_and_per_listener_settings() -> None:
    config = BrokerConfig(
        {
            "listeners": "CLIENT://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092,CONTROLLER://:9094",
            "listener.security.protocol.map": "CLIENT:SASL_SSL,PLAINTEXT:PLAINTEXT,"
            "CONTROLLER:PLAINTEXT",
            "advertised.listeners": "CLIENT://broker.example.com:19093",
            "controller.listener.names": "CONTROLLER",
            "ssl.client.auth": "none",
            "listener.name.client.ssl.client.auth": "required",
        }
    )
    client, plain = parse_listeners(config, ("127.0.0.1", 9092))
    assert (client.name, client.protocol, client.host, client.port) == (
        "CLIENT",
        "SASL_SSL",
        "0.0.0.0",
        9093,
    )
    assert (client.advertised_host, client.advertised_port) == ("broker.example.com", 19093)
    assert (plain.protocol, plain.advertised_host) == ("PLAINTEXT", "127.0.0.1")
    assert listener_value(config, "CLIENT", "ssl.client.auth") == "required"
    assert listener_value(config, "PLAINTEXT", "ssl.client.auth") == "none"
    for bad in (
        {"listeners": "NOPE://:1"},  # no protocol for it
        {"listeners": "PLAINTEXT://0.0.0.0:1"},  # would advertise 0.0.0.0
        {"listeners": "PLAINTEXT:1"},
    ):
        with pytest.raises(ConfigError):
            parse_listeners(BrokerConfig(bad), ("127.0.0.1", 9092))
    with pytest.raises(ConfigError):
        BrokerConfig({"listener.name.x.num.partitions": "3"})  # not a per-listener setting


def test_client_security_settings_are_checked() -> None:
    config = ConsumerConfig.from_settings(
        {
            "bootstrap.servers": "h:1",
            "security.protocol": "sasl_ssl",
            "sasl.mechanisms": "scram-sha-256",
            "sasl.username": "u",
            "sasl.password": "p",
            "ssl.ca.location": "/ca.pem",
        }
    )
    assert (config.security_protocol, config.sasl_mechanism, config.ssl_cafile) == (
        "SASL_SSL",
        "SCRAM-SHA-256",
        "/ca.pem",
    )
    assert "'p'" not in repr(config)  # the password stays out of repr
    for bad in (
        {"security_protocol": "TLS"},
        {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "GSSAPI"},
        {"security_protocol": "SASL_PLAINTEXT"},  # no credentials
        {"ssl_truststore_type": "JKS"},
    ):
        with pytest.raises(ClientConfigError):
            ProducerConfig.from_settings(bootstrap_servers="h:1", **bad)
