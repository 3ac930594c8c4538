"""A coordinator partition as its runner sees it, over the replica manager (Kafka's
CoordinatorPartitionWriter): ``broker.coordinator_runtime.PartitionWriter``.

Appends go through `ReplicaManager.append` as the partition's leader (NotLeaderError,
nothing written, when this broker does not lead it); the high watermark is the
replica's; listeners are kept by the manager for the partition and told each time
its high watermark moves: on a lone node by the append itself, in a cluster by the
followers' fetches. Nothing looks the runner up by topic name.
"""

from __future__ import annotations

from collections.abc import Iterator

from odradek.log import AppendInfo, PartitionLog
from odradek.replication.replica import HighWatermarkListener, NotLeaderError, ReplicaManager


class ReplicaWriter:
    """One coordinator partition's writer (see the module docstring)."""

    def __init__(
        self, manager: ReplicaManager, topic: str, partition: int, plog: PartitionLog
    ) -> None:
        self._manager = manager
        self._topic = topic
        self._partition = partition
        self._plog = plog

    @property
    def max_message_bytes(self) -> int:
        return self._plog.config.max_message_bytes

    @property
    def end_offset(self) -> int:
        return self._plog.end_offset

    @property
    def high_watermark(self) -> int:
        replica = self._manager.get(self._topic, self._partition)
        return replica.high_watermark if replica is not None else 0

    def append(self, batch: bytes) -> AppendInfo:
        replica = self._manager.get(self._topic, self._partition)
        if replica is None:
            raise NotLeaderError(f"{self._topic}-{self._partition} is not hosted here")
        return self._manager.append(replica, batch, from_client=False)

    def batches(self) -> Iterator[bytes | bytearray]:
        return self._plog.iter_batches_from(self._plog.start_offset)

    def add_listener(self, listener: HighWatermarkListener) -> None:
        self._manager.add_listener(self._topic, self._partition, listener)

    def remove_listener(self, listener: HighWatermarkListener) -> None:
        self._manager.remove_listener(self._topic, self._partition, listener)
