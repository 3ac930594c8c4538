"""The group client under faults, without a broker: a scripted coordinator connection.

Each test drives ``ConsumerCoordinator.poll`` (as ``Consumer.poll`` does) against a fake
coordinator connection whose answers the test scripts, and checks what the client sends
next: a listener that raises, a SyncGroup error that arrives after the heartbeat thread
reset the generation, a commit fenced after the generation moved on, the commit before a
rebalance that keeps failing, and a pattern member given a topic it had not seen yet.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest

from odradek.client import CommitFailedError, RebalanceInProgressCommitError
from odradek.client.cluster import ClusterMetadata, TopicMetadata
from odradek.client.config import ConsumerConfig
from odradek.client.connection import ConnectionState
from odradek.client.coordinator import ConsumerCoordinator, MemberState
from odradek.client.errors import CorruptRecordError, FencedInstanceIdError, KafkaError
from odradek.client.fetcher import CompletedFetch, Fetcher
from odradek.client.listener import ConsumerRebalanceListener
from odradek.client.structs import Generation, PartitionMetadata, TopicPartition
from odradek.client.subscription import SubscriptionState
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.consumer_protocol import Assignment, Subscription
from odradek.protocol.records import build_batch

pytestmark = pytest.mark.timeout(60)

TOPIC = "t"
PARTS = [TopicPartition(TOPIC, p) for p in range(4)]
MEMBER = "m-1"
LEADER = "leader-0"  # another member leads: this one is a follower

Answer = Callable[[int, dict[str, Any]], Any]


class FakeCoordinatorConn:
    """Records every request; ``answer(api_key, body)`` gives the response (None: pending)."""

    def __init__(self, answer: Answer) -> None:
        self.state = ConnectionState.READY
        self.answer = answer
        self.sent: list[tuple[float, int, dict[str, Any], Future[Any]]] = []

    def api_version(self, api_key: int) -> int:
        return {
            ApiKey.JOIN_GROUP: 7,
            ApiKey.SYNC_GROUP: 5,
            ApiKey.HEARTBEAT: 4,
            ApiKey.OFFSET_COMMIT: 8,
            ApiKey.OFFSET_FETCH: 7,
            ApiKey.LEAVE_GROUP: 4,
        }[api_key]

    def send(self, api_key: int, body: dict[str, Any], *, timeout_ms: int | None = None):
        future: Future[Any] = Future()
        self.sent.append((time.monotonic(), int(api_key), body, future))
        response = self.answer(int(api_key), body)
        if response is not None:
            future.set_result(response)
        return future

    def requests(self, api_key: int) -> list[dict[str, Any]]:
        return [body for _, key, body, _ in self.sent if key == api_key]

    def disconnect(self, reason: str = "") -> None:
        self.state = ConnectionState.CLOSED

    def close(self) -> None:
        self.state = ConnectionState.CLOSED


def cluster_with(topics: dict[str, int]) -> ClusterMetadata:
    return ClusterMetadata(
        topics={
            name: TopicMetadata(
                name,
                0,
                False,
                {p: PartitionMetadata(name, p, 0, 0, (0,), (0,)) for p in range(n)},
            )
            for name, n in topics.items()
        },
        updated_at=time.monotonic(),
    )


class FakeClient:
    """The metadata side of ``KafkaClient``: a cluster snapshot the test replaces."""

    def __init__(self, cluster: ClusterMetadata) -> None:
        self.cluster = cluster
        self.refreshes = 0

    def refresh(self, topics: Any = None, *, all_topics: bool = False, timeout_s: Any = None):
        self.refreshes += 1
        return self.cluster

    def add_topics(self, topics: Any) -> None:
        pass

    def metadata_age_s(self) -> float:
        return time.monotonic() - self.cluster.updated_at

    def request_update(self) -> None:
        pass


def join_ok(generation: int, member_id: str = MEMBER, leader: str = LEADER) -> SimpleNamespace:
    return SimpleNamespace(
        error_code=0,
        generation_id=generation,
        protocol_type="consumer",
        protocol_name="range",
        leader=leader,
        member_id=member_id,
        skip_assignment=False,
        members=[],
    )


def sync_ok(partitions: list[TopicPartition]) -> SimpleNamespace:
    blob = Assignment.of([(tp.topic, tp.partition) for tp in partitions]).encode()
    return SimpleNamespace(
        error_code=0, protocol_type="consumer", protocol_name="range", assignment=blob
    )


def commit_reply(body: dict[str, Any], code: int) -> SimpleNamespace:
    return SimpleNamespace(
        topics=[
            SimpleNamespace(
                name=t["name"],
                partitions=[
                    SimpleNamespace(partition_index=p["partition_index"], error_code=code)
                    for p in t["partitions"]
                ],
            )
            for t in body["topics"]
        ]
    )


class Group:
    """A one-member view of a group: joins answer generation 1, 2, ...; syncs give ``owned``."""

    def __init__(self, owned: list[TopicPartition]) -> None:
        self.owned = owned
        self.generation = 0
        self.commit_code: Callable[[], int] = lambda: 0

    def __call__(self, api_key: int, body: dict[str, Any]) -> Any:
        if api_key == ApiKey.JOIN_GROUP:
            self.generation += 1
            return join_ok(self.generation)
        if api_key == ApiKey.SYNC_GROUP:
            return sync_ok(self.owned)
        if api_key == ApiKey.OFFSET_COMMIT:
            return commit_reply(body, self.commit_code())
        if api_key == ApiKey.HEARTBEAT:
            return SimpleNamespace(error_code=0)
        return None


def make_coordinator(
    answer: Answer,
    *,
    listener: Any = None,
    pattern: str | None = None,
    cluster: ClusterMetadata | None = None,
    **settings: Any,
) -> tuple[ConsumerCoordinator, FakeCoordinatorConn]:
    config = ConsumerConfig.from_settings(
        {"enable_auto_commit": False, "partition_assignment_strategy": ["range"]} | settings,
        bootstrap_servers="127.0.0.1:1",
        group_id="g",
    )
    subs = SubscriptionState("earliest")
    if pattern is None:
        subs.subscribe([TOPIC], listener)
    else:
        subs.subscribe_pattern(re.compile(pattern), listener)
    client = FakeClient(cluster or cluster_with({TOPIC: len(PARTS)}))
    coordinator = ConsumerCoordinator(client, subs, config)  # type: ignore[arg-type]
    conn = FakeCoordinatorConn(answer)
    coordinator.discovery._conn = conn  # type: ignore[assignment]
    return coordinator, conn


def poll_until(c: ConsumerCoordinator, done: Callable[[], bool], timeout_s: float = 10.0) -> None:
    """Call ``poll`` as ``Consumer.poll`` does, until ``done()`` (bounded)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "timed out polling the coordinator"
        c.poll(0.05)


