"""The open-file budget, cheap opens, and no half-open log when ``open`` fails (item 8)."""

from __future__ import annotations

import builtins
import errno
import gc
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from odradek.log import FileCache, LogConfig, PartitionLog
from odradek.log import partition_log as partition_log_mod
from odradek.log.files import SegmentFile
from odradek.protocol.records import build_batch, decode_records


def now() -> int:
    return 1_000


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def batch(i: int) -> bytes:
    return build_batch([(b"k%d" % i, b"v%d" % i, ())], timestamp_ms=1000 + i)


def test_the_cache_keeps_at_most_its_budget_of_idle_files(tmp_path: Path) -> None:
    cache = FileCache(3)
    files = [SegmentFile(str(tmp_path / f"{i}.log")) for i in range(6)]
    for f in files:
        with cache.use(f, create=True) as fd:
            os.write(fd, b"x")
    assert cache.open_count == 3
    assert [f.fd >= 0 for f in files] == [False] * 3 + [True] * 3  # least recently used went
    with cache.use(files[0]) as fd:
        assert os.pread(fd, 1, 0) == b"x"
    assert files[0].fd >= 0 and files[3].fd < 0


def test_a_pinned_file_is_never_closed_under_its_user(tmp_path: Path) -> None:
    cache = FileCache(1)
    a, b = (SegmentFile(str(tmp_path / n)) for n in ("a", "b"))
    with cache.use(a, create=True) as fd_a:
        with cache.use(b, create=True):
            assert cache.open_count == 2  # over budget while both are in use
        os.fstat(fd_a)  # still valid
    assert cache.open_count == 1
    cache.retire(a)
    cache.retire(b)
    assert cache.open_count == 0
    with pytest.raises(ValueError, match="closed for good"), cache.use(a):
        pass


def test_retiring_a_file_in_use_closes_it_when_its_user_is_done(tmp_path: Path) -> None:
    cache = FileCache(10)
    f = SegmentFile(str(tmp_path / "a"))
    with cache.use(f, create=True) as fd:
        cache.retire(f)
        os.fstat(fd)
    assert f.fd == -1 and cache.open_count == 0


def test_emfile_closes_idle_files_and_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = FileCache(100)
    idle = [SegmentFile(str(tmp_path / f"{i}")) for i in range(5)]
    for f in idle:
        with cache.use(f, create=True):
            pass
    real_open = os.open
    calls = {"n": 0}

    def flaky(path: str, flags: int, mode: int = 0o777) -> int:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, mode)

    monkeypatch.setattr(os, "open", flaky)
    new = SegmentFile(str(tmp_path / "new"))
    with cache.use(new, create=True) as fd:
        assert fd >= 0
    assert cache.open_count == 1 and all(f.fd == -1 for f in idle)


def test_idle_partitions_hold_no_files(tmp_path: Path) -> None:
    cache = FileCache(20)
    config = LogConfig()
    for i in range(200):
        log = PartitionLog.open(tmp_path / f"p{i}", config, now_ms=now, files=cache)
        log.append(batch(i))
        log.close()
    assert cache.open_count == 0
    # Counted for the whole process: logs earlier tests abandoned (a simulated crash
    # leaves one open) must not close their files halfway through this count.
    gc.collect()
    before = open_fds()
    logs = [
        PartitionLog.open(tmp_path / f"p{i}", config, now_ms=now, files=cache) for i in range(200)
    ]
    assert open_fds() == before  # a clean open reads no segment and keeps no file
    for i, log in enumerate(logs):
        assert decode_records(log.read(0, 1 << 20))[0].value == b"v%d" % i
        log.append(batch(1000 + i))
        assert cache.open_count <= 20
    assert open_fds() <= before + 20
    for log in logs:
        log.close()
    assert cache.open_count == 0 and open_fds() == before


def _failing_at(
    monkeypatch: pytest.MonkeyPatch, target: object, name: str, at: int
) -> Callable[[], int]:
    """Make ``target.name`` raise EMFILE on its ``at``-th call; returns the call count."""
    real = getattr(target, name, None) or getattr(builtins, name)
    calls = {"n": 0}

    def wrapped(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == at:
            raise OSError(errno.EMFILE, "Too many open files")
        return real(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapped, raising=False)
    return lambda: calls["n"]


@pytest.mark.parametrize("clean", [True, False])
def test_an_oserror_anywhere_in_open_leaves_nothing_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean: bool
) -> None:
    """EMFILE at every os.open, os.listdir and open() of ``PartitionLog.open`` in turn."""
    config = LogConfig(segment_bytes=300)
    d = tmp_path / "p"
    log = PartitionLog.open(d, config, now_ms=now, files=FileCache(50))
    for i in range(30):
        log.append(batch(i))
    end = log.end_offset
    log.drain()
    if clean:
        log.close()
    for target, name in ((os, "open"), (os, "listdir"), (partition_log_mod, "open")):
        at = 1
        while True:
            cache = FileCache(50)
            before = open_fds()
            with monkeypatch.context() as m:
                calls = _failing_at(m, target, name, at)
                try:
                    opened = PartitionLog.open(d, config, now_ms=now, files=cache)
                except OSError as exc:
                    assert exc.errno == errno.EMFILE
                    opened = None
                made = calls()
            assert cache.open_count == 0 or opened is not None
            if opened is not None:
                opened.close()
            assert open_fds() == before, f"descriptors leaked with {name} failing at call {at}"
            again = PartitionLog.open(d, config, now_ms=now, files=FileCache(50))
            assert again.end_offset == end
            got = decode_records(b"".join(again.iter_batches_from(0)))
            assert [r.offset for r in got] == list(range(end))
            again.close()
            if made < at:  # the open finished before reaching call ``at``: all covered
                break
            at += 1
