"""Fetch sessions (KIP-227): the session cache's rules, and sessions on the wire.

The cache is pure bookkeeping and is driven directly (clock and session ids
injected); the wire tests send raw Fetch requests to a real broker, as a client
with sessions (Java's, kafka-python's, Odradek's) does.
"""

from __future__ import annotations

import itertools
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.fetch_sessions import (
    FetchSessionCache,
    PartitionRequest,
    SessionError,
    next_epoch,
)
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.testing import Broker, BrokerProcess

from .wire import WireClient

pytestmark = pytest.mark.timeout(120)


def cache(
    slots: int = 10, eviction_ms: int = 120_000, max_partitions: int = 1_000_000
) -> FetchSessionCache:
    ids = itertools.count(101)
    return FetchSessionCache(
        slots,
        max_partitions=max_partitions,
        eviction_ms=eviction_ms,
        rng=lambda lo, hi: next(ids),
    )


def wanted(*keys: tuple[str, int], offset: int = 0) -> OrderedDict:
    return OrderedDict((key, PartitionRequest(offset, 1000)) for key in keys)


def entry(hw: int = 10, log_start: int = 0, error: int = 0) -> dict[str, Any]:
    return {
        "high_watermark": hw,
        "log_start_offset": log_start,
        "error_code": error,
        "preferred_read_replica": -1,
    }


def open_session(c: FetchSessionCache, keys: list[tuple[str, int]], now: int = 0) -> int:
    context = c.new_context(12, 0, 0, wanted(*keys), [], privileged=False, now_ms=now)
    _, session_id, answered = context.finish([(k, entry(), 0) for k in keys], now)
    assert len(answered) == len(keys)
    return session_id


def test_full_fetches_open_sessions_and_incremental_ones_read_every_cached_partition() -> None:
    c = cache()
    a, b = ("t", 0), ("t", 1)
    session_id = open_session(c, [a, b])
    assert session_id == 101 and len(c) == 1
    assert c.get(session_id).epoch == 1
    # Epoch 1 lists only partition b at a new offset; partition a is fetched as cached.
    context = c.new_context(12, session_id, 1, wanted(b, offset=7), [], privileged=False, now_ms=1)
    assert list(context.partitions) == [a, b]
    assert context.partitions[b].fetch_offset == 7 and context.partitions[a].fetch_offset == 0
    assert c.get(session_id).epoch == next_epoch(1) == 2
    # Only what changed is answered: b has records, a's high watermark moved, nothing else.
    error, answered_id, answered = context.finish([(a, entry(hw=11), 0), (b, entry(), 40)], 1)
    assert (error, answered_id) == (0, session_id)
    assert [key for key, _, _ in answered] == [a, b]
    context = c.new_context(12, session_id, 2, OrderedDict(), [], privileged=False, now_ms=2)
    _, _, answered = context.finish([(a, entry(hw=11), 0), (b, entry(), 0)], 2)
    assert answered == []  # nothing changed since the last answer


def test_changed_partitions_rules() -> None:
    c = cache()
    a, b, d = ("t", 0), ("t", 1), ("t", 2)
    session_id = open_session(c, [a, b, d])
    context = c.new_context(12, session_id, 1, OrderedDict(), [], privileged=False, now_ms=1)
    _, _, answered = context.finish(
        [(a, entry(log_start=3), 0), (b, entry(error=3), 0), (d, entry(), 0)], 1
    )
    assert [key for key, _, _ in answered] == [a, b]  # log start moved; an error
    # A partition with an error is answered again once it is gone (its cached hw is -1).
    context = c.new_context(12, session_id, 2, OrderedDict(), [], privileged=False, now_ms=2)
    _, _, answered = context.finish(
        [(a, entry(log_start=3), 0), (b, entry(), 0), (d, entry(), 0)], 2
    )
    assert [key for key, _, _ in answered] == [b]


def test_partitions_with_records_move_to_the_end_of_the_session() -> None:
    c = cache()
    keys = [("t", i) for i in range(3)]
    session_id = open_session(c, keys)
    context = c.new_context(12, session_id, 1, OrderedDict(), [], privileged=False, now_ms=1)
    context.finish([(k, entry(), 10 if k == ("t", 0) else 0) for k in keys], 1)
    context = c.new_context(12, session_id, 2, OrderedDict(), [], privileged=False, now_ms=2)
    assert list(context.partitions) == [("t", 1), ("t", 2), ("t", 0)]


def test_forgotten_partitions_and_the_last_one() -> None:
    c = cache()
    a, b = ("t", 0), ("t", 1)
    session_id = open_session(c, [a, b])
    context = c.new_context(12, session_id, 1, OrderedDict(), [a], privileged=False, now_ms=1)
    assert list(context.partitions) == [b]
    context.finish([(b, entry(), 0)], 1)
    # Forgetting the last partition closes the session; that fetch is sessionless.
    context = c.new_context(12, session_id, 2, OrderedDict(), [b], privileged=False, now_ms=2)
    assert not context.incremental and c.get(session_id) is None
    assert context.finish([], 2)[1] == 0


