"""Consumer groups with ``group.protocol=consumer`` (KIP-848), each member a real OS process.

confluent-kafka (librdkafka's next-generation consumer), Odradek's client, and a mix of
both, on a 6-partition topic, with the broker's consumer-group session of 6 s and
heartbeat of 1 s:

- three members split the partitions 2/2/2 and consume 3,000 records exactly once,
  committing as they go (committed offsets end at the log end);
- SIGKILL of one member: the survivors own everything within the session timeout and
  one heartbeat (plus scheduling slack);
- a clean close: the survivors own everything within one heartbeat interval (plus
  slack), far below the session;
- a member joining while the others consume: no member ever stops consuming (revokes)
  a partition it keeps, and they go on reading meanwhile;
- commit, stop, restart: the new member resumes at the committed offsets;
- a regex subscription (matched on the broker) picks up a topic created later;
- partitions added to a subscribed topic are assigned, a deleted topic's revoked, with
  the members' own metadata refresh far away (the broker tells the coordinator).

Latencies are printed as ``GROUP-LATENCY ...`` lines (``pytest -rP``).
"""

from __future__ import annotations

import time

import pytest
from group_members import (
    Member,
    assert_exactly_once,
    committed_offsets,
    covered_at,
    create_topic,
    expected_offsets,
    group_broker,
    members_cleanup,
    new_names,
    produce_keyed,
    report,
    wait_for_split,
    wait_settled,
)

pytestmark = pytest.mark.timeout(150)

