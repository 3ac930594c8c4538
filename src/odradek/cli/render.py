"""Output for people and for scripts.

Tables and colours come from ``rich``. On a terminal they fit its width; when the
output is a pipe or a file they are plain text, uncoloured and never wrapped, so
``grep`` and ``awk`` see one row per line. ``--format json`` prints plain JSON.
Progress bars go to stderr and only when stderr is a terminal.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

UNBOUNDED_WIDTH = 10_000  # non-terminal output: never wrap

STATE_STYLES = {
    "Stable": "green",
    "Empty": "dim",
    "PreparingRebalance": "yellow",
    "CompletingRebalance": "yellow",
    "Assigning": "yellow",
    "Reconciling": "yellow",
    "Dead": "red",
}


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr), plain and unwrapped when not a terminal."""
    stream = sys.stderr if stderr else sys.stdout
    is_tty = stream.isatty()
    return Console(
        file=stream,
        width=None if is_tty else UNBOUNDED_WIDTH,
        force_terminal=None if is_tty else False,
        no_color=not is_tty,
        highlight=False,
        soft_wrap=not is_tty,
    )


class Output:
    """Where a command prints: rich on a terminal; elsewhere the same text with the
    padding at line ends stripped, so files and pipes get clean lines."""

    def __init__(self, *, stderr: bool = False) -> None:
        self.console = console(stderr=stderr)
        self._stream = sys.stderr if stderr else sys.stdout
        self._plain = not self._stream.isatty()

    def print(self, *objects: Any) -> None:
        if not self._plain:
            self.console.print(*objects)
            return
        with self.console.capture() as captured:
            self.console.print(*objects)
        lines = [line.rstrip() for line in captured.get().splitlines()]
        self._stream.write("".join(line + "\n" for line in lines))
        self._stream.flush()


def output() -> Output:
    return Output()


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def table(
    *columns: str,
    title: str | None = None,
    numeric: Iterable[str] = (),
    show_footer: bool = False,
) -> Table:
    """A borderless table: bold headers, a rule under them, numbers right-aligned."""
    right = set(numeric)
    t = Table(
        box=box.SIMPLE,
        show_edge=False,
        title=title,
        title_justify="left",
        title_style="bold",
        header_style="bold",
        show_footer=show_footer,
        pad_edge=False,
        padding=(0, 1),
    )
    for name in columns:
        t.add_column(name, justify="right" if name in right else "left", overflow="fold")
    return t


def text(value: Any, style: str = "") -> Text:
    """User data as a cell: never read as rich markup."""
    return Text("-" if value is None or value == "" else str(value), style=style)


def state(name: str) -> Text:
    return Text(name or "-", style=STATE_STYLES.get(name, ""))


def number(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def key_values(pairs: Sequence[tuple[str, Any]]) -> Table:
    """Two aligned columns: label, value (for a heading block)."""
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    for label, value in pairs:
        t.add_row(label, value if isinstance(value, Text) else text(value))
    return t


# --------------------------------------------------------------------- time and ids


def local_time(ms: int, *, with_date: bool = True) -> str:
    moment = datetime.fromtimestamp(ms / 1000).astimezone()
    stamp = moment.strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")
    return f"{stamp}.{ms % 1000:03d}"


def duration(ms: int | float | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(ms / 1000, 60)
    return f"{int(minutes)} min {seconds:.0f} s"


_UUID_TAIL = re.compile(
    r"\b([\w.\-]*?)-?([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
)


def short_ids(value: str) -> str:
    """Member ids like ``consumer-1-a4a7ebe7-9da2-45ab-bbda-75dd68eae88f`` shortened to
    ``consumer-1-a4a7ebe7`` (client id and the first 8 digits keep them distinct)."""
    return _UUID_TAIL.sub(
        lambda m: f"{m.group(1)}-{m.group(2)}" if m.group(1) else m.group(2), value
    )


# --------------------------------------------------------------------- progress


def progress_wanted(*, data_on_stdout: bool = False) -> bool:
    """Progress bars only where a person watches: stderr is a terminal and (when the
    command's data goes to stdout) stdout is not that terminal."""
    if not sys.stderr.isatty():
        return False
    return not (data_on_stdout and sys.stdout.isatty())


class Bar:
    """One task on a rich Progress, or nothing when progress is off."""

    def __init__(self, progress: Progress | None, task: Any) -> None:
        self._progress = progress
        self._task = task

    def advance(self, amount: float = 1) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, amount)

    def update(self, **fields: Any) -> None:
        if self._progress is not None:
            self._progress.update(self._task, **fields)


@contextmanager
def progress(
    description: str,
    *,
    total: float | None,
    enabled: bool,
    unit: str = "",
    bytes_total: bool = False,
) -> Iterator[Bar]:
    """A progress bar on stderr (a spinner with a count when ``total`` is None)."""
    if not enabled:
        yield Bar(None, None)
        return
    columns: list[Any] = [SpinnerColumn(), TextColumn("[bold]{task.description}")]
    if total is not None:
        columns += [BarColumn(), TaskProgressColumn()]
    if bytes_total:
        from rich.progress import DownloadColumn

        columns.append(DownloadColumn())
    else:
        columns.append(
            MofNCompleteColumn() if total is not None else TextColumn("{task.completed:,.0f}")
        )
    if unit:
        columns.append(TextColumn(unit))
    columns += [TimeElapsedColumn()]
    if total is not None:
        columns.append(TimeRemainingColumn())
    with Progress(*columns, console=console(stderr=True), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield Bar(bar, task)
