"""Committed offsets: OffsetCommit, OffsetFetch, OffsetDelete, retention (KIP-211), replay."""

from __future__ import annotations

from collections.abc import Callable

from odradek.coordinator.classic import ClassicGroupManager
from odradek.coordinator.consumer_group import ConsumerGroup
from odradek.coordinator.consumer_protocol import CONSUMER_PROTOCOL_TYPE
from odradek.coordinator.context import ShardContext
from odradek.coordinator.errors import ErrorCode
from odradek.coordinator.group import ClassicGroup, CommittedOffset
from odradek.coordinator.records import (
    OffsetCommitKey,
    OffsetCommitValue,
    decode_offset_commit_value,
    offset_commit_record,
    offset_tombstone,
)
from odradek.coordinator.state import GroupState
from odradek.coordinator.txn_offsets import TxnOffsetManager
from odradek.coordinator.types import (
    DEFAULT_RETENTION_TIME,
    NO_LEADER_EPOCH,
    NO_OFFSET,
    OffsetCommitPartitionResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitTopicResponse,
    OffsetDeletePartitionResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteTopicResponse,
    OffsetFetchPartitionResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopicResponse,
    RequestToken,
)

S = GroupState
E = ErrorCode


class OffsetManager:
    """Committed offsets of every group: OffsetCommit, OffsetFetch, OffsetDelete, the
    offset records' replay, and which offsets retention expires.

    Transactional offsets are ``txn``'s (``txn_offsets.py``): a pending one holds
    back OffsetFetch(require_stable). A classic member's commit counts as its
    heartbeat, which ``classic`` schedules.
    """

    def __init__(
        self, ctx: ShardContext, classic: ClassicGroupManager, txn: TxnOffsetManager
    ) -> None:
        self.ctx = ctx
        self.groups = ctx.groups
        self.classic = classic
        self.txn = txn

    # ================================================================= OffsetCommit

    def commit(self, now: int, token: RequestToken, req: OffsetCommitRequest) -> None:
        # Kafka 4.x still takes commits for the empty group id (a pre-0.9 habit); no
        # client of a consumer group sends one, and Odradek refuses it like every
        # other group API does (docs/coordinator.md).
        error = E.INVALID_GROUP_ID if not req.group_id else self._validate_offset_commit(now, req)
        if error is not None:
            err = error
            self.ctx.respond(token, self._commit_response(req, lambda _t, _p: err))
            return
        max_meta = self.ctx.config.offset_metadata_max_bytes
        wall = self.ctx.wall_ms  # commit and expire timestamps are wall-clock, as Kafka's
        results: dict[tuple[str, int], ErrorCode] = {}
        for topic in req.topics:
            for p in topic.partitions:
                metadata = p.metadata or ""
                if len(metadata) > max_meta:
                    results[(topic.name, p.partition)] = E.OFFSET_METADATA_TOO_LARGE
                    continue
                expire = (
                    wall + req.retention_time_ms
                    if req.retention_time_ms != DEFAULT_RETENTION_TIME
                    else -1
                )
                value = OffsetCommitValue(p.offset, p.leader_epoch, metadata, wall, expire)
                self.ctx.record(offset_commit_record(req.group_id, topic.name, p.partition, value))
                results[(topic.name, p.partition)] = E.NONE
        self.ctx.respond(token, self._commit_response(req, lambda t, p: results[(t, p)]))

    def _validate_offset_commit(self, now: int, req: OffsetCommitRequest) -> ErrorCode | None:
        """Kafka 4.x OffsetMetadataManager / ClassicGroup.validateOffsetCommit."""
        group = self.groups.get(req.group_id)
        if isinstance(group, ConsumerGroup):
            return self._validate_consumer_commit(group, req)
        if group is None:
            if req.generation_id < 0:
                # A "simple" group that does not use group management (the admin client,
                # a manually assigned consumer), whatever member id it sends; replay of
                # the offset records creates it.
                return None
            return E.GROUP_ID_NOT_FOUND if req.unknown_group_is_not_found else E.ILLEGAL_GENERATION
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if req.generation_id < 0 and group.state is S.EMPTY:
            return None  # same: no member to validate in an Empty group
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            error = group.validate_member(req.member_id, req.group_instance_id)
            if error is not None:
                return error
            if req.generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        elif group.state is not S.EMPTY:
            # Only members may commit to a group that has members.
            return E.UNKNOWN_MEMBER_ID
        if group.state is S.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        if group.state in (S.STABLE, S.PREPARING_REBALANCE):
            # A commit counts as a heartbeat.
            member = group.members[req.member_id]
            self.classic.schedule_heartbeat(group, member, now + member.session_timeout_ms)
        return None

    def _validate_consumer_commit(
        self, group: ConsumerGroup, req: OffsetCommitRequest
    ) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetCommit: the member's current epoch (its
        generation, for a member speaking the classic protocol).

        Odradek also takes a consumer-protocol member's commit at its *previous* epoch
        for partitions it still owns: the heartbeat that moved it on may simply have
        overtaken the commit, and a member that still owns a partition has owned it
        since (Kafka 4.x accepts the same, KIP-1251, with per-partition epochs).
        """
        if req.generation_id < 0 and not group.members:
            return None  # the admin client, or a consumer outside group management
        member = group.members.get(req.member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if member.uses_classic_protocol:
            return None if req.generation_id == member.member_epoch else E.ILLEGAL_GENERATION
        if not req.unknown_group_is_not_found:
            return E.UNSUPPORTED_VERSION  # consumer-protocol members commit with v9+
        if req.generation_id == member.member_epoch:
            return None
        if req.generation_id == member.previous_member_epoch and member.owns_all(
            self.ctx.image, req.topics
        ):
            return None
        return E.STALE_MEMBER_EPOCH

    @staticmethod
    def _commit_response(
        req: OffsetCommitRequest, error_of: Callable[[str, int], ErrorCode]
    ) -> OffsetCommitResponse:
        return OffsetCommitResponse(
            tuple(
                OffsetCommitTopicResponse(
                    t.name,
                    tuple(
                        OffsetCommitPartitionResponse(
                            p.partition, int(error_of(t.name, p.partition))
                        )
                        for p in t.partitions
                    ),
                )
                for t in req.topics
            )
        )

    # ================================================================= OffsetFetch

    def fetch(self, now: int, token: RequestToken, req: OffsetFetchRequest) -> None:
        if not req.group_id:
            self.ctx.respond(token, OffsetFetchResponse(int(E.INVALID_GROUP_ID)))
            return
        group = self.groups.get(req.group_id)
        if isinstance(group, ConsumerGroup) and (
            req.member_id is not None or req.member_epoch >= 0
        ):
            # KIP-848 (v9+): a member must fetch with its current epoch.
            member = group.members.get(req.member_id or "")
            error = None
            if member is None:
                error = E.UNKNOWN_MEMBER_ID
            elif req.member_epoch != member.member_epoch:
                error = (
                    E.ILLEGAL_GENERATION if member.uses_classic_protocol else E.STALE_MEMBER_EPOCH
                )
            if error is not None:
                self.ctx.respond(token, OffsetFetchResponse(int(error)))
                return
        offsets = group.offsets if group is not None else {}
        if req.topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                by_topic.setdefault(topic, []).append(partition)
            wanted = [(t, tuple(ps)) for t, ps in by_topic.items()]
        else:
            wanted = [(t.name, tuple(t.partitions)) for t in req.topics]
        topics = []
        for name, partitions in wanted:
            parts = []
            for p in partitions:
                o = offsets.get((name, p))
                if req.require_stable and self.txn.has_pending(req.group_id, name, p):
                    # KIP-447: a transactional commit of it awaits its marker.
                    parts.append(
                        OffsetFetchPartitionResponse(
                            p, NO_OFFSET, NO_LEADER_EPOCH, "", int(E.UNSTABLE_OFFSET_COMMIT)
                        )
                    )
                elif o is None:
                    parts.append(OffsetFetchPartitionResponse(p, NO_OFFSET, NO_LEADER_EPOCH, ""))
                else:
                    parts.append(
                        OffsetFetchPartitionResponse(p, o.offset, o.leader_epoch, o.metadata)
                    )
            topics.append(OffsetFetchTopicResponse(name, tuple(parts)))
        self.ctx.respond(token, OffsetFetchResponse(int(E.NONE), tuple(topics)))

    # ================================================================= OffsetDelete

    def delete(self, now: int, token: RequestToken, req: OffsetDeleteRequest) -> None:
        if not req.group_id:
            self.ctx.respond(token, OffsetDeleteResponse(int(E.INVALID_GROUP_ID)))
            return
        group = self.groups.get(req.group_id)
        if group is None or group.state is S.DEAD:
            self.ctx.respond(token, OffsetDeleteResponse(int(E.GROUP_ID_NOT_FOUND)))
            return
        if isinstance(group, ConsumerGroup):
            names = group.subscribed_topic_names()
            subscribed = {t.name for t in req.topics if t.name in names}
        elif group.state is S.EMPTY:
            subscribed = set()
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            subscribed = {t.name for t in req.topics if group.is_subscribed_to_topic(t.name)}
        else:
            self.ctx.respond(token, OffsetDeleteResponse(int(E.NON_EMPTY_GROUP)))
            return
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                if t.name in subscribed:
                    parts.append(OffsetDeletePartitionResponse(p, int(E.GROUP_SUBSCRIBED_TO_TOPIC)))
                    continue
                if (t.name, p) in group.offsets:
                    self.ctx.record(offset_tombstone(group.group_id, t.name, p))
                parts.append(OffsetDeletePartitionResponse(p, int(E.NONE)))
            topics.append(OffsetDeleteTopicResponse(t.name, tuple(parts)))
        self.ctx.respond(token, OffsetDeleteResponse(int(E.NONE), tuple(topics)))

    # ================================================================= retention

    def expired_offsets(
        self, group: ClassicGroup | ConsumerGroup, now: int
    ) -> list[tuple[str, int]]:
        """``now`` is the wall clock: retention is measured on record timestamps."""
        retention = self.ctx.config.offsets_retention_ms

        def expired(o: CommittedOffset, base: int) -> bool:
            if o.expire_timestamp is not None:
                return now >= o.expire_timestamp
            return now - base >= retention

        if isinstance(group, ConsumerGroup):
            # Kafka's consumer groups: by commit time, for the topics nobody subscribes to.
            names = group.subscribed_topic_names()
            return [
                tp
                for tp, o in group.offsets.items()
                if tp[0] not in names and expired(o, o.commit_timestamp)
            ]

        if group.protocol_type and group.state is S.EMPTY:
            # KIP-211: retention starts when the group became Empty.
            ts = group.state_timestamp_ms
            return [
                tp
                for tp, o in group.offsets.items()
                if expired(o, ts if ts is not None else o.commit_timestamp)
            ]
        if (
            group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.state is S.STABLE
            and group.subscribed_topics is not None
        ):
            topics = group.subscribed_topics
            return [
                tp
                for tp, o in group.offsets.items()
                if tp[0] not in topics and expired(o, o.commit_timestamp)
            ]
        if not group.protocol_type:
            return [tp for tp, o in group.offsets.items() if expired(o, o.commit_timestamp)]
        return []

    # ================================================================= replay

    def replay(
        self, key: OffsetCommitKey, value: bytes | None, producer_id: int, offset: int
    ) -> None:
        """An offset commit record (None: its tombstone); ``producer_id`` >= 0: written by
        that producer's transaction, pending until its marker (``txn``)."""
        tp = (key.topic, key.partition)
        if value is None:
            self.txn.forget_pending(key.group, key.topic, key.partition)
            group = self.groups.get(key.group)
            if group is not None:
                group.offsets.pop(tp, None)
                if isinstance(group, ClassicGroup):
                    self.classic.maybe_forget_shell(group)
            return
        v = decode_offset_commit_value(value)
        group = self.groups.get(key.group) or self.classic.get_or_create(key.group)
        committed = CommittedOffset(
            v.offset,
            v.leader_epoch,
            v.metadata,
            v.commit_timestamp,
            v.expire_timestamp if v.expire_timestamp >= 0 else None,
            offset,
        )
        if producer_id >= 0:
            self.txn.replay_offset(producer_id, key, committed)
            return
        group.offsets[tp] = committed
