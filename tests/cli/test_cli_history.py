"""Seed 001's three rebalance scenarios, driven by real confluent-kafka consumers and
rendered by ``odradek groups history`` as timelines.

The broker's ``group.initial.rebalance.delay.ms`` is lowered to 500 ms so that the
first member's rebalance completes quickly; members joining within that delay of each
other are taken in one rebalance (modern Kafka's answer to seed scenario 1). How soon an
existing member notices a rebalance depends on its heartbeat interval, which is what
separates scenarios 2 and 3:

1. three consumers join together: one rebalance;
2. the second and third start one second apart while the first (heartbeating every 5 s)
   has not yet rejoined: two rebalances;
3. the third starts two seconds after the second and everyone heartbeats every 500 ms:
   three rebalances.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer

from odradek.testing import BrokerProcess

pytestmark = [pytest.mark.timeout(120), pytest.mark.embedded]

STABLE_PATH = ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable"]


@pytest.fixture(scope="module")
def history_broker(tmp_path_factory: pytest.TempPathFactory):
    broker = BrokerProcess(
        tmp_path_factory.mktemp("cli-history") / "data",
        settings={"group.initial.rebalance.delay.ms": "500"},
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def bootstrap(history_broker) -> str:  # the CLI fixtures talk to this broker
    return history_broker.bootstrap


class Member(threading.Thread):
    """A confluent-kafka consumer polling on its own thread until stopped."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str, heartbeat_ms: int):
        super().__init__(name=name, daemon=True)
        self.consumer = KafkaConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": name,
                "enable.auto.commit": False,
                "heartbeat.interval.ms": heartbeat_ms,
                "session.timeout.ms": max(10_000, heartbeat_ms * 3),
                "partition.assignment.strategy": "range",
            }
        )
        self.assigned = threading.Event()
        self.stop = threading.Event()
        self.topic = topic

    def run(self) -> None:
        self.consumer.subscribe(
            [self.topic], on_assign=lambda c, parts: parts and self.assigned.set()
        )
        try:
            while not self.stop.is_set():
                self.consumer.poll(0.1)
        finally:
            self.consumer.close()


def drive(bootstrap: str, group: str, topic: str, starts: list[float], heartbeats: list[int]):
    """Start one member per entry of ``starts`` (seconds after the first) and wait until
    all of them hold partitions. Returns the members (still running)."""
    members = [
        Member(bootstrap, group, topic, f"consumer-{i + 1}", hb) for i, hb in enumerate(heartbeats)
    ]
    began = time.monotonic()
    for m, at in zip(members, starts, strict=True):
        time.sleep(max(0.0, began + at - time.monotonic()))
        m.start()
    deadline = time.monotonic() + 40
    for m in members:
        assert m.assigned.wait(max(0.1, deadline - time.monotonic())), f"{m.name} got nothing"
    return members


def stop(members) -> None:
    for m in members:
        m.stop.set()
    for m in members:
        m.join(timeout=20)


@pytest.fixture
def topic(cli, name) -> str:
    t = name("t")
    assert cli("topics", "create", t, "--partitions", "3").code == 0
    return t


def timeline(cli, group: str) -> tuple[str, dict]:
    table = cli("groups", "history", group)
    assert table.code == 0, table.err
    data = cli("groups", "history", group, "--format", "json")
    assert data.code == 0, data.err
    return table.out, data.json()


def rebalance_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if "✔ rebalance #" in line]


def check(text: str, data: dict, expected: int) -> None:
    assert len(rebalance_rows(text)) == expected, text
    assert re.search(rf"^{expected} rebalances? completed", text, re.M), text
    assert data["summary"]["rebalances"] == expected
    assert all(r["state"] == "Stable" for r in data["rebalances"])
    assert [r["generation"] for r in data["rebalances"]] == list(range(1, expected + 1))
    assert data["summary"]["state"] == "Stable" and data["summary"]["members"] == 3
    last = data["rebalances"][-1]
    assert len(last["joined"]) + len(last["kept"]) == 3 and not last["left"]
    assert all(r["duration_ms"] >= 0 for r in data["rebalances"])


def test_three_consumers_together_one_rebalance(cli, bootstrap, name, topic) -> None:
    group = name("g")
    members = drive(bootstrap, group, topic, [0, 0, 0], [500, 500, 500])
    try:
        text, data = timeline(cli, group)
        check(text, data, 1)
        [only] = data["rebalances"]
        assert len(only["joined"]) == 3 and not only["kept"]
        assert only["states"] == STABLE_PATH
        assert "Now Stable, generation 1, 3 members." in text
    finally:
        stop(members)
    after, data = timeline(cli, group)
    assert data["summary"]["state"] == "Empty"  # everyone left on close
    assert "PreparingRebalance → Empty" in after


def test_three_consumers_one_second_apart_two_rebalances(cli, bootstrap, name, topic) -> None:
    group = name("g")
    # consumer-1 heartbeats every 5 s: it learns of the second rebalance only after
    # consumer-2 (at 1 s) and consumer-3 (at 2 s) are both waiting in it.
    members = drive(bootstrap, group, topic, [0, 1, 2], [5000, 500, 500])
    try:
        text, data = timeline(cli, group)
        check(text, data, 2)
        first, second = data["rebalances"]
        assert first["states"] == STABLE_PATH and len(first["joined"]) == 1
        assert first["joined"] == second["kept"] and len(second["joined"]) == 2
        assert second["states"] == ["Stable", "PreparingRebalance", "CompletingRebalance", "Stable"]
    finally:
        stop(members)


def test_three_consumers_three_rebalances(cli, bootstrap, name, topic) -> None:
    group = name("g")
    members = drive(bootstrap, group, topic, [0, 1, 3], [500, 500, 500])
    try:
        text, data = timeline(cli, group)
        check(text, data, 3)
        assert [len(r["joined"]) for r in data["rebalances"]] == [1, 1, 1]
        assert [len(r["kept"]) for r in data["rebalances"]] == [0, 1, 2]
        states = [s for r in data["rebalances"] for s in r["states"][1:]]
        assert states == ["PreparingRebalance", "CompletingRebalance", "Stable"] * 3
    finally:
        stop(members)
