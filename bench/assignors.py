"""Benchmark: assign() time of Odradek's assignors vs kafka-python's sticky assignor.

Scenarios (identical subscriptions to every topic):

* fresh  -- N members join an empty group (no previous assignment);
* leave  -- one member leaves; the previous assignment is the assignor's own "fresh"
            result (balanced), which the survivors report (sticky: user data,
            cooperative-sticky: owned partitions and generation; range and round-robin
            ignore it). "moved" counts previously owned partitions that changed owner.

kafka-python's ``StickyPartitionAssignor`` gets the same input (its own subscription
bytes, decoded by itself; for "leave" the previous assignment is Odradek sticky's balanced
one) and runs in a child process with a time limit.

    python bench/assignors.py                      # 1,000 members x 10,000 partitions
    python bench/assignors.py --members 100 --partitions 1000 --no-kafka-python
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from odradek.client.assignors import Assignment, Subscription, get_assignor

NAMES = ("range", "roundrobin", "sticky", "cooperative-sticky")


class Scenario(NamedTuple):
    cluster: dict[str, int]
    members: list[str]
    previous: dict[str, list[tuple[str, int]]]  # member -> what it owned (maybe empty)


def make_scenarios(members: int, partitions: int, topics: int) -> dict[str, Scenario]:
    per_topic, extra = divmod(partitions, topics)
    cluster = {f"topic-{i:03d}": per_topic + (1 if i < extra else 0) for i in range(topics)}
    ids = [f"consumer-{i:05d}" for i in range(members)]
    return {"fresh": Scenario(cluster, ids, {m: [] for m in ids})}


def leave_scenario(fresh: Scenario, previous: Mapping[str, Assignment]) -> Scenario:
    """``fresh`` after its assignment ``previous``, minus the middle member."""
    leaver = fresh.members[len(fresh.members) // 2]
    survivors = [m for m in fresh.members if m != leaver]
    return Scenario(
        fresh.cluster, survivors, {m: previous[m].topic_partitions() for m in survivors}
    )


def odradek_input(name: str, sc: Scenario) -> dict[str, Subscription]:
    topics = tuple(sc.cluster)
    subs: dict[str, Subscription] = {}
    for m in sc.members:
        owned = sc.previous[m]
        if name == "sticky":
            member = get_assignor("sticky")
            if owned:
                member.on_assignment(Assignment.of(owned), 1)
            subs[m] = Subscription(topics, member.subscription_user_data(topics))
        elif name == "cooperative-sticky":
            subs[m] = Subscription.of(topics, owned=owned, generation_id=1 if owned else -1)
        else:
            subs[m] = Subscription(topics)
    return subs


def timed(fn: Callable[[], Any], repeat: int) -> float:
    best = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best.append(time.perf_counter() - start)
    return statistics.median(best)


def run_odradek(name: str, sc: Scenario, repeat: int) -> tuple[float, str]:
    subs = odradek_input(name, sc)
    assignor = get_assignor(name)
    seconds = timed(lambda: assignor.assign(sc.cluster, subs), repeat)
    out = assignor.assign(sc.cluster, subs)
    return seconds, describe(out, sc)


def describe(out: Mapping[str, Assignment], sc: Scenario) -> str:
    sizes = [len(a.topic_partitions()) for a in out.values()]
    moved = sum(len(set(sc.previous[m]) - set(out[m].topic_partitions())) for m in sc.members)
    return f"min/max {min(sizes)}/{max(sizes)}, moved {moved}"


# ------------------------------------------------------------------------ kafka-python


class _KpCluster:
    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def topics(self) -> set[str]:
        return set(self.counts)

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        n = self.counts.get(topic)
        return None if n is None else set(range(n))


def _kp_child(sc: Scenario, conn: Any) -> None:
    from collections import namedtuple

    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
    from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription
    from kafka.structs import TopicPartition

    member_t = namedtuple("member_t", "member_id group_instance_id metadata")
    members = []
    for m in sc.members:
        owned = [TopicPartition(t, p) for t, p in sc.previous[m]] or None
        raw = StickyPartitionAssignor._metadata(list(sc.cluster), owned, 1).encode(version=0)
        members.append(member_t(m, None, ConsumerProtocolSubscription.decode(raw)))
    assignor = StickyPartitionAssignor()
    start = time.perf_counter()
    out = assignor.assign(_KpCluster(sc.cluster), members)
    seconds = time.perf_counter() - start
    sizes = [len(a.partitions()) for a in out.values()]
    moved = sum(
        len({TopicPartition(t, p) for t, p in sc.previous[m]} - set(out[m].partitions()))
        for m in sc.members
    )
    conn.send((seconds, f"min/max {min(sizes)}/{max(sizes)}, moved {moved}"))


def run_kafka_python(sc: Scenario, limit: float) -> tuple[float | None, str]:
    ctx = mp.get_context("spawn") if sys.platform == "win32" else mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_kp_child, args=(sc, child), daemon=True)
    proc.start()
    try:
        if parent.poll(limit):
            seconds, info = parent.recv()
            return float(seconds), str(info)
        return None, f"did not finish in {limit:.0f} s"
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join(5)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--members", type=int, default=1000)
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="runs per cell (median)")
    ap.add_argument("--no-kafka-python", action="store_true")
    ap.add_argument("--kafka-python-timeout", type=float, default=600.0)
    args = ap.parse_args(argv)

    fresh = make_scenarios(args.members, args.partitions, args.topics)["fresh"]
    print(
        f"{args.members} members x {args.partitions} partitions ({args.topics} topics), "
        f"identical subscriptions; Python {sys.version.split()[0]}; median of {args.repeat}"
    )
    print(f"| {'assignor':<38} | {'scenario':<8} | {'assign() s':>10} | result")
    print("|" + "-" * 40 + "|" + "-" * 10 + "|" + "-" * 12 + "|" + "-" * 30)
    for name in NAMES:
        previous = get_assignor(name).assign(fresh.cluster, odradek_input(name, fresh))
        for sc_name, sc in (("fresh", fresh), ("leave", leave_scenario(fresh, previous))):
            seconds, info = run_odradek(name, sc, args.repeat)
            print(
                f"| {'odradek ' + name:<38} | {sc_name:<8} | {seconds:>10.3f} | {info}", flush=True
            )
    if not args.no_kafka_python:
        balanced = get_assignor("sticky").assign(fresh.cluster, odradek_input("sticky", fresh))
        for sc_name, sc in (("fresh", fresh), ("leave", leave_scenario(fresh, balanced))):
            kp_seconds, info = run_kafka_python(sc, args.kafka_python_timeout)
            cell = "-" if kp_seconds is None else f"{kp_seconds:.3f}"
            label = "kafka-python StickyPartitionAssignor"
            print(f"| {label:<38} | {sc_name:<8} | {cell:>10} | {info}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
