"""Jepsen's Kafka checkers over a `kafka_history` history, and over the replicas' logs.

The definitions follow jepsen.tests.kafka (read there, written here anew):

- A key's *version order* is every offset anyone observed holding a value (an
  acknowledged send, a poll, a replica's log), sorted; a value's *index* is its offset's
  position in it. Offsets nobody observed (transaction markers, aborted records) are
  not in it, so they are never counted as skipped.
- lost_writes: an acknowledged send at or below the highest offset any poll read of its
  key, which no poll ever returned; and, given the final replica logs, an acknowledged
  send not at its offset in a replica's log.
- unseen_writes: acknowledged sends no poll ever returned (zero only once the consumers
  have read up to the end: check after a final drain).
- duplicates: one value at two offsets (or two keys). With idempotent producers and
  unique values every one is an error.
- inconsistent_offsets: one offset holding two values, across sends, polls over time
  and replica logs.
- nonmonotonic_sends: a process's acknowledged sends to one key going backwards (or
  standing still) in the version order, in the order they completed.
- poll_order: a process's successive polls of one key going backwards ("nonmonotonic")
  or skipping an index ("skip"), across polls and within one poll; a rebalance of the
  key (assign/revoke) in between, or during the poll, starts the key afresh.
- commits_backwards: a commit of a key that was invoked after another commit of it had
  been acknowledged, and names a smaller offset (real-time order, across processes).
- replica_divergence: offsets below the replicas' common end (every replica has them, so
  all are below the high watermark) where replica logs differ.
- aborted_reads: a poll returning a value whose writer certainly failed (an aborted
  transaction, read by a read_committed consumer), or that nobody ever sent.

Each checker returns a `CheckResult`: counts by kind and the first examples. Run as a
script on a saved history: ``python tests/cluster/kafka_checkers.py HISTORY.jsonl
[REPLICAS.json]`` prints every result and exits 1 if any found anomalies.
"""

from __future__ import annotations

import bisect
import itertools
import json
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:  # run as a script: its neighbour kafka_history is importable
    sys.path.insert(0, _HERE)

from kafka_history import (  # noqa: E402 (after the path fix above)
    Op,
    completions,
    invocations_by_completion,
    read_history,
)

MAX_EXAMPLES = 10
CONTROL = "\x00control"
"""The value a `ReplicaLog` record carries for a control record (a transaction marker):
compared between replicas, never taken for a client's value."""


@dataclass(frozen=True, slots=True)
class ReplicaLog:
    """One replica of one key, read from disk after the run: records below `end_offset`."""

    key: str
    broker: int
    start_offset: int
    end_offset: int
    records: list[tuple[int, str]]  # (offset, value); CONTROL for a control record

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "broker": self.broker,
            "start_offset": self.start_offset,
            "end_offset": self.end_offset,
            "records": [list(r) for r in self.records],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ReplicaLog:
        return cls(
            raw["key"],
            int(raw["broker"]),
            int(raw["start_offset"]),
            int(raw["end_offset"]),
            [(int(o), str(v)) for o, v in raw["records"]],
        )


@dataclass(slots=True)
class CheckResult:
    name: str
    counts: dict[str, int] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    @property
    def ok(self) -> bool:
        return self.count == 0

    def add(self, kind: str, example: dict[str, Any]) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append({"kind": kind, **example})

    def __str__(self) -> str:
        if self.ok:
            return f"{self.name}: none"
        counts = ", ".join(f"{kind} {n}" for kind, n in sorted(self.counts.items()))
        lines = [f"{self.name}: {counts}"]
        lines += [f"  {json.dumps(example, default=str)}" for example in self.examples]
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# What the history says, computed once


def _sends(op: Op) -> list[tuple[str, str, int | None]]:
    """(key, value, offset or None) of every record `op` sent."""
    if op.f == "send":
        return [(op.value["key"], op.value["value"], op.value.get("offset"))]
    if op.f == "txn":
        return [
            (send[0], send[1], send[2] if len(send) > 2 else None)
            for send in op.value.get("sends", ())
        ]
    return []


