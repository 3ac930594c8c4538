"""Regular expressions that clients send, matched in time linear in the input.

Clients name topics (KIP-848 ``SubscribedTopicRegex``) and transactional ids
(ListTransactions v2) by regular expression, and the broker matches them on its
event loop. Python's ``re`` backtracks: a pattern such as ``(a|a)*b`` against a
30-character name runs for minutes and stops the broker for everyone. Kafka uses
RE2/J for these patterns; this module uses RE2 (the ``google-re2`` package), which
has the same syntax and guarantees linear time: no backreferences or lookaround,
which Kafka refuses too.
"""

from __future__ import annotations

from typing import Any

import re2

__all__ = ["RegexError", "compile_linear"]

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad pattern is answered, not logged by RE2


class RegexError(ValueError):
    """A pattern RE2 does not accept (its message says why)."""


def compile_linear(pattern: str) -> Any:
    """``pattern`` compiled by RE2; ``fullmatch`` / ``search`` as ``re``'s, in linear time."""
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise RegexError(str(reason)) from None
