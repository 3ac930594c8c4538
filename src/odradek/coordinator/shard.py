"""``GroupCoordinatorShard``: the core's public face for one ``__consumer_offsets`` partition.

The shard composes managers, each a concept of its own module, sharing one
``ShardContext`` (the groups, the timer, ids, configuration, the call's
output), as Kafka's ``GroupCoordinatorShard`` composes its
``GroupMetadataManager`` and ``OffsetMetadataManager``:

- ``classic`` (classic.py): JoinGroup, SyncGroup, Heartbeat, LeaveGroup of classic
  groups, their timers and state machine;
- ``consumer`` (consumer_handlers.py): consumer groups (KIP-848);
- ``migration`` (migration.py): conversions between the two, and the classic APIs
  of a consumer group's classic-protocol members;
- ``offsets`` (offsets.py) and ``txn_offsets`` (txn_offsets.py): committed and
  transactional offsets;
- ``admin`` (admin.py): DescribeGroups, ListGroups, DeleteGroups.

The shard itself routes (requests by type, ``_handlers``; timers by kind; records
by key), makes each call atomic (``journal.py``), loads and unloads, and runs the
periodic cleanup, where offsets expire and empty groups are deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from odradek.coordinator import events as ev
from odradek.coordinator.admin import GroupAdminManager
from odradek.coordinator.classic import ClassicGroupManager
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState
from odradek.coordinator.consumer_handlers import ConsumerGroupManager
from odradek.coordinator.consumer_records import decode_consumer_key
from odradek.coordinator.context import JournaledTimer, ShardContext
from odradek.coordinator.errors import ApiError, ErrorCode
from odradek.coordinator.group import ClassicGroup, CommittedOffset
from odradek.coordinator.history import GroupHistories, is_event_key
from odradek.coordinator.journal import Journal, start_recording, stop_recording
from odradek.coordinator.metadata import TopicsImage
from odradek.coordinator.migration import MigrationManager
from odradek.coordinator.offsets import OffsetManager
from odradek.coordinator.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_key,
    offset_tombstone,
)
from odradek.coordinator.state import GroupState
from odradek.coordinator.timer import (
    CG_JOIN,
    CG_REBALANCE,
    CG_SESSION,
    CG_SYNC,
    CLEANUP,
    IdGenerator,
    Timer,
    parse_timer_key,
    timer_key,
)
from odradek.coordinator.txn_offsets import OffsetKey, TxnOffsetCommitRequest, TxnOffsetManager
from odradek.coordinator.types import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    CoordinatorRecord,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribedConsumerGroup,
    DescribedGroup,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopicResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    Request,
    RequestToken,
    Response,
    Result,
    SyncGroupRequest,
    SyncGroupResponse,
)

S = GroupState
E = ErrorCode
CLEANUP_KEY = timer_key(CLEANUP)
CONSUMER_TIMERS = frozenset({CG_SESSION, CG_REBALANCE, CG_JOIN, CG_SYNC})

Handler = Callable[[int, RequestToken, Any], None]


class GroupCoordinatorShard:
    """Pure group coordinator (classic and consumer groups) for one partition.

    See the package docstring for the calling convention, the module's for its parts.
    """

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        timer: Timer,
        ids: IdGenerator,
    ) -> None:
        ctx = self.ctx = ShardContext(config or CoordinatorConfig(), timer, ids)
        self.classic = ClassicGroupManager(ctx)
        self.consumer = ConsumerGroupManager(ctx)
        self.migration = MigrationManager(ctx, self.classic, self.consumer)
        # Both ways: a heartbeat may upgrade a classic group, a fence downgrade the group.
        self.consumer.migration = self.migration
        self.txn_offsets = TxnOffsetManager(ctx, self.classic)
        self.offsets = OffsetManager(ctx, self.classic, self.txn_offsets)
        self.admin = GroupAdminManager(ctx, self.classic)
        # Which manager answers each request (the classic protocol's four ask the group
        # first: it may be a consumer group with classic-protocol members).
        self._handlers: dict[type, Handler] = {
            JoinGroupRequest: self._join_group,
            SyncGroupRequest: self._sync_group,
            HeartbeatRequest: self._heartbeat,
            LeaveGroupRequest: self._leave_group,
            ConsumerGroupHeartbeatRequest: self.consumer.heartbeat,
            ConsumerGroupDescribeRequest: self.consumer.describe,
            OffsetCommitRequest: self.offsets.commit,
            OffsetFetchRequest: self.offsets.fetch,
            OffsetDeleteRequest: self.offsets.delete,
            TxnOffsetCommitRequest: self.txn_offsets.commit,
            DescribeGroupsRequest: self.admin.describe_groups,
            ListGroupsRequest: self.admin.list_groups,
            DeleteGroupsRequest: self.admin.delete_groups,
        }
        self._last_journal: Journal | None = None

    # --- the shared state, for the runtime and inspection ------------------------------

    @property
    def config(self) -> CoordinatorConfig:
        return self.ctx.config

    @config.setter
    def config(self, config: CoordinatorConfig) -> None:
        """New settings take effect from the next call."""
        self.ctx.config = config

    @property
    def timer(self) -> JournaledTimer:
        return self.ctx.timer

    @property
    def groups(self) -> dict[str, ClassicGroup | ConsumerGroup]:
        """Classic and consumer groups by id."""
        return self.ctx.groups

    @property
    def histories(self) -> GroupHistories:
        return self.ctx.histories

    @property
    def image(self) -> TopicsImage:
        return self.ctx.image

    @property
    def loaded(self) -> bool:
        return self.ctx.loaded

    # ================================================================= entry points
    #
    # ``now_ms`` is monotonic: deadlines and timers use it. ``wall_ms`` (the wall
    # clock, default ``now_ms`` for callers with a single clock) only stamps
    # records and events and drives offsets retention.
    #
    # ``handle`` and ``on_timer`` are atomic: if they raise, the shard is exactly
    # as it was before the call (groups, members, timers). After they return, the
    # caller appends ``result.records`` and replays them; if the append fails
    # instead, ``abort()`` undoes the call so the shard matches the log again.

    def handle(
        self, now_ms: int, token: RequestToken, request: Request, *, wall_ms: int | None = None
    ) -> Result:
        """Run one request. Its response may be in this Result or a later one."""
        if not self.ctx.loaded:
            raise RuntimeError("handle() before on_loaded(): answer with loading_response()")
        handler = self._handlers.get(type(request))
        if handler is None:
            raise TypeError(f"unsupported request {type(request).__name__}")
        touched = _groups_named_by(request)
        try:
            return self._atomically(
                now_ms, wall_ms, touched, lambda: handler(now_ms, token, request)
            )
        except ApiError as error:
            # Refused: the call was undone; answer with the error alone (Kafka's
            # ApiException from a coordinator operation).
            self._last_journal = Journal()
            refused = Result()
            refused.responses.append((token, error_response(request, error.code, error.message)))
            return refused

    # --- the classic protocol: to a classic group, or to a consumer group whose members
    # may speak it (online migration) -------------------------------------------------------

    def _join_group(self, now: int, token: RequestToken, req: JoinGroupRequest) -> None:
        group = self.ctx.groups.get(req.group_id)
        if not isinstance(group, ConsumerGroup):
            self.classic.join_group(now, token, req)
        elif group.members:
            self.migration.join_consumer_group(now, token, req, group)
        else:
            self.migration.replace_empty_consumer_group(group)
            self.classic.join_group(now, token, req)

    def _sync_group(self, now: int, token: RequestToken, req: SyncGroupRequest) -> None:
        group = self._classic_or_consumer_group(req.group_id)
        if group is None:
            self.classic.sync_group(now, token, req)
        else:
            self.migration.sync_consumer_group(now, token, req, group)

    def _heartbeat(self, now: int, token: RequestToken, req: HeartbeatRequest) -> None:
        group = self._classic_or_consumer_group(req.group_id)
        if group is None:
            self.classic.heartbeat(now, token, req)
        else:
            self.migration.heartbeat_consumer_group(now, token, req, group)

    def _leave_group(self, now: int, token: RequestToken, req: LeaveGroupRequest) -> None:
        group = self.ctx.groups.get(req.group_id)
        if isinstance(group, ConsumerGroup):
            self.migration.leave_consumer_group(now, token, req, group)
        else:
            self.classic.leave_group(now, token, req)

    def _classic_or_consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group ``group_id`` names, or None for a classic group (or none)."""
        group = self.ctx.groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            return None
        if not group.members:
            # Kafka answers classic requests to an empty group with UNKNOWN_MEMBER_ID.
            raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID)
        return group

    # --- timers and topics ------------------------------------------------------------

    def update_metadata(self, image: TopicsImage) -> None:
        """The cluster's topics changed (or are known for the first time).

        Consumer groups look at the new image on their members' next heartbeats: topics
        created, deleted or grown that they subscribe to bump their group epoch. Called
        between coordinator calls, never inside one.
        """
        if image.version < self.ctx.image.version:
            raise ValueError(f"topics image version {image.version} < {self.ctx.image.version}")
        self.ctx.image = image

    def on_timer(self, now_ms: int, key: str, *, wall_ms: int | None = None) -> Result:
        """A timer scheduled through ``Timer.schedule`` fired (possibly early, or stale)."""
        kind, parts = parse_timer_key(key)
        ctx = self.ctx

        def body() -> None:
            if kind in CONSUMER_TIMERS and ctx.loaded:
                self.consumer.on_timer(now_ms, key, kind, parts)  # the deadline is the timer's
                return
            ctx.timer.fired(key)
            if not ctx.loaded:
                return
            if kind == CLEANUP:
                self._cleanup_group_metadata()
                ctx.sweep_histories()
                self._schedule_cleanup(now_ms)
                ctx.out.atomic = False  # many independent tombstones: any batching will do
                return
            self.classic.on_timer(now_ms, kind, parts)

        return self._atomically(now_ms, wall_ms, (), body)  # timers create no group

    def _cleanup_group_metadata(self) -> None:
        """Expire offsets by their (wall-clock) timestamps; delete Empty groups left bare
        (Kafka's ``GroupCoordinatorShard.cleanupGroupMetadata``)."""
        ctx = self.ctx
        has_pending = self.txn_offsets.has_pending
        for group in list(ctx.groups.values()):
            if group.state is S.DEAD:
                continue
            expired = sorted(
                tp
                for tp in self.offsets.expired_offsets(group, ctx.wall_ms)
                if not has_pending(group.group_id, *tp)  # Kafka waits for its marker
            )
            if expired:
                ctx.event(
                    ev.OFFSETS_EXPIRED,
                    group.group_id,
                    partitions=[f"{t}-{p}" for t, p in expired],
                )
            empty = group.state in (S.EMPTY, ConsumerGroupState.EMPTY)
            if (
                empty
                and len(group.offsets) == len(expired)
                and not self.txn_offsets.has_open_transactions(group.group_id)
            ):
                # Tombstones every offset, the expired ones included.
                self.admin.delete_group(group, "empty group without offsets")
                continue
            for topic, partition in expired:
                ctx.record(offset_tombstone(group.group_id, topic, partition))

    def _schedule_cleanup(self, now_ms: int) -> None:
        self.ctx.timer.schedule(
            CLEANUP_KEY, now_ms + self.ctx.config.offsets_retention_check_interval_ms
        )

    # --- atomicity --------------------------------------------------------------------

    def abort(self) -> None:
        """Undo the last ``handle``/``on_timer``, whose records could not be appended."""
        journal, self._last_journal = self._last_journal, None
        if journal is None:
            raise RuntimeError("abort() without a call to undo (or after its records replayed)")
        journal.undo(self.ctx.groups, self.ctx.timer.restore)

    def _atomically(
        self, now_ms: int, wall_ms: int | None, group_ids: Iterable[str], body: Callable[[], None]
    ) -> Result:
        ctx = self.ctx
        journal = Journal()
        for group_id in group_ids:
            if group_id not in ctx.groups:
                journal.note_absent(group_id)
        self._last_journal = None
        out = ctx.start_call(now_ms if wall_ms is None else wall_ms)
        recording = start_recording(journal)
        try:
            body()
            ctx.write_history(out)
        except BaseException:
            stop_recording(recording)
            journal.undo(ctx.groups, ctx.timer.restore)
            raise
        stop_recording(recording)
        self._last_journal = journal
        return out

    # ================================================================= loading

    def on_loaded(self, now_ms: int, *, wall_ms: int | None = None) -> Result:
        """All records of the partition were replayed: build live groups and start timers.

        Not atomic: if it raises, discard the shard and load a fresh one.
        """
        ctx = self.ctx
        out = ctx.start_call(now_ms if wall_ms is None else wall_ms)
        out.atomic = False  # each group's records (and events) stand alone
        ctx.loaded = True
        self.consumer.on_loaded(now_ms)
        self.classic.on_loaded(now_ms)
        self._schedule_cleanup(now_ms)
        ctx.write_history(out)
        ctx.start_call(ctx.wall_ms)
        return out

    def on_unloaded(self) -> Result:
        """The partition moved away: parked requests get NOT_COORDINATOR, timers stop."""
        ctx = self.ctx
        out = ctx.start_call(ctx.wall_ms)
        self._last_journal = None
        self.consumer.on_unloaded()
        self.classic.on_unloaded()
        ctx.timer.cancel(CLEANUP_KEY)
        ctx.groups.clear()
        ctx.histories = GroupHistories()
        ctx.loaded = False
        ctx.start_call(ctx.wall_ms)
        return out

    # ================================================================= replay

    def replay(self, record: CoordinatorRecord, *, producer_id: int = -1, offset: int = -1) -> None:
        """Apply one ``__consumer_offsets`` record to the hard state.

        ``producer_id``: the record is in a transactional batch of that producer
        (TxnOffsetCommit): pending until its marker (``replay_end_transaction``).
        ``offset``: the record's offset in the partition, when known.
        Replaying the records of a call commits it: it can no longer be aborted.
        The key's version says whose record it is, as in Kafka's shard.
        """
        self._last_journal = None
        if is_event_key(record.key):
            self.ctx.histories.replay(record)  # a group event: only its sequence matters here
            return
        consumer_key = decode_consumer_key(record.key)
        if consumer_key is not None:
            self.consumer.replay(consumer_key, record.value)
            return
        key = decode_key(record.key)
        if isinstance(key, OffsetCommitKey):
            self.offsets.replay(key, record.value, producer_id, offset)
        elif isinstance(key, GroupMetadataKey):
            self.classic.replay_group(key, record.value)
        # Other key versions (share and streams groups) are not ours: skip them like
        # Kafka's loader.

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        """The transaction marker of ``producer_id`` reached this partition (its pending
        offsets become committed, or are dropped)."""
        self._last_journal = None
        self.txn_offsets.replay_end_transaction(producer_id, commit)

    # ================================================================= inspection

    def group_state(self, group_id: str) -> GroupState | ConsumerGroupState | None:
        group = self.ctx.groups.get(group_id)
        return None if group is None else group.state

    def has_open_transactions(self, group_id: str) -> bool:
        return self.txn_offsets.has_open_transactions(group_id)

    def pending_txn_offsets(self, producer_id: int) -> dict[OffsetKey, CommittedOffset]:
        """What ``producer_id``'s open transaction committed here (tests, inspection)."""
        return self.txn_offsets.pending_offsets(producer_id)


