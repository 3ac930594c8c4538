"""Fault injection against a 3-broker cluster (issue 15's acceptance suite).

Three brokers and etcd (`LocalCluster`); a topic with replication factor 3 and
``min.insync.replicas=2``; two confluent-kafka idempotent producers (acks=all) and a
3-member classic consumer group run while a seeded schedule SIGKILLs (then restarts)
or SIGSTOPs (then SIGCONTs: a paused broker keeps its sockets but answers nothing,
which stands in for a network partition) the leader of a data partition, the group's
coordinator (leader of its ``__consumer_offsets`` partition) or the controller.

Afterwards, with the load stopped, every ISR full and the cluster stopped cleanly:

(a) every acknowledged record is in the log of every replica of the final ISR,
    exactly once, at its acknowledged offset, and the replicas' logs are identical
    up to their common end (read from disk);
(b) every commit a consumer saw succeed is <= the group's final committed offset,
    and the offset commits stored in ``__consumer_offsets`` never go backwards;
(c) no partition was assigned to two members in one generation (the group's
    GroupMetadata records on disk), every assignment a consumer was handed is one
    the coordinator recorded, and no two consumers held a partition at the same
    time except where the earlier holder had been expelled (``on_lost``);
(d) after each fault the group is Stable with 3 members, and every member has
    committed again, within `RECOVERY_BOUND_S` of the fault.

``ODRADEK_FAULT_SEED`` picks the schedule (printed, and in every assertion message);
the same seed gives the same faults, targets, durations and partitions. Which broker
a target names depends on the run (who leads at that moment); it is printed too.
"""

from __future__ import annotations

import enum
import itertools
import os
import random
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cluster_harness import (
    LEASE_TTL_MS,
    OFFSETS_TOPIC,
    GroupProbe,
    cluster_metadata,
    controller_id,
    coordinator_id,
    describe_metadata,
    group_partition,
    log_paths,
    partition_leader,
    read_replica_log,
    running_cluster,
    wait_for,
    wait_fully_replicated,
)
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.coordinator.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from odradek.devcluster.launcher import LocalCluster
from odradek.protocol.consumer_protocol import flatten, parse_assignment

SEED_ENV = "ODRADEK_FAULT_SEED"
DEFAULT_SEED = 20261124
TOPIC = "faults"
PARTITIONS = 3
GROUP = "fault-group"
MEMBERS = 3
PRODUCERS = 2

SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms
# The group must be Stable with every member committing again within this long of a
# fault: the broker is declared dead when its lease ends (LEASE_TTL_MS); the
# controller then elects new leaders from the ISR and the new coordinator loads the
# group from its log (allowance below, generous for 2 loaded cores); a member that
# could not heartbeat meanwhile may be expelled after its session timeout and rejoin,
# which the same allowance covers. A paused broker is resumed within
# MAX_PAUSE_S < this bound, so "the fault is over" is inside it too.
LOAD_AND_ELECTION_ALLOWANCE_S = 5.0
RECOVERY_BOUND_S = SESSION_TIMEOUT_MS / 1000 + LEASE_TTL_MS / 1000 + LOAD_AND_ELECTION_ALLOWANCE_S
MIN_DOWN_S, MAX_DOWN_S = 1.0, 4.0  # a killed broker stays down this long
MIN_PAUSE_S, MAX_PAUSE_S = 2.0, 6.0  # (some pauses end before the lease does)
HEALTHY_TIMEOUT_S = 60.0  # every ISR full and the group Stable before the next fault

COMMIT_EVERY = 50  # messages a member consumes between synchronous commits
MAX_IN_FLIGHT = 500  # per producer
PRODUCE_INTERVAL_S = 0.01
FLUSH_TIMEOUT_S = 30.0
JOIN_TIMEOUT_S = 30.0


class Kind(enum.Enum):
    KILL = "SIGKILL+restart"
    PAUSE = "SIGSTOP+SIGCONT"


class Target(enum.Enum):
    DATA_LEADER = "data-partition leader"
    COORDINATOR = "group coordinator"
    CONTROLLER = "controller"


