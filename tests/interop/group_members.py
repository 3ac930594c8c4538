"""Consumer-group members as real OS processes, and helpers around them.

Each :class:`Member` runs ``group_driver.py`` in a child process (so SIGKILL is
a real crash: no LeaveGroup, no closed socket handshake) and collects the JSON
events it prints. Timestamps are ``time.monotonic()`` in both processes
(CLOCK_MONOTONIC is machine-wide on Linux), so latencies can be computed
between an action taken here and an event seen there.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from interop_helpers import unique_topic

from odradek.testing import EXTERNAL_BOOTSTRAP_ENV, BrokerProcess, ExternalBroker

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "group_driver.py"
CLIENTS = ("confluent", "kafka-python", "aiokafka")
# Set to a directory to keep each member's events and client log after the test.
DUMP_DIR_ENV = "ODRADEK_GROUP_DUMP_DIR"
# "1": client logs at DEBUG; or a comma-separated list of loggers to put at DEBUG.
DEBUG_ENV = "ODRADEK_GROUP_DRIVER_DEBUG"

# Broker settings for the group tests: no initial join delay (Kafka's 3 s default
# would only slow every test down); session bounds as Kafka's.
GROUP_BROKER_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    # Consumer groups (KIP-848): session and heartbeat are the broker's.
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": "1000",
}


@contextlib.contextmanager
def group_broker(data_dir: Path, settings: dict[str, str] | None = None) -> Iterator[Any]:
    """A broker with GROUP_BROKER_SETTINGS, or the external one (ODRADEK_TEST_BOOTSTRAP)."""
    external = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if external:
        yield ExternalBroker(external)
        return
    broker = BrokerProcess(data_dir, settings={**GROUP_BROKER_SETTINGS, **(settings or {})})
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


class Member:
    """One group member process; see group_driver.py for the events it reports."""

    def __init__(
        self,
        client: str,
        bootstrap: str,
        topic: str,
        group: str,
        name: str,
        *,
        session_ms: int = 6000,
        heartbeat_ms: int = 1000,
        strategy: str = "range",
        instance_id: str | None = None,
        max_records: int | None = None,
        max_seconds: float = 120.0,
        batch: int | None = None,
        records_per_s: float | None = None,
        commit: str = "sync",
        group_protocol: str = "classic",
        remote_assignor: str | None = None,
        pattern: str | None = None,
        debug: bool = False,
    ) -> None:
        self.client = client
        self.name = name
        self.spec = {
            "client": client,
            "bootstrap": bootstrap,
            "topic": topic,
            "group": group,
            "name": name,
            "session_ms": session_ms,
            "heartbeat_ms": heartbeat_ms,
            "strategy": strategy,
            "instance_id": instance_id,
            "max_records": max_records,
            "max_seconds": max_seconds,
            "batch": batch,
            "records_per_s": records_per_s,
            "commit": commit,
            "group_protocol": group_protocol,
            "remote_assignor": remote_assignor,
            "pattern": pattern,
            "debug": "1" if debug else os.environ.get(DEBUG_ENV, ""),
        }
        self.events: list[dict[str, Any]] = []
        self.stderr_lines: list[str] = []
        self._cond = threading.Condition()
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), json.dumps(self.spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for t in self._readers:
            t.start()

    # --- event collection -------------------------------------------------------

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._cond:
                self.events.append(event)
                self._cond.notify_all()
        with self._cond:
            self.events.append({"ev": "eof", "t": time.monotonic()})
            self._cond.notify_all()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            if len(self.stderr_lines) < 200_000:
                self.stderr_lines.append(line.rstrip())

    def snapshot(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self.events)

    @property
    def current(self) -> set[int]:
        """Partitions held now, by the last rebalance callback."""
        for event in reversed(self.snapshot()):
            if "current" in event:
                return set(event["current"])
        return set()

    def rebalance_events(self, since: float = 0.0) -> list[dict[str, Any]]:
        return [
            e
            for e in self.snapshot()
            if e["ev"] in ("assigned", "revoked", "lost") and e["t"] >= since
        ]

    def records(self) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for e in self.snapshot():
            if e["ev"] == "records":
                out.extend((p, o) for p, o in e["items"])
        return out

    def errors(self) -> list[dict[str, Any]]:
        return [e for e in self.snapshot() if e["ev"] in ("fatal", "commit_error", "consume_error")]

    def wait_for(self, predicate, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate(self.events):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"{self.name}: timed out after {timeout_s}s: {what}\n{self.debug()}"
                    )
                self._cond.wait(min(left, 0.2))

    # --- actions --------------------------------------------------------------

    def kill(self) -> float:
        """SIGKILL; returns the monotonic time just before the signal."""
        t = time.monotonic()
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        return t

    def close(self, timeout_s: float = 30.0) -> float:
        """Ask for a clean close (LeaveGroup for a dynamic member); returns when asked."""
        t = time.monotonic()
        with contextlib.suppress(BrokenPipeError, OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.write("close\n")
            self.proc.stdin.flush()
        self.wait_exit(timeout_s)
        return t

    def wait_exit(self, timeout_s: float) -> int:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(
                f"{self.name} did not exit in {timeout_s}s\n{self.debug()}"
            ) from None

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
        for t in self._readers:
            t.join(timeout=5)
        dump_dir = os.environ.get(DUMP_DIR_ENV)
        if dump_dir:  # keep every member's events and client log for a post-mortem
            out = Path(dump_dir) / f"{self.spec['group']}-{self.name}"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.with_suffix(".events").write_text("\n".join(map(json.dumps, self.snapshot())))
            out.with_suffix(".stderr").write_text("\n".join(self.stderr_lines))

    def debug(self, events: int = 12) -> str:
        evs = [{k: v for k, v in e.items() if k != "items"} for e in self.snapshot()[-events:]]
        return (
            f"--- {self.name} ({self.client}) last events: {evs}\n"
            f"--- stderr tail:\n" + "\n".join(self.stderr_lines[-15:])
        )


@contextlib.contextmanager
def members_cleanup(members: list[Member]) -> Iterator[list[Member]]:
    """Kill whatever member processes are still running when the block ends."""
    try:
        yield members
    finally:
        for m in members:
            m.cleanup()


# --- group-level checks ---------------------------------------------------------------


def split_ok(holdings: Sequence[set[int]], partitions: int, *, even: bool = True) -> bool:
    """Disjoint, covering 0..partitions-1, and (if even) the same size each."""
    total = sum(len(h) for h in holdings)
    union = set().union(*holdings) if holdings else set()
    if total != partitions or union != set(range(partitions)):
        return False
    return not even or len({len(h) for h in holdings}) == 1


def wait_for_split(
    members: Sequence[Member], partitions: int, timeout_s: float, *, even: bool = True
) -> list[set[int]]:
    """Until the members hold every partition exactly once (split evenly if asked)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for m in members:
            fatal = [e for e in m.snapshot() if e["ev"] in ("fatal", "eof")]
            assert not fatal, f"{m.name} died: {fatal[0]}\n{m.debug()}"
        holdings = [m.current for m in members]
        if split_ok(holdings, partitions, even=even):
            return holdings
        time.sleep(0.05)
    raise AssertionError(
        f"no {'even ' if even else ''}split of {partitions} partitions in {timeout_s}s: "
        f"{[sorted(m.current) for m in members]}\n" + "\n".join(m.debug() for m in members)
    )


