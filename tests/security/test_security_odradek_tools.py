"""Odradek's own client and CLI speak the same security: the same settings names as
kafka-python (and the Java / librdkafka dotted ones), Kafka's errors as exceptions,
and ``--command-config`` with ``odradek users`` / ``odradek acls``."""

from __future__ import annotations

import io
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from secure import ADMIN, SecureBroker, unique

from odradek.cli.main import main
from odradek.client import (
    AclOperation,
    AdminClient,
    Consumer,
    Producer,
    ResourceType,
    TopicPartition,
)
from odradek.client.errors import (
    GroupAuthorizationFailedError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
)

N = 20
pytestmark = [pytest.mark.embedded, pytest.mark.timeout(120)]


def _principal(broker: SecureBroker, auth: str) -> tuple[str, dict[str, Any]]:
    name = unique("ours")
    if auth == "sasl_scram":
        broker.add_user(name)
        return f"User:{name}", broker.odradek(name)
    return broker.pki.client(name).principal, broker.odradek_cert(name)


@pytest.mark.parametrize("auth", ["sasl_scram", "ssl_cert"])
def test_odradek_client_produce_consume_commit_admin(
    secure_broker: SecureBroker, auth: str
) -> None:
    principal, settings = _principal(secure_broker, auth)
    topic = secure_broker.create_topic(unique("ours"), partitions=2)
    group = unique("ours-group")
    secure_broker.grant(principal, ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ)
    secure_broker.grant(principal, ResourceType.GROUP, group, AclOperation.READ)
    secure_broker.create_topic(unique("hidden"))

    with Producer(**settings) as producer:
        for future in [producer.send(topic, value=b"v%02d" % i, partition=i % 2) for i in range(N)]:
            future.result(20)
    consumer = Consumer(
        **settings, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False
    )
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(got) < N and time.monotonic() < deadline:
            got.extend(r.value for r in consumer.poll(0.5))
        consumer.commit()
        committed = consumer.committed({TopicPartition(topic, 0), TopicPartition(topic, 1)})
    finally:
        consumer.close()
    assert sorted(got) == [b"v%02d" % i for i in range(N)]
    assert {tp.partition: om.offset for tp, om in committed.items()} == {0: N // 2, 1: N // 2}
    with AdminClient(**settings) as admin:
        assert admin.list_topics() == [topic]


def test_dotted_java_and_librdkafka_names(secure_broker: SecureBroker, tmp_path: Path) -> None:
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{ADMIN}" password="{secure_broker.users[ADMIN]}";'
    )
    java = {
        "bootstrap.servers": secure_broker.sasl_ssl,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": jaas,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(secure_broker.pki.ca_cert),
    }
    cert = secure_broker.pki.client("dotted")
    librdkafka = {
        "bootstrap.servers": secure_broker.ssl,
        "security.protocol": "SSL",
        "ssl.ca.location": str(secure_broker.pki.ca_cert),
        "ssl.certificate.location": str(cert.cert),
        "ssl.key.location": str(cert.key),
    }
    for config in (java, librdkafka):
        with AdminClient(config) as admin:
            assert admin.describe_cluster().cluster_id


def test_kafka_errors_surface_as_exceptions(secure_broker: SecureBroker) -> None:
    user = unique("limited")
    secure_broker.add_user(user)
    settings = secure_broker.odradek(user)
    topic = secure_broker.create_topic(unique("guarded"))
    group = unique("guarded-group")
    secure_broker.grant(f"User:{user}", ResourceType.TOPIC, topic, AclOperation.DESCRIBE)
    with (
        Producer(**settings, enable_idempotence=False) as producer,
        pytest.raises(TopicAuthorizationFailedError),
    ):
        producer.send(topic, value=b"x").result(20)
    consumer = Consumer(**settings, group_id=group, enable_auto_commit=False)
    try:
        with pytest.raises(GroupAuthorizationFailedError):
            consumer.commit({TopicPartition(topic, 0): 0})
    finally:
        consumer.close()
    with pytest.raises(SaslAuthenticationFailedError):
        AdminClient(**secure_broker.odradek(user, password="wrong")).describe_cluster()


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    """``cli(broker, config, *args, stdin=...)``: ``odradek ARGS`` in this process."""

    def run(broker: SecureBroker, config: Path, *args: str, stdin: str = "") -> Ran:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        capsys.readouterr()
        argv = [*args, "-b", broker.sasl_ssl, "--command-config", str(config)]
        code = main(argv)
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)

    return run


def test_cli_users_acls_and_data_with_command_config(
    secure_broker: SecureBroker, tmp_path: Path, cli: Any
) -> None:
    admin_config = secure_broker.properties(tmp_path / "admin.properties", ADMIN)
    user = unique("cli-user")
    added = cli(secure_broker, admin_config, "users", "add", user, stdin="cli-secret\n")
    assert added.returncode == 0, added.stderr
    secure_broker.users[user] = "cli-secret"
    listed = cli(secure_broker, admin_config, "users", "list", user, "--format", "json")
    assert listed.returncode == 0, listed.stderr
    assert '"SCRAM-SHA-512"' in listed.stdout

    topic = secure_broker.create_topic(unique("cli"))
    group = unique("cli-group")
    granted = cli(
        secure_broker,
        admin_config,
        "acls",
        "add",
        "--allow-principal",
        f"User:{user}",
        "--consumer",
        "--producer",
        "--topic",
        topic,
        "--group",
        group,
    )
    assert granted.returncode == 0, granted.stderr
    user_config = secure_broker.properties(tmp_path / "user.properties", user)
    produced = cli(secure_broker, user_config, "produce", topic, stdin="a\nb\nc\n")
    assert produced.returncode == 0, produced.stderr
    consumed = cli(
        secure_broker,
        user_config,
        "consume",
        topic,
        "--group",
        group,
        "--from-beginning",
        "--max-messages",
        "3",
    )
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split() == ["a", "b", "c"]
    # The group's history is in __consumer_offsets: the admin reads it; the user, with no
    # READ on that topic, still gets its group described, without the generation.
    history = cli(secure_broker, admin_config, "groups", "history", group, "--format", "json")
    assert history.returncode == 0, history.stderr
    assert json.loads(history.stdout)["summary"]["rebalances"] >= 1
    described = cli(secure_broker, user_config, "groups", "describe", group, "--format", "json")
    assert described.returncode == 0, described.stderr
    report = json.loads(described.stdout)
    assert report["generation"] is None and "not authorized" in report["history_error"]
    refused_history = cli(secure_broker, user_config, "groups", "history", group)
    assert refused_history.returncode == 1
    assert refused_history.stderr.count("\n") == 1
    assert "not authorized to read __consumer_offsets" in refused_history.stderr
    topics = cli(secure_broker, user_config, "topics", "list", "--format", "json")
    assert [t["name"] for t in json.loads(topics.stdout)] == [topic]

    removed = cli(
        secure_broker,
        admin_config,
        "acls",
        "remove",
        "--allow-principal",
        f"User:{user}",
        "--topic",
        topic,
    )
    assert removed.returncode == 0 and "removed:" in removed.stdout
    refused = cli(secure_broker, user_config, "produce", topic, stdin="d\n")
    assert refused.returncode == 1
    assert "topic authorization failed" in refused.stderr.lower()

    gone = cli(secure_broker, admin_config, "users", "remove", user)
    assert gone.returncode == 0, gone.stderr
    denied = cli(secure_broker, user_config, "topics", "list")
    assert denied.returncode == 1
    assert "sasl authentication failed" in denied.stderr.lower()
    assert denied.stderr.count("\n") == 1  # one line, no traceback
