"""The controller: the one broker (elected through etcd) that changes leadership.

It acts on the view its broker's `ClusterNode` keeps (a `ClusterView` here), whenever
that view changes (a broker registered or its lease ended, a partition state changed)
and once when elected:
`reconcile` brings every partition in line with the live brokers, with the rules
of `odradek.replication.decisions` (Kafka's): a dead broker leaves the ISR (never the
last member); a dead leader is replaced by the first live ISR member in
assignment order, with the leader epoch incremented; with none, the partition is
offline until an ISR member returns (or, with ``unclean.leader.election.enable``,
any live replica takes over, data loss accepted). Every write carries the
controller's claim, so a controller that lost its lease cannot change anything
even before it notices (`NotControllerError`).

After an etcd outage the controller holds off *fencing* (`hold_fencing`, decided by
`ClusterNode.fencing_held_until`): for one session timeout after etcd came back, a
broker missing from etcd is not taken out of ISRs or leaderships (brokers re-register
one by one, and the first back must not take every leadership); a partition whose
leader is missing waits too, as under Kafka's KRaft controller, which fences a broker
only after a whole session without heartbeats as it sees them. Once the hold ends it
decides again on whoever is still missing.

A partition reassignment (AlterPartitionReassignments, started by any broker through
a compare-and-swap on the topic: `ClusterNode.reassign`) is completed here, by the
same `reconcile`, once every target replica is in the ISR.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any, Protocol

from odradek.replication.decisions import (
    ConcurrentChange,
    Reassignment,
    partition_after_broker_loss,
    partition_after_broker_return,
    reassignment_progress,
)
from odradek.replication.model import (
    BrokerInfo,
    ControllerClaim,
    NotControllerError,
    PartitionState,
    TopicAssignment,
    VersionedPartitionState,
)

if TYPE_CHECKING:
    from odradek.cluster.metadata import EtcdMetadataStore

log = logging.getLogger("odradek.controller")

RETRY_S = 0.5


class ClusterView(Protocol):
    """What the controller reads and writes through its broker's membership
    (`odradek.cluster.node.ClusterNode`, which starts it: not imported back)."""

    store: EtcdMetadataStore
    brokers: dict[int, BrokerInfo]
    assignments: dict[str, TopicAssignment]
    states: dict[tuple[str, int], VersionedPartitionState]

    def replicas_of(self, topic: str, partition: int) -> tuple[int, ...]: ...

    def unclean_for(self, topic: str) -> bool: ...

    def reassignments(self) -> dict[tuple[str, int], Reassignment]: ...

    async def write_assignment(self, assignment: TopicAssignment, **options: Any) -> None: ...


class Controller:
    """Runs on the broker holding `claim`, until stopped or deposed."""

    def __init__(self, node: ClusterView, claim: ControllerClaim) -> None:
        self.node = node
        self.claim = claim
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._fencing_held_until = 0.0  # loop time
        self._hold_end: asyncio.TimerHandle | None = None
        self.leader_elections = 0
        self.unclean_elections = 0

    def start(self) -> None:
        self._dirty.set()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="controller")

    def poke(self) -> None:
        """The view changed: reconcile again (coalesced)."""
        self._dirty.set()

    def hold_fencing(self, until: float) -> None:
        """Treat brokers missing from etcd as not dead until `until` (loop time), then
        decide again."""
        if until <= self._fencing_held_until:
            return
        self._fencing_held_until = until
        if self._hold_end is not None:
            self._hold_end.cancel()
        self._hold_end = asyncio.get_running_loop().call_at(until, self.poke)

    def held(self, live: frozenset[int]) -> frozenset[int]:
        """The brokers not to fence now: every one a partition names that is not live,
        while the hold lasts."""
        if asyncio.get_running_loop().time() >= self._fencing_held_until:
            return frozenset()
        named = {b for s in self.node.states.values() for b in (s.state.leader, *s.state.isr)}
        return frozenset(b for b in named if b >= 0 and b not in live)

    async def stop(self) -> None:
        if self._hold_end is not None:
            self._hold_end.cancel()
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.reconcile()
            except NotControllerError:
                log.warning("controller epoch %d was deposed", self.claim.info.epoch)
                return
            except Exception as exc:
                log.warning("controller pass failed: %r; retrying", exc)
                await asyncio.sleep(RETRY_S)
                self._dirty.set()

    async def reconcile(self) -> None:
        node = self.node
        live = frozenset(node.brokers)
        held = self.held(live)
        if held:
            log.info("brokers %s missing since etcd came back: not fenced yet", sorted(held))
        for key, current in sorted(node.states.items()):
            replicas = node.replicas_of(*key)
            if not replicas:
                continue
            wanted = self.decide(
                replicas, current.state, live, unclean=node.unclean_for(key[0]), held=held
            )
            if wanted is not None and wanted != current.state:
                await self._write(current, wanted)
        for (topic, partition), ongoing in sorted(node.reassignments().items()):
            await self._progress(topic, partition, ongoing, live)

    async def _progress(
        self, topic: str, partition: int, ongoing: Reassignment, live: frozenset[int]
    ) -> None:
        """Complete a reassignment whose whole target is in the ISR: the state first (the
        ISR without the leaving replicas, a new leader if the old one leaves), then the
        replica list; a controller that dies between the two finishes on its successor."""
        node = self.node
        current = node.states.get((topic, partition))
        assignment = node.assignments.get(topic)
        if current is None or assignment is None:
            return
        replicas, state = reassignment_progress(ongoing, current.state, live)
        if replicas is None:
            return
        if state is not None and state != current.state:
            await self._write(current, state)
            return  # the watch brings the new state; the next pass writes the replicas
        completed = Reassignment(replicas, (), ()).applied_to(assignment, partition)
        try:
            await node.write_assignment(completed, controller=self.claim)
        except ConcurrentChange:
            self._dirty.set()  # decide again on what is stored now
            return
        log.info("%s-%d: reassignment to %s completed", topic, partition, list(replicas))

    def decide(
        self,
        replicas: tuple[int, ...],
        state: PartitionState,
        live: frozenset[int],
        *,
        unclean: bool,
        held: frozenset[int] = frozenset(),
    ) -> PartitionState | None:
        """The state a partition should have with these live brokers (None: as it is).
        Brokers in `held` are missing but not fenced yet: left where they are."""
        new = state
        gone = [
            b
            for b in dict.fromkeys((state.leader, *state.isr))
            if b >= 0 and b not in live and b not in held
        ]
        for dead in gone:
            changed = partition_after_broker_loss(replicas, new, dead, live, unclean=unclean)
            if changed is not None:
                new = changed
        if new.leader < 0:
            for candidate in (*new.isr, *replicas):
                if candidate in live:
                    changed = partition_after_broker_return(
                        replicas, new, candidate, live, unclean=unclean
                    )
                    if changed is not None:
                        new = changed
                        break
        return None if new == state else new

    async def _write(self, current: VersionedPartitionState, wanted: PartitionState) -> None:
        update = await self.node.store.update_partition(
            current,
            leader=wanted.leader,
            leader_epoch=wanted.leader_epoch,
            isr=wanted.isr,
            controller=self.claim,
        )
        if not update.succeeded:
            self._dirty.set()  # the partition changed meanwhile: decide again on the new state
            return
        if wanted.leader != current.state.leader:
            self.leader_elections += 1
            if wanted.leader >= 0 and wanted.leader not in current.state.isr:
                self.unclean_elections += 1
        log.info(
            "%s-%d: leader %d -> %d, epoch %d, isr %s",
            current.topic,
            current.partition,
            current.state.leader,
            wanted.leader,
            wanted.leader_epoch,
            list(wanted.isr),
        )
