"""The console's pages as HTML, rendered on the server from the views' dicts.

A page is a list of blocks; blocks with an id are *live*: the page's one server-sent
events connection receives them again, rendered by these same functions, whenever what
they show changed, and ``console.js`` swaps them in place (forms and scroll stay). So
there is one way a page is drawn, and it works without JavaScript (only the live
updates need it).

Nothing here relies on colour alone: states and verdicts are words with a symbol,
and the charts label what they draw (``charts``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from odradek.console.charts import (
    clock,
    duration,
    esc,
    lag_chart,
    number,
    short,
    stamp,
    timeline_chart,
)
from odradek.console.views import MEMBERS_PAGE, PAGE_SIZES, PARTITIONS_PAGE

VERDICT_MARKS = {"OK": "✔", "WARNING": "▲", "ERROR": "✖", "-": "·"}
STATE_MARKS = {
    "Stable": "●",
    "Empty": "○",
    "PreparingRebalance": "◐",
    "CompletingRebalance": "◑",
    "Assigning": "◐",
    "Reconciling": "◑",
    "Dead": "✖",
}


@dataclass
class Block:
    html: str
    id: str | None = None  # live blocks have an id


@dataclass
class Page:
    title: str
    nav: str
    blocks: list[Block] = field(default_factory=list)
    status: int = 200

    def live(self) -> dict[str, str]:
        return {b.id: b.html for b in self.blocks if b.id}


def live(block_id: str, html: str) -> Block:
    return Block(f'<div id="{block_id}" class="live-region">{html}</div>', block_id)


def static(html: str) -> Block:
    return Block(html)


def layout(
    page: Page,
    *,
    view: str,
    user: str | None,
    csrf: str | None,
    read_only: bool,
    live_updates: bool = True,
    version: int | None = None,
) -> str:
    current = ' aria-current="page"'
    nav = "".join(
        f'<a href="/{name}"{current if page.nav == name else ""}>{name.capitalize()}</a>'
        for name in ("groups", "topics", "cluster")
    )
    who = ""
    if user:
        who = (
            f'<form class="logout" method="post" action="/logout">'
            f'<input type="hidden" name="csrf" value="{esc(csrf or "")}">'
            f"<span>signed in as {esc(user)}</span> <button>Sign out</button></form>"
        )
    mode = '<span class="badge">read-only</span>' if read_only else ""
    events = "/events?view=" + quote(view, safe="")
    if version is not None:
        events += f"&v={version}"
    live_attr = f' data-live="{esc(events)}"' if live_updates else ""
    body = "".join(b.html for b in page.blocks)
    return (
        "<!doctype html>"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(page.title)} · Odradek console</title>"
        '<link rel="stylesheet" href="/static/console.css">'
        '<script src="/static/console.js" defer></script>'
        f"</head><body{live_attr}>"
        '<header><a class="brand" href="/groups">Odradek console</a>'
        f"<nav>{nav}</nav>{mode}"
        '<span id="live-status" class="live-status" role="status">static page</span>'
        f"{who}</header>"
        f"<main>{body}</main></body></html>"
    )


def state_text(state: str | None) -> str:
    state = state or "Unknown"
    mark = STATE_MARKS.get(state, "?")
    return f'<span class="state state-{esc(state.lower())}">{mark} {esc(state)}</span>'


def verdict_text(label: str | None) -> str:
    label = label or "-"
    head = label.split(" ", 1)[0]
    return (
        f'<span class="verdict verdict-{esc(head.lower())}">'
        f"{VERDICT_MARKS.get(head, '·')} {esc(label)}</span>"
    )


def seconds_text(seconds: float | None) -> str:
    if seconds is None:
        return "not clearing at the current pace"
    if seconds <= 0:
        return "no lag"
    return "about " + duration(seconds * 1000)


def feed_note(feed: dict[str, Any]) -> str:
    notes = []
    state = feed.get("offsets_topic")
    if state and state != "live":
        notes.append(f"__consumer_offsets: {esc(state)}")
    if feed.get("cluster_error"):
        notes.append(f"cluster: {esc(feed['cluster_error'])}")
    if not notes:
        return ""
    return '<p class="note" role="note">' + " · ".join(notes) + "</p>"


def error_block(message: str) -> Block:
    return static(f'<p class="error" role="alert">{esc(message)}</p>')


def error_page(status: int, message: str, nav: str = "") -> Page:
    return Page("Error", nav, [static(f"<h1>{status}</h1>"), error_block(message)], status)


def _query(base: dict[str, Any], **changes: Any) -> str:
    merged = {**base, **changes}
    return urlencode({k: v for k, v in merged.items() if v not in (None, "")})


# --- groups --------------------------------------------------------------------------------


def groups_page(view: dict[str, Any]) -> Page:
    params = {
        "q": view["query"],
        "sort": view["sort"],
        "order": view["order"],
        "size": view["size"],
    }
    sizes = "".join(
        f'<option value="{n}"{" selected" if n == view["size"] else ""}>{n}</option>'
        for n in PAGE_SIZES
    )
    search = (
        '<form class="search" method="get" action="/groups" role="search">'
        '<label for="q">Search groups</label>'
        f'<input id="q" name="q" type="search" value="{esc(view["query"])}" '
        'placeholder="part of a group id">'
        f'<input type="hidden" name="sort" value="{esc(view["sort"])}">'
        f'<input type="hidden" name="order" value="{esc(view["order"])}">'
        f'<label for="size">per page</label><select id="size" name="size">{sizes}</select>'
        "<button>Search</button></form>"
    )
    return Page(
        "Groups",
        "groups",
        [
            static("<h1>Consumer groups</h1>"),
            static(search),
            live("groups-table", groups_table(view, params)),
        ],
    )


def groups_table(view: dict[str, Any], params: dict[str, Any]) -> str:
    def header(key: str, label: str, numeric: bool = False) -> str:
        order = "desc" if view["sort"] == key and view["order"] == "asc" else "asc"
        mark = ""
        aria = ""
        if view["sort"] == key:
            mark = " ▲" if view["order"] == "asc" else " ▼"
            aria = f' aria-sort="{"ascending" if view["order"] == "asc" else "descending"}"'
        cls = ' class="num"' if numeric else ""
        return (
            f'<th scope="col"{cls}{aria}>'
            f'<a href="/groups?{_query(params, sort=key, order=order, page=1)}">'
            f"{label}{mark}</a></th>"
        )

    rows = []
    for g in view["groups"]:
        rows.append(
            "<tr>"
            f'<td><a href="/groups/{quote(g["group"], safe="")}">{esc(g["group"])}</a></td>'
            f"<td>{state_text(g['state'])}</td>"
            f"<td>{esc(g['protocol'])}</td>"
            f'<td class="num">{number(g["members"])}</td>'
            f'<td class="num">{number(g["lag"])}</td>'
            f"<td>{verdict_text(g['verdict'])}</td></tr>"
        )
    total = view["total"]
    summary = f"{total:,} group{'s' if total != 1 else ''}"
    if view["query"]:
        summary += f" matching “{esc(view['query'])}” of {view['all_groups']:,}"
    pager = _pager("/groups", params, view["page"], view["pages"])
    table = (
        '<table class="groups"><thead><tr>'
        + header("group", "Group")
        + header("state", "State")
        + header("protocol", "Protocol")
        + header("members", "Members", True)
        + header("lag", "Lag", True)
        + header("verdict", "Verdict")
        + "</tr></thead><tbody>"
        + ("".join(rows) or '<tr><td colspan="6" class="empty">No groups.</td></tr>')
        + "</tbody></table>"
    )
    return f'<p class="summary">{summary}</p>{feed_note(view["feed"])}{table}{pager}'


def _pager(path: str, params: dict[str, Any], page: int, pages: int, key: str = "page") -> str:
    if pages <= 1:
        return ""
    links = []
    if page > 1:
        links.append(
            f'<a rel="prev" href="{path}?{_query(params, **{key: page - 1})}">← previous</a>'
        )
    links.append(f"<span>page {page} of {pages:,}</span>")
    if page < pages:
        links.append(f'<a rel="next" href="{path}?{_query(params, **{key: page + 1})}">next →</a>')
    return f'<nav class="pager" aria-label="pages">{" ".join(links)}</nav>'


# --- a group ---------------------------------------------------------------------------------


def group_page(
    view: dict[str, Any],
    rebalances: dict[str, Any],
    lag: dict[str, Any],
    *,
    params: dict[str, Any],
    csrf: str | None,
    read_only: bool,
) -> Page:
    g = view["group"]
    return Page(
        f"Group {g}",
        "groups",
        [
            static(f'<h1>Group <span class="mono">{esc(g)}</span></h1>'),
            live("group-facts", group_facts(view)),
            static("<h2>Members</h2>"),
            live("members", members_table(view, int(params.get("mpage") or 1))),
            static("<h2>Rebalance timeline</h2>"),
            live("timeline", timeline_section(rebalances)),
            static("<h2>Lag over time</h2>"),
            live("lag", lag_section(lag, params)),
            static("<h2>Offsets</h2>"),
            live("offsets", offsets_table(view, params)),
            static(reset_form(view, csrf, read_only)),
        ],
    )


def group_facts(view: dict[str, Any]) -> str:
    v = view["verdict"]
    verdict = verdict_text(v["label"]) if v else verdict_text("-")
    clear = seconds_text(v["seconds_to_clear"]) if v else "-"
    protocol = view["protocol"]
    if view["protocol"] == "consumer":
        protocol = "consumer (KIP-848)"
    if view["assignor"]:
        protocol += f", assignor {view['assignor']}"
    facts = [
        ("State", state_text(view["state"])),
        ("Protocol", esc(protocol)),
        (view["epoch_name"].capitalize(), esc(number(view["generation"]))),
        (
            "Coordinator",
            esc("-" if view["coordinator"] is None else f"broker {view['coordinator']}"),
        ),
        ("Members", esc(len(view["members"]))),
        ("Total lag", esc(number(view["totals"]["lag"]))),
        ("Verdict", verdict),
        ("Lag clears in", esc(clear)),
    ]
    items = "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in facts)
    counts = ""
    if v and v["partitions"]:
        counts = (
            '<p class="note">Partitions not OK: '
            + ", ".join(f"{n} {esc(name)}" for name, n in sorted(v["partitions"].items()))
            + "</p>"
        )
    return f'<dl class="facts">{items}</dl>{counts}{feed_note(view["feed"])}'


def _tp_list(tps: Sequence[dict[str, Any]]) -> str:
    by_topic: dict[str, list[int]] = {}
    for tp in tps:
        by_topic.setdefault(tp["topic"], []).append(tp["partition"])
    if not by_topic:
        return "-"
    return "; ".join(f"{esc(t)}: {', '.join(map(str, ps))}" for t, ps in sorted(by_topic.items()))


def members_table(view: dict[str, Any], page: int) -> str:
    members = view["members"]
    if not members:
        return '<p class="empty">No members.</p>'
    consumer = view["protocol"] == "consumer"
    pages = max((len(members) + MEMBERS_PAGE - 1) // MEMBERS_PAGE, 1)
    page = max(min(page, pages), 1)
    shown = members[(page - 1) * MEMBERS_PAGE : page * MEMBERS_PAGE]
    head = "<th>Member</th><th>Client id</th><th>Host</th><th>Instance id</th><th>Partitions</th>"
    if consumer:
        head += "<th class=num>Epoch</th><th>Target</th><th>To revoke</th><th>To receive</th>"
    rows = []
    for m in shown:
        row = (
            f'<td class="mono" title="{esc(m["member_id"])}">{esc(short(m["member_id"]))}</td>'
            f"<td>{esc(m['client_id'])}</td><td>{esc(m['host'])}</td>"
            f"<td>{esc(m['instance_id'] or '-')}</td><td>{_tp_list(m['assignment'])}</td>"
        )
        if consumer:
            same = m["target_assignment"] == m["assignment"]
            row += (
                f'<td class="num">{number(m["member_epoch"])}</td>'
                f"<td>{'= current' if same else _tp_list(m['target_assignment'])}</td>"
                f"<td>{_tp_list(m['to_revoke'])}</td><td>{_tp_list(m['to_receive'])}</td>"
            )
        rows.append(f"<tr>{row}</tr>")
    pager = _pager(f"/groups/{quote(view['group'], safe='')}", {}, page, pages, "mpage")
    return (
        f'<p class="summary">{len(members):,} member{"s" if len(members) != 1 else ""}</p>'
        f'<table class="members"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
        f"</tbody></table>{pager}"
    )


def timeline_section(view: dict[str, Any]) -> str:
    spans = view["rebalances"]
    source = (
        "recorded by the coordinator"
        if view["source"] == "events"
        else "inferred from the group's states and member sets (the broker records no "
        "rebalance events)"
    )
    assignor = (
        "eager (every partition stops)"
        if view["eager"]
        else "cooperative (only moved partitions stop)"
    )
    intro = (
        f'<p class="note">{len(spans)} rebalance{"s" if len(spans) != 1 else ""}, {source}; '
        f"the assignor is {assignor}.</p>"
    )
    rows = []
    for s in reversed(spans[-50:]):
        took = duration(s["duration_ms"]) if s["duration_ms"] is not None else "in progress"
        stopped = s["stopped_partitions"]
        stopped_text = "-"
        if stopped and s["state"] == "Empty":
            stopped_text = f"{len(stopped)} ({_tp_list(stopped)}): no member left to read them"
        elif stopped and s["stalled_since_ms"] is not None:
            longest = duration(s["completed_ms"] - s["stalled_since_ms"])
            stopped_text = (
                f"{len(stopped)} ({_tp_list(stopped)}), up to {longest}: those of the removed "
                "member had stopped at its last commit"
            )
        elif stopped:
            stopped_text = f"{len(stopped)} ({_tp_list(stopped)}) for {took}"
        people = "; ".join(
            f"{label}: {', '.join(esc(short(m)) for m in s[label])}"
            for label in ("joined", "left", "kept")
            if s[label]
        )
        start = stamp(int(s["started_ms"])) + ("" if s["start_known"] else " (or earlier)")
        rows.append(
            f'<tr class="rebalance" data-number="{s["number"]}">'
            f'<td class="num">#{s["number"]}</td>'
            f'<td class="num">{number(s["generation"])}</td>'
            f"<td>{esc(start)}</td><td class=num>{esc(took)}</td>"
            f'<td class="causes">{esc(", ".join(s["causes"]))}</td>'
            f"<td>{people or '-'}</td><td>{stopped_text}</td>"
            f'<td class="reasons">{esc("; ".join(short(r) for r in s["reasons"]))}</td></tr>'
        )
    table = ""
    if rows:
        table = (
            '<table class="rebalances"><thead><tr><th class=num>#</th><th class=num>Gen</th>'
            "<th>Started</th><th class=num>Took</th><th>Cause</th><th>Members</th>"
            "<th>Partitions stopped</th><th>Reasons</th></tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table>"
        )
    return intro + timeline_chart(view) + table


LAG_WINDOWS = (("1h", 3600), ("6h", 6 * 3600), ("24h", 24 * 3600), ("7d", 7 * 24 * 3600))


def lag_section(view: dict[str, Any], params: dict[str, Any]) -> str:
    samples = view["samples"]
    window = params.get("window") or "1h"
    current = ' aria-current="true"'
    links = " ".join(
        f'<a href="?{_query(params, window=name)}"{current if name == window else ""}>{name}</a>'
        for name, _ in LAG_WINDOWS
    )
    partitions = view["partition_names"]
    chosen = params.get("partition") or ""
    if view["partitions_judged"] <= len(partitions):
        options = '<option value="">total only</option>' + "".join(
            f'<option value="{esc(p)}"{" selected" if p == chosen else ""}>{esc(p)}</option>'
            for p in partitions
        )
        field = f'<select id="lag-partition" name="partition">{options}</select>'
    else:  # thousands of partitions: type one
        field = (
            f'<input id="lag-partition" name="partition" value="{esc(chosen)}" '
            'placeholder="topic-N">'
        )
    picker = (
        '<form class="inline" method="get">'
        f'<input type="hidden" name="window" value="{esc(window)}">'
        f'<label for="lag-partition">and partition</label>{field}<button>Show</button></form>'
    )
    legend = (
        '<p class="legend"><span class="key total">solid line, dots: total lag</span>'
        + (f' <span class="key partition">dashed: {esc(chosen)}</span>' if chosen else "")
        + "</p>"
    )
    stored = (
        "" if view["stored"] else '<p class="note">No lag file: history starts with this run.</p>'
    )
    verdicts = []
    for name, pv in view["partitions"].items():
        verdicts.append(
            f"<tr><td>{esc(name)}</td><td>{verdict_text(pv['verdict'])}</td>"
            f"<td>{esc(seconds_text(pv['seconds_to_clear']))}</td></tr>"
        )
    table = ""
    if verdicts:
        more = view["partitions_judged"] - len(verdicts)
        rest = f'<p class="note">and {more:,} more partitions (see the offsets below)</p>'
        table = (
            "<details><summary>Verdict per partition</summary>"
            '<table class="verdicts"><thead><tr><th>Partition</th><th>Verdict</th>'
            f"<th>Lag clears in</th></tr></thead><tbody>{''.join(verdicts)}</tbody>"
            f"</table>{rest if more > 0 else ''}</details>"
        )
    return (
        f'<div class="toolbar"><span>window: {links}</span>{picker}</div>{legend}{stored}'
        + lag_chart(
            samples,
            since_ms=view["since_ms"],
            now_ms=view["now_ms"],
            partition_samples=view["partition_samples"],
        )
        + f'<p class="note">{len(samples):,} samples. Verdicts follow Burrow\'s rules over '
        "each partition's last 10 commits; nothing to configure.</p>" + table
    )


def partitions_page(params: dict[str, Any]) -> tuple[int, int]:
    """(start, stop) of the offsets table's page ``ppage``."""
    try:
        page = max(int(params.get("ppage") or 1), 1)
    except ValueError:
        page = 1
    return (page - 1) * PARTITIONS_PAGE, page * PARTITIONS_PAGE


