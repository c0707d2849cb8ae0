"""C-MR's sub-window Combine run by Spark itself, for windows of built-in aggregates.

When every partial a window kernel keeps is a built-in (count, sum, min, max of numbers,
booleans and timestamps), the Combine needs no Python: Spark computes each pane's partials
in one aggregate, grouped by (partition, keys, pane, map task). Spark splits that aggregate
around its exchange as it does for its own ``window()``: a partial aggregate in each map
task, so one row per (key, pane) crosses the exchange rather than every record, then the
final aggregate. Its exchange hashes the grouping columns, which would scatter key groups
over partitions; a last grouping column, the salt (``exchange.salt``), makes
every row's hash the partition its key group is routed to, so the rows arrive where their
state is, with no second exchange. Python sees the same rows as after the Python combine
(``exchange.python_combine``), one per (key, pane, map task), and the raw records never cross
into Python: at size = slide that pass, not the kernel, was the gap to Spark's ``window()``.

The map task (``spark_partition_id()`` before the exchange) is a grouping column so that a
float sum adds the same records in the same order when a batch is replayed: the rows of one
group come from one map task, in that task's order.

Spark does not decide which records are late. That depends only on a record's pane and the
batch's watermark, but the watermark would be a literal in the aggregate's input, and Spark
compiles new code for every new literal (30-70 ms a batch). Every record gets its pane; the
aggregate counts the records of each group (``__records``); the kernel drops the panes no
query accepts and reports how many records were late for some query (``late_seen``). Only
when that is not zero does the driver run a second job over the batch's records to fetch
the late ones (:func:`write_late`) for the operator's ``late`` side output. Late records are
usually few and batches with none pay nothing: carrying them through the aggregate (extra
grouping columns) or out through an observation (``collect_list``) both measured 10-30 %
slower on every batch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
import pyarrow as pa

from sluice.graph.operators import Operator
from sluice.graph.windows import EventTime
from sluice.plan.physical import KeyedStagePlan
from sluice.runtime.batch.source_stats import MAX_EVENT, SourceStats
from sluice.runtime.checkpoint import Checkpoint
from sluice.runtime.exchange.routing import routing_columns
from sluice.runtime.exchange.salt import SALT, salt_sql
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, KeyedKernel
from sluice.runtime.kernels.panes import PartialField, PartialLayout
from sluice.runtime.kernels.windows import (
    COMBINE_TASK,
    LATE,
    PANE_STATE,
    PARTIAL_PREFIX,
    RECORDS,
    WindowAggregateKernel,
    batch_watermark,
)
from sluice.runtime.schemas import INGEST, PARTITION
from sluice.runtime.schemas import quote as _q
from sluice.runtime.side_outputs import SideOutputWriter, combine_stage_name

_KEY = "__combine_key"  # the key columns as Spark's combine groups them
_INT64_MAX = "9223372036854775807L"
_INT64_MIN = "(-9223372036854775807L - 1L)"


def supports_native_combine(kernel: KeyedKernel, in_schema: pa.Schema) -> TypeGuard[WindowAggregateKernel]:
    """True when Spark can compute every partial of ``kernel``'s panes over ``in_schema``."""
    if not isinstance(kernel, WindowAggregateKernel):
        return False
    time = kernel.queries[0].time
    if isinstance(time, EventTime) and not _native_time(in_schema.field(time.column).type):
        return False
    for f in kernel.layout(kernel.record_schema(in_schema)).fields:
        if f.kind == "udaf":
            return False
        if f.column is not None and pa.types.is_decimal(in_schema.field(f.column).type):
            return False  # the kernel holds decimals as unscaled integers; Spark's sums are decimals
        if f.kind in ("min", "max"):
            dtype = in_schema.field(f.column).type
            if pa.types.is_duration(dtype) or (pa.types.is_timestamp(dtype) and not _native_time(dtype)):
                return False
    return True


def _native_time(dtype: pa.DataType) -> bool:
    """Spark reads tz-aware timestamps as UTC micros, exactly like the kernel; a tz-naive
    timestamp is a wall-clock time Spark would shift by the session time zone."""
    return pa.types.is_integer(dtype) or (pa.types.is_timestamp(dtype) and dtype.tz is not None)


