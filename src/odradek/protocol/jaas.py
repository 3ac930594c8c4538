"""Kafka's ``sasl.jaas.config`` values, one JAAS login module entry::

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

Clients read ``username`` / ``password`` from it; the broker reads PLAIN users
from the ``user_<name>="<password>"`` options. Shared by both sides.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_FLAGS = ("required", "requisite", "sufficient", "optional")
_OPTION = re.compile(r'\s*([A-Za-z0-9_.\-]+)\s*=\s*("((?:[^"\\]|\\.)*)"|[^\s;"]+)')


class JaasError(ValueError):
    """A sasl.jaas.config value that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class JaasEntry:
    login_module: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # options hold passwords: show names only
        return f"JaasEntry({self.login_module}, {self.flag}, options={sorted(self.options)})"

    @property
    def plain_users(self) -> dict[str, str]:
        """``user_<name>="<password>"`` options: PLAIN users a broker accepts."""
        return {k[len("user_") :]: v for k, v in self.options.items() if k.startswith("user_")}


def parse_jaas(text: str) -> JaasEntry:
    text = text.strip()
    if not text.endswith(";"):
        raise JaasError("sasl.jaas.config must end with ';'")
    body = text[:-1].strip()
    parts = body.split(None, 2)
    if len(parts) < 2 or parts[1].lower() not in _FLAGS:
        raise JaasError(
            "sasl.jaas.config must look like '<LoginModule class> required key=\"value\" ...;'"
        )
    module, flag = parts[0], parts[1].lower()
    rest = parts[2] if len(parts) > 2 else ""
    options: dict[str, str] = {}
    pos = 0
    while rest[pos:].strip():
        match = _OPTION.match(rest, pos)
        if match is None:
            # No excerpt of the text: it may hold a password.
            raise JaasError(f"sasl.jaas.config: cannot read option {len(options) + 1}")
        value = match.group(3) if match.group(3) is not None else match.group(2)
        options[match.group(1)] = re.sub(r"\\(.)", r"\1", value)
        pos = match.end()
    return JaasEntry(module, flag, options)
