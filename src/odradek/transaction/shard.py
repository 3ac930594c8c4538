"""``TransactionCoordinatorShard``: the transactional ids of one ``__transaction_state``
partition, and Kafka's TransactionCoordinator rules for them (transaction version 1).

State changes only by ``replay``: a request computes the new metadata of its
transactional id (Kafka's ``TxnTransitMetadata``, held as the id's pending
transition until its record is replayed), returns the record, and the runtime
appends then replays it; only then are responses sent. ``abort`` drops the
pending transitions of the last call when its record could not be appended.
Deadlines and timers run on the monotonic ``now_ms``; timestamps written into
records (start and last update of a transaction) and the expiration of idle
transactional ids use the wall clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from odradek.coordinator.timer import Timer, parse_timer_key, timer_key
from odradek.coordinator.types import CoordinatorRecord, RequestToken, Result
from odradek.linear_regex import RegexError, compile_linear
from odradek.protocol.errors import ErrorCode
from odradek.transaction.records import (
    TxnLogValue,
    decode_txn_key,
    decode_txn_value,
    encode_txn_key,
    encode_txn_value,
    fits_record,
)
from odradek.transaction.state import TXN_TRANSITIONS, TxnState
from odradek.transaction.types import (
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    AddPartitionsRequest,
    AddPartitionsResponse,
    DescribedTransaction,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListedTransaction,
    ListTransactionsRequest,
    ListTransactionsResponse,
    MarkerJob,
    Request,
    Response,
    TopicPartition,
    TxnConfig,
    TxnEvent,
)

S = TxnState
E = ErrorCode

TIMEOUT = "txn-timeout"  # per transactional id: abort the transaction when it runs too long
EXPIRE = "txn-expire"  # periodic: forget transactional ids idle past their expiration


class ProducerIdSource(Protocol):
    """Where new producer ids come from (the broker's persisted id blocks)."""

    def next_producer_id(self) -> int: ...


def epoch_exhausted(epoch: int) -> bool:
    return epoch >= MAX_EPOCH - 1


@dataclass(slots=True)
class TxnMetadata:
    """One transactional id (Kafka's ``TransactionMetadata``)."""

    transactional_id: str
    producer_id: int
    previous_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition]
    start_ms: int  # wall clock when the transaction started, -1 when none has
    last_update_ms: int  # wall clock of the last change
    # Soft state, not in records:
    deadline_ms: int | None = None  # monotonic: an Ongoing transaction is aborted then

    def transit(self, state: TxnState, **changes: object) -> TxnMetadata:
        """The metadata after moving to ``state`` (Kafka's ``prepareTransitionTo``): the one
        way a transactional id changes state, checked against ``TXN_TRANSITIONS``."""
        TXN_TRANSITIONS.check(self.state, state)
        return replace(self, state=state, **changes)  # type: ignore[arg-type]

    def to_value(self) -> TxnLogValue:
        return TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.timeout_ms,
            self.state,
            self.partitions,
            self.last_update_ms,
            self.start_ms,
            self.previous_producer_id,
        )


