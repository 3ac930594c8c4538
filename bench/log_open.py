"""Opening many cleanly closed partitions: time, memory and open files (issue 10, item 8).

Two measurements, each in a fresh process so nothing is warm:

- logs: ``PartitionLog.open`` of N partition directories that were closed cleanly
  (one segment of a few records each), then the first read of one batch from
  every partition, then ``close``. Reports seconds, the process's RSS and its
  open file descriptors after the opens.
- broker (``--broker``): a real broker holding N partitions (100 per topic, one
  record each) is stopped with SIGTERM and started again; reports the time from
  the restart until Metadata lists every partition, and the broker's RSS and
  open descriptors then.

    python bench/log_open.py                       # 10,000 partitions, logs only
    python bench/log_open.py --partitions 2000 --broker
    PYTHONPATH=/path/to/other/src python bench/log_open.py   # compare another tree

The code measured is whatever ``odradek`` the interpreter imports.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from report import markdown_table  # bench/report.py (scripts run from bench/)

import odradek
from odradek.log import LogConfig, PartitionLog
from odradek.protocol.records import build_batch

RECORDS_PER_PARTITION = 10
PARTITIONS_PER_TOPIC = 100


def _rss_kib(pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def _fds(pid: int | str = "self") -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _now() -> int:
    return int(time.time() * 1000)


def create_logs(root: Path, partitions: int) -> None:
    config = LogConfig()
    batch = build_batch(
        [(b"key-%d" % i, b"value-%d" % i, ()) for i in range(RECORDS_PER_PARTITION)],
        timestamp_ms=_now(),
    )
    for index in range(partitions):
        log = PartitionLog.open(root / f"bench-{index}", config, now_ms=_now)
        log.append(batch)
        log.close()


def measure_logs(root: Path) -> dict[str, Any]:
    """Runs in a fresh process (``--measure``): open, read once, close."""
    config = LogConfig()
    dirs = sorted(root.iterdir())
    fds_before = _fds()
    started = time.perf_counter()
    logs = [PartitionLog.open(d, config, now_ms=_now) for d in dirs]
    opened = time.perf_counter() - started
    rss = _rss_kib()
    fds = _fds() - fds_before
    started = time.perf_counter()
    for log in logs:
        assert log.read(0, 1 << 20), log
    first_read = time.perf_counter() - started
    started = time.perf_counter()
    for log in logs:
        log.close()
    closed = time.perf_counter() - started
    return {
        "partitions": len(dirs),
        "open_s": opened,
        "rss_mib": rss / 1024,
        "open_fds": fds,
        "first_read_s": first_read,
        "close_s": closed,
    }


# --------------------------------------------------------------------------- broker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(data_dir: Path, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "odradek", "serve", "--listen", f"127.0.0.1:{port}"]
    cmd += ["--data-dir", str(data_dir), "--set", "auto.create.topics.enable=false"]
    with open(log_path, "ab") as out:
        return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)


def _wait_listed(bootstrap: str, want: int, deadline_s: float) -> float:
    """Seconds until the broker accepts connections and Metadata lists ``want`` partitions."""
    from confluent_kafka.admin import AdminClient

    started = time.perf_counter()
    host, _, port = bootstrap.rpartition(":")
    while time.perf_counter() - started < deadline_s:
        try:
            socket.create_connection((host, int(port)), timeout=0.2).close()
        except OSError:
            time.sleep(0.01)
            continue
        admin = AdminClient({"bootstrap.servers": bootstrap})
        while time.perf_counter() - started < deadline_s:
            topics = admin.list_topics(timeout=30).topics
            listed = sum(len(t.partitions) for n, t in topics.items() if n.startswith("bench-"))
            if listed >= want:
                return time.perf_counter() - started
            time.sleep(0.05)
    raise RuntimeError(f"broker did not list {want} partitions in {deadline_s}s")


# What `odradek serve` does before it listens, in a fresh process: import, freeze the
# imports (broker/collector.py), build the broker on the data directory (its logs opened).
CONSTRUCT = """
import sys, time
from pathlib import Path
from odradek.broker.server import Broker
try:
    from odradek.broker.collector import freeze_imported_objects