class RecordingListener(ConsumerRebalanceListener):
    def __init__(self, fail_assigned_times: int = 0) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []
        self.fail_assigned_times = fail_assigned_times

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", frozenset(revoked)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", frozenset(assigned)))
        if self.fail_assigned_times > 0:
            self.fail_assigned_times -= 1
            raise RuntimeError("listener failed on purpose")

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(("lost", frozenset(lost)))


# ------------------------------------------------------------------ a listener that raises


def test_listener_raising_on_assign_does_not_break_the_next_rebalance() -> None:
    """Java: the exception reaches poll; the next poll finishes the completed join, so the
    next rebalance still commits first and revokes what the member owns."""
    group = Group(PARTS)
    listener = RecordingListener(fail_assigned_times=1)
    c, conn = make_coordinator(
        group, listener=listener, enable_auto_commit=True, auto_commit_interval_ms=600_000
    )
    try:
        with pytest.raises(KafkaError, match="listener failed on purpose"):
            poll_until(c, lambda: False)
        assert c.subscriptions.assigned_partitions() == set(PARTS)
        c.poll(0.05)  # finishes the join the listener interrupted
        assert listener.events == [("assigned", frozenset(PARTS)), ("assigned", frozenset())]
        assert c.state is MemberState.STABLE and not c.rejoin_needed_or_pending()
        for tp in PARTS:
            c.subscriptions.seek(tp, 7)

        # The next rebalance: commit the positions, revoke everything (EAGER), rejoin.
        group.owned = PARTS[:2]
        c.request_rejoin("a member joined")
        poll_until(c, lambda: len(conn.requests(ApiKey.JOIN_GROUP)) == 2)
        kinds = [key for _, key, _, _ in conn.sent if key != ApiKey.HEARTBEAT]
        second_join = len(kinds) - 1 - kinds[::-1].index(ApiKey.JOIN_GROUP)
        assert ApiKey.OFFSET_COMMIT in kinds[:second_join], "no commit before the rebalance"
        committed = conn.requests(ApiKey.OFFSET_COMMIT)[-1]
        assert {
            (t["name"], p["partition_index"], p["committed_offset"])
            for t in committed["topics"]
            for p in t["partitions"]
        } == {(TOPIC, p, 7) for p in range(4)}
        poll_until(c, lambda: c.state is MemberState.STABLE and not c.rejoin_needed_or_pending())
        assert listener.events[2:] == [
            ("revoked", frozenset(PARTS)),
            ("assigned", frozenset(PARTS[:2])),
        ]
        assert c.subscriptions.assigned_partitions() == set(PARTS[:2])
    finally:
        c.abandon()


