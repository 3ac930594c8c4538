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

``HeartbeatThread`` is the background loop of seed 004 section 3.3. It waits on the
coordinator's condition variable while disabled (before the member has joined, and
while a JoinGroup is in flight), and otherwise, every ``retry_backoff_ms`` at most,
checks in this order: coordinator unknown (look it up), session expired (mark the
coordinator unknown), poll timer expired (leave the group), heartbeat not yet due
(wait), else send a Heartbeat. Responses are handled by the coordinator on the
connection's reader thread under the same lock. A fatal error (FENCED_INSTANCE_ID)
disables the thread and is re-raised by the next ``poll`` on the application thread.

Time comes from an injectable ``clock`` (seconds, monotonic) so the timers are
unit-testable without sleeping.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from odradek.client.coordinator import ConsumerCoordinator

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
        self.last_heartbeat_send = 0.0
        self.last_heartbeat_receive = 0.0

    # The names follow Java's Heartbeat.
    def poll(self) -> None:
        self.poll_timer.reset(self.max_poll_interval_s)

    def sent_heartbeat(self) -> None:
        self.last_heartbeat_send = self.clock()
        self.heartbeat_in_flight = True
        self.heartbeat_timer.reset(self.heartbeat_interval_s)

    def fail_heartbeat(self) -> None:
        self.heartbeat_in_flight = False
        self.heartbeat_timer.reset(self.retry_backoff_s)

    def receive_heartbeat(self) -> None:
        self.last_heartbeat_receive = self.clock()
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


class HeartbeatThread(threading.Thread):
    """The background heartbeat loop of one coordinator (see module docs)."""

    def __init__(self, coordinator: ConsumerCoordinator) -> None:
        super().__init__(name=f"odradek-heartbeat-{coordinator.group_id}", daemon=True)
        self._coordinator = coordinator
        self.enabled = False
        self.closed = False
        self.failed: BaseException | None = None

    # Both called with the coordinator's lock held.
    def enable(self) -> None:
        coordinator = self._coordinator
        coordinator.heartbeat.reset_timeouts()
        self.enabled = True
        coordinator.cond.notify_all()

    def disable(self) -> None:
        self.enabled = False

    def close(self) -> None:
        with self._coordinator.cond:
            self.closed = True
            self.enabled = False
            self._coordinator.cond.notify_all()

    def run(self) -> None:
        coordinator = self._coordinator
        cond = coordinator.cond
        try:
            while True:
                with cond:
                    if self.closed:
                        return
                    if not self.enabled:
                        cond.wait()
                        continue
                    if coordinator.state_has_not_joined() or self.failed is not None:
                        self.disable()
                        continue
                    hb = coordinator.heartbeat
                    backoff = hb.retry_backoff_s
                    if coordinator.coordinator_unknown():
                        # Looked up outside the lock below; wait a backoff first.
                        lookup = True
                    elif hb.session_timeout_expired():
                        coordinator.mark_coordinator_unknown(
                            "session timed out without receiving a heartbeat response"
                        )
                        continue
                    elif hb.poll_timeout_expired():
                        log.warning(
                            "consumer poll timeout has expired: the time between polls was "
                            "longer than max_poll_interval_ms (%s ms); leaving group %s. "
                            "Lower max_poll_records or raise max_poll_interval_ms.",
                            int(hb.max_poll_interval_s * 1000),
                            coordinator.group_id,
                        )
                        coordinator.maybe_leave_group("consumer poll timeout has expired.")
                        continue
                    elif not hb.should_heartbeat():
                        cond.wait(min(backoff, max(0.001, hb.time_to_next_heartbeat())))
                        continue
                    else:
                        lookup = False
                        hb.sent_heartbeat()
                        coordinator.send_heartbeat_request()
                        continue
                if lookup:
                    coordinator.lookup_coordinator_quietly()
                    with cond:
                        if not self.closed:
                            cond.wait(backoff)
        except BaseException as exc:  # pragma: no cover - defensive: surface on poll
            log.exception("heartbeat thread failed")
            with cond:
                self.failed = exc
                self.enabled = False