class TransactionCoordinatorShard:
    """Pure transaction coordinator for one ``__transaction_state`` partition.

    Calling convention (as the group coordinator's):

    1. Loading: ``replay(record)`` for every record of the partition, then
       ``on_loaded(now_ms)``; its result holds the markers of transactions a
       crash left in PrepareCommit / PrepareAbort. Until then requests get
       COORDINATOR_LOAD_IN_PROGRESS (``loading_response``).
    2. Serving: ``handle(now_ms, token, request)``, ``on_timer(now_ms, key)``
       and ``markers_written(now_ms, ...)`` return a ``Result``: append its
       records (one batch), ``replay`` them, then send its responses and start
       its ``jobs``, the markers to write to every partition of the
       transaction (``MarkerJob``); when all of a
       job's markers are written, call ``markers_written``. If the append fails,
       call ``abort()`` instead of replaying. Calls are atomic: if one raises,
       nothing changed.
    3. ``verify(...)``: whether a partition belongs to a producer's open
       transaction (KIP-890 verification of transactional writes), read-only.
    """

    def __init__(
        self,
        config: TxnConfig | None = None,
        *,
        timer: Timer,
        producer_ids: ProducerIdSource,
    ) -> None:
        self.config = config or TxnConfig()
        self.timer = timer
        self.producer_ids = producer_ids
        self.txns: dict[str, TxnMetadata] = {}
        self.loaded = False
        # Transitions computed but not yet replayed (Kafka's pendingState).
        self._pending: dict[str, TxnMetadata] = {}
        self._last_call: list[str] | None = None
        self._call: list[str] = []  # transactional ids the call in progress changes
        self._out = Result()
        self._now = 0
        self._wall = 0

    # ================================================================= entry points

    def handle(
        self, now_ms: int, token: RequestToken, request: Request, *, wall_ms: int | None = None
    ) -> Result:
        if not self.loaded:
            raise RuntimeError("handle() before on_loaded(): answer with loading_response()")
        return self._atomically(now_ms, wall_ms, lambda: self._dispatch(token, request))

    def _dispatch(self, token: RequestToken, request: Request) -> None:
        if isinstance(request, InitProducerIdRequest):
            self._respond(token, self._init_producer_id(request))
        elif isinstance(request, AddPartitionsRequest):
            self._respond(token, self._add_partitions(request))
        elif isinstance(request, EndTxnRequest):
            self._respond(token, self._end_txn(request))
        elif isinstance(request, DescribeTransactionsRequest):
            self._respond(token, self._describe(request))
        elif isinstance(request, ListTransactionsRequest):
            self._respond(token, self._list(request))
        else:
            raise TypeError(f"unsupported request {type(request).__name__}")

    def on_timer(self, now_ms: int, key: str, *, wall_ms: int | None = None) -> Result:
        """A timer fired (possibly early or stale: every expiry re-checks its deadline)."""
        kind, parts = parse_timer_key(key)

        def body() -> None:
            if not self.loaded:
                return
            if kind == EXPIRE:
                self._expire_transactional_ids()
                self.timer.schedule(key, self._now + self.config.expiration_check_interval_ms)
                self._out.atomic = False  # independent tombstones
            elif kind == TIMEOUT and parts:
                self._on_timeout(key, parts[0])

        return self._atomically(now_ms, wall_ms, body)

    def markers_written(
        self,
        now_ms: int,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        *,
        wall_ms: int | None = None,
    ) -> Result:
        """Every marker of the transaction is in its partition: complete it."""

        def body() -> None:
            meta = self.txns.get(transactional_id)
            if (
                meta is None
                or not meta.state.preparing
                or meta.producer_id != producer_id
                or meta.producer_epoch != producer_epoch
                or transactional_id in self._pending
            ):
                return  # stale: the transaction moved on (a reload completed it)
            done = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
            self._transit(meta, state=done, partitions=frozenset(), last_update_ms=self._wall)
            self._event(
                "transaction_completed",
                meta,
                result="commit" if done is S.COMPLETE_COMMIT else "abort",
                partitions=len(meta.partitions),
                duration_ms=self._wall - meta.start_ms if meta.start_ms >= 0 else -1,
            )

        return self._atomically(now_ms, wall_ms, body)

    def abort(self) -> None:
        """Undo the last call, whose records could not be appended."""
        call, self._last_call = self._last_call, None
        if call is None:
            raise RuntimeError("abort() without a call to undo (or after its records replayed)")
        for txn_id in call:
            self._pending.pop(txn_id, None)

    def _atomically(self, now_ms: int, wall_ms: int | None, body: Callable[[], None]) -> Result:
        self._out = out = Result()
        self._now = now_ms
        self._wall = now_ms if wall_ms is None else wall_ms
        self._last_call = None
        call: list[str] = []
        self._call = call
        try:
            body()
        except BaseException:
            for txn_id in call:
                self._pending.pop(txn_id, None)
            raise
        self._last_call = call
        return out

    def on_loaded(self, now_ms: int, *, wall_ms: int | None = None) -> Result:
        """Every record was replayed: restart timers, finish transactions a crash interrupted."""
        self._out = out = Result()
        self._now = now_ms
        self._wall = now_ms if wall_ms is None else wall_ms
        self.loaded = True
        for meta in self.txns.values():
            if meta.state is S.ONGOING:
                left = max(meta.start_ms + meta.timeout_ms - self._wall, 0)
                meta.deadline_ms = now_ms + min(left, meta.timeout_ms)
                self.timer.schedule(timer_key(TIMEOUT, meta.transactional_id), meta.deadline_ms)
            elif meta.state.preparing:
                out.jobs.append(self._marker_job(meta))
                self._event("transaction_resumed", meta, state=meta.state.label)
        self.timer.schedule(timer_key(EXPIRE), now_ms + self.config.expiration_check_interval_ms)
        self._out = Result()
        return out

    def on_unloaded(self) -> Result:
        """The partition moved away (or reloads): forget its ids and cancel their timers.
        Nothing is parked here, so the result is empty (the group shard answers its
        parked requests in its own)."""
        for txn_id in self.txns:
            self.timer.cancel(timer_key(TIMEOUT, txn_id))
        self.timer.cancel(timer_key(EXPIRE))
        self.txns.clear()
        self._pending.clear()
        self._last_call = None
        self.loaded = False
        return Result()

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        """A transaction marker in the partition: ``__transaction_state`` holds none (the
        runtime's common replay loop calls this for every marker it meets)."""

    # ================================================================= replay

    def replay(self, record: CoordinatorRecord, *, producer_id: int = -1, offset: int = -1) -> None:
        """Apply one ``__transaction_state`` record (this commits a call's transition).
        ``producer_id`` and ``offset`` are the runtime's common replay arguments; this
        topic's records are never transactional and their offsets change nothing."""
        self._last_call = None
        txn_id = decode_txn_key(record.key)
        if txn_id is None:
            return  # a key version this broker does not know: skipped, as Kafka's loader does
        pending = self._pending.pop(txn_id, None)
        if record.value is None:
            if self.txns.pop(txn_id, None) is not None and self.loaded:
                self.timer.cancel(timer_key(TIMEOUT, txn_id))
            return
        v = decode_txn_value(record.value)
        meta = TxnMetadata(
            txn_id,
            v.producer_id,
            v.previous_producer_id,
            v.producer_epoch,
            NO_PRODUCER_EPOCH,
            v.timeout_ms,
            v.state,
            v.partitions,
            v.start_ms,
            v.last_update_ms,
        )
        if (
            pending is not None
            and pending.state is v.state
            and pending.producer_id == v.producer_id
            and pending.producer_epoch == v.producer_epoch
        ):
            meta.last_producer_epoch = pending.last_producer_epoch
            meta.previous_producer_id = pending.previous_producer_id
            meta.deadline_ms = pending.deadline_ms
        self.txns[txn_id] = meta
        if self.loaded:
            key = timer_key(TIMEOUT, txn_id)
            if meta.state is S.ONGOING and meta.deadline_ms is not None:
                self.timer.schedule(key, meta.deadline_ms)
            else:
                self.timer.cancel(key)

    # ================================================================= InitProducerId

    def _init_producer_id(self, req: InitProducerIdRequest) -> InitProducerIdResponse | None:
        txn_id = req.transactional_id
        if not txn_id or not fits_record(txn_id):  # its records could never be written
            return InitProducerIdResponse(int(E.INVALID_REQUEST))
        if not 0 < req.timeout_ms <= self.config.max_timeout_ms:
            return InitProducerIdResponse(int(E.INVALID_TRANSACTION_TIMEOUT))
        expected: tuple[int, int] | None = None
        if req.producer_id != NO_PRODUCER_ID or req.producer_epoch != NO_PRODUCER_EPOCH:
            if req.producer_id == NO_PRODUCER_ID or req.producer_epoch == NO_PRODUCER_EPOCH:
                return InitProducerIdResponse(int(E.INVALID_REQUEST))
            expected = (req.producer_id, req.producer_epoch)
        meta = self.txns.get(txn_id)
        if meta is None:
            meta = TxnMetadata(
                txn_id,
                self.producer_ids.next_producer_id(),
                NO_PRODUCER_ID,
                NO_PRODUCER_EPOCH,
                NO_PRODUCER_EPOCH,
                req.timeout_ms,
                S.EMPTY,
                frozenset(),
                -1,
                self._wall,
            )
        if expected is not None and not self._valid_producer_id(meta, *expected):
            return InitProducerIdResponse(int(E.PRODUCER_FENCED))
        if meta.state is S.ONGOING:
            # Abort the open transaction with a bumped epoch (fencing whoever holds the
            # old one) and have the client retry: its retry bumps the epoch again.
            self._fence_and_abort(meta, "InitProducerId for a transactional id in use")
            return InitProducerIdResponse(int(E.CONCURRENT_TRANSACTIONS))
        if not TXN_TRANSITIONS.allows(meta.state, S.EMPTY):
            return InitProducerIdResponse(int(E.CONCURRENT_TRANSACTIONS))  # markers pending
        if epoch_exhausted(meta.producer_epoch) and (
            expected is None or expected[1] == meta.producer_epoch
        ):
            new = self._transit(
                meta,
                state=S.EMPTY,
                producer_id=self.producer_ids.next_producer_id(),
                previous_producer_id=meta.producer_id,
                producer_epoch=0,
                last_producer_epoch=meta.producer_epoch if expected else NO_PRODUCER_EPOCH,
                timeout_ms=req.timeout_ms,
                partitions=frozenset(),
                start_ms=-1,
                last_update_ms=self._wall,
            )
        else:
            bumped = self._bumped_epochs(meta, expected)
            if bumped is None:
                return InitProducerIdResponse(int(E.PRODUCER_FENCED))
            epoch, last_epoch = bumped
            new = self._transit(
                meta,
                state=S.EMPTY,
                previous_producer_id=meta.previous_producer_id,
                producer_epoch=epoch,
                last_producer_epoch=last_epoch,
                timeout_ms=req.timeout_ms,
                partitions=frozenset(),
                start_ms=-1,
                last_update_ms=self._wall,
            )
        return InitProducerIdResponse(int(E.NONE), new.producer_id, new.producer_epoch)

    @staticmethod
    def _valid_producer_id(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
        """KIP-360: may a producer holding (producer_id, epoch) re-initialize this id?"""
        return (
            meta.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == meta.producer_id
            or (producer_id == meta.previous_producer_id and epoch_exhausted(epoch))
        )

    @staticmethod
    def _bumped_epochs(
        meta: TxnMetadata, expected: tuple[int, int] | None
    ) -> tuple[int, int] | None:
        """(new epoch, last epoch), or None when the producer is fenced (Kafka's
        prepareIncrementProducerEpoch)."""
        bumped = meta.producer_epoch + 1
        if expected is None:
            return bumped, NO_PRODUCER_EPOCH
        expected_epoch = expected[1]
        if meta.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == meta.producer_epoch:
            return bumped, meta.producer_epoch
        if expected_epoch == meta.last_producer_epoch:
            # A retry of a bump whose answer was lost: the same epoch again.
            return meta.producer_epoch, meta.last_producer_epoch
        return None

    # ================================================================= AddPartitions / AddOffsets

    def _add_partitions(self, req: AddPartitionsRequest) -> AddPartitionsResponse:
        def answer(error: ErrorCode) -> AddPartitionsResponse:
            return AddPartitionsResponse(int(error), req.partitions)

        if not req.transactional_id:
            return answer(E.INVALID_REQUEST)
        meta = self.txns.get(req.transactional_id)
        if meta is None or meta.producer_id != req.producer_id:
            return answer(E.INVALID_PRODUCER_ID_MAPPING)
        if meta.producer_epoch != req.producer_epoch:
            return answer(E.PRODUCER_FENCED)
        if not TXN_TRANSITIONS.allows(meta.state, S.ONGOING):
            return answer(E.CONCURRENT_TRANSACTIONS)  # its markers are being written
        added = frozenset(req.partitions)
        if meta.state is S.ONGOING and added <= meta.partitions:
            return answer(E.NONE)
        starting = meta.state is not S.ONGOING
        self._transit(
            meta,
            state=S.ONGOING,
            partitions=meta.partitions | added,
            start_ms=self._wall if starting else meta.start_ms,
            last_update_ms=self._wall,
            deadline_ms=self._now + meta.timeout_ms if starting else meta.deadline_ms,
        )
        return answer(E.NONE)

    # ================================================================= EndTxn

    def _end_txn(self, req: EndTxnRequest) -> EndTxnResponse:
        if not req.transactional_id:
            return EndTxnResponse(int(E.INVALID_REQUEST))
        meta = self.txns.get(req.transactional_id)
        if meta is None or meta.producer_id != req.producer_id:
            return EndTxnResponse(int(E.INVALID_PRODUCER_ID_MAPPING))
        if req.producer_epoch != meta.producer_epoch:
            return EndTxnResponse(int(E.PRODUCER_FENCED))
        state = meta.state
        if state.preparing:
            # Its markers are being written. The same end again waits for them
            # (CONCURRENT_TRANSACTIONS, retriable); the other end is refused, as Kafka's
            # TransactionCoordinator.endTransaction does for transaction version 1
            # (an abort while the previous commit completes: INVALID_TXN_STATE).
            same = state is (S.PREPARE_COMMIT if req.commit else S.PREPARE_ABORT)
            return EndTxnResponse(int(E.CONCURRENT_TRANSACTIONS if same else E.INVALID_TXN_STATE))
        if TXN_TRANSITIONS.allows(state, S.PREPARE_COMMIT if req.commit else S.PREPARE_ABORT):
            self._prepare_end(meta, commit=req.commit, producer_epoch=meta.producer_epoch)
            return EndTxnResponse(int(E.NONE), meta.producer_id, meta.producer_epoch)
        if state is (S.COMPLETE_COMMIT if req.commit else S.COMPLETE_ABORT):
            # A retry of the EndTxn that ended it.
            return EndTxnResponse(int(E.NONE), meta.producer_id, meta.producer_epoch)
        return EndTxnResponse(int(E.INVALID_TXN_STATE))

    def _prepare_end(self, meta: TxnMetadata, *, commit: bool, producer_epoch: int) -> None:
        """Ongoing -> PrepareCommit / PrepareAbort, and the markers to write once durable."""
        prepared = self._transit(
            meta,
            state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT,
            producer_epoch=producer_epoch,
            last_producer_epoch=(
                NO_PRODUCER_EPOCH
                if producer_epoch != meta.producer_epoch
                else meta.last_producer_epoch
            ),
            last_update_ms=self._wall,
            deadline_ms=None,
        )
        self._out.jobs.append(self._marker_job(prepared))

    def _fence_and_abort(self, meta: TxnMetadata, reason: str) -> None:
        """Kafka's prepareFenceProducerEpoch then endTransaction(ABORT): PrepareAbort with
        the epoch bumped, so the producer holding the old one is fenced everywhere.

        The bump is only in the record: if its append fails, nothing changed and the
        next fence bumps the same epoch (Kafka bumps memory first and remembers the
        failure in hasFailedEpochFence to the same effect).
        """
        if meta.producer_epoch >= MAX_EPOCH:
            raise AssertionError(f"cannot fence {meta.transactional_id}: epoch {MAX_EPOCH}")
        epoch = meta.producer_epoch + 1
        self._prepare_end(meta, commit=False, producer_epoch=epoch)
        self._event("producer_fenced", meta, epoch=epoch, reason=reason)

    # ================================================================= timers

    def _on_timeout(self, key: str, txn_id: str) -> None:
        meta = self.txns.get(txn_id)
        if meta is None or meta.state is not S.ONGOING or meta.deadline_ms is None:
            return
        if txn_id in self._pending:
            return
        if self._now < meta.deadline_ms:
            self.timer.schedule(key, meta.deadline_ms)  # early: re-arm, never drop
            return
        self._fence_and_abort(meta, f"transaction timed out after {meta.timeout_ms} ms")
        self._event("transaction_timed_out", meta, timeout_ms=meta.timeout_ms)

    def _expire_transactional_ids(self) -> None:
        horizon = self._wall - self.config.id_expiration_ms
        for txn_id, meta in list(self.txns.items()):
            if (
                meta.state.expirable
                and meta.last_update_ms <= horizon
                and txn_id not in self._pending
            ):
                meta.transit(S.DEAD)  # checked; Dead is written as the id's tombstone
                self._out.records.append(CoordinatorRecord(encode_txn_key(txn_id), None))
                self._event(
                    "transactional_id_expired", meta, idle_ms=self._wall - meta.last_update_ms
                )

    # ================================================================= queries

    def _describe(self, req: DescribeTransactionsRequest) -> DescribeTransactionsResponse:
        out = []
        for txn_id in req.transactional_ids:
            if not txn_id:
                out.append(DescribedTransaction(txn_id, int(E.INVALID_REQUEST)))
                continue
            meta = self.txns.get(txn_id)
            if meta is None or meta.state is S.DEAD:
                out.append(DescribedTransaction(txn_id, int(E.TRANSACTIONAL_ID_NOT_FOUND)))
                continue
            out.append(
                DescribedTransaction(
                    txn_id,
                    int(E.NONE),
                    meta.state.label,
                    meta.producer_id,
                    meta.producer_epoch,
                    meta.timeout_ms,
                    meta.start_ms,
                    tuple(sorted(meta.partitions)),
                )
            )
        return DescribeTransactionsResponse(tuple(out))

    def _list(self, req: ListTransactionsRequest) -> ListTransactionsResponse:
        states: set[TxnState] = set()
        unknown: list[str] = []
        for label in req.states:
            state = TxnState.from_label(label)
            if state is None:
                unknown.append(label)
            else:
                states.add(state)
        try:  # RE2: a client's pattern runs in linear time on the broker's loop
            pattern = compile_linear(req.id_pattern) if req.id_pattern else None
        except RegexError:
            return ListTransactionsResponse(int(E.INVALID_REQUEST))
        listed = []
        for meta in self.txns.values():
            if meta.state is S.DEAD:
                continue
            if req.producer_ids and meta.producer_id not in req.producer_ids:
                continue
            if req.states and meta.state not in states:
                continue
            if req.duration_ms >= 0 and self._wall - meta.start_ms <= req.duration_ms:
                continue
            if pattern is not None and not pattern.fullmatch(meta.transactional_id):
                continue
            listed.append(
                ListedTransaction(meta.transactional_id, meta.producer_id, meta.state.label)
            )
        return ListTransactionsResponse(int(E.NONE), tuple(listed), tuple(unknown))

    def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partition: TopicPartition,
    ) -> ErrorCode:
        """Is ``partition`` in this producer's open transaction? (KIP-890 part 1)

        NONE, or the error Kafka's AddPartitionsToTxn(verifyOnly) answers:
        INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED, CONCURRENT_TRANSACTIONS or
        TRANSACTION_ABORTABLE (not in the transaction).
        """
        if not transactional_id:
            return E.INVALID_REQUEST
        meta = self.txns.get(transactional_id)
        if meta is None or meta.producer_id != producer_id:
            return E.INVALID_PRODUCER_ID_MAPPING
        if meta.producer_epoch != producer_epoch:
            return E.PRODUCER_FENCED
        if meta.state.preparing:
            return E.CONCURRENT_TRANSACTIONS
        return E.NONE if partition in meta.partitions else E.TRANSACTION_ABORTABLE

    # ================================================================= helpers

    def _transit(self, meta: TxnMetadata, *, state: TxnState, **changes: object) -> TxnMetadata:
        """Compute ``meta``'s next metadata, record it as pending and emit its record."""
        if meta.transactional_id in self._pending:
            raise AssertionError(f"{meta.transactional_id} already has a pending transition")
        new = meta.transit(state, **changes)
        self._pending[meta.transactional_id] = new
        self._call.append(meta.transactional_id)
        self._out.records.append(
            CoordinatorRecord(
                encode_txn_key(meta.transactional_id), encode_txn_value(new.to_value())
            )
        )
        return new

    @staticmethod
    def _marker_job(meta: TxnMetadata) -> MarkerJob:
        return MarkerJob(
            meta.transactional_id,
            meta.producer_id,
            meta.producer_epoch,
            meta.state is S.PREPARE_COMMIT,
            meta.partitions,
        )

    def _respond(self, token: RequestToken, response: Response | None) -> None:
        if response is not None:
            self._out.responses.append((token, response))

    def _event(self, kind: str, meta: TxnMetadata, **fields: object) -> None:
        fields.setdefault("producer_id", meta.producer_id)
        self._out.events.append(TxnEvent(kind, meta.transactional_id, dict(fields)))


def loading_response(request: Request) -> Response:
    return error_response(request, E.COORDINATOR_LOAD_IN_PROGRESS)


def error_response(request: Request, error: ErrorCode | int) -> Response:
    """A response of the request's shape carrying ``error`` everywhere."""
    code = int(error)
    if isinstance(request, InitProducerIdRequest):
        return InitProducerIdResponse(code)
    if isinstance(request, AddPartitionsRequest):
        return AddPartitionsResponse(code, request.partitions)
    if isinstance(request, EndTxnRequest):
        return EndTxnResponse(code)
    if isinstance(request, DescribeTransactionsRequest):
        return DescribeTransactionsResponse(
            tuple(DescribedTransaction(t, code) for t in request.transactional_ids)
        )
    if isinstance(request, ListTransactionsRequest):
        return ListTransactionsResponse(code)
    raise TypeError(f"unsupported request {type(request).__name__}")
