"""`odradek transactions list|describe`, and `consume --isolation read_committed`."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.timeout(60)


def test_list_and_describe_an_open_then_committed_transaction(cli, bootstrap, name) -> None:
    topic, txn_id = name("topic"), name("txn")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=10)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"x", partition=1)
    assert producer.flush(10) == 0

    listed = cli("transactions", "list", "--state", "Ongoing", "-o", "json")
    assert listed.code == 0, listed.err
    mine = [t for t in listed.json() if t["transactional_id"] == txn_id]
    assert len(mine) == 1 and mine[0]["state"] == "Ongoing"

    described = cli("transactions", "describe", txn_id)
    assert described.code == 0, described.err
    assert txn_id in described.out and "Ongoing" in described.out
    assert f"{topic}-1" in described.out

    producer.commit_transaction(30)
    data = cli("transactions", "describe", txn_id, "-o", "json").json()
    assert data[0]["state"] in ("PrepareCommit", "CompleteCommit")
    assert data[0]["producer_id"] == mine[0]["producer_id"]
    still_open = cli("transactions", "list", "--state", "Ongoing", "-o", "json").json()
    assert txn_id not in [t["transactional_id"] for t in still_open]


def test_describe_an_unknown_id_is_one_line_exit_1(cli, name) -> None:
    result = cli("transactions", "describe", name("nobody"))
    assert result.code == 1
    assert len(result.err.strip().splitlines()) == 1
    assert "transactional" in result.err.lower()


def test_consume_read_committed_prints_only_committed_records(cli, bootstrap, name) -> None:
    topic = name("topic")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=10)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": name("txn")})
    producer.init_transactions(30)
    for value, commit in ((b"kept-1", True), (b"dropped", False), (b"kept-2", True)):
        producer.begin_transaction()
        producer.produce(topic, value=value)
        assert producer.flush(10) == 0  # written before the abort (which purges the unsent)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    committed = cli(
        "consume", topic, "--from-beginning", "--isolation", "read_committed", "-n", "2"
    )
    assert committed.code == 0, committed.err
    assert committed.out.splitlines()[:2] == ["kept-1", "kept-2"]
    everything = cli("consume", topic, "--from-beginning", "-n", "3")
    assert everything.code == 0, everything.err
    assert everything.out.splitlines()[:3] == ["kept-1", "dropped", "kept-2"]
