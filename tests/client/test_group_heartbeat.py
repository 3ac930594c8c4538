"""Heartbeat timers (pure, fake clock) and the coordinator's error mapping without a broker."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from types import SimpleNamespace

import pytest

from odradek.client.config import ConsumerConfig
from odradek.client.coordinator import ConsumerCoordinator, MemberState
from odradek.client.heartbeat import LOOK_UP_COORDINATOR, Heartbeat, HeartbeatThread, Wait
from odradek.client.structs import NO_GENERATION, Generation
from odradek.client.subscription import SubscriptionState


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make_heartbeat(clock: FakeClock) -> Heartbeat:
    return Heartbeat(
        session_timeout_ms=10_000,
        heartbeat_interval_ms=3_000,
        max_poll_interval_ms=30_000,
        retry_backoff_ms=100,
        clock=clock,
    )


def test_heartbeat_timers_follow_java() -> None:
    clock = FakeClock()
    hb = make_heartbeat(clock)
    assert not hb.should_heartbeat()
    clock.now += 3.0
    assert hb.should_heartbeat()
    hb.sent_heartbeat()
    assert hb.heartbeat_in_flight and not hb.should_heartbeat()
    assert hb.time_to_next_heartbeat() == pytest.approx(3.0)
    hb.fail_heartbeat()  # retry after the backoff
    assert hb.time_to_next_heartbeat() == pytest.approx(0.1)
    hb.receive_heartbeat()  # the session timer restarts only on a response
    clock.now += 9.0
    assert not hb.session_timeout_expired()
    clock.now += 1.5
    assert hb.session_timeout_expired()  # no response for a whole session
    hb.receive_heartbeat()
    assert not hb.session_timeout_expired()
    clock.now += 20.0
    assert hb.poll_timeout_expired()  # 33.5 s since the poll timer started
    hb.poll()
    assert not hb.poll_timeout_expired()
    with pytest.raises(ValueError):
        Heartbeat(
            session_timeout_ms=1000,
            heartbeat_interval_ms=1000,
            max_poll_interval_ms=1000,
            retry_backoff_ms=1,
        )


class ScriptedOwner:
    """A HeartbeatOwner whose steps are scripted; records what the thread asked."""

    def __init__(self, steps: list[Wait | Exception]) -> None:
        self.cond = threading.Condition(threading.Lock())  # not re-entrant: see lookups
        self.steps = steps
        self.calls: list[object] = []
        self.idle = threading.Event()

    def heartbeat_step(self) -> Wait:
        self.calls.append("step")
        if not self.steps:
            self.idle.set()
            return None  # wait until notified (stop notifies)
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def look_up_coordinator(self) -> float:
        free = self.cond.acquire(blocking=False)  # fails if this thread held the lock
        if free:
            self.cond.release()
        self.calls.append(("lookup", "lock free" if free else "lock held"))
        return 0.001

    def heartbeat_thread_failed(self, error: BaseException) -> None:
        self.calls.append(("failed", str(error)))
        self.idle.set()


def test_heartbeat_thread_does_its_owners_steps_and_looks_up_without_the_lock() -> None:
    owner = ScriptedOwner([0.0, LOOK_UP_COORDINATOR, 0.001])
    thread = HeartbeatThread(owner, "hb-test")
    thread.start()
    assert owner.idle.wait(5)
    thread.stop()
    thread.join(5)
    assert not thread.is_alive()
    assert owner.calls == ["step", "step", ("lookup", "lock free"), "step", "step"]


def test_heartbeat_thread_hands_its_own_failure_to_the_owner() -> None:
    owner = ScriptedOwner([RuntimeError("bug")])
    thread = HeartbeatThread(owner, "hb-test")
    thread.start()
    thread.join(5)
    assert not thread.is_alive()
    assert owner.calls == ["step", ("failed", "bug")]


def coordinator() -> ConsumerCoordinator:
    config = ConsumerConfig.from_settings(bootstrap_servers="127.0.0.1:1", group_id="g")
    c = ConsumerCoordinator(SimpleNamespace(), SubscriptionState("earliest"), config)  # type: ignore[arg-type]
    c.generation = Generation(5, "m-1", "range")
    c.state = MemberState.STABLE
    c.rejoin_needed = False
    return c


def reply(code: int) -> Future:
    f: Future = Future()
    f.set_result(SimpleNamespace(error_code=code))
    return f


@pytest.mark.parametrize(
    ("code", "generation_after", "rejoin"),
    [
        (0, Generation(5, "m-1", "range"), False),
        (27, Generation(5, "m-1", "range"), True),  # REBALANCE_IN_PROGRESS: still a member
        (22, Generation(-1, "m-1", None), True),  # ILLEGAL_GENERATION: keep the member id
        (25, NO_GENERATION, True),  # UNKNOWN_MEMBER_ID: forget the member id
    ],
)
def test_heartbeat_error_mapping(code: int, generation_after: Generation, rejoin: bool) -> None:
    c = coordinator()
    sent = c.generation
    c._on_heartbeat_response(reply(code), sent)
    assert c.generation == generation_after
    assert c.rejoin_needed is rejoin
    if code in (22, 25):
        assert c.state is MemberState.UNJOINED
        assert c.needs_join_prepare  # the next poll reports the partitions lost


def test_stale_heartbeat_error_is_ignored() -> None:
    c = coordinator()
    stale = Generation(4, "m-1", "range")
    c._on_heartbeat_response(reply(22), stale)
    assert c.generation == Generation(5, "m-1", "range")
    assert not c.rejoin_needed


def test_assignor_protocol_selection() -> None:
    config = ConsumerConfig.from_settings(
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
        partition_assignment_strategy=["cooperative-sticky"],
    )
    c = ConsumerCoordinator(SimpleNamespace(), SubscriptionState(), config)  # type: ignore[arg-type]
    assert c.protocol.name == "COOPERATIVE"
    default = ConsumerCoordinator(
        SimpleNamespace(),  # type: ignore[arg-type]
        SubscriptionState(),
        ConsumerConfig.from_settings(bootstrap_servers="127.0.0.1:1", group_id="g"),
    )
    assert default.protocol.name == "EAGER"  # range + cooperative-sticky: EAGER in common
