"""The etcd store's read-modify-write documents: producer-id blocks and the
cluster-wide security documents, under concurrent writers (real etcd)."""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.cluster.metadata import EtcdMetadataStore
from odradek.devcluster.etcd_server import EtcdServer
from odradek.replication.model import SecurityChange

DEADLINE_S = 60.0


def run(scenario: Any) -> None:
    asyncio.run(asyncio.wait_for(scenario, DEADLINE_S))


def test_producer_id_blocks_never_overlap(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        stores = [EtcdMetadataStore(*etcd_server.endpoint) for _ in range(3)]
        for store in stores:
            await store.__aenter__()
        try:
            firsts = await asyncio.gather(
                *(store.allocate_producer_ids(1000) for store in stores for _ in range(10))
            )
        finally:
            for store in stores:
                await store.close()
        assert sorted(firsts) == [1000 * i for i in range(30)]

    run(scenario())


def test_security_edits_compose_and_are_watched(etcd_server: EtcdServer) -> None:
    async def scenario() -> None:
        async with (
            EtcdMetadataStore(*etcd_server.endpoint) as a,
            EtcdMetadataStore(*etcd_server.endpoint) as b,
        ):
            start = (await a.cluster()).revision

            def adding(entry: str) -> Any:
                def change(current: dict[str, Any] | None) -> dict[str, Any]:
                    return {"acls": [*(current or {}).get("acls", []), entry]}

                return change

            await asyncio.gather(
                *(
                    store.update_security("acls", adding(f"{i}"))
                    for i, store in enumerate([a, b] * 10)
                )
            )
            snapshot = await a.cluster()
            assert sorted(snapshot.items.security["acls"]["acls"]) == sorted(
                f"{i}" for i in range(20)
            )
            changes = []
            async for change in a.watch_cluster(start + 1):
                if isinstance(change, SecurityChange):
                    changes.append(change)
                if len(changes) == 20:
                    break
            assert [len(c.document["acls"]) for c in changes] == list(range(1, 21))

    run(scenario())


def test_producer_id_blocks_refill_and_say_when_none_is_reserved(etcd_server: EtcdServer) -> None:
    from odradek.broker.control_plane import ProducerIdsUnavailable
    from odradek.cluster.node import PRODUCER_ID_BLOCK, ProducerIdBlocks

    async def scenario() -> None:
        async with EtcdMetadataStore(*etcd_server.endpoint) as store:
            blocks = ProducerIdBlocks(store)
            try:
                blocks.next_id()  # nothing reserved yet: retriable, a refill starts
            except ProducerIdsUnavailable:
                pass
            else:
                raise AssertionError("an id before any block was reserved")
            await blocks.refilled()  # the refill it started
            await blocks.prime()
            ids = [blocks.next_id() for _ in range(PRODUCER_ID_BLOCK + 600)]  # starts a refill
            await blocks.refilled()
            ids += [blocks.next_id() for _ in range(PRODUCER_ID_BLOCK)]  # on the refilled block
        assert len(set(ids)) == len(ids), "no id handed out twice"

    run(scenario())
