"""The admin client's consumer-group calls against a real broker: list, describe (with
decoded assignments), delete, and list / alter / delete committed offsets."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer as KafkaConsumer

from odradek.client import AdminClient, NewTopic, TopicPartition
from odradek.client.admin import OffsetAndMetadata
from odradek.client.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NonEmptyGroupError,
    UnknownMemberIdError,
)

pytestmark = pytest.mark.timeout(60)


def unique(kind: str) -> str:
    return f"admin-groups-{kind}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def admin(bootstrap):
    with AdminClient(bootstrap_servers=bootstrap, default_api_timeout_ms=20_000) as client:
        yield client


@pytest.fixture
def topic(admin) -> str:
    name = unique("t")
    admin.create_topics([NewTopic(name, 3, 1)])[name].result()
    return name


@pytest.fixture
def live_member(bootstrap, topic):
    """A confluent-kafka member of a fresh group, holding every partition of ``topic``."""
    group = unique("live")
    consumer = KafkaConsumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "client.id": "admin-test"}
    )
    assigned: list[int] = []
    consumer.subscribe([topic], on_assign=lambda c, ps: assigned.extend(p.partition for p in ps))
    deadline = time.monotonic() + 30
    while not assigned and time.monotonic() < deadline:
        consumer.poll(0.2)
    assert assigned
    yield group
    consumer.close()


def test_alter_then_list_offsets_of_a_new_group(admin, topic) -> None:
    group = unique("simple")
    tp0, tp1, tp2 = (TopicPartition(topic, p) for p in range(3))
    results = admin.alter_consumer_group_offsets(group, {tp0: 3, tp1: OffsetAndMetadata(7, "note")})
    assert set(results) == {tp0, tp1}
    for future in results.values():
        future.result()
    offsets = admin.list_consumer_group_offsets(group)
    assert offsets == {tp0: OffsetAndMetadata(3, "", None), tp1: OffsetAndMetadata(7, "note", None)}
    assert admin.list_consumer_group_offsets(group, [tp1, tp2]) == {tp1: offsets[tp1]}
    listed = {g.group_id: g for g in admin.list_consumer_groups()}
    assert listed[group].state == "Empty" and listed[group].protocol_type == ""
    assert group in {g.group_id for g in admin.list_consumer_groups(states=["Empty"])}
    assert group not in {g.group_id for g in admin.list_consumer_groups(states=["Stable"])}
    described = admin.describe_consumer_groups([group])[group]
    assert described.exists and described.state == "Empty" and not described.members
    assert described.coordinator is not None


def test_describe_decodes_members(admin, topic, live_member) -> None:
    described = admin.describe_consumer_groups([live_member])[live_member]
    assert described.state == "Stable" and described.protocol_type == "consumer"
    assert described.protocol
    [member] = described.members
    assert member.client_id == "admin-test" and member.host.endswith("127.0.0.1")
    assert member.assignment == tuple(TopicPartition(topic, p) for p in range(3))
    assert member.subscription == (topic,)


def test_describe_unknown_group(admin) -> None:
    group = unique("missing")
    described = admin.describe_consumer_groups([group])[group]
    assert not described.exists and described.state == "Dead" and described.members == ()


def test_live_groups_refuse_simple_commits_and_deletion(admin, topic, live_member) -> None:
    tp = TopicPartition(topic, 0)
    [future] = admin.alter_consumer_group_offsets(live_member, {tp: 1}).values()
    with pytest.raises(UnknownMemberIdError):
        future.result()
    with pytest.raises(NonEmptyGroupError):
        admin.delete_consumer_groups([live_member])[live_member].result()
    with pytest.raises(GroupSubscribedToTopicError):
        admin.delete_consumer_group_offsets(live_member, [tp])[tp].result()


def test_delete_groups_one_future_each(admin, topic) -> None:
    empty, missing = unique("empty"), unique("missing")
    for f in admin.alter_consumer_group_offsets(empty, {TopicPartition(topic, 0): 1}).values():
        f.result()
    results = admin.delete_consumer_groups([empty, missing])
    assert results[empty].result() is None
    with pytest.raises(GroupIdNotFoundError):
        results[missing].result()
    assert not admin.describe_consumer_groups([empty])[empty].exists
    assert admin.list_consumer_group_offsets(empty) == {}


def test_delete_offsets(admin, topic) -> None:
    group = unique("g")
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    for f in admin.alter_consumer_group_offsets(group, {tp0: 1, tp1: 2}).values():
        f.result()
    assert admin.delete_consumer_group_offsets(group, [tp0])[tp0].result() is None
    assert admin.list_consumer_group_offsets(group) == {tp1: OffsetAndMetadata(2)}
    missing = unique("missing")
    with pytest.raises(GroupIdNotFoundError):
        admin.delete_consumer_group_offsets(missing, [tp0])[tp0].result()


def test_a_stale_coordinator_is_looked_up_again(admin, topic) -> None:
    group = unique("g")
    tp = TopicPartition(topic, 0)
    admin.alter_consumer_group_offsets(group, {tp: 5})[tp].result()
    admin._coordinators[group] = 4242  # a node that does not exist (moved coordinator)
    assert admin.list_consumer_group_offsets(group) == {tp: OffsetAndMetadata(5)}
    assert admin._coordinators[group] != 4242


def test_offsets_round_trip_on_any_broker(any_bootstrap) -> None:
    """The same calls against Odradek and against tansu (another Kafka-compatible broker)."""
    with AdminClient(bootstrap_servers=any_bootstrap, default_api_timeout_ms=20_000) as admin:
        name, group = unique("t"), unique("g")
        admin.create_topics([NewTopic(name, 2, 1)])[name].result()
        tp = TopicPartition(name, 1)
        admin.alter_consumer_group_offsets(group, {tp: 0})[tp].result()
        assert admin.list_consumer_group_offsets(group)[tp].offset == 0
        assert group in {g.group_id for g in admin.list_consumer_groups()}
        assert admin.describe_consumer_groups([group])[group].members == ()
        admin.delete_consumer_groups([group])[group].result()
