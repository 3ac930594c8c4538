"""Cluster mode (issues 15, 21): throughput, failovers, an etcd outage, a network partition.

Everything runs on loopback: etcd and 3 brokers started by `LocalCluster` (each
broker a process of its own, as ``odradek cluster up`` starts them), plus one
single-node ``odradek serve`` (no etcd) for the reference row.

Throughput: N records of a fixed size (``--records``, ``--size``) produced into a
fresh topic of ``--partitions`` partitions per run, with acks=1 and acks=all, by
confluent-kafka (``bench/throughput.py``'s producer and settings) and by Odradek's
client: into the single node (RF=1), and into the cluster with RF=1 and with RF=3
(``min.insync.replicas=2``). Median of ``--repeat`` runs (alternating targets);
records/s and MB/s of values, and RF=3 / RF=1.

Leader failover: an idempotent acks=all confluent-kafka producer sends ``--rate``
records/s into a 1-partition RF=3 topic (``min.insync.replicas=2``); the partition's
leader is SIGKILLed. Measured from the kill: until the new leader shows in the
metadata, until the first acknowledgement of a record sent after the kill, and the
longest gap between two acknowledgements. The broker is restarted and the ISR is
whole again before the next round (``--failovers`` rounds). ``--failover-signals
kill,term`` also stops the leader with SIGTERM (a clean shutdown: the broker revokes
its lease, so its leaderships move at once), ``--failovers`` rounds each; the time
until the stopped process exited is measured too.

Coordinator failover: 3 confluent-kafka consumers (classic protocol, one process,
a thread each) in one group on a 3-partition RF=3 topic that a producer feeds at
``--rate`` records/s; the group is Stable; its coordinator broker is SIGKILLed.
The members' ``session.timeout.ms`` is ``--group-session-timeout-ms`` (45000,
librdkafka's default; a member whose heartbeats go unanswered that long rejoins
under a new member id, and the group then waits for the old ids to expire).
Measured from the kill: until the group is Stable with all 3 members again (the
start of the Stable stretch that lasts to the end of the round; the group is polled
every 100 ms with Odradek's admin client, which answers with descriptions directly,
while librdkafka's admin client asserts when a request times out against the dead
broker), and until every partition delivered a record produced after the kill
(partitions the dead broker led wait for their own leader election too).

etcd outage (issue 21): a cluster of 3 brokers and a 3-member etcd (``cluster up
--etcd-members 3``, every broker given every member), ``broker.session.timeout.ms``
9000 (the default); an idempotent acks=all producer sends ``--rate`` records/s into a
3-partition RF=3 topic (``min.insync.replicas=2``); every etcd member is SIGKILLed,
left down ``--etcd-outage-s`` (10) seconds, then started again (while the producer
keeps sending). Measured per round: the longest gap between two acknowledgements
from the kill until 2 s after etcd serves again, the same over an equally long
window with no fault just before (the baseline), and the partitions whose leader or
leader epoch changed (``--etcd-outages`` rounds, median).

Network partition (issue 21): the fault suite's cluster (``tests/cluster/fault_cluster.py``:
3 brokers, a 3-member etcd, and a loopback proxy in front of every broker and etcd
member that can blackhole each directed link, ``tests/cluster/link_proxy.py``), with
the default ``broker.session.timeout.ms`` (9000) and ``replica.lag.time.max.ms``
(30000); an idempotent acks=all producer sends ``--rate`` records/s, round-robin, into
a 3-partition RF=3 topic (``min.insync.replicas=2``). The leader of partition 0 is cut
off: from etcd and the other brokers both ways (variant ``servers``), or from those and
from its clients too (``all``). Measured from the cut: until etcd names new leaders for
every partition it led, until each of them acknowledges a record sent after the cut,
the longest gap between acknowledgements on its partitions and on the others; then the
links heal and the round ends when every ISR is whole again (``--partition-cuts``
rounds per variant in ``--partition-variants``). The producer's ``socket.timeout.ms``
is ``--producer-socket-timeout-ms`` (librdkafka's 60000).

Both failovers run once per ``--session-timeouts`` value (``broker.session.timeout.ms``,
how long a killed broker's etcd lease outlives it; 9000 is the default), each on a
fresh cluster.

    python bench/cluster.py                              # about 12 minutes, 7 of them partitions
    python bench/cluster.py --skip-throughput --failovers 5
    python bench/cluster.py --records 500000 --size 1024 --repeat 5 --skip-failover
    python bench/cluster.py --session-timeouts 3000 --json out.json
    python bench/cluster.py --skip-throughput --skip-failover --etcd-outages 5
    python bench/cluster.py --skip-throughput --skip-coordinator --skip-etcd-outage \
        --skip-partition --session-timeouts 9000 --failovers 5 --failover-signals kill,term
    python bench/cluster.py --skip-throughput --skip-failover --skip-etcd-outage \
        --partition-cuts 5

Every process this script starts (etcd, brokers) is stopped at exit, also on errors
and Ctrl-C; ``--keep-dir DIR`` keeps the clusters' data and logs (``DIR/st-<ms>/logs``,
``DIR/partition/cluster/logs``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from confluent_kafka import Consumer, Producer
from confluent_kafka import libversion as rdkafka_version
from confluent_kafka import version as ck_version
from report import markdown_table  # bench/report.py (scripts run from bench/)
from throughput import PRODUCER_SETTINGS, Result, Target, median_result
from throughput import produce as produce_confluent

from odradek.client import Producer as OdradekProducer
from odradek.client.admin import AdminClient, NewTopic
from odradek.cluster.metadata import EtcdMetadataStore
from odradek.devcluster.launcher import LocalCluster, run_coroutine

BROKERS = 3
START_TIMEOUT_S = 90.0
STEP_TIMEOUT_S = 90.0  # a failover, a restart, an ISR catching up
POLL_S = 0.1
QUIET = {"log_level": 2}  # librdkafka: no connection-refused lines while a broker is down
CLUSTER_SETTINGS = {"group.initial.rebalance.delay.ms": "0"}
FAILOVER_PRODUCER: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "linger.ms": 5,
    "message.timeout.ms": 120_000,
    **QUIET,
}
GROUP_CONSUMER: dict[str, Any] = {
    "heartbeat.interval.ms": 1_000,
    "partition.assignment.strategy": "range",
    "auto.offset.reset": "latest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 1_000,
    "fetch.wait.max.ms": 100,
    **QUIET,
}
GROUP_MEMBERS = 3
GROUP_PARTITIONS = 3


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = STEP_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = predicate()
        except Exception:  # a broker down or electing: ask again
            value = None
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no {what} after {timeout_s:.0f} s")
        time.sleep(POLL_S)


def admin_for(bootstrap: str) -> AdminClient:
    # Short request timeouts: a request to the broker just killed must not hold a poll.
    return AdminClient(
        bootstrap_servers=bootstrap,
        client_id="odradek-bench-cluster",
        request_timeout_ms=2_000,
        default_api_timeout_ms=5_000,
        socket_connection_setup_timeout_ms=1_000,
        metadata_max_age_ms=500,
        retry_backoff_max_ms=200,  # retries close together: the answer's time is the measurement
    )


def create_topic(admin: AdminClient, partitions: int, rf: int, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    config = {"min.insync.replicas": "2"} if rf >= 3 else None
    admin.create_topics([NewTopic(name, partitions, rf, config=config)])[name].result(30)
    wait_for(lambda: isr_whole(admin, name), f"leaders and a whole ISR for {name}")
    return name


def isr_whole(admin: AdminClient, *topics: str) -> bool:
    described = admin.describe_topics(topics, include_offsets=False)
    return all(
        p.leader >= 0 and sorted(p.isr) == sorted(p.replicas)
        for topic in described.values()
        for p in topic.partitions
    )


def leader_of(admin: AdminClient, topic: str, partition: int = 0) -> int:
    [description] = admin.describe_topics([topic], include_offsets=False).values()
    return next(p.leader for p in description.partitions if p.partition == partition)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def spread(values: list[float]) -> str:
    """min / median / max, seconds."""
    if not values:
        return "-"
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


@contextlib.contextmanager
def local_cluster(
    root: Path, session_timeout_ms: int, etcd_members: int = 1
) -> Iterator[LocalCluster]:
    settings = {**CLUSTER_SETTINGS, "broker.session.timeout.ms": str(session_timeout_ms)}
    cluster = LocalCluster.prepare(
        root, brokers=BROKERS, settings=settings, etcd_members=etcd_members
    )
    try:
        cluster.start_all(timeout_s=START_TIMEOUT_S)
        log(f"cluster {root}: {cluster.bootstrap_servers()}, {settings}")
        yield cluster
    finally:
        cluster.stop_all(timeout_s=10.0)


# =================================================================== throughput


def produce_odradek(target: Target, topic: str, count: int, size: int, acks: str) -> Result:
    """Odradek's producer, the settings of throughput.py's confluent-kafka producer."""
    errors: list[BaseException] = []

    def delivered(error: BaseException | None, _metadata: Any) -> None:
        if error is not None:
            errors.append(error)

    producer = OdradekProducer(
        bootstrap_servers=target.bootstrap,
        acks=acks,
        linger_ms=PRODUCER_SETTINGS["linger.ms"],
        batch_size=PRODUCER_SETTINGS["batch.size"],
        enable_idempotence=False,
        buffer_memory=256 * 1024 * 1024,
    )
    try:
        producer.send(topic, b"w" * size)  # warm-up: metadata and connections
        producer.flush(30)
        payload = os.urandom(size)
        started = time.perf_counter()
        for _ in range(count):
            producer.send(topic, payload, on_delivery=delivered)
        producer.flush(120)
        elapsed = time.perf_counter() - started
    finally:
        producer.close(10)
    note = f"{len(errors)} failed: {errors[0]!r}" if errors else ""
    return Result(count - len(errors), elapsed, size, errors=len(errors), note=note)


def run_throughput(
    args: argparse.Namespace, cluster: LocalCluster, single_bootstrap: str | None
) -> dict[str, Any]:
    cluster_admin = admin_for(cluster.bootstrap_servers())
    targets: list[tuple[str, Target, AdminClient, int]] = []
    single_admin = None
    if single_bootstrap:
        single_admin = admin_for(single_bootstrap)
        targets.append(("single node", Target("single", single_bootstrap), single_admin, 1))
    cluster_target = Target("cluster", cluster.bootstrap_servers())
    targets += [
        ("cluster RF=1", cluster_target, cluster_admin, 1),
        ("cluster RF=3", cluster_target, cluster_admin, 3),
    ]
    clients: list[tuple[str, Callable[..., Result]]] = [("confluent-kafka", produce_confluent)]
    if not args.skip_odradek_client:
        clients.append(("odradek", produce_odradek))
    cells: dict[tuple[str, str, str], list[Result]] = {}
    try:
        for client, produce in clients:
            for acks in ("1", "all"):
                for rep in range(args.repeat):
                    for label, target, admin, rf in targets:
                        topic = create_topic(admin, args.partitions, rf, f"bench-rf{rf}-{rep}")
                        if client == "confluent-kafka":
                            result = produce(target, topic, args.records, args.size, acks, 120.0)
                        else:
                            result = produce(target, topic, args.records, args.size, acks)
                        cells.setdefault((client, acks, label), []).append(result)
                        log(
                            f"  {client:<15} acks={acks:<3} {label:<12} {result.msgs_per_s:>10,.0f}"
                            f" records/s {result.mb_per_s:7.1f} MB/s"
                            + (f" ({result.note})" if result.note else "")
                        )
    finally:
        cluster_admin.close()
        if single_admin is not None:
            single_admin.close()
    labels = [label for label, *_ in targets]
    head = ["client", "acks"]
    for label in labels:
        head += [f"{label} records/s", "MB/s"]
    head.append("RF=3 / RF=1")
    lines = [head]
    rows = []
    for client, _ in clients:
        for acks in ("1", "all"):
            line = [client, acks]
            medians = {label: median_result(cells[(client, acks, label)]) for label in labels}
            for label in labels:
                r = medians[label]
                flag = "*" if r.errors or r.note else ""
                line += [f"{r.msgs_per_s:,.0f}{flag}", f"{r.mb_per_s:.1f}"]
            rf1, rf3 = medians["cluster RF=1"].msgs_per_s, medians["cluster RF=3"].msgs_per_s
            line.append(f"{rf3 / rf1:.2f}" if rf1 else "-")
            lines.append(line)
            rows.append(
                {
                    "client": client,
                    "acks": acks,
                    "runs": {
                        label: [
                            {"records": r.messages, "seconds": r.seconds, "errors": r.errors}
                            for r in cells[(client, acks, label)]
                        ]
                        for label in labels
                    },
                }
            )
    print(
        f"Produce throughput: {args.records:,} records of {args.size} B, {args.partitions} "
        f"partitions, median of {args.repeat} (* = errors in that cell)"
    )
    print(markdown_table(lines))
    print()
    return {"rows": rows}


# ============================================================== leader failover


class Ack(NamedTuple):
    when: float
    index: int  # the record's place in `AckClock.sent`
    partition: int
    offset: int


class AckClock:
    """An acks=all producer at a fixed rate; when each record was sent and acknowledged.

    With `partitions`, record i goes to partition i % partitions (so each partition gets
    its share at a known rate); without, the producer's partitioner chooses."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        rate: float,
        partitions: int = 0,
        settings: dict[str, Any] | None = None,
    ) -> None:
        self.topic = topic
        self.partitions = partitions
        self.interval = 1.0 / rate
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, **FAILOVER_PRODUCER, **(settings or {})}
        )
        self.sent: list[float] = []
        self.acked: list[Ack] = []
        self.errors: list[str] = []
        self._next = time.monotonic()

    def _delivered(self, index: int) -> Callable[[Any, Any], None]:
        def callback(error: Any, message: Any) -> None:
            if error is not None:
                self.errors.append(str(error))
            else:
                self.acked.append(
                    Ack(time.monotonic(), index, message.partition(), message.offset())
                )

        return callback

    def run_until(self, done: Callable[[], bool], timeout_s: float) -> None:
        """Send at the rate and serve callbacks until `done()` or the timeout."""
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:
            now = time.monotonic()
            if now >= self._next:
                index = len(self.sent)
                self.sent.append(now)
                where = {"partition": index % self.partitions} if self.partitions else {}
                self.producer.produce(
                    self.topic, b"%d" % index, on_delivery=self._delivered(index), **where
                )
                self._next += self.interval
            self.producer.poll(max(0.0, min(self._next - time.monotonic(), 0.005)))

    def _acks(self, partitions: Iterable[int] | None) -> list[Ack]:
        if partitions is None:
            return self.acked
        wanted = set(partitions)
        return [a for a in self.acked if a.partition in wanted]

    def first_ack_of_record_sent_after(
        self, t: float, partitions: Iterable[int] | None = None
    ) -> float | None:
        times = [a.when for a in self._acks(partitions) if self.sent[a.index] > t]
        return min(times) if times else None

    def longest_gap(self) -> float:
        times = sorted(a.when for a in self.acked)
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)

    def gap_between(
        self, start: float, end: float, partitions: Iterable[int] | None = None
    ) -> float:
        """The longest time in [start, end] with no acknowledgement (on `partitions`)."""
        times = [start, *sorted(a.when for a in self._acks(partitions) if start <= a.when <= end)]
        return max(b - a for a, b in itertools.pairwise([*times, end]))

    def duplicate_offsets(self) -> int:
        """Acknowledgements of an offset already acknowledged (a record written twice)."""
        offsets = [(a.partition, a.offset) for a in self.acked]
        return len(offsets) - len(set(offsets))

    def close(self) -> int:
        """Flush; the records never acknowledged."""
        return self.producer.flush(60)


