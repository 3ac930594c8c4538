"""One consumer-group member in its own OS process (run by group_members.py, not by pytest).

    python group_driver.py SPEC_JSON

SPEC: {"client": "confluent" | "kafka-python" | "aiokafka" | "odradek", "bootstrap",
       "topic", "group", "name", "session_ms", "heartbeat_ms",
       "strategy": "range" | "cooperative-sticky", "instance_id": str | null,
       "max_records": int | null, "max_seconds": float,
       "batch": int (records per poll, default 500; confluent and odradek),
       "records_per_s": float | null (processing pace; confluent and odradek),
       "commit": "sync" (default) | "async" (confluent and odradek),
       "group_protocol": "classic" (default) | "consumer" (KIP-848; confluent and odradek),
       "remote_assignor": str | null (consumer protocol: the server assignor to ask for),
       "pattern": str | null (subscribe to this regex instead of "topic"; records then
                  carry [partition, offset, topic])}

The member subscribes to the topic, and after every poll that returned records
commits exactly those records synchronously (offset + 1), so nothing it has
handed out is left uncommitted when a rebalance comes. (A cooperative member
may consume while its group rebalances, when a commit can fail, and a
synchronous commit may wait for the rebalance: confluent and odradek members
can commit asynchronously instead, and commit what they still owe, failed or
unconfirmed, in the revoke callback.) It
writes one JSON line per event to stdout, each stamped with ``time.monotonic()``
(CLOCK_MONOTONIC, the same clock in every process of the machine):

    {"ev": "started", "t", "client"}
    {"ev": "assigned" | "revoked" | "lost", "t", "parts": [...], "current": [...]}
                                               # parts: what the callback was given
    {"ev": "records", "t", "items": [[partition, offset], ...]}
                      # odradek adds "rebalancing": its own JoinGroup/SyncGroup in flight
    {"ev": "committed", "t", "offsets": {partition: next_offset}}
    {"ev": "commit_error", "t", "error": str}
    {"ev": "closing" | "closed", "t"}
    {"ev": "fatal", "t", "error": str}

A line "close" on stdin (or end of input) closes the consumer cleanly (a
dynamic member sends LeaveGroup) and exits; ``max_records`` does the same
after that many records were consumed and committed. ``max_seconds`` bounds
the whole run. Only the standard library and the client under test are
imported here.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback

_out_lock = threading.Lock()


def emit(ev: str, **fields) -> None:
    line = json.dumps({"ev": ev, "t": time.monotonic(), **fields})
    with _out_lock:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Control:
    """Watches stdin for "close" (or EOF) on a daemon thread."""

    def __init__(self) -> None:
        self.close_requested = threading.Event()
        threading.Thread(target=self._watch, name="stdin", daemon=True).start()

    def _watch(self) -> None:
        for line in sys.stdin:
            if line.strip() == "close":
                break
        self.close_requested.set()


class Tracker:
    """The member's current assignment, fed by the rebalance callbacks, and its commits."""

    def __init__(self, spec: dict | None = None) -> None:
        self.current: set[int] = set()
        self.consumed = 0
        self.owed: dict[int, int] = {}  # partition -> next offset whose commit failed
        self._retried_at = 0.0
        self.records_per_s = (spec or {}).get("records_per_s")

    def process(self, records: int) -> None:
        """Stand for the application's processing time, at the spec's pace."""
        if self.records_per_s:
            time.sleep(records / self.records_per_s)

    def commit(self, nexts: dict[int, int], commit_fn, errors: tuple) -> None:
        """Commit ``{partition: next offset}`` with ``commit_fn``; a failure is owed."""
        try:
            commit_fn(nexts)
        except errors as exc:
            self.owed.update(nexts)
            emit("commit_error", error=repr(exc))
            return
        self.committed(nexts)

    def commit_async(self, nexts: dict[int, int], commit_async_fn) -> None:
        """Start a commit; owed until ``committed`` confirms it (or the revoke callback)."""
        self.owed.update(nexts)
        commit_async_fn(nexts)

    def retry_owed(self, commit_async_fn) -> None:
        """While idle: commit again what is still owed, at most once a second (an async
        commit that failed in a rebalance would otherwise stay owed until a revoke,
        which a member closing during a rebalance never gets: it loses the partitions)."""
        now = time.monotonic()
        mine = {p: o for p, o in self.owed.items() if p in self.current}  # never another's
        if mine and now - self._retried_at >= 1.0:
            self._retried_at = now
            commit_async_fn(mine)

    def committed(self, offsets: dict[int, int]) -> None:
        for p, o in offsets.items():
            if self.owed.get(p, -1) <= o:
                self.owed.pop(p, None)
        emit("committed", offsets=offsets)

    def commit_owed(self, parts, commit_fn, errors: tuple) -> None:
        """Before letting partitions go: commit what is still owed for them."""
        owed = {p: self.owed[p] for p in parts if p in self.owed}
        if owed:
            self.commit(owed, commit_fn, errors)

    def assigned(self, parts) -> None:
        parts = list(parts)
        self.current |= set(parts)
        emit("assigned", parts=sorted(parts), current=sorted(self.current))

    def revoked(self, parts, ev: str = "revoked") -> None:
        parts = list(parts)
        self.current -= set(parts)
        emit(ev, parts=sorted(parts), current=sorted(self.current))


