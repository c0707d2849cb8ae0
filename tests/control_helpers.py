"""Pure helpers for the control-plane tests: a constrained graph and synthetic batches."""

from __future__ import annotations

import sluice
from sluice import sinks, sources
from sluice.core.metrics import BatchMetrics


def constrained_graph(latency="1s", *, p95=None, over="10s", rate=1000.0):
    p = sluice.Pipeline("ctl")
    src = p.source(sources.generator(fields={"k": sources.Keys(10)}, rate=rate), name="source_1")
    src.map_batches(lambda b: b, name="work").sink(sinks.memory("ctl_out"))
    p.constrain(latency, over=over, p95=p95)
    p.graph.validate()
    return p.graph


def batch(
    batch_id: int,
    at: float,
    rows: int,
    mean_ms: float,
    p95_ms: float | None = None,
    duration_s: float = 0.1,
    backlog: int | None = 0,
    name: str = "latency_1",
) -> BatchMetrics:
    """A batch that started at ``at`` and measured ``mean_ms`` on the path of ``name``."""
    return BatchMetrics(
        batch_id=batch_id,
        plan_version=0,
        started_at=at,
        duration_s=duration_s,
        rows_in=rows,
        rows_by_source={"source_1": rows},
        backlog={"source_1": backlog},
        paths={
            name: {
                "mean_ms": mean_ms,
                "p95_ms": p95_ms,
                "rows": rows,
                "source_wait": 0.0,
                "operators": {"work": duration_s * 1000},
                "exchange": 0.0,
                "sink_commit": 0.0,
                "rest": 0.0,
            }
        }
        if rows
        else {},
    )
