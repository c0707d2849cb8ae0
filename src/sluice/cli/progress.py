"""The live progress line of ``sluice run`` and ``sluice demo``."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

from sluice.runtime.metrics import BatchMetrics
from sluice.ui.job_view import action_text


class ProgressLine:
    """Prints batches, rows/s, latency and backlog after each batch (one updating line on a
    terminal, one line per few seconds otherwise)."""

    def __init__(self, stream=sys.stderr, every_s: float = 2.0):
        self.stream = stream
        self.tty = stream.isatty()
        self.every_s = every_s
        self.started: float | None = None  # the first batch's start: Spark's start-up is not the job's rate
        self.rows = 0
        self.batches = 0
        self.dead_letters = 0  # running totals since the start
        self.late_records = 0
        self.last_print = 0.0
        self.control_state: dict | None = None  # the controller's, when the job has one

    def control(self, state: dict) -> None:
        """Receives the controller's state after each batch (``run_pipeline(on_control=)``)."""
        self.control_state = state

    def __call__(self, m: BatchMetrics) -> None:
        if self.started is None:
            self.started = m.started_at
        self.rows += m.rows_in
        self.batches += 1
        self.dead_letters += m.dead_letters
        self.late_records += m.late_records
        now = time.time()
        if not self.tty and now - self.last_print < self.every_s:
            return
        self.last_print = now
        rate = self.rows / max(now - self.started, 1e-9)
        lat = m.latency_ms
        backlog = format_backlog(m.backlog)
        text = (f"batch {m.batch_id:>6}  batches {self.batches:>5}  rows {self.rows:>11,}  {rate:>11,.0f} rows/s  "
                f"latency p50 {lat.get('p50', 0):>8.0f} ms  p99 {lat.get('p99', 0):>8.0f} ms  backlog {backlog:>9}")
        text += f"  dead letters {self.dead_letters:,}  late {self.late_records:,}"
        if self.control_state:
            text += control_summary(self.control_state)
        if self.tty:
            self.stream.write("\r" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


def format_backlog(backlog: Mapping[str, float | None]) -> str:
    """Rows waiting at the sources; ``unbounded`` when a source could produce any number
    at once (a generator without a rate reports None)."""
    if any(v is None for v in backlog.values()):
        return "unbounded"
    return f"{int(sum(v for v in backlog.values() if v is not None)):,}"


def control_summary(state: dict) -> str:
    """Each constraint's state and window mean against its bound, and the last decision."""
    parts = [f"{name} {c['state']} {c['mean_ms'] or 0:.0f}/{c['bound_ms']:.0f} ms"
             for name, c in state.get("constraints", {}).items()]
    last = state.get("last_decision")
    if last:
        parts.append(f"last: {action_text(last['action'])} (batch {last['batch_id']})")
    return ("  " + "  ".join(parts)) if parts else ""
