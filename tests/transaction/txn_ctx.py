"""Test context for the transaction coordinator core: a manual monotonic clock and wall
clock, a timer fired on ``sleep``, and a log of every ``__transaction_state`` record,
replayed into the shard as the runtime does. Marker jobs wait in ``marker_jobs`` until
``write_markers`` "writes" them (into ``markers``) and reports them written."""

from __future__ import annotations

from dataclasses import dataclass, field

from odradek.coordinator.types import CoordinatorRecord, Result
from odradek.transaction import TransactionCoordinatorShard, TxnConfig
from odradek.transaction.types import (
    AddPartitionsRequest,
    AddPartitionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    MarkerJob,
    Request,
    Response,
    TxnEvent,
)


class ManualTimer:
    def __init__(self) -> None:
        self.deadlines: dict[str, int] = {}

    def schedule(self, key: str, deadline_ms: int) -> None:
        self.deadlines[key] = deadline_ms

    def cancel(self, key: str) -> None:
        self.deadlines.pop(key, None)

    def pop_due(self, now_ms: int) -> tuple[str, int] | None:
        due = sorted((d, k) for k, d in self.deadlines.items() if d <= now_ms)
        if not due:
            return None
        deadline, key = due[0]
        del self.deadlines[key]
        return key, deadline


class CountingIds:
    def __init__(self, first: int = 1000) -> None:
        self.next = first

    def next_producer_id(self) -> int:
        self.next += 1
        return self.next - 1


class AppendFailed(Exception):
    pass


@dataclass
class TxnCtx:
    config: TxnConfig = field(default_factory=TxnConfig)
    time: int = 0
    wall_offset: int = 1_700_000_000_000

    def __post_init__(self) -> None:
        self.timer = ManualTimer()
        self.ids = CountingIds()
        self.log: list[CoordinatorRecord] = []
        self.marker_jobs: list[MarkerJob] = []
        # partition -> markers written there: (producer id, epoch, commit)
        self.markers: dict[tuple[str, int], list[tuple[int, int, bool]]] = {}
        self.events: list[TxnEvent] = []
        self.fail_appends = 0
        self._tokens = 0
        self.shard = self._new_shard()
        self._apply(self.shard.on_loaded(self.time, wall_ms=self.wall))

    def _new_shard(self) -> TransactionCoordinatorShard:
        return TransactionCoordinatorShard(self.config, timer=self.timer, producer_ids=self.ids)

    @property
    def wall(self) -> int:
        return self.time + self.wall_offset

    def _apply(self, result: Result) -> list[Response]:
        if result.records and self.fail_appends:
            self.fail_appends -= 1
            self.shard.abort()
            raise AppendFailed
        for record in result.records:
            self.log.append(record)
            self.shard.replay(record)
        self.marker_jobs.extend(result.jobs)
        self.events.extend(result.events)
        return [r for _, r in result.responses]

    def call(self, request: Request) -> Response:
        self._tokens += 1
        result = self.shard.handle(self.time, self._tokens, request, wall_ms=self.wall)
        (response,) = self._apply(result)
        return response

    # --- the requests a producer sends ------------------------------------------------

    def init(
        self, txn_id: str, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1
    ) -> InitProducerIdResponse:
        r = self.call(InitProducerIdRequest(txn_id, timeout_ms, pid, epoch))
        assert isinstance(r, InitProducerIdResponse)
        return r

    def add(self, txn_id: str, pid: int, epoch: int, *partitions: tuple[str, int]) -> int:
        r = self.call(AddPartitionsRequest(txn_id, pid, epoch, tuple(partitions)))
        assert isinstance(r, AddPartitionsResponse)
        return r.error_code

    def end(self, txn_id: str, pid: int, epoch: int, *, commit: bool) -> int:
        r = self.call(EndTxnRequest(txn_id, pid, epoch, commit))
        assert isinstance(r, EndTxnResponse)
        return r.error_code

    # --- the runtime's side ------------------------------------------------------------

    def write_markers(self) -> list[MarkerJob]:
        jobs, self.marker_jobs = self.marker_jobs, []
        for job in jobs:
            for tp in sorted(job.partitions):
                self.markers.setdefault(tp, []).append(
                    (job.producer_id, job.producer_epoch, job.commit)
                )
            self._apply(
                self.shard.markers_written(
                    self.time,
                    job.transactional_id,
                    job.producer_id,
                    job.producer_epoch,
                    wall_ms=self.wall,
                )
            )
        return jobs

    def sleep(self, ms: int) -> None:
        target = self.time + ms
        while True:
            due = self.timer.pop_due(target)
            if due is None:
                break
            key, deadline = due
            self.time = max(self.time, deadline)
            try:
                self._apply(self.shard.on_timer(self.time, key, wall_ms=self.wall))
            except AppendFailed:
                self.timer.schedule(key, self.time + 1_000)  # the runtime retries a timer
        self.time = target

    def reload(self) -> None:
        """The coordinator restarts: a fresh shard rebuilt from the records alone."""
        self.shard.on_unloaded()
        self.timer.deadlines.clear()
        self.marker_jobs = []  # markers in flight are lost with the old process
        self.shard = self._new_shard()
        for record in self.log:
            self.shard.replay(record)
        self._apply(self.shard.on_loaded(self.time, wall_ms=self.wall))

    def state(self, txn_id: str) -> str:
        meta = self.shard.txns.get(txn_id)
        return meta.state.label if meta is not None else "-"
