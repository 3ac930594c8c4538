"""Cooperative members keep consuming through a rebalance (KIP-429), every record once.

Two cooperative-sticky members (real OS processes) consume a backlog of a 6-partition
topic at a steady processing pace; a third member joins. The rebalance runs in two
rounds: the owners rejoin (when a heartbeat tells them), the leader takes one partition
from each and they revoke it, then they rejoin at once and the newcomer gets the two.
Throughout both rounds the owners must keep delivering records of the partitions they
keep, and in the end every record is consumed exactly once across the three members.

"While the group was not Stable" comes from the broker's own rebalance history (the
state transitions an Odradek broker records, with their times); only records delivered
more than one heartbeat interval after the newcomer started count, by when each owner
has learnt of the rebalance and has its own JoinGroup or SyncGroup in flight. Odradek's
members also say so themselves: they report, with each batch, whether their own
JoinGroup / SyncGroup was in flight when ``poll`` returned it.

Run for confluent-kafka (the reference behaviour) and for Odradek's client.
"""

from __future__ import annotations

import time

import pytest
from group_members import (
    Member,
    assert_exactly_once,
    committed_offsets,
    create_topic,
    expected_offsets,
    group_broker,
    members_cleanup,
    new_names,
    produce_keyed,
    rebalance_windows,
    wait_for_split,
    wait_settled,
)

pytestmark = pytest.mark.timeout(150)

PARTITIONS = 6
RECORDS = 24_000
RECORDS_PER_S = 1_000  # each member's processing pace: the backlog outlasts the rebalance
BATCH = 50
HEARTBEAT_MS = 1_000
# The newcomer heartbeats less often: the owners' follow-up rebalance (after they revoked)
# waits for it that long, with their JoinGroups parked at the broker.
NEWCOMER_HEARTBEAT_MS = 2_000
JOIN_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with group_broker(tmp_path_factory.mktemp("groups-coop-consumption") / "data") as b:
        yield b


def _records_at(member: Member) -> list[tuple[float, list[tuple[int, int]], bool | None]]:
    """(time, [(partition, offset)], rebalancing flag or None) per delivered batch."""
    return [
        (e["t"], [tuple(x) for x in e["items"]], e.get("rebalancing"))
        for e in member.snapshot()
        if e["ev"] == "records"
    ]


@pytest.mark.parametrize("client", ["confluent", "odradek"])
def test_owners_keep_consuming_while_a_third_member_joins(broker, client: str) -> None:
    topic, group = new_names(f"coop-flow-{client}")
    create_topic(broker.bootstrap, topic, PARTITIONS)
    per_partition = produce_keyed(broker.bootstrap, topic, RECORDS)

    def member(name: str, heartbeat_ms: int = HEARTBEAT_MS) -> Member:
        return Member(
            client, broker.bootstrap, topic, group, f"{client[:2]}-{name}",
            strategy="cooperative-sticky", heartbeat_ms=heartbeat_ms,
            session_ms=max(6_000, 5 * heartbeat_ms), batch=BATCH,
            records_per_s=RECORDS_PER_S, commit="async",
        )  # fmt: skip

    owners = [member("a"), member("b")]
    everyone = list(owners)
    with members_cleanup(everyone):
        before = wait_settled(owners, PARTITIONS, JOIN_TIMEOUT_S)
        assert sorted(len(h) for h in before) == [3, 3], before
        newcomer = member("c", heartbeat_ms=NEWCOMER_HEARTBEAT_MS)
        everyone.append(newcomer)
        newcomer.wait_for(lambda evs: evs[:1] and evs[0]["ev"] == "started", 30, "start")
        started_at = newcomer.snapshot()[0]["t"]
        after = wait_for_split(everyone, PARTITIONS, JOIN_TIMEOUT_S)
        assert sorted(len(h) for h in after) == [2, 2, 2], after

        want = expected_offsets(per_partition)
        deadline = time.monotonic() + 90
        while {r for m in everyone for r in m.records()} < want:
            assert time.monotonic() < deadline, "the group did not consume the backlog"
            for m in everyone:
                fatal = [e for e in m.errors() if e["ev"] != "commit_error"]
                assert not fatal, f"{m.name}: {fatal[:2]}\n{m.debug()}"
            time.sleep(0.2)
        # Every member's last commit confirmed before any closes: a member closing in
        # the rebalance another's leave starts loses its partitions without committing
        # (as Java's consumer does), and what it owed would be read again.
        ends = {p: per_partition.get(p, -1001) for p in range(PARTITIONS)}  # -1001: none
        deadline = time.monotonic() + 30
        while (got := committed_offsets(broker.bootstrap, group, topic, PARTITIONS)) != ends:
            assert time.monotonic() < deadline, f"commits never reached the ends: {got} {ends}"
            time.sleep(0.5)
        for m in everyone:
            m.close()
        # On a failure, say what the members saw of commits and rebalances.
        seen = "; ".join(
            f"{m.name}: "
            + str([e for e in m.snapshot() if e["ev"] not in ("records", "committed")][-12:])
            for m in everyone
        )
        assert_exactly_once(
            [r for m in everyone for r in m.records()], want, f"{client} cooperative ({seen})"
        )

        windows = rebalance_windows(broker.bootstrap, group)
        if windows is None:  # a broker without a rebalance history: the rebalance's span
            done_at = min(e["t"] for e in newcomer.rebalance_events() if e["parts"])
            windows = [(started_at, done_at)]
        windows = [(s, e) for s, e in windows if e > started_at]
        assert windows, "no rebalance after the newcomer started"
        informed_at = started_at + HEARTBEAT_MS / 1000 + 0.2
        detail = f"rebalancing {[(round(s, 3), round(e, 3)) for s, e in windows]}"
        for owner, held, now in zip(owners, before, after[:2], strict=True):
            kept = held & now
            assert len(kept) == 2, (owner.name, held, now)
            during = [
                (t, len(items))
                for t, items, _ in _records_at(owner)
                if t > informed_at
                and any(s < t < e for s, e in windows)
                and {p for p, _ in items} <= kept
            ]
            print(
                f"COOP-FLOW client={client} owner={owner.name} batches_during_rebalance="
                f"{len(during)} records={sum(n for _, n in during)} {detail}"
            )
            assert during, f"{owner.name} delivered nothing while rebalancing ({detail})"
            if client == "odradek":
                own = [t for t, _, rebalancing in _records_at(owner) if rebalancing]
                assert own, f"{owner.name} never returned records with its rejoin in flight"
