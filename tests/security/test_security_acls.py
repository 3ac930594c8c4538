"""Every API checks what Kafka checks and answers Kafka's error code.

A table of (API, request, the ACL it needs, the error without it): a principal with
no ACLs (a client certificate, ``User:CN=<name>``) gets exactly that error; after the
one ACL is granted, the same request gets no authorization error; a super user gets
none either. Raw requests on the wire, so the codes are the broker's own.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from secure import SecureBroker, Wire, client_tls, unique

from odradek.client import AclOperation, ResourceType
from odradek.protocol.acl import CLUSTER_NAME
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.records import build_batch

TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
AUTHORIZATION_ERRORS = {
    TOPIC_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    CLUSTER_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
pytestmark = [pytest.mark.embedded, pytest.mark.timeout(120)]

Op = AclOperation
ZERO_UUID = uuid.UUID(int=0)
Res = ResourceType


@dataclass(frozen=True)
class Names:
    topic: str  # exists, one partition, one record, offsets committed by `group`
    group: str  # an empty group with a committed offset
    fresh_topic: str  # exists; may be deleted or altered by the case
    new_topic: str  # does not exist


@dataclass(frozen=True)
class Case:
    api: ApiKey
    version: int
    body: Callable[[Names], dict[str, Any]]
    code: Callable[[Any], int]  # the error code that answers the authorization question
    needs: Callable[[Names], tuple[ResourceType, str, AclOperation]]
    refused: int  # Kafka's code without that ACL
    given: Callable[[Names], list[tuple[ResourceType, str, AclOperation]]] = lambda n: []

    def __str__(self) -> str:
        return f"{self.api.name}-v{self.version}"


def _partition_code(response: Any, topics: str = "responses", parts: str = "partitions") -> int:
    topic = getattr(response, topics)[0]
    return int(getattr(topic, parts)[0].error_code)


def _heartbeat(n: Names, topics: list[str]) -> dict[str, Any]:
    """A consumer-group (KIP-848) join of a fresh member."""
    return {
        "group_id": n.group,
        "member_id": uuid.uuid4().hex,
        "member_epoch": 0,
        "rebalance_timeout": 30_000,
        "subscribed_topic_names": topics,
        "topic_partitions": [],
    }


def _batch() -> bytes:
    return build_batch([(None, b"x", ())], timestamp_ms=int(time.time() * 1000))


def _txn_batch() -> bytes:
    return build_batch(
        [(None, b"x", ())],
        timestamp_ms=int(time.time() * 1000),
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )


def _txn(n: Names) -> str:
    """The case's transactional id (unique per case, like its group)."""
    return f"txn-{n.group}"


def _add_partitions_v3(n: Names) -> dict[str, Any]:
    return {
        "v3_and_below_transactional_id": _txn(n),
        "v3_and_below_producer_id": 1,
        "v3_and_below_producer_epoch": 0,
        "v3_and_below_topics": [{"name": n.topic, "partitions": [0]}],
    }


def _add_partitions_code(r: Any) -> int:
    return int(r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code)


def _txn_offset_commit(n: Names) -> dict[str, Any]:
    return {
        "transactional_id": _txn(n),
        "group_id": n.group,
        "producer_id": 1,
        "producer_epoch": 0,
        "topics": [
            {
                "name": n.topic,
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                ],
            }
        ],
    }


