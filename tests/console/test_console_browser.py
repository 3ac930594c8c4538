"""The web console in a real headless Chromium, against a real broker and real consumers.

One broker and one console serve every test here (``conftest.py``); each test uses its
own topics and groups. What a person would do is done through the page (click, type,
read); the JSON API is used only to wait for the cluster to get somewhere.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.client import AdminClient, Producer, TopicPartition
from odradek.client.admin import NewTopic

from .conftest import ConsoleProcess, Member, eventually, screenshot

pytestmark = pytest.mark.timeout(120)


def unique(kind: str) -> str:
    return f"console-{kind}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def admin(console_broker: Any) -> Iterator[AdminClient]:
    with AdminClient(bootstrap_servers=console_broker.bootstrap) as client:
        yield client


def create_topic(admin: AdminClient, name: str, partitions: int) -> None:
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result()


class Traffic(threading.Thread):
    """Produces to a topic until stopped, so that lag moves."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(bootstrap_servers=bootstrap, linger_ms=5)
        self.topic = topic
        self.done = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.done.wait(0.02):
            self.producer.send(self.topic, value=f"order {i}".encode(), key=str(i % 7).encode())
            i += 1
        self.producer.flush(10)
        self.producer.close()


def group_state(console: ConsoleProcess, group: str) -> dict[str, Any] | None:
    status, body = console.get(f"/api/groups/{group}")
    return body if status == 200 else None


def members_are(console: ConsoleProcess, group: str, ids: set[str]) -> Callable[[], Any]:
    def probe() -> Any:
        g = group_state(console, group)
        if g is None or g["state"] != "Stable":
            return None
        return {m["client_id"] for m in g["members"]} == ids and g

    return probe


