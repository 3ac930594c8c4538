"""Raw Produce / Fetch / ListOffsets on the wire and process probes, for the log-layer
reliability tests (``test_log_*``, ``test_batches_*``)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from odradek.protocol.apikeys import ApiKey
from odradek.testing import BrokerProcess

from ..broker.wire import WireClient

PRODUCE_VERSION = 8
FETCH_VERSION = 11
LIST_OFFSETS_VERSION = 5
LATEST = -1


@dataclass(frozen=True)
class Produced:
    error_code: int
    base_offset: int
    error_message: str | None


@pytest.fixture
def log_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of its own (these tests read its memory, files and restart it)."""
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        yield broker
    finally:
        broker.kill()


def produce(client: WireClient, topic: str, records: bytes, partition: int = 0) -> Produced:
    response = client.request(
        ApiKey.PRODUCE,
        PRODUCE_VERSION,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 30_000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    part = response.responses[0].partition_responses[0]
    return Produced(int(part.error_code), int(part.base_offset), part.error_message)


def fetch(
    client: WireClient, topic: str, offset: int, *, partition: int = 0, max_bytes: int = 1 << 20
) -> Any:
    """One partition's Fetch response (no wait)."""
    response = client.request(
        ApiKey.FETCH,
        FETCH_VERSION,
        {
            "replica_id": -1,
            "max_wait": 0,
            "min_bytes": 1,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": max_bytes,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    return response.responses[0].partitions[0]


def list_offset(client: WireClient, topic: str, timestamp: int, partition: int = 0) -> Any:
    """ListOffsets for one partition: LATEST (-1), EARLIEST (-2) or a timestamp."""
    response = client.request(
        ApiKey.LIST_OFFSETS,
        LIST_OFFSETS_VERSION,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {
                            "partition_index": partition,
                            "current_leader_epoch": -1,
                            "timestamp": timestamp,
                        }
                    ],
                }
            ],
        },
    )
    return response.topics[0].partitions[0]


def create_topic(client: WireClient, topic: str, partitions: int = 1, **configs: str) -> None:
    response = client.request(
        ApiKey.CREATE_TOPICS,
        5,
        {
            "topics": [
                {
                    "name": topic,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [
                        {"name": k.replace("_", "."), "value": v} for k, v in configs.items()
                    ],
                }
            ],
            "timeout": 30_000,
            "validate_only": False,
        },
    )
    result = response.topics[0]
    assert result.error_code == 0, result.error_message


def proc_status_kib(pid: int, field: str) -> int:
    """A kB field of /proc/<pid>/status (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def open_files(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))
