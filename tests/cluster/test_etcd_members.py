"""The metadata store against a 3-member etcd cluster: failover between the endpoints
it is given, and the membership check that the "every member down" reasoning of the
lease keeper needs (odradek.cluster.lease_deadline)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import aetcd.exceptions
import pytest

from odradek.cluster.metadata import EtcdMetadataStore
from odradek.devcluster.etcd_server import EtcdServer, etcd_members, start_members

START_TIMEOUT_S = 30.0
# A member's kill may cost an etcd election (about a second) plus the channel's reconnect
# before a keep-alive succeeds again: with 3 s (2.5 s to act) a loaded machine missed it
# once; 6 s leaves the lease keeper 5 s.
LEASE_TTL_S = 6
DEADLINE_S = 20.0


@pytest.fixture
def members(tmp_path: Path) -> Iterator[list[EtcdServer]]:
    servers = etcd_members(tmp_path / "etcd", 3)
    start_members(servers, START_TIMEOUT_S)
    try:
        yield servers
    finally:
        for server in servers:
            server.kill()


def test_a_store_fails_over_to_the_next_member_and_keeps_its_lease(
    members: list[EtcdServer],
) -> None:
    async def scenario() -> None:
        endpoints = [m.endpoint for m in members]
        async with EtcdMetadataStore.for_endpoints(endpoints, cluster_name="c") as store:
            assert store.every_member_listed
            lease = await store.grant_lease(LEASE_TTL_S)
            await asyncio.to_thread(members[0].kill)  # the member the channel uses
            async with asyncio.timeout(DEADLINE_S):
                # Answered by another member; if the killed one led, the others answer
                # "leader changed" until they have elected one (as the lease keeper does,
                # retry that).
                while True:
                    try:
                        assert await store.controller_epoch() == 0
                        break
                    except aetcd.exceptions.ConnectionFailedError as exc:
                        assert "leader changed" in str(exc), exc
                        await asyncio.sleep(0.1)
            await asyncio.sleep(LEASE_TTL_S * 1.5)
            assert lease.alive() and not lease.lost.is_set()
            info = await store._client.get_lease_info(lease.lease_id, keys=False)
            assert info.TTL > 0
            assert not await store.all_members_down()  # two of three still run
            await lease.revoke()

    asyncio.run(scenario())


def test_an_endpoint_list_missing_members_never_counts_as_every_member_down(
    members: list[EtcdServer],
) -> None:
    """Given one member of three, a refused connection there does not mean etcd has no
    leader (the others may expire the lease): the keeper must not ride it out."""

    async def scenario() -> None:
        async with EtcdMetadataStore(*members[0].endpoint, cluster_name="c") as store:
            assert not store.every_member_listed
            assert sorted(await store.check_membership()) == sorted(m.name for m in members[1:])
            await asyncio.to_thread(members[0].kill)
            assert not await store.all_members_down()

    asyncio.run(scenario())
