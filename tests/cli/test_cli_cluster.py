"""`odradek cluster up|down|status`.

``up`` and ``down`` run as separate processes (the cluster they start must outlive
the command), against one two-broker cluster shared by the module; ``status`` reads
metadata written straight into an etcd of its own, so every flag it shows is
checked against known state. Bad arguments run in-process: one line, exit 2.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from odradek.cli.main import main
from odradek.cluster.etcd_server import EtcdServer
from odradek.cluster.launcher import LocalCluster, answers_api_versions
from odradek.cluster.metadata import EtcdMetadataStore
from odradek.cluster.model import BrokerInfo, PartitionState, TopicAssignment

from .conftest import Outcome
from .conftest import run_cli as run_process

UP_TIMEOUT_S = 120.0  # the command's own deadline is 60 s; this bounds the subprocess
LINE_ETCD = re.compile(r"^etcd 127\.0\.0\.1:(\d+) pid (\d+)$")
LINE_BROKER = re.compile(r"^broker (\d+) 127\.0\.0\.1:(\d+) pid (\d+)$")


def run_cli(*argv: str) -> Outcome:
    """``odradek ARGV`` as a process of its own (the processes it starts outlive it)."""
    return run_process(*argv, timeout=UP_TIMEOUT_S)


def in_process(*argv: str) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse errors
            code = int(exc.code or 0)
    return Outcome(code, out.getvalue(), err.getvalue())


def parse_lines(outcome: Outcome) -> dict[str, tuple[int, int]]:
    """{"etcd" | "broker N": (port, pid)}, checking every line's exact format."""
    found: dict[str, tuple[int, int]] = {}
    for line in outcome.lines:
        if match := LINE_ETCD.match(line):
            found["etcd"] = (int(match[1]), int(match[2]))
        elif match := LINE_BROKER.match(line):
            found[f"broker {match[1]}"] = (int(match[2]), int(match[3]))
        else:
            raise AssertionError(f"unexpected line {line!r} in {outcome.out!r}")
    return found


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture(scope="module")
def cluster_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    data_dir = tmp_path_factory.mktemp("cli-cluster") / "dev"
    try:
        yield data_dir
    finally:
        if (data_dir / "cluster.json").exists():
            LocalCluster.open(data_dir).stop_all(timeout_s=5.0)


@pytest.fixture(scope="module")
def first_up(cluster_dir: Path) -> Outcome:
    args = ("cluster", "up", "--brokers", "2", "--data-dir", str(cluster_dir), "--format", "json")
    # a killed broker's registration lingers until its lease ends; its restart waits for that
    args += ("--set", "broker.session.timeout.ms=4000")
    return in_process(*args)  # later commands, each a process, find what this one started


def test_up_prints_a_json_list_of_serving_processes(first_up: Outcome) -> None:
    assert first_up.code == 0, first_up.err
    processes = first_up.json()
    assert [set(p) for p in processes] == [{"kind", "id", "host", "port", "pid"}] * 3
    assert [(p["kind"], p["id"], p["host"]) for p in processes] == [
        ("etcd", None, "127.0.0.1"),
        ("broker", 1, "127.0.0.1"),
        ("broker", 2, "127.0.0.1"),
    ]
    for broker in processes[1:]:
        assert answers_api_versions(broker["host"], broker["port"])
    assert "started 3 of 3 processes" in first_up.err


