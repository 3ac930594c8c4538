"""TxnOffsetCommit and pending transactional offsets in the group coordinator (KIP-98,
KIP-447), on a manual clock, with the transactional records and markers replayed as the
runtime replays them."""

from __future__ import annotations

from cg_ctx import CgMember, cg_ctx, converge
from coord_ctx import Ctx, commit, ctx0, stable

from odradek.coordinator import CoordinatorConfig, ErrorCode, GroupCoordinatorShard
from odradek.coordinator.txn_offsets import TxnOffsetCommitRequest
from odradek.coordinator.types import (
    JoinGroupResponse,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteTopic,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopic,
)
from odradek.coordinator.types import OffsetCommitPartition as P
from odradek.coordinator.types import OffsetCommitTopic as T

E = ErrorCode
PID = 4000


class TxnLog:
    """What the runtime appends to the partition, in order: records with the producer id
    of their batch (-1: plain), and markers; replayed into a fresh shard by ``rebuilt``."""

    def __init__(self, ctx: Ctx) -> None:
        self.ctx = ctx
        self.entries: list[tuple[str, object, int]] = []

    def txn_commit(
        self, pid: int, offsets: dict[tuple[str, int], int], *, group: str = "g", **kw: object
    ) -> dict[tuple[str, int], int]:
        by_topic: dict[str, list[P]] = {}
        for (topic, partition), offset in offsets.items():
            by_topic.setdefault(topic, []).append(P(partition, offset))
        request = TxnOffsetCommitRequest(
            "txn",
            group,
            pid,
            0,
            tuple(T(t, tuple(ps)) for t, ps in by_topic.items()),
            **kw,  # type: ignore[arg-type]
        )
        ctx = self.ctx
        result = ctx.shard.handle(ctx.time, "tok", request, wall_ms=ctx.wall)
        for record in result.records:
            offset = len(self.entries)
            self.entries.append(("record", record, pid))
            ctx.shard.replay(record, producer_id=pid, offset=offset)
        ((_, response),) = result.responses
        assert isinstance(response, OffsetCommitResponse)
        return {(t.name, p.partition): p.error_code for t in response.topics for p in t.partitions}

    def plain_commit(self, topic: str, partition: int, offset: int, group: str = "g") -> None:
        ctx = self.ctx
        result = ctx.shard.handle(ctx.time, "tok", commit(group, topic, partition, offset))
        for record in result.records:
            at = len(self.entries)
            self.entries.append(("record", record, -1))
            ctx.shard.replay(record, offset=at)

    def marker(self, pid: int, *, commit: bool) -> None:
        self.entries.append(("marker", commit, pid))
        self.ctx.shard.replay_end_transaction(pid, commit)

    def rebuilt(self) -> GroupCoordinatorShard:
        from coord_ctx import ManualTimer, SeqIds

        fresh = GroupCoordinatorShard(self.ctx.config, timer=ManualTimer(), ids=SeqIds())
        for offset, (kind, what, pid) in enumerate(self.entries):
            if kind == "record":
                fresh.replay(what, producer_id=pid, offset=offset)  # type: ignore[arg-type]
            else:
                fresh.replay_end_transaction(pid, bool(what))
        fresh.on_loaded(self.ctx.time)
        return fresh


def fetch(
    shard_or_ctx: Ctx | GroupCoordinatorShard, *partitions: int, stable: bool = True
) -> dict[int, tuple[int, int]]:
    """partition of topic "t" -> (offset, error) as OffsetFetch answers."""
    request = OffsetFetchRequest("g", (OffsetFetchTopic("t", tuple(partitions)),), stable)
    if isinstance(shard_or_ctx, Ctx):
        response = shard_or_ctx.call(request)
    else:
        ((_, response),) = shard_or_ctx.handle(0, "tok", request).responses
    assert isinstance(response, OffsetFetchResponse)
    return {p.partition: (p.committed_offset, p.error_code) for p in response.topics[0].partitions}


