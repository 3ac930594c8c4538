"""The coordinator runtime (``broker/group_runtime.py``) under faults, on a manual clock.

Each test drives one ``ShardRunner`` over a real partition log on an event
loop whose clock only moves when nothing else can run: it jumps straight to
the next due timer (no real sleeping, no flakiness under load), so fifty
seconds of session timeouts take milliseconds. The wall clock is the loop's
clock plus an offset the tests step back and forth, as NTP does.

Covered: clock steps both ways, a monotonic clock that disagrees with the
timers (early fires), an exception inside the core, records over
``max.message.bytes``, a failing timer, a failing replay (reload), a failing
load (retried and counted), a slow append; and, on the wire, OffsetCommit
for topics and partitions that do not exist.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.group_runtime import ShardRunner
from odradek.coordinator import CoordinatorConfig, ErrorCode
from odradek.coordinator.types import (
    HeartbeatRequest,
    JoinGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    Response,
    SyncGroupRequest,
)
from odradek.log import PartitionLog
from odradek.log.config import LogConfig
from odradek.protocol.apikeys import ApiKey
from odradek.testing import Broker

from .wire import WireClient

E = ErrorCode
T = TypeVar("T")
HOUR_MS = 3_600_000


class ManualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock moves only when every task waits: straight to the next timer.

    If nothing is ready and no timer is scheduled the loop would block for good:
    it raises instead, so a broken test fails rather than hangs.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now_s = 10_000.0
        self._selector = _JumpingSelector(self._selector, self)

    def time(self) -> float:
        return self.now_s


class _JumpingSelector:
    def __init__(self, inner: selectors.BaseSelector, loop: ManualClockLoop) -> None:
        self._inner = inner
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is None:
            raise RuntimeError("deadlock: no task can run and no timer is scheduled")
        self._loop.now_s += timeout
        return self._inner.select(0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class Rig:
    """One ShardRunner on a manual clock; wall clock = loop clock + ``wall_offset_ms``."""

    def __init__(
        self,
        loop: ManualClockLoop,
        data_dir: Path,
        *,
        max_message_bytes: int = 1_048_588,
        slow_mono: bool = False,
    ) -> None:
        self.loop = loop
        self.data_dir = data_dir
        self.wall_offset_ms = 0
        self.plog = PartitionLog.open(
            data_dir, LogConfig(max_message_bytes=max_message_bytes), now_ms=self.wall_ms
        )
        # slow_mono: the core's monotonic clock runs 10% slower than the clock the
        # loop's timers fire on, so every timer fires "early" for the core.
        mono = self.slow_mono_ms if slow_mono else self.loop_ms
        self.runner = self.new_runner(mono)

    def new_runner(self, mono: Any = None) -> ShardRunner:
        return ShardRunner(
            0, self.plog, CoordinatorConfig(), wall_ms=self.wall_ms, mono_ms=mono or self.loop_ms
        )

    def loop_ms(self) -> int:
        return int(self.loop.time() * 1000)

    def slow_mono_ms(self) -> int:
        return int(self.loop.time() * 900)

    def wall_ms(self) -> int:
        return int(self.loop.time() * 1000) + self.wall_offset_ms

    def run(self, coro: Coroutine[Any, Any, T], limit_s: float = 3600) -> T:
        """Run ``coro`` to completion within ``limit_s`` seconds of manual time."""
        return self.loop.run_until_complete(asyncio.wait_for(coro, limit_s))

    def start(self) -> None:
        async def started() -> None:
            self.runner.start()
            await self.until(lambda: self.runner.loaded)

        self.run(started())

    async def until(self, condition: Any, step_s: float = 0.05) -> None:
        while not condition():
            await asyncio.sleep(step_s)

    async def call(self, request: Any) -> Any:
        return await self.runner.call(request)


@pytest.fixture
def loop() -> Iterator[ManualClockLoop]:
    loop = ManualClockLoop()
    yield loop
    loop.close()


@pytest.fixture
def rig(loop: ManualClockLoop, tmp_path: Path) -> Iterator[Rig]:
    rig = Rig(loop, tmp_path / "__consumer_offsets-0")
    rig.start()
    yield rig
    rig.run(rig.runner.stop())
    rig.plog.close()


def join_request(
    group: str,
    member_id: str = "",
    *,
    client: str = "c",
    session_ms: int = 10_000,
    rebalance_ms: int = 10_000,
    metadata: bytes = b"",
) -> JoinGroupRequest:
    return JoinGroupRequest(
        group_id=group,
        member_id=member_id,
        group_instance_id=None,
        client_id=client,
        client_host="/127.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type="consumer",
        protocols=(("range", metadata),),
    )


def commit_request(
    group: str, topic: str, partitions: range, gen: int = -1, member: str = ""
) -> OffsetCommitRequest:
    parts = tuple(OffsetCommitPartition(p, 100 + p) for p in partitions)
    return OffsetCommitRequest(group, (OffsetCommitTopic(topic, parts),), gen, member)


def commit_errors(response: Response) -> set[int]:
    return {p.error_code for t in response.topics for p in t.partitions}  # type: ignore[union-attr]


async def first_join(rig: Rig, group: str, client: str, **kw: Any) -> str:
    """KIP-394's first JoinGroup: the member id to join with."""
    r = await rig.call(join_request(group, client=client, **kw))
    assert r.error_code == E.MEMBER_ID_REQUIRED, r
    return str(r.member_id)


