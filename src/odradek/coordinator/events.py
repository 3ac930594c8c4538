"""Structured observations: every state transition and every completed rebalance.

Events are returned in ``Result.events`` for the runtime (metrics), and the
core also writes each of them as a record of the group's partition, after the
call's own records (``history``: what ``odradek groups history`` reads). The
runtime logs them with :func:`log_events` once the call that produced them is
durable (a call that fails is undone, and so are its events), through stdlib
``logging`` with the event dict under ``extra={"odradek_event": ...}`` so a
JSON log formatter can pick them up.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from odradek.coordinator.types import CoordinatorEvent

logger = logging.getLogger("odradek.coordinator")

STATE_TRANSITION = "state_transition"
REBALANCE_COMPLETED = "rebalance_completed"
MEMBER_REMOVED = "member_removed"
STATIC_MEMBER_REPLACED = "static_member_replaced"
JOIN_PHASE_EXTENDED = "join_phase_extended"
OFFSETS_EXPIRED = "offsets_expired"
GROUP_LOADED = "group_loaded"
# Consumer groups (KIP-848).
GROUP_EPOCH_BUMPED = "group_epoch_bumped"
TARGET_ASSIGNMENT_COMPUTED = "target_assignment_computed"
MEMBER_RECONCILED = "member_reconciled"
GROUP_CONVERTED = "group_converted"  # classic <-> consumer (online migration)


def members_phrase(member_ids: Sequence[str]) -> str:
    """Member ids as prose for a reason: "member a" or "members a, b"."""
    noun = "member" if len(member_ids) == 1 else "members"
    return f"{noun} {', '.join(member_ids)}"


def make_event(kind: str, group_id: str, at_ms: int, **fields: Any) -> CoordinatorEvent:
    return CoordinatorEvent(kind=kind, group_id=group_id, at_ms=at_ms, fields=fields)


def log_events(events: Iterable[CoordinatorEvent]) -> None:
    """One structured log line per event (``odradek.coordinator`` logger)."""
    if not logger.isEnabledFor(logging.INFO):
        return
    for event in events:
        payload = {"kind": event.kind, "group": event.group_id, "at_ms": event.at_ms}
        payload.update(event.fields)
        logger.info(
            "%s group=%s %s",
            event.kind,
            event.group_id,
            " ".join(f"{k}={v}" for k, v in event.fields.items()),
            extra={"odradek_event": payload},
        )