@dataclass(frozen=True, slots=True)
class Fault:
    kind: Kind
    target: Target
    duration_s: float  # down (KILL) or paused (PAUSE) for this long
    partition: int  # the data partition whose leader DATA_LEADER names

    def __str__(self) -> str:
        where = f" of {TOPIC}-{self.partition}" if self.target is Target.DATA_LEADER else ""
        return f"{self.kind.value} {self.target.value}{where} for {self.duration_s:.1f} s"


def fault_schedule(seed: int, count: int) -> list[Fault]:
    """`count` faults; every run of three hits each target once, with both kinds."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    while len(faults) < count:
        targets = list(Target)
        rng.shuffle(targets)
        kinds = [Kind.KILL, Kind.PAUSE, rng.choice(list(Kind))]
        rng.shuffle(kinds)
        for target, kind in zip(targets, kinds, strict=True):
            low, high = (
                (MIN_DOWN_S, MAX_DOWN_S) if kind is Kind.KILL else (MIN_PAUSE_S, MAX_PAUSE_S)
            )
            faults.append(Fault(kind, target, rng.uniform(low, high), rng.randrange(PARTITIONS)))
    return faults[:count]


def run_seed() -> int:
    return int(os.environ.get(SEED_ENV, DEFAULT_SEED))


# ---------------------------------------------------------------------------
# The load


class ProducerLoad(threading.Thread):
    """An idempotent acks=all producer writing unique values until stopped; records what
    the broker acknowledged, from the delivery callbacks."""

    def __init__(self, name: str, bootstrap: str) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.stopping = threading.Event()
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.failed: list[str] = []
        self.fatal: list[str] = []
        self.unflushed = -1
        self.crash: BaseException | None = None

    def _delivered(self, error: KafkaError | None, message: object) -> None:
        if error is not None:
            self.failed.append(f"{message.value()!r}: {error}")  # type: ignore[attr-defined]
        else:
            self.acked.append((message.partition(), message.offset(), message.value()))  # type: ignore[attr-defined]

    def _error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal.append(str(error))

    def run(self) -> None:
        try:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "error_cb": self._error,
                }
            )
            sequence = 0
            while not self.stopping.is_set():
                if len(producer) >= MAX_IN_FLIGHT:
                    producer.poll(0.05)
                    continue
                value = f"{self.name}-{sequence}".encode()
                sequence += 1
                producer.produce(TOPIC, value=value, on_delivery=self._delivered)
                producer.poll(PRODUCE_INTERVAL_S)
            self.unflushed = producer.flush(FLUSH_TIMEOUT_S)
        except BaseException as exc:
            self.crash = exc


@dataclass(slots=True)
class Ownership:
    """One consumer's rebalance callback: assign, revoke or lost, of these partitions."""

    at: float
    event: str
    member_id: str
    partitions: frozenset[int]


class GroupMember(threading.Thread):
    """A confluent-kafka consumer in the group (classic protocol, eager range assignor)
    that commits synchronously every `COMMIT_EVERY` messages and remembers what each
    commit acknowledged and every assignment it was handed."""

    def __init__(self, index: int, bootstrap: str) -> None:
        super().__init__(name=f"member-{index}", daemon=True)
        self.bootstrap = bootstrap
        self.stopping = threading.Event()
        self.ownership: list[Ownership] = []
        self.commits: list[tuple[float, dict[int, int]]] = []  # (when, partition -> offset)
        self.commit_failures: list[str] = []
        self.consumed = 0
        self.crash: BaseException | None = None

    def _callback(self, event: str):  # type: ignore[no-untyped-def]
        def record(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self.ownership.append(
                Ownership(
                    time.monotonic(),
                    event,
                    consumer.memberid() or "",
                    frozenset(tp.partition for tp in partitions),
                )
            )

        return record

    def last_commit_at(self) -> float:
        return self.commits[-1][0] if self.commits else 0.0

    def run(self) -> None:
        try:
            consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": GROUP,
                    "group.protocol": "classic",
                    "partition.assignment.strategy": "range",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "session.timeout.ms": SESSION_TIMEOUT_MS,
                    "heartbeat.interval.ms": 1000,
                    "max.poll.interval.ms": 120_000,
                }
            )
            consumer.subscribe(
                [TOPIC],
                on_assign=self._callback("assign"),
                on_revoke=self._callback("revoke"),
                on_lost=self._callback("lost"),
            )
            try:
                since_commit = 0
                while not self.stopping.is_set():
                    messages = consumer.consume(200, 0.2)
                    good = sum(1 for m in messages if m.error() is None)
                    self.consumed += good
                    since_commit += good
                    if since_commit >= COMMIT_EVERY:
                        since_commit = 0
                        self._commit(consumer)
            finally:
                consumer.close()
        except BaseException as exc:
            self.crash = exc

    def _commit(self, consumer: Consumer) -> None:
        try:
            result = consumer.commit(asynchronous=False)
        except KafkaException as exc:
            self.commit_failures.append(str(exc))
            return
        done = {
            tp.partition: tp.offset for tp in result or () if tp.error is None and tp.offset >= 0
        }
        if done:
            self.commits.append((time.monotonic(), done))