# ================================================================= runtime helpers


def _groups_named_by(request: Request) -> tuple[str, ...]:
    """The groups a request may create: undoing it must remove them again."""
    if isinstance(request, DescribeGroupsRequest | DeleteGroupsRequest):
        return tuple(request.group_ids)
    if isinstance(request, ConsumerGroupDescribeRequest):
        return ()
    if isinstance(request, ListGroupsRequest):
        return ()
    return (request.group_id,)


def error_response(
    request: Request, error: ErrorCode | int, message: str | None = None
) -> Response:
    """A response of the right shape carrying ``error`` everywhere it can."""
    code = int(error)
    if isinstance(request, ConsumerGroupHeartbeatRequest):
        return ConsumerGroupHeartbeatResponse(code, message, member_id=None, member_epoch=-1)
    if isinstance(request, ConsumerGroupDescribeRequest):
        return ConsumerGroupDescribeResponse(
            tuple(DescribedConsumerGroup(code, gid, message) for gid in request.group_ids)
        )
    if isinstance(request, JoinGroupRequest):
        return JoinGroupResponse(code, member_id=request.member_id)
    if isinstance(request, SyncGroupRequest):
        return SyncGroupResponse(code)
    if isinstance(request, HeartbeatRequest):
        return HeartbeatResponse(code)
    if isinstance(request, LeaveGroupRequest):
        return LeaveGroupResponse(code)
    if isinstance(request, OffsetCommitRequest | TxnOffsetCommitRequest):
        return OffsetCommitResponse(
            tuple(
                OffsetCommitTopicResponse(
                    t.name,
                    tuple(OffsetCommitPartitionResponse(p.partition, code) for p in t.partitions),
                )
                for t in request.topics
            )
        )
    if isinstance(request, OffsetFetchRequest):
        return OffsetFetchResponse(code)
    if isinstance(request, DescribeGroupsRequest):
        return DescribeGroupsResponse(
            tuple(DescribedGroup(code, gid, "", "", "", (), message) for gid in request.group_ids)
        )
    if isinstance(request, ListGroupsRequest):
        return ListGroupsResponse(code)
    if isinstance(request, DeleteGroupsRequest):
        return DeleteGroupsResponse(tuple(DeleteGroupsResult(g, code) for g in request.group_ids))
    if isinstance(request, OffsetDeleteRequest):
        return OffsetDeleteResponse(code)
    raise TypeError(f"unsupported request {type(request).__name__}")


def loading_response(request: Request) -> Response:
    """Answer while the group's partition is loading (Kafka's old-coordinator rules)."""
    if isinstance(request, HeartbeatRequest):
        return HeartbeatResponse(int(E.NONE))  # respond blindly
    if isinstance(request, SyncGroupRequest):
        return SyncGroupResponse(int(E.REBALANCE_IN_PROGRESS))  # old clients expect this
    return error_response(request, E.COORDINATOR_LOAD_IN_PROGRESS)