def _reads(op: Op) -> list[tuple[str, int, str]]:
    if op.f != "poll" or op.type != "ok":
        return []
    return [(k, int(o), v) for k, o, v in op.value.get("records", ())]


class Analysis:
    """The indexes every checker shares: writers, observations and version orders."""

    def __init__(self, ops: list[Op], replicas: Iterable[ReplicaLog] = ()) -> None:
        self.ops = ops
        self.replicas = list(replicas)
        self.done = list(completions(ops))
        # value -> its writer's completion (the last one if a value was sent twice)
        self.writer: dict[str, Op] = {}
        self.acked: list[tuple[str, str, int | None, Op]] = []  # ok sends
        for op in self.done:
            for key, value, offset in _sends(op):
                self.writer[value] = op
                if op.type == "ok":
                    self.acked.append((key, value, offset, op))
        # (key, offset) -> value -> where it was seen
        self.seen_at: dict[tuple[str, int], dict[str, list[str]]] = defaultdict(
            lambda: defaultdict(list)
        )
        self.polled: set[str] = set()
        self.max_polled: dict[str, int] = {}
        for op in self.done:
            if self._visible(op):
                for key, value, offset in _sends(op):
                    if offset is not None:
                        self.seen_at[(key, offset)][value].append(f"{op.f} #{op.index}")
            for key, offset, value in _reads(op):
                self.seen_at[(key, offset)][value].append(f"poll #{op.index} by {op.process}")
                self.polled.add(value)
                self.max_polled[key] = max(self.max_polled.get(key, -1), offset)
        for replica in self.replicas:
            for offset, value in replica.records:
                writer = self.writer.get(value)
                if value != CONTROL and (writer is None or self._visible(writer)):
                    self.seen_at[(replica.key, offset)][value].append(
                        f"broker {replica.broker}'s log"
                    )
        offsets: dict[str, list[int]] = defaultdict(list)
        for key, offset in self.seen_at:
            offsets[key].append(offset)
        self.version_order = {key: sorted(found) for key, found in offsets.items()}

    @staticmethod
    def _visible(writer: Op) -> bool:
        """Whether what `writer` sent is in the version order: not when it failed, nor
        a transaction not known to have committed (a read_committed reader skips an
        aborted one's records, which must not count as skipped)."""
        return writer.type == "ok" or (writer.type == "info" and writer.f != "txn")

    def index(self, key: str, offset: int) -> int:
        """The position of `offset` in `key`'s version order (every observed offset is in it)."""
        order = self.version_order[key]
        return bisect.bisect_left(order, offset)


def _op_ref(op: Op) -> dict[str, Any]:
    return {"index": op.index, "process": op.process, "type": op.type, "f": op.f}


# ---------------------------------------------------------------------------
# The checkers


def lost_writes(a: Analysis) -> CheckResult:
    result = CheckResult("lost writes")
    for key, value, offset, op in a.acked:
        bound = a.max_polled.get(key, -1)
        if offset is not None and offset <= bound and value not in a.polled:
            result.add(
                "unread-below-max-poll",
                {
                    "key": key,
                    "value": value,
                    "offset": offset,
                    "max_polled": bound,
                    "writer": _op_ref(op),
                },
            )
    by_key: dict[str, list[tuple[ReplicaLog, dict[int, str]]]] = defaultdict(list)
    for replica in a.replicas:
        by_key[replica.key].append((replica, dict(replica.records)))
    for key, value, offset, op in a.acked:
        if offset is None:
            continue
        for replica, values in by_key.get(key, ()):
            found = values.get(offset)
            if found != value:
                result.add(
                    "not-in-replica-log",
                    {
                        "key": key,
                        "value": value,
                        "offset": offset,
                        "broker": replica.broker,
                        "found": found,
                        "log_end": replica.end_offset,
                        "writer": _op_ref(op),
                    },
                )
    return result


def unseen_writes(a: Analysis) -> CheckResult:
    result = CheckResult("unseen writes")
    for key, value, offset, op in a.acked:
        if value not in a.polled:
            result.add(
                "unseen", {"key": key, "value": value, "offset": offset, "writer": _op_ref(op)}
            )
    return result