except ImportError:  # a tree from before it (a comparison run)
    pass
else:
    freeze_imported_objects()
started = time.process_time()
Broker(Path(sys.argv[1]), port=0)
print(time.process_time() - started)
"""


def _construct_cpu(data_dir: Path) -> float:
    """CPU seconds of `Broker()` on `data_dir` (its locks go with the process)."""
    done = subprocess.run(
        [sys.executable, "-c", CONSTRUCT, str(data_dir)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def measure_broker(root: Path, partitions: int) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    data_dir = root / "broker-data"
    log_path = root / "broker.log"
    port = _free_port()
    bootstrap = f"127.0.0.1:{port}"
    proc = _start(data_dir, port, log_path)
    try:
        _wait_listed(bootstrap, 0, 60)
        admin = AdminClient({"bootstrap.servers": bootstrap})
        topics = [f"bench-{i}" for i in range(max(partitions // PARTITIONS_PER_TOPIC, 1))]
        per_topic = min(partitions, PARTITIONS_PER_TOPIC)
        for topic in topics:
            admin.create_topics([NewTopic(topic, per_topic, 1)])[topic].result(timeout=600)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
        for topic in topics:
            for index in range(per_topic):
                producer.produce(topic, b"one record", partition=index)
            producer.poll(0)
        assert producer.flush(300) == 0
        total = len(topics) * per_topic
        started = time.perf_counter()
        proc.send_signal(signal.SIGTERM)
        proc.wait(600)
        stop_s = time.perf_counter() - started
        construct_cpu_s = _construct_cpu(data_dir)
        proc = _start(data_dir, port, log_path)
        restart_s = _wait_listed(bootstrap, total, 600)
        return {
            "partitions": total,
            "stop_s": stop_s,
            "construct_cpu_s": construct_cpu_s,
            "restart_s": restart_s,
            "rss_mib": _rss_kib(proc.pid) / 1024,
            "open_fds": _fds(proc.pid),
        }
    finally:
        proc.kill()
        proc.wait(60)


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--broker", action="store_true", help="also restart a real broker")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # internal: the fresh process
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure_logs(Path(args.measure))))
        return 0
    print(f"odradek from {Path(odradek.__file__).parent}", file=sys.stderr)
    rows: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="odradek-log-open-") as tmp:
        root = Path(tmp)
        logs = root / "logs"
        logs.mkdir()
        create_logs(logs, args.partitions)
        done = subprocess.run(
            [sys.executable, __file__, "--measure", str(logs)],
            check=True,
            capture_output=True,
            text=True,
        )
        rows["logs"] = json.loads(done.stdout)
        shutil.rmtree(logs)
        if args.broker:
            rows["broker"] = measure_broker(root, args.partitions)
    table = [["measurement", "partitions", "seconds", "RSS MiB", "open fds"]]
    lg = rows["logs"]
    count = f"{lg['partitions']:,}"
    rss, fds = f"{lg['rss_mib']:.0f}", f"{lg['open_fds']:,}"
    table.append(["PartitionLog.open, clean", count, f"{lg['open_s']:.2f}", rss, fds])
    table.append(
        ["first read of each", f"{lg['partitions']:,}", f"{lg['first_read_s']:.2f}", "", ""]
    )
    table.append(["close, untouched", f"{lg['partitions']:,}", f"{lg['close_s']:.2f}", "", ""])
    if "broker" in rows:
        br = rows["broker"]
        count = f"{br['partitions']:,}"
        rss, fds = f"{br['rss_mib']:.0f}", f"{br['open_fds']:,}"
        construct = f"{br['construct_cpu_s']:.2f} (CPU)"
        table.append(["Broker() on the data directory", count, construct, "", ""])
        table.append(["broker restart to Metadata", count, f"{br['restart_s']:.2f}", rss, fds])
        table.append(
            ["broker stop (SIGTERM)", f"{br['partitions']:,}", f"{br['stop_s']:.2f}", "", ""]
        )
    print(markdown_table(table))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
