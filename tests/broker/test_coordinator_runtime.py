"""The one coordinator runtime (``broker/coordinator_runtime.py``), run with both shards.

Every case runs once with the group coordinator's runner over ``__consumer_offsets``
and once with the transaction coordinator's over ``__transaction_state``, on a real
partition log behind a test writer whose high watermark the test moves (as
followers would), on an event loop whose clock jumps to the next timer.

* Unloading (another broker leads the partition now) answers NOT_COORDINATOR to
  every request still queued and every answer held for replication.
* A reload (the log and memory may differ) fails held answers, and what their
  results would have started (a transaction's marker job) is not started: the
  load starts it once, from the log.
* Timers survive a reload (a member's session, a transaction's timeout).
* Append failures: records too large fail only their request; a refusal before
  anything was written fails only its request; a failure after writing reloads.
* Answers, and what follows them, wait until the high watermark covers their
  records; past ``offsets.commit.timeout.ms`` the answer is COORDINATOR_NOT_AVAILABLE
  while what follows still waits.

Before issue 20 the transaction runner answered the unloaded queue
COORDINATOR_NOT_AVAILABLE, never answered the request that made it reload, kept
held results across a reload (a second marker job), and wrote records larger than
max.message.bytes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.broker.coordinator_runtime import CoordinatorRunner
from odradek.broker.group_runtime import GroupRunner
from odradek.broker.txn_runtime import TxnRunner
from odradek.coordinator import CoordinatorConfig
from odradek.coordinator.types import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    SyncGroupRequest,
)
from odradek.log import LogConfig, PartitionLog
from odradek.log.errors import LogError
from odradek.protocol.errors import ErrorCode as E
from odradek.transaction import TxnConfig
from odradek.transaction.state import TxnState
from odradek.transaction.types import (
    AddPartitionsRequest,
    DescribeTransactionsRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)

from .manual_loop import ManualClockLoop
from .runtime_writer import TestWriter

MAX_MESSAGE_BYTES = 4096
WRITE_TIMEOUT_MS = 5000


class StorageRefusal(LogError):
    error_code = int(E.KAFKA_STORAGE_ERROR)


def codes(response: Any) -> set[int]:
    """Every error code a response carries."""
    if hasattr(response, "topics") and not hasattr(response, "error_code"):
        return {p.error_code for t in response.topics for p in t.partitions}
    return {response.error_code}


class Rig:
    """One runner of the kind under test, on a manual clock, over ``writer``."""

    def __init__(self, loop: ManualClockLoop, path: Path, kind: Kind) -> None:
        self.loop = loop
        self.kind = kind
        self.plog = PartitionLog.open(
            path, LogConfig(max_message_bytes=MAX_MESSAGE_BYTES), now_ms=self.ms
        )
        self.writer = TestWriter(self.plog)
        self.markers: list[tuple[tuple[str, int], int, int, bool]] = []
        self.runner: CoordinatorRunner[Any] = kind.runner(self)

    def ms(self) -> int:
        return int(self.loop.time() * 1000)

    def run(self, coro: Any, limit_s: float = 600) -> Any:
        return self.loop.run_until_complete(asyncio.wait_for(coro, limit_s))

    async def until(self, condition: Any) -> None:
        while not condition():
            await asyncio.sleep(0.05)

    async def lead(self) -> None:
        self.runner.become_leader()
        await self.until(lambda: self.runner.loaded)

    async def call(self, request: Any) -> Any:
        return await self.runner.call(request)

    def send(self, request: Any) -> asyncio.Future[Any]:
        return asyncio.ensure_future(self.runner.call(request))

    async def write_marker(self, tp: tuple[str, int], pid: int, epoch: int, commit: bool) -> None:
        self.markers.append((tp, pid, epoch, commit))

    def close(self) -> None:
        self.run(self.runner.stop())
        self.plog.close()


class Kind:
    """What differs between the two shards, for the cases below."""

    name = ""

    def runner(self, rig: Rig) -> CoordinatorRunner[Any]:
        raise NotImplementedError

    def write(self, i: int) -> Any:
        """A request whose answer needs a record written."""
        raise NotImplementedError

    async def too_large(self, rig: Rig) -> tuple[Any, int]:
        """A request whose records need a batch over max.message.bytes, and its answer."""
        raise NotImplementedError

    async def with_job(self, rig: Rig) -> Any:
        """A request whose durable result starts a job (None: the shard has none)."""
        return None

    async def arm_timer(self, rig: Rig) -> Any:
        """Make the shard arm a timer that expires something in 10 s; returns a handle."""
        raise NotImplementedError

    async def timer_fired(self, rig: Rig, handle: Any) -> bool:
        raise NotImplementedError

    async def written(self, rig: Rig, i: int) -> bool:
        """Whether the shard holds what ``write(i)`` wrote."""
        raise NotImplementedError


class GroupKind(Kind):
    name = "group"

    def runner(self, rig: Rig) -> CoordinatorRunner[Any]:
        return GroupRunner(
            0,
            rig.writer,
            CoordinatorConfig(),
            wall_ms=rig.ms,
            mono_ms=rig.ms,
            write_timeout_ms=WRITE_TIMEOUT_MS,
        )

    @staticmethod
    def commit(group: str, partitions: int = 1) -> OffsetCommitRequest:
        parts = tuple(OffsetCommitPartition(p, 100 + p) for p in range(partitions))
        return OffsetCommitRequest(group, (OffsetCommitTopic("t", parts),), -1, "")

    def write(self, i: int) -> Any:
        return self.commit(f"g{i}")

    async def too_large(self, rig: Rig) -> tuple[Any, int]:
        return self.commit("big", 400), E.INVALID_COMMIT_OFFSET_SIZE  # Kafka's mapping

    async def arm_timer(self, rig: Rig) -> Any:
        """A one-member group; its member's session (10 s) must expire."""
        join = JoinGroupRequest(
            group_id="s",
            member_id="",
            group_instance_id=None,
            client_id="c",
            client_host="/127.0.0.1",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            protocol_type="consumer",
            protocols=(("range", b""),),
        )
        first = await rig.call(join)
        member = first.member_id
        joined = await rig.call(dataclasses.replace(join, member_id=member))
        assert joined.error_code == E.NONE
        synced = await rig.call(
            SyncGroupRequest("s", joined.generation_id, member, assignments=((member, b"a"),))
        )
        assert synced.error_code == E.NONE
        return member, joined.generation_id

    async def timer_fired(self, rig: Rig, handle: Any) -> bool:
        member, generation = handle
        beat = await rig.call(HeartbeatRequest("s", generation, member))
        return bool(beat.error_code == E.UNKNOWN_MEMBER_ID)

    async def written(self, rig: Rig, i: int) -> bool:
        fetched = await rig.call(OffsetFetchRequest(f"g{i}", None))
        return [p.committed_offset for t in fetched.topics for p in t.partitions] == [100]