PARTITIONS = 6
MESSAGES = 3000
SESSION_S = 6.0  # group.consumer.session.timeout.ms of the test broker
HEARTBEAT_S = 1.0  # group.consumer.heartbeat.interval.ms
SLACK_S = 5.0  # scheduling on a loaded 2-core machine, processes polling every 0.2 s
JOIN_TIMEOUT_S = 60
CLIENTS = ("confluent", "odradek")
MIXES = {
    "confluent": ("confluent",) * 3,
    "odradek": ("odradek",) * 3,
    "mixed": ("confluent", "odradek", "confluent"),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with group_broker(tmp_path_factory.mktemp("groups-consumer-protocol") / "data") as broker:
        yield broker


def _member(client: str, broker, topic: str, group: str, name: str, **kw) -> Member:
    return Member(client, broker.bootstrap, topic, group, name, group_protocol="consumer", **kw)


def _start(clients, broker, topic: str, group: str, **kw) -> list[Member]:
    return [_member(c, broker, topic, group, f"{c[:2]}-m{i}", **kw) for i, c in enumerate(clients)]


def _wait_consumed(members: list[Member], total: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sum(len(m.records()) for m in members) >= total:
            return
        time.sleep(0.1)
    raise AssertionError(f"consumed {[len(m.records()) for m in members]} of {total}")


@pytest.mark.parametrize("mix", MIXES)
def test_three_members_split_evenly_and_consume_exactly_once(broker, mix: str) -> None:
    topic, group = new_names(f"kip848-split-{mix}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = _start(MIXES[mix], broker, topic, group)
    with members_cleanup(members):
        holdings = wait_settled(members, PARTITIONS, JOIN_TIMEOUT_S)
        assert sorted(len(h) for h in holdings) == [2, 2, 2], holdings
        stable_since = time.monotonic()
        per_partition = produce_keyed(broker.bootstrap, topic, MESSAGES)
        _wait_consumed(members, MESSAGES, 60)
        time.sleep(1.0)  # a duplicate delivered late would show up here
        consumed = [r for m in members for r in m.records()]
        assert_exactly_once(consumed, expected_offsets(per_partition), f"{mix} group")
        for m, held in zip(members, holdings, strict=True):
            assert {p for p, _ in m.records()} <= held, f"{m.name} read outside {held}"
            assert not m.rebalance_events(since=stable_since), m.debug()
            assert not [e for e in m.errors() if e["ev"] != "commit_error"], m.errors()[:3]
        assert committed_offsets(broker.bootstrap, group, topic, PARTITIONS) == {
            p: per_partition.get(p, 0) for p in range(PARTITIONS)
        }
        for m in members:
            m.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_sigkill_survivors_own_everything_within_session_and_a_heartbeat(
    broker, client: str, record_property
) -> None:
    topic, group = new_names(f"kip848-kill-{client}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = _start((client,) * 3, broker, topic, group)
    with members_cleanup(members):
        wait_settled(members, PARTITIONS, JOIN_TIMEOUT_S, quiet_s=1.0)
        victim, survivors = members[0], members[1:]
        bound_s = SESSION_S + HEARTBEAT_S + SLACK_S
        killed_at = victim.kill()
        holdings = wait_for_split(survivors, PARTITIONS, bound_s + 10)
        covered = covered_at(survivors, PARTITIONS, killed_at)
        assert covered is not None
        latency = covered - killed_at
        report(record_property, "kip848_kill_to_reassigned", client, latency, bound_s)
        assert latency <= bound_s, f"{latency:.2f}s > {bound_s}s"
        # Not before the session timeout either: the coordinator fenced, not guessed.
        assert latency >= SESSION_S - 1.0, f"{latency:.2f}s: before the session timeout?"
        assert sorted(len(h) for h in holdings) == [3, 3], holdings
        before = {m.name: len(m.records()) for m in survivors}
        per_partition = produce_keyed(broker.bootstrap, topic, 300, prefix="after-kill")
        _wait_consumed(survivors, sum(before.values()) + 300, 30)
        fresh = [r for m in survivors for r in m.records()[before[m.name] :]]
        assert_exactly_once(fresh, expected_offsets(per_partition), f"{client} survivors")
        for m in survivors:
            m.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_clean_close_hands_partitions_over_within_a_heartbeat(
    broker, client: str, record_property
) -> None:
    topic, group = new_names(f"kip848-leave-{client}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    members = _start((client,) * 3, broker, topic, group)
    with members_cleanup(members):
        wait_settled(members, PARTITIONS, JOIN_TIMEOUT_S, quiet_s=1.0)
        leaver, survivors = members[0], members[1:]
        bound_s = HEARTBEAT_S + SLACK_S
        asked_at = leaver.close()
        assert leaver.proc.returncode == 0, leaver.debug()
        holdings = wait_for_split(survivors, PARTITIONS, bound_s + 10)
        covered = covered_at(survivors, PARTITIONS, asked_at)
        assert covered is not None
        latency = covered - asked_at
        report(record_property, "kip848_leave_to_reassigned", client, latency, bound_s)
        assert latency <= bound_s, f"{latency:.2f}s > {bound_s}s (session {SESSION_S}s)"
        assert sorted(len(h) for h in holdings) == [3, 3], holdings
        for m in survivors:
            m.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_a_joining_member_never_stops_the_others_on_partitions_they_keep(
    broker, client: str
) -> None:
    topic, group = new_names(f"kip848-join-{client}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    produce_keyed(broker.bootstrap, topic, 6000)
    # Paced consumers: there is always something left to read while the third joins.
    pace = {"records_per_s": 400.0, "batch": 20}
    first = _start((client,) * 2, broker, topic, group, **pace)
    with members_cleanup(first):
        before = wait_settled(first, PARTITIONS, JOIN_TIMEOUT_S, quiet_s=1.0)
        joined_at = time.monotonic()
        third = _member(client, broker, topic, group, f"{client[:2]}-m2", **pace)
        members = [*first, third]
        with members_cleanup([third]):
            after = wait_settled(members, PARTITIONS, JOIN_TIMEOUT_S, quiet_s=1.0)
            assert sorted(len(h) for h in after) == [2, 2, 2], after
            settled_at = time.monotonic()
            for m, held_before, held_after in zip(first, before, after[:2], strict=True):
                kept = held_before & held_after
                assert len(kept) == 2, (held_before, held_after)  # uniform is sticky
                for e in m.rebalance_events(since=joined_at):
                    taken = set(e["parts"]) & kept if e["ev"] != "assigned" else set()
                    assert not taken, f"{m.name} stopped on kept partitions {taken}: {e}"
                # It read its kept partitions while the group rebalanced.
                during = [
                    e
                    for e in m.snapshot()
                    if e["ev"] == "records" and joined_at <= e["t"] <= settled_at
                ]
                assert {p for e in during for p, _ in e["items"]} & kept, m.debug()
            for m in members:
                m.close()


@pytest.mark.parametrize("client", CLIENTS)
def test_commit_stop_restart_resumes_at_committed_offset(broker, client: str) -> None:
    total = 1200
    topic, group = new_names(f"kip848-resume-{client}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    per_partition = produce_keyed(broker.bootstrap, topic, total)
    first = _member(client, broker, topic, group, f"{client[:2]}-first", max_records=400)
    with members_cleanup([first]):
        assert first.wait_exit(60) == 0, first.debug()
    got_first = first.records()
    assert 400 <= len(got_first) < total, len(got_first)
    committed_by_first: dict[int, int] = {}
    for e in first.snapshot():
        if e["ev"] == "committed":
            committed_by_first.update({int(p): o for p, o in e["offsets"].items()})
    second = _member(client, broker, topic, group, f"{client[:2]}-second")
    with members_cleanup([second]):
        _wait_consumed([second], total - len(got_first), 60)
        time.sleep(0.5)
        got_second = second.records()
        second.close()
    assert_exactly_once(got_first + got_second, expected_offsets(per_partition), client)
    for p in range(PARTITIONS):
        offsets = [o for q, o in got_second if q == p]
        if offsets:
            assert min(offsets) == committed_by_first.get(p, 0), (p, min(offsets))


@pytest.mark.parametrize("client", CLIENTS)
def test_regex_subscription_picks_up_a_new_topic(broker, client: str, record_property) -> None:
    prefix, group = new_names(f"kip848-rx-{client}")
    old, new = f"{prefix}-old", f"{prefix}-new"
    create_topic(broker.bootstrap, old, 2)
    member = _member(client, broker, old, group, f"{client[:2]}-rx", pattern=f"{prefix}-.*")
    with members_cleanup([member]):
        member.wait_for(
            lambda evs: any(e["ev"] == "assigned" and e["current"] for e in evs),
            JOIN_TIMEOUT_S,
            "the pattern's first topic assigned",
        )
        created_at = time.monotonic()
        create_topic(broker.bootstrap, new, 2)
        member.wait_for(
            lambda evs: any(
                e["ev"] == "assigned" and any(k.startswith(new + ":") for k in e["current"])
                for e in evs
            ),
            30,
            "the new topic assigned",
        )
        picked = next(
            e["t"]
            for e in member.snapshot()
            if e["ev"] == "assigned" and any(k.startswith(new + ":") for k in e["current"])
        )
        report(record_property, "kip848_regex_new_topic", client, picked - created_at, 30)
        produce_keyed(broker.bootstrap, new, 50, prefix="rx")
        member.wait_for(
            lambda evs: (
                sum(1 for e in evs if e["ev"] == "records" for item in e["items"] if item[2] == new)
                >= 50
            ),
            30,
            "the new topic's records consumed",
        )
        member.close()


def test_partitions_added_and_topic_deleted_reach_the_members(broker, record_property) -> None:
    """The coordinator hears of topic changes itself (no member subscribes anew): two
    confluent-kafka members of one group on topics A (2 partitions) and B; A grows to 4
    and the new partitions are assigned; B is deleted and its partitions revoked."""
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewPartitions

    prefix, group = new_names("kip848-meta")
    grows, doomed = f"{prefix}-grows", f"{prefix}-doomed"
    create_topic(broker.bootstrap, grows, 2)
    create_topic(broker.bootstrap, doomed, 2)
    consumers = [
        Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": group,
                "group.protocol": "consumer",
                "topic.metadata.refresh.interval.ms": 60000,  # the broker must notice
            }
        )
        for _ in range(2)
    ]

    def owned() -> set[tuple[str, int]]:
        for c in consumers:
            c.poll(0.05)
        return {(tp.topic, tp.partition) for c in consumers for tp in c.assignment()}

    def wait_owned(expected: set[tuple[str, int]], what: str) -> float:
        started = time.monotonic()
        while time.monotonic() - started < 20:
            if owned() == expected:
                return time.monotonic() - started
        raise AssertionError(f"{what}: owned {sorted(owned())}, expected {sorted(expected)}")

    try:
        for c in consumers:
            c.subscribe([grows, doomed])
        wait_owned({(t, p) for t in (grows, doomed) for p in range(2)}, "first assignment")
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_partitions([NewPartitions(grows, 4)])[grows].result(15)
        took = wait_owned({(t, p) for t, n in ((grows, 4), (doomed, 2)) for p in range(n)}, "grow")
        report(record_property, "kip848_partitions_added", "confluent", took, 20)
        admin.delete_topics([doomed], operation_timeout=15)[doomed].result(30)
        took = wait_owned({(grows, p) for p in range(4)}, "deleted topic revoked")
        report(record_property, "kip848_topic_deleted", "confluent", took, 20)
    finally:
        for c in consumers:
            c.close()
