"""Test context for the coordinator core (after Kafka's GroupMetadataManagerTestContext).

A manual monotonic clock (``time``) with a wall clock that may step away from
it (``step_wall``), a mock timer that fires due timers in deadline order on
``sleep(ms)``, and a log of every record written, replayed into the shard as
the real runtime would.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator import CoordinatorConfig, GroupCoordinatorShard, GroupState
from odradek.coordinator.consumer_group import ConsumerGroup
from odradek.coordinator.consumer_protocol import Subscription, encode_subscription
from odradek.coordinator.events import OFFSETS_EXPIRED, STATE_TRANSITION
from odradek.coordinator.group import ClassicGroup, membership_view
from odradek.coordinator.history import batch_bytes, is_event_key
from odradek.coordinator.metadata import TopicImage, TopicsImage
from odradek.coordinator.types import (
    CoordinatorEvent,
    CoordinatorRecord,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    Request,
    Response,
    Result,
    SyncGroupRequest,
    SyncGroupResponse,
)
from odradek.coordinator.types import OffsetCommitPartition as P

S = GroupState


class ManualTimer:
    """Keyed timer; ``schedule`` replaces. Ties fire in scheduling order."""

    def __init__(self) -> None:
        self.deadlines: dict[str, tuple[int, int]] = {}
        self._seq = 0

    def schedule(self, key: str, deadline_ms: int) -> None:
        self._seq += 1
        self.deadlines[key] = (deadline_ms, self._seq)

    def cancel(self, key: str) -> None:
        self.deadlines.pop(key, None)

    def pop_due(self, now_ms: int) -> tuple[str, int] | None:
        due = [(d, s, k) for k, (d, s) in self.deadlines.items() if d <= now_ms]
        if not due:
            return None
        deadline, _, key = min(due)
        del self.deadlines[key]
        return key, deadline

    def next_due(self, now_ms: int) -> tuple[str, int] | None:
        """The earliest timer due at ``now_ms``, left in place."""
        due = [(d, s, k) for k, (d, s) in self.deadlines.items() if d <= now_ms]
        if not due:
            return None
        deadline, _, key = min(due)
        return key, deadline

    def deadline(self, key: str) -> int | None:
        entry = self.deadlines.get(key)
        return None if entry is None else entry[0]


class SeqIds:
    def __init__(self) -> None:
        self.n = 0

    def new_uuid(self) -> str:
        self.n += 1
        return f"u{self.n}"


def subscription(*topics: str) -> bytes:
    return encode_subscription(Subscription(tuple(topics)))


DEFAULT_PROTOCOLS = (("range", subscription("foo")),)


@dataclass
class Ctx:
    config: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    time: int = 0  # the monotonic clock: every deadline is on it
    wall_offset: int = 0  # wall clock = time + wall_offset; NTP may step it either way

    def __post_init__(self) -> None:
        self.timer = ManualTimer()
        self.ids = SeqIds()
        self.image = TopicsImage()  # the topics consumer groups see (set_topics)
        self.shard = GroupCoordinatorShard(self.config, timer=self.timer, ids=self.ids)
        self.log: list[CoordinatorRecord] = []
        self.responses: dict[int, Response] = {}
        self.events: list[CoordinatorEvent] = []
        self._tokens = 0
        self._requests: dict[int, Request] = {}
        # What clients were told is committed: group -> (topic, partition) -> offset.
        self.acked: dict[str, dict[tuple[str, int], int]] = {}
        self._apply(self.shard.on_loaded(self.time, wall_ms=self.wall))

    @property
    def wall(self) -> int:
        return self.time + self.wall_offset

    def step_wall(self, ms: int) -> None:
        """The wall clock jumps by ``ms`` (negative: backwards); monotonic time does not."""
        self.wall_offset += ms

    # --- driving ----------------------------------------------------------------

    def _apply(self, result: Result) -> Result:
        limit = self.config.max_message_bytes
        state = [r for r in result.records if not is_event_key(r.key)]
        if result.atomic and batch_bytes(state) <= limit:
            # The history never makes a call's batch too large for the runtime to append.
            assert batch_bytes(result.records) <= limit, "events pushed a call over the limit"
        for record in result.records:
            self.log.append(record)
            self.shard.replay(record)
        for token, response in result.responses:
            assert token not in self.responses, f"token {token} answered twice"
            self.responses[token] = response
            self._note_ack(token, response)
        self.events.extend(result.events)
        for event in result.events:
            self._note_event(event)
        return result

    def _run(
        self,
        call: Callable[[], Result],
        token: int | None,
        request: Request | None,
        timer_key: str | None = None,
    ) -> None:
        """Run one core call (a request, or a timer) as the runtime would.

        Subclasses inject faults here.
        """
        self._apply(call())

    def send(self, request: Request) -> int:
        """Send a request; its response may arrive now or later (see ``response``)."""
        self._tokens += 1
        token = self._tokens
        self._requests[token] = request
        self._run(
            lambda: self.shard.handle(self.time, token, request, wall_ms=self.wall), token, request
        )
        return token

    def call(self, request: Request) -> Any:
        """Send and expect an immediate response."""
        token = self.send(request)
        assert token in self.responses, f"{type(request).__name__} was parked"
        return self.responses.pop(token)

    def response(self, token: int) -> Any:
        return self.responses.pop(token, None)

    def done(self, token: int) -> bool:
        return token in self.responses

    def sleep(self, ms: int) -> None:
        target = self.time + ms
        fired: dict[str, tuple[int, int]] = {}
        while (due := self.timer.next_due(target)) is not None:
            key, deadline = due
            self.time = max(self.time, deadline)
            # A timer re-armed in the past would fire forever without time moving on.
            assert fired.get(key) != (self.time, deadline), f"{key} re-armed in the past"
            fired[key] = (self.time, deadline)
            self.fire(key)
        self.time = target

    def fire(self, key: str) -> None:
        """The runtime's timer fires ``key`` now (and forgets it)."""

        def call() -> Result:
            self.timer.cancel(key)
            return self.shard.on_timer(self.time, key, wall_ms=self.wall)

        self._run(call, None, None, key)

    def set_topics(self, **partitions: int) -> TopicsImage:
        """The cluster now has these topics (name=partition count); ids are stable per name."""
        topics = [
            TopicImage(name, uuid.uuid5(uuid.NAMESPACE_DNS, name), count)
            for name, count in partitions.items()
        ]
        self.image = TopicsImage.of(self.image.version + 1, topics)
        self.shard.update_metadata(self.image)
        return self.image

    def topic_id(self, name: str) -> uuid.UUID:
        return self.image.by_name[name].topic_id

    def reload(self) -> None:
        """Coordinator failover: a fresh shard rebuilt from the records alone."""
        self._apply(self.shard.on_unloaded())  # parked requests get NOT_COORDINATOR
        self.timer = ManualTimer()
        self.shard = GroupCoordinatorShard(self.config, timer=self.timer, ids=self.ids)
        self.shard.update_metadata(self.image)
        for record in self.log:
            self.shard.replay(record)
        self._apply(self.shard.on_loaded(self.time, wall_ms=self.wall))

    def _note_ack(self, token: int, response: Response) -> None:
        request = self._requests.pop(token, None)
        if isinstance(request, OffsetCommitRequest):
            assert isinstance(response, OffsetCommitResponse)
            offsets = {
                (t.name, p.partition): p.offset for t in request.topics for p in t.partitions
            }
            for topic in response.topics:
                for part in topic.partitions:
                    if part.error_code == 0:
                        tp = (topic.name, part.partition)
                        self.acked.setdefault(request.group_id, {})[tp] = offsets[tp]
        elif isinstance(request, OffsetDeleteRequest):
            assert isinstance(response, OffsetDeleteResponse)
            for topic in response.topics:
                for part in topic.partitions:
                    if part.error_code == 0:
                        self.acked.get(request.group_id, {}).pop((topic.name, part.partition), None)
        elif isinstance(request, DeleteGroupsRequest):
            assert isinstance(response, DeleteGroupsResponse)
            for result in response.results:
                if result.error_code == 0:
                    self.acked.pop(result.group_id, None)

    def _note_event(self, event: CoordinatorEvent) -> None:
        if event.kind == OFFSETS_EXPIRED:
            for name in event.fields["partitions"]:
                topic, _, partition = name.rpartition("-")
                self.acked.get(event.group_id, {}).pop((topic, int(partition)), None)
        elif event.kind == STATE_TRANSITION and event.fields["to_state"] == GroupState.DEAD.value:
            self.acked.pop(event.group_id, None)

    # --- request helpers -----------------------------------------------------------

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        *,
        instance_id: str | None = None,
        client_id: str = "c",
        protocols: tuple[tuple[str, bytes], ...] = DEFAULT_PROTOCOLS,
        protocol_type: str = "consumer",
        session_ms: int = 10_000,
        rebalance_ms: int | None = None,
        require_known: bool = True,
        skip: bool = False,
    ) -> int:
        return self.send(
            JoinGroupRequest(
                group_id=group,
                member_id=member_id,
                group_instance_id=instance_id,
                client_id=client_id,
                client_host="/127.0.0.1",
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=rebalance_ms if rebalance_ms is not None else session_ms,
                protocol_type=protocol_type,
                protocols=protocols,
                require_known_member_id=require_known,
                supports_skip_assignment=skip,
            )
        )

    def join_new(self, group: str = "g", client_id: str = "c", **kw: Any) -> tuple[str, int]:
        """KIP-394 two-step join: returns (member id, parked token of the second join)."""
        first = self.response(self.join(group, client_id=client_id, **kw))
        assert isinstance(first, JoinGroupResponse)
        assert first.error_code == 79, first
        return first.member_id, self.join(group, first.member_id, client_id=client_id, **kw)

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: tuple[tuple[str, bytes], ...] = (),
        instance_id: str | None = None,
    ) -> int:
        return self.send(
            SyncGroupRequest(group, generation, member_id, instance_id, assignments=assignments)
        )

    def heartbeat(
        self, group: str, member_id: str, generation: int, instance_id: str | None = None
    ) -> int:
        r = self.call(HeartbeatRequest(group, generation, member_id, instance_id))
        assert isinstance(r, HeartbeatResponse)
        return r.error_code

    def leave(self, group: str, *members: tuple[str, str | None]) -> LeaveGroupResponse:
        r = self.call(LeaveGroupRequest(group, tuple(LeaveGroupMember(m, i) for m, i in members)))
        assert isinstance(r, LeaveGroupResponse)
        return r

    # --- inspection -------------------------------------------------------------------

    def state(self, group: str = "g") -> GroupState | None:
        return self.shard.group_state(group)

    @property
    def state_log(self) -> list[CoordinatorRecord]:
        """The log without the groups' history records (coordinator/history.py)."""
        return [r for r in self.log if not is_event_key(r.key)]

    @property
    def history_log(self) -> list[CoordinatorRecord]:
        """Only the groups' history records."""
        return [r for r in self.log if is_event_key(r.key)]

    def history(self, group: str = "g") -> list[str]:
        """Group states in order, from the transition events."""
        out: list[str] = []
        for e in self.events:
            if e.kind == STATE_TRANSITION and e.group_id == group:
                if not out:
                    out.append(e.fields["from_state"])
                out.append(e.fields["to_state"])
        return out

    def rebuilt(self) -> GroupCoordinatorShard:
        """A fresh shard loaded from the records alone, as a new coordinator would."""
        fresh = GroupCoordinatorShard(self.config, timer=ManualTimer(), ids=SeqIds())
        for record in self.log:
            fresh.replay(record)
        fresh.on_loaded(self.time, wall_ms=self.wall)
        return fresh

    def check_replay_equivalence(self) -> None:
        """Live state, and what clients were told, equal the state rebuilt from the records.

        Offsets: every acknowledged commit (and nothing else) is in the rebuilt
        state. Groups: the generation is always durable; a group at rest
        (Stable, Empty) rebuilds to the same members, leader, protocol and
        assignments; a group awaiting its leader's assignment was written down
        with its members and no assignment.
        """
        fresh = self.rebuilt()
        assert fresh.histories == self.shard.histories, "group histories differ after a reload"
        rebuilt_offsets = {
            gid: {tp: o.offset for tp, o in g.offsets.items()}
            for gid, g in fresh.groups.items()
            if g.offsets
        }
        acked = {gid: offsets for gid, offsets in self.acked.items() if offsets}
        assert rebuilt_offsets == acked, (rebuilt_offsets, acked)
        for gid, group in self.shard.groups.items():
            if group.state is GroupState.DEAD:
                continue
            again = fresh.groups.get(gid)
            assert again is not None, f"{gid} is live but not in its records"
            if isinstance(group, ConsumerGroup):
                assert isinstance(again, ConsumerGroup), f"{gid}: rebuilt as a classic group"
                assert consumer_group_view(again) == consumer_group_view(group), gid
                continue
            assert isinstance(again, ClassicGroup), f"{gid}: rebuilt as a consumer group"
            assert group.members_bytes == group.count_members_bytes(), f"{gid}: members_bytes"
            assert again.generation_id == group.generation_id, (
                f"{gid}: live generation {group.generation_id}, "
                f"rebuilt from the records {again.generation_id}"
            )
            live = membership_view(group.to_value())
            if group.state in (GroupState.STABLE, GroupState.EMPTY):
                assert again.state is group.state, (gid, group.state, again.state)
                assert membership_view(again.to_value()) == live, f"{gid}: membership differs"
            elif group.state is GroupState.COMPLETING_REBALANCE:
                assert again.persisted is not None, gid
                assert membership_view(again.persisted) == live, f"{gid}: join phase not written"
        for gid in fresh.groups:
            assert gid in self.shard.groups, f"{gid} came back from its records"


