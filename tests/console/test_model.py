"""The console's model fed with real ``__consumer_offsets`` records (Kafka's formats and
Odradek's group events), its listing at 20,000 groups, and the rebalance spans, causes
and swimlanes it derives."""

from __future__ import annotations

import time
from types import SimpleNamespace

from odradek.console import rebalances as rb
from odradek.console.model import Model
from odradek.console.views import group_view, groups_view, rebalances_view
from odradek.coordinator.events import make_event
from odradek.coordinator.history import event_record
from odradek.coordinator.records import (
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitValue,
    group_metadata_record,
    offset_commit_record,
    offset_tombstone,
)
from odradek.protocol.consumer_protocol import Assignment, encode_assignment, group_by_topic

T0 = 1_800_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0 / 1000

    def __call__(self) -> float:
        return self.now


def member(mid: str, *partitions: int) -> MemberMetadataValue:
    blob = encode_assignment(Assignment(group_by_topic([("orders", p) for p in partitions])))
    return MemberMetadataValue(mid, None, f"client-{mid}", "/127.0.0.1", 300_000, 10_000, b"", blob)


def metadata(generation: int, *members: MemberMetadataValue) -> GroupMetadataValue:
    leader = members[0].member_id if members else None
    return GroupMetadataValue("consumer", generation, "range", leader, T0, tuple(members))


def feed(model: Model, record, at_ms: int) -> None:
    model.apply_record(record.key, record.value, at_ms)


def test_commits_and_log_ends_make_lag_and_a_verdict() -> None:
    clock = Clock()
    model = Model(clock)
    model.apply_log_ends({("orders", 0): 100, ("orders", 1): 50})
    for i, offset in enumerate((10, 20, 30)):
        clock.now = (T0 + i * 5_000) / 1000
        value = OffsetCommitValue(offset, -1, "", T0 + i * 5_000)
        feed(model, offset_commit_record("g", "orders", 0, value), T0 + i * 5_000)
    feed(model, offset_commit_record("g", "orders", 1, OffsetCommitValue(50, -1, "", T0)), T0)
    model.evaluate()
    g = model.group("g")
    assert g is not None and g.lag == 70
    # offsets move but lag never shrinks (90, 80, 70 shrinks): OK; partition 1 has no lag
    assert g.verdict is not None and g.verdict.label == "OK"
    view = group_view(model, g)
    assert [(r["topic"], r["partition"], r["lag"]) for r in view["partitions"]] == [
        ("orders", 0, 70),
        ("orders", 1, 0),
    ]
    # A deleted offset goes away with its lag.
    feed(model, offset_tombstone("g", "orders", 0), T0 + 20_000)
    assert model.group("g").lag == 0


def test_a_silent_consumer_turns_stopped_with_time_alone() -> None:
    clock = Clock()
    model = Model(clock)
    model.apply_log_ends({("orders", 0): 1_000})
    for i in range(3):
        at = T0 + i * 10_000
        clock.now = at / 1000
        model.apply_log_ends({("orders", 0): 1_000 + i * 100})
        feed(
            model, offset_commit_record("g", "orders", 0, OffsetCommitValue(i * 10, -1, "", at)), at
        )
    model.evaluate()
    assert model.group("g").verdict.label == "WARNING"  # moving, lag only grows
    clock.now = (T0 + 60_000) / 1000  # 40 s of silence after a window of 20 s
    model.evaluate()
    assert model.group("g").verdict.label == "ERROR (STOPPED)"


def test_a_new_log_end_moves_lag_at_once_and_the_verdict_where_lag_leaves_zero() -> None:
    clock = Clock()
    model = Model(clock)
    model.apply_log_ends({("orders", 0): 30})
    for i, offset in enumerate((10, 20, 30)):
        at = T0 + i * 5_000
        clock.now = at / 1000
        value = OffsetCommitValue(offset, -1, "", at)
        feed(model, offset_commit_record("g", "orders", 0, value), at)
    model.evaluate()
    g = model.group("g")
    assert (g.lag, g.verdict.label) == (0, "OK")
    # The log grows past the last commit: the lag is no longer 0, so it is judged again.
    model.apply_log_ends({("orders", 0): 50})
    assert g.lag == 20 and g.partition_lags[("orders", 0)] == 20
    judged = g.partition_verdicts[("orders", 0)]
    # It grows again: the lag follows at once, the verdict waits for the next evaluate.
    model.apply_log_ends({("orders", 0): 80})
    assert g.lag == 50
    assert g.partition_verdicts[("orders", 0)] is judged
    model.evaluate()
    assert g.partition_verdicts[("orders", 0)] is not judged


