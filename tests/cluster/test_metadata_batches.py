"""Topics of any partition count in etcd (issue 21, item 3): creations and growths
larger than one etcd transaction (128 operations by default) written in batches
behind a claim, the topic key last, atomic to readers. The store alone against one
real etcd for the module; each test has its own cluster name (its own keys)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import aetcd
import pytest

from odradek.cluster.metadata import ETCD_MAX_TXN_OPS, EtcdMetadataStore, KeyLayout
from odradek.devcluster.etcd_server import EtcdServer
from odradek.replication.model import (
    ChangeKind,
    PartitionChange,
    PartitionState,
    TopicAssignment,
    TopicChange,
    TopicConfigChange,
    TopicExistsError,
)

TEST_DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    server = EtcdServer(Path(tmp_path_factory.mktemp("etcd")), start_timeout_s=30.0)
    server.start()
    try:
        yield server
    finally:
        server.kill()


def run(test: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(test, TEST_DEADLINE_S))


def store_for(etcd: EtcdServer) -> EtcdMetadataStore:
    return EtcdMetadataStore(*etcd.endpoint, cluster_name=f"c{uuid.uuid4().hex[:8]}")


def topic_of(partitions: int, name: str = "wide", shift: int = 0) -> TopicAssignment:
    replicas = {p: tuple((p + shift + i) % 3 + 1 for i in range(3)) for p in range(partitions)}
    return TopicAssignment(name=name, topic_id=uuid.uuid4(), replicas=replicas)


def first_replica_leads(topic: TopicAssignment, partitions: range) -> dict[int, PartitionState]:
    return {p: PartitionState(topic.replicas[p][0], 0, topic.replicas[p]) for p in partitions}


def test_126_partitions_no_longer_fit_one_transaction() -> None:
    # what made `topics create -p 126` fail: the topic, its configs, 126 states, a read
    assert 126 + 3 > ETCD_MAX_TXN_OPS >= 125 + 3


@pytest.mark.parametrize("count", [126, 2000])
def test_a_topic_of_any_size_is_created_with_every_state(etcd: EtcdServer, count: int) -> None:
    async def scenario() -> None:
        async with store_for(etcd) as store:
            before = (await store.cluster()).revision
            topic = topic_of(count)
            revision = await store.create_topic(topic, {"retention.ms": "1000"})
            snapshot = (await store.cluster()).items
            assert snapshot.topics == {"wide": topic}
            assert snapshot.topic_revisions["wide"] == revision
            assert snapshot.topic_configs["wide"] == {"retention.ms": "1000"}
            assert {key: v.state for key, v in snapshot.partitions.items()} == {
                ("wide", p): state for p, state in first_replica_leads(topic, range(count)).items()
            }
            # a watcher sees every state, then the topic (the commit point), and no claim
            changes = []
            watch = store.watch_cluster(before + 1)
            async with asyncio.timeout(30):
                async for change in watch:
                    changes.append(change)
                    if isinstance(change, TopicChange):
                        break
            await watch.aclose()
            states = [c for c in changes if isinstance(c, PartitionChange)]
            assert all(isinstance(c, PartitionChange | TopicConfigChange) for c in changes[:-1])
            assert len(states) == count and all(c.kind is ChangeKind.PUT for c in states)
            assert isinstance(changes[-1], TopicChange) and changes[-1].revision == revision
            assert all(c.revision < revision for c in states)
            with pytest.raises(TopicExistsError):
                await store.create_topic(topic_of(count))
            await store.delete_topic("wide")
            assert (await store.partitions()).items == {}

    run(scenario())


def test_readers_never_see_part_of_a_batched_creation(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd) as store:
            topic = topic_of(2000)
            creation = asyncio.create_task(store.create_topic(topic))
            seen = set()
            while not creation.done():
                snapshot = (await store.cluster()).items
                count = len(snapshot.partitions)
                assert (snapshot.topics, count) in (({}, 0), ({"wide": topic}, 2000))
                seen.add(count)
            await creation
            assert len((await store.cluster()).items.partitions) == 2000
            assert 0 in seen  # the reader did look while the states were being written

    run(scenario())


def test_leftovers_of_a_dead_attempt_are_ignored_then_removed(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd) as store:
            keys: KeyLayout = store.keys
            dead = PartitionState(3, 7, (3,))
            async with aetcd.Client(*etcd.endpoint) as raw:  # what a crashed creator left
                for p in (0, 5, 300):
                    await raw.put(keys.partition("wide", p), dead.encode())
            assert (await store.cluster()).items.partitions == {}
            topic = topic_of(200)
            await store.create_topic(topic)
            states = (await store.partitions("wide")).items
            assert sorted(p for _, p in states) == list(range(200))  # 300 is gone
            assert states["wide", 5].state == first_replica_leads(topic, range(5, 6))[5]

    run(scenario())


def test_a_second_writer_waits_for_the_claim_to_go(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd) as store:
            async with aetcd.Client(*etcd.endpoint) as raw:  # another broker is creating it
                await raw.put(store.keys.pending_topic("wide"), b'{"token":"theirs"}')
                with pytest.raises(TopicExistsError, match="being created"):
                    await store.create_topic(topic_of(300))
                assert (await store.partitions()).items == {}
                await raw.delete(store.keys.pending_topic("wide"))
            await store.create_topic(topic_of(300))
            assert len((await store.cluster()).items.partitions) == 300

    run(scenario())


def test_growing_by_2000_partitions_is_a_compare_and_swap(etcd: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd) as store:
            small = topic_of(3)
            created = await store.create_topic(small)
            grown = TopicAssignment("wide", small.topic_id, topic_of(2003).replicas)
            added = first_replica_leads(grown, range(3, 2003))
            # decided on a revision that is no longer current: nothing changes
            await store.set_topic_configs("wide", {})  # not the topic key: still current
            stale = await store.update_topic_assignment(
                grown, expected_revision=created - 1, added_partition_states=added
            )
            assert not stale.succeeded and stale.current is not None
            assert stale.current.assignment == small
            assert len((await store.cluster()).items.partitions) == 3
            update = await store.update_topic_assignment(
                grown, expected_revision=created, added_partition_states=added
            )
            assert update.succeeded and update.current is not None
            assert update.current.assignment == grown
            snapshot = (await store.cluster()).items
            assert snapshot.topics["wide"] == grown
            assert len(snapshot.partitions) == 2003
            assert snapshot.partitions["wide", 2002].state == added[2002]
            assert snapshot.partitions["wide", 0].state == first_replica_leads(small, range(1))[0]
            # the same growth again, from the old revision: the CAS refuses it
            again = await store.update_topic_assignment(
                grown, expected_revision=created, added_partition_states=added
            )
            assert not again.succeeded and again.current == update.current

    run(scenario())
