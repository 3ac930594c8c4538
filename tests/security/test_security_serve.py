"""`odradek serve` as a Kafka operator configures it: a Kafka ``server.properties``
ports over (--config, --set wins), and the metrics endpoint stays on loopback or
asks for a bearer token."""

from __future__ import annotations

import argparse
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from secure import ADMIN, ADMIN_PASSWORD, MECHANISM, STANDARD_AUTHORIZER

from odradek.cli.main import main
from odradek.cli.serve import _settings
from odradek.client import AdminClient, ConfigResource
from odradek.testing import BrokerProcess, free_port
from odradek.testing_tls import Pki

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(120)]


def _kafka_server_properties(path: Path, pki: Pki, sasl_port: int, controller_port: int) -> Path:
    """What a KRaft combined-mode Kafka 4 server.properties with SASL_SSL looks like."""
    path.write_text(
        f"""# Kafka 4 server.properties, combined mode
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@localhost:{controller_port}
listeners=SASL_SSL://127.0.0.1:{sasl_port},CONTROLLER://127.0.0.1:{controller_port}
advertised.listeners=SASL_SSL://localhost:{sasl_port}
inter.broker.listener.name=SASL_SSL
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms={MECHANISM}
sasl.mechanism.inter.broker.protocol={MECHANISM}
ssl.keystore.type=PEM
ssl.keystore.location={pki.server_keystore}
ssl.truststore.type=PEM
ssl.truststore.location={pki.ca_cert}
ssl.key.password=
authorizer.class.name={STANDARD_AUTHORIZER}
super.users=User:{ADMIN}
allow.everyone.if.no.acl.found=false
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
log.dirs=/var/lib/kafka/data
num.partitions=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
"""
    )
    return path


def test_a_kafka_server_properties_ports_over(tmp_path: Path, pki: Pki) -> None:
    sasl_port, controller_port = free_port(), free_port()
    properties = _kafka_server_properties(
        tmp_path / "server.properties", pki, sasl_port, controller_port
    )
    config, log_dirs = _settings(
        argparse.Namespace(config=str(properties), set=["num.partitions=3"])
    )
    assert log_dirs == "/var/lib/kafka/data"  # the data dir when --data-dir is not given
    assert config["num.partitions"] == 3 and config["log.retention.ms"] == 168 * 3600_000

    broker = BrokerProcess(
        tmp_path / "data",
        port=sasl_port,
        config_file=properties,
        settings={"num.partitions": "3"},
        extra_args=["--add-scram", f"{MECHANISM}=[name={ADMIN},password={ADMIN_PASSWORD}]"],
    )
    broker.start()
    try:
        with AdminClient(
            bootstrap_servers=f"localhost:{sasl_port}",
            security_protocol="SASL_SSL",
            sasl_mechanism=MECHANISM,
            sasl_plain_username=ADMIN,
            sasl_plain_password=ADMIN_PASSWORD,
            ssl_cafile=str(pki.ca_cert),
        ) as admin:
            cluster = admin.describe_cluster()
            assert [(b.node_id, b.host, b.port) for b in cluster.brokers] == [
                (1, "localhost", sasl_port)
            ]
            configs = admin.describe_configs([ConfigResource.broker(1)])
            entries = next(iter(configs.values()))
            assert entries["num.partitions"].value == "3"  # --set wins over the file
            assert entries["ssl.key.password"].is_sensitive
            assert entries["ssl.key.password"].value is None
        with pytest.raises(OSError):  # the controller listener is not opened
            socket.create_connection(("127.0.0.1", controller_port), timeout=2).close()
    finally:
        broker.stop()


def test_metrics_need_a_token_off_loopback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--data-dir", str(tmp_path / "x"), "--metrics", "0.0.0.0:9999"]) == 2
    assert "needs --metrics-token-file" in capsys.readouterr().err

    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    port = free_port()
    broker = BrokerProcess(
        tmp_path / "data",
        extra_args=["--metrics", str(port), "--metrics-token-file", str(token)],
    ).start()
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(url, headers={"Authorization": "Bearer s3cret-token"})
        with urllib.request.urlopen(request, timeout=10) as reply:
            assert reply.status == 200
            assert b"odradek_network_received_bytes_total" in reply.read()
    finally:
        broker.stop()
    assert "s3cret-token" not in broker.log_path.read_text()
