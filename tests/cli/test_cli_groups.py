"""`odradek groups`: list, describe (committed / log end / lag), delete, reset-offsets,
delete-offsets, history; offsets are committed with confluent-kafka, a real client."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

pytestmark = pytest.mark.timeout(90)

PER_PARTITION = {0: 10, 1: 20, 2: 5}


@pytest.fixture
def topic(cli, name) -> str:
    t = name("t")
    assert cli("topics", "create", t, "--partitions", "3").code == 0
    for partition, count in PER_PARTITION.items():
        lines = "".join(f"p{partition}-{i}\n" for i in range(count))
        assert cli("produce", t, "--partition", str(partition), stdin=lines).code == 0
    return t


def commit(bootstrap: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    """Commit known offsets as a simple group (no membership), with librdkafka."""
    consumer = KafkaConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.commit(
            offsets=[KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()],
            asynchronous=False,
        )
    finally:
        consumer.close()


class Member:
    """A live confluent-kafka group member that has consumed (and committed) everything."""

    def __init__(
        self, bootstrap: str, group: str, topic: str, total: int, protocol: str = "classic"
    ) -> None:
        self.consumer: KafkaConsumer | None = KafkaConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "client.id": "cli-test-member",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "group.protocol": protocol,
            }
        )
        self.consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < total and time.monotonic() < deadline:
            msg = self.consumer.poll(0.2)
            if msg is not None and not msg.error():
                seen += 1
        assert seen == total, f"consumed {seen} of {total}"
        self.consumer.commit(asynchronous=False)

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


@pytest.fixture
def member(bootstrap, name, topic):
    made: list[Member] = []

    def start(group: str, protocol: str = "classic") -> Member:
        m = Member(bootstrap, group, topic, sum(PER_PARTITION.values()), protocol)
        made.append(m)
        return m

    yield start
    for m in made:
        m.close()


def test_describe_json_reports_committed_log_end_and_lag(cli, bootstrap, name, topic) -> None:
    group = name("g")
    commit(bootstrap, group, {(topic, 0): 4, (topic, 1): 20})
    result = cli("groups", "describe", group, "--format", "json")
    assert result.code == 0, result.err
    report = result.json()
    assert report["group"] == group and report["state"] == "Empty"
    assert report["members"] == [] and report["protocol_type"] == ""
    rows = {(p["topic"], p["partition"]): p for p in report["partitions"]}
    assert set(rows) == {(topic, 0), (topic, 1)}
    assert (rows[topic, 0]["committed_offset"], rows[topic, 0]["log_end_offset"]) == (4, 10)
    assert rows[topic, 0]["lag"] == 6
    assert (rows[topic, 1]["committed_offset"], rows[topic, 1]["log_end_offset"]) == (20, 20)
    assert rows[topic, 1]["lag"] == 0
    assert report["totals"] == {"committed_offset": 24, "log_end_offset": 30, "lag": 6}

    table = cli("groups", "describe", group)
    assert table.code == 0
    assert any(line.split() == [topic, "0", "4", "10", "6", "-"] for line in table.lines)
    assert any(line.split() == ["TOTAL", "24", "30", "6"] for line in table.lines)
    assert "simple (offsets only" in table.out
    # A group that never had members says so (it has no generation, it is not unknown).
    assert report["generation"] is None and report["generation_source"] == "no members ever"
    assert "none (no member has ever joined this group)" in table.out


def test_describe_a_live_group(cli, bootstrap, name, topic, member) -> None:
    group = name("g")
    member(group)
    report = cli("groups", "describe", group, "--format", "json").json()
    assert report["state"] == "Stable" and report["protocol_type"] == "consumer"
    assert report["protocol"] in ("range", "roundrobin", "cooperative-sticky")
    [m] = report["members"]
    assert m["client_id"] == "cli-test-member" and m["host"].endswith("127.0.0.1")
    assert m["leader"] and report["leader"] == m["member_id"]
    assert sorted(a["partition"] for a in m["assignment"]) == [0, 1, 2]
    assert m["subscription"] == [topic]
    assert report["generation"] >= 1 and report["generation_source"] == "history"
    for row in report["partitions"]:
        assert row["committed_offset"] == row["log_end_offset"] == PER_PARTITION[row["partition"]]
        assert row["lag"] == 0 and row["member_id"] == m["member_id"]
    assert report["totals"] == {"committed_offset": 35, "log_end_offset": 35, "lag": 0}

    table = cli("groups", "describe", group)
    assert "(leader)" in table.out and "Stable" in table.out
    assert f"{topic}: 0, 1, 2" in table.out
    generation = next(line for line in table.lines if line.startswith("Generation"))
    assert generation.split()[1] == str(report["generation"])
    wide = cli("groups", "describe", group, "--wide")
    assert m["member_id"] in wide.out


def test_list_groups(cli, bootstrap, name, topic, member) -> None:
    simple, live = name("simple"), name("live")
    commit(bootstrap, simple, {(topic, 0): 1})
    member(live)
    listed = {g["group"]: g for g in cli("groups", "list", "--format", "json").json()}
    assert listed[simple]["state"] == "Empty" and listed[simple]["protocol_type"] == ""
    assert listed[live]["state"] == "Stable" and listed[live]["protocol_type"] == "consumer"
    stable = cli("groups", "list", "--state", "Stable")
    assert live in stable.out and simple not in stable.out
    table = cli("groups", "list")
    row = next(line for line in table.lines if line.split()[:1] == [live])
    assert row.split()[1:3] == ["Stable", "consumer"]


def test_delete_groups(cli, bootstrap, name, topic, member) -> None:
    empty, live, missing = name("empty"), name("live"), name("missing")
    commit(bootstrap, empty, {(topic, 0): 3})
    member(live)
    refused = cli("groups", "delete", live)
    assert refused.code == 1
    assert refused.err.strip() == (
        f"odradek: group '{live}' still has members: only an Empty group can be deleted "
        "(stop its consumers first)"
    )
    unknown = cli("groups", "delete", missing)
    assert unknown.code == 1
    assert unknown.err.strip() == f"odradek: group '{missing}' does not exist"
    deleted = cli("groups", "delete", empty)
    assert deleted.code == 0 and deleted.out.strip() == f"Deleted group '{empty}'."
    gone = cli("groups", "describe", empty)
    assert gone.code == 1 and gone.err.strip() == f"odradek: group '{empty}' does not exist"


def offsets_of(cli, group: str) -> dict[int, int | None]:
    report = cli("groups", "describe", group, "--format", "json").json()
    return {p["partition"]: p["committed_offset"] for p in report["partitions"]}


def test_reset_offsets_modes(cli, bootstrap, name, topic) -> None:
    group = name("g")
    commit(bootstrap, group, {(topic, 0): 5, (topic, 1): 5, (topic, 2): 5})

    dry = cli("groups", "reset-offsets", group, "--to-earliest", "--format", "json")
    assert dry.code == 0, dry.err
    plan = dry.json()
    assert plan["executed"] is False
    assert [(p["partition"], p["current_offset"], p["new_offset"]) for p in plan["partitions"]] == [
        (0, 5, 0),
        (1, 5, 0),
        (2, 5, 0),
    ]
    assert offsets_of(cli, group) == {0: 5, 1: 5, 2: 5}  # a dry run changes nothing
    table = cli("groups", "reset-offsets", group, "--to-latest")
    assert "Dry run: nothing was changed" in table.out
    assert any(line.split() == [topic, "1", "5", "20", "+15"] for line in table.lines)

    done = cli("groups", "reset-offsets", group, "--to-latest", "--execute")
    assert done.code == 0 and "Committed 3 offsets" in done.out
    assert offsets_of(cli, group) == {0: 10, 1: 20, 2: 5}

    cli("groups", "reset-offsets", group, "--shift-by", "-3", "--execute")
    assert offsets_of(cli, group) == {0: 7, 1: 17, 2: 2}
    cli(
        "groups", "reset-offsets", group, "--shift-by", "-100", "--topic", f"{topic}:1", "--execute"
    )
    assert offsets_of(cli, group) == {0: 7, 1: 0, 2: 2}  # kept within the log
    cli("groups", "reset-offsets", group, "--to-offset", "12", "--topic", topic, "--execute")
    assert offsets_of(cli, group) == {0: 10, 1: 12, 2: 5}  # ... at both ends
    cli("groups", "reset-offsets", group, "--to-earliest", "--topic", f"{topic}:0,2", "--execute")
    assert offsets_of(cli, group) == {0: 0, 1: 12, 2: 0}


def test_reset_to_datetime(cli, bootstrap, name, topic) -> None:
    group = name("g")
    commit(bootstrap, group, {(topic, 0): 0})
    time.sleep(0.05)
    boundary = datetime.now(UTC)
    time.sleep(0.05)
    cli("produce", topic, "--partition", "0", stdin="late-1\nlate-2\n")
    iso = boundary.isoformat().replace("+00:00", "Z")
    result = cli("groups", "reset-offsets", group, "--to-datetime", iso, "--execute")
    assert result.code == 0, result.err
    assert offsets_of(cli, group)[0] == PER_PARTITION[0]  # the first record after the time
    future = cli(
        "groups", "reset-offsets", group, "--to-datetime", "2999-01-01T00:00:00", "--execute"
    )
    assert future.code == 0
    assert offsets_of(cli, group)[0] == PER_PARTITION[0] + 2  # nothing after: the log end


def test_reset_refuses_a_live_group(cli, bootstrap, name, topic, member) -> None:
    group = name("g")
    member(group)
    for extra in ((), ("--execute",)):
        result = cli("groups", "reset-offsets", group, "--to-earliest", *extra)
        assert result.code == 1
        [line] = result.err.strip().splitlines()
        assert line == (
            f"odradek: cannot reset the offsets of group '{group}': it is Stable with 1 member; "
            "offsets can only be changed while the group is inactive (Empty): stop its "
            "consumers first"
        )
    assert offsets_of(cli, group) == PER_PARTITION


def test_reset_errors(cli, bootstrap, name, topic) -> None:
    group, fresh = name("g"), name("fresh")
    commit(bootstrap, group, {(topic, 0): 5})
    no_commit = cli("groups", "reset-offsets", group, "--shift-by", "1", "--topic", topic)
    assert no_commit.code == 1 and f"cannot shift {topic}:1" in no_commit.err
    nothing = cli("groups", "reset-offsets", fresh, "--to-earliest")
    assert nothing.code == 1 and "has no committed offsets" in nothing.err
    missing = name("missing")
    unknown_topic = cli("groups", "reset-offsets", group, "--to-earliest", "--topic", missing)
    assert unknown_topic.code == 1
    assert unknown_topic.err.strip() == f"odradek: topic '{missing}' does not exist"
    bad_partition = cli("groups", "reset-offsets", group, "--to-earliest", "--topic", f"{topic}:9")
    assert bad_partition.code == 2 and "has partitions 0-2" in bad_partition.err
    # A group that does not exist yet can be given offsets, as in Kafka.
    created = cli("groups", "reset-offsets", fresh, "--to-latest", "--topic", topic, "--execute")
    assert created.code == 0
    assert offsets_of(cli, fresh) == PER_PARTITION


def test_delete_offsets(cli, bootstrap, name, topic, member) -> None:
    group = name("g")
    commit(bootstrap, group, {(topic, 0): 4, (topic, 1): 4})
    result = cli("groups", "delete-offsets", group, "--topic", f"{topic}:0")
    assert result.code == 0, result.err
    assert result.out.strip() == f"Deleted 1 committed offset of group '{group}'."
    assert offsets_of(cli, group) == {1: 4}
    live = name("live")
    member(live)
    refused = cli("groups", "delete-offsets", live, "--topic", topic)
    assert refused.code == 1 and "is subscribed to topic" in refused.err


def test_unknown_group(cli, name) -> None:
    missing = name("missing")
    described = cli("groups", "describe", missing)
    assert described.code == 1
    assert described.err.strip() == f"odradek: group '{missing}' does not exist"
    history = cli("groups", "history", missing)
    assert history.code == 0
    assert history.out.strip() == f"No rebalance history for group '{missing}'."


def test_history_of_a_member_that_came_and_went(cli, bootstrap, name, topic, member) -> None:
    group = name("g")
    member(group).close()
    result = cli("groups", "history", group, "--format", "json")
    assert result.code == 0, result.err
    history = result.json()
    [joined, emptied] = history["rebalances"]
    assert joined["state"] == "Stable" and len(joined["joined"]) == 1
    assert joined["states"] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable"]
    assert emptied["state"] == "Empty" and emptied["left"] == joined["joined"]
    assert history["summary"]["state"] == "Empty"
    table = cli("groups", "history", group, "--wide")
    assert "Empty → PreparingRebalance" in table.out
    assert "✔ rebalance #1 done → Stable" in table.out
    assert "2 rebalances completed (1 ended with no members)" in table.out
    # Every line is prose: the leaving member by its id, no Python list syntax.
    [left] = emptied["left"]
    reasons = [e.get("reason", "") for e in history["events"]]
    assert any(r.startswith(f"member {left} left the group") for r in reasons), reasons
    assert "[" not in table.out


def test_a_consumer_protocol_group(cli, bootstrap, name, topic, member) -> None:
    """A KIP-848 group (group.protocol=consumer): list shows its protocol, describe its
    epochs, server-side assignor and each member's epoch, current and target assignment;
    history its epochs and reconciliations."""
    group, classic = name("kip848"), name("classic")
    live = member(group, "consumer")
    member(classic)
    listed = {g["group"]: g for g in cli("groups", "list", "--format", "json").json()}
    assert listed[group]["type"] == "consumer" and listed[group]["state"] == "Stable"
    assert listed[classic]["type"] == "classic"
    only = cli("groups", "list", "--type", "consumer", "--format", "json").json()
    assert group in {g["group"] for g in only} and classic not in {g["group"] for g in only}
    row = next(line for line in cli("groups", "list").lines if line.split()[:1] == [group])
    assert row.split()[1:4] == ["Stable", "consumer", "consumer"]

    report = cli("groups", "describe", group, "--format", "json").json()
    assert report["type"] == "consumer" and report["state"] == "Stable"
    assert report["protocol"] == "uniform" and report["leader"] is None
    assert report["group_epoch"] >= 1 and report["assignment_epoch"] == report["group_epoch"]
    assert report["generation"] == report["group_epoch"]
    [m] = report["members"]
    assert m["member_epoch"] == report["group_epoch"] and m["member_type"] == "consumer"
    assert sorted(a["partition"] for a in m["assignment"]) == [0, 1, 2]
    assert m["target_assignment"] == m["assignment"] and m["subscription"] == [topic]
    table = cli("groups", "describe", group)
    assert "consumer (KIP-848), server-side assignor uniform" in table.out
    epochs = next(line for line in table.lines if line.startswith("Group epoch"))
    assert epochs.split()[2] == str(report["group_epoch"])
    assert "Leader" not in table.out and f"{topic}: 0, 1, 2" in table.out

    live.close()
    history = cli("groups", "history", group, "--format", "json").json()
    kinds = [e["kind"] for e in history["events"]]
    assert {"group_epoch_bumped", "target_assignment_computed", "member_reconciled"} <= set(kinds)
    joined, emptied = history["rebalances"]
    assert joined["state"] == "Stable" and len(joined["joined"]) == 1
    assert emptied["state"] == "Empty" and emptied["left"] == joined["joined"]
    assert history["summary"]["protocol"] == "consumer"
    assert history["summary"]["state"] == "Empty"
    text = cli("groups", "history", group).out
    assert "group epoch → " in text and "target assignment" in text and "reconciled" in text
    assert "Now Empty, group epoch" in text
