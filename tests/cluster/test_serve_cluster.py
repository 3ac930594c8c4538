"""`odradek serve --etcd`: what a broker that cannot join its cluster says (one line, exit 2,
nothing left half open), and the settings cluster mode checks."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig, ConfigError
from odradek.devcluster.etcd_server import EtcdServer, pick_free_port

TIMEOUT_S = 60


def serve(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "odradek",
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            "127.0.0.1:0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_an_unreachable_etcd_is_one_line(tmp_path: Path) -> None:
    port = pick_free_port("127.0.0.1")  # nothing listens there
    result = serve("--etcd", f"127.0.0.1:{port}", "--node-id", "1", data_dir=tmp_path / "b")
    assert result.returncode == 2  # a CliError, as every refused serve
    line = last_line(result.stderr)
    assert line.startswith(
        f"odradek: cannot join cluster 'odradek' through etcd at 127.0.0.1:{port}"
    )
    assert "Traceback" not in result.stderr


def test_a_broker_id_held_by_a_live_broker_is_refused(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    host, port = etcd_server.endpoint
    listen = pick_free_port("127.0.0.1")
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "odradek",
            "serve",
            "--data-dir",
            str(tmp_path / "first"),
            "--listen",
            f"127.0.0.1:{listen}",
            "--etcd",
            f"{host}:{port}",
            "--node-id",
            "7",
            "--set",
            "broker.session.timeout.ms=2000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline_probe(listen)
        result = serve(
            "--etcd",
            f"{host}:{port}",
            "--node-id",
            "7",
            "--set",
            "broker.session.timeout.ms=2000",
            data_dir=tmp_path / "second",
        )
        assert result.returncode == 2  # a CliError, as every refused serve
        assert last_line(result.stderr).startswith("odradek: broker id 7 is taken")
    finally:
        first.kill()
        first.wait(TIMEOUT_S)


def test_a_broker_joins_through_whichever_etcd_endpoint_answers(
    tmp_path: Path, etcd_server: EtcdServer
) -> None:
    from odradek.devcluster.launcher import registered_brokers

    host, port = etcd_server.endpoint
    down = pick_free_port("127.0.0.1")  # nothing listens there
    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        broker = subprocess.Popen(
            [
                sys.executable, "-m", "odradek", "serve", "--data-dir", str(tmp_path / "b"),
                "--listen", f"127.0.0.1:{pick_free_port('127.0.0.1')}",
                "--etcd", f"127.0.0.1:{down},{host}:{port}", "--node-id", "3",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT_S
        joined = "joined cluster 'odradek'"  # logged once registered and loaded
        while broker.poll() is None and time.monotonic() < deadline:
            if joined in log.read_text():
                break
            time.sleep(0.2)
        text = log.read_text()
        assert registered_brokers([(host, port)], "odradek") == {3: broker.pid}, text
        # one gRPC channel over every endpoint: the one refusing is passed over
        assert f"joined cluster 'odradek' (etcd 127.0.0.1:{down},{host}:{port}," in text
    finally:
        broker.kill()
        broker.wait(TIMEOUT_S)


def deadline_probe(port: int) -> None:
    import time

    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            time.sleep(1.0)  # listening comes before joining: give it the join too
            return
        except OSError:
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def test_cluster_settings_are_checked() -> None:
    for bad in ("etcd.endpoints=nohost", "etcd.endpoints=h:0", "etcd.cluster.name=a/b"):
        name, _, value = bad.partition("=")
        try:
            BrokerConfig({name: value})
        except ConfigError as exc:
            assert name in str(exc)
        else:
            raise AssertionError(f"{bad} was accepted")
    # One node holds one replica: a larger default needs a cluster.
    try:
        BrokerConfig({"default.replication.factor": "3"})
    except ConfigError as exc:
        assert "needs cluster mode" in str(exc)
    else:
        raise AssertionError("default.replication.factor=3 accepted without etcd")
    assert BrokerConfig(
        {"default.replication.factor": "3", "etcd.endpoints": "127.0.0.1:2379"}
    ).cluster_mode


def test_configs_taken_from_the_cluster_are_checked_as_stored_values(tmp_path: Path) -> None:
    """What etcd holds for a topic is applied if valid; a value that fails today's checks
    (written by hand, or by another version) is reported and its default used."""
    from odradek.broker.topics import TopicManager

    topics = TopicManager(tmp_path / "data", BrokerConfig())
    try:
        topics.create("tuned", 1)
        topics.take_configs("tuned", {"retention.ms": "1000"})
        assert topics.get("tuned").partitions[0].config.retention_ms == 1000  # type: ignore[union-attr]
        topics.take_configs("tuned", {"retention.ms": "soon", "cleanup.policy": "compact"})
        tuned = topics.get("tuned")
        assert tuned is not None
        assert tuned.configs == {"cleanup.policy": "compact"}
        assert tuned.partitions[0].config.retention_ms == 604800000  # the default again
        topics.take_configs("gone", {"retention.ms": "1000"})  # not here: nothing to do
    finally:
        topics.close()


def test_cluster_mode_without_the_cluster_extra_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aetcd is the optional `cluster` extra: without it, a clear setting error."""
    from odradek.wiring import new_broker

    monkeypatch.setitem(sys.modules, "aetcd", None)  # as if not installed
    for module in ("odradek.cluster.node", "odradek.cluster.metadata"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    config = BrokerConfig({"etcd.endpoints": "127.0.0.1:2379"})
    with pytest.raises(ConfigError, match=r"pip install 'odradek\[cluster\]'"):
        new_broker(tmp_path / "data", config, port=0)