def test_up_again_starts_only_the_killed_broker_on_its_port(
    first_up: Outcome, cluster_dir: Path
) -> None:
    before = {f"{p['kind']} {p['id']}".removesuffix(" None"): p for p in first_up.json()}
    again = run_cli("cluster", "up", "--data-dir", str(cluster_dir))
    assert again.code == 0, again.err
    running = parse_lines(again)
    assert running == {name: (p["port"], p["pid"]) for name, p in before.items()}
    assert "started 0 of 3 processes (3 were running)" in again.err

    killed_port, killed_pid = running["broker 2"]
    os.kill(killed_pid, signal.SIGKILL)
    deadline = time.monotonic() + 15.0
    while not gone(killed_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    restarted = run_cli("cluster", "up", "--data-dir", str(cluster_dir))
    assert restarted.code == 0, restarted.err
    after = parse_lines(restarted)
    assert after["broker 2"][0] == killed_port and after["broker 2"][1] != killed_pid
    assert after["etcd"] == running["etcd"] and after["broker 1"] == running["broker 1"]
    assert "started 1 of 3 processes (2 were running)" in restarted.err
    assert answers_api_versions("127.0.0.1", killed_port)


def test_up_refuses_to_shrink_or_change_settings_of_a_running_cluster(
    first_up: Outcome, cluster_dir: Path
) -> None:
    shrink = in_process("cluster", "up", "--brokers", "1", "--data-dir", str(cluster_dir))
    assert shrink.code == 2 and shrink.out == ""
    assert shrink.err == (
        f"odradek: the cluster in {cluster_dir} has 2 brokers; it cannot shrink to 1 "
        "(run 'odradek cluster down' and use a new data dir)\n"
    )
    reset = in_process("cluster", "up", "--data-dir", str(cluster_dir), "--set", "num.partitions=3")
    assert reset.code == 2 and len(reset.err.splitlines()) == 1
    assert "--set would change how the running cluster" in reset.err


def test_status_of_the_running_cluster_shows_its_brokers_alive_and_a_controller(
    first_up: Outcome, cluster_dir: Path
) -> None:
    up = run_cli("cluster", "up", "--data-dir", str(cluster_dir))  # returns once registered
    assert up.code == 0, up.err
    ports = {name: port for name, (port, _) in parse_lines(up).items()}
    deadline = time.monotonic() + 30.0  # the election follows registration
    while True:
        status = in_process("cluster", "status", "--data-dir", str(cluster_dir), "-o", "json")
        assert status.code == 0, status.err
        if status.json()["controller"] is not None or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    shown = status.json()
    assert shown["etcd"] == f"127.0.0.1:{ports['etcd']}" and shown["cluster"] == "odradek"
    assert shown["brokers"] == [
        {"id": i, "host": "127.0.0.1", "port": ports[f"broker {i}"], "rack": None, "alive": True}
        for i in (1, 2)
    ]
    assert shown["controller"]["broker_id"] in (1, 2) and shown["controller"]["epoch"] >= 1


def test_down_stops_every_process_and_then_has_nothing_to_stop(
    first_up: Outcome, cluster_dir: Path
) -> None:
    up = run_cli("cluster", "up", "--data-dir", str(cluster_dir))
    running = parse_lines(up)
    down = run_cli("cluster", "down", "--data-dir", str(cluster_dir))
    assert down.code == 0, down.err
    assert [line.rsplit(" ", 1)[1] for line in down.lines] == ["stopped"] * 3
    stopped = parse_lines(Outcome(0, "\n".join(line.rsplit(" ", 1)[0] for line in down.lines), ""))
    assert stopped == running
    assert list(stopped) == ["broker 1", "broker 2", "etcd"]  # brokers first
    assert all(gone(pid) for _, pid in running.values())
    again = run_cli("cluster", "down", "--data-dir", str(cluster_dir))
    assert (again.code, again.out) == (0, f"nothing running in {cluster_dir}\n")


# -- status ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(tmp_path_factory.mktemp("status-etcd"), start_timeout_s=30.0)
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture(scope="module")
def known_cluster(etcd: EtcdServer) -> str:
    """Brokers 1 and 2 registered (3 is not), 1 the controller, and topic orders with
    partition 0 fully replicated, 1 under-replicated, 2 led by the dead broker 3."""
    name = f"status-{uuid.uuid4().hex[:8]}"

    async def write() -> None:
        async with EtcdMetadataStore(*etcd.endpoint, cluster_name=name) as store:
            lease = await store.grant_lease(120)  # outlives the test; not kept alive
            for broker_id, rack in ((1, "r0"), (2, "r1")):
                await store.register_broker(
                    BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id, rack), lease
                )
            await store.try_become_controller(1, lease)
            replicas = {0: (1, 2), 1: (2, 1, 3), 2: (3, 1)}
            states = {
                0: PartitionState(1, 0, (1, 2)),
                1: PartitionState(2, 3, (2, 1)),
                2: PartitionState(3, 1, (3,)),
            }
            await store.create_topic(
                TopicAssignment("orders", uuid.uuid4(), replicas), initial_states=states
            )

    asyncio.run(asyncio.wait_for(write(), 30.0))
    return name


def test_status_json_shows_brokers_controller_and_flagged_partitions(
    etcd: EtcdServer, known_cluster: str
) -> None:
    address = f"{etcd.host}:{etcd.client_port}"
    outcome = in_process(
        "cluster", "status", "--etcd", address, "--cluster-name", known_cluster, "-o", "json"
    )
    assert outcome.code == 0, outcome.err
    status = json.loads(outcome.out)
    assert status["cluster"] == known_cluster and status["etcd"] == address
    assert status["controller"] == {"broker_id": 1, "epoch": 1}
    assert status["brokers"] == [
        {"id": 1, "host": "127.0.0.1", "port": 9001, "rack": "r0", "alive": True},
        {"id": 2, "host": "127.0.0.1", "port": 9002, "rack": "r1", "alive": True},
        {"id": 3, "host": None, "port": None, "rack": None, "alive": False},
    ]
    flags = [
        (p["partition"], p["leader"], p["replicas"], p["isr"], p["under_replicated"], p["offline"])
        for p in status["partitions"]
    ]
    assert flags == [
        (0, 1, [1, 2], [1, 2], False, False),
        (1, 2, [2, 1, 3], [2, 1], True, False),
        (2, 3, [3, 1], [3], True, True),
    ]