# ------------------------------------------------------------------ generation checks


def test_sync_error_after_the_heartbeat_thread_reset_keeps_the_member_id() -> None:
    """The SyncGroup handler compares with the generation the SyncGroup was sent with: an
    UNKNOWN_MEMBER_ID for an older generation does not wipe the member id again."""
    pending_sync: list[Future[Any]] = []

    def answer(api_key: int, body: dict[str, Any]) -> Any:
        if api_key == ApiKey.JOIN_GROUP:
            return join_ok(1)
        return None  # SyncGroup stays pending, heartbeats unanswered

    c, conn = make_coordinator(answer)
    try:
        poll_until(c, lambda: bool(conn.requests(ApiKey.SYNC_GROUP)))
        pending_sync.append(conn.sent[-1][3])
        # The heartbeat thread got ILLEGAL_GENERATION meanwhile: the member id stays.
        c._reset_state_and_rejoin("heartbeat: ILLEGAL_GENERATION", reset_member_id=False)
        assert c.generation == Generation(-1, MEMBER, None)
        # The SyncGroup of generation 1 now fails with UNKNOWN_MEMBER_ID.
        pending_sync[0].set_result(SimpleNamespace(error_code=25))
        poll_until(c, lambda: len(conn.requests(ApiKey.JOIN_GROUP)) == 2)
        assert conn.requests(ApiKey.JOIN_GROUP)[-1]["member_id"] == MEMBER
    finally:
        c.abandon()


@pytest.mark.parametrize(
    ("now_generation", "now_state", "expected"),
    [
        (Generation(3, MEMBER, "range"), MemberState.STABLE, FencedInstanceIdError),
        (Generation(4, MEMBER, "range"), MemberState.PREPARING_REBALANCE, None),
        (Generation(4, MEMBER, "range"), MemberState.STABLE, CommitFailedError),
    ],
)
def test_commit_fenced_instance_id_depends_on_the_generation_it_was_sent_with(
    now_generation: Generation, now_state: MemberState, expected: type[BaseException] | None
) -> None:
    """Java's OffsetCommit handler: FENCED_INSTANCE_ID is fatal only while the generation is
    the one the commit carried; after a rebalance it means "commit again" or "kicked out"."""
    c, _ = make_coordinator(lambda k, b: None, group_instance_id="static-1")
    sent = Generation(3, MEMBER, "range")
    c.generation, c.state = now_generation, now_state
    body = {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]}
    reply: Future[Any] = Future()
    reply.set_result(commit_reply(body, 82))
    error = c.commits.commit_result(reply, sent)
    if expected is None:
        assert isinstance(error, RebalanceInProgressCommitError)
    else:
        assert type(error) is expected


def test_rebalance_in_progress_commit_error_is_its_own_retriable_type() -> None:
    assert not issubclass(RebalanceInProgressCommitError, CommitFailedError)
    assert RebalanceInProgressCommitError.retriable
    c, conn = make_coordinator(Group(PARTS))
    try:
        poll_until(c, lambda: c.state is MemberState.STABLE)
        # The broker says the group is rebalancing: its own error, raised at once by
        # commit_sync (only a poll can finish the rebalance), and the member rejoins.
        conn.answer = lambda k, b: commit_reply(b, 27) if k == ApiKey.OFFSET_COMMIT else None
        started = time.monotonic()
        with pytest.raises(RebalanceInProgressCommitError):
            c.commits.commit_sync({PARTS[0]: 3}, timeout_s=20)
        assert time.monotonic() - started < 5
        assert c.rejoin_needed
        results: list[BaseException | None] = []
        c.commits.commit_async({PARTS[0]: 3}, lambda offsets, error: results.append(error))
        c.commits.invoke_completed_callbacks()
        assert len(results) == 1 and isinstance(results[0], RebalanceInProgressCommitError)
    finally:
        c.abandon()


