"""`odradek produce` and `odradek consume`: keys, headers, partitions, formats, limits."""

from __future__ import annotations

import base64
import contextlib
import json
import subprocess
import sys
import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def topic(cli, name) -> str:
    t = name("t")
    assert cli("topics", "create", t, "--partitions", "2").code == 0
    return t


def test_produce_keys_and_headers_then_consume_json(cli, topic) -> None:
    produced = cli(
        "produce",
        topic,
        "--key-separator",
        ":",
        "--header",
        "source=cli",
        "--header",
        "n=1",
        stdin="alice:hello\nbob:with:colons\ncarol:\n",
    )
    assert produced.code == 0, produced.err
    assert f"Produced 3 records to '{topic}'" in produced.err
    consumed = cli("consume", topic, "--from-beginning", "--max-messages", "3", "--format", "json")
    assert consumed.code == 0, consumed.err
    records = sorted((json.loads(line) for line in consumed.lines), key=lambda r: r["key"])
    assert [(r["key"], r["value"]) for r in records] == [
        ("alice", "hello"),
        ("bob", "with:colons"),
        ("carol", ""),
    ]
    for r in records:
        assert r["topic"] == topic and r["partition"] in (0, 1) and r["offset"] >= 0
        assert r["headers"] == [["source", "cli"], ["n", "1"]]
        assert r["timestamp_type"] == "CreateTime" and r["timestamp"] > 0
    assert "Consumed 3 records." in consumed.err


def test_produce_to_a_partition_and_consume_formats(cli, topic) -> None:
    assert cli("produce", topic, "--partition", "1", stdin="one\ntwo\r\nthree\n").code == 0
    raw = cli("consume", topic, "--partition", "1", "--from-beginning", "--max-messages", "3")
    assert raw.lines == ["one", "two", "three"]
    empty = cli("consume", topic, "--partition", "0", "--from-beginning", "--timeout", "1")
    assert empty.code == 0 and empty.out == "" and "Consumed 0 records." in empty.err
    kv = cli("consume", topic, "--partition", "1", "--from-beginning", "-n", "2", "--format", "kv")
    assert kv.lines == ["null\tone", "null\ttwo"]
    kv_sep = cli(
        "consume",
        topic,
        "--partition",
        "1",
        "--from-beginning",
        "-n",
        "1",
        "-o",
        "kv",
        "--key-separator",
        " => ",
    )
    assert kv_sep.lines == ["null => one"]


def test_consume_waits_for_new_records_by_default(cli, bootstrap, topic) -> None:
    assert cli("produce", topic, stdin="old\n").code == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek", "consume", topic, "-n", "1", "-b", bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # The same record again until the consumer, which starts at the log end whenever
        # its process gets there, has read one: no guess at how long its start takes.
        deadline = time.monotonic() + 60
        while proc.poll() is None:
            assert cli("produce", topic, stdin="new\n").code == 0
            assert time.monotonic() < deadline, "the consumer read nothing new"
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.5)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["new"]  # not "old", from before it started


def test_timeout_ends_an_idle_consume(cli, topic) -> None:
    cli("produce", topic, stdin="\n".join(map(str, range(20))) + "\n")
    started = time.monotonic()
    result = cli("consume", topic, "--from-beginning", "--timeout", "1.5")
    assert result.code == 0
    assert sorted(map(int, result.lines)) == list(range(20))
    # without --timeout it would wait for ever (until this test's timeout)
    assert time.monotonic() - started < 45


def test_binary_values_are_base64_in_json(cli, topic) -> None:
    assert cli("produce", topic, "--partition", "0", stdin=b"\xff\xfe\n").code == 0
    [record] = cli(
        "consume", topic, "--partition", "0", "--from-beginning", "-n", "1", "-o", "json"
    ).lines
    decoded = json.loads(record)
    assert decoded["value_encoding"] == "base64"
    assert base64.b64decode(decoded["value"]) == b"\xff\xfe"


def test_a_large_input_is_sent_in_full(cli, bootstrap, topic) -> None:
    lines = [f"record-{i:05d}" for i in range(5000)]
    result = cli("produce", topic, "--acks", "1", stdin="\n".join(lines) + "\n")
    assert result.code == 0, result.err
    assert "Produced 5,000 records" in result.err
    described = cli("topics", "describe", topic, "--format", "json").json()[0]
    assert sum(p["log_end_offset"] for p in described["partitions"]) == 5000