def test_group_metadata_records_give_members_generations_and_ownership() -> None:
    model = Model(Clock())
    feed(model, group_metadata_record("g", metadata(1, member("a", 0, 1, 2, 3))), T0)
    feed(
        model,
        group_metadata_record("g", metadata(2, member("a", 0, 1), member("b", 2, 3))),
        T0 + 5_000,
    )
    g = model.group("g")
    assert g.generation == 2 and g.member_count == 2 and g.state == "Stable"
    assert g.members["b"].client_id == "client-b"
    assert g.members["b"].assignment == (("orders", 2), ("orders", 3))
    # Inferred (no events): one rebalance between the two generations, "b" joined.
    view = rebalances_view(model, g)
    assert view["source"] == "inferred"
    [span] = view["rebalances"]
    assert span["generation"] == 2 and span["joined"] == ["b"] and span["kept"] == ["a"]
    assert span["causes"] == ["join"] and not span["start_known"]
    assert {lane["member"] for lane in view["lanes"]} == {"a", "b"}


def odradek_events(model: Model) -> None:
    """What Odradek's coordinator records for: a, b join; c joins late; b is killed."""
    events = [
        ("state_transition", 0, dict(from_state="Empty", to_state="PreparingRebalance",
                                     generation=0, members=["a"], leader=None,
                                     reason="adding new member a (client reason: initial join)")),
        ("state_transition", 3000, dict(from_state="PreparingRebalance",
                                        to_state="CompletingRebalance", generation=1,
                                        members=["a", "b"], leader="a", reason="join phase")),
        ("rebalance_completed", 3100, dict(generation=1, state="Stable", duration_ms=3100,
                                           joined=["a", "b"], left=[], kept=[],
                                           reasons=["adding new member a"])),
        ("rebalance_completed", 9000, dict(generation=2, state="Stable", duration_ms=1000,
                                           joined=["c"], left=[], kept=["a", "b"],
                                           reasons=["adding new member c"])),
        ("member_removed", 20000, dict(member_id="b", reason="member b session timed out")),
        ("rebalance_completed", 21000, dict(generation=3, state="Stable", duration_ms=1000,
                                            joined=[], left=["b"], kept=["a", "c"],
                                            reasons=["member b session timed out"])),
    ]  # fmt: skip
    for seq, (kind, dt, fields) in enumerate(events):
        feed(model, event_record("g", seq, make_event(kind, "g", T0 + dt, **fields)), T0 + dt)


def test_odradek_events_give_the_rebalances_with_their_causes() -> None:
    model = Model(Clock())
    odradek_events(model)
    view = rebalances_view(model, model.group("g"))
    assert view["source"] == "events" and model.events_seen
    assert [(r["generation"], r["causes"]) for r in view["rebalances"]] == [
        (1, ["join"]),
        (2, ["join"]),
        (3, ["session timeout"]),
    ]
    assert view["rebalances"][2]["left"] == ["b"]


def test_causes_in_coordinators_and_clients_words() -> None:
    cases = {
        "adding new member x (client reason: initial join)": rb.JOIN,
        "member x left the group (client reason: the consumer is being closed)": rb.LEAVE,
        "member x session timed out": rb.SESSION_TIMEOUT,
        "member x removed: the member session expired": rb.SESSION_TIMEOUT,
        "x left the group (client reason: consumer poll timeout has expired.)": rb.POLL_TIMEOUT,
        "static member i-1 rejoined as x": rb.STATIC_REPLACED,
        "member x changed its protocols": rb.METADATA_CHANGE,
        "member x changed its subscription": rb.METADATA_CHANGE,
        "members a, b did not sync before the rebalance timeout": rb.REBALANCE_TIMEOUT,
        "new group": rb.JOIN,
    }
    assert {reason: rb.cause_of(reason) for reason in cases} == cases