def test_a_group_page_shows_three_rebalances_their_causes_and_the_lag_chart(
    console: ConsoleProcess,
    console_broker: Any,
    admin: AdminClient,
    members: Callable[..., Member],
    page: Any,
    tmp_path: Path,
) -> None:
    topic, group = unique("orders"), unique("billing")
    create_topic(admin, topic, 6)
    traffic = Traffic(console_broker.bootstrap, topic)
    traffic.start()
    try:
        # Two members start together (one rebalance), a third joins late, one is killed.
        members(group, topic, "alpha")
        bravo = members(group, topic, "bravo")
        eventually(members_are(console, group, {"alpha", "bravo"}), "alpha and bravo", 45)
        members(group, topic, "charlie")
        eventually(members_are(console, group, {"alpha", "bravo", "charlie"}), "charlie joined", 45)
        bravo.kill()  # no LeaveGroup: the coordinator finds out when its session ends

        def three_rebalances() -> Any:
            view = console.api(f"/api/groups/{group}/rebalances")
            done = [r for r in view["rebalances"] if r["completed_ms"] is not None]
            return len(done) >= 3 and view

        view = eventually(three_rebalances, "the third rebalance (bravo's session)", 45)
        eventually(members_are(console, group, {"alpha", "charlie"}), "alpha and charlie", 30)
        eventually(
            lambda: len(console.api(f"/api/groups/{group}/lag")["samples"]) >= 4,
            "lag samples",
            30,
        )
    finally:
        traffic.done.set()
        traffic.join(15)
    assert [r["causes"] for r in view["rebalances"]][:3] == [
        ["join"],
        ["join"],
        ["session timeout"],
    ]

    page.goto(f"{console.url}/groups/{group}")
    assert page.title() == f"Group {group} · Odradek console"
    rows = page.locator("table.rebalances tr.rebalance")
    assert rows.count() == 3
    # Newest first: the killed member's session, then the two joins.
    causes = [rows.nth(i).locator("td.causes").inner_text() for i in range(3)]
    assert causes == ["session timeout", "join", "join"]
    assert "left: bravo" in rows.nth(0).inner_text()
    assert "joined: charlie" in rows.nth(1).inner_text()
    # Bravo's partitions stopped when it was killed, a session (6 s) before the rebalance.
    stopped = re.search(
        r"(\d+) \(.*\), up to ([\d.]+) s: those of the removed member", rows.nth(0).inner_text()
    )
    assert stopped is not None, rows.nth(0).inner_text()
    assert int(stopped[1]) == 6 and float(stopped[2]) >= 5.0  # eager: all 6 partitions
    timeline = page.locator("svg.timeline")
    assert timeline.get_attribute("data-rebalances") == "3"
    assert page.locator("svg.timeline g.span").count() == 3
    assert page.locator("svg.timeline g.seg.stopped").count() >= 1  # eager: partitions stopped
    lanes = " ".join(page.locator("svg.timeline text.member").all_text_contents())
    assert "alpha" in lanes and "charlie" in lanes and "bravo" in lanes
    points = page.locator("svg.lag-chart circle.pt")
    assert points.count() >= 4
    assert int(page.locator("svg.lag-chart").get_attribute("data-points")) == points.count()
    assert "lag" in (points.first.locator("title").text_content() or "")
    facts = page.locator("#group-facts").inner_text()
    assert "Stable" in facts and "Members\n2" in facts
    members_text = page.locator("#members").inner_text()
    assert "alpha" in members_text and "charlie" in members_text and "bravo" not in members_text
    shot = screenshot(page, "console-group.png", tmp_path)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reset_offsets_dry_run_refused_while_active_then_executed(
    console: ConsoleProcess,
    admin: AdminClient,
    members: Callable[..., Member],
    page: Any,
    console_broker: Any,
) -> None:
    topic, group = unique("audit"), unique("auditors")
    create_topic(admin, topic, 2)
    with Producer(bootstrap_servers=console_broker.bootstrap) as producer:
        for i in range(40):
            producer.send(topic, value=b"x", partition=i % 2)
        producer.flush(10)
    member = members(group, topic, "auditor")

    def committed_all() -> Any:
        g = group_state(console, group)
        return g and g["state"] == "Stable" and g["totals"]["lag"] == 0 and g

    eventually(committed_all, "the member to commit everything", 45)

    page.goto(f"{console.url}/groups/{group}")
    page.select_option("#target", "earliest")
    page.click("form.reset button")
    refused = page.locator(".refused")
    assert "it is Stable with 1 member" in refused.inner_text()
    assert "stop its consumers first" in refused.inner_text()
    plan = page.locator("table.plan tbody tr")
    assert plan.count() == 2
    assert [plan.nth(i).locator("td").nth(3).inner_text() for i in range(2)] == ["0", "0"]
    assert page.locator("button", has_text="Execute").count() == 0

    member.stop()
    eventually(lambda: (group_state(console, group) or {}).get("state") == "Empty", "Empty")
    page.click("button:has-text('Check again')")
    assert "Dry run: nothing was changed." in page.locator(".plan-note").inner_text()
    assert [plan.nth(i).locator("td").nth(4).inner_text() for i in range(2)] == ["-20", "-20"]
    page.click("button:has-text('Execute')")
    assert "Committed 2 offsets" in page.locator(".done").inner_text()
    offsets = admin.list_consumer_group_offsets(group)
    assert {tp.partition: o.offset for tp, o in offsets.items()} == {0: 0, 1: 0}


