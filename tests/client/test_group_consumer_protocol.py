"""Odradek's consumer with ``group_protocol="consumer"`` (KIP-848) against Odradek.

The member state machine as Java's AsyncKafkaConsumer drives it: the listener hears
revocations before assignments and never gets a partition another member still
owns; commits carry the member epoch; a member that stops polling leaves and gets
its partitions back as *lost* first; a static member that closes comes back to its
own partitions while the others notice nothing; fatal errors surface from ``poll``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from odradek.client import (
    Consumer,
    ConsumerRebalanceListener,
    KafkaError,
    Producer,
    TopicPartition,
)
from odradek.client.errors import ConfigError
from odradek.client.membership import ConsumerMemberState
from odradek.testing import BrokerProcess

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("kip848-client") / "data",
        settings={
            "group.consumer.session.timeout.ms": "4000",
            "group.consumer.heartbeat.interval.ms": "300",
        },
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


def _topic(broker: BrokerProcess, partitions: int = PARTITIONS, records: int = 0) -> str:
    from odradek.client import AdminClient, NewTopic

    name = f"kip848-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
    if records:
        with Producer(bootstrap_servers=broker.bootstrap) as producer:
            for i in range(records):
                producer.send(name, value=b"%d" % i, partition=i % partitions)
            producer.flush()
    return name


class Ownership:
    """Partitions as every member's listener says it owns them (they must never overlap)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owned: dict[str, set[int]] = {}
        self.calls: dict[str, list[tuple[str, list[int]]]] = {}

    def listener(self, name: str) -> ConsumerRebalanceListener:
        owner = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                owner.note(name, "revoked", revoked)

            def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                owner.note(name, "assigned", assigned)

            def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
                owner.note(name, "lost", lost)

        return Listener()

    def note(self, name: str, kind: str, tps: set[TopicPartition]) -> None:
        parts = sorted(tp.partition for tp in tps)
        with self.lock:
            self.calls.setdefault(name, []).append((kind, parts))
            mine = self.owned.setdefault(name, set())
            if kind == "assigned":
                others = {p for n, o in self.owned.items() if n != name for p in o}
                assert not others & set(parts), f"{name} assigned {parts}, others own {others}"
                mine.update(parts)
            else:
                mine.difference_update(parts)


class Member:
    """A consumer polling on its own thread."""

    def __init__(self, broker: BrokerProcess, group: str, topic: str, name: str, **kw) -> None:
        self.name = name
        self.ownership: Ownership = kw.pop("ownership")
        self.consumer = Consumer(
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            client_id=name,
            group_protocol="consumer",
            auto_offset_reset="earliest",
            **kw,
        )
        self.consumer.subscribe([topic], listener=self.ownership.listener(name))
        self.records: list[tuple[int, int]] = []
        self.error: BaseException | None = None
        self.paused_polls = threading.Event()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                if self.paused_polls.is_set():
                    time.sleep(0.05)
                    continue
                self.records.extend((r.partition, r.offset) for r in self.consumer.poll(0.1))
        except BaseException as exc:
            self.error = exc

    def owned(self) -> set[int]:
        with self.ownership.lock:
            return set(self.ownership.owned.get(self.name, set()))

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=30)
        self.consumer.close()