def wait_settled(
    members: Sequence[Member],
    partitions: int,
    timeout_s: float,
    *,
    quiet_s: float = 1.5,
    even: bool = True,
) -> list[set[int]]:
    """Until the members hold every partition once and no callback fired for ``quiet_s``.

    A client may start one more rebalance of its own right after a split (kafka-python's
    leader rejoins when its metadata snapshot changes): tests that then assert "no
    rebalance from here on" start from a settled group.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"group did not settle in {timeout_s}s")
        holdings = wait_for_split(members, partitions, left, even=even)
        last = max((e["t"] for m in members for e in m.rebalance_events()), default=0.0)
        quiet = time.monotonic() - last
        if quiet >= quiet_s:
            return holdings
        time.sleep(min(quiet_s - quiet, max(deadline - time.monotonic(), 0)) + 0.05)


def covered_at(members: Sequence[Member], partitions: int, since: float) -> float | None:
    """The first event time >= since at which the members held every partition once."""
    state: list[set[int]] = []
    timeline: list[tuple[float, int, set[int]]] = []
    for i, m in enumerate(members):
        before = set()
        for e in m.snapshot():
            if "current" not in e:
                continue
            if e["t"] < since:
                before = set(e["current"])
            else:
                timeline.append((e["t"], i, set(e["current"])))
        state.append(before)
    timeline.sort(key=lambda x: x[0])
    for t, i, current in timeline:
        state[i] = current
        if split_ok(state, partitions, even=False):
            return t
    return None


# --- topics, producing, admin ------------------------------------------------------------


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)], operation_timeout=15)[topic].result(30)
    # Wait until metadata shows every partition with a leader.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=5).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} has no {partitions} partitions in metadata")


def produce_keyed(bootstrap: str, topic: str, count: int, *, prefix: str = "k") -> dict[int, int]:
    """``count`` keyed records (default partitioner); returns {partition: records}."""
    from confluent_kafka import Producer

    errors: list = []
    per_partition: dict[int, int] = {}

    def on_delivery(err, msg) -> None:
        if err is not None:
            errors.append(err)
        else:
            per_partition[msg.partition()] = per_partition.get(msg.partition(), 0) + 1

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(count):
        producer.produce(
            topic, key=f"{prefix}-{i}".encode(), value=b"v-%06d" % i, on_delivery=on_delivery
        )
        if i % 1000 == 999:
            producer.poll(0)
    assert producer.flush(30) == 0, "producer did not flush"
    assert not errors, errors[:3]
    assert sum(per_partition.values()) == count
    return per_partition


def expected_offsets(per_partition: dict[int, int], base: dict[int, int] | None = None) -> set:
    base = base or {}
    return {
        (p, o) for p, n in per_partition.items() for o in range(base.get(p, 0), base.get(p, 0) + n)
    }


def assert_exactly_once(
    consumed: Iterable[tuple[int, int]], expected: set[tuple[int, int]], what: str = ""
) -> None:
    seen: dict[tuple[int, int], int] = {}
    for key in consumed:
        seen[key] = seen.get(key, 0) + 1
    dups = sorted(k for k, n in seen.items() if n > 1)
    missing = sorted(expected - set(seen))
    extra = sorted(set(seen) - expected)
    assert not dups and not missing and not extra, (
        f"{what}: {len(dups)} duplicated {dups[:10]}, {len(missing)} missing {missing[:10]}, "
        f"{len(extra)} unexpected {extra[:10]}"
    )


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """OffsetFetch through confluent-kafka's committed(): {partition: offset} (-1001 = none)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
    finally:
        consumer.close()
    for tp in got:
        assert tp.error is None, tp.error
    return {tp.partition: tp.offset for tp in got}