# ---------------------------------------------------------------------------
# The run


@dataclass
class Run:
    seed: int
    schedule: list[Fault]
    cluster: LocalCluster
    probe: GroupProbe
    producers: list[ProducerLoad] = field(default_factory=list)
    members: list[GroupMember] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    recoveries: list[float] = field(default_factory=list)

    def say(self, line: str) -> None:
        print(line, flush=True)
        self.log.append(line)

    def context(self) -> str:
        """What every assertion message carries: the seed, the schedule, what happened."""
        lines = [f"seed {self.seed} ({SEED_ENV}={self.seed} reproduces the schedule)"]
        lines += [f"  fault {i}: {f}" for i, f in enumerate(self.schedule)]
        lines += ["events:", *(f"  {line}" for line in self.log[-40:])]
        lines.append(f"broker logs: {log_paths(self.cluster)}")
        return "\n".join(lines)

    def acked_count(self) -> int:
        return sum(len(p.acked) for p in self.producers)


def group_recovered(run: Run, since: float) -> bool:
    """Stable with every member, and every member committed after `since`."""
    if run.probe.stable_members(GROUP) != MEMBERS:
        return False
    return all(member.last_commit_at() > since for member in run.members)


def resolve_target(run: Run, fault: Fault) -> int:
    md = cluster_metadata(run.cluster)
    if fault.target is Target.DATA_LEADER:
        broker = partition_leader(md, TOPIC, fault.partition)
    elif fault.target is Target.COORDINATOR:
        broker = coordinator_id(md, GROUP)
        described = run.probe.describe(GROUP)
        found = described.coordinator.node_id if described and described.coordinator else None
        assert found == broker, (
            f"FindCoordinator names {found}, etcd's leader of the group's partition is "
            f"{broker}\n{run.context()}"
        )
    else:
        broker = controller_id(md)
        answered = run.probe.controller_id()
        assert answered == broker, (
            f"Metadata names controller {answered}, etcd {broker}\n{run.context()}"
        )
    assert broker in run.cluster.broker_ids, (
        f"no live broker for {fault.target.value}: {describe_metadata(md)}\n{run.context()}"
    )
    return broker


