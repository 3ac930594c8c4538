"""A topic change etcd refuses or cannot take is answered with a Kafka error code for
that topic; the other topics of the request, and the connection, are unaffected.

Before, an aetcd error escaped ClusterNode.create_topics: the CreateTopics handler
raised and the broker closed the connection (issue 21, item 3).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aetcd.exceptions
import pytest

from odradek.broker.config import BrokerConfig
from odradek.cluster.node import ClusterNode
from odradek.devcluster.etcd_server import EtcdServer
from odradek.protocol.apikeys import ApiKey
from odradek.wiring import new_broker

from ..broker.wire import WireClient

REQUEST_TIMED_OUT = 7
UNKNOWN_SERVER_ERROR = -1


def _topic(name: str, partitions: int = 1) -> dict[str, Any]:
    return {
        "name": name,
        "num_partitions": partitions,
        "replication_factor": 1,
        "assignments": [],
        "configs": [],
    }


def test_etcd_refusing_a_topic_answers_an_error_code_for_that_topic(
    etcd_server: EtcdServer, tmp_path: Path
) -> None:
    host, port = etcd_server.endpoint

    async def scenario() -> tuple[Any, Any, Any]:
        config = BrokerConfig({"etcd.endpoints": f"{host}:{port}", "node.id": "1"})
        broker = new_broker(tmp_path / "data", config, port=0)
        await broker.start()
        try:
            node = broker.control
            assert isinstance(node, ClusterNode)
            create, grow = node.store.create_topic, node.store.update_topic_assignment

            async def refusing_create(assignment: Any, configs: Any) -> int:
                if assignment.name == "refused":
                    raise aetcd.exceptions.InvalidArgumentError(
                        "etcdserver: too many operations in txn request"
                    )
                if assignment.name == "unreachable":
                    raise aetcd.exceptions.ConnectionFailedError("etcd is down")
                return await create(assignment, configs)

            async def unreachable_grow(*args: Any, **kwargs: Any) -> Any:
                raise aetcd.exceptions.ConnectionTimeoutError("etcd did not answer")

            node.store.create_topic = refusing_create  # type: ignore[method-assign]
            bootstrap = f"127.0.0.1:{broker.port}"
            with WireClient(bootstrap, 30) as client:
                created = await asyncio.to_thread(
                    client.request,
                    ApiKey.CREATE_TOPICS,
                    7,
                    {
                        "topics": [_topic("refused"), _topic("fine"), _topic("unreachable")],
                        "timeout": 30000,
                        "validate_only": False,
                    },
                )
                node.store.update_topic_assignment = unreachable_grow  # type: ignore[method-assign]
                grown = await asyncio.to_thread(
                    client.request,
                    ApiKey.CREATE_PARTITIONS,
                    3,
                    {
                        "topics": [{"name": "fine", "count": 3, "assignments": None}],
                        "timeout": 30000,
                        "validate_only": False,
                    },
                )
                node.store.update_topic_assignment = grow  # type: ignore[method-assign]
                regrown = await asyncio.to_thread(
                    client.request,
                    ApiKey.CREATE_PARTITIONS,
                    3,
                    {
                        "topics": [{"name": "fine", "count": 3, "assignments": None}],
                        "timeout": 30000,
                        "validate_only": False,
                    },
                )
            return created, grown, regrown
        finally:
            await broker.stop()

    created, grown, regrown = asyncio.run(asyncio.wait_for(scenario(), 90))
    outcome = {t.name: (int(t.error_code), t.error_message) for t in created.topics}
    assert outcome["fine"] == (0, None)
    assert outcome["refused"][0] == UNKNOWN_SERVER_ERROR
    assert "too many operations" in outcome["refused"][1]
    assert outcome["unreachable"][0] == REQUEST_TIMED_OUT  # retriable: etcd may come back
    ((name, code),) = [(r.name, int(r.error_code)) for r in grown.results]
    assert (name, code) == ("fine", REQUEST_TIMED_OUT)
    assert [int(r.error_code) for r in regrown.results] == [0]  # the same connection goes on


@pytest.mark.parametrize(
    ("failure", "code"),
    [
        (aetcd.exceptions.ConnectionFailedError("down"), REQUEST_TIMED_OUT),
        (aetcd.exceptions.ConnectionTimeoutError("slow"), REQUEST_TIMED_OUT),
        (TimeoutError(), REQUEST_TIMED_OUT),
        (aetcd.exceptions.InvalidArgumentError("too many operations"), UNKNOWN_SERVER_ERROR),
        (aetcd.exceptions.InternalError("boom"), UNKNOWN_SERVER_ERROR),
    ],
)
def test_metadata_failures_map_to_kafka_codes(failure: BaseException, code: int) -> None:
    from odradek.cluster.node import _metadata_failure

    assert _metadata_failure(failure).error_code == code
