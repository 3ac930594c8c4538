"""The one way a request handler or the connection's security gate ends a connection.

Its own module because both the request context (``context.py``) and the SASL session
(``security/session.py``, which the context refers to) raise it.
"""

from __future__ import annotations


class CloseConnection(Exception):
    """The request cannot be answered; close this connection.

    ``final_response``: bytes to send before closing (Kafka answers a failed
    SASL authentication, then closes); ``delay_s``: how long to wait before sending
    them (failed.authentication.delay.ms)."""

    def __init__(
        self, reason: str, final_response: bytes | None = None, delay_s: float = 0.0
    ) -> None:
        super().__init__(reason)
        self.final_response = final_response
        self.delay_s = delay_s