def watch_leader(
    admin: AdminClient, topic: str, old: int, stop: threading.Event, seen: list[float]
) -> None:
    """Append the time the metadata first names a leader other than `old`."""
    while not stop.is_set():
        with contextlib.suppress(Exception):
            if leader_of(admin, topic) not in (-1, old):
                seen.append(time.monotonic())
                return
        time.sleep(POLL_S)


FAILOVER_SIGNALS = {"kill": "SIGKILL", "term": "SIGTERM"}


def leader_failover_round(
    cluster: LocalCluster, admin: AdminClient, topic: str, rate: float, how: str
) -> dict[str, Any]:
    """Stop the partition's leader with SIGKILL (`how` "kill": a crash) or SIGTERM ("term":
    a clean shutdown, which revokes its lease and so hands its leaderships on at once)."""
    clock = AckClock(cluster.bootstrap_servers(), topic, rate)
    clock.run_until(lambda: len(clock.acked) >= rate, STEP_TIMEOUT_S)  # a second of steady acks
    leader = leader_of(admin, topic)
    watcher_admin = admin_for(cluster.bootstrap_servers())
    stop = threading.Event()
    new_leader_seen: list[float] = []
    watcher = threading.Thread(
        target=watch_leader, args=(watcher_admin, topic, leader, stop, new_leader_seen), daemon=True
    )
    exited: list[float] = []

    def terminate() -> None:  # beside the producer: a clean shutdown takes a while
        cluster.stop(leader, timeout_s=STEP_TIMEOUT_S)
        exited.append(time.monotonic())

    stopper = threading.Thread(target=terminate, daemon=True)
    killed = time.monotonic()
    if how == "kill":
        cluster.kill(leader)
        exited.append(time.monotonic())
    else:
        stopper.start()
    try:
        watcher.start()
        clock.run_until(lambda: clock.first_ack_of_record_sent_after(killed) is not None, 120)
        recovered = clock.first_ack_of_record_sent_after(killed)
        steady_again = time.monotonic() + 1.0
        clock.run_until(lambda: time.monotonic() >= steady_again and bool(exited), STEP_TIMEOUT_S)
        unacked = clock.close()
    finally:
        stop.set()
        with contextlib.suppress(RuntimeError):
            watcher.join(10)
        with contextlib.suppress(RuntimeError):
            stopper.join(STEP_TIMEOUT_S + 10)
        watcher_admin.close()
    round_result = {
        "signal": how,
        "killed_broker": leader,
        "exited_s": exited[0] - killed if exited else None,
        "new_leader_in_metadata_s": new_leader_seen[0] - killed if new_leader_seen else None,
        "acked_again_s": None if recovered is None else recovered - killed,
        "longest_ack_gap_s": clock.longest_gap(),
        "sent": len(clock.sent),
        "acked": len(clock.acked),
        "unacked": unacked,
        "errors": len(clock.errors),
        "duplicate_offsets": clock.duplicate_offsets(),
    }
    # Bring the broker back; the next round starts with a whole ISR.
    cluster.start(leader, timeout_s=START_TIMEOUT_S)
    wait_for(lambda: isr_whole(admin, topic), f"{topic}'s ISR whole again")
    return round_result


