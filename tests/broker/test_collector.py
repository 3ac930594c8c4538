"""`freeze_imported_objects`: what start-up imported leaves the cyclic collector's walks;
what is made afterwards is still collected. Run in a fresh interpreter, so the test
process's own collector is left as it was."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(60)

CHECK = """
import gc, weakref
import odradek.broker.server  # what a broker imports before it starts
from odradek.broker.collector import freeze_imported_objects
tracked = len(gc.get_objects())
frozen = freeze_imported_objects()
assert frozen == gc.get_freeze_count(), (frozen, gc.get_freeze_count())
assert frozen >= tracked // 2, (frozen, tracked)  # the imports, frozen
assert len(gc.get_objects()) < tracked // 10, len(gc.get_objects())  # no longer walked
class Node:
    pass
a, b = Node(), Node()
a.other, b.other = b, a
gone = weakref.ref(a)
del a, b
gc.collect()
assert gone() is None, "a cycle made after the freeze was not collected"
print(frozen)
"""


def test_freeze_keeps_imports_out_of_collections_and_later_cycles_collectable() -> None:
    run = subprocess.run(
        [sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=50, check=False
    )
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) > 10_000  # a broker's imports: tens of thousands of objects
