"""The group coordinator's refusal: a Kafka error code (from the one table) and a message."""

from __future__ import annotations

from odradek.protocol.errors import ErrorCode


class ApiError(Exception):
    """A request refused with a Kafka error (and message): the call is undone, then answered."""

    def __init__(self, code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or code.name)
        self.code = code
        self.message = message