async def form(
    rig: Rig, group: str, n: int, assignment: bytes = b"a", **kw: Any
) -> tuple[list[str], int]:
    """n members join together (initial delay), the leader assigns; returns ids, generation."""
    ids = [await first_join(rig, group, f"c{i}", **kw) for i in range(n)]
    joins = await asyncio.gather(
        *(rig.call(join_request(group, m, client=f"c{i}", **kw)) for i, m in enumerate(ids))
    )
    gen, leader = joins[0].generation_id, joins[0].leader
    assert {j.error_code for j in joins} == {0} and leader in ids
    syncs = await asyncio.gather(
        *(
            rig.call(
                SyncGroupRequest(
                    group,
                    gen,
                    m,
                    assignments=tuple((x, assignment) for x in ids) if m == leader else (),
                )
            )
            for m in ids
        )
    )
    assert {s.error_code for s in syncs} == {0}
    return ids, gen


async def heartbeats(rig: Rig, group: str, member: str, gen: int, for_s: float) -> int:
    """Heartbeat every 3 s for ``for_s`` seconds; stop at the first error and return it."""
    deadline = rig.loop.time() + for_s
    while rig.loop.time() < deadline:
        code = (await rig.call(HeartbeatRequest(group, gen, member))).error_code
        if code != E.NONE:
            return int(code)
        await asyncio.sleep(3)
    return int(E.NONE)


async def rejoin_alone(rig: Rig, group: str, member: str, gen: int) -> int:
    """The surviving member rejoins and syncs; returns the new generation."""
    j = await rig.call(join_request(group, member))
    assert (j.error_code, j.leader, [m.member_id for m in j.members]) == (0, member, [member])
    s = await rig.call(
        SyncGroupRequest(group, j.generation_id, member, assignments=((member, b"all"),))
    )
    assert s.error_code == 0 and j.generation_id > gen
    return int(j.generation_id)


# --- clocks ------------------------------------------------------------------------------


def test_crashed_member_expires_after_the_wall_clock_steps_back(rig: Rig) -> None:
    """NTP steps the wall clock back an hour: a crashed member must still expire."""

    async def scenario() -> None:
        (a, b), gen = await form(rig, "g", 2)
        rig.wall_offset_ms -= HOUR_MS
        # a crashed; b keeps heartbeating and learns of the rebalance when a expires.
        assert await heartbeats(rig, "g", b, gen, for_s=60) == E.REBALANCE_IN_PROGRESS
        assert await rejoin_alone(rig, "g", b, gen) == gen + 1
        assert (await rig.call(HeartbeatRequest("g", gen, a))).error_code == E.UNKNOWN_MEMBER_ID

    rig.run(scenario())


