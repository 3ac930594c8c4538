"""Fixtures for the interop tests: the broker address and a kafka-python 2.0.2 interpreter.

The broker fixtures themselves (``odradek_broker``, ``odradek_session_broker``)
come from the ``odradek.testing`` pytest plugin.
"""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # interop_helpers, whatever pytest's import mode
    sys.path.insert(0, str(HERE))

REPO_ROOT = HERE.parents[1]
KP202_VERSION = "2.0.2"
KP202_ENV = "ODRADEK_KP202_PYTHON"
KP202_VENV = REPO_ROOT / ".cache" / "kp202-venv"
VENV_TIMEOUT_S = 300


@pytest.fixture
def bootstrap(odradek_session_broker) -> str:
    """Address of the broker shared by the run (tests use unique topic names).

    Fails at once, naming the address, when nothing accepts connections there,
    rather than letting each client retry until its own timeout.
    """
    broker = odradek_session_broker
    problem = None
    try:
        socket.create_connection((broker.host, broker.port), timeout=5).close()
    except OSError as exc:
        problem = exc
    if problem is not None:
        pytest.fail(f"no broker at {broker.bootstrap}: {problem}", pytrace=False)
    return broker.bootstrap


def _has_kp202(python: Path) -> bool:
    if not python.exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import kafka, sys; sys.stdout.write(kafka.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return probe.returncode == 0 and probe.stdout.strip() == KP202_VERSION


def _create_kp202_venv(venv: Path) -> None:
    staging = venv.with_name(venv.name + ".tmp")
    if staging.exists():
        subprocess.run(["rm", "-rf", str(staging)], check=True, timeout=60)
    steps = [
        [sys.executable, "-m", "venv", str(staging)],
        [
            str(staging / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--quiet",
            f"kafka-python=={KP202_VERSION}",
        ],
    ]
    for cmd in steps:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=VENV_TIMEOUT_S)
        if done.returncode != 0:
            pytest.fail(
                f"could not build the kafka-python {KP202_VERSION} venv ({' '.join(cmd)}):\n"
                f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}\n"
                f"Set ${KP202_ENV} to a python that has kafka-python=={KP202_VERSION}.",
                pytrace=False,
            )
    if venv.exists():
        subprocess.run(["rm", "-rf", str(venv)], check=True, timeout=60)
    # venv scripts hard-code their directory, but `python -m pip` / plain python work
    # after a rename because bin/python is a symlink to the base interpreter.
    staging.rename(venv)


@pytest.fixture(scope="session")
def kp202_python() -> Path:
    """A python with kafka-python 2.0.2, kept apart from the test environment's 3.x.

    ``$ODRADEK_KP202_PYTHON`` names one; otherwise a venv is built once under
    ``.cache/kp202-venv`` in the repository (needs the package index the first time).
    """
    override = os.environ.get(KP202_ENV)
    if override:
        python = Path(override)
        if not _has_kp202(python):
            pytest.fail(f"${KP202_ENV}={override} has no kafka-python {KP202_VERSION}")
        return python
    cache = KP202_VENV.parent
    cache.mkdir(parents=True, exist_ok=True)
    ignore = cache / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# test caches, built by tests/interop/conftest.py\n*\n")
    python = KP202_VENV / "bin" / "python"
    with open(cache / "kp202-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder when sessions run in parallel
        if not _has_kp202(python):
            _create_kp202_venv(KP202_VENV)
            if not _has_kp202(python):
                pytest.fail(f"{python} still has no kafka-python {KP202_VERSION}")
    return python