CASES = [
    Case(
        ApiKey.PRODUCE,
        9,
        lambda n: {
            "acks": -1,
            "timeout": 10_000,
            "topic_data": [
                {"name": n.topic, "partition_data": [{"index": 0, "records": _batch()}]}
            ],
        },
        lambda r: int(r.responses[0].partition_responses[0].error_code),
        lambda n: (Res.TOPIC, n.topic, Op.WRITE),
        TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.FETCH,
        12,
        lambda n: {
            "max_wait": 0,
            "min_bytes": 1,
            "topics": [
                {
                    "topic": n.topic,
                    "partitions": [
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 65536}
                    ],
                }
            ],
            "forgotten_topics_data": [],
        },
        lambda r: int(r.responses[0].partitions[0].error_code),
        lambda n: (Res.TOPIC, n.topic, Op.READ),
        TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.LIST_OFFSETS,
        7,
        lambda n: {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [{"name": n.topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
        },
        lambda r: _partition_code(r, "topics"),
        lambda n: (Res.TOPIC, n.topic, Op.DESCRIBE),
        TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.METADATA,
        12,
        lambda n: {
            "topics": [{"name": n.topic, "topic_id": ZERO_UUID}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
        lambda r: int(r.topics[0].error_code),
        lambda n: (Res.TOPIC, n.topic, Op.DESCRIBE),
        TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.METADATA,
        12,
        lambda n: {  # auto-creation: CREATE on the topic (or the cluster)
            "topics": [{"name": n.new_topic, "topic_id": ZERO_UUID}],
            "allow_auto_topic_creation": True,
            "include_topic_authorized_operations": False,
        },
        lambda r: int(r.topics[0].error_code),
        lambda n: (Res.TOPIC, n.new_topic, Op.CREATE),
        TOPIC_AUTHORIZATION_FAILED,
        lambda n: [(Res.TOPIC, n.new_topic, Op.DESCRIBE)],  # CREATE does not imply DESCRIBE
    ),
    Case(
        ApiKey.CREATE_TOPICS,
        7,
        lambda n: {
            "topics": [
                {
                    "name": n.new_topic,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout": 10_000,
            "validate_only": True,
        },
        lambda r: int(r.topics[0].error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.CREATE),
        TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.DELETE_TOPICS,
        6,
        lambda n: {"topics": [{"name": n.fresh_topic, "topic_id": ZERO_UUID}], "timeout": 10_000},
        lambda r: int(r.responses[0].error_code),
        lambda n: (Res.TOPIC, n.fresh_topic, Op.DELETE),
        TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.DELETE_RECORDS,
        2,
        lambda n: {
            "topics": [
                {"name": n.fresh_topic, "partitions": [{"partition_index": 0, "offset": 0}]}
            ],
            "timeout": 10_000,
        },
        lambda r: int(r.topics[0].partitions[0].error_code),
        lambda n: (Res.TOPIC, n.fresh_topic, Op.DELETE),
        TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.DESCRIBE_LOG_DIRS,
        4,
        lambda n: {"topics": None},
        lambda r: int(r.error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.DESCRIBE),
        CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.CREATE_PARTITIONS,
        3,
        lambda n: {
            "topics": [{"name": n.fresh_topic, "count": 2, "assignments": None}],
            "timeout": 10_000,
            "validate_only": True,
        },
        lambda r: int(r.results[0].error_code),
        lambda n: (Res.TOPIC, n.fresh_topic, Op.ALTER),
        TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        lambda n: {
            "resources": [
                {"resource_type": 2, "resource_name": n.topic, "configuration_keys": None}
            ]
        },
        lambda r: int(r.results[0].error_code),
        lambda n: (Res.TOPIC, n.topic, Op.DESCRIBE_CONFIGS),
        TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        lambda n: {
            "resources": [{"resource_type": 4, "resource_name": "0", "configuration_keys": None}]
        },
        lambda r: int(r.results[0].error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.DESCRIBE_CONFIGS),
        CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        lambda n: {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": n.fresh_topic,
                    "configs": [
                        {"name": "retention.ms", "config_operation": 0, "value": "3600000"}
                    ],
                }
            ],
            "validate_only": True,
        },
        lambda r: int(r.responses[0].error_code),
        lambda n: (Res.TOPIC, n.fresh_topic, Op.ALTER_CONFIGS),
        TOPIC_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.ALTER_CONFIGS,
        2,
        lambda n: {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": "0",
                    "configs": [{"name": "num.partitions", "value": "2"}],
                }
            ],
            "validate_only": True,
        },
        lambda r: int(r.responses[0].error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.ALTER_CONFIGS),
        CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.INIT_PRODUCER_ID,
        4,
        lambda n: {"transactional_id": None, "transaction_timeout": 60_000},
        lambda r: int(r.error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE),
        CLUSTER_AUTHORIZATION_FAILED,
    ),
    # --- transactions ---
    Case(
        ApiKey.INIT_PRODUCER_ID,
        4,
        lambda n: {"transactional_id": _txn(n), "transaction_timeout": 60_000},
        lambda r: int(r.error_code),
        lambda n: (Res.TRANSACTIONAL_ID, _txn(n), Op.WRITE),
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.FIND_COORDINATOR,
        4,
        lambda n: {"key_type": 1, "coordinator_keys": [_txn(n)]},
        lambda r: int(r.coordinators[0].error_code),
        lambda n: (Res.TRANSACTIONAL_ID, _txn(n), Op.DESCRIBE),
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.PRODUCE,
        9,
        lambda n: {
            "transactional_id": _txn(n),
            "acks": -1,
            "timeout": 10_000,
            "topic_data": [
                {"name": n.topic, "partition_data": [{"index": 0, "records": _txn_batch()}]}
            ],
        },
        lambda r: int(r.responses[0].partition_responses[0].error_code),
        lambda n: (Res.TRANSACTIONAL_ID, _txn(n), Op.WRITE),
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        lambda n: [(Res.TOPIC, n.topic, Op.WRITE)],
    ),
    Case(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        _add_partitions_v3,
        _add_partitions_code,
        lambda n: (Res.TRANSACTIONAL_ID, _txn(n), Op.WRITE),
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        lambda n: [(Res.TOPIC, n.topic, Op.WRITE)],
    ),
    Case(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        2,
        _add_partitions_v3,
        _add_partitions_code,
        lambda n: (Res.TOPIC, n.topic, Op.WRITE),
        TOPIC_AUTHORIZATION_FAILED,
        lambda n: [(Res.TRANSACTIONAL_ID, _txn(n), Op.WRITE)],
    ),
    Case(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        4,
        lambda n: {
            "transactions": [
                {
                    "transactional_id": _txn(n),
                    "producer_id": 1,
                    "producer_epoch": 0,
                    "verify_only": True,
                    "topics": [{"name": n.topic, "partitions": [0]}],
                }
            ]
        },
        lambda r: int(r.error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.CLUSTER_ACTION),
        CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.ADD_OFFSETS_TO_TXN,
        3,
        lambda n: {
            "transactional_id": _txn(n),
            "producer_id": 1,
            "producer_epoch": 0,
            "group_id": n.group,
        },
        lambda r: int(r.error_code),
        lambda n: (Res.TRANSACTIONAL_ID, _txn(n), Op.WRITE),
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        lambda n: [(Res.GROUP, n.group, Op.READ)],
    ),
    Case(
        ApiKey.ADD_OFFSETS_TO_TXN,
        2,
        lambda n: {
            "transactional_id": _txn(n),
            "producer_id": 1,
            "producer_epoch": 0,
            "group_id": n.group,
        },
        lambda r: int(r.error_code),
        lambda n: (Res.GROUP, n.group, Op.READ),
        GROUP_AUTHORIZATION_FAILED,
        lambda n: [(Res.TRANSACTIONAL_ID, _txn(n), Op.WRITE)],
    ),
    Case(
        ApiKey.END_TXN,
        3,
        lambda n: {
            "transactional_id": _txn(n),
            "producer_id": 1,
            "producer_epoch": 0,
            "committed": True,
        },
        lambda r: int(r.error_code),
        lambda n: (Res.TRANSACTIONAL_ID, _txn(n), Op.WRITE),
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.TXN_OFFSET_COMMIT,
        3,
        _txn_offset_commit,
        lambda r: _partition_code(r, "topics"),
        lambda n: (Res.TRANSACTIONAL_ID, _txn(n), Op.WRITE),
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        lambda n: [(Res.GROUP, n.group, Op.READ), (Res.TOPIC, n.topic, Op.READ)],
    ),
    Case(
        ApiKey.TXN_OFFSET_COMMIT,
        2,
        _txn_offset_commit,
        lambda r: _partition_code(r, "topics"),
        lambda n: (Res.GROUP, n.group, Op.READ),
        GROUP_AUTHORIZATION_FAILED,
        lambda n: [(Res.TRANSACTIONAL_ID, _txn(n), Op.WRITE), (Res.TOPIC, n.topic, Op.READ)],
    ),
    Case(
        ApiKey.TXN_OFFSET_COMMIT,
        1,
        _txn_offset_commit,
        lambda r: _partition_code(r, "topics"),
        lambda n: (Res.TOPIC, n.topic, Op.READ),
        TOPIC_AUTHORIZATION_FAILED,
        lambda n: [(Res.TRANSACTIONAL_ID, _txn(n), Op.WRITE), (Res.GROUP, n.group, Op.READ)],
    ),
    Case(
        ApiKey.DESCRIBE_TRANSACTIONS,
        0,
        lambda n: {"transactional_ids": [_txn(n)]},
        lambda r: int(r.transaction_states[0].error_code),
        lambda n: (Res.TRANSACTIONAL_ID, _txn(n), Op.DESCRIBE),
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.FIND_COORDINATOR,
        4,
        lambda n: {"key_type": 0, "coordinator_keys": [n.group]},
        lambda r: int(r.coordinators[0].error_code),
        lambda n: (Res.GROUP, n.group, Op.DESCRIBE),
        GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.JOIN_GROUP,
        9,
        lambda n: {
            "group_id": n.group,
            "session_timeout": 10_000,
            "rebalance_timeout": 10_000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\x00\x00"}],
        },
        lambda r: int(r.error_code),
        lambda n: (Res.GROUP, n.group, Op.READ),
        GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.SYNC_GROUP,
        5,
        lambda n: {
            "group_id": n.group,
            "generation_id": 1,
            "member_id": "nobody",
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [],
        },
        lambda r: int(r.error_code),
        lambda n: (Res.GROUP, n.group, Op.READ),
        GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.HEARTBEAT,
        4,
        lambda n: {"group_id": n.group, "generation_id": 1, "member_id": "nobody"},
        lambda r: int(r.error_code),
        lambda n: (Res.GROUP, n.group, Op.READ),
        GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.LEAVE_GROUP,
        5,
        lambda n: {"group_id": n.group, "members": [{"member_id": "nobody"}]},
        lambda r: int(r.error_code),
        lambda n: (Res.GROUP, n.group, Op.READ),
        GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.OFFSET_COMMIT,
        9,
        lambda n: {
            "group_id": n.group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "topics": [
                {
                    "name": n.topic,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}
                    ],
                }
            ],
        },
        lambda r: _partition_code(r, "topics"),
        lambda n: (Res.GROUP, n.group, Op.READ),
        GROUP_AUTHORIZATION_FAILED,
        lambda n: [(Res.TOPIC, n.topic, Op.READ)],
    ),
    Case(
        ApiKey.OFFSET_FETCH,
        8,
        lambda n: {
            "groups": [
                {"group_id": n.group, "topics": [{"name": n.topic, "partition_indexes": [0]}]}
            ]
        },
        lambda r: int(r.groups[0].error_code),
        lambda n: (Res.GROUP, n.group, Op.DESCRIBE),
        GROUP_AUTHORIZATION_FAILED,
        lambda n: [(Res.TOPIC, n.topic, Op.DESCRIBE)],
    ),
    Case(
        ApiKey.DESCRIBE_GROUPS,
        5,
        lambda n: {"groups": [n.group], "include_authorized_operations": True},
        lambda r: int(r.groups[0].error_code),
        lambda n: (Res.GROUP, n.group, Op.DESCRIBE),
        GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.DELETE_GROUPS,
        2,
        lambda n: {"groups_names": [n.group]},
        lambda r: int(r.results[0].error_code),
        lambda n: (Res.GROUP, n.group, Op.DELETE),
        GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.OFFSET_DELETE,
        0,
        lambda n: {
            "group_id": n.group,
            "topics": [{"name": n.topic, "partitions": [{"partition_index": 0}]}],
        },
        lambda r: int(r.error_code),
        lambda n: (Res.GROUP, n.group, Op.DELETE),
        GROUP_AUTHORIZATION_FAILED,
        lambda n: [(Res.TOPIC, n.topic, Op.READ)],
    ),
    Case(
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        1,
        lambda n: _heartbeat(n, []),
        lambda r: int(r.error_code),
        lambda n: (Res.GROUP, n.group, Op.READ),
        GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        # With READ on the group, every topic subscribed by name needs DESCRIBE (KAFKA-18813).
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        1,
        lambda n: _heartbeat(n, [n.topic]),
        lambda r: int(r.error_code),
        lambda n: (Res.TOPIC, n.topic, Op.DESCRIBE),
        TOPIC_AUTHORIZATION_FAILED,
        lambda n: [(Res.GROUP, n.group, Op.READ)],
    ),
    Case(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        1,
        lambda n: {"group_ids": [n.group], "include_authorized_operations": True},
        lambda r: int(r.groups[0].error_code),
        lambda n: (Res.GROUP, n.group, Op.DESCRIBE),
        GROUP_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.DESCRIBE_ACLS,
        3,
        lambda n: {
            "resource_type_filter": 1,
            "resource_name_filter": None,
            "pattern_type_filter": 1,
            "principal_filter": None,
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        },
        lambda r: int(r.error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.DESCRIBE),
        CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.CREATE_ACLS,
        3,
        lambda n: {
            "creations": [
                {
                    "resource_type": 2,
                    "resource_name": n.new_topic,
                    "resource_pattern_type": 3,
                    "principal": "User:someone",
                    "host": "*",
                    "operation": 3,
                    "permission_type": 3,
                }
            ]
        },
        lambda r: int(r.results[0].error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.ALTER),
        CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.DELETE_ACLS,
        3,
        lambda n: {
            "filters": [
                {
                    "resource_type_filter": 2,
                    "resource_name_filter": n.new_topic,
                    "pattern_type_filter": 3,
                    "principal_filter": None,
                    "host_filter": None,
                    "operation": 1,
                    "permission_type": 1,
                }
            ]
        },
        lambda r: int(r.filter_results[0].error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.ALTER),
        CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        0,
        lambda n: {"users": None},
        lambda r: int(r.error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.DESCRIBE),
        CLUSTER_AUTHORIZATION_FAILED,
    ),
    Case(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        0,
        lambda n: {"deletions": [{"name": "no-such-user", "mechanism": 2}], "upsertions": []},
        lambda r: int(r.results[0].error_code),
        lambda n: (Res.CLUSTER, CLUSTER_NAME, Op.ALTER),
        CLUSTER_AUTHORIZATION_FAILED,
    ),
]