def describe_group(bootstrap: str, group: str):
    """confluent-kafka's ConsumerGroupDescription (DescribeGroups)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.describe_consumer_groups([group], request_timeout=15)[group].result(30)


def list_groups(bootstrap: str) -> dict[str, str]:
    """{group id: state} from ListGroups (confluent-kafka)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    result = admin.list_consumer_groups(request_timeout=15).result(30)
    assert not result.errors, result.errors
    return {g.group_id: str(g.state) for g in result.valid}


_TRANSITION = re.compile(r"state_transition group=(\S+) (.*)")


def coordinator_transitions(broker: Any, group: str) -> list[str]:
    """The broker log's ``state_transition`` lines for ``group`` (embedded broker only)."""
    log_path = getattr(broker, "log_path", None)
    if log_path is None:
        return []
    out = []
    for line in Path(log_path).read_text(errors="replace").splitlines():
        m = _TRANSITION.search(line)
        if m and m.group(1) == group:
            out.append(m.group(2))
    return out


_REBALANCING = ("PreparingRebalance", "CompletingRebalance")


def rebalance_windows(bootstrap: str, group: str) -> list[tuple[float, float]] | None:
    """When ``group`` was not Stable: (start, end) pairs on this machine's ``time.monotonic()``,
    from an Odradek broker's rebalance history (``odradek groups history`` reads the same
    events); None when the broker keeps none. A window still open ends now.

    The broker stamps each state transition with the wall clock; the driver processes
    stamp events with CLOCK_MONOTONIC; both are read here to convert.
    """
    import argparse

    from odradek.cli.history import STATE_TRANSITION, read_events
    from odradek.client import AdminClient

    args = argparse.Namespace(
        bootstrap=bootstrap, connect_timeout=5.0, command_timeout=30.0, command_config=None
    )
    with AdminClient(bootstrap_servers=bootstrap, default_api_timeout_ms=15_000) as admin:
        history = read_events(args, admin, group)
    events = [e for e in history if e.get("kind") == STATE_TRANSITION]
    if not events:
        return None
    wall_minus_mono = time.time() - time.monotonic()
    windows: list[tuple[float, float]] = []
    start: float | None = None
    for e in sorted(events, key=lambda e: e["at_ms"]):
        at = e["at_ms"] / 1000 - wall_minus_mono
        if e.get("to_state") in _REBALANCING:
            start = at if start is None else start
        elif start is not None:
            windows.append((start, at))
            start = None
    if start is not None:
        windows.append((start, time.monotonic()))
    return windows


def new_names(prefix: str) -> tuple[str, str]:
    return unique_topic(f"{prefix}-topic"), unique_topic(f"{prefix}-group")


_LEADER = re.compile(r"\bleader=(\S+)")


def leader_member(broker: Any, group: str, members: Sequence[Member]) -> Member | None:
    """The member the broker log names as leader of the latest transition (embedded only).

    Member ids are ``<client.id>-<uuid>`` and every Member's client.id is its name.
    """
    for line in reversed(coordinator_transitions(broker, group)):
        m = _LEADER.search(line)
        if m:
            for member in members:
                if m.group(1).startswith(member.name + "-"):
                    return member
            return None
    return None


def report(record_property, scenario: str, client: str, seconds: float, bound_s: float) -> None:
    """Print a measured latency (``-rP`` or ``-n 0 -s`` show it) and keep it in the junit XML."""
    record_property(f"{scenario}_s", round(seconds, 3))
    print(
        f"GROUP-LATENCY scenario={scenario} client={client} seconds={seconds:.3f} bound={bound_s}"
    )
