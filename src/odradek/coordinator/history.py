"""A group's event history, kept as records of the group's own ``__consumer_offsets`` partition.

Every coordinator event of a group (state transitions, completed rebalances, members
removed, ...; see ``events``) is written with the call that produced it, after that
call's own records, as one record of an Odradek-private type. So the history is
appended, replicated, loaded and moved with the group exactly as its offsets are, and a
reader finds it where the group lives (docs/coordinator.md, "The group's history").

Record format::

    key    int16  GROUP_EVENT_KEY_VERSION (32000: a record type Kafka will not use)
           string group id (int16 length, UTF-8)
           int32  slot = sequence mod HISTORY_SLOTS
    value  int16  0 (value version)
           int64  sequence: the group's events counted from 0
           int64  at_ms: wall-clock time of the event
           string kind (int16 length)
           bytes  fields (int32 length): a UTF-8 JSON object

Retention needs no cleaner rule of its own. The key is (group, slot), so compaction
keeps the newest record of each slot: each group keeps its last ``HISTORY_SLOTS``
events, in sequence order. Older events are tombstoned by the coordinator's periodic
sweep (``CoordinatorConfig.group_history_retention_ms``), and all of a group's events
when the group is deleted. A group's sequence starts over at 0 only once none of its
events is left, so a slot is only ever overwritten by the event ``HISTORY_SLOTS`` later.

Kafka's own loader skips record types it does not know, so these records do not stop a
Kafka broker from loading the partition. Readers (``odradek groups history``, a web
console tailing ``__consumer_offsets``) decode them with ``decode_event_key`` and
``decode_event_value`` and fold them with ``GroupHistoryReader``; everything here is pure.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from odradek.coordinator.records import RecordFormatError, RecordReader, RecordWriter
from odradek.coordinator.types import CoordinatorEvent, CoordinatorRecord

GROUP_EVENT_KEY_VERSION = 32000
EVENT_VALUE_VERSION = 0
# Events kept per group (the ring of slots). Part of the record format: a different
# number would leave records in slots the new ring never overwrites.
HISTORY_SLOTS = 512
KEY_PREFIX = struct.pack(">h", GROUP_EVENT_KEY_VERSION)

# Bounds on one event record, so that an event can never make its call's batch too large:
# lists of member ids keep their first EVENT_LIST_LIMIT entries (the full length goes
# under "truncated"), and a value still over EVENT_VALUE_MAX_BYTES keeps less (below).
EVENT_LIST_LIMIT = 50
EVENT_VALUE_MAX_BYTES = 16 * 1024
EVENT_STRING_LIMIT = 256
TRUNCATED = "truncated"

# A record batch's header, and an upper bound on one record's framing around its key and
# value (length, attributes, timestamp and offset deltas, key and value lengths, headers
# count, all varints): what an append of these records needs at most.
BATCH_HEADER_BYTES = 61
RECORD_FRAMING_BYTES = 32

_VALUE_HEADER = struct.Struct(">hqq")  # version, sequence, at_ms
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def is_event_key(key: bytes) -> bool:
    """Whether a ``__consumer_offsets`` key is a group event's (cheap: two bytes)."""
    return key[:2] == KEY_PREFIX


def record_bytes(record: CoordinatorRecord) -> int:
    """An upper bound on what ``record`` takes in a record batch."""
    value = 0 if record.value is None else len(record.value)
    return len(record.key) + value + RECORD_FRAMING_BYTES


def batch_bytes(records: Iterable[CoordinatorRecord]) -> int:
    """An upper bound on the size of one batch holding ``records``."""
    return BATCH_HEADER_BYTES + sum(record_bytes(r) for r in records)


# --- the record format ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One event as its record holds it."""

    group_id: str
    sequence: int
    at_ms: int
    kind: str
    fields: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        """The event as one flat JSON object (what ``groups history --format json`` prints)."""
        return {
            "kind": self.kind,
            "group": self.group_id,
            "at_ms": self.at_ms,
            "sequence": self.sequence,
            **self.fields,
        }


def encode_event_key(group_id: str, slot: int) -> bytes:
    w = RecordWriter()
    w.i16(GROUP_EVENT_KEY_VERSION)
    w.string(group_id)
    w.i32(slot)
    return w.getvalue()


def decode_event_key(key: bytes) -> tuple[str, int] | None:
    """(group id, slot) of a group event's key; None for any other record type."""
    if not is_event_key(key):
        return None
    # By hand, not with RecordReader: replay reads one of these per event record.
    if len(key) < 8:
        raise RecordFormatError("truncated group event key")
    (length,) = _I16.unpack_from(key, 2)
    if length < 0 or len(key) != 8 + length:
        raise RecordFormatError("bad group event key length")
    (slot,) = _I32.unpack_from(key, 4 + length)
    try:
        group_id = key[4 : 4 + length].decode()
    except UnicodeDecodeError:
        raise RecordFormatError("group event key: invalid utf-8") from None
    if not 0 <= slot < HISTORY_SLOTS:
        raise RecordFormatError(f"bad group event key for {group_id!r} (slot {slot})")
    return group_id, slot