class NamesPool:
    """Fresh resources for each test, all made at once with the super user's clients
    (each test may delete or alter its own)."""

    def __init__(self, broker: SecureBroker, count: int) -> None:
        from odradek.client import NewTopic, Producer, TopicPartition

        self.available = [
            Names(unique("acl-topic"), unique("acl-group"), unique("acl-fresh"), unique("acl-new"))
            for _ in range(count)
        ]
        admin = broker.admin()
        topics = [n.topic for n in self.available] + [n.fresh_topic for n in self.available]
        for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
            future.result()
        with Producer(**broker.odradek()) as producer:
            sent = [producer.send(n.topic, value=b"one", partition=0) for n in self.available]
            for future in sent:
                future.result(20)
        for n in self.available:
            offsets = {TopicPartition(n.topic, 0): 1}
            for future in admin.alter_consumer_group_offsets(n.group, offsets).values():
                future.result()

    def take(self) -> Names:
        return self.available.pop()


@pytest.fixture(scope="module")
def pool(secure_broker: SecureBroker) -> NamesPool:
    return NamesPool(secure_broker, 2 * len(CASES) + 3)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_missing_acl_gets_kafkas_error_then_the_acl_lets_it_through(
    secure_broker: SecureBroker, pool: NamesPool, case: Case
) -> None:
    names = pool.take()
    who = unique("nobody")
    principal = f"User:CN={who}"
    for rtype, name, operation in case.given(names):
        secure_broker.grant(principal, rtype, name, operation)
    with Wire(secure_broker.ssl, client_tls(secure_broker.pki, who)) as wire:
        refused = case.code(wire.request(case.api, case.version, case.body(names)))
        assert refused == case.refused, f"{case}: got error {refused}, Kafka answers {case.refused}"
        secure_broker.grant(principal, *case.needs(names))
        allowed = case.code(wire.request(case.api, case.version, case.body(names)))
        assert allowed not in AUTHORIZATION_ERRORS, f"{case} with its ACL: error {allowed}"


