"""The fault suite's load (`test_faults`): clients that write every operation into a
`kafka_history.History` as they go.

Two idempotent acks=all producers (`ProducerLoad`) writing unique values round-robin over
`TOPIC`'s partitions; a classic consumer group of `GroupMember` consumers committing
synchronously; a transactional producer (`TxnLoad`) over `TXN_TOPIC` that aborts some of
its transactions on purpose, and a read_committed reader of it (`TxnReader`). Each is a
thread, stopped by its `stopping` event; what it saw go wrong is kept for the test.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kafka_history import History, Op, key_of

TOPIC = "faults"
TXN_TOPIC = "faults-txn"
PARTITIONS = 3
GROUP = "fault-group"
SESSION_TIMEOUT_MS = 6000  # the broker's group.min.session.timeout.ms
COMMIT_EVERY = 50  # messages a member consumes between synchronous commits
MAX_IN_FLIGHT = 500  # per producer
PRODUCE_INTERVAL_S = 0.01
TXN_RECORDS = (1, 4)  # records per transaction, at most
TXN_ABORT_CHANCE = 0.3
TXN_TIMEOUT_S = 30.0
TXN_END_ATTEMPTS = 3
TXN_RETRY_PAUSE_S = 0.5
FLUSH_TIMEOUT_S = 30.0


CLIENT_LOG = "client-log"  # a history event: one line of librdkafka's own log


class ClientLog(logging.Handler):
    """librdkafka's idempotence and transaction log (``debug: eos``: PID acquisitions,
    epoch bumps and why, partition drains, fatal errors), written into the history as
    `CLIENT_LOG` events, so a duplicate can be traced to the broker answer that made
    the client bump its epoch (issue 21, item 4). About twenty lines per PID."""

    def __init__(self, process: str, history: History) -> None:
        super().__init__(logging.DEBUG)
        self.process = process
        self.history = history

    def emit(self, record: logging.LogRecord) -> None:
        self.history.event(self.process, CLIENT_LOG, {"line": record.getMessage()}, "info")

    def config(self) -> dict[str, object]:
        """The Producer settings that send its eos log here."""
        logger = logging.getLogger(f"fault-load.{self.process}")
        logger.handlers[:] = [self]
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        return {"debug": "eos", "logger": logger}


class ProducerLoad(threading.Thread):
    """An idempotent acks=all producer writing unique values round-robin over the
    partitions until stopped; records each send, and what the broker acknowledged."""

    def __init__(self, name: str, bootstrap: str, history: History) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.history = history
        self.stopping = threading.Event()
        self.acked: list[tuple[int, int, bytes]] = []  # (partition, offset, value)
        self.failed: list[str] = []
        self.fatal: list[str] = []
        self.unflushed = -1
        self.crash: BaseException | None = None

    def _delivered(self, invocation):  # type: ignore[no-untyped-def]
        def report(error: KafkaError | None, message: object) -> None:
            if error is not None:
                self.failed.append(f"{message.value()!r}: {error}")  # type: ignore[attr-defined]
                # a delivery error does not say the record is not in the log
                self.history.complete(invocation, "info", {"error": str(error)})
            else:
                partition, offset = message.partition(), message.offset()  # type: ignore[attr-defined]
                self.acked.append((partition, offset, message.value()))  # type: ignore[attr-defined]
                self.history.complete(invocation, "ok", {"offset": offset})

        return report

    def _error(self, error: KafkaError) -> None:
        if error.fatal():
            self.fatal.append(str(error))

    def run(self) -> None:
        try:
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "enable.idempotence": True,
                    "acks": "all",
                    "linger.ms": 5,
                    "error_cb": self._error,
                    **ClientLog(self.name, self.history).config(),
                }
            )
            sequence = 0
            while not self.stopping.is_set():
                if len(producer) >= MAX_IN_FLIGHT:
                    producer.poll(0.05)
                    continue
                value = f"{self.name}-{sequence}"
                partition = sequence % PARTITIONS
                sequence += 1
                invocation = self.history.invoke(
                    self.name, "send", {"key": key_of(TOPIC, partition), "value": value}
                )
                producer.produce(
                    TOPIC,
                    value=value.encode(),
                    partition=partition,
                    on_delivery=self._delivered(invocation),
                )
                producer.poll(PRODUCE_INTERVAL_S)
            self.unflushed = producer.flush(FLUSH_TIMEOUT_S)
        except BaseException as exc:
            self.crash = exc


class TxnLoad(threading.Thread):
    """A transactional producer: transactions of a few records over `TXN_TOPIC`'s
    partitions, some aborted on purpose. Each is a ``txn`` operation: ok when committed,
    fail when aborted, info when the outcome is unknown (an error on commit). A fatal
    error is kept in `fatal` (a broker that behaves gives none under these faults) and
    the load goes on with a new producer."""

    def __init__(self, name: str, bootstrap: str, history: History, seed: int) -> None:
        super().__init__(name=name, daemon=True)
        self.bootstrap = bootstrap
        self.history = history
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.committed = self.aborted = self.unknown = 0
        self.errors: list[str] = []
        self.fatal: list[str] = []
        # Aborts of transactions no partition was registered in, refused as Kafka refuses
        # them (`_abort_of_nothing_refused`): counted, not failures.
        self.refused_empty_aborts: list[str] = []
        self.crash: BaseException | None = None

    def _producer(self) -> Producer | None:
        """A producer that initialised its transactions (init_transactions fences any
        earlier one of the same id and ends its open transaction); None once stopping."""
        while not self.stopping.is_set():
            producer = Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "transactional.id": f"{self.name}-txn",
                    "linger.ms": 5,
                    **ClientLog(self.name, self.history).config(),
                }
            )
            try:
                producer.init_transactions(TXN_TIMEOUT_S)
                return producer
            except KafkaException as exc:
                self._error("init", exc.args[0])
                producer.flush(0)
                time.sleep(TXN_RETRY_PAUSE_S)
        return None

    def _error(self, where: str, error: KafkaError) -> None:
        self.errors.append(f"{where}: {error}")
        if error.fatal():
            self.fatal.append(f"{where}: {error}")

    def run(self) -> None:
        try:
            producer = self._producer()
            sequence = 0
            while producer is not None and not self.stopping.is_set():
                count = self.rng.randint(*TXN_RECORDS)
                sends = []
                for _ in range(count):
                    partition = self.rng.randrange(PARTITIONS)
                    sends.append(
                        (key_of(TXN_TOPIC, partition), f"{self.name}-{sequence}", partition)
                    )
                    sequence += 1
                abort = self.rng.random() < TXN_ABORT_CHANCE
                producer = self._one(producer, sends, abort)
                time.sleep(0.05)
        except BaseException as exc:
            self.crash = exc

    def _one(
        self, producer: Producer, sends: list[tuple[str, str, int]], abort: bool
    ) -> Producer | None:
        txn_id = sends[0][1]
        invocation = self.history.invoke(
            self.name, "txn", {"txn_id": txn_id, "sends": [[k, v] for k, v, _ in sends]}
        )
        offsets: dict[str, int] = {}

        def delivered(error: KafkaError | None, message: object) -> None:
            if error is None:
                offsets[message.value().decode()] = message.offset()  # type: ignore[attr-defined]

        def outcome(type_: str, **extra: object) -> None:
            done = [[k, v, offsets.get(v)] for k, v, _ in sends]
            self.history.complete(invocation, type_, {"sends": done, **extra})  # type: ignore[arg-type]

        try:
            producer.begin_transaction()
            for _, value, partition in sends:
                producer.produce(
                    TXN_TOPIC, value=value.encode(), partition=partition, on_delivery=delivered
                )
            end = producer.abort_transaction if abort else producer.commit_transaction
            for attempt in range(TXN_END_ATTEMPTS):
                try:
                    end(TXN_TIMEOUT_S)
                    break
                except KafkaException as exc:  # a retriable error: the call may be repeated
                    if not exc.args[0].retriable() or attempt == TXN_END_ATTEMPTS - 1:
                        raise
            if abort:
                self.aborted += 1
                outcome("fail")
            else:
                self.committed += 1
                outcome("ok")
            return producer
        except KafkaException as exc:
            error = exc.args[0]
            if abort and self._abort_of_nothing_refused(error, invocation):
                # Kafka answers the same (see the method): a client-side fatal error, the
                # application starts over with a new producer. Nothing was committed.
                self.errors.append(f"txn: {error}")
                self.refused_empty_aborts.append(str(error))
                self.aborted += 1
                outcome("fail", error=str(error))
                self._close(producer)
                return self._producer()
            self._error("txn", error)
            if error.txn_requires_abort():
                try:
                    producer.abort_transaction(TXN_TIMEOUT_S)
                    self.aborted += 1
                    outcome("fail", error=str(error))  # certainly aborted now
                    return producer
                except KafkaException as again:
                    self._error("abort", again.args[0])
            self.unknown += 1
            outcome("info", error=str(error))
            self._close(producer)
            return self._producer()

    @staticmethod
    def _close(producer: Producer) -> None:
        """Let go of a producer that failed (a fatal one raises its error again here)."""
        with contextlib.suppress(KafkaException):
            producer.flush(0)

    def _abort_of_nothing_refused(self, error: KafkaError, invocation: Op) -> bool:
        """librdkafka's fatal INVALID_TXN_STATE on abort_transaction when no partition of
        the transaction was registered: the application aborted while an
        AddPartitionsToTxn was unanswered (refused with CONCURRENT_TRANSACTIONS because
        the previous commit's markers were still being written), so librdkafka sends
        EndTxn(abort) for a transaction the coordinator never began. Kafka's coordinator
        (transaction version 1: EndTxn abort in PrepareCommit or CompleteCommit) answers
        INVALID_TXN_STATE too, and librdkafka makes it fatal; Kafka's Java producer does
        not send that EndTxn. Recognised from librdkafka's own eos log in the history."""
        if error.code() != KafkaError.INVALID_TXN_STATE:
            return False
        return not any(
            op.index > invocation.index
            and op.process == self.name
            and op.f == CLIENT_LOG
            and "registered with transaction" in op.value["line"]
            for op in self.history.ops()
        )


class TxnReader(threading.Thread):
    """A read_committed consumer assigned every partition of `TXN_TOPIC` from the start."""

    def __init__(self, bootstrap: str, history: History) -> None:
        super().__init__(name="txn-reader", daemon=True)
        self.bootstrap = bootstrap
        self.history = history
        self.stopping = threading.Event()
        self.consumed = 0
        self.crash: BaseException | None = None

    def run(self) -> None:
        try:
            consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": "faults-txn-reader",  # not joined: assign() only
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                }
            )
            partitions = [TopicPartition(TXN_TOPIC, p, 0) for p in range(PARTITIONS)]
            consumer.assign(partitions)
            self.history.event(
                self.name, "assign", {"keys": [key_of(TXN_TOPIC, p) for p in range(PARTITIONS)]}
            )
            try:
                while not self.stopping.is_set():
                    invocation = self.history.invoke(self.name, "poll")
                    messages = [m for m in consumer.consume(200, 0.2) if m.error() is None]
                    self.consumed += len(messages)
                    self.history.complete(invocation, "ok", {"records": records_of(messages)})
            finally:
                consumer.close()
        except BaseException as exc:
            self.crash = exc


