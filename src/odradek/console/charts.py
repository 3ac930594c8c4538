"""The console's charts, drawn as SVG on the server: no chart library, nothing to
download, and the page is complete as it arrives.

Each chart carries its own words: every point and span has a ``<title>`` (the browser
shows it on hover, a screen reader reads it), spans and stopped partitions are labelled
and hatched as well as coloured, and the lines differ by dash pattern, so nothing is
told by colour alone. Presentation is in ``console.css`` (classes) and SVG attributes:
the Content-Security-Policy allows no inline styles.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape
from itertools import pairwise
from typing import Any

WIDTH = 1200
MAX_POINTS = 600  # a longer series is thinned to this many points (the highest of each bucket)
LANE_HEIGHT = 22
LANE_LABEL = 210
SPAN_BAND = 46
SPAN_LABEL_ROOM = 220  # px a span's label needs to its right


def tick_anchor(at: float) -> str:
    """A time label's anchor: centred on its tick, but kept inside the chart's right edge."""
    return "end" if at > WIDTH - 40 else "middle"


def esc(value: Any) -> str:
    return escape(str(value), quote=True)


def clock(ms: int, *, seconds: bool = True) -> str:
    moment = datetime.fromtimestamp(ms / 1000).astimezone()
    return moment.strftime("%H:%M:%S" if seconds else "%H:%M")


def stamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def duration(ms: float | None) -> str:
    from odradek.cli.render import duration as text

    return text(ms)


def number(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def short(member: str) -> str:
    from odradek.cli.render import short_ids

    return short_ids(member)


def _ticks(start: int, end: int, count: int = 6) -> list[int]:
    if end <= start:
        return [start]
    step = (end - start) / count
    return [int(start + i * step) for i in range(count + 1)]


def _defs() -> str:
    return (
        "<defs>"
        '<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" class="hatch-bg"/>'
        '<line x1="0" y1="0" x2="0" y2="6" class="hatch-line" stroke-width="3"/></pattern>'
        "</defs>"
    )


def thin(points: Sequence[tuple[int, int]], limit: int = MAX_POINTS) -> list[tuple[int, int]]:
    """At most ``limit`` points: the highest lag of each equal slice of the series (a
    spike stays visible), in time order."""
    if len(points) <= limit:
        return list(points)
    size = len(points) / limit
    out = []
    for i in range(limit):
        bucket = points[int(i * size) : int((i + 1) * size)] or [points[-1]]
        out.append(max(bucket, key=lambda p: p[1]))
    return out


def lag_chart(
    samples: Sequence[dict[str, Any]],
    *,
    since_ms: int,
    now_ms: int,
    partition_samples: Sequence[Sequence[Any]] | None = None,
    height: int = 220,
) -> str:
    """Total lag over time (solid line, a dot per sample), and one partition's (dashed)."""
    total = thin([(s["at_ms"], int(s["lag"])) for s in samples])
    part = thin([(int(at), int(lag)) for at, lag in partition_samples or () if lag is not None])
    left, right, top, bottom = 70, WIDTH - 20, 12, height - 28
    # From the first sample of the window: a history younger than the window fills it.
    start = max(since_ms, total[0][0] - 1000) if total else since_ms
    end = max(now_ms, start + 1)
    peak = max([1, *(p[1] for p in total), *(p[1] for p in part)])

    def x(ms: int) -> float:
        return left + (ms - start) / (end - start) * (right - left)

    def y(lag: int) -> float:
        return bottom - lag / peak * (bottom - top)

    out = [
        f'<svg class="chart lag-chart" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'data-points="{len(total)}" aria-label="Lag over time: {len(total)} samples, '
        f'highest {peak:,}">',
        f'<line class="axis" x1="{left}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
        f'<line class="axis" x1="{left}" y1="{top}" x2="{left}" y2="{bottom}"/>',
        f'<text class="label" x="{left - 6}" y="{top + 4}" text-anchor="end">{peak:,}</text>',
        f'<text class="label" x="{left - 6}" y="{bottom}" text-anchor="end">0</text>',
    ]
    for t in _ticks(start, end):
        out.append(
            f'<text class="label" x="{x(t):.1f}" y="{height - 8}" '
            f'text-anchor="{tick_anchor(x(t))}">'
            f"{esc(clock(t, seconds=end - start < 6 * 3600_000))}</text>"
        )
    if not total:
        out.append(
            f'<text class="empty" x="{(left + right) / 2}" y="{(top + bottom) / 2}" '
            'text-anchor="middle">No lag samples yet: one is taken every sample interval'
            "</text></svg>"
        )
        return "".join(out)
    for cls, series in (("line total", total), ("line partition", part)):
        if not series:
            continue
        path = [f"M{x(series[0][0]):.1f},{y(series[0][1]):.1f}"]
        for (_t0, v0), (t1, v1) in pairwise(series):
            path.append(f"L{x(t1):.1f},{y(v0):.1f}L{x(t1):.1f},{y(v1):.1f}")
        path.append(f"L{x(end):.1f},{y(series[-1][1]):.1f}")
        out.append(f'<path class="{cls}" d="{"".join(path)}"/>')
    for t, v in total:
        out.append(
            f'<circle class="pt" cx="{x(t):.1f}" cy="{y(v):.1f}" r="3">'
            f"<title>{esc(stamp(t))}: lag {v:,}</title></circle>"
        )
    out.append("</svg>")
    return "".join(out)


