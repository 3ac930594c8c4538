"""A mixed group: Odradek consumers and confluent-kafka (librdkafka) consumers share one
group and one topic; the partitions are split between them and every message is read once.

Both clients support "range" (EAGER) and "cooperative-sticky" (COOPERATIVE); each is run
with an Odradek member and with a librdkafka member as the group leader (the first to join).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from odradek.testing import BrokerProcess

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 6
MESSAGES = 600


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("mixed") / "data",
        settings={
            "group.initial.rebalance.delay.ms": "0",
            "group.min.session.timeout.ms": "1000",
        },
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


class OdradekMember:
    kind = "odradek"

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str) -> None:
        self.consumer = Consumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            partition_assignment_strategy=[strategy],
            session_timeout_ms=3_000,
            heartbeat_interval_ms=300,
        )
        self.consumer.subscribe([topic])
        self.records: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self._assignment: set[TopicPartition] = set()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                batch = self.consumer.poll(0.1)
                self.records.extend((r.partition, r.offset) for r in batch)
                if batch:
                    self.consumer.commit()
                self._assignment = self.consumer.assignment()
        except BaseException as exc:
            self.error = exc

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self._assignment}

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)
        self.consumer.close()


class ConfluentMember:
    kind = "confluent"

    def __init__(self, bootstrap: str, group: str, topic: str, strategy: str) -> None:
        self.consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "partition.assignment.strategy": strategy,
                "session.timeout.ms": 3000,
                "heartbeat.interval.ms": 300,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )
        self.consumer.subscribe([topic])
        self.records: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self._assignment: set[int] = set()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                msgs = self.consumer.consume(num_messages=200, timeout=0.1)
                got = False
                for m in msgs:
                    if m.error():
                        continue
                    self.records.append((m.partition(), m.offset()))
                    got = True
                if got:
                    self.consumer.commit(asynchronous=False)
                self._assignment = {tp.partition for tp in self.consumer.assignment()}
        except BaseException as exc:
            self.error = exc

    def assignment(self) -> set[int]:
        return set(self._assignment)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(10)
        self.consumer.close()


def split_ok(members: list[Any]) -> bool:
    sets = [m.assignment() for m in members]
    counts = sorted(len(s) for s in sets)
    union = set().union(*sets)
    return (
        union == set(range(PARTITIONS))
        and sum(counts) == PARTITIONS
        and counts[-1] - counts[0] <= 1
    )


@pytest.mark.parametrize("leader", ["odradek", "confluent"])
@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_mixed_group_splits_and_reads_each_message_once(
    broker: BrokerProcess, strategy: str, leader: str
) -> None:
    bootstrap = broker.bootstrap
    topic = f"mixed-{strategy}-{uuid.uuid4().hex[:8]}"
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result()
    kinds = [OdradekMember, ConfluentMember]
    if leader == "confluent":
        kinds.reverse()
    members: list[Any] = []
    try:
        first = kinds[0](bootstrap, group, topic, strategy)
        members.append(first)
        deadline = time.monotonic() + 20
        while len(first.assignment()) < PARTITIONS and time.monotonic() < deadline:
            time.sleep(0.05)  # the first member is the leader
        for kind in (kinds[1], kinds[0], kinds[1]):
            members.append(kind(bootstrap, group, topic, strategy))
        # Wait for a split that stays the same for a while (cooperative takes two rounds).
        stable_since = None
        deadline = time.monotonic() + 40
        last: list[set[int]] = []
        while time.monotonic() < deadline:
            for m in members:
                if m.error:
                    raise m.error
            now = [m.assignment() for m in members]
            if split_ok(members) and now == last:
                stable_since = stable_since or time.monotonic()
                if time.monotonic() - stable_since > 2.0:
                    break
            else:
                stable_since = None
            last = now
            time.sleep(0.1)
        else:
            raise AssertionError(
                f"no stable split: {[(m.kind, sorted(m.assignment())) for m in members]}"
            )
        by_kind = {
            k: sum(len(m.assignment()) for m in members if m.kind == k)
            for k in ("odradek", "confluent")
        }
        assert by_kind["odradek"] >= 2 and by_kind["confluent"] >= 2, by_kind

        with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
            for i in range(MESSAGES):
                p.send(topic, value=b"%d" % i, partition=i % PARTITIONS)
            p.flush(30)
        want = {(p, o) for p in range(PARTITIONS) for o in range(MESSAGES // PARTITIONS)}
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            seen: Counter[tuple[int, int]] = Counter()
            for m in members:
                seen.update(m.records)
            if set(seen) >= want:
                break
            time.sleep(0.1)
        assert set(seen) == want
        assert max(seen.values()) == 1, "a message was read twice"
        # Each member read exactly its own partitions.
        for m in members:
            assert {p for p, _ in m.records} == m.assignment()
    finally:
        for m in members:
            m.stop()
    for m in members:
        if m.error:
            raise m.error
