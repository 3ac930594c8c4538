"""Scale-up: one Odradek broker or two on this machine's cores, and where the cores went.

A broker is one Python process with one event loop: the GIL bounds its request
handling to about one core. The way to use more cores is more brokers (cluster
mode, partitions and their leaderships spread over them; Kafka clients send each
partition's requests to its leader). This measures it: the same load against

- ``serve``: one single-node broker (``odradek serve``, no etcd);
- ``cluster-1``: a cluster of one broker and its etcd (``odradek cluster up
  --brokers 1``): the cost of cluster mode alone;
- ``cluster-2``: a cluster of two brokers and etcd, RF=1 topics whose
  partitions alternate between the brokers (each leads half).

Each cell is a fresh topic of ``--partitions`` partitions (RF=1): produce N
values of 100 B or 1 KiB with acks=1 (``bench/throughput.py``'s confluent-kafka
producer and settings), then fetch them back from offset 0 (its consumer,
assigned partitions). The load comes from ``--clients`` client processes
(``1,2``: each setup with one client process and with two; two split the
records, or the partitions when fetching); every client warms up (metadata,
connections) and then waits, so all start together. A first round of every
cell is discarded (warm-up); then ``--repeat`` rounds run every cell, the order
of the setups and of the client counts flipping every round; medians are kept.

Per cell: records/s and MB/s (values; the slowest client's time), and the CPU
seconds each process took over the cell, from the moment the clients were told
to start until the last one finished: each broker and etcd (user + system,
/proc/PID/stat), the client processes (their own ``getrusage``, all threads),
and the rest of the machine from /proc/stat: other processes (its process time
minus all of those: other work on the shared machine, kernel threads), irq and
softirq (loopback TCP's receive path runs there, charged to no process), and
steal (the hypervisor's). Shares are of the machine's capacity over the cell
(wall time x cores); idle is what is left.

``--raw`` replaces confluent-kafka by a load generator that costs the client
almost nothing: per leader, one Produce request (a 256 KiB batch per partition
it leads) encoded once and sent again and again, 5 in flight; produce only.
There the brokers, not the client, set the throughput. Topics are deleted
after each setup's cells.

    cd bench && python3 scale_up.py                         # 2M x 100 B, 500k x 1 KiB, 3 rounds
    python3 scale_up.py --quick --repeat 1                  # a quick look (500k / 125k)
    python3 scale_up.py --setups serve,cluster-2 --clients 2
    python3 scale_up.py --raw --sizes 100B --records 2000000   # broker-bound

Every process it starts (brokers, etcd, clients) is stopped at exit.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from broker_cpu import cpu_seconds, load_average, start_odradek  # bench/broker_cpu.py
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka import version as ck_version
from confluent_kafka.admin import AdminClient
from report import markdown_table  # bench/report.py (scripts run from bench/)
from throughput import (
    CONSUMER_SETTINGS,
    Result,
    Target,
    consume,
    create_topic,
    delete_topics,
    produce,
)

SETUPS = ("serve", "cluster-1", "cluster-2")
SIZES = {"100 B": 100, "1 KiB": 1024}
COUNTS = {"100 B": 2_000_000, "1 KiB": 500_000}
QUICK_COUNTS = {"100 B": 500_000, "1 KiB": 125_000}
NO_CAP_S = 3600.0  # throughput.py's per-cell time cap, lifted: every record is sent and read
START_TIMEOUT_S = 120.0
CLIENT_TIMEOUT_S = 900.0


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --- the machine -------------------------------------------------------------------------


def machine_seconds() -> dict[str, float]:
    """CPU seconds all cores spent so far (/proc/stat): in processes (user, nice, system),
    in interrupts ("irq": irq and softirq, where loopback TCP's receive path mostly runs;
    the kernel charges it to no process), and taken by the hypervisor ("steal")."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    tick = os.sysconf("SC_CLK_TCK")
    return {
        "processes": (user + nice + system) / tick,
        "irq": (irq + softirq) / tick,
        "steal": steal / tick,
    }


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def process_seconds(pid: int) -> float:
    user, system = cpu_seconds(pid)
    return user + system


