"""One local SparkSession for the whole run, plus topic helpers.

Spark starts in 5-30 s on this machine, so every Spark test shares the
session-scoped ``spark`` fixture (local[2], UI off, two shuffle partitions).
Tests talk to the session broker (``odradek_session_broker``), or to
``ODRADEK_TEST_BOOTSTRAP`` when that is set.
"""

from __future__ import annotations

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

    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        parts = consumer.partitions_for_topic(topic)
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
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
