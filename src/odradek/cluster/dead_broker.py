"""A faster verdict on a broker that died without leaving (issue 21, item 5).

Every broker's registration hangs on its etcd lease, and the cluster acts on a
broker's death (new leaders for its partitions, so new group and transaction
coordinators) only once etcd deletes that registration: a whole lease TTL
(``broker.session.timeout.ms``, 9 s) after a SIGKILL or a crash. Add the election and
the coordinator's load and a consumer group with 10 s sessions loses its assignment
whenever its coordinator dies.

Two facts together say a broker is dead much sooner; neither says it alone:

* **its inter-broker port refuses connections**: nothing listens there, so no process
  of that broker serves anyone. A paused or overloaded broker still has connections
  accepted by its kernel, and a partition makes the attempt time out: neither refuses;
* **etcd reports that its lease missed two refreshes in a row**
  (`odradek.cluster.lease_deadline.stopped_refreshing`): a broker still running,
  whether starting up, shutting down or briefly stalled, keeps refreshing it.

A broker whose replica fetcher or marker connection was refused by another suspects
it (`suspect`); `DeadBrokerDetector` then checks both facts every `CHECK_EVERY_S` and,
when both hold, revokes the lease under the registration. etcd deletes the
registration (and the controller claim, if it was the controller) and every broker
acts on it as on an expiry, about two refresh intervals after the broker's last
refresh (3 s with the default TTL) instead of a whole TTL. The lease is revoked by
id, so a successor process registered on a new lease is never touched; while the
controller holds fencing after an etcd outage (`ClusterNode.fencing_held_until`) no
verdict is given, as no expiry is acted on then.

Kafka's KRaft controller always waits ``broker.session.timeout.ms``; this verdict is
Odradek's own. Its one blind spot: a firewall that rejects with TCP resets makes a
live broker's port refuse as well. A broker cut off that way from its peers *and* from
etcd loses its registration up to half a TTL before its own lease deadline
(`odradek.cluster.lease_deadline`) tells it to stop. Until then it still leads in its
own view, but acks=all writes need followers it cannot reach, so none is acknowledged;
acks=1 writes in that window may be lost, as on any leader change with acks=1.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from odradek.cluster.lease_deadline import stopped_refreshing
from odradek.cluster.metadata import refuses_connections
from odradek.replication.model import RegistrationLease

log = logging.getLogger("odradek.cluster")

CHECK_EVERY_S = 0.5
# A suspicion lapses after this many TTLs: by then etcd has expired the lease itself
# (or the broker is alive after all).
SUSPECT_FOR_TTLS = 1.5


class Registrations(Protocol):
    async def registration_lease(self, broker_id: int) -> RegistrationLease | None: ...

    async def revoke_lease(self, lease_id: int) -> None: ...


class DeadBrokerDetector:
    """Checks suspected brokers and ends the registration of those found dead."""

    def __init__(
        self,
        own_id: int,
        registrations: Registrations,
        address_of: Callable[[int], tuple[str, int] | None],
        *,
        lease_ttl_s: float,
        fencing_held_until: Callable[[], float],
        clock: Callable[[], float],
        refuses: Callable[[str, int], Awaitable[bool]] = refuses_connections,
    ) -> None:
        self.own_id = own_id
        self.registrations = registrations
        self.address_of = address_of
        self.lease_ttl_s = lease_ttl_s
        self.fencing_held_until = fencing_held_until
        self.clock = clock
        self.refuses = refuses
        self._suspects: dict[int, float] = {}  # broker id -> when the suspicion lapses
        self._wake = asyncio.Event()
        self.verdicts = 0  # registrations ended here (metrics, tests)

    def suspect(self, broker_id: int) -> None:
        """A connection to `broker_id` was refused: check it until it is settled."""
        if broker_id == self.own_id or broker_id in self._suspects:
            return
        self._suspects[broker_id] = self.clock() + self.lease_ttl_s * SUSPECT_FOR_TTLS
        self._wake.set()

    @property
    def suspects(self) -> set[int]:
        return set(self._suspects)

    async def run(self) -> None:
        """Until cancelled: settle suspicions, one round every CHECK_EVERY_S."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._suspects:
                await self.check_once()
                if self._suspects:
                    await asyncio.sleep(CHECK_EVERY_S)

    async def check_once(self) -> None:
        """One round: each suspect is found dead (its registration ended), found alive
        or gone, or still undecided (checked again next round until it lapses)."""
        for broker_id, lapses_at in list(self._suspects.items()):
            settled = True
            try:
                settled = await self._check(broker_id)
            except Exception as exc:  # etcd unreachable: no verdict now
                log.debug("checking whether broker %d is dead failed: %r", broker_id, exc)
                settled = False
            if settled or self.clock() >= lapses_at:
                self._suspects.pop(broker_id, None)

    async def _check(self, broker_id: int) -> bool:
        address = self.address_of(broker_id)
        if address is None or not await self.refuses(*address):
            return True  # gone already, or something listens: not dead
        lease = await self.registrations.registration_lease(broker_id)
        if lease is None:
            return True
        if not stopped_refreshing(lease.ttl_s, lease.remaining_s):
            return False  # still refreshed: starting up or shutting down, not dead
        if self.clock() < self.fencing_held_until():
            return False
        await self.registrations.revoke_lease(lease.lease_id)
        self.verdicts += 1
        log.warning(
            "broker %d is dead: its port %s:%d refuses connections and its lease was not "
            "refreshed for %d s; ended its registration %d s before the lease would expire",
            broker_id,
            *address,
            lease.unrefreshed_s,
            lease.remaining_s,
        )
        return True
