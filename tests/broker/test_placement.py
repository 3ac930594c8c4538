"""A broker keeps logs only for the partitions placed on it (issue 21, item 6).

In a cluster the ClusterNode hands TopicManager.adopt the partitions with a replica
here: only those get a directory and a log; one moved away (a completed
reassignment) has its files deleted, as Kafka's StopReplica with delete; the placement
is journaled, so a restart opens the same logs and recreates nothing.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from odradek.broker.config import BrokerConfig
from odradek.broker.topics import TopicManager
from odradek.protocol.errors import ErrorCode

TOPIC_ID = uuid.uuid4()


def _dirs(data: Path, topic: str) -> list[str]:
    return sorted(p.name for p in data.iterdir() if p.is_dir() and p.name.startswith(topic + "-"))


def test_only_hosted_partitions_have_logs_and_moved_away_ones_are_deleted(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        manager = TopicManager(tmp_path, BrokerConfig())
        try:
            topic = await manager.adopt("t", TOPIC_ID, 6, {}, frozenset({0, 3}))
            assert topic.hosted() == [0, 3] and len(topic.partitions) == 6
            assert _dirs(tmp_path, "t") == ["t-0", "t-3"]
            assert manager.partition("t", 1) is None and manager.has_partition("t", 1)
            assert manager.absent_error("t", 1) == ErrorCode.NOT_LEADER_OR_FOLLOWER
            assert manager.absent_error("t", 6) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            kept = manager.partition("t", 3)
            assert kept is not None

            # A reassignment moved 0 away and brought 4 here; 3 stays, the same log.
            await manager.adopt("t", TOPIC_ID, 6, {}, frozenset({3, 4}))
            assert topic.hosted() == [3, 4] and manager.partition("t", 3) is kept
            assert _dirs(tmp_path, "t") == ["t-3", "t-4"]

            # Growth opens only the new partitions placed here.
            await manager.adopt("t", TOPIC_ID, 8, {}, frozenset({3, 4, 7}))
            assert len(topic.partitions) == 8 and topic.hosted() == [3, 4, 7]
            assert _dirs(tmp_path, "t") == ["t-3", "t-4", "t-7"]
        finally:
            manager.close()

    asyncio.run(scenario())
    reopened = TopicManager(tmp_path, BrokerConfig())  # the placement was journaled
    try:
        topic = reopened.get("t")
        assert topic is not None
        assert topic.hosted() == [3, 4, 7] and len(topic.partitions) == 8
        assert _dirs(tmp_path, "t") == ["t-3", "t-4", "t-7"]
    finally:
        reopened.close()


def test_a_lone_node_still_hosts_every_partition(tmp_path: Path) -> None:
    manager = TopicManager(tmp_path, BrokerConfig())
    try:
        topic = manager.create("lone", 4)
        assert topic.hosted() == [0, 1, 2, 3]
        assert _dirs(tmp_path, "lone") == ["lone-0", "lone-1", "lone-2", "lone-3"]
    finally:
        manager.close()