def test_pending_until_the_commit_marker_then_visible() -> None:
    ctx = ctx0()
    log = TxnLog(ctx)
    log.plain_commit("t", 0, 5)
    assert log.txn_commit(PID, {("t", 0): 10, ("t", 1): 20}) == {("t", 0): 0, ("t", 1): 0}
    assert fetch(ctx, 0, 1, 2, stable=False) == {0: (5, 0), 1: (-1, 0), 2: (-1, 0)}
    unstable = E.UNSTABLE_OFFSET_COMMIT
    assert fetch(ctx, 0, 1, 2) == {0: (-1, unstable), 1: (-1, unstable), 2: (-1, 0)}
    assert ctx.shard.pending_txn_offsets(PID).keys() == {("g", "t", 0), ("g", "t", 1)}
    log.marker(PID, commit=True)
    assert fetch(ctx, 0, 1, 2) == {0: (10, 0), 1: (20, 0), 2: (-1, 0)}
    assert not ctx.shard.has_open_transactions("g")
    assert fetch(log.rebuilt(), 0, 1, 2) == {0: (10, 0), 1: (20, 0), 2: (-1, 0)}


def test_abort_marker_discards_them() -> None:
    ctx = ctx0()
    log = TxnLog(ctx)
    log.plain_commit("t", 0, 5)
    log.txn_commit(PID, {("t", 0): 10})
    log.marker(PID, commit=False)
    assert fetch(ctx, 0) == {0: (5, 0)}
    assert fetch(log.rebuilt(), 0) == {0: (5, 0)}


def test_a_plain_commit_written_later_wins_over_a_committed_transaction() -> None:
    ctx = ctx0()
    log = TxnLog(ctx)
    log.txn_commit(PID, {("t", 0): 10, ("t", 1): 11})
    log.plain_commit("t", 0, 99)  # after the transactional record, before the marker
    log.marker(PID, commit=True)
    assert fetch(ctx, 0, 1) == {0: (99, 0), 1: (11, 0)}
    assert fetch(log.rebuilt(), 0, 1) == {0: (99, 0), 1: (11, 0)}


def test_reload_keeps_pending_offsets_pending() -> None:
    ctx = ctx0()
    log = TxnLog(ctx)
    log.txn_commit(PID, {("t", 0): 10})
    rebuilt = log.rebuilt()
    assert fetch(rebuilt, 0) == {0: (-1, E.UNSTABLE_OFFSET_COMMIT)}
    rebuilt.replay_end_transaction(PID, True)
    assert fetch(rebuilt, 0) == {0: (10, 0)}


def test_kip447_member_and_generation_checks() -> None:
    ctx = ctx0()
    log = TxnLog(ctx)
    members, gen = stable(ctx, 2)
    ok = {("t", 0): 0}
    assert log.txn_commit(PID, {("t", 0): 1}, generation_id=gen, member_id=members[0]) == ok
    fenced = log.txn_commit(PID, {("t", 0): 1}, generation_id=gen - 1, member_id=members[0])
    assert fenced == {("t", 0): E.ILLEGAL_GENERATION}
    unknown = log.txn_commit(PID, {("t", 0): 1}, generation_id=gen, member_id="nobody")
    assert unknown == {("t", 0): E.UNKNOWN_MEMBER_ID}
    # v0-2 carry no member: accepted although the group has members.
    assert log.txn_commit(PID, {("t", 0): 1}) == ok
    # A rebalance does not refuse a transactional commit (KafkaApis / ClassicGroup rules).
    t = ctx.join("g", "", client_id="c9")
    first = ctx.response(t)
    assert isinstance(first, JoinGroupResponse)
    ctx.join("g", first.member_id, client_id="c9")
    assert ctx.state("g").value == "PreparingRebalance"  # type: ignore[union-attr]
    assert log.txn_commit(PID, {("t", 0): 2}, generation_id=gen, member_id=members[1]) == ok
    # An unknown group: a simple group with generation -1, else ILLEGAL_GENERATION.
    assert log.txn_commit(PID, {("t", 0): 1}, group="other", generation_id=3) == {
        ("t", 0): E.ILLEGAL_GENERATION
    }
    assert log.txn_commit(PID, {("t", 0): 1}, group="other") == ok
    assert log.txn_commit(PID, {("t", 0): 1}, group="") == {("t", 0): E.INVALID_GROUP_ID}