def test_produce_and_consume_errors(cli, name, topic) -> None:
    missing = name("missing")
    for args in (("produce", missing), ("consume", missing)):
        result = cli(*args, stdin="x\n")
        assert result.code == 1
        assert (
            result.err.strip()
            .splitlines()[-1]
            .startswith(f"odradek: topic '{missing}' does not exist")
        )
    bad_partition = cli("produce", topic, "--partition", "7", stdin="x\n")
    assert bad_partition.code == 2
    assert "has partitions 0-1" in bad_partition.err
    assert cli("consume", topic, "--partition", "2").code == 2
    no_separator = cli("produce", topic, "--key-separator", ":", stdin="k:v\nnope\n")
    assert no_separator.code == 2
    assert no_separator.err.strip() == (
        "odradek: line 2 has no key separator ':' (1 records before it were sent)"
    )


def test_consume_in_a_group_commits_its_progress(cli, bootstrap, name, topic) -> None:
    group = name("g")
    cli("produce", topic, stdin="".join(f"{i}\n" for i in range(10)))
    first = cli("consume", topic, "--group", group, "--from-beginning", "-n", "4")
    assert first.code == 0 and len(first.lines) == 4
    rest = cli("consume", topic, "--group", group, "--timeout", "2")
    assert rest.code == 0
    assert sorted(first.lines + rest.lines, key=int) == [str(i) for i in range(10)]
    # What the group committed is what a Kafka client reads back.
    reader = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        committed = reader.committed(
            [KafkaTopicPartition(topic, 0), KafkaTopicPartition(topic, 1)], timeout=10
        )
    finally:
        reader.close()
    described = cli("groups", "describe", group, "--format", "json").json()
    by_partition = {p["partition"]: p for p in described["partitions"]}
    for tp in committed:
        assert by_partition[tp.partition]["committed_offset"] == tp.offset
        assert by_partition[tp.partition]["lag"] == 0
    assert described["totals"]["committed_offset"] == 10


@pytest.mark.timeout(180)
def test_two_terminals_share_a_group(cli, bootstrap, name) -> None:
    """The README tour: two `consume --group` processes split the partitions; describe
    shows both members, history the rebalance; all records are read, lag ends at 0."""
    topic, group = name("t"), name("g")
    assert cli("topics", "create", topic, "--partitions", "4").code == 0
    keys = "".join(f"key-{i}:value-{i}\n" for i in range(40))
    assert cli("produce", topic, "--key-separator", ":", stdin=keys).code == 0
    command = [sys.executable, "-m", "odradek", "consume", topic, "--group", group]
    command += ["--from-beginning", "--format", "kv", "-b", bootstrap]
    # Open-ended, as at a terminal, and ended as there (SIGTERM is Ctrl-C's way out): an
    # idle --timeout could end the first before a slow start of the second joined it.
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        split = committed = None
        deadline = time.monotonic() + 90
        while committed is None:
            assert time.monotonic() < deadline, f"split: {split}, never committed all 40"
            assert first.poll() is None and second.poll() is None
            report = cli("groups", "describe", group, "--format", "json")
            if report.code == 0:
                described = report.json()
                counts = sorted(len(m["assignment"]) for m in described["members"])
                if counts == [2, 2] and described["state"] == "Stable":
                    split = described
                if split is not None and described["totals"]["committed_offset"] == 40:
                    committed = described
            time.sleep(0.5)
        for p in (first, second):
            p.terminate()
        outputs = [p.communicate(timeout=60)[0] for p in (first, second)]
    finally:
        for p in (first, second):
            p.kill()
    assert first.returncode == 0 and second.returncode == 0
    seen = {line for out in outputs for line in out.splitlines()}
    assert seen == {f"key-{i}\tvalue-{i}" for i in range(40)}
    after = cli("groups", "describe", group, "--format", "json").json()
    assert after["state"] == "Empty"
    assert after["totals"] == {"committed_offset": 40, "log_end_offset": 40, "lag": 0}
    history = cli("groups", "history", group, "--format", "json").json()
    sizes = [len(r["joined"]) + len(r["kept"]) for r in history["rebalances"]]
    assert 2 in sizes and history["summary"]["state"] == "Empty"
