"""The `odradek` command's entry point (and `python -m odradek`'s): one step before
`odradek.cli.main` is imported.

kio, the protocol's schemas, registers a hypothesis strategy for each of its types when
it is imported and hypothesis can be imported; no command uses them, and where
hypothesis is installed (a test install) that costs every broker 0.4 s of start-up. A
fresh command process therefore marks hypothesis absent before anything imports kio. A
process that has imported hypothesis already (a test calling `odradek.cli.main.main`
itself) never comes through here.
"""

from __future__ import annotations

import sys


def main() -> int:
    sys.modules.setdefault("hypothesis", None)  # type: ignore[arg-type]
    from odradek.cli.main import main as run

    return run()
