"""The at-least-once and at-most-once examples under a crash: SIGKILL mid-run, restart,
finish. At-least-once loses nothing (duplicates allowed); at-most-once duplicates
nothing (losses allowed); without a crash both process every record exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.client import AdminClient, NewTopic, Producer
from odradek.testing import BrokerProcess

pytestmark = pytest.mark.timeout(120)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PARTITIONS = 2
RECORDS = 1_000


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("delivery") / "data",
        settings={"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"},
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


def prepare(broker: BrokerProcess) -> str:
    topic = f"delivery-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result()
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=5) as p:
        for i in range(RECORDS):
            p.send(topic, value=b"%d" % i, partition=i % PARTITIONS)
        p.flush(30)
    return topic


def run(example: str, broker: BrokerProcess, topic: str, group: str, out: Path, *extra: str):
    return subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLES / example),
            "--bootstrap",
            broker.bootstrap,
            "--topic",
            topic,
            "--group",
            group,
            "--out",
            str(out),
            "--session-timeout-ms",
            "2000",
            "--max-poll-records",
            "100",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def lines(out: Path) -> Counter[str]:
    return Counter(out.read_text().splitlines()) if out.exists() else Counter()


EXPECTED = {f"{p} {o}" for p in range(PARTITIONS) for o in range(RECORDS // PARTITIONS)}


@pytest.mark.parametrize("example", ["delivery_at_least_once.py", "delivery_at_most_once.py"])
def test_clean_run_processes_each_record_once(
    broker: BrokerProcess, tmp_path: Path, example: str
) -> None:
    topic = prepare(broker)
    out = tmp_path / "out.txt"
    proc = run(example, broker, topic, "g-" + topic, out, "--stop-when-idle", "3")
    text, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, text
    seen = lines(out)
    assert set(seen) == EXPECTED and max(seen.values()) == 1


@pytest.mark.parametrize("example", ["delivery_at_least_once.py", "delivery_at_most_once.py"])
def test_crash_semantics(broker: BrokerProcess, tmp_path: Path, example: str) -> None:
    topic = prepare(broker)
    out = tmp_path / "out.txt"
    group = "g-" + topic
    proc = run(example, broker, topic, group, out, "--delay-ms", "2")
    deadline = time.monotonic() + 30
    while sum(lines(out).values()) < 150 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # mid-batch: 2 ms per record, 100 per batch
    proc.wait(10)
    proc = run(example, broker, topic, group, out, "--stop-when-idle", "4")
    text, _ = proc.communicate(timeout=90)
    assert proc.returncode == 0, text
    seen = lines(out)
    if example == "delivery_at_least_once.py":
        assert set(seen) == EXPECTED  # nothing lost
    else:
        assert set(seen) <= EXPECTED
        assert max(seen.values()) == 1  # nothing twice
        assert len(seen) < len(EXPECTED)  # the killed batch's rest is lost
