"""Consumer groups with real clients, each member a real OS process.

For confluent-kafka, kafka-python 3.x and aiokafka (eager protocol, range /
round-robin assignor), three members on a 6-partition topic:

- they split the partitions 2/2/2 and consume 3,000 keyed records exactly once
  across the group, committing as they go (committed offsets end at the log end);
- SIGKILL of one member (the leader when the broker log names it): the survivors
  hold all 6 partitions within session timeout + 10 s;
- a clean close (LeaveGroup) of one member: the survivors hold all 6 within one
  heartbeat interval + 5 s, far below the (long) session timeout;
- commit, stop and restart in the same group: the new member resumes at the
  committed offsets, nothing re-delivered, nothing skipped.

Measured latencies are printed as ``GROUP-LATENCY ...`` lines (``pytest -rP``)
and recorded as junit properties.
"""

from __future__ import annotations

import time

import pytest
from group_members import (
    CLIENTS,
    Member,
    assert_exactly_once,
    committed_offsets,
    coordinator_transitions,
    covered_at,
    create_topic,
    expected_offsets,
    group_broker,
    leader_member,
    members_cleanup,
    new_names,
    produce_keyed,
    report,
    wait_for_split,
    wait_settled,
)

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 6
MESSAGES = 3000
SESSION_MS = 6000
HEARTBEAT_MS = 1000
JOIN_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def group_broker_module(tmp_path_factory):
    with group_broker(tmp_path_factory.mktemp("groups-membership") / "data") as broker:
        yield broker


@pytest.fixture
def broker(group_broker_module):
    """The module's broker; its log tail is printed at teardown (shown when a test fails)."""
    yield group_broker_module
    tail = getattr(group_broker_module, "log_tail", None)
    if tail is not None:
        print("--- broker log tail ---\n" + tail(40))


def _start(client: str, bootstrap: str, topic: str, group: str, n: int, **kw) -> list[Member]:
    return [Member(client, bootstrap, topic, group, f"{client[:2]}-m{i}", **kw) for i in range(n)]


