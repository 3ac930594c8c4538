"""The controller's pure decisions: Kafka's documented examples and properties.

No etcd here: every function is pure, so examples pin Kafka's exact layouts and
hypothesis drives broker losses, returns and ISR changes through them, checking
the invariants Kafka's controller keeps.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.replication.decisions import (
    NO_LEADER,
    FencedLeaderEpoch,
    IncompleteRackInformation,
    IneligibleReplica,
    InvalidIsr,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    InvalidUpdateVersion,
    NotLeader,
    Reassignment,
    StaleController,
    assign_added_partitions,
    assign_replicas,
    cancel_reassignment,
    elect_leader,
    isr_change,
    partition_after_broker_loss,
    partition_after_broker_return,
    preferred_leader_election,
    rack_alternated_brokers,
    reassignment_progress,
    start_reassignment,
)
from odradek.replication.model import PartitionState

PROPERTY_SETTINGS = settings(max_examples=200, deadline=None)


def no_racks(count: int) -> dict[int, str | None]:
    return dict.fromkeys(range(count))


# -- assignment: Kafka's examples ---------------------------------------------------


def test_rack_unaware_layout_is_kafkas_documented_example() -> None:
    # AdminUtils' comment: 5 brokers, 10 partitions, RF 3, first replica at broker 0;
    # each row is where a partition's 1st/2nd/3rd replica lands, by broker
    table = {
        0: ["p0", "p5", "p4", "p8", "p3", "p7"],
        1: ["p1", "p6", "p0", "p9", "p4", "p8"],
        2: ["p2", "p7", "p1", "p5", "p0", "p9"],
        3: ["p3", "p8", "p2", "p6", "p1", "p5"],
        4: ["p4", "p9", "p3", "p7", "p2", "p6"],
    }
    assignment = assign_replicas(10, 3, no_racks(5), start_index=0)
    for broker, cells in table.items():
        for row, cell in enumerate(cells):
            replica_position = row // 2  # two rows per replica position
            partition = int(cell[1:])
            assert assignment[partition][replica_position] == broker, (broker, row, cell)


def test_rack_alternated_list_is_kafkas_documented_example() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    three_by_three = {b: f"rack{b // 3 + 1}" for b in range(9)}
    assert rack_alternated_brokers(three_by_three) == [0, 3, 6, 1, 4, 7, 2, 5, 8]


def test_rack_aware_layout_of_six_brokers_in_three_racks_is_kafkas_example() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assignment = assign_replicas(7, 3, racks, start_index=0)
    assert assignment == {
        0: (0, 3, 1),
        1: (3, 1, 5),
        2: (1, 5, 4),
        3: (5, 4, 2),
        4: (4, 2, 0),
        5: (2, 0, 3),
        6: (0, 4, 2),  # second round: followers shifted, not 0,3,1 again
    }
    for replicas in assignment.values():
        assert len({racks[b] for b in replicas}) == 3


def test_brokers_are_taken_in_id_order_whatever_order_they_come_in() -> None:
    shuffled: dict[int, str | None] = {4: None, 2: None, 0: None, 3: None, 1: None}
    assert assign_replicas(10, 3, shuffled, start_index=0) == assign_replicas(
        10, 3, no_racks(5), start_index=0
    )
    racks = {5: "rack1", 2: "rack3", 0: "rack1", 4: "rack2", 1: "rack3", 3: "rack2"}
    assert assign_replicas(6, 3, racks, start_index=0)[0] == (0, 3, 1)


def test_start_partition_continues_the_round_robin() -> None:
    whole = assign_replicas(8, 2, no_racks(4), start_index=2)
    tail = assign_replicas(3, 2, no_racks(4), start_index=2, start_partition=5)
    # the first replicas continue the round-robin; the follower shift restarts at
    # start_index, as in Kafka (it only counts rounds completed within this call)
    assert [tail[p][0] for p in (5, 6, 7)] == [whole[p][0] for p in (5, 6, 7)]
    assert tail == {5: (3, 2), 6: (0, 3), 7: (1, 0)}


@pytest.mark.parametrize(
    ("partitions", "rf", "brokers", "error", "message"),
    [
        (0, 1, 3, InvalidPartitions, "Number of partitions must be larger than 0."),
        (3, 0, 3, InvalidReplicationFactor, "Replication factor must be larger than 0."),
        (
            3,
            4,
            3,
            InvalidReplicationFactor,
            "Replication factor: 4 larger than available brokers: 3.",
        ),
        (
            1,
            1,
            0,
            InvalidReplicationFactor,
            "Replication factor: 1 larger than available brokers: 0.",
        ),
    ],
)
def test_invalid_counts_are_refused_with_kafkas_messages(
    partitions: int, rf: int, brokers: int, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        assign_replicas(partitions, rf, no_racks(brokers), start_index=0)
    assert str(raised.value) == message


def test_error_codes_are_kafkas() -> None:
    assert InvalidPartitions.error_code == 37
    assert InvalidReplicationFactor.error_code == 38
    assert InvalidReplicaAssignment.error_code == 39
    assert FencedLeaderEpoch.error_code == 74
    assert InvalidUpdateVersion.error_code == 95
    assert IneligibleReplica.error_code == 107


def test_racks_on_some_brokers_only_is_refused() -> None:
    with pytest.raises(IncompleteRackInformation, match="Not all brokers have rack information"):
        assign_replicas(3, 2, {0: "a", 1: None, 2: "b"}, start_index=0)


def test_added_partitions_keep_the_existing_ones_and_continue_from_partition_zero() -> None:
    brokers = no_racks(4)
    existing = assign_replicas(3, 2, brokers, start_index=1)  # partition 0 led by broker 1
    grown = assign_added_partitions(existing, 6, brokers, topic="t")
    assert {p: grown[p] for p in range(3)} == existing
    # Kafka starts at the first broker >= partition 0's leader, from partition 3 on
    assert grown == {**existing, **assign_replicas(3, 2, brokers, start_index=1, start_partition=3)}
    assert all(len(r) == 2 for r in grown.values())


def test_added_partitions_must_increase_the_count() -> None:
    existing = assign_replicas(3, 1, no_racks(2), start_index=0)
    with pytest.raises(InvalidPartitions, match="Topic already has 3 partition"):
        assign_added_partitions(existing, 3, no_racks(2), topic="t")
    with pytest.raises(InvalidPartitions, match="would not be an increase"):
        assign_added_partitions(existing, 2, no_racks(2), topic="t")


# -- assignment: properties ---------------------------------------------------------


@st.composite
def clusters(draw: st.DrawFn) -> tuple[dict[int, str | None], int, int, int]:
    """Brokers (all with racks or none), partitions, RF, start index."""
    ids = draw(st.sets(st.integers(0, 40), min_size=1, max_size=9))
    racked = draw(st.booleans())
    rack_names = ["a", "b", "c", "d"]
    brokers = {b: (draw(st.sampled_from(rack_names)) if racked else None) for b in sorted(ids)}
    rf = draw(st.integers(1, len(brokers)))
    partitions = draw(st.integers(1, 30))
    start = draw(st.integers(0, len(brokers) - 1))
    return brokers, partitions, rf, start


@PROPERTY_SETTINGS
@given(clusters())
def test_assignment_never_repeats_a_broker_and_spans_as_many_racks_as_it_can(
    cluster: tuple[dict[int, str | None], int, int, int],
) -> None:
    brokers, partitions, rf, start = cluster
    assignment = assign_replicas(partitions, rf, brokers, start_index=start)
    assert sorted(assignment) == list(range(partitions))
    rack_count = len(set(brokers.values()))
    for replicas in assignment.values():
        assert len(replicas) == rf
        assert len(set(replicas)) == rf
        assert set(replicas) <= set(brokers)
        if None not in brokers.values():
            assert len({brokers[b] for b in replicas}) == min(rf, rack_count)


@PROPERTY_SETTINGS
@given(clusters(), st.integers(1, 4))
def test_leaders_are_balanced_within_one_when_partitions_are_a_multiple_of_brokers(
    cluster: tuple[dict[int, str | None], int, int, int], rounds: int
) -> None:
    brokers, _, rf, start = cluster
    assignment = assign_replicas(rounds * len(brokers), rf, brokers, start_index=start)
    leaders = Counter(replicas[0] for replicas in assignment.values())
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1


# -- elections: examples --------------------------------------------------------------


def test_election_takes_the_first_live_isr_replica_in_assignment_order() -> None:
    assert elect_leader((3, 1, 2), (2, 1), {1, 2}, unclean=False) == (1, (2, 1))
    assert elect_leader((3, 1, 2), (2, 1), {2}, unclean=False) == (2, (2, 1))


def test_unclean_election_takes_a_live_replica_outside_the_isr_only_when_allowed() -> None:
    assert elect_leader((3, 1, 2), (1,), {2, 3}, unclean=False) is None
    assert elect_leader((3, 1, 2), (1,), {2, 3}, unclean=True) == (3, (3,))
    assert elect_leader((3, 1, 2), (1,), set(), unclean=True) is None


def test_losing_the_leader_elects_from_the_isr_and_bumps_both_epochs() -> None:
    state = PartitionState(leader=1, leader_epoch=4, isr=(1, 2, 3), partition_epoch=9)
    after = partition_after_broker_loss((1, 2, 3), state, 1, {2, 3}, unclean=False)
    assert after == PartitionState(leader=2, leader_epoch=5, isr=(2, 3), partition_epoch=10)


def test_a_loss_also_elects_for_a_partition_left_offline_with_a_live_isr_member() -> None:
    # e.g. a state written by an earlier controller that missed broker 2's return
    offline = PartitionState(leader=NO_LEADER, leader_epoch=3, isr=(1, 2), partition_epoch=5)
    after = partition_after_broker_loss((1, 2), offline, 1, {2}, unclean=False)
    assert after == PartitionState(leader=2, leader_epoch=4, isr=(2,), partition_epoch=6)


def test_losing_a_follower_shrinks_the_isr_and_keeps_the_leader_epoch() -> None:
    state = PartitionState(leader=1, leader_epoch=4, isr=(1, 2, 3), partition_epoch=9)
    after = partition_after_broker_loss((1, 2, 3), state, 3, {1, 2, 3}, unclean=False)
    assert after == PartitionState(leader=1, leader_epoch=4, isr=(1, 2), partition_epoch=10)


def test_losing_a_broker_outside_the_isr_changes_nothing() -> None:
    state = PartitionState(leader=1, leader_epoch=4, isr=(1, 2), partition_epoch=9)
    assert partition_after_broker_loss((1, 2, 3), state, 3, {1, 2}, unclean=False) is None


def test_the_last_isr_member_stays_in_the_isr_when_it_dies() -> None:
    state = PartitionState(leader=1, leader_epoch=4, isr=(1,), partition_epoch=9)
    after = partition_after_broker_loss((1, 2, 3), state, 1, {2, 3}, unclean=False)
    assert after == PartitionState(leader=NO_LEADER, leader_epoch=5, isr=(1,), partition_epoch=10)
    # it comes back: clean election of the one replica known to hold everything
    back = partition_after_broker_return((1, 2, 3), after, 1, {1, 2, 3}, unclean=False)
    assert back == PartitionState(leader=1, leader_epoch=6, isr=(1,), partition_epoch=11)


def test_an_offline_partition_stays_offline_when_a_replica_outside_the_isr_returns() -> None:
    offline = PartitionState(leader=NO_LEADER, leader_epoch=5, isr=(1,), partition_epoch=10)
    assert partition_after_broker_return((1, 2, 3), offline, 2, {2}, unclean=False) is None
    unclean = partition_after_broker_return((1, 2, 3), offline, 2, {2}, unclean=True)
    assert unclean == PartitionState(leader=2, leader_epoch=6, isr=(2,), partition_epoch=11)


def test_a_return_does_not_touch_a_partition_that_has_a_leader() -> None:
    # even when the returning broker is the preferred replica and still in the ISR
    # (back before its loss was handled): moving leadership is preferred election's job
    state = PartitionState(leader=2, leader_epoch=5, isr=(2, 1), partition_epoch=10)
    assert partition_after_broker_return((1, 2, 3), state, 1, {1, 2}, unclean=True) is None


def test_losing_the_leader_with_unclean_election_takes_a_live_replica() -> None:
    state = PartitionState(leader=1, leader_epoch=0, isr=(1,), partition_epoch=0)
    after = partition_after_broker_loss((1, 2, 3), state, 1, {1, 3}, unclean=True)
    assert after == PartitionState(leader=3, leader_epoch=1, isr=(3,), partition_epoch=1)


def test_preferred_leader_election() -> None:
    state = PartitionState(leader=2, leader_epoch=3, isr=(2, 1), partition_epoch=7)
    assert preferred_leader_election((1, 2), state, {1, 2}) == PartitionState(1, 4, (2, 1), 8)
    assert preferred_leader_election((1, 2), state, {2}) is None  # preferred not live
    out_of_isr = PartitionState(leader=2, leader_epoch=3, isr=(2,), partition_epoch=7)
    assert preferred_leader_election((1, 2), out_of_isr, {1, 2}) is None
    already = PartitionState(leader=1, leader_epoch=3, isr=(1, 2), partition_epoch=7)
    assert preferred_leader_election((1, 2), already, {1, 2}) is None


# -- ISR changes (AlterPartition) -------------------------------------------------------


ISR_STATE = PartitionState(leader=1, leader_epoch=5, isr=(1, 2), partition_epoch=8)


def propose(
    new_isr: tuple[int, ...],
    *,
    proposer: int = 1,
    leader_epoch: int = 5,
    partition_epoch: int = 8,
    live: frozenset[int] = frozenset({1, 2, 3}),
) -> PartitionState:
    return isr_change(
        (1, 2, 3),
        ISR_STATE,
        new_isr,
        proposer=proposer,
        leader_epoch=leader_epoch,
        partition_epoch=partition_epoch,
        live=live,
    )


def test_a_valid_isr_change_keeps_leadership_and_moves_the_partition_epoch() -> None:
    assert propose((1, 2, 3)) == PartitionState(1, 5, (1, 2, 3), 9)
    assert propose((1,)) == PartitionState(1, 5, (1,), 9)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"leader_epoch": 4}, FencedLeaderEpoch),
        ({"leader_epoch": 6}, StaleController),
        ({"partition_epoch": 9}, StaleController),
        ({"proposer": 2}, NotLeader),
        ({"partition_epoch": 7}, InvalidUpdateVersion),
        ({"new_isr": (2, 3)}, InvalidIsr),  # without the leader
        ({"new_isr": (1, 4)}, InvalidIsr),  # 4 is not a replica
        ({"new_isr": (1, 2, 2)}, InvalidIsr),
        ({"new_isr": (1, 3), "live": frozenset({1, 2})}, IneligibleReplica),
        # Kafka's order: a fenced epoch is reported before a wrong proposer
        ({"leader_epoch": 4, "proposer": 2}, FencedLeaderEpoch),
        ({"proposer": 2, "partition_epoch": 7}, NotLeader),
    ],
)
def test_invalid_isr_changes_are_refused_with_kafkas_errors(
    kwargs: dict[str, object], error: type[Exception]
) -> None:
    new_isr = kwargs.pop("new_isr", (1, 2, 3))
    with pytest.raises(error):
        propose(new_isr, **kwargs)  # type: ignore[arg-type]


# -- elections: properties ------------------------------------------------------------

BROKERS = 5
Event = tuple[str, int, int]  # kind, broker, partition


@st.composite
def event_sequences(draw: st.DrawFn) -> list[Event]:
    kinds = st.sampled_from(["lose", "return", "expand", "shrink", "preferred"])
    event = st.tuples(kinds, st.integers(0, BROKERS - 1), st.integers(0, 5))
    return draw(st.lists(event, max_size=60))


@PROPERTY_SETTINGS
@given(event_sequences(), st.booleans(), st.integers(1, 3))
def test_elections_keep_kafkas_invariants_through_any_losses_and_returns(
    events: list[Event], unclean: bool, rf: int
) -> None:
    assignment = assign_replicas(6, rf, no_racks(BROKERS), start_index=0)
    live = set(range(BROKERS))
    states = {p: PartitionState(r[0], 0, r, 0) for p, r in assignment.items()}

    def apply(partition: int, new: PartitionState | None) -> None:
        old = states[partition]
        if new is None:
            return
        replicas = assignment[partition]
        assert new.partition_epoch == old.partition_epoch + 1
        if new.leader != old.leader:
            assert new.leader_epoch == old.leader_epoch + 1
            if not unclean and new.leader != NO_LEADER:
                assert new.leader in old.isr, "clean election outside the last ISR"
        else:
            assert new.leader_epoch == old.leader_epoch
        assert new.isr and set(new.isr) <= set(replicas)
        assert len(set(new.isr)) == len(new.isr)
        states[partition] = new

    for kind, broker, partition in events:
        if kind == "lose" and broker in live:
            live.discard(broker)
            for p, replicas in assignment.items():
                apply(
                    p,
                    partition_after_broker_loss(replicas, states[p], broker, live, unclean=unclean),
                )
        elif kind == "return" and broker not in live:
            live.add(broker)
            for p, replicas in assignment.items():
                apply(
                    p,
                    partition_after_broker_return(
                        replicas, states[p], broker, live, unclean=unclean
                    ),
                )
        elif kind in ("expand", "shrink") and states[partition].leader != NO_LEADER:
            state, replicas = states[partition], assignment[partition]
            if kind == "expand":
                new_isr = (*state.isr, *(b for b in replicas if b in live and b not in state.isr))
            else:
                new_isr = tuple(b for b in state.isr if b == state.leader or b != broker)
            if new_isr != state.isr:
                apply(
                    partition,
                    isr_change(
                        replicas,
                        state,
                        new_isr,
                        proposer=state.leader,
                        leader_epoch=state.leader_epoch,
                        partition_epoch=state.partition_epoch,
                        live=live,
                    ),
                )
        elif kind == "preferred":
            apply(
                partition, preferred_leader_election(assignment[partition], states[partition], live)
            )

        for p, state in states.items():
            if state.leader != NO_LEADER:
                assert state.leader in state.isr and state.leader in live
            elif any(b in live for b in state.isr):
                raise AssertionError(f"partition {p} offline with a live ISR member: {state}")
            if unclean and state.leader == NO_LEADER:
                assert not live & set(assignment[p]), "unclean: offline with a live replica"


# -- reassignment (KIP-455) -------------------------------------------------------------


def test_starting_a_reassignment_lists_target_first_then_the_leaving_replicas() -> None:
    moving = start_reassignment((1, 2, 3), (3, 4, 5), live={1, 2, 3, 4, 5})
    assert moving == Reassignment(replicas=(3, 4, 5, 1, 2), adding=(4, 5), removing=(1, 2))
    assert moving.target == (3, 4, 5)
    reorder = start_reassignment((1, 2, 3), (3, 1, 2), live={1, 2, 3})
    assert reorder == Reassignment(replicas=(3, 1, 2), adding=(), removing=())


@pytest.mark.parametrize(
    ("target", "match"),
    [
        ((), "empty replica list"),
        ((1, 1), "broker 1 more than once"),
        ((1, 9), "broker 9, but no such broker is registered"),
    ],
)
def test_invalid_reassignment_targets_are_refused(target: tuple[int, ...], match: str) -> None:
    with pytest.raises(InvalidReplicaAssignment, match=match):
        start_reassignment((1, 2), target, live={1, 2, 3})


def test_reassignment_waits_until_every_target_replica_is_in_the_isr() -> None:
    moving = start_reassignment((1, 2, 3), (3, 4, 5), live={1, 2, 3, 4, 5})
    state = PartitionState(leader=1, leader_epoch=2, isr=(1, 2, 3, 4), partition_epoch=6)
    assert reassignment_progress(moving, state, {1, 2, 3, 4, 5}) == (None, None)


def test_reassignment_waits_for_a_target_replica_that_fell_out_of_the_isr() -> None:
    # Kafka completes only when every target replica (not just the adding ones) is in sync
    moving = start_reassignment((1, 2, 3), (3, 4), live={1, 2, 3, 4})
    state = PartitionState(leader=1, leader_epoch=2, isr=(1, 2, 4), partition_epoch=6)
    assert reassignment_progress(moving, state, {1, 2, 3, 4}) == (None, None)


def test_completed_reassignment_drops_the_removed_replicas_and_moves_leadership() -> None:
    moving = start_reassignment((1, 2, 3), (3, 4, 5), live={1, 2, 3, 4, 5})
    state = PartitionState(leader=1, leader_epoch=2, isr=(1, 2, 3, 4, 5), partition_epoch=6)
    replicas, after = reassignment_progress(moving, state, {1, 2, 3, 4, 5})
    assert replicas == (3, 4, 5)
    assert after == PartitionState(leader=3, leader_epoch=3, isr=(3, 4, 5), partition_epoch=7)


def test_a_half_written_completion_completes_again_without_a_state_change() -> None:
    # the controller wrote the new state, then died before writing the replicas
    moving = start_reassignment((1, 2, 3), (3, 4, 5), live={1, 2, 3, 4, 5})
    state = PartitionState(leader=1, leader_epoch=2, isr=(1, 2, 3, 4, 5), partition_epoch=6)
    replicas, written = reassignment_progress(moving, state, {1, 2, 3, 4, 5})
    assert written is not None
    assert reassignment_progress(moving, written, {1, 2, 3, 4, 5}) == (replicas, None)


def test_completed_reassignment_keeps_a_leader_that_stays() -> None:
    moving = start_reassignment((1, 2), (1, 3), live={1, 2, 3})
    state = PartitionState(leader=1, leader_epoch=2, isr=(1, 2, 3), partition_epoch=6)
    assert reassignment_progress(moving, state, {1, 2, 3}) == (
        (1, 3),
        PartitionState(1, 2, (1, 3), 7),
    )


def test_a_reassignment_does_not_complete_into_an_empty_isr() -> None:
    only_removing = Reassignment(replicas=(3, 1, 2), adding=(), removing=(1, 2))
    state = PartitionState(leader=1, leader_epoch=2, isr=(1, 2), partition_epoch=6)
    assert reassignment_progress(only_removing, state, {1, 2, 3}) == (None, None)


def test_no_reassignment_means_no_progress() -> None:
    state = PartitionState(leader=1, leader_epoch=0, isr=(1, 2), partition_epoch=0)
    still = Reassignment(replicas=(1, 2), adding=(), removing=())
    assert reassignment_progress(still, state, {1, 2}) == (None, None)


def test_cancelling_restores_the_original_replicas_and_drops_adding_ones_from_the_isr() -> None:
    moving = start_reassignment((1, 2, 3), (3, 4, 5), live={1, 2, 3, 4, 5})
    state = PartitionState(leader=4, leader_epoch=2, isr=(4, 1, 3), partition_epoch=6)
    replicas, after = cancel_reassignment(moving, state, {1, 2, 3, 4, 5}, unclean=False)
    assert replicas == (3, 1, 2)
    assert after == PartitionState(leader=3, leader_epoch=3, isr=(1, 3), partition_epoch=7)


def test_cancelling_when_only_adding_replicas_are_in_sync_needs_unclean_election() -> None:
    moving = start_reassignment((1, 2), (3, 4), live={1, 2, 3, 4})
    state = PartitionState(leader=3, leader_epoch=2, isr=(3, 4), partition_epoch=6)
    with pytest.raises(InvalidReplicaAssignment, match="unclean leader election"):
        cancel_reassignment(moving, state, {1, 2, 3, 4}, unclean=False)
    replicas, after = cancel_reassignment(moving, state, {1, 2, 3, 4}, unclean=True)
    assert replicas == (1, 2)
    assert after == PartitionState(leader=1, leader_epoch=3, isr=(1,), partition_epoch=7)


@PROPERTY_SETTINGS
@given(
    st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True),
    st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True),
)
def test_reassignment_sets_are_consistent_and_cancel_restores_the_original(
    current: list[int], target: list[int]
) -> None:
    moving = start_reassignment(current, target, live=set(range(7)))
    assert set(moving.replicas) == set(current) | set(target)
    assert set(moving.adding) == set(target) - set(current)
    assert set(moving.removing) == set(current) - set(target)
    assert moving.target == tuple(target)
    original = tuple(b for b in moving.replicas if b not in moving.adding)
    assert set(original) == set(current)
    # everything caught up: completing yields exactly the target
    state = PartitionState(current[0], 0, tuple(moving.replicas), 0)
    replicas, after = reassignment_progress(moving, state, set(range(7)))
    if moving.adding or moving.removing:
        assert replicas == tuple(target)
        now = state if after is None else after  # None: the partition state stays as is
        assert set(now.isr) == set(target)
        assert now.leader in target
    else:
        assert (replicas, after) == (None, None)
    assert moving.replicas[: len(target)] == tuple(target)