def _key(spec: dict, topic: str, partition: int):
    """How the events name a partition: its number, or "topic:number" with a pattern."""
    return f"{topic}:{partition}" if spec.get("pattern") else partition


def _topic_partition(spec: dict, key) -> tuple[str, int]:
    if spec.get("pattern"):
        topic, _, partition = str(key).rpartition(":")
        return topic, int(partition)
    return spec["topic"], int(key)


def _item(spec: dict, topic: str, partition: int, offset: int) -> list:
    return [partition, offset, topic] if spec.get("pattern") else [partition, offset]


def run_confluent(spec: dict, ctl: Control, deadline: float) -> None:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    conf = {
        "bootstrap.servers": spec["bootstrap"],
        "group.id": spec["group"],
        "client.id": spec["name"],
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "topic.metadata.refresh.interval.ms": 2000,
        "reconnect.backoff.max.ms": 500,
    }
    if spec.get("group_protocol") == "consumer":
        # KIP-848: timeouts and the assignor are the broker's (librdkafka refuses them).
        conf["group.protocol"] = "consumer"
        if spec.get("remote_assignor"):
            conf["group.remote.assignor"] = spec["remote_assignor"]
    else:
        conf["session.timeout.ms"] = spec["session_ms"]
        conf["heartbeat.interval.ms"] = spec["heartbeat_ms"]
        conf["partition.assignment.strategy"] = spec["strategy"]
    if spec.get("instance_id"):
        conf["group.instance.id"] = spec["instance_id"]
    if spec.get("commit") == "async":
        conf["on_commit"] = lambda err, parts: on_commit(err, parts)
    tracker = Tracker(spec)
    consumer = Consumer(conf)

    def commit_fn(nexts: dict, asynchronous: bool = False) -> None:
        tps = [TopicPartition(*_topic_partition(spec, p), o) for p, o in nexts.items()]
        consumer.commit(offsets=tps, asynchronous=asynchronous)

    def on_commit(err, parts) -> None:  # asynchronous commits, inside consume()
        if err is not None or any(p.error is not None for p in parts):
            emit("commit_error", error=str(err or [p.error for p in parts if p.error]))
        else:
            tracker.committed({_key(spec, p.topic, p.partition): p.offset for p in parts})

    def on_assign(_c, parts):
        tracker.assigned(_key(spec, p.topic, p.partition) for p in parts)

    def on_revoke(_c, parts):
        keys = [_key(spec, p.topic, p.partition) for p in parts]
        tracker.commit_owed(keys, commit_fn, (KafkaException,))
        tracker.revoked(keys)

    def on_lost(_c, parts):
        tracker.revoked((_key(spec, p.topic, p.partition) for p in parts), ev="lost")

    topics = ["^" + spec["pattern"]] if spec.get("pattern") else [spec["topic"]]
    consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    emit("started", client="confluent")
    try:
        while time.monotonic() < deadline and not ctl.close_requested.is_set():
            msgs = consumer.consume(num_messages=spec.get("batch") or 500, timeout=0.2)
            batch, nexts = [], {}
            for m in msgs:
                if m.error() is not None:
                    emit("consume_error", error=str(m.error()))
                    continue
                batch.append(_item(spec, m.topic(), m.partition(), m.offset()))
                nexts[_key(spec, m.topic(), m.partition())] = m.offset() + 1
            if not batch:
                if spec.get("commit") == "async":
                    tracker.retry_owed(lambda n: commit_fn(n, asynchronous=True))
                continue
            emit("records", items=batch)
            tracker.process(len(batch))
            if spec.get("commit") == "async":
                tracker.commit_async(nexts, lambda n: commit_fn(n, asynchronous=True))
            else:
                tracker.commit(nexts, commit_fn, (KafkaException,))
            tracker.consumed += len(batch)
            if spec.get("max_records") and tracker.consumed >= spec["max_records"]:
                break
    finally:
        emit("closing")
        consumer.close()
        emit("closed")


