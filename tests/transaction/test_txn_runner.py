"""The transaction coordinator runner (the I/O shell) against a real ``__transaction_state``
log and a scripted marker writer: what a reload does to marker jobs in flight."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

from odradek.broker.txn_runtime import WRITTEN, TxnRunner
from odradek.log import LogConfig, PartitionLog
from odradek.replication.replica import ReplicaManager
from odradek.replication.writer import ReplicaWriter
from odradek.transaction import TxnConfig
from odradek.transaction.state import TxnState
from odradek.transaction.types import (
    AddPartitionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
    TopicPartition,
)


class Ids:
    def __init__(self) -> None:
        self._ids = itertools.count(1000)

    def next_producer_id(self) -> int:
        return next(self._ids)


async def _until(check: object, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not check():  # type: ignore[operator]
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


def test_a_reload_leaves_no_marker_job_of_the_previous_load_running(tmp_path: Path) -> None:
    """A marker job still retrying when the runner reloads must stop: the reloaded shard
    writes the markers again, completes the transaction, and the producer (same id and
    epoch) may open the next one in that partition; the old job's late COMMIT marker would
    then close the new transaction as committed (Kafka drops such markers by their
    coordinator epoch)."""

    async def scenario() -> None:
        plog = PartitionLog.open(tmp_path / "txn", LogConfig(), now_ms=lambda: 1_000_000)
        txn_id = "reloaded"
        broken = {("t", 1)}
        late: list[TopicPartition] = []
        failures: list[TopicPartition] = []

        async def write_marker(tp: TopicPartition, pid: int, epoch: int, commit: bool) -> None:
            if tp in broken:
                failures.append(tp)
                raise OSError("partition unavailable")
            meta = runner.shard.txns.get(txn_id)
            if meta is None or not meta.state.preparing:
                late.append(tp)  # a marker for a transaction that is already complete

        replicas = ReplicaManager(
            1,
            min_insync=lambda _topic: 1,
            lag_time_max_s=30,
            propose_isr=lambda _replica, _isr: None,
            wake=lambda _topic, _partition: None,
        )
        replicas.lead_alone("__transaction_state", 0, plog)
        runner = TxnRunner(
            0,
            ReplicaWriter(replicas, "__transaction_state", 0, plog),
            TxnConfig(num_partitions=1),
            producer_ids=Ids(),
            write_marker=write_marker,
        )
        runner.become_leader()
        try:
            await _until(lambda: runner.loaded, "the load")
            init = await runner.call(InitProducerIdRequest(txn_id, 60_000))
            pid, epoch = init.producer_id, init.producer_epoch  # type: ignore[union-attr]
            parts = (("t", 0), ("t", 1))
            added = await runner.call(AddPartitionsRequest(txn_id, pid, epoch, parts))
            assert added.error_code == 0
            ended = await runner.call(EndTxnRequest(txn_id, pid, epoch, True))
            assert ended.error_code == 0
            first_jobs = set(runner._marker_tasks)
            assert first_jobs
            # Its retries back off: after 5 failures the job sleeps 1.6 s before the next.
            await _until(lambda: len(failures) >= 5, "the job's retries")
            # A failure that makes the runner reload its partition from the log.
            runner.enqueue(WRITTEN, None)
            await _until(lambda: runner.reloads == 1 and runner.loaded, "the reload")
            broken.clear()
            done = (TxnState.COMPLETE_COMMIT,)
            await _until(lambda: runner.shard.txns[txn_id].state in done, "the completion")
            # The previous load's job has no business writing anything any more.
            await asyncio.wait_for(asyncio.gather(*first_jobs, return_exceptions=True), timeout=20)
            assert late == []
        finally:
            await runner.stop()
            plog.close()

    asyncio.run(scenario())
