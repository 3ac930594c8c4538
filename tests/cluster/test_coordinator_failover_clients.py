"""Killing the broker that is a group's coordinator, with each real client.

One 3-broker cluster serves the module; each client (confluent-kafka, kafka-python,
aiokafka, Odradek's own) gets its own topic (4 partitions, replication factor 3,
``min.insync.replicas=2``) and group of two members. The members are the interop
suite's group driver processes (``tests/interop/group_driver.py``): each commits
synchronously exactly what every poll returned and reports its rebalance callbacks.

Per client: the group consumes and commits everything produced so far; the
coordinator (leader of the group's ``__consumer_offsets`` partition, as etcd and
FindCoordinator agree) is SIGKILLed; then the group must be Stable again with both
members under a new coordinator, its committed offsets exactly as before, each
member rebalanced at most once, and records produced after the kill consumed
exactly once and committed. The killed broker is restarted (and every ISR full
again) before the next client.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_harness import (
    GroupProbe,
    cluster_metadata,
    coordinator_id,
    describe_metadata,
    log_paths,
    running_cluster,
    wait_for,
    wait_fully_replicated,
)
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.devcluster.launcher import LocalCluster

INTEROP = Path(__file__).resolve().parents[1] / "interop"
if str(INTEROP) not in sys.path:  # the group driver and its helpers
    sys.path.insert(0, str(INTEROP))

from group_members import (  # noqa: E402
    Member,
    assert_exactly_once,
    expected_offsets,
    members_cleanup,
    produce_keyed,
    wait_settled,
)

CLIENTS = ("confluent", "kafka-python", "aiokafka", "odradek")
PARTITIONS = 4
MEMBERS = 2
RECORDS = 200
SESSION_TIMEOUT_MS = 6000
# The coordinator's lease ends after broker.session.timeout.ms (3 s); then the new
# leader of the group's partition loads it, and the clients must find it: a client
# whose heartbeats failed for a session timeout meanwhile rejoins. Generous for 2
# loaded cores; the measured time is printed.
RECOVERY_TIMEOUT_S = 45.0
CONSUME_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 60.0
HEALTHY_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("failover") / "cluster") as local:
        yield local


def committed_offsets(probe: GroupProbe, group: str, topic: str) -> dict[int, int]:
    offsets = wait_for(f"{group}'s committed offsets", lambda: probe.committed(group), 30, str)
    return {p: o for (t, p), o in offsets.items() if t == topic}


@pytest.mark.timeout(240)
@pytest.mark.parametrize("client", CLIENTS)
def test_group_survives_its_coordinator_being_killed(cluster: LocalCluster, client: str) -> None:
    bootstrap = cluster.bootstrap_servers()
    topic, group = f"failover-{client}", f"failover-group-{client}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new_topic = NewTopic(topic, PARTITIONS, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new_topic])[topic].result(30)
    probe = GroupProbe(bootstrap)
    members = [
        Member(
            client,
            bootstrap,
            topic,
            group,
            f"{client}-{i}",
            session_ms=SESSION_TIMEOUT_MS,
            heartbeat_ms=1000,
            max_seconds=200.0,
        )
        for i in range(MEMBERS)
    ]
    killed: int | None = None

    def context() -> str:
        return (
            f"client {client}, killed coordinator {killed}; broker logs: {log_paths(cluster)}\n"
            + "\n".join(m.debug() for m in members)
        )

    try:
        with members_cleanup(members):
            first = produce_keyed(bootstrap, topic, RECORDS, prefix="before")
            wait_settled(members, PARTITIONS, SETTLE_TIMEOUT_S)
            consumed_all = expected_offsets(first)

            def caught_up() -> bool | None:
                offsets = probe.committed(group) or {}
                done = all(offsets.get((topic, p)) == n for p, n in first.items())
                return True if done else None

            wait_for("everything consumed and committed", caught_up, CONSUME_TIMEOUT_S, context)
            before = committed_offsets(probe, group, topic)
            held_before = [m.current for m in members]

            md = cluster_metadata(cluster)
            killed = coordinator_id(md, group)
            described = probe.describe(group)
            assert described is not None and described.coordinator is not None, context()
            assert described.coordinator.node_id == killed, (
                f"FindCoordinator names {described.coordinator.node_id}, etcd "
                f"{describe_metadata(md)}\n{context()}"
            )
            print(f"\n{client}: killing coordinator {killed} of {group}", flush=True)
            assert killed is not None
            killed_at = time.monotonic()
            cluster.kill(killed)

            def stable_elsewhere() -> bool | None:
                description = probe.describe(group)
                if description is None or description.state != "Stable":
                    return None
                moved = description.coordinator and description.coordinator.node_id != killed
                return True if moved and len(description.members) == MEMBERS else None

            wait_for(
                "Stable under a new coordinator", stable_elsewhere, RECOVERY_TIMEOUT_S, context
            )
            print(f"{client}: Stable again after {time.monotonic() - killed_at:.2f} s", flush=True)
            assert committed_offsets(probe, group, topic) == before, (
                f"committed offsets changed across the failover (before {before})\n{context()}"
            )

            second = produce_keyed(bootstrap, topic, RECORDS, prefix="after")
            end = {p: first.get(p, 0) + second.get(p, 0) for p in range(PARTITIONS)}

            def resumed() -> bool | None:
                offsets = probe.committed(group) or {}
                return True if all(offsets.get((topic, p)) == n for p, n in end.items()) else None

            wait_for("consumption resumed and committed", resumed, CONSUME_TIMEOUT_S, context)
            print(
                f"{client}: consumed and committed again {time.monotonic() - killed_at:.2f} s "
                "after the kill",
                flush=True,
            )
            assert_exactly_once(
                [r for m in members for r in m.records()],
                consumed_all | expected_offsets(second, base=first),
                f"{client}: records across the failover",
            )
            for member, held in zip(members, held_before, strict=True):
                rebalances = [
                    e for e in member.rebalance_events(since=killed_at) if e["ev"] == "assigned"
                ]
                assert len(rebalances) <= 1, (
                    f"{member.name} rebalanced {len(rebalances)} times after the kill "
                    f"(held {sorted(held)})\n{context()}"
                )
                print(f"{member.name}: {len(rebalances)} rebalance(s) after the kill", flush=True)
                assert not member.errors() or all(
                    e["ev"] == "commit_error" for e in member.errors()
                ), f"{member.name}: {member.errors()}\n{context()}"
            for member in members:
                member.close()
    finally:
        probe.close()
        if killed is not None and not cluster.is_running(killed):
            cluster.start(killed)
        wait_fully_replicated(cluster, HEALTHY_TIMEOUT_S, context)
