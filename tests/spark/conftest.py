"""One local SparkSession for the whole run, plus topic helpers.

Spark starts in 5-30 s on this machine, so every Spark test shares the
session-scoped ``spark`` fixture (local[2], UI off, two shuffle partitions).
Tests talk to the session broker (``odradek_session_broker``), or to
``ODRADEK_TEST_BOOTSTRAP`` when that is set.

Against such an external broker, tests that need a broker feature are
deselected when the broker lacks it, and the summary says which and why:

- ``requires_create_partitions``: the broker must offer CreatePartitions in
  its ApiVersions (tansu does not).
- ``requires_timestamp_lookup``: ListOffsets by timestamp must find the first
  offset at or after a time. Checked by producing three records with known
  timestamps and looking one up (tansu answers offset 0 for any time).

Against the embedded Odradek broker every test runs.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


EXTERNAL_BOOTSTRAP_ENV = "ODRADEK_TEST_BOOTSTRAP"
FEATURE_MARKERS = {
    "requires_create_partitions": "needs CreatePartitions (adds a partition to a live topic)",
    "requires_timestamp_lookup": "needs ListOffsets by timestamp (starting offsets by time)",
}
_deselected_for_features: list[tuple[str, str]] = []


def pytest_configure(config: pytest.Config) -> None:
    for name, meaning in FEATURE_MARKERS.items():
        config.addinivalue_line(
            "markers",
            f"{name}(reason): {meaning}; deselected against an "
            f"external broker ({EXTERNAL_BOOTSTRAP_ENV}) that lacks it",
        )


def _supports_create_partitions(bootstrap: str) -> tuple[bool, str]:
    from odradek.client.cluster import KafkaClient
    from odradek.client.config import AdminConfig
    from odradek.protocol.apikeys import ApiKey

    client = KafkaClient(AdminConfig.from_settings(bootstrap_servers=bootstrap))
    try:
        meta = client.bootstrap(timeout_s=20)
        node = next(iter(meta.brokers))
        if client.connection(node, 20).supports(ApiKey.CREATE_PARTITIONS):
            return True, ""
        return False, "the broker's ApiVersions has no CreatePartitions"
    finally:
        client.close()


def _supports_timestamp_lookup(bootstrap: str) -> tuple[bool, str]:
    from odradek.client import AdminClient, Consumer, Producer, TopicPartition

    name = f"spark-probe-timestamps-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, name, 1)
    try:
        with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
            sent = [
                producer.send(name, b"probe", partition=0, timestamp_ms=ts)
                for ts in (1_000_000, 2_000_000, 3_000_000)
            ]
            producer.flush(30)
            for future in sent:
                future.result(timeout=30)
        tp = TopicPartition(name, 0)
        with Consumer(bootstrap_servers=bootstrap) as consumer:
            found = consumer.offsets_for_times({tp: 1_500_000})[tp]
        got = None if found is None else found.offset
        if got == 1:
            return True, ""
        return False, (
            f"ListOffsets for a time between the 1st and 2nd record answers offset {got}, not 1"
        )
    finally:
        with contextlib.suppress(Exception), AdminClient(bootstrap_servers=bootstrap) as admin:
            admin.delete_topics([name])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Against an external broker, deselect the tests needing a feature it lacks."""
    bootstrap = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if not bootstrap:
        return
    wanted = {m for item in items for m in FEATURE_MARKERS if item.get_closest_marker(m)}
    probes = {
        "requires_create_partitions": _supports_create_partitions,
        "requires_timestamp_lookup": _supports_timestamp_lookup,
    }
    missing: dict[str, str] = {}
    for marker in sorted(wanted):
        try:
            ok, why = probes[marker](bootstrap)
        except Exception as exc:  # a failed probe counts as the feature missing
            ok, why = False, f"probe failed: {exc!r}"
        if not ok:
            missing[marker] = why
    if not missing:
        return
    kept, deselected = [], []
    for item in items:
        hit = next((m for m in missing if item.get_closest_marker(m)), None)
        if hit is None:
            kept.append(item)
            continue
        deselected.append(item)
        reason = item.get_closest_marker(hit).kwargs.get("reason", FEATURE_MARKERS[hit])
        _deselected_for_features.append(
            (item.nodeid, f"{hit}: {reason} ({bootstrap}: {missing[hit]})")
        )
    config.hook.pytest_deselected(items=deselected)
    items[:] = kept


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _deselected_for_features:
        return
    terminalreporter.section("deselected: the external broker lacks a feature")
    for nodeid, why in _deselected_for_features:
        terminalreporter.write_line(f"{nodeid}\n    {why}")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    from odradek.spark import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("odradek-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


@pytest.fixture
def bootstrap(odradek_session_broker: Any) -> str:
    return str(odradek_session_broker.bootstrap)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:30]
    return f"spark-{base}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    from odradek.client import AdminClient, NewTopic

    with AdminClient(bootstrap_servers=bootstrap, default_api_timeout_ms=20_000) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
    return name


def add_partitions(bootstrap: str, name: str, total: int) -> None:
    from odradek.client import AdminClient, NewPartitions

    with AdminClient(bootstrap_servers=bootstrap, default_api_timeout_ms=20_000) as admin:
        admin.create_partitions({name: NewPartitions(total)})[name].result()


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    *,
    partitions: int = 1,
    start: int = 0,
    headers: bool = False,
    timestamp_ms: int | None = None,
    partition: int | None = None,
) -> list[tuple[int, bytes, bytes]]:
    """``count`` records ``key-i`` / ``value-i``, spread round-robin over the partitions."""
    from odradek.client import Producer

    out = []
    with Producer(bootstrap_servers=bootstrap, linger_ms=5) as producer:
        futures = []
        for i in range(start, start + count):
            p = partition if partition is not None else i % partitions
            key, value = f"key-{i}".encode(), f"value-{i}".encode()
            hdrs = [("i", str(i).encode()), ("empty", None)] if headers else None
            futures.append(
                (
                    p,
                    key,
                    value,
                    producer.send(
                        topic, value, key=key, headers=hdrs, partition=p, timestamp_ms=timestamp_ms
                    ),
                )
            )
        producer.flush(30)
        for p, key, value, f in futures:
            f.result(timeout=30)
            out.append((p, key, value))
    return out


def consume_all(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[Any]:
    """Every record of every partition of ``topic`` (from the start to the current end)."""
    from odradek.client import Consumer, TopicPartition
    from odradek.spark.cluster import ClusterView

    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        parts = consumer.partitions_for_topic(topic)
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        view = ClusterView(bootstrap)  # end_offsets (ListOffsets) is low on some brokers
        try:
            ends = view.latest(tps)
        finally:
            view.close()
        out: list[Any] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            out.extend(consumer.poll(timeout=0.5))
            assert time.monotonic() < deadline, "timed out consuming"
        return out


def wait_for(predicate: Any, timeout_s: float, what: str, interval_s: float = 0.25) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
