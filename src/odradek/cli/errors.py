"""The CLI's own error: a problem the user can fix, printed as one line."""

from __future__ import annotations


class CliError(Exception):
    """A problem the user can fix; printed as one line, exit code ``exit_code``."""

    exit_code = 2
