"""Groups nobody uses expire, as Kafka's do: junk from anonymous JoinGroups does not pile up.

A JoinGroup without a member id (v4+) registers a pending member and creates
the group; if that client never comes back, the member expires after its
session timeout, the group is Empty with no offsets, and the next retention
check (`offsets.retention.check.interval.ms`) deletes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from odradek.protocol.apikeys import ApiKey

from ..broker.wire import WireClient
from .helpers import LimitedBroker

MEMBER_ID_REQUIRED = 79


def group_ids(client: WireClient) -> set[str]:
    response = client.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
    return {g.group_id for g in response.groups}


def test_groups_created_by_anonymous_joins_expire(
    start_broker: Callable[..., LimitedBroker],
) -> None:
    broker = start_broker(
        settings={
            "group.min.session.timeout.ms": "500",
            "offsets.retention.check.interval.ms": "500",
        }
    )
    junk = [f"junk-{i}" for i in range(20)]
    with WireClient(broker.bootstrap) as client:
        for group in junk:
            joined = client.request(
                ApiKey.JOIN_GROUP,
                5,
                {
                    "group_id": group,
                    "session_timeout": 1000,
                    "rebalance_timeout": 1000,
                    "member_id": "",
                    "group_instance_id": None,
                    "protocol_type": "consumer",
                    "protocols": [{"name": "range", "metadata": b""}],
                },
            )
            assert joined.error_code == MEMBER_ID_REQUIRED
        assert set(junk) <= group_ids(client)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and set(junk) & group_ids(client):
            time.sleep(0.2)
        assert not set(junk) & group_ids(client), "junk groups never expired"
