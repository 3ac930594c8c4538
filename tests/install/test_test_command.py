"""The README's test command is what CI runs, and its first step,
``scripts/test-system-deps.sh``, gives the console's browser tests their Chromium or says
in one line why it cannot (never a browser test skipped later for want of it)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "test-system-deps.sh"

pytestmark = pytest.mark.timeout(60)


def readme_test_command() -> str:
    """The command in the README's "Run the whole test suite" block."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"\*\*Run the whole test suite\*\*.*?```bash\n(.+?)\n```", readme, re.S)
    assert found is not None, "README.md has no 'Run the whole test suite' block"
    return found[1].strip()


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    command = readme_test_command()
    assert command.startswith("bash scripts/test-system-deps.sh && ")
    assert command.endswith("python3 -m pytest")
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert command in lines


def run_script(chromium: Path, path: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ODRADEK_CHROMIUM": str(chromium), "PATH": path}
    bash = shutil.which("bash")
    assert bash is not None
    return subprocess.run(
        [bash, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=30, check=False
    )


def test_system_deps_do_nothing_when_chromium_is_there(tmp_path: Path) -> None:
    chromium = tmp_path / "chromium"
    chromium.write_text("#!/bin/sh\n")
    chromium.chmod(0o755)
    done = run_script(chromium, str(tmp_path))  # nothing else on PATH: nothing else is run
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_system_deps_without_chromium_or_apt_get_fail_in_one_line(tmp_path: Path) -> None:
    done = run_script(tmp_path / "no-chromium", str(tmp_path))  # a PATH without apt-get
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "no apt-get to install it" in done.stderr and "ODRADEK_CHROMIUM" in done.stderr