def _wait_consumed(members: list[Member], total: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(len(m.records()) for m in members) >= total:
            return
        time.sleep(0.1)
    got = [len(m.records()) for m in members]
    raise AssertionError(f"consumed {got} of {total} in {timeout_s}s")


@pytest.mark.parametrize("client", CLIENTS)
def test_three_members_split_evenly_and_consume_exactly_once(broker, client: str) -> None:
    topic, group = new_names(f"split-{client}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = _start(client, broker.bootstrap, topic, group, 3)
    with members_cleanup(members):
        holdings = wait_settled(members, PARTITIONS, JOIN_TIMEOUT_S)
        assert sorted(len(h) for h in holdings) == [2, 2, 2], holdings
        stable_since = time.monotonic()

        per_partition = produce_keyed(broker.bootstrap, topic, MESSAGES)
        _wait_consumed(members, MESSAGES, 60)
        time.sleep(1.0)  # a duplicate delivered late would show up here

        consumed = [r for m in members for r in m.records()]
        assert_exactly_once(consumed, expected_offsets(per_partition), f"{client} group")
        for m, held in zip(members, holdings, strict=True):
            assert {p for p, _ in m.records()} <= held, f"{m.name} read outside {held}"
            assert not m.rebalance_events(since=stable_since), m.debug()
            assert not m.errors(), m.errors()[:3]
        assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == {
            p: per_partition.get(p, 0) for p in range(PARTITIONS)
        }
        for m in members:
            m.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_sigkill_member_partitions_go_to_survivors(broker, client: str, record_property) -> None:
    topic, group = new_names(f"kill-{client}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = _start(
        client, broker.bootstrap, topic, group, 3, session_ms=SESSION_MS, heartbeat_ms=HEARTBEAT_MS
    )
    with members_cleanup(members):
        wait_settled(members, PARTITIONS, JOIN_TIMEOUT_S, quiet_s=1.0)
        victim = leader_member(broker, group, members) or members[0]
        survivors = [m for m in members if m is not victim]
        bound_s = SESSION_MS / 1000 + 10

        killed_at = victim.kill()
        holdings = wait_for_split(survivors, PARTITIONS, bound_s + 5)
        covered = covered_at(survivors, PARTITIONS, killed_at)
        assert covered is not None
        latency = covered - killed_at
        report(record_property, "kill_to_reassigned", client, latency, bound_s)
        assert latency <= bound_s, f"{latency:.2f}s > {bound_s}s"
        assert sorted(len(h) for h in holdings) == [3, 3], holdings

        # Nothing is orphaned: records produced now reach exactly the survivors, once.
        before = {m.name: len(m.records()) for m in survivors}
        per_partition = produce_keyed(broker.bootstrap, topic, 300, prefix="after-kill")
        _wait_consumed(survivors, sum(before.values()) + 300, 30)
        fresh = [r for m in survivors for r in m.records()[before[m.name] :]]
        assert_exactly_once(fresh, expected_offsets(per_partition), f"{client} survivors")
        for m in survivors:
            assert not [e for e in m.errors() if e["ev"] == "fatal"], m.debug()
            m.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_clean_close_hands_partitions_over_without_session_wait(
    broker, client: str, record_property
) -> None:
    session_ms = 20_000  # long, so that a wait for it could not pass the bound below
    topic, group = new_names(f"leave-{client}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = _start(
        client, broker.bootstrap, topic, group, 3, session_ms=session_ms, heartbeat_ms=HEARTBEAT_MS
    )
    with members_cleanup(members):
        wait_settled(members, PARTITIONS, JOIN_TIMEOUT_S, quiet_s=1.0)
        leaver = leader_member(broker, group, members) or members[0]
        survivors = [m for m in members if m is not leaver]
        bound_s = HEARTBEAT_MS / 1000 + 5

        asked_at = leaver.close()
        assert leaver.proc.returncode == 0, leaver.debug()
        holdings = wait_for_split(survivors, PARTITIONS, bound_s + 5)
        covered = covered_at(survivors, PARTITIONS, asked_at)
        assert covered is not None
        latency = covered - asked_at
        report(record_property, "leave_to_reassigned", client, latency, bound_s)
        assert latency <= bound_s, f"{latency:.2f}s > {bound_s}s (session {session_ms} ms)"
        assert sorted(len(h) for h in holdings) == [3, 3], holdings
        reasons = " ".join(coordinator_transitions(broker, group))
        assert "timed out" not in reasons, reasons
        for m in survivors:
            m.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_stop_restart_resumes_at_committed_offset(broker, client: str) -> None:
    total = 1200
    topic, group = new_names(f"resume-{client}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    per_partition = produce_keyed(broker.bootstrap, topic, total)

    first = Member(client, broker.bootstrap, topic, group, f"{client[:2]}-first", max_records=400)
    with members_cleanup([first]):
        assert first.wait_exit(60) == 0, first.debug()
    assert not first.errors(), first.errors()[:3]
    got_first = first.records()
    assert 400 <= len(got_first) < total, len(got_first)
    committed_by_first: dict[int, int] = {}
    for e in first.snapshot():
        if e["ev"] == "committed":
            committed_by_first.update({int(p): o for p, o in e["offsets"].items()})
    fetched = committed_offsets(broker.bootstrap, group, topic, PARTITIONS)
    for p in range(PARTITIONS):
        assert fetched[p] == committed_by_first.get(p, -1001), (p, fetched, committed_by_first)

    second = Member(client, broker.bootstrap, topic, group, f"{client[:2]}-second")
    with members_cleanup([second]):
        _wait_consumed([second], total - len(got_first), 60)
        time.sleep(0.5)
        got_second = second.records()
        second.close()
    assert not second.errors(), second.errors()[:3]
    assert_exactly_once(got_first + got_second, expected_offsets(per_partition), client)
    for p in range(PARTITIONS):
        offsets = [o for q, o in got_second if q == p]
        if offsets:
            assert min(offsets) == committed_by_first.get(p, 0), (p, min(offsets))
