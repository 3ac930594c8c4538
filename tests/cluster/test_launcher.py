"""`odradek.devcluster.launcher`: a loopback cluster of detached processes, restarted
piecewise on the ports it recorded, signalled only when a pid is really its own.

One two-broker cluster is shared by the module (its tests leave it running, except
the last, which stops it); the failure cases use clusters that never get as far as
running brokers, or a single broker that cannot start. Every fixture stops what it
started, also when a test fails.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.devcluster.launcher import (
    ETCD,
    ClusterError,
    ClusterState,
    LocalCluster,
    NotServingError,
    answers_api_versions,
    process_is_ours,
    registered_brokers,
)

START_TIMEOUT_S = 60.0
# a killed broker's registration lingers until its lease ends; its restart waits for that
QUICK_SESSIONS = {"broker.session.timeout.ms": "4000"}
GONE_DEADLINE_S = 15.0


def stop_quietly(cluster: LocalCluster) -> None:
    """Teardown: stop whatever the state file says runs, even after a failed test."""
    LocalCluster.open(cluster.layout.root).stop_all(timeout_s=5.0)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = LocalCluster.prepare(
        tmp_path_factory.mktemp("cluster") / "dev", brokers=2, settings=QUICK_SESSIONS
    )
    try:
        local.start_all(timeout_s=START_TIMEOUT_S)
        yield local
    finally:
        stop_quietly(local)


@pytest.fixture
def fresh(tmp_path: Path) -> Iterator[list[LocalCluster]]:
    """Clusters a test prepares here get stopped at teardown."""
    made: list[LocalCluster] = []
    yield made
    for local in made:
        if local.layout.state_file.exists():
            stop_quietly(local)


def pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still has a pid until its parent reaps it; it runs nothing
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def test_start_all_serves_each_process_on_the_port_it_records(cluster: LocalCluster) -> None:
    state = json.loads(cluster.layout.state_file.read_text())
    assert state["etcd"]["port"] == cluster.etcd_endpoint()[1]
    assert [b["id"] for b in state["brokers"]] == [1, 2]
    for broker in state["brokers"]:
        assert cluster.broker_address(broker["id"]) == f"127.0.0.1:{broker['port']}"
        assert answers_api_versions("127.0.0.1", broker["port"])
        assert process_is_ours(broker["pid"], cluster.layout.broker_dir(broker["id"]))
        assert cluster.layout.log_path(broker["id"]).stat().st_size > 0
    assert cluster.is_serving(ETCD) and process_is_ours(
        state["etcd"]["pid"], cluster.layout.etcd_dir
    )
    assert cluster.bootstrap_servers() == ",".join(cluster.broker_address(b) for b in (1, 2))
    # detached: each process leads a session of its own, not ours
    for pid in [state["etcd"]["pid"], *(b["pid"] for b in state["brokers"])]:
        assert os.getsid(pid) == pid != os.getsid(0)


def test_a_two_broker_cluster_serves_consumer_groups_and_transactions(
    cluster: LocalCluster,
) -> None:
    """Kafka's internal-topic defaults (3 replicas, min ISR 2) cannot be met by two
    brokers; `cluster up` lowers them unless told otherwise, so a committing group and
    a transaction work out of the box."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    bootstrap = cluster.bootstrap_servers()
    topic = f"dev-groups-{os.getpid()}"
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": topic, "message.timeout.ms": 30000}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, str(i).encode())
    producer.commit_transaction(30)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < 5 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        assert sorted(values) == [str(i).encode() for i in range(5)]
        consumer.commit(asynchronous=False)
        [committed] = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        assert committed.offset == 5  # after the fifth record (the marker is not consumed)
    finally:
        consumer.close()
    command = cluster.broker_command(1)
    assert "offsets.topic.replication.factor=2" in command
    assert "transaction.state.log.min.isr=1" in command


def test_internal_topic_defaults_yield_to_set_and_to_three_brokers(tmp_path: Path) -> None:
    mine = LocalCluster.prepare(
        tmp_path / "a", brokers=1, settings={"offsets.topic.replication.factor": "1"}
    )
    command = mine.broker_command(1)
    assert command.count("offsets.topic.replication.factor=1") == 1
    assert "transaction.state.log.replication.factor=1" in command
    three = LocalCluster.prepare(tmp_path / "b", brokers=3).broker_command(3)
    assert not [arg for arg in three if "replication.factor" in arg or "min.isr" in arg]


def test_start_all_again_starts_only_the_killed_broker_on_its_old_port(
    cluster: LocalCluster,
) -> None:
    before = {m: cluster.info(m) for m in cluster.members()}
    killed_pid = before[1].pid
    cluster.kill(1)
    assert not pid_exists(killed_pid)
    assert not answers_api_versions("127.0.0.1", before[1].port, timeout_s=1.0)
    after = {p.member: p for p in LocalCluster.open(cluster.layout.root).start_all(START_TIMEOUT_S)}
    assert after[1].started and after[1].pid != killed_pid and after[1].port == before[1].port
    # serving means registered by the new process, not by its killed predecessor, whose
    # registration holds until its lease ends
    registered = registered_brokers(cluster.etcd_endpoints(), cluster.cluster_name)
    assert registered == {1: after[1].pid, 2: before[2].pid}
    for member in (ETCD, 2):
        assert not after[member].started and after[member].pid == before[member].pid
    cluster.state = LocalCluster.open(cluster.layout.root).state  # what the other object wrote
    assert answers_api_versions("127.0.0.1", before[1].port)