class TxnKind(Kind):
    name = "txn"
    ids = itertools.count(1000)

    def runner(self, rig: Rig) -> CoordinatorRunner[Any]:
        return TxnRunner(
            0,
            rig.writer,
            TxnConfig(num_partitions=1),
            producer_ids=self,
            write_marker=rig.write_marker,
            wall_ms=rig.ms,
            mono_ms=rig.ms,
            write_timeout_ms=WRITE_TIMEOUT_MS,
        )

    def next_producer_id(self) -> int:
        return next(self.ids)

    def write(self, i: int) -> Any:
        return InitProducerIdRequest(f"t{i}", 60_000)

    async def _open(self, rig: Rig, txn_id: str, parts: Any, timeout_ms: int = 60_000) -> Any:
        init = await rig.call(InitProducerIdRequest(txn_id, timeout_ms))
        assert init.error_code == E.NONE
        return AddPartitionsRequest(txn_id, init.producer_id, init.producer_epoch, parts)

    async def too_large(self, rig: Rig) -> tuple[Any, int]:
        parts = tuple((f"topic-{p:04d}", 0) for p in range(400))
        # Kafka's transaction coordinator answers MESSAGE_TOO_LARGE as UNKNOWN_SERVER_ERROR.
        return await self._open(rig, "big", parts), E.UNKNOWN_SERVER_ERROR

    async def with_job(self, rig: Rig) -> Any:
        add = await self._open(rig, "x", (("t", 0),))
        assert (await rig.call(add)).error_code == E.NONE
        return EndTxnRequest("x", add.producer_id, add.producer_epoch, True)

    async def arm_timer(self, rig: Rig) -> Any:
        """An open transaction; its timeout (10 s) must abort it."""
        add = await self._open(rig, "slow", (("t", 1),), timeout_ms=10_000)
        assert (await rig.call(add)).error_code == E.NONE
        return add.producer_id

    async def timer_fired(self, rig: Rig, handle: Any) -> bool:
        return any(m[1] == handle and not m[3] for m in rig.markers)  # an ABORT marker

    async def written(self, rig: Rig, i: int) -> bool:
        described = await rig.call(DescribeTransactionsRequest((f"t{i}",)))
        return [(d.error_code, d.state) for d in described.transactions] == [(E.NONE, "Empty")]


@pytest.fixture(params=[GroupKind(), TxnKind()], ids=lambda k: k.name)
def kind(request: pytest.FixtureRequest) -> Kind:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def rig(kind: Kind, tmp_path: Path) -> Iterator[Rig]:
    loop = ManualClockLoop()
    rig = Rig(loop, tmp_path / "p", kind)
    rig.run(rig.lead())
    yield rig
    rig.close()
    loop.close()


