"""Injected timer and id-generator interfaces, and the timer-key scheme.

The core never sleeps: it asks the runtime to call ``on_timer(now_ms, key)`` at
``deadline_ms``. Keys are strings; scheduling a key again replaces its deadline.
Every expiry handler re-checks a deadline or generation kept in the group, so
a timer that fires after it was replaced or cancelled is harmless.
"""

from __future__ import annotations

import json
from typing import Protocol


class Timer(Protocol):
    """Keyed, replaceable one-shot timers, owned by the runtime."""

    def schedule(self, key: str, deadline_ms: int) -> None:
        """Fire ``key`` at ``deadline_ms``, replacing any earlier deadline for ``key``."""

    def cancel(self, key: str) -> None:
        """Forget ``key`` if scheduled."""


class IdGenerator(Protocol):
    """Source of the random part of member ids (Kafka uses ``Uuid.randomUuid``)."""

    def new_uuid(self) -> str: ...


# Timer kinds.
JOIN = "join"  # delayed join / initial delayed join of one group
SYNC = "sync"  # pending-sync expiry of one group
HEARTBEAT = "heartbeat"  # session expiry of one member
PENDING = "pending"  # KIP-394 pending member expiry
CLEANUP = "cleanup"  # periodic offsets retention check
# Consumer groups (KIP-848). Their deadlines are the timer's own (JournaledTimer): a
# fire before the deadline re-arms, a fire for a key no longer scheduled is stale.
CG_SESSION = "cg-session"  # session expiry of one member: fenced
CG_REBALANCE = "cg-rebalance"  # a member that did not revoke within its rebalance timeout
CG_JOIN = "cg-join"  # a classic-protocol member told to rejoin that did not
CG_SYNC = "cg-sync"  # a classic-protocol member that joined and did not sync


def timer_key(kind: str, *parts: str) -> str:
    """Unambiguous key; JSON keeps group ids with any characters apart."""
    return kind + "|" + json.dumps(list(parts), separators=(",", ":"))


def parse_timer_key(key: str) -> tuple[str, list[str]]:
    kind, _, rest = key.partition("|")
    parts = json.loads(rest) if rest else []
    return kind, [str(p) for p in parts]
