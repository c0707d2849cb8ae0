"""What the window kernels share: the batch's time rules, late records, and their state codec.

Both window kernels (``windows.WindowAggregateKernel`` for panes of fixed-size windows,
``sessions.SessionWindowKernel`` for session windows) keep, per key, one state row in plain
Arrow: the key columns, the watermark of the last batch that changed the key (``__wm``), one
list column per interval bound (the panes; or the sessions' starts and ends) and, per partial
aggregate, the list of the intervals' partials (``__p:<field>``). :func:`window_state_schema`,
:func:`read_window_state` and :func:`window_state_changes` are that encoding, written once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.core.columns import INGEST  # noqa: F401 (re-exported)
from sluice.graph.aggregates import Aggregate
from sluice.graph.windows import EventTime, WindowQuery
from sluice.runtime.kernels.grouping import concat_column
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.panes import END_OF_TIME, NO_WATERMARK, PartialLayout

LATE = "late"  # name of the side output of late records
LATE_FOR = "late_for"  # side-output column: the query the record was late for
LATE_WATERMARK = "watermark"  # side-output column: the watermark it was judged against
WATERMARK_STATE = "__wm"
PANE_STATE = "__pane"  # in state: list of live panes; in combined rows: the row's pane
PARTIAL_PREFIX = "__p:"
COMBINE_TASK = "__combine_task"  # combined rows: the map task that combined them (a stable order)
RECORDS = "__records"  # rows of Spark's combine: how many records the row combines


def record_times(query: WindowQuery, rows: pa.Table, ctx: BatchContext) -> tuple[np.ndarray, np.ndarray]:
    """(time in microseconds, has-time mask) per record, in the query's time domain."""
    if not isinstance(query.time, EventTime):
        return np.full(rows.num_rows, ctx.processing_time, dtype=np.int64), np.ones(rows.num_rows, dtype=bool)
    column = rows[query.time.column]
    if pa.types.is_timestamp(column.type):
        column = pc.cast(pc.cast(column, pa.timestamp("us", tz=column.type.tz)), pa.int64())
    elif column.type != pa.int64():
        column = pc.cast(column, pa.int64())
    valid = np.asarray(pc.is_valid(column), dtype=bool) if column.null_count else np.ones(rows.num_rows, dtype=bool)
    if column.null_count:
        column = pc.fill_null(column, 0)
    return np.asarray(column.to_numpy(), dtype=np.int64), valid


def batch_watermark(query: WindowQuery, ctx: BatchContext) -> int:
    """The watermark the batch is judged against, clamped to a safe int64 range.

    A batch watermark at END_OF_TIME is the runtime's end of input (every source has ended,
    ``BatchExecutor._watermark``): it closes processing-time windows too, which would
    otherwise wait for a later batch that never comes."""
    if isinstance(query.time, EventTime):
        wm = NO_WATERMARK if ctx.watermark is None else int(ctx.watermark)
    elif ctx.watermark is not None and ctx.watermark >= END_OF_TIME:
        wm = END_OF_TIME
    else:
        wm = int(ctx.processing_time)
    return min(max(wm, NO_WATERMARK), END_OF_TIME)


def to_time_array(micros: np.ndarray, dtype: pa.DataType) -> pa.Array:
    array = pa.array(micros, pa.int64())
    return array if dtype == pa.int64() else array.cast(dtype)


def late_table(rows: pa.Table, mask: np.ndarray, query_name: str, watermark: int) -> pa.Table:
    late = rows.filter(pa.array(mask))
    if KEY_GROUP in late.column_names:
        late = late.drop_columns([KEY_GROUP])
    late = late.append_column(LATE_FOR, pa.array([query_name] * late.num_rows, pa.string()))
    return late.append_column(LATE_WATERMARK, pa.array(np.full(late.num_rows, watermark, np.int64), pa.int64()))


def late_schema(input_schema: pa.Schema) -> pa.Schema:
    fields = [f for f in input_schema if f.name != KEY_GROUP]
    return pa.schema([*fields, pa.field(LATE_FOR, pa.string()), pa.field(LATE_WATERMARK, pa.int64())])


def distinct_aggregates(queries: list[WindowQuery]) -> list[Aggregate]:
    seen: dict[int, Aggregate] = {}
    for q in queries:
        for _, agg in q.aggregates:
            seen.setdefault(id(agg), agg)
    return list(seen.values())


def key_columns_of(
    all_keys: pa.Table, first: np.ndarray, ids: np.ndarray, key_columns: list[str], kg: pa.Array
) -> tuple[dict[str, pa.Array], pa.Array]:
    """Key columns and key groups of the keys ``ids`` (each read at its first row): the start
    of a state row or a delete row. The key group goes last in a state row, so it is apart."""
    taken = pa.array(first[ids])
    keys = all_keys.take(taken)
    return {c: keys[c] for c in key_columns}, kg.take(taken).cast(pa.int32())