def wait_for(predicate, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out: {what}")


def split(members: list[Member], n: int = PARTITIONS) -> bool:
    owned = [m.owned() for m in members]
    return sum(map(len, owned)) == n and set().union(*owned) == set(range(n))


def test_revocation_comes_before_assignment_and_nothing_is_owned_twice(broker) -> None:
    topic = _topic(broker, records=600)
    group = f"g-{uuid.uuid4().hex[:8]}"
    ownership = Ownership()
    a = Member(broker, group, topic, "a", ownership=ownership)
    try:
        wait_for(lambda: a.owned() == set(range(PARTITIONS)), 30, "a owns everything")
        b = Member(broker, group, topic, "b", ownership=ownership)
        c = Member(broker, group, topic, "c", ownership=ownership)
        members = [a, b, c]
        try:
            wait_for(
                lambda: split(members) and all(len(m.owned()) == 2 for m in members), 30, "2/2/2"
            )
            # a gave partitions away: each reconciliation revoked first, then assigned.
            kinds = [k for k, _ in ownership.calls["a"]]
            assert kinds[0] == "assigned" and "revoked" in kinds
            for i, kind in enumerate(kinds):
                if kind == "revoked":
                    assert kinds[i + 1] == "assigned", kinds
            wait_for(lambda: sum(len(m.records) for m in members) >= 600, 30, "all records")
            seen = [r for m in members for r in m.records]
            assert len(seen) == len(set(seen)) == 600
            for m in members:
                assert m.error is None, m.error
            # The last reconciliation's acknowledgement may still be on its way (the
            # records can all arrive first): each member ends up STABLE.
            wait_for(
                lambda: all(
                    m.consumer._coordinator.mstate is ConsumerMemberState.STABLE for m in members
                ),
                10,
                "every member STABLE",
            )
        finally:
            for m in (b, c):
                m.close()
    finally:
        a.close()


def test_commits_carry_the_member_epoch_and_survive_a_restart(broker) -> None:
    topic = _topic(broker, partitions=2, records=100)
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        group_protocol="consumer",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        consumer.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            got.extend(consumer.poll(0.2, max_records=10))
        assert consumer.generation_id > 0  # the member epoch
        consumer.commit()
        positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
        committed = consumer.committed(list(positions))
        assert {tp: om.offset for tp, om in committed.items() if om} == positions
    finally:
        consumer.close()
    again = Consumer(
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        group_protocol="consumer",
        auto_offset_reset="earliest",
    )
    try:
        again.subscribe([topic])
        rest = []
        deadline = time.monotonic() + 30
        while len(rest) < 100 - len(got) and time.monotonic() < deadline:
            rest.extend(again.poll(0.2))
        keys = [(r.partition, r.offset) for r in got + rest]
        assert len(keys) == len(set(keys)) == 100
    finally:
        again.close()


def test_a_member_that_stops_polling_loses_its_partitions_then_rejoins(broker) -> None:
    topic = _topic(broker, partitions=2)
    group = f"g-{uuid.uuid4().hex[:8]}"
    ownership = Ownership()
    m = Member(broker, group, topic, "slow", ownership=ownership, max_poll_interval_ms=1_500)
    try:
        wait_for(lambda: m.owned() == {0, 1}, 30, "owns both")
        m.paused_polls.set()
        coordinator = m.consumer._coordinator
        wait_for(lambda: coordinator.mstate is ConsumerMemberState.STALE, 20, "left the group")
        m.paused_polls.clear()
        wait_for(lambda: len(ownership.calls["slow"]) >= 3, 30, "lost, then assigned again")
        assert m.owned() == {0, 1}
        kinds = [k for k, _ in ownership.calls["slow"]]
        assert kinds[:3] == ["assigned", "lost", "assigned"], ownership.calls
        assert m.error is None, m.error
    finally:
        m.close()


def test_a_static_member_comes_back_to_its_partitions_without_a_rebalance(broker) -> None:
    topic = _topic(broker)
    group = f"g-{uuid.uuid4().hex[:8]}"
    ownership = Ownership()
    a = Member(broker, group, topic, "a", ownership=ownership, group_instance_id="inst-a")
    b = Member(broker, group, topic, "b", ownership=ownership, group_instance_id="inst-b")
    try:
        wait_for(lambda: split([a, b]) and len(a.owned()) == 3, 30, "3/3")
        mine = a.owned()
        calls_b = len(ownership.calls["b"])
        a.close()  # static: epoch -2, its partitions wait for it
        time.sleep(1.0)
        assert b.owned() == set(range(PARTITIONS)) - mine
        back = Member(broker, group, topic, "a2", ownership=ownership, group_instance_id="inst-a")
        try:
            wait_for(lambda: back.owned() == mine, 30, "the same partitions back")
            assert len(ownership.calls["b"]) == calls_b, "b noticed a rebalance"
        finally:
            back.close()
    finally:
        b.close()


def test_errors_only_a_new_consumer_fixes_are_raised_from_poll(broker) -> None:
    topic = _topic(broker, partitions=1)
    consumer = Consumer(
        bootstrap_servers=broker.bootstrap,
        group_id=f"g-{uuid.uuid4().hex[:8]}",
        group_protocol="consumer",
        group_remote_assignor="sticky",
    )
    try:
        consumer.subscribe([topic])
        with pytest.raises(KafkaError, match=r"112|UnsupportedAssignor"):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                consumer.poll(0.2)
    finally:
        consumer.close()


def test_configuration_is_checked() -> None:
    with pytest.raises(ConfigError, match="group_protocol"):
        Consumer(bootstrap_servers="localhost:1", group_id="g", group_protocol="eager")
    with pytest.raises(ConfigError, match="group_remote_assignor"):
        Consumer(bootstrap_servers="localhost:1", group_id="g", group_remote_assignor="uniform")
