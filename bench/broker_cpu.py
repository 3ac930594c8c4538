"""The broker's own CPU seconds per GB produced and fetched: Odradek next to Apache Kafka 4.1.1.

Throughput on this machine is set by the client (confluent-kafka), not the
broker, so it no longer ranks brokers; the CPU time the broker process spends
(user + system, /proc/PID/stat, all its threads) per gigabyte of values does.

Six cells, each a fresh topic: produce 100 B and 1 KiB values with acks=1 and
acks=all, then fetch the acks=1 topics back from offset 0 (assigned partitions,
no group). When ``KAFKA_WORK`` names a reference build
(/work/shared/reference-kafka: ``build_all.sh``, ``start_kafka.sh``), Kafka 4.1.1
runs in the same run: both brokers are started once, a first round of every
cell warms both (Kafka's JIT) and is discarded, then ``--repeat`` rounds run
each cell on both brokers in turn, the order flipping every round, and the
median per cell is kept. Before each round's fetch cells every broker's idle CPU
rate is measured (``IDLE_WINDOW_S``, no client); a second table gives the fetch
cells with that rate times the cell's duration taken out: the fetch path's own
cost, where a broker's background work (Kafka's controller and GC) would weigh.

    cd bench && python3 broker_cpu.py                       # 5M x 100 B, 1M x 1 KiB, 3 rounds
    KAFKA_WORK=/tmp/kafka-anchor python3 broker_cpu.py      # + Kafka 4.1.1 and the ratio
    python3 broker_cpu.py --quick --repeat 1                # a quick look (1M / 200k)
    python3 broker_cpu.py --quick --baseline /work/main/src # a change, before and after
    python3 broker_cpu.py --quick --baseline ../src --event-loop uvloop  # uvloop vs asyncio
    python3 broker_cpu.py --repeat 1 --profile ../docs/profiles   # where the CPU goes

The CPU time is read from /proc/PID/stat (10 ms ticks: 0.01-0.1 s per GB at
these sizes). ``--profile`` runs Odradek alone under py-spy (``--nonblocking``:
the broker is never stopped, its CPU time is unchanged) and splits its CPU time
into categories (``CATEGORIES``): the kernel's share from the system time, the
rest as py-spy's samples of the Python stacks fall.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from report import markdown_table  # bench/report.py (scripts run from bench/)
from throughput import (  # bench/throughput.py's load
    Target,
    consume,
    create_topic,
    delete_topics,
    produce,
)

from odradek.testing import BrokerProcess, free_port

SIZES = {"100 B": 100, "1 KiB": 1024}
COUNTS = {"100 B": 5_000_000, "1 KiB": 1_000_000}  # at least what issue 23 asks
QUICK_COUNTS = {"100 B": 1_000_000, "1 KiB": 200_000}
CELLS = [
    ("produce 100 B acks=1", "produce", "100 B", "1"),
    ("produce 100 B acks=all", "produce", "100 B", "all"),
    ("produce 1 KiB acks=1", "produce", "1 KiB", "1"),
    ("produce 1 KiB acks=all", "produce", "1 KiB", "all"),
    ("fetch 100 B", "fetch", "100 B", "1"),  # reads the round's acks=1 topic
    ("fetch 1 KiB", "fetch", "1 KiB", "1"),
]
IDLE_WINDOW_S = 15.0  # each round measures every broker's idle CPU rate over this long
NO_CAP_S = 3600.0  # throughput.py's per-cell time cap, lifted: every record is sent and read
KAFKA_VERSION = "4.1.1"


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process and all its threads, dead ones included."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def rss_mb(pid: int) -> float:
    """Resident memory of a process, MB (10^6 bytes)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmRSS for {pid}")


