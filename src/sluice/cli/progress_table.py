"""The live progress table of ``sluice run`` on a terminal: a header with the job's rate,
latency and backlog, and one row per source, operator and sink, redrawn after each batch.

Rates are measured from the start of the first batch this run executed, not from Spark's
start-up (which takes seconds and would make the first minute's rates look low).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Literal

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sluice.cli.progress import EscalationLines, control_summary, format_backlog
from sluice.runtime.batch.metrics import BatchMetrics


@dataclass
class RunTotals:
    """Running totals of a run's batches, the figures both progress displays show."""

    first_start: float | None = None
    last_end: float | None = None
    batches: int = 0
    rows: int = 0
    dead_letters: int = 0
    late: int = 0
    by_source: dict[str, int] = field(default_factory=dict)
    operators: dict[str, dict[str, float]] = field(default_factory=dict)  # op -> rows_in, rows_out, time_s
    sinks: dict[str, int] = field(default_factory=dict)
    last: BatchMetrics | None = None

    def add(self, m: BatchMetrics) -> None:
        if m.skipped:
            return
        if self.first_start is None:
            self.first_start = m.started_at
        self.last_end = m.started_at + m.duration_s
        self.batches += 1
        self.rows += m.rows_in
        self.dead_letters += m.dead_letters
        self.late += batch_late_records(m)
        for source, n in m.rows_by_source.items():
            self.by_source[source] = self.by_source.get(source, 0) + n
        for op, progress in m.operators.items():
            mine = self.operators.setdefault(op, {"rows_in": 0, "rows_out": 0, "time_s": 0.0})
            mine["rows_in"] += progress.rows_in
            mine["rows_out"] += progress.rows_out
            mine["time_s"] += progress.time_s
        for sink, written in m.sinks.items():
            self.sinks[sink] = self.sinks.get(sink, 0) + int(written.rows)
        self.last = m

    @property
    def elapsed_s(self) -> float:
        if self.first_start is None or self.last_end is None:
            return 0.0
        return max(self.last_end - self.first_start, 1e-9)

    def rate(self, rows: float) -> float:
        """Rows per second since the first batch started."""
        return rows / self.elapsed_s if self.elapsed_s else 0.0


def batch_late_records(m: BatchMetrics) -> int:
    """Late records of a batch (those too late for every window)."""
    return int(m.late_records)


def progress_table(t: RunTotals, control_state: dict | None = None) -> Group:
    """What the terminal shows after each batch; ``control_state``: the controller's (each
    constraint's state and the last decision), when the job has one."""
    m = t.last
    lat = m.latency_ms if m else {}
    backlog = format_backlog(m.backlog) if m else "0"
    head = Text.assemble(
        ("batch ", "dim"),
        (f"{m.batch_id if m else '-'}", "bold"),
        ("   batches ", "dim"),
        f"{t.batches:,}",
        ("   rows ", "dim"),
        f"{t.rows:,}",
        ("   ", ""),
        (f"{t.rate(t.rows):,.0f}", "bold cyan"),
        (" rows/s", "dim"),
        ("   latency p50 ", "dim"),
        f"{lat.get('p50', 0):,.0f}",
        (" p99 ", "dim"),
        f"{lat.get('p99', 0):,.0f} ms",
        ("   backlog ", "dim"),
        backlog,
        ("   dead letters ", "dim"),
        (f"{t.dead_letters:,}", "bold red" if t.dead_letters else ""),
        ("   late ", "dim"),
        (f"{t.late:,}", "bold yellow" if t.late else ""),
    )
    table = Table(box=None, pad_edge=False, header_style="dim", show_edge=False)
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (
        ("", "left"),
        ("name", "left"),
        ("rows", "right"),
        ("rows/s", "right"),
        ("", "right"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify)
    for source, rows in t.by_source.items():
        waiting = format_backlog({source: m.backlog[source]}) if m and source in m.backlog else ""
        table.add_row("source", source, f"{rows:,}", f"{t.rate(rows):,.0f}", f"backlog {waiting}" if waiting else "")
    for op, stats in t.operators.items():
        per_batch = stats["time_s"] / max(t.batches, 1)
        sel = stats["rows_out"] / stats["rows_in"] if stats["rows_in"] else None
        table.add_row(
            "operator",
            op,
            f"{int(stats['rows_out']):,}",
            f"{t.rate(stats['rows_out']):,.0f}",
            f"{per_batch:.3f} s/batch" + (f"  out/in {sel:.2f}" if sel is not None else ""),
        )
    for sink, rows in t.sinks.items():
        p99 = m.sinks[sink].latency_p99_ms if m and sink in m.sinks else None
        table.add_row("sink", sink, f"{rows:,}", f"{t.rate(rows):,.0f}", f"latency p99 {p99:,.0f} ms" if p99 is not None else "")
    parts: list[RenderableType] = [head, table]
    summary = control_summary(control_state).strip() if control_state else ""
    if summary:
        parts.insert(1, Text.assemble(("control  ", "dim"), (summary, "magenta")))
    return Group(*parts)


class ProgressTable:
    """``on_batch`` callback that keeps a rich table up to date on a terminal."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(file=sys.stderr)
        self.totals = RunTotals()
        self.control_state: dict | None = None
        self.escalations = EscalationLines()
        self.live: Live | None = None

    def __call__(self, m: BatchMetrics) -> None:
        self.totals.add(m)
        self._show()

    def control(self, state: dict) -> None:
        """Receives the controller's state after each batch (``RunOptions.on_control``)."""
        self.control_state = state
        for line in self.escalations.new_lines(state):
            self.console.print(line, style="yellow", markup=False, highlight=False, soft_wrap=True)
        if self.live is not None:
            self._show()

    def _show(self) -> None:
        view = progress_table(self.totals, self.control_state)
        if self.live is None:
            self.live = Live(view, console=self.console, refresh_per_second=4, transient=False)
            self.live.start()
        else:
            self.live.update(view)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