# ------------------------------------------------------------------ commit before a rebalance


def stable_member_with_positions(
    group: Group, **settings: Any
) -> tuple[ConsumerCoordinator, FakeCoordinatorConn]:
    c, conn = make_coordinator(group, enable_auto_commit=True, **settings)
    poll_until(c, lambda: c.state is MemberState.STABLE and not c.rejoin_needed_or_pending())
    for tp in group.owned:
        c.subscriptions.seek(tp, 11)
    return c, conn


def test_commit_before_rebalance_is_retried_past_the_request_timeout() -> None:
    """Java's onJoinPrepare keeps retrying the auto-commit until the rebalance timeout
    (max_poll_interval_ms), not only for one request timeout."""
    group = Group(PARTS)
    c, conn = stable_member_with_positions(
        group,
        auto_commit_interval_ms=600_000,
        request_timeout_ms=500,
        max_poll_interval_ms=4_000,
        retry_backoff_ms=50,
    )
    try:
        failing_until = time.monotonic() + 1.5  # three request timeouts
        group.commit_code = lambda: 14 if time.monotonic() < failing_until else 0
        c.request_rejoin("test")
        poll_until(c, lambda: len(conn.requests(ApiKey.JOIN_GROUP)) == 2)
        join_at = max(t for t, key, _, _ in conn.sent if key == ApiKey.JOIN_GROUP)
        commits_at = [t for t, key, _, _ in conn.sent if key == ApiKey.OFFSET_COMMIT]
        assert commits_at and max(commits_at) < join_at
        assert max(commits_at) >= failing_until, "joined before the commit could succeed"
        ok = [f for _, key, _, f in conn.sent if key == ApiKey.OFFSET_COMMIT and f.done()]
        last = ok[-1].result()
        assert last.topics[0].partitions[0].error_code == 0
    finally:
        c.abandon()


def test_commit_before_rebalance_gives_up_at_the_rebalance_timeout() -> None:
    group = Group(PARTS)
    c, conn = stable_member_with_positions(
        group,
        auto_commit_interval_ms=600_000,
        request_timeout_ms=500,
        max_poll_interval_ms=1_500,
        retry_backoff_ms=50,
    )
    try:
        group.commit_code = lambda: 14  # COORDINATOR_LOAD_IN_PROGRESS, forever
        started = time.monotonic()
        c.request_rejoin("test")
        poll_until(c, lambda: len(conn.requests(ApiKey.JOIN_GROUP)) == 2)
        waited = time.monotonic() - started
        assert 1.4 <= waited < 8, waited
        assert len(conn.requests(ApiKey.OFFSET_COMMIT)) >= 3
    finally:
        c.abandon()


# ------------------------------------------------------------------ pattern subscriptions


def test_pattern_member_absorbs_topics_the_leader_assigned() -> None:
    """Java's maybeUpdateJoinedSubscription: a topic the leader assigned (it matches the
    pattern, this member's metadata did not show it yet) joins the subscription, so when
    the member's metadata catches up it does not force another group-wide rebalance."""
    old, new = "pat-a", "pat-b"
    got = [TopicPartition(old, 0), TopicPartition(new, 1)]

    def answer(api_key: int, body: dict[str, Any]) -> Any:
        if api_key == ApiKey.JOIN_GROUP:
            return join_ok(1)
        if api_key == ApiKey.SYNC_GROUP:
            return sync_ok(got)
        return SimpleNamespace(error_code=0) if api_key == ApiKey.HEARTBEAT else None

    c, conn = make_coordinator(answer, pattern=r"pat-.*", cluster=cluster_with({old: 2}))
    try:
        c._maybe_update_subscription_metadata()
        assert c.subscriptions.subscription == {old}
        poll_until(c, lambda: c.state is MemberState.STABLE and not c.rejoin_needed_or_pending())
        assert conn.requests(ApiKey.JOIN_GROUP)[0]["protocols"]  # joined with {pat-a}
        assert c.subscriptions.assigned_partitions() == set(got)
        assert c.subscriptions.subscription == {old, new}
        # This member's metadata now shows pat-b too.
        c.client.cluster = cluster_with({old: 2, new: 2})
        c._maybe_update_subscription_metadata()
        assert not c.rejoin_needed_or_pending()
        c.poll(0.05)
        assert len(conn.requests(ApiKey.JOIN_GROUP)) == 1
    finally:
        c.abandon()