def event_key_prefix(group_id: str) -> bytes:
    """What every event key of ``group_id`` starts with (its slot follows: 4 bytes)."""
    name = group_id.encode()
    return KEY_PREFIX + _I16.pack(len(name)) + name


def _split_key(key: bytes) -> tuple[bytes, int]:
    """(prefix, slot) of an event key, checked but not decoded (replay's hot path)."""
    if len(key) < 8 or _I16.unpack_from(key, 2)[0] != len(key) - 8:
        raise RecordFormatError("bad group event key length")
    (slot,) = _I32.unpack_from(key, len(key) - 4)
    if not 0 <= slot < HISTORY_SLOTS:
        raise RecordFormatError(f"bad group event key slot {slot}")
    return key[:-4], slot


def encode_event_value(sequence: int, event: CoordinatorEvent) -> bytes:
    w = RecordWriter()
    w.i16(EVENT_VALUE_VERSION)
    w.i64(sequence)
    w.i64(event.at_ms)
    w.string(event.kind)
    w.bytes_(encode_fields(event.fields))
    return w.getvalue()


def decode_event_value(group_id: str, value: bytes) -> StoredEvent:
    r = RecordReader(value)
    version = r.i16()
    if version < 0:
        raise RecordFormatError(f"bad group event value version {version}")
    sequence = r.i64()
    at_ms = r.i64()
    kind = r.required_string()
    try:
        fields = json.loads(r.bytes_())
    except ValueError as exc:
        raise RecordFormatError(f"group event fields are not JSON: {exc}") from None
    if not isinstance(fields, dict):
        raise RecordFormatError("group event fields are not a JSON object")
    # Newer value versions may append fields after these: they are ignored.
    return StoredEvent(group_id, sequence, at_ms, kind, fields)


def event_header(value: bytes) -> tuple[int, int]:
    """(sequence, at_ms) of an event value, without decoding the rest (replay's need)."""
    if len(value) < _VALUE_HEADER.size:
        raise RecordFormatError("truncated group event value")
    version, sequence, at_ms = _VALUE_HEADER.unpack_from(value)
    if version < 0:
        raise RecordFormatError(f"bad group event value version {version}")
    return sequence, at_ms


def event_record(group_id: str, sequence: int, event: CoordinatorEvent) -> CoordinatorRecord:
    return CoordinatorRecord(
        encode_event_key(group_id, sequence % HISTORY_SLOTS), encode_event_value(sequence, event)
    )


def event_tombstone(group_id: str, slot: int) -> CoordinatorRecord:
    return CoordinatorRecord(encode_event_key(group_id, slot), None)


def _json(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, separators=(",", ":"), default=str).encode()


def encode_fields(fields: dict[str, Any]) -> bytes:
    """``fields`` as an event record keeps them: at most EVENT_VALUE_MAX_BYTES of JSON.

    Long lists keep their first EVENT_LIST_LIMIT entries; if that is still too large,
    lists are emptied and long strings cut; if even that is, only scalars stay. Each
    shortened list's full length is under ``"truncated"``, so counts stay right.
    """
    truncated: dict[str, int] = {}
    out: dict[str, Any] = {}
    for name, value in fields.items():
        if isinstance(value, list | tuple) and len(value) > EVENT_LIST_LIMIT:
            truncated[name] = len(value)
            value = list(value[:EVENT_LIST_LIMIT])
        out[name] = value
    if truncated:
        out[TRUNCATED] = truncated
    encoded = _json(out)
    if len(encoded) <= EVENT_VALUE_MAX_BYTES:
        return encoded
    return _json(_smaller_fields(out, truncated))


def _smaller_fields(out: dict[str, Any], truncated: dict[str, int]) -> dict[str, Any]:
    """``encode_fields``' second and third tries."""
    smaller: dict[str, Any] = {}
    for name, value in out.items():
        if name == TRUNCATED:
            continue
        if isinstance(value, list | tuple):
            truncated[name] = truncated.get(name, len(value))
            value = []
        elif isinstance(value, str) and len(value) > EVENT_STRING_LIMIT:
            value = value[:EVENT_STRING_LIMIT] + "…"
        smaller[name] = value
    smaller[TRUNCATED] = truncated
    if len(_json(smaller)) <= EVENT_VALUE_MAX_BYTES:
        return smaller
    scalars = {
        name: value
        for name, value in smaller.items()
        if value is None
        or isinstance(value, bool | int | float)
        or (isinstance(value, str) and len(value) <= EVENT_STRING_LIMIT + 1)
    }
    scalars[TRUNCATED] = truncated
    return scalars