def test_session_errors() -> None:
    c = cache()
    session_id = open_session(c, [("t", 0)])
    with pytest.raises(SessionError) as unknown:
        c.new_context(12, 999, 1, OrderedDict(), [], privileged=False, now_ms=1)
    assert unknown.value.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    with pytest.raises(SessionError) as stale:
        c.new_context(12, session_id, 5, OrderedDict(), [], privileged=False, now_ms=1)
    assert stale.value.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    with pytest.raises(SessionError) as ids:  # opened with names (v12), used with ids (v13)
        c.new_context(13, session_id, 1, OrderedDict(), [], privileged=False, now_ms=1)
    assert ids.value.error_code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR


def test_a_duplicate_request_answers_invalid_epoch() -> None:
    """Two requests with the same epoch: the second one to answer finds the epoch moved."""
    c = cache()
    session_id = open_session(c, [("t", 0)])
    first = c.new_context(12, session_id, 1, OrderedDict(), [], privileged=False, now_ms=1)
    second = c.new_context(12, session_id, 2, OrderedDict(), [], privileged=False, now_ms=1)
    assert second.finish([(("t", 0), entry(), 0)], 1)[0] == 0
    assert first.finish([(("t", 0), entry(), 0)], 1)[:2] == (
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        session_id,
    )


def test_full_fetches_close_sessions_and_final_epoch_opens_none() -> None:
    c = cache()
    session_id = open_session(c, [("t", 0)])
    # A full fetch naming the session with epoch -1: closed, and no new one.
    context = c.new_context(12, session_id, -1, wanted(("t", 0)), [], privileged=False, now_ms=1)
    assert c.get(session_id) is None
    assert context.finish([(("t", 0), entry(), 0)], 1)[1] == 0
    # Before v7 there are no sessions.
    context = c.new_context(6, 0, 0, wanted(("t", 0)), [], privileged=False, now_ms=1)
    assert context.finish([(("t", 0), entry(), 0)], 1)[1] == 0 and len(c) == 0


def test_eviction_follows_kafka() -> None:
    c = cache(slots=2, eviction_ms=1000)
    small = open_session(c, [("t", 0)], now=0)
    big = open_session(c, [("t", 0), ("t", 1), ("t", 2)], now=0)
    # Full, nothing stale, both young: a new session finds no room.
    assert open_session(c, [("t", i) for i in range(5)], now=500) == 0
    # Once both are older than the eviction time, the smaller one gives way to a larger
    # newcomer, but not to a smaller one.
    c.get(small).last_used_ms = c.get(big).last_used_ms = 900
    assert open_session(c, [("t", 9)], now=1500) == 0
    newcomer = open_session(c, [("t", 0), ("t", 1)], now=1500)
    assert newcomer != 0 and c.get(small) is None and c.get(big) is not None
    # A session unused for longer than the eviction time goes first, whatever its size.
    assert open_session(c, [("t", 7)], now=3000) != 0
    assert c.get(big) is None  # the least recently used was stale
    assert c.evictions == 2


def test_privileged_sessions_evict_young_consumer_sessions() -> None:
    c = cache(slots=1, eviction_ms=1000)
    consumer = open_session(c, [("t", 0), ("t", 1)], now=0)
    context = c.new_context(12, 0, 0, wanted(("t", 0)), [], privileged=True, now_ms=10)
    _, follower, _ = context.finish([(("t", 0), entry(), 0)], 10)
    assert follower != 0 and c.get(consumer) is None
    # A consumer cannot evict a young follower session.
    assert open_session(c, [("t", i) for i in range(9)], now=20) == 0


def test_one_client_cannot_grow_a_session_without_bound() -> None:
    """Each incremental fetch may add partitions (made-up ones too); the partitions all
    sessions cache stay within max_partitions: past it the session is closed and the
    fetch answered without one (session id 0), so the client's next fetch is full."""
    c = cache(max_partitions=10)
    other = open_session(c, [("t", 0), ("t", 1)])
    session_id = open_session(c, [("x", 0), ("x", 1)])
    assert c.partitions_cached == 4
    grow = wanted(*[("made-up", i) for i in range(6)])
    context = c.new_context(12, session_id, 1, grow, [], privileged=False, now_ms=1)
    assert context.incremental and c.partitions_cached == 10  # at the bound: kept
    context.finish([(k, entry(), 0) for k in context.partitions], 1)
    more = wanted(("made-up", 6))
    context = c.new_context(12, session_id, 2, more, [], privileged=False, now_ms=2)
    assert not context.incremental and c.get(session_id) is None
    assert list(context.partitions) == [("made-up", 6)]  # what this request lists
    assert context.finish([(("made-up", 6), entry(), 0)], 2)[:2] == (0, 0)
    assert c.get(other) is not None and c.partitions_cached == 2
    # A full fetch of more partitions than fit opens no session.
    assert open_session(c, [("y", i) for i in range(9)], now=3) == 0
    assert open_session(c, [("y", i) for i in range(8)], now=3) != 0
    assert c.partitions_cached == 10


