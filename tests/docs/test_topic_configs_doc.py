"""docs/operations.md names exactly the topic configs Odradek stores but does not act on,
and exactly the configs a client may change on internal topics."""

import re
from pathlib import Path

from odradek.broker.config import STORED_ONLY_TOPIC_CONFIGS
from odradek.broker.topics import INTERNAL_TOPIC_ALTERABLE_CONFIGS

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _names_after(marker: str) -> set[str]:
    """Backquoted config names from the marker comment to the next blank line."""
    text = DOC.read_text()
    start = text.index(marker)
    end = text.index("\n\n", start)
    return set(re.findall(r"`([a-z][a-z0-9.]*)`", text[start:end]))


def test_stored_only_configs_are_documented() -> None:
    assert _names_after("<!-- stored-only topic configs") == STORED_ONLY_TOPIC_CONFIGS


def test_internal_topic_alterable_configs_are_documented() -> None:
    names = _names_after("<!-- internal alterable configs")
    assert names - {"retention.ms", "retention.bytes"} == INTERNAL_TOPIC_ALTERABLE_CONFIGS
