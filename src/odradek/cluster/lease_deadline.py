"""Until when a broker may act on its etcd lease: the reasoning `LeaseKeeper` follows
(issue 21, item 2: etcd outages ridden out).

A broker's registration and controller role hang on one etcd lease; every other
broker treats it as dead, and the controller moves its leaderships, only once etcd
has *deleted* that lease's keys. So the broker may keep its roles for as long as the
lease can still be alive in etcd's view, and must give them up before that can end.
Pure and clock-injected: times are seconds on the caller's monotonic clock.

Why the deadline is ``sent + TTL - margin``
--------------------------------------------
etcd's lessor (server/lease/lessor.go) runs on the raft leader only. A keep-alive
it grants sets the lease's expiry to *its* now + TTL, and its now is after the
moment we sent the request; the reply carries that TTL. So a keep-alive sent at
``s`` and granted means: the lease cannot expire before ``s + TTL`` (elapsed time
measured by two monotonic clocks; the margin covers their drift and the time a
broker needs to stop acting once the deadline passes). The time the *reply*
arrived would be wrong: a reply delayed by a slow network would push the deadline
past etcd's own.

Why an outage does not shorten it
---------------------------------
A lease expires only when a raft leader's lessor says so. When a member becomes
leader it *promotes* every lease: each one's expiry becomes its election time + the
lease's TTL (lessor.Promote, "renew all leases"). So nothing expires while etcd has
no leader, and after a leader change (a member killed, or the whole etcd restarted)
every lease has a whole TTL again, counted from the election. Hence:

* an outage shorter than the TTL minus one refresh interval is ridden out by
  refreshing often (`refresh_interval`) and again as soon as etcd answers;
* if at some moment *every* etcd member refuses a TCP connection, no member runs, so
  there is no leader: any leader after that moment is elected later and gives the
  lease a whole TTL from its election. Probes of every member that begin at ``t``
  and end while the lease is still alive move the deadline to ``t + TTL - margin``
  (`no_leader_between` says why the probes need not be simultaneous), so a broker
  rides out a whole-etcd restart of any length. A member that does not
  answer (a timeout, a partition) proves nothing: it may be leading without us.
  Nor does a member starting up: it listens before it has a leader and serves only
  after, so a restart must complete within the TTL less the margin after the last
  refused connection (about a second for etcd; the default TTL is 9 s).

One etcd option would weaken this: lease checkpointing
(``--experimental-enable-lease-checkpoint``, off by default in 3.5) makes a new
leader restore a lease's *remaining* TTL instead of a whole one; it checkpoints only
leases with more than the checkpoint interval left (5 minutes by default), never a
broker's lease of seconds, so the reasoning holds with it on too.

This is what a KRaft broker gets from its controller quorum (losing and regaining a
quorum member does not fence anyone): the deadline is never later than etcd's own,
so another broker can never take a role this broker still acts on.
"""

from __future__ import annotations

from dataclasses import dataclass

# A refresh this many times per TTL (etcd's own clients refresh at TTL/3; more often
# leaves a longer outage to ride out: TTL - TTL/6 - margin).
REFRESHES_PER_TTL = 6
# Retry this soon after a refresh failed (etcd may be back any moment).
RETRY_AFTER_FAILURE_S = 0.2


def safety_margin(ttl_s: float) -> float:
    """Stop acting this long before etcd could expire the lease: clock drift between
    two monotonic clocks over a TTL, event-loop lag, the time to give up roles."""
    return min(1.0, ttl_s / REFRESHES_PER_TTL)


def refresh_interval(ttl_s: float) -> float:
    return max(ttl_s / REFRESHES_PER_TTL, 0.05)


# Refreshes in a row a lease's holder must have missed to count as silent: one late
# refresh is a busy event loop or a slow etcd, two are a broker that stopped.
SILENT_AFTER_MISSED = 2


def stopped_refreshing(ttl_s: int, remaining_s: int) -> bool:
    """Whether a lease etcd reports (granted `ttl_s`, `remaining_s` left, both whole
    seconds as LeaseTimeToLive gives them) has gone `SILENT_AFTER_MISSED` refresh
    intervals without a refresh. etcd truncates the remaining time, so a lease
    refreshed a moment ago already shows `ttl_s - 1`: that second is not silence."""
    unrefreshed = ttl_s - remaining_s - 1
    return unrefreshed >= SILENT_AFTER_MISSED * refresh_interval(ttl_s)


@dataclass
class LeaseDeadline:
    """When etcd can have expired a lease at the earliest, as far as this process knows.

    `alive_since` is the latest moment the lease is known to have had a whole TTL
    ahead of it in etcd's view: the send time of the last keep-alive etcd granted
    (first: of the grant request), or a moment no etcd leader existed.
    """

    ttl_s: float
    alive_since: float
    margin_s: float

    @classmethod
    def granted_at(cls, sent_at: float, ttl_s: float) -> LeaseDeadline:
        return cls(ttl_s, sent_at, safety_margin(ttl_s))

    @property
    def deadline(self) -> float:
        """After this moment the broker must not act on the lease any more."""
        return self.alive_since + self.ttl_s - self.margin_s

    def alive(self, now: float) -> bool:
        return now < self.deadline

    def remaining(self, now: float) -> float:
        return max(self.deadline - now, 0.0)

    def refreshed(self, sent_at: float, granted_ttl_s: float) -> None:
        """etcd granted the keep-alive sent at `sent_at`, with this TTL."""
        if granted_ttl_s <= 0:
            raise ValueError("a lease etcd no longer has was not refreshed")
        self.ttl_s = granted_ttl_s
        self.margin_s = safety_margin(granted_ttl_s)
        self.alive_since = max(self.alive_since, sent_at)

    def no_leader_between(self, start: float, end: float) -> bool:
        """Every etcd member refused a connection, probed between `start` and `end`.

        A leader that existed during the probes could not have expired the lease
        before `end` if it was still alive then (checked: else nothing is known); a
        member refusing at its probe needs an election (a second or more) to lead
        again, so any later leader is elected after `end` and gives the lease a whole
        TTL from then. So the lease is alive until at least `start` + TTL. Returns
        whether the deadline moved."""
        if not self.alive(end) or start <= self.alive_since:
            return False
        self.alive_since = start
        return True

    def next_attempt_in(self, now: float, *, failing: bool) -> float:
        """How long to wait before the next keep-alive (never past the deadline)."""
        wait = RETRY_AFTER_FAILURE_S if failing else refresh_interval(self.ttl_s)
        return max(0.0, min(wait, self.remaining(now)))
