"""Does an idempotent producer write a record twice across leader changes? Kafka 4.1.1 and Odradek.

Issue 21, item 4: the fault suite saw one record written at producer epoch 0 and
again at epoch 1 across a leader kill. librdkafka (up to at least 2.16) bumps an
idempotent producer's epoch when a pipelined request meets
OUT_OF_ORDER_SEQUENCE_NUMBER behind one refused for another reason ("skipped
sequence numbers"), then sends every queued batch again at the new epoch from
sequence 0, including batches a broker appended but answered with an error
(librdkafka issue #4953, reported against Apache Kafka). No broker can see a
batch sent at a new epoch as a retry. This script runs the same load and the same
leader changes against a real Kafka 4.1.1 cluster and an Odradek cluster and
counts what each ends up holding.

The cluster: 3 brokers (Kafka: a 4th process, a KRaft controller alone, so that a
broker's restart never touches the quorum; Odradek: ``LocalCluster``'s etcd). A
topic of ``--partitions`` partitions, RF=3, ``min.insync.replicas=2``. One
confluent-kafka producer, ``enable.idempotence``, acks=all,
``max.in.flight.requests.per.connection=5`` (the defaults that issue #4953 names),
sends numbered values round-robin over the partitions at ``--rate`` records/s,
with librdkafka's ``eos`` debug log kept. Each round changes leaders while it
sends (``--nemesis``, in turn): "move" rotates every partition's replica list by
one (a KIP-455 reassignment to the same brokers in another order) and elects the
preferred leaders, so every leadership moves and no process stops; "term" stops a
broker with SIGTERM (a controlled shutdown hands its leaderships on first) and
"kill" with SIGKILL, restarts it once its partitions have new leaders, and when
every ISR is whole again a preferred-leader election hands them back. After
``--rounds`` rounds the producer flushes and every partition is read from the start.

Reported per cluster: records sent, acknowledged, values written more than once
(the duplicates, with the producer id, epoch and sequence of the batches that hold
them, read from a replica's segment files), acknowledged values missing, and from
librdkafka's log the epoch bumps with their reasons.

    KAFKA_WORK=/tmp/kafka-anchor python3 bench/idempotent_duplicates.py             # both
    KAFKA_WORK=/tmp/kafka-anchor python3 bench/idempotent_duplicates.py --only kafka
    python3 bench/idempotent_duplicates.py --only odradek --rounds 10

``KAFKA_WORK`` names a reference build (the shared ``reference-kafka`` folder after
``build_all.sh``: ``lib/*.jar``). Every process this script starts is stopped at
exit. ``--keep-dir DIR`` keeps the data, the brokers' logs and the producer's log.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from confluent_kafka import (
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka import libversion as rdkafka_version
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol.records import iter_batches
from odradek.testing import free_port

BROKERS = 3
STEP_TIMEOUT_S = 120.0
POLL_S = 0.2
PRODUCER: dict[str, Any] = {
    "enable.idempotence": True,
    "acks": "all",
    "max.in.flight.requests.per.connection": 5,
    "linger.ms": 2,
    "message.timeout.ms": 300_000,
    "debug": "eos",
    "log_level": 7,
}
# librdkafka's eos log (rdkafka_idempotence.c): the bump done, and the reason it began draining.
EPOCH_BUMP = re.compile(r"bumped epoch to PID\{Id:(\d+),Epoch:(\d+)\}")
BUMP_REASON = re.compile(r"epoch bump for \d+ partition\(s\) with in-flight requests: (.*)")


def log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = STEP_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(KafkaException):
            value = predicate()
            if value:
                return value
        time.sleep(POLL_S)
    raise TimeoutError(f"not within {timeout_s:.0f}s: {what}")


# ================================================================== the clusters


class Cluster(Protocol):
    name: str

    def bootstrap(self) -> str: ...
    def partition_dir(self, broker: int, topic: str, partition: int) -> Path: ...
    def stop_broker(self, broker: int, how: str) -> None: ...
    def start_broker(self, broker: int) -> None: ...
    def close(self) -> None: ...


class KafkaCluster:
    """Kafka 4.1.1 from a reference build: one KRaft controller and 3 brokers on loopback.

    The processes are started as the reference build's ``start_kafka.sh`` starts its
    single node (the same JVM flags, ``kafka.Kafka server.properties``); the controller
    is a static single-voter quorum, every node formatted with the same cluster id.
    """

    name = "kafka"
    HEAP = "-Xmx512m -Xms512m"
    JVM_FLAGS = (
        "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35"
        " -XX:+ExplicitGCInvokesConcurrent -XX:MaxInlineLevel=15 -Djava.awt.headless=true"
    )

    def __init__(self, work: Path, root: Path) -> None:
        self.work = work
        self.root = root
        self.classpath = str(work / "lib" / "*")
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if self.cluster_id.startswith("-"):
            self.cluster_id = "A" + self.cluster_id[1:]
        self.controller_port = free_port()
        self.ports = {broker: free_port() for broker in range(1, BROKERS + 1)}
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        self._start(0)
        for broker in self.ports:
            self._start(broker)
        for broker in self.ports:
            self._wait_serving(broker)

    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{port}" for port in self.ports.values())

    def partition_dir(self, broker: int, topic: str, partition: int) -> Path:
        return self.root / f"node{broker}" / "logs" / f"{topic}-{partition}"

    def _properties(self, node: int) -> str:
        common = [
            f"node.id={node + 100 if node == 0 else node}",
            f"controller.quorum.voters=100@127.0.0.1:{self.controller_port}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.root / f'node{node}' / 'logs'}",
        ]
        if node == 0:
            roles = [
                "process.roles=controller",
                f"listeners=CONTROLLER://127.0.0.1:{self.controller_port}",
            ]
        else:
            port = self.ports[node]
            roles = [
                "process.roles=broker",
                f"listeners=PLAINTEXT://127.0.0.1:{port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
                "inter.broker.listener.name=PLAINTEXT",
                "offsets.topic.replication.factor=3",
                "transaction.state.log.replication.factor=3",
                "transaction.state.log.min.isr=2",
                "group.initial.rebalance.delay.ms=0",
                "auto.leader.rebalance.enable=false",  # this script moves leaders itself
            ]
        return "\n".join(common + roles) + "\n"

    def _start(self, node: int) -> None:
        directory = self.root / f"node{node}"
        directory.mkdir(parents=True, exist_ok=True)
        config = directory / "server.properties"
        config.write_text(self._properties(node))
        log4j = [
            f"-Dlog4j2.configurationFile={self.work / 'conf' / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={directory}",
        ]
        java = os.environ.get("JAVA", "java")
        if not (directory / "logs" / "meta.properties").exists():
            subprocess.run(
                [java, "-Xmx256m", *log4j, "-cp", self.classpath, "kafka.tools.StorageTool",
                 "format", "-t", self.cluster_id, "-c", str(config)],
                check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120,
            )  # fmt: skip
        out = (directory / "kafka.log").open("ab")
        self.processes[node] = subprocess.Popen(
            [java, *self.HEAP.split(), *self.JVM_FLAGS.split(), *log4j,
             "-cp", self.classpath, "kafka.Kafka", str(config)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    def _wait_serving(self, broker: int) -> None:
        # Quiet: it sees "connection refused" until the broker listens.
        address = f"127.0.0.1:{self.ports[broker]}"
        admin = AdminClient({"bootstrap.servers": address, "log_level": 0})

        def registered() -> bool:
            return broker in admin.list_topics(timeout=5).brokers

        wait_for(registered, f"kafka broker {broker} registered", timeout_s=180)

    def stop_broker(self, broker: int, how: str) -> None:
        process = self.processes[broker]
        process.send_signal(signal.SIGTERM if how == "term" else signal.SIGKILL)
        process.wait(timeout=STEP_TIMEOUT_S)

    def start_broker(self, broker: int) -> None:
        self._start(broker)
        self._wait_serving(broker)

    def close(self) -> None:
        for node in sorted(self.processes, reverse=True):  # brokers before the controller
            process = self.processes[node]
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


class OdradekCluster:
    """Odradek: 3 brokers and etcd, as ``odradek cluster up --brokers 3`` starts them."""

    name = "odradek"

    def __init__(self, root: Path) -> None:
        from odradek.devcluster.launcher import LocalCluster

        self.cluster = LocalCluster.prepare(
            root, brokers=BROKERS, settings={"group.initial.rebalance.delay.ms": "0"}
        )
        self.cluster.start_all(timeout_s=STEP_TIMEOUT_S)

    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers()

    def partition_dir(self, broker: int, topic: str, partition: int) -> Path:
        return self.cluster.layout.broker_dir(broker) / f"{topic}-{partition}"

    def stop_broker(self, broker: int, how: str) -> None:
        if how == "term":
            self.cluster.stop(broker, timeout_s=STEP_TIMEOUT_S)
        else:
            self.cluster.kill(broker)

    def start_broker(self, broker: int) -> None:
        self.cluster.start(broker, timeout_s=STEP_TIMEOUT_S)

    def close(self) -> None:
        self.cluster.stop_all(timeout_s=10.0)


# ================================================================== the load


class NumberedProducer:
    """Sends "n" values 0, 1, 2, ... round-robin over the partitions at a steady rate."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float, log_path: Path):
        self.topic = topic
        self.partitions = partitions
        self.rate = rate
        self.log_path = log_path
        self.client_log = logging.getLogger(f"librdkafka.{topic}")
        self.client_log.propagate = False
        handler = logging.FileHandler(log_path)
        handler.setFormatter(logging.Formatter("%(created).3f %(message)s"))
        self.client_log.addHandler(handler)
        self.client_log.setLevel(logging.DEBUG)
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, **PRODUCER, "logger": self.client_log}
        )
        self.sent = 0
        self.acked: set[int] = set()
        self.failed: Counter[str] = Counter()
        self.fatal: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="numbered-producer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            self.acked.add(int(msg.value()))
        else:
            self.failed[err.name()] += 1
            if err.fatal():
                self.fatal.append(str(err))

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                try:
                    self.producer.produce(
                        self.topic,
                        value=str(self.sent).encode(),
                        partition=self.sent % self.partitions,
                        on_delivery=self._delivered,
                    )
                except BufferError:
                    break
                self.sent += 1
            self.producer.poll(0.005)

    def finish(self) -> int:
        """Stops sending, waits for every outstanding delivery; the count still unacknowledged."""
        self._stop.set()
        self._thread.join(30)
        remaining = self.producer.flush(STEP_TIMEOUT_S)
        for handler in list(self.client_log.handlers):
            handler.close()
            self.client_log.removeHandler(handler)
        return remaining


