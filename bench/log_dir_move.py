"""What moving a partition between log directories costs its clients (AlterReplicaLogDirs).

A partition of SIZE MB (1 MiB segments, 1 KiB records) in one temporary directory
is moved to another with ``odradek.log.dir_move.DirMove`` while a thread appends
to it at RATE MB/s, one 16-record batch at a time (a producer faster than the
copy would keep the move catching up, as in Kafka). The table shows how long the
move took and its copy rate, the swap (the partition's locks held: appends and
reads wait), the longest single append during the move (the pause a producer
sees) against the longest before it, and how many records were appended while it
moved. Both directories are on the same file system here; across disks the copy
rate is the slower disk's.

    python bench/log_dir_move.py
    python bench/log_dir_move.py --sizes 64 256 --rate 50 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

from report import markdown_table  # bench/report.py (scripts run from bench/)

import odradek
from odradek.log import LogConfig, PartitionLog
from odradek.log.dir_move import DirMove
from odradek.protocol.records import build_batch

RECORD = 1024
BATCH_RECORDS = 16
SEGMENT_BYTES = 1 << 20


def _batch() -> bytes:
    value = b"x" * RECORD
    return build_batch([(None, value, ())] * BATCH_RECORDS, timestamp_ms=int(time.time() * 1000))


def run(size_mb: int, rate_mb_s: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="odradek-bench-move-") as tmp:
        source, target = Path(tmp) / "a", Path(tmp) / "b"
        target.mkdir()
        config = LogConfig(segment_bytes=SEGMENT_BYTES)
        plog = PartitionLog.open(source / "t-0", config, now_ms=lambda: int(time.time() * 1000))
        batch = _batch()
        while plog.size_bytes < size_mb << 20:
            plog.append(batch)
        worst_before = 0.0
        for _ in range(2000):
            started = time.perf_counter()
            plog.append(batch)
            worst_before = max(worst_before, time.perf_counter() - started)

        stop = threading.Event()
        worst = [0.0]
        appended = [0]

        interval = len(batch) / (rate_mb_s * (1 << 20))

        def appender() -> None:
            due = time.perf_counter()
            while not stop.is_set():
                started = time.perf_counter()
                plog.append(batch)
                worst[0] = max(worst[0], time.perf_counter() - started)
                appended[0] += BATCH_RECORDS
                due += interval
                time.sleep(max(due - time.perf_counter(), 0))

        thread = threading.Thread(target=appender)
        thread.start()
        mover = DirMove(plog, target)
        began = time.perf_counter()
        mover.run()
        took = time.perf_counter() - began
        stop.set()
        thread.join()
        assert plog.directory.parent == target
        plog.close()
        return {
            "size_mb": size_mb,
            "rate_mb_s": rate_mb_s,
            "move_s": took,
            "copy_mb_s": mover.copied_bytes / (1 << 20) / took,
            "swap_ms": mover.swap_s * 1000,
            "worst_append_ms": worst[0] * 1000,
            "worst_append_before_ms": worst_before * 1000,
            "records_during_move": appended[0],
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 128], metavar="MB")
    parser.add_argument("--rate", type=float, default=20.0, metavar="MB/S")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    results = [run(size, args.rate) for size in args.sizes]
    print(f"odradek {odradek.__file__}, python {sys.version.split()[0]}\n")
    header = [
        "partition (appends)",
        "move",
        "copy rate",
        "swap",
        "worst append (before)",
        "records appended meanwhile",
    ]
    rows = [
        [
            f"{r['size_mb']:.0f} MB ({r['rate_mb_s']:.0f} MB/s)",
            f"{r['move_s']:.2f} s",
            f"{r['copy_mb_s']:.0f} MB/s",
            f"{r['swap_ms']:.1f} ms",
            f"{r['worst_append_ms']:.1f} ms ({r['worst_append_before_ms']:.1f} ms)",
            f"{r['records_during_move']:,}",
        ]
        for r in results
    ]
    print(markdown_table([header, *rows]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