def run_leader_failover(
    args: argparse.Namespace, cluster: LocalCluster, session_timeout_ms: int
) -> list[dict[str, Any]]:
    admin = admin_for(cluster.bootstrap_servers())
    try:
        topic = create_topic(admin, 1, 3, "bench-failover")
        rounds = []
        for how in args.failover_signals:
            for n in range(args.failovers):
                r = leader_failover_round(cluster, admin, topic, args.rate, how)
                r["session_timeout_ms"] = session_timeout_ms
                rounds.append(r)
                log(
                    f"  leader failover {n + 1}/{args.failovers} ({FAILOVER_SIGNALS[how]}, "
                    f"session {session_timeout_ms} ms): stopped {r['killed_broker']} (exited "
                    f"{fmt_s(r['exited_s'])}), new leader in metadata "
                    f"{fmt_s(r['new_leader_in_metadata_s'])}, acks again "
                    f"{fmt_s(r['acked_again_s'])}, longest gap {r['longest_ack_gap_s']:.2f} s, "
                    f"{r['acked']}/{r['sent']} acked, {r['errors']} errors, "
                    f"{r['duplicate_offsets']} duplicate offsets; load {load_average()}"
                )
        return rounds
    finally:
        admin.close()


def fmt_s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


# ========================================================= coordinator failover