def inject(run: Run, index: int, fault: Fault) -> None:
    """One fault: inject it, end it after its duration (restart / resume, on a thread
    so the group is watched meanwhile), and measure how long the group takes to
    recover; then wait until every ISR is full and the group Stable again."""
    broker = resolve_target(run, fault)
    acked_before = run.acked_count()
    run.say(f"fault {index}: {fault} -> broker {broker}")
    ended = threading.Event()
    end_error: list[BaseException] = []

    def end_fault() -> None:
        try:
            time.sleep(fault.duration_s)
            if fault.kind is Kind.KILL:
                run.cluster.start(broker)
            else:
                run.cluster.resume(broker)
        except BaseException as exc:
            end_error.append(exc)
        finally:
            ended.set()

    started = time.monotonic()
    if fault.kind is Kind.KILL:
        run.cluster.kill(broker)
    else:
        run.cluster.pause(broker)
    ender = threading.Thread(target=end_fault, name="end-fault", daemon=True)
    ender.start()
    recovered_at: float | None = None
    hard_deadline = started + fault.duration_s + RECOVERY_BOUND_S + HEALTHY_TIMEOUT_S
    while recovered_at is None or not ended.is_set():
        if recovered_at is None and group_recovered(run, started):
            recovered_at = time.monotonic()
        assert time.monotonic() < hard_deadline, (
            f"fault {index}: the group did not recover (probe: {run.probe.last_error})\n"
            + run.context()
        )
        time.sleep(0.1)
    ender.join()
    assert not end_error, f"ending fault {index} failed: {end_error[0]!r}\n{run.context()}"
    recovery = recovered_at - started
    run.recoveries.append(recovery)
    run.say(f"fault {index}: group Stable with every member committing after {recovery:.2f} s")
    assert recovery <= RECOVERY_BOUND_S, (
        f"fault {index}: the group took {recovery:.2f} s to recover, more than "
        f"session timeout + lease TTL + {LOAD_AND_ELECTION_ALLOWANCE_S} s = "
        f"{RECOVERY_BOUND_S} s\n{run.context()}"
    )
    healthy_from = time.monotonic()
    md = wait_fully_replicated(run.cluster, HEALTHY_TIMEOUT_S, run.context)
    wait_for(
        f"fault {index}: group Stable with {MEMBERS} members",
        lambda: True if run.probe.stable_members(GROUP) == MEMBERS else None,
        HEALTHY_TIMEOUT_S,
        run.context,
    )
    wait_for(
        f"fault {index}: producers acknowledged records after the fault",
        lambda: True if run.acked_count() > acked_before else None,
        HEALTHY_TIMEOUT_S,
        run.context,
    )
    run.say(
        f"fault {index}: every ISR full again {time.monotonic() - healthy_from:.1f} s later; "
        f"controller {controller_id(md)}, coordinator {coordinator_id(md, GROUP)}"
    )


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path / "cluster") as local:
        yield local


def run_faults(cluster: LocalCluster, count: int) -> None:
    seed = run_seed()
    schedule = fault_schedule(seed, count)
    run = Run(seed, schedule, cluster, GroupProbe(cluster.bootstrap_servers()))
    print(f"\nfault schedule, seed {seed} ({SEED_ENV}):", flush=True)
    for i, fault in enumerate(schedule):
        print(f"  fault {i}: {fault}", flush=True)
    bootstrap = cluster.bootstrap_servers()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    config = {"min.insync.replicas": "2"}
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config=config)]).values():
        future.result(30)
    run.producers = [ProducerLoad(f"p{i}", bootstrap) for i in range(PRODUCERS)]
    run.members = [GroupMember(i, bootstrap) for i in range(MEMBERS)]
    try:
        for thread in (*run.producers, *run.members):
            thread.start()
        # the group forms (its __consumer_offsets topic is created on the first
        # FindCoordinator) and every member commits once
        wait_for(
            "the group formed", lambda: True if group_recovered(run, 0.0) else None, 60, run.context
        )
        wait_fully_replicated(cluster, HEALTHY_TIMEOUT_S, run.context)
        for index, fault in enumerate(schedule):
            inject(run, index, fault)
    finally:
        for thread in (*run.members, *run.producers):
            thread.stopping.set()
        for thread in (*run.members, *run.producers):
            thread.join(FLUSH_TIMEOUT_S + JOIN_TIMEOUT_S)
    committed = wait_for(
        "the final committed offsets", lambda: run.probe.committed(GROUP), 30, run.context
    )
    run.probe.close()
    final = wait_fully_replicated(cluster, HEALTHY_TIMEOUT_S, run.context)
    run.say(f"final: {describe_metadata(final)}")
    times = ", ".join(f"{r:.2f} s" for r in run.recoveries)
    run.say(f"recovery times: {times} (bound {RECOVERY_BOUND_S} s)")
    cluster.stop_all()
    check_clients_ended(run)
    check_acked_records(run, final)
    check_commits(run, committed, final)
    check_generations(run, final)


