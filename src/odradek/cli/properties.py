"""Java's ``.properties`` format, as Kafka reads ``server.properties`` and the
tools read ``--command-config``: ``key=value``, ``key: value`` or ``key value``;
``#`` and ``!`` comments; a trailing backslash continues the line; ``\\t``,
``\\n``, ``\\uXXXX`` and ``\\=`` style escapes."""

from __future__ import annotations

from pathlib import Path

from odradek.cli.errors import CliError

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[str]:
    lines: list[str] = []
    pending: str | None = None
    for raw in text.splitlines():
        line = raw.lstrip() if pending is not None else raw
        if pending is None and (not line.strip() or line.lstrip()[:1] in ("#", "!")):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:  # an odd number of backslashes: the line continues
            pending = (pending or "") + line[:-1]
            continue
        lines.append((pending or "") + line)
        pending = None
    if pending is not None:
        lines.append(pending)
    return lines


def _unescape(text: str) -> str:
    out = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 >= len(text):
            out.append(char)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "u" and i + 6 <= len(text):
            try:
                out.append(chr(int(text[i + 2 : i + 6], 16)))
                i += 6
                continue
            except ValueError:
                pass
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def parse_properties(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in _logical_lines(text):
        line = line.lstrip()
        i = 0
        while i < len(line):
            if line[i] == "\\":
                i += 2
                continue
            if line[i] in "=: \t\f":
                break
            i += 1
        key = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        out[_unescape(key)] = _unescape(rest)
    return out


def read_properties(path: str | Path, option: str) -> dict[str, str]:
    """A properties file, or a CliError naming the option that gave it."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise CliError(f"{option}: cannot read {path}: {exc.strerror or exc}") from None
    return parse_properties(text)