def duplicates(a: Analysis) -> CheckResult:
    result = CheckResult("duplicates")
    places: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for (key, offset), values in a.seen_at.items():
        for value in values:
            places[value].add((key, offset))
    for value, where in sorted(places.items()):
        if len(where) > 1:
            result.add(
                "same-value-at-two-offsets",
                {
                    "value": value,
                    "at": sorted(where),
                    "seen": {f"{k}@{o}": a.seen_at[(k, o)][value][:3] for k, o in sorted(where)},
                },
            )
    return result


def inconsistent_offsets(a: Analysis) -> CheckResult:
    result = CheckResult("inconsistent offsets")
    for (key, offset), values in sorted(a.seen_at.items()):
        if len(values) > 1:
            result.add(
                "two-values-at-one-offset",
                {
                    "key": key,
                    "offset": offset,
                    "values": {value: seen[:3] for value, seen in sorted(values.items())},
                },
            )
    return result


def nonmonotonic_sends(a: Analysis) -> CheckResult:
    result = CheckResult("nonmonotonic sends")
    last: dict[tuple[str, str], tuple[int, str, Op]] = {}  # (process, key) -> (index, value, op)
    for op in a.done:
        if op.type != "ok":
            continue
        for key, value, offset in _sends(op):
            if offset is None:
                continue
            index = a.index(key, offset)
            previous = last.get((op.process, key))
            if previous is not None and index - previous[0] < 1:
                result.add(
                    "send-went-back",
                    {
                        "key": key,
                        "process": op.process,
                        "values": [previous[1], value],
                        "delta": index - previous[0],
                        "ops": [_op_ref(previous[2]), _op_ref(op)],
                    },
                )
            last[(op.process, key)] = (index, value, op)
    return result


def poll_order(a: Analysis) -> CheckResult:
    result = CheckResult("nonmonotonic or skipping polls")
    last: dict[tuple[str, str], tuple[int, int, Op]] = {}  # (process, key) -> (index, offset, op)
    rebalanced: dict[str, set[str]] = defaultdict(set)  # process -> keys since its poll began

    def compare(
        kind: str, key: str, before: tuple[int, int], after: tuple[int, int], ops: list[Op]
    ) -> None:
        delta = after[0] - before[0]
        if delta == 1:
            return
        skipped = a.version_order[key][before[0] + 1 : after[0]]
        result.add(
            f"{kind}{'skip' if delta > 1 else 'nonmonotonic'}",
            {
                "key": key,
                "offsets": [before[1], after[1]],
                "delta": delta,
                "skipped_offsets": skipped[:10],
                "ops": [_op_ref(o) for o in ops],
            },
        )

    for op in a.ops:
        if op.f in ("assign", "revoke") and op.type == "ok":
            for key in op.value.get("keys", ()):
                last.pop((op.process, key), None)
                rebalanced[op.process].add(key)
        elif op.f == "poll" and op.type == "invoke":
            rebalanced[op.process] = set()
        elif op.f == "poll" and op.type == "ok":
            by_key: dict[str, list[int]] = defaultdict(list)
            for key, offset, _ in _reads(op):
                by_key[key].append(offset)
            for key, offsets in by_key.items():
                indices = [(a.index(key, o), o) for o in offsets]
                if key not in rebalanced[op.process]:
                    previous = last.get((op.process, key))
                    if previous is not None:
                        compare("", key, previous[:2], indices[0], [previous[2], op])
                    for before, after in itertools.pairwise(indices):
                        compare("internal-", key, before, after, [op])
                last[(op.process, key)] = (*indices[-1], op)
    return result


