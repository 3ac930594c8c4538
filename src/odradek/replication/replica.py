"""Partition replicas on every node: leader and follower roles, leader epochs, the high
watermark, the ISR, and acks=all (Kafka's Partition / ReplicaManager).

Each partition this broker hosts has a `Replica`. Its role follows the partition
state the broker's control plane gives it (`apply_state`): a lone node leads every
partition it holds, alone in its ISR (`odradek.broker.lone_node`); a cluster
member takes the role its partition state in etcd says (`odradek.cluster.node`).
The leader appends client writes (`append`), stamped with its leader epoch, and
serves followers; every other replica in the assignment fetches from the leader
(`odradek.cluster.fetcher`). Every request for a partition's data asks the same
questions here, whatever the control plane: `leader_for` (leads it, in the epoch
the request names?) and the replica's `high_watermark` (how far a consumer reads).

High watermark: on the leader, the smallest log end offset among the ISR members
(the leader's own included: alone in its ISR, its log end, moved by its own
appends); a follower learns it from its fetch responses and keeps ``min(leader's
HW, its own log end)``. Consumers read only below it, so a record they see
survives any election from the ISR. Each move is told to the broker (its Fetch
long polls wake) and to the listeners registered for that partition (a
coordinator's runner, through its `odradek.replication.writer.ReplicaWriter`).

ISR: the leader, not the controller, changes it (Kafka's AlterPartition), by a
compare-and-swap on the partition state in etcd: a follower whose fetches have
not reached the leader's log end for ``replica.lag.time.max.ms`` leaves; one that
reaches the high watermark (and the current epoch's start) joins again. A failed
compare means someone else (the controller) changed the partition; the watch
brings the new state, which decides.

acks=all (Kafka's ``Partition.appendRecordsToLeader`` + delayed produce): refused
with NOT_ENOUGH_REPLICAS before the append when the ISR is smaller than
``min.insync.replicas``; otherwise answered once the high watermark passes the
batch, with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum
meanwhile, NOT_LEADER_OR_FOLLOWER if leadership moved, REQUEST_TIMED_OUT after
the request's timeout.

Truncation: a follower whose log diverged from its new leader's cuts it back
(`truncate`); the fsyncs run in a worker thread, and the replica takes no leader
append meanwhile (NOT_LEADER_OR_FOLLOWER, retriable), so the cut and the
partition's other writes never interleave. Where to cut is `truncation.py`'s.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.log import AppendInfo, PartitionLog
from odradek.log.errors import LogError
from odradek.protocol.errors import ErrorCode
from odradek.replication.model import PartitionState, VersionedPartitionState

log = logging.getLogger("odradek.replication")

NONE = int(ErrorCode.NONE)
HighWatermarkListener = Callable[[int], None]


class NotLeaderError(LogError):
    """NOT_LEADER_OR_FOLLOWER: this broker does not lead the partition (nothing written)."""

    error_code = int(ErrorCode.NOT_LEADER_OR_FOLLOWER)


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    NONE = "none"  # offline, or this broker is not (or no longer) a replica


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower, from its fetches (Kafka's Replica)."""

    log_end_offset: int = -1
    last_caught_up_s: float = 0.0
    last_fetch_s: float = 0.0
    leader_end_at_last_fetch: int = -1


@dataclass(eq=False, slots=True)
class _AckWaiter:
    offset: int  # answered once the high watermark is past this offset
    future: asyncio.Future[int]