def test_swimlanes_cut_what_an_eager_rebalance_stopped() -> None:
    changes = [
        rb.Ownership(0, "a", (("t", 0), ("t", 1))),
        rb.Ownership(10_000, "a", (("t", 0),)),
        rb.Ownership(10_000, "b", (("t", 1),)),
    ]
    span = rb.Span(2, 2, 8_000, 10_000, joined=["b"], kept=["a"], causes=["join"])
    [a, b] = rb.lanes(changes, [span], eager=True, now_ms=20_000)
    assert [(s.start_ms, s.end_ms, s.stopped) for s in a.segments] == [
        (0, 8_000, False),
        (8_000, 10_000, True),
        (10_000, 20_000, False),
    ]
    assert [(s.start_ms, s.stopped) for s in b.segments] == [(10_000, False)]
    assert rb.stopped_partitions(changes, span, eager=True) == [("t", 0), ("t", 1)]
    # Cooperative: only the partition that moved stopped.
    assert rb.stopped_partitions(changes, span, eager=False) == [("t", 1)]
    [a_coop, _] = rb.lanes(changes, [span], eager=False, now_ms=20_000)
    stopped = [s for s in a_coop.segments if s.stopped]
    assert [(s.partitions, s.start_ms, s.end_ms) for s in stopped] == [((("t", 1),), 8_000, 10_000)]


def test_inferred_rebalances_from_polled_states() -> None:
    obs = [
        rb.Observation(0, "Stable", None, frozenset({"a"})),
        rb.Observation(5_000, "PreparingRebalance", None, None),
        rb.Observation(6_000, "CompletingRebalance", None, None),
        rb.Observation(7_000, "Stable", None, frozenset({"a", "b"})),
        rb.Observation(20_000, "PreparingRebalance", None, None),
    ]
    [done, running] = rb.infer(obs)
    assert (done.started_ms, done.completed_ms, done.joined, done.causes) == (
        5_000,
        7_000,
        ["b"],
        ["join"],
    )
    assert done.start_known and running.completed_ms is None


def listing(n: int) -> list[SimpleNamespace]:
    states = ("Stable", "Empty", "PreparingRebalance")
    return [
        SimpleNamespace(
            group_id=f"group-{i:05d}", state=states[i % 3], type="classic",
            coordinator=0, protocol_type="consumer",
        )
        for i in range(n)
    ]  # fmt: skip


def test_twenty_thousand_groups_list_search_sort_and_page() -> None:
    model = Model(Clock())
    started = time.perf_counter()
    model.apply_listing(listing(20_000))
    model.apply_log_ends({("orders", p): 1_000 for p in range(10)})
    for i in range(0, 20_000, 7):
        rec = offset_commit_record(
            f"group-{i:05d}", "orders", i % 10, OffsetCommitValue(i % 1000, -1, "", T0)
        )
        feed(model, rec, T0)
    print(f"model of 20,000 groups built in {time.perf_counter() - started:.2f} s")
    view = groups_view(model, sort="lag", order="desc", page=1, size=50)
    assert view["total"] == 20_000 and view["pages"] == 400
    lags = [g["lag"] for g in view["groups"]]
    assert lags == sorted(lags, reverse=True) and lags[0] == 1_000
    found = groups_view(model, query="group-1999", size=25)
    assert [g["group"] for g in found["groups"]] == [f"group-1999{d}" for d in range(10)]
    last = groups_view(model, sort="group", page=400, size=50)
    assert last["groups"][-1]["group"] == "group-19999"
    # Groups the brokers stop listing, with nothing committed, go away.
    model.apply_listing(listing(10))
    assert model.group_count() == 10 + len(range(0, 20_000, 7)) - len(range(0, 10, 7))
