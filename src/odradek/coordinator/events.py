"""Structured observations: every state transition and every completed rebalance.

Events are returned in ``Result.events`` for the runtime (metrics, CLI views)
and also logged through stdlib ``logging`` with the event dict under
``extra={"odradek_event": ...}`` so a JSON log formatter can pick them up.
"""

from __future__ import annotations

import logging
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


def make_event(kind: str, group_id: str, at_ms: int, **fields: Any) -> CoordinatorEvent:
    event = CoordinatorEvent(kind=kind, group_id=group_id, at_ms=at_ms, fields=fields)
    if logger.isEnabledFor(logging.INFO):
        payload = {"kind": kind, "group": group_id, "at_ms": at_ms, **fields}
        logger.info(
            "%s group=%s %s",
            kind,
            group_id,
            " ".join(f"{k}={v}" for k, v in fields.items()),
            extra={"odradek_event": payload},
        )
    return event
