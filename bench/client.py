"""Benchmark: Odradek's Python client vs kafka-python, aiokafka and confluent-kafka, one run.

Per value size (100 B and 1 KiB) and per client: produce N records (acks=1, linger 5 ms,
16 KiB batches, no compression) into a fresh 4-partition topic, then consume them back
from offset 0 (assigned partitions, no group), and a group consume with ``subscribe``
for Odradek's client (join + fetch). The broker is an Odradek broker started on a
temporary directory (or ``--bootstrap``). Then the assignor timings of
``bench/assignors.py`` (imported, not duplicated): Odradek's assignors against
kafka-python's ``StickyPartitionAssignor``.

    python bench/client.py
    python bench/client.py --messages-100b 100000 --messages-1k 50000
    python bench/client.py --assign-members 1000 --assign-partitions 10000   # the big case
    python bench/client.py --skip-assignors --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import platform
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


def odradek_consume(bootstrap: str, topic: str, n: int) -> None:
    from odradek.client import Consumer, TopicPartition

    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        got = 0
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            got += len(c.poll(1.0))
        if got < n:
            raise RuntimeError(f"odradek consumed {got} of {n}")


def odradek_group_consume(bootstrap: str, topic: str, n: int) -> None:
    from odradek.client import Consumer

    with Consumer(
        bootstrap_servers=bootstrap,
        group_id="bench-" + uuid.uuid4().hex[:8],
        auto_offset_reset="earliest",
        enable_auto_commit=True,
    ) as c:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            got += len(c.poll(1.0))
        if got < n:
            raise RuntimeError(f"odradek (group) consumed {got} of {n}")


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


def kafka_python_consume(bootstrap: str, topic: str, n: int) -> None:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    try:
        c.assign([KTP(topic, p) for p in range(PARTITIONS)])
        got = 0
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=1000, max_records=500).values():
                got += len(records)
        if got < n:
            raise RuntimeError(f"kafka-python consumed {got} of {n}")
    finally:
        c.close()


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


def aiokafka_consume(bootstrap: str, topic: str, n: int) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    async def go() -> None:
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await c.start()
        try:
            c.assign([ATP(topic, p) for p in range(PARTITIONS)])
            await c.seek_to_beginning()
            got = 0
            deadline = time.monotonic() + 300
            while got < n and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=1000, max_records=500)
                got += sum(len(v) for v in batch.values())
            if got < n:
                raise RuntimeError(f"aiokafka consumed {got} of {n}")
        finally:
            await c.stop()

    asyncio.run(go())


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


def confluent_consume(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import OFFSET_BEGINNING
    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition as CTP

    c = CConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-unused",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        c.assign([CTP(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = 0
        deadline = time.monotonic() + 300
        while got < n and time.monotonic() < deadline:
            got += len(c.consume(num_messages=500, timeout=1.0))
        if got < n:
            raise RuntimeError(f"confluent-kafka consumed {got} of {n}")
    finally:
        c.close()


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


def run_throughput(bootstrap: str, counts: dict[str, int], clients: list[str]) -> list[dict]:
    rows = []
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
            c_s = timed(lambda consume=consume, topic=topic, n=n: consume(bootstrap, topic, n))
            row = {
                "size": size_name,
                "client": name,
                "messages": n,
                "produce_s": p_s,
                "consume_s": c_s,
            }
            if name == "odradek":
                row["group_consume_s"] = timed(
                    lambda topic=topic, n=n: odradek_group_consume(bootstrap, topic, n)
                )
            rows.append(row)
            print(
                f"  {size_name:>5} {name:<13} produce {n / p_s:>9,.0f} msg/s   "
                f"consume {n / c_s:>9,.0f} msg/s",
                file=sys.stderr,
                flush=True,
            )
    return rows


def throughput_table(rows: list[dict]) -> str:
    out = [
        "| size | client | produce msg/s | produce MB/s | consume msg/s | consume MB/s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        size = SIZES[r["size"]]
        n = r["messages"]
        for label, key in (("", "consume_s"), (" (group)", "group_consume_s")):
            if key not in r:
                continue
            produce = "" if label else f"{n / r['produce_s']:,.0f}"
            produce_mb = "" if label else f"{n * size / r['produce_s'] / 1e6:.1f}"
            out.append(
                f"| {r['size']} | {r['client']}{label} | {produce} | {produce_mb} | "
                f"{n / r[key]:,.0f} | {n * size / r[key] / 1e6:.1f} |"
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
    ap.add_argument("--messages-100b", type=int, default=50_000)
    ap.add_argument("--messages-1k", type=int, default=20_000)
    ap.add_argument("--clients", default=",".join(CLIENTS))
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--skip-assignors", action="store_true")
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
            rows = run_throughput(bootstrap, counts, args.clients.split(","))
        finally:
            if broker is not None:
                broker.stop()
            if tmp is not None:
                tmp.cleanup()
        results["throughput"] = rows
        print(f"\nThroughput against one Odradek broker ({PARTITIONS} partitions, acks=1):\n")
        print(throughput_table(rows))
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
