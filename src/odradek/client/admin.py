"""The admin client: topics, partitions, cluster, configs and consumer groups.

Calls that act on several items (``create_topics``, ``delete_topics``,
``create_partitions``, ``delete_records``, ``incremental_alter_configs``,
``delete_consumer_groups``, ``alter_consumer_group_offsets``,
``delete_consumer_group_offsets``) return one
``concurrent.futures.Future`` per item, as the Java and confluent-kafka admin
clients do, so one failing topic does not hide the others; the futures are
complete when the call returns (``fs["t"].result()`` raises that item's
error, e.g. ``TopicAlreadyExistsError``). Query calls return values.

ACLs and SCRAM users: ``describe_acls``, ``create_acls``, ``delete_acls``,
``describe_user_scram_credentials``, ``alter_user_scram_credentials`` (in
``admin_security.py``).

Routing: topic creation, deletion and partition changes go to the controller
(a NOT_CONTROLLER answer refreshes metadata and retries); broker configs go to
that broker; DeleteRecords goes to each partition's leader, DescribeLogDirs to
every broker asked about; everything else to the least loaded broker. Every call retries
retriable errors until ``default_api_timeout_ms`` (or its ``timeout_ms``).

Group operations go to the group's coordinator, found with FindCoordinator
and cached per group; a NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE answer,
or a failed attempt, forgets it and asks again (``_group_call``). ListGroups
goes to every broker, since each lists only the groups it coordinates.
``alter_consumer_group_offsets`` commits as a "simple" group (generation -1,
no member id), as Java's ``alterConsumerGroupOffsets`` does: Kafka and Odradek
accept it only while the group has no members (UNKNOWN_MEMBER_ID otherwise).
"""

from __future__ import annotations

import contextlib
import enum
import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple, TypeVar

from odradek.client.admin_security import SecurityAdminMixin
from odradek.client.admin_transactions import TransactionAdminMixin
from odradek.client.cluster import KafkaClient
from odradek.client.config import AdminConfig
from odradek.client.discovery import KEY_TYPE_GROUP
from odradek.client.errors import (
    COORDINATOR_MOVED,
    STALE_METADATA,
    IncompatibleBrokerVersionError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    NotControllerError,
    UnknownTopicOrPartitionError,
    make_error,
)
from odradek.client.offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, ask_leaders, list_offsets
from odradek.client.structs import (
    BrokerMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.consumer_protocol import (
    CONSUMER_PROTOCOL_TYPE,
    ConsumerProtocolError,
    flatten,
    parse_assignment,
    parse_subscription,
)
from odradek.protocol.errors import ErrorCode

DELETE_TO_HIGH_WATERMARK = -1
"""``delete_records`` offset meaning "every record" (up to the high watermark)."""

T = TypeVar("T")


class ConfigResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4
    BROKER_LOGGER = 8


class ConfigResource(NamedTuple):
    type: ConfigResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ConfigResourceType.TOPIC, name)

    @classmethod
    def broker(cls, node_id: int | str) -> ConfigResource:
        return cls(ConfigResourceType.BROKER, str(node_id))


class ConfigSource(enum.IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigEntry(NamedTuple):
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    is_sensitive: bool

    @property
    def is_default(self) -> bool:
        return self.source == ConfigSource.DEFAULT_CONFIG


class AlterConfigOpType(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class AlterConfigOp(NamedTuple):
    name: str
    value: str | None = None
    op: AlterConfigOpType = AlterConfigOpType.SET


class NewTopic(NamedTuple):
    name: str
    num_partitions: int = -1  # -1: the broker's num.partitions
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    replica_assignment: Mapping[int, Sequence[int]] | None = None
    config: Mapping[str, str] | None = None


class NewPartitions(NamedTuple):
    total_count: int
    replica_assignment: Sequence[Sequence[int]] | None = None


class ClusterDescription(NamedTuple):
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerMetadata]


class PartitionDescription(NamedTuple):
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    log_start_offset: int
    log_end_offset: int
    leader_epoch: int = -1  # bumped by every election (-1: the broker did not say)
    offline_replicas: tuple[int, ...] = ()  # replicas whose log dir or broker is offline


class TopicDescription(NamedTuple):
    name: str
    topic_id: Any
    internal: bool
    partitions: list[PartitionDescription]


class LogDamage(NamedTuple):
    """A range an Odradek broker set aside in a replica's log (DescribeLogDirs' tagged
    field, ``protocol/log_dirs.py``): offsets [first_offset, end_offset) answer
    CORRUPT_MESSAGE; none (first == end) is a skipped range that readers pass."""

    segment: int  # base offset of the segment file holding it
    position: int  # byte range in that file
    end_position: int
    first_offset: int
    end_offset: int
    reason: str

    @property
    def quarantined(self) -> bool:
        return self.end_offset > self.first_offset


class ReplicaLogDirInfo(NamedTuple):
    size: int  # bytes on disk
    offset_lag: int  # how far a future replica is behind (0 without one)
    is_future: bool
    damage: tuple[LogDamage, ...] = ()  # Odradek brokers only: ranges set aside


class LogDirDescription(NamedTuple):
    path: str
    total_bytes: int | None  # of the file system; None when the broker does not say
    usable_bytes: int | None
    replicas: dict[TopicPartition, ReplicaLogDirInfo]


class ConsumerGroupListing(NamedTuple):
    group_id: str
    protocol_type: str  # "consumer" for Kafka consumers, "" for a simple (commit-only) group
    state: str  # "" when the broker's ListGroups is older than v4 and does not say
    coordinator: int
    # "classic" (JoinGroup/SyncGroup) or "consumer" (KIP-848); "classic" before ListGroups v5.
    type: str = "classic"


class MemberDescription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]  # decoded for the "consumer" protocol, else ()
    subscription: tuple[str, ...]  # the topics the member subscribed to, when known
    # Consumer groups (KIP-848) only, from ConsumerGroupDescribe:
    member_epoch: int | None = None
    target_assignment: tuple[TopicPartition, ...] | None = None  # where it is heading
    member_type: str | None = None  # "consumer", or "classic" for a classic member inside
    subscription_regex: str | None = None