def test_a_wall_clock_step_forward_expires_nobody(rig: Rig) -> None:
    async def scenario() -> None:
        (a, b), gen = await form(rig, "g", 2)
        rig.wall_offset_ms += HOUR_MS
        codes = await asyncio.gather(
            heartbeats(rig, "g", a, gen, for_s=60), heartbeats(rig, "g", b, gen, for_s=60)
        )
        assert codes == [E.NONE, E.NONE]
        assert rig.runner.shard.groups["g"].generation_id == gen

    rig.run(scenario())


def test_group_stuck_in_rebalance_after_wall_step_back_completes(rig: Rig) -> None:
    """The join phase's timer must survive a step back too (the group left PR in Kafka)."""

    async def scenario() -> None:
        (a, b, c), gen = await form(rig, "g", 3)
        ja = asyncio.ensure_future(rig.call(join_request("g", a)))  # leader rejoins: PR
        await rig.until(lambda: rig.runner.shard.groups["g"].state.value == "PreparingRebalance")
        rig.wall_offset_ms -= HOUR_MS
        # b and c crashed: neither rejoins nor heartbeats. The rebalance timeout (10 s)
        # and their sessions must still end the join phase with a alone.
        r = await ja
        assert (r.error_code, r.generation_id) == (0, gen + 1)
        assert [m.member_id for m in r.members] == [a]
        assert not {b, c} & set(rig.runner.shard.groups["g"].members)

    rig.run(scenario(), limit_s=120)


def test_early_timer_fires_are_rearmed(loop: ManualClockLoop, tmp_path: Path) -> None:
    """The core's monotonic clock runs slower than the timers: every fire comes early."""
    rig = Rig(loop, tmp_path / "p", slow_mono=True)
    rig.start()

    async def scenario() -> None:
        (a, b), gen = await form(rig, "g", 2)
        assert await heartbeats(rig, "g", b, gen, for_s=60) == E.REBALANCE_IN_PROGRESS
        assert await rejoin_alone(rig, "g", b, gen) == gen + 1
        assert a not in rig.runner.shard.groups["g"].members

    try:
        rig.run(scenario())
    finally:
        rig.run(rig.runner.stop())
        rig.plog.close()


# --- failures that stay with their request ----------------------------------------------


def test_exception_in_the_core_fails_only_that_request(rig: Rig) -> None:
    """A commit whose topic name cannot be a record key: Kafka fails that request alone."""

    async def scenario() -> None:
        (y,), gen = await form(rig, "y", 1)
        x = await first_join(rig, "x", "x")
        parked = asyncio.ensure_future(rig.call(join_request("x", x)))  # initial delay
        await asyncio.sleep(1)
        bad = await rig.call(commit_request("y", "t" * 40_000, range(1), gen, y))
        assert commit_errors(bad) == {E.UNKNOWN_SERVER_ERROR}
        assert not parked.done()
        joined = await parked  # the other group never noticed
        assert (joined.error_code, joined.generation_id) == (0, 1)
        ok = await rig.call(commit_request("y", "t", range(1), gen, y))
        assert commit_errors(ok) == {E.NONE}
        assert (rig.runner.operation_failures, rig.runner.reloads) == (1, 0)

    rig.run(scenario())


