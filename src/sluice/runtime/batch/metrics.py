"""Per-batch metrics: the record (``sluice.core.metrics``, re-exported here) and its append,
which also prunes the checkpoint's older records every so many batches."""

from __future__ import annotations

from sluice.core.checkpoint import METRICS, Checkpoint
from sluice.core.metrics import (
    RECENT_BYTES,
    BatchMetrics,
    KeyGroupLoad,
    OperatorProgress,
    SinkProgress,
    StageProgress,
    Traffic,
    read,
    read_recent,
)

__all__ = [
    "RECENT_BYTES",
    "BatchMetrics",
    "KeyGroupLoad",
    "OperatorProgress",
    "SinkProgress",
    "StageProgress",
    "Traffic",
    "append",
    "read",
    "read_recent",
]


def append(checkpoint: str | Checkpoint, metrics: BatchMetrics) -> None:
    """Append a batch's line (a replayed batch appends again and readers keep the last).
    A batch's metrics are the last record it writes, so every so many batches this is where
    the checkpoint's older records are pruned (``runtime.retention``)."""
    from sluice.runtime import retention

    checkpoint = Checkpoint.of(checkpoint)
    checkpoint.append_line(METRICS, metrics.to_json())
    policy = retention.Retention.from_env()
    if retention.due(metrics.batch_id, policy):
        retention.prune(checkpoint, metrics.batch_id, policy)
