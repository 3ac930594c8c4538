"""Log compaction: latest value per key, offsets preserved, tombstones, crash safety."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.log import LogConfig, PartitionLog
from odradek.log import compaction as compaction_mod
from odradek.log.compaction import CLEANER_CHECKPOINT_FILE
from odradek.protocol.records import (
    COMPRESSION_GZIP,
    DecodedRecord,
    Record,
    build_batch,
    crc32c,
    decode_records,
    iter_batches,
)

RETENTION = 10_000  # delete.retention.ms used by these tests


class Clock:
    """Manual clock injected as now_ms: tests advance it explicitly, never sleep."""

    def __init__(self, t: int = 1_000_000) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t


class Model:
    """What was appended, by offset, and the latest value of each key."""

    def __init__(self) -> None:
        self.by_offset: dict[int, tuple[bytes | None, bytes | None, int]] = {}
        self.latest: dict[bytes, bytes | None] = {}

    def append(
        self, log: PartitionLog, clock: Clock, recs: list[tuple[bytes | None, bytes | None]]
    ) -> None:
        data = build_batch([(k, v, ()) for k, v in recs], timestamp_ms=clock.t)
        info = log.append(data)
        for i, (k, v) in enumerate(recs):
            self.by_offset[info.base_offset + i] = (k, v, clock.t)
            if k is not None:
                self.latest[k] = v
        clock.t += 1

    def live(self) -> dict[bytes, bytes]:
        return {k: v for k, v in self.latest.items() if v is not None}


def open_log(path: Path, clock: Clock, **cfg: object) -> PartitionLog:
    settings_ = {
        "cleanup_policy": "compact",
        "segment_bytes": 400,
        "index_interval_bytes": 100,
        "delete_retention_ms": RETENTION,
    }
    settings_.update(cfg)
    return PartitionLog.open(path, LogConfig(**settings_), now_ms=clock)  # type: ignore[arg-type]


def read_all(log: PartitionLog) -> list[DecodedRecord]:
    return decode_records(b"".join(log.iter_batches_from(log.start_offset)))


def replay(records: list[DecodedRecord]) -> dict[bytes, bytes | None]:
    state: dict[bytes, bytes | None] = {}
    for r in records:
        assert r.key is not None
        state[r.key] = r.value
    return state


def check_compacted(
    log: PartitionLog, model: Model, end: int, *, tombstones_expired: bool
) -> list[DecodedRecord]:
    """The invariants every compacted log must satisfy."""
    recs = read_all(log)
    offsets = [r.offset for r in recs]
    assert offsets == sorted(set(offsets)), "offsets must strictly increase"
    assert log.end_offset == end
    for r in recs:  # every surviving record is exactly what was appended at its offset
        assert (r.key, r.value, r.timestamp) == model.by_offset[r.offset]
    state = replay(recs)
    if tombstones_expired:
        assert {k: v for k, v in state.items() if v is not None} == model.live()
    else:
        assert state == model.latest
    active_base = log.first_dirty_offset
    cleaned = [r for r in recs if r.offset < active_base]
    keys = [r.key for r in cleaned]
    assert len(keys) == len(set(keys)), "a key appears at most once below the active segment"
    active_keys = {r.key for r in recs if r.offset >= active_base}
    assert not active_keys & set(keys), "keys rewritten in the active segment leave older ones"
    if tombstones_expired:
        assert all(r.value is not None for r in cleaned)
    return recs


def close_abandoned(log: PartitionLog) -> None:
    """Release the file descriptors of a log object a simulated crash left behind."""
    for seg in log._segments:
        seg.close()


# --------------------------------------------------------------------------- properties

KEYS = [b"k%d" % i for i in range(8)]
record_st = st.tuples(
    st.sampled_from(KEYS),
    st.one_of(st.none(), st.binary(min_size=0, max_size=24)),
)
op_st = st.one_of(
    st.tuples(st.just("append"), st.lists(record_st, min_size=1, max_size=4)),
    st.tuples(st.just("roll"), st.none()),
    st.tuples(st.just("compact"), st.none()),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op_st, min_size=1, max_size=60), segment_bytes=st.sampled_from([200, 400]))
def test_compaction_matches_a_dict_model(ops: list[tuple[str, object]], segment_bytes: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        clock = Clock()
        path = Path(tmp) / "p"
        log = open_log(path, clock, segment_bytes=segment_bytes)
        model = Model()
        for kind, arg in ops:
            if kind == "append":
                model.append(log, clock, arg)  # type: ignore[arg-type]
            elif kind == "roll":
                log.roll()
            else:
                end = log.end_offset
                stats = log.compact(clock.t, force=True)
                assert stats.ran or stats.reason == "no non-active data to clean"
                check_compacted(log, model, end, tombstones_expired=False)
        log.roll()
        end = log.end_offset
        start = log.start_offset
        log.compact(clock.t, force=True)
        before = check_compacted(log, model, end, tombstones_expired=False)
        assert log.start_offset == start
        # every key's latest tombstone is still there before delete.retention.ms
        assert sum(1 for r in before if r.value is None) == sum(
            1 for v in model.latest.values() if v is None
        )

        log.close()  # reopen after compaction gives the same data
        log = open_log(path, clock, segment_bytes=segment_bytes)
        assert read_all(log) == before
        assert log.end_offset == end

        clock.t += RETENTION + 1  # every segment's max timestamp is now past the horizon
        log.compact(clock.t, force=True)
        after = check_compacted(log, model, end, tombstones_expired=True)
        assert after == [r for r in before if r.value is not None]
        log.close()
        log = open_log(path, clock, segment_bytes=segment_bytes)
        assert read_all(log) == after
        log.close()


# --------------------------------------------------------------------------- examples


def fill(log: PartitionLog, clock: Clock, model: Model, n: int, keys: int = 5) -> None:
    for i in range(n):
        model.append(log, clock, [(b"key-%d" % (i % keys), b"value-%d" % i)])


def test_active_segment_is_never_rewritten(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock)
    model = Model()
    fill(log, clock, model, 40)
    assert log.segment_count > 3
    active = sorted((tmp_path / "p").glob("*.log"))[-1]
    raw = active.read_bytes()
    stats = log.compact(clock.t)
    assert stats.ran and stats.superseded_removed > 0
    assert active.read_bytes() == raw
    check_compacted(log, model, 40, tombstones_expired=False)
    log.close()


def test_newest_record_in_active_segment_drops_older_ones(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock)
    model = Model()
    model.append(log, clock, [(b"a", b"1"), (b"b", b"1")])
    log.roll()
    model.append(log, clock, [(b"a", b"2")])  # the active segment
    log.compact(clock.t, force=True)
    recs = read_all(log)
    assert [(r.offset, r.key, r.value) for r in recs] == [(1, b"b", b"1"), (2, b"a", b"2")]
    # the rewritten batch keeps base offset 0 and last offset delta 1 (sparse)
    first = next(iter_batches(log.read(0, 1 << 20)))[1]
    assert (first.base_offset, first.last_offset_delta, first.records_count) == (0, 1, 1)
    assert log.read(0, 1 << 20)[:8] == (0).to_bytes(8, "big")
    log.close()


def test_dirty_ratio_gates_compaction_and_checkpoint_is_incremental(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "p"
    log = open_log(path, clock, segment_bytes=300)
    model = Model()
    fill(log, clock, model, 200, keys=50)
    assert log.dirty_ratio() == 1.0
    assert log.compact(clock.t).ran
    assert log.first_dirty_offset == int((path / CLEANER_CHECKPOINT_FILE).read_text())
    assert log.dirty_ratio() == 0.0
    cleaned_bytes = log.size_bytes
    fill(log, clock, model, 4)
    log.roll()
    ratio = log.dirty_ratio()
    assert 0 < ratio < 0.5
    skipped = log.compact(clock.t)
    assert not skipped.ran and "below" in skipped.reason
    forced = log.compact(clock.t, force=True)
    assert forced.ran and forced.first_dirty_offset == skipped.first_dirty_offset
    # only the dirty part (not the 50 keys of the clean part) feeds the offset map
    assert 4 <= forced.keys_in_map < 20
    assert log.size_bytes <= cleaned_bytes + 400
    check_compacted(log, model, log.end_offset, tombstones_expired=False)
    log.close()
    # the checkpoint survives a reopen
    log = open_log(path, clock, segment_bytes=300)
    assert log.first_dirty_offset == forced.next_dirty_offset
    log.close()


def test_checkpoint_is_read_once_and_written_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The cleaner keeps its checkpoint in memory: passes read no file, yet every pass
    cleans what it must, and a restart (clean or crashed) goes on from the file."""
    reads: list[Path] = []
    real_read = compaction_mod.read_checkpoint

    def counted(directory: Path) -> int | None:
        reads.append(directory)
        return real_read(directory)

    monkeypatch.setattr(compaction_mod, "read_checkpoint", counted)
    clock = Clock()
    path = tmp_path / "p"
    log = open_log(path, clock, segment_bytes=300)
    model = Model()
    fill(log, clock, model, 120, keys=30)
    assert log.compact(clock.t).ran
    assert len(reads) == 1  # opening the log read it; the pass did not
    saved = int((path / CLEANER_CHECKPOINT_FILE).read_text())
    assert log.first_dirty_offset == saved  # written through
    for _ in range(5):  # idle passes, as the broker's cleaner makes every backoff
        assert not log.compact(clock.t).ran
        assert log.first_dirty_offset == saved
    fill(log, clock, model, 120, keys=30)  # new dirty data: the next pass cleans it
    again = log.compact(clock.t)
    assert again.ran and again.first_dirty_offset == saved
    assert again.next_dirty_offset > saved
    assert len(reads) == 1
    check_compacted(log, model, log.end_offset, tombstones_expired=False)
    log.close()

    log = open_log(path, clock, segment_bytes=300)  # a clean restart
    assert log.first_dirty_offset == again.next_dirty_offset
    fill(log, clock, model, 120, keys=30)
    third = log.compact(clock.t)
    assert third.ran and third.first_dirty_offset == again.next_dirty_offset
    check_compacted(log, model, log.end_offset, tombstones_expired=False)
    close_abandoned(log)  # a crash: no clean shutdown record

    log = open_log(path, clock, segment_bytes=300)
    assert log.first_dirty_offset == third.next_dirty_offset
    assert int((path / CLEANER_CHECKPOINT_FILE).read_text()) == third.next_dirty_offset
    check_compacted(log, model, log.end_offset, tombstones_expired=False)
    # truncation below the checkpoint pulls both the file and the kept value back
    log.truncate_to(third.next_dirty_offset - 5)
    assert log.first_dirty_offset <= third.next_dirty_offset - 5
    assert int((path / CLEANER_CHECKPOINT_FILE).read_text()) == third.next_dirty_offset - 5
    log.close()


