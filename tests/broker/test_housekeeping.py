"""The broker's housekeeping: retention every interval, compaction unless the cleaner is off."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from odradek.broker.config import BrokerConfig
from odradek.broker.server import Broker

PASSES = 5


async def _passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cleaner_enabled: bool
) -> tuple[int, int]:
    """(compaction passes, retention passes) while retention runs PASSES times."""
    config = BrokerConfig()
    config.set("log.retention.check.interval.ms", "10")
    config.set("log.cleaner.backoff.ms", "10")
    config.set("log.cleaner.enable", str(cleaner_enabled).lower())
    broker = Broker(tmp_path, config, port=0)
    counts = {"compact": 0, "retention": 0}
    enough = asyncio.Event()

    def compact() -> int:
        counts["compact"] += 1
        return 0

    def enforce_retention() -> int:
        counts["retention"] += 1
        if counts["retention"] >= PASSES:
            enough.set()
        return 0

    monkeypatch.setattr(broker.topics, "compact", compact)
    monkeypatch.setattr(broker.topics, "enforce_retention", enforce_retention)
    task = asyncio.create_task(broker._run_housekeeping())
    try:
        await asyncio.wait_for(enough.wait(), 30)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        broker.topics.close()
    return counts["compact"], counts["retention"]


@pytest.mark.timeout(60)
def test_the_cleaner_runs_on_its_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compactions, _ = asyncio.run(_passes(tmp_path, monkeypatch, cleaner_enabled=True))
    assert compactions >= 1


@pytest.mark.timeout(60)
def test_log_cleaner_enable_false_never_compacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compactions, retentions = asyncio.run(_passes(tmp_path, monkeypatch, cleaner_enabled=False))
    assert retentions >= PASSES
    assert compactions == 0
