"""The map-side combine in Python before the exchange (C-MR's sub-window Combine).

A ``CombiningKernel`` (the window kernel) pre-aggregates each
map task's records with ``kernel.combine(rows, ctx)`` before the exchange by key group: one
row per (key, pane) crosses the exchange instead of every record, and the keyed stage merges
those partials into the key-group store. Records too late for every window are sorted out
on the map side and written to the operator's ``late`` side output there.

The combined rows keep the key columns (so they hash to the same key group as the records)
and the oldest ingest time of their records (so end-to-end latency stays measured from the
oldest record).

When Spark can compute every partial itself (built-in aggregates), it does, and no Python
pass touches the raw records (``exchange.spark_combine``).
"""

from __future__ import annotations

import time

import pyarrow as pa

from sluice.graph.operators import Operator
from sluice.runtime.batch.task_env import TaskEnv
from sluice.runtime.batch.task_metrics import COMBINE, TaskMetrics
from sluice.runtime.kernels.keyed import BatchContext, CombiningKernel
from sluice.runtime.schemas import INGEST, partition_id, to_spark, with_hidden
from sluice.runtime.side_outputs import DEAD_LETTER, SideOutputWriter, combine_stage_name


def combine_stage(df, op: Operator, kernel: CombiningKernel, in_schema: pa.Schema, env: TaskEnv):
    """A mapInArrow pass combining each task's records; returns (frame, schema of its rows)."""
    context, root = env.context, env.root
    kernel.bind(in_schema)
    combined_schema = kernel.combined_schema(in_schema)
    out_schema = with_hidden(combined_schema, INGEST)
    record_schema = with_hidden(in_schema, INGEST)
    stage = combine_stage_name(op.id)

    def run(batches):
        start = time.perf_counter()
        partition = partition_id()
        metrics = TaskMetrics(env.accumulator)
        received = list(batches)
        if not received:
            metrics.flush()
            return
        rows = pa.Table.from_batches(received).select(record_schema.names).cast(record_schema)
        ctx = BatchContext(context.batch_id, partition, context.watermark, context.processing_time)
        combined, late, dead = kernel.combine(rows, ctx)
        if late.num_rows:
            writer = SideOutputWriter(root, f"side/{op.id}/late", context.batch_id, stage, partition)
            writer.add_table(op.name, late, "late")
            metrics.add(op.id, "side_late", writer.flush())
        if dead:  # one file per (batch, stage, partition): a replayed task replaces it
            writer = SideOutputWriter(root, DEAD_LETTER, context.batch_id, stage, partition)
            for letter in dead:
                writer.dead(op.name, letter.record, letter.error, op.location, key=letter.key)
            metrics.add(op.id, "dead_letters", writer.flush())
        metrics.op_timing(op.id, rows.num_rows, combined.num_rows, time.perf_counter() - start, COMBINE)
        metrics.flush()
        if combined.num_rows:
            yield from combined.select(out_schema.names).cast(out_schema).to_batches()

    return df.mapInArrow(run, to_spark(out_schema)), combined_schema