def test_unload_answers_not_coordinator_to_queued_and_held_requests(rig: Rig, kind: Kind) -> None:
    async def scenario() -> None:
        rig.writer.hold()
        held = rig.send(kind.write(0))
        await rig.until(lambda: rig.plog.end_offset > 0)  # written, held for the followers
        queued = [rig.send(kind.write(i)) for i in (1, 2)]
        await asyncio.sleep(0)  # queued; the executor has not taken them yet
        assert not held.done()
        await rig.runner.resign()
        answers = await asyncio.gather(held, *queued)
        assert [codes(a) for a in answers] == [{E.NOT_COORDINATOR}] * 3
        # A partition led elsewhere answers NOT_COORDINATOR at once.
        assert codes(await rig.call(kind.write(3))) == {E.NOT_COORDINATOR}

    rig.run(scenario())


def test_a_reload_fails_held_answers_and_starts_no_second_job(rig: Rig, kind: Kind) -> None:
    async def scenario() -> None:
        with_job = await kind.with_job(rig)
        rig.writer.hold()
        held = rig.send(with_job if with_job is not None else kind.write(0))
        await asyncio.sleep(0.1)
        assert not held.done()
        rig.writer.break_next()  # the next append writes, then fails: only a reload can tell
        cause = await rig.call(kind.write(1))
        assert codes(cause) == {E.COORDINATOR_NOT_AVAILABLE}
        assert codes(await held) == {E.COORDINATOR_NOT_AVAILABLE}
        await rig.until(lambda: rig.runner.loaded)
        assert rig.runner.reloads == 1
        rig.writer.follow()
        await asyncio.sleep(1)
        if with_job is not None:  # the reload's job wrote the marker; the held one did not
            assert [m[0] for m in rig.markers] == [("t", 0)]
        # The write that failed after writing is in the log, so it survived the reload.
        assert await kind.written(rig, 1)
        assert codes(await rig.call(kind.write(2))) == {E.NONE}

    rig.run(scenario())


def test_timers_survive_a_reload(rig: Rig, kind: Kind) -> None:
    async def scenario() -> None:
        handle = await kind.arm_timer(rig)
        rig.writer.break_next()
        assert codes(await rig.call(kind.write(0))) == {E.COORDINATOR_NOT_AVAILABLE}
        await rig.until(lambda: rig.runner.loaded)
        assert rig.runner.reloads == 1
        await asyncio.sleep(11)
        assert await kind.timer_fired(rig, handle)

    rig.run(scenario())


def test_append_failures_stay_with_their_request(rig: Rig, kind: Kind) -> None:
    async def scenario() -> None:
        big, expected = await kind.too_large(rig)
        end = rig.plog.end_offset
        assert codes(await rig.call(big)) == {expected}
        assert rig.plog.end_offset == end  # nothing written
        # Refused before anything was written (a storage error): only that request
        # fails, as Kafka maps it (NOT_COORDINATOR), and nothing is reloaded.
        rig.writer.refuse_next(StorageRefusal("injected"))
        assert codes(await rig.call(kind.write(1))) == {E.NOT_COORDINATOR}
        assert rig.plog.end_offset == end
        assert codes(await rig.call(kind.write(2))) == {E.NONE}
        assert (rig.runner.operation_failures, rig.runner.reloads) == (2, 0)
        # Written, then failed: the partition reloads, state is what the log says.
        rig.writer.break_next()
        assert codes(await rig.call(kind.write(3))) == {E.COORDINATOR_NOT_AVAILABLE}
        await rig.until(lambda: rig.runner.loaded)
        assert rig.runner.reloads == 1
        assert await kind.written(rig, 2) and await kind.written(rig, 3)

    rig.run(scenario())


def test_answers_and_jobs_wait_until_replication_covers_them(rig: Rig, kind: Kind) -> None:
    async def scenario() -> None:
        with_job = await kind.with_job(rig)
        rig.writer.hold()
        first = rig.send(kind.write(0))
        second = rig.send(with_job if with_job is not None else kind.write(1))
        await asyncio.sleep(1)
        assert not first.done() and not second.done()
        assert rig.markers == []
        rig.writer.replicate()
        assert codes(await first) == {E.NONE} and codes(await second) == {E.NONE}
        if with_job is not None:
            await rig.until(lambda: rig.markers)
            assert [m[0] for m in rig.markers] == [("t", 0)]

    rig.run(scenario())


def test_an_answer_held_past_the_write_timeout_is_coordinator_not_available(
    rig: Rig, kind: Kind
) -> None:
    """Kafka's coordinator write timeout (offsets.commit.timeout.ms): the client retries;
    the records stay, and what follows them (the markers) waits for replication."""

    async def scenario() -> None:
        with_job = await kind.with_job(rig)
        rig.writer.hold()
        held = rig.send(with_job if with_job is not None else kind.write(0))
        started = rig.loop.time()
        assert codes(await held) == {E.COORDINATOR_NOT_AVAILABLE}
        assert rig.loop.time() - started == pytest.approx(WRITE_TIMEOUT_MS / 1000, abs=0.1)
        assert rig.markers == []
        rig.writer.replicate()
        if with_job is not None:
            await rig.until(lambda: rig.markers)
            await rig.until(lambda: rig.runner.shard.txns["x"].state is TxnState.COMPLETE_COMMIT)

    rig.run(scenario())