def check_clients_ended(run: Run) -> None:
    for thread in (*run.producers, *run.members):
        assert not thread.is_alive(), f"{thread.name} did not stop\n{run.context()}"
        assert thread.crash is None, f"{thread.name} raised {thread.crash!r}\n{run.context()}"
    for producer in run.producers:
        assert not producer.fatal, (
            f"{producer.name}: fatal errors {producer.fatal}\n{run.context()}"
        )
        assert producer.unflushed == 0, (
            f"{producer.name}: {producer.unflushed} records never delivered\n{run.context()}"
        )
    run.say(
        f"acked {run.acked_count()} records, {sum(len(p.failed) for p in run.producers)} failed; "
        f"consumed {sum(m.consumed for m in run.members)}; "
        f"commits {sum(len(m.commits) for m in run.members)} "
        f"({sum(len(m.commit_failures) for m in run.members)} failed)"
    )


def check_acked_records(run: Run, final) -> None:  # type: ignore[no-untyped-def]
    """(a) every acked record once, at its offset, on every ISR replica; replicas agree."""
    acked: dict[int, dict[int, bytes]] = defaultdict(dict)
    for producer in run.producers:
        for partition, offset, value in producer.acked:
            assert offset not in acked[partition], (
                f"{TOPIC}-{partition} offset {offset} acknowledged twice: "
                f"{acked[partition][offset]!r} and {value!r}\n{run.context()}"
            )
            acked[partition][offset] = value
    for partition in range(PARTITIONS):
        isr = final.partitions[(TOPIC, partition)].state.isr
        logs = {b: read_replica_log(run.cluster, b, TOPIC, partition) for b in isr}
        for broker, log in logs.items():
            at = {r.offset: r.value for r in log.records}
            seen: dict[bytes | None, int] = {}
            for record in log.records:
                assert record.value not in seen, (
                    f"broker {broker} {TOPIC}-{partition}: {record.value!r} at offsets "
                    f"{seen[record.value]} and {record.offset}\n{run.context()}"
                )
                seen[record.value] = record.offset
            missing = {o: v for o, v in acked[partition].items() if at.get(o) != v}
            assert not missing, (
                f"broker {broker} {TOPIC}-{partition} (log {log.start_offset}..{log.end_offset}): "
                f"{len(missing)} acknowledged records not at their offsets, e.g. "
                f"{sorted(missing.items())[:5]} (found there: "
                f"{[(o, at.get(o)) for o in sorted(missing)[:5]]})\n{run.context()}"
            )
        common_end = min(log.end_offset for log in logs.values())
        contents = {
            b: [(r.offset, r.value) for r in log.records if r.offset < common_end]
            for b, log in logs.items()
        }
        first = next(iter(contents.values()))
        for content in contents.values():
            assert content == first, (
                f"{TOPIC}-{partition}: replica logs differ below offset {common_end} "
                f"(brokers {list(contents)})\n{run.context()}"
            )
        run.say(
            f"{TOPIC}-{partition}: {len(acked[partition])} acked records on ISR {list(isr)}, "
            f"log ends {[log.end_offset for log in logs.values()]}"
        )


def offsets_records(run: Run, final):  # type: ignore[no-untyped-def]
    """The group's records in its __consumer_offsets partition, read from the leader's log."""
    partition = group_partition(final, GROUP)
    leader = partition_leader(final, OFFSETS_TOPIC, partition)
    assert leader is not None
    log = read_replica_log(run.cluster, leader, OFFSETS_TOPIC, partition)
    out = []
    for record in log.records:
        if record.is_control or record.key is None:
            continue
        key = decode_key(record.key)
        if isinstance(key, (GroupMetadataKey, OffsetCommitKey)) and key.group == GROUP:
            out.append((record.offset, key, record.value))
    return out