def test_a_paused_broker_stops_answering_until_resumed(cluster: LocalCluster) -> None:
    host, port = cluster.broker_address(2).split(":")
    with cluster.paused(2):
        assert cluster.is_running(2)
        assert not answers_api_versions(host, int(port), timeout_s=1.0)
    assert answers_api_versions(host, int(port), timeout_s=10.0)


def test_restart_gives_a_new_process_on_the_same_port(cluster: LocalCluster) -> None:
    before = cluster.info(2)
    after = cluster.restart(2, timeout_s=START_TIMEOUT_S)
    assert after.started and after.pid != before.pid and after.port == before.port
    assert not pid_exists(before.pid)
    assert cluster.is_serving(2)


def test_settings_cannot_change_while_the_cluster_runs(cluster: LocalCluster) -> None:
    with pytest.raises(ClusterError, match="run 'odradek cluster down' first"):
        LocalCluster.prepare(cluster.layout.root, rack_count=2)
    with pytest.raises(ClusterError, match="cannot shrink to 1"):
        LocalCluster.prepare(cluster.layout.root, brokers=1)


def test_start_times_out_naming_the_process_that_does_not_serve(cluster: LocalCluster) -> None:
    with cluster.paused(2), pytest.raises(NotServingError) as failure:
        cluster.start_all(timeout_s=2.0)
    pid, address = cluster.info(2).pid, cluster.broker_address(2)
    assert str(failure.value).startswith(
        f"broker 2 (pid {pid}) not serving on {address} by the deadline (log: "
    )
    assert "listening on" in failure.value.log_tail()


def test_stop_all_stops_brokers_then_etcd_and_leaves_no_process(cluster: LocalCluster) -> None:
    pids = {m: cluster.info(m).pid for m in cluster.members()}
    cluster.pause(1)  # a frozen broker still ends on SIGTERM
    stopped = cluster.stop_all(timeout_s=10.0)
    assert [s.process.member for s in stopped] == [1, 2, ETCD]
    assert not any(s.killed for s in stopped)
    assert [s.process.pid for s in stopped] == [pids[1], pids[2], pids[ETCD]]
    assert not any(pid_exists(pid) for pid in pids.values())
    state = json.loads(cluster.layout.state_file.read_text())
    assert state["etcd"]["pid"] is None and all(b["pid"] is None for b in state["brokers"])
    assert LocalCluster.open(cluster.layout.root).stop_all() == []


# -- pids, state and start failures (no shared cluster) ---------------------------


def test_a_recorded_pid_of_another_process_is_neither_trusted_nor_signalled(
    tmp_path: Path,
) -> None:
    local = LocalCluster.prepare(tmp_path / "dev", brokers=1)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        local.state.brokers[1].pid = stranger.pid
        local.state.etcd.pid = os.getpid()
        assert not local.is_running(1) and not local.is_running(ETCD)
        local.kill(1)
        assert local.stop_all() == []
        assert stranger.poll() is None  # untouched
    finally:
        stranger.kill()
        stranger.wait()
    assert not process_is_ours(None, tmp_path) and not process_is_ours(stranger.pid, tmp_path)


def test_prepare_rejects_bad_arguments_and_foreign_dirs(tmp_path: Path) -> None:
    for brokers in (0, 17):
        with pytest.raises(ClusterError, match=r"--brokers must be 1\.\.16"):
            LocalCluster.prepare(tmp_path / "a", brokers=brokers)
    with pytest.raises(ClusterError, match="--rack-count must be at least 1"):
        LocalCluster.prepare(tmp_path / "a", rack_count=0)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "file").write_text("x")
    with pytest.raises(ClusterError, match=r"not empty and holds no cluster\.json"):
        LocalCluster.prepare(tmp_path / "other")
    with pytest.raises(ClusterError, match="not a cluster data dir"):
        LocalCluster.open(tmp_path / "other")
    assert not (tmp_path / "a").exists()  # nothing written for a rejected call
    local = LocalCluster.prepare(tmp_path / "a", brokers=2, rack_count=2)
    assert [local.state.brokers[i].rack for i in (1, 2)] == ["r0", "r1"]
    grown = LocalCluster.prepare(tmp_path / "a", brokers=3)
    assert grown.state.brokers[3].rack == "r0"
    assert [grown.state.brokers[i].port for i in (1, 2)] == [
        local.state.brokers[i].port for i in (1, 2)
    ]
    assert (
        len(
            {
                grown.state.etcd.port,
                grown.state.etcd.peer_port,
                *(b.port for b in grown.state.brokers.values()),
            }
        )
        == 5
    )
    local.layout.state_file.write_text('{"version": 1, "etcd": {}}')
    with pytest.raises(ClusterError, match="is not a cluster state file"):
        LocalCluster.open(tmp_path / "a")


