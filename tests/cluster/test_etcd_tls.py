"""etcd over TLS with client certificates (issue 21, "authenticated replication").

One etcd started with ``--client-cert-auth`` and two brokers (`LocalCluster` with
`EtcdTlsFiles`: its health waits read etcd over TLS too) for the module: the brokers
join with a client certificate of etcd's CA and serve real clients. A broker without a
certificate, with one of another CA, trusting another CA for etcd, or in plaintext is
refused at start with one line (exit 2), in bounded time. The settings and the files
are checked before anything connects; server-authentication-only TLS (no client
certificate) works against an etcd that does not ask for one.
"""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography.hazmat.primitives import serialization

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.cli.main import main
from odradek.client import Consumer as OdradekConsumer
from odradek.cluster.etcd_tls import EtcdTls
from odradek.cluster.metadata import EtcdMetadataStore
from odradek.devcluster.etcd_server import EtcdServer, EtcdServerTls, pick_free_port
from odradek.devcluster.launcher import EtcdTlsFiles, LocalCluster, registered_brokers
from odradek.testing_tls import Pki, make_pki

from cluster_harness import eventually, running_cluster  # isort: skip

SERVE_TIMEOUT_S = 60.0  # bounds every refused start: it must end by itself well before
DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    # etcd presents its own certificate as a client too (its gateway, the health probe)
    return make_pki(tmp_path_factory.mktemp("etcd-pki"), server_and_client=True)


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("other-pki"))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[LocalCluster]:
    client = pki.client("broker")
    files = EtcdTlsFiles(
        str(pki.ca_cert),
        str(pki.server_cert),
        str(pki.server_key),
        str(client.cert),
        str(client.key),
    )
    with running_cluster(tmp_path_factory.mktemp("tls-cluster"), 2, etcd_tls=files) as cluster:
        yield cluster


def https_endpoints(cluster: LocalCluster) -> str:
    return ",".join(f"https://{host}:{port}" for host, port in cluster.etcd_endpoints())


def start_serve(data_dir: Path, etcd: str, *settings: str) -> subprocess.Popen[str]:
    """``odradek serve`` as broker 9 with `settings` (``--set``)."""
    command = [
        sys.executable, "-m", "odradek", "serve", "--data-dir", str(data_dir),
        "--listen", f"127.0.0.1:{pick_free_port('127.0.0.1')}", "--etcd", etcd, "--node-id", "9",
    ]  # fmt: skip
    for setting in settings:
        command += ["--set", setting]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen[str]) -> tuple[int, str]:
    """Its exit code and stderr, once it ended by itself (killed after SERVE_TIMEOUT_S)."""
    try:
        _, err = process.communicate(timeout=SERVE_TIMEOUT_S)
    finally:
        process.kill()
        process.wait()
    return process.returncode, err