def test_pattern_matched_while_the_join_is_in_flight_rejoins_after_it() -> None:
    """The pattern matches its first topic just after the JoinGroup went out (with no
    topics): that join's SyncGroup must not swallow the change. The member rejoins with
    the topic, as Java's rejoinNeededOrPending does; before, it stayed in a generation
    with no partitions for good (seen against tansu under load)."""
    topic = "pat-a"
    joins: list[Future[Any]] = []

    def answer(api_key: int, body: dict[str, Any]) -> Any:
        if api_key == ApiKey.JOIN_GROUP:
            if not joins:
                joins.append(Future())  # the first join is held until the test answers
                return None
            return join_ok(2)
        if api_key == ApiKey.SYNC_GROUP:
            return sync_ok([])  # the leader saw no topic this member subscribes to
        return SimpleNamespace(error_code=0) if api_key == ApiKey.HEARTBEAT else None

    c, conn = make_coordinator(answer, pattern=r"pat-.*", cluster=cluster_with({}))
    try:
        poll_until(c, lambda: len(conn.requests(ApiKey.JOIN_GROUP)) == 1)
        first = conn.requests(ApiKey.JOIN_GROUP)[0]
        assert topic.encode() not in bytes(first["protocols"][0]["metadata"])
        # The metadata shows the topic now; the held join answers generation 1.
        c.client.cluster = cluster_with({topic: 2})
        c._maybe_update_subscription_metadata()
        assert c.subscriptions.subscription == {topic}
        held = next(f for _, key, _, f in conn.sent if key == ApiKey.JOIN_GROUP)
        held.set_result(join_ok(1))
        poll_until(c, lambda: len(conn.requests(ApiKey.JOIN_GROUP)) == 2)
        second = conn.requests(ApiKey.JOIN_GROUP)[1]
        assert topic.encode() in bytes(second["protocols"][0]["metadata"])
        poll_until(c, lambda: c.state is MemberState.STABLE and not c.rejoin_needed_or_pending())
        assert len(conn.requests(ApiKey.JOIN_GROUP)) == 2  # and no third
    finally:
        c.abandon()


def test_eager_commit_before_rebalance_stops_fetching_and_never_blocks_poll() -> None:
    """While the commit before an EAGER rebalance is in flight, ``poll`` returns at once
    (no JoinGroup yet) and the partitions are pending revocation: not fetchable, so the
    committed positions stay the last ones handed out. Its answer lets the join go on."""
    group = Group(PARTS)
    c, conn = stable_member_with_positions(group, auto_commit_interval_ms=600_000)
    held: list[Future[Any]] = []
    try:
        answer = conn.answer

        def hold_commits(api_key: int, body: dict[str, Any]) -> Any:
            return None if api_key == ApiKey.OFFSET_COMMIT else answer(api_key, body)

        conn.answer = hold_commits
        c.request_rejoin("test")
        started = time.monotonic()
        assert c.poll(1.0) is False
        assert time.monotonic() - started < 0.5, "poll waited for the commit"
        assert len(conn.requests(ApiKey.JOIN_GROUP)) == 1  # only the first join
        assert c.subscriptions.assigned_partitions() == set(PARTS)
        assert not any(c.subscriptions.is_fetchable(tp) for tp in PARTS)
        assert c.awaiting_response()
        held = [f for _, key, _, f in conn.sent if key == ApiKey.OFFSET_COMMIT]
        body = conn.requests(ApiKey.OFFSET_COMMIT)[-1]
        held[-1].set_result(commit_reply(body, 0))
        poll_until(c, lambda: len(conn.requests(ApiKey.JOIN_GROUP)) == 2)
        assert len(conn.requests(ApiKey.OFFSET_COMMIT)) == 1
    finally:
        c.abandon()


