"""`odradek serve` with several log directories: the ways to name them, and one-line refusals."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

from odradek.testing import BrokerProcess, free_port

pytestmark = [pytest.mark.embedded, pytest.mark.timeout(120)]


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    """`odradek serve` expected to stop by itself (a refusal)."""
    return subprocess.run(
        [sys.executable, "-m", "odradek", "serve", "--listen", f"127.0.0.1:{free_port()}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


class ServeProcess(BrokerProcess):
    """`odradek serve` with exactly the given arguments (no --data-dir of its own)."""

    def __init__(self, tmp_path: Path, args: list[str]) -> None:
        super().__init__(tmp_path / "logs", extra_args=args)  # "logs": where its log goes

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "odradek",
            "serve",
            "--listen",
            self.bootstrap,
            *self.extra_args,
        ]


@pytest.mark.parametrize("form", ["repeated", "comma", "set", "config"])
def test_every_way_of_naming_log_dirs_gives_the_broker_all_of_them(
    tmp_path: Path, form: str
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (tmp_path / "server.properties").write_text(f"log.dirs={a},{b}\nlog.dir=/ignored\n")
    args = {
        "repeated": ["--data-dir", str(a), "--data-dir", str(b)],
        "comma": ["--data-dir", f"{a},{b}"],
        "set": ["--set", f"log.dirs={a},{b}"],
        "config": ["--config", str(tmp_path / "server.properties")],
    }[form]
    broker = ServeProcess(tmp_path, args).start()
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        [described] = admin.describe_log_dirs()
        assert [d["log_dir"] for d in described["log_dirs"]] == [str(a), str(b)]
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="all"
        )
        assert configs["broker"]["0"]["log.dirs"]["value"] == f"{a},{b}"
        assert (a / "meta.json").exists() and not (b / "meta.json").exists()
        assert (a / "meta.properties").exists() and (b / "meta.properties").exists()
    finally:
        admin.close()
        broker.stop()


def test_refusals_are_one_line(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    twice = serve("--data-dir", str(a), "--data-dir", f"{a}/")
    assert twice.returncode == 2
    assert f"--data-dir: log directory {a}/ is given twice" in one_line(twice)

    running = BrokerProcess(a, extra_args=["--data-dir", str(b)]).start()
    try:
        busy = serve("--data-dir", str(c), "--data-dir", str(b))
        assert busy.returncode == 1
        assert f"data directory {b} is in use by process {running.pid}" in one_line(busy)
        assert sorted(p.name for p in c.iterdir()) == [".lock"]  # nothing read or written
    finally:
        running.stop()

    # b belongs to a's broker (its cluster id): another broker may not take it.
    foreign = serve("--data-dir", str(c), "--data-dir", str(b))
    assert foreign.returncode == 2
    assert f"log directory {b} belongs to cluster" in one_line(foreign)
    assert sorted(p.name for p in c.iterdir()) == [".lock"]  # refused before writing
