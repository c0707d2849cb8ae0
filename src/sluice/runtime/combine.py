"""The exchange in front of a keyed stage, and the map-side combine before it (C-MR's
sub-window Combine).

A ``CombiningKernel`` (the window kernel) pre-aggregates each
map task's records with ``kernel.combine(rows, ctx)`` before the exchange by key group: one
row per (key, pane) crosses the exchange instead of every record, and the keyed stage merges
those partials into the key-group store. Records too late for every window are sorted out
on the map side and written to the operator's ``late`` side output there.

The combined rows keep the key columns (so they hash to the same key group as the records)
and the oldest ingest time of their records (so end-to-end latency stays measured from the
oldest record).

When Spark can compute every partial itself (built-in aggregates), it does, and no Python
pass touches the raw records (``sluice.runtime.native_combine``).
"""

from __future__ import annotations

import time

import pyarrow as pa

from sluice.graph.operators import Operator
from sluice.plan.physical import KeyedStagePlan
from sluice.runtime.kernels.keyed import BatchContext, CombiningKernel, KeyedKernel
from sluice.runtime.schemas import INGEST, to_spark, with_hidden
from sluice.runtime.side_outputs import DEAD_LETTER, SideOutputWriter
from sluice.runtime.task_metrics import MetricKey, TaskMetrics


def _partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def exchange(df, op: Operator, kernel: KeyedKernel, in_schema: pa.Schema, stage: KeyedStagePlan,
             context: BatchContext, max_parallelism: int, root: str, accumulator, source_stats=None):
    """Route ``df`` to the partitions of a keyed stage, combining first where the kernel can.

    ``source_stats``: the observation of the source whose records ``df`` holds, to be made
    on Spark's combined rows (``native_combine.SourceStats``); only given when Spark combines.

    Returns (frame, schema of its rows without the hidden columns, and what the driver must
    do once the batch's job has run, if anything: a function returning a metric to add)."""
    from sluice.runtime.native_combine import native_combine, supports_native_combine, write_late
    from sluice.runtime.stages import route

    if supports_native_combine(kernel, in_schema):
        combined = native_combine(df, op, kernel, in_schema, context, stage, max_parallelism, source_stats)

        def fetch_late() -> dict:
            if not accumulator.value.get(MetricKey(op.id, "late_seen")):
                return {}
            return {"side_late": write_late(combined, op, context, root)}

        return combined.frame, combined.schema, fetch_late
    if source_stats is not None:
        raise ValueError(f"operator {op.name!r}: source statistics can only be observed on Spark's combine")
    if isinstance(kernel, CombiningKernel):
        df, in_schema = combine_stage(df, op, kernel, in_schema, context, root, accumulator)
        return route(df, kernel.key_columns, stage, max_parallelism, in_schema.names), in_schema, None
    read = kernel.input_columns(in_schema)  # only these cross the exchange
    return route(df, kernel.key_columns, stage, max_parallelism, read), pa.schema([in_schema.field(c) for c in read]), None


def collocated_input(df, op: Operator, kernel: KeyedKernel, in_schema: pa.Schema, stage: KeyedStagePlan,
                     context: BatchContext, max_parallelism: int, root: str, accumulator):
    """The input of a keyed operator that shares the stage of the keyed operator before it
    (``plan.collocation``): no exchange, since every row is in the partition of its key group
    already. Each row gets its key group (native SQL: the same hash the exchange uses, which
    the keyed stage checks against the routing table), and a window's records are combined
    per task first, in Python (Spark's own combine would bring an exchange back).

    Returns (frame, schema of its rows without the hidden columns)."""
    from sluice.runtime.stages import with_key_group

    if isinstance(kernel, CombiningKernel):
        df, in_schema = combine_stage(df, op, kernel, in_schema, context, root, accumulator)
    else:  # as before an exchange: only the columns the kernel reads go on
        in_schema = pa.schema([in_schema.field(c) for c in kernel.input_columns(in_schema)])
    return with_key_group(df, kernel.key_columns, stage, max_parallelism, in_schema.names), in_schema


def combine_stage(df, op: Operator, kernel: CombiningKernel, in_schema: pa.Schema, context: BatchContext, root: str,
                  accumulator):
    """A mapInArrow pass combining each task's records; returns (frame, schema of its rows)."""
    kernel.bind(in_schema)
    combined_schema = kernel.combined_schema(in_schema)
    out_schema = with_hidden(combined_schema, INGEST)
    record_schema = with_hidden(in_schema, INGEST)
    stage = f"{op.id}.combine"

    def run(batches):
        start = time.perf_counter()
        partition = _partition_id()
        metrics = TaskMetrics(accumulator)
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
        metrics.op_timing(stage, rows.num_rows, combined.num_rows, time.perf_counter() - start)
        metrics.flush()
        if combined.num_rows:
            yield from combined.select(out_schema.names).cast(out_schema).to_batches()

    return df.mapInArrow(run, to_spark(out_schema)), combined_schema
