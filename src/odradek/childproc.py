"""A broker in a child process: spawn, signal, restart, read its log.

Shared by the test fixtures for Odradek (`odradek.testing`) and for the
reference broker (`odradek.testing_reference`); imports nothing from pytest so
benchmarks and scripts can use it too.
"""

from __future__ import annotations

import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Self

STOP_TIMEOUT_S = 10.0


def spawn_logged(
    command: Sequence[str],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start `command` with stdin from /dev/null and stdout and stderr appended to `log_path`.

    With `new_session` the process leads a session of its own: no terminal, and a
    Ctrl-C or the exit of the process that started it does not reach it (detached).
    """
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child process
    try:
        return subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(env) if env is not None else None,
            start_new_session=new_session,
        )
    finally:
        log.close()


def log_tail(log_path: Path, lines: int = 40, *, label: str = "process") -> str:
    """The last `lines` lines of a log file (a placeholder when there is none)."""
    try:
        return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no {label} log)"


class ChildProcess(ABC):
    """Lifecycle of one child process whose output goes to `log_path`."""

    log_path: Path
    label = "process"

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    @abstractmethod
    def start(self) -> Self:
        """Spawn (via `_spawn`) and wait until the process is ready to serve."""

    def _spawn(
        self,
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        new_session: bool = False,
    ) -> None:
        self._proc = spawn_logged(command, self.log_path, env=env, new_session=new_session)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def kill(self) -> None:
        """SIGKILL: the crash case; nothing is flushed or closed."""
        self._signal(signal.SIGKILL)

    def stop(self) -> int | None:
        """SIGTERM and wait (SIGKILL if it does not exit in time); the exit code."""
        return self._signal(signal.SIGTERM)

    def restart(self, *, kill: bool = False) -> Self:
        if kill:
            self.kill()
        else:
            self.stop()
        return self.start()

    def _signal(self, sig: int) -> int | None:
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if proc.poll() is not None:
            return proc.returncode
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_S)
            raise RuntimeError(f"{self.label} ignored signal {sig} for {STOP_TIMEOUT_S}s") from None

    def detach(self) -> subprocess.Popen[bytes] | None:
        """Stop tracking the process and hand it over (it keeps running); None if none."""
        proc, self._proc = self._proc, None
        return proc

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines, label=self.label)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
