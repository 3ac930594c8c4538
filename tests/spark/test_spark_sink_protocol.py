"""The staged sink's commit protocol, driven by hand (no SparkSession) against a broker.

Spark calls ``write`` in tasks and ``commit``/``abort`` on the driver; these
tests make those calls directly, to cover the cases that are hard to time in a
real query: a failed task, an aborted batch, a repeated commit of a batchId, and
a commit that died half-way through publishing.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

import odradek.spark.writer as writer_mod
from odradek.spark.options import WriteOptions
from odradek.spark.writer import OdradekStreamWriter

from .conftest import consume_all, create_topic

pytestmark = pytest.mark.timeout(90)

SCHEMA = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def _writer(bootstrap: str, topic: str, ck: str) -> OdradekStreamWriter:
    opts = WriteOptions.parse(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "checkpointLocation": ck}
    )
    return OdradekStreamWriter(opts, SCHEMA)


def _batches(rows: list[int], keyed: bool = True) -> list[pa.RecordBatch]:
    return [
        pa.RecordBatch.from_pydict(
            {
                "key": [f"k{i}" if keyed else None for i in rows],
                "value": [f"v{i}".encode() for i in rows],
            }
        )
    ]


def _values(bootstrap: str, topic: str) -> Counter:
    return Counter(r.value for r in consume_all(bootstrap, topic))


def test_failed_task_and_aborted_batch_publish_nothing(bootstrap, topic, tmp_path):
    create_topic(bootstrap, topic, 2)
    w = _writer(bootstrap, topic, str(tmp_path / "ck"))
    ok = w.write(iter(_batches(list(range(50)))))
    assert ok.rows == 50
    # Task 2 failed: Spark passes None for it, and aborts the batch.
    w.abort([ok, None], 0)
    assert _values(bootstrap, topic) == Counter()
    assert not list((tmp_path / "ck" / "odradek-sink" / "staged").glob("*/*.arrow"))
    # The replayed batch 0 commits: only its own rows appear.
    again = [w.write(iter(_batches(list(range(25))))), w.write(iter(_batches(list(range(25, 50)))))]
    w.commit(again, 0)
    assert _values(bootstrap, topic) == Counter(f"v{i}".encode() for i in range(50))


def test_repeated_commit_of_a_batch_publishes_once(bootstrap, topic, tmp_path):
    create_topic(bootstrap, topic, 3)
    ck = str(tmp_path / "ck")
    w = _writer(bootstrap, topic, ck)
    w.commit([w.write(iter(_batches(list(range(30)), keyed=False)))], 7)
    # After a crash Spark replays batch 7 and calls commit(…, 7) again, from a new writer.
    w2 = _writer(bootstrap, topic, ck)
    w2.commit([w2.write(iter(_batches(list(range(30)), keyed=False)))], 7)
    assert _values(bootstrap, topic) == Counter(f"v{i}".encode() for i in range(30))


def test_commit_interrupted_mid_publish_resumes_without_duplicates(
    bootstrap, topic, tmp_path, monkeypatch
):
    create_topic(bootstrap, topic, 2)
    ck = str(tmp_path / "ck")
    real = writer_mod._producer

    class Crashing:
        """A producer that dies after 40 records (flushed), like a driver killed mid-publish."""

        def __init__(self, *a, **kw):
            self.inner = real(*a, **kw)
            self.sent = 0

        def send_columns(self, topic, partition, rows, **columns):
            take = min(rows, 40 - self.sent)  # the columns' first `take` rows
            if take > 0:
                self.inner.send_columns(topic, partition, take, **columns)
                self.sent += take
            if take < rows:
                self.inner.flush()
                raise RuntimeError("driver died")
            return []

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setattr(writer_mod, "_producer", Crashing)
    w = _writer(bootstrap, topic, ck)
    with pytest.raises(RuntimeError, match="driver died"):
        w.commit([w.write(iter(_batches(list(range(100)))))], 3)
    assert sum(_values(bootstrap, topic).values()) == 40
    monkeypatch.setattr(writer_mod, "_producer", real)
    # The replayed batch stages the same rows in another order (e.g. after a shuffle).
    w2 = _writer(bootstrap, topic, ck)
    rows = list(range(100))[::-1]
    w2.commit([w2.write(iter(_batches(rows[:60]))), w2.write(iter(_batches(rows[60:])))], 3)
    assert _values(bootstrap, topic) == Counter(f"v{i}".encode() for i in range(100))


# --------------------------------------------------------------------------- transactional


def _read_committed(bootstrap: str, topic: str, partitions: int) -> Counter:
    """What a read_committed reader sees (confluent-kafka: Odradek's consumer reads
    read_uncommitted until its read_committed filtering lands)."""
    import time
    import uuid

    from confluent_kafka import Consumer as CConsumer
    from confluent_kafka import TopicPartition as CTP

    consumer = CConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([CTP(topic, p, 0) for p in range(partitions)])
    got: Counter = Counter()
    quiet = time.monotonic()
    deadline = quiet + 20
    try:
        while time.monotonic() < deadline and time.monotonic() - quiet < 1.5:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got[msg.value()] += 1
                quiet = time.monotonic()
    finally:
        consumer.close()
    return got


def _txn_writer(bootstrap: str, topic: str, ck: str) -> OdradekStreamWriter:
    opts = WriteOptions.parse(
        {
            "kafka.bootstrap.servers": bootstrap,
            "topic": topic,
            "checkpointLocation": ck,
            "deliveryMode": "transactional",
        }
    )
    return OdradekStreamWriter(opts, SCHEMA)


def test_transactional_batch_is_atomic_and_committed_once(bootstrap, topic, tmp_path):
    create_topic(bootstrap, topic, 3)
    ck = str(tmp_path / "ck")
    w = _txn_writer(bootstrap, topic, ck)
    tasks = [w.write(iter(_batches(list(range(40))))), w.write(iter(_batches(list(range(40, 70)))))]
    w.abort(tasks, 0)  # an aborted batch: nothing
    assert _read_committed(bootstrap, topic, 3) == Counter()
    again = [w.write(iter(_batches(list(range(70)))))]
    w.commit(again, 0)
    expected = Counter(f"v{i}".encode() for i in range(70))
    assert _read_committed(bootstrap, topic, 3) == expected
    # A restarted driver (a new writer, same checkpoint) replays batch 0's commit: the
    # sink group says batch 0 is in, so nothing is published twice.
    w2 = _txn_writer(bootstrap, topic, ck)
    w2.commit([w2.write(iter(_batches(list(range(70)))))], 0)
    w2.commit([w2.write(iter(_batches(list(range(100, 110)))))], 1)
    expected.update(f"v{i}".encode() for i in range(100, 110))
    assert _read_committed(bootstrap, topic, 3) == expected


def test_driver_dying_mid_transaction_leaves_nothing_visible(
    bootstrap, topic, tmp_path, monkeypatch
):
    create_topic(bootstrap, topic, 2)
    ck = str(tmp_path / "ck")
    real = writer_mod._producer

    class Dying:
        """A transactional producer that sends 40 rows (flushed) and then the driver dies:
        no commit, no abort, its transaction left open."""

        def __init__(self, *a, **kw):
            self.inner = real(*a, **kw)
            self.sent = 0

        def send_columns(self, topic, partition, rows, **columns):
            take = min(rows, 40 - self.sent)
            if take > 0:
                self.inner.send_columns(topic, partition, take, **columns)
                self.sent += take
            if take < rows:
                self.inner.flush()
                raise SystemExit("driver died")  # BaseException: the abort is attempted
            return []

        def abort_transaction(self, *a, **kw):
            raise SystemExit("driver died")  # ... and it never happens

        def __getattr__(self, name):
            return getattr(self.inner, name)

    monkeypatch.setattr(writer_mod, "_producer", Dying)
    w = _txn_writer(bootstrap, topic, ck)
    with pytest.raises(SystemExit):
        w.commit([w.write(iter(_batches(list(range(100)))))], 3)
    monkeypatch.setattr(writer_mod, "_producer", real)
    assert sum(_values(bootstrap, topic).values()) == 40  # written, but uncommitted
    assert _read_committed(bootstrap, topic, 2) == Counter()  # ... so nobody sees them
    # Spark restarts and replays batch 3: init_transactions aborts the dead one's transaction.
    w2 = _txn_writer(bootstrap, topic, ck)
    rows = list(range(100))[::-1]
    w2.commit([w2.write(iter(_batches(rows[:60]))), w2.write(iter(_batches(rows[60:])))], 3)
    assert _read_committed(bootstrap, topic, 2) == Counter(f"v{i}".encode() for i in range(100))