def run_kafka_python(spec: dict, ctl: Control, deadline: float) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer, OffsetAndMetadata, TopicPartition
    from kafka.errors import KafkaError

    if spec["strategy"] == "cooperative-sticky":
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor

        strategy = [CooperativeStickyAssignor]
    else:
        from kafka.coordinator.assignors.range import RangePartitionAssignor

        strategy = [RangePartitionAssignor]
    tracker = Tracker()

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            tracker.revoked(tp.partition for tp in revoked)

        def on_partitions_assigned(self, assigned):
            tracker.assigned(tp.partition for tp in assigned)

        def on_partitions_lost(self, lost):
            tracker.revoked((tp.partition for tp in lost), ev="lost")

    kwargs = {}
    if spec.get("instance_id"):
        kwargs["group_instance_id"] = spec["instance_id"]
    consumer = KafkaConsumer(
        bootstrap_servers=spec["bootstrap"],
        group_id=spec["group"],
        client_id=spec["name"],
        session_timeout_ms=spec["session_ms"],
        heartbeat_interval_ms=spec["heartbeat_ms"],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        partition_assignment_strategy=strategy,
        metadata_max_age_ms=2000,
        reconnect_backoff_max_ms=500,
        **kwargs,
    )
    consumer.subscribe([spec["topic"]], listener=Listener())
    # Works around a kafka-python 3.0.12 bug. A leader that joins before its coordinator
    # has a metadata snapshot of the subscription assigns nothing, then rejoins when the
    # metadata arrives (need_rejoin() only because assignment_snapshot != metadata_snapshot).
    # If that JoinGroup outlasts a poll() timeout, the snapshots agree by the next poll,
    # need_rejoin() is False, and the finished JoinGroup/SyncGroup task is never collected
    # (base.join_group_async): the assignment is dropped, heartbeats stay disabled and the
    # member spins until the broker expires its session. Fetching the topic's metadata
    # after subscribe() and before the first poll() gives the leader a full snapshot.
    for _ in range(50):
        if consumer.partitions_for_topic(spec["topic"]):
            break
        time.sleep(0.1)
    emit("started", client="kafka-python")
    try:
        while time.monotonic() < deadline and not ctl.close_requested.is_set():
            polled = consumer.poll(timeout_ms=200, max_records=500)
            batch, nexts = [], {}
            for tp, msgs in polled.items():
                for m in msgs:
                    batch.append([tp.partition, m.offset])
                    nexts[tp.partition] = m.offset + 1
            if not batch:
                continue
            emit("records", items=batch)
            offsets = {
                TopicPartition(spec["topic"], p): OffsetAndMetadata(o, "", -1)
                for p, o in nexts.items()
            }
            try:
                consumer.commit(offsets)
                emit("committed", offsets=nexts)
            except KafkaError as exc:
                emit("commit_error", error=repr(exc))
            tracker.consumed += len(batch)
            if spec.get("max_records") and tracker.consumed >= spec["max_records"]:
                break
    finally:
        emit("closing")
        consumer.close()
        emit("closed")


def run_aiokafka(spec: dict, ctl: Control, deadline: float) -> None:
    import asyncio

    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
    from aiokafka.errors import KafkaError

    tracker = Tracker()

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):
            tracker.revoked(tp.partition for tp in revoked)

        async def on_partitions_assigned(self, assigned):
            tracker.assigned(tp.partition for tp in assigned)

    async def main() -> None:
        kwargs = {}
        if spec.get("instance_id"):
            kwargs["group_instance_id"] = spec["instance_id"]
        consumer = AIOKafkaConsumer(
            bootstrap_servers=spec["bootstrap"],
            group_id=spec["group"],
            client_id=spec["name"],
            session_timeout_ms=spec["session_ms"],
            heartbeat_interval_ms=spec["heartbeat_ms"],
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            metadata_max_age_ms=2000,
            **kwargs,
        )
        consumer.subscribe([spec["topic"]], listener=Listener())
        await consumer.start()
        emit("started", client="aiokafka")
        try:
            while time.monotonic() < deadline and not ctl.close_requested.is_set():
                polled = await consumer.getmany(timeout_ms=200, max_records=500)
                batch, nexts = [], {}
                for tp, msgs in polled.items():
                    for m in msgs:
                        batch.append([tp.partition, m.offset])
                        nexts[tp.partition] = m.offset + 1
                if not batch:
                    continue
                emit("records", items=batch)
                try:
                    await consumer.commit(
                        {TopicPartition(spec["topic"], p): o for p, o in nexts.items()}
                    )
                    emit("committed", offsets=nexts)
                except KafkaError as exc:
                    emit("commit_error", error=repr(exc))
                tracker.consumed += len(batch)
                if spec.get("max_records") and tracker.consumed >= spec["max_records"]:
                    break
        finally:
            emit("closing")
            await consumer.stop()
            emit("closed")

    asyncio.run(main())