def read_back(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, int]]]:
    """Every value in the topic: value -> [(partition, offset)], read from the start to the end."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-back-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "log_level": 2,
        }
    )
    ends = {}
    for partition in range(partitions):
        _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
        ends[partition] = high
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: dict[int, list[tuple[int, int]]] = defaultdict(list)
    positions = dict.fromkeys(range(partitions), 0)
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
        for message in consumer.consume(10_000, timeout=1.0):
            if message.error():
                continue
            seen[int(message.value())].append((message.partition(), message.offset()))
            positions[message.partition()] = message.offset() + 1
    consumer.close()
    if any(positions[p] < ends[p] for p in ends):
        raise TimeoutError(f"read back stopped short: {positions} of {ends}")
    return seen


# ================================================================== the nemesis


def leaders(admin: AdminClient, topic: str) -> dict[int, int]:
    described = admin.list_topics(topic, timeout=10).topics[topic]
    return {p.id: p.leader for p in described.partitions.values()}


def isr_whole(admin: AdminClient, topic: str) -> bool:
    described = admin.list_topics(topic, timeout=10).topics[topic]
    return all(len(p.isrs) == BROKERS for p in described.partitions.values())


def preferred_election(admin: AdminClient, topic: str, partitions: int) -> None:
    future = admin.elect_leaders(
        ElectionType.PREFERRED, [TopicPartition(topic, p) for p in range(partitions)]
    )
    with contextlib.suppress(KafkaException):  # "election not needed" for some partitions
        future.result(timeout=30)


def replicas(admin: AdminClient, topic: str) -> dict[int, list[int]]:
    described = admin.list_topics(topic, timeout=10).topics[topic]
    return {p.id: list(p.replicas) for p in described.partitions.values()}


def move_leaders(cluster: Cluster, admin: AdminClient, topic: str, partitions: int) -> None:
    """Every partition's leadership moves, no process stops: each replica list is rotated
    by one (a reassignment to the same brokers in another order, KIP-455), then a
    preferred-leader election makes the new first replica the leader."""
    from kafka import TopicPartition as KafkaPythonPartition
    from kafka.admin import KafkaAdminClient

    before = replicas(admin, topic)
    rotated = {p: order[1:] + order[:1] for p, order in before.items()}
    reassigner = KafkaAdminClient(bootstrap_servers=cluster.bootstrap(), request_timeout_ms=30_000)
    try:
        refused = reassigner.alter_partition_reassignments(
            {KafkaPythonPartition(topic, p): order for p, order in rotated.items()}
        )
        if any(error is not None for error in refused.values()):
            raise RuntimeError(f"reassignment refused: {refused}")
    finally:
        reassigner.close()
    wait_for(lambda: replicas(admin, topic) == rotated, "replica lists rotated")
    preferred_election(admin, topic, partitions)
    wanted = {p: order[0] for p, order in rotated.items()}
    wait_for(lambda: leaders(admin, topic) == wanted, "leaders moved to the new first replicas")
    time.sleep(0.5)  # sending to the new leaders for a while


def restart_broker(
    cluster: Cluster, admin: AdminClient, topic: str, partitions: int, broker: int, how: str
) -> float:
    """A broker stops (SIGTERM: Kafka's controlled shutdown hands its leaderships on
    first; SIGKILL: a crash) and comes back; a preferred-leader election then hands
    its leaderships back."""
    before = leaders(admin, topic)
    led = [p for p, leader in before.items() if leader == broker]
    log(f"  {how} broker {broker} (leads {len(led)} partitions)")
    signalled = time.monotonic()
    cluster.stop_broker(broker, how)
    exited_s = time.monotonic() - signalled
    log(f"  broker {broker} exited {exited_s:.2f} s after the signal")
    wait_for(
        lambda: all(leaders(admin, topic)[p] not in (broker, -1) for p in led),
        f"new leaders for broker {broker}'s partitions",
    )
    time.sleep(2.0)  # sending to the new leaders for a while
    cluster.start_broker(broker)
    wait_for(lambda: isr_whole(admin, topic), f"{topic}'s ISR whole again")
    preferred_election(admin, topic, partitions)
    wait_for(lambda: leaders(admin, topic) == before, "leaderships back where they were")
    time.sleep(1.0)
    return exited_s


def leader_change_round(
    cluster: Cluster, admin: AdminClient, topic: str, partitions: int, number: int, how: str
) -> float | None:
    """One round's leader change; for a stopped broker, the seconds until it exited."""
    if how == "move":
        move_leaders(cluster, admin, topic, partitions)
        return None
    return restart_broker(cluster, admin, topic, partitions, 1 + number % BROKERS, how)