def member_count(event: dict[str, Any], name: str) -> int:
    """How many entries the event's list ``name`` had before it was shortened."""
    truncated = event.get(TRUNCATED)
    if isinstance(truncated, dict) and isinstance(truncated.get(name), int):
        return int(truncated[name])
    value = event.get(name)
    return len(value) if isinstance(value, list) else 0


# --- the coordinator's view: sequences and what is live -------------------------------


@dataclass(slots=True)
class _Ring:
    next_sequence: int = 0
    # Live events (written, not tombstoned nor overwritten): sequence -> at_ms. Their
    # sequences are always within [next_sequence - HISTORY_SLOTS, next_sequence).
    live: dict[int, int] = field(default_factory=dict)


class GroupHistories:
    """Hard state of one shard's histories: each group's next sequence and live events.

    Changed only by ``replay`` of event records (like every hard state of the shard), so
    a shard loaded from the log has exactly the histories the live shard had. Groups are
    known by their key prefix (``event_key_prefix``): replay never decodes a group id.
    """

    def __init__(self) -> None:
        self._rings: dict[bytes, _Ring] = {}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GroupHistories) and self._rings == other._rings

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"GroupHistories({self._rings!r})"

    def replay(self, record: CoordinatorRecord) -> None:
        prefix, slot = _split_key(record.key)
        ring = self._rings.get(prefix)
        if record.value is None:
            if ring is None:
                return  # its record was compacted away already
            sequence = _sequence_in_slot(ring.next_sequence, slot)
            ring.live.pop(sequence, None)
            if not ring.live:
                del self._rings[prefix]  # nothing left: the next event is sequence 0
            return
        sequence, at_ms = event_header(record.value)
        if ring is None:
            ring = self._rings[prefix] = _Ring()
        elif sequence < ring.next_sequence - HISTORY_SLOTS:
            return  # overwritten already
        ring.live.pop(sequence - HISTORY_SLOTS, None)  # the event this one overwrote
        ring.live[sequence] = at_ms
        if sequence >= ring.next_sequence:
            ring.next_sequence = sequence + 1

    def _ring(self, group_id: str) -> _Ring | None:
        return self._rings.get(event_key_prefix(group_id))

    def next_sequence(self, group_id: str) -> int:
        ring = self._ring(group_id)
        return 0 if ring is None else ring.next_sequence

    def groups(self) -> list[str]:
        """The groups with live events."""
        return [prefix[4:].decode(errors="replace") for prefix in self._rings]

    def live_slots(self, group_id: str) -> list[int]:
        ring = self._ring(group_id)
        if ring is None:
            return []
        return [sequence % HISTORY_SLOTS for sequence in sorted(ring.live)]

    def slots_older_than(self, group_id: str, cutoff_ms: int) -> list[int]:
        """Slots of ``group_id``'s live events stamped before ``cutoff_ms`` (wall clock)."""
        ring = self._ring(group_id)
        if ring is None:
            return []
        return [s % HISTORY_SLOTS for s, at in sorted(ring.live.items()) if at < cutoff_ms]

    def __len__(self) -> int:
        return len(self._rings)


def _sequence_in_slot(next_sequence: int, slot: int) -> int:
    """The one sequence of the live window [next - SLOTS, next) that lives in ``slot``."""
    low = next_sequence - HISTORY_SLOTS
    return low + (slot - low) % HISTORY_SLOTS


# --- the reader's view: a group's history from the partition's records ------------------


class GroupHistoryReader:
    """Folds ``__consumer_offsets`` records, in offset order, into one group's history.

    Feed it every record of the group's partition (``add``), from its log start; records
    of other types and other groups cost a byte comparison. ``events()`` then gives the
    group's live events in sequence order: a slot's newer record replaces its older one,
    a tombstone empties it, exactly as compaction will.
    """

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self._prefix = event_key_prefix(group_id)
        self._key_length = len(self._prefix) + 4
        self._slots: dict[int, bytes] = {}

    def add(self, key: bytes | None, value: bytes | None) -> None:
        if key is None or len(key) != self._key_length or not key.startswith(self._prefix):
            return
        (slot,) = struct.unpack_from(">i", key, self._key_length - 4)
        if value is None:
            self._slots.pop(slot, None)
        else:
            self._slots[slot] = value

    def events(self) -> list[StoredEvent]:
        """The live events, oldest first (undecodable records are left out)."""
        out = []
        for value in self._slots.values():
            try:
                out.append(decode_event_value(self.group_id, value))
            except RecordFormatError:
                continue
        out.sort(key=lambda e: e.sequence)
        return out


def iter_group_events(
    records: Iterable[tuple[bytes | None, bytes | None]],
) -> Iterator[StoredEvent]:
    """Every group event among ``records`` (key, value) as written (tombstones skipped):
    for a reader tailing ``__consumer_offsets`` that wants all groups' events live."""
    for key, value in records:
        if key is None or value is None or not is_event_key(key):
            continue
        try:
            decoded = decode_event_key(key)
            if decoded is not None:
                yield decode_event_value(decoded[0], value)
        except RecordFormatError:
            continue