def test_a_new_session_evicts_for_room_for_its_partitions() -> None:
    """Room for partitions follows the slot rules: a stale session goes first."""
    c = cache(max_partitions=5, eviction_ms=1000)
    stale = open_session(c, [("t", i) for i in range(4)], now=0)
    assert open_session(c, [("u", 0), ("u", 1)], now=500) == 0  # nothing evictable yet
    fresh = open_session(c, [("u", 0), ("u", 1)], now=1500)
    assert fresh != 0 and c.get(stale) is None and c.partitions_cached == 2
    assert c.evictions == 1


# --------------------------------------------------------------------------- the wire


def fetch_body(
    topic: str,
    offsets: dict[int, int],
    *,
    session_id: int,
    epoch: int,
    forgotten: list[int] = (),  # type: ignore[assignment]
    max_wait: int = 0,
) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait": max_wait,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 16,
                    }
                    for p, offset in offsets.items()
                ],
            }
        ]
        if offsets
        else [],
        "forgotten_topics_data": [{"topic": topic, "partitions": list(forgotten)}]
        if forgotten
        else [],
        "rack_id": "",
    }


def answered(response: Any) -> dict[int, tuple[int, int, int]]:
    """partition -> (error, high watermark, records bytes) of a Fetch response."""
    return {
        p.partition_index: (int(p.error_code), p.high_watermark, len(p.records or b""))
        for t in response.responses
        for p in t.partitions
    }


def produce(bootstrap: str, topic: str, partition: int, n: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(n):
        producer.produce(topic, b"v%d" % i, partition=partition)
    assert producer.flush(10) == 0


@pytest.fixture
def topic(odradek_session_broker: Broker) -> str:
    name = f"sessions-{time.monotonic_ns()}"
    admin = AdminClient({"bootstrap.servers": odradek_session_broker.bootstrap})
    admin.create_topics([NewTopic(name, 4, 1)])[name].result(timeout=10)
    return name


def test_a_session_on_the_wire(odradek_session_broker: Broker, topic: str) -> None:
    bootstrap = odradek_session_broker.bootstrap
    produce(bootstrap, topic, 0, 3)
    produce(bootstrap, topic, 2, 2)
    with WireClient(bootstrap) as client:
        full = client.request(
            ApiKey.FETCH, 11, fetch_body(topic, dict.fromkeys(range(4), 0), session_id=0, epoch=0)
        )
        session_id = full.session_id
        assert session_id != 0 and full.error_code == 0
        first = answered(full)
        assert set(first) == {0, 1, 2, 3}  # a full response answers every partition
        assert first[0][1] == 3 and first[0][2] > 0 and first[2][1] == 2
        # Move partitions 0 and 2 past their records; nothing else changed.
        step = client.request(
            ApiKey.FETCH, 11, fetch_body(topic, {0: 3, 2: 2}, session_id=session_id, epoch=1)
        )
        assert step.session_id == session_id and answered(step) == {}
        # New records on partition 3 only: the answer holds partition 3 only.
        produce(bootstrap, topic, 3, 4)
        step = client.request(
            ApiKey.FETCH, 11, fetch_body(topic, {}, session_id=session_id, epoch=2)
        )
        changed = answered(step)
        assert set(changed) == {3} and changed[3][1] == 4 and changed[3][2] > 0
        # Forget partition 3: more records there are not answered any more.
        client.request(
            ApiKey.FETCH,
            11,
            fetch_body(topic, {}, session_id=session_id, epoch=3, forgotten=[3]),
        )
        produce(bootstrap, topic, 3, 1)
        produce(bootstrap, topic, 1, 1)
        step = client.request(
            ApiKey.FETCH, 11, fetch_body(topic, {}, session_id=session_id, epoch=4)
        )
        assert set(answered(step)) == {1}
        # A replayed epoch, and an unknown session.
        stale = client.request(
            ApiKey.FETCH, 11, fetch_body(topic, {}, session_id=session_id, epoch=4)
        )
        assert stale.error_code == ErrorCode.INVALID_FETCH_SESSION_EPOCH and answered(stale) == {}
        unknown = client.request(
            ApiKey.FETCH, 11, fetch_body(topic, {0: 0}, session_id=session_id + 1, epoch=1)
        )
        assert (
            unknown.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND and unknown.session_id == 0
        )
        # Without a session (epoch -1) a fetch is full and sessionless, as before KIP-227.
        plain = client.request(
            ApiKey.FETCH, 11, fetch_body(topic, {0: 0, 1: 0}, session_id=0, epoch=-1)
        )
        assert plain.session_id == 0 and set(answered(plain)) == {0, 1}


def test_an_offset_out_of_range_is_reported_when_the_response_is_full(
    odradek_session_broker: Broker, topic: str
) -> None:
    """Partition 0's first batch fills max_bytes; partition 1's offset is past its log
    end: still OFFSET_OUT_OF_RANGE, as Kafka answers (else the consumer never resets)."""
    bootstrap = odradek_session_broker.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for _ in range(200):
        producer.produce(topic, b"x" * 500, partition=0)
    producer.produce(topic, b"y", partition=1)
    assert producer.flush(10) == 0
    body = fetch_body(topic, {0: 0, 1: 50}, session_id=0, epoch=-1)
    body["max_bytes"] = 1_000  # the first batch alone is larger: nothing else fits
    with WireClient(bootstrap) as client:
        got = answered(client.request(ApiKey.FETCH, 11, body))
    assert got[0][0] == 0 and got[0][2] > 1_000  # KIP-74: the first batch whole
    assert got[1] == (1, 1, 0)  # OFFSET_OUT_OF_RANGE, high watermark 1, no records


def test_an_incremental_fetch_long_polls_on_its_whole_session(
    odradek_session_broker: Broker, topic: str
) -> None:
    """The parked fetch lists no partition; a record on a cached one wakes it."""
    bootstrap = odradek_session_broker.bootstrap
    with WireClient(bootstrap, timeout_s=30) as client:
        full = client.request(
            ApiKey.FETCH, 11, fetch_body(topic, {0: 0, 1: 0}, session_id=0, epoch=0)
        )
        import threading

        def later() -> None:
            time.sleep(0.3)  # the fetch must be parked by then
            produce(bootstrap, topic, 1, 1)

        thread = threading.Thread(target=later)
        thread.start()
        started = time.monotonic()
        step = client.request(
            ApiKey.FETCH,
            11,
            fetch_body(topic, {}, session_id=full.session_id, epoch=1, max_wait=20_000),
        )
        thread.join(10)
        assert time.monotonic() - started < 15
        assert set(answered(step)) == {1}


@pytest.fixture
def one_slot_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path / "data",
        settings={
            "max.incremental.fetch.session.cache.slots": "1",
            "fetch.session.cache.max.partitions": "3",
        },
    ).start()
    try:
        yield broker
    finally:
        broker.stop()