def first_answer_s(bootstrap: str, since: float, timeout_s: float = 120.0) -> float:
    """Seconds from `since` (time.monotonic) until the broker answers an ApiVersions v0
    request, asked again every 10 ms (as start_kafka.sh reports Kafka's start-up)."""
    host, _, port = bootstrap.rpartition(":")
    request = struct.pack(">hhih", 18, 0, 1, -1)  # ApiVersions v0, correlation 1, no client id
    while time.monotonic() - since < timeout_s:
        try:
            with socket.create_connection((host, int(port)), timeout=1) as sock:
                sock.sendall(struct.pack(">i", len(request)) + request)
                if len(sock.recv(4)) == 4:
                    return time.monotonic() - since
        except OSError:
            pass
        time.sleep(0.01)
    raise RuntimeError(f"{bootstrap} did not answer within {timeout_s:.0f} s")


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class Broker:
    """A running broker under measurement."""

    name: str
    bootstrap: str
    pid: int
    topics: list[str] = field(default_factory=list)  # created this round
    startup_s: float = 0.0  # start to the first ApiVersions answer
    rss_started_mb: float = 0.0

    @property
    def target(self) -> Target:
        return Target(self.name, self.bootstrap)

    def delete_topics(self) -> None:
        """Drop the round's topics (a full run writes about 3 GB per broker and round)."""
        delete_topics(self.target, self.topics)