def test_no_busy_loop_while_a_rebalance_step_is_awaited() -> None:
    """An auto-commit timer that expired during the rebalance (no auto-commit runs until it
    is done) must not make ``time_to_next_poll`` zero: the consumer would spin."""
    group = Group(PARTS)
    c, conn = stable_member_with_positions(group, auto_commit_interval_ms=50)
    try:
        answer = conn.answer
        conn.answer = lambda k, b: None if k == ApiKey.JOIN_GROUP else answer(k, b)
        c.request_rejoin("test")
        poll_until(c, lambda: len(conn.requests(ApiKey.JOIN_GROUP)) == 2)
        time.sleep(0.1)  # the auto-commit interval passes while the JoinGroup is parked
        assert c.awaiting_response()
        assert c.time_to_next_poll() > 1.0
    finally:
        c.abandon()


def test_leader_refreshes_metadata_only_when_it_lacks_a_topic() -> None:
    """Java's ensureFreshMetadata: fresh metadata that has every subscribed topic is used as
    it is (a refresh can wait behind a fetch long-poll and delays the whole group)."""
    other = "t-other"

    def answer(api_key: int, body: dict[str, Any]) -> Any:
        if api_key == ApiKey.JOIN_GROUP:
            members = [
                SimpleNamespace(
                    member_id=m, group_instance_id=None, metadata=Subscription.of(t).encode()
                )
                for m, t in ((MEMBER, [TOPIC]), ("m-2", [TOPIC, other]))
            ]
            return SimpleNamespace(**{**vars(join_ok(1, leader=MEMBER)), "members": members})
        if api_key == ApiKey.SYNC_GROUP:
            mine = next(a for a in body["assignments"] if a["member_id"] == MEMBER)
            return SimpleNamespace(
                error_code=0,
                protocol_type="consumer",
                protocol_name="range",
                assignment=mine["assignment"],
            )
        return SimpleNamespace(error_code=0) if api_key == ApiKey.HEARTBEAT else None

    c, _ = make_coordinator(answer, cluster=cluster_with({TOPIC: 4, other: 2}))
    try:
        poll_until(c, lambda: c.state is MemberState.STABLE and not c.rejoin_needed_or_pending())
        assert c.client.refreshes == 0
        assert c.subscriptions.assigned_partitions()  # range gave the leader some of t
        # A member subscribes to a topic this leader's metadata does not have: refresh.
        c.client.cluster = cluster_with({TOPIC: 4})
        c.request_rejoin("test")
        poll_until(c, lambda: c.state is MemberState.STABLE and not c.rejoin_needed_or_pending())
        assert c.client.refreshes == 1
    finally:
        c.abandon()


def test_fetched_data_of_partitions_pending_revocation_is_dropped_undecoded() -> None:
    """Buffered fetches of partitions an EAGER member is about to revoke are dropped as
    they are: decoding a large fetch only to drop it stalls ``poll`` mid-rebalance."""
    subs = SubscriptionState("earliest")
    subs.subscribe([TOPIC])
    subs.assign_from_subscribed(PARTS[:2])
    for tp in PARTS[:2]:
        subs.seek(tp, 0)
    config = ConsumerConfig.from_settings(bootstrap_servers="127.0.0.1:1", group_id="g")
    fetcher = Fetcher(SimpleNamespace(), subs, config)  # type: ignore[arg-type]
    batch = bytearray(build_batch([(b"k", b"v", ())] * 3, timestamp_ms=1))
    batch[-1] ^= 0xFF  # a bad CRC: decoding it would raise
    for tp in PARTS[:2]:
        fetcher._completed.append(CompletedFetch(tp, 0, 0, 3, 0, 3, bytes(batch)))
    subs.mark_pending_revocation([PARTS[0]])
    assert not subs.is_fetchable(PARTS[0]) and subs.is_fetchable(PARTS[1])
    with pytest.raises(CorruptRecordError):  # the other partition is decoded as usual
        fetcher.fetched_records(10)
    assert fetcher.fetched_records(10) == {}
    assert subs.position(PARTS[0]) == 0
