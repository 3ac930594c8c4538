"""Consumer-group rebalance latency (Odradek next to a reference broker) and coordinator capacity.

Latency, with confluent-kafka: 3 consumer processes (real OS processes, so SIGKILL
is a crash) on a 6-partition topic, the same client settings for both brokers:

- join: the 3 processes are spawned -> they hold a 2/2/2 split (also shown from
  the last ``subscribe()`` call, which leaves out interpreter start-up);
- kill: SIGKILL one member -> the 2 survivors hold all 6 partitions (dominated by
  session.timeout.ms, as with Kafka);
- leave: clean close (LeaveGroup) of one survivor -> the last member holds all 6.

The same rounds run with Odradek's own client as the three members, on Odradek
(column "odradek client"; ``--skip-odradek-client`` leaves it out), and with both
clients on the consumer protocol (KIP-848, ``group.protocol=consumer``, the server's
uniform assignor; columns "... KIP-848"; the Odradek this script starts has
``group.consumer.session.timeout.ms=6000`` and ``group.consumer.heartbeat.interval.ms=1000``,
the classic rounds' session and heartbeat; ``--skip-kip848`` leaves them out).

Each is repeated ``--repeat`` times per broker, alternating brokers; the median is
reported.

Consumption during rebalances, on Odradek, for confluent-kafka (the reference client)
and Odradek's client, cooperative-sticky and range (eager): two members consume a
backlog at a fixed processing pace; a third joins, then leaves cleanly. Reported:
records/s handed to the two original members while the group is stable, while the
third joins (partitions they keep) and while it leaves, each with the window's length.
A cooperative member should keep its pace through both (KIP-429); an eager one stops.
The consumer protocol (KIP-848) runs the same rounds, for both clients.

Then coordinator capacity, Odradek only:

- heartbeats/s over the network: a stable group built with real JoinGroup v5 /
  SyncGroup v3 requests (kio via ``odradek.protocol.codec``), then pipelined
  Heartbeat v3 requests for its members over several connections;
- join storm through the pure core (``GroupCoordinatorShard``, manual timer and
  ids, no network, records replayed as the runtime does): N groups x M members
  form (KIP-394 two-step joins, initial delayed join, SyncGroup), then every group
  rebalances again when one more member joins (no delay: the join completes when
  all known members have rejoined). Plus heartbeats/s through the core, for scale.

And KIP-848 at scale (``--skip-kip848-scale`` leaves it out): a group of 1,000
simulated members (ConsumerGroupHeartbeat v1 over 20 connections, 1 s heartbeats,
instant callbacks, acknowledging at once as the clients do) on 2,000 partitions
settles; then one member joins, 5 times: how long until it owns its partitions
(released by the members that give them up, at their next heartbeat) and until
every member has acknowledged (Stable). No partition may be owned twice.

    python bench/rebalance.py --reference tansu
    python bench/rebalance.py --reference-bootstrap 127.0.0.1:9093 --repeat 5
    python bench/rebalance.py --skip-capacity --reference tansu
    python bench/rebalance.py --skip-latency --skip-capacity --skip-kip848-scale  # consumption
    python bench/rebalance.py --skip-latency --skip-consumption --skip-capacity   # KIP-848 scale
    python bench/rebalance.py --json out.json

Odradek is started with ``odradek.testing.start_broker`` on a temporary data
directory (``group.initial.rebalance.delay.ms`` from ``--initial-delay-ms``,
default 0, printed) unless ``--bootstrap`` names a running one. The heartbeat
benchmark always starts its own Odradek (initial delay 1000 ms, so that each
group forms in one generation).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import platform
import random
import selectors
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from report import markdown_table  # bench/report.py (scripts run from bench/)

PARTITIONS = 6
MEMBERS = 3
CLIENT_SETTINGS: dict[str, Any] = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "partition.assignment.strategy": "range",
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "topic.metadata.refresh.interval.ms": 2000,
}
STEP_TIMEOUT_S = 40.0


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# =============================================================== member process


def member_main(spec_json: str) -> int:
    """Run by ``--member``: one group member (confluent-kafka or Odradek) printing JSON events.

    Without ``consume`` it only polls (the latency rounds). With it, it processes what it
    gets at ``records_per_s`` (a stand-in for the application's work) and reports each
    batch as ``{"ev": "records", "t", "n": {partition: count}}``.
    """
    spec = json.loads(spec_json)
    out_lock = threading.Lock()

    def emit(ev: str, **fields: Any) -> None:
        with out_lock:
            sys.stdout.write(json.dumps({"ev": ev, "t": time.monotonic(), **fields}) + "\n")
            sys.stdout.flush()

    stop = threading.Event()

    def watch_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    current: set[int] = set()

    def assigned(parts: list[int]) -> None:
        current.update(parts)
        emit("assigned", current=sorted(current))

    def revoked(parts: list[int]) -> None:
        current.difference_update(parts)
        emit("revoked", current=sorted(current))

    consume = spec.get("consume")
    batch = consume["batch"] if consume else 500
    pace = consume["records_per_s"] if consume else None
    if spec.get("client", "confluent") == "odradek":
        from odradek.client import Consumer, ConsumerRebalanceListener

        class Listener(ConsumerRebalanceListener):
            def on_partitions_assigned(self, parts: set) -> None:
                assigned([tp.partition for tp in parts])

            def on_partitions_revoked(self, parts: set) -> None:
                revoked([tp.partition for tp in parts])

        consumer = Consumer(
            bootstrap_servers=spec["bootstrap"],
            group_id=spec["group"],
            client_id=spec["name"],
            max_poll_records=batch,
            **spec["settings"],
        )
        consumer.subscribe([spec["topic"]], listener=Listener())

        def poll() -> list[int]:
            return [r.partition for r in consumer.poll(0.1)]

    else:
        from confluent_kafka import Consumer as ConfluentConsumer

        consumer = ConfluentConsumer(
            {
                "bootstrap.servers": spec["bootstrap"],
                "group.id": spec["group"],
                "client.id": spec["name"],
                **spec["settings"],
            }
        )
        consumer.subscribe(
            [spec["topic"]],
            on_assign=lambda _c, ps: assigned([p.partition for p in ps]),
            on_revoke=lambda _c, ps: revoked([p.partition for p in ps]),
            on_lost=lambda _c, ps: revoked([p.partition for p in ps]),
        )

        def poll() -> list[int]:
            return [m.partition() for m in consumer.consume(batch, 0.1) if m.error() is None]

    emit("subscribed")
    deadline = time.monotonic() + spec["max_seconds"]
    try:
        while not stop.is_set() and time.monotonic() < deadline:
            parts = poll()
            if parts and consume:
                counts: dict[int, int] = {}
                for p in parts:
                    counts[p] = counts.get(p, 0) + 1
                emit("records", n=counts)
                time.sleep(len(parts) / pace)
    finally:
        consumer.close()
        emit("closed")
    return 0


class MemberProc:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        group: str,
        name: str,
        *,
        client: str = "confluent",
        settings: dict[str, Any] | None = None,
        consume: dict[str, Any] | None = None,
    ) -> None:
        spec = {
            "bootstrap": bootstrap,
            "topic": topic,
            "group": group,
            "name": name,
            "client": client,
            "settings": CLIENT_SETTINGS if settings is None else settings,
            "consume": consume,
            "max_seconds": 300,
        }
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--member", json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            bufsize=1,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                with self._lock:
                    self.events.append(event)

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.events)

    def first(self, ev: str) -> float:
        """Time of the first ``ev`` event (waits for it)."""
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while time.monotonic() < deadline:
            for e in self.snapshot():
                if e["ev"] == ev:
                    return float(e["t"])
            time.sleep(0.02)
        raise TimeoutError(f"no {ev} event")

    def holding(self, at: float) -> set[int]:
        """The partitions held at time ``at`` (by the rebalance callbacks)."""
        held: set[int] = set()
        for e in self.snapshot():
            if "current" in e and e["t"] <= at:
                held = set(e["current"])
        return held

    def delivered(self, start: float, end: float, parts: set[int] | None = None) -> int:
        """Records handed to the application in [start, end), from ``parts`` (default all)."""
        return sum(
            n
            for e in self.snapshot()
            if e["ev"] == "records" and start <= e["t"] < end
            for p, n in e["n"].items()
            if parts is None or int(p) in parts
        )

    def longest_pause(self, start: float, end: float) -> float:
        """The longest time in [start, end) without records handed to the application."""
        times = [start]
        times += [e["t"] for e in self.snapshot() if e["ev"] == "records" and start <= e["t"] < end]
        times.append(end)
        return max(b - a for a, b in itertools.pairwise(times))

    def kill(self) -> float:
        t = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        return t

    def close(self) -> float:
        t = time.monotonic()
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write("close\n")
            self.proc.stdin.flush()
        return t

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def covered_at(members: list[MemberProc], since: float, *, even: bool) -> float | None:
    """First event time >= since at which the members hold every partition exactly once."""
    state: list[set[int]] = []
    timeline: list[tuple[float, int, set[int]]] = []
    for i, m in enumerate(members):
        before: set[int] = set()
        for e in m.snapshot():
            if "current" not in e:
                continue
            if e["t"] < since:
                before = set(e["current"])
            else:
                timeline.append((e["t"], i, set(e["current"])))
        state.append(before)
    timeline.sort(key=lambda x: x[0])
    for t, i, current in timeline:
        state[i] = current
        sizes = [len(s) for s in state]
        covered = sum(sizes) == PARTITIONS and set().union(*state) == set(range(PARTITIONS))
        if covered and (not even or len(set(sizes)) == 1):
            return t
    return None


def wait_covered(members: list[MemberProc], since: float, *, even: bool) -> float:
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while time.monotonic() < deadline:
        t = covered_at(members, since, even=even)
        if t is not None:
            return t
        time.sleep(0.05)
    raise TimeoutError(
        f"no {'even ' if even else ''}split in {STEP_TIMEOUT_S}s: "
        f"{[[e for e in m.snapshot() if 'current' in e][-1:] for m in members]}"
    )


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)], operation_timeout=15)[topic].result(30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == PARTITIONS:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} not in metadata")


# CLIENT_SETTINGS in Odradek's client's spelling (the odradek-client latency column).
ODRADEK_CLIENT_SETTINGS: dict[str, Any] = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 1000,
    "partition_assignment_strategy": ["range"],
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "metadata_max_age_ms": 2000,
}


# The consumer protocol (KIP-848): session and heartbeat are the broker's
# (group.consumer.session.timeout.ms=6000, group.consumer.heartbeat.interval.ms=1000 on
# the Odradek this script starts, the classic rounds' values), the assignor the server's.
KIP848_CLIENT_SETTINGS: dict[str, Any] = {
    "group.protocol": "consumer",
    "enable.auto.commit": False,
    "auto.offset.reset": "earliest",
    "topic.metadata.refresh.interval.ms": 2000,
}
ODRADEK_KIP848_CLIENT_SETTINGS: dict[str, Any] = {
    "group_protocol": "consumer",
    "group_remote_assignor": "uniform",
    "enable_auto_commit": False,
    "auto_offset_reset": "earliest",
    "metadata_max_age_ms": 2000,
}
KIP848_BROKER_SETTINGS = {
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": "1000",
}


def client_settings(client: str, protocol: str) -> dict[str, Any]:
    if protocol == "consumer":
        return ODRADEK_KIP848_CLIENT_SETTINGS if client == "odradek" else KIP848_CLIENT_SETTINGS
    return ODRADEK_CLIENT_SETTINGS if client == "odradek" else CLIENT_SETTINGS


def latency_round(
    bootstrap: str, tag: str, client: str = "confluent", protocol: str = "classic"
) -> dict[str, float]:
    """One join / kill / leave round on a fresh topic and group."""
    topic = f"bench-rebalance-{tag}-{uuid.uuid4().hex[:8]}"
    group = f"{topic}-group"
    create_topic(bootstrap, topic)
    settings = client_settings(client, protocol)
    spawned_at = time.monotonic()
    members = [
        MemberProc(bootstrap, topic, group, f"bench-m{i}", client=client, settings=settings)
        for i in range(MEMBERS)
    ]
    try:
        joined = wait_covered(members, spawned_at, even=True)
        subscribed = max(
            next(e["t"] for e in m.snapshot() if e["ev"] == "subscribed") for m in members
        )
        time.sleep(0.5)
        killed_at = members[0].kill()
        after_kill = wait_covered(members[1:], killed_at, even=True)
        time.sleep(0.5)
        closed_at = members[1].close()
        after_leave = wait_covered(members[2:], closed_at, even=True)
        members[2].close()
        return {
            "join_from_spawn": joined - spawned_at,
            "join_from_subscribe": joined - subscribed,
            "kill_to_reassigned": after_kill - killed_at,
            "leave_to_reassigned": after_leave - closed_at,
        }
    finally:
        for m in members:
            m.cleanup()


LATENCY_ROWS = [
    ("join_from_spawn", "join: spawn 3 -> 2/2/2"),
    ("join_from_subscribe", "join: last subscribe() -> 2/2/2"),
    ("kill_to_reassigned", "SIGKILL 1 -> survivors hold 6"),
    ("leave_to_reassigned", "clean close 1 -> survivor holds 6"),
]


def run_latency(targets: list[tuple[str, str, str, str]], repeat: int) -> dict[str, dict[str, Any]]:
    """``targets``: (column name, bootstrap, client, protocol) tuples."""
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, *_ in targets}
    failures: dict[str, list[str]] = {name: [] for name, *_ in targets}
    for rep in range(repeat):
        for name, bootstrap, client, protocol in targets:
            try:
                r = latency_round(bootstrap, f"{client}-{protocol}-{rep}", client, protocol)
            except Exception as exc:  # reported in the table, the run goes on
                failures[name].append(f"{type(exc).__name__}: {exc}")
                log(f"  round {rep + 1} {name:<8} FAILED {exc}")
                continue
            runs[name].append(r)
            log(
                f"  round {rep + 1} {name:<8} "
                + " ".join(f"{k}={v * 1000:.0f}ms" for k, v in r.items())
            )
    out: dict[str, dict[str, Any]] = {}
    for name, results in runs.items():
        out[name] = {
            key: statistics.median(r[key] for r in results) if results else None
            for key, _ in LATENCY_ROWS
        }
        out[name]["runs"] = results
        out[name]["failures"] = failures[name]
    return out


# =============================================================== consumption during a rebalance

BACKLOG = 100_000  # records on the topic before the members start; never drained in a round
PACE = 2_000  # records/s each member processes (a stand-in for the application's work)
CONSUME_BATCH = 100
STEADY_S = 3.0
HEARTBEAT_S = 1.0  # heartbeat interval of the consumption rounds
KIP848 = "KIP-848 uniform"  # the consumer protocol with the server's uniform assignor
CONSUMPTION_CASES = [
    ("confluent", "cooperative-sticky"),
    ("odradek", "cooperative-sticky"),
    ("confluent", "range"),
    ("odradek", "range"),
    ("confluent", KIP848),
    ("odradek", KIP848),
]


def consumption_settings(client: str, strategy: str) -> dict[str, Any]:
    """The same group settings for both clients, in each one's spelling."""
    if strategy == KIP848:  # session and heartbeat are the broker's (KIP848_BROKER_SETTINGS)
        common = {"enable.auto.commit": True, "auto.commit.interval.ms": 1000}
        if client == "odradek":
            return ODRADEK_KIP848_CLIENT_SETTINGS | {
                "enable_auto_commit": True,
                "auto_commit_interval_ms": 1000,
            }
        return KIP848_CLIENT_SETTINGS | common
    if client == "odradek":
        return {
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": int(HEARTBEAT_S * 1000),
            "partition_assignment_strategy": [strategy],
            "enable_auto_commit": True,
            "auto_commit_interval_ms": 1000,
            "auto_offset_reset": "earliest",
            "metadata_max_age_ms": 2000,
        }
    return {
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": int(HEARTBEAT_S * 1000),
        "partition.assignment.strategy": strategy,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 1000,
        "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 2000,
    }


def produce_backlog(bootstrap: str, topic: str, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(count):
        while True:
            try:
                producer.produce(topic, value=b"x" * 100, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) != 0:
        raise RuntimeError("backlog not fully produced")


def consumption_round(bootstrap: str, client: str, strategy: str, tag: str) -> dict[str, float]:
    """Two members consume a backlog at PACE each; a third joins, then leaves cleanly.

    Rates are records/s handed to the two original members: steady (STEADY_S while the
    group is stable), while the third joins (from its subscribe() until the 2/2/2 split,
    counting only partitions they keep) and while it leaves (from its close() until the
    two hold all 6, counting the partitions they held). And the longest pause in each
    window: the longest time either original member went without records (an eager
    member stops; a member that only gives a partition up should not). The kept-only
    rate depends on which partition a member happens to be draining (librdkafka hands
    out one partition's backlog at a time), the pause does not.
    """
    topic = f"bench-coop-{tag}-{uuid.uuid4().hex[:8]}"
    group = f"{topic}-group"
    create_topic(bootstrap, topic)
    produce_backlog(bootstrap, topic, BACKLOG)
    settings = consumption_settings(client, strategy)
    consume = {"batch": CONSUME_BATCH, "records_per_s": PACE}
    phase = random.Random(tag)

    def member(name: str) -> MemberProc:
        return MemberProc(
            bootstrap, topic, group, name, client=client, settings=settings, consume=consume
        )

    spawned_at = time.monotonic()
    owners = [member("bench-a"), member("bench-b")]
    members = list(owners)
    try:
        wait_covered(owners, spawned_at, even=True)
        time.sleep(1.0)
        steady_start = time.monotonic()
        time.sleep(STEADY_S)
        steady_end = time.monotonic()
        steady = sum(m.delivered(steady_start, steady_end) for m in owners)

        # A random point in the owners' heartbeat cycle (they learn of a rebalance at
        # their next heartbeat): fixed sleeps would measure one phase of it every time.
        time.sleep(phase.uniform(0, HEARTBEAT_S))
        members.append(member("bench-c"))
        join_start = members[2].first("subscribed")
        join_end = wait_covered(members, join_start, even=True)
        kept = [m.holding(join_start) & m.holding(join_end) for m in owners]
        held = sum(len(m.holding(join_start)) for m in owners)
        during_join = sum(
            m.delivered(join_start, join_end, k) for m, k in zip(owners, kept, strict=True)
        )
        join_pause = max(m.longest_pause(join_start, join_end) for m in owners)

        time.sleep(1.0 + phase.uniform(0, HEARTBEAT_S))
        leave_start = members[2].close()
        leave_end = wait_covered(owners, leave_start, even=True)
        during_leave = sum(
            m.delivered(leave_start, leave_end, m.holding(leave_start)) for m in owners
        )
        leave_pause = max(m.longest_pause(leave_start, leave_end) for m in owners)
        for m in owners:
            m.close()
        return {
            "steady_per_s": steady / (steady_end - steady_start),
            "join_per_s": during_join / (join_end - join_start),
            "join_s": join_end - join_start,
            "join_pause_s": join_pause,
            "kept_share": sum(len(k) for k in kept) / held,
            "leave_per_s": during_leave / (leave_end - leave_start),
            "leave_s": leave_end - leave_start,
            "leave_pause_s": leave_pause,
        }
    finally:
        for m in members:
            m.cleanup()


def run_consumption(
    bootstrap: str, repeat: int, cases: list[tuple[str, str]]
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    runs: dict[str, list[dict[str, float]]] = {}
    for rep in range(repeat):
        for client, strategy in cases:
            key = f"{client} {strategy}"
            try:
                r = consumption_round(bootstrap, client, strategy, f"{client}-{rep}")
            except Exception as exc:  # reported, the run goes on
                out.setdefault(key, {}).setdefault("failures", []).append(repr(exc))
                log(f"  round {rep + 1} {key:<30} FAILED {exc}")
                continue
            runs.setdefault(key, []).append(r)
            log(f"  round {rep + 1} {key:<30} " + " ".join(f"{k}={v:.2f}" for k, v in r.items()))
    for client, strategy in cases:
        key = f"{client} {strategy}"
        results = runs.get(key, [])
        entry = out.setdefault(key, {})
        entry.setdefault("failures", [])
        entry["runs"] = results
        for field in (
            "steady_per_s",
            "join_per_s",
            "join_s",
            "join_pause_s",
            "kept_share",
            "leave_per_s",
            "leave_s",
            "leave_pause_s",
        ):
            entry[field] = statistics.median(r[field] for r in results) if results else None
    return out


def consumption_table(data: dict[str, dict[str, Any]], repeat: int) -> str:
    lines = [
        [
            f"median of {repeat}: records/s to the 2 original members",
            "steady",
            "while a 3rd joins",
            "join/steady",
            "join, s",
            "longest pause in the join, s",
            "while it leaves",
            "leave/steady",
            "leave, s",
            "longest pause in the leave, s",
        ]
    ]
    for key, d in data.items():
        if d.get("steady_per_s") is None:
            lines.append([key] + ["-"] * 9)
            continue
        steady = d["steady_per_s"]
        lines.append(
            [
                key,
                f"{steady:,.0f}",
                f"{d['join_per_s']:,.0f}",
                f"{d['join_per_s'] / steady:.2f}",
                f"{d['join_s']:.2f}",
                f"{d['join_pause_s']:.2f}",
                f"{d['leave_per_s']:,.0f}",
                f"{d['leave_per_s'] / steady:.2f}",
                f"{d['leave_s']:.2f}",
                f"{d['leave_pause_s']:.2f}",
            ]
        )
    return markdown_table(lines)


# =============================================================== heartbeats over the network


def subscription_v0(topic: str) -> bytes:
    t = topic.encode()
    return struct.pack(">hih", 0, 1, len(t)) + t + struct.pack(">i", -1)


def assignment_v0(topic: str, partitions: list[int]) -> bytes:
    t = topic.encode()
    body = struct.pack(">hih", 0, 1, len(t)) + t + struct.pack(">i", len(partitions))
    body += b"".join(struct.pack(">i", p) for p in partitions)
    return body + struct.pack(">i", -1)


class RawConn:
    """One asyncio connection issuing requests one at a time (kio via odradek's codec)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    @classmethod
    async def open(cls, host: str, port: int) -> RawConn:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def call(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        from odradek.protocol.codec import (
            RequestHeader,
            build,
            decode_response,
            encode_request,
            request_type,
        )

        self.correlation += 1
        body = build(request_type(api_key, version), values)
        header = RequestHeader(api_key, version, self.correlation, "bench-raw")
        self.writer.write(encode_request(header, body))
        await self.writer.drain()
        (size,) = struct.unpack(">i", await self.reader.readexactly(4))
        payload = await self.reader.readexactly(size)
        corr, response = decode_response(api_key, version, payload)
        assert corr == self.correlation
        return response

    def close(self) -> None:
        self.writer.close()


JOIN_GROUP, SYNC_GROUP, HEARTBEAT = 11, 14, 12


async def form_group(
    host: str, port: int, group: str, topic: str, members: int, session_ms: int
) -> tuple[int, list[str]]:
    """``members`` members join (KIP-394 two steps) and sync; returns (generation, member ids)."""

    async def one(i: int) -> tuple[int, str]:
        conn = await RawConn.open(host, port)
        try:
            join = {
                "group_id": group,
                "session_timeout": session_ms,
                "rebalance_timeout": session_ms,
                "member_id": "",
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription_v0(topic)}],
            }
            first = await conn.call(JOIN_GROUP, 5, join)
            assert int(first.error_code) == 79, first.error_code  # MEMBER_ID_REQUIRED
            joined = await conn.call(JOIN_GROUP, 5, join | {"member_id": first.member_id})
            assert int(joined.error_code) == 0, joined.error_code
            assignments = []
            if joined.leader == joined.member_id:
                ids = sorted(m.member_id for m in joined.members)
                assignments = [
                    {"member_id": mid, "assignment": assignment_v0(topic, [k])}
                    for k, mid in enumerate(ids)
                ]
            synced = await conn.call(
                SYNC_GROUP,
                3,
                {
                    "group_id": group,
                    "generation_id": joined.generation_id,
                    "member_id": joined.member_id,
                    "group_instance_id": None,
                    "assignments": assignments,
                },
            )
            assert int(synced.error_code) == 0, synced.error_code
            return joined.generation_id, joined.member_id
        finally:
            conn.close()

    results = await asyncio.gather(*(one(i) for i in range(members)))
    generations = {g for g, _ in results}
    assert len(generations) == 1, f"group {group} formed over generations {generations}"
    return generations.pop(), [m for _, m in results]


def heartbeat_frames(group: str, generation: int, member_ids: list[str], start: int) -> list[bytes]:
    from odradek.protocol.codec import RequestHeader, build, encode_request, request_type

    cls = request_type(HEARTBEAT, 3)
    frames = []
    for k, mid in enumerate(member_ids):
        body = build(
            cls,
            {
                "group_id": group,
                "generation_id": generation,
                "member_id": mid,
                "group_instance_id": None,
            },
        )
        frames.append(encode_request(RequestHeader(HEARTBEAT, 3, start + k, "bench-hb"), body))
    return frames


def pump_heartbeats(
    host: str, port: int, frames_per_conn: list[list[bytes]], window: int, seconds: float
) -> dict[str, Any]:
    """Keep ``window`` heartbeats in flight on each connection for ``seconds``; count replies.

    A Heartbeat v3 reply is 14 bytes: size, correlation id, throttle time, error code.
    """
    sel = selectors.DefaultSelector()
    conns = []
    for frames in frames_per_conn:
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        state = {"sock": sock, "frames": frames, "next": 0, "out": bytearray(), "in": bytearray(),
                 "inflight": 0, "done": 0, "errors": 0}  # fmt: skip
        conns.append(state)
        sel.register(sock, selectors.EVENT_READ, state)

    def top_up(st: dict[str, Any], sending: bool) -> None:
        if sending:
            while st["inflight"] < window:
                st["out"] += st["frames"][st["next"]]
                st["next"] = (st["next"] + 1) % len(st["frames"])
                st["inflight"] += 1
        if st["out"]:
            try:
                n = st["sock"].send(st["out"])
            except BlockingIOError:
                n = 0
            del st["out"][:n]
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if st["out"] else 0)
        sel.modify(st["sock"], events, st)

    started = time.monotonic()
    stop_at = started + seconds
    for st in conns:
        top_up(st, True)
    sending = True
    drain_deadline = stop_at + 10
    while True:
        now = time.monotonic()
        if sending and now >= stop_at:
            sending = False
        if not sending and all(st["inflight"] == 0 for st in conns):
            break
        if now > drain_deadline:
            break
        for key, mask in sel.select(timeout=0.2):
            st = key.data
            if mask & selectors.EVENT_READ:
                chunk = st["sock"].recv(1 << 16)
                if not chunk:
                    raise ConnectionError("broker closed a heartbeat connection")
                buf = st["in"]
                buf += chunk
                pos = 0
                while len(buf) - pos >= 4:
                    (size,) = struct.unpack_from(">i", buf, pos)
                    if len(buf) - pos - 4 < size:
                        break
                    (err,) = struct.unpack_from(">h", buf, pos + 12)
                    if err:
                        st["errors"] += 1
                    st["done"] += 1
                    st["inflight"] -= 1
                    pos += 4 + size
                del buf[:pos]
            top_up(st, sending)
    elapsed = time.monotonic() - started
    for st in conns:
        sel.unregister(st["sock"])
        st["sock"].close()
    done = sum(st["done"] for st in conns)
    return {
        "heartbeats": done,
        "errors": sum(st["errors"] for st in conns),
        "seconds": elapsed,
        "per_s": done / elapsed if elapsed > 0 else 0.0,
    }


def run_heartbeats(args: argparse.Namespace) -> dict[str, Any]:
    from odradek.testing import start_broker

    session_ms = 60_000
    with tempfile.TemporaryDirectory(prefix="odradek-bench-hb-") as tmp:
        broker = start_broker(
            Path(tmp) / "data", settings={"group.initial.rebalance.delay.ms": "1000"}
        )
        try:
            host, port = broker.host, broker.port
            topic = f"bench-hb-{uuid.uuid4().hex[:8]}"
            groups = [f"{topic}-g{i}" for i in range(args.hb_groups)]

            async def form_all() -> list[tuple[int, list[str]]]:
                return await asyncio.gather(
                    *(form_group(host, port, g, topic, args.hb_members, session_ms) for g in groups)
                )

            t0 = time.monotonic()
            formed = asyncio.run(form_all())
            form_s = time.monotonic() - t0
            frames: list[list[bytes]] = [[] for _ in range(args.hb_connections)]
            k = 0
            for group, (generation, member_ids) in zip(groups, formed, strict=True):
                for mid in member_ids:
                    frames[k % args.hb_connections] += heartbeat_frames(
                        group, generation, [mid], start=k
                    )
                    k += 1
            result = pump_heartbeats(host, port, frames, args.hb_window, args.hb_seconds)
            result |= {
                "groups": args.hb_groups,
                "members_per_group": args.hb_members,
                "connections": args.hb_connections,
                "window": args.hb_window,
                "form_seconds": form_s,
            }
            return result
        finally:
            broker.stop()


# =============================================================== KIP-848 convergence at scale

CGH, CGD = 68, 69  # ConsumerGroupHeartbeat, ConsumerGroupDescribe


class PipelinedConn:
    """One connection carrying many members' requests at once (correlation ids match
    responses to callers), so a thousand simulated members need few sockets."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0
        self.waiting: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self.task = asyncio.get_running_loop().create_task(self._read())

    @classmethod
    async def open(cls, host: str, port: int) -> PipelinedConn:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 24)
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(reader, writer)

    async def _read(self) -> None:
        from odradek.protocol.codec import decode_response

        while True:
            (size,) = struct.unpack(">i", await self.reader.readexactly(4))
            payload = await self.reader.readexactly(size)
            (corr,) = struct.unpack_from(">i", payload, 0)
            api_key, version, future = self.waiting.pop(corr)
            if not future.done():
                future.set_result(decode_response(api_key, version, payload)[1])

    async def call(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        from odradek.protocol.codec import RequestHeader, build, encode_request, request_type

        self.correlation += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[self.correlation] = (api_key, version, future)
        body = build(request_type(api_key, version), values)
        header = RequestHeader(api_key, version, self.correlation, "bench-kip848")
        self.writer.write(encode_request(header, body))
        return await future

    def close(self) -> None:
        self.task.cancel()
        self.writer.close()


class SimMember:
    """A consumer-protocol member as Java's and librdkafka's behave, with instant
    callbacks: heartbeat every interval, full request on join, owned partitions sent
    once reconciled (at once, out of cycle, as the clients acknowledge), partitions
    revoked before being reported as released."""

    def __init__(self, sim: Any, conn: PipelinedConn, name: str) -> None:
        self.sim, self.conn, self.name = sim, conn, name
        self.member_id = uuid.uuid4().hex[:22]
        self.epoch = 0
        self.owned: set[tuple[Any, int]] = set()
        self.target: set[tuple[Any, int]] | None = None
        self.report_owned = True  # the next heartbeat carries the owned partitions
        self.wake = asyncio.Event()
        self.interval_s = 1.0
        self.errors = 0
        self.joined_at: float | None = None
        self.latencies: list[float] = []

    def request(self) -> dict[str, Any]:
        joining = self.epoch == 0
        body: dict[str, Any] = {
            "group_id": self.sim.group,
            "member_id": self.member_id,
            "member_epoch": self.epoch,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout": 300_000 if joining else -1,
            "subscribed_topic_names": [self.sim.topic] if joining else None,
            "subscribed_topic_regex": None,
            "server_assignor": "uniform" if joining else None,
            "topic_partitions": None,
        }
        if joining or self.report_owned:
            by_topic: dict[Any, list[int]] = {}
            for topic_id, p in sorted(self.owned, key=lambda tp: (str(tp[0]), tp[1])):
                by_topic.setdefault(topic_id, []).append(p)
            body["topic_partitions"] = [
                {"topic_id": t, "partitions": ps} for t, ps in by_topic.items()
            ]
        return body

    async def beat(self) -> None:
        sent = time.monotonic()
        body = self.request()
        reported = self.report_owned
        self.report_owned = False
        if self.joined_at is None:
            self.joined_at = sent
        response = await self.conn.call(CGH, 1, body)
        self.latencies.append(time.monotonic() - sent)
        if int(response.error_code):
            self.errors += 1
            self.report_owned = reported
            return
        self.epoch = int(response.member_epoch)
        self.interval_s = response.heartbeat_interval.total_seconds()
        if response.assignment is not None:
            target = {
                (t.topic_id, int(p))
                for t in response.assignment.topic_partitions
                for p in t.partitions
            }
            self.target = target
            gone, new = self.owned - target, target - self.owned
            if gone or new:
                self.sim.change_owned(self, gone, new)  # revoke, then take the new ones
                self.owned = set(target)
                self.report_owned = True
                self.wake.set()  # acknowledge at once

    async def run(self, first_delay_s: float) -> None:
        await asyncio.sleep(first_delay_s)
        while not self.sim.stopping:
            await self.beat()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.interval_s)
            self.wake.clear()


class Kip848Sim:
    def __init__(self, host: str, port: int, topic: str, partitions: int) -> None:
        self.host, self.port, self.topic, self.partitions = host, port, topic, partitions
        self.group = f"{topic}-group"
        self.members: list[SimMember] = []
        self.owners: dict[tuple[Any, int], int] = {}  # partition -> owner count
        self.double_owned = 0  # times a partition had two owners (as members believe)
        self.stopping = False
        self.changed = asyncio.Event()

    def change_owned(self, member: SimMember, gone: set, new: set) -> None:
        for tp in gone:
            self.owners[tp] -= 1
        for tp in new:
            self.owners[tp] = self.owners.get(tp, 0) + 1
            if self.owners[tp] > 1:
                self.double_owned += 1
        self.changed.set()

    def covered(self) -> bool:
        held = sum(1 for n in self.owners.values() if n == 1)
        return held == self.partitions and all(n <= 1 for n in self.owners.values())

    def settled(self) -> bool:
        return self.covered() and all(
            m.target is not None and m.owned == m.target and not m.report_owned
            for m in self.members
        )

    async def wait(self, predicate: Any, timeout_s: float) -> float:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise TimeoutError("the group did not settle")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 0.01)
        return time.monotonic()


