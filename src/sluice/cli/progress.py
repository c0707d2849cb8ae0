"""The live progress line of ``sluice run`` and ``sluice demo``."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

from sluice.runtime.batch.metrics import BatchMetrics
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
        self.escalations = EscalationLines()

    def control(self, state: dict) -> None:
        """Receives the controller's state after each batch (``RunOptions.on_control``)."""
        self.control_state = state
        for line in self.escalations.new_lines(state):
            self.stream.write(("\n" if self.tty else "") + line + "\n")
            self.stream.flush()

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
        text = (
            f"batch {m.batch_id:>6}  batches {self.batches:>5}  rows {self.rows:>11,}  {rate:>11,.0f} rows/s  "
            f"latency p50 {lat.get('p50', 0):>8.0f} ms  p99 {lat.get('p99', 0):>8.0f} ms  backlog {backlog:>9}"
        )
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


class EscalationLines:
    """One line for each escalation the controller starts (a latency bound it cannot keep),
    from the same state the progress line shows: the constraint's figures over its window,
    the bound, and what the controller measured about the job."""

    def __init__(self) -> None:
        self.shown: set[str] = set()

    def new_lines(self, state: dict) -> list[str]:
        escalations = state.get("escalations") or {}
        self.shown &= set(escalations)  # an escalation that ended may start again, and is said again
        lines = []
        for name, details in escalations.items():
            if name in self.shown:
                continue
            self.shown.add(name)
            lines.append(escalation_line(name, details, state.get("constraints", {}).get(name, {})))
        return lines


def escalation_line(name: str, details: dict, status: dict) -> str:
    """``sluice: latency bound 'x' cannot be kept: ...`` in one line."""
    bound = status.get("bound_ms")
    judged = [f"bound {bound:,.0f} ms" if bound is not None else "bound ?"]
    if status.get("mean_ms") is not None:
        judged.append(
            f"mean {status['mean_ms']:,.0f} ms over its window of the last {status.get('batches', 0)} "
            f"batch(es), {status.get('rows', 0):,} rows"
        )
    if status.get("p95_ms") is not None:
        judged.append(f"p95 {status['p95_ms']:,.0f} ms")
    found = []
    if details.get("fixed_cost_ms") is not None:
        found.append(f"a batch's fixed cost {details['fixed_cost_ms']:,.0f} ms")
    if details.get("offered_rate") is not None:
        found.append(f"offered {details['offered_rate']:,.0f} rows/s")
    if details.get("max_rate") is not None:
        found.append(f"holds up to about {details['max_rate']:,.0f} rows/s")
    if details.get("bottleneck"):
        found.append(f"bottleneck {details['bottleneck']}")
    return (
        f"sluice: latency bound {name!r} cannot be kept by sizing batches ({'; '.join(judged)})"
        + (f": {', '.join(found)}" if found else "")
        + "; see `sluice status` and docs/control.md"
    )


def control_summary(state: dict) -> str:
    """Each constraint's state and window mean against its bound, and the last decision."""
    parts = [
        f"{name} {c['state']} {c['mean_ms'] or 0:.0f}/{c['bound_ms']:.0f} ms" for name, c in state.get("constraints", {}).items()
    ]
    last = state.get("last_decision")
    if last:
        parts.append(f"last: {action_text(last['action'])} (batch {last['batch_id']})")
    return ("  " + "  ".join(parts)) if parts else ""
