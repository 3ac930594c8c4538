"""Incremental cooperative rebalancing (KIP-429) and static membership (KIP-345).

- cooperative-sticky (confluent-kafka and kafka-python 3.x, whose
  ``CooperativeStickyAssignor`` implements KIP-429): two members hold 3 + 3 of
  6 partitions; when a third joins, the rebalance callbacks of the first two
  revoke exactly one partition each (2 of 6 in all), they keep the others, and
  the newcomer gets exactly the two revoked ones. The broker does nothing
  special here: the test checks it serves the two rebalances the clients run.
- static membership (confluent-kafka ``group.instance.id``): a member SIGKILLed
  and another closed (librdkafka's static members send no LeaveGroup) come back
  with the same instance id within the session timeout: they get their old
  partitions back, the other members' callbacks never fire, and the broker logs
  no state transition for the group (the generation stays the same).
"""

from __future__ import annotations

import time

import pytest
from group_members import (
    Member,
    coordinator_transitions,
    create_topic,
    describe_group,
    group_broker,
    members_cleanup,
    new_names,
    wait_for_split,
    wait_settled,
)

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 6
JOIN_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def group_broker_module(tmp_path_factory):
    with group_broker(tmp_path_factory.mktemp("groups-coop-static") / "data") as broker:
        yield broker


@pytest.fixture
def broker(group_broker_module):
    """The module's broker; its log tail is printed at teardown (shown when a test fails)."""
    yield group_broker_module
    tail = getattr(group_broker_module, "log_tail", None)
    if tail is not None:
        print("--- broker log tail ---\n" + tail(40))


def _moved(member: Member, since: float, ev: str) -> list[int]:
    return [p for e in member.rebalance_events(since) if e["ev"] == ev for p in e["parts"]]


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_cooperative_sticky_third_member_moves_only_two_partitions(broker, client: str) -> None:
    topic, group = new_names(f"coop-{client}")
    create_topic(broker.bootstrap, topic, PARTITIONS)

    def member(name: str) -> Member:
        return Member(
            client, broker.bootstrap, topic, group, f"{client[:2]}-{name}",
            strategy="cooperative-sticky",
        )  # fmt: skip

    first = [member("a"), member("b")]
    everyone = list(first)
    with members_cleanup(everyone):
        before = wait_settled(first, PARTITIONS, JOIN_TIMEOUT_S)
        assert sorted(len(h) for h in before) == [3, 3], before
        joined_at = time.monotonic()
        everyone.append(member("c"))
        after = wait_for_split(everyone, PARTITIONS, JOIN_TIMEOUT_S)
        time.sleep(1.0)  # a late, unnecessary revocation would show up here
        after = [m.current for m in everyone]
        assert sorted(len(h) for h in after) == [2, 2, 2], after

        revoked = {m.name: _moved(m, joined_at, "revoked") for m in first}
        gained = {m.name: _moved(m, joined_at, "assigned") for m in first}
        lost = {m.name: _moved(m, joined_at, "lost") for m in everyone}
        newcomer = everyone[2]
        detail = "\n".join(m.debug(20) for m in everyone)
        assert sum(len(r) for r in revoked.values()) == 2, f"revoked {revoked}\n{detail}"
        assert all(len(r) == 1 for r in revoked.values()), f"revoked {revoked}\n{detail}"
        assert not any(gained.values()), f"old members gained {gained}\n{detail}"
        assert not any(lost.values()), f"lost {lost}\n{detail}"
        for m, held_before, held_after in zip(first, before, after, strict=False):
            assert held_after == held_before - set(revoked[m.name]), (
                m.name,
                held_before,
                held_after,
            )
        moved = {p for r in revoked.values() for p in r}
        assert newcomer.current == moved, (newcomer.current, moved)
        assert not _moved(newcomer, joined_at, "revoked"), detail
        for m in everyone:
            assert not m.errors(), m.errors()[:3]
            m.close()


def test_static_member_restart_within_session_timeout_causes_no_rebalance(broker) -> None:
    session_ms = 10_000
    topic, group = new_names("static")
    create_topic(broker.bootstrap, topic, PARTITIONS)

    def member(i: int, incarnation: int = 0) -> Member:
        return Member(
            "confluent", broker.bootstrap, topic, group, f"st{i}-{incarnation}",
            instance_id=f"static-{i}", session_ms=session_ms, heartbeat_ms=1000,
        )  # fmt: skip

    members = [member(i) for i in range(3)]
    spawned = list(members)
    with members_cleanup(spawned):
        holdings = wait_settled(members, PARTITIONS, JOIN_TIMEOUT_S, quiet_s=2.0)
        assert sorted(len(h) for h in holdings) == [2, 2, 2], holdings
        stable_since = time.monotonic()
        transitions = coordinator_transitions(broker, group)
        desc = describe_group(broker.bootstrap, group)
        assert str(desc.state).endswith("STABLE"), desc.state
        assert sorted(m.group_instance_id for m in desc.members) == [
            "static-0", "static-1", "static-2",
        ]  # fmt: skip

        # 1. SIGKILL member 1 and start it again with the same instance id.
        old = members[1]
        killed_at = old.kill()
        members[1] = member(1, incarnation=1)
        spawned.append(members[1])
        members[1].wait_for(
            lambda evs: any(e.get("current") == sorted(holdings[1]) for e in evs),
            session_ms / 1000,
            f"partitions {sorted(holdings[1])} back",
        )
        back_after_kill = time.monotonic() - killed_at

        # 2. Close member 2 (a static member sends no LeaveGroup) and start it again.
        old = members[2]
        closed_at = old.close()
        members[2] = member(2, incarnation=1)
        spawned.append(members[2])
        members[2].wait_for(
            lambda evs: any(e.get("current") == sorted(holdings[2]) for e in evs),
            session_ms / 1000,
            f"partitions {sorted(holdings[2])} back",
        )
        back_after_close = time.monotonic() - closed_at
        print(
            f"GROUP-LATENCY scenario=static_restart client=confluent "
            f"kill_to_back={back_after_kill:.3f} close_to_back={back_after_close:.3f}"
        )

        time.sleep(session_ms / 1000 + 1.0)  # the old incarnations' sessions have run out
        assert members[0].rebalance_events(stable_since) == [], members[0].debug()
        for i in (1, 2):
            evs = members[i].rebalance_events()
            assert [e["ev"] for e in evs] == ["assigned"], members[i].debug()
            assert set(evs[0]["parts"]) == holdings[i], (evs, holdings[i])
        later = coordinator_transitions(broker, group)
        assert later == transitions, "group rebalanced:\n" + "\n".join(later[len(transitions) :])
        desc = describe_group(broker.bootstrap, group)
        assert str(desc.state).endswith("STABLE"), desc.state
        by_instance = {
            m.group_instance_id: {tp.partition for tp in m.assignment.topic_partitions}
            for m in desc.members
        }
        assert by_instance == {f"static-{i}": holdings[i] for i in range(3)}, by_instance
        for m in members:
            assert not m.errors(), m.errors()[:3]
            m.close()
