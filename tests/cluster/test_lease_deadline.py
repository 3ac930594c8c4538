"""The lease deadline reasoning (odradek.cluster.lease_deadline), on an injected clock:
a broker keeps its roles exactly as long as etcd cannot have expired its lease."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster.controller import Controller
from odradek.cluster.lease_deadline import (
    RETRY_AFTER_FAILURE_S,
    LeaseDeadline,
    refresh_interval,
    safety_margin,
)
from odradek.replication.model import PartitionState, PartitionUpdate, VersionedPartitionState

TTL = 9.0


def test_deadline_counts_from_the_send_time_of_the_last_granted_keep_alive() -> None:
    deadline = LeaseDeadline.granted_at(100.0, TTL)
    margin = safety_margin(TTL)
    assert deadline.deadline == 100.0 + TTL - margin
    # the reply came late (a slow network): the deadline still counts from the send
    deadline.refreshed(sent_at=103.0, granted_ttl_s=TTL)
    assert deadline.deadline == 103.0 + TTL - margin
    assert deadline.alive(103.0 + TTL - margin - 0.001)
    assert not deadline.alive(103.0 + TTL - margin)


def test_an_older_grant_arriving_late_never_moves_the_deadline_back() -> None:
    deadline = LeaseDeadline.granted_at(100.0, TTL)
    deadline.refreshed(sent_at=105.0, granted_ttl_s=TTL)
    deadline.refreshed(sent_at=102.0, granted_ttl_s=TTL)
    assert deadline.alive_since == 105.0


def test_an_outage_shorter_than_the_ttl_less_one_refresh_interval_is_ridden_out() -> None:
    """Refresh on schedule until etcd goes away at t=50, retry while it is away, and
    etcd answers again at t=50+outage: the deadline is never reached."""
    interval = refresh_interval(TTL)
    outage = TTL - interval - safety_margin(TTL) - 0.01
    deadline = LeaseDeadline.granted_at(0.0, TTL)
    now, failing = 0.0, False
    while now < 50.0 + outage + 5:
        now += deadline.next_attempt_in(now, failing=failing)
        assert deadline.alive(now), f"lease given up at {now}"
        if 50.0 <= now < 50.0 + outage:
            failing = True  # the keep-alive sent now is not answered
        else:
            deadline.refreshed(now, TTL)
            failing = False


def test_an_outage_longer_than_the_ttl_reaches_the_deadline() -> None:
    deadline = LeaseDeadline.granted_at(0.0, TTL)
    assert not deadline.alive(TTL)  # nobody answers for a whole TTL: maybe expired


def test_every_member_down_means_no_leader_can_expire_the_lease() -> None:
    """Probes that find every member refusing connections, ending while the lease was
    alive, give the lease a whole TTL from their start (the next leader renews it)."""
    deadline = LeaseDeadline.granted_at(0.0, TTL)
    assert deadline.no_leader_between(6.0, 6.3)
    assert deadline.deadline == 6.0 + TTL - safety_margin(TTL)
    # probes that end after the deadline prove nothing: etcd may have expired it before
    late = LeaseDeadline.granted_at(0.0, TTL)
    assert not late.no_leader_between(TTL - safety_margin(TTL) - 0.1, TTL)
    assert late.alive_since == 0.0
    # nor do probes older than what is already known
    assert not deadline.no_leader_between(5.0, 5.1)
    assert deadline.alive_since == 6.0


def test_retries_come_soon_and_never_wait_past_the_deadline() -> None:
    deadline = LeaseDeadline.granted_at(0.0, TTL)
    assert deadline.next_attempt_in(0.0, failing=False) == refresh_interval(TTL)
    assert deadline.next_attempt_in(0.0, failing=True) == RETRY_AFTER_FAILURE_S
    assert deadline.next_attempt_in(deadline.deadline - 0.05, failing=False) == pytest.approx(0.05)
    assert deadline.next_attempt_in(deadline.deadline + 1, failing=True) == 0.0


def test_a_refresh_reporting_the_lease_gone_is_not_a_grant() -> None:
    with pytest.raises(ValueError):
        LeaseDeadline.granted_at(0.0, TTL).refreshed(1.0, 0)


@given(
    ttl=st.integers(min_value=2, max_value=60),
    events=st.lists(
        st.tuples(st.floats(min_value=0.0, max_value=30.0), st.booleans()), max_size=30
    ),
)
def test_the_deadline_is_never_later_than_etcds_own_expiry(
    ttl: int, events: list[tuple[float, bool]]
) -> None:
    """Model etcd's lessor: a keep-alive granted at etcd's time g (after its send s)
    sets expiry g + TTL. Whatever the delays, the keeper's deadline stays before etcd's
    expiry by at least the margin."""
    deadline = LeaseDeadline.granted_at(0.0, ttl)
    etcd_expiry = 0.0 + ttl  # granted at the send, the earliest possible
    now = 0.0
    for gap, granted in events:
        now += gap
        if not deadline.alive(now):
            break
        if granted and now < etcd_expiry:
            delay = gap / 3  # the request reached etcd later than it was sent
            etcd_expiry = now + delay + ttl
            deadline.refreshed(now, ttl)
        assert deadline.deadline <= etcd_expiry - safety_margin(ttl)


def test_a_held_broker_keeps_its_leadership_and_isr_place() -> None:
    """After an etcd outage the controller leaves brokers that have not re-registered
    yet where they are (no ISR shrink to the first broker back)."""
    decide = Controller.decide
    state = PartitionState(leader=2, leader_epoch=4, isr=(2, 1, 3), partition_epoch=7)
    replicas = (2, 1, 3)
    only_one_back = frozenset({1})
    held = frozenset({2, 3})
    assert decide(None, replicas, state, only_one_back, unclean=False, held=held) is None  # type: ignore[arg-type]
    fenced = decide(None, replicas, state, only_one_back, unclean=False)  # type: ignore[arg-type]
    assert fenced is not None and fenced.leader == 1 and fenced.isr == (1,)


class FakeView:
    """The controller's view of a cluster: partition t-0 led by broker 2 with ISR
    [2, 1, 3], and only broker 1 registered again (the first back after an outage)."""

    def __init__(self) -> None:
        state = PartitionState(leader=2, leader_epoch=4, isr=(2, 1, 3), partition_epoch=7)
        self.store = self
        self.brokers = {1: None}
        self.assignments: dict[str, Any] = {}
        self.states = {("t", 0): VersionedPartitionState("t", 0, state, 10)}
        self.writes: list[PartitionState] = []

    def replicas_of(self, topic: str, partition: int) -> tuple[int, ...]:
        return (2, 1, 3)

    def unclean_for(self, topic: str) -> bool:
        return False

    def reassignments(self) -> dict[Any, Any]:
        return {}

    async def update_partition(self, current: Any, **wanted: Any) -> PartitionUpdate:
        self.writes.append(
            PartitionState(wanted["leader"], wanted["leader_epoch"], wanted["isr"], 0)
        )
        return PartitionUpdate(True, None)


def test_the_controller_fences_missing_brokers_only_once_the_hold_ends() -> None:
    """No sleep: the hold is given as a moment on the loop's clock."""

    async def scenario() -> None:
        view = FakeView()
        controller = Controller(view, None)  # type: ignore[arg-type]
        now = asyncio.get_running_loop().time()
        controller.hold_fencing(now + 3600)
        assert controller.held(frozenset(view.brokers)) == {2, 3}
        await controller.reconcile()
        assert view.writes == []  # broker 2 keeps leading, the ISR stays whole
        controller.hold_fencing(now)  # an earlier end never shortens a hold
        assert controller.held(frozenset(view.brokers)) == {2, 3}
        controller._fencing_held_until = now  # the hold has ended
        await controller.reconcile()
        assert [(w.leader, w.isr) for w in view.writes] == [(1, (1,))]
        await controller.stop()

    asyncio.run(scenario())