def test_status_table_flags_partitions(etcd: EtcdServer, known_cluster: str) -> None:
    address = f"{etcd.host}:{etcd.client_port}"
    outcome = in_process("cluster", "status", "--etcd", address, "--cluster-name", known_cluster)
    assert outcome.code == 0, outcome.err
    rows = [line.split() for line in outcome.lines]
    assert ["Controller", "broker", "1,", "epoch", "1"] in rows
    assert ["1", "127.0.0.1:9001", "r0", "yes"] in rows
    assert ["3", "-", "-", "no"] in rows
    assert ["orders", "0", "1", "0", "1,2", "1,2", "ok"] in rows
    assert ["orders", "1", "2", "3", "2,1,3", "2,1", "under-replicated"] in rows
    assert ["orders", "2", "3", "1", "3,1", "3", "offline,", "under-replicated"] in rows
    assert outcome.lines[-1] == "3 partitions, 2 under-replicated, 1 offline"


def test_status_of_an_unreachable_etcd_is_one_line(tmp_path: Path) -> None:
    port = LocalCluster.prepare(tmp_path / "dev", brokers=1).etcd_endpoint()[1]  # not started
    outcome = in_process("cluster", "status", "--data-dir", str(tmp_path / "dev"), "--timeout", "5")
    assert outcome.code == 1 and outcome.out == ""
    assert (
        outcome.err == f"odradek: cannot read the cluster from etcd at 127.0.0.1:{port}: "
        "connection refused\n"
    )


# -- bad arguments -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["up", "--brokers", "0", "--data-dir", "D"], "argument --brokers: expected 1..16, got 0"),
        (
            ["up", "--brokers", "17", "--data-dir", "D"],
            "argument --brokers: expected 1..16, got 17",
        ),
        (["up", "--brokers", "x", "--data-dir", "D"], "expected a whole number, got 'x'"),
        (["up", "--rack-count", "0", "--data-dir", "D"], "expected 1 or more, got 0"),
        (["up", "--set", "novalue", "--data-dir", "D"], "expected KEY=VALUE, got 'novalue'"),
        (["up", "--timeout", "0", "--data-dir", "D"], "expected a positive number, got '0'"),
        (["up"], "the following arguments are required: --data-dir"),
        (["up", "--data-dir", "D", "--format", "xml"], "argument --format/-o: invalid choice"),
        (["down"], "the following arguments are required: --data-dir"),
        (["up", "--data-dir", "D", "--set", "no.such=1"], "unknown broker setting 'no.such'"),
        (["up", "--data-dir", "D", "--set", "num.partitions=0"], "--set num.partitions=0: "),
        (["up", "--data-dir", "D", "--set", "node.id=4"], "--set node.id: cluster up sets it"),
        (["status"], "one of the arguments --etcd --data-dir is required"),
        (["status", "--etcd", "nowhere"], "--etcd expects HOST:PORT, got 'nowhere'"),
        (["status", "--etcd", "h:1", "--cluster-name", "a/b"], "--cluster-name: "),
    ],
)
def test_bad_arguments_are_one_line_errors(argv: list[str], message: str) -> None:
    outcome = in_process("cluster", *argv)
    assert outcome.code == 2 and outcome.out == ""
    assert not Path("D").exists()
    assert len(outcome.err.splitlines()) == 1 and message in outcome.err, outcome.err


def test_a_dir_that_is_not_a_cluster_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    up = in_process("cluster", "up", "--data-dir", str(tmp_path))
    assert up.code == 2 and up.err == (
        f"odradek: {tmp_path} is not empty and holds no cluster.json: not a cluster data dir "
        "(give a new or empty directory)\n"
    )
    for action in ("down", "status"):
        outcome = in_process("cluster", action, "--data-dir", str(tmp_path / "none"))
        assert outcome.code == 2 and outcome.err == (
            f"odradek: {tmp_path / 'none'} is not a cluster data dir (no cluster.json; "
            "'odradek cluster up' creates one)\n"
        )


def test_up_names_a_broker_that_cannot_start_with_its_log_and_exits_1(tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    try:
        up = in_process(
            "cluster", "up", "--brokers", "1", "--data-dir", str(data_dir),
            "--set", "group.min.session.timeout.ms=1900000",  # above the max: broker refuses
        )  # fmt: skip
        log = data_dir.resolve() / "logs" / "broker-1.log"
        assert up.code == 1 and up.out == ""
        *tail, last = up.err.splitlines()
        assert tail[0] == f"--- last lines of {log} ---" and tail[-1] == "---"
        assert any("group.min.session.timeout.ms (1900000) must not exceed" in x for x in tail)
        assert last == (
            f"odradek: broker 1 exited during start (log: {log}); "
            f"'odradek cluster down --data-dir {data_dir}' stops the rest"
        )
        down = in_process("cluster", "down", "--data-dir", str(data_dir))
        assert [line.split()[0] for line in down.lines] == ["etcd"]  # etcd was left running
    finally:
        LocalCluster.open(data_dir).stop_all(timeout_s=5.0)
