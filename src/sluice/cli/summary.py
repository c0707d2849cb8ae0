"""The summary ``sluice run`` prints when a job stops: what this run did, its latency, and
the records that left the main flow (dead letters, late records)."""

from __future__ import annotations

import os

from sluice.cli.progress import control_summary
from sluice.cli.progress_table import RunTotals
from sluice.runtime.batch.metrics import BatchMetrics


def median(values: list[float]) -> float:
    values = sorted(values)
    return values[len(values) // 2] if values else float("nan")


def latency_line(batches: list[BatchMetrics]) -> str:
    """Median over batches of each batch's worst-sink percentile (a batch's percentiles are
    over its records; the median says what a typical batch saw)."""
    with_rows = [m for m in batches if m.rows_in and m.latency_ms]
    if not with_rows:
        return "no sink measured latency"
    p = {q: median([m.latency_ms.get(q, 0.0) for m in with_rows]) for q in ("p50", "p95", "p99")}
    return f"p50 {p['p50']:,.0f} ms   p95 {p['p95']:,.0f} ms   p99 {p['p99']:,.0f} ms"


def run_summary(result, checkpoint: str) -> str:
    mine = result.metrics[-result.batches :] if result.batches else []
    totals = RunTotals()
    for m in mine:
        totals.add(m)
    rate = f"{totals.rate(totals.rows):,.0f} rows/s from the first batch" if totals.batches else "no batch ran"
    lines = [
        "",
        "Summary",
        f"  rows processed      {result.rows_in:,} in {result.batches} micro-batches ({result.elapsed_s:.1f} s "
        "with Spark's start-up)",
        f"  throughput          {rate}",
        f"  latency (median of batches)  {latency_line(mine)}",
        f"  dead letters        {totals.dead_letters:,}"
        + (
            f" (records an operator raised on, with the reason: {os.path.join(checkpoint, 'dead_letter')})"
            if totals.dead_letters
            else ""
        ),
        f"  late records        {totals.late:,}"
        + (" (behind the watermark, sent to the window's late output)" if totals.late else ""),
        f"  checkpoint          {checkpoint}  (`sluice status` summarizes it, `sluice ui` shows it)",
    ]
    control = control_summary(result.control).strip() if getattr(result, "control", None) else ""
    if control:
        lines.insert(-1, f"  control             {control}")
    return "\n".join(lines)