def offsets_table(view: dict[str, Any], params: dict[str, Any]) -> str:
    rows = view["partitions"]
    count = view["totals"]["partitions"]
    if not count:
        return '<p class="empty">No committed offsets and no assigned partitions.</p>'
    page = view["partitions_from"] // PARTITIONS_PAGE + 1
    pages = max((count + PARTITIONS_PAGE - 1) // PARTITIONS_PAGE, 1)
    out = []
    for r in rows:
        out.append(
            f"<tr><td>{esc(r['topic'])}</td><td class=num>{r['partition']}</td>"
            f"<td class=num>{number(r['committed_offset'])}</td>"
            f"<td class=num>{number(r['log_end_offset'])}</td>"
            f"<td class=num>{number(r['lag'])}</td>"
            f"<td>{verdict_text(r['verdict']) if r['verdict'] else '-'}</td>"
            f'<td class="mono">{esc(short(r["member_id"])) if r["member_id"] else "-"}</td></tr>'
        )
    base = {k: v for k, v in params.items() if k in ("window", "partition")}
    pager = _pager(f"/groups/{quote(view['group'], safe='')}", base, page, pages, "ppage")
    total = view["totals"]["lag"]
    return (
        '<table class="offsets"><thead><tr><th>Topic</th><th class=num>Partition</th>'
        "<th class=num>Committed</th><th class=num>Log end</th><th class=num>Lag</th>"
        "<th>Verdict</th><th>Member</th></tr></thead><tbody>"
        + "".join(out)
        + f"</tbody><tfoot><tr><td>Total</td><td class=num>{count:,}</td><td></td><td></td>"
        f"<td class=num>{number(total)}</td><td></td><td></td></tr></tfoot></table>{pager}"
    )


RESET_TARGETS = (
    ("earliest", "earliest offset"),
    ("latest", "latest offset (skip everything unread)"),
    ("datetime", "first record at or after a time"),
    ("offset", "a given offset"),
    ("shift", "shift by N (negative: re-read)"),
)


def reset_form(view: dict[str, Any], csrf: str | None, read_only: bool) -> str:
    if read_only:
        return '<h2>Reset offsets</h2><p class="note">This console is read-only.</p>'
    options = "".join(f'<option value="{k}">{esc(label)}</option>' for k, label in RESET_TARGETS)
    g = quote(view["group"], safe="")
    return (
        '<h2 id="reset">Reset offsets</h2>'
        '<p class="note">A dry run shows the plan first. As Kafka, the reset is refused while '
        "the group has members: stop its consumers, then execute.</p>"
        f'<form class="reset" method="post" action="/groups/{g}/reset">'
        f'<input type="hidden" name="csrf" value="{esc(csrf or "")}">'
        f'<label for="target">to</label><select id="target" name="target">{options}</select>'
        '<label for="value">value</label><input id="value" name="value" '
        'placeholder="offset, N, or 2026-01-31T09:00:00">'
        '<label for="topics">topics</label><input id="topics" name="topics" '
        'placeholder="all committed, or orders or orders:0,1">'
        '<button name="execute" value="0">Dry run</button></form>'
    )


def _change(row: dict[str, Any]) -> str:
    if row["current_offset"] is None:
        return "-"
    return f"{row['new_offset'] - row['current_offset']:+,}"


def reset_page(
    result: dict[str, Any], form: dict[str, str], csrf: str | None, read_only: bool
) -> Page:
    g = result["group"]
    rows = "".join(
        f"<tr><td>{esc(r['topic'])}</td><td class=num>{r['partition']}</td>"
        f"<td class=num>{number(r['current_offset'])}</td>"
        f"<td class=num>{number(r['new_offset'])}</td><td class=num>{_change(r)}</td></tr>"
        for r in result["partitions"]
    )
    table = (
        '<table class="plan"><thead><tr><th>Topic</th><th class=num>Partition</th>'
        "<th class=num>Current</th><th class=num>New</th><th class=num>Change</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )
    blocks = [static(f'<h1>Reset offsets of <span class="mono">{esc(g)}</span></h1>')]
    if result["executed"]:
        blocks.append(
            static(
                f'<p class="done" role="status">✔ Committed {len(result["partitions"])} offsets '
                f"for group {esc(g)}.</p>"
            )
        )
    elif result["refused"]:
        blocks.append(
            static(f'<p class="error refused" role="alert">✖ Refused: {esc(result["refused"])}</p>')
        )
    else:
        blocks.append(
            static('<p class="note plan-note" role="status">Dry run: nothing was changed.</p>')
        )
    title = "New offsets" if result["executed"] else "New offsets (dry run)"
    blocks.append(static(f"<h2>{title}</h2>{table}"))
    if not result["executed"] and not read_only:
        hidden = "".join(
            f'<input type="hidden" name="{esc(k)}" value="{esc(v)}">'
            for k, v in form.items()
            if k in ("target", "value", "topics")
        )
        # Refused: check again (a dry run) once the consumers are stopped.
        label, value = ("Check again", "0") if result["refused"] else ("Execute", "1")
        blocks.append(
            static(
                f'<form class="reset" method="post" action="/groups/{quote(g, safe="")}/reset">'
                f'<input type="hidden" name="csrf" value="{esc(csrf or "")}">{hidden}'
                f'<button name="execute" value="{value}">{label}</button></form>'
            )
        )
    blocks.append(static(f'<p><a href="/groups/{quote(g, safe="")}">← back to the group</a></p>'))
    return Page(f"Reset {g}", "groups", blocks)


# --- topics ------------------------------------------------------------------------------


def topics_page(view: dict[str, Any]) -> Page:
    rows = []
    for t in view["topics"]:
        flags = []
        if t["internal"]:
            flags.append("internal")
        if t["under_replicated"]:
            flags.append(f"▲ {t['under_replicated']} under-replicated")
        if t["offline"]:
            flags.append(f"✖ {t['offline']} offline")
        rows.append(
            f'<tr><td><a href="/topics/{quote(t["topic"], safe="")}">{esc(t["topic"])}</a></td>'
            f"<td class=num>{t['partitions']:,}</td><td class=num>{t['replication_factor']}</td>"
            f"<td>{esc(', '.join(flags) or 'healthy')}</td></tr>"
        )
    table = (
        '<table class="topics"><thead><tr><th>Topic</th><th class=num>Partitions</th>'
        "<th class=num>Replication</th><th>Health</th></tr></thead><tbody>"
        + ("".join(rows) or '<tr><td colspan="4" class="empty">No topics yet.</td></tr>')
        + "</tbody></table>"
    )
    return Page("Topics", "topics", [static("<h1>Topics</h1>"), live("topics-table", table)])


def topic_page(
    view: dict[str, Any], messages: dict[str, Any] | None, form: dict[str, str], error: str | None
) -> Page:
    name = view["topic"]
    parts = "".join(
        f"<tr><td class=num>{p['partition']}</td><td class=num>{p['leader']}</td>"
        f"<td>{_ids(p['replicas'])}</td><td>{_ids(p['isr'])}"
        f"{' ▲ under-replicated' if p['under_replicated'] else ''}</td>"
        f"<td class=num>{number(p['log_start_offset'])}</td>"
        f"<td class=num>{number(p['log_end_offset'])}</td></tr>"
        for p in view["partitions"]
    )
    partitions = (
        '<table class="partitions"><thead><tr><th class=num>Partition</th><th class=num>Leader</th>'
        "<th>Replicas</th><th>In sync</th><th class=num>Log start</th><th class=num>Log end</th>"
        f"</tr></thead><tbody>{parts}</tbody></table>"
    )
    default = ' class="default"'
    if view["configs_error"]:
        configs = f'<p class="error">{esc(view["configs_error"])}</p>'
    else:
        configs = (
            "<details><summary>Configs</summary>"
            '<table class="configs"><thead><tr><th>Name</th><th>Value</th><th>Source</th></tr>'
            "</thead><tbody>"
            + "".join(
                f"<tr{default if c['default'] else ''}><td>{esc(c['name'])}</td>"
                f"<td class=mono>{esc('(sensitive)' if c['sensitive'] else c['value'])}</td>"
                f"<td>{esc(c['source'].replace('_', ' '))}</td></tr>"
                for c in view["configs"]
            )
            + "</tbody></table></details>"
        )
    return Page(
        f"Topic {name}",
        "topics",
        [
            static(f'<h1>Topic <span class="mono">{esc(name)}</span></h1>'),
            live("partitions", partitions),
            static(configs),
            static("<h2>Messages</h2>" + message_form(view, form)),
            static(messages_block(messages, error)),
        ],
    )


def message_form(view: dict[str, Any], form: dict[str, str]) -> str:
    chosen = form.get("partition", "0")
    partitions = "".join(
        f'<option value="{p["partition"]}"{" selected" if str(p["partition"]) == chosen else ""}>'
        f"{p['partition']}</option>"
        for p in view["partitions"]
    )
    formats = "".join(
        f'<option value="{f}"{" selected" if form.get("format", "text") == f else ""}>{f}</option>'
        for f in ("text", "json", "hex")
    )
    return (
        f'<form class="messages" method="get" action="/topics/{quote(view["topic"], safe="")}">'
        '<label for="partition">partition</label>'
        f'<select id="partition" name="partition">{partitions}</select>'
        '<label for="offset">from offset</label>'
        '<input id="offset" name="offset" inputmode="numeric" '
        f'value="{esc(form.get("offset", ""))}" placeholder="last records">'
        f'<label for="timestamp">or from time</label><input id="timestamp" name="timestamp" '
        f'value="{esc(form.get("timestamp", ""))}" placeholder="2026-01-31T09:00:00">'
        f'<label for="limit">records</label><input id="limit" name="limit" inputmode="numeric" '
        f'value="{esc(form.get("limit", "20"))}">'
        f'<label for="format">as</label><select id="format" name="format">{formats}</select>'
        '<button name="browse" value="1">Show</button></form>'
    )


def messages_block(messages: dict[str, Any] | None, error: str | None) -> str:
    if error:
        return f'<p class="error" role="alert">{esc(error)}</p>'
    if messages is None:
        return ""
    rows = []
    for r in messages["records"]:
        headers = ", ".join(f"{esc(h['name'])}={esc(_header_value(h))}" for h in r["headers"])
        rows.append(
            f'<tr class="record"><td class=num>{r["offset"]:,}</td>'
            f"<td>{esc(stamp(r['timestamp_ms']))}</td>"
            f"<td>{_payload(r['key'])}</td><td>{_payload(r['value'])}</td>"
            f"<td>{headers or '-'}</td></tr>"
        )
    info = (
        f'<p class="summary">{len(messages["records"])} records of {esc(messages["topic"])}-'
        f"{messages['partition']} (log {number(messages['log_start_offset'])} to "
        f"{number(messages['log_end_offset'])}), {messages['bytes']:,} bytes"
    )
    if messages["truncated_by_bytes"]:
        info += f"; stopped at the page's bound of {messages['max_bytes']:,} bytes"
    info += "."
    base = f"/topics/{quote(messages['topic'], safe='')}"
    params = {
        "browse": 1,
        "partition": messages["partition"],
        "limit": messages["limit"],
        "format": messages["format"],
    }
    links = []
    first = messages["records"][0]["offset"] if messages["records"] else messages["next_offset"]
    if first > messages["log_start_offset"]:
        earlier = max(first - messages["limit"], messages["log_start_offset"])
        links.append(f'<a rel="prev" href="{base}?{_query(params, offset=earlier)}">← earlier</a>')
    if messages["next_offset"] < messages["log_end_offset"]:
        later = _query(params, offset=messages["next_offset"])
        links.append(f'<a rel="next" href="{base}?{later}">later →</a>')
    info += f' <span class="pager">{" ".join(links)}</span></p>'

    return (
        info
        + '<table class="records"><thead><tr><th class=num>Offset</th><th>Time</th><th>Key</th>'
        "<th>Value</th><th>Headers</th></tr></thead><tbody>"
        + ("".join(rows) or '<tr><td colspan="5" class="empty">No records there.</td></tr>')
        + "</tbody></table>"
    )


def _header_value(h: dict[str, Any]) -> str:
    if h["value"] is not None:
        return str(h["value"])
    return "base64:" + h["base64"] if h["base64"] else "null"


def _payload(p: dict[str, Any]) -> str:
    if p["null"]:
        return '<span class="null">null</span>'
    note = f'<span class="size">{p["format"]}, {p["size"]:,} B{", cut" if p["cut"] else ""}</span>'
    return f'<pre class="payload format-{esc(p["format"])}">{esc(p["shown"])}</pre>{note}'


# --- cluster ------------------------------------------------------------------------------


def cluster_page(view: dict[str, Any], access: dict[str, Any] | None) -> Page:
    return Page(
        "Cluster",
        "cluster",
        [
            static("<h1>Cluster</h1>"),
            live("cluster-brokers", cluster_brokers(view)),
            static("<h2>Partitions needing attention</h2>"),
            live("cluster-partitions", cluster_partitions(view)),
            static("<h2>Recent leader elections</h2>"),
            live("elections", elections_table(view)),
            static("<h2>This console's access</h2>" + access_block(access)),
        ],
    )


def cluster_brokers(view: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><td class=num>{b['id']}</td><td>{esc(b['host'])}:{b['port']}</td>"
        f"<td>{esc(b['rack'] or '-')}</td><td>{'★ controller' if b['controller'] else '-'}</td>"
        f"<td class=num>{b['leaders']:,}</td><td class=num>{b['replicas']:,}</td><td>● up</td></tr>"
        for b in view["brokers"]
    )
    for m in view["missing_brokers"]:
        since = f" since {esc(clock(m['last_seen_ms']))}" if m["last_seen_ms"] else ""
        rows += (
            f"<tr class=down><td class=num>{m['id']}</td><td>-</td><td>-</td><td>-</td>"
            f"<td></td><td></td><td>✖ not registered{since}</td></tr>"
        )
    facts = (
        '<dl class="facts"><div><dt>Cluster id</dt>'
        f"<dd class=mono>{esc(view['cluster_id'] or '-')}</dd></div>"
        f"<div><dt>Controller</dt><dd>{esc(number(view['controller']))}</dd></div>"
        f"<div><dt>Brokers</dt><dd>{len(view['brokers'])}</dd></div>"
        f"<div><dt>Partitions</dt><dd>{view['partitions']:,}</dd></div>"
        f"<div><dt>Under-replicated</dt><dd>{len(view['under_replicated']):,}</dd></div>"
        f"<div><dt>Offline</dt><dd>{len(view['offline']):,}</dd></div></dl>"
    )
    return (
        facts
        + feed_note(view["feed"])
        + '<table class="brokers"><thead><tr><th class=num>Broker</th><th>Address</th><th>Rack</th>'
        "<th>Role</th><th class=num>Leaders</th><th class=num>Replicas</th><th>Status</th>"
        "</tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def _ids(ids: Iterable[int]) -> str:
    return esc(", ".join(map(str, ids)))


def _partition_rows(items: Iterable[dict[str, Any]], status: str) -> str:
    return "".join(
        f"<tr><td>{esc(p['topic'])}</td><td class=num>{p['partition']}</td>"
        f"<td class=num>{p['leader'] if p['leader'] >= 0 else 'none'}</td>"
        f"<td>{_ids(p['replicas'])}</td><td>{_ids(p['isr'])}</td>"
        f"<td>{status}</td></tr>"
        for p in items
    )


def cluster_partitions(view: dict[str, Any]) -> str:
    rows = _partition_rows(view["offline"][:500], "✖ offline") + _partition_rows(
        view["under_replicated"][:500], "▲ under-replicated"
    )
    if not rows:
        return '<p class="ok">✔ Every partition has a leader and all its replicas in sync.</p>'
    return (
        '<table class="attention"><thead><tr><th>Topic</th><th class=num>Partition</th>'
        "<th class=num>Leader</th><th>Replicas</th><th>In sync</th><th>Status</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def elections_table(view: dict[str, Any]) -> str:
    if not view["elections"]:
        return '<p class="empty">No leader change seen since the console started.</p>'
    rows = "".join(
        f"<tr><td>{esc(stamp(e['at_ms']))}</td><td>{esc(e['topic'])}</td>"
        f"<td class=num>{e['partition']}</td>"
        f"<td class=num>{e['old_leader'] if e['old_leader'] >= 0 else 'none'}</td>"
        f"<td class=num>{e['new_leader'] if e['new_leader'] >= 0 else 'none'}</td>"
        f"<td class=num>{e['leader_epoch']}</td></tr>"
        for e in view["elections"][:100]
    )
    return (
        '<table class="elections"><thead><tr><th>Seen at</th><th>Topic</th>'
        "<th class=num>Partition</th><th class=num>Old leader</th><th class=num>New leader</th>"
        "<th class=num>Epoch</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )


def access_block(access: dict[str, Any] | None) -> str:
    if access is None:
        return ""
    parts = [
        f'<dl class="facts"><div><dt>Principal</dt><dd>{esc(access["principal"])}</dd></div>'
        f"<div><dt>Security</dt><dd>{esc(access['security_protocol'])}</dd></div>"
        f"<div><dt>__consumer_offsets</dt><dd>{esc(access['offsets_topic'])}</dd></div></dl>"
    ]
    if access["acls_error"]:
        parts.append(f'<p class="error">{esc(access["acls_error"])}</p>')
    elif access["acls"] is not None:
        rows = "".join(
            f"<tr><td>{esc(a['resource'])}</td><td>{esc(a['pattern'])}</td><td>{esc(a['operation'])}</td>"
            f"<td>{esc(a['permission'])}</td><td>{esc(a['host'])}</td></tr>"
            for a in access["acls"]
        )
        rows = rows or "<tr><td colspan=5>No ACL names this principal.</td></tr>"
        parts.append(
            '<table class="acls"><thead><tr><th>Resource</th><th>Pattern</th><th>Operation</th>'
            f"<th>Permission</th><th>Host</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    return "".join(parts)


def login_page(error: str | None, csrf: str, next_url: str) -> Page:
    message = f'<p class="error" role="alert">{esc(error)}</p>' if error else ""
    return Page(
        "Sign in",
        "",
        [
            static(
                "<h1>Sign in</h1>" + message + '<form class="login" method="post" action="/login">'
                f'<input type="hidden" name="csrf" value="{esc(csrf)}">'
                f'<input type="hidden" name="next" value="{esc(next_url)}">'
                '<label for="username">User</label>'
                '<input id="username" name="username" autocomplete="username" required>'
                '<label for="password">Password</label>'
                '<input id="password" name="password" type="password" '
                'autocomplete="current-password" required><button>Sign in</button></form>'
            )
        ],
    )