# ================================================================== one run


def writers(cluster: Cluster, topic: str, partition: int, offsets: list[int]) -> list[str]:
    """Who wrote the batches holding `offsets`, from a replica's segment files (Kafka's
    and Odradek's are the same record-batch v2 format): producer id, epoch, base
    sequence and the batch's offsets."""
    for broker in range(1, BROKERS + 1):
        directory = cluster.partition_dir(broker, topic, partition)
        found = []
        for segment in sorted(directory.glob("*.log")):
            data = segment.read_bytes()
            for _position, header in iter_batches(data):
                if any(header.base_offset <= offset < header.next_offset for offset in offsets):
                    found.append(
                        f"offsets {header.base_offset}-{header.next_offset - 1}:"
                        f" pid {header.producer_id} epoch {header.producer_epoch}"
                        f" seq {header.base_sequence}"
                    )
        if len(found) == len(offsets):
            return found
    return []


def epoch_bumps(log_path: Path) -> tuple[list[str], Counter[str]]:
    bumps: list[str] = []
    reasons: Counter[str] = Counter()
    for line in log_path.read_text(errors="replace").splitlines():
        if EPOCH_BUMP.search(line):
            bumps.append(line.split(" ", 1)[1][:200])
        found = BUMP_REASON.search(line)
        if found:
            reasons[found.group(1)[:120]] += 1
    return bumps, reasons


