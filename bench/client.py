"""Benchmark: Odradek's Python client vs kafka-python, aiokafka and confluent-kafka, one run.

Per value size (100 B and 1 KiB) and per client: produce N records (acks=1, linger 5 ms,
16 KiB batches, no compression) into a fresh 4-partition topic, then consume them back
from offset 0: assigned partitions (no group), and as a new group with ``subscribe``
(join + fetch). Consumers count the records they get; with ``--read-values`` each client
also consumes once more reading every record's value, as an application touching
every record would. The broker is an Odradek broker started on a
temporary directory (or ``--bootstrap``). Then the assignor timings of
``bench/assignors.py`` (imported, not duplicated): Odradek's assignors against
kafka-python's ``StickyPartitionAssignor``.

    python bench/client.py
    python bench/client.py --messages-100b 100000 --messages-1k 50000
    python bench/client.py --assign-members 1000 --assign-partitions 10000   # the big case
    python bench/client.py --skip-assignors --json out.json
    python bench/client.py --skip-assignors --repeat 3       # medians of 3 runs
    python bench/client.py --skip-assignors --skip-send-cost --read-values
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

PARTITIONS = 4
SIZES = {"100B": 100, "1KiB": 1024}
HERE = Path(__file__).resolve().parent


def create_topic(bootstrap: str, name: str) -> None:
    from odradek.client import AdminClient, NewTopic

    with AdminClient(bootstrap_servers=bootstrap) as admin:
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result()


# ------------------------------------------------------------------------ Odradek


def odradek_produce(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    from odradek.client import Producer

    with Producer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=5,
        batch_size=16_384,
        enable_idempotence=False,
    ) as p:
        send = p.send
        for _ in range(n):
            send(topic, value=value)
        p.flush(120)


def group_name() -> str:
    return "bench-" + uuid.uuid4().hex[:8]


class Tally:
    """Counts consumed records; with ``read_values`` every record's value is read too
    (an application that touches each record), else only the batches are counted."""

    def __init__(self, n: int, name: str, read_values: bool) -> None:
        self.n = n
        self.name = name
        self.read_values = read_values
        self.got = 0
        self.value_bytes = 0
        self.deadline = time.monotonic() + 300

    @property
    def running(self) -> bool:
        return self.got < self.n and time.monotonic() < self.deadline

    def add(self, records: Any) -> None:
        if self.read_values:
            for record in records:
                self.got += 1
                self.value_bytes += len(record.value)
        else:
            self.got += len(records)

    def check(self) -> None:
        if self.got < self.n:
            raise RuntimeError(f"{self.name} consumed {self.got} of {self.n}")


def odradek_consume(
    bootstrap: str, topic: str, n: int, *, group: bool = False, read_values: bool = False
) -> None:
    from odradek.client import Consumer, TopicPartition

    settings: dict[str, Any] = {"bootstrap_servers": bootstrap, "auto_offset_reset": "earliest"}
    if group:
        settings.update(group_id=group_name(), enable_auto_commit=True)
    tally = Tally(n, "odradek", read_values)
    with Consumer(**settings) as c:
        if group:
            c.subscribe([topic])
        else:
            c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        while tally.running:
            tally.add(c.poll(1.0))
    tally.check()


# ------------------------------------------------------------------------ kafka-python


def kafka_python_produce(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5, batch_size=16_384)
    try:
        send = p.send
        for _ in range(n):
            send(topic, value=value)
        p.flush(120)
    finally:
        p.close()


def kafka_python_consume(
    bootstrap: str, topic: str, n: int, *, group: bool = False, read_values: bool = False
) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    if group:
        c = KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group_name(),
            enable_auto_commit=True,
            auto_offset_reset="earliest",
        )
    else:
        c = KafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        c.assign([KTP(topic, p) for p in range(PARTITIONS)])
    tally = Tally(n, "kafka-python", read_values)
    try:
        while tally.running:
            for records in c.poll(timeout_ms=1000, max_records=500).values():
                tally.add(records)
    finally:
        c.close()
    tally.check()


# ------------------------------------------------------------------------ aiokafka


def aiokafka_produce(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    from aiokafka import AIOKafkaProducer

    async def go() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap, acks=1, linger_ms=5, max_batch_size=16_384
        )
        await p.start()
        try:
            send = p.send
            futures = []
            for i in range(n):
                futures.append(await send(topic, value=value))
                if len(futures) >= 10_000:
                    await asyncio.gather(*futures)
                    futures.clear()
                elif i % 1000 == 0:
                    await asyncio.sleep(0)
            await p.flush()
            await asyncio.gather(*futures)
        finally:
            await p.stop()

    asyncio.run(go())


def aiokafka_consume(
    bootstrap: str, topic: str, n: int, *, group: bool = False, read_values: bool = False
) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    tally = Tally(n, "aiokafka", read_values)

    async def go() -> None:
        if group:
            c = AIOKafkaConsumer(
                topic,
                bootstrap_servers=bootstrap,
                group_id=group_name(),
                enable_auto_commit=True,
                auto_offset_reset="earliest",
            )
            await c.start()
        else:
            c = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
            )
            await c.start()
            c.assign([ATP(topic, p) for p in range(PARTITIONS)])
            await c.seek_to_beginning()
        try:
            while tally.running:
                batch = await c.getmany(timeout_ms=1000, max_records=500)
                for records in batch.values():
                    tally.add(records)
        finally:
            await c.stop()

    asyncio.run(go())
    tally.check()


# ------------------------------------------------------------------------ confluent-kafka


def confluent_produce(bootstrap: str, topic: str, n: int, value: bytes) -> None:
    from confluent_kafka import Producer as CProducer

    p = CProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 16_384,
            "enable.idempotence": False,
        }
    )
    produce = p.produce
    for _ in range(n):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:  # local queue full: serve delivery reports, then retry
                p.poll(0.01)
    if p.flush(120) != 0:
        raise RuntimeError("confluent-kafka did not deliver every record")


class ConfluentValues:
    """confluent-kafka's messages seen as records with a ``value`` attribute."""

    def __init__(self, messages: list[Any]) -> None:
        self.messages = messages

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Any:
        for m in self.messages:
            yield _ConfluentRecord(m.value())


