"""Hostile clients against one broker: what they cost a well-behaved client next to them.

For each attack a fresh broker is started; a victim client (its own process, one
connection) sends Metadata and Fetch requests for a small topic in a loop, about
200 a second, while the attack runs. The table gives the victim's latencies and
the broker's peak RSS (VmHWM), next to the same figures with no attack.

    python bench/hostile.py                       # every attack
    python bench/hostile.py --attack slowloris --attack "mass topic creation"
    python bench/hostile.py --topics 2000         # a smaller mass creation
    python bench/hostile.py --attack "stalled frames" --attack "3 x 100 MB frames"

Adding an attack is one function decorated with ``@attack("name")``: it gets an
``AttackRun`` (the broker's address and pid, a deadline) and returns a short
description of what it achieved, for the table's last column.

After the mass creation the broker is restarted with its 10,000 topics, and
the time until it answers Metadata and its RSS then are reported.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import zstandard
from confluent_kafka import Producer
from crc32c import crc32c
from report import markdown_table  # bench/report.py (scripts run from bench/)

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import (
    RequestHeader,
    build,
    decode_response,
    encode_request,
    request_type,
)
from odradek.testing import BrokerProcess, wait_for_port

VICTIM_TOPIC = "victim"
BIG_TOPIC = "big"
VICTIM_PAUSE_S = 0.005
METADATA_VERSION = 9
FETCH_VERSION = 11


# --- a blocking one-request-at-a-time client ----------------------------------------


class Wire:
    def __init__(self, bootstrap: str, timeout_s: float = 120.0) -> None:
        host, _, port = bootstrap.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.correlation = 0

    def frame(self, api_key: int, version: int, values: dict[str, Any]) -> bytes:
        self.correlation += 1
        body = build(request_type(api_key, version), values)
        return encode_request(RequestHeader(api_key, version, self.correlation, "hostile"), body)

    def request(self, api_key: int, version: int, values: dict[str, Any]) -> Any:
        self.sock.sendall(self.frame(api_key, version, values))
        size = struct.unpack(">i", self._read(4))[0]
        return decode_response(api_key, version, self._read(size))[1]

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


def metadata_body(names: list[str]) -> dict[str, Any]:
    return {
        "topics": [{"name": n} for n in names],
        "allow_auto_topic_creation": True,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }


def fetch_body(topic: str, max_bytes: int, max_wait_ms: int = 0) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "log_start_offset": -1,
                        "partition_max_bytes": max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def create_topics_body(names: list[str]) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": n,
                "num_partitions": 1,
                "replication_factor": -1,
                "assignments": [],
                "configs": [],
            }
            for n in names
        ],
        "timeout": 60_000,
        "validate_only": False,
    }


# --- the victim -----------------------------------------------------------------------


def victim_loop(bootstrap: str, stop: Any, results: Connection) -> None:
    """Metadata and Fetch for the victim topic, alternately, until `stop` is set."""
    wire = Wire(bootstrap)
    latencies: dict[str, list[float]] = {"metadata": [], "fetch": []}
    requests = (
        ("metadata", ApiKey.METADATA, METADATA_VERSION, metadata_body([VICTIM_TOPIC])),
        ("fetch", ApiKey.FETCH, FETCH_VERSION, fetch_body(VICTIM_TOPIC, 64 * 1024)),
    )
    i = 0
    while not stop.is_set():
        kind, key, version, body = requests[i % 2]
        started = time.perf_counter()
        wire.request(key, version, body)
        latencies[kind].append(time.perf_counter() - started)
        i += 1
        time.sleep(VICTIM_PAUSE_S)
    wire.close()
    results.send(latencies)


# --- attacks --------------------------------------------------------------------------


@dataclass
class AttackRun:
    bootstrap: str
    pid: int
    duration_s: float
    topics: int

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.bootstrap.rpartition(":")
        return host, int(port)


Attack = Callable[[AttackRun], str]
ATTACKS: dict[str, Attack] = {}


def attack(name: str) -> Callable[[Attack], Attack]:
    def register(fn: Attack) -> Attack:
        ATTACKS[name] = fn
        return fn

    return register


@attack("none")
def no_attack(run: AttackRun) -> str:
    time.sleep(run.duration_s)
    return "-"


@attack("pipelined unread fetches")
def pipelined_unread_fetches(run: AttackRun) -> str:
    """8 connections each pipeline 80 Fetches of an 8 MiB log and never read a byte."""
    socks = []
    wire = Wire(run.bootstrap)
    frames = b"".join(
        wire.frame(ApiKey.FETCH, 4, fetch_body(BIG_TOPIC, 64 << 20)) for _ in range(80)
    )
    wire.close()
    for _ in range(8):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(run.address)
        sock.sendall(frames)
        socks.append(sock)
    time.sleep(run.duration_s)
    for sock in socks:
        sock.close()
    return "8 x 80 fetches of 8 MiB"


@attack("slowloris")
def slowloris(run: AttackRun) -> str:
    """300 connections each send a request one byte every 2 s (a 23-byte frame: 46 s).

    Runs 40 s at least, past `socket.receive.timeout.ms` (30 s by default), so the
    broker's closing of these connections shows.
    """
    wire = Wire(run.bootstrap)
    frame = wire.frame(ApiKey.API_VERSIONS, 0, {})
    wire.close()
    socks = [socket.create_connection(run.address) for _ in range(300)]
    sent = [0] * len(socks)
    deadline = time.monotonic() + max(run.duration_s, 40.0)
    closed = 0
    while time.monotonic() < deadline:
        for i, sock in enumerate(socks):
            if sock.fileno() < 0 or sent[i] >= len(frame):
                continue
            try:
                sock.send(frame[sent[i] : sent[i] + 1])
                sent[i] += 1
            except OSError:
                sock.close()
                closed += 1
        time.sleep(2.0)
    for sock in socks:
        sock.close()
    return f"300 connections, {closed} closed by the broker"


LARGE_FRAME_BYTES = 100_000_000  # under socket.request.max.bytes (100 MiB)


def _large_produce_frame(run: AttackRun, size: int = LARGE_FRAME_BYTES) -> bytes:
    """A Produce request of `size` bytes whose records are zeros (CORRUPT_MESSAGE)."""
    wire = Wire(run.bootstrap)
    body = _produce_body(BIG_TOPIC, b"")
    overhead = len(wire.frame(ApiKey.PRODUCE, 8, body))
    frame = wire.frame(ApiKey.PRODUCE, 8, _produce_body(BIG_TOPIC, bytes(size - overhead)))
    wire.close()
    return frame


@attack("stalled frames")
def stalled_frames(run: AttackRun) -> str:
    """5 connections each send 90 MB of a 100 MB Produce frame, then nothing (issue 24).

    Together they hold more than `queued.max.request.bytes` (256 MiB): three
    frames get their memory, two wait for it. Held until the attack's end,
    within `socket.receive.timeout.ms` (30 s).
    """
    frame = _large_produce_frame(run)
    part = memoryview(frame)[: len(frame) * 9 // 10]
    socks = [socket.create_connection(run.address) for _ in range(5)]
    senders = [threading.Thread(target=_send_quietly, args=(s, part)) for s in socks]
    for sender in senders:
        sender.start()
    time.sleep(run.duration_s)
    sent = sum(1 for sender in senders if not sender.is_alive())
    for sock in socks:
        sock.close()
    for sender in senders:
        sender.join(10)
    return f"5 x 90 of 100 MB: {sent} sent it all, {5 - sent} held back (muted)"


def _send_quietly(sock: socket.socket, data: memoryview) -> None:
    with contextlib.suppress(OSError):  # the attack's end closes it
        sock.sendall(data)


@attack("3 x 100 MB frames")
def three_large_frames(run: AttackRun) -> str:
    """3 connections each send a whole 100 MB Produce frame at once, together over
    `queued.max.request.bytes`, and again after each answer (issue 19 item 7)."""
    frame = _large_produce_frame(run)
    deadline = time.monotonic() + run.duration_s
    answered = [0, 0, 0]

    def produce(i: int) -> None:
        wire = Wire(run.bootstrap)
        while time.monotonic() < deadline:
            wire.sock.sendall(frame)
            size = struct.unpack(">i", wire._read(4))[0]
            wire._read(size)
            answered[i] += 1
        wire.close()

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return f"{sum(answered)} frames of 100 MB answered ({min(answered)}-{max(answered)} each)"


@attack("2,000-unknown-topic Metadata")
def unknown_topics_metadata(run: AttackRun) -> str:
    """One Metadata request naming 2,000 unknown topics (auto-creation on), retried until done."""
    names = [f"unknown-{i:05d}" for i in range(2000)]
    wire = Wire(run.bootstrap, timeout_s=600)
    started = time.perf_counter()
    rounds = 0
    while True:
        rounds += 1
        response = wire.request(ApiKey.METADATA, METADATA_VERSION, metadata_body(names))
        if all(t.error_code == 0 for t in response.topics):
            break
    elapsed = time.perf_counter() - started
    wire.close()
    time.sleep(max(run.duration_s - elapsed, 0))
    return f"2,000 created in {elapsed:.1f} s ({rounds} requests)"


@attack("mass topic creation")
def mass_topic_creation(run: AttackRun) -> str:
    """CreateTopics for `--topics` topics (default 10,000), 500 per request, back to back."""
    wire = Wire(run.bootstrap, timeout_s=600)
    started = time.perf_counter()
    created = 0
    for first in range(0, run.topics, 500):
        names = [f"mass-{i:06d}" for i in range(first, min(first + 500, run.topics))]
        response = wire.request(ApiKey.CREATE_TOPICS, 7, create_topics_body(names))
        created += sum(1 for t in response.topics if t.error_code == 0)
    elapsed = time.perf_counter() - started
    wire.close()
    return f"{created:,} topics in {elapsed:.1f} s"


def _batch(records: bytes, count: int, codec: int = 0, last_offset_delta: int = -1) -> bytes:
    """A v2 record batch around `records` with a valid CRC, whatever the records say."""
    lod = count - 1 if last_offset_delta < 0 else last_offset_delta
    now = int(time.time() * 1000)
    header = struct.pack(
        ">qiibIhiqqqhii", 0, 49 + len(records), -1, 2, 0, codec, lod, now, now, -1, -1, -1, count
    )
    out = bytearray(header) + records
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def _produce_body(topic: str, batch: bytes) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout": 30_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }


def _send_until(run: AttackRun, batches: list[bytes], topic: str) -> tuple[int, set[int]]:
    """Produce `batches` round-robin until the deadline; (requests sent, error codes seen)."""
    wire = Wire(run.bootstrap)
    deadline = time.monotonic() + run.duration_s
    sent, codes = 0, set()
    while time.monotonic() < deadline:
        batch = batches[sent % len(batches)]
        response = wire.request(ApiKey.PRODUCE, 8, _produce_body(topic, batch))
        codes.add(int(response.responses[0].partition_responses[0].error_code))
        sent += 1
    wire.close()
    return sent, codes


@attack("decompression bombs")
def decompression_bombs(run: AttackRun) -> str:
    """zstd and gzip batches of a few KB that inflate to 512 MiB, produced back to back."""
    zero = bytes(1 << 20)
    zstd = zstandard.ZstdCompressor(level=19).compressobj()
    zstd_bomb = b"".join(zstd.compress(zero) for _ in range(512)) + zstd.flush()
    gzip = zlib.compressobj(9, zlib.DEFLATED, 31)
    gzip_bomb = b"".join(gzip.compress(zero) for _ in range(512)) + gzip.flush()
    batches = [_batch(zstd_bomb, 1, codec=4), _batch(gzip_bomb, 1, codec=1)]
    sent, codes = _send_until(run, batches, VICTIM_TOPIC)
    sizes = f"{len(zstd_bomb) // 1024}-{len(gzip_bomb) // 1024} KB"
    return f"{sent:,} bombs of {sizes}; error codes {sorted(codes)}"


@attack("poison batches")
def poison_batches(run: AttackRun) -> str:
    """Batches with a valid CRC over garbage, and one whose count claims 1,000,000 records."""
    one_record = bytes([14, 0, 0, 0, 1, 2, 120, 0])  # a 7-byte record: no key, value "x"
    batches = [_batch(os.urandom(200), 3), _batch(one_record, 1_000_000)]
    sent, codes = _send_until(run, batches, VICTIM_TOPIC)
    return f"{sent:,} poison batches; error codes {sorted(codes)}"


# --- running --------------------------------------------------------------------------


def rss_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def prepare(bootstrap: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "batch.size": 1 << 20})
    for i in range(1000):
        producer.produce(VICTIM_TOPIC, b"%06d" % i + b"v" * 994)
    big = os.urandom(16 * 1024)
    for _ in range(512):  # 8 MiB
        producer.produce(BIG_TOPIC, big)
        producer.poll(0)
    if producer.flush(60):
        raise RuntimeError("could not write the benchmark topics")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_attack(name: str, data_dir: Path, duration_s: float, topics: int) -> dict[str, Any]:
    broker = BrokerProcess(data_dir).start()
    assert broker.pid is not None
    try:
        try:
            prepare(broker.bootstrap)
        except RuntimeError:
            print(broker.log_tail(80), file=sys.stderr)
            raise
        stop = multiprocessing.Event()
        receiver, sender = multiprocessing.Pipe(duplex=False)
        victim = multiprocessing.Process(target=victim_loop, args=(broker.bootstrap, stop, sender))
        victim.start()
        time.sleep(1.0)  # the victim's first requests run on a quiet broker
        outcome = ATTACKS[name](AttackRun(broker.bootstrap, broker.pid, duration_s, topics))
        stop.set()
        latencies = receiver.recv()
        victim.join(30)
        row: dict[str, Any] = {
            "attack": name,
            "outcome": outcome,
            "requests": sum(len(v) for v in latencies.values()),
            "peak_rss": rss_mib(broker.pid, "VmHWM"),
        }
        for kind, values in latencies.items():
            row[f"{kind}_p50"] = percentile(values, 0.50) * 1000
            row[f"{kind}_p99"] = percentile(values, 0.99) * 1000
            row[f"{kind}_max"] = max(values) * 1000 if values else float("nan")
        if name == "mass topic creation":
            row["restart"] = measure_restart(broker)
        return row
    finally:
        if broker.running and broker.pid is not None:
            stop_and_wait(broker.pid)
        broker.kill()


def stop_and_wait(pid: int, timeout_s: float = 600) -> float:
    """SIGTERM and wait for the process to exit (a clean shutdown); seconds it took."""
    started = time.perf_counter()
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                break
        time.sleep(0.05)
    return time.perf_counter() - started


def measure_restart(broker: BrokerProcess) -> dict[str, float]:
    """Stop the broker cleanly, start it again; time until Metadata is answered, and RSS."""
    assert broker.pid is not None
    stop_s = stop_and_wait(broker.pid)
    broker.kill()  # forget the exited process
    started = time.perf_counter()
    with open(broker.log_path, "ab") as log:
        proc = subprocess.Popen(broker.command(), stdout=log, stderr=subprocess.STDOUT)
    try:
        if not wait_for_port(broker.host, broker.port, 600):
            raise RuntimeError("the broker did not come back")
        wire = Wire(broker.bootstrap)
        wire.request(ApiKey.METADATA, METADATA_VERSION, metadata_body([VICTIM_TOPIC]))
        wire.close()
        ready_s = time.perf_counter() - started
        rss = rss_mib(proc.pid, "VmRSS")
    finally:
        stop_and_wait(proc.pid)
        proc.wait(60)
    return {"stop_s": stop_s, "ready_s": ready_s, "rss": rss}


def latency_cell(row: dict[str, Any], kind: str) -> str:
    return f"{row[kind + '_p50']:.1f} / {row[kind + '_p99']:.1f} / {row[kind + '_max']:.0f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--attack", action="append", choices=sorted(ATTACKS), default=[])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per timed attack")
    parser.add_argument("--topics", type=int, default=10_000, help="for mass topic creation")
    args = parser.parse_args()
    names = args.attack or list(ATTACKS)
    if "none" not in names:
        names.insert(0, "none")
    rows = []
    with tempfile.TemporaryDirectory(prefix="odradek-hostile-") as tmp:
        for i, name in enumerate(names):
            print(f"running: {name}", file=sys.stderr, flush=True)
            rows.append(run_attack(name, Path(tmp) / f"data-{i}", args.duration, args.topics))
    print(
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs; victim: Metadata + Fetch,"
        f" {VICTIM_PAUSE_S * 1000:.0f} ms apart"
    )
    print()
    lines = [
        [
            "attack",
            "victim requests",
            "Metadata p50 / p99 / max ms",
            "Fetch p50 / p99 / max ms",
            "broker peak RSS MiB",
            "attack outcome",
        ]
    ]
    for row in rows:
        lines.append(
            [
                row["attack"],
                f"{row['requests']:,}",
                latency_cell(row, "metadata"),
                latency_cell(row, "fetch"),
                f"{row['peak_rss']:.0f}",
                row["outcome"],
            ]
        )
    print(markdown_table(lines))
    for row in rows:
        if "restart" in row:
            r = row["restart"]
            print()
            print(
                f"Restart with the created topics: clean stop {r['stop_s']:.1f} s, start until"
                f" Metadata answers {r['ready_s']:.1f} s, RSS then {r['rss']:.0f} MiB"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