class ConsumerGroupDescription(NamedTuple):
    """A group as its coordinator describes it.

    Classic groups (DescribeGroups) carry neither generation nor leader: Kafka does not
    send them; ``protocol`` (the assignor) and member assignments are only set while
    Stable. Consumer groups (KIP-848, ConsumerGroupDescribe) carry their group and
    assignment epochs, the server-side assignor (``protocol``) and each member's epoch,
    current and target assignment."""

    group_id: str
    state: str  # classic: Empty, PreparingRebalance, CompletingRebalance, Stable, Dead;
    # consumer: Empty, Assigning, Reconciling, Stable
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    coordinator: BrokerMetadata | None
    type: str = "classic"  # or "consumer"
    group_epoch: int | None = None
    assignment_epoch: int | None = None

    @property
    def exists(self) -> bool:
        """False for a group the coordinator does not know (described as Dead, no members)."""
        return not (self.state == "Dead" and not self.members and not self.protocol_type)


def _decode_member(protocol_type: str, metadata: bytes, assignment: bytes) -> tuple[Any, Any]:
    """(assigned partitions, subscribed topics) of a consumer-protocol member; () if unknown."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return (), ()
    assigned: tuple[TopicPartition, ...] = ()
    topics: tuple[str, ...] = ()
    with contextlib.suppress(ConsumerProtocolError):
        if assignment:
            pairs = flatten(parse_assignment(bytes(assignment)).partitions)
            assigned = tuple(sorted(TopicPartition(t, p) for t, p in pairs))
    with contextlib.suppress(ConsumerProtocolError):
        if metadata:
            topics = tuple(sorted(parse_subscription(bytes(metadata)).topics))
    return assigned, topics


def _done(error: BaseException | None) -> Future[None]:
    future: Future[None] = Future()
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
    return future


class AdminClient(SecurityAdminMixin, TransactionAdminMixin):
    """``AdminClient(bootstrap_servers="host:port")`` or a dict with dotted names.

    ACL and SCRAM user calls come from ``SecurityAdminMixin`` (admin_security.py), the
    transaction calls from ``TransactionAdminMixin`` (admin_transactions.py)."""

    def __init__(self, config: Mapping[str, Any] | None = None, **settings: Any) -> None:
        self.config = AdminConfig.from_settings(config, **settings)
        self._client = KafkaClient(self.config, allow_auto_create_topics=False)
        self._closed = False
        self._coordinators: dict[str, int] = {}  # group id -> coordinator node id
        self._deadline: float | None = None  # time.monotonic() every call ends by

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()

    # ------------------------------------------------------------------ plumbing

    def set_deadline(self, deadline: float | None) -> None:
        """From now on every call ends by ``deadline`` (a ``time.monotonic()`` value) at the
        latest, whatever its ``timeout_ms``: for a tool that bounds a whole command. A call
        made after it raises KafkaTimeoutError at once. None removes the bound."""
        self._deadline = deadline

    def _timeout_s(self, timeout_ms: int | None) -> float:
        timeout_s = (
            timeout_ms if timeout_ms is not None else self.config.default_api_timeout_ms
        ) / 1000
        if self._deadline is not None:
            timeout_s = max(0.0, min(timeout_s, self._deadline - time.monotonic()))
        return timeout_s

    def _controller(self) -> int:
        cluster = self._client.bootstrap()
        if cluster.controller_id >= 0 and cluster.controller_id in cluster.brokers:
            return cluster.controller_id
        node = self._client.least_loaded_node()
        if node is None:
            raise KafkaConnectionError("no broker known")
        return node

    def _any_node(self) -> int:
        self._client.bootstrap()
        node = self._client.least_loaded_node()
        if node is None:
            raise KafkaConnectionError("no broker known")
        return node

    def _call(
        self,
        target: Callable[[], int],
        api_key: int,
        body: Any,
        timeout_s: float,
        *,
        check: Callable[[Any], int] | None = None,
    ) -> Any:
        """Send to ``target()`` and retry retriable failures until ``timeout_s``.

        ``check(response)`` returns an error code that applies to the whole call
        (0 when none): retriable codes are retried, others raised.
        """

        def attempt(remaining: float) -> Any:
            node = target()
            request_ms = int(min(remaining, self.config.request_timeout_ms / 1000) * 1000)
            response = self._client.request(node, api_key, body, timeout_ms=max(1, request_ms))
            code = check(response) if check is not None else 0
            if code:
                raise make_error(code, ApiKey(api_key).name)
            return response

        return self._retrying(attempt, ApiKey(api_key).name, timeout_s)

    def _retrying(self, attempt: Callable[[float], T], what: str, timeout_s: float) -> T:
        """``attempt(remaining seconds)`` until it succeeds, retrying retriable failures
        (a broker that refuses the connection among them: the next attempt may pick
        another, after a metadata refresh) until ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        delay = self.config.retry_backoff_ms / 1000
        last: BaseException | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{what} timed out" + (f": {last}" if last else ""))
            try:
                return attempt(remaining)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                last = exc
                self._client.request_update()
                with contextlib.suppress(KafkaError):
                    self._client.refresh(timeout_s=max(0.001, deadline - time.monotonic()))
            time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
            delay = min(delay * 2, self.config.retry_backoff_max_ms / 1000)

    def _per_item_futures(
        self,
        names: Sequence[str],
        send: Callable[[list[str], float], dict[str, tuple[int, str | None]]],
        timeout_s: float,
    ) -> dict[str, Future[None]]:
        """Run ``send(names) -> {name: (error code, message)}``; retry items answered with
        NOT_CONTROLLER or another retriable code until the deadline."""
        deadline = time.monotonic() + timeout_s
        pending = list(dict.fromkeys(names))
        results: dict[str, BaseException | None] = {}
        delay = self.config.retry_backoff_ms / 1000
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                for name in pending:
                    results[name] = KafkaTimeoutError(f"{name}: timed out")
                break
            answers = send(pending, remaining)
            retry: list[str] = []
            for name in pending:
                code, message = answers.get(name, (UnknownTopicOrPartitionError.code, "no answer"))
                if code == ErrorCode.NONE:
                    results[name] = None
                    continue
                error = make_error(code, message or name)
                if error.retriable and code != UnknownTopicOrPartitionError.code:
                    retry.append(name)
                    results[name] = error
                else:
                    results[name] = error
            pending = retry
            if pending:
                if any(isinstance(results[n], NotControllerError) for n in pending):
                    self._client.request_update()
                    with contextlib.suppress(KafkaError):
                        self._client.refresh(timeout_s=max(0.001, deadline - time.monotonic()))
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, self.config.retry_backoff_max_ms / 1000)
        return {name: _done(results[name]) for name in dict.fromkeys(names)}

    # ------------------------------------------------------------------ topics

    def create_topics(
        self,
        new_topics: Iterable[NewTopic | str],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, Future[None]]:
        """Create topics; one future per topic name."""
        specs = {t.name if isinstance(t, NewTopic) else t: t for t in new_topics}
        timeout_s = self._timeout_s(timeout_ms)

        def send(names: list[str], remaining: float) -> dict[str, tuple[int, str | None]]:
            topics = []
            for name in names:
                spec = specs[name]
                if isinstance(spec, str):
                    spec = NewTopic(spec)
                topics.append(
                    {
                        "name": name,
                        "num_partitions": -1 if spec.replica_assignment else spec.num_partitions,
                        "replication_factor": -1
                        if spec.replica_assignment
                        else spec.replication_factor,
                        "assignments": [
                            {"partition_index": p, "broker_ids": tuple(ids)}
                            for p, ids in (spec.replica_assignment or {}).items()
                        ],
                        "configs": [
                            {"name": k, "value": v} for k, v in (spec.config or {}).items()
                        ],
                    }
                )
            body = {
                "topics": topics,
                "timeout": int(remaining * 1000),
                "validate_only": validate_only,
            }
            response = self._call(self._controller, ApiKey.CREATE_TOPICS, body, remaining)
            return {t.name: (int(t.error_code), t.error_message) for t in response.topics}

        return self._per_item_futures(list(specs), send, timeout_s)

    def delete_topics(
        self, topics: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, Future[None]]:
        """Delete topics by name; one future per topic."""
        timeout_s = self._timeout_s(timeout_ms)

        def send(names: list[str], remaining: float) -> dict[str, tuple[int, str | None]]:
            body = {
                "topic_names": list(names),
                "topics": [{"name": n, "topic_id": None} for n in names],
                "timeout": int(remaining * 1000),
            }
            response = self._call(self._controller, ApiKey.DELETE_TOPICS, body, remaining)
            return {
                r.name: (int(r.error_code), getattr(r, "error_message", None))
                for r in response.responses
                if r.name is not None
            }

        return self._per_item_futures(list(topics), send, timeout_s)

    def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions | int],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, Future[None]]:
        """Raise topics' partition counts to ``total_count``; one future per topic."""
        specs = {
            name: spec if isinstance(spec, NewPartitions) else NewPartitions(int(spec))
            for name, spec in new_partitions.items()
        }
        timeout_s = self._timeout_s(timeout_ms)

        def send(names: list[str], remaining: float) -> dict[str, tuple[int, str | None]]:
            body = {
                "topics": [
                    {
                        "name": n,
                        "count": specs[n].total_count,
                        "assignments": None
                        if specs[n].replica_assignment is None
                        else [
                            {"broker_ids": tuple(ids)} for ids in specs[n].replica_assignment or ()
                        ],
                    }
                    for n in names
                ],
                "timeout": int(remaining * 1000),
                "validate_only": validate_only,
            }
            response = self._call(self._controller, ApiKey.CREATE_PARTITIONS, body, remaining)
            return {r.name: (int(r.error_code), r.error_message) for r in response.results}

        return self._per_item_futures(list(specs), send, timeout_s)

    def list_topics(
        self, *, include_internal: bool = False, timeout_ms: int | None = None
    ) -> list[str]:
        """Names of every topic, sorted."""
        cluster = self._client.refresh(all_topics=True, timeout_s=self._timeout_s(timeout_ms))
        return sorted(
            name
            for name, meta in cluster.topics.items()
            if meta.error_code == ErrorCode.NONE and (include_internal or not meta.is_internal)
        )

    def describe_topics(
        self,
        topics: Iterable[str] | None = None,
        *,
        include_offsets: bool = True,
        timeout_ms: int | None = None,
    ) -> dict[str, TopicDescription]:
        """Partitions of each topic (all topics when None), with log start and end offsets.

        An unknown topic raises UnknownTopicOrPartitionError.
        """
        timeout_s = self._timeout_s(timeout_ms)
        deadline = time.monotonic() + timeout_s
        names = None if topics is None else list(dict.fromkeys(topics))
        if names is None:
            cluster = self._client.refresh(all_topics=True, timeout_s=timeout_s)
            names = sorted(n for n, m in cluster.topics.items() if m.error_code == ErrorCode.NONE)
        else:
            self._client.add_topics(names)
            cluster = self._client.refresh(timeout_s=timeout_s)
        out: dict[str, TopicDescription] = {}
        for name in names:
            meta = cluster.topics.get(name)
            if meta is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            if meta.error_code != ErrorCode.NONE:
                raise make_error(meta.error_code, f"topic {name!r}")
        starts: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        ends: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        if include_offsets:
            tps = [TopicPartition(n, p) for n in names for p in cluster.topics[n].partitions]
            if tps:
                remaining = max(0.001, deadline - time.monotonic())
                starts = list_offsets(
                    self._client, dict.fromkeys(tps, EARLIEST_TIMESTAMP), timeout_s=remaining
                )
                remaining = max(0.001, deadline - time.monotonic())
                ends = list_offsets(
                    self._client, dict.fromkeys(tps, LATEST_TIMESTAMP), timeout_s=remaining
                )
        for name in names:
            meta = cluster.topics[name]
            parts = []
            for p in sorted(meta.partitions):
                pm = meta.partitions[p]
                tp = TopicPartition(name, p)
                s, e = starts.get(tp), ends.get(tp)
                parts.append(
                    PartitionDescription(
                        p,
                        pm.leader,
                        pm.replicas,
                        pm.isr,
                        s.offset if s is not None else -1,
                        e.offset if e is not None else -1,
                        pm.leader_epoch,
                        pm.offline_replicas,
                    )
                )
            out[name] = TopicDescription(name, meta.topic_id, meta.is_internal, parts)
        return out

    def delete_records(
        self, offsets: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, Future[int]]:
        """DeleteRecords: delete each partition's records before the given offset
        (``DELETE_TO_HIGH_WATERMARK`` for all). One future per partition, holding the
        new log start offset (low watermark), or that partition's error."""
        results: dict[TopicPartition, Future[int]] = {tp: Future() for tp in dict.fromkeys(offsets)}
        pending = {tp: int(offset) for tp, offset in offsets.items()}

        def request(parts: Mapping[TopicPartition, int]) -> tuple[int, Any]:
            topics: dict[str, list[dict[str, int]]] = {}
            for tp, offset in parts.items():
                topics.setdefault(tp.topic, []).append(
                    {"partition_index": tp.partition, "offset": offset}
                )
            timeout = int(self._timeout_s(timeout_ms) * 1000)
            body = {
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
                "timeout": timeout,
            }
            return ApiKey.DELETE_RECORDS, body

        def absorb(response: Any, parts: Mapping[TopicPartition, int]) -> list[KafkaError]:
            retriable: list[KafkaError] = []
            for t in response.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, int(p.partition_index))
                    if tp not in parts:
                        continue
                    code = int(p.error_code)
                    if code in STALE_METADATA and code != UnknownTopicOrPartitionError.code:
                        retriable.append(make_error(code, str(tp)))
                        continue
                    pending.pop(tp, None)
                    if code:
                        results[tp].set_exception(make_error(code, f"DeleteRecords {tp}"))
                    else:
                        results[tp].set_result(int(p.low_watermark))
            return retriable

        self._client.add_topics({tp.topic for tp in pending})
        cluster = self._client.refresh(timeout_s=self._timeout_s(timeout_ms))
        for tp in list(pending):
            meta = cluster.topics.get(tp.topic)
            if (
                meta is None
                or meta.error_code != ErrorCode.NONE
                or tp.partition not in meta.partitions
            ):
                del pending[tp]
                results[tp].set_exception(
                    make_error(UnknownTopicOrPartitionError.code, f"DeleteRecords {tp}")
                )
        try:
            ask_leaders(
                self._client, pending, self._timeout_s(timeout_ms), "DeleteRecords", request, absorb
            )
        except KafkaError as exc:
            for tp in pending:
                results[tp].set_exception(exc)
        return results

    def describe_log_dirs(
        self,
        topics: Iterable[str] | None = None,
        *,
        brokers: Iterable[int] | None = None,
        timeout_ms: int | None = None,
    ) -> dict[int, dict[str, LogDirDescription]]:
        """DescribeLogDirs: each broker's log directories with the size of every partition
        replica in them (of ``topics`` only, when given), and from Odradek brokers the
        ranges set aside in each replica's log (``ReplicaLogDirInfo.damage``). All
        brokers when ``brokers`` is None."""
        timeout_s = self._timeout_s(timeout_ms)
        cluster = self._client.bootstrap()
        # include_damage: a tag Kafka brokers skip; Odradek brokers report damaged ranges.
        body: dict[str, Any] = {"topics": None, "include_damage": True}
        if topics is not None:
            names = list(dict.fromkeys(topics))
            self._client.add_topics(names)
            cluster = self._client.refresh(timeout_s=timeout_s)
            body["topics"] = [
                {"topic": n, "partitions": sorted(cluster.topics[n].partitions)}
                for n in names
                if n in cluster.topics and cluster.topics[n].error_code == ErrorCode.NONE
            ]
        out: dict[int, dict[str, LogDirDescription]] = {}
        for node_id in sorted(brokers if brokers is not None else cluster.brokers):
            response = self._call(
                functools.partial(int, node_id),
                ApiKey.DESCRIBE_LOG_DIRS,
                body,
                timeout_s,
                check=lambda r: int(getattr(r, "error_code", 0)),
            )
            dirs: dict[str, LogDirDescription] = {}
            for result in response.results:
                code = int(result.error_code)
                if code:
                    raise make_error(code, f"broker {node_id} log dir {result.log_dir}")
                total = int(getattr(result, "total_bytes", -1))
                usable = int(getattr(result, "usable_bytes", -1))
                dirs[result.log_dir] = LogDirDescription(
                    result.log_dir,
                    total if total >= 0 else None,
                    usable if usable >= 0 else None,
                    {
                        TopicPartition(t.name, int(p.partition_index)): ReplicaLogDirInfo(
                            int(p.partition_size),
                            int(p.offset_lag),
                            bool(p.is_future_key),
                            tuple(
                                LogDamage(
                                    int(d.segment),
                                    int(d.position),
                                    int(d.end_position),
                                    int(d.first_offset),
                                    int(d.end_offset),
                                    d.reason,
                                )
                                for d in getattr(p, "damage", ())
                            ),
                        )
                        for t in result.topics
                        for p in t.partitions
                    },
                )
            out[node_id] = dirs
        return out

    def list_offsets(
        self,
        requests: Mapping[TopicPartition, int],
        *,
        isolation_level: int = 0,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """ListOffsets: ``{tp: timestamp}`` with -2 earliest, -1 latest, else a timestamp."""
        return list_offsets(
            self._client,
            requests,
            timeout_s=self._timeout_s(timeout_ms),
            isolation_level=isolation_level,
        )

    # ------------------------------------------------------------------ cluster

    def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """Cluster id, controller and brokers (DescribeCluster, else Metadata)."""
        timeout_s = self._timeout_s(timeout_ms)
        started = time.monotonic()
        # Any broker that answers: one still in the metadata after it died (its
        # registration outlives it by up to a lease) refuses, and another is tried.
        supported = self._retrying(
            lambda _: self._client.connection(self._any_node()).supports(ApiKey.DESCRIBE_CLUSTER),
            "DESCRIBE_CLUSTER",
            timeout_s,
        )
        timeout_s = max(0.001, timeout_s - (time.monotonic() - started))
        if supported:
            response = self._call(
                self._any_node,
                ApiKey.DESCRIBE_CLUSTER,
                {"include_cluster_authorized_operations": False, "endpoint_type": 1},
                timeout_s,
                check=lambda r: int(r.error_code),
            )
            brokers = [
                BrokerMetadata(int(b.broker_id), b.host, int(b.port), getattr(b, "rack", None))
                for b in response.brokers
            ]
            return ClusterDescription(
                response.cluster_id, int(response.controller_id), sorted(brokers)
            )
        cluster = self._client.refresh(timeout_s=timeout_s)
        return ClusterDescription(
            cluster.cluster_id, cluster.controller_id, sorted(cluster.brokers.values())
        )

    # ------------------------------------------------------------------ configs

    def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        *,
        include_synonyms: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Current configuration of topics and brokers."""
        timeout_s = self._timeout_s(timeout_ms)
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for target, group in self._group_by_target(resources).items():
            body = {
                "resources": [
                    {
                        "resource_type": int(r.type),
                        "resource_name": r.name,
                        "configuration_keys": None,
                    }
                    for r in group
                ],
                "include_synonyms": include_synonyms,
                "include_documentation": False,
            }
            response = self._call(target, ApiKey.DESCRIBE_CONFIGS, body, timeout_s)
            for res in response.results:
                key = ConfigResource(ConfigResourceType(int(res.resource_type)), res.resource_name)
                code = int(res.error_code)
                if code:
                    raise make_error(code, f"{key.type.name} {key.name}: {res.error_message}")
                entries: dict[str, ConfigEntry] = {}
                for c in res.configs:
                    source = int(getattr(c, "config_source", 0))
                    entries[c.name] = ConfigEntry(
                        c.name,
                        c.value,
                        ConfigSource(source)
                        if source in ConfigSource._value2member_map_
                        else ConfigSource.UNKNOWN,
                        bool(c.read_only),
                        bool(c.is_sensitive),
                    )
                out[key] = entries
        return out

    def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Sequence[AlterConfigOp]],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[ConfigResource, Future[None]]:
        """IncrementalAlterConfigs: SET / DELETE / APPEND / SUBTRACT per config name."""
        timeout_s = self._timeout_s(timeout_ms)
        results: dict[ConfigResource, Future[None]] = {}
        for target, group in self._group_by_target(changes).items():
            body = {
                "resources": [
                    {
                        "resource_type": int(r.type),
                        "resource_name": r.name,
                        "configs": [
                            {"name": op.name, "config_operation": int(op.op), "value": op.value}
                            for op in changes[r]
                        ],
                    }
                    for r in group
                ],
                "validate_only": validate_only,
            }
            try:
                response = self._call(target, ApiKey.INCREMENTAL_ALTER_CONFIGS, body, timeout_s)
            except KafkaError as exc:
                for r in group:
                    results[r] = _done(exc)
                continue
            for res in response.responses:
                key = ConfigResource(ConfigResourceType(int(res.resource_type)), res.resource_name)
                code = int(res.error_code)
                results[key] = _done(
                    make_error(code, res.error_message or f"{key.type.name} {key.name}")
                    if code
                    else None
                )
        return results

    alter_configs = incremental_alter_configs
    """Alias: configuration changes are always incremental (KIP-339)."""

    def _group_by_target(
        self, resources: Iterable[ConfigResource]
    ) -> dict[Callable[[], int], list[ConfigResource]]:
        """Broker resources go to that broker; the rest to the least loaded one."""
        groups: dict[Any, list[ConfigResource]] = {}
        targets: dict[Any, Callable[[], int]] = {}
        for r in resources:
            r = ConfigResource(ConfigResourceType(int(r.type)), str(r.name))
            if r.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER) and r.name:
                node_id = int(r.name)
                key: Any = ("broker", node_id)
                targets.setdefault(key, functools.partial(int, node_id))
            else:
                key = "any"
                targets.setdefault(key, self._any_node)
            groups.setdefault(key, []).append(r)
        return {targets[k]: v for k, v in groups.items()}

    # ------------------------------------------------------------------ consumer groups

    def _find_coordinator(self, group_id: str, timeout_s: float) -> int:
        """The node coordinating ``group_id`` (cached until a call through it fails)."""
        node = self._coordinators.get(group_id)
        if node is not None:
            return node

        def check(response: Any) -> int:
            entries = getattr(response, "coordinators", None)
            if entries:  # v4+: one entry per key
                return int(entries[0].error_code)
            return int(response.error_code)

        response = self._call(
            self._any_node,
            ApiKey.FIND_COORDINATOR,
            {"key": group_id, "key_type": KEY_TYPE_GROUP, "coordinator_keys": (group_id,)},
            timeout_s,
            check=check,
        )
        entries = getattr(response, "coordinators", None)
        entry = entries[0] if entries else response
        node = int(entry.node_id)
        if node not in self._client.cluster.brokers:
            # A coordinator our metadata does not list yet: learn its address first.
            self._client.refresh(timeout_s=timeout_s)
            if node not in self._client.cluster.brokers:
                raise KafkaConnectionError(
                    f"coordinator {node} ({entry.host}:{entry.port}) of group {group_id!r} "
                    "is not in the cluster metadata"
                )
        self._coordinators[group_id] = node
        return node

    def _group_call(
        self,
        group_id: str,
        api_key: int,
        body: Any,
        timeout_s: float,
        *,
        check: Callable[[Any], int] | None = None,
    ) -> Any:
        """``_call`` to the group's coordinator. Each retry forgets the cached coordinator
        (it may have moved or died), and so does an answer whose ``check`` code is
        NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE."""
        deadline = time.monotonic() + timeout_s
        attempts = 0

        def target() -> int:
            nonlocal attempts
            attempts += 1
            if attempts > 1:
                self._coordinators.pop(group_id, None)
            return self._find_coordinator(group_id, max(0.001, deadline - time.monotonic()))

        def checked(response: Any) -> int:
            code = check(response) if check is not None else 0
            if code in COORDINATOR_MOVED:
                self._coordinators.pop(group_id, None)
            return code

        return self._call(target, api_key, body, timeout_s, check=checked)

    def list_consumer_groups(
        self,
        *,
        states: Iterable[str] = (),
        types: Iterable[str] = (),
        timeout_ms: int | None = None,
    ) -> list[ConsumerGroupListing]:
        """Groups of every broker (ListGroups to each), sorted by id; ``states`` filters
        (e.g. ``["Stable", "Empty"]``; brokers before ListGroups v4 ignore the filter,
        so it is applied here too when they report a state), and so does ``types``
        (``"classic"``, ``"consumer"``: KIP-1043, ListGroups v5)."""
        timeout_s = self._timeout_s(timeout_ms)
        wanted = tuple(states)
        kinds = tuple(t.lower() for t in types)
        cluster = self._client.refresh(timeout_s=timeout_s)
        listings: dict[str, ConsumerGroupListing] = {}
        for node in sorted(cluster.brokers):
            response = self._call(
                functools.partial(int, node),
                ApiKey.LIST_GROUPS,
                {"states_filter": wanted, "types_filter": kinds},
                timeout_s,
                check=lambda r: int(r.error_code),
            )
            for g in response.groups:
                state = str(getattr(g, "group_state", "") or "")
                if wanted and state and state.lower() not in {s.lower() for s in wanted}:
                    continue
                kind = str(getattr(g, "group_type", "") or "classic").lower()
                if kinds and kind not in kinds:
                    continue
                listings[g.group_id] = ConsumerGroupListing(
                    g.group_id, g.protocol_type or "", state, node, kind
                )
        return [listings[gid] for gid in sorted(listings)]

    def describe_consumer_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, ConsumerGroupDescription]:
        """FindCoordinator, then ConsumerGroupDescribe (KIP-848 consumer groups) and, for
        a group that is not one, DescribeGroups, as Java's and librdkafka's admin clients
        do. A group the coordinator does not know comes back as state "Dead" with no
        members (``.exists`` is False), as DescribeGroups v0-5 answers; any other group
        error raises."""
        timeout_s = self._timeout_s(timeout_ms)
        out: dict[str, ConsumerGroupDescription] = {}
        for gid in dict.fromkeys(group_ids):
            consumer_group = self._describe_consumer_group(gid, timeout_s)
            if consumer_group is not None:
                out[gid] = consumer_group
                continue

            def check(response: Any) -> int:
                code = int(response.groups[0].error_code) if response.groups else 0
                return code if make_error(code).retriable else 0

            response = self._group_call(
                gid,
                ApiKey.DESCRIBE_GROUPS,
                {"groups": (gid,), "include_authorized_operations": False},
                timeout_s,
                check=check,
            )
            if not response.groups:
                raise make_error(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"DescribeGroups answered nothing for group {gid!r}",
                )
            g = response.groups[0]
            code = int(g.error_code)
            if code == ErrorCode.GROUP_ID_NOT_FOUND:  # DescribeGroups v6+
                g_state, g_type, g_protocol, g_members = "Dead", "", "", ()
            elif code:
                raise make_error(code, f"group {gid!r}")
            else:
                g_state, g_type = str(g.group_state), g.protocol_type or ""
                g_protocol, g_members = g.protocol_data or "", g.members
            members = []
            for m in g_members:
                assigned, topics = _decode_member(g_type, m.member_metadata, m.member_assignment)
                members.append(
                    MemberDescription(
                        m.member_id,
                        getattr(m, "group_instance_id", None),
                        m.client_id,
                        m.client_host,
                        assigned,
                        topics,
                    )
                )
            node = self._coordinators.get(gid)
            out[gid] = ConsumerGroupDescription(
                gid,
                g_state,
                g_type,
                g_protocol,
                tuple(members),
                self._client.cluster.brokers.get(node) if node is not None else None,
            )
        return out

    def _describe_consumer_group(
        self, gid: str, timeout_s: float
    ) -> ConsumerGroupDescription | None:
        """ConsumerGroupDescribe; None when the group is not a consumer group (or the broker
        has no such API): the caller asks DescribeGroups then."""

        def check(response: Any) -> int:
            code = int(response.groups[0].error_code) if response.groups else 0
            return code if make_error(code).retriable else 0

        try:
            response = self._group_call(
                gid,
                ApiKey.CONSUMER_GROUP_DESCRIBE,
                {"group_ids": (gid,), "include_authorized_operations": False},
                timeout_s,
                check=check,
            )
        except IncompatibleBrokerVersionError:
            return None
        if not response.groups:
            raise make_error(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"ConsumerGroupDescribe answered nothing for group {gid!r}",
            )
        g = response.groups[0]
        code = int(g.error_code)
        if code == ErrorCode.GROUP_ID_NOT_FOUND:  # not a consumer group
            return None
        if code:
            raise make_error(code, g.error_message or f"group {gid!r}")

        def partitions(assignment: Any) -> tuple[TopicPartition, ...]:
            return tuple(
                sorted(
                    TopicPartition(t.topic_name, int(p))
                    for t in assignment.topic_partitions
                    for p in t.partitions
                )
            )

        members = tuple(
            MemberDescription(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                partitions(m.assignment),
                tuple(sorted(m.subscribed_topic_names or ())),
                int(m.member_epoch),
                partitions(m.target_assignment),
                {0: "classic", 1: "consumer"}.get(int(getattr(m, "member_type", -1))),
                m.subscribed_topic_regex,
            )
            for m in g.members
        )
        node = self._coordinators.get(gid)
        return ConsumerGroupDescription(
            gid,
            str(g.group_state),
            CONSUMER_PROTOCOL_TYPE,
            str(g.assignor_name),
            members,
            self._client.cluster.brokers.get(node) if node is not None else None,
            "consumer",
            int(g.group_epoch),
            int(g.assignment_epoch),
        )

    def delete_consumer_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, Future[None]]:
        """DeleteGroups; one future per group. Only Empty groups can be deleted
        (NonEmptyGroupError otherwise; GroupIdNotFoundError for an unknown group)."""
        timeout_s = self._timeout_s(timeout_ms)

        def send(names: list[str], remaining: float) -> dict[str, tuple[int, str | None]]:
            answers: dict[str, tuple[int, str | None]] = {}
            for gid in names:
                try:
                    response = self._group_call(
                        gid, ApiKey.DELETE_GROUPS, {"groups_names": (gid,)}, remaining
                    )
                except KafkaError as exc:
                    answers[gid] = (exc.code if exc.code > 0 else -1, str(exc))
                    continue
                for r in response.results:
                    code = int(r.error_code)
                    if code in COORDINATOR_MOVED:
                        self._coordinators.pop(r.group_id, None)
                    answers[r.group_id] = (code, f"group {r.group_id!r}")
            return answers

        return self._per_item_futures(list(group_ids), send, timeout_s)

    def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """OffsetFetch: the group's committed offsets (every committed partition when
        ``partitions`` is None). Partitions without a committed offset are left out."""
        timeout_s = self._timeout_s(timeout_ms)
        topics: list[dict[str, Any]] | None = None
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for tp in partitions:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            topics = [{"name": t, "partition_indexes": tuple(ps)} for t, ps in by_topic.items()]
            if not topics:
                return {}

        def answer(response: Any) -> tuple[int, Any]:
            groups = getattr(response, "groups", None)
            if groups is not None:  # v8+
                if not groups:
                    return 0, ()
                return int(groups[0].error_code), groups[0].topics
            return int(getattr(response, "error_code", 0)), response.topics

        def check(response: Any) -> int:
            code, fetched = answer(response)
            if code:
                return code
            for t in fetched:
                for p in t.partitions:
                    if int(p.error_code) and make_error(int(p.error_code)).retriable:
                        return int(p.error_code)
            return 0

        body = {
            "group_id": group_id,
            "topics": topics,
            "groups": [{"group_id": group_id, "topics": topics}],
            "require_stable": False,
        }
        response = self._group_call(group_id, ApiKey.OFFSET_FETCH, body, timeout_s, check=check)
        out: dict[TopicPartition, OffsetAndMetadata] = {}
        for t in answer(response)[1]:
            for p in t.partitions:
                code = int(p.error_code)
                tp = TopicPartition(t.name, int(p.partition_index))
                if code:
                    raise make_error(code, f"committed offset of {tp} in group {group_id!r}")
                offset = int(p.committed_offset)
                if offset < 0:
                    continue
                epoch = int(getattr(p, "committed_leader_epoch", -1))
                out[tp] = OffsetAndMetadata(offset, p.metadata or "", epoch if epoch >= 0 else None)
        return dict(sorted(out.items()))

    def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int | OffsetAndMetadata],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, Future[None]]:
        """Commit ``offsets`` for the group as a simple group (generation -1, no member);
        one future per partition. The group must have no members: a live group answers
        UnknownMemberIdError, as Kafka does."""
        timeout_s = self._timeout_s(timeout_ms)
        wanted = {
            tp: o if isinstance(o, OffsetAndMetadata) else OffsetAndMetadata(int(o))
            for tp, o in offsets.items()
        }
        if not wanted:
            return {}
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, o in wanted.items():
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": o.offset,
                    "committed_leader_epoch": -1 if o.leader_epoch is None else o.leader_epoch,
                    "committed_metadata": o.metadata,
                    "commit_timestamp": -1,
                }
            )
        body = {
            "group_id": group_id,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }

        def check(response: Any) -> int:
            for t in response.topics:
                for p in t.partitions:
                    code = int(p.error_code)
                    if code in COORDINATOR_MOVED or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                        return code
            return 0

        try:
            response = self._group_call(
                group_id, ApiKey.OFFSET_COMMIT, body, timeout_s, check=check
            )
        except KafkaError as exc:
            return {tp: _done(exc) for tp in wanted}
        codes = {
            TopicPartition(t.name, int(p.partition_index)): int(p.error_code)
            for t in response.topics
            for p in t.partitions
        }
        return {
            tp: _done(
                make_error(codes[tp], f"commit {tp} for group {group_id!r}")
                if codes.get(tp, 0)
                else None
            )
            for tp in wanted
        }

    def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, Future[None]]:
        """OffsetDelete: forget committed offsets; one future per partition. A group that
        is subscribed to the topic refuses (GroupSubscribedToTopicError)."""
        timeout_s = self._timeout_s(timeout_ms)
        tps = list(dict.fromkeys(partitions))
        if not tps:
            return {}
        by_topic: dict[str, list[dict[str, int]]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition})
        body = {
            "group_id": group_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        try:
            response = self._group_call(
                group_id,
                ApiKey.OFFSET_DELETE,
                body,
                timeout_s,
                check=lambda r: int(r.error_code),
            )
        except KafkaError as exc:
            return {tp: _done(exc) for tp in tps}
        codes = {
            TopicPartition(t.name, int(p.partition_index)): int(p.error_code)
            for t in response.topics
            for p in t.partitions
        }
        return {
            tp: _done(
                make_error(codes[tp], f"delete offset of {tp} in group {group_id!r}")
                if codes.get(tp, 0)
                else None
            )
            for tp in tps
        }