class GroupMember:
    """A confluent-kafka consumer in a thread: when each partition delivered what."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, name: str, session_timeout_ms: int
    ) -> None:
        self.consumer = Consumer(
            {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name}
            | GROUP_CONSUMER
            | {"session.timeout.ms": session_timeout_ms}
        )
        self.deliveries: list[tuple[float, int, float]] = []  # (when, partition, sent wall time)
        self.rebalances: list[float] = []  # when partitions were assigned or taken away
        self.assigned: set[int] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.consumer.subscribe(
            [topic],
            on_assign=lambda _c, ps: self._changed(ps, True),
            on_revoke=lambda _c, ps: self._changed(ps, False),
            on_lost=lambda _c, ps: self._changed(ps, False),
        )
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _changed(self, partitions: list[Any], assigned: bool) -> None:
        with self._lock:
            self.rebalances.append(time.monotonic())
            for p in partitions:
                (self.assigned.add if assigned else self.assigned.discard)(p.partition)

    def _run(self) -> None:
        while not self._stop.is_set():
            for message in self.consumer.consume(100, 0.1):
                if message.error() is None:
                    with self._lock:
                        self.deliveries.append(
                            (time.monotonic(), message.partition(), float(message.value()))
                        )

    def delivered_after(self, sent_after_wall: float) -> dict[int, float]:
        """Partition -> when it first delivered a record sent after `sent_after_wall`."""
        first: dict[int, float] = {}
        with self._lock:
            for when, partition, sent in self.deliveries:
                if sent > sent_after_wall and partition not in first:
                    first[partition] = when
        return first

    def rebalanced_after(self, t: float) -> bool:
        with self._lock:
            return any(when > t for when in self.rebalances)

    def close(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.consumer.close()


class Feeder:
    """A producer thread writing its wall-clock send time as the value, at a fixed rate."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        self.producer = Producer({"bootstrap.servers": bootstrap, **FAILOVER_PRODUCER})
        self.topic = topic
        self.interval = 1.0 / rate
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="feeder", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        index = 0
        next_send = time.monotonic()
        while not self._stop.is_set():
            if time.monotonic() >= next_send:
                self.producer.produce(
                    self.topic, b"%.6f" % time.time(), partition=index % GROUP_PARTITIONS
                )
                index += 1
                next_send += self.interval
            self.producer.poll(max(0.0, min(next_send - time.monotonic(), 0.005)))

    def close(self) -> None:
        self._stop.set()
        self.thread.join(30)
        self.producer.flush(30)


def group_state(admin: AdminClient, group: str) -> tuple[str, int, int | None]:
    """(state, members, coordinator id)."""
    description = admin.describe_consumer_groups([group])[group]
    coordinator = description.coordinator.node_id if description.coordinator else None
    return description.state, len(description.members), coordinator


def group_stable(admin: AdminClient, group: str) -> bool:
    state, members, _ = group_state(admin, group)
    return state == "Stable" and members == GROUP_MEMBERS


def all_partitions_consuming(members: list[GroupMember], since_wall: float) -> float | None:
    """When the last partition first delivered a record sent after `since_wall` (None: not yet)."""
    first: dict[int, float] = {}
    for member in members:
        for partition, when in member.delivered_after(since_wall).items():
            first[partition] = min(when, first.get(partition, when))
    return max(first.values()) if len(first) == GROUP_PARTITIONS else None


def coordinator_failover_round(
    cluster: LocalCluster,
    admin: AdminClient,
    group: str,
    topic: str,
    members: list[GroupMember],
    hold_s: float,
) -> dict[str, Any]:
    wait_for(lambda: group_stable(admin, group), f"group {group} Stable")
    since = time.time()
    wait_for(lambda: all_partitions_consuming(members, since), "every partition consumed", 30)
    _, _, coordinator = group_state(admin, group)
    if coordinator is None:
        raise RuntimeError(f"no coordinator named for {group}")
    killed_wall = time.time()
    killed = time.monotonic()
    cluster.kill(coordinator)
    # Timeline of the group's state from the kill, until it has been Stable with every
    # member for `hold_s` and every partition delivered again (or the step timeout).
    stable_since: float | None = None
    states: list[str] = []
    deadline = killed + STEP_TIMEOUT_S
    consuming: float | None = None
    while time.monotonic() < deadline:
        try:
            state, count, node = group_state(admin, group)
            seen = f"{state} ({count} at {node})"
        except Exception as exc:  # the coordinator is gone or loading: not Stable
            state, count = type(exc).__name__, 0
            seen = state
        now = time.monotonic()  # when the answer came (a call retries until it has one)
        if not states or states[-1] != seen:
            states.append(seen)
        if state == "Stable" and count == GROUP_MEMBERS:
            stable_since = stable_since if stable_since is not None else now
        else:
            stable_since = None
        consuming = consuming or all_partitions_consuming(members, killed_wall)
        if stable_since is not None and consuming and now - stable_since >= hold_s:
            break
        time.sleep(POLL_S)
    _, _, new_coordinator = group_state(admin, group)
    round_result = {
        "killed_broker": coordinator,
        "new_coordinator": new_coordinator,
        "stable_again_s": None if stable_since is None else stable_since - killed,
        "consuming_again_s": None if consuming is None else consuming - killed,
        "states": states,
        "rebalanced": any(m.rebalanced_after(killed) for m in members),
    }
    cluster.start(coordinator, timeout_s=START_TIMEOUT_S)
    wait_for(
        lambda: isr_whole(admin, topic, "__consumer_offsets"),
        "the ISR of the topic and __consumer_offsets whole again",
    )
    return round_result