def commits_backwards(a: Analysis) -> CheckResult:
    result = CheckResult("committed offsets going backwards")
    invoked = invocations_by_completion(a.ops)
    commits: dict[str, list[tuple[int, int, int, Op]]] = defaultdict(list)
    for op in a.done:
        if op.f != "commit" or op.type != "ok":
            continue
        start = invoked[op.index].time_ns if op.index in invoked else op.time_ns
        for key, offset in op.value.get("offsets", {}).items():
            commits[key].append((start, op.time_ns, int(offset), op))
    for key, spans in commits.items():
        finished = sorted(spans, key=lambda span: span[1])
        best: tuple[int, Op] | None = None  # the highest offset acknowledged so far
        position = 0
        for start, _, offset, op in sorted(spans, key=lambda span: span[0]):
            while position < len(finished) and finished[position][1] < start:
                _, _, done_offset, done_op = finished[position]
                if best is None or done_offset > best[0]:
                    best = (done_offset, done_op)
                position += 1
            if best is not None and offset < best[0]:
                result.add(
                    "commit-below-acknowledged-commit",
                    {
                        "key": key,
                        "offsets": [best[0], offset],
                        "ops": [_op_ref(best[1]), _op_ref(op)],
                    },
                )
    return result


def replica_divergence(a: Analysis) -> CheckResult:
    result = CheckResult("replica divergence")
    by_key: dict[str, list[ReplicaLog]] = defaultdict(list)
    for replica in a.replicas:
        by_key[replica.key].append(replica)
    for key, replicas in sorted(by_key.items()):
        start = max(r.start_offset for r in replicas)
        end = min(r.end_offset for r in replicas)
        logs = {r.broker: {o: v for o, v in r.records if start <= o < end} for r in replicas}
        offsets = sorted(set().union(*(log.keys() for log in logs.values())))
        for offset in offsets:
            values = {broker: log.get(offset) for broker, log in sorted(logs.items())}
            if len(set(values.values())) > 1:
                result.add(
                    "replicas-differ-below-common-end",
                    {"key": key, "offset": offset, "common_end": end, "values": values},
                )
    return result


def aborted_reads(a: Analysis) -> CheckResult:
    result = CheckResult("aborted reads")
    for op in a.done:
        for key, offset, value in _reads(op):
            writer = a.writer.get(value)
            if writer is None:
                result.add(
                    "never-written",
                    {"key": key, "offset": offset, "value": value, "poll": _op_ref(op)},
                )
            elif writer.type == "fail":
                result.add(
                    "aborted",
                    {
                        "key": key,
                        "offset": offset,
                        "value": value,
                        "poll": _op_ref(op),
                        "writer": _op_ref(writer),
                    },
                )
    return result


CHECKERS: dict[str, Callable[[Analysis], CheckResult]] = {
    "lost_writes": lost_writes,
    "unseen_writes": unseen_writes,
    "duplicates": duplicates,
    "inconsistent_offsets": inconsistent_offsets,
    "nonmonotonic_sends": nonmonotonic_sends,
    "poll_order": poll_order,
    "commits_backwards": commits_backwards,
    "replica_divergence": replica_divergence,
    "aborted_reads": aborted_reads,
}


def check_all(ops: list[Op], replicas: Iterable[ReplicaLog] = ()) -> dict[str, CheckResult]:
    analysis = Analysis(ops, replicas)
    return {name: checker(analysis) for name, checker in CHECKERS.items()}


def report(results: dict[str, CheckResult]) -> str:
    return "\n".join(str(result) for result in results.values())


def write_replicas(path: Path, replicas: Iterable[ReplicaLog]) -> None:
    path.write_text(json.dumps([r.as_json() for r in replicas]))


def read_replicas(path: Path) -> list[ReplicaLog]:
    return [ReplicaLog.from_json(raw) for raw in json.loads(path.read_text())]


def main(argv: list[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print("usage: kafka_checkers.py HISTORY.jsonl [REPLICAS.json]", file=sys.stderr)
        return 2
    meta, ops = read_history(Path(argv[0]))
    replicas = read_replicas(Path(argv[1])) if len(argv) > 1 else []
    print(f"{len(ops)} operations, {len(replicas)} replica logs; meta {json.dumps(meta)}")
    results = check_all(ops, replicas)
    print(report(results))
    return 0 if all(r.ok for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
