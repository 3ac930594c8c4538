"""Transactions under crashes.

- A transactional producer is SIGKILLed mid-transaction: the coordinator aborts the
  transaction when ``transaction.timeout.ms`` passes; when a successor with the same
  transactional id starts first, it fences the dead one and aborts its transaction
  at once.
- The broker is SIGKILLed between a transaction's PrepareCommit record and its
  markers (marker writing is delayed by ``ODRADEK_TXN_MARKER_DELAY_MS`` to hold it
  there): after the restart, recovery writes the markers and the commit completes,
  offsets included.
- A consume-transform-produce loop (confluent-kafka, and Odradek's client through
  examples/transactional_etl.py) is SIGKILLed 20 times at random moments and
  restarted; the output, read with read_committed, holds every input record exactly
  once. (The input is a plain topic: Odradek's consumer reads it as read_uncommitted.)
"""

from __future__ import annotations

import collections
import random
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from interop_helpers import unique_topic

from odradek.client import AdminClient as OdradekAdmin
from odradek.testing import BrokerProcess

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(240)]

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "transactional_etl.py"
CONFLUENT_LOOP = HERE / "txn_etl_confluent.py"
# Kills per loop: a short seeded run by default, the long one under -m soak.
KILLS = pytest.mark.parametrize(
    "kills", [8, pytest.param(20, marks=pytest.mark.soak)], ids=lambda n: f"{n}-kills"
)
RECORDS = 2_000
INPUT_PARTITIONS = 2
SETTINGS = {"group.initial.rebalance.delay.ms": "0", "group.min.session.timeout.ms": "1000"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path / "data", settings=SETTINGS)
    b.start()
    try:
        yield b
    finally:
        b.stop()


def create_topics(bootstrap: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in topics]).values():
        future.result(timeout=10)


def read_committed(bootstrap: str, topic: str, partitions: int, expect: int) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_topic("check"),
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + 60
    quiet = time.monotonic()
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if len(got) >= expect and time.monotonic() - quiet > 1.0:
                    break
                continue
            assert msg.error() is None, msg.error()
            got.append(msg.value())
            quiet = time.monotonic()
    finally:
        consumer.close()
    return got


def child(code: str) -> subprocess.Popen[str]:
    """A Python child that prints "ready" once its transaction is open and written."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", f"the child did not get its transaction going: {line!r}"


def open_transaction(bootstrap: str, txn_id: str, topic: str, timeout_ms: int) -> str:
    return f"""
        import time
        from confluent_kafka import Producer
        p = Producer({{"bootstrap.servers": "{bootstrap}", "transactional.id": "{txn_id}",
                      "transaction.timeout.ms": {timeout_ms}}})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(6):
            p.produce("{topic}", value=b"lost-%d" % i, partition=i % 2)
        assert p.flush(10) == 0
        print("ready", flush=True)
        time.sleep(600)
    """


def describe(bootstrap: str, txn_id: str) -> str:
    with OdradekAdmin(bootstrap_servers=bootstrap) as admin:
        return admin.describe_transactions([txn_id])[txn_id].state


def lso_is_end(bootstrap: str, topic: str) -> bool:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    tps = [KTP(topic, p) for p in range(2)]
    committed = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed")
    uncommitted = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        return committed.end_offsets(tps) == uncommitted.end_offsets(tps)
    finally:
        committed.close()
        uncommitted.close()


def test_killed_producer_times_out_then_a_successor_fences_at_once(
    broker: BrokerProcess,
) -> None:
    topic = unique_topic("killed-producer")
    create_topics(broker.bootstrap, (topic, 2))
    txn_id = unique_topic("victim")
    # 1. Killed mid-transaction, nobody takes over: the 2 s transaction timeout aborts it.
    proc = child(open_transaction(broker.bootstrap, txn_id, topic, 2000))
    wait_ready(proc)
    proc.kill()
    proc.wait()
    assert describe(broker.bootstrap, txn_id) == "Ongoing"
    assert not lso_is_end(broker.bootstrap, topic)  # the open transaction holds the LSO
    deadline = time.monotonic() + 30
    while describe(broker.bootstrap, txn_id) != "CompleteAbort":
        assert time.monotonic() < deadline, "the expired transaction was not aborted"
        time.sleep(0.1)
    assert lso_is_end(broker.bootstrap, topic)
    # 2. Killed again with a long timeout; a successor with the same id starts at once.
    proc = child(open_transaction(broker.bootstrap, txn_id, topic, 600_000))
    wait_ready(proc)
    proc.kill()
    proc.wait()
    started = time.monotonic()
    successor = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": txn_id})
    successor.init_transactions(30)  # fences the dead instance, aborts its transaction
    assert time.monotonic() - started < 30  # not the 600 s timeout
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(30)
    assert read_committed(broker.bootstrap, topic, 2, 1) == [b"successor"]
    assert lso_is_end(broker.bootstrap, topic)


def test_broker_killed_between_prepare_and_markers_completes_the_commit(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ODRADEK_TXN_MARKER_DELAY_MS", "600000")
    broker.restart()  # now holding every transaction between its Prepare record and markers
    topic, source = unique_topic("prepared"), unique_topic("prepared-in")
    create_topics(broker.bootstrap, (topic, 2), (source, 1))
    group = unique_topic("prepared-group")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": group})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"kept-%d" % i, partition=i % 2)
    producer.send_offsets_to_transaction(
        [TopicPartition(source, 0, 5)], consumer.consumer_group_metadata(), 30
    )
    producer.commit_transaction(30)  # answered once PrepareCommit is durable
    consumer.close()
    assert describe(broker.bootstrap, group) == "PrepareCommit"
    assert not lso_is_end(broker.bootstrap, topic)
    broker.kill()
    monkeypatch.delenv("ODRADEK_TXN_MARKER_DELAY_MS")
    broker.start()  # recovery finds PrepareCommit and writes the markers
    got = read_committed(broker.bootstrap, topic, 2, 10)
    assert sorted(got) == sorted(b"kept-%d" % i for i in range(10))
    deadline = time.monotonic() + 30
    while describe(broker.bootstrap, group) != "CompleteCommit":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        (committed,) = reader.committed([TopicPartition(source, 0)], timeout=20)
    finally:
        reader.close()
    assert committed.offset == 5
    assert "transaction_resumed" in broker.log_tail(200)


def run_with_kills(
    broker: BrokerProcess, command: list[str], seed: int, kills: int
) -> tuple[str, str, list[str]]:
    """Feed the input, run ``command`` (the loop), SIGKILL it ``kills`` times at random
    moments, then let it finish; return (input, output, its last outputs)."""
    rng = random.Random(seed)
    source, sink = unique_topic("etl-in"), unique_topic("etl-out")
    create_topics(broker.bootstrap, (source, INPUT_PARTITIONS), (sink, 3))
    feeder = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20})
    for i in range(RECORDS):
        feeder.produce(source, value=b"rec-%05d" % i, partition=i % INPUT_PARTITIONS)
    assert feeder.flush(20) == 0
    argv = [*command, source, sink]
    watcher = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": unique_topic("w")})
    try:
        for run in range(kills):
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if run % 4 == 1:
                # One kill in four lands after this run has written to the sink (a slow
                # start on a busy machine must not leave every killed run without work).
                _wait_for_sink_growth(watcher, sink, proc)
            time.sleep(rng.uniform(0.4, 1.6))
            proc.kill()
            proc.wait()
    finally:
        watcher.close()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return source, sink, done.stdout.splitlines()


def _sink_end(watcher: Consumer, sink: str) -> int:
    return sum(
        watcher.get_watermark_offsets(TopicPartition(sink, p), timeout=5)[1] for p in range(3)
    )


def _wait_for_sink_growth(watcher: Consumer, sink: str, proc: subprocess.Popen) -> None:
    """Until the loop's output grows (transactional writes count), it exits, or 30 s."""
    start = _sink_end(watcher, sink)
    deadline = time.monotonic() + 30
    while _sink_end(watcher, sink) == start and proc.poll() is None:
        if time.monotonic() > deadline:
            return
        time.sleep(0.1)