def check_commits(run: Run, committed: dict[tuple[str, int], int], final) -> None:  # type: ignore[no-untyped-def]
    """(b) no acknowledged commit is above the final one; stored commits never go back."""
    for member in run.members:
        for _, offsets in member.commits:
            for partition, offset in offsets.items():
                final_offset = committed.get((TOPIC, partition))
                assert final_offset is not None and offset <= final_offset, (
                    f"{member.name} saw a commit of {TOPIC}-{partition} at {offset} succeed, "
                    f"the group's final committed offset is {final_offset}\n{run.context()}"
                )
    stored: dict[int, list[int]] = defaultdict(list)
    for _, key, value in offsets_records(run, final):
        if isinstance(key, OffsetCommitKey) and key.topic == TOPIC and value is not None:
            stored[key.partition].append(decode_offset_commit_value(value).offset)
    assert sorted(stored) == sorted(p for t, p in committed if t == TOPIC), (
        f"commits stored for partitions {sorted(stored)}, OffsetFetch answered "
        f"{sorted(committed)}\n{run.context()}"
    )
    for partition, history in stored.items():
        backwards = [(a, b) for a, b in itertools.pairwise(history) if b < a]
        assert not backwards, (
            f"{TOPIC}-{partition}: stored commits went backwards {backwards[:5]}\n{run.context()}"
        )
        assert history[-1] == committed[(TOPIC, partition)], (
            f"{TOPIC}-{partition}: last stored commit {history[-1]}, OffsetFetch said "
            f"{committed[(TOPIC, partition)]}\n{run.context()}"
        )
    run.say(f"final committed offsets {sorted(committed.items())}")


def check_generations(run: Run, final) -> None:  # type: ignore[no-untyped-def]
    """(c) one owner per partition per generation, from the coordinator's records, and
    the consumers' own view agrees."""
    owners: dict[int, dict[int, str]] = defaultdict(dict)  # generation -> partition -> member
    handed: set[tuple[str, frozenset[int]]] = set()  # (member id, partitions) recorded
    for offset, key, value in offsets_records(run, final):
        if not isinstance(key, GroupMetadataKey) or value is None:
            continue
        metadata = decode_group_metadata_value(value)
        for member in metadata.members:
            if not member.assignment:
                continue
            partitions = frozenset(
                p for t, p in flatten(parse_assignment(member.assignment).partitions) if t == TOPIC
            )
            handed.add((member.member_id, partitions))
            for partition in partitions:
                holder = owners[metadata.generation].setdefault(partition, member.member_id)
                assert holder == member.member_id, (
                    f"generation {metadata.generation} (record at offset {offset}): "
                    f"{TOPIC}-{partition} assigned to {holder} and {member.member_id}\n"
                    + run.context()
                )
    run.say(f"generations on disk: {sorted(owners)}")
    intervals: dict[int, list[tuple[float, float, str, str]]] = defaultdict(list)
    for member in run.members:
        held: dict[int, float] = {}
        for event in member.ownership:
            if event.event == "assign":
                assert (event.member_id, event.partitions) in handed, (
                    f"{member.name} ({event.member_id}) was assigned {sorted(event.partitions)}, "
                    f"which no GroupMetadata record gives it\n{run.context()}"
                )
                for partition in event.partitions:
                    held[partition] = event.at
            else:
                for partition in event.partitions:
                    start = held.pop(partition, None)
                    if start is not None:
                        intervals[partition].append((start, event.at, member.name, event.event))
        for partition, start in held.items():
            intervals[partition].append((start, float("inf"), member.name, "end"))
    for partition, spans in intervals.items():
        for s1, e1, m1, how1 in spans:
            for s2, _, m2, _ in spans:
                # a member expelled without knowing it (its partitions then come back
                # "lost") is no longer in the generation whose member took them over
                overlap = m1 != m2 and s1 <= s2 < e1 and how1 != "lost"
                assert not overlap, (
                    f"{TOPIC}-{partition} held by {m1} ({s1:.2f}..{e1:.2f}) and by {m2} "
                    f"from {s2:.2f}\n{run.context()}"
                )


@pytest.mark.timeout(300)
def test_faults_on_each_target_keep_acked_records_commits_and_group(cluster: LocalCluster) -> None:
    run_faults(cluster, count=3)


@pytest.mark.soak
@pytest.mark.timeout(1200)
def test_faults_soak(cluster: LocalCluster) -> None:
    """The long run (12 faults, one to two minutes): `pytest -m soak`, with
    ODRADEK_FAULT_SEED=N to replay a run; the default run has the 3-fault version."""
    run_faults(cluster, count=12)