def test_a_full_cache_answers_full_fetches_without_a_session(
    one_slot_broker: BrokerProcess,
) -> None:
    bootstrap = one_slot_broker.bootstrap
    name = "slots"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(timeout=10)
    produce(bootstrap, name, 0, 2)
    with WireClient(bootstrap) as first, WireClient(bootstrap) as second:
        one = first.request(ApiKey.FETCH, 11, fetch_body(name, {0: 0}, session_id=0, epoch=0))
        two = second.request(ApiKey.FETCH, 11, fetch_body(name, {0: 0}, session_id=0, epoch=0))
        assert one.session_id != 0 and two.session_id == 0  # no room: sessionless
        assert answered(two)[0][2] > 0  # the records still come


def test_the_partition_bound_on_the_wire(one_slot_broker: BrokerProcess) -> None:
    """fetch.session.cache.max.partitions=3: a full fetch of four partitions opens no
    session; an incremental fetch growing a session to four closes it (session id 0)."""
    bootstrap = one_slot_broker.bootstrap
    name = "bounded"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 4, 1)])[name].result(timeout=10)
    produce(bootstrap, name, 3, 2)
    with WireClient(bootstrap) as client:
        four = {p: 0 for p in range(4)}
        big = client.request(ApiKey.FETCH, 11, fetch_body(name, four, session_id=0, epoch=0))
        assert big.error_code == 0 and big.session_id == 0
        assert answered(big)[3][2] > 0  # the records still come
        three = {p: 0 for p in range(3)}
        full = client.request(ApiKey.FETCH, 11, fetch_body(name, three, session_id=0, epoch=0))
        assert full.session_id != 0
        grown = client.request(
            ApiKey.FETCH, 11, fetch_body(name, {3: 0}, session_id=full.session_id, epoch=1)
        )
        assert (grown.error_code, grown.session_id) == (0, 0)
        assert set(answered(grown)) == {3}
        gone = client.request(
            ApiKey.FETCH, 11, fetch_body(name, {}, session_id=full.session_id, epoch=2)
        )
        assert gone.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
