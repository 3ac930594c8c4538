"""A classic group whose members' metadata would not fit one ``__consumer_offsets`` record
(max.message.bytes, 1 MiB by default) refuses the member that would not fit with
GROUP_MAX_SIZE_REACHED and keeps serving the others (issue 19.8), with kafka-python
consumers whose assignor puts 300 KB of user data in their subscriptions, on a real
broker.

Three such members fit; the fourth gets GroupMaxSizeReachedError (fatal for it, as
kafka-python and the Java client treat it) at once; another group on the same
``__consumer_offsets`` partition consumes and commits meanwhile; when one member
leaves, a new one gets in. A member with 1 MiB of metadata gets the same error.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.coordinator.assignors.abstract import ConsumerProtocolSubscription
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.errors import GroupMaxSizeReachedError

from odradek.client import AdminClient, NewTopic, Producer
from odradek.coordinator.routing import partition_for
from odradek.testing import BrokerProcess

pytestmark = [pytest.mark.timeout(180)]

GROUP = "big-metadata"
USER_DATA = 300_000  # three fit 1 MiB less the events' share; four do not
ASSIGN_TIMEOUT_S = 60.0


class BigUserData(RangePartitionAssignor):
    """The range assignor, with USER_DATA bytes of user data in its subscription."""

    size = USER_DATA

    @classmethod
    def metadata(cls, topics: Any) -> Any:
        return ConsumerProtocolSubscription(cls.version, list(topics), b"u" * cls.size)


class HugeUserData(BigUserData):
    size = 1 << 20


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(
        tmp_path_factory.mktemp("record-limit") / "data",
        settings={"group.initial.rebalance.delay.ms": "0"},
    )
    process.start()
    try:
        admin = AdminClient(bootstrap_servers=process.bootstrap)
        try:
            admin.create_topics([NewTopic("t", 4, 1)])["t"].result()
        finally:
            admin.close()
        yield process
    finally:
        process.stop()


class Member(threading.Thread):
    """A kafka-python consumer polling on its own thread; keeps the error that ended it."""

    def __init__(self, bootstrap: str, group: str, assignor: type = BigUserData) -> None:
        super().__init__(daemon=True)
        self.consumer = KafkaConsumer(
            "t",
            bootstrap_servers=bootstrap,
            group_id=group,
            partition_assignment_strategy=[assignor],
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
            enable_auto_commit=False,
        )
        self.assigned = threading.Event()
        self.failed = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.consumer.poll(timeout_ms=100)
                if self.consumer.assignment():
                    self.assigned.set()
        except BaseException as exc:  # the error is what the test looks at
            self.error = exc
            self.failed.set()
        finally:
            self.consumer.close()

    def end(self) -> None:
        self.stop.set()
        self.join(20)


def neighbour_group() -> str:
    """A group on the same __consumer_offsets partition as GROUP (50 partitions)."""
    target = partition_for(GROUP, 50)
    return next(
        f"neighbour-{i}" for i in range(10_000) if partition_for(f"neighbour-{i}", 50) == target
    )


def test_the_member_that_does_not_fit_is_refused_and_the_group_goes_on(
    broker: BrokerProcess,
) -> None:
    members = [Member(broker.bootstrap, GROUP) for _ in range(3)]
    late: list[Member] = []
    try:
        for m in members:
            m.start()
            assert m.assigned.wait(ASSIGN_TIMEOUT_S), m.error
        fourth = Member(broker.bootstrap, GROUP)
        late.append(fourth)
        fourth.start()
        assert fourth.failed.wait(ASSIGN_TIMEOUT_S), "the fourth member was not refused"
        assert isinstance(fourth.error, GroupMaxSizeReachedError), fourth.error
        assert all(not m.failed.is_set() and m.is_alive() for m in members)
        # Another group on the same coordinator partition consumes and commits meanwhile.
        neighbour = KafkaConsumer(
            "t", bootstrap_servers=broker.bootstrap, group_id=neighbour_group()
        )
        try:
            deadline = time.monotonic() + ASSIGN_TIMEOUT_S
            while not neighbour.assignment() and time.monotonic() < deadline:
                neighbour.poll(timeout_ms=100)
            assert neighbour.assignment()
            neighbour.commit()
        finally:
            neighbour.close()
        # One member leaves: there is room for a new one.
        members.pop().end()
        fifth = Member(broker.bootstrap, GROUP)
        late.append(fifth)
        fifth.start()
        assert fifth.assigned.wait(ASSIGN_TIMEOUT_S), fifth.error
        assert not fifth.failed.is_set()
    finally:
        for m in members + late:
            m.end()


def test_a_member_with_1mib_of_metadata_is_refused(broker: BrokerProcess) -> None:
    member = Member(broker.bootstrap, "huge-metadata", HugeUserData)
    member.start()
    try:
        assert member.failed.wait(ASSIGN_TIMEOUT_S), "the member was not refused"
        assert isinstance(member.error, GroupMaxSizeReachedError), member.error
    finally:
        member.end()
    producer = Producer(bootstrap_servers=broker.bootstrap)  # the broker serves on
    try:
        producer.send("t", b"after").result(10)
    finally:
        producer.close()