def test_not_compacted_unless_policy_says_so(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock, cleanup_policy="delete")
    model = Model()
    fill(log, clock, model, 30)
    stats = log.compact(clock.t, force=True)
    assert not stats.ran and "does not compact" in stats.reason
    assert len(read_all(log)) == 30
    log.close()


def test_config_validation() -> None:
    assert LogConfig().delete_retention_ms == 86400000
    assert LogConfig().min_cleanable_dirty_ratio == 0.5
    with pytest.raises(ValueError):
        LogConfig(delete_retention_ms=-1)
    with pytest.raises(ValueError):
        LogConfig(min_cleanable_dirty_ratio=1.5)


def test_small_segments_are_merged_and_reads_use_the_new_files(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "p"
    log = open_log(path, clock, segment_bytes=2000)
    model = Model()
    for i in range(30):
        model.append(log, clock, [(b"same-key", b"v%d" % i)])
        log.roll()
    before = log.segment_count
    stats = log.compact(clock.t, force=True)
    assert stats.segments_after < before and log.segment_count == stats.segments_after
    assert stats.bytes_after == log.size_bytes
    assert len(list(path.glob("*.log"))) == log.segment_count
    recs = read_all(log)
    assert [(r.offset, r.value) for r in recs] == [(29, b"v29")]
    # reading an offset that compaction removed returns the next surviving batch
    assert decode_records(log.read(3, 1 << 20))[0].offset == 29
    log.close()


def test_null_keys_are_dropped(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock)
    model = Model()
    model.append(log, clock, [(None, b"x"), (b"a", b"1"), (None, b"y")])
    log.roll()
    model.append(log, clock, [(b"b", b"1")])
    stats = log.compact(clock.t, force=True)
    assert stats.null_keys_removed == 2
    assert [(r.offset, r.key) for r in read_all(log)] == [(1, b"a"), (3, b"b")]
    log.close()


def test_tombstone_retention_uses_segment_max_timestamp(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock)
    model = Model()
    model.append(log, clock, [(b"a", b"1"), (b"b", b"1")])
    model.append(log, clock, [(b"a", None)])
    log.roll()
    model.append(log, clock, [(b"c", b"1")])
    last_ts = clock.t - 2
    log.compact(last_ts + RETENTION, force=True)  # not older than delete.retention.ms
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1"), (b"a", None), (b"c", b"1")]
    log.compact(last_ts + RETENTION + 1, force=True)
    assert [(r.key, r.value) for r in read_all(log)] == [(b"b", b"1"), (b"c", b"1")]
    assert log.end_offset == 4
    log.close()


def test_compressed_batches_keep_codec_offsets_and_last_offset_delta(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock, segment_bytes=100_000)
    recs = [(b"k%d" % i, b"v%d" % i, (("h", b"x"),)) for i in range(6)]
    log.append(build_batch(recs, timestamp_ms=5000, compression=COMPRESSION_GZIP))
    log.roll()
    log.append(build_batch([(b"k5", b"new", ()), (b"k1", b"new", ())], timestamp_ms=6000))
    log.compact(clock.t, force=True)
    data = log.read(0, 1 << 20)
    _, h = next(iter_batches(data))
    assert (h.compression, h.base_offset, h.last_offset_delta, h.records_count) == (
        COMPRESSION_GZIP,
        0,
        5,
        4,
    )
    got = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in read_all(log)]
    assert got[:4] == [(i, b"k%d" % i, b"v%d" % i, (("h", b"x"),), 5000) for i in (0, 2, 3, 4)]
    assert [g[0] for g in got[4:]] == [6, 7]
    log.close()