@dataclass(eq=False)
class Replica:
    """This broker's replica of one partition."""

    topic: str
    partition: int
    plog: PartitionLog
    replicas: tuple[int, ...] = ()
    role: Role = Role.NONE
    state: VersionedPartitionState | None = None
    high_watermark: int = 0
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    waiters: list[_AckWaiter] = field(default_factory=list)
    isr_change_pending: bool = False
    truncating: bool = False  # a truncation runs in a worker thread: no leader appends
    # Followers: whether the log was checked against the leader's for this leader
    # epoch (OffsetForLeaderEpoch, truncating what diverged) before fetching.
    truncation_checked_epoch: int = -1

    @property
    def leader(self) -> int:
        return self.state.state.leader if self.state is not None else -1

    @property
    def leader_epoch(self) -> int:
        return self.state.state.leader_epoch if self.state is not None else -1

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.state.isr if self.state is not None else ()

    def check_epoch(self, current_leader_epoch: int) -> int:
        """Kafka's leader-epoch check of a request (-1: the client did not say)."""
        if current_leader_epoch < 0:
            return NONE
        if current_leader_epoch < self.leader_epoch:
            return int(ErrorCode.FENCED_LEADER_EPOCH)
        if current_leader_epoch > self.leader_epoch:
            return int(ErrorCode.UNKNOWN_LEADER_EPOCH)
        return NONE


