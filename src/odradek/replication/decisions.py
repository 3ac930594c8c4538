"""The controller's decisions, as pure functions (issue 15).

The controller loop (broker side) watches etcd, and for every event asks this
module what the metadata should become, then writes that with the store's
compare-and-swap calls. Nothing here does I/O, reads a clock or draws random
numbers: the same inputs always give the same answer, so every rule is tested
without etcd and a controller failover cannot change a decision. Where Kafka
picks something at random (the first broker of a replica assignment) the caller
passes the choice in.

Each function follows a named piece of Kafka; the rules, not the code, are
Kafka's:

* Replica assignment: ``AdminUtils.assignReplicasToBrokers`` (rack-unaware and
  rack-aware) and ``AdminZkClient.createNewPartitionsAssignment`` for added
  partitions.
* Leader election: ``PartitionLeaderElectionAlgorithms`` (offline and preferred
  election) as the controller applies them when a broker leaves or returns
  (``ReplicationControlManager.generateLeaderAndIsrUpdates``).
* ISR changes proposed by a partition leader: ``ReplicationControlManager``'s
  AlterPartition validation.
* Reassignment: KIP-455 as KRaft implements it (``PartitionReassignmentReplicas``,
  ``PartitionReassignmentRevert``).

Errors are typed; each carries the Kafka error code the broker answers with.
States are `PartitionState` values; a function returning ``None`` means "no
change, write nothing". Every change it returns has ``partition_epoch + 1``
(the store's `update_partition` enforces the same), and ``leader_epoch + 1``
exactly when the leader changes (including to or from "no leader", -1).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from odradek.replication.model import PartitionState, TopicAssignment

NO_LEADER = -1

Replicas = tuple[int, ...]


# ---------------------------------------------------------------------------
# Errors


class DecisionError(Exception):
    """A request the controller must refuse; `error_code` is Kafka's answer."""

    error_code: ClassVar[int]


class InvalidPartitions(DecisionError):
    error_code = 37  # INVALID_PARTITIONS


class InvalidReplicationFactor(DecisionError):
    error_code = 38  # INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignment(DecisionError):
    error_code = 39  # INVALID_REPLICA_ASSIGNMENT


class IncompleteRackInformation(DecisionError):
    """Some brokers have a rack and some do not (Kafka's AdminOperationException).

    Kafka answers it as UNKNOWN_SERVER_ERROR with the message: it is not an API
    error, the operator has to fix the brokers' ``broker.rack``.
    """

    error_code = -1  # UNKNOWN_SERVER_ERROR


class StaleController(DecisionError):
    """The proposer has seen a newer partition state than the one we decided on.

    Kafka answers NOT_CONTROLLER: the deciding side's view is behind, so the
    proposer retries (here: the caller re-reads etcd and decides again).
    """

    error_code = 41  # NOT_CONTROLLER


class NotLeader(DecisionError):
    """An ISR change proposed by a broker that does not lead the partition."""

    error_code = 42  # INVALID_REQUEST (Kafka's answer to a non-leader's AlterPartition)


class InvalidIsr(DecisionError):
    """A proposed ISR with a non-replica, a repeated member, or without the leader."""

    error_code = 42  # INVALID_REQUEST


class FencedLeaderEpoch(DecisionError):
    error_code = 74  # FENCED_LEADER_EPOCH


class InvalidUpdateVersion(DecisionError):
    error_code = 95  # INVALID_UPDATE_VERSION


class IneligibleReplica(DecisionError):
    error_code = 107  # INELIGIBLE_REPLICA


class NoReassignmentInProgress(DecisionError):
    error_code = 85  # NO_REASSIGNMENT_IN_PROGRESS


class ElectionNotNeeded(DecisionError):
    error_code = 84  # ELECTION_NOT_NEEDED


class PreferredLeaderNotAvailable(DecisionError):
    error_code = 80  # PREFERRED_LEADER_NOT_AVAILABLE


class EligibleLeadersNotAvailable(DecisionError):
    error_code = 83  # ELIGIBLE_LEADERS_NOT_AVAILABLE


class ConcurrentChange(DecisionError):
    """A compare-and-swap lost to another writer (not a decision: the client retries)."""

    error_code = 7  # REQUEST_TIMED_OUT: retriable for every client


# ---------------------------------------------------------------------------
# Replica assignment