def test_log_append_time_is_preserved(tmp_path: Path) -> None:
    clock = Clock(7777)
    log = open_log(tmp_path / "p", clock, message_timestamp_type="LogAppendTime")
    log.append(build_batch([(b"a", b"1", ()), (b"b", b"1", ())], timestamp_ms=1))
    log.roll()
    log.append(build_batch([(b"a", b"2", ())], timestamp_ms=1))
    log.compact(clock.t, force=True)
    recs = read_all(log)
    assert [(r.offset, r.key, r.timestamp) for r in recs] == [(1, b"b", 7777), (2, b"a", 7777)]
    log.close()


def test_last_batch_of_a_producer_is_kept_empty(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "p"
    log = open_log(path, clock, segment_bytes=100_000)
    for seq in (0, 2):
        batch = build_batch(
            [(b"a", b"p", ()), (b"b", b"p", ())],
            timestamp_ms=clock.t,
            producer_id=42,
            producer_epoch=3,
            base_sequence=seq,
        )
        log.append(batch)
    log.roll()
    log.append(build_batch([(b"a", b"x", ()), (b"b", b"x", ())], timestamp_ms=clock.t))
    stats = log.compact(clock.t, force=True)
    assert stats.empty_batches_retained == 1
    headers = [h for _, h in iter_batches(b"".join(log.iter_batches_from(0)))]
    assert [(h.base_offset, h.last_offset_delta, h.records_count) for h in headers] == [
        (2, 1, 0),
        (4, 1, 2),
    ]
    assert (headers[0].producer_id, headers[0].producer_epoch, headers[0].base_sequence) == (
        42,
        3,
        2,
    )
    log.close()
    # without a snapshot the producer state is rebuilt from the kept empty batch
    (path / "producer.snapshot").unlink()
    log = open_log(path, clock, segment_bytes=100_000)
    entry = log.producer_state.entries[42]
    assert (entry.epoch, entry.last_seq, entry.last_offset) == (3, 3, 3)
    # a retry of the last batch is still recognised as a duplicate
    retry = build_batch(
        [(b"a", b"p", ()), (b"b", b"p", ())],
        timestamp_ms=clock.t,
        producer_id=42,
        producer_epoch=3,
        base_sequence=2,
    )
    assert log.append(retry).duplicate
    log.close()


def test_control_batches_are_kept(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock)
    marker = build_batch(
        [Record(0, 0, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
        timestamp_ms=clock.t,
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
        control=True,
        transactional=True,
    )
    log.append(marker, from_client=False)
    log.append(build_batch([(b"a", b"1", ())], timestamp_ms=clock.t))
    log.roll()
    log.append(build_batch([(b"a", b"2", ())], timestamp_ms=clock.t))
    log.compact(clock.t, force=True)
    recs = read_all(log)
    assert [(r.offset, r.is_control) for r in recs] == [(0, True), (2, False)]
    log.close()


# --------------------------------------------------------------------------- crash safety


class SimulatedCrash(BaseException):
    """Raised from inside a file operation to stop compaction as a crash would."""


class CrashInjector:
    """Counts fsync / rename / unlink calls and raises SimulatedCrash at call ``crash_at``."""

    OPS = ("replace", "unlink", "fsync")

    def __init__(self, crash_at: int) -> None:
        self.crash_at = crash_at
        self.steps = 0
        self.real = {name: getattr(os, name) for name in self.OPS}

    def wrap(self, name: str) -> Callable[..., object]:
        real = self.real[name]

        def op(*args: object, **kwargs: object) -> object:
            if self.steps == self.crash_at:
                raise SimulatedCrash(name)
            self.steps += 1
            return real(*args, **kwargs)

        return op


def test_leftover_cleaned_and_stray_files_are_removed_on_open(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "p"
    log = open_log(path, clock)
    model = Model()
    fill(log, clock, model, 30)
    end = log.end_offset
    log.close()
    (path / "00000000000000000000.log.cleaned").write_bytes(b"half written garbage")
    (path / "not-a-segment.log.swap").write_bytes(b"")
    log = open_log(path, clock)
    assert not list(path.glob("*.cleaned")) and not list(path.glob("*.swap"))
    assert [r.offset for r in read_all(log)] == list(range(end))
    log.close()


def test_crash_at_every_step_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stop compaction at each fsync / rename / unlink in turn, then reopen."""
    steps_total = None
    crash_at = 0
    while steps_total is None or crash_at <= steps_total:
        clock = Clock()
        path = tmp_path / f"run{crash_at}"
        log = open_log(path, clock, segment_bytes=300)
        model = Model()
        for i in range(50):
            key = b"key-%d" % (i % 6)
            model.append(log, clock, [(key, None if i % 7 == 3 else b"v%d" % i)])
        log.roll()
        log.drain()  # the roll's worker is done before os is patched (it patches os itself)
        end = log.end_offset
        clock.t += RETENTION + 1
        injector = CrashInjector(crash_at)
        for name in CrashInjector.OPS:
            monkeypatch.setattr(compaction_mod.os, name, injector.wrap(name))
        crashed = False
        try:
            log.compact(clock.t, force=True)
        except SimulatedCrash:
            crashed = True
        finally:
            monkeypatch.undo()
        steps = injector.steps
        if not crashed:
            steps_total = steps
            log.close()
        else:
            close_abandoned(log)  # no close(): files stay exactly as the crash left them
        log = open_log(path, clock, segment_bytes=300)
        assert not list(path.glob("*.cleaned")) and not list(path.glob("*.swap"))
        recs = read_all(log)
        offsets = [r.offset for r in recs]
        assert offsets == sorted(set(offsets))
        assert log.end_offset == end
        for r in recs:
            assert (r.key, r.value, r.timestamp) == model.by_offset[r.offset]
        state = replay(recs)
        assert {k: v for k, v in state.items() if v is not None} == model.live()
        # a later pass finishes the job
        log.compact(clock.t, force=True)
        check_compacted(log, model, end, tombstones_expired=True)
        log.close()
        crash_at += 1
    assert steps_total is not None and steps_total > 5


# --------------------------------------------------------------------------- speed


def test_compaction_speed_100k_records(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock, segment_bytes=1 << 20, index_interval_bytes=4096)
    n = 100_000
    per_batch = 100
    for b in range(n // per_batch):
        recs = [
            (b"group-%d" % ((b * per_batch + i) % 1000), b"x" * 40, ()) for i in range(per_batch)
        ]
        log.append(build_batch(recs, timestamp_ms=clock.t))
    log.roll()
    end = log.end_offset
    size = log.size_bytes
    t0 = time.perf_counter()
    stats = log.compact(clock.t)
    elapsed = time.perf_counter() - t0
    print(
        f"\ncompacted {stats.records_read} records ({size} bytes, {stats.segments_before} "
        f"segments) to {stats.records_kept} records ({stats.bytes_after} bytes, "
        f"{stats.segments_after} segments) in {elapsed:.3f}s"
    )
    assert stats.ran and stats.records_read == n and stats.records_kept == 1000
    assert log.end_offset == end
    assert len(read_all(log)) == 1000
    log.close()


def test_undecodable_batches_are_copied_unchanged(tmp_path: Path) -> None:
    clock = Clock()
    log = open_log(tmp_path / "p", clock)
    bad = bytearray(build_batch([(b"a", b"1", ())], timestamp_ms=clock.t))
    bad[22] |= COMPRESSION_GZIP  # claims gzip, holds plain records: cannot be decompressed
    bad[17:21] = crc32c(bytes(bad[21:])).to_bytes(4, "big")
    log.append(bytes(bad), from_client=False)  # produce refuses it; older logs may hold such
    log.append(build_batch([(b"b", b"1", ())], timestamp_ms=clock.t))
    log.roll()
    log.append(build_batch([(b"a", b"2", ()), (b"b", b"2", ())], timestamp_ms=clock.t))
    stats = log.compact(clock.t, force=True)
    assert stats.batches_copied_undecoded == 1 and stats.superseded_removed == 1
    assert log.read(0, 1 << 20)[17 : len(bad)] == bytes(bad)[17:]  # after the patched epoch
    headers = [h.base_offset for _, h in iter_batches(b"".join(log.iter_batches_from(0)))]
    assert headers == [0, 2]
    log.close()
