"""The faster verdict on a dead broker (odradek.cluster.dead_broker): a registration is
ended early only when the broker's port refuses connections *and* etcd reports its
lease unrefreshed for two refresh intervals; never for a paused or live broker."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from cluster_harness import (
    cluster_metadata,
    log_paths,
    partition_leader,
    running_cluster,
    wait_for,
    wait_fully_replicated,
)
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster.dead_broker import SUSPECT_FOR_TTLS, DeadBrokerDetector
from odradek.cluster.lease_deadline import refresh_interval, stopped_refreshing
from odradek.cluster.metadata import refuses_connections
from odradek.replication.model import RegistrationLease

TTL = 9
ADDRESS = ("127.0.0.1", 1)


class FakeRegistrations:
    """etcd as the detector sees it: one lease per broker, revoked by id."""

    def __init__(self, leases: dict[int, RegistrationLease]) -> None:
        self.leases = leases
        self.revoked: list[int] = []

    async def registration_lease(self, broker_id: int) -> RegistrationLease | None:
        return self.leases.get(broker_id)

    async def revoke_lease(self, lease_id: int) -> None:
        self.revoked.append(lease_id)
        self.leases = {b: lease for b, lease in self.leases.items() if lease.lease_id != lease_id}


def detector(
    registrations: FakeRegistrations,
    *,
    refused: bool,
    now: list[float],
    held_until: float = 0.0,
) -> DeadBrokerDetector:
    async def refuses(host: str, port: int) -> bool:
        return refused

    return DeadBrokerDetector(
        1,
        registrations,
        lambda broker_id: ADDRESS if broker_id != 9 else None,
        lease_ttl_s=TTL,
        fencing_held_until=lambda: held_until,
        clock=lambda: now[0],
        refuses=refuses,
    )


def lease(broker_id: int, remaining_s: int, lease_id: int = 77) -> RegistrationLease:
    return RegistrationLease(broker_id, TTL, remaining_s, lease_id)


def test_a_live_lease_reads_as_refreshed_and_two_missed_refreshes_as_stopped() -> None:
    # etcd truncates: a lease refreshed a moment ago shows TTL - 1 (measured: 7-8 of 9
    # while refreshed every 1.5 s)
    assert not stopped_refreshing(9, 8)
    assert not stopped_refreshing(9, 7)
    assert not stopped_refreshing(9, 6)
    assert stopped_refreshing(9, 5)
    assert stopped_refreshing(3, 1) and not stopped_refreshing(3, 2)


@given(
    ttl=st.integers(2, 60),
    since_refresh=st.floats(0.0, 1.0),  # in refresh intervals: on schedule
    late_s=st.floats(0.0, 0.5),
)
def test_a_broker_refreshing_on_schedule_never_reads_as_stopped(
    ttl: int, since_refresh: float, late_s: float
) -> None:
    """Refreshed within the last interval plus half a second of lag: etcd shows the
    truncated remaining time, and that is never read as two missed refreshes."""
    elapsed = since_refresh * refresh_interval(ttl) + late_s
    remaining = int(ttl - elapsed)
    assert not stopped_refreshing(ttl, remaining)


def test_refused_and_unrefreshed_ends_that_registration_by_its_lease_id() -> None:
    registrations = FakeRegistrations({2: lease(2, 4, lease_id=555)})
    d = detector(registrations, refused=True, now=[0.0])
    d.suspect(2)
    asyncio.run(d.check_once())
    assert registrations.revoked == [555]
    assert d.verdicts == 1 and d.suspects == set()


def test_a_port_that_accepts_settles_the_suspicion_without_a_verdict() -> None:
    registrations = FakeRegistrations({2: lease(2, 0)})  # even with a silent lease
    d = detector(registrations, refused=False, now=[0.0])
    d.suspect(2)
    asyncio.run(d.check_once())
    assert registrations.revoked == [] and d.suspects == set()


def test_a_refused_port_with_a_refreshed_lease_waits_and_the_suspicion_lapses() -> None:
    """Starting up or shutting down: refused, but still refreshing. Checked again each
    round, never ended; the suspicion lapses after SUSPECT_FOR_TTLS TTLs."""
    now = [0.0]
    registrations = FakeRegistrations({2: lease(2, 8)})
    d = detector(registrations, refused=True, now=now)
    d.suspect(2)
    asyncio.run(d.check_once())
    assert d.suspects == {2}
    now[0] = TTL * SUSPECT_FOR_TTLS
    asyncio.run(d.check_once())
    assert registrations.revoked == [] and d.suspects == set()


def test_no_verdict_while_fencing_is_held_after_an_etcd_outage() -> None:
    now = [10.0]
    registrations = FakeRegistrations({2: lease(2, 1)})
    d = detector(registrations, refused=True, now=now, held_until=15.0)
    d.suspect(2)
    asyncio.run(d.check_once())
    assert registrations.revoked == [] and d.suspects == {2}
    now[0] = 15.0
    asyncio.run(d.check_once())
    assert registrations.revoked == [77]


def test_itself_and_brokers_already_gone_are_never_judged() -> None:
    registrations = FakeRegistrations({1: lease(1, 0), 3: lease(3, 0, lease_id=3)})
    d = detector(registrations, refused=True, now=[0.0])
    d.suspect(1)  # this broker
    assert d.suspects == set()
    d.suspect(9)  # not in the view any more: no address
    d.suspect(4)  # no registration in etcd
    asyncio.run(d.check_once())
    assert registrations.revoked == [] and d.suspects == set()


def test_an_etcd_error_gives_no_verdict_and_keeps_the_suspicion() -> None:
    class Down(FakeRegistrations):
        async def registration_lease(self, broker_id: int) -> RegistrationLease | None:
            raise ConnectionError("etcd unreachable")

    d = detector(Down({}), refused=True, now=[0.0])
    d.suspect(2)
    asyncio.run(d.check_once())
    assert d.suspects == {2}


def test_run_settles_a_suspect_raised_while_it_waits() -> None:
    registrations = FakeRegistrations({2: lease(2, 3)})

    async def scenario() -> None:
        d = detector(registrations, refused=True, now=[0.0])
        task = asyncio.create_task(d.run())
        await asyncio.sleep(0)
        d.suspect(2)
        async with asyncio.timeout(5):
            while not registrations.revoked:
                await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert registrations.revoked == [77]


def test_a_listening_socket_nobody_accepts_on_does_not_refuse() -> None:
    """A SIGSTOPped broker's kernel still completes handshakes into the backlog: the
    probe must read that as alive. A closed port refuses."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)  # never accept(): like a paused process
        port = listening.getsockname()[1]
        assert not asyncio.run(refuses_connections("127.0.0.1", port))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    assert asyncio.run(refuses_connections("127.0.0.1", port))