@pytest.mark.parametrize("case", CASES, ids=str)
def test_super_user_bypasses_acls(secure_broker: SecureBroker, pool: NamesPool, case: Case) -> None:
    names = pool.take()
    with Wire(secure_broker.ssl, client_tls(secure_broker.pki, "admin")) as wire:
        code = case.code(wire.request(case.api, case.version, case.body(names)))
    assert code not in AUTHORIZATION_ERRORS, f"{case} as a super user: error {code}"


def test_group_with_read_but_topic_without_gets_topic_error(
    secure_broker: SecureBroker, pool: NamesPool
) -> None:
    names = pool.take()
    who = unique("reader")
    secure_broker.grant(f"User:CN={who}", Res.GROUP, names.group, Op.READ)
    commit = next(c for c in CASES if c.api == ApiKey.OFFSET_COMMIT)
    fetch = next(c for c in CASES if c.api == ApiKey.OFFSET_FETCH)
    with Wire(secure_broker.ssl, client_tls(secure_broker.pki, who)) as wire:
        committed = wire.request(commit.api, commit.version, commit.body(names))
        assert _partition_code(committed, "topics") == TOPIC_AUTHORIZATION_FAILED
        fetched = wire.request(fetch.api, fetch.version, fetch.body(names))
        assert int(fetched.groups[0].error_code) == 0
        partition = fetched.groups[0].topics[0].partitions[0]
        assert int(partition.error_code) == TOPIC_AUTHORIZATION_FAILED


