"""A coordinator partition unloaded (its broker lost the leadership) with requests
still queued for its serial executor: every one of them must be answered
NOT_COORDINATOR, so the client looks for the new coordinator at once.

Seen in the fault suite (seed 9, soak, a loaded machine): a broker's event loop
stalled long enough for its lease to expire while two consumers' JoinGroup requests
waited in the queue; the partition was unloaded and those requests were never
answered, so the consumers waited out their JoinGroup timeout (the rebalance
timeout, minutes) and the group stayed at one member.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from odradek.broker.group_runtime import GroupRunner
from odradek.coordinator import CoordinatorConfig, ErrorCode
from odradek.coordinator.types import HeartbeatRequest, JoinGroupRequest
from odradek.log import LogConfig, PartitionLog
from odradek.replication.replica import ReplicaManager
from odradek.replication.writer import ReplicaWriter

ANSWER_TIMEOUT_S = 5.0


def join_request(group: str) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        member_id="",
        group_instance_id=None,
        client_id="c",
        client_host="/127.0.0.1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=60_000,
        protocol_type="consumer",
        protocols=(("range", b""),),
    )


def test_requests_queued_when_the_partition_is_unloaded_are_answered(tmp_path: Path) -> None:
    plog = PartitionLog.open(
        tmp_path / "__consumer_offsets-0", LogConfig(), now_ms=lambda: int(time.time() * 1000)
    )
    replicas = ReplicaManager(
        1,
        min_insync=lambda _topic: 1,
        lag_time_max_s=30,
        propose_isr=lambda _replica, _isr: None,
        wake=lambda _topic, _partition: None,
    )
    replicas.lead_alone("__consumer_offsets", 0, plog)
    writer = ReplicaWriter(replicas, "__consumer_offsets", 0, plog)
    runner = GroupRunner(0, writer, CoordinatorConfig())

    async def scenario() -> list[int]:
        runner.become_leader()
        while not runner.loaded:
            await asyncio.sleep(0.01)
        calls = [
            asyncio.create_task(runner.call(join_request("g"))),
            asyncio.create_task(runner.call(HeartbeatRequest("g", 1, "m"))),
        ]
        await asyncio.sleep(0)  # both queued; the executor has not taken them yet
        await runner.resign()
        responses = await asyncio.wait_for(asyncio.gather(*calls), ANSWER_TIMEOUT_S)
        return [r.error_code for r in responses]

    try:
        codes = asyncio.run(scenario())
    finally:
        plog.close()
    assert codes == [ErrorCode.NOT_COORDINATOR, ErrorCode.NOT_COORDINATOR]
