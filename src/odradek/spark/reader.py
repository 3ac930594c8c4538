"""Batch and streaming readers.

Process model (see docs/spark.md): planning methods run in a driver-side Python
process; ``read(partition)`` runs in executor Python workers on a *pickled*
reader. So readers keep only plain options in their pickled state, connect
lazily, and everything ``read`` needs travels in the ``OdradekPartition``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from odradek.client import TopicPartition
from odradek.client.errors import KafkaError

from .cluster import ClusterView, retry
from .executor import DataLossError, read_range
from .executor import data_loss as _data_loss
from .options import EARLIEST, LATEST, OffsetSpec, ReadOptions
from .planning import OffsetRange, Offsets, from_json, ranges, rate_limit, split, to_json

log = logging.getLogger(__name__)

__all__ = ["DataLossError", "OdradekBatchReader", "OdradekPartition", "OdradekStreamReader"]


class OdradekPartition(InputPartition):
    """One offset range of one topic partition, plus what an executor needs to read it."""

    def __init__(
        self,
        rng: OffsetRange,
        bootstrap: str,
        consumer_settings: Mapping[str, Any],
        include_headers: bool,
        fail_on_data_loss: bool,
        poll_timeout_s: float,
    ) -> None:
        super().__init__((rng.topic, rng.partition, rng.from_offset, rng.until_offset))
        self.range = rng
        self.bootstrap = bootstrap
        self.consumer_settings = dict(consumer_settings)
        self.include_headers = include_headers
        self.fail_on_data_loss = fail_on_data_loss
        self.poll_timeout_s = poll_timeout_s

    def __repr__(self) -> str:
        r = self.range
        return f"OdradekPartition({r.topic}-{r.partition} [{r.from_offset}, {r.until_offset}))"


def read_partition(part: OdradekPartition) -> Iterator[Any]:
    """Fetch ``[from, until)`` of one partition; yield Arrow RecordBatches (executor.py)."""
    return read_range(
        part.range,
        part.bootstrap,
        part.consumer_settings,
        include_headers=part.include_headers,
        fail_on_data_loss=part.fail_on_data_loss,
        poll_timeout_s=part.poll_timeout_s,
    )


class _ReaderBase:
    """Option handling and offset resolution shared by both readers."""

    def __init__(self, options: ReadOptions) -> None:
        self.opts = options
        self._view: ClusterView | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_view"] = None  # sockets never travel
        return state

    def _cluster(self) -> ClusterView:
        if self._view is None:
            level = str(self.opts.consumer_settings.get("isolation.level", "")).lower()
            self._view = ClusterView(
                self.opts.bootstrap,
                client_id="odradek-spark-driver",
                read_committed=level == "read_committed",
                security=self.opts.security,
            )
        return self._view

    def _close_view(self) -> None:
        if self._view is not None:
            self._view.close()
            self._view = None

    def _retry(self, fn: Any) -> Any:
        return retry(fn, self.opts.fetch_retries, self.opts.fetch_retry_interval_s)

    def _partitions_now(self) -> list[TopicPartition]:
        return self._retry(lambda: self._cluster().partitions(self.opts.subscription))

    def _resolve(self, spec: OffsetSpec, tps: list[TopicPartition], *, ending: bool) -> Offsets:
        """Concrete offsets for ``spec`` on ``tps``."""
        view = self._cluster()
        if not tps:
            return {}
        if spec.kind == "earliest":
            return self._retry(lambda: view.earliest(tps))
        if spec.kind == "latest":
            return self._retry(lambda: view.latest(tps))
        if spec.kind == "offsets":
            wanted: dict[TopicPartition, int] = {}
            for tp in tps:
                off = spec.offsets.get(tp.topic, {}).get(tp.partition)
                # Partitions the JSON leaves out: from the start (reading), to the end (ending).
                wanted[tp] = off if off is not None else (LATEST if ending else EARLIEST)
            out = {tp: o for tp, o in wanted.items() if o >= 0}
            need_e = [tp for tp, o in wanted.items() if o == EARLIEST]
            need_l = [tp for tp, o in wanted.items() if o == LATEST]
            if need_e:
                out.update(self._retry(lambda: view.earliest(need_e)))
            if need_l:
                out.update(self._retry(lambda: view.latest(need_l)))
            return out
        # by timestamp
        if spec.kind == "timestamp":
            request = dict.fromkeys(tps, int(spec.timestamp or 0))
        else:
            request = {}
            for tp in tps:
                ts = spec.offsets.get(tp.topic, {}).get(tp.partition)
                if ts is None:
                    raise ValueError(
                        f"{'ending' if ending else 'starting'}OffsetsByTimestamp has no timestamp "
                        f"for {tp}"
                    )
                request[tp] = ts
        found = self._retry(lambda: view.for_times(request))
        missing = [tp for tp, o in found.items() if o is None]
        out = {tp: o for tp, o in found.items() if o is not None}
        if missing:
            if spec.strategy == "error" and not ending:
                raise ValueError(
                    f"no offset has a timestamp at or after the requested one for "
                    f"{', '.join(map(str, missing))} (set startingOffsetsByTimestampStrategy="
                    "latest to start at the end instead)"
                )
            out.update(self._retry(lambda: view.latest(missing)))
        return out

    def _input_partitions(self, start: Offsets, end: Offsets) -> list[OdradekPartition]:
        o = self.opts
        return [
            OdradekPartition(
                r,
                o.bootstrap,
                o.consumer_settings,
                o.include_headers,
                o.fail_on_data_loss,
                o.poll_timeout_s,
            )
            for r in split(ranges(start, end), o.min_partitions)
        ]


class OdradekBatchReader(_ReaderBase, DataSourceReader):
    def partitions(self) -> list[InputPartition]:
        try:
            tps = self._partitions_now()
            start = self._resolve(self.opts.starting, tps, ending=False)
            end = self._resolve(self.opts.ending, tps, ending=True)
        finally:
            self._close_view()
        for tp in list(end):
            if tp in start and end[tp] < start[tp]:
                raise ValueError(
                    f"{tp}: the ending offset {end[tp]} is before the starting offset {start[tp]}"
                )
        parts = self._input_partitions(start, end)
        return parts or [_EMPTY]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, OdradekPartition):
            return iter(())
        return read_partition(partition)


class _Empty(InputPartition):
    """Spark wants at least one partition; this one reads nothing."""

    def __init__(self) -> None:
        super().__init__(None)


_EMPTY = _Empty()


class OdradekStreamReader(_ReaderBase, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader with admission control, Trigger.AvailableNow and group commits."""

    def __init__(self, options: ReadOptions) -> None:
        super().__init__(options)
        self._target: Offsets | None = None  # Trigger.AvailableNow stops here
        self._latest: Offsets | None = None  # log end offsets seen by the last latestOffset
        self._new_starts: Offsets = {}  # earliest offsets of partitions found since start
        self._last_trigger = time.monotonic()
        self._committed: Offsets | None = None

    # ------------------------------------------------------------------ offsets

    def initialOffset(self) -> dict:
        tps = self._partitions_now()
        return to_json(self._resolve(self.opts.starting, tps, ending=False))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._retry(lambda: self._cluster().latest(self._partitions_now()))

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = from_json(start)
        # ``start`` is the end of the last batch, which has completed: report it to the group.
        self._commit_to_group(begin)
        tps = self._partitions_now()
        latest = self._retry(lambda: self._cluster().latest(tps))
        self._latest = dict(latest)
        new = [tp for tp in tps if tp not in begin]
        if new:
            found = self._retry(lambda: self._cluster().earliest(new))
            for tp in new:
                self._new_starts.setdefault(tp, found[tp])
        full_start = dict(begin)
        for tp in new:
            full_start[tp] = self._new_starts[tp]
        for tp, off in list(full_start.items()):
            if tp not in latest:
                _data_loss(self.opts.fail_on_data_loss, f"{tp} no longer exists")
                del full_start[tp]
            elif latest[tp] < off:
                _data_loss(
                    self.opts.fail_on_data_loss,
                    f"{tp}: the log end offset {latest[tp]} is before the query's offset {off}",
                )
                full_start[tp] = latest[tp]
        end = {tp: latest[tp] for tp in full_start}
        if self._target is not None:
            end = {
                tp: max(full_start[tp], min(off, self._target.get(tp, full_start[tp])))
                for tp, off in end.items()
            }
        if not isinstance(limit, ReadAllAvailable):
            max_rows = self.opts.max_offsets_per_trigger
            if isinstance(limit, ReadMaxRows):
                max_rows = limit.max_rows
            if max_rows is not None:
                end = rate_limit(full_start, end, max_rows)
            min_rows = self.opts.min_offsets_per_trigger
            if isinstance(limit, ReadMinRows):
                min_rows = limit.min_rows
            if min_rows is not None and self._target is None:
                waited = time.monotonic() - self._last_trigger
                too_few = self._rows(full_start, end) < min_rows
                if too_few and waited < self.opts.max_trigger_delay_s:
                    return start
        if self._rows(full_start, end) > 0:
            self._last_trigger = time.monotonic()
        elif not new:
            return start
        return to_json(end)

    @staticmethod
    def _rows(start: Offsets, end: Offsets) -> int:
        return sum(max(0, end[tp] - start.get(tp, end[tp])) for tp in end)

    def reportLatestOffset(self) -> dict | None:
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        begin = from_json(start)
        finish = from_json(end)
        missing = [tp for tp in finish if tp not in begin]
        if missing:
            known = {tp: self._new_starts[tp] for tp in missing if tp in self._new_starts}
            unknown = [tp for tp in missing if tp not in known]
            if unknown:
                known.update(self._retry(lambda: self._cluster().earliest(unknown)))
            begin.update(known)
        return list(self._input_partitions(begin, finish))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_partition(partition)  # type: ignore[arg-type]

    # ------------------------------------------------------------------ progress

    def commit(self, end: dict) -> None:
        self._commit_to_group(from_json(end))

    def _commit_to_group(self, offsets: Offsets) -> None:
        if not self.opts.commit_to_group or not offsets or offsets == self._committed:
            return
        try:
            self._cluster().commit_group_offsets(
                self.opts.group_id or "", offsets, metadata="odradek-spark"
            )
            self._committed = dict(offsets)
        except (KafkaError, OSError) as exc:
            log.warning("could not commit offsets to group %s: %s", self.opts.group_id, exc)

    def stop(self) -> None:
        self._close_view()