# --- the setups under test ---------------------------------------------------------------


@dataclass
class Setup:
    """Brokers (and etcd) under measurement: one of `SETUPS`, running."""

    name: str
    bootstrap: str
    brokers: dict[int, int]  # broker (node) id -> pid; "broker 1", "broker 2" in their order
    etcd_pid: int | None = None
    topics: list[str] = field(default_factory=list)  # created this round

    @property
    def target(self) -> Target:
        return Target(self.name, self.bootstrap)

    def delete_topics(self) -> None:
        delete_topics(self.target, self.topics)


@contextmanager
def started(name: str, root: Path) -> Iterator[Setup]:
    """Start one of `SETUPS` in `root`; stopped when the block ends."""
    if name == "serve":
        broker, _ = start_odradek(root, None)  # (process, its start-up seconds)
        assert broker.pid is not None
        try:
            [node] = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics().brokers
            yield Setup(name, broker.bootstrap, {node: broker.pid})
        finally:
            broker.stop()
        return
    from odradek.devcluster.launcher import LocalCluster

    cluster = LocalCluster.prepare(root, brokers=int(name.rsplit("-", 1)[1]))
    try:
        cluster.start_all(timeout_s=START_TIMEOUT_S)
        pids = {b: pid for b in cluster.broker_ids if (pid := cluster.pid(b)) is not None}
        etcd = cluster.pid(cluster.etcd_names[0])
        assert etcd is not None and len(pids) == len(cluster.broker_ids)
        yield Setup(name, cluster.bootstrap_servers(), pids, etcd)
    finally:
        cluster.stop_all(timeout_s=10.0)  # etcd too, even when a broker's stop fails


def leaders(setup: Setup, topic: str) -> dict[int, list[int]]:
    """Broker id -> the partitions of `topic` it leads."""
    admin = AdminClient({"bootstrap.servers": setup.bootstrap})
    led: dict[int, list[int]] = {}
    for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values():
        led.setdefault(p.leader, []).append(p.id)
    return {b: sorted(ps) for b, ps in sorted(led.items())}


def high_watermarks(setup: Setup, topic: str, partitions: int) -> list[int]:
    consumer = Consumer(setup.target.config(**CONSUMER_SETTINGS))
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


# --- the client processes ----------------------------------------------------------------


def client_main(spec: dict[str, Any]) -> int:
    """One client process (``--client SPEC``): warm up, say "ready", wait for "go" on
    stdin, run, and print the result and its own CPU seconds over the run as JSON."""
    usage: list[resource.struct_rusage] = []

    def ready() -> None:
        print("ready", flush=True)
        if sys.stdin.readline().strip() != "go":
            raise SystemExit("no go")
        usage.append(resource.getrusage(resource.RUSAGE_SELF))  # every thread of this process

    target = Target("client", spec["bootstrap"])
    if spec["kind"] == "raw":
        result = raw_produce(spec, ready)
    elif spec["kind"] == "produce":
        result = produce(target, spec["topic"], spec["count"], spec["size"], "1", NO_CAP_S, ready)
    else:
        result = consume(
            target, spec["topic"], spec["partitions"], spec["count"], spec["size"], NO_CAP_S, ready
        )
    end = resource.getrusage(resource.RUSAGE_SELF)
    cpu = end.ru_utime - usage[0].ru_utime + end.ru_stime - usage[0].ru_stime
    print(json.dumps(asdict(result) | {"cpu_s": cpu}), flush=True)
    return 0


RAW_BATCH_BYTES = 256 * 1024  # a batch per partition and request: throughput.py's batch.size
RAW_IN_FLIGHT = 5  # requests in flight per connection, librdkafka's default


