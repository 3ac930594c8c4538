"""What one append costs the broker: ``PartitionLog.append`` of produced batches, in process.

Batches as a client sends them (256 KiB of 100 B or 1 KiB records, uncompressed
or compressed, and a one-record batch for the fixed cost of an append) are
appended to a fresh log in a temporary directory; the table shows records/s,
MB/s of record data, microseconds per batch and CPU seconds per GB of values
(process time: on a loaded machine the figure to compare). This is the CPU the broker
spends per Produce partition (validation, offsets, write), without the network
and the client, so it shows what produce-time record validation costs.

    python bench/log_append.py
    python bench/log_append.py --seconds 5 --json out.json
    PYTHONPATH=/path/to/other/src python bench/log_append.py   # compare another tree
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from report import markdown_table  # bench/report.py (scripts run from bench/)

import odradek
from odradek.log import LogConfig, PartitionLog
from odradek.protocol.records import (
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_ZSTD,
    build_batch,
)

BATCH_BYTES = 256 * 1024
SCENARIOS = [  # name, value size, codec, records per batch (0: fill 256 KiB)
    ("100 B, none", 100, COMPRESSION_NONE, 0),
    ("1 KiB, none", 1024, COMPRESSION_NONE, 0),
    ("1 KiB, lz4", 1024, COMPRESSION_LZ4, 0),
    ("1 KiB, zstd", 1024, COMPRESSION_ZSTD, 0),
    ("1 record of 100 B", 100, COMPRESSION_NONE, 1),  # the per-append fixed cost
]


def _batch(value_size: int, codec: int, count: int) -> tuple[bytes, int]:
    count = count or BATCH_BYTES // (value_size + 20)
    value = (b"0123456789abcdef" * (value_size // 16 + 1))[:value_size]
    records = [(b"key-%08d" % i, value, ()) for i in range(count)]
    return build_batch(records, timestamp_ms=int(time.time() * 1000), compression=codec), count


def run(seconds: float) -> list[dict[str, float | str]]:
    rows: list[dict[str, float | str]] = []
    for name, size, codec, per_batch in SCENARIOS:
        data, count = _batch(size, codec, per_batch)
        with tempfile.TemporaryDirectory(prefix="odradek-append-") as tmp:
            config = LogConfig(segment_bytes=256 * 1024 * 1024)
            log = PartitionLog.open(Path(tmp) / "p", config, now_ms=lambda: 1_000)
            log.append(data)  # warm up
            batches = 0
            started, cpu_started = time.perf_counter(), time.process_time()
            while time.perf_counter() - started < seconds:
                log.append(data)
                batches += 1
            took = time.perf_counter() - started
            cpu = time.process_time() - cpu_started
            log.close()
        rows.append(
            {
                "scenario": name,
                "records_per_s": batches * count / took,
                "mb_per_s": batches * count * size / took / 1e6,
                "us_per_batch": took / batches * 1e6,
                # CPU time moves far less than wall time with the machine's load
                "cpu_s_per_gb": cpu / (batches * count * size / 1e9),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="per scenario")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    print(f"odradek from {Path(odradek.__file__).parent}", file=sys.stderr)
    rows = run(args.seconds)
    table = [["batch (256 KiB unless said)", "records/s", "MB/s", "us/batch", "CPU s/GB"]]
    for r in rows:
        table.append(
            [
                str(r["scenario"]),
                f"{r['records_per_s']:,.0f}",
                f"{r['mb_per_s']:.1f}",
                f"{r['us_per_batch']:,.1f}",
                f"{r['cpu_s_per_gb']:.2f}",
            ]
        )
    print(markdown_table(table))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
