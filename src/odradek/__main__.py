"""`python -m odradek ...` is the same as the `odradek` command."""

from odradek.cli.main import main

raise SystemExit(main())
