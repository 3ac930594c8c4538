"""docs/security.md's step-by-step setup runs as written: every ``sh`` block, in
order, in one bash session in an empty directory (on free ports)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.testing import free_port

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
BLOCK = re.compile(r"^```sh\n(.*?)^```", re.M | re.S)

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(240)]


def test_security_walkthrough_runs_as_written(tmp_path: Path) -> None:
    blocks = BLOCK.findall(DOC.read_text())
    assert len(blocks) >= 6, "docs/security.md lost its shell blocks"
    script = "set -euo pipefail\n" + "\n".join(blocks)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "odradek"  # `odradek` as this interpreter runs it (this checkout)
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m odradek "$@"\n')
    shim.chmod(0o755)
    work = tmp_path / "demo"
    work.mkdir()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "SASL_PORT": str(free_port()),
        "SSL_PORT": str(free_port()),
    }
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # the broker it starts is in this process group
    )
    try:
        output, _ = proc.communicate(timeout=200)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, output[-3000:]
    lines = output.splitlines()
    assert {"order-1", "order-2", "order-3"} <= set(lines), output[-3000:]
    assert "billing may not write to orders" in output
    assert any(line.startswith("producer-app") for line in lines)
    assert any(line.split()[:1] == ["orders"] for line in lines)  # the Spark job's view
    # The broker logged to this output too: no password in it.
    for secret in ("admin-secret", "producer-secret", "billing-secret"):
        assert secret not in output