def run_odradek(spec: dict, ctl: Control, deadline: float) -> None:
    from odradek.client import Consumer, ConsumerRebalanceListener, KafkaError, TopicPartition

    tracker = Tracker(spec)
    consumer_protocol = spec.get("group_protocol") == "consumer"
    settings = {}
    if consumer_protocol:
        settings = {
            "group_protocol": "consumer",
            "group_remote_assignor": spec.get("remote_assignor"),
        }
    consumer = Consumer(
        bootstrap_servers=spec["bootstrap"],
        group_id=spec["group"],
        client_id=spec["name"],
        group_instance_id=spec.get("instance_id"),
        session_timeout_ms=spec["session_ms"],
        heartbeat_interval_ms=spec["heartbeat_ms"],
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        partition_assignment_strategy=[spec["strategy"]],
        metadata_max_age_ms=2000,
        max_poll_records=spec.get("batch") or 500,
        **settings,
    )

    def commit_fn(nexts: dict) -> None:
        consumer.commit({TopicPartition(*_topic_partition(spec, p)): o for p, o in nexts.items()})

    def on_commit(offsets, error) -> None:  # asynchronous commits, inside poll()
        if error is not None:
            emit("commit_error", error=repr(error))
        else:
            tracker.committed(
                {_key(spec, tp.topic, tp.partition): om.offset for tp, om in offsets.items()}
            )

    def commit_async_fn(nexts: dict) -> None:
        offsets = {TopicPartition(*_topic_partition(spec, p)): o for p, o in nexts.items()}
        consumer.commit_async(offsets, callback=on_commit)

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            keys = [_key(spec, tp.topic, tp.partition) for tp in revoked]
            tracker.commit_owed(keys, commit_fn, (KafkaError,))
            tracker.revoked(keys)

        def on_partitions_assigned(self, assigned):
            tracker.assigned(_key(spec, tp.topic, tp.partition) for tp in assigned)

        def on_partitions_lost(self, lost):
            tracker.revoked((_key(spec, tp.topic, tp.partition) for tp in lost), ev="lost")

    if spec.get("pattern"):
        import re

        consumer.subscribe(pattern=re.compile(spec["pattern"]), listener=Listener())
    else:
        consumer.subscribe([spec["topic"]], listener=Listener())
    emit("started", client="odradek")
    try:
        while time.monotonic() < deadline and not ctl.close_requested.is_set():
            polled = consumer.poll(0.2)
            batch, nexts = [], {}
            for m in polled:
                batch.append(_item(spec, m.topic, m.partition, m.offset))
                nexts[_key(spec, m.topic, m.partition)] = m.offset + 1
            if not batch:
                if spec.get("commit") == "async":
                    tracker.retry_owed(commit_async_fn)
                continue
            # Whether this member's own JoinGroup / SyncGroup was in flight as poll returned.
            rebalancing = consumer._coordinator.rebalance_in_progress()
            emit("records", items=batch, rebalancing=rebalancing)
            tracker.process(len(batch))
            if spec.get("commit") == "async":
                tracker.commit_async(nexts, commit_async_fn)
            else:
                tracker.commit(nexts, commit_fn, (KafkaError,))
            tracker.consumed += len(batch)
            if spec.get("max_records") and tracker.consumed >= spec["max_records"]:
                break
    finally:
        emit("closing")
        consumer.close()
        emit("closed")


RUNNERS = {
    "confluent": run_confluent,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
    "odradek": run_odradek,
}


def main(spec_json: str) -> int:
    spec = json.loads(spec_json)
    # Client logs go to stderr (the test shows their tail when something fails): the
    # group coordinators of the Python clients at INFO, everything at DEBUG if asked.
    import logging

    # "debug" is "1" (everything at DEBUG) or a comma-separated list of loggers.
    debug = str(spec.get("debug") or "")
    logging.basicConfig(
        level=logging.DEBUG if debug == "1" else logging.WARNING,
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    for name in (
        "kafka.coordinator",
        "aiokafka.consumer.group_coordinator",
        "odradek.client.coordinator",
        "odradek.client.membership",
        "odradek.client.group_member",
        "odradek.client.discovery",
        "odradek.client.commits",
    ):
        logging.getLogger(name).setLevel(logging.DEBUG if debug == "1" else logging.INFO)
    for name in filter(None, debug.split(",") if debug != "1" else []):
        logging.getLogger(name).setLevel(logging.DEBUG)
    deadline = time.monotonic() + float(spec.get("max_seconds", 120))
    ctl = Control()
    try:
        RUNNERS[spec["client"]](spec, ctl, deadline)
    except BaseException as exc:
        emit("fatal", error=f"{exc!r}\n{traceback.format_exc()}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
