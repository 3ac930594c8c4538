"""What one shard's managers share, held once: :class:`ShardContext`.

The shard (``shard.py``) builds one context and hands it to each of its managers
(``classic``, ``consumer_handlers``, ``migration``, ``offsets``, ``txn_offsets``,
``admin``), as Kafka's ``GroupCoordinatorShard`` hands its state to its
``GroupMetadataManager`` and ``OffsetMetadataManager``. The context holds the
groups, the topics image, the groups' histories, the injected timer (journaled:
``JournaledTimer``) and ids, the configuration, and the output of the call in
progress. The undo journal of that call is the active one (``journal.py``).

Handlers never return values; they append records, responses and events to
the ``Result`` of the call in progress (``ctx.out``), through ``record``,
``respond`` and ``event``.

Two clocks reach the core. ``now`` (the ``now_ms`` of each call) is monotonic:
every deadline and timer is computed from it, so a wall-clock step can neither
expire a member early nor keep a timer from firing. ``ctx.wall_ms`` is the
wall clock of the call in progress: it only stamps what is written down
(commit and state timestamps in records, event times) and drives offsets
retention, which Kafka defines on record timestamps.
"""

from __future__ import annotations

from odradek.coordinator import events as ev
from odradek.coordinator.config import CoordinatorConfig
from odradek.coordinator.consumer_group import ConsumerGroup
from odradek.coordinator.group import ClassicGroup
from odradek.coordinator.history import (
    GroupHistories,
    batch_bytes,
    event_record,
    event_tombstone,
    record_bytes,
)
from odradek.coordinator.journal import active_journal
from odradek.coordinator.metadata import EMPTY_IMAGE, TopicsImage
from odradek.coordinator.state import GroupState
from odradek.coordinator.timer import IdGenerator, Timer
from odradek.coordinator.types import CoordinatorRecord, RequestToken, Response, Result


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


class ShardContext:
    """The state of one shard, shared by its managers.

    ``timer``, ``ids`` and ``groups`` are bound once and never rebound (managers may
    keep them); ``config``, ``image``, ``histories``, ``loaded``, ``out`` and
    ``wall_ms`` may change between calls, so managers read them here.
    """

    def __init__(self, config: CoordinatorConfig, timer: Timer, ids: IdGenerator) -> None:
        self.config = config
        self.timer = JournaledTimer(timer)
        self.ids = ids
        # Classic and consumer groups by id (a group id is one or the other), as Kafka's.
        self.groups: dict[str, ClassicGroup | ConsumerGroup] = {}
        # The cluster's topics, as the runtime last told (consumer groups assign them).
        self.image: TopicsImage = EMPTY_IMAGE
        self.loaded = False
        # Each group's event history (history.py): hard state, changed only by replay.
        self.histories = GroupHistories()
        # The call in progress: its output, its wall clock, and the groups whose whole
        # history it deletes (deleted groups).
        self.out = Result()
        self.wall_ms = 0
        self.histories_deleted: set[str] = set()

    def start_call(self, wall_ms: int) -> Result:
        """A new call (request, timer, load or unload) begins: a fresh output."""
        self.out = out = Result()
        self.wall_ms = wall_ms
        self.histories_deleted = set()
        return out

    # --- output -----------------------------------------------------------------

    def record(self, record: CoordinatorRecord) -> None:
        self.out.records.append(record)

    def respond(self, token: RequestToken, response: Response) -> None:
        self.out.responses.append((token, response))

    def event(self, kind: str, group_id: str, **fields: object) -> None:
        self.out.events.append(ev.make_event(kind, group_id, self.wall_ms, **fields))

    # --- groups -------------------------------------------------------------------

    def replace_group(self, group: ClassicGroup | ConsumerGroup) -> None:
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

    # --- the groups' histories (history.py) ------------------------------------------

    def delete_history(self, group_id: str) -> None:
        """The group is gone: tombstone every event it has (at the end of the call)."""
        self.histories_deleted.add(group_id)

    def write_history(self, out: Result) -> None:
        """Append the call's events to ``out.records`` as history records, after the
        call's own records, and the tombstones of deleted groups' histories.

        History never fails a call: in an atomic result a record is written only while
        the batch stays within ``max_message_bytes`` (the rest are skipped, and the
        events still reach the runtime's listeners); in any result a record that could
        not fit a batch alone is skipped. Deleted histories whose tombstones are
        skipped are tombstoned by the next sweep (``sweep_histories``).
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

        deleted = self.histories_deleted
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

    def sweep_histories(self) -> None:
        """Tombstone events older than ``group_history_retention_ms``, and the histories
        of groups that no longer exist (part of the periodic offsets cleanup)."""
        cutoff = self.wall_ms - self.config.group_history_retention_ms
        for group_id in self.histories.groups():
            group = self.groups.get(group_id)
            if group is None or group.state is GroupState.DEAD:
                self.delete_history(group_id)
                continue
            for slot in self.histories.slots_older_than(group_id, cutoff):
                self.record(event_tombstone(group_id, slot))
