"""The driver's view of the log end (no SparkSession, a real broker).

``ClusterView.latest`` takes the larger of ListOffsets(latest) and the high
watermark of a small Fetch. Against a broker whose ListOffsets is right, the
second half is checked by making ListOffsets lie (as tansu's does: it counts
record batches, so 20 records in one batch answer 1).
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("pyspark")

import odradek.client.offsets as offsets_mod
from odradek.client import TopicPartition
from odradek.client.structs import OffsetAndTimestamp
from odradek.spark.cluster import ClusterView

from .conftest import create_topic, produce

pytestmark = pytest.mark.timeout(60)


def test_latest_is_the_log_end(bootstrap, topic):
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 20, partition=0)  # one batch (linger)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    view = ClusterView(bootstrap)
    try:
        assert view.latest([tp0, tp1]) == {tp0: 20, tp1: 0}
        assert view.latest([]) == {}
    finally:
        view.close()


def test_a_low_list_offsets_answer_is_raised_to_the_high_watermark(bootstrap, topic, monkeypatch):
    create_topic(bootstrap, topic, 2)
    produce(bootstrap, topic, 20, partition=0)
    produce(bootstrap, topic, 7, partition=1, start=20)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    real = offsets_mod.list_offsets

    def batch_counting(client, timestamps, **kw):
        found = real(client, timestamps, **kw)
        return {tp: OffsetAndTimestamp(min(1, o.offset), o.timestamp) for tp, o in found.items()}

    monkeypatch.setattr(offsets_mod, "list_offsets", batch_counting)
    view = ClusterView(bootstrap)
    try:
        started = time.monotonic()
        assert view.latest([tp0, tp1]) == {tp0: 20, tp1: 7}
        assert time.monotonic() - started < 2.0  # one cheap Fetch, no waiting
    finally:
        view.close()


def test_high_watermarks_in_one_fetch_per_leader(bootstrap, topic):
    create_topic(bootstrap, topic, 3)
    produce(bootstrap, topic, 30, partitions=3)
    tps = [TopicPartition(topic, p) for p in range(3)]
    view = ClusterView(bootstrap)
    try:
        view.client.refresh([topic], timeout_s=20)
        marks = offsets_mod.high_watermarks(view.client, dict.fromkeys(tps, 0), timeout_s=20)
        assert marks == dict.fromkeys(tps, 10)
        # A fetch offset past the end (out of range on Kafka) still gives the end, or
        # nothing when the broker sends no watermark with the error.
        past = offsets_mod.high_watermarks(view.client, {tps[0]: 25}, timeout_s=20)
        assert past.get(tps[0]) in (None, 10)
    finally:
        view.close()
