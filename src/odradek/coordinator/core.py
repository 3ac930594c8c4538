"""Shared state and helpers of one coordinator shard (one ``__consumer_offsets`` partition).

Handlers never return values; they append records, responses and events to
the ``Result`` of the call in progress (``self._out``).

Two clocks reach the core. ``now`` (the ``now_ms`` of each call) is monotonic:
every deadline and timer is computed from it, so a wall-clock step can neither
expire a member early nor keep a timer from firing. ``self._wall_ms`` is the
wall clock of the call in progress: it only stamps what is written down
(commit and state timestamps in records, event times) and drives offsets
retention, which Kafka defines on record timestamps.
"""

from __future__ import annotations

from odradek.coordinator import events as ev
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.consumer_group import ConsumerGroup
from odradek.coordinator.consumer_records import (
    CURRENT_MEMBER_ASSIGNMENT,
    GROUP_METADATA,
    MEMBER_METADATA,
    PARTITION_METADATA,
    REGULAR_EXPRESSION,
    TARGET_ASSIGNMENT_MEMBER,
    TARGET_ASSIGNMENT_METADATA,
    consumer_record,
)
from odradek.coordinator.errors import ErrorCode
from odradek.coordinator.group import ClassicGroup, ClassicMember, RebalanceTracking
from odradek.coordinator.history import (
    GroupHistories,
    batch_bytes,
    event_record,
    event_tombstone,
    record_bytes,
)
from odradek.coordinator.journal import active_journal
from odradek.coordinator.metadata import EMPTY_IMAGE, TopicsImage
from odradek.coordinator.records import group_metadata_record
from odradek.coordinator.state import GroupState
from odradek.coordinator.timer import HEARTBEAT, JOIN, PENDING, SYNC, IdGenerator, Timer, timer_key
from odradek.coordinator.types import (
    CoordinatorRecord,
    JoinGroupResponse,
    RequestToken,
    Response,
    Result,
    SyncGroupResponse,
)


class JournaledTimer:
    """The injected timer, plus a record of what is scheduled so a failed call can undo.

    Every ``schedule``/``cancel`` made inside a call saves the key's previous
    deadline into the active journal; ``restore`` puts it back. ``fired`` tells
    it that the runtime's timer dropped a key because it fired.
    """

    def __init__(self, inner: Timer) -> None:
        self.inner = inner
        self.deadlines: dict[str, int] = {}

    def schedule(self, key: str, deadline_ms: int) -> None:
        self._save(key)
        self.deadlines[key] = deadline_ms
        self.inner.schedule(key, deadline_ms)

    def cancel(self, key: str) -> None:
        self._save(key)
        self.deadlines.pop(key, None)
        self.inner.cancel(key)

    def fired(self, key: str) -> None:
        self._save(key)
        self.deadlines.pop(key, None)

    def restore(self, key: str, deadline_ms: int | None) -> None:
        if deadline_ms is None:
            self.deadlines.pop(key, None)
            self.inner.cancel(key)
        elif self.deadlines.get(key) != deadline_ms:
            self.deadlines[key] = deadline_ms
            self.inner.schedule(key, deadline_ms)

    def _save(self, key: str) -> None:
        journal = active_journal()
        if journal is not None:
            journal.save_timer(key, self.deadlines.get(key))