class _ConfluentRecord:
    __slots__ = ("value",)

    def __init__(self, value: bytes) -> None:
        self.value = value


def confluent_consume(
    bootstrap: str, topic: str, n: int, *, group: bool = False, read_values: bool = False
) -> None:
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition as CTP

    c = CConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group_name() if group else "bench-unused",
            "enable.auto.commit": group,
            "auto.offset.reset": "earliest",
        }
    )
    tally = Tally(n, "confluent-kafka", read_values)
    try:
        if group:
            c.subscribe([topic])
        else:
            c.assign([CTP(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        while tally.running:
            tally.add(ConfluentValues(c.consume(num_messages=500, timeout=1.0)))
    finally:
        c.close()
    tally.check()


CLIENTS: dict[str, tuple[Callable[..., None], Callable[..., None]]] = {
    "odradek": (odradek_produce, odradek_consume),
    "kafka-python": (kafka_python_produce, kafka_python_consume),
    "aiokafka": (aiokafka_produce, aiokafka_consume),
    "confluent-kafka": (confluent_produce, confluent_consume),
}


def timed(fn: Callable[[], None]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# (row key, table label, group?, values read?) of every consume measured per client
CONSUME_MODES = (
    ("consume_s", "", False, False),
    ("group_consume_s", " (group)", True, False),
    ("consume_read_s", " (values read)", False, True),
    ("group_consume_read_s", " (group, values read)", True, True),
)


def run_throughput(
    bootstrap: str, counts: dict[str, int], clients: list[str], read_values: bool
) -> list[dict]:
    rows = []
    modes = [m for m in CONSUME_MODES if read_values or not m[3]]
    for size_name, size in SIZES.items():
        n = counts[size_name]
        value = b"x" * size
        for name in clients:
            produce, consume = CLIENTS[name]
            topic = f"bench-{name}-{size_name}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic)
            p_s = timed(
                lambda produce=produce, topic=topic, n=n, value=value: produce(
                    bootstrap, topic, n, value
                )
            )
            row: dict[str, Any] = {
                "size": size_name,
                "client": name,
                "messages": n,
                "produce_s": p_s,
            }
            for key, _label, group, read in modes:
                row[key] = timed(
                    lambda consume=consume, topic=topic, n=n, group=group, read=read: consume(
                        bootstrap, topic, n, group=group, read_values=read
                    )
                )
            rows.append(row)
            print(
                f"  {size_name:>5} {name:<15} produce {n / p_s:>9,.0f} msg/s   consume "
                + "  ".join(
                    f"{label.strip() or 'assign'} {n / row[key]:,.0f}" for key, label, *_ in modes
                )
                + " msg/s",
                file=sys.stderr,
                flush=True,
            )
    return rows


def median_rows(runs: list[list[dict]]) -> list[dict]:
    """One row per (size, client): the median of each timing over the runs."""
    out = []
    for rows in zip(*runs, strict=True):
        merged = dict(rows[0])
        for key in ("produce_s", *(m[0] for m in CONSUME_MODES)):
            if key in merged:
                merged[key] = statistics.median(r[key] for r in rows)
        merged["runs"] = len(rows)
        out.append(merged)
    return out


def throughput_table(rows: list[dict]) -> str:
    """Medians, with each client's ratio to aiokafka (the issue's yardstick) where it ran."""
    base = {r["size"]: r for r in rows if r["client"] == "aiokafka"}
    out = [
        "| size | client | produce msg/s | produce MB/s | consume msg/s | consume MB/s "
        "| produce ÷ aiokafka | consume ÷ aiokafka |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        size = SIZES[r["size"]]
        n = r["messages"]
        ref = base.get(r["size"])
        for key, label, _group, _read in CONSUME_MODES:
            if key not in r:
                continue
            produce = "" if label else f"{n / r['produce_s']:,.0f}"
            produce_mb = "" if label else f"{n * size / r['produce_s'] / 1e6:.1f}"
            p_ratio = "" if label or ref is None else f"{ref['produce_s'] / r['produce_s']:.2f}x"
            c_ratio = "" if ref is None else f"{ref[key] / r[key]:.2f}x"
            out.append(
                f"| {r['size']} | {r['client']}{label} | {produce} | {produce_mb} | "
                f"{n / r[key]:,.0f} | {n * size / r[key] / 1e6:.1f} | {p_ratio} | {c_ratio} |"
            )
    return "\n".join(out)


# ------------------------------------------------------------------------ send() cost

# What one send() call costs the caller: a linger far longer than the loop, 1 MiB batches
# (only full ones leave during the loop), buffers big enough for every record.
SEND_COST_LINGER_MS = 60_000


def send_cost_odradek(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    from odradek.client import Producer

    with Producer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=SEND_COST_LINGER_MS,
        batch_size=1 << 20,
        buffer_memory=1 << 30,
        max_request_size=128 << 20,
        enable_idempotence=False,
    ) as p:
        send = p.send
        send(topic, value=value, partition=0)  # metadata and connections ready
        p.flush(30)
        start = time.perf_counter()
        for _ in range(n):
            send(topic, value=value)
        elapsed = time.perf_counter() - start
        p.flush(120)
    return elapsed / n


def send_cost_kafka_python(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    from kafka import KafkaProducer

    p = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=SEND_COST_LINGER_MS,
        batch_size=1 << 20,
        max_request_size=128 << 20,
    )
    try:
        p.send(topic, value=value, partition=0)
        p.flush(30)
        send = p.send
        start = time.perf_counter()
        for _ in range(n):
            send(topic, value=value)
        elapsed = time.perf_counter() - start
        p.flush(120)
    finally:
        p.close()
    return elapsed / n


def send_cost_aiokafka(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    from aiokafka import AIOKafkaProducer

    async def go() -> float:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks=1,
            linger_ms=SEND_COST_LINGER_MS,
            max_batch_size=1 << 20,
            max_request_size=128 << 20,
        )
        await p.start()
        try:
            first = await p.send(topic, value=value, partition=0)
            await p.flush()
            await first
            send = p.send
            start = time.perf_counter()
            for _ in range(n):
                await send(topic, value=value)
            elapsed = time.perf_counter() - start
            await p.flush()
        finally:
            await p.stop()
        return elapsed / n

    return asyncio.run(go())


def send_cost_confluent(bootstrap: str, topic: str, n: int, value: bytes) -> float:
    from confluent_kafka import Producer as CProducer

    p = CProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": 1,
            "linger.ms": SEND_COST_LINGER_MS,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 2 * n + 10,
            "queue.buffering.max.kbytes": 1 << 21,
            "enable.idempotence": False,
        }
    )
    p.produce(topic, value, partition=0)
    p.flush(30)
    produce = p.produce
    start = time.perf_counter()
    for _ in range(n):
        produce(topic, value)
    elapsed = time.perf_counter() - start
    p.flush(120)
    return elapsed / n


SEND_COST: dict[str, Callable[..., float]] = {
    "odradek": send_cost_odradek,
    "kafka-python": send_cost_kafka_python,
    "aiokafka": send_cost_aiokafka,
    "confluent-kafka": send_cost_confluent,
}


def run_send_cost(bootstrap: str, n: int, clients: list[str]) -> list[dict]:
    rows = []
    for size_name, size in SIZES.items():
        for name in clients:
            topic = f"sendcost-{name}-{size_name}-{uuid.uuid4().hex[:6]}"
            create_topic(bootstrap, topic)
            seconds = SEND_COST[name](bootstrap, topic, n, b"x" * size)
            rows.append({"size": size_name, "client": name, "send_us": seconds * 1e6})
            print(
                f"  {size_name:>5} {name:<15} send() {seconds * 1e6:6.2f} us",
                file=sys.stderr,
                flush=True,
            )
    return rows


def send_cost_table(rows: list[dict]) -> str:
    out = ["| size | client | µs per send() | calls/s |", "|---|---|---:|---:|"]
    for r in rows:
        out.append(
            f"| {r['size']} | {r['client']} | {r['send_us']:.2f} | {1e6 / r['send_us']:,.0f} |"
        )
    return "\n".join(out)


# ------------------------------------------------------------------------ assignors


def load_assignor_bench() -> Any:
    spec = importlib.util.spec_from_file_location("odradek_bench_assignors", HERE / "assignors.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # multiprocessing (fork) finds the child function here
    spec.loader.exec_module(module)
    return module


def run_assignors(members: int, partitions: int, topics: int, repeat: int, kp_limit: float):
    ab = load_assignor_bench()
    fresh = ab.make_scenarios(members, partitions, topics)["fresh"]
    rows = []
    for name in ab.NAMES:
        previous = ab.get_assignor(name).assign(fresh.cluster, ab.odradek_input(name, fresh))
        for sc_name, sc in (("fresh", fresh), ("leave", ab.leave_scenario(fresh, previous))):
            seconds, info = ab.run_odradek(name, sc, repeat)
            rows.append(
                {
                    "assignor": f"odradek {name}",
                    "scenario": sc_name,
                    "seconds": seconds,
                    "result": info,
                }
            )
    balanced = ab.get_assignor("sticky").assign(fresh.cluster, ab.odradek_input("sticky", fresh))
    for sc_name, sc in (("fresh", fresh), ("leave", ab.leave_scenario(fresh, balanced))):
        seconds, info = ab.run_kafka_python(sc, kp_limit)
        rows.append(
            {
                "assignor": "kafka-python StickyPartitionAssignor",
                "scenario": sc_name,
                "seconds": seconds,
                "result": info,
            }
        )
    return rows


def assignor_table(rows: list[dict]) -> str:
    out = ["| assignor | scenario | assign() s | result |", "|---|---|---:|---|"]
    for r in rows:
        cell = "-" if r["seconds"] is None else f"{r['seconds']:.3f}"
        out.append(f"| {r['assignor']} | {r['scenario']} | {cell} | {r['result']} |")
    return "\n".join(out)


# ------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bootstrap", help="a running broker (default: start Odradek)")
    ap.add_argument("--messages-100b", type=int, default=200_000)
    ap.add_argument("--messages-1k", type=int, default=50_000)
    ap.add_argument("--repeat", type=int, default=1, help="runs; tables show medians")
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument(
        "--read-values",
        action="store_true",
        help="also consume reading every record's value (not only counting records)",
    )
    ap.add_argument("--skip-assignors", action="store_true")
    ap.add_argument("--skip-send-cost", action="store_true")
    ap.add_argument("--send-cost-messages", type=int, default=100_000)
    ap.add_argument("--assign-members", type=int, default=300)
    ap.add_argument("--assign-partitions", type=int, default=3_000)
    ap.add_argument("--assign-topics", type=int, default=30)
    ap.add_argument("--assign-repeat", type=int, default=3)
    ap.add_argument("--kafka-python-timeout", type=float, default=300.0)
    ap.add_argument("--json", help="write the raw results here")
    args = ap.parse_args(argv)

    import aiokafka
    import kafka

    print(
        f"Python {sys.version.split()[0]} on {platform.machine()}, "
        f"kafka-python {kafka.__version__}, aiokafka {aiokafka.__version__}"
    )
    results: dict[str, Any] = {}
    if not args.skip_throughput:
        broker = None
        tmp = None
        bootstrap = args.bootstrap
        if bootstrap is None:
            from odradek.testing import start_broker

            tmp = tempfile.TemporaryDirectory(prefix="odradek-bench-client-")
            broker = start_broker(
                Path(tmp.name) / "data", settings={"group.initial.rebalance.delay.ms": "0"}
            )
            bootstrap = broker.bootstrap
        try:
            counts = {"100B": args.messages_100b, "1KiB": args.messages_1k}
            rows = median_rows(
                [
                    run_throughput(bootstrap, counts, args.clients.split(","), args.read_values)
                    for _ in range(args.repeat)
                ]
            )
            if not args.skip_send_cost:
                results["send_cost"] = run_send_cost(
                    bootstrap, args.send_cost_messages, args.clients.split(",")
                )
        finally:
            if broker is not None:
                broker.stop()
            if tmp is not None:
                tmp.cleanup()
        results["throughput"] = rows
        print(
            f"\nThroughput against one Odradek broker ({PARTITIONS} partitions, acks=1), "
            f"median of {args.repeat}:\n"
        )
        print(throughput_table(rows))
        if "send_cost" in results:
            print(
                f"\nCost of one send() call to the caller, {args.send_cost_messages:,} calls, "
                "linger 60 s, 1 MiB batches:\n"
            )
            print(send_cost_table(results["send_cost"]))
    if not args.skip_assignors:
        rows = run_assignors(
            args.assign_members,
            args.assign_partitions,
            args.assign_topics,
            args.assign_repeat,
            args.kafka_python_timeout,
        )
        results["assignors"] = rows
        print(
            f"\nAssignor time, {args.assign_members} members x {args.assign_partitions} "
            f"partitions ({args.assign_topics} topics), median of {args.assign_repeat}:\n"
        )
        print(assignor_table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
