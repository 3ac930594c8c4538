"""Who a connection is: Kafka principals, and the principal of a TLS client certificate.

As Kafka's DefaultKafkaPrincipalBuilder: PLAINTEXT and SSL without a client
certificate are ``User:ANONYMOUS``; SASL gives ``User:<authenticated name>``;
SSL with a client certificate gives ``User:<subject DN>``, the DN written as
Java's ``X500Principal.getName()`` writes it (RFC 2253: most specific RDN first,
``CN=alice,OU=eng,O=acme,C=US``), then mapped by ``ssl.principal.mapping.rules``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class PrincipalError(ValueError):
    """A principal, or a mapping rule, that cannot be parsed."""


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` (the type is everything before the first colon)."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise PrincipalError(f"principal {text!r} must look like User:<name>")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")
WILDCARD = KafkaPrincipal("User", "*")

# Attribute keywords Java's X500Principal writes in RFC 2253 form; others use the OID.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_EMAIL_OID = "1.2.840.113549.1.9.1"


def _escape(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def _der_ia5(value: str) -> str:
    data = value.encode("ascii", errors="replace")
    if len(data) < 0x80:
        length = bytes([len(data)])
    else:
        size = len(data).to_bytes((len(data).bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(size)]) + size
    return "#" + (b"\x16" + length + data).hex()


def _attribute(name: str, value: str) -> str:
    keyword = _KEYWORDS.get(name)
    if keyword is not None:
        return f"{keyword}={_escape(value)}"
    if name == "emailAddress":
        return f"{_EMAIL_OID}={_der_ia5(value)}"
    return f"{name}={_escape(value)}"


def subject_dn(peercert: dict[str, Any]) -> str:
    """The certificate subject of ``SSLSocket.getpeercert()`` as an RFC 2253 string."""
    rdns: Sequence[Sequence[tuple[str, str]]] = peercert.get("subject", ())
    return ",".join("+".join(_attribute(n, v) for n, v in rdn) for rdn in reversed(rdns))


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str
    case: str  # "", "L" or "U"

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        if self.pattern.fullmatch(dn) is None:
            return None
        result = self.pattern.sub(self.replacement, dn)
        if self.case == "L":
            return result.lower()
        if self.case == "U":
            return result.upper()
        return result


def _java_replacement(text: str) -> str:
    """Java's ``$1`` back references as Python's ``\\g<1>``."""
    return re.sub(r"\$(\d+)", r"\\g<\1>", text.replace("\\", "\\\\"))


def _take_until_slash(text: str, pos: int) -> tuple[str, int]:
    out = []
    while pos < len(text):
        char = text[pos]
        if char == "\\" and pos + 1 < len(text):
            out.append(text[pos : pos + 2] if text[pos + 1] != "/" else "/")
            pos += 2
            continue
        if char == "/":
            return "".join(out), pos + 1
        out.append(char)
        pos += 1
    raise PrincipalError("unterminated RULE in ssl.principal.mapping.rules")


class SslPrincipalMapper:
    """``ssl.principal.mapping.rules``: ``DEFAULT`` and ``RULE:pattern/replacement/[LU]``,
    comma-separated, first matching rule wins (Kafka's SslPrincipalMapper)."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = self._parse(rules.strip() or "DEFAULT")

    @staticmethod
    def _parse(text: str) -> list[_Rule]:
        rules = []
        pos = 0
        while pos < len(text):
            while pos < len(text) and text[pos] in " ,":
                pos += 1
            if pos >= len(text):
                break
            if text.startswith("DEFAULT", pos):
                rules.append(_Rule(None, "", ""))
                pos += len("DEFAULT")
            elif text.startswith("RULE:", pos):
                pattern, pos = _take_until_slash(text, pos + len("RULE:"))
                replacement, pos = _take_until_slash(text, pos)
                case = ""
                if pos < len(text) and text[pos] in "LU":
                    case = text[pos]
                    pos += 1
                try:
                    compiled = re.compile(pattern)
                except re.error as exc:
                    raise PrincipalError(f"bad pattern {pattern!r} in a RULE: {exc}") from None
                rules.append(_Rule(compiled, _java_replacement(replacement), case))
            else:
                raise PrincipalError(
                    f"ssl.principal.mapping.rules: expected DEFAULT or RULE: at {text[pos:]!r}"
                )
            while pos < len(text) and text[pos] == " ":
                pos += 1
            if pos < len(text) and text[pos] != ",":
                raise PrincipalError(f"ssl.principal.mapping.rules: unexpected {text[pos:]!r}")
        return rules

    def name(self, dn: str) -> str:
        for rule in self.rules:
            result = rule.apply(dn)
            if result is not None:
                return result
        raise PrincipalError(f"no ssl.principal.mapping.rules rule applies to {dn!r}")
