"""Transactional offset commits (KIP-98, KIP-447): TxnOffsetCommit and pending offsets.

A transactional producer commits a consumer group's offsets inside its
transaction: the offsets are written to ``__consumer_offsets`` as a
transactional batch of ordinary offset-commit records (the runtime writes
them with the producer's id and epoch), and stay *pending* until the
transaction coordinator's COMMIT or ABORT marker reaches the partition. On
COMMIT they become the committed offsets (unless a plain commit of the same
partition was written after them: the later record wins, as Kafka compares
their log offsets); on ABORT they are dropped. While one is pending,
OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for that
partition, offsets retention leaves the partition alone and an empty group
is not deleted.

Pending offsets are hard state: they change only by replay (of the
transactional records, and of the marker: ``replay_end_transaction``), so the
undo journal never needs them.

Validation is Kafka's for a transactional commit. To a classic group: the
member and generation are checked when given (KIP-447), a commit without them
is accepted even while the group has members, and a rebalance in progress
does not refuse it. To a consumer group (KIP-848): the generation is the
member's epoch, checked as for a plain commit but answered with
ILLEGAL_GENERATION when stale.
"""

from __future__ import annotations

from dataclasses import dataclass

from odradek.coordinator.classic import ClassicGroupManager
from odradek.coordinator.consumer_group import ConsumerGroup
from odradek.coordinator.context import ShardContext
from odradek.coordinator.errors import ErrorCode
from odradek.coordinator.group import CommittedOffset
from odradek.coordinator.records import OffsetCommitKey, OffsetCommitValue, offset_commit_record
from odradek.coordinator.state import GroupState
from odradek.coordinator.types import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
    OffsetCommitPartitionResponse,
    OffsetCommitResponse,
    OffsetCommitTopic,
    OffsetCommitTopicResponse,
    RequestToken,
)

S = GroupState
E = ErrorCode

