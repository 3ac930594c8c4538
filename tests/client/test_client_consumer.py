"""Consumer without a group: assign, poll, seek, offsets lookups, pause/resume, limits."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from odradek.client import Consumer, Producer, TopicPartition
from odradek.client.errors import IllegalStateError, OffsetOutOfRangeError
from odradek.testing import BrokerProcess

pytestmark = pytest.mark.timeout(90)


def produce(
    bootstrap: str,
    topic: str,
    n: int,
    partition: int = 0,
    base_ts: int | None = None,
    one_per_batch: bool = False,
) -> None:
    """``one_per_batch`` waits for each record: tansu answers ListOffsets from batch
    headers (latest = last batch's base offset + 1; by-time = a batch's first offset),
    so the offset-lookup tests give it one record per batch. kafka-python sees the same
    numbers from tansu for multi-record batches; Odradek answers per record."""
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as p:
        for i in range(n):
            ts = None if base_ts is None else base_ts + i * 10
            f = p.send(topic, value=b"%d" % i, key=b"k%d" % i, partition=partition, timestamp_ms=ts)
            if one_per_batch:
                f.result(10)
        p.flush(30)


def poll_until(consumer: Consumer, n: int, timeout: float = 20.0):
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        out.extend(consumer.poll(0.5))
    return out


def test_seek_and_positions(any_bootstrap: str, make_topic, topic_name: str) -> None:
    make_topic(any_bootstrap, topic_name, 1)
    produce(any_bootstrap, topic_name, 100, one_per_batch=True)
    tp = TopicPartition(topic_name, 0)
    with Consumer(bootstrap_servers=any_bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert c.assignment() == {tp}
        assert c.position(tp) == 0
        assert c.beginning_offsets([tp]) == {tp: 0}
        assert c.end_offsets([tp]) == {tp: 100}
        c.seek(tp, 42)
        records = poll_until(c, 58)
        assert [r.offset for r in records] == list(range(42, 100))
        assert c.position(tp) == 100
        assert c.highwater(tp) == 100
        c.seek_to_beginning([tp])
        assert c.position(tp) == 0
        c.seek_to_end()
        assert c.position(tp) == 100
        c.seek(tp, 99)
        (last,) = poll_until(c, 1)
        assert last.value == b"99"


def test_auto_offset_reset_latest_and_none(bootstrap: str, make_topic, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, 10)
    tp = TopicPartition(topic_name, 0)
    with Consumer(bootstrap_servers=bootstrap) as c:  # latest
        c.assign([tp])
        assert c.position(tp) == 10
        produce(bootstrap, topic_name, 5)
        assert [r.value for r in poll_until(c, 5)] == [b"0", b"1", b"2", b"3", b"4"]
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="none") as c:
        c.assign([tp])
        c.seek(tp, 1_000)
        with pytest.raises(OffsetOutOfRangeError):
            poll_until(c, 1, timeout=5)
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        c.seek(tp, 1_000)  # out of range: reset to earliest
        assert len(poll_until(c, 15)) == 15


def test_offsets_for_times(bootstrap: str, make_topic, topic_name: str) -> None:
    """Odradek only: tansu indexes by its own append time, not the records' CreateTime,
    so a lookup by the producer's timestamps cannot be checked against it."""
    make_topic(bootstrap, topic_name, 1)
    base = 1_700_000_000_000
    produce(bootstrap, topic_name, 50, base_ts=base)  # record i at base + 10 i
    tp = TopicPartition(topic_name, 0)
    with Consumer(bootstrap_servers=bootstrap) as c:
        c.assign([tp])
        found = c.offsets_for_times({tp: base + 105})
        assert found[tp] is not None and found[tp].offset == 11
        assert found[tp].timestamp == base + 110
        assert c.offsets_for_times({tp: base})[tp].offset == 0
        assert c.offsets_for_times({tp: base + 10_000})[tp] is None
        c.seek(tp, found[tp].offset)
        first = poll_until(c, 1)[0]
        assert (first.offset, first.timestamp) == (11, base + 110)


def test_max_poll_records(any_bootstrap: str, make_topic, topic_name: str) -> None:
    make_topic(any_bootstrap, topic_name, 1)
    produce(any_bootstrap, topic_name, 1_000)
    tp = TopicPartition(topic_name, 0)
    with Consumer(
        bootstrap_servers=any_bootstrap, auto_offset_reset="earliest", max_poll_records=37
    ) as c:
        c.assign([tp])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 1_000 and time.monotonic() < deadline:
            batch = c.poll(0.5)
            assert len(batch) <= 37
            got.extend(batch)
        assert [r.offset for r in got] == list(range(1_000))
        assert len(c.poll(0.2, max_records=5)) == 0


def test_pause_and_resume(bootstrap: str, make_topic, topic_name: str) -> None:
    make_topic(bootstrap, topic_name, 2)
    produce(bootstrap, topic_name, 50, partition=0)
    produce(bootstrap, topic_name, 50, partition=1)
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp0, tp1])
        c.pause([tp1])
        assert c.paused() == {tp1}
        records = poll_until(c, 50)
        records += c.poll(0.5)
        assert {r.partition for r in records} == {0}
        assert len(records) == 50
        assert c.position(tp1) == 0
        c.resume([tp1])
        assert c.paused() == set()
        records = poll_until(c, 50)
        assert {r.partition for r in records} == {1}
        assert [r.offset for r in records] == list(range(50))


