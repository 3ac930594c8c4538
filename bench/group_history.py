"""What keeping group events in ``__consumer_offsets`` costs: load time, and reading them.

Since issue 19 a group's events (transitions, rebalances, ...) are records of the
group's own ``__consumer_offsets`` partition (``odradek.coordinator.history``). Two
measurements:

- load (pure core, in process): a partition written by the coordinator itself for
  ``--groups`` groups, each through ``--cycles`` rounds of two members joining and
  leaving (three rebalances a round), plus ``--commits`` offset commits spread over
  the groups. Replayed into a fresh ``GroupCoordinatorShard`` (what a coordinator
  does when it loads the partition, decoding aside) as written, without its event
  records (what the same partition costs with no history), and both after
  compaction (the newest record per key, as the cleaner leaves it). CPU seconds, the
  best of three.
- read (``--broker``, a real broker): one group whose partition also holds
  ``--read-commits`` offset commits (200,000 by default, as in docs/operations.md)
  and a few rebalances; the time ``groups history`` spends reading the partition
  (``cli.history.read_events``, in process), and the whole command as a process
  (``odradek groups history`` and ``groups describe``, interpreter start included).

    python bench/group_history.py                         # load only
    python bench/group_history.py --broker                # and the CLI's read
    PYTHONPATH=/path/to/other/src python bench/group_history.py   # another tree

The code measured is whatever ``odradek`` the interpreter imports.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from report import markdown_table  # bench/report.py (scripts run from bench/)

import odradek
from odradek.coordinator import CoordinatorConfig, GroupCoordinatorShard
from odradek.coordinator.history import is_event_key
from odradek.coordinator.types import (
    CoordinatorRecord,
    JoinGroupRequest,
    LeaveGroupMember,
    LeaveGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    SyncGroupRequest,
)

GROUP = "bench-history"
PROTOCOLS = (("range", b"\x00\x01\x00\x00\x00\x01\x00\x01t\x00\x00\x00\x00"),)


class Timer:
    def __init__(self) -> None:
        self.deadlines: dict[str, int] = {}

    def schedule(self, key: str, deadline_ms: int) -> None:
        self.deadlines[key] = deadline_ms

    def cancel(self, key: str) -> None:
        self.deadlines.pop(key, None)


class Ids:
    def __init__(self) -> None:
        self.n = 0

    def new_uuid(self) -> str:
        self.n += 1
        return f"{self.n:032x}"


def write_partition(groups: int, cycles: int, commits: int) -> list[CoordinatorRecord]:
    """The records a coordinator writes for that history (its own calls, replayed)."""
    shard = GroupCoordinatorShard(
        CoordinatorConfig(group_initial_rebalance_delay_ms=0), timer=Timer(), ids=Ids()
    )
    log: list[CoordinatorRecord] = []
    answers: dict[int, Any] = {}
    token = 0
    now = 1_000_000

    def send(request: Any) -> int:
        nonlocal token, now
        token += 1
        now += 1
        result = shard.handle(now, token, request)
        for record in result.records:
            log.append(record)
            shard.replay(record)
        answers.update(result.responses)
        return token

    def join(group: str, member_id: str, client: str) -> int:
        return send(
            JoinGroupRequest(
                group, member_id, None, client, "/127.0.0.1", 45_000, 60_000, "consumer", PROTOCOLS
            )
        )

    def enter(group: str, client: str) -> str:
        first = answers.pop(join(group, "", client))
        return str(first.member_id)

    result = shard.on_loaded(now)
    for record in result.records:
        log.append(record)
        shard.replay(record)
    for group in (f"g{i}" for i in range(groups)):
        for _ in range(cycles):
            a = enter(group, "a")
            r = answers.pop(join(group, a, "a"))  # completes at once: the first member
            send(SyncGroupRequest(group, r.generation_id, a, assignments=((a, b"x"),)))
            b = enter(group, "b")
            tb = join(group, b, "b")  # a rebalance: a must rejoin
            ta = join(group, a, "a")
            ra, rb = answers.pop(ta), answers.pop(tb)
            leader = ra.leader
            for member, resp in ((a, ra), (b, rb)):
                assignments = ((a, b"x"), (b, b"y")) if member == leader else ()
                send(SyncGroupRequest(group, resp.generation_id, member, assignments=assignments))
            answers.clear()
            send(LeaveGroupRequest(group, (LeaveGroupMember(a), LeaveGroupMember(b))))
    for i in range(commits):
        group = f"g{i % groups}"
        part = OffsetCommitPartition(i % 64, i)
        send(OffsetCommitRequest(group, (OffsetCommitTopic("t", (part,)),), -1, ""))
        answers.clear()
    return log


def compacted(log: list[CoordinatorRecord]) -> list[CoordinatorRecord]:
    newest = {record.key: index for index, record in enumerate(log)}
    return [record for index, record in enumerate(log) if newest[record.key] == index]


def replay_s(log: list[CoordinatorRecord], repeat: int = 3) -> float:
    """CPU seconds (the best of ``repeat``) to replay ``log`` into a fresh shard and load
    it: CPU time, so that other work on a shared machine does not count."""
    best = float("inf")
    for _ in range(repeat):
        shard = GroupCoordinatorShard(CoordinatorConfig(), timer=Timer(), ids=Ids())
        started = time.process_time()
        for record in log:
            shard.replay(record)
        shard.on_loaded(0)
        best = min(best, time.process_time() - started)
    return best


def measure_load(groups: int, cycles: int, commits: int) -> list[dict[str, Any]]:
    log = write_partition(groups, cycles, commits)
    rows = []
    for name, records in (("as written", log), ("compacted", compacted(log))):
        without = [r for r in records if not is_event_key(r.key)]
        rows.append(
            {
                "log": name,
                "records": len(records),
                "event_records": len(records) - len(without),
                "replay_s": replay_s(records),
                "replay_without_events_s": replay_s(without),
            }
        )
    return rows


# --------------------------------------------------------------------- the CLI's read


def measure_read(commits: int) -> dict[str, Any]:
    from odradek.cli.main import build_parser
    from odradek.client import AdminClient, Consumer, NewTopic, TopicPartition
    from odradek.testing import start_broker

    with tempfile.TemporaryDirectory(prefix="odradek-history-") as tmp:
        broker = start_broker(Path(tmp) / "data", {"group.initial.rebalance.delay.ms": "0"})
        try:
            admin = AdminClient(bootstrap_servers=broker.bootstrap)
            admin.create_topics([NewTopic("t", 1000, 1)])["t"].result()
            for _ in range(3):  # three members come and go: six rebalances
                member = Consumer(bootstrap_servers=broker.bootstrap, group_id=GROUP)
                member.subscribe(["t"])
                deadline = time.monotonic() + 30
                while not member.assignment() and time.monotonic() < deadline:
                    member.poll(0.1)
                member.close()
            started = time.monotonic()
            per_request = 1000
            for i in range(commits // per_request):
                admin.alter_consumer_group_offsets(
                    GROUP, {TopicPartition("t", p): i for p in range(per_request)}
                )
            write_s = time.monotonic() - started
            admin.close()
            parser = build_parser()
            args = parser.parse_args(["groups", "history", GROUP, "-b", broker.bootstrap])
            from odradek.cli import history
            from odradek.cli.common import admin_client

            with admin_client(args) as cli_admin:
                started = time.monotonic()
                events = history.read_events(args, cli_admin, GROUP)
                read_s = time.monotonic() - started
            processes = {}
            for command in (["groups", "history", GROUP], ["groups", "describe", GROUP]):
                started = time.monotonic()
                done = subprocess.run(
                    [sys.executable, "-m", "odradek", *command, "-b", broker.bootstrap],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                processes[" ".join(command[:2])] = time.monotonic() - started
                assert done.stdout
            return {
                "commits": commits,
                "write_s": write_s,
                "events": len(events),
                "read_events_s": read_s,
                "history_process_s": processes["groups history"],
                "describe_process_s": processes["groups describe"],
            }
        finally:
            broker.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=10, help="join/leave rounds per group")
    parser.add_argument("--commits", type=int, default=200_000)
    parser.add_argument("--broker", action="store_true", help="also time the CLI's read")
    parser.add_argument("--read-commits", type=int, default=200_000)
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    print(f"odradek from {Path(odradek.__file__).parent}", file=sys.stderr)
    results: dict[str, Any] = {
        "load": measure_load(args.groups, args.cycles, args.commits),
    }
    table = [["partition", "records", "of them events", "replay s", "without events s"]]
    for row in results["load"]:
        table.append(
            [
                row["log"],
                f"{row['records']:,}",
                f"{row['event_records']:,}",
                f"{row['replay_s']:.2f}",
                f"{row['replay_without_events_s']:.2f}",
            ]
        )
    print(markdown_table(table))
    if args.broker:
        read = results["read"] = measure_read(args.read_commits)
        print()
        print(
            markdown_table(
                [
                    [
                        "commits in the partition",
                        "events",
                        "read_events s",
                        "history s",
                        "describe s",
                    ],
                    [
                        f"{read['commits']:,}",
                        str(read["events"]),
                        f"{read['read_events_s']:.2f}",
                        f"{read['history_process_s']:.2f}",
                        f"{read['describe_process_s']:.2f}",
                    ],
                ]
            )
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