class ReplicaManager:
    """Every replica this broker hosts, and the leader-side replication rules."""

    def __init__(
        self,
        broker_id: int,
        *,
        min_insync: Callable[[str], int],
        lag_time_max_s: float,
        propose_isr: Callable[[Replica, tuple[int, ...]], None],
        wake: Callable[[str, int], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.broker_id = broker_id
        self.min_insync = min_insync
        self.lag_time_max_s = lag_time_max_s
        self._propose_isr = propose_isr
        # Told (topic, partition) whenever a partition's log or high watermark moved:
        # whoever waits to read it (Fetch long polls) looks again.
        self._wake = wake
        self.clock = clock
        self.replicas: dict[tuple[str, int], Replica] = {}
        # Counters, exported as metrics.
        self.isr_shrinks = 0
        self.isr_expands = 0
        self.became_leader = 0
        # Called with (replica, previous role) after every role change (coordinators).
        self.role_listeners: list[Callable[[Replica, Role], None]] = []
        # Told each new high watermark of one partition (a coordinator's runner), kept
        # by partition so they outlive a replica replaced or forgotten meanwhile.
        self._hw_listeners: dict[tuple[str, int], list[HighWatermarkListener]] = {}

    def add_listener(self, topic: str, partition: int, listener: HighWatermarkListener) -> None:
        self._hw_listeners.setdefault((topic, partition), []).append(listener)

    def remove_listener(self, topic: str, partition: int, listener: HighWatermarkListener) -> None:
        listeners = self._hw_listeners.get((topic, partition), [])
        if listener in listeners:
            listeners.remove(listener)

    # --- roles ---------------------------------------------------------------------------

    def get(self, topic: str, partition: int) -> Replica | None:
        return self.replicas.get((topic, partition))

    def host(self, topic: str, partition: int, plog: PartitionLog) -> Replica:
        key = (topic, partition)
        replica = self.replicas.get(key)
        if replica is None or replica.plog is not plog:
            replica = Replica(topic, partition, plog)
            replica.high_watermark = min(plog.start_offset, plog.end_offset)
            self.replicas[key] = replica
        return replica

    def lead_alone(self, topic: str, partition: int, plog: PartitionLog) -> Replica:
        """Host the partition and lead it alone in its ISR, in its log's own leader epoch
        (every partition of a lone node): its high watermark is its log end."""
        replica = self.host(topic, partition, plog)
        if replica.state is None:
            alone = PartitionState(self.broker_id, plog.leader_epoch, (self.broker_id,))
            state = VersionedPartitionState(topic, partition, alone, 0)
            self.apply_state(replica, (self.broker_id,), state)
        return replica

    def leader_for(
        self, topic: str, partition: int, current_leader_epoch: int = -1
    ) -> tuple[Replica | None, int]:
        """(the replica, 0) when this broker leads the partition in the epoch a request
        names (-1: any), else (None, NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH /
        UNKNOWN_LEADER_EPOCH): the check every partition request makes in a cluster."""
        replica = self.replicas.get((topic, partition))
        if replica is None or replica.role is not Role.LEADER or replica.truncating:
            return None, int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if current_leader_epoch < 0:  # the client did not say (every Produce)
            return replica, NONE
        error = replica.check_epoch(current_leader_epoch)
        return (None, error) if error else (replica, NONE)

    def leads(self, topic: str, partition: int) -> bool:
        replica = self.replicas.get((topic, partition))
        return replica is not None and replica.role is Role.LEADER

    def forget(self, topic: str) -> None:
        for key in [k for k in self.replicas if k[0] == topic]:
            replica = self.replicas.pop(key)
            self._fail_waiters(replica, int(ErrorCode.NOT_LEADER_OR_FOLLOWER))

    def forget_partition(self, topic: str, partition: int) -> None:
        """Stop hosting one partition (its replica was moved to other brokers)."""
        replica = self.replicas.pop((topic, partition), None)
        if replica is not None:
            self._fail_waiters(replica, int(ErrorCode.NOT_LEADER_OR_FOLLOWER))

    def apply_state(
        self, replica: Replica, assigned: tuple[int, ...], state: VersionedPartitionState
    ) -> Role:
        """The partition's state in etcd changed (or was loaded): take the role it gives."""
        before = replica.role
        previous = replica.state
        replica.replicas = assigned
        replica.state = state
        replica.isr_change_pending = False
        leader = state.state.leader
        if leader == self.broker_id:
            role = Role.LEADER
        elif self.broker_id in assigned and leader >= 0:
            role = Role.FOLLOWER
        else:
            role = Role.NONE
        new_epoch = previous is None or previous.state.leader_epoch != state.state.leader_epoch
        replica.role = role
        if role is Role.LEADER:
            if before is not Role.LEADER or new_epoch:
                self._become_leader(replica)
            else:
                self._maybe_advance_high_watermark(replica)  # the ISR may have shrunk
        else:
            replica.plog.leader_epoch = max(replica.plog.leader_epoch, state.state.leader_epoch)
            self._fail_waiters(replica, int(ErrorCode.NOT_LEADER_OR_FOLLOWER))
            replica.followers.clear()
        if before is not role:
            # A partition's first role is news only in a log of thousands (start-up).
            log.log(
                logging.DEBUG if previous is None else logging.INFO,
                "%s-%d: %s -> %s (leader %d, epoch %d, isr %s)",
                replica.topic,
                replica.partition,
                before.value,
                role.value,
                leader,
                state.state.leader_epoch,
                list(state.state.isr),
            )
        if before is not role or new_epoch:
            for listener in self.role_listeners:
                try:
                    listener(replica, before)
                except Exception:
                    log.exception(
                        "role listener failed for %s-%d", replica.topic, replica.partition
                    )
        return role

    def _become_leader(self, replica: Replica) -> None:
        self.became_leader += 1
        if replica.plog.leader_epoch != replica.leader_epoch:
            # Recorded (durably) before any data of the epoch. A lone node leads in its
            # log's own epoch every time: nothing to record, no file to touch at start-up.
            replica.plog.start_leader_epoch(replica.leader_epoch)
        now = self.clock()
        # Followers start as caught up now: a leader must not drop a replica from
        # the ISR before it had a chance to fetch (Kafka resets these the same way).
        replica.followers = {
            broker: FollowerProgress(last_caught_up_s=now, last_fetch_s=now)
            for broker in replica.replicas
            if broker != self.broker_id
        }
        replica.high_watermark = max(
            min(replica.high_watermark, replica.plog.end_offset), replica.plog.start_offset
        )
        self._maybe_advance_high_watermark(replica)

    # --- the leader's side of a follower fetch ---------------------------------------------

    def record_follower_fetch(self, replica: Replica, follower: int, fetch_offset: int) -> None:
        """A follower fetched from `fetch_offset`: it holds everything below it."""
        if replica.role is not Role.LEADER or follower not in replica.replicas:
            return
        leader_end = replica.plog.end_offset
        if fetch_offset > leader_end:
            return  # out of range (the fetch fails): says nothing about what it holds
        now = self.clock()
        progress = replica.followers.setdefault(follower, FollowerProgress())
        if fetch_offset >= leader_end:
            progress.last_caught_up_s = now
        elif fetch_offset >= progress.leader_end_at_last_fetch >= 0:
            progress.last_caught_up_s = max(progress.last_caught_up_s, progress.last_fetch_s)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_s = now
        progress.leader_end_at_last_fetch = leader_end
        if follower not in replica.isr:
            self._maybe_expand_isr(replica, follower, progress)
        self._maybe_advance_high_watermark(replica)

    def _maybe_expand_isr(
        self, replica: Replica, follower: int, progress: FollowerProgress
    ) -> None:
        if replica.isr_change_pending or replica.state is None:
            return
        if progress.log_end_offset < replica.high_watermark:
            return
        if progress.log_end_offset < self._epoch_start(replica):
            return
        self.isr_expands += 1
        replica.isr_change_pending = True
        self._propose_isr(replica, (*replica.isr, follower))

    def _epoch_start(self, replica: Replica) -> int:
        """First offset of the current leader epoch (a follower joining the ISR must have
        reached it, or it may hold a diverging suffix of an older epoch)."""
        for epoch, start in reversed(replica.plog.leader_epoch_entries):
            if epoch == replica.leader_epoch:
                return start
            if epoch < replica.leader_epoch:
                break
        return replica.plog.end_offset

    def shrink_lagging(self) -> None:
        """Drop followers that have not caught up for replica.lag.time.max.ms (periodic)."""
        now = self.clock()
        for replica in self.replicas.values():
            if replica.role is not Role.LEADER or replica.isr_change_pending:
                continue
            lagging = [
                broker
                for broker in replica.isr
                if broker != self.broker_id
                and now - replica.followers.get(broker, FollowerProgress()).last_caught_up_s
                > self.lag_time_max_s
            ]
            if lagging:
                self.isr_shrinks += 1
                replica.isr_change_pending = True
                log.info(
                    "%s-%d: shrinking ISR %s: %s behind for more than replica.lag.time.max.ms",
                    replica.topic,
                    replica.partition,
                    list(replica.isr),
                    lagging,
                )
                self._propose_isr(replica, tuple(b for b in replica.isr if b not in lagging))

    def isr_change_failed(self, replica: Replica) -> None:
        """The proposal was refused (CAS lost): the watch brings the state that won."""
        replica.isr_change_pending = False

    # --- high watermark and acks=all ------------------------------------------------------

    def _maybe_advance_high_watermark(self, replica: Replica) -> bool:
        """Move the leader's high watermark as far as the ISR holds; whether it moved."""
        if replica.role is not Role.LEADER:
            return False
        end = replica.plog.end_offset
        candidate = end
        for broker in replica.isr:
            if broker == self.broker_id:
                continue
            progress = replica.followers.get(broker)
            candidate = min(candidate, progress.log_end_offset if progress is not None else -1)
        if candidate > replica.high_watermark:
            self.set_high_watermark(replica, candidate)
            return True
        return False

    def set_high_watermark(self, replica: Replica, offset: int) -> None:
        replica.high_watermark = offset
        if replica.waiters:
            still = []
            for waiter in replica.waiters:
                if waiter.offset < offset:
                    if not waiter.future.done():
                        waiter.future.set_result(self._acked_error(replica))
                else:
                    still.append(waiter)
            replica.waiters = still
        self._wake(replica.topic, replica.partition)
        listeners = self._hw_listeners.get((replica.topic, replica.partition))
        if listeners:
            for listener in list(listeners):
                listener(offset)

    def append(self, replica: Replica, records: Any, **options: Any) -> AppendInfo:
        """Append to a partition this broker leads (client batches, a coordinator's
        records, transaction markers; ``options`` go to ``PartitionLog.append``), move
        the high watermark as far as the ISR allows (alone in it: to the new end), and
        wake whoever waits to read the partition. NotLeaderError, with nothing written,
        when this broker does not lead it now."""
        if replica.role is not Role.LEADER or replica.truncating:
            raise NotLeaderError(f"{replica.topic}-{replica.partition} is not led here")
        info = replica.plog.append(records, **options)
        if not info.duplicate and not self._maybe_advance_high_watermark(replica):
            self._wake(replica.topic, replica.partition)  # followers fetch the new end
        return info

    # --- a follower's truncation ------------------------------------------------------------

    async def truncate(self, replica: Replica, offset: int) -> None:
        """Cut a follower's log back to ``offset`` (a batch boundary at or below it); the
        fsyncs run in a worker thread, and the replica takes no leader append meanwhile."""
        await self._off_loop(replica, replica.plog.truncate_to, offset)

    async def start_over_at(self, replica: Replica, offset: int) -> None:
        """Drop a follower's whole log and start it empty at ``offset`` (it fell behind the
        leader's log start), in a worker thread as ``truncate``."""
        await self._off_loop(replica, replica.plog.truncate_fully_and_start_at, offset)

    async def _off_loop(self, replica: Replica, cut: Callable[[int], Any], offset: int) -> None:
        replica.truncating = True
        try:
            await asyncio.to_thread(cut, offset)
        finally:
            replica.truncating = False
        replica.high_watermark = min(replica.high_watermark, replica.plog.end_offset)

    def check_acks_all(self, replica: Replica) -> int:
        """Before an acks=all append: NOT_ENOUGH_REPLICAS if the ISR is too small."""
        if len(replica.isr) < self.min_insync(replica.topic):
            return int(ErrorCode.NOT_ENOUGH_REPLICAS)
        return NONE

    def _acked_error(self, replica: Replica) -> int:
        if replica.role is not Role.LEADER:
            return int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if len(replica.isr) < self.min_insync(replica.topic):
            return int(ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        return NONE

    def acked(self, replica: Replica, last_offset: int) -> int | None:
        """acks=all: the answer now when the high watermark already passes ``last_offset``
        (always, alone in the ISR), None when it must wait for the followers."""
        if replica.role is not Role.LEADER:
            return int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if replica.high_watermark > last_offset:
            return self._acked_error(replica)
        return None

    async def wait_replicated(self, replica: Replica, last_offset: int, timeout_s: float) -> int:
        """Wait until the high watermark passes `last_offset`; the error code to answer."""
        if replica.role is not Role.LEADER:
            return int(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if replica.high_watermark > last_offset:
            return self._acked_error(replica)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        waiter = _AckWaiter(last_offset, future)
        replica.waiters.append(waiter)
        try:
            # asyncio.timeout, not wait_for: on Python 3.11, wait_for swallows a cancel
            # that arrives as the future completes, and a broker stopping then waited
            # for good on the connection whose request this was.
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(future)
        except TimeoutError:
            return int(ErrorCode.REQUEST_TIMED_OUT)
        finally:
            if waiter in replica.waiters:
                replica.waiters.remove(waiter)

    def _fail_waiters(self, replica: Replica, error: int) -> None:
        for waiter in replica.waiters:
            if not waiter.future.done():
                waiter.future.set_result(error)
        replica.waiters.clear()

    def resign_all(self) -> None:
        """This broker lost its etcd lease: it may no longer act as leader of anything.

        Its replicas take no role until the watch (after re-registering) brings the
        partition states the controller decided meanwhile.
        """
        for replica in self.replicas.values():
            if replica.role is Role.NONE or replica.state is None:
                continue
            current = replica.state
            without_leader = PartitionState(
                -1, current.state.leader_epoch, current.state.isr, current.state.partition_epoch
            )
            self.apply_state(
                replica,
                replica.replicas,
                VersionedPartitionState(
                    replica.topic, replica.partition, without_leader, current.mod_revision
                ),
            )

    # --- views -----------------------------------------------------------------------------

    def under_replicated(self) -> int:
        """Partitions this broker leads whose ISR is smaller than their replica set."""
        return sum(
            1
            for r in self.replicas.values()
            if r.role is Role.LEADER and len(r.isr) < len(r.replicas)
        )

    def leaders(self) -> int:
        return sum(1 for r in self.replicas.values() if r.role is Role.LEADER)