class Kafka:
    """Apache Kafka 4.1.1 from a reference build, started and stopped by its start_kafka.sh."""

    def __init__(self, work: Path, data_dir: Path) -> None:
        self.script = work / "start_kafka.sh"
        self.data_dir = data_dir
        self.port = free_port()  # the controller takes port + 1
        self.pid: int | None = None

    def start(self) -> Broker:
        env = os.environ | {
            "KAFKA_WORK": str(self.script.parent),
            # deleted topics leave the disk a second later, not after a minute, so the
            # files go before the next round measures
            "KAFKA_EXTRA_PROPS": "file.delete.delay.ms=1000",
            # a JVM starts in 2-3 s on an idle machine, in a minute on a crowded one
            "KAFKA_START_TIMEOUT": os.environ.get("KAFKA_START_TIMEOUT", "300"),
        }
        out = subprocess.run(
            [str(self.script), str(self.port), str(self.data_dir)],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if out.returncode != 0:
            raise RuntimeError(f"start_kafka.sh failed: {out.stderr.strip()}")
        # "kafka 4.1.1 pid=PID startup_s=SECONDS"
        words = dict(w.split("=", 1) for w in out.stdout.split() if "=" in w)
        self.pid = int(words["pid"])
        log(f"  kafka: {out.stdout.strip()}")
        return Broker(
            "kafka",
            f"127.0.0.1:{self.port}",
            self.pid,
            startup_s=float(words["startup_s"]),
            rss_started_mb=rss_mb(self.pid),
        )

    def stop(self) -> None:
        if self.pid is not None:
            subprocess.run([str(self.script), "stop", str(self.data_dir)], check=False)
            self.pid = None


@dataclass
class Figure:
    """One cell on one broker: CPU seconds per GB of values, the system part of them, and
    what the broker's idle rate alone would have cost over the cell's duration (measured
    for fetch cells only: they are long and cheap, so a broker's background work weighs)."""

    per_gb: float
    system_per_gb: float
    idle_per_gb: float = 0.0


def run_cell(
    broker: Broker,
    cell: tuple[str, str, str, str],
    counts: dict[str, int],
    partitions: int,
    round_id: str,
    profile: Path | None = None,
    idle_rate: float = 0.0,
) -> Figure:
    """Run one cell; with `profile`, py-spy records the broker meanwhile (profile.svg/.txt).
    `idle_rate`: the broker's CPU seconds per second with no client (`idle_rates`)."""
    name, kind, size_name, acks = cell
    size, count = SIZES[size_name], counts[size_name]
    topic = f"cpu-{round_id}-{size_name.replace(' ', '')}-acks{acks}"
    if kind == "produce":
        create_topic(broker.target, topic, partitions)
        broker.topics.append(topic)
    with py_spy(broker.pid, profile):
        user0, sys0 = cpu_seconds(broker.pid)
        if kind == "produce":
            result = produce(broker.target, topic, count, size, acks, NO_CAP_S)
        else:  # the produce cell of this round left `count` records and a warm-up one
            result = consume(broker.target, topic, partitions, count + 1, size, NO_CAP_S)
        user1, sys1 = cpu_seconds(broker.pid)
    if result.errors or result.note:
        raise RuntimeError(f"{name} on {broker.name}: {result.errors} errors {result.note}")
    gigabytes = result.messages * size / 1e9
    cpu = user1 - user0 + sys1 - sys0
    figure = Figure(
        cpu / gigabytes, (sys1 - sys0) / gigabytes, idle_rate * result.seconds / gigabytes
    )
    log(
        f"  {name:<24} {broker.name:<8} {result.messages:>9,d} records "
        f"{result.seconds:6.1f} s  broker {cpu:6.2f} CPU s ({sys1 - sys0:5.2f} system)  "
        f"{figure.per_gb:5.2f} s/GB  load {load_average()}"
    )
    return figure


def run_round(
    brokers: list[Broker],
    counts: dict[str, int],
    partitions: int,
    flip: bool,
    profile_dir: Path | None = None,
) -> dict[tuple[str, str], Figure]:
    """Every cell on every broker; the brokers take turns, in reverse order when `flip`."""
    round_id = uuid.uuid4().hex[:6]
    order = list(reversed(brokers)) if flip else brokers
    figures = {}
    idle: dict[str, float] = {}
    for cell in CELLS:
        if cell[1] == "fetch" and not idle:
            idle = idle_rates(brokers, IDLE_WINDOW_S)
        for broker in order:
            profile = profile_dir / slug(cell[0]) if profile_dir else None
            figures[(cell[0], broker.name)] = run_cell(
                broker, cell, counts, partitions, round_id, profile, idle.get(broker.name, 0.0)
            )
    for broker in brokers:
        broker.delete_topics()
    time.sleep(3)  # the files of the deleted topics go before the next round
    return figures


def idle_rates(brokers: list[Broker], window_s: float) -> dict[str, float]:
    """Each broker's CPU seconds per second with no client connected, all measured over
    the same window (Kafka in combined mode runs its controller, heartbeats and GC
    meanwhile; Odradek its housekeeping timers)."""
    before = {b.name: sum(cpu_seconds(b.pid)) for b in brokers}
    time.sleep(window_s)
    rates = {b.name: (sum(cpu_seconds(b.pid)) - before[b.name]) / window_s for b in brokers}
    log("  idle: " + ", ".join(f"{n} {r * 60:.2f} CPU s/min" for n, r in rates.items()))
    return rates


def slug(cell: str) -> str:
    return cell.replace(" ", "-").replace("=", "")


def table(rounds: list[dict[tuple[str, str], Figure]], names: list[str]) -> str:
    """Medians per cell and broker, and Odradek's over each other broker's."""
    others = [n for n in names if n != "odradek"]
    head = ["broker CPU s/GB"]
    for n in names:
        head += [f"{n} (range)", f"{n} system"]
    head += [f"odradek/{n}" for n in others]
    lines = [head]
    for cell in CELLS:
        line = [cell[0]]
        medians = {}
        for n in names:
            figures = [r[(cell[0], n)] for r in rounds]
            values = [f.per_gb for f in figures]
            medians[n] = statistics.median(values)
            system = statistics.median(f.system_per_gb for f in figures)
            line.append(f"{medians[n]:.2f} ({min(values):.2f}-{max(values):.2f})")
            line.append(f"{system:.2f}")
        line += [f"{medians['odradek'] / medians[n]:.2f}" for n in others]
        lines.append(line)
    return markdown_table(lines)


def fetch_path_table(rounds: list[dict[tuple[str, str], Figure]], names: list[str]) -> str:
    """The fetch cells with each broker's idle rate taken out: the fetch path's own cost."""
    others = [n for n in names if n != "odradek"]
    head = ["fetch path alone, CPU s/GB"]
    head += [f"{n} (idle part)" for n in names] + [f"odradek/{n}" for n in others]
    lines = [head]
    for cell in (c for c in CELLS if c[1] == "fetch"):
        line = [cell[0]]
        medians = {}
        for n in names:
            figures = [r[(cell[0], n)] for r in rounds]
            medians[n] = statistics.median(f.per_gb - f.idle_per_gb for f in figures)
            idle = statistics.median(f.idle_per_gb for f in figures)
            line.append(f"{medians[n]:.2f} ({idle:.2f})")
        line += [f"{medians['odradek'] / medians[n]:.2f}" for n in others]
        lines.append(line)
    return markdown_table(lines)


def start_odradek(
    data_dir: Path, src: str | None, event_loop: str | None = None
) -> tuple[BrokerProcess, float]:
    """An Odradek broker; from the sources in `src` (a tree's src/) instead of this
    process's when given; on `event_loop` (its `event.loop` setting) when given; and
    its start-up, to the first ApiVersions answer. Its bytecode
    is compiled first, into a cache of its own (as an installed package's is, by pip), so
    the start-up measured is not a compile."""
    changes = {"PYTHONPYCACHEPREFIX": str(data_dir.parent / f"{data_dir.name}-pycache")}
    if src is not None:
        changes["PYTHONPATH"] = src  # the child inherits it
    saved = {name: os.environ.get(name) for name in [*changes, "PYTHONDONTWRITEBYTECODE"]}
    os.environ.update(changes)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    try:
        subprocess.run(
            [sys.executable, "-c", "import odradek.cli.main, odradek.broker.server"], check=True
        )
        since = time.monotonic()
        settings = {"event.loop": event_loop} if event_loop else {}
        process = BrokerProcess(data_dir, settings=settings).start()
        return process, first_answer_s(process.bootstrap, since)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


# --- where Odradek's CPU goes (--profile) ---------------------------------------------------

KERNEL = "kernel (system calls)"
# Each sample of a py-spy profile goes to the first of these its innermost frames matches
# (leaf first): (category, path fragment, prefixes of the function's name, () for any).
CATEGORIES: list[tuple[str, str, tuple[str, ...]]] = [
    # the Python lines that make the system calls (socket send and receive, epoll, file
    # writes, sendfile): their time is the kernel's, taken from /proc instead
    (
        KERNEL,
        "asyncio/selector_events.py",
        ("_SelectorSocketTransport.write", "_SelectorSocketTransport._read_ready__"),
    ),
    (KERNEL, "selectors.py", ("EpollSelector.select",)),
    (KERNEL, "odradek/log/segment.py", ("Segment.write",)),
    (KERNEL, "odradek/broker/sending.py", ("_sendfile", "_cork")),
    (
        "framing and decoding",
        "odradek/broker/server.py",
        ("Broker._buffered_frame", "Broker._read_frame"),
    ),
    (
        "framing and decoding",
        "odradek/broker/connection.py",
        (
            "Connection.get_buffer",
            "Connection.buffer_updated",
            "Connection._next_buffer",
            "Connection._may_size",
            "Connection.peek_size",
            "Connection.take_",
        ),
    ),
    (
        "framing and decoding",
        "asyncio/streams.py",
        ("StreamReader.readexactly", "StreamReader.feed_data", "StreamReader.read"),
    ),
    ("framing and decoding", "odradek/protocol/framing.py", ()),
    ("framing and decoding", "odradek/protocol/produce.py", ()),
    ("framing and decoding", "odradek/protocol/codec.py", ("parse_", "decode_")),
    ("framing and decoding", "odradek/protocol/fetch.py", ("parse_", "_Reader", "_uuid", "_count")),
    ("framing and decoding", "odradek/broker/apis/", ("read_request",)),
    ("validation", "odradek/protocol/records.py", ()),
    (
        "validation",
        "odradek/broker/apis/produce.py",
        ("_transactional_producer", "_sets_transactional_bit", "_has_"),
    ),
    ("the log: appends, reads", "odradek/log/", ()),
    ("the log: appends, reads", "odradek/replication/", ()),
    ("response encoding", "odradek/protocol/", ()),
    ("response encoding", "kio/", ()),
    ("response encoding", "odradek/broker/sending.py", ()),
    ("response encoding", "odradek/broker/context.py", ("respond",)),
    ("event loop", "asyncio/", ()),
    ("event loop", "selectors.py", ()),
    ("handlers and dispatch (the rest)", "odradek/broker/", ()),
]


# The broker's periodic passes in a worker thread, whatever they call.
HOUSEKEEPING = ("TopicManager.compact", "TopicManager.enforce_retention")


def category(frame: str) -> str | None:
    """`frame` as py-spy writes it: "function (path:line)"."""
    function, _, where = frame.rpartition(" (")
    for name, path, prefixes in CATEGORIES:
        if path in where and (not prefixes or function.startswith(prefixes)):
            return name
    return None


def breakdown(raw: Path, system_share: float) -> dict[str, float]:
    """Shares of the broker's CPU time: the kernel's from /proc (`system_share`), the rest
    split as the py-spy samples outside the system-call lines are.

    py-spy counts a thread that is runnable as busy, also while it waits for a CPU;
    on a loaded machine that inflates the lines that wake another process (a send
    wakes the client) or wait (epoll), so their samples are not CPU time: the
    kernel's share comes from the process's system time instead.
    """
    counts: dict[str, int] = {}
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if any(task in stack for task in HOUSEKEEPING):
            found = "log housekeeping (cleaner, retention)"
        else:
            found = next((c for c in map(category, reversed(stack.split(";"))) if c), "other")
        counts[found] = counts.get(found, 0) + int(n)
    counts.pop(KERNEL, None)
    user = sum(counts.values()) or 1
    shares = {KERNEL: system_share}
    for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        shares[name] = (1 - system_share) * n / user
    return shares


def profile_table(shares: list[dict[str, float]]) -> str:
    names = list(
        dict.fromkeys(
            [c for c, _, _ in CATEGORIES] + ["log housekeeping (cleaner, retention)", "other"]
        )
    )
    lines = [["share of broker CPU"] + [c[0] for c in CELLS]]
    for name in names:
        lines.append([name] + [f"{s.get(name, 0.0):.0%}" for s in shares])
    return markdown_table(lines)


@contextmanager
def py_spy(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy records `pid` (a flame graph out.svg and raw stacks out.txt) while the block runs.

    --nonblocking: py-spy reads the broker's memory without stopping it, so the
    broker's CPU time is the same as without it.
    """
    if out is None:
        yield
        return
    spies = [
        subprocess.Popen(
            [
                "py-spy",
                "record",
                "--nonblocking",
                "--rate",
                "200",
                "--pid",
                str(pid),
                "--format",
                fmt,
                "--output",
                str(out.with_suffix(suffix)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for fmt, suffix in (("flamegraph", ".svg"), ("raw", ".txt"))
    ]
    time.sleep(1.0)  # attached
    try:
        yield
    finally:
        for spy in spies:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
        for spy in spies:
            spy.wait(60)


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds; medians shown")
    parser.add_argument(
        "--quick", action="store_true", help="1,000,000 x 100 B and 200,000 x 1 KiB per cell"
    )
    parser.add_argument("--partitions", type=int, default=3, help="partitions per topic")
    parser.add_argument(
        "--kafka-work",
        default=os.environ.get("KAFKA_WORK"),
        help="reference Kafka build (default: $KAFKA_WORK; without it, Odradek only)",
    )
    parser.add_argument(
        "--baseline",
        metavar="SRC",
        help="also run an Odradek broker from another tree's src/ (e.g. main's), named "
        "'before', in the same rounds: a change measured before and after",
    )
    parser.add_argument(
        "--event-loop",
        choices=["asyncio", "uvloop"],
        help="the event loop of the broker named 'odradek' (its event.loop setting; "
        "'before' keeps the default): with --baseline ../src, one loop against the other",
    )
    parser.add_argument("--json", help="also write every round's figures to this file")
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="Odradek only: py-spy records the broker during each cell of the measured "
        "rounds (DIR/<cell>.svg, .txt, of the last round) and the shares of its samples "
        "per category are printed",
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    kafka_work = Path(args.kafka_work) if args.kafka_work else None
    if kafka_work is not None and not (kafka_work / "start_kafka.sh").is_file():
        parser.error(f"no start_kafka.sh in {kafka_work} (KAFKA_WORK)")
    if kafka_work is not None and not any((kafka_work / "lib").glob("kafka_*.jar")):
        parser.error(f"{kafka_work}/lib has no Kafka jars: run build_all.sh first")
    counts = QUICK_COUNTS if args.quick else COUNTS
    profile_dir = Path(args.profile) if args.profile else None
    if profile_dir is not None:
        if shutil.which("py-spy") is None:
            parser.error("--profile needs py-spy (pip install py-spy)")
        if args.baseline:
            parser.error("--profile records one broker: no --baseline")
        profile_dir.mkdir(parents=True, exist_ok=True)
        kafka_work = None

    tmp = Path(tempfile.mkdtemp(prefix="odradek-cpu-"))
    kafka = Kafka(kafka_work, tmp / "kafka") if kafka_work else None
    started: list[BrokerProcess] = []
    try:
        brokers = []
        for name, src, loop in [("odradek", None, args.event_loop)] + (
            [("before", args.baseline, None)] * bool(args.baseline)
        ):
            process, startup_s = start_odradek(tmp / name, src, loop)
            started.append(process)
            assert process.pid is not None
            brokers.append(
                Broker(name, process.bootstrap, process.pid, [], startup_s, rss_mb(process.pid))
            )
        if kafka is not None:
            brokers.append(kafka.start())
        log(f"{os.cpu_count()} cpus, load {load_average()}; {args.partitions} partitions per topic")
        log(", ".join(f"{c:,} x {s}" for s, c in counts.items()) + " per cell")
        log("warm-up round (discarded):")
        run_round(brokers, counts, args.partitions, flip=False)
        rounds = []
        for i in range(args.repeat):
            log(f"round {i + 1} of {args.repeat}:")
            rounds.append(run_round(brokers, counts, args.partitions, i % 2 == 0, profile_dir))
            log(table(rounds, [b.name for b in brokers]))  # so far: a cut-short run tells
        rss_loaded = {b.name: rss_mb(b.pid) for b in brokers}
    finally:
        for broker in started:
            broker.stop()
        if kafka is not None:
            kafka.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    names = [b.name for b in brokers]
    print(
        f"{counts['100 B']:,} x 100 B, {counts['1 KiB']:,} x 1 KiB per cell, {args.partitions} "
        f"partitions, median of {args.repeat} rounds after a discarded warm-up round; "
        f"load at the end {load_average()}\n"
    )
    print(table(rounds, names))
    print(
        "\nthe fetch cells less each broker's idle CPU rate (measured before the round's "
        f"fetch cells, {IDLE_WINDOW_S:.0f} s, no client) times the cell's duration\n"
    )
    print(fetch_path_table(rounds, names))
    print("\nstart-up (to the first ApiVersions answer) and resident memory\n")
    print(
        markdown_table(
            [["broker", "start-up s", "RSS after start MB", "RSS after the rounds MB"]]
            + [
                [
                    b.name,
                    f"{b.startup_s:.2f}",
                    f"{b.rss_started_mb:.0f}",
                    f"{rss_loaded[b.name]:.0f}",
                ]
                for b in brokers
            ]
        )
    )
    if profile_dir is not None:
        print(f"\nwhere the broker's CPU goes (last round; {profile_dir}/*.svg)\n")
        last = rounds[-1]
        print(
            profile_table(
                [
                    breakdown(
                        profile_dir / f"{slug(c[0])}.txt",
                        last[(c[0], "odradek")].system_per_gb / last[(c[0], "odradek")].per_gb,
                    )
                    for c in CELLS
                ]
            )
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "counts": counts,
                    "partitions": args.partitions,
                    "rounds": [
                        {f"{c} / {b}": asdict(v) for (c, b), v in r.items()} for r in rounds
                    ],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