def test_start_fails_in_one_line_when_a_port_is_taken_or_etcd_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = LocalCluster.prepare(tmp_path / "dev", brokers=1)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", local.etcd_endpoint()[1]))
        squatter.listen()
        with pytest.raises(
            ClusterError, match=f"port {local.etcd_endpoint()[1]} of etcd is in use"
        ):
            local.start_all()
    monkeypatch.setenv("ODRADEK_ETCD_BINARY", str(tmp_path / "no-etcd"))
    with pytest.raises(ClusterError, match="no-etcd is missing or not executable"):
        local.start_all()
    assert local.running_members() == []


def test_a_broker_that_cannot_start_is_named_and_the_rest_keeps_running(
    tmp_path: Path, fresh: list[LocalCluster]
) -> None:
    local = LocalCluster.prepare(tmp_path / "dev", brokers=1, settings={"no.such.setting": "1"})
    fresh.append(local)
    with pytest.raises(NotServingError, match="broker 1 exited during start") as failure:
        local.start_all(timeout_s=START_TIMEOUT_S)
    assert "no.such.setting" in failure.value.log_tail()
    assert failure.value.log_path == local.layout.log_path(1)
    assert local.is_serving(ETCD)  # left running for 'cluster down'
    assert [s.process.member for s in local.stop_all()] == [ETCD]


def test_stop_all_stops_etcd_even_when_the_state_cannot_be_written(
    tmp_path: Path, fresh: list[LocalCluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk fails recording the stopped broker; etcd is stopped all the same."""
    local = LocalCluster.prepare(tmp_path / "dev", brokers=1)
    fresh.append(local)
    local.start_all(timeout_s=START_TIMEOUT_S)
    pids = [local.info(m).pid for m in local.members()]

    def disk_full(self: object, layout: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ClusterState, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        local.stop_all(timeout_s=10.0)
    assert not any(pid_exists(pid) for pid in pids)


def test_up_removes_a_new_cluster_that_does_not_come_up_and_keeps_an_existing_one(
    tmp_path: Path, fresh: list[LocalCluster]
) -> None:
    refused = {"no.such.setting": "1"}  # every broker exits at start
    with pytest.raises(NotServingError, match="broker 1 exited during start") as failure:
        LocalCluster.up(tmp_path / "new", brokers=1, settings=refused, timeout_s=START_TIMEOUT_S)
    assert failure.value.removed and not (tmp_path / "new").exists()
    assert "no.such.setting" in failure.value.log_tail()  # kept from before the removal

    (tmp_path / "empty").mkdir()  # a directory given empty stays, emptied again
    with pytest.raises(NotServingError):
        LocalCluster.up(tmp_path / "empty", brokers=1, settings=refused)
    assert list((tmp_path / "empty").iterdir()) == []

    existing = LocalCluster.prepare(tmp_path / "old", brokers=1, settings=refused)
    fresh.append(existing)
    with pytest.raises(NotServingError) as kept:
        LocalCluster.up(tmp_path / "old", timeout_s=START_TIMEOUT_S)
    assert not kept.value.removed and existing.layout.state_file.exists()
    assert LocalCluster.open(tmp_path / "old").is_serving(ETCD)  # left for 'cluster down'


def test_extra_listeners_get_ports_of_their_own_kept_across_opens(tmp_path: Path) -> None:
    local = LocalCluster.prepare(tmp_path / "x", brokers=2, extra_listeners=("replication",))
    ports = {b: local.state.brokers[b].listener_ports["REPLICATION"] for b in (1, 2)}
    every_port = [local.state.etcd.port, local.state.etcd.peer_port]
    for b in (1, 2):
        every_port += [local.state.brokers[b].port, ports[b]]
    assert len(set(every_port)) == 6
    command = local.broker_command(1)
    assert "--listen" not in command
    assert (
        f"listeners=PLAINTEXT://127.0.0.1:{local.state.brokers[1].port},"
        f"REPLICATION://127.0.0.1:{ports[1]}"
    ) in command
    grown = LocalCluster.prepare(tmp_path / "x", brokers=3)
    assert {b: grown.state.brokers[b].listener_ports["REPLICATION"] for b in (1, 2)} == ports
    assert set(grown.state.brokers[3].listener_ports) == {"REPLICATION"}
    assert grown.listener_address(3, "replication").startswith("127.0.0.1:")
    with pytest.raises(ClusterError, match="fixed when it is created"):
        LocalCluster.prepare(tmp_path / "x", extra_listeners=("INTERNAL",))
    with pytest.raises(ClusterError, match="other than PLAINTEXT"):
        LocalCluster.prepare(tmp_path / "y", extra_listeners=("PLAINTEXT",))
