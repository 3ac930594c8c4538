"""Fixtures for the CLI tests: run ``odradek`` in-process (``cli``) or as a process
(``run_cli``), against the session broker; unique names per test."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import uuid
from dataclasses import dataclass
from typing import Any

import pytest

from odradek.cli.main import main


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def lines(self) -> list[str]:
        return self.out.splitlines()


@pytest.fixture
def bootstrap(odradek_session_broker) -> str:
    return str(odradek_session_broker.bootstrap)


@pytest.fixture
def name(request: pytest.FixtureRequest):
    """``name("topic")`` -> a name unique to this test."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:30]

    def make(kind: str) -> str:
        return f"cli-{kind}-{base}-{uuid.uuid4().hex[:6]}"

    return make


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, bootstrap: str):
    """``cli("topics", "list", stdin=...)``: run main() with ``--bootstrap`` added."""

    def run(*args: str, stdin: str | bytes | None = None, connect: bool = True) -> Outcome:
        argv = [*args, "--bootstrap", bootstrap] if connect else list(args)
        data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
        capsys.readouterr()
        try:
            code = main(argv)
        except SystemExit as exc:  # --help, argparse errors
            code = int(exc.code or 0)
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return run


def run_cli(*args: str, stdin: str | None = None, timeout: float = 60) -> Outcome:
    """``odradek ARGS`` as a separate process (exit codes, one-line stderr)."""
    result = subprocess.run(
        [sys.executable, "-m", "odradek", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Outcome(result.returncode, result.stdout, result.stderr)


@pytest.fixture
def run_process():
    return run_cli
