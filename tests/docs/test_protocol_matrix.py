"""docs/protocol.md must list exactly what the broker registers."""

import re
from pathlib import Path

from odradek.broker import apis  # noqa: F401  (fills the registry)
from odradek.broker.registry import REGISTRY

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
ROW = re.compile(r"^\| (\w+) \| (\d+) \| (\d+)\u2013(\d+) \| (\d+) \|")  # en dash, as in the doc


def test_matrix_matches_registry() -> None:
    documented = {}
    for line in DOC.read_text().splitlines():
        match = ROW.match(line)
        if match:
            name, key, lo, hi, parse_from = match.groups()
            documented[int(key)] = (name, int(lo), int(hi), int(parse_from))
    registered = {
        int(spec.key): (
            spec.key.name.title().replace("_", ""),
            spec.min_version,
            spec.max_version,
            spec.parse_from,
        )
        for spec in REGISTRY.values()
    }
    assert documented == registered