def run_coordinator_failover(
    args: argparse.Namespace, cluster: LocalCluster, session_timeout_ms: int
) -> list[dict[str, Any]]:
    bootstrap = cluster.bootstrap_servers()
    admin = admin_for(bootstrap)
    group = f"bench-group-{uuid.uuid4().hex[:8]}"
    members: list[GroupMember] = []
    feeder = None
    try:
        topic = create_topic(admin, GROUP_PARTITIONS, 3, "bench-group")
        feeder = Feeder(bootstrap, topic, args.rate)
        members = [
            GroupMember(bootstrap, group, topic, f"member-{i}", args.group_session_timeout_ms)
            for i in range(GROUP_MEMBERS)
        ]
        rounds = []
        for n in range(args.failovers):
            r = coordinator_failover_round(cluster, admin, group, topic, members, args.hold)
            r["session_timeout_ms"] = session_timeout_ms
            rounds.append(r)
            log(
                f"  coordinator failover {n + 1}/{args.failovers} (session {session_timeout_ms} "
                f"ms): killed {r['killed_broker']}, coordinator now {r['new_coordinator']}, "
                f"Stable again {fmt_s(r['stable_again_s'])}, every partition consumed again "
                f"{fmt_s(r['consuming_again_s'])}, rebalanced: {r['rebalanced']}, states "
                f"{' -> '.join(r['states'])}; load {load_average()}"
            )
        return rounds
    finally:
        for member in members:  # each closes even if another could not
            with contextlib.suppress(Exception):
                member.close()
        if feeder is not None:
            with contextlib.suppress(Exception):
                feeder.close()
        admin.close()


# ================================================================= etcd outage

ETCD_OUTAGE_SESSION_MS = 9000
ETCD_OUTAGE_SETTLE_S = 2.0


def leaderships(cluster: LocalCluster) -> dict[tuple[str, int], tuple[int, int]]:
    """Every partition's (leader, leader epoch), as etcd holds them."""

    async def read() -> dict[tuple[str, int], tuple[int, int]]:
        async with EtcdMetadataStore.for_endpoints(
            cluster.etcd_endpoints(), cluster_name=cluster.cluster_name
        ) as store:
            partitions = (await store.cluster()).items.partitions
        return {k: (v.state.leader, v.state.leader_epoch) for k, v in partitions.items()}

    return run_coroutine(read)


def etcd_outage_round(
    cluster: LocalCluster, topic: str, rate: float, outage_s: float
) -> dict[str, Any]:
    clock = AckClock(cluster.bootstrap_servers(), topic, rate)
    clock.run_until(lambda: len(clock.acked) >= rate, STEP_TIMEOUT_S)  # a second of steady acks
    before = leaderships(cluster)
    baseline_start = time.monotonic()
    clock.run_until(lambda: False, outage_s + ETCD_OUTAGE_SETTLE_S)
    killed = time.monotonic()
    baseline = clock.gap_between(baseline_start, killed)
    for member in cluster.etcd_names:
        cluster.kill(member)
    back: list[float] = []

    def restart() -> None:  # beside the producer, which keeps sending meanwhile
        time.sleep(max(0.0, killed + outage_s - time.monotonic()))
        cluster.start_all(timeout_s=START_TIMEOUT_S)
        back.append(time.monotonic())

    restarter = threading.Thread(target=restart, daemon=True)
    restarter.start()
    clock.run_until(lambda: bool(back), outage_s + START_TIMEOUT_S)
    restarter.join(START_TIMEOUT_S)
    if not back:
        raise TimeoutError("etcd did not serve again")
    clock.run_until(lambda: False, ETCD_OUTAGE_SETTLE_S)
    ended = time.monotonic()
    unacked = clock.close()
    after = leaderships(cluster)
    return {
        "outage_s": outage_s,
        "etcd_back_after_s": back[0] - killed,
        "longest_ack_gap_s": clock.gap_between(killed, ended),
        "baseline_longest_ack_gap_s": baseline,
        "leaderships_changed": sum(before.get(k) != v for k, v in after.items()),
        "sent": len(clock.sent),
        "acked": len(clock.acked),
        "unacked": unacked,
        "errors": len(clock.errors),
    }