def run(cluster: Cluster, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(), "log_level": 2})
    topic = f"dup-{uuid.uuid4().hex[:8]}"
    created = admin.create_topics(
        [NewTopic(topic, args.partitions, BROKERS, config={"min.insync.replicas": "2"})]
    )
    created[topic].result(timeout=60)
    wait_for(lambda: isr_whole(admin, topic) and -1 not in leaders(admin, topic).values(),
             f"{topic} ready")  # fmt: skip
    log_path = root / f"{cluster.name}-producer.log"
    producer = NumberedProducer(cluster.bootstrap(), topic, args.partitions, args.rate, log_path)
    producer.start()
    wait_for(lambda: len(producer.acked) >= args.rate, "a second of acknowledgements")
    faults = args.nemesis.split(",")
    exits: dict[str, list[float]] = defaultdict(list)
    for number in range(args.rounds):
        how = faults[number % len(faults)]
        log(f"{cluster.name} round {number + 1}/{args.rounds}: {how}")
        exited_s = leader_change_round(cluster, admin, topic, args.partitions, number, how)
        if exited_s is not None:
            exits[how].append(round(exited_s, 2))
    unacked = producer.finish()
    seen = read_back(cluster.bootstrap(), topic, args.partitions)
    duplicates = {value: where for value, where in seen.items() if len(where) > 1}
    missing = sorted(value for value in producer.acked if value not in seen)
    bumps, reasons = epoch_bumps(log_path)
    examples = dict(list(sorted(duplicates.items()))[:10])
    batches = {
        value: writers(cluster, topic, where[0][0], [offset for _, offset in where])
        for value, where in examples.items()
    }
    return {
        "cluster": cluster.name,
        "topic": topic,
        "rounds": args.rounds,
        "nemesis": args.nemesis,
        "exited_after_signal_s": dict(exits),
        "sent": producer.sent,
        "acked": len(producer.acked),
        "unacked_at_end": unacked,
        "delivery_errors": dict(producer.failed),
        "fatal_errors": producer.fatal,
        "stored_values": sum(len(where) for where in seen.values()),
        "duplicated_values": len(duplicates),
        "duplicate_examples": examples,
        "duplicate_batches": batches,
        "acked_missing": len(missing),
        "missing_examples": missing[:10],
        "epoch_bumps": bumps,
        "bump_log_lines": dict(reasons),
        "producer_log": str(log_path),
    }