def records_of(messages: list) -> list[list[object]]:  # type: ignore[type-arg]
    return [[key_of(m.topic(), m.partition()), m.offset(), m.value().decode()] for m in messages]


@dataclass(slots=True)
class Ownership:
    """One consumer's rebalance callback: assign, revoke or lost, of these partitions."""

    at: float
    event: str
    member_id: str
    partitions: frozenset[int]


class GroupMember(threading.Thread):
    """A confluent-kafka consumer in the group (classic protocol, eager range assignor)
    that commits synchronously every `COMMIT_EVERY` messages; its polls, commits and
    rebalances go into the history, and it remembers what each commit acknowledged and
    every assignment it was handed."""

    def __init__(self, index: int, bootstrap: str, history: History) -> None:
        super().__init__(name=f"member-{index}", daemon=True)
        self.bootstrap = bootstrap
        self.history = history
        self.stopping = threading.Event()
        self.ownership: list[Ownership] = []
        self.commits: list[tuple[float, dict[int, int]]] = []  # (when, partition -> offset)
        self.commit_failures: list[str] = []
        self.consumed = 0
        self.crash: BaseException | None = None

    def _callback(self, event: str):  # type: ignore[no-untyped-def]
        def record(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self.ownership.append(
                Ownership(
                    time.monotonic(),
                    event,
                    consumer.memberid() or "",
                    frozenset(tp.partition for tp in partitions),
                )
            )
            keys = [key_of(tp.topic, tp.partition) for tp in partitions]
            if event == "assign":
                self.history.event(self.name, "assign", {"keys": keys})
            else:
                self.history.event(self.name, "revoke", {"keys": keys, "lost": event == "lost"})

        return record

    def last_commit_at(self) -> float:
        return self.commits[-1][0] if self.commits else 0.0

    def run(self) -> None:
        try:
            consumer = Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": GROUP,
                    "group.protocol": "classic",
                    "partition.assignment.strategy": "range",
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "session.timeout.ms": SESSION_TIMEOUT_MS,
                    "heartbeat.interval.ms": 1000,
                    "max.poll.interval.ms": 120_000,
                }
            )
            consumer.subscribe(
                [TOPIC],
                on_assign=self._callback("assign"),
                on_revoke=self._callback("revoke"),
                on_lost=self._callback("lost"),
            )
            try:
                since_commit = 0
                while not self.stopping.is_set():
                    invocation = self.history.invoke(self.name, "poll")
                    messages = [m for m in consumer.consume(200, 0.2) if m.error() is None]
                    self.history.complete(invocation, "ok", {"records": records_of(messages)})
                    self.consumed += len(messages)
                    since_commit += len(messages)
                    if since_commit >= COMMIT_EVERY:
                        since_commit = 0
                        self._commit(consumer)
            finally:
                consumer.close()
        except BaseException as exc:
            self.crash = exc

    def _commit(self, consumer: Consumer) -> None:
        invocation = self.history.invoke(self.name, "commit")
        try:
            result = consumer.commit(asynchronous=False)
        except KafkaException as exc:
            self.commit_failures.append(str(exc))
            self.history.complete(invocation, "fail", {"error": str(exc)})
            return
        done = {
            tp.partition: tp.offset for tp in result or () if tp.error is None and tp.offset >= 0
        }
        self.history.complete(
            invocation, "ok", {"offsets": {key_of(TOPIC, p): o for p, o in done.items()}}
        )
        if done:
            self.commits.append((time.monotonic(), done))
