"""How fast the web console's pages are at scale, and what the console costs (issue 22).

Pages (in process, always): a console whose model is filled with records in
``__consumer_offsets``' own formats, applied exactly as its tail applies them (offset
commits, classic group metadata with members and assignments, Odradek's group events),
with an hour of lag samples in its lag file, served by the real app on loopback:

- the groups list at ``--groups`` groups (20,000): sorted by lag, and a search;
- a group page with 1 member (10 partitions), with 1,000 members (one partition each),
  and with 10,000 partitions (10 members); each group has six rebalances of history.

Each page is timed by HTTP (time to the first byte; the page is rendered before it is
sent) and in Chromium (Debian's, by Playwright: navigation start to the load event,
i.e. to a rendered page with its stylesheet and script); medians of ``--repeat``. The
process's RSS is reported with the model loaded.

Live (``--live``): a real broker with ``--live-groups`` groups that committed offsets
and one group of three members consuming while a producer sends 100 records a second;
``odradek console`` as a process: how long it takes to catch up, its pages' times and
RSS; then the broker's CPU over ``--window`` seconds, three times: with the console
running and no page open, with one group page open in Chromium (its live updates
on), and with no console at all.

    cd bench && python3 console.py                       # pages only (~1 min)
    cd bench && python3 console.py --live                # and the live costs (~6 min)

The code measured is whatever ``odradek`` the interpreter imports.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.client import HTTPConnection
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from report import markdown_table  # bench/report.py (scripts run from bench/)

from odradek.console.app import create_app
from odradek.console.lagstore import LagStore
from odradek.console.service import ConsoleService, ConsoleSettings
from odradek.coordinator.events import make_event
from odradek.coordinator.history import event_record
from odradek.coordinator.records import (
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitValue,
    group_metadata_record,
    offset_commit_record,
)
from odradek.protocol.consumer_protocol import Assignment, encode_assignment, group_by_topic

CHROMIUM = os.environ.get("ODRADEK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox", "--headless", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
MINUTE = 60_000


def rss_mb(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --- pages at scale ---------------------------------------------------------------------


def members(topic: str, count: int, per_member: int) -> list[MemberMetadataValue]:
    out = []
    for i in range(count):
        tps = [(topic, i * per_member + p) for p in range(per_member)]
        blob = encode_assignment(Assignment(group_by_topic(tps)))
        out.append(
            MemberMetadataValue(
                f"consumer-{i}-{i:08x}-1111-2222-3333-444455556666", None, f"consumer-{i}",
                f"/10.0.{i // 250}.{i % 250}", 300_000, 45_000, b"", blob,
            )
        )  # fmt: skip
    return out


def history(service: ConsoleService, group: str, t0: int, ids: list[str]) -> None:
    """Six rebalances: joins, a leave, a session timeout."""
    reasons = [
        "adding new member x (client reason: initial join)",
        "member y left the group (client reason: the consumer is being closed)",
        "member z session timed out",
    ]
    seq = 0
    for n in range(6):
        at = t0 + n * 5 * MINUTE
        fields = dict(
            generation=n + 1, state="Stable", duration_ms=3_000, joined=ids[:2],
            left=[], kept=ids[2:50], reasons=[reasons[n % 3]],
        )  # fmt: skip
        for kind, dt, f in (
            ("state_transition", 0, dict(from_state="Stable", to_state="PreparingRebalance",
                                         generation=n, members=ids[:50], leader=ids[0],
                                         reason=reasons[n % 3])),
            ("rebalance_completed", 3_000, fields),
        ):  # fmt: skip
            rec = event_record(group, seq, make_event(kind, group, at + dt, **f))
            service.model.apply_record(rec.key, rec.value, at + dt)
            seq += 1


def detail_group(
    service: ConsoleService, store: LagStore, name: str, topic: str, count: int, per: int
) -> None:
    now = int(time.time() * 1000)
    t0 = now - 40 * MINUTE
    ms = members(topic, count, per)
    partitions = count * per
    service.model.apply_log_ends({(topic, p): 100_000 for p in range(partitions)})
    history(service, name, t0, [m.member_id for m in ms])
    value = GroupMetadataValue("consumer", 6, "range", ms[0].member_id, now, tuple(ms))
    rec = group_metadata_record(name, value)
    with service.model.batch():  # as the tail applies what one fetch returned
        service.model.apply_record(rec.key, rec.value, t0 + 30 * MINUTE + 3_000)
        for p in range(partitions):
            commit = OffsetCommitValue(99_000 + p % 1000, -1, "", now - 1_000)
            rec = offset_commit_record(name, topic, p, commit)
            service.model.apply_record(rec.key, rec.value, now - 1_000)
    layout = tuple((topic, p) for p in range(partitions))
    for minute in range(60):
        at = now - (60 - minute) * MINUTE
        values = tuple((90_000 + minute * 150 + p % 7, 100_000) for p in range(partitions))
        store.record(name, at, layout, values)
    store.flush()


def build(groups: int, lag_file: Path) -> tuple[ConsoleService, float]:
    started = time.perf_counter()
    service = ConsoleService(
        ConsoleSettings(client={"bootstrap_servers": "127.0.0.1:9"}, lag_file=lag_file)
    )
    store = LagStore(lag_file, None)
    service.store = store
    model = service.model
    states = ("Stable", "Empty", "Stable", "PreparingRebalance")
    model.apply_listing(
        [
            SimpleNamespace(
                group_id=f"group-{i:05d}", state=states[i % 4], type="classic",
                coordinator=0, protocol_type="consumer",
            )
            for i in range(groups)
        ]
    )  # fmt: skip
    model.apply_log_ends({("orders", p): 50_000 for p in range(10)})
    now = int(time.time() * 1000)
    with model.batch():
        for i in range(groups):
            for k in range(3):  # three commits: a verdict window
                value = OffsetCommitValue(
                    40_000 + i % 9_000 + k * 10, -1, "", now - (3 - k) * 5_000
                )
                rec = offset_commit_record(f"group-{i:05d}", "orders", i % 10, value)
                model.apply_record(rec.key, rec.value, now)
    model.evaluate()
    detail_group(service, store, "one-member", "solo", 1, 10)
    detail_group(service, store, "thousand-members", "wide", 1_000, 1)
    detail_group(service, store, "ten-thousand-partitions", "huge", 10, 1_000)
    return service, time.perf_counter() - started


class Server(threading.Thread):
    """The console's app on a loop of its own (no feeds: the model is filled above)."""

    def __init__(self, service: ConsoleService) -> None:
        super().__init__(daemon=True)
        self.service = service
        self.port = 0
        self.ready = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stop_event: asyncio.Event | None = None

    def run(self) -> None:
        from aiohttp import web

        async def main() -> None:
            self.loop = asyncio.get_running_loop()
            self.stop_event = asyncio.Event()
            runner = web.AppRunner(create_app(self.service), access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = int(runner.addresses[0][1])
            self.ready.set()
            await self.stop_event.wait()
            await runner.cleanup()

        asyncio.run(main())

    def stop(self) -> None:
        if self.loop is not None and self.stop_event is not None:
            self.loop.call_soon_threadsafe(self.stop_event.set)
        self.join(10)


def ttfb(port: int, path: str, repeat: int) -> tuple[float, float, int]:
    """Medians of (first byte s, whole page s), and the page's size."""
    firsts, wholes, size = [], [], 0
    for _ in range(repeat):
        conn = HTTPConnection("127.0.0.1", port, timeout=60)
        t0 = time.perf_counter()
        conn.request("GET", path)
        response = conn.getresponse()
        t1 = time.perf_counter()
        body = response.read()
        t2 = time.perf_counter()
        conn.close()
        assert response.status == 200, (path, response.status, body[:300])
        firsts.append(t1 - t0)
        wholes.append(t2 - t0)
        size = len(body)
    return statistics.median(firsts), statistics.median(wholes), size


def rendered(browser: Any, url: str, repeat: int) -> float:
    """Median seconds from navigation start to the load event, in Chromium."""
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    times = []
    try:
        for _ in range(repeat):
            page.goto(url, wait_until="load")
            nav = page.evaluate("performance.getEntriesByType('navigation')[0].toJSON()")
            times.append(nav["loadEventEnd"] / 1000)
    finally:
        page.close()
    return statistics.median(times)


PAGES = [
    ("groups list, 20,000 groups, by lag", "/groups?sort=lag&order=desc"),
    ("groups list, 20,000 groups, a search", "/groups?q=group-1234"),
    ("group, 1 member, 10 partitions", "/groups/one-member"),
    ("group, 1,000 members", "/groups/thousand-members"),
    ("group, 10,000 partitions", "/groups/ten-thousand-partitions"),
    ("group JSON, 10,000 partitions", "/api/groups/ten-thousand-partitions"),
]


def pages_bench(args: argparse.Namespace, browser: Any) -> str:
    with tempfile.TemporaryDirectory(prefix="console-bench-") as tmp:
        service, built_s = build(args.groups, Path(tmp) / "lag.sqlite3")
        rss = rss_mb()
        server = Server(service)
        server.start()
        server.ready.wait(30)
        rows = [["page", "first byte ms", "whole ms", "rendered ms", "KiB"]]
        try:
            for label, path in PAGES:
                label = label.replace("20,000", f"{args.groups:,}")
                first, whole, size = ttfb(server.port, path, args.repeat)
                shown = "-"
                if not path.startswith("/api/"):
                    url = f"http://127.0.0.1:{server.port}{path}"
                    shown = f"{rendered(browser, url, max(args.repeat // 2, 3)) * 1000:.0f}"
                rows.append([label, f"{first * 1000:.0f}", f"{whole * 1000:.0f}", shown,
                             f"{size / 1024:,.0f}"])  # fmt: skip
        finally:
            server.stop()
            service.store.close()
    return (
        markdown_table(rows)
        + f"\n\nModel of {args.groups:,} groups (+ the three above) built in {built_s:.1f} s; "
        f"process RSS {rss:.0f} MB with it loaded."
    )


# --- live costs ----------------------------------------------------------------------


def live_bench(args: argparse.Namespace, browser: Any) -> str:
    from odradek.client import AdminClient, Consumer, Producer, TopicPartition
    from odradek.client.admin import NewTopic
    from odradek.testing import BrokerProcess, free_port

    out = []
    with tempfile.TemporaryDirectory(prefix="console-live-") as tmp:
        broker = BrokerProcess(
            Path(tmp) / "data", settings={"group.initial.rebalance.delay.ms": "0"}
        )
        broker.start()
        stop = threading.Event()
        threads: list[threading.Thread] = []
        console_proc: subprocess.Popen[bytes] | None = None
        try:
            with AdminClient(bootstrap_servers=broker.bootstrap) as admin:
                admin.create_topics([NewTopic("orders", 10, 1)])["orders"].result()
                started = time.perf_counter()
                tp = TopicPartition("orders", 0)
                for i in range(args.live_groups):
                    admin.alter_consumer_group_offsets(f"group-{i:05d}", {tp: 0})[tp].result()
                made_s = time.perf_counter() - started

            def produce() -> None:
                with Producer(bootstrap_servers=broker.bootstrap) as producer:
                    i = 0
                    while not stop.wait(0.01):
                        producer.send("orders", value=b"x" * 100, key=str(i % 97).encode())
                        i += 1

            def consume(n: int) -> None:
                with Consumer(
                    bootstrap_servers=broker.bootstrap, group_id="live", client_id=f"live-{n}",
                    auto_offset_reset="earliest", auto_commit_interval_ms=1000,
                ) as consumer:  # fmt: skip
                    consumer.subscribe(["orders"])
                    while not stop.is_set():
                        consumer.poll(0.5)

            for target, arg in ((produce, None), *((consume, n) for n in range(3))):
                t = threading.Thread(target=target, args=() if arg is None else (arg,), daemon=True)
                t.start()
                threads.append(t)

            port = free_port()
            console_started = time.perf_counter()
            with open(Path(tmp) / "console.log", "wb") as log:
                console_proc = subprocess.Popen(
                    [sys.executable, "-m", "odradek", "console", "--bootstrap", broker.bootstrap,
                     "--listen", f"127.0.0.1:{port}", "--lag-file", str(Path(tmp) / "lag.db")],
                    stdout=subprocess.DEVNULL, stderr=log,
                )  # fmt: skip
            url = f"http://127.0.0.1:{port}"

            def total() -> int:
                try:
                    with urllib.request.urlopen(f"{url}/api/groups?size=25", timeout=30) as r:
                        return int(json.loads(r.read())["total"])
                except OSError:
                    return -1

            while total() < args.live_groups + 1:
                assert console_proc.poll() is None, (Path(tmp) / "console.log").read_text()
                time.sleep(0.5)
            caught_up_s = time.perf_counter() - console_started
            time.sleep(10)  # the live group settles and commits
            rows = [["page (real console)", "first byte ms", "whole ms", "KiB"]]
            for label, path in (
                (
                    f"groups list, {args.live_groups + 1:,} groups, by lag",
                    "/groups?sort=lag&order=desc",
                ),
                ("group page, 3 live members", "/groups/live"),
            ):
                first, whole, size = ttfb(port, path, args.repeat)
                rows.append(
                    [label, f"{first * 1000:.0f}", f"{whole * 1000:.0f}", f"{size / 1024:,.0f}"]
                )
            out.append(markdown_table(rows))
            out.append(
                f"\n{args.live_groups:,} groups made in {made_s:.0f} s; the console listed them "
                f"all {caught_up_s:.1f} s after it started; console RSS "
                f"{rss_mb(console_proc.pid):.0f} MB."
            )

            def window(label: str) -> list[str]:
                b0 = cpu_s(broker.pid)  # type: ignore[arg-type]
                c0 = (
                    cpu_s(console_proc.pid) if console_proc and console_proc.poll() is None else 0.0
                )
                time.sleep(args.window)
                b1 = cpu_s(broker.pid)  # type: ignore[arg-type]
                c1 = (
                    cpu_s(console_proc.pid) if console_proc and console_proc.poll() is None else 0.0
                )
                per_min = 60 / args.window
                return [label, f"{(b1 - b0) * per_min:.2f}", f"{(c1 - c0) * per_min:.2f}"]

            cpu = [["window (same traffic in each)", "broker CPU s/min", "console CPU s/min"]]
            cpu.append(window("console running, no page open"))
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{url}/groups/live")
            cpu.append(window("console running, one group page open (live)"))
            updates = page.evaluate("document.body.dataset.updates || '0'")
            page.close()
            console_proc.terminate()
            console_proc.wait(30)
            console_proc = None
            cpu.append(window("no console"))
            out.append("\n" + markdown_table(cpu))
            out.append(f"\nThe open page received {updates} live updates in {args.window:.0f} s.")
        finally:
            stop.set()
            for t in threads:
                t.join(10)
            if console_proc is not None:
                console_proc.terminate()
                console_proc.wait(30)
            broker.stop()
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--live", action="store_true", help="also the live costs (a broker)")
    parser.add_argument("--live-groups", type=int, default=20_000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds per CPU window")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    print(
        f"# {platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"{time.strftime('%Y-%m-%d')}\n",
        flush=True,
    )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            print(pages_bench(args, browser), flush=True)
            if args.live:
                print("\n" + live_bench(args, browser), flush=True)
        finally:
            browser.close()


if __name__ == "__main__":
    main()
