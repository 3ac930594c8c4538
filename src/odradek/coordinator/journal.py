"""The undo log that makes each coordinator call atomic.

A call (one request or one timer) mutates the soft state of the groups it
names, the members of those groups and the shard's timers. Before it runs, the
shard saves each named group's soft fields (cheap: scalars and shallow dict
copies); members save their own fields the first time they are changed while a
journal is active (``ClassicMember.__setattr__``), so a heartbeat costs one
member copy, not one per member of the group; the shard's timer wrapper saves
the previous deadline of every key it touches. ``undo`` puts all of it back.

Hard state (offsets, the last GroupMetadata record) is only changed by
``replay``, after the records were appended, so it never needs undoing.

The journal is found through a context variable because members are changed
from many places; calls are synchronous and never interleave, so at most one
journal is active at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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

    def save_group(self, group_id: str, group: Journaled | None) -> None:
        if group_id not in self.groups:
            self.groups[group_id] = None if group is None else (group, group.save_fields())

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


def active_journal() -> Journal | None:
    return _ACTIVE.get()


@contextmanager
def recording(journal: Journal) -> Iterator[Journal]:
    """Make ``journal`` the one that changes are saved into, for the duration of a call."""
    token = _ACTIVE.set(journal)
    try:
        yield journal
    finally:
        _ACTIVE.reset(token)