def assign_replicas(
    partition_count: int,
    replication_factor: int,
    brokers: Mapping[int, str | None],
    *,
    start_index: int,
    start_partition: int = 0,
    replica_shift: int | None = None,
) -> dict[int, Replicas]:
    """Replicas for partitions ``start_partition .. start_partition + count - 1``.

    Kafka's ``AdminUtils.assignReplicasToBrokers``: `brokers` (id -> rack) are
    taken in id order. Without racks the first replica of each partition goes
    round-robin from `start_index` and the followers sit at a shift from it that
    grows by one each time the partitions have gone once round the brokers
    (``assignReplicasToBrokersRackUnaware``), so the followers of one broker's
    partitions spread over all the others. With a rack on every broker the same
    round-robin runs over a rack-alternating broker list, and a follower is
    skipped while its rack (or, once every rack has a replica, the broker itself)
    already holds one, so each partition spans ``min(RF, racks)`` racks
    (``assignReplicasToBrokersRackAware``). Kafka draws `start_index` and the
    initial `replica_shift` at random; with a fixed start it uses the start for
    both, as here when `replica_shift` is None.

    Raises `InvalidPartitions`, `InvalidReplicationFactor` (Kafka's messages) or
    `IncompleteRackInformation` if only some brokers have a rack.
    """
    if partition_count <= 0:
        raise InvalidPartitions("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactor("Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: "
            f"{len(brokers)}."
        )
    if start_index < 0 or start_partition < 0 or (replica_shift is not None and replica_shift < 0):
        raise ValueError("start_index, start_partition and replica_shift must be >= 0")
    shift = start_index if replica_shift is None else replica_shift
    racks = {broker: rack for broker, rack in sorted(brokers.items())}
    if all(rack is None for rack in racks.values()):
        return _assign_rack_unaware(
            partition_count, replication_factor, list(racks), start_index, start_partition, shift
        )
    if any(rack is None for rack in racks.values()):
        raise IncompleteRackInformation(
            "Not all brokers have rack information for replica rack aware assignment."
        )
    return _assign_rack_aware(
        partition_count,
        replication_factor,
        {broker: str(rack) for broker, rack in racks.items()},
        start_index,
        start_partition,
        shift,
    )


def _follower_index(first: int, shift: int, follower: int, broker_count: int) -> int:
    """Index of a partition's `follower`-th follower: never the first replica's index."""
    return (first + 1 + (shift + follower) % (broker_count - 1)) % broker_count


def _assign_rack_unaware(
    partition_count: int,
    replication_factor: int,
    broker_list: Sequence[int],
    start_index: int,
    start_partition: int,
    shift: int,
) -> dict[int, Replicas]:
    count = len(broker_list)
    assignment: dict[int, Replicas] = {}
    for partition in range(start_partition, start_partition + partition_count):
        if partition > 0 and partition % count == 0:
            shift += 1  # one full round done: move the followers on
        first = (partition + start_index) % count
        followers = (
            broker_list[_follower_index(first, shift, j, count)]
            for j in range(replication_factor - 1)
        )
        assignment[partition] = (broker_list[first], *followers)
    return assignment


def rack_alternated_brokers(racks: Mapping[int, str]) -> list[int]:
    """Brokers taken one per rack in turn (racks by name, brokers by id).

    Kafka's ``getRackAlternatedBrokerList``: racks a: 0,1,2; b: 3,4,5; c: 6,7,8
    give 0, 3, 6, 1, 4, 7, 2, 5, 8; a rack that runs out is skipped.
    """
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    depth = max(len(column) for column in columns)
    return [column[row] for row in range(depth) for column in columns if row < len(column)]


def _assign_rack_aware(
    partition_count: int,
    replication_factor: int,
    racks: Mapping[int, str],
    start_index: int,
    start_partition: int,
    shift: int,
) -> dict[int, Replicas]:
    arranged = rack_alternated_brokers(racks)
    count = len(arranged)
    rack_count = len(set(racks.values()))
    assignment: dict[int, Replicas] = {}
    for partition in range(start_partition, start_partition + partition_count):
        if partition > 0 and partition % count == 0:
            shift += 1
        first = (partition + start_index) % count
        chosen = [arranged[first]]
        racks_used = {racks[arranged[first]]}
        candidate = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[_follower_index(first, shift * rack_count, candidate, count)]
                candidate += 1
                # a rack already used is fine only once every rack is used; a broker
                # already used only once every broker is (never, as RF <= brokers)
                rack_ok = racks[broker] not in racks_used or len(racks_used) == rack_count
                if rack_ok and broker not in chosen:
                    chosen.append(broker)
                    racks_used.add(racks[broker])
                    break
        assignment[partition] = tuple(chosen)
    return assignment