def _micros(column: str, dtype: pa.DataType) -> str:
    return f"unix_micros({_q(column)})" if pa.types.is_timestamp(dtype) else f"CAST({_q(column)} AS BIGINT)"


def _floor_div(x: str, d: int) -> str:
    """floor(x / d) in exact integer arithmetic (``div`` alone truncates toward zero)."""
    return f"(({x}) - pmod({x}, {d}L)) div {d}L"


def _partial_sql(f: PartialField, layout: PartialLayout, schema: pa.Schema) -> str:
    """The Spark aggregate of one partial field, null-free like ``PartialLayout.field_values``."""
    if f.kind == "rows":
        return "count(1)"
    assert f.column is not None  # every partial but rows reads a column
    if f.kind == "n":
        return f"count({_q(f.column)})"
    is_int = layout.numpy_dtype(f) is np.int64
    dtype = schema.field(f.column).type
    value = (
        _micros(f.column, dtype)
        if pa.types.is_timestamp(dtype)
        else f"CAST({_q(f.column)} AS {'BIGINT' if is_int else 'DOUBLE'})"
    )
    if f.kind == "sum":
        # plain sum: an int64 overflow fails the batch with Spark's error rather than wrap
        return f"coalesce(sum({value}), {'0L' if is_int else 'CAST(0 AS DOUBLE)'})"
    if is_int:
        identity = _INT64_MAX if f.kind == "min" else _INT64_MIN
    else:
        identity = "CAST('Infinity' AS DOUBLE)" if f.kind == "min" else "CAST('-Infinity' AS DOUBLE)"
    return f"coalesce({f.kind}({value}), {identity})"


@dataclass
class NativeCombine:
    """The combined frame of one batch, and the frame of its late records."""

    frame: Any  # pyspark DataFrame: keys, pane, map task, partials, key group, ingest, late count
    schema: pa.Schema  # its rows' schema without the hidden columns (the kernel's combined_schema)
    late: Callable[[], Any]  # builds the DataFrame of the records late for some query, when needed
    kernel: WindowAggregateKernel
    record_schema: pa.Schema


