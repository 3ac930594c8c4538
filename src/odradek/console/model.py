"""What the console knows of the cluster, kept up to date by its feeds and read by pages.

The feeds (``feed.py``) apply what they read: every record of ``__consumer_offsets``
(``apply_record``: commits, classic group metadata, KIP-848 member records, Odradek's
group events), ListGroups and DescribeGroups answers, committed offsets polled where
the topic may not be read, log end offsets and cluster metadata. Pages never ask the
cluster for the list of groups: they query the rows kept here (``list_groups``: search,
sort and a page over 20,000 groups in milliseconds), and a group's page reads its
entry (``group``). Each group's row (state, members, lag, verdict) is recomputed when
something of it changes, and every group's verdict once per ``evaluate`` (the verdict
depends on time: a consumer that stops committing turns STOPPED with nothing arriving).

All methods are thread-safe (one lock); the clock is injected.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.console import rebalances as rb
from odradek.console.verdict import (
    CommitWindow,
    GroupVerdict,
    PartitionVerdict,
    Verdict,
    judge_group,
    judge_partition,
)
from odradek.coordinator import consumer_records as cr
from odradek.coordinator.history import (
    GROUP_EVENT_KEY_VERSION,
    StoredEvent,
    decode_event_key,
    decode_event_value,
)
from odradek.coordinator.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
)
from odradek.protocol.consumer_protocol import ConsumerProtocolError, flatten, parse_assignment

TP = tuple[str, int]
# A commit replayed from long ago gets no lag: the log end it was behind is not known.
LAG_KNOWN_WITHIN_MS = 60_000
MAX_OBSERVATIONS = 400  # per group, for the rebalances inferred on brokers without events
MAX_OWNERSHIP_CHANGES = 2_000  # per group, for the swimlanes
MAX_ELECTIONS = 200
SORT_KEYS = ("group", "state", "protocol", "members", "lag", "verdict")
NO_LAG = -1


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None = None
    client_id: str = ""
    host: str = ""
    assignment: tuple[TP, ...] = ()
    # KIP-848 members: where the coordinator is taking them, and their epoch.
    target: tuple[TP, ...] | None = None
    epoch: int | None = None
    member_type: str | None = None  # "classic" for a classic member inside a consumer group


@dataclass(slots=True)
class Group:
    group_id: str
    state: str = "Unknown"
    group_type: str = "classic"  # the rebalance protocol: classic or consumer (KIP-848)
    protocol_type: str = ""  # "consumer" for Kafka consumers, "" for commit-only groups
    assignor: str = ""
    generation: int | None = None
    members: dict[str, Member] = field(default_factory=dict)
    members_known: bool = False
    coordinator: int | None = None
    committed: dict[TP, tuple[int, int]] = field(default_factory=dict)  # tp -> (offset, at_ms)
    windows: dict[TP, CommitWindow] = field(default_factory=dict)
    event_slots: dict[int, StoredEvent] = field(default_factory=dict)
    observations: deque[rb.Observation] = field(
        default_factory=lambda: deque(maxlen=MAX_OBSERVATIONS)
    )
    ownership: deque[rb.Ownership] = field(
        default_factory=lambda: deque(maxlen=MAX_OWNERSHIP_CHANGES)
    )
    owned: dict[str, tuple[TP, ...]] = field(default_factory=dict)  # as of the last change
    from_records: bool = False  # its metadata records are read: describes add no ownership
    # Partitions of members a session or poll timeout removed, and since when they had not
    # been committed (they stopped before the rebalance began), by the rebalance's generation.
    stalls: dict[int, dict[TP, int]] = field(default_factory=dict)
    # KIP-848 members as their records hold them (the tail), by member id.
    consumer_members: dict[str, Member] = field(default_factory=dict)
    # Cached for the listing: recomputed by ``_refresh_row``.
    lag: int = NO_LAG
    verdict: GroupVerdict | None = None
    partition_lags: dict[TP, int] = field(default_factory=dict)
    partition_verdicts: dict[TP, PartitionVerdict] = field(default_factory=dict)
    version: int = 0

    @property
    def member_count(self) -> int | None:
        if self.group_type == "consumer" and self.consumer_members and not self.members_known:
            return len(self.consumer_members)
        return len(self.members) if self.members_known else None

    @property
    def protocol_label(self) -> str:
        return "consumer" if self.group_type == "consumer" else "classic"

    def events(self) -> list[dict[str, Any]]:
        return [e.as_dict() for e in sorted(self.event_slots.values(), key=lambda e: e.sequence)]


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One line of the groups page."""

    group: str
    state: str
    protocol: str
    members: int | None
    lag: int
    verdict: str
    verdict_rank: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "state": self.state,
            "protocol": self.protocol,
            "members": self.members,
            "lag": None if self.lag == NO_LAG else self.lag,
            "verdict": self.verdict,
        }


