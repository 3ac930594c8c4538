"""Plain helpers shared by the interop tests (no fixtures here, see conftest.py)."""

from __future__ import annotations

import random
import socket
import struct
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Rec:
    """One record as a test produces it and expects it back."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: Headers


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def make_records(count: int, partitions: int, *, seed: int = 2) -> list[Rec]:
    """Deterministic records with the awkward cases mixed in.

    Null and empty keys, null (tombstone) and empty values, binary bytes,
    repeated and non-ASCII header keys, records without headers. Record ``i``
    goes to partition ``i % partitions``.
    """
    rng = random.Random(seed)
    out = []
    for i in range(count):
        if i % 7 == 3:
            key = None
        elif i % 11 == 5:
            key = b""
        else:
            key = b"key-%05d-" % i + rng.randbytes(rng.randrange(0, 8))
        if i % 13 == 6 and key is not None:  # kafka-python refuses a null key and value
            value = None
        elif i % 17 == 8:
            value = b""
        else:
            value = b"value-%05d:" % i + rng.randbytes(rng.randrange(0, 200))
        if i % 5 == 0:
            headers: Headers = ()
        else:
            headers = (("idx", b"%d" % i), ("bin", rng.randbytes(rng.randrange(0, 16))))
            if i % 3 == 0:
                headers += (("dup", b"first"), ("dup", b"second"))
            if i % 4 == 1:
                headers += (("ключ-é", "значение".encode()),)
        out.append(Rec(i % partitions, key, value, headers))
    return out


def by_partition(records: Iterable[Rec], partitions: int) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = {p: [] for p in range(partitions)}
    for rec in records:
        out[rec.partition].append(rec)
    return out


def norm_headers(headers: Sequence[tuple[str, bytes | None]] | None) -> Headers:
    """Client header lists (None, list or tuple; str keys) as a tuple of pairs."""
    if not headers:
        return ()
    return tuple((k.decode() if isinstance(k, bytes) else k, v) for k, v in headers)


def assert_partitions_exact(
    expected: dict[int, list[Rec]],
    got: dict[int, list[tuple[int, Rec]]],
) -> None:
    """Each partition holds exactly the expected records at offsets 0..n-1, in order."""
    assert sorted(got) == sorted(expected), f"partitions {sorted(got)} != {sorted(expected)}"
    for p, want in expected.items():
        have = got[p]
        offsets = [o for o, _ in have]
        assert offsets == list(range(len(want))), (
            f"partition {p}: offsets not 0..{len(want) - 1} "
            f"(got {len(offsets)}, first {offsets[:5]}, last {offsets[-5:]})"
        )
        for (offset, rec), exp in zip(have, want, strict=True):
            assert rec == exp, f"partition {p} offset {offset}: {rec!r} != {exp!r}"


def read_with_kafka_python(
    bootstrap: str, topic: str, partitions: int, count: int, *, timeout_s: float = 60
) -> dict[int, list[tuple[int, Rec]]]:
    """Read `count` records from offset 0 of every partition with kafka-python (assign mode)."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    got: dict[int, list[tuple[int, Rec]]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    try:
        while sum(map(len, got.values())) < count and time.monotonic() < deadline:
            for tp, msgs in consumer.poll(timeout_ms=500, max_records=5000).items():
                for m in msgs:
                    p = tp.partition
                    got[p].append((m.offset, Rec(p, m.key, m.value, norm_headers(m.headers))))
    finally:
        consumer.close()
    return got


def wait_until(predicate, timeout_s: float, interval_s: float = 0.1, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what or predicate}")


# --- raw Kafka wire (just enough for health checks and malformed-input tests) ---

API_VERSIONS = 18


def request_frame(
    api_key: int, api_version: int, correlation_id: int, body: bytes, client_id: bytes = b"raw"
) -> bytes:
    """A size-prefixed request with a v1 header (api_key, version, correlation, client id)."""
    header = struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def api_versions_v0(correlation_id: int) -> bytes:
    return request_frame(API_VERSIONS, 0, correlation_id, b"")


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    assert 0 < size < 1 << 24, f"response size {size}"
    return recv_exact(sock, size)


def check_api_versions(sock: socket.socket, correlation_id: int) -> dict[int, tuple[int, int]]:
    """Send ApiVersions v0 on ``sock``, assert a sane reply, return {api_key: (min, max)}."""
    sock.sendall(api_versions_v0(correlation_id))
    reply = read_frame(sock)
    got_id, error_code, count = struct.unpack_from(">ihi", reply, 0)
    assert got_id == correlation_id, f"correlation id {got_id} != {correlation_id}"
    assert error_code == 0, f"ApiVersions error {error_code}"
    assert 0 < count < 1000, count
    apis = {}
    for i in range(count):
        key, lo, hi = struct.unpack_from(">hhh", reply, 10 + 6 * i)
        apis[key] = (lo, hi)
    assert API_VERSIONS in apis
    return apis


def fresh_api_versions(host: str, port: int, timeout_s: float = 5.0) -> dict[int, tuple[int, int]]:
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.settimeout(timeout_s)
        return check_api_versions(sock, 0x5EED)
