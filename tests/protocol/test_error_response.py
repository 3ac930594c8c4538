"""The generic error response against the shapes Kafka 4.1's getErrorResponse builds."""

from __future__ import annotations

import uuid

from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import build, request_type
from odradek.protocol.error_response import answer_version, closes_instead, error_response
from odradek.protocol.fetch import FetchRequest, FetchRequestPartition, FetchTopic
from odradek.protocol.produce import PartitionProduceData, ProduceRequest, TopicProduceData

FAILED = -1


def test_produce_names_every_partition_with_kafkas_invalid_offsets() -> None:
    request = ProduceRequest(
        None,
        1,
        1000,
        (
            TopicProduceData(
                "t", None, (PartitionProduceData(0, b""), PartitionProduceData(3, b""))
            ),
        ),
    )
    answer = error_response(ApiKey.PRODUCE, 9, request)
    (topic,) = answer.responses
    assert topic.name == "t"
    assert [
        (p.index, int(p.error_code), p.base_offset, p.log_start_offset, p.error_message)
        for p in topic.partition_responses
    ] == [(0, FAILED, -1, -1, None), (3, FAILED, -1, -1, None)]
    assert not closes_instead(ApiKey.PRODUCE, request)
    assert closes_instead(ApiKey.PRODUCE, ProduceRequest(None, 0, 1000, ()))


def _fetch(topic_id: uuid.UUID) -> FetchRequest:
    request = FetchRequest()
    request.session_id = 77
    request.topics = [FetchTopic("t", topic_id, [FetchRequestPartition(5, -1, 10, -1, 0, 1 << 20)])]
    request.forgotten_topics_data = [FetchTopic("gone", topic_id, [1, 2])]
    return request


def test_fetch_below_v13_sets_every_partition_and_the_top_level() -> None:
    answer = error_response(ApiKey.FETCH, 12, _fetch(uuid.uuid4()))
    assert int(answer.error_code) == FAILED and answer.session_id == 77
    (topic,) = answer.responses  # the forgotten topics are not answered
    assert topic.topic == "t"
    ((index, code, high_watermark),) = [
        (p.partition_index, int(p.error_code), p.high_watermark) for p in topic.partitions
    ]
    assert (index, code, high_watermark) == (5, FAILED, -1)


def test_fetch_from_v13_sets_the_top_level_alone() -> None:
    answer = error_response(ApiKey.FETCH, 13, _fetch(uuid.uuid4()))
    assert int(answer.error_code) == FAILED and answer.responses == ()


def test_metadata_sets_each_topic_and_leaves_the_top_level_alone() -> None:
    request = build(
        request_type(ApiKey.METADATA, 13),
        {
            "topics": [{"name": "a", "topic_id": None}, {"name": "b", "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    answer = error_response(ApiKey.METADATA, 13, request)
    assert int(answer.error_code) == 0
    assert [(t.name, int(t.error_code), t.partitions) for t in answer.topics] == [
        ("a", FAILED, ()),
        ("b", FAILED, ()),
    ]


def test_offset_fetch_v8_answers_per_group_and_nothing_below() -> None:
    request = build(
        request_type(ApiKey.OFFSET_FETCH, 8),
        {
            "groups": [{"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 1]}]}],
            "require_stable": False,
        },
    )
    (group,) = error_response(ApiKey.OFFSET_FETCH, 8, request).groups
    assert (group.group_id, int(group.error_code), group.topics) == ("g", FAILED, ())


def test_offset_fetch_v1_answers_each_partition_named_by_index() -> None:
    request = build(
        request_type(ApiKey.OFFSET_FETCH, 1),
        {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0, 4]}]},
    )
    (topic,) = error_response(ApiKey.OFFSET_FETCH, 1, request).topics
    assert [
        (p.partition_index, int(p.error_code), p.committed_offset) for p in topic.partitions
    ] == [(0, FAILED, -1), (4, FAILED, -1)]


def test_bare_names_become_entities() -> None:
    groups = build(
        request_type(ApiKey.DESCRIBE_GROUPS, 5),
        {"groups": ["a", "b"], "include_authorized_operations": False},
    )
    answer = error_response(ApiKey.DESCRIBE_GROUPS, 5, groups)
    assert [(g.group_id, int(g.error_code)) for g in answer.groups] == [
        ("a", FAILED),
        ("b", FAILED),
    ]
    find = build(
        request_type(ApiKey.FIND_COORDINATOR, 4), {"key_type": 0, "coordinator_keys": ["g"]}
    )
    (coordinator,) = error_response(ApiKey.FIND_COORDINATOR, 4, find).coordinators
    assert (coordinator.key, int(coordinator.error_code), coordinator.node_id) == ("g", FAILED, -1)


def test_resources_keep_their_type_and_name() -> None:
    request = build(
        request_type(ApiKey.DESCRIBE_CONFIGS, 4),
        {
            "resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}],
            "include_synonyms": False,
            "include_documentation": False,
        },
    )
    (result,) = error_response(ApiKey.DESCRIBE_CONFIGS, 4, request).results
    assert (result.resource_type, result.resource_name, int(result.error_code), result.configs) == (
        2,
        "t",
        FAILED,
        (),
    )


def test_a_grouping_the_answer_lacks_is_flattened() -> None:
    """AlterReplicaLogDirs asks per directory and answers per topic (Kafka's too)."""
    request = build(
        request_type(ApiKey.ALTER_REPLICA_LOG_DIRS, 2),
        {
            "dirs": [
                {"path": "/a", "topics": [{"name": "t", "partitions": [0]}]},
                {"path": "/b", "topics": [{"name": "u", "partitions": [1, 2]}]},
            ]
        },
    )
    answer = error_response(ApiKey.ALTER_REPLICA_LOG_DIRS, 2, request)
    assert [
        (r.topic_name, [(p.partition_index, int(p.error_code)) for p in r.partitions])
        for r in answer.results
    ] == [("t", [(0, FAILED)]), ("u", [(1, FAILED), (2, FAILED)])]


def test_api_versions_answers_in_v0() -> None:
    assert answer_version(ApiKey.API_VERSIONS, 3) == 0
    assert answer_version(ApiKey.METADATA, 12) == 12
    request = build(
        request_type(ApiKey.API_VERSIONS, 3),
        {"client_software_name": "c", "client_software_version": "1"},
    )
    answer = error_response(ApiKey.API_VERSIONS, 3, request)
    assert int(answer.error_code) == FAILED and answer.api_keys == ()
