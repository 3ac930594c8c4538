"""`odradek topics`: create, list, describe, alter, delete, and their error paths."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(60)


def test_create_describe_list_alter_delete(cli, name) -> None:
    topic = name("t")
    created = cli(
        "topics", "create", topic, "--partitions", "3", "--config", "retention.ms=3600000"
    )
    assert created.code == 0, created.err
    assert created.out.strip() == f"Created topic '{topic}' with 3 partitions."

    produced = cli("produce", topic, "--partition", "1", stdin="a\nb\nc\n")
    assert produced.code == 0, produced.err

    described = cli("topics", "describe", topic, "--format", "json")
    assert described.code == 0, described.err
    [info] = described.json()
    assert info["name"] == topic and not info["internal"]
    assert [p["partition"] for p in info["partitions"]] == [0, 1, 2]
    ends = {
        p["partition"]: (p["log_start_offset"], p["log_end_offset"]) for p in info["partitions"]
    }
    assert ends == {0: (0, 0), 1: (0, 3), 2: (0, 0)}
    assert info["configs"]["retention.ms"]["value"] == "3600000"
    assert not info["configs"]["retention.ms"]["default"]

    table = cli("topics", "describe", topic)
    assert table.code == 0
    # Config names are padded to one column (min.insync.replicas is shown too).
    assert any(line.split()[-3:] == ["retention.ms", "=", "3600000"] for line in table.lines)
    header = next(line for line in table.lines if line.startswith("PARTITION"))
    assert header.split() == [
        "PARTITION",
        "LEADER",
        "REPLICAS",
        "ISR",
        "LOG",
        "START",
        "LOG",
        "END",
        "RECORDS",
    ]
    row1 = next(line for line in table.lines if line.split()[:1] == ["1"])
    assert row1.split()[-3:] == ["0", "3", "3"]
    assert any(line.split() == ["TOTAL", "3"] for line in table.lines)
    assert all(line == line.rstrip() for line in table.lines)  # no padding in a pipe

    listed = cli("topics", "list")
    row = next(line for line in listed.lines if line.split()[:1] == [topic])
    assert row.split() == [topic, "3", "3"]
    assert "__consumer_offsets" not in listed.out
    assert "__consumer_offsets" in cli("topics", "list", "--internal").out
    as_json = {t["name"]: t for t in cli("topics", "list", "--format", "json").json()}
    assert as_json[topic] == {"name": topic, "internal": False, "partitions": 3, "records": 3}

    altered = cli(
        "topics",
        "alter",
        topic,
        "--partitions",
        "5",
        "--config",
        "cleanup.policy=compact",
        "--delete-config",
        "retention.ms",
    )
    assert altered.code == 0, altered.err
    assert f"Topic '{topic}' now has 5 partitions (was 3)." in altered.out
    [after] = cli("topics", "describe", topic, "--format", "json").json()
    assert len(after["partitions"]) == 5
    assert after["configs"]["cleanup.policy"]["value"] == "compact"
    assert after["configs"]["retention.ms"]["default"]

    deleted = cli("topics", "delete", topic)
    assert deleted.code == 0 and deleted.out.strip() == f"Deleted topic '{topic}'."
    assert topic not in cli("topics", "list").out


def test_create_uses_the_broker_default_partition_count(cli, name) -> None:
    topic = name("t")
    result = cli("topics", "create", topic)
    assert result.code == 0
    assert result.out.startswith(f"Created topic '{topic}' with ")


def test_create_existing_topic(cli, name) -> None:
    topic = name("t")
    assert cli("topics", "create", topic).code == 0
    again = cli("topics", "create", topic)
    assert again.code == 1
    assert again.err.strip() == f"odradek: topic '{topic}' already exists"
    tolerated = cli("topics", "create", topic, "--if-not-exists")
    assert tolerated.code == 0 and "already exists" in tolerated.out


def test_invalid_topic_config_is_refused(cli, name) -> None:
    result = cli("topics", "create", name("t"), "--config", "cleanup.policy=sometimes")
    assert result.code == 1
    assert len(result.err.strip().splitlines()) == 1
    assert "cannot create topic" in result.err


def test_unknown_topic(cli, name) -> None:
    missing = name("missing")
    for args in (
        ("topics", "describe", missing),
        ("topics", "delete", missing),
        ("topics", "alter", missing, "--partitions", "4"),
    ):
        result = cli(*args)
        assert result.code == 1, args
        assert result.err.strip() == f"odradek: topic '{missing}' does not exist", args
    assert cli("topics", "delete", missing, "--if-exists").code == 0


def test_partitions_cannot_shrink(cli, name) -> None:
    topic = name("t")
    cli("topics", "create", topic, "--partitions", "3")
    result = cli("topics", "alter", topic, "--partitions", "2")
    assert result.code == 1
    assert "partitions can only be added" in result.err
    same = cli("topics", "alter", topic, "--partitions", "3")
    assert same.code == 0 and "already has 3 partitions" in same.out


def test_several_failures_are_one_line_each(cli, name) -> None:
    a, b = name("missing-a"), name("missing-b")
    result = cli("topics", "delete", a, b)
    assert result.code == 1
    assert result.err.strip().splitlines() == [
        f"odradek: topic '{a}' does not exist",
        f"odradek: topic '{b}' does not exist",
    ]


def test_delete_records_and_log_dir_sizes(cli, name) -> None:
    topic = name("t")
    assert cli("topics", "create", topic, "--partitions", "2").code == 0
    assert cli("produce", topic, "--partition", "0", stdin="a\nb\nc\n").code == 0
    assert cli("produce", topic, "--partition", "1", stdin="d\n").code == 0

    some = cli("topics", "delete-records", topic, "--offset", "2", "--partition", "0")
    assert some.code == 0, some.err
    assert some.out.strip() == f"Partition 0 of '{topic}' now starts at offset 2."
    [info] = cli("topics", "describe", topic, "--format", "json").json()
    starts = {p["partition"]: p["log_start_offset"] for p in info["partitions"]}
    assert starts == {0: 2, 1: 0}

    everything = cli("topics", "delete-records", topic, "--offset", "end")
    assert everything.code == 0, everything.err
    assert everything.lines == [
        f"Partition 0 of '{topic}' now starts at offset 3.",
        f"Partition 1 of '{topic}' now starts at offset 1.",
    ]

    [sized] = cli("topics", "describe", topic, "--log-dirs", "--format", "json").json()
    for partition in sized["partitions"]:
        assert partition["log_dir"] and partition["size_bytes"] >= 0
        assert partition["records"] == 0
    table = cli("topics", "describe", topic, "--log-dirs")
    header = next(line for line in table.lines if line.startswith("PARTITION"))
    assert header.split()[-1] == "BYTES"
    assert any(line.startswith("Log dirs") for line in table.lines)


def test_delete_records_errors_are_one_line(cli, name) -> None:
    topic = name("t")
    assert cli("topics", "create", topic).code == 0
    past = cli("topics", "delete-records", topic, "--offset", "5")
    assert past.code == 1 and len(past.err.strip().splitlines()) == 1
    assert "offset out of range" in past.err
    internal = cli(
        "topics", "delete-records", "__consumer_offsets", "--offset", "0", "--partition", "0"
    )
    assert internal.code == 1
    assert internal.err.strip().endswith(": invalid topic"), internal.err
    no_partition = cli("topics", "delete-records", topic, "--offset", "0", "--partition", "9")
    assert no_partition.code == 1
    assert no_partition.err.strip().startswith(f"odradek: topic '{topic}' has no partition 9")
    bad_offset = cli("topics", "delete-records", topic, "--offset", "soon")
    assert bad_offset.code == 2