# ---------------------------------------------------------------------------
# Three real brokers. Their lease TTL is long (12 s) so that etcd cannot expire a
# registration within the waits below: whatever ends one sooner is the verdict.

LONG_TTL_S = 12
# The lease was last refreshed at most one interval (2 s) before the kill, so etcd can
# expire it no sooner than TTL - 2 s after it; the verdict comes at 2 missed refreshes.
BEFORE_EXPIRY_S = LONG_TTL_S - refresh_interval(LONG_TTL_S) - 1.0
PAUSE_S = 2 * refresh_interval(LONG_TTL_S) + 3.0  # well past the verdict's silence


def registered(cluster: Any) -> set[int]:
    return set(cluster_metadata(cluster).brokers)


@pytest.mark.timeout(180)
def test_three_brokers_kill_is_judged_before_expiry_and_a_pause_never_is(
    tmp_path: Path,
) -> None:
    settings = {"broker.session.timeout.ms": str(LONG_TTL_S * 1000)}
    with running_cluster(tmp_path / "cluster", settings=settings) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()})
        for future in admin.create_topics([NewTopic("judged", 1, 3)]).values():
            future.result(30)
        md = wait_fully_replicated(cluster, 60)
        leader = partition_leader(md, "judged", 0)
        assert leader is not None

        # A paused follower refuses nothing: it stays registered, well past the
        # silence a verdict needs, and its peers suspect nobody.
        follower = next(b for b in cluster.broker_ids if b != leader)
        with cluster.paused(follower):
            time.sleep(PAUSE_S)  # the pause itself is the scenario (no clock to fake)
            assert follower in registered(cluster)
        # A killed leader: its followers' reconnects are refused; judged dead before
        # etcd could have expired its lease.
        killed_at = time.monotonic()
        cluster.kill(leader)
        wait_for(
            "the killed leader's registration ended",
            lambda: True if leader not in registered(cluster) else None,
            BEFORE_EXPIRY_S,
            lambda: f"broker logs: {log_paths(cluster)}",
        )
        judged_after = time.monotonic() - killed_at
        verdicts = [
            line
            for b in cluster.broker_ids
            if b != leader
            for line in cluster.layout.log_path(b).read_text().splitlines()
            if f"broker {leader} is dead" in line
        ]
        assert verdicts, "a survivor logged the verdict"
        assert not any(f"broker {follower} is dead" in line for line in verdicts)
        new_leader = wait_for(
            "a new leader",
            lambda: (
                b
                if (b := partition_leader(cluster_metadata(cluster), "judged", 0))
                not in (None, -1, leader)
                else None
            ),
            30,
            lambda: f"broker logs: {log_paths(cluster)}",
        )
        print(f"registration ended {judged_after:.1f} s after the kill; leader {new_leader}")