def run_etcd_outages(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    rounds = []
    with local_cluster(root / "etcd-outage", ETCD_OUTAGE_SESSION_MS, etcd_members=3) as cluster:
        admin = admin_for(cluster.bootstrap_servers())
        try:
            topic = create_topic(admin, 3, 3, "bench-etcd-outage")
        finally:
            admin.close()
        for n in range(args.etcd_outages):
            r = etcd_outage_round(cluster, topic, args.rate, args.etcd_outage_s)
            rounds.append(r)
            log(
                f"  etcd outage {n + 1}/{args.etcd_outages}: etcd back after "
                f"{r['etcd_back_after_s']:.2f} s, longest ack gap {r['longest_ack_gap_s']:.2f} s "
                f"(baseline {r['baseline_longest_ack_gap_s']:.2f} s), "
                f"{r['leaderships_changed']} leaderships changed, {r['acked']}/{r['sent']} "
                f"acked, {r['errors']} errors; load {load_average()}"
            )
    return rounds


def etcd_outage_table(rounds: list[dict[str, Any]]) -> None:
    if not rounds:
        return
    lines = [
        [
            "etcd down, s",
            "rounds",
            "etcd serving again after, s",
            "longest gap between acks, s",
            "same, no fault (baseline), s",
            "leaderships changed",
            "errors",
        ],
        [
            f"{rounds[0]['outage_s']:g}",
            str(len(rounds)),
            spread([r["etcd_back_after_s"] for r in rounds]),
            spread([r["longest_ack_gap_s"] for r in rounds]),
            spread([r["baseline_longest_ack_gap_s"] for r in rounds]),
            str(sum(r["leaderships_changed"] for r in rounds)),
            str(sum(r["errors"] for r in rounds)),
        ],
    ]
    print(
        "etcd outage (SIGKILL every member of a 3-member etcd, restart after the outage) "
        "under acks=all, min / median / max"
    )
    print(markdown_table(lines))
    print()


# ============================================================ network partition

# The fault suite's cluster (tests/cluster/fault_cluster.py): a 3-member etcd, 3 brokers,
# and a loopback proxy in front of every broker and etcd member that can blackhole any
# directed link (tests/cluster/link_proxy.py).
FAULT_SUITE = Path(__file__).resolve().parent.parent / "tests" / "cluster"
PARTITION_TOPIC_PARTITIONS = 3
# What the partitioned broker is cut from: etcd and the other brokers (both ways), and
# in the second variant from its clients (the producer, the bench's admin client) too.
PARTITION_VARIANTS = {
    "servers": "etcd and the other brokers",
    "all": "etcd, the other brokers and its clients",
}
PARTITION_SETTLE_S = 1.0


def fault_cluster(root: Path) -> contextlib.AbstractContextManager[Any]:
    """The fault suite's proxied cluster, with the broker defaults this bench measures
    (the suite shortens the lease and the ISR lag to run faster)."""
    if str(FAULT_SUITE) not in sys.path:
        sys.path.insert(0, str(FAULT_SUITE))
    from fault_cluster import running_fault_cluster

    return running_fault_cluster(
        root,
        settings={
            "broker.session.timeout.ms": str(ETCD_OUTAGE_SESSION_MS),
            "replica.lag.time.max.ms": "30000",
        },
    )


def partition_cut_links(cluster: Any, broker: int, variant: str) -> list[tuple[Any, Any]]:
    """Every directed link that isolates `broker` in `variant` (as the fault suite cuts)."""
    from fault_cluster import etcd_upstreams
    from link_proxy import CLIENT

    others = [b for b in cluster.broker_ids if b != broker]
    links: list[tuple[Any, Any]] = [(broker, m) for m in etcd_upstreams(cluster.quorum)]
    links += [(broker, o) for o in others] + [(o, broker) for o in others]
    if variant == "all":
        links.append((CLIENT, broker))
    return links


def watch_leaders(
    cluster: LocalCluster,
    topic: str,
    led: list[int],
    old: int,
    stop: threading.Event,
    seen: dict[int, float],
) -> None:
    """Record when etcd first names a leader other than `old` for each partition of `led`."""
    while not stop.is_set() and len(seen) < len(led):
        with contextlib.suppress(Exception):
            now_leading = leaderships(cluster)
            now = time.monotonic()
            for partition in led:
                leader, _ = now_leading.get((topic, partition), (-1, 0))
                if partition not in seen and leader not in (-1, old):
                    seen[partition] = now
        time.sleep(POLL_S)


def partition_round(
    cluster: Any, topic: str, rate: float, variant: str, socket_timeout_ms: int
) -> dict[str, Any]:
    from cluster_harness import wait_fully_replicated

    partitions = list(range(PARTITION_TOPIC_PARTITIONS))
    clock = AckClock(
        cluster.bootstrap_servers(),
        topic,
        rate,
        partitions=len(partitions),
        settings={"socket.timeout.ms": socket_timeout_ms},
    )
    started = time.monotonic()
    clock.run_until(  # a second of steady acks on every partition
        lambda: all(
            clock.first_ack_of_record_sent_after(started + 1.0, [p]) is not None for p in partitions
        ),
        STEP_TIMEOUT_S,
    )
    before = leaderships(cluster)
    target = before[(topic, 0)][0]
    led = [p for p in partitions if before[(topic, p)][0] == target]
    others = [p for p in partitions if p not in led]
    stop = threading.Event()
    elected: dict[int, float] = {}
    watcher = threading.Thread(
        target=watch_leaders, args=(cluster, topic, led, target, stop, elected), daemon=True
    )
    whole: list[float] = []

    def wait_whole() -> None:  # beside the producer
        wait_fully_replicated(cluster, STEP_TIMEOUT_S)
        whole.append(time.monotonic())

    waiter = threading.Thread(target=wait_whole, daemon=True)
    cut = time.monotonic()
    cluster.proxies.cut(partition_cut_links(cluster, target, variant))
    healed = None
    try:
        watcher.start()

        def every_partition_acked_again() -> bool:
            return all(
                clock.first_ack_of_record_sent_after(cut, [p]) is not None for p in partitions
            )

        clock.run_until(every_partition_acked_again, STEP_TIMEOUT_S)
        settled = time.monotonic() + PARTITION_SETTLE_S
        clock.run_until(lambda: time.monotonic() >= settled, PARTITION_SETTLE_S + 1)
        healed = time.monotonic()
        cluster.proxies.heal()
        waiter.start()
        clock.run_until(lambda: bool(whole) or not waiter.is_alive(), STEP_TIMEOUT_S + 10)
        ended = time.monotonic()
        unacked = clock.close()
    finally:
        cluster.proxies.heal()  # also after a failure: the brokers can then stop cleanly
        stop.set()
        with contextlib.suppress(RuntimeError):
            watcher.join(10)
        with contextlib.suppress(RuntimeError):
            waiter.join(STEP_TIMEOUT_S + 10)
    if not whole:
        raise TimeoutError(f"the ISRs were not whole again {STEP_TIMEOUT_S:.0f} s after the heal")

    def acked_again(ps: list[int]) -> float | None:
        times = [clock.first_ack_of_record_sent_after(cut, [p]) for p in ps]
        return None if not ps or None in times else max(t for t in times if t) - cut

    return {
        "variant": variant,
        "socket_timeout_ms": socket_timeout_ms,
        "cut_broker": target,
        "led_partitions": led,
        "new_leaders_s": max(elected.values()) - cut if len(elected) == len(led) else None,
        "led_acked_again_s": acked_again(led),
        "led_longest_ack_gap_s": clock.gap_between(cut, ended, led),
        "others_acked_again_s": acked_again(others),
        "others_longest_ack_gap_s": clock.gap_between(cut, ended, others) if others else None,
        "cut_for_s": healed - cut,
        "isr_whole_after_heal_s": whole[0] - healed,
        "sent": len(clock.sent),
        "acked": len(clock.acked),
        "unacked": unacked,
        "errors": len(clock.errors),
        "duplicate_offsets": clock.duplicate_offsets(),
    }


def run_partitions(args: argparse.Namespace, root: Path) -> list[dict[str, Any]]:
    rounds = []
    with fault_cluster(root / "partition") as cluster:
        log(f"partition cluster: {cluster.bootstrap_servers()} (proxies)")
        admin = admin_for(cluster.bootstrap_servers())
        try:
            topic = create_topic(admin, PARTITION_TOPIC_PARTITIONS, 3, "bench-partition")
        finally:
            admin.close()
        for variant in args.partition_variants:
            for n in range(args.partition_cuts):
                r = partition_round(
                    cluster, topic, args.rate, variant, args.producer_socket_timeout_ms
                )
                rounds.append(r)
                log(
                    f"  partition {n + 1}/{args.partition_cuts} (broker {r['cut_broker']} cut "
                    f"from {PARTITION_VARIANTS[variant]}, leading {r['led_partitions']}, "
                    f"producer socket.timeout.ms {r['socket_timeout_ms']}): new "
                    f"leaders {fmt_s(r['new_leaders_s'])}, its partitions acked again "
                    f"{fmt_s(r['led_acked_again_s'])} (longest gap "
                    f"{r['led_longest_ack_gap_s']:.2f} s), the others "
                    f"{fmt_s(r['others_acked_again_s'])} (longest gap "
                    f"{fmt_s(r['others_longest_ack_gap_s'])}), healed after "
                    f"{r['cut_for_s']:.2f} s, ISRs whole {r['isr_whole_after_heal_s']:.2f} s "
                    f"later, {r['acked']}/{r['sent']} acked, {r['errors']} errors, "
                    f"{r['duplicate_offsets']} duplicate offsets; load {load_average()}"
                )
    return rounds


def partition_table(rounds: list[dict[str, Any]]) -> None:
    if not rounds:
        return

    def values(rs: list[dict[str, Any]], key: str) -> str:
        found = [r[key] for r in rs if r[key] is not None]
        never = len(rs) - len(found)
        return spread(found) + (f" ({never} never)" if never else "")

    lines = [
        [
            "cut from",
            "producer socket.timeout.ms",
            "rounds",
            "cut -> new leaders in etcd, s",
            "cut -> its partitions acked again, s",
            "longest gap between acks, its partitions, s",
            "longest gap between acks, other partitions, s",
            "heal -> ISRs whole, s",
            "errors / duplicates",
        ]
    ]
    for (variant, what), ms in itertools.product(
        PARTITION_VARIANTS.items(), sorted({r["socket_timeout_ms"] for r in rounds})
    ):
        rs = [r for r in rounds if r["variant"] == variant and r["socket_timeout_ms"] == ms]
        if not rs:
            continue
        lines.append(
            [
                what,
                str(ms),
                str(len(rs)),
                values(rs, "new_leaders_s"),
                values(rs, "led_acked_again_s"),
                values(rs, "led_longest_ack_gap_s"),
                values(rs, "others_longest_ack_gap_s"),
                values(rs, "isr_whole_after_heal_s"),
                f"{sum(r['errors'] for r in rs)} / {sum(r['duplicate_offsets'] for r in rs)}",
            ]
        )
    print(
        "Network partition (the leader of a partition of an RF=3 topic cut off, then healed) "
        "under acks=all, min / median / max"
    )
    print(markdown_table(lines))
    print()


# =================================================================== report


def failover_tables(leader: list[dict[str, Any]], coordinator: list[dict[str, Any]]) -> None:
    def values(rounds: list[dict[str, Any]], key: str) -> list[float]:
        return [r[key] for r in rounds if r[key] is not None]

    def missing(rounds: list[dict[str, Any]], key: str) -> str:
        n = sum(r[key] is None for r in rounds)
        return f" ({n} never)" if n else ""

    timeouts = sorted({r["session_timeout_ms"] for r in leader + coordinator}, reverse=True)
    if leader:
        lines = [
            [
                "broker.session.timeout.ms",
                "signal",
                "rounds",
                "signal -> process exited, s",
                "signal -> new leader in metadata, s",
                "signal -> acks again, s",
                "longest gap between acks, s",
                "errors / duplicates",
            ]
        ]
        for ms in timeouts:
            for how, name in FAILOVER_SIGNALS.items():
                rounds = [r for r in leader if r["session_timeout_ms"] == ms and r["signal"] == how]
                if not rounds:
                    continue
                lines.append(
                    [
                        str(ms),
                        name,
                        str(len(rounds)),
                        spread(values(rounds, "exited_s")),
                        spread(values(rounds, "new_leader_in_metadata_s"))
                        + missing(rounds, "new_leader_in_metadata_s"),
                        spread(values(rounds, "acked_again_s")) + missing(rounds, "acked_again_s"),
                        spread(values(rounds, "longest_ack_gap_s")),
                        f"{sum(r['errors'] for r in rounds)} / "
                        f"{sum(r['duplicate_offsets'] for r in rounds)}",
                    ]
                )
        print(
            "Leader failover (SIGKILL or SIGTERM the leader of an RF=3 partition), "
            "min / median / max"
        )
        print(markdown_table(lines))
        print()
    if coordinator:
        lines = [
            [
                "broker.session.timeout.ms",
                "rounds",
                "kill -> group Stable with 3 members, s",
                "kill -> every partition consumed again, s",
                "rounds with a rebalance",
            ]
        ]
        for ms in timeouts:
            rounds = [r for r in coordinator if r["session_timeout_ms"] == ms]
            lines.append(
                [
                    str(ms),
                    str(len(rounds)),
                    spread(values(rounds, "stable_again_s")) + missing(rounds, "stable_again_s"),
                    spread(values(rounds, "consuming_again_s"))
                    + missing(rounds, "consuming_again_s"),
                    str(sum(r["rebalanced"] for r in rounds)),
                ]
            )
        print("Coordinator failover (SIGKILL the group's coordinator), min / median / max")
        print(markdown_table(lines))
        print()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=50_000, help="records per produce run")
    parser.add_argument("--size", type=int, default=1024, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=3, help="per throughput topic")
    parser.add_argument("--repeat", type=int, default=3, help="runs per throughput cell; median")
    parser.add_argument("--failovers", type=int, default=3, help="kills per failover benchmark")
    parser.add_argument(
        "--failover-signals",
        default="kill",
        help="how the leader is stopped in the leader failover, comma-separated: kill "
        "(SIGKILL, a crash), term (SIGTERM, a clean shutdown); --failovers rounds each",
    )
    parser.add_argument(
        "--rate", type=float, default=200.0, help="records/s produced during the failovers"
    )
    parser.add_argument(
        "--hold", type=float, default=3.0, help="seconds a group must stay Stable to count"
    )
    parser.add_argument(
        "--session-timeouts",
        default="9000,3000",
        help="broker.session.timeout.ms values for the failovers (a cluster each)",
    )
    parser.add_argument(
        "--group-session-timeout-ms",
        type=int,
        default=45_000,
        help="the group members' session.timeout.ms (librdkafka's default; a member that "
        "hears nothing from a coordinator this long rejoins as a new member)",
    )
    parser.add_argument(
        "--etcd-outages", type=int, default=5, help="rounds of the etcd outage benchmark"
    )
    parser.add_argument(
        "--etcd-outage-s", type=float, default=10.0, help="seconds the whole etcd is down"
    )
    parser.add_argument("--skip-etcd-outage", action="store_true")
    parser.add_argument(
        "--partition-cuts", type=int, default=5, help="rounds of each network partition variant"
    )
    parser.add_argument(
        "--partition-variants",
        default="servers,all",
        help="what the partitioned leader is cut from, comma-separated: servers (etcd and the "
        "other brokers), all (those and its clients)",
    )
    parser.add_argument(
        "--producer-socket-timeout-ms",
        type=int,
        default=60_000,
        help="the network partition producer's socket.timeout.ms (librdkafka's default: how "
        "long a request to a broker that went silent stays in flight)",
    )
    parser.add_argument("--skip-partition", action="store_true", help="no network partition")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--skip-single-node", action="store_true", help="no single-node row")
    parser.add_argument("--skip-odradek-client", action="store_true")
    parser.add_argument("--skip-failover", action="store_true", help="throughput only")
    parser.add_argument("--skip-coordinator", action="store_true", help="no coordinator failover")
    parser.add_argument("--keep-dir", type=Path, help="keep the clusters' data and logs here")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    try:
        timeouts = [int(v) for v in args.session_timeouts.split(",") if v.strip()]
    except ValueError:
        parser.error("--session-timeouts takes whole milliseconds, comma-separated")
    args.failover_signals = [v.strip() for v in args.failover_signals.split(",") if v.strip()]
    if not args.failover_signals or any(v not in FAILOVER_SIGNALS for v in args.failover_signals):
        parser.error("--failover-signals takes kill and/or term, comma-separated")
    if not timeouts or any(ms < 2000 for ms in timeouts):
        parser.error("--session-timeouts: each at least 2000 (the broker's minimum)")
    if min(args.records, args.size, args.partitions, args.repeat, args.failovers) < 1:
        parser.error("--records, --size, --partitions, --repeat and --failovers must be >= 1")
    if (
        args.skip_throughput
        and args.skip_failover
        and args.skip_etcd_outage
        and args.skip_partition
    ):
        parser.error("the --skip-* options given leave nothing to run")
    args.partition_variants = [v.strip() for v in args.partition_variants.split(",") if v.strip()]
    if not args.partition_variants or any(
        v not in PARTITION_VARIANTS for v in args.partition_variants
    ):
        parser.error("--partition-variants takes servers and/or all, comma-separated")
    if args.partition_cuts < 1 or args.producer_socket_timeout_ms < 10:
        parser.error("--partition-cuts must be >= 1 and --producer-socket-timeout-ms >= 10")
    if args.etcd_outages < 1 or args.etcd_outage_s <= 0:
        parser.error("--etcd-outages must be >= 1 and --etcd-outage-s positive")
    if args.rate <= 0 or args.hold < 0:
        parser.error("--rate must be positive and --hold not negative")

    log(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, Python "
        f"{platform.python_version()}, confluent-kafka {ck_version()[0]} "
        f"(librdkafka {rdkafka_version()[0]}), load average {load_average()}"
    )
    root = args.keep_dir or Path(tempfile.mkdtemp(prefix="odradek-bench-cluster-"))
    log(f"data and logs: {root}")
    out: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    started = time.monotonic()
    leader: list[dict[str, Any]] = []
    coordinator: list[dict[str, Any]] = []
    for i, ms in enumerate(timeouts):
        throughput_here = i == 0 and not args.skip_throughput
        if args.skip_failover and not throughput_here:
            break
        with local_cluster(root / f"st-{ms}", ms) as cluster:
            if throughput_here:
                single = None
                with contextlib.ExitStack() as stack:
                    if not args.skip_single_node:
                        from odradek.testing import BrokerProcess

                        single = stack.enter_context(BrokerProcess(root / "single"))
                    out["throughput"] = run_throughput(
                        args, cluster, single.bootstrap if single else None
                    )
                log(f"  load average {load_average()}")
            if not args.skip_failover:
                leader += run_leader_failover(args, cluster, ms)
                if not args.skip_coordinator:
                    coordinator += run_coordinator_failover(args, cluster, ms)
    failover_tables(leader, coordinator)
    if not args.skip_etcd_outage:
        out["etcd_outage"] = run_etcd_outages(args, root)
        etcd_outage_table(out["etcd_outage"])
    if not args.skip_partition:
        out["partition"] = run_partitions(args, root)
        partition_table(out["partition"])
    if args.keep_dir is None:  # kept when a step failed: its logs are under DIR/st-*/logs
        shutil.rmtree(root, ignore_errors=True)
    out["leader_failover"] = leader
    out["coordinator_failover"] = coordinator
    log(f"total {time.monotonic() - started:.0f} s, load average {load_average()}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # every process was stopped on the way out
        log("interrupted")
        sys.exit(130)