def consumer_group_view(group: ConsumerGroup) -> tuple[Any, ...]:
    """A consumer group's hard state and the indexes derived from it."""
    return (
        group.group_epoch,
        group.target_assignment_epoch,
        dict(group.members),
        {m: t for m, t in group.target_assignment.items()},
        dict(group.subscription_metadata),
        dict(group.resolved_regexes),
        dict(group.static_members),
        dict(group.partition_owners),
        set(group.unreconciled),
        group.state,
    )


def group_fingerprint(group: ClassicGroup | ConsumerGroup) -> tuple[Any, ...]:
    """Everything a group holds, soft and hard state, members field by field."""
    if isinstance(group, ConsumerGroup):
        offsets = tuple(sorted(group.offsets.items()))
        return (group.group_id, group.save_fields(), consumer_group_view(group), offsets)
    members = tuple((mid, m.save_fields()) for mid, m in group.members.items())
    offsets = tuple(sorted(group.offsets.items()))
    return (group.group_id, group.save_fields(), members, offsets, group.persisted)


def shard_fingerprint(ctx: Ctx) -> tuple[Any, ...]:
    """The shard's whole state and its timers, to check that a failed call changed nothing."""
    groups = tuple(group_fingerprint(g) for g in ctx.shard.groups.values())
    timers = sorted((key, deadline) for key, (deadline, _) in ctx.timer.deadlines.items())
    assert dict(timers) == ctx.shard.timer.deadlines, "the shard's view of its timers drifted"
    return groups, tuple(timers), ctx.shard.loaded


