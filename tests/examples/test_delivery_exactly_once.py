"""Crash injection for examples/delivery_exactly_once.py: SIGKILL the consumer process at
random moments (a bounded number of times), restart it, and prove that in the end every
record has exactly one result and the stored offsets are the log end offsets."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.client import AdminClient, NewTopic, Producer
from odradek.testing import BrokerProcess

pytestmark = pytest.mark.timeout(180)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "delivery_exactly_once.py"
PARTITIONS = 3
RECORDS = 3_000
KILLS = 6


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("eos") / "data",
        settings={"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"},
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


def start(broker: BrokerProcess, topic: str, group: str, db: Path, *extra: str):
    cmd = [
        sys.executable,
        str(EXAMPLE),
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        topic,
        "--group",
        group,
        "--db",
        str(db),
        "--session-timeout-ms",
        "2000",
        "--max-poll-records",
        "50",
        *extra,
    ]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def count_results(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM results").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


@pytest.mark.parametrize("membership", ["static", "dynamic"])
def test_no_result_lost_or_doubled_across_crashes(
    broker: BrokerProcess, tmp_path: Path, membership: str
) -> None:
    rng = random.Random(int(os.environ.get("ODRADEK_CRASH_SEED", "4004")))
    topic = f"eos-{uuid.uuid4().hex[:8]}"
    group = f"eos-{uuid.uuid4().hex[:8]}"
    db = tmp_path / "results.db"
    with AdminClient(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result()
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5) as p:
        for i in range(RECORDS):
            p.send(topic, value=b"value-%06d" % i, partition=i % PARTITIONS)
        p.flush(30)
    extra = ["--delay-ms", "0.5"]
    if membership == "static":
        extra += ["--instance-id", "eos-member"]

    kills = 0
    progress = []
    while kills < KILLS:
        before = count_results(db)
        proc = start(broker, topic, group, db, *extra)
        # Kill at a random moment once the process is doing work.
        deadline = time.monotonic() + 30
        while count_results(db) <= before and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        kills += 1
        progress.append(count_results(db))
        if progress[-1] >= RECORDS:
            break
    # The dead dynamic members leave by session timeout; the survivor finishes the job.
    proc = start(broker, topic, group, db, "--stop-when-idle", "6", *extra)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out

    with sqlite3.connect(db) as conn:
        rows = conn.execute('SELECT topic, partition, "offset", result FROM results').fetchall()
        offsets = dict(
            ((t, p), o)
            for t, p, o in conn.execute("SELECT topic, partition, next_offset FROM offsets")
        )
    keys = [(p, o) for _, p, o, _ in rows]
    assert len(keys) == RECORDS, f"kills={kills} progress={progress}"
    assert len(set(keys)) == RECORDS, "a record was processed twice"
    per_partition = RECORDS // PARTITIONS
    assert set(keys) == {(p, o) for p in range(PARTITIONS) for o in range(per_partition)}
    for _, p, o, result in rows:
        assert result == (b"value-%06d" % (o * PARTITIONS + p)).decode()[::-1]
    assert offsets == {(topic, p): per_partition for p in range(PARTITIONS)}
    assert kills >= 3, progress  # the crashes really happened mid-run
