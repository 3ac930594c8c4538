"""The broker's Produce path alone: real requests, replayed from the frame to the response.

``broker_cpu.py`` measures the whole broker process, and on this shared machine a
cell moves by a third between rounds (the starved client sends larger or smaller
requests). This measures only what a Produce request costs from its payload
(after the size prefix) through the handler, the append and the encoded answer
(``Broker._dispatch``), on the same requests every time:

    python3 produce_path.py --capture /tmp/produce-100.bin --size 100   # record a load
    python3 produce_path.py --replay /tmp/produce-100.bin               # this tree
    PYTHONPATH=/work/main/src python3 produce_path.py --replay /tmp/produce-100.bin

``--capture`` runs a broker in this process, sends ``--count`` records with
confluent-kafka from a child process (bench/throughput.py's producer settings),
and writes the Produce request payloads it received. ``--replay`` appends them
again to a fresh broker, round after round, and prints this thread's user and
system CPU time per request and per GB of request bytes, the best of ``--rounds``
(the system time, mostly the page cache taking the appends, swings with the
machine's memory pressure; the user time is the Python path). ``--parts`` times
each request with ``time.thread_time`` instead (precise, not tick-sampled) and
splits out the segment ``os.writev`` and the CRC32C of the batch check, so what
is left is the Python of the path (medians per request). ``--marked N`` replays N
requests after 20 warm-up ones between two ``os.getppid()`` calls, for counting
instructions deterministically under callgrind (the load of a shared machine
does not move them):

    valgrind --tool=callgrind --dump-before=os_getppid python3 produce_path.py \
        --replay FILE --marked 100      # the counts of N requests: the .2 dump
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pickle
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from odradek.broker.server import Broker
from odradek.protocol.apikeys import ApiKey
from odradek.protocol.codec import parse_request_header

TOPIC = "produce-path"
PARTITIONS = 3
LOAD = """
import os, sys
sys.path.insert(0, {bench!r})
from confluent_kafka import Producer
from throughput import PRODUCER_SETTINGS
boot, size, count, acks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
settings = dict(PRODUCER_SETTINGS, **{{"bootstrap.servers": boot, "acks": acks}})
producer = Producer(settings)
value = os.urandom(size)
sent = 0
while sent < count:
    try:
        producer.produce({topic!r}, value)
        sent += 1
    except BufferError:
        producer.poll(0.005)
