"""Online migration (KIP-848's upgrade path) with real confluent-kafka consumers.

A classic group of three members is restarted one member at a time with
``group.protocol=consumer`` (the first one turns the group into a consumer group;
the classic members keep working inside it), then one at a time back to the
classic protocol (the last consumer-protocol member leaving turns it back into a
classic group). Records are produced the whole time; every one of them is consumed
exactly once across all the members that ever ran, and the committed offsets end
at the log end. ``clients`` runs the same with Odradek's client in the middle.
"""

from __future__ import annotations

import threading
import time

import pytest
from group_members import (
    Member,
    assert_exactly_once,
    committed_offsets,
    create_topic,
    expected_offsets,
    group_broker,
    list_groups,
    members_cleanup,
    new_names,
    produce_keyed,
    wait_settled,
)

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 6
SETTLE_S = 60


class Producing:
    """Keyed records in batches, in the background, until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.per_partition: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._batches = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            got = produce_keyed(self.bootstrap, self.topic, 40, prefix=f"b{self._batches}")
            self._batches += 1
            for p, n in got.items():
                self.per_partition[p] = self.per_partition.get(p, 0) + n
            self._stop.wait(0.1)

    def __enter__(self) -> Producing:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def _group_type(bootstrap: str, group: str) -> str:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups(request_timeout=15).result(30)
    for g in listed.valid:
        if g.group_id == group:
            return str(g.type).split(".")[-1].lower()
    return "missing"


def _wait_for_partitions(member: Member) -> None:
    """Until a new member holds partitions: the two it joins may hold all of them already
    (a split, but not yet with it), and a Python client takes a while to start."""
    member.wait_for(
        lambda events: any(e.get("current") for e in events), SETTLE_S, "its first partitions"
    )


@pytest.mark.parametrize("middle", ["confluent", "odradek"])
def test_rolling_migration_to_the_consumer_protocol_and_back(tmp_path, middle: str) -> None:
    with group_broker(tmp_path / "data") as broker:
        topic, group = new_names(f"migrate-{middle}")
        create_topic(broker.bootstrap, topic, PARTITIONS)
        everyone: list[Member] = []

        def start(name: str, protocol: str, client: str = "confluent") -> Member:
            m = Member(
                client,
                broker.bootstrap,
                topic,
                group,
                name,
                group_protocol=protocol,
                session_ms=6000,
                heartbeat_ms=500,
                batch=50,
            )
            everyone.append(m)
            return m

        with members_cleanup(everyone):
            with Producing(broker.bootstrap, topic) as producing:
                live = [start(f"classic-{i}", "classic") for i in range(3)]
                wait_settled(live, PARTITIONS, SETTLE_S)
                assert _group_type(broker.bootstrap, group) == "classic"
                for i in range(3):  # classic -> consumer, one member at a time
                    live[i].close()
                    live[i] = start(f"consumer-{i}", "consumer", middle)
                    _wait_for_partitions(live[i])
                    wait_settled(live, PARTITIONS, SETTLE_S, even=False)
                    assert _group_type(broker.bootstrap, group) == "consumer"
                for i in range(3):  # and back
                    live[i].close()
                    live[i] = start(f"back-{i}", "classic")
                    _wait_for_partitions(live[i])
                    wait_settled(live, PARTITIONS, SETTLE_S, even=False)
                assert _group_type(broker.bootstrap, group) == "classic"
            expected = expected_offsets(producing.per_partition)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                if sum(len(m.records()) for m in everyone) >= len(expected):
                    break
                time.sleep(0.2)
            time.sleep(1.0)
            for m in live:
                m.close()
        consumed = [r for m in everyone for r in m.records()]
        assert_exactly_once(consumed, expected, f"migration through {middle}")
        assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == {
            p: producing.per_partition.get(p, 0) for p in range(PARTITIONS)
        }
        assert group in list_groups(broker.bootstrap)