def cli(*argv: str) -> tuple[int, str, str]:
    """``odradek ARGV`` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse errors
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


# --- brokers that present etcd's CA's certificate -------------------------------------------


def test_brokers_join_an_etcd_that_requires_client_certificates_and_serve(
    cluster: LocalCluster, pki: Pki
) -> None:
    tls = cluster.etcd_client_tls()
    assert tls is not None and tls.certificate_chain is not None
    pids = {b: cluster.pid(b) for b in cluster.broker_ids}
    assert registered_brokers(cluster.etcd_endpoints(), cluster.cluster_name, tls=tls) == pids
    assert registered_brokers(cluster.etcd_endpoints(), cluster.cluster_name) == {}  # plaintext

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
    for future in admin.create_topics([NewTopic("over-tls", 2, 2)]).values():
        future.result(30)

    def leaders() -> bool:
        topic = admin.list_topics("over-tls", timeout=10).topics["over-tls"]
        return len(topic.partitions) == 2 and all(
            p.leader >= 0 and len(p.isrs) == 2 for p in topic.partitions.values()
        )

    eventually(leaders, "a leader and a full ISR for each partition")
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers(), "acks": "all"})
    sent = [b"record-%d" % i for i in range(20)]
    for i, value in enumerate(sent):
        producer.produce("over-tls", value, partition=i % 2)
    assert producer.flush(DEADLINE_S) == 0
    received: list[bytes] = []
    with OdradekConsumer(
        bootstrap_servers=cluster.bootstrap_servers(), auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([("over-tls", 0), ("over-tls", 1)])
        deadline = time.monotonic() + DEADLINE_S
        while len(received) < len(sent) and time.monotonic() < deadline:
            received += [r.value for r in consumer.poll(0.5)]
    assert sorted(received) == sorted(sent)

    # cluster status reads the same etcd: from the data dir, and with --etcd and the files
    code, out, err = cli("cluster", "status", "--data-dir", str(cluster.layout.root), "-o", "json")
    assert code == 0, err
    assert [b["id"] for b in json.loads(out)["brokers"] if b["alive"]] == [1, 2]
    client = pki.client("broker")
    code, out, err = cli(
        "cluster", "status", "--etcd", https_endpoints(cluster),
        "--etcd-cafile", str(pki.ca_cert), "--etcd-certfile", str(client.cert),
        "--etcd-keyfile", str(client.key), "--topic", "over-tls", "-o", "json",
    )  # fmt: skip
    assert code == 0, err
    status = json.loads(out)
    assert [b["id"] for b in status["brokers"] if b["alive"]] == [1, 2]
    assert [(p["topic"], p["partition"]) for p in status["partitions"]] == [
        ("over-tls", 0),
        ("over-tls", 1),
    ]


def test_several_endpoints_over_tls_fail_over_to_the_member_that_answers(
    cluster: LocalCluster,
) -> None:
    """Several endpoints make the channel's target an address list, which names no host:
    the members' certificates are checked against the first endpoint's host instead."""
    down = ("127.0.0.1", pick_free_port("127.0.0.1"))  # nothing listens there

    async def registered() -> list[int]:
        async with EtcdMetadataStore.for_endpoints(
            [down, *cluster.etcd_endpoints()],
            cluster_name=cluster.cluster_name,
            tls=cluster.etcd_client_tls(),
        ) as store:
            return sorted((await store.brokers()).items)

    assert asyncio.run(asyncio.wait_for(registered(), DEADLINE_S)) == [1, 2]


# --- refused at start, in one line -----------------------------------------------------------


def refusal_cases(pki: Pki, other_pki: Pki) -> dict[str, tuple[list[str], str]]:
    """Case -> (--set settings, what the line says). The endpoints are https:// except
    for the plaintext broker."""
    ours, theirs = pki.client("broker"), other_pki.client("broker")
    return {
        "no client certificate": (
            [f"etcd.ssl.cafile={pki.ca_cert}"],
            "etcd refused this client's certificate",
        ),
        "a certificate of another CA": (
            [
                f"etcd.ssl.cafile={pki.ca_cert}",
                f"etcd.ssl.certfile={theirs.cert}",
                f"etcd.ssl.keyfile={theirs.key}",
            ],
            "etcd refused this client's certificate",
        ),
        "etcd's CA not trusted": (
            [
                f"etcd.ssl.cafile={other_pki.ca_cert}",
                f"etcd.ssl.certfile={ours.cert}",
                f"etcd.ssl.keyfile={ours.key}",
            ],
            "etcd's certificate is not signed by a CA of etcd.ssl.cafile",
        ),
        "plaintext": ([], "etcd may require TLS (etcd.ssl.enable, or https:// endpoints)"),
    }


@pytest.mark.parametrize(
    "case",
    ["no client certificate", "a certificate of another CA", "etcd's CA not trusted", "plaintext"],
)
def test_a_broker_etcd_does_not_accept_is_refused_in_one_line(
    case: str, cluster: LocalCluster, pki: Pki, other_pki: Pki, tmp_path: Path
) -> None:
    settings, says = refusal_cases(pki, other_pki)[case]
    plain = ",".join(f"{host}:{port}" for host, port in cluster.etcd_endpoints())
    endpoints = plain if case == "plaintext" else https_endpoints(cluster)
    code, err = finished(start_serve(tmp_path / "b9", endpoints, *settings))
    assert code == 2, err  # a CliError, as every refused serve
    assert "Traceback" not in err
    line = err.strip().splitlines()[-1]
    assert line.startswith("odradek: cannot join cluster 'odradek' through etcd at "), line
    assert says in line, line
    assert 9 not in registered_brokers(
        cluster.etcd_endpoints(), cluster.cluster_name, tls=cluster.etcd_client_tls()
    )


def test_cluster_status_without_a_client_certificate_fails_in_one_line(
    cluster: LocalCluster, pki: Pki
) -> None:
    code, out, err = cli(
        "cluster", "status", "--etcd", https_endpoints(cluster), "--etcd-cafile", str(pki.ca_cert)
    )
    assert code == 1 and out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert "etcd refused this client's certificate" in err


# --- settings and files, checked before anything connects ---------------------------------


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"etcd.ssl.enable": "true"}, "etcd.ssl.enable needs etcd.endpoints"),
        ({"etcd.ssl.cafile": "ca.pem"}, "etcd.ssl.cafile needs etcd.endpoints"),
        (
            {"etcd.endpoints": "https://h:2379", "etcd.ssl.keyfile": "k.pem"},
            "etcd.ssl.keyfile needs etcd.ssl.certfile",
        ),
        (
            {"etcd.endpoints": "https://h:2379", "etcd.ssl.certfile": "c.pem"},
            "etcd.ssl.certfile needs etcd.ssl.keyfile",
        ),
        (
            {"etcd.endpoints": "h:2379", "etcd.ssl.cafile": "ca.pem"},
            "etcd.ssl.cafile is set but TLS to etcd is off",
        ),
        (
            {"etcd.endpoints": "http://h:2379", "etcd.ssl.enable": "true"},
            "etcd.ssl.enable=true but etcd.endpoints are http://",
        ),
        (
            {"etcd.endpoints": "https://h:2379", "etcd.ssl.enable": "false"},
            "etcd.ssl.enable=false but etcd.endpoints are https://",
        ),
        (
            {"etcd.endpoints": "https://h:2379,http://g:2379"},
            "etcd.endpoints mixes http:// and https://",
        ),
        ({"etcd.endpoints": "https://h"}, "'https://h' is not HOST:PORT"),
    ],
)
def test_etcd_tls_settings_are_checked_together(settings: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        BrokerConfig(settings)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_tls_is_on_with_https_endpoints_or_etcd_ssl_enable(pki: Pki) -> None:
    assert EtcdTls.from_config(BrokerConfig({"etcd.endpoints": "h:2379"})) is None
    by_scheme = EtcdTls.from_config(BrokerConfig({"etcd.endpoints": "https://h:2379"}))
    assert by_scheme == EtcdTls(None, None, None)  # the system's roots, no certificate
    enabled = EtcdTls.from_config(
        BrokerConfig(
            {
                "etcd.endpoints": "h:2379",
                "etcd.ssl.enable": "true",
                "etcd.ssl.cafile": str(pki.ca_cert),
            }
        )
    )
    assert enabled is not None and enabled.root_certificates == pki.ca_cert.read_bytes()


def test_tls_files_are_read_and_checked_at_start(tmp_path: Path, pki: Pki, other_pki: Pki) -> None:
    ours, theirs = pki.client("broker"), other_pki.client("broker")
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    encrypted = tmp_path / "encrypted.key"
    key = serialization.load_pem_private_key(ours.key.read_bytes(), None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    cases = [
        ({"etcd.ssl.cafile": str(tmp_path / "nope.pem")}, "No such file or directory"),
        ({"etcd.ssl.cafile": str(garbage)}, "no PEM CA certificate in it"),
        (
            {"etcd.ssl.certfile": str(ours.cert), "etcd.ssl.keyfile": str(theirs.key)},
            "not a PEM certificate and its unencrypted private key",
        ),
        (
            {"etcd.ssl.certfile": str(garbage), "etcd.ssl.keyfile": str(ours.key)},
            "not a PEM certificate and its unencrypted private key",
        ),
        (  # refused, not a pass phrase prompt
            {"etcd.ssl.certfile": str(ours.cert), "etcd.ssl.keyfile": str(encrypted)},
            "not a PEM certificate and its unencrypted private key",
        ),
    ]
    for files, says in cases:
        config = BrokerConfig({"etcd.endpoints": "https://127.0.0.1:2379", **files})
        with pytest.raises(ConfigError) as refused:
            EtcdTls.from_config(config)
        assert says in str(refused.value), files
        assert next(iter(files)) in str(refused.value)

    # and `odradek serve` says it in one line before it reaches for etcd
    code, err = finished(
        start_serve(
            tmp_path / "b9", "https://127.0.0.1:1", f"etcd.ssl.cafile={tmp_path / 'nope.pem'}"
        )
    )
    assert code == 2
    assert err.strip().splitlines()[-1] == (
        f"odradek: etcd.ssl.cafile {tmp_path / 'nope.pem'}: No such file or directory"
    )


def test_cluster_status_tls_options_are_checked(tmp_path: Path) -> None:
    code, _, err = cli("cluster", "status", "--etcd", "127.0.0.1:1", "--etcd-keyfile", "k.pem")
    assert (code, err.strip()) == (2, "odradek: --etcd-keyfile needs --etcd-certfile "
                                   "(a client certificate and its key)")  # fmt: skip
    code, _, err = cli("cluster", "status", "--data-dir", str(tmp_path), "--etcd-cafile", "c")
    assert (code, err.strip()) == (2, "odradek: --etcd-cafile goes with --etcd")


# --- TLS that authenticates etcd only ----------------------------------------------------------


def test_server_authentication_only_needs_just_the_ca(tmp_path: Path, pki: Pki) -> None:
    server = EtcdServer(
        tmp_path / "etcd",
        tls=EtcdServerTls(pki.server_cert, pki.server_key, pki.ca_cert, client_cert_auth=False),
        start_timeout_s=30.0,
    )
    server.start()
    try:
        assert server.client_url.startswith("https://")
        config = BrokerConfig(
            {
                "etcd.endpoints": f"https://{server.host}:{server.client_port}",
                "etcd.ssl.cafile": str(pki.ca_cert),
            }
        )
        tls = EtcdTls.from_config(config)
        assert tls is not None and tls.certificate_chain is None

        async def epoch_and_listing() -> tuple[int, bool]:
            async with EtcdMetadataStore(*server.endpoint, cluster_name="c", tls=tls) as store:
                return await store.controller_epoch(), store.every_member_listed

        assert asyncio.run(asyncio.wait_for(epoch_and_listing(), DEADLINE_S)) == (0, True)
        code, out, err = cli(
            "cluster", "status", "--etcd", f"https://{server.host}:{server.client_port}",
            "--etcd-cafile", str(pki.ca_cert), "--cluster-name", "c", "-o", "json",
        )  # fmt: skip
        assert code == 0, err
        assert json.loads(out)["brokers"] == []
    finally:
        server.kill()
