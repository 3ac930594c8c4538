"""A long compaction does not stall other clients (issue 10, item 2).

Before: retention and compaction ran on the event loop, so while the cleaner
rewrote a big compacted topic every other request (Fetch, Produce, even
ApiVersions) waited for it to finish. Now the cleaner runs in a worker thread
and takes the partition's lock only to swap each cleaned group in.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer

from odradek.protocol.records import build_batch
from odradek.testing import BrokerProcess

from ..broker.wire import WireClient
from .log_helpers import create_topic, fetch, produce

RECORDS = 400_000
KEYS = 20_000
# Generous for a loaded 2-core machine; a blocked loop would answer only after
# the whole compaction, which the test makes sure takes longer than this.
LATENCY_BOUND_S = 1.0
MIN_COMPACTION_S = 1.5
COMPACTED_LINE = re.compile(
    r"^(\S+ \S+) INFO odradek.broker: compacted (\d+) partitions in ([\d.]+)s", re.M
)


def _produce_keyed(bootstrap: str, topic: str) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 512 * 1024,
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    value = b"v" * 100
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(topic, value, key=b"key-%d" % (i % KEYS), partition=0)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0


def _compaction_window(log_text: str) -> tuple[float, float] | None:
    for stamp, _, took in COMPACTED_LINE.findall(log_text):
        if float(took) >= MIN_COMPACTION_S:
            end = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
            return end - float(took), end
    return None


@pytest.mark.embedded
def test_other_clients_are_served_while_a_big_log_is_compacted(tmp_path: Path) -> None:
    data = tmp_path / "data"
    loading = BrokerProcess(data, settings={"log.cleaner.backoff.ms": "600000"}).start()
    try:
        with WireClient(loading.bootstrap, timeout_s=60) as client:
            topic = f"compacted-{uuid.uuid4().hex[:8]}"
            create_topic(
                client, topic, cleanup_policy="compact", segment_bytes=str(4 * 1024 * 1024)
            )
            other = f"other-{uuid.uuid4().hex[:8]}"
            create_topic(client, other)
        _produce_keyed(loading.bootstrap, topic)
    finally:
        loading.stop()

    # Restarted with a short cleaner interval: one long pass over everything produced.
    broker = BrokerProcess(data, settings={"log.cleaner.backoff.ms": "300"}).start()
    latencies: list[tuple[float, float]] = []  # (sent at, seconds to answer)
    failures: list[BaseException] = []
    stop = threading.Event()

    def probe() -> None:
        """Another client: alternately produce to and fetch from a small topic."""
        try:
            with WireClient(broker.bootstrap, timeout_s=120) as wire:
                n = 0
                while not stop.is_set():
                    sent = time.time()
                    if n % 2:
                        batch = build_batch([(b"k", b"probe", ())], timestamp_ms=int(sent * 1000))
                        assert produce(wire, other, batch).error_code == 0
                    else:
                        assert fetch(wire, other, 0).error_code == 0
                    latencies.append((sent, time.time() - sent))
                    n += 1
                    time.sleep(0.02)
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=probe, daemon=True)
    try:
        thread.start()
        deadline = time.monotonic() + 180
        window = None
        while window is None and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.2)
            window = _compaction_window(broker.log_path.read_text(errors="replace"))
        stop.set()
        thread.join(130)
        assert not failures, failures
        assert window is not None, "no compaction of the topic was logged:\n" + broker.log_tail()
        start, end = window
        during = [took for sent, took in latencies if start <= sent <= end]
        assert len(during) >= 10, f"only {len(during)} probes answered in {end - start:.1f}s"
        assert max(during) < LATENCY_BOUND_S, (
            f"a request waited {max(during):.2f}s during a {end - start:.1f}s compaction"
        )
    finally:
        stop.set()
        broker.stop()