def test_metadata_hides_topics_and_reports_authorized_operations(
    secure_broker: SecureBroker, pool: NamesPool
) -> None:
    names = pool.take()
    who = unique("viewer")
    principal = f"User:CN={who}"
    secure_broker.grant(principal, Res.TOPIC, names.topic, Op.READ)
    secure_broker.grant(principal, Res.GROUP, names.group, Op.READ)
    with Wire(secure_broker.ssl, client_tls(secure_broker.pki, who)) as wire:
        everything = wire.request(
            ApiKey.METADATA,
            12,
            {"topics": None, "include_topic_authorized_operations": True},
        )
        assert [t.name for t in everything.topics] == [names.topic]
        # READ implies DESCRIBE (bit 8) and gives READ (bit 3), nothing else.
        assert everything.topics[0].topic_authorized_operations == (1 << 3) | (1 << 8)
        groups = wire.request(ApiKey.LIST_GROUPS, 5, {})
        assert [g.group_id for g in groups.groups] == [names.group]
        described = wire.request(
            ApiKey.DESCRIBE_GROUPS,
            5,
            {"groups": [names.group], "include_authorized_operations": True},
        )
        assert described.groups[0].authorized_operations == (1 << 3) | (1 << 8)
        cluster = wire.request(
            ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True}
        )
        assert cluster.cluster_authorized_operations == 0  # no DESCRIBE on the cluster


