"""One data directory, one broker: a second process is refused before it touches a file.

Two brokers on one directory once interleaved their writes in the same segment and
destroyed acknowledged records (issue 19); the directory's lock (odradek.log.dir_lock)
is taken before anything in it is read, and the kernel drops it when its holder dies.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from odradek.client import Consumer, Producer, TopicPartition
from odradek.log.dir_lock import LOCK_FILE, DirectoryInUseError, DirectoryLock
from odradek.testing import BrokerProcess, free_port

pytestmark = pytest.mark.timeout(120)

SECOND_START_TIMEOUT_S = 60


def snapshot(directory: Path) -> dict[str, tuple[int, float, str]]:
    """Every file under `directory`: size, modification time and content hash."""
    files = {}
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            stat = path.stat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            files[str(path.relative_to(directory))] = (stat.st_size, stat.st_mtime, digest)
    return files


def serve(data_dir: Path, port: int) -> subprocess.CompletedProcess[str]:
    """`odradek serve` on `data_dir` in the foreground; expected to exit by itself."""
    command = [sys.executable, "-m", "odradek", "serve", "--data-dir", str(data_dir)]
    return subprocess.run(
        [*command, "--listen", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        timeout=SECOND_START_TIMEOUT_S,
        check=False,
    )


def produce(bootstrap: str, values: list[bytes]) -> list[int]:
    with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        futures = [producer.send("orders", value=v, partition=0) for v in values]
        return [f.result(timeout=30).offset for f in futures]


def read_all(bootstrap: str) -> list[bytes]:
    with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("orders", 0)])
        values: list[bytes] = []
        for _ in range(50):
            records = consumer.poll(timeout=0.5)
            values += [r.value for r in records]
            if not records and values:
                break
        return values


def test_a_second_broker_on_the_directory_is_refused_and_touches_nothing(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    first = BrokerProcess(data_dir).start()
    try:
        acked = [f"v{i}".encode() for i in range(20)]
        assert produce(first.bootstrap, acked) == list(range(20))
        before = snapshot(data_dir)

        # Another port, and the first broker's own port (which could not be bound anyway):
        # both stop at the lock, before reading or writing anything in the directory.
        for port in (free_port(), first.port):
            second = serve(data_dir, port)
            assert second.returncode == 1, second.stderr
            lines = second.stderr.strip().splitlines()
            assert len(lines) == 1, second.stderr
            assert str(data_dir.resolve()) in lines[0]
            assert f"process {first.pid}" in lines[0]
            assert "broker stopped" not in second.stderr
            assert snapshot(data_dir) == before

        # The first broker never noticed: it keeps serving what it acknowledged, and more.
        assert produce(first.bootstrap, [b"after"]) == [20]
        assert read_all(first.bootstrap) == [*acked, b"after"]
    finally:
        first.stop()


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = BrokerProcess(data_dir).start()
    acked = [f"k{i}".encode() for i in range(10)]
    produce(broker.bootstrap, acked)
    assert (data_dir / LOCK_FILE).read_text().strip() == str(broker.pid)
    broker.kill()  # SIGKILL: nothing released by hand, the kernel drops the lock
    restarted = BrokerProcess(data_dir, port=broker.port).start()
    try:
        assert (data_dir / LOCK_FILE).read_text().strip() == str(restarted.pid)
        assert read_all(restarted.bootstrap) == acked
    finally:
        restarted.stop()


def test_the_lock_belongs_to_one_open_and_is_given_back(tmp_path: Path) -> None:
    held = DirectoryLock.acquire(tmp_path / "new" / "dir")  # created on the way
    with pytest.raises(DirectoryInUseError) as refused:
        DirectoryLock.acquire(tmp_path / "new" / "dir")  # the same process, a second open
    assert refused.value.holder_pid == os.getpid()
    assert str(tmp_path / "new" / "dir") in str(refused.value)
    held.release()
    held.release()  # idempotent
    again = DirectoryLock.acquire(tmp_path / "new" / "dir")
    assert again.held
    again.release()
    assert not again.held


def test_the_lock_is_not_inherited_by_child_processes(tmp_path: Path) -> None:
    held = DirectoryLock.acquire(tmp_path)
    try:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            held.release()
            # Had the child inherited the descriptor, it would still hold the lock.
            DirectoryLock.acquire(tmp_path).release()
        finally:
            child.kill()
            child.wait(timeout=10)
    finally:
        held.release()
