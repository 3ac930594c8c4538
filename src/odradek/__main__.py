"""`python -m odradek ...` is the same as the `odradek` command."""

from odradek.cli.entry import main

raise SystemExit(main())
