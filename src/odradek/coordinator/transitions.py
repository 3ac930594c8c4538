"""A state machine's legal transitions, in one table beside its states.

Kafka keeps, with each state, the states it may be entered from
(``ClassicGroupState.addValidPreviousStates``, ``TransactionState.validPreviousStates``);
h11 keeps one dict of transitions beside the code that makes them. Each of the
coordinators' state machines declares one :class:`TransitionTable` in the module of
its states; every transition goes through :meth:`TransitionTable.check`, and
handlers ask :meth:`TransitionTable.allows` ("can this group rebalance?", "can
this transaction end?") instead of repeating the rule in an if-chain. The tables
are printed in docs/coordinator.md, and a test holds the page to them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

State = TypeVar("State")


class IllegalTransition(RuntimeError):
    """A transition its machine's table forbids: a coordinator bug, never a client's
    error. The call that tried it raises, so it is undone and answered with an error."""


class TransitionTable(Generic[State]):
    """The legal transitions of one state machine, by target state (Kafka's form).

    ``valid_previous[dst]`` holds the states ``dst`` may be entered from; every state
    has a row, empty if nothing leads to it. ``initial`` holds the states a new (or
    rebuilt) object may start in. ``label`` names a state as the docs and errors do.
    """

    def __init__(
        self,
        machine: str,
        valid_previous: Mapping[State, Iterable[State]],
        *,
        initial: Iterable[State],
        label: Callable[[State], str] = str,
    ) -> None:
        self.machine = machine
        self.valid_previous = {dst: frozenset(srcs) for dst, srcs in valid_previous.items()}
        self.states = tuple(self.valid_previous)
        self.initial = frozenset(initial)
        self.label = label
        unknown = {s for srcs in self.valid_previous.values() for s in srcs} | self.initial
        if not unknown <= set(self.states):
            raise ValueError(f"{machine}: states without a row: {unknown - set(self.states)}")

    def allows(self, src: State, dst: State) -> bool:
        return src in self.valid_previous[dst]

    def check(self, src: State, dst: State) -> None:
        """Raise :class:`IllegalTransition` unless ``src -> dst`` is in the table."""
        if src not in self.valid_previous[dst]:
            raise IllegalTransition(
                f"illegal {self.machine} transition {self.label(src)} -> {self.label(dst)}"
            )

    def check_initial(self, state: State) -> None:
        """Raise :class:`IllegalTransition` unless an object may start in ``state``."""
        if state not in self.initial:
            raise IllegalTransition(f"a {self.machine} cannot start in {self.label(state)}")

    def targets(self, src: State) -> tuple[State, ...]:
        """The states ``src`` may move to, in the table's order."""
        return tuple(dst for dst in self.states if src in self.valid_previous[dst])

    def pairs(self) -> Iterator[tuple[State, State]]:
        """Every legal ``(src, dst)``."""
        for src in self.states:
            for dst in self.targets(src):
                yield src, dst
