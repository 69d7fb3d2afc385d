"""Progress of `attnbench run`: a live rich table on a terminal, plain lines otherwise.

Both show, per cell: state, cache state (hit / ran), elapsed time, and for a running cell its latest
output line, so a long sweep shows how far it is. Plain mode prints one line per state change and,
for a cell running longer than PLAIN_EVERY_S, its latest output line every PLAIN_EVERY_S seconds.
Everything goes to stderr; the summary line goes to stdout.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from attnbench.notebook.run.records import Status

PLAIN_EVERY_S = 10.0
STYLES = {
    Status.HIT: "cyan",
    Status.RAN: "green",
    Status.RUNNING: "yellow",
    Status.WAITING: "dim",
    Status.FAILED: "bold red",
    Status.TIMEOUT: "bold red",
    Status.INTERRUPTED: "red",
    Status.MISSING_DEPS: "red",
    Status.SKIPPED: "magenta",
    Status.NEEDS_GPUS: "dim",
}


def make_progress(live: bool | None = None):
    """Rich live display when stderr is a terminal (or `live=True`), plain lines otherwise."""
    if live is None:
        live = sys.stderr.isatty()
    return LiveProgress() if live else PlainProgress()


class _Rows:
    def __init__(self) -> None:
        self.rows: dict[Any, dict[str, Any]] = {}

    def begin(self, header: str, nodes: list[tuple[Any, str]]) -> None:
        self.header = header
        for node, name in nodes:
            self.rows[node] = {
                "name": name,
                "state": Status.WAITING,
                "reason": "",
                "started": None,
                "duration": None,
                "line": "",
            }

    def _record(self, node, state: Status, reason: str, duration: float | None) -> dict[str, Any]:
        row = self.rows[node]
        row.update(state=state, reason=reason)
        if state == Status.RUNNING:
            row["started"] = time.monotonic()
        if duration is not None:
            row["duration"] = duration
        return row


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class PlainProgress(_Rows):
    def __init__(self, stream: TextIO | None = None, every: float = PLAIN_EVERY_S):
        super().__init__()
        self.stream = stream or sys.stderr
        self.every = every
        self.last_print: dict[Any, float] = {}

    def _print(self, text: str) -> None:
        _quietly(print, text, file=self.stream, flush=True)

    def begin(self, header: str, nodes: list[tuple[Any, str]]) -> None:
        super().begin(header, nodes)
        self._print(header)

    def update(self, node, state: Status, reason: str = "", duration: float | None = None) -> None:
        row = self._record(node, state, reason, duration)
        extra = f" {_fmt_s(duration)}" if duration is not None and state != Status.HIT else ""
        why = f" ({reason})" if reason else ""
        self._print(f"  {row['name']:<28} {state}{extra}{why}")
        self.last_print[node] = time.monotonic()

    def tick(self, running: dict[Any, tuple[float, str]]) -> None:
        now = time.monotonic()
        for node, (elapsed, line) in running.items():
            if now - self.last_print.get(node, now) >= self.every:
                self.last_print[node] = now
                shown = f" | {line}" if line else ""
                self._print(f"  {self.rows[node]['name']:<28} running {_fmt_s(elapsed)}{shown}")

    def end(self, summary: str) -> None:
        _quietly(print, summary, flush=True)


class LiveProgress(_Rows):
    def __init__(self) -> None:
        super().__init__()
        self.live = None

    def begin(self, header: str, nodes: list[tuple[Any, str]]) -> None:
        from rich.console import Console
        from rich.live import Live

        super().begin(header, nodes)
        self.console = Console(stderr=True)
        self.live = Live(self, console=self.console, refresh_per_second=8, transient=False)
        self.live.start()

    def update(self, node, state: Status, reason: str = "", duration: float | None = None) -> None:
        self._record(node, state, reason, duration)

    def tick(self, running: dict[Any, tuple[float, str]]) -> None:
        for node, (_, line) in running.items():
            self.rows[node]["line"] = line

    def __rich__(self):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(expand=False, show_edge=False)
        for column in ("cell", "state", "cache", "time", "output"):
            table.add_column(column, no_wrap=column != "output", overflow="ellipsis")
        now = time.monotonic()
        for row in self.rows.values():
            state = row["state"]
            cache = {Status.HIT: "hit", Status.RAN: "miss", Status.RUNNING: "miss"}.get(state, "")
            if state == Status.RUNNING and row["started"] is not None:
                elapsed = _fmt_s(now - row["started"])
            else:
                elapsed = _fmt_s(row["duration"]) if state != Status.HIT else ""
            output = row["line"] if state == Status.RUNNING else row["reason"]
            table.add_row(
                row["name"],
                Text(str(state), style=STYLES.get(state, "")),
                cache,
                elapsed,
                Text(output, overflow="ellipsis", no_wrap=True),
            )
        return Group(Text(self.header, style="bold"), table)

    def end(self, summary: str) -> None:
        if self.live is not None:
            _quietly(self.live.stop)
        _quietly(print, summary, flush=True)


def _quietly(write, *args, **kwargs) -> None:
    """Progress is a courtesy: a closed terminal (SIGHUP, EIO) or pipe must not stop the run's
    bookkeeping (ending cells, writing run.json)."""
    try:
        write(*args, **kwargs)
    except (OSError, ValueError):  # ValueError: the stream was closed
        pass