producer.flush(60)
"""


@contextlib.asynccontextmanager
async def _started() -> AsyncIterator[Broker]:
    """A broker on a fresh data directory, which goes with it (a replay writes GBs)."""
    data = Path(tempfile.mkdtemp(prefix="produce-path-"))
    try:
        broker = Broker(data, port=0)
        await broker.start()
        try:
            await asyncio.to_thread(_create_topic, broker)
            yield broker
        finally:
            await broker.stop()
    finally:
        shutil.rmtree(data, ignore_errors=True)


def _create_topic(broker: Broker) -> None:
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{broker.port}"})
    for future in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)]).values():
        future.result(timeout=30)


async def capture(out: Path, size: int, count: int, acks: str) -> None:
    async with _started() as broker:
        payloads = await _record(broker, size, count, acks)
    out.write_bytes(pickle.dumps(payloads))
    total = sum(map(len, payloads))
    print(f"{len(payloads)} Produce requests, {total / len(payloads):,.0f} B each on average")


async def _record(broker: Broker, size: int, count: int, acks: str) -> list[bytes]:
    payloads: list[bytes] = []
    dispatch = broker._dispatch

    async def recording(connection_id: int, host: str, payload: Any) -> Any:
        if parse_request_header(payload)[0].api_key == ApiKey.PRODUCE:
            payloads.append(bytes(payload))
        return await dispatch(connection_id, host, payload)

    broker._dispatch = recording  # type: ignore[method-assign]
    script = LOAD.format(bench=str(Path(__file__).parent), topic=TOPIC)
    load = [sys.executable, "-c", script, f"127.0.0.1:{broker.port}", str(size), str(count), acks]
    child = await asyncio.create_subprocess_exec(*load, stderr=subprocess.DEVNULL)
    await child.wait()
    return payloads


async def replay(source: Path, rounds: int) -> None:
    payloads: list[bytes] = pickle.loads(source.read_bytes())
    async with _started() as broker:
        times = await _rounds(broker, payloads, rounds)
    total = sum(map(len, payloads))
    n = len(payloads)
    both = min(u + s for u, s in times)
    user = min(u for u, _ in times)
    system = min(s for _, s in times)  # the kernel's: mostly writing the page cache
    print(
        f"{n} requests of {total / n:,.0f} B: {1e6 * both / n:.1f} us CPU per request "
        f"({both / total * 1e9:.2f} s/GB), of which user {1e6 * user / n:.1f} us "
        f"({user / total * 1e9:.2f} s/GB), system {1e6 * system / n:.1f} us"
    )


async def replay_parts(source: Path, rounds: int) -> None:
    """Per request, by ``time.thread_time``: the whole dispatch, the segment ``os.writev``,
    the CRC32C of the batch check, and the rest (the Python of the path). Medians over
    every request of every round but the first: a shared machine's interruptions land
    in a few requests, which a median leaves out and a round's total does not."""
    from odradek.log import segment
    from odradek.protocol import records

    payloads: list[bytes] = pickle.loads(source.read_bytes())
    clock = time.thread_time
    spent = [0.0, 0.0]  # writev, crc32c: this request's

    def timed(slot: int, function: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            start = clock()
            try:
                return function(*args)
            finally:
                spent[slot] += clock() - start

        return wrapper

    writev, crc32c = segment.os.writev, records.crc32c
    segment.os.writev = timed(0, writev)  # type: ignore[attr-defined]
    records.crc32c = timed(1, crc32c)
    samples: list[tuple[float, float, float]] = []  # dispatch, writev, crc32c
    try:
        async with _started() as broker:
            dispatch = broker._dispatch
            for round_ in range(rounds + 1):  # the first warms
                for payload in payloads:
                    spent[0] = spent[1] = 0.0
                    start = clock()
                    await dispatch(1, "127.0.0.1", memoryview(payload).toreadonly())
                    if round_:
                        samples.append((clock() - start, spent[0], spent[1]))
    finally:
        segment.os.writev, records.crc32c = writev, crc32c  # type: ignore[attr-defined]
    n = len(payloads)

    def median(values: list[float]) -> float:
        return 1e6 * statistics.median(values)

    total = median([d for d, _, _ in samples])
    wv = median([w for _, w, _ in samples])
    crc = median([c for _, _, c in samples])
    rest = median([d - w - c for d, w, c in samples])
    print(
        f"{n} requests of {sum(map(len, payloads)) / n:,.0f} B x {rounds} rounds "
        f"(thread_time, medians per request): dispatch {total:.1f} us, writev {wv:.1f}, "
        f"crc32c {crc:.1f}, the rest {rest:.1f}"
    )


async def replay_marked(source: Path, count: int) -> None:
    """``count`` requests after 20 warm-up ones, between two ``os.getppid()`` calls (no
    AdminClient: the topic is created in process, which runs slowly under valgrind)."""
    from odradek.broker.topics import NewTopic

    payloads: list[bytes] = pickle.loads(source.read_bytes())
    data = Path(tempfile.mkdtemp(prefix="produce-path-"))
    try:
        broker = Broker(data, port=0)
        await broker.start()
        try:
            await broker.topics.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])
            for payload in payloads[:20]:
                await broker._dispatch(1, "127.0.0.1", memoryview(payload).toreadonly())
            os.getppid()  # the measured part starts (callgrind --dump-before=os_getppid)
            for payload in payloads[20 : 20 + count]:
                await broker._dispatch(1, "127.0.0.1", memoryview(payload).toreadonly())
            os.getppid()  # ... and ends
        finally:
            await broker.stop()
    finally:
        shutil.rmtree(data, ignore_errors=True)


async def _rounds(broker: Broker, payloads: list[bytes], rounds: int) -> list[tuple[float, float]]:
    """(user, system) CPU seconds of this thread per round of dispatching every payload."""
    dispatch = broker._dispatch

    def cpu() -> tuple[float, float]:
        usage = resource.getrusage(resource.RUSAGE_THREAD)
        return usage.ru_utime, usage.ru_stime

    async def one_round() -> tuple[float, float]:
        user, system = cpu()
        for payload in payloads:
            await dispatch(1, "127.0.0.1", payload)
        after = cpu()
        return after[0] - user, after[1] - system

    await one_round()  # warm: files created, code paths loaded
    return [await one_round() for _ in range(rounds)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--capture", type=Path, help="record a load's Produce requests here")
    what.add_argument("--replay", type=Path, help="replay the requests recorded here")
    parser.add_argument("--size", type=int, default=100, help="value bytes (capture)")
    parser.add_argument("--count", type=int, default=500_000, help="records (capture)")
    parser.add_argument("--acks", default="1", help="the producer's acks (capture)")
    parser.add_argument("--rounds", type=int, default=7, help="replay rounds; the best counts")
    parser.add_argument(
        "--parts", action="store_true", help="replay timed by thread_time, writev and CRC apart"
    )
    parser.add_argument(
        "--marked", type=int, help="replay this many requests between marks, for callgrind"
    )
    args = parser.parse_args()
    if args.capture:
        asyncio.run(capture(args.capture, args.size, args.count, args.acks))
    elif args.marked is not None:
        asyncio.run(replay_marked(args.replay, args.marked))
    elif args.parts:
        asyncio.run(replay_parts(args.replay, args.rounds))
    else:
        asyncio.run(replay(args.replay, args.rounds))


if __name__ == "__main__":
    main()
