"""Seeded random simulation of many members against the pure core.

Members join, sync (the leader assigns round-robin), heartbeat, commit, leave,
crash, restart (static members come back under the same instance id), while the
clock jumps and the coordinator is reloaded from its records. After every step:
no partition is owned by two members of one generation, generations only
increase, and state rebuilt from the records equals the live state. Each run
ends with a quiet period after which every subscribed partition is assigned.

A failure names its seed; rerun just that one with
``ODRADEK_SIM_SEED=<seed> pytest tests/coordinator/test_coordinator_simulation.py``.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

import pytest
from coord_ctx import Ctx, subscription

from odradek.coordinator import CoordinatorConfig, ErrorCode, GroupState
from odradek.coordinator.consumer_protocol import (
    Assignment,
    encode_assignment,
    parse_assignment,
    parse_subscription,
)
from odradek.coordinator.types import (
    HeartbeatRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    SyncGroupResponse,
)

E = ErrorCode
GROUP = "sim"
TOPICS = {"foo": 6, "bar": 3}
SEEDS = (
    [int(os.environ["ODRADEK_SIM_SEED"])]
    if "ODRADEK_SIM_SEED" in os.environ
    else list(range(int(os.environ.get("ODRADEK_SIM_RUNS", "40"))))
)
STEPS = int(os.environ.get("ODRADEK_SIM_STEPS", "250"))

Partition = tuple[str, int]


@dataclass
class Member:
    name: str
    instance_id: str | None
    topics: tuple[str, ...]
    skip: bool
    member_id: str = ""
    generation: int = -1
    phase: str = "idle"  # idle -> joining -> syncing -> stable; dead when crashed
    token: int | None = None
    assignment: frozenset[Partition] = frozenset()

    @property
    def identity(self) -> str:
        return self.instance_id or self.member_id


@dataclass
class Sim:
    seed: int
    rng: random.Random = field(init=False)
    ctx: Ctx = field(init=False)
    members: list[Member] = field(default_factory=list)
    owners: dict[tuple[int, Partition], str] = field(default_factory=dict)
    last_generation: int = 0  # live generation, per coordinator incarnation
    last_persisted: int = 0  # generation in the latest group record
    counter: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.ctx = Ctx(
            CoordinatorConfig(group_initial_rebalance_delay_ms=self.rng.choice([0, 3000]))
        )

    # --- member behaviour (what a Kafka client does) --------------------------------

    def new_member(self, instance_id: str | None = None) -> Member:
        self.counter += 1
        topics = self.rng.choice([("foo",), ("foo", "bar"), ("bar",)])
        m = Member(f"m{self.counter}", instance_id, topics, skip=self.rng.random() < 0.5)
        self.members.append(m)
        return m

    def send_join(self, m: Member) -> None:
        m.phase = "joining"
        m.token = self.ctx.join(
            GROUP,
            m.member_id,
            instance_id=m.instance_id,
            client_id=m.name,
            protocols=(("roundrobin", subscription(*m.topics)),),
            session_ms=6000,
            rebalance_ms=self.rng.choice([8000, 12000]),
            skip=m.skip,
        )

    def rejoin(self, m: Member, reset_id: bool = False) -> None:
        if reset_id:
            m.member_id = ""
        m.generation, m.assignment = -1, frozenset()
        self.send_join(m)

    def assign(self, join: JoinGroupResponse) -> tuple[tuple[str, bytes], ...]:
        subs = {mm.member_id: parse_subscription(mm.metadata).topics for mm in join.members}
        ids = sorted(subs)
        plan: dict[str, list[Partition]] = {i: [] for i in ids}
        k = 0
        for topic in sorted({t for ts in subs.values() for t in ts}):
            for p in range(TOPICS[topic]):
                eligible = [i for i in ids if topic in subs[i]]
                plan[eligible[k % len(eligible)]].append((topic, p))
                k += 1
        return tuple(
            (i, encode_assignment(Assignment(tuple((t, (p,)) for t, p in parts))))
            for i, parts in plan.items()
        )

    def act(self, m: Member) -> None:
        ctx = self.ctx
        if m.phase == "dead":
            return
        if m.phase == "idle":
            self.send_join(m)
            return
        if m.phase in ("joining", "syncing"):
            assert m.token is not None
            if not ctx.done(m.token):
                return  # still parked
            resp = ctx.response(m.token)
            m.token = None
            if isinstance(resp, JoinGroupResponse):
                self.on_join(m, resp)
            else:
                assert isinstance(resp, SyncGroupResponse)
                self.on_sync(m, resp)
            return
        # stable: heartbeat, sometimes commit or leave
        roll = self.rng.random()
        if roll < 0.05 and m.instance_id is None:
            ctx.call(LeaveGroupRequest(GROUP, (LeaveGroupMember(m.member_id),)))
            m.phase, m.member_id, m.assignment = "idle", "", frozenset()
            return
        if roll < 0.25 and m.assignment:
            t, p = sorted(m.assignment)[0]
            req = OffsetCommitRequest(
                GROUP,
                (OffsetCommitTopic(t, (OffsetCommitPartition(p, self.rng.randrange(1000)),)),),
                m.generation,
                m.member_id,
                m.instance_id,
            )
            code = ctx.call(req).topics[0].partitions[0].error_code
            assert code in (
                0,
                E.REBALANCE_IN_PROGRESS,
                E.UNKNOWN_MEMBER_ID,
                E.ILLEGAL_GENERATION,
                E.FENCED_INSTANCE_ID,
            ), code
            return
        code = ctx.call(
            HeartbeatRequest(GROUP, m.generation, m.member_id, m.instance_id)
        ).error_code
        self.on_error(m, code)

    def on_error(self, m: Member, code: int) -> None:
        if code == E.NONE:
            return
        if code == E.FENCED_INSTANCE_ID:
            m.phase = "dead"
        elif code in (E.REBALANCE_IN_PROGRESS, E.ILLEGAL_GENERATION, E.NOT_COORDINATOR):
            self.rejoin(m)
        elif code == E.UNKNOWN_MEMBER_ID:
            self.rejoin(m, reset_id=True)
        else:
            raise AssertionError(f"unexpected error {code} for {m.name}")

    def on_join(self, m: Member, r: JoinGroupResponse) -> None:
        if r.error_code == E.MEMBER_ID_REQUIRED:
            m.member_id = r.member_id
            self.send_join(m)
            return
        if r.error_code != E.NONE:
            self.on_error(m, r.error_code)
            return
        assert r.generation_id >= m.generation
        m.member_id, m.generation, m.phase = r.member_id, r.generation_id, "syncing"
        assignments: tuple[tuple[str, bytes], ...] = ()
        if r.leader == m.member_id and not r.skip_assignment:
            assignments = self.assign(r)
        m.token = self.ctx.sync(GROUP, m.member_id, m.generation, assignments, m.instance_id)

    def on_sync(self, m: Member, r: SyncGroupResponse) -> None:
        if r.error_code != E.NONE:
            self.on_error(m, r.error_code)
            return
        m.phase = "stable"
        parsed = parse_assignment(r.assignment)
        m.assignment = frozenset((t, p) for t, ps in parsed.partitions for p in ps)
        for tp in m.assignment:
            owner = self.owners.setdefault((m.generation, tp), m.identity)
            assert owner == m.identity, (
                f"{tp} owned by {owner} and {m.identity} in gen {m.generation}"
            )

    # --- chaos --------------------------------------------------------------------------

    def step(self) -> None:
        rng, ctx = self.rng, self.ctx
        live = [m for m in self.members if m.phase != "dead"]
        roll = rng.random()
        if roll < 0.06 and len(live) < 7:
            iid = f"static-{self.counter}" if rng.random() < 0.4 else None
            self.send_join(self.new_member(iid))
        elif roll < 0.09 and live:
            victim = rng.choice(live)
            victim.phase = "dead"  # crash: stops talking
            if victim.instance_id is not None and rng.random() < 0.7:
                # ...and restarts under the same instance id with no member id.
                self.send_join(self.new_member(victim.instance_id))
        elif roll < 0.12:
            ctx.sleep(rng.randrange(5_000, 25_000))  # clock jump
        elif roll < 0.14:
            ctx.reload()
            # Like Kafka, an in-flight rebalance is not persisted: the reloaded group
            # restarts from its last stored generation, which never goes backwards.
            group = ctx.shard.groups.get(GROUP)
            self.last_generation = group.generation_id if group is not None else 0
        elif roll < 0.45:
            ctx.sleep(rng.randrange(50, 1500))
        elif live:
            self.act(rng.choice(live))
        self.check()

    def check(self) -> None:
        group = self.ctx.shard.groups.get(GROUP)
        if group is None:
            # Deleted (Empty, no offsets): a new group starts over at generation 0.
            self.last_generation = self.last_persisted = 0
            self.owners.clear()
        else:
            assert group.generation_id >= self.last_generation, "generation went backwards"
            self.last_generation = group.generation_id
            if group.persisted is not None:
                assert group.persisted.generation >= self.last_persisted, "stored generation fell"
                self.last_persisted = group.persisted.generation
        self.ctx.check_replay_equivalence()

    def quiesce(self) -> None:
        """Stop the chaos; let live members act until the group is Stable and complete."""
        for _ in range(400):
            live = [m for m in self.members if m.phase != "dead"]
            for m in live:
                self.act(m)
            self.check()
            group = self.ctx.shard.groups.get(GROUP)
            if (
                live
                and group is not None
                and group.state is GroupState.STABLE
                and all(m.phase == "stable" and m.generation == group.generation_id for m in live)
                and {m.member_id for m in live} == set(group.members)
            ):
                break
            self.ctx.sleep(500)
        else:
            if any(m.phase != "dead" for m in self.members):
                group = self.ctx.shard.groups.get(GROUP)
                raise AssertionError(
                    f"group did not settle: {group and group.state}, gen "
                    f"{group and group.generation_id}, members {group and list(group.members)}, "
                    f"pending {group and list(group.pending_members)}; clients "
                    f"{[(m.name, m.member_id, m.phase, m.generation) for m in self.members]}"
                )
            return
        live = [m for m in self.members if m.phase != "dead"]
        wanted = {(t, p) for m in live for t in m.topics for p in range(TOPICS[t])}
        owned = [tp for m in live for tp in m.assignment]
        assert len(owned) == len(set(owned)) and set(owned) == wanted, (sorted(owned), wanted)


def run(seed: int) -> None:
    sim = Sim(seed)
    for _ in range(3):
        sim.send_join(sim.new_member())
    for _ in range(STEPS):
        sim.step()
    sim.quiesce()
    sim.ctx.reload()
    sim.check()


@pytest.mark.parametrize("seed", SEEDS)
def test_simulation(seed: int) -> None:
    try:
        run(seed)
    except AssertionError as exc:
        raise AssertionError(
            f"simulation seed {seed} failed; reproduce with ODRADEK_SIM_SEED={seed}: {exc}"
        ) from exc


def test_same_seed_same_log() -> None:
    a, b = Sim(7), Sim(7)
    for sim in (a, b):
        for _ in range(3):
            sim.send_join(sim.new_member())
        for _ in range(100):
            sim.step()
    assert a.ctx.log == b.ctx.log and a.ctx.time == b.ctx.time