def raw_request(topic: str, partitions: list[int], size: int) -> tuple[bytes, int]:
    """A framed Produce request (v9, acks=1) with one batch of `size`-byte values for each
    of `partitions`, and how many records it carries."""
    from odradek.protocol.codec import RequestHeader, encode_request
    from odradek.protocol.produce import encode_produce_request
    from odradek.protocol.records import build_batch

    per_batch = max(1, RAW_BATCH_BYTES // (size + 8))  # 8: a record's own bytes at these sizes
    value = os.urandom(size)
    batch = build_batch([(None, value, ())] * per_batch, timestamp_ms=int(time.time() * 1000))
    body = encode_produce_request(9, None, 1, 30_000, [(topic, [(p, batch) for p in partitions])])
    return encode_request(RequestHeader(0, 9, 1, "scale-up-raw"), body), per_batch * len(partitions)


def raw_produce(spec: dict[str, Any], ready: Callable[[], None]) -> Result:
    """The same request again and again to each leader, `RAW_IN_FLIGHT` in flight: a load
    that costs the client almost nothing (the request is encoded once, before the timed
    part), so the brokers, not the client, are the limit. Every request carries the same
    correlation id (answers come in order on a connection); the caller checks the high
    watermarks."""
    import asyncio

    leaders: dict[str, list[int]] = spec["leaders"]  # "host:port" -> partitions it leads
    loads = []  # (address, request, how many times)
    for (address, partitions), records in zip(
        leaders.items(), split(spec["count"], len(leaders)), strict=True
    ):
        request, per_request = raw_request(spec["topic"], partitions, spec["size"])
        loads.append((address, request, -(-records // per_request), per_request))

    async def one_leader(address: str, request: bytes, requests: int) -> None:
        host, _, port = address.rpartition(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        window = asyncio.Semaphore(RAW_IN_FLIGHT)

        async def answers() -> None:
            for _ in range(requests):
                size = int.from_bytes(await reader.readexactly(4), "big")
                await reader.readexactly(size)
                window.release()

        reading = asyncio.create_task(answers())
        for _ in range(requests):
            await window.acquire()
            writer.write(request)
            await writer.drain()
        await reading
        writer.close()

    async def run() -> float:
        started = time.perf_counter()
        await asyncio.gather(*(one_leader(a, r, n) for a, r, n, _ in loads))
        return time.perf_counter() - started

    ready()
    seconds = asyncio.run(run())
    return Result(sum(n * per for _, _, n, per in loads), seconds, spec["size"])


def run_clients(specs: list[dict[str, Any]], setup: Setup) -> Cell:
    """Start a client process per spec, wait until all are warm, start them together and
    measure every process's CPU until the last one is done."""
    with ExitStack() as stack:
        procs = []
        for spec in specs:
            proc = subprocess.Popen(
                [sys.executable, __file__, "--client", json.dumps(spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            stack.callback(stop_client, proc)
            procs.append(proc)
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a client of {setup.name} did not get ready")
        pids = {f"broker {i}": pid for i, pid in enumerate(setup.brokers.values(), 1)}
        if setup.etcd_pid is not None:
            pids["etcd"] = setup.etcd_pid
        before = {name: process_seconds(pid) for name, pid in pids.items()}
        self0 = time.process_time()
        machine0 = machine_seconds()
        started_at = time.perf_counter()
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        # the window ends at the last client's result, before the clients' exit and
        # interpreter teardown (the CPU a client reports is up to its result, too)
        results = [client_result(proc, setup) for proc in procs]
        wall = time.perf_counter() - started_at
        machine = {k: v - machine0[k] for k, v in machine_seconds().items()}
        cpu = {name: process_seconds(pid) - before[name] for name, pid in pids.items()}
        cpu["clients"] = sum(r["cpu_s"] for r in results)
        cpu["bench"] = time.process_time() - self0  # this process, waiting on the clients
        for proc in procs:
            if proc.wait(CLIENT_TIMEOUT_S) != 0:
                raise RuntimeError(f"a client of {setup.name} failed ({proc.returncode})")
    errors = [r for r in results if r["errors"] or r["note"]]
    if errors:
        raise RuntimeError(f"{setup.name}: {errors}")
    cpu["other processes"] = max(0.0, machine["processes"] - sum(cpu.values()))
    cpu["irq, softirq"] = machine["irq"]
    cpu["steal"] = machine["steal"]
    return Cell(
        records=sum(r["messages"] for r in results),
        value_bytes=sum(r["messages"] * r["value_bytes"] for r in results),
        seconds=max(r["seconds"] for r in results),
        wall=wall,
        cpu=cpu,
        load=load_average(),
    )


def client_result(proc: subprocess.Popen[str], setup: Setup) -> dict[str, Any]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"a client of {setup.name} exited with {proc.wait(10)}, no result")
    result: dict[str, Any] = json.loads(line)
    return result


def stop_client(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


# --- cells and rounds --------------------------------------------------------------------


@dataclass
class Cell:
    """One load on one setup: what moved, and the CPU seconds every process took."""

    records: int
    value_bytes: int
    seconds: float  # the slowest client's timed part
    wall: float  # "go" to the last client's exit: the window the CPU was read over
    # CPU seconds: broker N, etcd, clients, bench (this process), other processes (the
    # shared machine's other work, kernel threads), irq and softirq, steal
    cpu: dict[str, float]
    load: str

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.value_bytes / self.seconds / 1e6

    def share(self, name: str) -> float:
        """Of the machine's capacity over the cell (wall x cores)."""
        return self.cpu.get(name, 0.0) / (self.wall * CORES)

    @property
    def broker_cpu(self) -> float:
        return sum(s for name, s in self.cpu.items() if name.startswith("broker"))


CORES = os.cpu_count() or 1


def split(count: int, parts: int) -> list[int]:
    return [count // parts + (i < count % parts) for i in range(parts)]


def run_pair(
    setup: Setup,
    size_name: str,
    count: int,
    clients: int,
    partitions: int,
    round_id: str,
    raw: bool = False,
) -> dict[str, Cell]:
    """Produce into a fresh topic, then fetch it back: {"produce": cell, "fetch": cell};
    with `raw`, produce only, by `raw_produce`."""
    size = SIZES[size_name]
    topic = f"scale-{round_id}-{size_name.replace(' ', '')}-c{clients}"
    create_topic(setup.target, topic, partitions)
    setup.topics.append(topic)
    led = leaders(setup, topic)
    if set(led) != set(setup.brokers) or len({len(ps) for ps in led.values()}) != 1:
        raise RuntimeError(f"{setup.name}: partitions not spread evenly: {led}")
    base = {"bootstrap": setup.bootstrap, "topic": topic, "size": size}
    if raw:
        addresses = {
            b.id: f"{b.host}:{b.port}"
            for b in AdminClient({"bootstrap.servers": setup.bootstrap})
            .list_topics()
            .brokers.values()
        }
        base["leaders"] = {addresses[b]: ps for b, ps in led.items()}
    produced = run_clients(
        [base | {"kind": "raw" if raw else "produce", "count": n} for n in split(count, clients)],
        setup,
    )
    marks = high_watermarks(setup, topic, partitions)  # warm-up records included
    cells = {"produce": produced}
    if raw:
        if sum(marks) != produced.records:  # every request appended, none refused
            raise RuntimeError(
                f"{setup.name}: {sum(marks)} records in the log, sent {produced.records}"
            )
        marks = []
    # contiguous ranges: the leaders alternate, so each client fetches from every broker
    bounds = [0, *itertools.accumulate(split(partitions, clients))]
    groups = [list(range(a, b)) for a, b in itertools.pairwise(bounds)]
    if marks:
        cells["fetch"] = run_clients(
            [
                base | {"kind": "fetch", "partitions": g, "count": sum(marks[p] for p in g)}
                for g in groups
            ],
            setup,
        )
    for kind, cell in cells.items():
        per_broker = " ".join(
            f"{cell.cpu[f'broker {i}']:.2f}" for i in range(1, len(setup.brokers) + 1)
        )
        log(
            f"  {setup.name:<9} {clients} client{'s' if clients > 1 else ' '} {kind:<7} "
            f"{size_name:<5} {cell.records:>9,d} rec {cell.seconds:6.2f} s "
            f"{cell.records_per_s:>9,.0f} rec/s {cell.mb_per_s:6.1f} MB/s  CPU s: brokers "
            f"{per_broker} etcd {cell.cpu.get('etcd', 0):.2f} clients {cell.cpu['clients']:.2f} "
            f"other {cell.cpu['other processes']:.2f} irq {cell.cpu['irq, softirq']:.2f} "
            f"steal {cell.cpu['steal']:.2f}  load {cell.load}"
        )
    return cells


Key = tuple[str, str, str, int]  # (load, size, setup, clients), e.g. ("produce", "100 B", ...)


def run_round(
    setups: list[Setup],
    counts: dict[str, int],
    client_counts: list[int],
    partitions: int,
    flip: bool,
    raw: bool = False,
) -> dict[Key, Cell]:
    round_id = uuid.uuid4().hex[:6]
    order = list(reversed(setups)) if flip else setups
    clients_order = list(reversed(client_counts)) if flip else client_counts
    cells: dict[Key, Cell] = {}
    for size_name, count in counts.items():
        for setup in order:
            for clients in clients_order:
                for kind, cell in run_pair(
                    setup, size_name, count, clients, partitions, round_id, raw
                ).items():
                    cells[(kind, size_name, setup.name, clients)] = cell
            setup.delete_topics()  # after each setup's cells: the shared disk runs full
            time.sleep(2)  # the files of the deleted topic go before the next cell
    return cells


# --- the report --------------------------------------------------------------------------


def median_cell(cells: list[Cell]) -> Cell:
    """The round with the median throughput (the lower middle one for an even count)."""
    return sorted(cells, key=lambda c: c.records_per_s)[(len(cells) - 1) // 2]


def tables(rounds: list[dict[Key, Cell]], setups: list[Setup], client_counts: list[int]) -> str:
    """Per load: throughput, and where the cores went, for every setup and client count."""
    most_brokers = max(len(s.brokers) for s in setups)
    out = []
    for kind in ("produce", "fetch"):
        for size_name in SIZES:
            if (kind, size_name, setups[0].name, client_counts[0]) not in rounds[0]:
                continue
            head = ["setup", "clients", "records/s (range)", "MB/s", "broker CPU s/GB (range)"]
            head += [f"broker {b}" for b in range(1, most_brokers + 1)]
            head += ["etcd", "clients", "other processes", "irq, softirq", "steal", "idle"]
            lines = [head]
            for setup in setups:
                for clients in client_counts:
                    runs = [r[(kind, size_name, setup.name, clients)] for r in rounds]
                    cell = median_cell(runs)
                    rates = [c.records_per_s for c in runs]
                    per_gb = [c.broker_cpu / (c.value_bytes / 1e9) for c in runs]
                    line = [
                        setup.name,
                        str(clients),
                        f"{cell.records_per_s:,.0f} ({min(rates):,.0f}-{max(rates):,.0f})",
                        f"{cell.mb_per_s:.1f}",
                        f"{statistics.median(per_gb):.2f} ({min(per_gb):.2f}-{max(per_gb):.2f})",
                    ]
                    for b in range(1, most_brokers + 1):
                        name = f"broker {b}"
                        line.append(
                            f"{cell.cpu[name]:.1f} s {cell.share(name):.0%}"
                            if name in cell.cpu
                            else "-"
                        )
                    for name in ("etcd", "clients", "other processes", "irq, softirq", "steal"):
                        line.append(
                            f"{cell.cpu[name]:.1f} s {cell.share(name):.0%}"
                            if name in cell.cpu
                            else "-"
                        )
                    used = sum(cell.cpu.values()) / (cell.wall * CORES)
                    line.append(f"{max(0.0, 1 - used):.0%}")
                    lines.append(line)
            out.append(
                f"{kind} {size_name}: the round with the median records/s, its CPU seconds "
                f"and their share of {CORES} cores over the cell; broker CPU s/GB: median "
                f"of the rounds\n\n{markdown_table(lines)}"
            )
    return "\n\n".join(out)


def parse_list(text: str, allowed: tuple[str, ...] | None, what: str) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"{what}: give at least one")
    if allowed is not None:
        unknown = [t for t in items if t not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"{what}: unknown {', '.join(unknown)} (choose from {', '.join(allowed)})"
            )
    return list(dict.fromkeys(items))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="measured rounds; medians shown")
    parser.add_argument(
        "--quick", action="store_true", help="500,000 x 100 B and 125,000 x 1 KiB per cell"
    )
    parser.add_argument(
        "--records",
        type=int,
        help="records per cell at both sizes (default 2,000,000 x 100 B and 500,000 x 1 KiB)",
    )
    parser.add_argument(
        "--sizes",
        default="100B,1KiB",
        help="value sizes, comma-separated (default: 100B,1KiB)",
    )
    parser.add_argument(
        "--partitions", type=int, default=4, help="partitions per topic (even: split over 2)"
    )
    parser.add_argument(
        "--setups", default=",".join(SETUPS), help=f"comma-separated, of {', '.join(SETUPS)}"
    )
    parser.add_argument(
        "--clients", default="1,2", help="client process counts, comma-separated (default 1,2)"
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="produce only, by a load generator that sends one pre-encoded request again "
        "and again (256 KiB batch per partition, 5 in flight per leader) instead of "
        "confluent-kafka: the brokers, not the client, are the limit",
    )
    parser.add_argument("--json", help="also write every round's cells to this file")
    args = parser.parse_args(argv)
    try:
        args.setups = parse_list(args.setups, SETUPS, "--setups")
        by_slug = {name.replace(" ", ""): name for name in SIZES}  # 100B or "100 B"
        slugs = parse_list(args.sizes.replace(" ", ""), tuple(by_slug), "--sizes")
        args.sizes = [by_slug[s] for s in slugs]
        clients = parse_list(args.clients, None, "--clients")
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))
    if not all(c.isdigit() and 1 <= int(c) <= 8 for c in clients):
        parser.error("--clients: counts from 1 to 8")
    args.clients = [int(c) for c in clients]
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if args.records is not None and args.records < 1:
        parser.error("--records must be at least 1")
    most_brokers = max(1 if s == "serve" else int(s.rsplit("-", 1)[1]) for s in args.setups)
    if args.partitions < 1 or args.partitions % most_brokers:
        parser.error(
            f"--partitions must be a multiple of {most_brokers} (every broker leads as many)"
        )
    if args.partitions < max(args.clients):
        parser.error("--partitions must be at least the largest --clients (fetch splits them)")
    counts = QUICK_COUNTS if args.quick else COUNTS
    args.counts = {s: args.records or counts[s] for s in args.sizes}
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="odradek-scale-"))
    try:
        with ExitStack() as stack:
            setups = []
            for name in args.setups:
                setups.append(stack.enter_context(started(name, tmp / name)))
                log(
                    f"{name}: {setups[-1].bootstrap} brokers {setups[-1].brokers} "
                    f"etcd {setups[-1].etcd_pid}"
                )
            log(
                f"{CORES} cpus ({cpu_model()}), python "
                f"{platform.python_version()}, confluent-kafka {ck_version()}; load "
                f"{load_average()}; {args.partitions} partitions per topic (RF=1), acks=1; "
                + ", ".join(f"{c:,} x {s}" for s, c in args.counts.items())
                + " per cell"
            )
            log("warm-up round (discarded):")
            run_round(setups, args.counts, args.clients, args.partitions, False, args.raw)
            rounds = []
            for i in range(args.repeat):
                log(f"round {i + 1} of {args.repeat}:")
                rounds.append(
                    run_round(
                        setups, args.counts, args.clients, args.partitions, i % 2 == 0, args.raw
                    )
                )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"{CORES} cores; {'raw load generator' if args.raw else 'confluent-kafka'}; "
        + ", ".join(f"{c:,} x {s}" for s, c in args.counts.items())
        + f" per cell, {args.partitions} partitions (RF=1), acks=1; median of {args.repeat} "
        f"rounds after a discarded warm-up round; load at the end {load_average()}\n"
    )
    print(tables(rounds, setups, args.clients))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "counts": args.counts,
                    "partitions": args.partitions,
                    "rounds": [
                        {" / ".join(map(str, k)): asdict(c) for k, c in r.items()} for r in rounds
                    ],
                },
                indent=2,
            )
        )
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--client":
        raise SystemExit(client_main(json.loads(sys.argv[2])))
    raise SystemExit(main())
