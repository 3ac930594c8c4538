"""Helpers for the reliability suite: brokers under resource limits, process probes, frames."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from odradek.protocol.codec import RequestHeader, build, encode_request, request_type
from odradek.testing import BrokerProcess


class LimitedBroker(BrokerProcess):
    """A broker subprocess that sets resource limits (`resource.RLIMIT_*`) before it starts."""

    def __init__(
        self,
        data_dir: Path,
        *,
        settings: dict[str, str] | None = None,
        rlimits: dict[str, int] | None = None,
        extra_args: tuple[str, ...] = (),
        host: str = "127.0.0.1",
    ) -> None:
        super().__init__(data_dir, settings=settings, extra_args=extra_args, host=host)
        self.rlimits = dict(rlimits or {})

    def command(self) -> list[str]:
        cmd = super().command()
        if not self.rlimits:
            return cmd
        limits = "".join(
            f"resource.setrlimit(resource.{name}, ({value}, {value}));"
            for name, value in self.rlimits.items()
        )
        run = "runpy.run_module('odradek', run_name='__main__')"
        prelude = f"import resource, runpy; {limits} {run}"
        assert cmd[1:3] == ["-m", "odradek"]
        return [sys.executable, "-c", prelude, *cmd[3:]]


def proc_status(pid: int, field: str) -> int:
    """A numeric field of /proc/<pid>/status (VmRSS, VmHWM: kB)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def open_fds(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/fd").iterdir()))


def request_frame(
    api_key: int, version: int, values: dict[str, Any], correlation: int = 1
) -> bytes:
    """One whole request frame (size prefix included), for pipelining raw requests."""
    body = build(request_type(api_key, version), values)
    return encode_request(RequestHeader(api_key, version, correlation, "reliability"), body)
