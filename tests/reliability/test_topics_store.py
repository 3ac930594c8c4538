"""The topic metadata journal: batched, crash-safe, compacted, and loading old data dirs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.topic_store import JOURNAL_FILE, LEGACY_FILE, SNAPSHOT_FILE, TopicStore
from odradek.broker.topics import TopicManager


def create(name: str, partitions: int = 1, topic_id: str | None = None) -> dict[str, object]:
    return {
        "op": "create",
        "name": name,
        "id": topic_id or f"00000000-0000-0000-0000-{len(name):012d}",
        "partitions": partitions,
        "configs": {},
    }


def test_a_batch_is_one_write_and_survives_a_reopen(tmp_path: Path) -> None:
    store = TopicStore(tmp_path)
    store.commit([create(f"t{i}") for i in range(100)])
    store.commit(
        [{"op": "delete", "name": "t3"}, {"op": "partitions", "name": "t4", "partitions": 5}]
    )
    store.commit([{"op": "configs", "name": "t5", "configs": {"retention.ms": "1000"}}])
    store.close()
    again = TopicStore(tmp_path)
    assert len(again.topics) == 99
    assert "t3" not in again.topics
    assert again.topics["t4"].partitions == 5
    assert again.topics["t5"].configs == {"retention.ms": "1000"}
    assert len((tmp_path / JOURNAL_FILE).read_bytes().splitlines()) == 103


def test_a_torn_last_line_is_cut_and_the_rest_kept(tmp_path: Path) -> None:
    store = TopicStore(tmp_path)
    store.commit([create("a"), create("b")])
    store.close()
    journal = tmp_path / JOURNAL_FILE
    whole = journal.read_bytes()
    lines = whole.splitlines(keepends=True)
    for cut in range(len(lines[0]) + 1, len(whole)):
        journal.write_bytes(whole[:cut])
        loaded = TopicStore(tmp_path)
        assert set(loaded.topics) == {"a"}, cut
        loaded.close()
        assert journal.read_bytes() == lines[0]
    # A later commit after the cut appends cleanly.
    journal.write_bytes(whole[: len(whole) - 3])
    store = TopicStore(tmp_path)
    store.commit([create("c")])
    store.close()
    assert set(TopicStore(tmp_path).topics) == {"a", "c"}


def test_compaction_keeps_the_journal_short(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("odradek.broker.topic_store.COMPACT_SLACK", 10)
    store = TopicStore(tmp_path)
    for i in range(30):
        store.commit([create("x", topic_id=f"00000000-0000-0000-0000-{i:012d}")])
        store.commit([{"op": "delete", "name": "x"}])
    store.commit([create("kept")])
    store.close()
    assert (tmp_path / SNAPSHOT_FILE).exists()
    assert len((tmp_path / JOURNAL_FILE).read_bytes().splitlines()) <= 11
    assert set(TopicStore(tmp_path).topics) == {"kept"}


def test_a_crash_between_snapshot_and_emptying_the_journal_replays_nothing_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TopicStore(tmp_path)
    store.commit([create("t")])
    store._compact()
    store.commit([{"op": "partitions", "name": "t", "partitions": 3}])
    store.commit([{"op": "delete", "name": "t"}])
    # The crash: the snapshot (without t) is written, the journal never emptied.
    monkeypatch.setattr("odradek.broker.topic_store.os.ftruncate", lambda fd, size: None)
    store._compact()
    monkeypatch.undo()
    store.close()
    assert len((tmp_path / JOURNAL_FILE).read_bytes().splitlines()) == 2
    # Replaying "partitions of t" over a snapshot where t is gone would fail.
    assert TopicStore(tmp_path).topics == {}


def test_a_failed_write_leaves_the_metadata_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = TopicStore(tmp_path)
    store.commit([create("a")])

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError):
        store.commit([create("b"), create("c")])
    monkeypatch.undo()
    assert set(store.topics) == {"a"}
    store.commit([create("d")])
    store.close()
    assert set(TopicStore(tmp_path).topics) == {"a", "d"}


def test_a_data_dir_from_before_the_journal_loads_and_is_upgraded(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "orders-0").mkdir(parents=True)
    (data / "orders-1").mkdir()
    (data / LEGACY_FILE).write_text(
        json.dumps(
            {
                "orders": {
                    "id": "3d8bd3a1-0a47-4a5c-9a3e-1f4a0c9d2e11",
                    "partitions": 2,
                    "configs": {"retention.ms": "60000"},
                }
            }
        )
    )
    manager = TopicManager(data, BrokerConfig())
    try:
        topic = manager.get("orders")
        assert topic is not None
        assert len(topic.partitions) == 2
        assert str(topic.topic_id) == "3d8bd3a1-0a47-4a5c-9a3e-1f4a0c9d2e11"
        assert topic.configs == {"retention.ms": "60000"}
        assert topic.partitions[0].directory == data / "orders-0"
    finally:
        manager.close()
    assert not (data / LEGACY_FILE).exists()
    assert (data / SNAPSHOT_FILE).exists()
    reloaded = TopicManager(data, BrokerConfig())
    try:
        assert reloaded.get("orders") is not None
    finally:
        reloaded.close()
