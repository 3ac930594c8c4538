"""Segments as two writers or a doubled write leave them, read by real clients (issue 19
item 2, issue 24 item 2).

Before: a batch written twice in a row made confluent-kafka and kafka-python stop at
its offset with no error at all (a Fetch answered error 0 and no records below the
high watermark), and after two writers interleaved a segment the consumer stopped
silently while the log end was further on; the quarantine was logged as ``203-202``.
Now a copy is skipped and every record is read; another writer's batch is set
aside, its offsets past the log's answer CORRUPT_MESSAGE, which both clients
report; ``topics describe``, the metrics and the log name the ranges.

The broker is stopped, its segment file rewritten as the writers would have left
it (``rewrite_segment``), and started again; every consumer is bounded in time
and must either reach the log end or report an error: never wait silently.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from importlib import import_module
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import KafkaAdminClient
from kafka.errors import CorruptRecordError
from kio.serial import entity_reader

from odradek.cli.main import main as odradek_main
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import RequestHeader, build, encode_request
from odradek.protocol.records import build_batch, iter_batches
from odradek.testing import BrokerProcess, free_port

from ..broker.wire import WireClient
from .log_helpers import LATEST, create_topic, list_offset, produce

pytestmark = pytest.mark.embedded

BATCHES = 30
PER_BATCH = 10
DEADLINE_S = 45


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, int]]:
    port = free_port()
    proc = BrokerProcess(tmp_path / "data", extra_args=["--metrics", f"127.0.0.1:{port}"])
    proc.start()
    try:
        yield proc, port
    finally:
        proc.kill()


def _batch(base: int, count: int, tag: str) -> bytes:
    return build_batch(
        [(None, f"{tag}-{base + j}".encode(), ()) for j in range(count)],
        base_offset=base,
        timestamp_ms=int(time.time() * 1000),
    )


def _topic_of_batches(broker: BrokerProcess) -> str:
    """BATCHES batches of PER_BATCH records (values 'a-<offset>') in one segment."""
    topic = f"writers-{uuid.uuid4().hex[:8]}"
    with WireClient(broker.bootstrap) as client:
        create_topic(client, topic)
        for _ in range(BATCHES):
            assert produce(client, topic, _batch(0, PER_BATCH, "x")).error_code == 0
    return topic


def rewrite_segment(
    broker: BrokerProcess,
    topic: str,
    edit: Callable[[list[bytes]], list[bytes]],
    *,
    as_if_clean: bool = False,
) -> None:
    """Stop the broker, hand the segment's batches (bytes, in file order) to ``edit``,
    write what it returns as the segment, start the broker again.

    ``as_if_clean``: the broker wrote those bytes itself and then stopped cleanly, so
    its clean-shutdown record (the active segment's size) matches the file: the next
    start trusts it and scans nothing; reads meet the damage. Otherwise the size no
    longer matches and the start recovers the segment with a full scan."""
    if broker.running:
        broker.stop()
    directory = broker.data_dir / f"{topic}-0"
    (segment,) = sorted(directory.glob("*.log"))
    data = segment.read_bytes()
    batches = [data[p : p + h.size] for p, h in iter_batches(data)]
    segment.write_bytes(b"".join(edit(batches)))
    if as_if_clean:
        record_path = directory / ".clean_shutdown"
        record = json.loads(record_path.read_text())
        record["active_size"] = segment.stat().st_size
        record_path.write_text(json.dumps(record))
    broker.start()


def consume_confluent(bootstrap: str, topic: str, end: int) -> tuple[dict[int, bytes], list[int]]:
    """(offset -> value read, error codes) from offset 0 until the end or an error."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "fetch.error.backoff.ms": 50,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: dict[int, bytes] = {}
    errors: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < end and not errors:
            assert time.monotonic() < deadline, (
                f"confluent-kafka stalled silently at {max(got, default=-1) + 1} below {end}"
            )
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                errors.append(message.error().code())
                continue
            assert message.offset() not in got
            got[message.offset()] = message.value()
    finally:
        consumer.close()
    return got, errors


def consume_kafka_python(
    bootstrap: str, topic: str, end: int
) -> tuple[dict[int, bytes], list[type[Exception]]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    tp = KpTopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    got: dict[int, bytes] = {}
    errors: list[type[Exception]] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(got) < end and not errors:
            assert time.monotonic() < deadline, (
                f"kafka-python stalled silently at {max(got, default=-1) + 1} below {end}"
            )
            try:
                polled = consumer.poll(timeout_ms=500)
            except CorruptRecordError as exc:
                errors.append(type(exc))
                continue
            for records in polled.values():
                for r in records:
                    assert r.offset not in got
                    got[r.offset] = r.value
    finally:
        consumer.close()
    return got, errors


def scrape(port: int, topic: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("odradek_log_") and f'topic="{topic}"' in line:
            name, _, value = line.rpartition(" ")
            out[name.split("{")[0]] = float(value)
    return out


def describe(bootstrap: str, topic: str, capsys: pytest.CaptureFixture[str]) -> Any:
    capsys.readouterr()
    assert odradek_main(["topics", "describe", topic, "--format", "json", "-b", bootstrap]) == 0
    (described,) = json.loads(capsys.readouterr().out)
    return described["partitions"][0]


def describe_text(bootstrap: str, topic: str, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert odradek_main(["topics", "describe", topic, "-b", bootstrap]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("stop", ["clean", "kill"])
def test_a_batch_written_twice_is_read_once_by_every_client(
    broker: tuple[BrokerProcess, int], stop: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A copy right after its batch (a doubled write) and a copy of an earlier batch
    further on (a replayed one): both clients read all the records exactly once, no
    error; the copies are skipped, listed and counted, never quarantined."""
    proc, port = broker
    topic = _topic_of_batches(proc)
    total = BATCHES * PER_BATCH
    if stop == "kill":
        proc.kill()  # the restart then recovers the segment by a full scan

    def doubled(batches: list[bytes]) -> list[bytes]:
        return [*batches[:12], batches[11], *batches[12:20], batches[3], *batches[20:]]

    rewrite_segment(proc, topic, doubled, as_if_clean=stop == "clean")
    with WireClient(proc.bootstrap) as client:
        assert list_offset(client, topic, LATEST).offset == total
    for consume in (consume_confluent, consume_kafka_python):
        got, errors = consume(proc.bootstrap, topic, total)
        assert not errors
        assert got == {o: b"x-%d" % (o % PER_BATCH) for o in range(total)}
    partition = describe(proc.bootstrap, topic, capsys)
    assert partition["quarantined"] == []
    assert len(partition["skipped"]) == 2
    assert all(r["reason"].startswith("a copy of the batch at byte") for r in partition["skipped"])
    metrics = scrape(port, topic)
    assert metrics["odradek_log_quarantined_ranges"] == 0
    assert metrics["odradek_log_skipped_ranges"] == 2
    assert metrics["odradek_log_end_offset"] == total
    assert "skipped, the log already holds those records" in proc.log_path.read_text()


def test_two_writers_on_one_segment_never_stop_a_consumer_silently(
    broker: tuple[BrokerProcess, int], capsys: pytest.CaptureFixture[str]
) -> None:
    """Writers A and B both append from the same log end E (300): A 300-309, B 300-309,
    A 310-319, B 310-324, interleaved in the file. A's batches line up and are served;
    B's first is set aside (A holds its offsets); B's second reaches past A's end:
    320-324, held by nothing else, answer CORRUPT_MESSAGE. Both clients read up to 319,
    then report the error; the range is correct everywhere it is shown, and after the
    operator moves consumers past it, new records are read."""
    proc, port = broker
    topic = _topic_of_batches(proc)
    end = BATCHES * PER_BATCH

    def interleaved(batches: list[bytes]) -> list[bytes]:
        a1, a2 = _batch(end, 10, "a"), _batch(end + 10, 10, "a")
        b1, b2 = _batch(end, 10, "b"), _batch(end + 10, 15, "b")
        return [*batches, a1, b1, a2, b2]

    rewrite_segment(proc, topic, interleaved)
    with WireClient(proc.bootstrap) as client:
        assert list_offset(client, topic, LATEST).offset == end + 25
    readable = {o: b"x-%d" % (o % PER_BATCH) for o in range(end)}
    readable |= {o: b"a-%d" % o for o in range(end, end + 20)}
    got, codes = consume_confluent(proc.bootstrap, topic, end + 25)
    assert got == readable
    assert codes == [KafkaError.INVALID_MSG]  # CORRUPT_MESSAGE (2)
    got, kinds = consume_kafka_python(proc.bootstrap, topic, end + 25)
    assert got == readable
    assert kinds == [CorruptRecordError]

    partition = describe(proc.bootstrap, topic, capsys)
    (quarantined,) = partition["quarantined"]
    assert (quarantined["first_offset"], quarantined["last_offset"]) == (end + 20, end + 24)
    (skipped,) = partition["skipped"]
    assert skipped["reason"].startswith(f"another writer's batch? offsets {end}-{end + 9},")
    # Clients that do not ask for the damage report never see its tag.
    kp_admin = KafkaAdminClient(bootstrap_servers=proc.bootstrap)
    try:
        [answer] = kp_admin.describe_log_dirs()
    finally:
        kp_admin.close()
    [entry] = [t for t in answer["log_dirs"][0]["topics"] if t["name"] == topic]
    assert entry["partitions"][0]["partition_size"] > 0
    text = describe_text(proc.bootstrap, topic, capsys)
    assert f"offsets {end + 20}-{end + 24}," in text and "quarantined" in text
    metrics = scrape(port, topic)
    assert metrics["odradek_log_quarantined_ranges"] == 1
    assert metrics["odradek_log_quarantined_offsets"] == 5
    assert metrics["odradek_log_skipped_ranges"] == 1
    log_text = proc.log_path.read_text()
    assert f"offsets {end + 20}-{end + 24} quarantined" in log_text
    assert f"offsets {end + 20}-{end + 19}" not in log_text

    # Recovery as docs/operations.md says: move the consumers past the range; appends go on.
    with WireClient(proc.bootstrap) as client:
        produced = produce(client, topic, _batch(0, 3, "after"))
        assert produced.error_code == 0 and produced.base_offset == end + 25
    consumer = Consumer(
        {"bootstrap.servers": proc.bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, quarantined["last_offset"] + 1)])
    after: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    try:
        while len(after) < 3:
            assert time.monotonic() < deadline, "no record after the quarantined range"
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                after.append(message.offset())
    finally:
        consumer.close()
    assert after == [end + 25, end + 26, end + 27]
    # Or give the records up for every reader: delete up to the range's end. It is no
    # longer reported; the segment file keeps it until retention removes the segment.
    capsys.readouterr()
    past = str(quarantined["last_offset"] + 1)
    args = ["topics", "delete-records", topic, "--partition", "0", "--offset", past]
    assert odradek_main([*args, "-b", proc.bootstrap]) == 0
    partition = describe(proc.bootstrap, topic, capsys)
    assert partition["quarantined"] == [] and partition["log_start_offset"] == int(past)
    assert scrape(port, topic)["odradek_log_quarantined_ranges"] == 0


def test_describe_log_dirs_over_two_directories_with_damage_in_each(tmp_path: Path) -> None:
    """Two log directories, a damaged partition in each (a doubled batch in one, another
    writer's batch past the end in the other). kafka-python's describe_log_dirs parses
    the answer and lists both directories and every partition once; a request without
    the ``include_damage`` tag gets Kafka's own bytes (kio's plain schema, which refuses
    unknown tags, reads them to the end); with the tag, each partition's ranges are
    there, from both directories. (confluent-kafka has no DescribeLogDirs call.)"""
    first, second = tmp_path / "disk1", tmp_path / "disk2"
    proc = BrokerProcess(first, extra_args=["--data-dir", str(second)]).start()
    try:
        topic = f"dirs-{uuid.uuid4().hex[:8]}"
        with WireClient(proc.bootstrap) as client:
            create_topic(client, topic, partitions=4)
            for p in range(4):
                for _ in range(BATCHES):
                    assert produce(client, topic, _batch(0, PER_BATCH, "x"), p).error_code == 0
        proc.stop()
        # The partitions alternate between the directories: damage one in each.
        doubled_dir = next(first.glob(f"{topic}-*"))
        foreign_dir = next(second.glob(f"{topic}-*"))
        end = BATCHES * PER_BATCH
        for directory, extra in (
            (doubled_dir, lambda b: b[4]),  # a copy of its fifth batch
            (foreign_dir, lambda b: _batch(end - 5, 10, "b")),  # 5 offsets past the end
        ):
            (segment,) = directory.glob("*.log")
            data = segment.read_bytes()
            batches = [data[p : p + h.size] for p, h in iter_batches(data)]
            segment.write_bytes(b"".join([*batches, extra(batches)]))
        proc.start()
        doubled = int(doubled_dir.name.rpartition("-")[2])
        foreign = int(foreign_dir.name.rpartition("-")[2])

        kp_admin = KafkaAdminClient(bootstrap_servers=proc.bootstrap)
        try:
            [answer] = kp_admin.describe_log_dirs()
        finally:
            kp_admin.close()
        assert [d["log_dir"] for d in answer["log_dirs"]] == [str(first), str(second)]
        seen: dict[int, str] = {}
        for log_dir in answer["log_dirs"]:
            assert log_dir["error_code"] == 0
            for t in log_dir["topics"]:
                if t["name"] == topic:
                    for p in t["partitions"]:
                        assert p["partition_index"] not in seen
                        assert p["partition_size"] > 0
                        seen[p["partition_index"]] = log_dir["log_dir"]
        assert sorted(seen) == [0, 1, 2, 3]
        assert (seen[doubled], seen[foreign]) == (str(first), str(second))

        plain = import_module("kio.schema.describe_log_dirs.v4.response").DescribeLogDirsResponse
        asked_for = import_module("kio.schema.describe_log_dirs.v4.request").DescribeLogDirsRequest
        with WireClient(proc.bootstrap) as client:
            header = RequestHeader(ApiKey.DESCRIBE_LOG_DIRS, 4, 7, "kafka-like")
            client.send_raw(encode_request(header, build(asked_for, {"topics": None})))
            frame = client.read_frame()
            assert frame[:4] == (7).to_bytes(4, "big") and frame[4] == 0  # no header tags
            body, size = entity_reader(plain)(frame, 5)
            assert size == len(frame) - 5
            assert [r.log_dir for r in body.results] == [str(first), str(second)]

            reported = client.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})
            assert all(
                not p.damage for r in reported.results for t in r.topics for p in t.partitions
            )
            reported = client.request(
                ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None, "include_damage": True}
            )
        damage = {
            (r.log_dir, p.partition_index): [(d.first_offset, d.end_offset) for d in p.damage]
            for r in reported.results
            for t in r.topics
            if t.name == topic
            for p in t.partitions
        }
        assert damage[str(first), doubled] == [(end, end)]  # skipped: no offset lost
        assert damage[str(second), foreign] == [(end, end + 5)]  # quarantined: 300-304
        others = [k for k in damage if k[1] not in (doubled, foreign)]
        assert len(others) == 2 and all(damage[k] == [] for k in others)
    finally:
        proc.kill()
