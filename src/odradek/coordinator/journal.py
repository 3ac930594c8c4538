"""The undo log that makes each coordinator call atomic.

A call (one request or one timer) changes the soft state of groups, of their
members and the shard's timers. Each of them saves itself into the active
journal just before its first change in the call: a group its soft fields
(scalars and shallow copies of its dicts, ``ClassicGroup.__setattr__`` and
``_GroupDict``), a member its fields (``ClassicMember.__setattr__``), the
shard's timer wrapper the previous deadline of each key it touches. So a
heartbeat saves one member and one timer, not the group, and a call that only
reads saves nothing. Before the call the shard also notes which of the groups
it names do not exist yet, so that undoing it removes a group it created.
``undo`` puts everything back.

Hard state (offsets, the last GroupMetadata record) is only changed by
``replay``, after the records were appended, so it never needs undoing.

The journal is found through a context variable because state is changed from
many places; calls are synchronous and never interleave, so at most one
journal is active at a time.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any, Protocol


class Journaled(Protocol):
    """An object that can save and restore its own fields."""

    def save_fields(self) -> tuple[Any, ...]: ...

    def restore_fields(self, saved: tuple[Any, ...]) -> None: ...


class Journal:
    """What one call changed, and how to put it back."""

    def __init__(self) -> None:
        # group id -> (group, saved soft fields), or None if the group did not exist
        self.groups: dict[str, tuple[Journaled, tuple[Any, ...]] | None] = {}
        self.objects: dict[int, tuple[Journaled, tuple[Any, ...]]] = {}
        self.timers: dict[str, int | None] = {}

    def note_absent(self, group_id: str) -> None:
        """``group_id`` does not exist before the call: undoing removes it if created."""
        self.groups.setdefault(group_id, None)

    def save_group(self, group: Any) -> None:
        """Save ``group`` before its first change in this call."""
        try:
            group_id = group.group_id
            if group_id in self.groups:
                return  # saved already, or created by this call
            saved = group.save_fields()
        except AttributeError:
            return  # still being constructed: a new group has nothing to restore
        self.groups[group_id] = (group, saved)

    def save_object(self, obj: Journaled) -> None:
        """Save ``obj``'s fields before its first change in this call."""
        key = id(obj)  # the saved tuple keeps obj alive, so its id cannot be reused
        if key in self.objects:
            return
        try:
            saved = obj.save_fields()
        except AttributeError:
            return  # still being constructed: a new object has nothing to restore
        self.objects[key] = (obj, saved)

    def save_timer(self, key: str, previous_deadline: int | None) -> None:
        self.timers.setdefault(key, previous_deadline)

    def undo(
        self,
        groups: dict[str, Any],
        restore_timer: Callable[[str, int | None], None],
    ) -> None:
        """Put every saved group, member and timer back as it was before the call."""
        for obj, saved in self.objects.values():
            obj.restore_fields(saved)
        for group_id, entry in self.groups.items():
            if entry is None:
                groups.pop(group_id, None)
            else:
                group, saved = entry
                group.restore_fields(saved)
                groups[group_id] = group
        for key, deadline in self.timers.items():
            restore_timer(key, deadline)


_ACTIVE: ContextVar[Journal | None] = ContextVar("odradek_coordinator_journal", default=None)


# The journal of the call in progress, or None (a bound method: no Python frame on
# the hot path, where every member and group change asks for it).
active_journal: Callable[[], Journal | None] = _ACTIVE.get


def start_recording(journal: Journal) -> Token[Journal | None]:
    """Make ``journal`` the one that changes are saved into, until ``stop_recording``."""
    return _ACTIVE.set(journal)


def stop_recording(token: Token[Journal | None]) -> None:
    _ACTIVE.reset(token)