def test_the_message_browser_shows_text_json_hex_and_headers_within_a_byte_bound(
    console: ConsoleProcess, admin: AdminClient, page: Any, console_broker: Any
) -> None:
    topic = unique("events")
    create_topic(admin, topic, 1)
    with Producer(bootstrap_servers=console_broker.bootstrap) as producer:
        producer.send(
            topic,
            key=b"\x00\xff\x10binary",
            value=json.dumps({"order": 7, "items": ["tea", "cake"]}).encode(),
            headers=[("source", b"web"), ("trace", b"\xfe\xff")],
        )
        producer.send(topic, key=b"plain", value=b"hello, console")
        for i in range(30):
            producer.send(topic, key=f"bulk-{i}".encode(), value=b"v" * 600)
        producer.flush(10)

    page.goto(f"{console.url}/topics/{topic}")
    page.fill("#offset", "0")
    page.fill("#limit", "2")
    page.select_option("#format", "json")
    page.click("button[name=browse]")
    records = page.locator("tr.record")
    assert records.count() == 2
    first = records.nth(0)
    pretty = first.locator("pre.format-json").inner_text()
    assert json.loads(pretty) == {"order": 7, "items": ["tea", "cake"]} and "\n  " in pretty
    assert first.locator("pre.format-hex").inner_text().startswith("00ff 1062")  # the key
    assert "source=web" in first.inner_text() and "trace=base64:/v8=" in first.inner_text()
    assert records.nth(1).locator("pre.format-text").nth(1).inner_text() == "hello, console"

    page.select_option("#format", "hex")
    page.click("button[name=browse]")
    assert page.locator("tr.record").nth(1).locator("pre.format-hex").nth(1).inner_text() == (
        "6865 6c6c 6f2c 2063 6f6e 736f 6c65"
    )
    # A page carries at most max_bytes of keys and values, and says where it stopped.
    page.goto(f"{console.url}/topics/{topic}?browse=1&partition=0&offset=2&limit=30&max_bytes=4096")
    assert page.locator("tr.record").count() == 6  # 6 x ~606 bytes fit in 4,096
    assert "stopped at the page's bound of 4,096 bytes" in page.locator(".summary").inner_text()
    page.click("a[rel=next]")
    assert page.locator("tr.record").first.locator("td").first.inner_text() == "8"


def test_pages_update_live_without_a_reload(
    console: ConsoleProcess, admin: AdminClient, page: Any
) -> None:
    group, topic = unique("live"), unique("live-topic")
    create_topic(admin, topic, 1)
    page.goto(f"{console.url}/groups?q={group}")
    assert "No groups." in page.locator("#groups-table").inner_text()
    page.wait_for_function("document.getElementById('live-status').dataset.state === 'live'")
    page.evaluate("window.__still_the_same_page = true")
    # A group appears: a simple group committing an offset.
    admin.alter_consumer_group_offsets(group, {TopicPartition(topic, 0): 0})[
        TopicPartition(topic, 0)
    ].result()
    page.locator("#groups-table a", has_text=group).wait_for(timeout=20_000)
    assert page.evaluate("window.__still_the_same_page") is True
    assert int(page.evaluate("document.body.dataset.updates")) >= 1
    assert "● live" in page.locator("#live-status").inner_text()
    # The search box kept its text: only the live region was replaced.
    assert page.input_value("#q") == group


def test_groups_page_search_sort_and_pages(
    console: ConsoleProcess, admin: AdminClient, page: Any
) -> None:
    topic, prefix = unique("many"), unique("fleet")
    create_topic(admin, topic, 1)
    tp = TopicPartition(topic, 0)
    for i in range(30):
        admin.alter_consumer_group_offsets(f"{prefix}-{i:02d}", {tp: 0})[tp].result()
    eventually(
        lambda: console.api(f"/api/groups?q={prefix}")["total"] == 30, "30 groups listed", 30
    )
    page.goto(f"{console.url}/groups")
    page.fill("#q", prefix)
    page.select_option("#size", "25")
    page.click("form.search button")
    assert "30 groups matching" in page.locator(".summary").inner_text()
    assert page.locator("table.groups tbody tr").count() == 25
    page.click("a[rel=next]")
    assert page.locator("table.groups tbody tr").count() == 5
    page.goto(f"{console.url}/groups?q={prefix}&size=25")
    page.click("th a:has-text('Group')")  # sorted by group already: now descending
    assert page.locator("table.groups tbody tr").first.inner_text().startswith(f"{prefix}-29")
