"""Where a constrained path's latency goes, per micro-batch (docs/runtime.md, section 5).

The mean latency of the records a sink commits splits into:

- ``source_wait``: from a record's ingest time to the start of the batch that admits it
  (Nephele's output-buffer latency: the micro-batch is the buffer);
- ``operators``: each operator on the path, the wall time of its slowest task
  (``OperatorProgress.slowest_task_s``, of each of its stages); a keyed operator's wait for its input is not its own work but
  the exchange before it, so that share is moved to ``exchange``;
- ``exchange``: the shuffles on the path (the keyed operators' input wait);
- ``sink``: the sink's write, less the lineage Spark ran lazily inside it (the operators and
  exchanges above);
- ``rest``: the remainder to the sink's commit: planning, scheduling, driver work.

The parts add up to the measured mean latency by construction. The operator figures are
each stage's slowest task, so when stages overlap in time they can sum to more than the
batch's wall time; they are then scaled down together so that the parts still add up and
``rest`` is zero. Nothing here costs a Spark job: it reads what the batch measured anyway.
Pure: no Spark.
"""

from __future__ import annotations

from sluice.core.metrics import OperatorProgress, SinkProgress

PARTS = ("source_wait", "operators", "exchange", "sink", "rest")


def _operator_times(operators: dict[str, OperatorProgress], path_ops: list[str]) -> tuple[dict[str, float], float]:
    """(each path operator's own wall time, the exchanges' time), in milliseconds.

    An operator's time may be split over two stages (its own and its combine stage)."""
    own: dict[str, float] = {}
    exchange = 0.0
    for op_id in path_ops:
        if op_id not in operators:
            continue
        progress = operators[op_id]
        for stage in progress.stages():
            wall = float(stage.slowest_task_s)
            total = float(stage.time_s)
            wait = float(progress.input_wait_s) if stage is progress else 0.0
            # the input wait is summed over tasks; scale it to the slowest task's share
            wait_wall = wait * (wall / total) if total > 0 else 0.0
            own[op_id] = own.get(op_id, 0.0) + (wall - wait_wall) * 1000
            exchange += wait_wall * 1000
    return own, exchange


def split_path_latency(
    sinks: dict[str, SinkProgress], operators: dict[str, OperatorProgress], path_ops: list[str], measuring_sinks: list[str]
) -> dict | None:
    """The latency split of one batch along one path, from its ``BatchMetrics`` fields
    ``sinks`` and ``operators``; None if no measuring sink committed a row in the batch.

    Uses the worst (highest mean) of the measuring sinks. Returns milliseconds:
    ``{"mean_ms", "p95_ms", "rows", "sink", "source_wait", "operators": {op: ms},
    "exchange", "sink_commit", "rest"}`` where source_wait + sum(operators) + exchange +
    sink_commit + rest == mean_ms (up to rounding)."""
    measured = [(s, sinks[s]) for s in measuring_sinks if s in sinks and sinks[s].latency_mean_ms is not None and sinks[s].rows]
    if not measured:
        return None
    sink_id, stats = max(measured, key=lambda item: item[1].latency_mean_ms or 0.0)
    total = float(stats.latency_mean_ms or 0.0)
    # from the batch's start to this sink's commit; records waited before that
    in_batch = min(float(total if stats.committed_ms is None else stats.committed_ms), total)
    source_wait = total - in_batch
    own, exchange = _operator_times(operators, path_ops)
    processing = sum(own.values()) + exchange
    sink_commit = max(float(stats.write_s) * 1000 - processing, 0.0)
    work = processing + sink_commit
    scale = in_batch / work if work > in_batch and work > 0 else 1.0
    own = {op: ms * scale for op, ms in own.items()}
    exchange *= scale
    sink_commit *= scale
    rest = max(in_batch - sum(own.values()) - exchange - sink_commit, 0.0)
    return {
        "mean_ms": round(total, 3),
        "p95_ms": stats.latency_p95_ms,
        "rows": int(stats.rows),
        "sink": sink_id,
        "source_wait": round(source_wait, 3),
        "operators": {op: round(ms, 3) for op, ms in own.items()},
        "exchange": round(exchange, 3),
        "sink_commit": round(sink_commit, 3),
        "rest": round(rest, 3),
    }