def test_consumer_group_member_epoch_is_the_generation() -> None:
    """KIP-848 groups: TxnOffsetCommit's generation is the member epoch (Kafka's
    ConsumerGroup.validateOffsetCommit), a stale one ILLEGAL_GENERATION
    (validateTransactionalOffsetCommit maps STALE_MEMBER_EPOCH), and the marker makes
    the offsets the consumer group's committed ones."""
    ctx = cg_ctx()
    ctx.set_topics(foo=6)
    log = TxnLog(ctx)
    a, b = CgMember(ctx, "a"), CgMember(ctx, "b")
    a.join()
    mine = sorted(a.partitions())[0]

    def txn(offset: int, **kw: object) -> int:
        errors = log.txn_commit(PID, {("foo", mine): offset}, **kw)
        return int(errors[("foo", mine)])

    assert txn(7, generation_id=a.epoch, member_id="a") == 0
    assert txn(7, generation_id=a.epoch + 5, member_id="a") == E.ILLEGAL_GENERATION
    assert txn(7, generation_id=a.epoch, member_id="ghost") == E.UNKNOWN_MEMBER_ID
    assert txn(7) == E.UNKNOWN_MEMBER_ID  # no member while the group has members
    b.join()
    converge([a, b])
    old = ctx.shard.groups["g"].members["a"].previous_member_epoch
    kept = sorted(a.partitions())[0]
    gone = sorted(b.partitions())[0]
    # The previous epoch will do for a partition the member still owns, as for OffsetCommit.
    assert log.txn_commit(PID, {("foo", kept): 9}, generation_id=old, member_id="a") == {
        ("foo", kept): 0
    }
    assert log.txn_commit(PID, {("foo", gone): 9}, generation_id=old, member_id="a") == {
        ("foo", gone): E.ILLEGAL_GENERATION
    }
    assert ctx.shard.has_open_transactions("g")
    log.marker(PID, commit=True)
    expected = {("foo", mine): 7}
    expected[("foo", kept)] = 9  # the later commit, if it is the same partition
    assert {tp: o.offset for tp, o in ctx.shard.groups["g"].offsets.items()} == expected
    assert not ctx.shard.has_open_transactions("g")


def test_retention_waits_for_pending_offsets_and_open_transactions() -> None:
    ctx = Ctx(
        CoordinatorConfig(
            group_initial_rebalance_delay_ms=0,
            offsets_retention_ms=1_000,
            offsets_retention_check_interval_ms=500,
        )
    )
    log = TxnLog(ctx)
    log.plain_commit("t", 0, 5)
    log.plain_commit("t", 1, 6)
    log.txn_commit(PID, {("t", 0): 10})
    ctx.sleep(2_000)
    # Partition 1 expired; partition 0 waits for its transaction, so the group stays.
    assert set(ctx.shard.groups["g"].offsets) == {("t", 0)}
    log.marker(PID, commit=False)
    ctx.sleep(2_000)
    assert "g" not in ctx.shard.groups


def test_a_tombstone_drops_the_pending_offset_of_its_partition() -> None:
    ctx = ctx0()
    log = TxnLog(ctx)
    log.plain_commit("t", 0, 5)
    log.txn_commit(PID, {("t", 0): 10})
    result = ctx.shard.handle(
        ctx.time, "tok", OffsetDeleteRequest("g", (OffsetDeleteTopic("t", (0,)),))
    )
    for record in result.records:
        log.entries.append(("record", record, -1))
        ctx.shard.replay(record, offset=len(log.entries) - 1)
    log.marker(PID, commit=True)
    assert fetch(ctx, 0) == {0: (-1, 0)}
    assert fetch(log.rebuilt(), 0) == {0: (-1, 0)}