def assign_added_partitions(
    existing: Mapping[int, Replicas],
    new_count: int,
    brokers: Mapping[int, str | None],
    *,
    topic: str,
    start_index: int | None = None,
) -> dict[int, Replicas]:
    """The replicas of the partitions CreatePartitions adds, the existing ones kept.

    Kafka's ``AdminZkClient.createNewPartitionsAssignment``: the new partitions
    get partition 0's replication factor and continue the round-robin where the
    existing partitions stop (``start_partition`` = current count), starting at
    the broker of partition 0's leader (the first broker id >= it) unless
    `start_index` is given. Returns the whole assignment, old and new.

    Raises `InvalidPartitions` unless `new_count` is larger than the current
    count, and whatever `assign_replicas` raises.
    """
    current = len(existing)
    if sorted(existing) != list(range(current)) or current == 0:
        raise ValueError(f"existing partitions of {topic!r} must be 0..n-1, n >= 1")
    if new_count < current:
        raise InvalidPartitions(
            f"The topic {topic} currently has {current} partition(s); "
            f"{new_count} would not be an increase."
        )
    if new_count == current:
        raise InvalidPartitions(f"Topic already has {current} partition(s).")
    first_leader = existing[0][0]
    if start_index is None:
        ordered = sorted(brokers)
        start_index = next((i for i, b in enumerate(ordered) if b >= first_leader), 0)
    added = assign_replicas(
        new_count - current,
        len(existing[0]),
        brokers,
        start_index=start_index,
        start_partition=current,
    )
    return {**{p: tuple(r) for p, r in existing.items()}, **added}


# ---------------------------------------------------------------------------
# Leader election


def elect_leader(
    replicas: Sequence[int], isr: Sequence[int], live: Collection[int], *, unclean: bool
) -> tuple[int, Replicas] | None:
    """The new leader and ISR of a partition that needs one, or None (offline).

    Kafka's ``offlinePartitionLeaderElection``: the first replica, in assignment
    order, that is live and in the ISR; the ISR stays. If there is none and
    unclean election is allowed (``unclean.leader.election.enable``), the first
    live replica, with an ISR of just itself: it may lack committed records, which
    is the price of availability.
    """
    for replica in replicas:
        if replica in live and replica in isr:
            return replica, tuple(isr)
    if unclean:
        for replica in replicas:
            if replica in live:
                return replica, (replica,)
    return None


def _changed(state: PartitionState, leader: int, isr: Sequence[int]) -> PartitionState | None:
    """The next state (epochs moved by the rules above), or None if nothing changed."""
    isr = tuple(isr)
    if leader == state.leader and isr == state.isr:
        return None
    leader_epoch = state.leader_epoch + (1 if leader != state.leader else 0)
    return PartitionState(leader, leader_epoch, isr, state.partition_epoch + 1)


def partition_after_broker_loss(
    replicas: Sequence[int],
    state: PartitionState,
    dead_broker: int,
    live: Collection[int],
    *,
    unclean: bool,
) -> PartitionState | None:
    """A partition's state once `dead_broker` has left the cluster (None: unchanged).

    Kafka (``generateLeaderAndIsrUpdates`` on a fenced broker): the broker leaves
    the ISR, except when it is the last member, which stays so that a later clean
    election still knows which replica has every committed record. If it led
    the partition (or the partition has no leader), a leader is elected with
    `elect_leader` among the remaining live brokers; with none the partition goes
    offline (leader -1). `live` may or may not still contain `dead_broker`.
    """
    live_now = frozenset(live) - {dead_broker}
    isr = state.isr
    if dead_broker in isr and len(isr) > 1:
        isr = tuple(b for b in isr if b != dead_broker)
    leader = state.leader
    if leader in (dead_broker, NO_LEADER):
        elected = elect_leader(replicas, isr, live_now, unclean=unclean)
        leader, isr = elected if elected is not None else (NO_LEADER, isr)
    return _changed(state, leader, isr)


