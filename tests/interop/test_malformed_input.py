"""Malformed input never stops the broker, nor blocks other connections.

Hypothesis generates hostile connections: random bytes, negative / zero / huge
size prefixes, truncated frames, valid headers with garbage bodies, unknown API
keys and versions, bad client-id lengths, garbage after a valid request. After
each one the broker process must still be alive, a connection opened before the
attack must still get ApiVersions answers, and so must a fresh one.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from interop_helpers import (
    api_versions_v0,
    check_api_versions,
    fresh_api_versions,
    read_frame,
    request_frame,
    unique_topic,
)

MAX_EXAMPLES = 200
FUZZ_BUDGET_S = 90.0
SIZE_PREFIXES = [-(2**31), -1, 0, 1, 3, 7, 2**24, 100 * 2**20, 2**30, 2**31 - 1]


def attacks(known_keys: list[int]) -> st.SearchStrategy[tuple[str, bytes, bool]]:
    """(kind, bytes to send, half-close after sending)."""
    i16 = st.integers(-(2**15), 2**15 - 1)
    i32 = st.integers(-(2**31), 2**31 - 1)
    garbage = st.binary(max_size=512)
    known = st.sampled_from(known_keys)
    unknown = i16.filter(lambda k: k not in known_keys)
    version = st.one_of(st.integers(0, 20), i16)

    def header(key: int, ver: int, corr: int, client_len: int, client: bytes) -> bytes:
        return struct.pack(">hhih", key, ver, corr, client_len) + client

    random_bytes = garbage.map(lambda b: ("random", b))
    size_prefix = st.tuples(st.sampled_from(SIZE_PREFIXES) | i32, garbage).map(
        lambda t: ("size-prefix", struct.pack(">i", t[0]) + t[1])
    )
    truncated = st.tuples(known, version, i32, garbage, st.integers(0, 600)).map(
        lambda t: ("truncated", request_frame(t[0], t[1], t[2], t[3])[: t[4]])
    )
    short_body = st.tuples(known, st.integers(0, 12), i32, garbage).map(
        lambda t: ("declared-longer", _declared_longer(request_frame(t[0], t[1], t[2], t[3])))
    )
    unknown_api = st.tuples(unknown, version, i32, garbage).map(
        lambda t: ("unknown-api", request_frame(t[0], t[1], t[2], t[3]))
    )
    garbage_body = st.tuples(known, st.integers(0, 17), i32, garbage).map(
        lambda t: ("garbage-body", request_frame(t[0], t[1], t[2], t[3]))
    )
    odd_version = st.tuples(known, i16, i32, garbage).map(
        lambda t: ("odd-version", request_frame(t[0], t[1], t[2], t[3]))
    )
    bad_client_id = st.tuples(known, st.integers(0, 12), i32, i16, garbage).map(
        lambda t: ("client-id", _frame(header(t[0], t[1], t[2], t[3], b"x") + t[4]))
    )
    flexible_garbage = st.tuples(known, st.integers(0, 20), i32, garbage).map(
        # header v2 shape: client id then a tagged-field section, then the body
        lambda t: ("tagged", _frame(header(t[0], t[1], t[2], 1, b"x") + t[3]))
    )
    pipelined = st.tuples(st.integers(0, 2**31 - 1), garbage).map(
        lambda t: ("valid-then-garbage", api_versions_v0(t[0]) + t[1])
    )
    many_frames = st.lists(st.tuples(known, st.integers(0, 12), garbage), max_size=20).map(
        lambda fs: ("many", b"".join(request_frame(k, v, i, b) for i, (k, v, b) in enumerate(fs)))
    )
    kinds = st.one_of(
        random_bytes,
        size_prefix,
        truncated,
        short_body,
        unknown_api,
        garbage_body,
        odd_version,
        bad_client_id,
        flexible_garbage,
        pipelined,
        many_frames,
    )
    return st.tuples(kinds, st.booleans()).map(lambda t: (t[0][0], t[0][1], t[1]))


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _declared_longer(frame: bytes) -> bytes:
    (size,) = struct.unpack(">i", frame[:4])
    return struct.pack(">i", size + 1000) + frame[4:]


def _send_attack(host: str, port: int, data: bytes, half_close: bool) -> None:
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.sendall(data)
            if half_close:
                sock.shutdown(socket.SHUT_WR)
            sock.settimeout(0.05)
            deadline = time.monotonic() + 0.2
            while time.monotonic() < deadline:  # drain whatever comes back
                if not sock.recv(65536):
                    break
    except OSError:
        pass  # closed or reset by the broker: an allowed answer to garbage


def _assert_alive(broker) -> None:
    running = getattr(broker, "running", None)
    assert running is not False, "broker process died:\n" + (
        broker.log_tail() if hasattr(broker, "log_tail") else ""
    )


@pytest.mark.embedded
@pytest.mark.timeout(150)
def test_fuzzed_connections_never_stop_the_broker(odradek_broker) -> None:
    broker = odradek_broker
    host, port = broker.host, broker.port
    known = sorted(fresh_api_versions(host, port))
    bystander = socket.create_connection((host, port), timeout=5)
    bystander.settimeout(5)
    correlation = iter(range(1, 10**6))
    stop_at = time.monotonic() + FUZZ_BUDGET_S
    seen: dict[str, int] = {}

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        print_blob=True,
    )
    @given(attack=attacks(known))
    def one(attack: tuple[str, bytes, bool]) -> None:
        if time.monotonic() > stop_at:
            return  # over budget: let the remaining examples pass untried
        kind, data, half_close = attack
        seen[kind] = seen.get(kind, 0) + 1
        _send_attack(host, port, data, half_close)
        _assert_alive(broker)
        check_api_versions(bystander, next(correlation))
        fresh_api_versions(host, port)

    try:
        one()
    finally:
        bystander.close()
    assert sum(seen.values()) >= 50, f"too few attacks ran in the budget: {seen}"
    _assert_alive(broker)
    _confluent_round_trip(broker.bootstrap)


@pytest.mark.embedded
@pytest.mark.timeout(60)
def test_stalled_and_huge_frames_do_not_block_others(odradek_broker) -> None:
    """Connections that announce big frames and stall must not hold up anyone else,
    nor make the broker reserve the announced size."""
    broker = odradek_broker
    host, port = broker.host, broker.port
    stalled = []
    try:
        for size in (2**31 - 1, 2**30, 100 * 2**20, 50):
            for partial in (b"", b"\x00\x12", api_versions_v0(1)[4:12]):
                sock = socket.create_connection((host, port), timeout=5)
                with contextlib.suppress(OSError):
                    sock.sendall(struct.pack(">i", size) + partial)
                stalled.append(sock)
        # Half a header, then nothing, on yet another connection.
        sock = socket.create_connection((host, port), timeout=5)
        sock.sendall(api_versions_v0(2)[:3])
        stalled.append(sock)
        time.sleep(0.3)
        _assert_alive(broker)
        for _ in range(5):
            fresh_api_versions(host, port, timeout_s=5)
        rss = _rss_bytes(getattr(broker, "pid", None))
        if rss is not None:
            assert rss < 1 << 30, f"broker RSS {rss >> 20} MiB after frame-size announcements"
        _confluent_round_trip(broker.bootstrap)
    finally:
        for sock in stalled:
            sock.close()
    _assert_alive(broker)


@pytest.mark.embedded
@pytest.mark.timeout(60)
def test_pipelined_requests_answered_in_order(odradek_broker) -> None:
    """Many ApiVersions requests in one write: one response each, in request order."""
    broker = odradek_broker
    with socket.create_connection((broker.host, broker.port), timeout=5) as sock:
        sock.settimeout(5)
        ids = [1000 + i * 7 for i in range(50)]
        sock.sendall(b"".join(api_versions_v0(i) for i in ids))
        got = [struct.unpack_from(">i", read_frame(sock))[0] for _ in ids]
    assert got == ids


def _rss_bytes(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _confluent_round_trip(bootstrap: str) -> None:
    """A real client still works: metadata, produce, fetch."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = unique_topic("after-fuzz")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert admin.list_topics(timeout=15).brokers, "no brokers in metadata"
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=15)[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(10):
        producer.produce(topic, value=b"ok-%d" % i, partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("unused")})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
        assert got == [b"ok-%d" % i for i in range(10)]
    finally:
        consumer.close()
