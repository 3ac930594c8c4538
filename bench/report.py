"""Output shared by the benchmarks: a Markdown table ready for docs/benchmarks.md."""

from __future__ import annotations


def markdown_table(lines: list[list[str]]) -> str:
    """First line is the header; the first column is left-aligned, the rest right-aligned."""
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    out = []
    for i, line in enumerate(lines):
        cells = [line[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True)
        ]
        out.append("| " + " | ".join(cells) + " |")
        if i == 0:
            out.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(out)