def partition_after_broker_return(
    replicas: Sequence[int],
    state: PartitionState,
    broker: int,
    live: Collection[int],
    *,
    unclean: bool,
) -> PartitionState | None:
    """A partition's state once `broker` is back (None: unchanged).

    Kafka (``handleBrokerUnfenced``): partitions without a leader get one if the
    election can now succeed: an offline partition whose ISR holds the returning
    broker gets it as leader (``leader_epoch + 1``); with unclean election, any
    live replica will do. A returning broker does not rejoin an ISR here: its
    leader adds it (AlterPartition, `isr_change`) once it has caught up.
    """
    if state.leader != NO_LEADER or broker not in replicas:
        return None
    elected = elect_leader(replicas, state.isr, frozenset(live) | {broker}, unclean=unclean)
    if elected is None:
        return None
    return _changed(state, *elected)


def preferred_leader_election(
    replicas: Sequence[int], state: PartitionState, live: Collection[int]
) -> PartitionState | None:
    """Leadership back to the preferred replica, or None if not possible or needed.

    Kafka's ``preferredReplicaPartitionLeaderElection`` (auto leader rebalance,
    ElectLeaders with PREFERRED): the preferred leader is ``replicas[0]``; it
    takes over only if it is live and in the ISR. The ISR stays.
    """
    preferred = replicas[0]
    if state.leader == preferred or preferred not in live or preferred not in state.isr:
        return None
    return _changed(state, preferred, state.isr)


def isr_change(
    replicas: Sequence[int],
    state: PartitionState,
    new_isr: Sequence[int],
    *,
    proposer: int,
    leader_epoch: int,
    partition_epoch: int,
    live: Collection[int],
) -> PartitionState:
    """Validate an ISR change a partition leader proposes; the state to write.

    Kafka's AlterPartition validation in ``ReplicationControlManager``, in its
    order: epochs newer than ours mean our view is stale (`StaleController`);
    an older leader epoch is fenced (`FencedLeaderEpoch`); the proposer must be
    the leader (`NotLeader`); an older partition epoch means the proposal was
    based on a state that has changed since (`InvalidUpdateVersion`); the new ISR
    must hold distinct replicas of the partition including the leader
    (`InvalidIsr`) and only live brokers (`IneligibleReplica`). The result keeps
    leader and leader epoch and moves the partition epoch on.
    """
    if leader_epoch > state.leader_epoch or partition_epoch > state.partition_epoch:
        raise StaleController(
            f"proposed epochs {leader_epoch}/{partition_epoch} are newer than "
            f"{state.leader_epoch}/{state.partition_epoch}"
        )
    if leader_epoch < state.leader_epoch:
        raise FencedLeaderEpoch(
            f"the current leader epoch is {state.leader_epoch}, not {leader_epoch}"
        )
    if proposer != state.leader:
        raise NotLeader(f"broker {proposer} is not the leader (the leader is {state.leader})")
    if partition_epoch < state.partition_epoch:
        raise InvalidUpdateVersion(
            f"the current partition epoch is {state.partition_epoch}, not {partition_epoch}"
        )
    if len(set(new_isr)) != len(new_isr) or not set(new_isr) <= set(replicas):
        raise InvalidIsr(f"ISR {list(new_isr)} is not a set of replicas of {list(replicas)}")
    if state.leader not in new_isr:
        raise InvalidIsr(f"ISR {list(new_isr)} does not include the leader {state.leader}")
    ineligible = [b for b in new_isr if b not in live]
    if ineligible:
        raise IneligibleReplica(
            f"ISR {list(new_isr)} includes brokers that are not live: {ineligible}"
        )
    return PartitionState(
        state.leader, state.leader_epoch, tuple(new_isr), state.partition_epoch + 1
    )


# ---------------------------------------------------------------------------
# Reassignment (KIP-455)


@dataclass(frozen=True, slots=True)
class Reassignment:
    """A partition's replicas during a reassignment: target first, then those leaving."""

    replicas: Replicas
    adding: Replicas
    removing: Replicas

    @property
    def target(self) -> Replicas:
        return tuple(b for b in self.replicas if b not in self.removing)

    @classmethod
    def of(cls, assignment: TopicAssignment, partition: int) -> Reassignment:
        """What `assignment` stores for `partition` (adding/removing empty if none runs)."""
        return cls(
            replicas=tuple(assignment.replicas[partition]),
            adding=assignment.adding.get(partition, ()),
            removing=assignment.removing.get(partition, ()),
        )

    def applied_to(self, assignment: TopicAssignment, partition: int) -> TopicAssignment:
        """`assignment` with this partition's replicas, adding and removing replaced.

        ``Reassignment(replicas, (), ())`` ends one: the completed target, or the
        original replicas `cancel_reassignment` answers.
        """
        return replace(
            assignment,
            replicas={**assignment.replicas, partition: self.replicas},
            adding={**assignment.adding, partition: self.adding},
            removing={**assignment.removing, partition: self.removing},
        )