class ShardBase:
    def __init__(self, config: CoordinatorConfig, timer: Timer, ids: IdGenerator) -> None:
        self.config = config
        self.timer = JournaledTimer(timer)
        self.ids = ids
        # Classic and consumer groups by id (a group id is one or the other), as Kafka's.
        self.groups: dict[str, ClassicGroup | ConsumerGroup] = {}
        # The cluster's topics, as the runtime last told (consumer groups assign them).
        self.image: TopicsImage = EMPTY_IMAGE
        self.loaded = False
        self._out = Result()
        self._wall_ms = 0  # wall clock of the call in progress
        # Each group's event history (history.py): hard state, changed only by replay.
        self.histories = GroupHistories()
        # Groups whose whole history the call in progress deletes (deleted groups).
        self._histories_deleted: set[str] = set()

    # --- output -----------------------------------------------------------------

    def _record(self, record: CoordinatorRecord) -> None:
        self._out.records.append(record)

    def _respond(self, token: RequestToken, response: Response) -> None:
        self._out.responses.append((token, response))

    def _event(self, kind: str, group_id: str, **fields: object) -> None:
        self._out.events.append(ev.make_event(kind, group_id, self._wall_ms, **fields))

    # --- the groups' histories (history.py) ------------------------------------------

    def _delete_history(self, group_id: str) -> None:
        """The group is gone: tombstone every event it has (at the end of the call)."""
        self._histories_deleted.add(group_id)

    def _write_history(self, out: Result) -> None:
        """Append the call's events to ``out.records`` as history records, after the
        call's own records, and the tombstones of deleted groups' histories.

        History never fails a call: in an atomic result a record is written only while
        the batch stays within ``max_message_bytes`` (the rest are skipped, and the
        events still reach the runtime's listeners); in any result a record that could
        not fit a batch alone is skipped. Deleted histories whose tombstones are
        skipped are tombstoned by the next sweep (``_sweep_histories``).
        """
        limit = self.config.max_message_bytes
        used = batch_bytes(out.records) if out.atomic else 0

        def fits(record: CoordinatorRecord) -> bool:
            nonlocal used
            size = record_bytes(record)
            if not out.atomic:
                return batch_bytes(()) + size <= limit
            if used + size > limit:
                return False
            used += size
            return True

        deleted = self._histories_deleted
        for group_id in sorted(deleted):
            tombstones = [event_tombstone(group_id, s) for s in self.histories.live_slots(group_id)]
            if not out.atomic or used + sum(map(record_bytes, tombstones)) <= limit:
                for tombstone in tombstones:
                    if fits(tombstone):
                        out.records.append(tombstone)
        sequences: dict[str, int] = {}
        for event in out.events:
            group_id = event.group_id
            if group_id in deleted:
                continue  # its last events went with it (the listeners still see them)
            sequence = sequences.get(group_id)
            if sequence is None:
                sequence = self.histories.next_sequence(group_id)
            record = event_record(group_id, sequence, event)
            if fits(record):
                out.records.append(record)
                sequences[group_id] = sequence + 1

    def _sweep_histories(self) -> None:
        """Tombstone events older than ``group_history_retention_ms``, and the histories
        of groups that no longer exist (part of the periodic offsets cleanup)."""
        cutoff = self._wall_ms - self.config.group_history_retention_ms
        for group_id in self.histories.groups():
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                self._delete_history(group_id)
                continue
            for slot in self.histories.slots_older_than(group_id, cutoff):
                self._record(event_tombstone(group_id, slot))

    def _replace_group(self, group: ClassicGroup | ConsumerGroup) -> None:
        """Put ``group`` in place of whatever has its id now (a conversion between
        protocols): the one replaced is saved first, so undoing the call restores it."""
        journal = active_journal()
        old = self.groups.get(group.group_id)
        if journal is not None:
            if old is None:
                journal.note_absent(group.group_id)
            else:
                journal.save_group(old)
        self.groups[group.group_id] = group

    def _tombstone_consumer_group(self, group: ConsumerGroup) -> None:
        """Kafka's createGroupTombstoneRecords, plus the resolved regexes."""
        gid = group.group_id
        for mid in group.members:
            self._record(consumer_record(CURRENT_MEMBER_ASSIGNMENT, gid, None, mid))
        for mid in group.members:
            self._record(consumer_record(TARGET_ASSIGNMENT_MEMBER, gid, None, mid))
        self._record(consumer_record(TARGET_ASSIGNMENT_METADATA, gid, None))
        for mid in group.members:
            self._record(consumer_record(MEMBER_METADATA, gid, None, mid))
        for regex in group.resolved_regexes:
            self._record(consumer_record(REGULAR_EXPRESSION, gid, None, regex))
        self._record(consumer_record(PARTITION_METADATA, gid, None))
        self._record(consumer_record(GROUP_METADATA, gid, None))

    def classic_group(self, group_id: str) -> ClassicGroup | None:
        group = self.groups.get(group_id)
        return group if isinstance(group, ClassicGroup) else None

    def _write_group(self, group: ClassicGroup) -> None:
        self._record(group_metadata_record(group.group_id, group.to_value()))

    # --- state machine ------------------------------------------------------------

    def _transition(self, group: ClassicGroup, dst: GroupState, reason: str) -> None:
        src = group.transition_to(dst, self._wall_ms)
        self._event(
            ev.STATE_TRANSITION,
            group.group_id,
            from_state=src.value,
            to_state=dst.value,
            generation=group.generation_id,
            members=list(group.members),
            leader=group.leader_id,
            reason=reason,
        )

    def _start_rebalance_tracking(self, group: ClassicGroup, now: int, reason: str) -> None:
        track = group.rebalance
        if track is None:
            before: tuple[str, ...] = ()
            if group.persisted is not None:
                before = tuple(m.group_instance_id or m.member_id for m in group.persisted.members)
            track = RebalanceTracking(started_ms=now, members_before=before)
        group.rebalance = RebalanceTracking(
            track.started_ms, track.members_before, (*track.reasons, reason)
        )

    def _finish_rebalance(self, group: ClassicGroup, now: int) -> None:
        track = group.rebalance
        if track is None:
            return
        group.rebalance = None
        before = set(track.members_before)
        after = {m.group_instance_id or m.member_id for m in group.members.values()}
        self._event(
            ev.REBALANCE_COMPLETED,
            group.group_id,
            generation=group.generation_id,
            state=group.state.value,
            duration_ms=now - track.started_ms,
            joined=sorted(after - before),
            left=sorted(before - after),
            kept=sorted(after & before),
            reasons=list(track.reasons),
        )

    # --- timers ---------------------------------------------------------------------

    def _schedule_heartbeat(
        self, group: ClassicGroup, member: ClassicMember, deadline: int
    ) -> None:
        member.heartbeat_deadline_ms = deadline
        self.timer.schedule(timer_key(HEARTBEAT, group.group_id, member.member_id), deadline)

    def _cancel_heartbeat(self, group: ClassicGroup, member_id: str) -> None:
        self.timer.cancel(timer_key(HEARTBEAT, group.group_id, member_id))

    def _schedule_join(self, group: ClassicGroup, mode: str, deadline: int) -> None:
        group.join_mode = mode
        group.join_deadline_ms = deadline
        self.timer.schedule(timer_key(JOIN, group.group_id), deadline)

    def _cancel_join(self, group: ClassicGroup) -> None:
        group.join_mode = None
        group.join_deadline_ms = None
        self.timer.cancel(timer_key(JOIN, group.group_id))

    def _schedule_sync(self, group: ClassicGroup, deadline: int) -> None:
        group.sync_deadline_ms = deadline
        group.sync_generation = group.generation_id
        self.timer.schedule(timer_key(SYNC, group.group_id), deadline)

    def _cancel_sync(self, group: ClassicGroup) -> None:
        group.sync_deadline_ms = None
        group.sync_generation = None
        self.timer.cancel(timer_key(SYNC, group.group_id))

    def _cancel_pending(self, group: ClassicGroup, member_id: str) -> None:
        self.timer.cancel(timer_key(PENDING, group.group_id, member_id))

    def _cancel_all_group_timers(self, group: ClassicGroup) -> None:
        self._cancel_join(group)
        self._cancel_sync(group)
        for mid in group.members:
            self._cancel_heartbeat(group, mid)
        for mid in group.pending_members:
            self._cancel_pending(group, mid)

    # --- waiters -----------------------------------------------------------------------

    def _answer_join_waiter(self, member: ClassicMember, response: JoinGroupResponse) -> None:
        if member.join_waiter is not None:
            waiter, member.join_waiter = member.join_waiter, None
            self._respond(waiter.token, response)

    def _answer_sync_waiter(self, member: ClassicMember, response: SyncGroupResponse) -> None:
        if member.sync_waiter is not None:
            waiter, member.sync_waiter = member.sync_waiter, None
            self._respond(waiter.token, response)

    def _fail_waiters(self, member: ClassicMember, error: ErrorCode) -> None:
        self._answer_join_waiter(member, JoinGroupResponse(int(error), member_id=member.member_id))
        self._answer_sync_waiter(member, SyncGroupResponse(int(error)))

    # --- member validation (Java ClassicGroup.validateMember) -------------------------------

    @staticmethod
    def _validate_member(
        group: ClassicGroup, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None