def timeline_chart(view: dict[str, Any], *, window: int = 12) -> str:
    """The last ``window`` rebalances as spans, over one swimlane per member showing the
    partitions it owned, hatched where a rebalance had stopped them."""
    spans = view["rebalances"][-window:]
    lanes = view["lanes"]
    now = int(view["now_ms"])
    if not spans and not lanes:
        return '<p class="empty">No rebalance recorded yet.</p>'
    starts = [int(s["started_ms"]) for s in spans]
    starts += [seg["start_ms"] for lane in lanes for seg in lane["segments"]]
    start = min(starts) if starts else now - 60_000
    if spans:  # open on the rebalances shown, with a little before the first
        first = int(spans[0]["started_ms"])
        start = max(start, first - max((now - first) // 10, 1_000))
    end = max(now, start + 1)
    pad = (end - start) * 0.02
    start, end = int(start - pad), int(end + pad)
    left, right = LANE_LABEL, WIDTH - 10
    shown = lanes  # already cut to views.LANES_SHOWN
    height = SPAN_BAND + 24 + LANE_HEIGHT * len(shown) + 24

    def x(ms: int) -> float:
        return left + (min(max(ms, start), end) - start) / (end - start) * (right - left)

    out = [
        f'<svg class="chart timeline" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'data-rebalances="{len(spans)}" aria-label="Rebalance timeline: {len(spans)} '
        f'rebalances, {len(shown)} members">',
        _defs(),
        '<text class="label heading" x="4" y="16">Rebalances</text>',
    ]
    for s in spans:
        x0 = x(int(s["started_ms"]))
        finish = s["completed_ms"] if s["completed_ms"] is not None else now
        x1 = max(x(int(finish)), x0 + 3)
        causes = ", ".join(s["causes"]) or "unknown"
        took = duration(s["duration_ms"]) if s["duration_ms"] is not None else "in progress"
        gen = f"gen {s['generation']}" if s["generation"] is not None else "gen ?"
        title = f"Rebalance #{s['number']} ({gen}): {causes}; {took}; "
        title += f"from {stamp(int(s['started_ms']))}"
        if not s["start_known"]:
            title += " (start not observed: between two polls)"
        full = LANE_HEIGHT * len(shown) + SPAN_BAND
        # A span near the right edge is labelled leftwards, so that its label is not cut.
        at = f'x="{x0 + 2:.1f}"'
        if x0 > WIDTH - SPAN_LABEL_ROOM:
            at = f'x="{min(x1, right) - 2:.1f}" text-anchor="end"'
        out.append(
            f'<g class="span" data-number="{s["number"]}"><title>{esc(title)}</title>'
            f'<rect class="span-bar" x="{x0:.1f}" y="22" width="{x1 - x0:.1f}" height="{full}" '
            'fill="url(#hatch)"/>'
            f'<text class="label span-label" {at} y="34">#{s["number"]} {esc(gen)}</text>'
            f'<text class="label span-label" {at} y="48">{esc(causes)} · {esc(took)}'
            "</text></g>"
        )
    y0 = SPAN_BAND + 24
    out.append(
        f'<text class="label heading" x="4" y="{y0 - 6}">Partitions owned, per member</text>'
    )
    for i, lane in enumerate(shown):
        y = y0 + i * LANE_HEIGHT
        out.append(
            f'<text class="label member" x="4" y="{y + 15}"><title>{esc(lane["member"])}</title>'
            f"{esc(short(lane['member'])[:30])}</text>"
            f'<line class="lane" x1="{left}" y1="{y + LANE_HEIGHT - 1}" x2="{right}" '
            f'y2="{y + LANE_HEIGHT - 1}"/>'
        )
        for seg in lane["segments"]:
            if seg["end_ms"] < start:
                continue
            a, b = x(seg["start_ms"]), x(seg["end_ms"])
            names = ", ".join(f"{p['topic']}-{p['partition']}" for p in seg["partitions"])
            took = duration(seg["end_ms"] - seg["start_ms"])
            if seg["stopped"]:
                cls, label = "seg stopped", f"stopped: {names}"
                title = f"{names} stopped for {took} (rebalance), from {stamp(seg['start_ms'])}"
                fill = ' fill="url(#hatch)"'
            else:
                cls, label, fill = "seg owned", names, ""
                title = f"{names} owned for {took}, from {stamp(seg['start_ms'])}"
            width = max(b - a, 1.5)
            text = ""
            if width > 40:
                chars = int(width / 6.5)
                if len(label) > chars:
                    label = label[: max(chars - 1, 1)] + "…"
                text = (
                    f'<text class="label seg-label" x="{a + 3:.1f}" y="{y + 15}">'
                    f"{esc(label)}</text>"
                )
            out.append(
                f'<g class="{cls}"><title>{esc(title)}</title><rect x="{a:.1f}" y="{y + 3}" '
                f'width="{width:.1f}" height="{LANE_HEIGHT - 6}"{fill}/>{text}</g>'
            )
    for t in _ticks(start, end):
        out.append(
            f'<text class="label" x="{x(t):.1f}" y="{height - 6}" '
            f'text-anchor="{tick_anchor(x(t))}">'
            f"{esc(clock(t))}</text>"
        )
    hidden = max(view.get("members_with_lanes", len(lanes)), len(lanes)) - len(shown)
    if hidden > 0:
        out.append(
            f'<text class="label" x="4" y="{height - 6}">+{hidden:,} members not drawn</text>'
        )
    out.append("</svg>")
    return "".join(out)
