"""Heartbeat timers and the heartbeat thread (Java's ``Heartbeat`` and ``HeartbeatThread``).

``Heartbeat`` holds three timers, as in the Java client (seed 004, section 3.1):

* the **heartbeat timer** (``heartbeat_interval_ms``): reset when a heartbeat is sent;
  when it expires the next heartbeat is due. A failed heartbeat resets it to
  ``retry_backoff_ms`` so the next attempt comes soon.
* the **session timer** (``session_timeout_ms``): reset when a heartbeat response
  arrives (and when the coordinator is found). When it expires without a response the
  coordinator is presumed dead and is looked up again.
* the **poll timer** (``max_poll_interval_ms``): reset by every ``Consumer.poll``.
  When it expires the application has stalled between polls and the member leaves
  the group proactively (a LeaveGroup for dynamic members); the next ``poll`` rejoins.

``HeartbeatThread`` is the background loop of seed 004 section 3.3, and nothing more:
it owns its stop flag and the loop. The group member that starts it (``GroupMember``
in ``group_member.py``) owns everything else: the lock, these timers, whether
heartbeats are enabled, a fatal heartbeat error, and the thread's lifecycle (it starts
the thread when it first joins and stops and joins it on close). Each turn of the loop
asks the member, under the member's lock, for its next heartbeat duty
(``HeartbeatOwner.heartbeat_step``): the member sends a heartbeat, marks the
coordinator unknown, leaves the group after the poll timer expired, or answers how
long to wait; ``LOOK_UP_COORDINATOR`` asks the thread to look the coordinator up with
the lock released (a FindCoordinator round trip must not block the application
thread). Responses are handled by the member on the connection's reader thread under
the same lock.

Time comes from an injectable ``clock`` (seconds, monotonic) so the timers are
unit-testable without sleeping.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from typing import Protocol

log = logging.getLogger(__name__)

Clock = Callable[[], float]


class Timer:
    """A deadline that can be reset; times in seconds on ``clock``."""

    __slots__ = ("_clock", "deadline")

    def __init__(self, clock: Clock, timeout_s: float) -> None:
        self._clock = clock
        self.deadline = clock() + timeout_s

    def reset(self, timeout_s: float) -> None:
        self.deadline = self._clock() + timeout_s

    def remaining(self) -> float:
        return max(0.0, self.deadline - self._clock())

    def expired(self) -> bool:
        return self._clock() >= self.deadline


class Heartbeat:
    """Session, heartbeat and poll timers of one group member (all in milliseconds config)."""

    def __init__(
        self,
        *,
        session_timeout_ms: int,
        heartbeat_interval_ms: int,
        max_poll_interval_ms: int,
        retry_backoff_ms: int,
        clock: Clock = time.monotonic,
    ) -> None:
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be lower than session_timeout_ms")
        self.session_timeout_s = session_timeout_ms / 1000
        self.heartbeat_interval_s = heartbeat_interval_ms / 1000
        self.max_poll_interval_s = max_poll_interval_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.clock = clock
        self.heartbeat_timer = Timer(clock, self.heartbeat_interval_s)
        self.session_timer = Timer(clock, self.session_timeout_s)
        self.poll_timer = Timer(clock, self.max_poll_interval_s)
        self.heartbeat_in_flight = False

    # The names follow Java's Heartbeat.
    def poll(self) -> None:
        self.poll_timer.reset(self.max_poll_interval_s)

    def sent_heartbeat(self) -> None:
        self.heartbeat_in_flight = True
        self.heartbeat_timer.reset(self.heartbeat_interval_s)

    def fail_heartbeat(self) -> None:
        self.heartbeat_in_flight = False
        self.heartbeat_timer.reset(self.retry_backoff_s)

    def receive_heartbeat(self) -> None:
        self.heartbeat_in_flight = False
        self.session_timer.reset(self.session_timeout_s)

    def should_heartbeat(self) -> bool:
        return self.heartbeat_timer.expired()

    def time_to_next_heartbeat(self) -> float:
        return self.heartbeat_timer.remaining()

    def session_timeout_expired(self) -> bool:
        return self.session_timer.expired()

    def reset_session_timeout(self) -> None:
        self.session_timer.reset(self.session_timeout_s)

    def poll_timeout_expired(self) -> bool:
        return self.poll_timer.expired()

    def reset_timeouts(self) -> None:
        """On (re)enabling heartbeats: every timer starts afresh."""
        self.session_timer.reset(self.session_timeout_s)
        self.poll_timer.reset(self.max_poll_interval_s)
        self.heartbeat_timer.reset(self.heartbeat_interval_s)
        self.heartbeat_in_flight = False


class HeartbeatTurn(enum.Enum):
    LOOK_UP_COORDINATOR = "look up the coordinator"


LOOK_UP_COORDINATOR = HeartbeatTurn.LOOK_UP_COORDINATOR

Wait = float | None | HeartbeatTurn
"""What one turn of the loop ends with: seconds to wait (0: go on at once), None (wait
until the owner's lock is notified), or ``LOOK_UP_COORDINATOR``."""


class HeartbeatOwner(Protocol):
    """What ``HeartbeatThread`` asks of the group member that owns it."""

    @property
    def cond(self) -> threading.Condition:
        """The member's lock: held around ``heartbeat_step`` and every wait."""
        ...

    def heartbeat_step(self) -> Wait:
        """Lock held: do the next heartbeat duty; how to go on."""
        ...

    def look_up_coordinator(self) -> float:
        """Lock not held: one FindCoordinator attempt; seconds to wait after it."""
        ...

    def heartbeat_thread_failed(self, error: BaseException) -> None:
        """Lock held: the loop itself failed (a bug); surface ``error`` on ``poll``."""
        ...


class HeartbeatThread(threading.Thread):
    """The background heartbeat loop of one group member (see module docs)."""

    def __init__(self, owner: HeartbeatOwner, name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._owner = owner
        self._stopped = False

    def stop(self) -> None:
        """End the loop (it exits at its next turn); the owner joins the thread."""
        with self._owner.cond:
            self._stopped = True
            self._owner.cond.notify_all()

    def run(self) -> None:
        owner = self._owner
        cond = owner.cond
        try:
            while True:
                with cond:
                    if self._stopped:
                        return
                    wait = owner.heartbeat_step()
                    if wait is not LOOK_UP_COORDINATOR:
                        if wait is None:
                            cond.wait()
                        elif wait > 0:
                            cond.wait(wait)
                        continue
                after = owner.look_up_coordinator()
                with cond:
                    if not self._stopped and after > 0:
                        cond.wait(after)
        except BaseException as exc:  # pragma: no cover - defensive: surface on poll
            log.exception("heartbeat thread failed")
            with cond:
                owner.heartbeat_thread_failed(exc)
