"""``GroupCoordinatorShard``: the core's public face for one ``__consumer_offsets`` partition."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from odradek.coordinator import events as ev
from odradek.coordinator.admin import AdminHandlers
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.consumer_group import ConsumerGroup, ConsumerGroupState
from odradek.coordinator.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    REGULAR_EXPRESSION,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    ConsumerRecordKey,
    CurrentAssignmentValue,
    GroupEpochValue,
    MemberMetadataValue,
    PartitionMetadataValue,
    RegexValue,
    TargetAssignmentEpochValue,
    TargetAssignmentMemberValue,
    decode_consumer_key,
    decode_consumer_value,
)
from odradek.coordinator.errors import ApiError, ErrorCode
from odradek.coordinator.group import ClassicGroup, ClassicMember, CommittedOffset
from odradek.coordinator.history import GroupHistories, is_event_key
from odradek.coordinator.journal import Journal, start_recording, stop_recording
from odradek.coordinator.metadata import TopicsImage
from odradek.coordinator.migration import MigrationHandlers
from odradek.coordinator.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from odradek.coordinator.state import GroupState
from odradek.coordinator.timer import (
    CG_JOIN,
    CG_REBALANCE,
    CG_SESSION,
    CG_SYNC,
    CLEANUP,
    HEARTBEAT,
    JOIN,
    PENDING,
    SYNC,
    IdGenerator,
    Timer,
    parse_timer_key,
    timer_key,
)
from odradek.coordinator.txn_offsets import TxnOffsetCommitRequest, TxnOffsetHandlers
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


class GroupCoordinatorShard(MigrationHandlers, AdminHandlers, TxnOffsetHandlers):
    """Pure group coordinator (classic and consumer groups) for one partition.

    See the package docstring."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        timer: Timer,
        ids: IdGenerator,
    ) -> None:
        super().__init__(config or CoordinatorConfig(), timer, ids)
        self._last_journal: Journal | None = None

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
        if not self.loaded:
            raise RuntimeError("handle() before on_loaded(): answer with loading_response()")
        touched = _groups_named_by(request)
        try:
            return self._atomically(
                now_ms, wall_ms, touched, lambda: self._dispatch(now_ms, token, request)
            )
        except ApiError as error:
            # Refused: the call was undone; answer with the error alone (Kafka's
            # ApiException from a coordinator operation).
            self._last_journal = Journal()
            refused = Result()
            refused.responses.append((token, error_response(request, error.code, error.message)))
            return refused

    def _dispatch(self, now_ms: int, token: RequestToken, request: Request) -> None:
        if isinstance(request, ConsumerGroupHeartbeatRequest):
            self._consumer_group_heartbeat(now_ms, token, request)
        elif isinstance(request, ConsumerGroupDescribeRequest):
            self._consumer_group_describe(now_ms, token, request)
        elif isinstance(request, JoinGroupRequest | SyncGroupRequest | HeartbeatRequest):
            self._dispatch_classic(now_ms, token, request)
        elif isinstance(request, LeaveGroupRequest):
            group = self.groups.get(request.group_id)
            if isinstance(group, ConsumerGroup):
                self._classic_leave_consumer_group(now_ms, token, request, group)
            else:
                self._leave_group(now_ms, token, request)
        elif isinstance(request, OffsetCommitRequest):
            self._offset_commit(now_ms, token, request)
        elif isinstance(request, OffsetFetchRequest):
            self._offset_fetch(now_ms, token, request)
        elif isinstance(request, DescribeGroupsRequest):
            self._describe_groups(now_ms, token, request)
        elif isinstance(request, ListGroupsRequest):
            self._list_groups(now_ms, token, request)
        elif isinstance(request, DeleteGroupsRequest):
            self._delete_groups(now_ms, token, request)
        elif isinstance(request, OffsetDeleteRequest):
            self._offset_delete(now_ms, token, request)
        elif isinstance(request, TxnOffsetCommitRequest):
            self._txn_offset_commit(now_ms, token, request)
        else:
            raise TypeError(f"unsupported request {type(request).__name__}")

    def _dispatch_classic(
        self,
        now_ms: int,
        token: RequestToken,
        request: JoinGroupRequest | SyncGroupRequest | HeartbeatRequest,
    ) -> None:
        """Classic-protocol requests: to a classic group, or to a consumer group whose
        members may speak the classic protocol (online migration)."""
        group = self.groups.get(request.group_id)
        if not isinstance(group, ConsumerGroup):
            if isinstance(request, JoinGroupRequest):
                self._join_group(now_ms, token, request)
            elif isinstance(request, SyncGroupRequest):
                self._sync_group(now_ms, token, request)
            else:
                self._heartbeat(now_ms, token, request)
        elif isinstance(request, JoinGroupRequest):
            if group.members:
                self._classic_join_consumer_group(now_ms, token, request, group)
            else:
                self._classic_join_empty_consumer_group(group)
                self._join_group(now_ms, token, request)
        elif not group.members:
            # Kafka answers classic requests to an empty group with UNKNOWN_MEMBER_ID.
            raise ApiError(ErrorCode.UNKNOWN_MEMBER_ID)
        elif isinstance(request, SyncGroupRequest):
            self._classic_sync_consumer_group(now_ms, token, request, group)
        else:
            self._classic_heartbeat_consumer_group(now_ms, token, request, group)

    def update_metadata(self, image: TopicsImage) -> None:
        """The cluster's topics changed (or are known for the first time).

        Consumer groups look at the new image on their members' next heartbeats: topics
        created, deleted or grown that they subscribe to bump their group epoch. Called
        between coordinator calls, never inside one.
        """
        if image.version < self.image.version:
            raise ValueError(f"topics image version {image.version} < {self.image.version}")
        self.image = image

    def on_timer(self, now_ms: int, key: str, *, wall_ms: int | None = None) -> Result:
        """A timer scheduled through ``Timer.schedule`` fired (possibly early, or stale)."""
        kind, parts = parse_timer_key(key)

        def body() -> None:
            if kind not in CONSUMER_TIMERS or not self.loaded:
                self.timer.fired(key)
            if not self.loaded:
                return
            if kind == CLEANUP:
                self._cleanup_group_metadata()
                self._sweep_histories()
                self._schedule_cleanup(now_ms)
                self._out.atomic = False  # many independent tombstones: any batching will do
                return
            if kind in CONSUMER_TIMERS:
                deadline = self.timer.deadlines.get(key)
                if deadline is None:
                    return  # cancelled or replaced: stale
                if now_ms < deadline:
                    self.timer.schedule(key, deadline)  # early: re-arm, never drop
                    return
                self.timer.fired(key)
                self._on_consumer_timer(now_ms, kind, parts[0], parts[1])
                return
            group = self.classic_group(parts[0]) if parts else None
            if group is None:
                return
            if kind == JOIN:
                self._on_join_timer(now_ms, group)
            elif kind == SYNC:
                self._on_sync_timer(now_ms, group)
            elif kind == HEARTBEAT:
                self._on_heartbeat_timer(now_ms, group, parts[1])
            elif kind == PENDING:
                self._on_pending_timer(now_ms, group, parts[1])

        return self._atomically(now_ms, wall_ms, (), body)  # timers create no group

    def abort(self) -> None:
        """Undo the last ``handle``/``on_timer``, whose records could not be appended."""
        journal, self._last_journal = self._last_journal, None
        if journal is None:
            raise RuntimeError("abort() without a call to undo (or after its records replayed)")
        journal.undo(self.groups, self.timer.restore)

    def _atomically(
        self, now_ms: int, wall_ms: int | None, group_ids: Iterable[str], body: Callable[[], None]
    ) -> Result:
        journal = Journal()
        for group_id in group_ids:
            if group_id not in self.groups:
                journal.note_absent(group_id)
        self._last_journal = None
        self._out = out = Result()
        self._wall_ms = now_ms if wall_ms is None else wall_ms
        self._histories_deleted = set()
        recording = start_recording(journal)
        try:
            body()
            self._write_history(out)
        except BaseException:
            stop_recording(recording)
            journal.undo(self.groups, self.timer.restore)
            raise
        stop_recording(recording)
        self._last_journal = journal
        return out

    def on_loaded(self, now_ms: int, *, wall_ms: int | None = None) -> Result:
        """All records of the partition were replayed: build live groups and start timers.

        Not atomic: if it raises, discard the shard and load a fresh one.
        """
        self._out = out = Result()
        out.atomic = False  # each group's records (and events) stand alone
        self._wall_ms = now_ms if wall_ms is None else wall_ms
        self._histories_deleted = set()
        self.loaded = True
        self._consumer_groups_loaded(now_ms)
        for group in list(self.groups.values()):
            if not isinstance(group, ClassicGroup):
                continue
            self._materialize(group)
            self._event(
                ev.GROUP_LOADED,
                group.group_id,
                state=group.state.value,
                generation=group.generation_id,
                members=list(group.members),
                offsets=len(group.offsets),
            )
            # Members must heartbeat (or rejoin) the new coordinator within their session.
            for member in group.members.values():
                self._schedule_heartbeat(group, member, now_ms + member.session_timeout_ms)
            if len(group.members) > self.config.group_max_size:
                self._prepare_rebalance(group, now_ms, "loaded group is over group.max.size")
            elif group.members and not any(m.assignment for m in group.members.values()):
                # Written when its join phase completed, before the leader's assignment:
                # that rebalance was lost with the old coordinator, so start another.
                self._prepare_rebalance(
                    group, now_ms, "loaded group has no assignment (rebalance interrupted)"
                )
        self._schedule_cleanup(now_ms)
        self._write_history(out)
        self._out = Result()
        return out

    def on_unloaded(self) -> Result:
        """The partition moved away: parked requests get NOT_COORDINATOR, timers stop."""
        self._out = out = Result()
        self._last_journal = None
        for group in self.groups.values():
            if isinstance(group, ConsumerGroup):
                for mid in group.members:
                    self._cancel_member_timers(group.group_id, mid)
                continue
            for member in group.members.values():
                self._fail_waiters(member, E.NOT_COORDINATOR)
            self._cancel_all_group_timers(group)
            group.transition_to(S.DEAD, self._wall_ms)
        self.timer.cancel(CLEANUP_KEY)
        self.groups.clear()
        self.histories = GroupHistories()
        self.loaded = False
        self._out = Result()
        return out

    # ================================================================= replay

    def replay(self, record: CoordinatorRecord, *, producer_id: int = -1, offset: int = -1) -> None:
        """Apply one ``__consumer_offsets`` record to the hard state.

        ``producer_id``: the record is in a transactional batch of that producer
        (TxnOffsetCommit): pending until its marker (``replay_end_transaction``).
        ``offset``: the record's offset in the partition, when known.
        Replaying the records of a call commits it: it can no longer be aborted.
        """
        self._last_journal = None
        if is_event_key(record.key):
            self.histories.replay(record)  # a group event: only its sequence matters here
            return
        consumer_key = decode_consumer_key(record.key)
        if consumer_key is not None:
            self._replay_consumer_record(consumer_key, record.value)
            return
        key = decode_key(record.key)
        if isinstance(key, OffsetCommitKey):
            tp = (key.topic, key.partition)
            if record.value is None:
                self._forget_pending(key.group, key.topic, key.partition)
                group = self.groups.get(key.group)
                if group is not None:
                    group.offsets.pop(tp, None)
                    if isinstance(group, ClassicGroup):
                        self._maybe_forget_shell(group)
                return
            v = decode_offset_commit_value(record.value)
            group = self.groups.get(key.group) or self._get_or_create(key.group)
            committed = CommittedOffset(
                v.offset,
                v.leader_epoch,
                v.metadata,
                v.commit_timestamp,
                v.expire_timestamp if v.expire_timestamp >= 0 else None,
                offset,
            )
            if producer_id >= 0:
                self._replay_txn_offset(producer_id, key, committed)
                return
            group.offsets[tp] = committed
        elif isinstance(key, GroupMetadataKey):
            group = self.groups.get(key.group)
            if isinstance(group, ConsumerGroup):
                if record.value is None:
                    return  # a classic group upgraded in this call: its successor stays
                raise ValueError(f"classic group record for consumer group {key.group}")
            if record.value is None:
                if group is not None:
                    group.persisted = None
                    if group.state is S.DEAD or not group.offsets:
                        del self.groups[key.group]
                return
            value = decode_group_metadata_value(record.value)
            if group is None:
                group = self._get_or_create(key.group)
                group.persisted = value
                if self.loaded:
                    self._materialize(group)
            else:
                # Live groups already hold this state in memory; only the durable copy moves.
                group.persisted = value
        # Other key versions (share and streams groups) are not ours: skip them like
        # Kafka's loader.

    def _replay_consumer_record(self, key: ConsumerRecordKey, raw: bytes | None) -> None:
        """A consumer-group record: the only way a consumer group's hard state changes."""
        found = self.groups.get(key.group)
        if raw is None:
            if isinstance(found, ConsumerGroup):
                self._replay_consumer_tombstone(found, key)
            # Else the group was turned back into a classic group in this call: its
            # tombstones have nothing left to delete.
            return
        if isinstance(found, ConsumerGroup):
            group = found
        elif found is None or found.persisted is None:
            # New, or a classic group whose record was tombstoned (an upgrade) or that
            # only holds offsets: a consumer group takes its place, with its offsets.
            group = ConsumerGroup(key.group)
            if found is not None:
                group.offsets = found.offsets
            self.groups[key.group] = group
        else:
            raise ValueError(f"consumer group record for live classic group {key.group}")
        value = decode_consumer_value(key.kind, raw)
        member = key.member or ""
        if isinstance(value, GroupEpochValue):
            group.set_group_epoch(value.epoch)
        elif isinstance(value, PartitionMetadataValue):
            group.set_subscription_metadata(value.topics)
        elif isinstance(value, MemberMetadataValue):
            group.update_subscription(member, value)
        elif isinstance(value, TargetAssignmentEpochValue):
            group.set_target_assignment_epoch(value.assignment_epoch)
        elif isinstance(value, TargetAssignmentMemberValue):
            group.set_target(member, value.partitions)
        elif isinstance(value, CurrentAssignmentValue):
            group.update_assignment(member, value)
        elif isinstance(value, RegexValue):
            group.set_regex(member, value)

    def _replay_consumer_tombstone(self, group: ConsumerGroup, key: ConsumerRecordKey) -> None:
        kind, member = key.kind, key.member or ""
        if kind == CURRENT_MEMBER_ASSIGNMENT:
            group.update_assignment(member, None)
        elif kind == TARGET_ASSIGNMENT_MEMBER:
            group.set_target(member, None)
        elif kind == MEMBER_METADATA:
            group.remove_member(member)
        elif kind == TARGET_ASSIGNMENT_METADATA:
            group.set_target_assignment_epoch(-1)
        elif kind == PARTITION_METADATA:
            group.set_subscription_metadata(())
        elif kind == REGULAR_EXPRESSION:
            group.set_regex(member, None)
        elif kind == GROUP_METADATA:
            # The group is gone (deleted, or converted to classic): its offsets stay, held
            # by an offsets-only classic group as Kafka's "simple" groups are.
            del self.groups[group.group_id]
            if group.offsets:
                shell = ClassicGroup(group.group_id)
                shell.offsets = group.offsets
                self.groups[group.group_id] = shell

    def _get_or_create(self, group_id: str) -> ClassicGroup:
        group = self.groups.get(group_id)
        if group is None:
            group = ClassicGroup(group_id)
            self.groups[group_id] = group
        return group

    def _maybe_forget_shell(self, group: ClassicGroup) -> None:
        # An offsets-only group with no offsets left is gone, live or reloaded alike.
        if (
            not group.offsets
            and group.persisted is None
            and not group.members
            and not group.pending_members
            and group.state is S.EMPTY
        ):
            del self.groups[group.group_id]

    def _materialize(self, group: ClassicGroup) -> None:
        value = group.persisted
        if value is None:
            return
        group.protocol_type = value.protocol_type
        group.generation_id = value.generation
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        ts = value.current_state_timestamp
        group.state_timestamp_ms = ts if ts >= 0 else None
        group.members = {}
        group.static_members = {}
        for m in value.members:
            protocols = ((value.protocol, m.subscription),) if value.protocol else ()
            group.members[m.member_id] = ClassicMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout,
                session_timeout_ms=m.session_timeout,
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=m.assignment,
            )
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.members_bytes = group.count_members_bytes()
        # In-flight rebalances are not persisted: a loaded group is Stable or Empty.
        group.start_in(S.STABLE if group.members else S.EMPTY)
        group.subscribed_topics = group.compute_subscribed_topics()

    def _schedule_cleanup(self, now_ms: int) -> None:
        self.timer.schedule(CLEANUP_KEY, now_ms + self.config.offsets_retention_check_interval_ms)

    # ================================================================= inspection

    def group_state(self, group_id: str) -> GroupState | ConsumerGroupState | None:
        group = self.groups.get(group_id)
        return None if group is None else group.state


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
    if isinstance(request, OffsetCommitRequest):
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
    if isinstance(request, TxnOffsetCommitRequest):
        return OffsetCommitResponse(
            tuple(
                OffsetCommitTopicResponse(
                    t.name,
                    tuple(OffsetCommitPartitionResponse(p.partition, code) for p in t.partitions),
                )
                for t in request.topics
            )
        )
    raise TypeError(f"unsupported request {type(request).__name__}")


def loading_response(request: Request) -> Response:
    """Answer while the group's partition is loading (Kafka's old-coordinator rules)."""
    if isinstance(request, HeartbeatRequest):
        return HeartbeatResponse(int(E.NONE))  # respond blindly
    if isinstance(request, SyncGroupRequest):
        return SyncGroupResponse(int(E.REBALANCE_IN_PROGRESS))  # old clients expect this
    return error_response(request, E.COORDINATOR_LOAD_IN_PROGRESS)