def sync_response(ctx: Ctx, token: int) -> SyncGroupResponse:
    r = ctx.response(token)
    assert isinstance(r, SyncGroupResponse), r
    return r


def join_response(ctx: Ctx, token: int) -> JoinGroupResponse:
    r = ctx.response(token)
    assert isinstance(r, JoinGroupResponse), r
    return r


# --- scenario helpers -----------------------------------------------------------------


def ctx0(**kw: int) -> Ctx:
    return Ctx(CoordinatorConfig(group_initial_rebalance_delay_ms=0, **kw))


def stable(ctx: Ctx, n: int, group: str = "g", **kw: Any) -> tuple[list[str], int]:
    """n dynamic members in a Stable group (initial delay 0); returns (member ids, generation)."""
    m0, t0 = ctx.join_new(group, client_id="c0", **kw)
    responses = {m0: join_response(ctx, t0)}  # the first member completes alone
    if n > 1:
        tokens = dict(ctx.join_new(group, client_id=f"c{i}", **kw) for i in range(1, n))
        tokens = {m0: ctx.join(group, m0, client_id="c0", **kw), **tokens}
        responses = {m: join_response(ctx, t) for m, t in tokens.items()}
    gen = responses[m0].generation_id
    leader = responses[m0].leader
    followers = [ctx.sync(group, m, gen) for m in responses if m != leader]
    lead = ctx.sync(group, leader, gen, tuple((m, m.encode()) for m in responses))
    for t in [*followers, lead]:
        assert sync_response(ctx, t).error_code == 0
    assert ctx.state(group) is S.STABLE
    return list(responses), gen


def commit(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    gen: int = -1,
    member: str = "",
    **kw: object,
) -> OffsetCommitRequest:
    return OffsetCommitRequest(
        group,
        (OffsetCommitTopic(topic, (P(partition, offset),)),),
        gen,
        member,
        **kw,  # type: ignore[arg-type]
    )


def commit_error(ctx: Ctx, req: OffsetCommitRequest) -> int:
    return int(ctx.call(req).topics[0].partitions[0].error_code)