def check_killed_runs_worked(out: list[str]) -> None:
    """The killed instances committed part of the input: the last run did not do it all."""
    assert out and out[-1].startswith("processed"), out
    assert int(out[-1].split()[-2 if out[-1].endswith("records") else -1]) < RECORDS


def check_exactly_once(broker: BrokerProcess, sink: str) -> None:
    got = collections.Counter(read_committed(broker.bootstrap, sink, 3, RECORDS))
    expected = collections.Counter(b"REC-%05d" % i for i in range(RECORDS))
    duplicated = {v: n for v, n in got.items() if n > 1}
    missing = expected - got
    assert not duplicated, f"{len(duplicated)} records more than once, e.g. {list(duplicated)[:3]}"
    assert not missing, f"{len(missing)} records missing, e.g. {list(missing)[:3]}"
    assert got == expected


@KILLS
def test_confluent_kafka_loop_killed_repeatedly_writes_each_record_once(
    broker: BrokerProcess, kills: int
) -> None:
    group = unique_topic("cf-etl")
    command = [sys.executable, str(CONFLUENT_LOOP), broker.bootstrap, group, group, "etl-0"]
    _, sink, out = run_with_kills(broker, command, seed=7, kills=kills)
    check_killed_runs_worked(out)
    check_exactly_once(broker, sink)


@KILLS
def test_odradek_client_loop_killed_repeatedly_writes_each_record_once(
    broker: BrokerProcess, kills: int
) -> None:
    group = unique_topic("od-etl")
    wrapper = [
        sys.executable,
        "-c",
        "import sys, runpy; "
        "source, sink = sys.argv[-2:]; "
        f"sys.argv = [{str(EXAMPLE)!r}, '--bootstrap', {broker.bootstrap!r}, "
        f"'--group', {group!r}, '--transactional-id', {group!r}, "
        "'--instance-id', 'etl-0', '--session-timeout-ms', '6000', "
        "'--max-poll-records', '50', '--stop-when-idle', '3', "
        "'--input', source, '--output', sink]; "
        f"runpy.run_path({str(EXAMPLE)!r}, run_name='__main__')",
    ]
    _, sink, out = run_with_kills(broker, wrapper, seed=11, kills=kills)
    check_killed_runs_worked(out)
    check_exactly_once(broker, sink)
