"""Fixtures for the client tests: broker addresses (Odradek, and tansu for the core tests)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from odradek.testing_reference import ReferenceBroker, start_reference_broker


@pytest.fixture(scope="session")
def tansu_broker() -> Iterator[ReferenceBroker]:
    """The reference broker (tansu), one for the run."""
    broker = start_reference_broker()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def bootstrap(odradek_session_broker) -> str:
    return str(odradek_session_broker.bootstrap)


@pytest.fixture(params=["odradek", "tansu"])
def any_bootstrap(request: pytest.FixtureRequest) -> str:
    """The core tests run once against Odradek and once against tansu."""
    if request.param == "odradek":
        return str(request.getfixturevalue("odradek_session_broker").bootstrap)
    return str(request.getfixturevalue("tansu_broker").bootstrap)


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique to this test invocation."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:40]
    return f"client-{base}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> str:
    from odradek.client import AdminClient, NewTopic

    with AdminClient(bootstrap_servers=bootstrap, default_api_timeout_ms=20_000) as admin:
        admin.create_topics([NewTopic(name, partitions, 1)])[name].result()
    return name


@pytest.fixture
def make_topic():
    """``make_topic(bootstrap, name, partitions)`` creates a topic and returns its name."""
    return create_topic
