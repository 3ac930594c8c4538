"""The history of a fault run, in the shape of Jepsen's Kafka workload (jepsen.tests.kafka):
every client operation as an *invoke* and its completion (*ok*, *fail* or *info*), with
the process that did it, a monotonic time and what it carried; the nemesis's faults in
the same stream. `kafka_checkers` reads it.

Operations (``f``) and their ``value``:

    send    invoke {"key", "value"}; ok adds "offset" (the broker acknowledged it there);
            info = the outcome is unknown (a delivery error may still have been written);
            fail = certainly not written
    poll    invoke {}; ok {"records": [[key, offset, value], ...]} in the order returned
    commit  invoke {"offsets": {key: offset}}; ok the offsets the coordinator accepted
            (Kafka's meaning: the next offset to consume)
    assign  ok {"keys": [...]} a rebalance handed the process these keys (its position
            restarts from the committed offsets)
    revoke  ok {"keys": [...], "lost": bool} a rebalance took them away
    txn     invoke {"txn_id", "sends": [[key, value], ...]}; ok = committed (sends carry
            offsets when known), fail = aborted, info = unknown
    fault   (process "nemesis") info {"fault": ..., "phase": "start" | "end", ...}

A *key* is a topic-partition, written ``topic-partition``. Values are the unique strings
producers write. The history is also written as JSONL (one operation a line, after one
``{"meta": ...}`` line with the seed and the schedule), flushed as it grows, so a run
that fails or hangs can be re-checked offline: ``python tests/cluster/kafka_checkers.py
HISTORY.jsonl [REPLICAS.json]``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Literal

OpType = Literal["invoke", "ok", "fail", "info"]
COMPLETIONS: frozenset[str] = frozenset({"ok", "fail", "info"})
NEMESIS = "nemesis"


def key_of(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


@dataclass(frozen=True, slots=True)
class Op:
    index: int  # position in the history
    time_ns: int  # time.monotonic_ns() when recorded
    process: str
    type: OpType
    f: str
    value: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "time": self.time_ns,
            "process": self.process,
            "type": self.type,
            "f": self.f,
            "value": self.value,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Op:
        return cls(
            int(raw["index"]),
            int(raw["time"]),
            str(raw["process"]),
            raw["type"],
            str(raw["f"]),
            dict(raw.get("value") or {}),
        )


class History:
    """An append-only, thread-safe history; with `path`, also a JSONL file written as it grows.

    `invoke` returns the invocation, to be completed with `complete` (a process with many
    sends in flight, like a producer, completes them in any order)."""

    def __init__(self, path: Path | None = None, meta: dict[str, Any] | None = None) -> None:
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self.meta = dict(meta or {})
        self.path = path
        self._out: IO[str] | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._out = open(path, "w")  # noqa: SIM115 (closed by close())
            self._out.write(json.dumps({"meta": self.meta}) + "\n")
            self._out.flush()

    def _append(self, process: str, type_: OpType, f: str, value: dict[str, Any]) -> Op:
        with self._lock:
            op = Op(len(self._ops), time.monotonic_ns(), process, type_, f, value)
            self._ops.append(op)
            if self._out is not None:
                self._out.write(json.dumps(op.as_json()) + "\n")
                self._out.flush()
            return op

    def invoke(self, process: str, f: str, value: dict[str, Any] | None = None) -> Op:
        return self._append(process, "invoke", f, dict(value or {}))

    def complete(self, invocation: Op, type_: OpType, value: dict[str, Any] | None = None) -> Op:
        """The completion of `invocation`: its value updated with `value`."""
        assert type_ in COMPLETIONS, type_
        return self._append(
            invocation.process, type_, invocation.f, {**invocation.value, **(value or {})}
        )

    def event(self, process: str, f: str, value: dict[str, Any], type_: OpType = "ok") -> Op:
        """Something that happened at once (a rebalance callback, a fault): one completion."""
        return self._append(process, type_, f, dict(value))

    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)

    def close(self) -> None:
        with self._lock:
            if self._out is not None:
                self._out.close()
                self._out = None


def read_history(path: Path) -> tuple[dict[str, Any], list[Op]]:
    """(meta, operations) of a JSONL history; a truncated last line (a killed run) is skipped."""
    meta: dict[str, Any] = {}
    ops: list[Op] = []
    with open(path) as lines:
        for line in lines:
            try:
                raw = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "meta" in raw:
                meta = raw["meta"]
            else:
                ops.append(Op.from_json(raw))
    return meta, ops


def completions(ops: Iterable[Op]) -> Iterator[Op]:
    return (op for op in ops if op.type in COMPLETIONS)


def invocations_by_completion(ops: list[Op]) -> dict[int, Op]:
    """Completion index -> its invocation, pairing each process's invocations and
    completions of the same `f` and value identity in order.

    Producers complete sends out of order, so a send pairs by its value; other
    operations pair first-in first-out per (process, f)."""
    pending: dict[tuple[str, str, str], list[Op]] = {}
    pairs: dict[int, Op] = {}
    for op in ops:
        identity = str(op.value.get("value", op.value.get("txn_id", "")))
        slot = (op.process, op.f, identity)
        if op.type == "invoke":
            pending.setdefault(slot, []).append(op)
        elif pending.get(slot):
            pairs[op.index] = pending[slot].pop(0)
    return pairs