async def kip848_scale(
    host: str, port: int, topic: str, members: int, partitions: int, joins: int, conns: int
) -> dict[str, Any]:
    sim = Kip848Sim(host, port, topic, partitions)
    pool = [await PipelinedConn.open(host, port) for _ in range(conns)]
    tasks: list[asyncio.Task[None]] = []
    rng = random.Random(848)

    def add(i: int, delay_s: float) -> SimMember:
        m = SimMember(sim, pool[i % conns], f"m{i}")
        sim.members.append(m)
        tasks.append(asyncio.get_running_loop().create_task(m.run(delay_s)))
        return m

    try:
        t0 = time.monotonic()
        for i in range(members):  # join over one heartbeat interval, phases spread
            add(i, rng.uniform(0, 1.0))
        await sim.wait(sim.settled, 600)
        form_s = time.monotonic() - t0
        rounds = []
        for j in range(joins):
            await asyncio.sleep(2.0 + rng.uniform(0, 1.0))  # steady heartbeats, random phase
            for m in sim.members:
                m.latencies.clear()
            newcomer = add(members + j, 0.0)
            owns = await sim.wait(lambda n=newcomer: bool(n.owned) and sim.covered(), 60)
            settled = await sim.wait(sim.settled, 60)
            assert newcomer.joined_at is not None
            latencies = sorted(x for m in sim.members for x in m.latencies)
            rounds.append(
                {
                    "newcomer_owns_s": owns - newcomer.joined_at,
                    "all_acknowledged_s": settled - newcomer.joined_at,
                    "newcomer_partitions": len(newcomer.owned),
                    "members_moved": sum(1 for m in sim.members if m.owned != m.target),
                    "heartbeats": len(latencies),
                    "heartbeat_p50_ms": 1000 * latencies[len(latencies) // 2],
                    "heartbeat_p99_ms": 1000 * latencies[int(len(latencies) * 0.99)],
                }
            )
            log(
                f"  +1 member ({members + j + 1}): owns {len(newcomer.owned)} after "
                f"{rounds[-1]['newcomer_owns_s']:.3f} s, all acknowledged after "
                f"{rounds[-1]['all_acknowledged_s']:.3f} s, heartbeat p99 "
                f"{rounds[-1]['heartbeat_p99_ms']:.1f} ms"
            )
        described = await pool[0].call(
            CGD, 0, {"group_ids": [sim.group], "include_authorized_operations": False}
        )
        group = described.groups[0]
        return {
            "members": members,
            "partitions": partitions,
            "connections": conns,
            "form_seconds": form_s,
            "rounds": rounds,
            "newcomer_owns_s_median": statistics.median(r["newcomer_owns_s"] for r in rounds),
            "newcomer_owns_s_max": max(r["newcomer_owns_s"] for r in rounds),
            "all_acknowledged_s_median": statistics.median(r["all_acknowledged_s"] for r in rounds),
            "all_acknowledged_s_max": max(r["all_acknowledged_s"] for r in rounds),
            "double_owned": sim.double_owned,
            "heartbeat_errors": sum(m.errors for m in sim.members),
            "final_state": str(group.group_state),
            "final_members": len(group.members),
            "group_epoch": int(group.group_epoch),
        }
    finally:
        sim.stopping = True
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in pool:
            c.close()


def run_kip848_scale(args: argparse.Namespace) -> dict[str, Any]:
    """A ``--kip848-members`` group of simulated members (ConsumerGroupHeartbeat v1 over
    the network, 1 s heartbeats) settles; then one member joins, ``--kip848-joins``
    times: how long until it owns its partitions (taken from others, who revoke them
    at their next heartbeat), and until every member has acknowledged."""
    from odradek.client import AdminClient, NewTopic
    from odradek.testing import start_broker

    settings = {
        "group.consumer.heartbeat.interval.ms": "1000",
        "group.consumer.session.timeout.ms": "45000",
    }
    with tempfile.TemporaryDirectory(prefix="odradek-bench-kip848-") as tmp:
        broker = start_broker(Path(tmp) / "data", settings=settings)
        try:
            topic = f"bench-kip848-{uuid.uuid4().hex[:8]}"
            admin = AdminClient(bootstrap_servers=broker.bootstrap)
            try:
                admin.create_topics([NewTopic(topic, args.kip848_partitions, 1)])[topic].result()
            finally:
                admin.close()
            return asyncio.run(
                kip848_scale(
                    broker.host,
                    broker.port,
                    topic,
                    args.kip848_members,
                    args.kip848_partitions,
                    args.kip848_joins,
                    args.kip848_connections,
                )
            ) | {"broker_settings": settings}
        finally:
            broker.stop()


# =============================================================== join storm (pure core)


class StormTimer:
    def __init__(self) -> None:
        self.deadlines: dict[str, int] = {}

    def schedule(self, key: str, deadline_ms: int) -> None:
        self.deadlines[key] = deadline_ms

    def cancel(self, key: str) -> None:
        self.deadlines.pop(key, None)

    def pop_due(self, now_ms: int) -> list[str]:
        due = sorted((d, k) for k, d in self.deadlines.items() if d <= now_ms)
        for _, k in due:
            del self.deadlines[k]
        return [k for _, k in due]


class StormIds:
    def __init__(self) -> None:
        self.n = 0

    def new_uuid(self) -> str:
        self.n += 1
        return f"{self.n:012x}"


def run_storm(groups: int, members: int) -> dict[str, Any]:
    from odradek.coordinator import CoordinatorConfig, GroupCoordinatorShard
    from odradek.coordinator.types import (
        HeartbeatRequest,
        JoinGroupRequest,
        SyncGroupRequest,
    )

    config = CoordinatorConfig()  # initial delay 3000 ms, as Kafka
    timer, ids = StormTimer(), StormIds()
    shard = GroupCoordinatorShard(config, timer=timer, ids=ids)
    records = 0
    responses: dict[int, Any] = {}
    token = 0
    now = 1_000_000

    def apply(result: Any) -> None:
        nonlocal records
        for record in result.records:  # the runtime appends, then replays, then answers
            shard.replay(record)
            records += 1
        for tok, resp in result.responses:
            responses[tok] = resp

    def send(request: Any) -> int:
        nonlocal token
        token += 1
        apply(shard.handle(now, token, request))
        return token

    def fire_due() -> None:
        for key in timer.pop_due(now):
            apply(shard.on_timer(now, key))

    sub = subscription_v0("storm")

    def join_req(group: str, member_id: str) -> JoinGroupRequest:
        return JoinGroupRequest(
            group_id=group,
            member_id=member_id,
            group_instance_id=None,
            client_id="storm",
            client_host="/127.0.0.1",
            session_timeout_ms=45_000,
            rebalance_timeout_ms=60_000,
            protocol_type="consumer",
            protocols=(("range", sub),),
        )

    def sync_all(joins: dict[str, list[int]]) -> int:
        """Every member syncs (leader with assignments); returns failed syncs."""
        sync_tokens = []
        for group, toks in joins.items():
            resps = [responses.pop(t) for t in toks]
            for r in resps:
                assert r.error_code == 0, (group, r)
            leader = next(r for r in resps if r.member_id == r.leader)
            assignments = tuple(
                (m.member_id, assignment_v0("storm", [k])) for k, m in enumerate(leader.members)
            )
            for r in resps:
                sync_tokens.append(
                    send(
                        SyncGroupRequest(
                            group,
                            r.generation_id,
                            r.member_id,
                            None,
                            assignments=assignments if r is leader else (),
                        )
                    )
                )
        return sum(1 for t in sync_tokens if responses.pop(t).error_code != 0)

    apply(shard.on_loaded(now))
    names = [f"storm-{g}" for g in range(groups)]

    # Phase 1: every group forms (two-step joins, initial delayed join, sync).
    t0 = time.perf_counter()
    member_ids: dict[str, list[str]] = {}
    joins: dict[str, list[int]] = {}
    join_calls = 0
    for group in names:
        member_ids[group], joins[group] = [], []
        for _ in range(members):
            first = responses.pop(send(join_req(group, "")))
            assert first.error_code == 79, first
            member_ids[group].append(first.member_id)
            joins[group].append(send(join_req(group, first.member_id)))
            join_calls += 2
    # The initial delayed join is extended while members keep arriving (Kafka's
    # InitialDelayedJoin): advance the clock delay by delay until every join is answered.
    for _ in range(100):
        if all(t in responses for toks in joins.values() for t in toks):
            break
        now += config.group_initial_rebalance_delay_ms
        fire_due()
    failed = sync_all(joins)
    form_s = time.perf_counter() - t0

    # Phase 2: one more member joins each group; the others rejoin; no delay.
    t1 = time.perf_counter()
    joins = {}
    rejoin_calls = 0
    for group in names:
        first = responses.pop(send(join_req(group, "")))
        joins[group] = [send(join_req(group, first.member_id))]
        joins[group] += [send(join_req(group, mid)) for mid in member_ids[group]]
        rejoin_calls += 2 + members
    failed += sync_all(joins)
    storm_s = time.perf_counter() - t1

    # Heartbeats through the core, for comparison with the network figure.
    hb_n = 0
    t2 = time.perf_counter()
    gens = {}
    for group in names[: min(groups, 100)]:
        desc = shard.groups[group]
        gens[group] = (desc.generation_id, list(desc.members))
    hb_failed = 0
    for _ in range(10):
        for group, (generation, mids) in gens.items():
            for mid in mids:
                resp = responses.pop(send(HeartbeatRequest(group, generation, mid)))
                hb_failed += resp.error_code != 0
                hb_n += 1
    hb_s = time.perf_counter() - t2
    return {
        "groups": groups,
        "members_per_group": members,
        "form_join_calls": join_calls,
        "form_seconds": form_s,
        "form_joins_per_s": join_calls / form_s,
        "rebalance_join_calls": rejoin_calls,
        "rebalance_seconds": storm_s,
        "rebalance_joins_per_s": rejoin_calls / storm_s,
        "records": records,
        "failed_syncs": failed,
        "core_heartbeats": hb_n,
        "core_heartbeats_per_s": hb_n / hb_s,
        "core_heartbeat_errors": hb_failed,
    }


# =============================================================== output


def latency_table(lat: dict[str, dict[str, Any]], repeat: int) -> str:
    """One column per target; with a reference broker, odradek/reference for the first two."""
    names = list(lat)
    compare = len(names) >= 2 and names[1] in ("reference", "tansu")
    head = [f"median of {repeat} (seconds)", *names]
    if compare:
        head.append(f"{names[0]}/{names[1]}")
    lines = [head]
    for key, label in LATENCY_ROWS:
        row = [label]
        vals = [lat[n][key] for n in names]
        row += ["-" if v is None else f"{v:.3f}" for v in vals]
        if compare:
            a, b = vals[0], vals[1]
            row.append(f"{a / b:.2f}x" if a is not None and b else "-")
        lines.append(row)
    return markdown_table(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--member", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help="use a running Odradek at HOST:PORT")
    parser.add_argument("--skip-odradek", action="store_true", help="latency: reference only")
    parser.add_argument("--reference", choices=["tansu"], help="start a reference broker")
    parser.add_argument("--reference-bootstrap", help="use a running reference at HOST:PORT")
    parser.add_argument("--repeat", type=int, default=3, help="latency rounds per broker")
    parser.add_argument(
        "--initial-delay-ms",
        type=int,
        default=0,
        help="group.initial.rebalance.delay.ms of the Odradek this script starts (default 0)",
    )
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-capacity", action="store_true")
    parser.add_argument("--skip-consumption", action="store_true")
    parser.add_argument(
        "--skip-odradek-client",
        action="store_true",
        help="latency: leave out the column with Odradek's client as the members",
    )
    parser.add_argument(
        "--consumption-repeat", type=int, default=3, help="rounds per client and protocol"
    )
    parser.add_argument(
        "--consumption-clients",
        default="confluent,odradek",
        help="comma-separated clients for the consumption rounds",
    )
    parser.add_argument("--hb-groups", type=int, default=20)
    parser.add_argument("--hb-members", type=int, default=10)
    parser.add_argument("--hb-connections", type=int, default=4)
    parser.add_argument("--hb-window", type=int, default=64, help="heartbeats in flight per conn")
    parser.add_argument("--hb-seconds", type=float, default=5.0)
    parser.add_argument("--storm-groups", type=int, default=1000)
    parser.add_argument("--storm-members", type=int, default=10)
    parser.add_argument(
        "--skip-kip848",
        action="store_true",
        help="latency and consumption: leave out the consumer protocol (group.protocol=consumer)",
    )
    parser.add_argument("--skip-kip848-scale", action="store_true")
    parser.add_argument("--kip848-members", type=int, default=1000)
    parser.add_argument("--kip848-partitions", type=int, default=2000)
    parser.add_argument("--kip848-joins", type=int, default=5, help="members joining, one by one")
    parser.add_argument("--kip848-connections", type=int, default=20)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.member:
        return member_main(args.member)
    if args.reference and args.reference_bootstrap:
        parser.error("--reference and --reference-bootstrap are exclusive")

    from confluent_kafka import libversion, version

    results: dict[str, Any] = {"client_settings": CLIENT_SETTINGS}
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        targets: list[tuple[str, str, str, str]] = []
        odradek_bootstrap: str | None = None
        if not args.skip_odradek and not (args.skip_latency and args.skip_consumption):
            if args.bootstrap:
                odradek_bootstrap = args.bootstrap
            else:
                from odradek.testing import start_broker

                tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="odradek-rb-"))
                settings = {
                    "group.initial.rebalance.delay.ms": str(args.initial_delay_ms),
                    **KIP848_BROKER_SETTINGS,
                }
                broker = start_broker(Path(tmp) / "data", settings=settings)
                stack.callback(broker.stop)
                odradek_bootstrap = broker.bootstrap
        if not args.skip_latency:
            if odradek_bootstrap is not None:
                targets.append(("odradek", odradek_bootstrap, "confluent", "classic"))
            if args.reference_bootstrap:
                targets.append(("reference", args.reference_bootstrap, "confluent", "classic"))
            elif args.reference == "tansu":
                from odradek.testing_reference import start_reference_broker

                ref = start_reference_broker()
                stack.callback(ref.stop)
                targets.append(("tansu", ref.bootstrap, "confluent", "classic"))
            if odradek_bootstrap is not None and not args.skip_odradek_client:
                targets.append(("odradek client", odradek_bootstrap, "odradek", "classic"))
            if odradek_bootstrap is not None and not args.skip_kip848:
                targets.append(("odradek KIP-848", odradek_bootstrap, "confluent", "consumer"))
                if not args.skip_odradek_client:
                    targets.append(
                        ("odradek client KIP-848", odradek_bootstrap, "odradek", "consumer")
                    )
        log("settings:")
        log(f"  confluent-kafka {version()}, librdkafka {libversion()[0]}")
        log(f"  python {platform.python_version()}, {os.cpu_count()} cpus, {platform.platform()}")
        log(f"  {MEMBERS} consumer processes, 1 topic of {PARTITIONS} partitions, no records")
        log(f"  client settings (every broker): {json.dumps(CLIENT_SETTINGS)}")
        if not args.bootstrap and not args.skip_odradek:
            log(f"  odradek: group.initial.rebalance.delay.ms={args.initial_delay_ms}")
            log(f"  odradek, consumer protocol: {json.dumps(KIP848_BROKER_SETTINGS)}")
            log(f"  KIP-848 client settings: {json.dumps(KIP848_CLIENT_SETTINGS)}")
        for name, bootstrap, client, protocol in targets:
            log(f"  {name}: {bootstrap} ({client} members, group protocol {protocol})")
        if targets:
            log(f"latency ({args.repeat} rounds per broker, alternating):")
            lat = run_latency(targets, args.repeat)
            results["latency"] = lat
        if not args.skip_consumption and odradek_bootstrap is not None:
            log(
                f"consumption during rebalances (odradek broker, {args.consumption_repeat} "
                f"rounds): 2 members at {PACE} records/s each on a {BACKLOG:,}-record "
                f"backlog, a 3rd joins then leaves; auto-commit every 1 s"
            )
            cases = [
                (client, strategy)
                for client, strategy in CONSUMPTION_CASES
                if client in args.consumption_clients.split(",")
                and not (args.skip_kip848 and strategy == KIP848)
            ]
            results["consumption"] = run_consumption(
                odradek_bootstrap, args.consumption_repeat, cases
            )
        if not args.skip_capacity:
            log(
                f"heartbeats over the network: {args.hb_groups} groups x {args.hb_members} "
                f"members, {args.hb_connections} connections x {args.hb_window} in flight, "
                f"{args.hb_seconds:.0f} s"
            )
            results["heartbeats"] = run_heartbeats(args)
            log(f"join storm through the core: {args.storm_groups} x {args.storm_members}")
            results["storm"] = run_storm(args.storm_groups, args.storm_members)
        if not args.skip_kip848_scale:
            log(
                f"KIP-848 convergence: {args.kip848_members} simulated members, "
                f"{args.kip848_partitions} partitions, 1 s heartbeats, "
                f"{args.kip848_connections} connections; {args.kip848_joins} members join"
            )
            results["kip848_scale"] = run_kip848_scale(args)
    results["total_seconds"] = time.monotonic() - started

    print()
    print(
        "client settings: "
        + ", ".join(f"{k}={v}" for k, v in CLIENT_SETTINGS.items())
        + f"; {MEMBERS} confluent-kafka consumer processes, {PARTITIONS} partitions"
    )
    if "latency" in results:
        print(latency_table(results["latency"], args.repeat))
        for name, data in results["latency"].items():
            if data["failures"]:
                print(f"{name}: {len(data['failures'])} failed rounds: {data['failures']}")
    if "consumption" in results:
        print()
        print(
            f"consumption during rebalances: odradek broker, 2 members at {PACE} records/s "
            f"each ({CONSUME_BATCH} per poll), session 6 s, heartbeat 1 s, auto-commit 1 s"
        )
        print(consumption_table(results["consumption"], args.consumption_repeat))
        for key, data in results["consumption"].items():
            if data["failures"]:
                print(f"{key}: {len(data['failures'])} failed rounds: {data['failures']}")
    if "heartbeats" in results:
        hb = results["heartbeats"]
        st = results["storm"]
        print()
        print(
            markdown_table(
                [
                    ["coordinator capacity (odradek)", "value"],
                    [
                        f"heartbeats/s over the network ({hb['groups']}x{hb['members_per_group']}"
                        f" members, {hb['connections']} conns x {hb['window']} pipelined)",
                        f"{hb['per_s']:,.0f}",
                    ],
                    [
                        "  heartbeats answered / with an error",
                        f"{hb['heartbeats']:,} / {hb['errors']}",
                    ],
                    [
                        "  groups formed over the network (JoinGroup+SyncGroup), seconds",
                        f"{hb['form_seconds']:.2f}",
                    ],
                    [
                        f"core join storm: {st['groups']:,} groups x {st['members_per_group']} form"
                        f" ({st['form_join_calls']:,} JoinGroup calls + syncs), seconds",
                        f"{st['form_seconds']:.2f}",
                    ],
                    ["  JoinGroup calls/s (forming)", f"{st['form_joins_per_s']:,.0f}"],
                    [
                        f"core rebalance storm: +1 member per group ({st['rebalance_join_calls']:,}"
                        " joins + syncs), seconds",
                        f"{st['rebalance_seconds']:.2f}",
                    ],
                    ["  JoinGroup calls/s (rebalancing)", f"{st['rebalance_joins_per_s']:,.0f}"],
                    [
                        "  records written / failed syncs",
                        f"{st['records']:,} / {st['failed_syncs']}",
                    ],
                    ["core heartbeats/s (no network)", f"{st['core_heartbeats_per_s']:,.0f}"],
                ]
            )
        )
    if "kip848_scale" in results:
        k = results["kip848_scale"]
        print()
        print(
            markdown_table(
                [
                    [
                        f"KIP-848 group of {k['members']:,} members, {k['partitions']:,} "
                        f"partitions, 1 s heartbeats ({len(k['rounds'])} joins)",
                        "median",
                        "max",
                    ],
                    [
                        "one member joins -> it owns its partitions, s",
                        f"{k['newcomer_owns_s_median']:.3f}",
                        f"{k['newcomer_owns_s_max']:.3f}",
                    ],
                    [
                        "one member joins -> every member acknowledged (Stable), s",
                        f"{k['all_acknowledged_s_median']:.3f}",
                        f"{k['all_acknowledged_s_max']:.3f}",
                    ],
                    [
                        "heartbeat round trip p99 while converging, ms",
                        f"{statistics.median(r['heartbeat_p99_ms'] for r in k['rounds']):.1f}",
                        f"{max(r['heartbeat_p99_ms'] for r in k['rounds']):.1f}",
                    ],
                    [
                        "group formed (all members joined and settled), s",
                        f"{k['form_seconds']:.1f}",
                        "",
                    ],
                    [
                        "partitions owned twice / heartbeat errors / final state",
                        f"{k['double_owned']} / {k['heartbeat_errors']} / {k['final_state']}",
                        "",
                    ],
                ]
            )
        )
    print(f"total {results['total_seconds']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