@contextlib.contextmanager
def started(name: str, root: Path) -> Iterator[Cluster]:
    cluster: Cluster
    if name == "kafka":
        work = os.environ.get("KAFKA_WORK")
        if not work or not (Path(work) / "lib").is_dir():
            raise SystemExit("KAFKA_WORK must name a reference Kafka build (lib/*.jar)")
        cluster = KafkaCluster(Path(work), root / "kafka")
    else:
        cluster = OdradekCluster(root / "odradek")
    try:
        yield cluster
    finally:
        cluster.close()


def summary(result: dict[str, Any]) -> str:
    return (
        f"{result['cluster']}: {result['rounds']} rounds, sent {result['sent']:,},"
        f" acked {result['acked']:,}, duplicated values {result['duplicated_values']},"
        f" acked but missing {result['acked_missing']}, epoch bumps {len(result['epoch_bumps'])},"
        f" fatal {len(result['fatal_errors'])}, seconds to exit after a signal"
        f" {result['exited_after_signal_s']}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=["kafka", "odradek"], help="one cluster only")
    parser.add_argument("--rounds", type=int, default=30, help="leader-change rounds per cluster")
    parser.add_argument(
        "--nemesis",
        default="move,move,move,move,term,move,move,move,move,kill",
        help="each round's leader change, in turn: move (every partition's leader moves,"
        " no broker stops), term (a broker stops cleanly and comes back), kill (SIGKILL)",
    )
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rate", type=float, default=4000.0, help="records per second")
    parser.add_argument("--json", help="write the results to this file")
    parser.add_argument("--keep-dir", help="keep data and logs here")
    args = parser.parse_args(argv)
    if not set(args.nemesis.split(",")) <= {"move", "term", "kill"}:
        parser.error("--nemesis takes move, term and kill")
    names = [args.only] if args.only else ["kafka", "odradek"]
    root = Path(args.keep_dir or tempfile.mkdtemp(prefix="idem-dup-"))
    root.mkdir(parents=True, exist_ok=True)
    log(f"librdkafka {rdkafka_version()[0]}, data in {root}")
    results = []
    for name in names:
        with started(name, root) as cluster:
            results.append(run(cluster, args, root))
        log(summary(results[-1]))
    print()
    for result in results:
        print(summary(result))
        for line in result["epoch_bumps"][:5]:
            print(f"    {line}")
        for value, where in list(result["duplicate_examples"].items())[:5]:
            print(f"    value {value} at {where}: {result['duplicate_batches'].get(value)}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
