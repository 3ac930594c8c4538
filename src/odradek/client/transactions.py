"""The transactional producer's side of KIP-98 / KIP-447 (Java's TransactionManager).

A ``Producer(transactional_id=...)`` owns one ``TransactionManager``. It finds
the transaction coordinator (FindCoordinator, key type 1), gets the producer
id and epoch (InitProducerId, which fences older holders of the id), adds each
partition the transaction writes to before its first batch goes out
(AddPartitionsToTxn, from the sender thread, all pending partitions in one
request), adds a consumer group's offsets (AddOffsetsToTxn, then
TxnOffsetCommit to the group's coordinator), and ends the transaction
(EndTxn). Requests are retried while the answer is retriable (coordinator
moving or loading, CONCURRENT_TRANSACTIONS while markers are written), within
``max_block_ms``.

States (Java's): UNINITIALIZED -> READY (init_transactions) -> IN_TRANSACTION
(begin_transaction) -> READY (commit or abort). An error the application can
recover from by aborting (a failed batch, a commit of offsets refused by the
group, TRANSACTION_ABORTABLE) moves to ABORTABLE_ERROR: commit raises it, abort
works. Being fenced (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) or not
authorized moves to FATAL_ERROR: everything raises; close the producer. After
an abort that left sequence numbers behind (a batch failed with a sequence
assigned) the epoch is bumped with InitProducerId(id, epoch) (KIP-360), so the
next transaction starts its sequences at 0.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from odradek.client.cluster import KafkaClient
from odradek.client.discovery import KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION
from odradek.client.errors import (
    COORDINATOR_MOVED,
    CommitFailedError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    NoBrokersAvailableError,
    make_error,
)
from odradek.client.structs import TopicPartition
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

_RETRY_LATER = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,  # metadata not there yet
        *COORDINATOR_MOVED,
    }
)
# Fatal for a transactional producer: someone else holds the id, or we may not use it.
_FATAL = frozenset(
    {
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        ErrorCode.PRODUCER_FENCED,
    }
)
# The group refused the offsets: the member is gone (Java's CommitFailedException).
_GROUP_FENCED = frozenset(
    {ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_INSTANCE_ID}
)


class TransactionAbortedError(KafkaError):
    """A record of an aborted transaction that was never sent (Java's exception of the
    same name)."""


class TxnState(enum.Enum):
    UNINITIALIZED = "uninitialized"
    READY = "ready"
    IN_TRANSACTION = "in transaction"
    COMMITTING = "committing"
    ABORTING = "aborting"
    ABORTABLE_ERROR = "abortable error"
    FATAL_ERROR = "fatal error"


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """What ``send_offsets_to_transaction`` needs of the consumer (KIP-447)."""

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


class TransactionManager:
    """Transaction state and coordinator requests of one transactional producer.

    User threads call ``init``, ``begin``, ``send_offsets``, ``end``; the sender
    thread calls ``add_pending_partitions`` before it sends batches.
    """

    def __init__(
        self,
        client: KafkaClient,
        transactional_id: str,
        transaction_timeout_ms: int,
        *,
        retry_backoff_ms: int,
        request_timeout_ms: int,
    ) -> None:
        self.client = client
        self.transactional_id = transactional_id
        self.timeout_ms = transaction_timeout_ms
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.state = TxnState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self.error: KafkaError | None = None
        self._lock = threading.RLock()
        self._coordinator: int | None = None
        self._group_coordinators: dict[str, int] = {}
        self.partitions: set[TopicPartition] = set()  # in the coordinator's transaction
        self.pending: set[TopicPartition] = set()  # written to, not yet added
        self.started = False  # the coordinator knows of this transaction
        self.epoch_bump_needed = False

    # ------------------------------------------------------------------ state

    def check(self, *allowed: TxnState) -> None:
        """Raise unless in one of ``allowed`` (a fatal error wins, then an abortable one)."""
        with self._lock:
            if self.state is TxnState.FATAL_ERROR:
                assert self.error is not None
                raise self.error
            if self.state not in allowed:
                if self.state is TxnState.ABORTABLE_ERROR and self.error is not None:
                    raise self.error
                wanted = " or ".join(s.value for s in allowed)
                raise IllegalStateError(
                    f"transactional producer is {self.state.value}, needs to be {wanted}"
                )

    def fail(self, error: KafkaError) -> None:
        """An error inside the transaction: fatal if it fences us, else abortable."""
        with self._lock:
            if self.state is TxnState.FATAL_ERROR:
                return
            fatal = getattr(error, "code", None) in _FATAL
            self.error = error
            if fatal:
                self.state = TxnState.FATAL_ERROR
            elif self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
                self.state = TxnState.ABORTABLE_ERROR
            log.debug("transaction %s: %s error: %s", self.transactional_id, self.state, error)

    # ------------------------------------------------------------------ requests

    def _call(
        self,
        api: ApiKey,
        body: dict[str, Any],
        code_of: Callable[[Any], int],
        deadline: float,
        *,
        group: str | None = None,
    ) -> Any:
        """Send to the transaction (or ``group``'s) coordinator until the answer is final.

        Returns the response whose code is not retriable (0 or an error); raises
        KafkaTimeoutError when ``deadline`` passes first.
        """
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaTimeoutError(f"{api.name} did not complete within max_block_ms")
            try:
                node = self._find(group, remaining)
                response = self.client.request(
                    node,
                    api,
                    body,
                    timeout_ms=max(1, min(self.request_timeout_ms, int(remaining * 1000))),
                )
                code = code_of(response)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                self._forget(group)
                log.debug("%s: %s; retrying", api.name, exc)
            else:
                if code not in _RETRY_LATER:
                    return response
                if code in COORDINATOR_MOVED:
                    self._forget(group)
                log.debug("%s answered %d; retrying", api.name, code)
            time.sleep(min(self.retry_backoff_s, max(0.0, deadline - time.monotonic())))

    def _forget(self, group: str | None) -> None:
        if group is None:
            self._coordinator = None
        else:
            self._group_coordinators.pop(group, None)

    def _find(self, group: str | None, timeout_s: float) -> int:
        cached = self._coordinator if group is None else self._group_coordinators.get(group)
        if cached is not None:
            return cached
        key, key_type = (
            (self.transactional_id, KEY_TYPE_TRANSACTION)
            if group is None
            else (
                group,
                KEY_TYPE_GROUP,
            )
        )
        self.client.bootstrap(timeout_s=timeout_s)
        node = self.client.least_loaded_node()
        if node is None:
            raise NoBrokersAvailableError("no broker to ask for a coordinator")
        response = self.client.request(
            node,
            ApiKey.FIND_COORDINATOR,
            {"key": key, "key_type": key_type, "coordinator_keys": [key]},
            timeout_ms=max(1, int(timeout_s * 1000)),
        )
        entry = response.coordinators[0] if hasattr(response, "coordinators") else response
        code = int(entry.error_code)
        if code:
            raise make_error(code, f"FindCoordinator for {key!r}")
        coordinator = int(entry.node_id)
        if coordinator not in self.client.cluster.brokers:
            self.client.refresh(timeout_s=timeout_s)
        if group is None:
            self._coordinator = coordinator
        else:
            self._group_coordinators[group] = coordinator
        return coordinator

    # ------------------------------------------------------------------ the operations

    def init(self, deadline: float) -> tuple[int, int]:
        """InitProducerId for the transactional id: fences older producers, aborts what
        they left open (the coordinator answers CONCURRENT_TRANSACTIONS meanwhile)."""
        with self._lock:
            self.check(TxnState.UNINITIALIZED)
        return self._init_producer_id(deadline, bump=False)

    def _init_producer_id(self, deadline: float, *, bump: bool) -> tuple[int, int]:
        body = {
            "transactional_id": self.transactional_id,
            "transaction_timeout": self.timeout_ms,
            "producer_id": self.producer_id if bump else -1,
            "producer_epoch": self.producer_epoch if bump else -1,
        }
        response = self._call(ApiKey.INIT_PRODUCER_ID, body, lambda r: int(r.error_code), deadline)
        code = int(response.error_code)
        if code:
            error = make_error(code, "InitProducerId")
            self.fail(error)
            raise error
        with self._lock:
            self.producer_id = int(response.producer_id)
            self.producer_epoch = int(response.producer_epoch)
            self.state = TxnState.READY
            self.error = None
            self.epoch_bump_needed = False
        log.debug(
            "transactional id %s: producer id %d epoch %d",
            self.transactional_id,
            self.producer_id,
            self.producer_epoch,
        )
        return self.producer_id, self.producer_epoch

    def begin(self) -> None:
        with self._lock:
            self.check(TxnState.READY)
            self.state = TxnState.IN_TRANSACTION
            self.partitions.clear()
            self.pending.clear()
            self.started = False

    def add_pending_partitions(self, deadline: float) -> KafkaError | None:
        """AddPartitionsToTxn for every partition written to but not added (sender thread).

        Returns the error that failed them (the transaction is then abortable or
        fatal), or None once they are in the transaction.
        """
        with self._lock:
            pending = sorted(self.pending)
        if not pending:
            return None
        topics: dict[str, list[int]] = {}
        for tp in pending:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = {
            "v3_and_below_transactional_id": self.transactional_id,
            "v3_and_below_producer_id": self.producer_id,
            "v3_and_below_producer_epoch": self.producer_epoch,
            "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }

        def worst(response: Any) -> int:
            codes = {
                int(p.partition_error_code)
                for t in response.results_by_topic_v3_and_below
                for p in t.results_by_partition
            }
            codes.discard(ErrorCode.NONE)
            codes.discard(ErrorCode.OPERATION_NOT_ATTEMPTED)  # follows another partition's error
            return min(codes, key=lambda c: c in _RETRY_LATER) if codes else ErrorCode.NONE

        try:
            response = self._call(ApiKey.ADD_PARTITIONS_TO_TXN, body, worst, deadline)
        except KafkaError as exc:
            return exc  # retried until max_block_ms: the caller fails those batches
        code = worst(response)
        if code:
            error = make_error(code, f"AddPartitionsToTxn {pending}")
            self.fail(error)
            return error
        with self._lock:
            self.partitions.update(pending)
            self.pending.difference_update(pending)
            self.started = True
        return None

    def send_offsets(
        self,
        offsets: Mapping[TopicPartition, int | Any],
        group: ConsumerGroupMetadata,
        deadline: float,
    ) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit to the group's coordinator."""
        self.check(TxnState.IN_TRANSACTION)
        added = self._call(
            ApiKey.ADD_OFFSETS_TO_TXN,
            {
                "transactional_id": self.transactional_id,
                "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch,
                "group_id": group.group_id,
            },
            lambda r: int(r.error_code),
            deadline,
        )
        if int(added.error_code):
            error = make_error(int(added.error_code), "AddOffsetsToTxn")
            self.fail(error)
            raise error
        with self._lock:
            self.started = True
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for tp, value in offsets.items():
            offset, metadata, epoch = _offset_fields(value)
            by_topic.setdefault(tp.topic, []).append(
                {
                    "partition_index": tp.partition,
                    "committed_offset": offset,
                    "committed_leader_epoch": epoch,
                    "committed_metadata": metadata,
                }
            )
        body = {
            "transactional_id": self.transactional_id,
            "group_id": group.group_id,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "generation_id": group.generation_id,
            "member_id": group.member_id,
            "group_instance_id": group.group_instance_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
        }

        def worst(response: Any) -> int:
            codes = {int(p.error_code) for t in response.topics for p in t.partitions}
            codes.discard(ErrorCode.NONE)
            return min(codes, key=lambda c: c in _RETRY_LATER) if codes else ErrorCode.NONE

        response = self._call(ApiKey.TXN_OFFSET_COMMIT, body, worst, deadline, group=group.group_id)
        code = worst(response)
        if code in _GROUP_FENCED:
            error: KafkaError = CommitFailedError(
                f"the group refused the transaction's offsets ({make_error(code)})"
            )
        elif code:
            error = make_error(code, "TxnOffsetCommit")
        else:
            return
        self.fail(error)
        raise error

    def end(self, commit: bool, deadline: float) -> None:
        """EndTxn (after the caller flushed or dropped the transaction's batches)."""
        with self._lock:
            started = self.started
            self.state = TxnState.COMMITTING if commit else TxnState.ABORTING
        if started:
            response = self._call(
                ApiKey.END_TXN,
                {
                    "transactional_id": self.transactional_id,
                    "producer_id": self.producer_id,
                    "producer_epoch": self.producer_epoch,
                    "committed": commit,
                },
                lambda r: int(r.error_code),
                deadline,
            )
            code = int(response.error_code)
            if code:
                error = make_error(code, "EndTxn")
                self.fail(error)
                if not commit and self.state is TxnState.ABORTABLE_ERROR:
                    self.state = TxnState.ABORTING
                raise error
        with self._lock:
            self.state = TxnState.READY
            self.error = None
            self.partitions.clear()
            self.pending.clear()
            self.started = False
        if self.epoch_bump_needed:
            self._init_producer_id(deadline, bump=True)  # KIP-360: sequences restart at 0

    def abortable(self) -> bool:
        with self._lock:
            return self.state in (
                TxnState.IN_TRANSACTION,
                TxnState.ABORTABLE_ERROR,
                TxnState.ABORTING,
            )


def _offset_fields(value: Any) -> tuple[int, str, int]:
    """(offset, metadata, leader epoch) from an int or an OffsetAndMetadata-like value."""
    if isinstance(value, int):
        return value, "", -1
    offset = int(value.offset)
    metadata = getattr(value, "metadata", "") or ""
    epoch = getattr(value, "leader_epoch", None)
    return offset, metadata, -1 if epoch is None else int(epoch)


def group_metadata_of(group: ConsumerGroupMetadata | str | Any) -> ConsumerGroupMetadata:
    """A group id alone (a consumer without group management) or a consumer's metadata."""
    if isinstance(group, ConsumerGroupMetadata):
        return group
    if isinstance(group, str):
        return ConsumerGroupMetadata(group)
    raise TypeError(
        "group_metadata must be consumer.group_metadata() or a group id, "
        f"not {type(group).__name__}"
    )


def offsets_of(offsets: Mapping[Any, Any] | Iterable[Any]) -> dict[TopicPartition, Any]:
    """Offsets as {TopicPartition: offset or OffsetAndMetadata}; a list of objects with
    topic, partition and offset (confluent-kafka's style) works too."""
    if isinstance(offsets, Mapping):
        return {TopicPartition(*tp): v for tp, v in offsets.items()}
    return {TopicPartition(o.topic, o.partition): int(o.offset) for o in offsets}
