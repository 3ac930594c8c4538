"""`odradek groups describe` and `groups history` on a three-broker cluster (issue 19.3).

The cluster is started as a user starts it, `odradek cluster up --brokers 3`; a
confluent-kafka group rebalances three times; then the broker that coordinates the
group (the leader of its `__consumer_offsets` partition, as etcd says) is SIGKILLed.
Both commands, run as processes against the cluster, must answer within seconds before
the kill and after it, and the history read after the kill must hold every rebalance
recorded before it: the events are records of the group's partition, replicated with it
and loaded by the new coordinator. The measured times are printed.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_harness import (
    CLUSTER_SETTINGS,
    cluster_metadata,
    coordinator_id,
    describe_metadata,
    log_paths,
    wait_for,
)
from confluent_kafka import Consumer

from odradek.cluster.launcher import LocalCluster

UP_TIMEOUT_S = 150.0
STOP_TIMEOUT_S = 10.0
# The bound is "a couple of seconds" for a command against a healthy cluster; a
# process start costs about 1.5 s of it here, and the 2 cores are shared: generous.
ANSWER_S = 10.0
# Right after the kill the command waits for the broker's lease to end (3 s) and the new
# leader to load the partition; --timeout bounds it whatever happens.
FAILOVER_TIMEOUT_S = 25.0
GROUP, TOPIC = "cli-cluster-group", "cli-cluster-topic"


def odradek(
    *args: str, timeout_s: float = UP_TIMEOUT_S
) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "odradek", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return done, time.monotonic() - started


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    data_dir = tmp_path_factory.mktemp("cli-cluster") / "dev"
    settings = [f"--set={name}={value}" for name, value in CLUSTER_SETTINGS.items()]
    try:
        up, took = odradek(
            "cluster", "up", "--brokers", "3", "--data-dir", str(data_dir), *settings
        )
        assert up.returncode == 0, up.stderr
        print(f"\ncluster up took {took:.1f} s", flush=True)
        yield LocalCluster.open(data_dir)
    finally:
        if (data_dir / "cluster.json").exists():
            LocalCluster.open(data_dir).stop_all(timeout_s=STOP_TIMEOUT_S)


def member(bootstrap: str, name: str) -> tuple[Consumer, threading.Event, threading.Event]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": GROUP,
            "client.id": name,
            "session.timeout.ms": 10_000,
            "heartbeat.interval.ms": 500,
        }
    )
    assigned, stop = threading.Event(), threading.Event()

    def run() -> None:
        consumer.subscribe([TOPIC], on_assign=lambda c, parts: parts and assigned.set())
        try:
            while not stop.is_set():
                consumer.poll(0.1)
        finally:
            consumer.close()

    threading.Thread(target=run, name=name, daemon=True).start()
    return consumer, assigned, stop


def history(bootstrap: str, timeout_s: float) -> tuple[dict[str, Any], float]:
    done, took = odradek(
        "groups", "history", GROUP, "-o", "json", "-b", bootstrap, "--timeout", f"{timeout_s:g}"
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout), took


@pytest.mark.timeout(420)
def test_describe_and_history_answer_on_a_cluster_and_survive_a_coordinator_kill(
    cluster: LocalCluster,
) -> None:
    bootstrap = cluster.bootstrap_servers()
    made, _ = odradek(
        "topics", "create", TOPIC, "--partitions", "2", "--replication-factor", "3", "-b", bootstrap
    )
    assert made.returncode == 0, made.stderr
    # Three rebalances: the first member, the second joining, both leaving.
    first = member(bootstrap, "first")
    assert first[1].wait(60), f"no assignment; logs: {log_paths(cluster)}"
    second = member(bootstrap, "second")
    assert second[1].wait(60), f"no assignment; logs: {log_paths(cluster)}"
    for _, _, stop in (first, second):
        stop.set()

    def settled() -> dict[str, Any] | None:
        data, _ = history(bootstrap, 30)
        done = data["summary"]
        return data if done["state"] == "Empty" and done["rebalances"] >= 3 else None

    before = wait_for("the group empty after three rebalances", settled, 60, str)
    data, took = history(bootstrap, 30)
    print(f"groups history on the healthy cluster: {took:.2f} s", flush=True)
    assert took < ANSWER_S and data["events"] == before["events"]
    described, took = odradek("groups", "describe", GROUP, "-b", bootstrap, "--timeout", "30")
    print(f"groups describe on the healthy cluster: {took:.2f} s", flush=True)
    assert described.returncode == 0 and took < ANSWER_S, described.stderr
    generation = before["summary"]["generation"]
    assert re.search(rf"^Generation\s+{generation}$", described.stdout, re.M), described.stdout

    md = cluster_metadata(cluster)
    killed = coordinator_id(md, GROUP)
    assert killed is not None, describe_metadata(md)
    cluster.kill(killed)
    print(f"killed broker {killed}, the coordinator of {GROUP}", flush=True)
    # At once: bounded by --timeout, and it gets there once the partition has moved.
    after, took = history(bootstrap, FAILOVER_TIMEOUT_S)
    print(f"groups history right after the kill: {took:.2f} s", flush=True)
    assert took < FAILOVER_TIMEOUT_S + 5

    def moved() -> int | None:
        leader = coordinator_id(cluster_metadata(cluster), GROUP)
        return leader if leader not in (None, killed) else None

    wait_for("a new coordinator", moved, 60, lambda: f"logs: {log_paths(cluster)}")
    for _ in range(2):  # the second run is the steady state
        after, took = history(bootstrap, 30)
    print(f"groups history after the failover: {took:.2f} s", flush=True)
    assert took < ANSWER_S
    described, took = odradek("groups", "describe", GROUP, "-b", bootstrap, "--timeout", "30")
    print(f"groups describe after the failover: {took:.2f} s", flush=True)
    assert described.returncode == 0 and took < ANSWER_S, described.stderr
    assert re.search(rf"^Generation\s+{generation}$", described.stdout, re.M), described.stdout
    # Every event from before the kill is still there, in order, and the new
    # coordinator recorded that it loaded the group.
    assert after["events"][: len(before["events"])] == before["events"]
    assert after["rebalances"] == before["rebalances"]
    loaded = after["events"][len(before["events"]) :]
    assert loaded and {e["kind"] for e in loaded} == {"group_loaded"}, loaded