def start_reassignment(
    current_replicas: Sequence[int], target: Sequence[int], *, live: Collection[int]
) -> Reassignment:
    """Begin moving a partition from `current_replicas` to `target` (KIP-455).

    The replica list becomes the target followed by the current replicas that are
    not in it; ``adding`` = target - current, ``removing`` = current - target.
    Followers start copying the adding replicas at once; `reassignment_progress`
    finishes the move once they are in the ISR. Raises `InvalidReplicaAssignment`
    for an empty target, a repeated broker, or a broker that is not live
    (registered), as KRaft's ``validateManualPartitionAssignment``.

    To replace a reassignment in progress, Kafka first reverts it: apply
    `cancel_reassignment` and start again from its original replicas.
    """
    if not target:
        raise InvalidReplicaAssignment(
            "The manual partition assignment includes an empty replica list."
        )
    for broker in sorted(target):
        if broker not in live:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes broker {broker}, "
                "but no such broker is registered."
            )
    if len(set(target)) != len(target):
        repeated = sorted(b for b in set(target) if list(target).count(b) > 1)
        raise InvalidReplicaAssignment(
            f"The manual partition assignment includes the broker {repeated[0]} more than once."
        )
    removing = tuple(b for b in current_replicas if b not in target)
    adding = tuple(b for b in target if b not in current_replicas)
    return Reassignment(replicas=(*target, *removing), adding=adding, removing=removing)


def cancel_reassignment(
    reassignment: Reassignment,
    state: PartitionState,
    live: Collection[int],
    *,
    unclean: bool,
) -> tuple[Replicas, PartitionState | None]:
    """Revert a reassignment in progress: the original replicas and the new state.

    KRaft's ``PartitionReassignmentRevert``: the adding replicas leave the replica
    list and the ISR, the removing ones stay. If the ISR held only adding
    replicas, the first original replica becomes the ISR, which is an unclean
    election: refused with `InvalidReplicaAssignment` unless `unclean`. A leader
    that was an adding replica is replaced by `elect_leader` among the originals
    (offline if none is live).
    """
    adding = set(reassignment.adding)
    original = tuple(b for b in reassignment.replicas if b not in adding)
    if not original:
        raise InvalidReplicaAssignment(
            "Invalid replica assignment: addingReplicas contains all replicas."
        )
    isr = tuple(b for b in state.isr if b not in adding)
    if not isr:
        if not unclean:
            raise InvalidReplicaAssignment(
                "Unable to revert the partition assignment because it would require "
                "an unclean leader election."
            )
        isr = (original[0],)
    leader = state.leader
    if leader not in isr:
        elected = elect_leader(original, isr, live, unclean=False)
        leader = elected[0] if elected is not None else NO_LEADER
    return original, _changed(state, leader, isr)


def reassignment_progress(
    reassignment: Reassignment, state: PartitionState, live: Collection[int]
) -> tuple[Replicas | None, PartitionState | None]:
    """Complete a reassignment if it can be: the new replicas and state, or (None, None).

    KRaft's ``maybeCompleteReassignment`` (called after every ISR change): the
    move completes once every target replica, which includes every adding one,
    is in the ISR (so the ISR left without the removing replicas is never empty). Then
    the replicas become the target and the ISR drops the removing replicas; a
    leader being removed is replaced by `elect_leader` over the target (clean
    only: the target members are all in the ISR by now). The state is None when
    only the replica list changes (the ISR held no removing replica).

    Write the state before the replicas: on a half-done completion (state
    written, replicas not) this answers the replicas again and no state change.
    """
    if not reassignment.adding and not reassignment.removing:
        return None, None
    target = reassignment.target
    isr = tuple(b for b in state.isr if b not in reassignment.removing)
    if not set(target) <= set(isr):
        return None, None
    leader = state.leader
    if leader not in isr:
        elected = elect_leader(target, isr, live, unclean=False)
        leader = elected[0] if elected is not None else NO_LEADER
    return target, _changed(state, leader, isr)