def native_combine(
    df,
    op: Operator,
    kernel: WindowAggregateKernel,
    in_schema: pa.Schema,
    context: BatchContext,
    stage: KeyedStagePlan,
    max_parallelism: int,
    source_stats: SourceStats | None = None,
) -> NativeCombine:
    """Route ``df`` by key group and combine it into pane partials in Spark; with
    ``source_stats``, the combined rows also carry what the keyed stage needs to measure the
    source ``df`` holds the records of (:class:`SourceStats`).

    One SQL statement over a temporary view of ``df``: each DataFrame transformation
    costs Spark an analysis on the driver (several ms) and each ``F`` column Py4J round
    trips, every batch; one statement is analyzed once.
    """
    kernel.bind(in_schema)
    record_schema = kernel.record_schema(in_schema)
    layout = kernel.layout(record_schema)
    wm = batch_watermark(kernel.queries[0], context)
    spark = df.sparkSession  # its hash exchanges have enough partitions (prepare_hash_exchange)
    view = _view_name(op)
    df.createOrReplaceTempView(view)

    time = kernel.queries[0].time
    # (processing time: a constant Spark must not fold, or it drops the pane from the grouping
    # and so from the exchange's hash, which the salt reproduces)
    t = (
        _micros(time.column, record_schema.field(time.column).type)
        if isinstance(time, EventTime)
        else f"IF(spark_partition_id() >= 0, {int(context.processing_time)}L, 0L)"
    )
    # every record gets its pane, late or not: the kernel sorts out the late panes. The
    # watermark is a literal, and a literal in the aggregate's input would make Spark
    # generate and compile new code for it every batch (some 30-70 ms on the driver)
    pane = f"{_floor_div(t, kernel.pane)} AS {PANE_STATE}"
    routing = routing_columns(kernel.key_columns, stage, max_parallelism)
    keys = [f"{_KEY}{i}" for i in range(len(kernel.key_columns))]
    # the keys again, in columns Spark cannot fold: a constant key (a window over a whole
    # stream) would be dropped from the grouping, and so from the exchange's hash, which
    # the salt must reproduce exactly
    columns = [
        *(f"IF(spark_partition_id() >= 0, {_q(k)}, NULL) AS {name}" for name, k in zip(keys, kernel.key_columns)),
        f"spark_partition_id() AS {COMBINE_TASK}",
        f"{routing[PARTITION]} AS {PARTITION}",
        pane,
    ]
    groups = [*keys, PANE_STATE, COMBINE_TASK, SALT]
    columns += salt_sql(groups[:-1], PARTITION, stage.partitions)

    # the partition steers the salt and the salt the exchange; neither is needed after it
    # (the keyed stage checks its rows' key groups against the routing table)
    selected = [*(f"{name} AS {_q(k)}" for name, k in zip(keys, kernel.key_columns)), PANE_STATE, COMBINE_TASK]
    selected += [f"{_partial_sql(f, layout, record_schema)} AS {_q(PARTIAL_PREFIX + f.name)}" for f in layout.fields]
    # one key group per key, so any aggregate will do
    selected += [f"min({INGEST}) AS {INGEST}", f"max({routing[KEY_GROUP]}) AS {KEY_GROUP}", f"count(1) AS {RECORDS}"]
    if source_stats is not None and source_stats.event_time:  # every record is in one group
        selected.append(f"max(unix_micros({_q(source_stats.event_time)})) AS {MAX_EVENT}")
    frame = spark.sql(
        f"SELECT {', '.join(selected)} FROM (SELECT *, {', '.join(columns)} FROM {view}) GROUP BY {', '.join(groups)}"
    )

    # timestamps travel as micros: collected, they would come back in the driver's time zone
    fields = [
        f"{_micros(f.name, f.type) if pa.types.is_timestamp(f.type) else _q(f.name)} AS {_q(f.name)}" for f in record_schema
    ]
    start = f"{_q(PANE_STATE)} * {kernel.pane}L"
    on_time = " AND ".join(  # the kernel's rule 2: the last window holding the pane is still open
        f"coalesce(({start} - pmod({start}, {q.sliding.slide}L) + {q.sliding.size}L) > ({wm}L - {q.allowed_lateness}L), false)"
        for q in kernel.queries
    )

    # built only when some record was late, in the same batch (the view is the batch's until the next)
    def late() -> Any:  # a pyspark DataFrame
        return spark.sql(f"SELECT {', '.join(fields)} FROM (SELECT *, {pane} FROM {view}) WHERE NOT ({on_time})")

    schema = kernel.combined_schema(in_schema).append(pa.field(RECORDS, pa.int64()))
    return NativeCombine(frame, schema, late, kernel, record_schema)


def _view_name(op: Operator) -> str:
    """The temporary view of the records a window operator combines (a plain identifier)."""
    return f"__sluice_combine_{hashlib.sha1(op.id.encode()).hexdigest()[:16]}"


def prepare_hash_exchange(spark, partitions: int) -> None:
    """Make Spark's hash exchanges have ``partitions`` partitions, once a batch, before its
    lineage is built: a salted row goes to partition ``pmod(p, n)``, which is ``p`` only for
    ``n > p``, and no more partitions than the widest keyed stage's (each runs a task, even
    empty). Adaptive execution must not coalesce the partitions either."""
    conf = spark.conf
    conf.set("spark.sql.shuffle.partitions", str(partitions))
    if conf.get("spark.sql.adaptive.enabled") == "true":
        conf.set("spark.sql.adaptive.coalescePartitions.enabled", "false")


def late_records(combine: NativeCombine, context: BatchContext) -> list[pa.Table]:
    """The batch's late records, per query they are late for: a second job over the batch."""
    rows = combine.late().toArrow()
    if rows.num_rows == 0:
        return []
    columns = {f.name: rows[f.name].cast(f.type) for f in combine.record_schema}
    records = pa.table(columns, schema=combine.record_schema)
    wm = batch_watermark(combine.kernel.queries[0], context)
    return combine.kernel.contributions(records, context, wm)[1]


def write_late(combine: NativeCombine, op: Operator, context: BatchContext, root: str | Checkpoint) -> int:
    """Write the batch's late records to the ``late`` side output; returns how many were written
    (a record late for two queries counts twice, as in the Python combine)."""
    writer = SideOutputWriter(root, f"side/{op.id}/{LATE}", context.batch_id, combine_stage_name(op.id), 0)
    for part in late_records(combine, context):
        writer.add_table(op.name, part, LATE)
    return writer.flush()