def test_a_failing_timer_is_retried_and_nothing_else_fails(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        x = await first_join(rig, "x", "x")
        shard = rig.runner.shard.classic  # the classic groups' manager completes joins
        original = shard._complete_join
        calls = []

        def broken(*args: Any) -> None:
            calls.append(rig.loop.time())
            if len(calls) == 1:
                original(*args)  # changes the group, then blows up: undone
                raise RuntimeError("injected")
            original(*args)

        monkeypatch.setattr(shard, "_complete_join", broken)
        started = rig.loop.time()
        joined = await rig.call(join_request("x", x))  # completes on the initial-delay timer
        assert (joined.error_code, joined.generation_id) == (0, 1)
        assert len(calls) == 2 and calls[1] - calls[0] == pytest.approx(1.0)  # 1 s backoff
        assert calls[0] - started == pytest.approx(3.0)
        assert (rig.runner.operation_failures, rig.runner.reloads) == (1, 0)

    rig.run(scenario())


def test_records_over_max_message_bytes_fail_only_that_request(
    loop: ManualClockLoop, tmp_path: Path
) -> None:
    rig = Rig(loop, tmp_path / "p", max_message_bytes=4096)
    rig.start()

    async def scenario() -> None:
        (y,), gen = await form(rig, "y", 1)
        end = rig.plog.end_offset
        # 400 offsets do not fit one 4 KiB batch: Kafka's INVALID_COMMIT_OFFSET_SIZE.
        big = await rig.call(commit_request("y", "t", range(400), gen, y))
        assert commit_errors(big) == {E.INVALID_COMMIT_OFFSET_SIZE}
        assert rig.plog.end_offset == end
        # A leader's assignment too large for the group record: only its SyncGroup fails.
        (a, b), gen2 = await form(rig, "g", 2)
        ja = asyncio.ensure_future(rig.call(join_request("g", a)))
        jb = asyncio.ensure_future(rig.call(join_request("g", b)))
        leader = (await ja).leader
        assert (await jb).generation_id == gen2 + 1
        follower = b if leader == a else a
        parked = asyncio.ensure_future(rig.call(SyncGroupRequest("g", gen2 + 1, follower)))
        huge = ((a, b"x" * 5000), (b, b"y"))
        r = await rig.call(SyncGroupRequest("g", gen2 + 1, leader, assignments=huge))
        assert r.error_code == E.UNKNOWN_SERVER_ERROR
        assert not parked.done()
        assert rig.runner.shard.groups["g"].state.value == "CompletingRebalance"
        fits = ((a, b"x"), (b, b"y"))
        r = await rig.call(SyncGroupRequest("g", gen2 + 1, leader, assignments=fits))
        assert r.error_code == 0 and (await parked).error_code == 0
        assert (rig.runner.operation_failures, rig.runner.reloads) == (2, 0)

    try:
        rig.run(scenario())
    finally:
        rig.run(rig.runner.stop())
        rig.plog.close()


# --- reloads ------------------------------------------------------------------------------


@pytest.mark.parametrize("reload_fails_once", [False, True])
def test_failed_replay_reloads_the_partition_from_its_log(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, reload_fails_once: bool
) -> None:
    """Appended but not replayed: memory may be behind the log, so rebuild from the log.

    If the reload's own read fails, it is reported, counted and retried.
    """

    async def scenario() -> None:
        (y,), gen = await form(rig, "y", 1)
        x = await first_join(rig, "x", "x")
        parked = asyncio.ensure_future(rig.call(join_request("x", x)))
        await asyncio.sleep(0.5)
        shard = rig.runner.shard

        def broken(record: Any) -> None:
            raise RuntimeError("injected replay failure")

        monkeypatch.setattr(shard, "replay", broken)
        if reload_fails_once:
            read = rig.plog.iter_batches_from
            reads: list[int] = []

            def flaky(offset: int) -> Any:
                reads.append(offset)
                if len(reads) == 1:
                    raise OSError("injected read error")
                return read(offset)

            monkeypatch.setattr(rig.plog, "iter_batches_from", flaky)
        r = await rig.call(commit_request("y", "t", range(1), gen, y))
        assert commit_errors(r) == {E.COORDINATOR_NOT_AVAILABLE}
        assert (await parked).error_code == E.NOT_COORDINATOR  # the partition was unloaded
        await rig.until(lambda: rig.runner.loaded)
        assert rig.runner.shard is not shard and rig.runner.reloads == 1
        assert rig.runner.load_failures == int(reload_fails_once)
        # The commit was appended, so it survived; the group is as its records say.
        fetched = await rig.call(OffsetFetchRequest("y", None))
        assert fetched.topics[0].partitions[0].committed_offset == 100
        assert (await rig.call(HeartbeatRequest("y", gen, y))).error_code == E.NONE

    rig.run(scenario())


def test_a_failing_load_is_retried_counted_and_then_serves(
    loop: ManualClockLoop, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rig = Rig(loop, tmp_path / "p")
    rig.start()
    (y,), gen = rig.run(form(rig, "y", 1))
    assert commit_errors(rig.run(rig.call(commit_request("y", "t", range(2), gen, y)))) == {0}
    rig.run(rig.runner.stop())

    # The coordinator moves back here, and the first read of its log fails.
    failures = []
    original = rig.plog.iter_batches_from

    def flaky(offset: int) -> Any:
        if not failures:
            failures.append(offset)
            raise OSError("injected read error")
        return original(offset)

    monkeypatch.setattr(rig.plog, "iter_batches_from", flaky)
    runner = rig.runner = rig.new_runner()

    async def scenario() -> None:
        runner.start()
        await asyncio.sleep(0.1)
        assert not runner.loaded and runner.load_failures == 1
        r = await rig.call(commit_request("y", "t", range(1), gen, y))
        assert commit_errors(r) == {E.COORDINATOR_LOAD_IN_PROGRESS}
        await rig.until(lambda: runner.loaded)
        fetched = await rig.call(OffsetFetchRequest("y", None))
        assert [p.committed_offset for p in fetched.topics[0].partitions] == [100, 101]

    try:
        rig.run(scenario())
    finally:
        rig.run(runner.stop())
        rig.plog.close()


def test_a_slow_append_answers_after_durability_and_loses_no_timer(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append of b's commit stalls 5 s (an fsync stall): nothing runs meanwhile."""

    async def scenario() -> None:
        (a, b), gen = await form(rig, "g", 2)  # sessions of 10 s, both just heard from
        await asyncio.sleep(8)
        original = rig.plog.append
        seen: list[int] = []

        def slow_append(batch: Any, **kw: Any) -> Any:
            info = original(batch, **kw)
            rig.loop.now_s += 5
            return info

        monkeypatch.setattr(rig.plog, "append", slow_append)
        pending = asyncio.ensure_future(rig.call(commit_request("g", "t", range(1), gen, b)))
        pending.add_done_callback(lambda _: seen.append(rig.plog.end_offset))
        end = rig.plog.end_offset
        assert commit_errors(await pending) == {E.NONE}
        assert seen == [end + 1]  # answered only once the record was in the log
        monkeypatch.setattr(rig.plog, "append", original)
        # a's session ended during the stall (t=10 s): it expires at once, not later and
        # not never. b's commit counted as a heartbeat at t=8 s, so b is alive.
        await asyncio.sleep(0)
        assert (await rig.call(HeartbeatRequest("g", gen, b))).error_code == E.REBALANCE_IN_PROGRESS
        assert a not in rig.runner.shard.groups["g"].members

    rig.run(scenario())


# --- the request layer ----------------------------------------------------------------------


def test_offset_commit_for_unknown_topics_and_partitions(odradek_session_broker: Broker) -> None:
    """As KafkaApis: UNKNOWN_TOPIC_OR_PARTITION per partition, the rest committed."""
    topic = f"known-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=10)
    group = f"g-{time.monotonic_ns()}"

    def partitions(*indexes: int) -> list[dict[str, Any]]:
        return [
            {
                "partition_index": i,
                "committed_offset": 10 + i,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
            for i in indexes
        ]

    with WireClient(odradek_session_broker.bootstrap) as client:
        response = client.request(
            ApiKey.OFFSET_COMMIT,
            8,
            {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [
                    {"name": "no-such-topic", "partitions": partitions(0)},
                    {"name": topic, "partitions": partitions(1, 7, 0)},
                    {"name": "x" * 40_000, "partitions": partitions(0)},
                ],
            },
        )
        codes = [[p.error_code for p in t.partitions] for t in response.topics]
        unknown = E.UNKNOWN_TOPIC_OR_PARTITION
        assert codes == [[unknown], [0, unknown, 0], [unknown]]
        # Nothing left for the coordinator: it is not asked, the group is not created.
        only_unknown = client.request(
            ApiKey.OFFSET_COMMIT,
            8,
            {
                "group_id": f"{group}-none",
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "topics": [{"name": "no-such-topic", "partitions": partitions(0)}],
            },
        )
        assert only_unknown.topics[0].partitions[0].error_code == unknown
        fetched = client.request(
            ApiKey.OFFSET_FETCH,
            8,
            {"groups": [{"group_id": group, "topics": None}], "require_stable": False},
        )
        offsets = {
            (t.name, p.partition_index): p.committed_offset
            for t in fetched.groups[0].topics
            for p in t.partitions
        }
        assert offsets == {(topic, 0): 10, (topic, 1): 11}
