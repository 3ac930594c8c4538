"""Recorded Produce requests sent to a broker over a real socket: the broker's whole
per-request path (the event loop, receiving, framing, the handler, the append, the
answer's send), without a producer's CPU beside it.

``broker_cpu.py`` measures the broker under confluent-kafka, whose own CPU (17 s per GB
at 100 B) shares the machine's two cores with the broker and moves every figure by a
third between runs; ``produce_path.py --replay`` measures only ``Broker._dispatch``.
This sends the requests ``produce_path.py --capture`` recorded, as they are, from a
child process that does nothing else (a few requests in flight, as a producer keeps
them), and prints the CPU time of the broker's event-loop thread per request (precise:
``time.thread_time``), with the same requests every time:

    python3 produce_path.py --capture /tmp/produce-100.bin --size 100 --count 2000000
    python3 produce_socket.py /tmp/produce-100.bin                      # this tree
    python3 produce_socket.py /tmp/produce-100.bin --trees /work/main/src ../src

With ``--trees`` each round runs every tree's broker in turn (its own process, the order
flipping every round) and the medians are compared: a change, before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import statistics
import subprocess
import sys
import time
from pathlib import Path

from produce_path import _started

# The sender: the recorded payloads, framed, with at most IN_FLIGHT unanswered.
SENDER = """
import pickle, socket, struct, sys
port, path, rounds, in_flight = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
frames = [struct.pack(">i", len(p)) + p for p in pickle.loads(open(path, "rb").read())]
sock = socket.create_connection(("127.0.0.1", port))
pending = bytearray()
def answers(n):
    global pending
    got = 0
    while got < n:
        while len(pending) >= 4 and len(pending) >= 4 + struct.unpack_from(">i", pending)[0]:
            del pending[: 4 + struct.unpack_from(">i", pending)[0]]
            got += 1
            if got == n:
                return
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise SystemExit("the broker closed the connection")
        pending += chunk
unanswered = 0
for _ in range(rounds):
    for f in frames:
        if unanswered == in_flight:
            answers(1)
            unanswered -= 1
        sock.sendall(f)
        unanswered += 1
answers(unanswered)
sock.close()
"""


async def measure(source: Path, rounds: int, in_flight: int) -> dict[str, float]:
    """One broker (this process's sources): CPU of its loop thread per request."""
    async with _started() as broker:
        args = [str(broker.port), str(source), "1", str(in_flight)]
        warm = await asyncio.create_subprocess_exec(sys.executable, "-c", SENDER, *args)
        if await warm.wait():
            raise RuntimeError("the warm-up round failed")
        args[2] = str(rounds)
        cpu, wall = time.thread_time(), time.perf_counter()
        child = await asyncio.create_subprocess_exec(sys.executable, "-c", SENDER, *args)
        if await child.wait():
            raise RuntimeError("the sender failed")
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    return {"cpu_s": cpu, "wall_s": wall}


def run_tree(tree: str | None, source: Path, rounds: int, in_flight: int) -> dict[str, float]:
    """`measure` in a child process running `tree`'s sources (this one's for None)."""
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = tree
    command = [sys.executable, __file__, str(source), "--rounds", str(rounds)]
    command += ["--in-flight", str(in_flight), "--json"]
    out = subprocess.run(
        command,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", type=Path, help="requests recorded by produce_path.py --capture")
    parser.add_argument("--rounds", type=int, default=3, help="times each request is sent")
    parser.add_argument("--in-flight", type=int, default=5, help="unanswered requests at most")
    parser.add_argument("--trees", nargs="+", help="src/ directories to compare, in turn")
    parser.add_argument("--repeat", type=int, default=5, help="measurements per tree (--trees)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # run_tree's
    args = parser.parse_args()
    payloads = pickle.loads(args.source.read_bytes())
    requests = len(payloads) * args.rounds
    request_bytes = sum(map(len, payloads)) * args.rounds
    if args.json:
        print(json.dumps(asyncio.run(measure(args.source, args.rounds, args.in_flight))))
        return
    trees: list[str | None] = list(args.trees) if args.trees else [None]
    repeat = args.repeat if args.trees else 1
    per_request: dict[str | None, list[float]] = {tree: [] for tree in trees}
    print(
        f"{requests} requests of {request_bytes / requests:,.0f} B, "
        f"{args.in_flight} in flight; load {os.getloadavg()[0]:.1f}"
    )
    for i in range(repeat):
        for tree in trees if i % 2 == 0 else trees[::-1]:
            figures = run_tree(tree, args.source, args.rounds, args.in_flight)
            us = 1e6 * figures["cpu_s"] / requests
            per_request[tree].append(us)
            print(
                f"  {tree or 'this tree'}: {us:.0f} us per request "
                f"({figures['cpu_s'] / request_bytes * 1e9:.2f} s/GB of requests), "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    for tree, values in per_request.items():
        print(
            f"{tree or 'this tree'}: median {statistics.median(values):.0f} us per request "
            f"(range {min(values):.0f}-{max(values):.0f})"
        )


if __name__ == "__main__":
    main()