def list_column(values: np.ndarray, offsets: np.ndarray, value_type: pa.DataType) -> pa.Array:
    if value_type == pa.binary():
        flat = pa.array(list(values), pa.binary())
    else:
        flat = pa.array(values, value_type)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), flat)


# ---------------------------------------------------------------------------------------
# The state codec: one row per key, lists of intervals and of their partials


def window_state_schema(
    key_columns: list[str], input_schema: pa.Schema, layout: PartialLayout, interval_columns: list[str]
) -> pa.Schema:
    """Keys, ``__wm``, one ``list<int64>`` per interval column, one list per partial field."""
    fields = [input_schema.field(c) for c in key_columns]
    fields.append(pa.field(WATERMARK_STATE, pa.int64()))
    fields += [pa.field(c, pa.list_(pa.int64())) for c in interval_columns]
    fields += [pa.field(PARTIAL_PREFIX + f.name, pa.list_(layout.arrow_type(f))) for f in layout.fields]
    return pa.schema(fields)


@dataclass
class StoredIntervals:
    """The intervals of a state table, flattened: state row i has key id i."""

    key: np.ndarray  # key id of each interval (the state row it came from)
    bounds: dict[str, np.ndarray]  # per interval column, its int64 values
    parts: dict[str, np.ndarray]  # per partial field, its values (pickled UDAF accumulators: objects)


def read_window_state(state: pa.Table, layout: PartialLayout, interval_columns: list[str]) -> StoredIntervals:
    """Flatten the state's lists; every interval column has the same list lengths."""
    if state.num_rows == 0:
        empty = np.zeros(0, np.int64)
        return StoredIntervals(
            empty, dict.fromkeys(interval_columns, empty), {f.name: np.zeros(0, layout.numpy_dtype(f)) for f in layout.fields}
        )
    first = state[interval_columns[0]].combine_chunks()
    key = np.asarray(pc.list_parent_indices(first).to_numpy(), np.int64)
    bounds = {c: np.asarray(pc.list_flatten(state[c].combine_chunks()).to_numpy(), np.int64) for c in interval_columns}
    parts = {}
    for f in layout.fields:
        flat = pc.list_flatten(state[PARTIAL_PREFIX + f.name].combine_chunks())
        if f.kind == "udaf":
            parts[f.name] = np.array(flat.to_pylist(), dtype=object).reshape(-1)
        else:
            parts[f.name] = np.asarray(flat.to_numpy(zero_copy_only=False), layout.numpy_dtype(f))
    return StoredIntervals(key, bounds, parts)


def window_state_changes(
    layout: PartialLayout,
    key_columns: list[str],
    state_schema: pa.Schema,
    intervals: StoredIntervals,
    changed: np.ndarray,
    n_state: int,
    all_keys: pa.Table,
    first: np.ndarray,
    state: pa.Table,
    rows: pa.Table,
    wm: int,
) -> tuple[pa.Table, pa.Table | None]:
    """New state rows of the changed keys that still have intervals, and deletes for the
    changed keys of the state that have none left.

    ``intervals`` holds every key's intervals after the batch, sorted by key (so the rows of
    a key are contiguous); ``state_schema`` is the kernel's state schema plus ``__kg``.
    """
    n_keys = len(changed)
    remaining = np.bincount(intervals.key, minlength=n_keys) if len(intervals.key) else np.zeros(n_keys, np.int64)
    upsert_ids = np.flatnonzero(changed & (remaining > 0))
    delete_ids = np.flatnonzero(changed & (remaining == 0) & (np.arange(n_keys) < n_state))
    kg = concat_column(state, rows, KEY_GROUP).combine_chunks() if (state.num_rows + rows.num_rows) else None
    if len(upsert_ids):
        rewritten = changed[intervals.key]
        sel = None if rewritten.all() else np.flatnonzero(rewritten)

        def pick(values: np.ndarray) -> np.ndarray:
            return values if sel is None else values[sel]

        offsets = np.zeros(len(upsert_ids) + 1, dtype=np.int64)
        np.cumsum(remaining[upsert_ids], out=offsets[1:])
        columns, key_groups = key_columns_of(all_keys, first, upsert_ids, key_columns, kg)
        columns[WATERMARK_STATE] = pa.array(np.full(len(upsert_ids), wm, np.int64))
        for c, values in intervals.bounds.items():
            columns[c] = list_column(pick(values), offsets, pa.int64())
        for f in layout.fields:
            columns[PARTIAL_PREFIX + f.name] = list_column(pick(intervals.parts[f.name]), offsets, layout.arrow_type(f))
        columns[KEY_GROUP] = key_groups
        upserts = pa.table(columns).cast(state_schema)
    else:
        upserts = state_schema.empty_table()
    deletes = None
    if len(delete_ids):
        columns, key_groups = key_columns_of(all_keys, first, delete_ids, key_columns, kg)
        columns[KEY_GROUP] = key_groups
        deletes = pa.table(columns)
    return upserts, deletes
