"""The rest of Kafka 4.1's admin surface (issue 19, item 6), through the clients' own calls.

kafka-python infers a 4.1 broker from Odradek's ApiVersions and then uses
AlterReplicaLogDirs, DescribeQuorum, DescribeTopicPartitions and
ListConfigResources from its admin client; confluent-kafka's
incremental_alter_configs / describe_configs check Kafka 4.1's answers for an
emptied `cleanup.policy` and for `min.insync.replicas`. Edge cases no client call
reaches are sent as raw frames. One broker with two log directories serves the
module.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from confluent_kafka.admin import NewTopic as CkNewTopic
from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import LogDirNotFoundError, NoError, ReplicaNotAvailableError
from kafka.structs import TopicPartitionReplica
from kio.schema.errors import ErrorCode

from odradek.protocol.apikeys import ApiKey
from odradek.testing import BrokerProcess

from .wire import WireClient

pytestmark = [pytest.mark.timeout(120), pytest.mark.embedded]

MOVE_TIMEOUT_S = 30


@pytest.fixture(scope="module")
def dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("admin-surface")
    return root / "disk1", root / "disk2"


@pytest.fixture(scope="module")
def broker(dirs: tuple[Path, Path]) -> Iterator[BrokerProcess]:
    first, second = dirs
    process = BrokerProcess(first, extra_args=["--data-dir", str(second)]).start()
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture(scope="module")
def kp_admin(broker: BrokerProcess) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        yield client
    finally:
        client.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{time.monotonic_ns()}"


def create(admin: KafkaAdminClient, name: str, partitions: int) -> str:
    admin.create_topics([NewTopic(name, partitions, 1)])
    return name


def placement(admin: KafkaAdminClient) -> dict[tuple[str, int], list[tuple[str, bool]]]:
    """(topic, partition) -> [(log dir, is future replica)] as DescribeLogDirs reports it."""
    [described] = admin.describe_log_dirs()
    found: dict[tuple[str, int], list[tuple[str, bool]]] = {}
    for log_dir in described["log_dirs"]:
        assert log_dir["error_code"] == 0
        for topic in log_dir["topics"]:
            for p in topic["partitions"]:
                found.setdefault((topic["name"], p["partition_index"]), []).append(
                    (log_dir["log_dir"], p["is_future_key"])
                )
    return found


# --- DescribeLogDirs / AlterReplicaLogDirs ------------------------------------------------


def test_describe_log_dirs_lists_both_directories_and_spreads_partitions(
    kp_admin: KafkaAdminClient, dirs: tuple[Path, Path]
) -> None:
    paths = [str(d) for d in dirs]

    def per_dir() -> list[int]:
        where = placement(kp_admin)
        return [sum(1 for places in where.values() if places[0][0] == p) for p in paths]

    before = per_dir()  # the internal topics' partitions, spread already
    assert abs(before[0] - before[1]) <= 1
    topic = create(kp_admin, unique("spread"), 6)
    [described] = kp_admin.describe_log_dirs()
    assert described["broker"] == 0
    assert [d["log_dir"] for d in described["log_dirs"]] == paths
    for log_dir in described["log_dirs"]:
        assert log_dir["error_code"] == 0
        assert log_dir["total_bytes"] > 0 and log_dir["usable_bytes"] > 0
    where = placement(kp_admin)
    mine = [where[topic, p] for p in range(6)]
    assert all(len(places) == 1 and not places[0][1] for places in mine)
    # Each partition went to the directory holding the fewest: they alternate.
    assert sorted(sum(1 for places in mine if places[0][0] == p) for p in paths) == [3, 3]
    after = per_dir()
    assert abs(after[0] - after[1]) <= 1


def test_alter_replica_log_dirs_moves_a_partition_and_answers_kafkas_errors(
    kp_admin: KafkaAdminClient, dirs: tuple[Path, Path]
) -> None:
    topic = create(kp_admin, unique("move"), 1)
    here = placement(kp_admin)[topic, 0][0][0]
    there = next(str(d) for d in dirs if str(d) != here)
    replica = TopicPartitionReplica(topic, 0, 0)

    # As kafka-python's own integration test: moving to the current directory is a no-op.
    assert kp_admin.alter_replica_log_dirs({replica: here}) == {replica: NoError}
    assert kp_admin.alter_replica_log_dirs({replica: "/no/such/dir"}) == {
        replica: LogDirNotFoundError
    }
    missing = TopicPartitionReplica(unique("absent"), 0, 0)
    assert kp_admin.alter_replica_log_dirs({missing: there}) == {missing: ReplicaNotAvailableError}

    assert kp_admin.alter_replica_log_dirs({replica: there}) == {replica: NoError}
    deadline = time.monotonic() + MOVE_TIMEOUT_S
    while placement(kp_admin)[topic, 0] != [(there, False)]:
        assert time.monotonic() < deadline, placement(kp_admin)[topic, 0]
        time.sleep(0.05)
    assert (Path(there) / f"{topic}-0").is_dir()
    assert not (Path(here) / f"{topic}-0").exists()


# --- DescribeQuorum -----------------------------------------------------------------------


def test_describe_metadata_quorum_names_the_node_as_its_only_voter_and_leader(
    kp_admin: KafkaAdminClient, broker: BrokerProcess
) -> None:
    before = kp_admin.describe_metadata_quorum()["topics"][0]["partitions"][0]
    create(kp_admin, unique("quorum"), 1)
    result = kp_admin.describe_metadata_quorum()
    [topic] = result["topics"]
    assert topic["topic_name"] == "__cluster_metadata"
    [partition] = topic["partitions"]
    assert partition["partition_index"] == 0 and partition["error"] is None
    assert partition["leader_id"] == 0
    assert partition["leader_epoch"] >= 1
    assert partition["high_watermark"] > before["high_watermark"]  # a metadata change
    [voter] = partition["current_voters"]
    assert voter["replica_id"] == 0
    assert voter["log_end_offset"] == partition["high_watermark"]
    assert partition["observers"] == []
    [node] = result["nodes"]
    assert node["node_id"] == 0
    assert [(ln["host"], ln["port"]) for ln in node["listeners"]] == [(broker.host, broker.port)]


def test_each_start_is_a_new_metadata_epoch_and_each_change_an_offset(tmp_path: Path) -> None:
    """What a single node's DescribeQuorum reports: one more epoch per start, as each
    start of a one-voter KRaft quorum is an election; one more offset per change."""
    import asyncio

    from odradek.broker.config import BrokerConfig
    from odradek.broker.topics import NewTopic as Wanted
    from odradek.broker.topics import TopicManager

    first = TopicManager(tmp_path, BrokerConfig())
    epoch, offset = first.leader_epoch, first.metadata_offset
    asyncio.run(first.create_topics([Wanted("a"), Wanted("b")]))
    assert first.metadata_offset == offset + 2
    first.close()
    second = TopicManager(tmp_path, BrokerConfig())
    try:
        assert (second.leader_epoch, second.metadata_offset) == (epoch + 1, offset + 2)
    finally:
        second.close()


def test_describe_quorum_of_another_partition_is_an_invalid_request(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        response = client.request(
            ApiKey.DESCRIBE_QUORUM,
            2,
            {"topics": [{"topic_name": "orders", "partitions": [{"partition_index": 0}]}]},
        )
    assert response.error_code == ErrorCode.invalid_request
    assert response.topics == ()


# --- DescribeTopicPartitions --------------------------------------------------------------


def test_describe_topic_partitions_as_kafka_pythons_integration_test(
    kp_admin: KafkaAdminClient,
) -> None:
    topic = create(kp_admin, unique("dtp"), 4)
    result = kp_admin.describe_topic_partitions([topic])
    assert result["next_cursor"] is None
    [described] = result["topics"]
    assert (described["name"], described["error_code"]) == (topic, 0)
    assert [p["partition_index"] for p in described["partitions"]] == [0, 1, 2, 3]
    for p in described["partitions"]:
        assert (p["error_code"], p["leader_id"], p["replica_nodes"]) == (0, 0, [0])
        assert p["isr_nodes"] == [0]


def test_describe_topic_partitions_pages_with_a_cursor(kp_admin: KafkaAdminClient) -> None:
    base = unique("page")
    a, b, c = (create(kp_admin, f"{base}-{n}", k) for n, k in (("a", 3), ("b", 2), ("c", 1)))
    names = [c, a, b]  # answered in name order whatever the request's order

    def page(limit: int, cursor: dict[str, object] | None) -> tuple[list[tuple[str, int]], object]:
        result = kp_admin.describe_topic_partitions(
            names, response_partition_limit=limit, cursor=cursor
        )
        got = [(t["name"], p["partition_index"]) for t in result["topics"] for p in t["partitions"]]
        return got, result["next_cursor"]

    first, cursor = page(2, None)
    assert first == [(a, 0), (a, 1)]
    assert cursor == {"topic_name": a, "partition_index": 2}
    second, cursor = page(2, cursor)
    assert second == [(a, 2), (b, 0)]
    assert cursor == {"topic_name": b, "partition_index": 1}
    third, cursor = page(2, cursor)
    assert third == [(b, 1), (c, 0)]
    assert cursor is None
    # A page that ends exactly at a topic's end points at the next topic's first partition.
    exact, cursor = page(3, None)
    assert exact == [(a, 0), (a, 1), (a, 2)]
    assert cursor == {"topic_name": b, "partition_index": 0}


def test_describe_topic_partitions_errors(
    broker: BrokerProcess, kp_admin: KafkaAdminClient
) -> None:
    known = create(kp_admin, unique("known"), 1)
    absent = unique("absent")
    with WireClient(broker.bootstrap) as client:
        response = client.request(
            ApiKey.DESCRIBE_TOPIC_PARTITIONS,
            0,
            {"topics": [{"name": known}, {"name": absent}, {"name": "bad/name"}]},
        )
        codes = {t.name: t.error_code for t in response.topics}
        assert codes == {
            known: ErrorCode.none,
            absent: ErrorCode.unknown_topic_or_partition,
            "bad/name": ErrorCode.invalid_topic_exception,
        }
        outside = client.request(
            ApiKey.DESCRIBE_TOPIC_PARTITIONS,
            0,
            {
                "topics": [{"name": known}],
                "cursor": {"topic_name": absent, "partition_index": 0},
            },
        )
    assert [(t.name, t.error_code) for t in outside.topics] == [(known, ErrorCode.invalid_request)]


# --- ListConfigResources ------------------------------------------------------------------


def test_list_config_resources_lists_brokers_and_topics(kp_admin: KafkaAdminClient) -> None:
    topic = create(kp_admin, unique("configs"), 1)
    every = kp_admin.list_config_resources()
    assert every["broker"] == ["0"]
    assert topic in every["topic"] and "__consumer_offsets" in every["topic"]
    assert set(every) == {"broker", "topic"}  # no groups, client metrics or loggers here
    only_topics = kp_admin.list_config_resources(["TOPIC"])
    assert set(only_topics) == {"topic"} and topic in only_topics["topic"]


def test_list_config_resources_v0_and_unsupported_types(broker: BrokerProcess) -> None:
    with WireClient(broker.bootstrap) as client:
        v0 = client.request(ApiKey.LIST_CONFIG_RESOURCES, 0, {})
        unsupported = client.request(ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": (64,)})
    assert (v0.error_code, v0.config_resources) == (ErrorCode.none, ())  # no client metrics
    assert unsupported.error_code == ErrorCode.unsupported_version


# --- IncrementalAlterConfigs / DescribeConfigs (confluent-kafka) --------------------------


def test_incremental_alter_configs_as_confluent_kafkas_integration_test(
    broker: BrokerProcess,
) -> None:
    """confluent-kafka-python's test_incremental_alter_configs, against Kafka 4.1's answers:
    SUBTRACT of cleanup.policy's only value leaves it empty, and every topic reports the
    cluster-wide dynamic min.insync.replicas."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    names = [unique("iac1"), unique("iac2")]
    created = admin.create_topics(
        [CkNewTopic(n, 2, 1, config={"compression.type": "gzip"}) for n in names]
    )
    for future in created.values():
        future.result(timeout=10)
    res1 = ConfigResource(
        ResourceType.TOPIC,
        names[0],
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
            ConfigEntry("retention.ms", "10000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    res2 = ConfigResource(
        ResourceType.TOPIC,
        names[1],
        incremental_configs=[
            ConfigEntry(
                "cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT
            ),
            ConfigEntry("retention.ms", "5000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    for future in admin.incremental_alter_configs([res1, res2]).values():
        assert future.result(timeout=10) is None

    def non_default(name: str) -> list[str]:
        resource = ConfigResource(ResourceType.TOPIC, name)
        configs = admin.describe_configs([resource])[resource].result(timeout=10)
        return sorted(str(e) for e in configs.values() if not e.is_default)

    assert non_default(names[0]) == [
        'cleanup.policy="delete,compact"',
        'compression.type="gzip"',
        'min.insync.replicas="1"',
        'retention.ms="10000"',
    ]
    assert non_default(names[1]) == [
        'cleanup.policy=""',
        'compression.type="gzip"',
        'min.insync.replicas="1"',
        'retention.ms="5000"',
    ]
    again = ConfigResource(
        ResourceType.TOPIC,
        names[1],
        incremental_configs=[
            ConfigEntry("compression.type", None, incremental_operation=AlterConfigOpType.DELETE),
            ConfigEntry("retention.ms", "10000", incremental_operation=AlterConfigOpType.SET),
        ],
    )
    admin.incremental_alter_configs([again])[again].result(timeout=10)
    assert non_default(names[1]) == [
        'cleanup.policy=""',
        'min.insync.replicas="1"',
        'retention.ms="10000"',
    ]
    resource = ConfigResource(ResourceType.TOPIC, names[1])
    entry = admin.describe_configs([resource])[resource].result(timeout=10)["min.insync.replicas"]
    assert entry.source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


def test_min_insync_replicas_source_and_synonyms_are_kafka_4_1s(
    broker: BrokerProcess, kp_admin: KafkaAdminClient
) -> None:
    topic = create(kp_admin, unique("misr"), 1)
    with WireClient(broker.bootstrap) as client:
        response = client.request(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            {
                "resources": [
                    {"resource_type": 2, "resource_name": topic, "configuration_keys": None},
                    {"resource_type": 4, "resource_name": "0", "configuration_keys": None},
                ],
                "include_synonyms": True,
                "include_documentation": False,
            },
        )
    for result in response.results:
        entry = {c.name: c for c in result.configs}["min.insync.replicas"]
        assert (entry.value, entry.config_source) == ("1", 3)  # DYNAMIC_DEFAULT_BROKER_CONFIG
        assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
            ("min.insync.replicas", "1", 3),
            ("min.insync.replicas", "1", 5),  # DEFAULT_CONFIG (no static setting given)
        ]
