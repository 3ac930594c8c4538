"""The etcd metadata store against a real etcd server (loopback, per-test data dir).

Lease TTLs are etcd's practical minimum (2 s) so expiry tests take seconds; every
wait is a deadline on an event, never a fixed sleep, except where the point is
that time passes (a kept-alive lease outliving its TTL).
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import aetcd
import pytest

from odradek.cluster.metadata import EtcdMetadataStore
from odradek.devcluster.etcd_server import EtcdServer
from odradek.replication.decisions import Reassignment, reassignment_progress, start_reassignment
from odradek.replication.model import (
    BrokerChange,
    BrokerIdInUseError,
    BrokerInfo,
    ChangeKind,
    ClusterMetadata,
    ControllerClaim,
    ControllerInfo,
    LeaseLost,
    MetadataWatchLost,
    NotControllerError,
    PartitionChange,
    PartitionState,
    TopicAssignment,
    TopicChange,
    TopicConfigChange,
    TopicExistsError,
    TopicUpdate,
    UnknownTopicError,
)

LEASE_TTL_S = 2
# lease expiry is checked by etcd's leader about every 500 ms; allow for a loaded machine
EXPIRY_DEADLINE_S = LEASE_TTL_S + 15.0
TEST_DEADLINE_S = 60.0

T = TypeVar("T")


def run(test: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), TEST_DEADLINE_S))


async def take(events: AsyncGenerator[T, None], count: int, timeout_s: float = 15.0) -> list[T]:
    """The next `count` events of a watch, then close it."""
    taken: list[T] = []
    try:
        async with asyncio.timeout(timeout_s):
            async for event in events:
                taken.append(event)
                if len(taken) == count:
                    break
    finally:
        await events.aclose()
    return taken


async def eventually(check: Callable[[], Awaitable[bool]], timeout_s: float) -> None:
    async with asyncio.timeout(timeout_s):
        while not await check():
            await asyncio.sleep(0.1)


def store_for(server: EtcdServer) -> EtcdMetadataStore:
    return EtcdMetadataStore(*server.endpoint, cluster_name="test")


def three_replica_topic(name: str = "orders", partitions: int = 2) -> TopicAssignment:
    replicas = {p: tuple((p + i) % 3 + 1 for i in range(3)) for p in range(partitions)}
    return TopicAssignment(name=name, topic_id=uuid.uuid4(), replicas=replicas)


# -- brokers -------------------------------------------------------------------


def test_registered_broker_is_listed_and_disappears_when_its_lease_expires(
    etcd_server: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            lease = await store.grant_lease(LEASE_TTL_S)
            broker = BrokerInfo(broker_id=1, host="127.0.0.1", port=19092, rack="rack-a")
            revision = await store.register_broker(broker, lease)
            listed = await store.brokers()
            assert listed.items == {1: broker}
            assert listed.revision >= revision

            # the process "crashes": nobody refreshes the lease any more
            await lease.stop_keepalive()
            changes = await take(
                store.watch_brokers(listed.revision + 1), 1, timeout_s=EXPIRY_DEADLINE_S
            )
            assert [(c.kind, c.broker_id, c.broker) for c in changes] == [
                (ChangeKind.DELETE, 1, None)
            ]
            assert (await store.brokers()).items == {}

    run(scenario)


def test_kept_alive_lease_outlives_its_ttl(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            lease = await store.grant_lease(LEASE_TTL_S)
            await store.register_broker(BrokerInfo(7, "127.0.0.1", 19093), lease)
            await asyncio.sleep(LEASE_TTL_S * 2)  # the point: time passes, keepalive holds
            assert set((await store.brokers()).items) == {7}
            assert not lease.lost.is_set()
            await lease.revoke()
            assert (await store.brokers()).items == {}

    run(scenario)


def test_broker_id_is_held_by_one_live_broker(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as first, store_for(etcd_server) as second:
            first_lease = await first.grant_lease(LEASE_TTL_S)
            second_lease = await second.grant_lease(LEASE_TTL_S)
            await first.register_broker(BrokerInfo(3, "127.0.0.1", 19001), first_lease)
            with pytest.raises(BrokerIdInUseError):
                await second.register_broker(BrokerInfo(3, "127.0.0.1", 19002), second_lease)
            # the owner may re-register (new address) on its own lease
            await first.register_broker(BrokerInfo(3, "127.0.0.1", 19003), first_lease)
            assert (await first.brokers()).items[3].port == 19003
            # once the first broker is gone the id is free again
            await first_lease.revoke()
            await second.register_broker(BrokerInfo(3, "127.0.0.1", 19002), second_lease)
            assert (await first.brokers()).items[3].port == 19002
            await second_lease.revoke()

    run(scenario)


def test_a_broker_takes_over_its_own_old_registration_and_nobody_sees_it_leave(
    etcd_server: EtcdServer,
) -> None:
    """After its keeper gave up on a lease etcd still holds (issue 21), the broker moves
    its registration to a new lease in one step; another process with the same id,
    which cannot know that lease, is still refused."""

    async def scenario() -> None:
        async with store_for(etcd_server) as mine, store_for(etcd_server) as other:
            old = await mine.grant_lease(LEASE_TTL_S)
            await mine.register_broker(BrokerInfo(4, "127.0.0.1", 19001), old)
            start = (await mine.brokers()).revision + 1
            await old.stop_keepalive()  # given up on, but alive in etcd for now
            new = await mine.grant_lease(LEASE_TTL_S)
            stranger = await other.grant_lease(LEASE_TTL_S)
            with pytest.raises(BrokerIdInUseError):
                await other.register_broker(BrokerInfo(4, "127.0.0.1", 19002), stranger)
            with pytest.raises(BrokerIdInUseError):  # naming some lease of its own
                await other.register_broker(
                    BrokerInfo(4, "127.0.0.1", 19002), stranger, replacing=stranger.lease_id
                )
            await mine.register_broker(
                BrokerInfo(4, "127.0.0.1", 19001), new, replacing=old.lease_id
            )
            await mine.revoke_lease(old.lease_id)
            await mine.revoke_lease(old.lease_id)  # already gone: nothing to do
            assert 4 in (await mine.brokers()).items
            await new.revoke()
            changes: list[BrokerChange] = await take(mine.watch_brokers(start), 2)
            assert [(c.kind, c.broker_id) for c in changes] == [
                (ChangeKind.PUT, 4),  # moved to the new lease: no DELETE in between
                (ChangeKind.DELETE, 4),  # the new lease revoked
            ]
            await stranger.revoke()

    run(scenario)


def test_broker_watch_delivers_registrations_and_departures_in_order(
    etcd_server: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            start = (await store.brokers()).revision + 1
            leases = [await store.grant_lease(LEASE_TTL_S) for _ in range(3)]
            for broker_id, lease in enumerate(leases, start=1):
                await store.register_broker(BrokerInfo(broker_id, "127.0.0.1", 19100), lease)
            await leases[1].revoke()
            await leases[0].revoke()
            changes: list[BrokerChange] = await take(store.watch_brokers(start), 5)
            assert [(c.kind, c.broker_id) for c in changes] == [
                (ChangeKind.PUT, 1),
                (ChangeKind.PUT, 2),
                (ChangeKind.PUT, 3),
                (ChangeKind.DELETE, 2),
                (ChangeKind.DELETE, 1),
            ]
            revisions = [c.revision for c in changes]
            assert revisions == sorted(set(revisions))
            await leases[2].revoke()

    run(scenario)


# -- controller ----------------------------------------------------------------


def test_one_controller_and_failover_when_its_lease_is_revoked(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as a, store_for(etcd_server) as b:
            lease_a = await a.grant_lease(LEASE_TTL_S)
            lease_b = await b.grant_lease(LEASE_TTL_S)
            claim_a = await a.try_become_controller(1, lease_a)
            assert isinstance(claim_a, ControllerClaim)
            assert claim_a.info == ControllerInfo(broker_id=1, epoch=1)
            assert await b.try_become_controller(2, lease_b) == ControllerInfo(1, 1)

            watched = await b.controller()
            assert watched.items == ControllerInfo(1, 1)
            await lease_a.revoke()
            [gone] = await take(b.watch_controller(watched.revision + 1), 1)
            assert gone.kind is ChangeKind.DELETE and gone.controller is None

            claim_b = await b.try_become_controller(2, lease_b)
            assert isinstance(claim_b, ControllerClaim)
            assert claim_b.info == ControllerInfo(broker_id=2, epoch=2)
            assert (await a.controller()).items == ControllerInfo(2, 2)
            assert await a.controller_epoch() == 2
            await lease_b.revoke()

    run(scenario)


def test_controller_fails_over_when_its_lease_expires(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as a, store_for(etcd_server) as b:
            lease_a = await a.grant_lease(LEASE_TTL_S)
            lease_b = await b.grant_lease(LEASE_TTL_S)
            claim_a = await a.try_become_controller(1, lease_a)
            assert isinstance(claim_a, ControllerClaim)
            await a.create_topic(three_replica_topic(), controller=claim_a)
            start = (await b.controller()).revision + 1

            await lease_a.stop_keepalive()  # controller stalls: no more refreshes
            [gone] = await take(b.watch_controller(start), 1, timeout_s=EXPIRY_DEADLINE_S)
            assert gone.kind is ChangeKind.DELETE
            claim_b = await b.try_become_controller(2, lease_b)
            assert isinstance(claim_b, ControllerClaim)
            assert claim_b.info.epoch == claim_a.info.epoch + 1

            # the deposed controller's writes are fenced, even from a fresh read
            current = await a.partition("orders", 0)
            with pytest.raises(NotControllerError):
                await a.update_partition(
                    current, leader=2, leader_epoch=1, isr=(2, 3), controller=claim_a
                )
            with pytest.raises(NotControllerError):
                await a.create_topic(three_replica_topic("other"), controller=claim_a)
            with pytest.raises(NotControllerError):
                await a.set_topic_configs("orders", {"retention.ms": "1"}, controller=claim_a)
            assert (await b.partition("orders", 0)) == current
            # the new controller's write goes through
            update = await b.update_partition(
                current, leader=2, leader_epoch=1, isr=(2, 3), controller=claim_b
            )
            assert update.succeeded
            await lease_b.revoke()

    run(scenario)


def test_concurrent_candidates_elect_exactly_one_and_epochs_only_grow(
    etcd_server: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            epochs = []
            for _round in range(3):
                leases = [await store.grant_lease(LEASE_TTL_S) for _ in range(4)]
                outcomes = await asyncio.gather(
                    *(
                        store.try_become_controller(broker_id, lease)
                        for broker_id, lease in enumerate(leases)
                    )
                )
                claims = [o for o in outcomes if isinstance(o, ControllerClaim)]
                assert len(claims) == 1
                [winner] = claims
                losers = [o for o in outcomes if isinstance(o, ControllerInfo)]
                assert losers == [winner.info] * 3
                epochs.append(winner.info.epoch)
                for lease in leases:
                    await lease.revoke()
            assert epochs == [1, 2, 3]

    run(scenario)


def test_resigning_controller_frees_the_role(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            lease = await store.grant_lease(LEASE_TTL_S)
            claim = await store.try_become_controller(1, lease)
            assert isinstance(claim, ControllerClaim)
            assert await store.resign_controller(claim)
            assert not await store.resign_controller(claim)  # already gone: no-op
            again = await store.try_become_controller(1, lease)
            assert isinstance(again, ControllerClaim) and again.info.epoch == 2
            await lease.revoke()

    run(scenario)


# -- topics and partition state ---------------------------------------------------


def test_topic_creation_is_atomic_with_configs_and_partition_states(
    etcd_server: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            topic = three_replica_topic()
            await store.create_topic(topic, {"min.insync.replicas": "2"})
            assert (await store.topics()).items == {"orders": topic}
            assert await store.topic_configs("orders") == {"min.insync.replicas": "2"}
            states = (await store.partitions("orders")).items
            assert {key: v.state for key, v in states.items()} == {
                ("orders", 0): PartitionState(leader=1, leader_epoch=0, isr=(1, 2, 3)),
                ("orders", 1): PartitionState(leader=2, leader_epoch=0, isr=(2, 3, 1)),
            }
            with pytest.raises(TopicExistsError):
                await store.create_topic(three_replica_topic())
            await store.set_topic_configs("orders", {"retention.ms": "60000"})
            assert await store.topic_configs("orders") == {"retention.ms": "60000"}

            await store.delete_topic("orders")
            assert (await store.topics()).items == {}
            assert (await store.partitions()).items == {}
            for missing in (
                store.topic_configs("orders"),
                store.partition("orders", 0),
                store.delete_topic("orders"),
                store.set_topic_configs("orders", {}),
            ):
                with pytest.raises(UnknownTopicError):
                    await missing

    run(scenario)


def test_partition_cas_two_writers_one_wins_and_the_loser_sees_the_new_state(
    etcd_server: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as first, store_for(etcd_server) as second:
            await first.create_topic(three_replica_topic())
            read_by_first = await first.partition("orders", 0)
            read_by_second = await second.partition("orders", 0)
            assert read_by_first == read_by_second

            won = await first.update_partition(read_by_first, leader=2, leader_epoch=1, isr=(2, 3))
            assert won.succeeded and won.current is not None
            assert won.current.state == PartitionState(2, 1, (2, 3), partition_epoch=1)

            lost = await second.update_partition(read_by_second, leader=3, leader_epoch=1, isr=(3,))
            assert not lost.succeeded
            assert lost.current == won.current
            assert (await second.partition("orders", 0)) == won.current

            # deciding again on what it was handed, the loser succeeds
            assert lost.current is not None
            retried = await second.update_partition(
                lost.current, leader=3, leader_epoch=2, isr=(3,)
            )
            assert retried.succeeded and retried.current is not None
            assert retried.current.state == PartitionState(3, 2, (3,), partition_epoch=2)

    run(scenario)


def test_concurrent_partition_writers_never_lose_an_update(etcd_server: EtcdServer) -> None:
    """Each writer retries on conflict; the final epoch counts every success once."""

    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            await store.create_topic(three_replica_topic())
            successes = 0
            conflicts = 0

            async def bump_isr_five_times(member: int) -> None:
                nonlocal successes, conflicts
                done = 0
                current = await store.partition("orders", 0)
                while done < 5:
                    state = current.state
                    update = await store.update_partition(
                        current, leader=state.leader, leader_epoch=state.leader_epoch,
                        isr=(state.leader, member),
                    )  # fmt: skip
                    assert update.current is not None
                    current = update.current
                    if update.succeeded:
                        done += 1
                        successes += 1
                    else:
                        conflicts += 1

            await asyncio.gather(*(bump_isr_five_times(m) for m in (2, 3, 4)))
            final = await store.partition("orders", 0)
            assert successes == 15
            assert final.state.partition_epoch == 15

    run(scenario)


def test_partition_watch_delivers_every_change_in_order(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as writer, store_for(etcd_server) as reader:
            await writer.create_topic(three_replica_topic())
            snapshot = await reader.partitions("orders")
            watch = reader.watch_partitions(snapshot.revision + 1, topic="orders")

            current = snapshot.items["orders", 0]
            written = []
            for epoch in range(1, 6):
                leader = current.state.isr[epoch % 3]
                update = await writer.update_partition(
                    current, leader=leader, leader_epoch=epoch, isr=current.state.isr
                )
                assert update.succeeded and update.current is not None
                current = update.current
                written.append(current)
            await writer.delete_topic("orders")

            changes = await take(watch, 7)
            assert [c.state for c in changes[:5]] == written
            assert [(c.kind, c.topic, c.partition) for c in changes[5:]] == [
                (ChangeKind.DELETE, "orders", 0),
                (ChangeKind.DELETE, "orders", 1),
            ]
            revisions = [c.revision for c in changes[:5]]
            assert revisions == sorted(set(revisions))

    run(scenario)


def test_invalid_metadata_is_rejected() -> None:
    with pytest.raises(ValueError, match="not in the ISR"):
        PartitionState(leader=4, leader_epoch=0, isr=(1, 2))
    with pytest.raises(ValueError, match=r"0\.\.n-1"):
        TopicAssignment("t", uuid.uuid4(), {0: (1,), 2: (2,)})
    with pytest.raises(ValueError, match="repeats"):
        TopicAssignment("t", uuid.uuid4(), {0: (1, 1)})
    with pytest.raises(ValueError, match="invalid topic name"):
        TopicAssignment("a/b", uuid.uuid4(), {0: (1,)})
    with pytest.raises(ValueError, match="port"):
        BrokerInfo(1, "127.0.0.1", 0)
    with pytest.raises(ValueError, match="cluster name"):
        EtcdMetadataStore("127.0.0.1", 2379, cluster_name="a/b")


def test_leader_epoch_cannot_go_backwards(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            await store.create_topic(three_replica_topic())
            current = await store.partition("orders", 0)
            update = await store.update_partition(current, leader=2, leader_epoch=3, isr=(2,))
            assert update.current is not None
            with pytest.raises(ValueError, match="go back"):
                await store.update_partition(update.current, leader=1, leader_epoch=2, isr=(1,))

    run(scenario)


# -- etcd restart -------------------------------------------------------------------


def test_metadata_survives_an_etcd_restart_and_open_watches_report_the_loss(
    etcd_server: EtcdServer,
) -> None:
    async def before_crash() -> None:
        async with store_for(etcd_server) as store:
            lease = await store.grant_lease(LEASE_TTL_S)
            claim = await store.try_become_controller(1, lease)
            assert isinstance(claim, ControllerClaim)
            await store.create_topic(three_replica_topic(), {"cleanup.policy": "compact"})
            current = await store.partition("orders", 1)
            update = await store.update_partition(current, leader=3, leader_epoch=1, isr=(3, 1))
            assert update.succeeded
            await lease.revoke()

            snapshot = await store.partitions()
            watch = store.watch_partitions(snapshot.revision + 1)
            pending = asyncio.ensure_future(take(watch, 1, timeout_s=30.0))
            await asyncio.sleep(0.2)  # let the watch stream open before the crash
            await asyncio.to_thread(etcd_server.kill)
            with pytest.raises(MetadataWatchLost):
                await pending

    async def after_restart() -> None:
        async with store_for(etcd_server) as store:
            assert set((await store.topics()).items) == {"orders"}
            assert await store.topic_configs("orders") == {"cleanup.policy": "compact"}
            assert (await store.partition("orders", 1)).state == PartitionState(
                leader=3, leader_epoch=1, isr=(3, 1), partition_epoch=1
            )
            assert await store.controller_epoch() == 1
            lease = await store.grant_lease(LEASE_TTL_S)
            claim = await store.try_become_controller(2, lease)
            assert isinstance(claim, ControllerClaim) and claim.info.epoch == 2
            await lease.revoke()

    run(before_crash)
    etcd_server.start()
    run(after_restart)


def test_lease_keeper_reports_a_lease_revoked_behind_its_back(etcd_server: EtcdServer) -> None:
    """As when a broker stalls past its TTL: the next refresh finds the lease gone."""

    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            lease = await store.grant_lease(LEASE_TTL_S)
            await store.register_broker(BrokerInfo(5, "127.0.0.1", 19005), lease)
            async with aetcd.Client(*etcd_server.endpoint) as operator:
                await operator.revoke_lease(lease.lease_id)  # `etcdctl lease revoke`
            async with asyncio.timeout(EXPIRY_DEADLINE_S):
                await lease.lost.wait()
            assert (await store.brokers()).items == {}
            await lease.stop_keepalive()

    run(scenario)


def test_lease_is_reported_lost_when_etcd_cannot_confirm_it_for_a_ttl(
    etcd_server: EtcdServer,
) -> None:
    """A broker cut off from etcd (etcd paused: it may be leading without us, as
    behind a partition) must stop acting on its lease within one TTL."""

    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            lease = await store.grant_lease(LEASE_TTL_S)
            loop = asyncio.get_running_loop()
            os.kill(etcd_server.pid, signal.SIGSTOP)
            try:
                paused_at = loop.time()
                async with asyncio.timeout(EXPIRY_DEADLINE_S):
                    await lease.lost.wait()
                assert loop.time() - paused_at <= LEASE_TTL_S
            finally:
                os.kill(etcd_server.pid, signal.SIGCONT)
            await lease.stop_keepalive()

    run(scenario)


def test_lease_is_kept_while_etcd_is_down_and_refreshed_when_it_is_back(
    etcd_server: EtcdServer,
) -> None:
    """etcd not running at all (connections refused) has no leader to expire a lease,
    and a restarted etcd gives every lease a whole TTL: the keeper keeps it for an
    outage longer than the TTL, and etcd still has it afterwards. (A TTL longer than
    etcd's start-up: a member listening before it has a leader proves nothing.)"""
    ttl_s = 4

    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            lease = await store.grant_lease(ttl_s)
            await asyncio.to_thread(etcd_server.kill)
            await asyncio.sleep(1.5 * ttl_s)
            assert lease.alive() and not lease.lost.is_set()
            await asyncio.to_thread(etcd_server.start)
            async with asyncio.timeout(EXPIRY_DEADLINE_S):
                while True:
                    try:
                        info = await store._client.get_lease_info(lease.lease_id, keys=False)
                    except aetcd.exceptions.ConnectionFailedError:
                        # gRPC's channel may still be backing off from the outage: its
                        # first call after the restart fails without trying
                        info = None
                    if info is not None and info.TTL >= 0:
                        break
                    await asyncio.sleep(0.1)
            await asyncio.sleep(ttl_s * 1.5)  # longer than the TTL: refreshed
            info = await store._client.get_lease_info(lease.lease_id, keys=False)
            assert info.TTL > 0 and lease.alive()
            await lease.stop_keepalive()

    run(scenario)


def test_topic_watch_delivers_creations_and_deletions(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            start = (await store.topics()).revision + 1
            orders = three_replica_topic("orders")
            await store.create_topic(orders)
            await store.create_topic(three_replica_topic("payments", partitions=1))
            await store.delete_topic("orders")
            changes = await take(store.watch_topics(start), 3)
            assert [(c.kind, c.topic) for c in changes] == [
                (ChangeKind.PUT, "orders"),
                (ChangeKind.PUT, "payments"),
                (ChangeKind.DELETE, "orders"),
            ]
            assert changes[0].assignment == orders and changes[2].assignment is None

    run(scenario)


def test_cluster_snapshot_reads_everything_at_one_revision(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            lease = await store.grant_lease(LEASE_TTL_S)
            broker = BrokerInfo(1, "127.0.0.1", 19001, rack="r1")
            await store.register_broker(broker, lease)
            claim = await store.try_become_controller(1, lease)
            assert isinstance(claim, ControllerClaim)
            orders = three_replica_topic("orders", partitions=1)
            created = await store.create_topic(orders, {"retention.ms": "1000"}, controller=claim)
            current = await store.partition("orders", 0)
            update = await store.update_partition(
                current, leader=2, leader_epoch=1, isr=(2, 3), controller=claim
            )
            assert update.current is not None

            snapshot = await store.cluster()
            assert snapshot.items == ClusterMetadata(
                brokers={1: broker},
                controller=ControllerInfo(1, 1),
                controller_epoch=1,
                topics={"orders": orders},
                topic_configs={"orders": {"retention.ms": "1000"}},
                partitions={("orders", 0): update.current},
                topic_revisions={"orders": created},
            )
            assert snapshot.revision == update.current.mod_revision
            await lease.revoke()
            after = (await store.cluster()).items
            assert after.brokers == {} and after.controller is None
            assert after.controller_epoch == 1 and set(after.topics) == {"orders"}

    run(scenario)


def test_cluster_watch_orders_changes_of_every_kind(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            start = (await store.cluster()).revision + 1
            lease = await store.grant_lease(LEASE_TTL_S)
            await store.register_broker(BrokerInfo(1, "127.0.0.1", 19001), lease)
            claim = await store.try_become_controller(1, lease)
            assert isinstance(claim, ControllerClaim)
            orders = TopicAssignment("orders", uuid.uuid4(), {0: (1,)})
            await store.create_topic(orders, {"retention.ms": "5"}, controller=claim)
            await store.set_topic_configs("orders", {}, controller=claim)
            await lease.revoke()

            changes = await take(store.watch_cluster(start), 8)
            assert [type(c).__name__ + ":" + c.kind.value for c in changes] == [
                "BrokerChange:put",
                "ControllerChange:put",  # its epoch counter is folded in, not reported
                "TopicChange:put",  # one transaction: topic, configs, partitions
                "TopicConfigChange:put",
                "PartitionChange:put",
                "TopicConfigChange:put",
                "BrokerChange:delete",  # one lease: registration and controller role
                "ControllerChange:delete",
            ]
            assert isinstance(changes[3], TopicConfigChange)
            assert changes[3].configs == {"retention.ms": "5"}
            assert isinstance(changes[4], PartitionChange) and changes[4].state is not None
            assert changes[4].state.state == PartitionState(1, 0, (1,))
            revisions = [c.revision for c in changes]
            assert revisions == sorted(revisions)

    run(scenario)


def test_an_ended_lease_cannot_register_or_campaign(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            lease = await store.grant_lease(LEASE_TTL_S)
            await lease.revoke()
            with pytest.raises(LeaseLost):
                await store.register_broker(BrokerInfo(1, "127.0.0.1", 19001), lease)
            with pytest.raises(LeaseLost):
                await store.try_become_controller(1, lease)
            assert (await store.cluster()).items.brokers == {}
            assert await store.controller_epoch() == 0

    run(scenario)


def test_closing_the_store_lets_its_leases_expire(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as observer:
            start = (await observer.brokers()).revision + 1
            async with store_for(etcd_server) as leaving:
                lease = await leaving.grant_lease(LEASE_TTL_S)
                await leaving.register_broker(BrokerInfo(9, "127.0.0.1", 19009), lease)
            changes = await take(observer.watch_brokers(start), 2, timeout_s=EXPIRY_DEADLINE_S)
            assert [(c.kind, c.broker_id) for c in changes] == [
                (ChangeKind.PUT, 9),
                (ChangeKind.DELETE, 9),
            ]

    run(scenario)


# -- topic assignment: reassignment and added partitions --------------------------


def test_old_topic_values_decode_without_reassignment_and_encode_unchanged() -> None:
    topic_id = uuid.uuid4()
    old = f'{{"replicas":{{"0":[1,2],"1":[2,3]}},"topic_id":"{topic_id}"}}'.encode()
    decoded = TopicAssignment.decode("t", old)
    assert decoded == TopicAssignment("t", topic_id, {0: (1, 2), 1: (2, 3)})
    assert decoded.adding == {} and decoded.removing == {}
    assert decoded.encode() == old  # a topic not being reassigned keeps its bytes
    moving = TopicAssignment(
        "t", topic_id, {0: (3, 1, 2), 1: (2, 3)}, adding={0: (3,)}, removing={0: (1,), 1: ()}
    )
    assert moving.removing == {0: (1,)}  # empty entries are dropped
    assert TopicAssignment.decode("t", moving.encode()) == moving
    assert moving.is_reassigning(0) and not moving.is_reassigning(1)


@pytest.mark.parametrize(
    ("adding", "removing", "match"),
    [
        ({0: (4,)}, {}, "must be replicas"),
        ({5: (1,)}, {}, "does not exist"),
        ({0: (1,)}, {0: (1,)}, "added and removed"),
        ({}, {0: (1, 2)}, "at least one replica"),
    ],
)
def test_invalid_reassignment_fields_are_rejected(
    adding: dict[int, tuple[int, ...]], removing: dict[int, tuple[int, ...]], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        TopicAssignment("t", uuid.uuid4(), {0: (1, 2)}, adding=adding, removing=removing)


def test_topic_assignment_cas_carries_a_reassignment_to_every_reader(
    etcd_server: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store, store_for(etcd_server) as rival:
            orders = TopicAssignment("orders", uuid.uuid4(), {0: (1, 2), 1: (2, 3)})
            created = await store.create_topic(orders)
            read = await store.topic("orders")
            assert read.assignment == orders and read.mod_revision == created

            moving = start_reassignment(orders.replicas[0], (3, 4), live={1, 2, 3, 4})
            reassigning = moving.applied_to(orders, 0)
            assert reassigning == TopicAssignment(
                "orders",
                orders.topic_id,
                {0: (3, 4, 1, 2), 1: (2, 3)},
                adding={0: (3, 4)},
                removing={0: (1, 2)},
            )
            won = await store.update_topic_assignment(reassigning, expected_revision=created)
            assert won.succeeded and won.current is not None
            assert won.current.assignment == reassigning
            assert won.current.mod_revision > created

            # a writer that read before the change loses and is handed what is stored
            stale = TopicAssignment("orders", orders.topic_id, {0: (2, 1), 1: (2, 3)})
            lost = await rival.update_topic_assignment(stale, expected_revision=created)
            assert not lost.succeeded and lost.current == won.current

            assert (await rival.topics()).items["orders"] == reassigning
            snapshot = await rival.cluster()
            assert snapshot.items.topics["orders"] == reassigning
            assert snapshot.items.topic_revisions["orders"] == won.current.mod_revision
            [change] = await take(rival.watch_topics(won.current.mod_revision), 1)
            assert isinstance(change, TopicChange) and change.assignment == reassigning
            assert Reassignment.of(change.assignment, 0) == moving
            assert Reassignment.of(change.assignment, 1) == Reassignment((2, 3), (), ())

            # everything caught up: the reassignment completes with one more CAS
            state = await store.partition("orders", 0)
            caught_up = await store.update_partition(
                state, leader=1, leader_epoch=0, isr=(1, 2, 3, 4)
            )
            assert caught_up.current is not None
            replicas, new_state = reassignment_progress(moving, caught_up.current.state, {3, 4})
            assert replicas == (3, 4) and new_state is not None
            done = await store.update_topic_assignment(
                Reassignment(replicas, (), ()).applied_to(reassigning, 0),
                expected_revision=won.current.mod_revision,
            )
            assert done.succeeded and done.current is not None
            assert done.current.assignment == TopicAssignment(
                "orders", orders.topic_id, {0: (3, 4), 1: (2, 3)}
            )
            assert not done.current.assignment.is_reassigning(0)

            await store.delete_topic("orders")
            gone = await store.update_topic_assignment(
                orders, expected_revision=done.current.mod_revision
            )
            assert gone == TopicUpdate(False, None)
            with pytest.raises(UnknownTopicError):
                await store.topic("orders")

    run(scenario)


def test_topic_assignment_update_adds_partition_states_atomically(
    etcd_server: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            orders = TopicAssignment("orders", uuid.uuid4(), {0: (1, 2)})
            created = await store.create_topic(orders)
            grown = TopicAssignment("orders", orders.topic_id, {0: (1, 2), 1: (2, 1), 2: (1, 2)})
            added = {1: PartitionState(2, 0, (2, 1)), 2: PartitionState(1, 0, (1, 2))}
            update = await store.update_topic_assignment(
                grown, expected_revision=created, added_partition_states=added
            )
            assert update.succeeded and update.current is not None
            states = (await store.partitions("orders")).items
            assert {p: v.state for (_, p), v in states.items()} == {
                0: PartitionState(1, 0, (1, 2)),
                **added,
            }
            assert {v.mod_revision for (_, p), v in states.items() if p > 0} == {
                update.current.mod_revision
            }
            with pytest.raises(ValueError, match="does not have"):
                await store.update_topic_assignment(
                    grown,
                    expected_revision=update.current.mod_revision,
                    added_partition_states={7: PartitionState(1, 0, (1,))},
                )

    run(scenario)


def test_topic_assignment_update_is_fenced_by_the_controller_claim(
    etcd_server: EtcdServer,
) -> None:
    async def scenario() -> None:
        async with store_for(etcd_server) as store:
            lease = await store.grant_lease(LEASE_TTL_S)
            claim = await store.try_become_controller(1, lease)
            assert isinstance(claim, ControllerClaim)
            orders = TopicAssignment("orders", uuid.uuid4(), {0: (1, 2)})
            created = await store.create_topic(orders, controller=claim)
            reordered = TopicAssignment("orders", orders.topic_id, {0: (2, 1)})
            update = await store.update_topic_assignment(
                reordered, expected_revision=created, controller=claim
            )
            assert update.succeeded and update.current is not None

            await lease.revoke()  # deposed: even a current revision is refused
            with pytest.raises(NotControllerError):
                await store.update_topic_assignment(
                    orders, expected_revision=update.current.mod_revision, controller=claim
                )
            assert (await store.topic("orders")).assignment == reordered

    run(scenario)