OffsetKey = tuple[str, str, int]  # group, topic, partition


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitRequest:
    """TxnOffsetCommit, every wire version (v0-2 carry no member or generation)."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    topics: tuple[OffsetCommitTopic, ...]
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None


TxnOffsetCommitResponse = OffsetCommitResponse  # the same shape: an error per partition


class TxnOffsetManager:
    """The shard's pending transactional offsets (its own hard state), and TxnOffsetCommit."""

    def __init__(self, ctx: ShardContext, classic: ClassicGroupManager) -> None:
        self.ctx = ctx
        self.groups = ctx.groups
        self.classic = classic  # a committed transaction may create an offsets-only group
        # producer id -> the offsets its open transaction committed, by (group, topic, partition)
        self.pending: dict[int, dict[OffsetKey, CommittedOffset]] = {}
        # group -> producer ids with pending offsets for it
        self.open_by_group: dict[str, set[int]] = {}

    # ================================================================= TxnOffsetCommit

    def commit(self, now: int, token: RequestToken, req: TxnOffsetCommitRequest) -> None:
        error = E.INVALID_GROUP_ID if not req.group_id else self._validate_txn_offset_commit(req)
        results: dict[tuple[str, int], ErrorCode] = {}
        max_meta = self.ctx.config.offset_metadata_max_bytes
        for topic in req.topics:
            for p in topic.partitions:
                key = (topic.name, p.partition)
                if error is not None:
                    results[key] = error
                    continue
                metadata = p.metadata or ""
                if len(metadata) > max_meta:
                    results[key] = E.OFFSET_METADATA_TOO_LARGE
                    continue
                value = OffsetCommitValue(p.offset, p.leader_epoch, metadata, self.ctx.wall_ms, -1)
                self.ctx.record(offset_commit_record(req.group_id, topic.name, p.partition, value))
                results[key] = E.NONE
        self.ctx.respond(
            token,
            TxnOffsetCommitResponse(
                tuple(
                    OffsetCommitTopicResponse(
                        t.name,
                        tuple(
                            OffsetCommitPartitionResponse(
                                p.partition, int(results[(t.name, p.partition)])
                            )
                            for p in t.partitions
                        ),
                    )
                    for t in req.topics
                )
            ),
        )

    def _validate_txn_offset_commit(self, req: TxnOffsetCommitRequest) -> ErrorCode | None:
        """Kafka's validateTransactionalOffsetCommit (ClassicGroup.validateOffsetCommit with
        isTransactional): members and generations checked when given, no rebalance check."""
        group = self.groups.get(req.group_id)
        if group is None:
            # A simple group (no group management): its replayed records create it.
            return None if req.generation_id < 0 else E.ILLEGAL_GENERATION
        if isinstance(group, ConsumerGroup):
            return self._validate_txn_consumer_commit(group, req)
        if group.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if req.generation_id < 0 and group.state is S.EMPTY:
            return None
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            error = group.validate_member(req.member_id, req.group_instance_id)
            if error is not None:
                return error
            if req.generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        return None

    def _validate_txn_consumer_commit(
        self, group: ConsumerGroup, req: TxnOffsetCommitRequest
    ) -> ErrorCode | None:
        """Kafka's ConsumerGroup.validateOffsetCommit for a transactional commit: the
        generation is the member's epoch, any request version will do, and a stale epoch
        is ILLEGAL_GENERATION (validateTransactionalOffsetCommit maps it: transactional
        producers do not know STALE_MEMBER_EPOCH).

        As for plain commits, a consumer-protocol member's previous epoch is accepted for
        partitions it still owns (the heartbeat that moved it on may have overtaken the
        group metadata its producer sent).
        """
        if req.generation_id < 0 and not group.members:
            return None  # the admin client, or a consumer outside group management
        member = group.members.get(req.member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if req.generation_id == member.member_epoch:
            return None
        if (
            not member.uses_classic_protocol
            and req.generation_id == member.previous_member_epoch
            and member.owns_all(self.ctx.image, req.topics)
        ):
            return None
        return E.ILLEGAL_GENERATION

    # ================================================================= replay

    def replay_offset(
        self, producer_id: int, key: OffsetCommitKey, offset: CommittedOffset | None
    ) -> None:
        """A record of a transactional batch: pending until its transaction ends."""
        pending, by_group = self.pending, self.open_by_group
        if offset is None:  # a tombstone inside a transaction: Kafka never writes one
            return
        pending.setdefault(producer_id, {})[(key.group, key.topic, key.partition)] = offset
        by_group.setdefault(key.group, set()).add(producer_id)

    def forget_pending(self, group_id: str, topic: str, partition: int) -> None:
        """A tombstone for a partition also drops the pending offsets of it (Kafka)."""
        pending, by_group = self.pending, self.open_by_group
        for pid in by_group.get(group_id, ()):
            pending.get(pid, {}).pop((group_id, topic, partition), None)

    def replay_end_transaction(self, producer_id: int, commit: bool) -> None:
        """The transaction marker of ``producer_id`` reached this partition.

        Replaying it commits nothing of a call: it is written by the runtime
        between calls, on behalf of the transaction coordinator.
        """
        pending, by_group = self.pending, self.open_by_group
        offsets = pending.pop(producer_id, None)
        if offsets is None:
            return
        for group_id in {k[0] for k in offsets}:
            producers = by_group.get(group_id)
            if producers is not None:
                producers.discard(producer_id)
                if not producers:
                    del by_group[group_id]
        if not commit:
            return
        for (group_id, topic, partition), offset in offsets.items():
            group = self.groups.get(group_id) or self.classic.get_or_create(group_id)
            current = group.offsets.get((topic, partition))
            # The most recent record wins when transactional and plain commits mix.
            if current is None or offset.record_offset > current.record_offset:
                group.offsets[(topic, partition)] = offset

    # ================================================================= queries

    def has_pending(self, group_id: str, topic: str, partition: int) -> bool:
        pending, by_group = self.pending, self.open_by_group
        return any(
            (group_id, topic, partition) in pending.get(pid, {})
            for pid in by_group.get(group_id, ())
        )

    def has_open_transactions(self, group_id: str) -> bool:
        return group_id in self.open_by_group

    def pending_offsets(self, producer_id: int) -> dict[OffsetKey, CommittedOffset]:
        """What ``producer_id``'s open transaction committed here (tests, inspection)."""
        return dict(self.pending.get(producer_id, {}))
