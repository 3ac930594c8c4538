"""Assignors by name: the built-in ones and any custom ones registered at runtime."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from odradek.client.assignors.base import Assignor
from odradek.client.assignors.range import RangeAssignor
from odradek.client.assignors.roundrobin import RoundRobinAssignor
from odradek.client.assignors.sticky import CooperativeStickyAssignor, StickyAssignor

AssignorFactory = Callable[[], Assignor]
F = TypeVar("F", bound=AssignorFactory)

_factories: dict[str, AssignorFactory] = {}
_JAVA_PACKAGE = "org.apache.kafka.clients.consumer."


def register_assignor(factory: F, name: str | None = None, *, replace: bool = False) -> F:
    """Make ``get_assignor(name)`` build assignors with ``factory`` (usually a class).

    ``name`` defaults to the factory's ``name`` attribute; it is the protocol name sent in
    JoinGroup, so every member of a group must use the same name for the same strategy.
    Usable as a class decorator. Registering a taken name needs ``replace=True``.
    """
    key = name if name is not None else getattr(factory, "name", None)
    if not isinstance(key, str) or not key:
        raise ValueError("an assignor needs a non-empty name")
    if key in _factories and not replace and _factories[key] is not factory:
        raise ValueError(f"an assignor named {key!r} is already registered")
    _factories[key] = factory
    return factory


def unregister_assignor(name: str) -> None:
    _factories.pop(name, None)


def get_assignor(name: str | Assignor) -> Assignor:
    """A fresh assignor for ``name`` (an instance is passed through unchanged).

    Accepts Kafka's short names (``range``, ``roundrobin``, ``sticky``,
    ``cooperative-sticky``) and Java class names such as
    ``org.apache.kafka.clients.consumer.CooperativeStickyAssignor``.
    """
    if not isinstance(name, str):
        return name
    factory = _factories.get(name.strip())
    if factory is None:
        raise KeyError(f"unknown partition assignor {name!r}; known: {available_assignors()}")
    return factory()


def available_assignors() -> list[str]:
    return sorted(n for n in _factories if not n.startswith(_JAVA_PACKAGE))


_BUILTINS: tuple[tuple[AssignorFactory, str], ...] = (
    (RangeAssignor, "RangeAssignor"),
    (RoundRobinAssignor, "RoundRobinAssignor"),
    (StickyAssignor, "StickyAssignor"),
    (CooperativeStickyAssignor, "CooperativeStickyAssignor"),
)
for _cls, _java in _BUILTINS:
    register_assignor(_cls)
    register_assignor(_cls, _JAVA_PACKAGE + _java)
