"""Fixtures for the reliability suite.

Every attack here is driven the way it happens (raw frames, real clients, low
limits on the broker process) against a broker in a subprocess on loopback, so
what is measured (memory, descriptors, log volume) is the broker's own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .helpers import LimitedBroker


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[Callable[..., LimitedBroker]]:
    """Start brokers (settings, rlimits) for one test; all are stopped at its end."""
    started: list[LimitedBroker] = []

    def start(name: str = "broker", **kwargs: Any) -> LimitedBroker:
        broker = LimitedBroker(tmp_path / name, **kwargs)
        started.append(broker)
        return broker.start()

    yield start
    for broker in started:
        if broker.running:
            broker.kill()