@dataclass(slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Election:
    at_ms: int
    topic: str
    partition: int
    old_leader: int
    new_leader: int
    leader_epoch: int


@dataclass(slots=True)
class ClusterView:
    cluster_id: str | None = None
    controller: int | None = None
    brokers: dict[int, tuple[str, int, str | None]] = field(default_factory=dict)
    # Brokers seen before and missing now (killed, or shut down): id -> last seen ms.
    gone: dict[int, int] = field(default_factory=dict)
    partitions: dict[TP, PartitionInfo] = field(default_factory=dict)
    topic_ids: dict[str, Any] = field(default_factory=dict)
    internal: set[str] = field(default_factory=set)
    elections: deque[Election] = field(default_factory=lambda: deque(maxlen=MAX_ELECTIONS))
    updated_ms: int = 0
    error: str | None = None


class Model:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.lock = threading.RLock()
        self.groups: dict[str, Group] = {}
        self.log_ends: dict[TP, int] = {}
        self._tp_groups: dict[TP, set[str]] = {}
        self.topic_names: dict[uuid.UUID, str] = {}
        self.cluster = ClusterView()
        self.version = 0  # bumped by every change: the live pages' cue
        self.cluster_version = 0  # bumped when brokers, leaders or replicas change
        self.tail_state = "starting"  # catching up, live, or why it cannot read
        self.tail_readable = True
        self.events_seen = False  # an Odradek broker: rebalances come from its events
        self._sorted: dict[str, tuple[int, list[GroupRow]]] = {}
        self._rows: dict[str, GroupRow] = {}
        # Groups whose row is redone once the change in progress is applied (a batch of
        # records may commit 10,000 partitions of one group: one row, not 10,000).
        self._dirty: set[str] = set()
        self._rejudged: set[str] = set()  # of those, the ones a partition verdict changed
        self._batch_depth = 0

    def now_ms(self) -> int:
        return int(self._clock() * 1000)

    # --- feeds -----------------------------------------------------------------------------

    def _group(self, group_id: str) -> Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = Group(group_id)
        return g

    def _touch(self, g: Group) -> None:
        self.version += 1
        g.version = self.version

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Apply several changes under the lock; rows are redone once, at the end."""
        with self.lock:
            self._batch_depth += 1
            try:
                yield
            finally:
                self._batch_depth -= 1
                if not self._batch_depth:
                    for group_id in self._dirty:
                        g = self.groups.get(group_id)
                        if g is not None:
                            self._finish(g, group_id in self._rejudged)
                    self._dirty.clear()
                    self._rejudged.clear()

    def _mark(self, g: Group, *, rejudged: bool = True) -> None:
        self._dirty.add(g.group_id)
        if rejudged:
            self._rejudged.add(g.group_id)

    def apply_record(self, key: bytes | None, value: bytes | None, at_ms: int) -> None:
        """One record of ``__consumer_offsets`` (raw key and value; ``at_ms`` its
        timestamp). Records of unknown types, and undecodable ones, are skipped, as
        Kafka's loader does."""
        if key is None or len(key) < 2:
            return
        kind = int.from_bytes(key[:2], "big", signed=True)
        with self.batch(), contextlib.suppress(RecordFormatError, ConsumerProtocolError):
            if kind in (0, 1, 2):
                decoded = decode_key(key)
                if isinstance(decoded, OffsetCommitKey):
                    self._apply_commit(decoded, value, at_ms)
                elif isinstance(decoded, GroupMetadataKey):
                    self._apply_group_metadata(decoded.group, value, at_ms)
            elif kind == GROUP_EVENT_KEY_VERSION:
                self._apply_event(key, value)
            elif kind in cr.CONSUMER_KEY_VERSIONS:
                self._apply_consumer_record(key, value, at_ms)

    def _apply_commit(self, key: OffsetCommitKey, value: bytes | None, at_ms: int) -> None:
        g = self._group(key.group)
        tp = (key.topic, key.partition)
        if value is None:
            g.committed.pop(tp, None)
            g.windows.pop(tp, None)
            self._tp_groups.get(tp, set()).discard(key.group)
        else:
            commit = decode_offset_commit_value(value)
            stamp = commit.commit_timestamp if commit.commit_timestamp > 0 else at_ms
            self._commit(g, tp, commit.offset, stamp)
        self._judge(g, tp, self.now_ms())

    def _commit(self, g: Group, tp: TP, offset: int, at_ms: int) -> None:
        g.committed[tp] = (offset, at_ms)
        self._tp_groups.setdefault(tp, set()).add(g.group_id)
        end = self.log_ends.get(tp)
        lag = -1
        if end is not None and abs(self.now_ms() - at_ms) <= LAG_KNOWN_WITHIN_MS:
            lag = max(end - offset, 0)
        window = g.windows.get(tp)
        if window is None:
            window = g.windows[tp] = CommitWindow()
        window.add(at_ms, offset, lag)

    def _judge(self, g: Group, tp: TP, now_ms: int) -> None:
        """One partition's lag and verdict; the group's row follows at the batch's end."""
        committed = g.committed.get(tp)
        end = self.log_ends.get(tp)
        window = g.windows.get(tp)
        if committed is None or end is None:
            g.partition_lags.pop(tp, None)
            g.partition_verdicts.pop(tp, None)
        else:
            lag = max(end - committed[0], 0)
            g.partition_lags[tp] = lag
            if window is not None:
                g.partition_verdicts[tp] = judge_partition(window, lag, now_ms)
            else:
                g.partition_verdicts.pop(tp, None)
        self._mark(g)

    def _judge_all(self, g: Group, now_ms: int) -> None:
        for tp in set(g.committed) | set(g.partition_lags):
            self._judge(g, tp, now_ms)
        self._mark(g)

    def _relag(self, g: Group, tp: TP, now_ms: int) -> None:
        """A new log end for one of the group's partitions: its lag, and its verdict only
        where the lag came to or left 0 (Burrow's first rule); the rest waits for the next
        ``evaluate`` (at 20,000 groups on one busy partition, judging every group at each
        poll was most of the console's work)."""
        committed = g.committed.get(tp)
        end = self.log_ends.get(tp)
        before = g.partition_lags.get(tp)
        if committed is None or end is None or before is None:
            self._judge(g, tp, now_ms)
            return
        lag = max(end - committed[0], 0)
        g.partition_lags[tp] = lag
        if (lag == 0) != (before == 0):
            self._judge(g, tp, now_ms)
        else:
            self._mark(g, rejudged=False)

    def _finish(self, g: Group, rejudged: bool = True) -> None:
        """The group's row: totals over its partitions (each already judged)."""
        g.lag = sum(g.partition_lags.values()) if g.partition_lags else NO_LAG
        verdicts = g.partition_verdicts
        if rejudged or g.verdict is None:
            g.verdict = judge_group(verdicts.values()) if verdicts else None
        self._touch(g)
        self._rows[g.group_id] = self._row_of(g)

    def _apply_group_metadata(self, group_id: str, value: bytes | None, at_ms: int) -> None:
        if value is None:
            g = self.groups.get(group_id)
            if g is not None and not g.committed:
                self._forget(group_id)
            elif g is not None:
                g.members.clear()
                g.state = "Empty" if g.state not in ("Dead",) else g.state
                self._touch(g)
            return
        meta = decode_group_metadata_value(value)
        g = self._group(group_id)
        g.protocol_type = meta.protocol_type
        g.assignor = meta.protocol or ""
        g.generation = meta.generation
        members: dict[str, Member] = {}
        for m in meta.members:
            assigned: tuple[TP, ...] = ()
            if meta.protocol_type == "consumer" and m.assignment:
                assigned = tuple(sorted(flatten(parse_assignment(m.assignment).partitions)))
            members[m.member_id] = Member(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, assigned
            )
        g.from_records = True
        # A record written when the join phase ends carries no assignment yet: it says
        # nothing about who owns what (the one written at the sync does).
        if not members or any(m.assignment for m in members.values()):
            self._own(g, {mid: m.assignment for mid, m in members.items()}, at_ms)
        self._set_members(g, members, at_ms, source_state="Stable" if members else "Empty")
        g.observations.append(
            rb.Observation(
                at_ms, "Stable" if members else "Empty", meta.generation, frozenset(members)
            )
        )
        self._mark(g)

    @staticmethod
    def _own(g: Group, owned: Mapping[str, tuple[TP, ...]], at_ms: int) -> None:
        """Who owns what from ``at_ms`` on (every member of the group): the changes go to
        the swimlanes."""
        for mid, tps in owned.items():
            if g.owned.get(mid, ()) != tps:
                g.ownership.append(rb.Ownership(at_ms, mid, tps))
        for mid in g.owned.keys() - owned.keys():
            if g.owned[mid]:
                g.ownership.append(rb.Ownership(at_ms, mid, ()))
        g.owned = {mid: tps for mid, tps in owned.items() if tps}

    def _set_members(
        self, g: Group, members: dict[str, Member], at_ms: int, source_state: str | None
    ) -> None:
        g.members = members
        g.members_known = True
        if source_state is not None and g.state in ("Unknown", "Empty", "Stable"):
            g.state = source_state

    def _apply_event(self, key: bytes, value: bytes | None) -> None:
        decoded = decode_event_key(key)
        if decoded is None:
            return
        group_id, slot = decoded
        g = self._group(group_id)
        if value is None:
            g.event_slots.pop(slot, None)
        else:
            event = decode_event_value(group_id, value)
            g.event_slots[slot] = event
            self.events_seen = True
            if event.kind == "rebalance_completed":
                self._note_stalls(g, event)
            if event.kind == "state_transition":
                to_state = event.fields.get("to_state")
                if isinstance(to_state, str):
                    g.state = to_state
                if event.fields.get("protocol") == "consumer":
                    g.group_type = "consumer"
        self._touch(g)

    def _note_stalls(self, g: Group, event: StoredEvent) -> None:
        """A rebalance that removed members whose session (or poll interval) ran out: their
        partitions stopped at the members' last commits, before the rebalance began."""
        f = event.fields
        causes = rb.causes_of(f.get("reasons") or ())
        if not f.get("left") or not {rb.SESSION_TIMEOUT, rb.POLL_TIMEOUT} & set(causes):
            return
        started = event.at_ms - int(f.get("duration_ms") or 0)
        owned = rb.owners_at(g.ownership, started)
        since: dict[TP, int] = {}
        for mid in f.get("left") or ():
            for tp in owned.get(str(mid), ()):
                window = g.windows.get(tp)
                if window is None or not window.commits:
                    continue
                last = [c.at_ms for c in window.commits if c.at_ms <= started]
                if last and last[-1] < started:
                    since[tp] = last[-1]
        if since and isinstance(f.get("generation"), int):
            g.stalls[int(f["generation"])] = since

    def _apply_consumer_record(self, key: bytes, value: bytes | None, at_ms: int) -> None:
        k = cr.decode_consumer_key(key)
        if k is None:
            return
        g = self._group(k.group)
        g.group_type = "consumer"
        g.protocol_type = "consumer"
        g.from_records = True
        if k.kind == cr.GROUP_METADATA:
            if value is None:
                if not g.committed:
                    self._forget(k.group)
                return
            decoded = cr.decode_consumer_value(k.kind, value)
            assert isinstance(decoded, cr.GroupEpochValue)
            g.generation = decoded.epoch
        elif k.kind == cr.MEMBER_METADATA and k.member is not None:
            if value is None:
                g.consumer_members.pop(k.member, None)
                if k.member in g.owned:
                    self._own(g, {m: t for m, t in g.owned.items() if m != k.member}, at_ms)
            else:
                meta = cr.decode_consumer_value(k.kind, value)
                assert isinstance(meta, cr.MemberMetadataValue)
                m = g.consumer_members.get(k.member) or Member(k.member)
                m.instance_id, m.client_id, m.host = (
                    meta.instance_id,
                    meta.client_id,
                    meta.client_host,
                )
                g.consumer_members[k.member] = m
                if meta.server_assignor:
                    g.assignor = meta.server_assignor
        elif k.kind == cr.TARGET_ASSIGNMENT_MEMBER and k.member is not None and value is not None:
            target = cr.decode_consumer_value(k.kind, value)
            assert isinstance(target, cr.TargetAssignmentMemberValue)
            m = g.consumer_members.get(k.member) or Member(k.member)
            m.target = self._names(target.partitions)
            g.consumer_members[k.member] = m
        elif k.kind == cr.CURRENT_MEMBER_ASSIGNMENT and k.member is not None and value is not None:
            current = cr.decode_consumer_value(k.kind, value)
            assert isinstance(current, cr.CurrentAssignmentValue)
            assigned = self._names(current.assigned)
            m = g.consumer_members.get(k.member) or Member(k.member)
            m.epoch = current.member_epoch
            self._own(g, {**g.owned, k.member: assigned}, at_ms)
            m.assignment = assigned
            g.consumer_members[k.member] = m
        self._mark(g)

    def _names(self, assignment: Mapping[uuid.UUID, Iterable[int]]) -> tuple[TP, ...]:
        """A KIP-848 assignment (topic ids) as (topic name, partition) pairs."""
        return tuple(
            sorted(
                (self.topic_names.get(tid, str(tid)), p)
                for tid, ps in assignment.items()
                for p in ps
            )
        )

    def _forget(self, group_id: str) -> None:
        g = self.groups.pop(group_id, None)
        if g is None:
            return
        for tp in g.committed:
            self._tp_groups.get(tp, set()).discard(group_id)
        self._rows.pop(group_id, None)
        self._dirty.discard(group_id)
        self._rejudged.discard(group_id)
        self.version += 1

    def apply_listing(self, listings: Iterable[Any], complete: bool = True) -> None:
        """A ListGroups answer (``ConsumerGroupListing``s). With ``complete``, groups the
        brokers no longer list and that have nothing committed are dropped."""
        now = self.now_ms()
        with self.batch():
            seen = set()
            for listing in listings:
                seen.add(listing.group_id)
                g = self._group(listing.group_id)
                changed = False
                state = listing.state or g.state
                if state != g.state:
                    g.state = state
                    g.observations.append(rb.Observation(now, state, g.generation, None))
                    changed = True
                kind = listing.type or g.group_type
                if kind != g.group_type or g.coordinator != listing.coordinator:
                    g.group_type, g.coordinator = kind, listing.coordinator
                    changed = True
                if listing.protocol_type and listing.protocol_type != g.protocol_type:
                    g.protocol_type = listing.protocol_type
                    changed = True
                if state == "Empty" and g.members:
                    g.members = {}
                    changed = True
                if changed:
                    self._mark(g)
            if complete:
                for group_id in [gid for gid, g in self.groups.items() if gid not in seen]:
                    g = self.groups[group_id]
                    if not g.committed and not g.event_slots:
                        self._forget(group_id)
                    elif g.state not in ("Empty", "Dead"):
                        g.state = "Empty" if g.committed else "Dead"
                        g.members = {}
                        self._mark(g)

    def apply_description(self, d: Any) -> None:
        """A ``ConsumerGroupDescription`` (DescribeGroups or ConsumerGroupDescribe)."""
        now = self.now_ms()
        with self.batch():
            if not d.exists:
                g = self.groups.get(d.group_id)
                if g is not None and not g.committed:
                    self._forget(d.group_id)
                return
            g = self._group(d.group_id)
            g.state = d.state
            g.group_type = d.type
            g.protocol_type = d.protocol_type
            g.assignor = d.protocol or g.assignor
            if d.type == "consumer" and d.group_epoch is not None:
                g.generation = d.group_epoch
            if d.coordinator is not None:
                g.coordinator = d.coordinator.node_id
            members = {
                m.member_id: Member(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.host,
                    tuple((tp[0], tp[1]) for tp in m.assignment),
                    None
                    if m.target_assignment is None
                    else tuple((tp[0], tp[1]) for tp in m.target_assignment),
                    m.member_epoch,
                    m.member_type,
                )
                for m in d.members
            }
            # DescribeGroups leaves assignments out while a classic group rebalances.
            settled = d.state in rb.SETTLED_STATES
            if (settled or d.type == "consumer") and not g.from_records:
                # Where the group's records cannot be read, polls are all there is.
                self._own(g, {mid: m.assignment for mid, m in members.items()}, now)
            self._set_members(g, members, now, None)
            g.observations.append(
                rb.Observation(
                    now, d.state, g.generation if d.type == "consumer" else None, frozenset(members)
                )
            )
            self._mark(g)

    def apply_committed(self, group_id: str, offsets: Mapping[Any, int]) -> None:
        """Committed offsets polled with OffsetFetch (where the topic may not be read)."""
        now = self.now_ms()
        with self.batch():
            g = self._group(group_id)
            for tp, offset in offsets.items():
                key = (tp[0], tp[1])
                before = g.committed.get(key)
                if before is None or before[0] != offset:
                    self._commit(g, key, offset, now)
            for gone in set(g.committed) - {(tp[0], tp[1]) for tp in offsets}:
                g.committed.pop(gone, None)
                g.windows.pop(gone, None)
            self._judge_all(g, now)

    def apply_log_ends(self, ends: Mapping[Any, int]) -> None:
        now = self.now_ms()
        with self.batch():
            for tp, end in ends.items():
                key = (tp[0], tp[1])
                if self.log_ends.get(key) == end:
                    continue
                self.log_ends[key] = end
                for group_id in self._tp_groups.get(key, ()):
                    g = self.groups.get(group_id)
                    if g is not None:
                        self._relag(g, key, now)

    def apply_metadata(
        self,
        cluster_id: str | None,
        controller: int | None,
        brokers: Iterable[Any],
        topics: Mapping[str, Any],
    ) -> None:
        """DescribeCluster's brokers and every topic's partitions (``TopicDescription``s
        without offsets); leader changes are kept as the elections the console saw."""
        now = self.now_ms()
        with self.lock:
            c = self.cluster
            before = (c.cluster_id, c.controller, dict(c.brokers), dict(c.partitions))
            c.cluster_id, c.controller = cluster_id, controller
            present = {b.node_id: (b.host, b.port, b.rack) for b in brokers}
            for node in set(c.brokers) - set(present):
                c.gone[node] = now
            for node in present:
                c.gone.pop(node, None)
            c.brokers = present
            partitions: dict[TP, PartitionInfo] = {}
            for name, t in topics.items():
                if t.topic_id is not None:
                    c.topic_ids[name] = t.topic_id
                    with contextlib.suppress(ValueError, TypeError, AttributeError):
                        self.topic_names[uuid.UUID(str(t.topic_id))] = name
                if t.internal:
                    c.internal.add(name)
                for p in t.partitions:
                    tp = (name, p.partition)
                    old = c.partitions.get(tp)
                    epoch = getattr(p, "leader_epoch", -1)
                    info = PartitionInfo(
                        name,
                        p.partition,
                        p.leader,
                        epoch,
                        tuple(p.replicas),
                        tuple(p.isr),
                        tuple(getattr(p, "offline_replicas", ())),
                    )
                    if old is not None and old.leader != p.leader:
                        c.elections.append(
                            Election(now, name, p.partition, old.leader, p.leader, epoch)
                        )
                    partitions[tp] = info
            c.partitions = partitions
            c.updated_ms = now
            c.error = None
            if before != (c.cluster_id, c.controller, c.brokers, c.partitions):
                self.version += 1
                self.cluster_version += 1

    # --- evaluation and sampling ---------------------------------------------------------

    @staticmethod
    def _row_of(g: Group) -> GroupRow:
        v = g.verdict
        return GroupRow(
            g.group_id,
            g.state,
            g.protocol_label,
            g.member_count,
            g.lag,
            v.label if v is not None else "-",
            int(v.worst) if v is not None else -1,
        )

    def evaluate(self) -> None:
        """Judge every group again (time alone turns a silent consumer STOPPED)."""
        now = self.now_ms()
        with self.batch():
            for g in list(self.groups.values()):
                if g.committed or g.partition_lags:
                    self._judge_all(g, now)

    def samples(self) -> list[tuple[str, tuple[TP, ...], tuple[tuple[int, int], ...]]]:
        """(group, layout, values) of every group with committed or assigned partitions:
        what the lag history keeps each minute."""
        out = []
        with self.lock:
            for g in self.groups.values():
                tps = set(g.committed)
                for m in g.members.values():
                    tps.update(m.assignment)
                if not tps:
                    continue
                layout = tuple(sorted(tps))
                values = tuple(
                    (
                        g.committed[tp][0] if tp in g.committed else -1,
                        self.log_ends.get(tp, -1),
                    )
                    for tp in layout
                )
                out.append((g.group_id, layout, values))
        return out

    def log_end_partitions(self) -> list[TP]:
        """The partitions whose log ends lag needs: every committed or assigned one."""
        with self.lock:
            tps = {tp for tp, groups in self._tp_groups.items() if groups}
            for g in self.groups.values():
                for m in g.members.values():
                    tps.update(m.assignment)
            return sorted(tps)

    # --- queries ---------------------------------------------------------------------------

    def list_groups(
        self,
        query: str = "",
        sort: str = "group",
        descending: bool = False,
        page: int = 1,
        size: int = 50,
    ) -> tuple[int, list[GroupRow]]:
        """(how many groups match, the rows of one page)."""
        if sort not in SORT_KEYS:
            sort = "group"
        with self.lock:
            cached = self._sorted.get(sort)
            if cached is None or cached[0] != self.version:
                rows = list(self._rows.values())
                rows.sort(key=_sort_key(sort))
                cached = self._sorted[sort] = (self.version, rows)
        rows = cached[1]
        if query:
            needle = query.lower()
            rows = [r for r in rows if needle in r.group.lower()]
        if descending:
            rows = rows[::-1]
        start = max(page - 1, 0) * size
        return len(rows), rows[start : start + size]

    def group(self, group_id: str) -> Group | None:
        with self.lock:
            return self.groups.get(group_id)

    def spans(self, g: Group) -> list[rb.Span]:
        with self.lock:
            events = g.events()
            if not events:
                return rb.infer(list(g.observations))
            spans = rb.from_events(events)
            for span in spans:
                if span.generation in g.stalls:
                    span.stalled_since = dict(g.stalls[span.generation])
            return spans

    def group_count(self) -> int:
        return len(self.groups)


def _sort_key(sort: str) -> Callable[[GroupRow], Any]:
    if sort == "state":
        return lambda r: (r.state, r.group)
    if sort == "protocol":
        return lambda r: (r.protocol, r.group)
    if sort == "members":
        return lambda r: (r.members if r.members is not None else -1, r.group)
    if sort == "lag":
        return lambda r: (r.lag, r.group)
    if sort == "verdict":
        return lambda r: (r.verdict_rank, r.lag, r.group)
    return lambda r: r.group


def partition_rows(
    model: Model, g: Group, start: int = 0, stop: int | None = None
) -> tuple[int, list[dict[str, Any]]]:
    """(how many partitions, the rows [start:stop]): per partition committed, log end,
    lag, verdict and owner (a snapshot for pages)."""
    with model.lock:
        owner = {tp: m.member_id for m in g.members.values() for tp in m.assignment}
        everything = sorted(set(g.committed) | set(owner))
        rows = []
        for tp in everything[start:stop]:
            committed = g.committed.get(tp)
            end = model.log_ends.get(tp)
            lag = max(end - committed[0], 0) if committed is not None and end is not None else None
            pv = g.partition_verdicts.get(tp)
            rows.append(
                {
                    "topic": tp[0],
                    "partition": tp[1],
                    "committed_offset": committed[0] if committed else None,
                    "committed_ms": committed[1] if committed else None,
                    "log_end_offset": end,
                    "lag": lag,
                    "verdict": pv.verdict.name if pv is not None else None,
                    "seconds_to_clear": pv.seconds_to_clear if pv is not None else None,
                    "member_id": owner.get(tp),
                }
            )
        return len(everything), rows


__all__ = ["Group", "GroupRow", "Member", "Model", "Verdict", "partition_rows"]