def test_a_regex_only_reaches_topics_the_member_may_describe(
    secure_broker: SecureBroker, pool: NamesPool
) -> None:
    """KIP-848 regexes are resolved by the coordinator with the member's DESCRIBE
    permission (KAFKA-18813); describing a group whose members own topics the caller
    may not see is refused with TOPIC_AUTHORIZATION_FAILED."""
    names = pool.take()
    seen, hidden = names.topic, names.fresh_topic  # both "acl-..." topics
    who = unique("regex")
    principal = f"User:CN={who}"
    secure_broker.grant(principal, Res.GROUP, names.group, Op.READ)
    secure_broker.grant(principal, Res.TOPIC, seen, Op.DESCRIBE)
    body = _heartbeat(names, [])
    body["subscribed_topic_names"] = None
    body["subscribed_topic_regex"] = f"({seen}|{hidden})"
    with Wire(secure_broker.ssl, client_tls(secure_broker.pki, who)) as wire:
        joined = wire.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, body)
        assert int(joined.error_code) == 0, joined
        ids = {t.topic_id for t in joined.assignment.topic_partitions}
        metadata = wire.request(
            ApiKey.METADATA,
            12,
            {
                "topics": [{"name": seen, "topic_id": None}],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
        )
        assert ids == {metadata.topics[0].topic_id}
    with Wire(secure_broker.ssl, client_tls(secure_broker.pki, "admin")) as admin_wire:
        # A member the admin adds owns the hidden topic too...
        added = _heartbeat(names, [hidden])
        assert int(admin_wire.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, 1, added).error_code) == 0
    secure_broker.grant(principal, Res.GROUP, names.group, Op.DESCRIBE)
    with Wire(secure_broker.ssl, client_tls(secure_broker.pki, who)) as wire:
        described = wire.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            1,
            {"group_ids": [names.group], "include_authorized_operations": False},
        )
        # ...so describing the group would reveal it: refused.
        assert int(described.groups[0].error_code) == TOPIC_AUTHORIZATION_FAILED
