"""Several log directories (JBOD): locked and identified, and partitions moved between
them while they serve, without losing or repeating a record, whatever the crash.

The moves are AlterReplicaLogDirs as kafka-python's admin client sends it, under a
confluent-kafka producer and consumer; the crash points a process kill cannot hit
reliably (between the swap's two renames) are laid out on disk as a crash leaves
them and opened by a new TopicManager, as a restart would.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import NoError
from kafka.structs import TopicPartitionReplica

from odradek.broker.config import BrokerConfig
from odradek.broker.log_dirs import META_PROPERTIES, LogDirError, parse_log_dir_list
from odradek.broker.topics import TopicManager
from odradek.log.dir_lock import DirectoryInUseError
from odradek.log.dir_move import FUTURE_SUFFIX, MOVED_FROM_FILE, DirMove
from odradek.protocol.errors import ErrorCode
from odradek.protocol.records import build_batch, decode_records
from odradek.testing import BrokerProcess

pytestmark = pytest.mark.timeout(180)

SEGMENT_BYTES = 1 << 20  # Kafka's floor: many segments for a few MB
VALUE = 1000  # bytes per record value
MOVE_TIMEOUT_S = 60


# --- helpers ------------------------------------------------------------------------------


def manager(*dirs: Path, **settings: str) -> TopicManager:
    return TopicManager(list(dirs), BrokerConfig({"log.segment.bytes": SEGMENT_BYTES, **settings}))


def fill(plog: Any, first: int, count: int) -> None:
    for i in range(first, first + count):
        value = f"{i:08d}".encode().ljust(VALUE, b".")
        plog.append(build_batch([(None, value, ())], timestamp_ms=int(time.time() * 1000)))


def contents(plog: Any) -> list[tuple[int, bytes]]:
    """(offset, value) of every record, read through the log."""
    out = []
    for batch in plog.iter_batches_from(plog.start_offset):
        out += [(r.offset, bytes(r.value)) for r in decode_records(bytes(batch))]
    return out


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def create(m: TopicManager, name: str, partitions: int) -> None:
    from odradek.broker.topics import NewTopic as Wanted

    [result] = await m.create_topics([Wanted(name, partitions)])
    assert not isinstance(result, Exception), result


def abandon(m: TopicManager) -> None:
    """What a kill -9 leaves: nothing closed, the locks gone with the process."""
    m.log_dirs.release()


# --- locking and identity -----------------------------------------------------------------


def test_every_log_dir_is_locked_before_anything_is_read(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    first = manager(a, b)
    try:
        run(create(first, "t", 2))
        before = {p: p.stat().st_mtime_ns for p in (a / "meta.json", b / META_PROPERTIES)}
        with pytest.raises(DirectoryInUseError) as refused:
            manager(c, b)  # b is the second broker's second directory
        assert str(b) in str(refused.value)
        assert sorted(os.listdir(c)) == [".lock"]  # locked first, then given back; no more
        assert {p: p.stat().st_mtime_ns for p in before} == before
        manager(c).close()  # c's lock was released when b's failed
    finally:
        first.close()


def test_each_dir_carries_its_identity_and_another_clusters_is_refused(tmp_path: Path) -> None:
    a, b, other = tmp_path / "a", tmp_path / "b", tmp_path / "other"
    manager(a, b, **{"cluster.id": "cluster-one"}).close()
    for d in (a, b):
        props = dict(
            line.split("=", 1)
            for line in (d / META_PROPERTIES).read_text().splitlines()
            if "=" in line
        )
        assert props["cluster.id"] == "cluster-one" and props["version"] == "1"
        assert len(props["directory.id"]) == 22  # Kafka's base64 uuid
    with pytest.raises(LogDirError, match=f"log directory {b} belongs to cluster cluster-one"):
        manager(other, b, **{"cluster.id": "cluster-two"})
    # A directory copied under another name (same directory.id) is one directory twice.
    shutil.copy(a / META_PROPERTIES, other / META_PROPERTIES)
    with pytest.raises(LogDirError, match=r"same directory\.id"):
        manager(a, other, **{"cluster.id": "cluster-one"})
    with pytest.raises(LogDirError, match="given twice"):
        parse_log_dir_list([f"{a},{tmp_path}/x/../a"])


def test_a_log_dir_dropped_from_the_list_with_partitions_in_it_stops_the_start(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b)
    run(create(m, "orders", 2))  # one partition in each directory
    m.close()
    with pytest.raises(LogDirError, match=f"{b} .*list it in log.dirs again"):
        manager(a)
    assert (b / "orders-1").is_dir() or (b / "orders-0").is_dir()  # nothing was lost
    # Moved off first, the directory can go.
    m = manager(a, b)

    async def empty_b() -> None:
        for index in range(2):
            assert await m.move_replica("orders", index, str(a)) == 0
        for move in list(m.moves.values()):
            assert await move.finished is None

    run(empty_b())
    m.close()
    manager(a).close()


# --- moving -------------------------------------------------------------------------------


def test_a_failed_copy_leaves_the_partition_serving_where_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b)
    run(create(m, "t", 1))
    plog = m.partition("t", 0)
    source = plog.directory
    fill(plog, 0, 3000)

    def broken_disk(self: DirMove, *args: object) -> int:
        raise OSError(5, "Input/output error", str(self.future / "00000000000000000000.log"))

    monkeypatch.setattr(DirMove, "_copy_bytes", broken_disk)
    target = b if source.parent == a else a

    async def attempt() -> tuple[int, BaseException | None, int]:
        code = await m.move_replica("t", 0, str(target))
        outcome = await m.moves[("t", 0)].finished
        return code, outcome, await m.move_replica("t", 0, str(target))

    code, outcome, again = run(attempt())
    assert code == 0 and isinstance(outcome, OSError)
    assert again == ErrorCode.KAFKA_STORAGE_ERROR  # EIO there: the directory is marked failed
    assert m.log_dir_of(plog).path == source.parent
    assert not [n for n in os.listdir(target) if n.endswith(FUTURE_SUFFIX)]
    fill(plog, 3000, 10)  # still serving, in place
    assert [o for o, _ in contents(plog)] == list(range(3010))
    m.close()


def test_a_truncation_during_the_copy_starts_the_copy_over(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b)
    run(create(m, "t", 1))
    plog = m.partition("t", 0)
    fill(plog, 0, 4000)
    copy_passes = DirMove._catch_up
    truncated: list[int] = []

    def then_truncate(self: DirMove) -> None:
        copy_passes(self)
        if not truncated:  # a follower cut its diverged log back, once
            truncated.append(plog.truncate_to(2500))
            fill(plog, 2500, 100)

    monkeypatch.setattr(DirMove, "_catch_up", then_truncate)
    target = b if plog.directory.parent == a else a

    async def move() -> BaseException | None:
        assert await m.move_replica("t", 0, str(target)) == 0
        return await m.moves[("t", 0)].finished

    assert run(move()) is None
    assert truncated == [2500]
    assert plog.directory.parent == target
    records = contents(plog)
    assert [o for o, _ in records] == list(range(2600))
    assert records[2599][1].startswith(b"00002599")
    m.close()


def test_records_deleted_during_the_copy_stay_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b)
    run(create(m, "t", 1))
    plog = m.partition("t", 0)
    fill(plog, 0, 4000)
    copy_passes = DirMove._catch_up

    def then_delete(self: DirMove) -> None:
        copy_passes(self)
        plog.delete_records_before(3000)  # DeleteRecords: leading segments removed
        plog.drain()

    monkeypatch.setattr(DirMove, "_catch_up", then_delete)
    target = b if plog.directory.parent == a else a

    async def move() -> BaseException | None:
        assert await m.move_replica("t", 0, str(target)) == 0
        return await m.moves[("t", 0)].finished

    assert run(move()) is None
    assert plog.start_offset == 3000
    assert [o for o, _ in contents(plog)] == list(range(3000, 4000))
    m.close()
    reopened = manager(a, b)
    plog = reopened.partition("t", 0)
    assert (plog.directory.parent, plog.start_offset, plog.end_offset) == (target, 3000, 4000)
    reopened.close()


# --- crash points, as a crash leaves the disk ---------------------------------------------


@pytest.fixture
def moved_state(tmp_path: Path) -> Iterator[tuple[Path, Path, list[tuple[int, bytes]]]]:
    """A partition in `a` (cleanly closed) and its records; `b` another log directory."""
    a, b = tmp_path / "a", tmp_path / "b"
    m = manager(a, b)
    run(create(m, "t", 2))  # t-0 in a, t-1 in b
    plog = m.partition("t", 0)
    assert plog.directory.parent == a
    fill(plog, 0, 3000)
    records = contents(plog)
    m.close()
    yield a, b, records


def test_a_crash_between_the_swaps_renames_keeps_the_moved_copy(
    moved_state: tuple[Path, Path, list[tuple[int, bytes]]],
) -> None:
    a, b, records = moved_state
    # Both named: the copy (marked, complete: it was made from the closed source) and the
    # source, not renamed yet.
    shutil.copytree(a / "t-0", b / "t-0")
    (b / "t-0" / MOVED_FROM_FILE).write_text(f"{a / 't-0'}\n")
    m = manager(a, b)
    plog = m.partition("t", 0)
    assert plog.directory == b / "t-0"
    assert not (a / "t-0").exists() and not (b / "t-0" / MOVED_FROM_FILE).exists()
    assert contents(plog) == records
    m.close()


def test_a_crash_after_the_swap_drops_the_old_copy_and_the_marker(
    moved_state: tuple[Path, Path, list[tuple[int, bytes]]],
) -> None:
    a, b, records = moved_state
    shutil.copytree(a / "t-0", b / "t-0")
    (b / "t-0" / MOVED_FROM_FILE).write_text(f"{a / 't-0'}\n")
    os.rename(a / "t-0", a / "t-0.5e1f-delete")
    m = manager(a, b)
    plog = m.partition("t", 0)
    assert plog.directory == b / "t-0"
    assert os.listdir(a).count("t-0.5e1f-delete") == 0
    assert not (b / "t-0" / MOVED_FROM_FILE).exists()
    assert contents(plog) == records
    m.close()


def test_an_unfinished_copy_is_removed_and_the_source_kept(
    moved_state: tuple[Path, Path, list[tuple[int, bytes]]],
) -> None:
    a, b, records = moved_state
    shutil.copytree(a / "t-0", b / f"t-0.77aa{FUTURE_SUFFIX}")
    os.truncate(next((b / f"t-0.77aa{FUTURE_SUFFIX}").glob("*.log")), 100)  # cut short
    m = manager(a, b)
    assert m.partition("t", 0).directory == a / "t-0"
    assert not [n for n in os.listdir(b) if n.endswith(FUTURE_SUFFIX)]
    assert contents(m.partition("t", 0)) == records
    m.close()


def test_two_copies_no_move_explains_stop_the_start(
    moved_state: tuple[Path, Path, list[tuple[int, bytes]]],
) -> None:
    a, b, _ = moved_state
    shutil.copytree(a / "t-0", b / "t-0")  # copied by hand: which one is right?
    with pytest.raises(LogDirError, match=f"partition t-0 is in {a / 't-0'} and {b / 't-0'}"):
        manager(a, b)
    assert (a / "t-0").is_dir() and (b / "t-0").is_dir()  # nothing removed


# --- a real broker: moved under load, killed mid-move -------------------------------------


def _value(i: int) -> bytes:
    return f"{i:08d}".encode().ljust(VALUE, b"-")


def _placed(admin: KafkaAdminClient, topic: str) -> list[tuple[str, bool]]:
    [described] = admin.describe_log_dirs()
    return [
        (d["log_dir"], p["is_future_key"])
        for d in described["log_dirs"]
        for t in d["topics"]
        if t["name"] == topic
        for p in t["partitions"]
    ]


def _read_all(bootstrap: str, topic: str, expected: int) -> list[tuple[int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"check-{time.monotonic_ns()}"}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < expected and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=1000, timeout=0.5):
                assert message.error() is None, message.error()
                got.append((message.offset(), message.value()))
    finally:
        consumer.close()
    return got


@pytest.mark.embedded
def test_a_partition_moves_under_a_producer_and_a_consumer_and_stays_moved(
    tmp_path: Path,
) -> None:
    disk1, disk2 = tmp_path / "disk1", tmp_path / "disk2"
    broker = BrokerProcess(
        disk1,
        extra_args=["--data-dir", str(disk2)],
        settings={"log.segment.bytes": str(SEGMENT_BYTES)},
    ).start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    topic = "moving"
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        source = _placed(admin, topic)[0][0]
        target = str(disk2) if source == str(disk1) else str(disk1)
        delivered: dict[int, bytes] = {}

        def acked(err: KafkaError | None, message: Any) -> None:
            assert err is None, err
            delivered[message.offset()] = message.value()

        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "acks": "all", "enable.idempotence": True}
        )
        consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "mover"})
        consumer.assign([TopicPartition(topic, 0, 0)])
        consumed: list[tuple[int, bytes]] = []
        sent = 0

        def step(records: int) -> None:
            nonlocal sent
            for _ in range(records):
                producer.produce(topic, _value(sent), partition=0, on_delivery=acked)
                sent += 1
            producer.poll(0)
            for message in consumer.consume(num_messages=2000, timeout=0.01):
                assert message.error() is None, message.error()
                consumed.append((message.offset(), message.value()))

        while sent < 10_000:  # ~10 MB, ~10 segments to copy
            step(500)
        producer.flush(30)
        replica = TopicPartitionReplica(topic, 0, 0)
        assert admin.alter_replica_log_dirs({replica: target}) == {replica: NoError}
        window = (sent, len(consumed))
        deadline = time.monotonic() + MOVE_TIMEOUT_S
        while _placed(admin, topic) != [(target, False)]:
            assert time.monotonic() < deadline, _placed(admin, topic)
            step(200)
        during = (sent - window[0], len(consumed) - window[1])
        for _ in range(10):
            step(200)
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 30
        while len(consumed) < sent and time.monotonic() < deadline:
            step(0)
        consumer.close()

        assert during[0] > 0 and during[1] > 0  # produced and consumed while it moved
        assert sorted(delivered) == list(range(sent))  # every record acknowledged once
        assert all(delivered[i] == _value(i) for i in range(sent))
        assert consumed == [(i, _value(i)) for i in range(sent)]  # no loss, no repeat

        broker.stop()
        assert (Path(target) / f"{topic}-0").is_dir()
        assert not (Path(source) / f"{topic}-0").exists()
        broker.start()
        admin.close()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        assert _placed(admin, topic) == [(target, False)]
        assert _read_all(broker.bootstrap, topic, sent) == [(i, _value(i)) for i in range(sent)]
    finally:
        admin.close()
        broker.stop()


@pytest.mark.embedded
def test_a_broker_killed_mid_move_restarts_with_one_complete_copy(tmp_path: Path) -> None:
    disk1, disk2 = tmp_path / "disk1", tmp_path / "disk2"
    broker = BrokerProcess(
        disk1,
        extra_args=["--data-dir", str(disk2)],
        settings={"log.segment.bytes": str(SEGMENT_BYTES)},
    ).start()
    topic = "crashing"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        source = Path(_placed(admin, topic)[0][0])
        target = disk2 if source == disk1 else disk1
        producer = Producer(
            {"bootstrap.servers": broker.bootstrap, "acks": "all", "batch.size": 1 << 20}
        )
        total = 40_000  # ~40 MB: the copy takes long enough to be caught in the middle
        for i in range(total):
            producer.produce(topic, _value(i), partition=0)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(60) == 0
        del producer  # nothing left to send: no reconnections while the broker is down

        replica = TopicPartitionReplica(topic, 0, 0)
        assert admin.alter_replica_log_dirs({replica: str(target)}) == {replica: NoError}
        deadline = time.monotonic() + 10
        while not any(n.endswith(FUTURE_SUFFIX) for n in os.listdir(target)):
            assert time.monotonic() < deadline, "the move never started"
        broker.kill()  # SIGKILL in the middle of the copy
        assert any(n.endswith(FUTURE_SUFFIX) for n in os.listdir(target))
        assert (source / f"{topic}-0").is_dir()

        admin.close()
        broker.start()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        assert not any(n.endswith(FUTURE_SUFFIX) for n in os.listdir(target))
        assert _placed(admin, topic) == [(str(source), False)]
        records = _read_all(broker.bootstrap, topic, total)
        assert records == [(i, _value(i)) for i in range(total)]

        # Asked again, the move completes; the next start opens the moved copy.
        assert admin.alter_replica_log_dirs({replica: str(target)}) == {replica: NoError}
        deadline = time.monotonic() + MOVE_TIMEOUT_S
        while _placed(admin, topic) != [(str(target), False)]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        broker.stop()
        assert not (source / f"{topic}-0").exists()
        broker.start()
        admin.close()
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        assert _placed(admin, topic) == [(str(target), False)]
    finally:
        admin.close()
        broker.stop()


@pytest.mark.embedded
def test_a_restart_counts_each_dirs_partitions_and_places_new_ones_in_the_emptier(
    tmp_path: Path,
) -> None:
    """What a start counts per directory (once per directory, not per partition) is what
    the directories hold, so the next partitions go to the one holding fewer."""
    a, b = tmp_path / "a", tmp_path / "b"
    first = manager(a, b)
    try:
        run(create(first, "t", 6))  # three each
    finally:
        first.close()
    # Lay out an unbalanced start: b's copies of t-1, t-3, t-5 move to a, as a finished
    # move leaves them.
    for name in os.listdir(b):
        if name.startswith("t-"):
            os.rename(b / name, a / name)
    second = manager(a, b)
    try:
        dirs = {d.path: d for d in second.log_dirs}
        assert second.log_dirs.hosted(dirs[a]) == 6
        assert second.log_dirs.hosted(dirs[b]) == 0
        run(create(second, "u", 4))
        logs = [second.partition("u", i) for i in range(4)]
        assert [plog.directory.parent for plog in logs if plog is not None] == [b, b, b, b]
    finally:
        second.close()


def test_a_vanished_log_dir_is_reported_failed_and_gets_no_new_partition(tmp_path: Path) -> None:
    disk1, disk2 = tmp_path / "disk1", tmp_path / "disk2"
    broker = BrokerProcess(disk1, extra_args=["--data-dir", str(disk2)]).start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        shutil.rmtree(disk2)  # the disk is gone
        [described] = admin.describe_log_dirs()
        state = {d["log_dir"]: (d["error_code"], d["total_bytes"]) for d in described["log_dirs"]}
        assert state[str(disk2)] == (ErrorCode.KAFKA_STORAGE_ERROR, -1)
        assert state[str(disk1)][0] == 0
        admin.create_topics([NewTopic("after", 4, 1)])
        assert _placed(admin, "after") == [(str(disk1), False)] * 4
        replica = TopicPartitionReplica("after", 0, 0)
        moved = admin.alter_replica_log_dirs({replica: str(disk2)})
        assert moved[replica].errno == ErrorCode.KAFKA_STORAGE_ERROR
    finally:
        admin.close()
        broker.stop()