def test_pause_midway_drops_nothing(bootstrap: str, make_topic, topic_name: str) -> None:
    """Records buffered for a partition when it is paused come back after resume."""
    make_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, 300)
    tp = TopicPartition(topic_name, 0)
    with Consumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", max_poll_records=10
    ) as c:
        c.assign([tp])
        first = poll_until(c, 1)
        c.pause([tp])
        assert len(c.poll(0.3)) == 0
        c.resume([tp])
        rest = poll_until(c, 300 - len(first))
        assert [r.offset for r in first + rest] == list(range(300))


def test_pipelining_sends_next_fetch_before_returning(
    bootstrap: str, make_topic, topic_name: str
) -> None:
    make_topic(bootstrap, topic_name, 1)
    produce(bootstrap, topic_name, 20)
    tp = TopicPartition(topic_name, 0)
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as c:
        c.assign([tp])
        assert len(poll_until(c, 20)) == 20
        # The fetch for offset 20 went out before poll returned.
        assert c._fetcher.has_in_flight() or c._fetcher.has_available_fetches()


def test_fetch_size_limits(bootstrap: str, make_topic, topic_name: str) -> None:
    """Partition fetch size far below a batch: the broker still returns whole batches."""
    make_topic(bootstrap, topic_name, 1)
    with Producer(bootstrap_servers=bootstrap, linger_ms=50) as p:
        for i in range(200):
            p.send(topic_name, value=bytes([i % 256]) * 500)
        p.flush(20)
    tp = TopicPartition(topic_name, 0)
    with Consumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=1_000,
        fetch_max_bytes=2_000,
    ) as c:
        c.assign([tp])
        records = poll_until(c, 200, timeout=30)
    assert [r.offset for r in records] == list(range(200))


def test_poll_requires_assignment(bootstrap: str) -> None:
    with Consumer(bootstrap_servers=bootstrap) as c, pytest.raises(IllegalStateError):
        c.poll(0)
    c2 = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"})
    c2.close()
    c2.close()
    with pytest.raises(IllegalStateError):
        c2.assign([TopicPartition("x", 0)])


def test_fetch_sessions_across_many_partitions(
    any_bootstrap: str, make_topic, topic_name: str, request: pytest.FixtureRequest
) -> None:
    """Twelve partitions, records arriving in a few at a time: every record arrives once,
    in order per partition. Odradek opens a fetch session and the fetches after the first
    list only what changed; tansu keeps none (session id 0) and gets full fetches."""
    partitions = 12
    make_topic(any_bootstrap, topic_name, partitions)
    tps = [TopicPartition(topic_name, p) for p in range(partitions)]
    seen: dict[int, list[int]] = {p: [] for p in range(partitions)}
    with Consumer(bootstrap_servers=any_bootstrap, auto_offset_reset="earliest") as c:
        c.assign(tps)
        c.poll(0.2)
        sent_requests = []
        fetcher = c._fetcher
        original = fetcher._fetch_body

        def record(request, version):  # type: ignore[no-untyped-def]
            sent_requests.append(request)
            return original(request, version)

        fetcher._fetch_body = record  # type: ignore[method-assign]
        with Producer(bootstrap_servers=any_bootstrap, linger_ms=0) as p:
            for round_ in range(4):
                for partition in (round_ % partitions, (round_ * 5 + 1) % partitions):
                    for i in range(3):
                        p.send(topic_name, value=b"%d" % i, partition=partition).result(10)
                deadline = time.monotonic() + 20
                while sum(map(len, seen.values())) < (round_ + 1) * 6:
                    assert time.monotonic() < deadline, seen
                    for r in c.poll(0.2):
                        seen[r.partition].append(r.offset)
        sessions = list(fetcher._sessions.values())
    for offsets in seen.values():
        assert offsets == list(range(len(offsets)))
    assert sum(map(len, seen.values())) == 24
    if request.node.callspec.params["any_bootstrap"] == "odradek":
        assert any(s.session_id != 0 for s in sessions)
        incremental = [r for r in sent_requests if not r.full]
        assert incremental, "no incremental fetch was sent"
        # An incremental fetch lists the partitions whose position moved, not all it fetches.
        assert all(len(r.to_send) < len(r.session_partitions) for r in incremental)
    else:
        assert all(s.session_id == 0 for s in sessions)
        assert all(r.full for r in sent_requests)


def test_without_fetch_sessions_every_partition_gets_its_turn(tmp_path: Path, make_topic) -> None:  # type: ignore[no-untyped-def]
    """A broker that keeps no fetch session (as one whose cache is full, or one without
    sessions) reads a full fetch's partitions in the order listed. When one batch fills
    fetch.max.bytes, the first partition listed takes every response unless the consumer
    moves a partition it got records from to the end of its order (as Java's does)."""
    broker = BrokerProcess(
        tmp_path / "data", settings={"max.incremental.fetch.session.cache.slots": "0"}
    ).start()
    try:
        bootstrap = broker.bootstrap
        topic = "turns"
        make_topic(bootstrap, topic, 2)
        big = b"x" * 60_000
        with Producer(bootstrap_servers=bootstrap, linger_ms=0) as p:
            for partition in (0, 1):
                for _ in range(8):  # one record per batch
                    p.send(topic, value=big, partition=partition).result(10)
        tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
        with Consumer(
            bootstrap_servers=bootstrap,
            auto_offset_reset="earliest",
            fetch_max_bytes=100_000,  # one batch per response
            fetch_max_wait_ms=50,
        ) as c:
            c.assign(tps)
            got: list[int] = []
            deadline = time.monotonic() + 30
            while len(got) < 6:
                assert time.monotonic() < deadline, got
                got.extend(r.partition for r in c.poll(0.5))
            assert c._fetcher._sessions and all(
                s.session_id == 0 for s in c._fetcher._sessions.values()
            )
        assert set(got[:6]) == {0, 1}, got
    finally:
        broker.stop()
