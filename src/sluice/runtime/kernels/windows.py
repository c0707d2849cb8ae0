"""Window aggregation kernels: sliding and tumbling windows over shared panes, and sessions.

A :class:`WindowAggregateKernel` computes one or more fixed-size window queries (C-MR's
windows with a size and a slide) over the same keyed stream from ONE set of panes of length
gcd of all sizes and slides (C-MR's sub-window combine and shared input streams; Scotty's
stream slicing). Its state per key is plain Arrow: the list of live panes and, per partial
aggregate, the list of the panes' partials.

The rules, for a batch with watermark W (event time: computed by the driver from earlier
batches; processing time: the batch's processing time; both: the end of time in the batch
that ends the input) and a query with allowed lateness L:

1. A window ``[start, end)`` is *open* while ``end + L > W`` and *closed* after.
2. A record belongs to the windows of each query that contain its time; it contributes to
   those that are open. A record that contributes to no window of a query (every window it
   belongs to has closed) is *late* for that query: it goes to the ``late`` side output,
   once per such query, with the query's name in ``late_for``. (Flink's rule: an element is
   late when all its windows are late.) A record with a null event time is late.
3. Append mode: a window is emitted once when W first reaches its end (if it holds any
   record), and again in each later batch in which records contribute to it while it is
   still open (late firings; only possible when L > 0). Update mode: a window is emitted in
   every batch in which records contribute to it.
4. Panes no open window of any query needs are evicted; a key with no live pane has no state.

The kernel runs the rules per batch in this order, so a window closing in this batch never
sees this batch's (late) records: (A) emit windows that are due and closed, from the panes
before the batch; (B) add the batch's contributing records to their panes; (C) emit the
open windows that are due (append) or that the batch changed; (D) evict dead panes. Only
panes from before the batch can be dead (a record contributes to an open window, so its
pane lives), so (D) runs on them right after (A), and (B) and (C) see fewer panes.

Each key's state remembers the watermark of the last batch that changed it (``__wm``) so
that a window is emitted on time exactly once even if the key group is not processed in
every batch; the state of a key whose batch changed nothing is not rewritten.

On Spark the runtime first runs :meth:`WindowAggregateKernel.combine` on every map task
(``sluice.runtime.exchange.python_combine``): records are pre-aggregated per (key, pane) and late ones
sorted out before the exchange, so one partial per (key, pane) and task crosses it; then
``process`` merges those partials into the state exactly as it would the records.
"""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.graph.aggregates import UserAggregate, udaf_values
from sluice.graph.windows import (
    QUERY_COLUMN,
    WINDOW_END,
    WINDOW_START,
    WindowQuery,
    check_shared,
    pane_length,
    window_output_schema,
)
from sluice.runtime.kernels.grouping import state_and_row_ids as key_ids  # the one key encoding
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, CombiningKernel, DeadRecord, KeyedKernel, KeyedResult
from sluice.runtime.kernels.panes import (
    END_OF_TIME,
    NO_WATERMARK,
    PaneTable,
    PartialLayout,
    add_udafs,
    combine_ranges,
    empty_pane_table,
    finalize,
    group_starts,
    merge_tables,
    pair_searchsorted,
    partials_from_rows,
    sliding_udaf,
    sort_codes,
    sort_pairs,
)
from sluice.runtime.kernels.sessions import SessionWindowKernel
from sluice.runtime.kernels.window_state import (
    COMBINE_TASK,
    INGEST,
    LATE,
    PANE_STATE,
    PARTIAL_PREFIX,
    RECORDS,
    WATERMARK_STATE,
    StoredIntervals,
    batch_watermark,
    distinct_aggregates,
    late_schema,
    late_table,
    read_window_state,
    record_times,
    to_time_array,
    window_state_changes,
    window_state_schema,
)

__all__ = ["LATE", "SessionWindowKernel", "WindowAggregateKernel", "window_kernel"]

# ---------------------------------------------------------------------------------------
# Fixed-size windows on shared panes


class WindowAggregateKernel(CombiningKernel):
    """Tumbling and sliding window queries over one keyed stream, sharing one set of panes."""

    wants_timers = True  # windows fire on the watermark, also for keys without new rows
    combined_marker = PANE_STATE

    def __init__(self, key_columns: list[str], queries: list[WindowQuery], emit_keys: bool = True):
        super().__init__(key_columns)
        queries = list(queries)
        check_shared(queries)
        self.queries = queries
        self.emit_keys = emit_keys  # False for a global window keyed by a constant column
        self.pane = pane_length(queries)  # C-MR sub-window length: gcd of all sizes and slides
        self.aggregates = distinct_aggregates(queries)
        self._layouts: dict[pa.Schema, PartialLayout] = {}

    # -- schemas ----------------------------------------------------------------------

    def layout(self, input_schema: pa.Schema) -> PartialLayout:
        layout = self._layouts.get(input_schema)
        if layout is None:
            layout = self._layouts[input_schema] = PartialLayout(self.aggregates, input_schema)
        return layout

    def bind(self, input_schema: pa.Schema) -> pa.Schema:
        """Remember the schema of the records (combined rows do not carry their types); returns
        the output schema. The job graph's validation calls it."""
        self.bind_records(input_schema)
        return self.output_schema(input_schema)

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        input_schema = self.record_schema(input_schema)
        return window_state_schema(self.key_columns, input_schema, self.layout(input_schema), [PANE_STATE])

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return window_output_schema(self.key_columns, self.queries, self.record_schema(input_schema), self.emit_keys)

    def combined_schema(self, input_schema: pa.Schema) -> pa.Schema:
        """Schema of :meth:`combine`'s rows: keys, pane, one column per partial aggregate."""
        input_schema = self.record_schema(input_schema)
        layout = self.layout(input_schema)
        fields = [input_schema.field(c) for c in self.key_columns]
        fields += [pa.field(PANE_STATE, pa.int64()), pa.field(COMBINE_TASK, pa.int32())]
        fields += [pa.field(PARTIAL_PREFIX + f.name, layout.arrow_type(f)) for f in layout.fields]
        return pa.schema(fields)

    # -- map side: C-MR's Combine --------------------------------------------------------

    def combine(self, rows: pa.Table, ctx: BatchContext) -> tuple[pa.Table, pa.Table, list[DeadRecord]]:
        """Pre-aggregate one map task's records per (key, pane) before the exchange.

        C-MR combines sub-windows incrementally; running that Combine on the map side, as
        MapReduce runs its combiner, ships one partial aggregate per (key, pane) through the
        exchange instead of every record. Whether a record is late depends only on its pane
        and the batch's watermark, so late records are sorted out here too. Returns the
        combined rows (:meth:`combined_schema`, plus the oldest ingest time per pane when
        the rows carry one), the late records and the dead letters.

        A user-defined aggregate whose ``add`` raises rejects the records it was given
        together, those of one (key, pane) in this map task: they are all dead letters with
        the error and add nothing to any window; the key's other panes go on.
        """
        schema = self.record_schema(rows.schema)
        layout = self.layout(schema)
        wm = batch_watermark(self.queries[0], ctx)
        records = rows.drop_columns([c for c in rows.column_names if c in (KEY_GROUP, INGEST)])
        accepted, late_parts, panes = self.contributions(records, ctx, wm)
        late = pa.concat_tables(late_parts) if late_parts else late_schema(records.schema).empty_table()
        kept = rows.filter(pa.array(accepted)) if not accepted.all() else rows
        kept_panes = panes[accepted]
        dead: list[DeadRecord] = []
        while True:  # twice at most: the second pass without the records a UDAF raised on
            ids, first, keys = key_ids(kept.slice(0, 0), kept, self.key_columns)
            new, order, starts = partials_from_rows(layout, kept, ids, kept_panes)
            accumulators, failed = _udaf_adds(layout, kept, order, starts)
            if not failed:
                break
            ends = np.append(starts[1:], len(order))
            bad = np.zeros(kept.num_rows, dtype=bool)
            for g, exc in failed.items():
                at = order[starts[g] : ends[g]]
                bad[at] = True
                hidden = [c for c in kept.column_names if c in (KEY_GROUP, INGEST)]
                for record in kept.take(pa.array(at)).drop_columns(hidden).to_pylist():
                    dead.append(DeadRecord(record, exc, tuple(record[k] for k in self.key_columns)))
            kept, kept_panes = kept.filter(pa.array(~bad)), kept_panes[~bad]
        new.parts.update(accumulators)
        columns: dict[str, pa.Array] = {}
        group_keys = keys.take(pa.array(first[new.key]))
        for c in self.key_columns:
            columns[c] = group_keys[c]
        columns[PANE_STATE] = pa.array(new.pane, pa.int64())
        columns[COMBINE_TASK] = pa.array(np.full(len(new), ctx.partition, np.int32))
        for f in layout.fields:
            values = new.parts[f.name]
            columns[PARTIAL_PREFIX + f.name] = pa.array(list(values) if f.kind == "udaf" else values, layout.arrow_type(f))
        if INGEST in kept.column_names and len(new):
            ingest = pc.cast(kept[INGEST], pa.int64()).to_numpy()[order]
            columns[INGEST] = pa.array(np.minimum.reduceat(ingest, starts)).cast(kept.schema.field(INGEST).type)
        combined = pa.table(columns) if len(new) else self.combined_schema(schema).empty_table()
        return combined, late, dead

    # -- one batch --------------------------------------------------------------------

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        """One batch of records, or of rows :meth:`combine` made of them (``__pane`` column)."""
        combined = PANE_STATE in rows.column_names
        schema = self.record_schema(rows.schema)
        layout = self.layout(schema)
        out_schema = self.output_schema(schema)
        wm = batch_watermark(self.queries[0], ctx)
        n_state = state.num_rows
        late_seen = 0
        # the keys of the state and of every row, numbered; the runtime reuses the numbering
        # to find each output row's input rows (also those of panes dropped here)
        ids, first, all_keys = key_ids(state, rows, self.key_columns)
        row_ids = ids[n_state:]
        to_row_ids = None  # the row_ids numbering of each key, when the kernel's own differs
        if combined:
            kept_panes, late_seen = self._accepted_panes(rows, wm)
            if kept_panes is not None:
                # the rows kept are numbered by themselves: the order of the output follows it
                rows = rows.filter(pa.array(kept_panes))
                position = np.concatenate([np.arange(n_state), n_state + np.flatnonzero(kept_panes)])
                all_ids = ids
                ids, first, all_keys = key_ids(state, rows, self.key_columns)
                to_row_ids = all_ids[position[first]]
        n_keys = len(first)
        row_key = ids[n_state:]
        last_wm = np.full(n_keys, NO_WATERMARK, dtype=np.int64)
        if n_state:
            last_wm[:n_state] = np.asarray(state[WATERMARK_STATE].to_numpy(), np.int64)
        old = self._panes_from_state(layout, state)

        late_parts: list[pa.Table] = []
        if combined:  # the combine already sorted out the late records
            pass
        else:
            accepted, late_parts, panes = self.contributions(rows, ctx, wm)

        outputs = []
        emitted_keys = []
        # (A) windows due and closed: from the panes before this batch
        for q in self.queries:
            if q.mode != "append" or len(old) == 0:
                continue
            j_lo = self._first_unfired(q, last_wm)[old.key]
            j_hi = _floor_div(wm - q.allowed_lateness - q.sliding.size, q.sliding.slide)
            wk, wj, at = self._windows_with_data(q, old, None, j_lo, j_hi)
            if len(wk):
                outputs.append(self._emit(q, layout, old, wk, wj, all_keys, first, out_schema, at))
                emitted_keys.append(wk)

        # (D) evict the panes no open window of any query needs: whether a pane lives depends
        # on its time alone, and every pane the batch adds lives, so only old panes can go
        changed = np.zeros(n_keys, dtype=bool)
        keep = self._kept(old.pane, wm)
        if not keep.all():
            changed[old.key[~keep]] = True
            old = old.take(np.flatnonzero(keep))

        # (B) each contributing record updates exactly one pane's partial aggregate
        if combined:
            new = combined_partials(layout, rows, row_key)
            merged, target = merge_tables(layout, old, new)
            merge_udafs(layout, merged, target, new)
        else:
            kept_rows = rows.filter(pa.array(accepted)) if not accepted.all() else rows
            new, order, starts = partials_from_rows(layout, kept_rows, row_key[accepted], panes[accepted])
            merged, target = merge_tables(layout, old, new)
            add_udafs(layout, merged, target, kept_rows, order, starts)
        touched = np.zeros(len(merged), dtype=bool)
        touched[target] = True

        # (C) open windows that are due (append) or that this batch changed
        for q in self.queries:
            if len(merged) == 0:
                break
            z, s, lateness = q.sliding.size, q.sliding.slide, q.allowed_lateness
            first_open = _floor_div(wm - lateness - z, s) + 1
            last_due = _floor_div(wm - z, s)
            changed_hi = last_due if q.mode == "append" else _floor_div(END_OF_TIME, s)
            wk_t, wj_t, at_t = self._windows_with_data(q, merged, touched, first_open, changed_hi)
            if q.mode == "append":
                j_lo = np.maximum(self._first_unfired(q, last_wm), first_open)[merged.key]
                wk_d, wj_d, at_d = self._windows_with_data(q, merged, None, j_lo, last_due)
                if at_t is not None and at_d is not None:  # one pane per window: a window is its pane's row
                    at_t = np.union1d(at_t, at_d)
                    wk_t, wj_t = merged.key[at_t], merged.pane[at_t]
                else:
                    wk_t, wj_t = _union_pairs(wk_t, wj_t, wk_d, wj_d)
            if len(wk_t):
                outputs.append(self._emit(q, layout, merged, wk_t, wj_t, all_keys, first, out_schema, at_t))
                emitted_keys.append(wk_t)

        # the state of every key the batch added to, evicted from or emitted changes
        changed[new.key] = True
        for wk in emitted_keys:
            changed[wk] = True

        upserts, deletes = self._state_changes(layout, schema, merged, changed, n_state, all_keys, first, state, rows, wm)
        output = pa.concat_tables(outputs).cast(out_schema) if outputs else out_schema.empty_table()
        output_ids = np.concatenate(emitted_keys) if emitted_keys else np.zeros(0, np.int64)
        if to_row_ids is not None:
            output_ids = to_row_ids[output_ids]
        side = {LATE: pa.concat_tables(late_parts) if late_parts else late_schema(schema).empty_table()}
        return KeyedResult(
            output=output,
            upserts=upserts,
            deletes=deletes,
            side_outputs=side,
            metrics={"late_seen": late_seen} if late_seen else {},
            key_ids=(output_ids, row_ids),
        )

    # -- pieces -----------------------------------------------------------------------

    def _accepted_panes(self, rows: pa.Table, wm: int) -> tuple[np.ndarray | None, int]:
        """Which combined rows hold panes some query accepts (None: all), and how many
        records the rows of panes late for some query combine.

        Spark's combine (``sluice.runtime.exchange.spark_combine``) groups every record by its pane
        whether it is late or not: deciding it there would put the batch's watermark into
        the code Spark generates, and Spark would compile that code again every batch. The
        rows of panes no query accepts go; the records of panes late for some query are
        counted (``__records``) so that the driver fetches them for the late side output.
        The Python combine already sorted late records out: its rows have no ``__records``.
        """
        pane = rows[PANE_STATE]
        has_pane = np.asarray(pc.is_valid(pane).to_numpy(zero_copy_only=False), bool)
        panes = np.asarray(pc.fill_null(pane, 0).to_numpy(), np.int64)
        accepted = np.zeros(rows.num_rows, dtype=bool)
        on_time = has_pane.copy()
        for q in self.queries:
            contributes = has_pane & (self._last_end(q, panes) > wm - q.allowed_lateness)
            accepted |= contributes
            on_time &= contributes
        late = 0
        if RECORDS in rows.column_names and not on_time.all():
            late = int(np.asarray(rows[RECORDS].to_numpy(), np.int64)[~on_time].sum())
        return (None if accepted.all() else accepted), late

    def contributions(self, rows: pa.Table, ctx: BatchContext, wm: int) -> tuple[np.ndarray, list, np.ndarray]:
        """Rule 2: (contributes to some query, late records per query, pane) of each record."""
        times, has_time = record_times(self.queries[0], rows, ctx)
        panes = np.floor_divide(times, self.pane)
        accepted = np.zeros(rows.num_rows, dtype=bool)
        late_parts = []
        for q in self.queries:
            contributes = has_time & (self._last_end(q, panes) > wm - q.allowed_lateness)
            accepted |= contributes
            if not contributes.all():
                late_parts.append(late_table(rows, ~contributes, q.display_name, wm))
        return accepted, late_parts, panes

    def _last_end(self, q: WindowQuery, panes: np.ndarray) -> np.ndarray:
        """End of the last window of ``q`` containing each pane."""
        s = q.sliding.slide
        return np.floor_divide(panes * self.pane, s) * s + q.sliding.size

    @staticmethod
    def _first_unfired(q: WindowQuery, last_wm: np.ndarray) -> np.ndarray:
        """Index of the first window whose end is after the key's last watermark."""
        return np.floor_divide(last_wm - q.sliding.size, q.sliding.slide) + 1

    def _kept(self, panes: np.ndarray, wm: int) -> np.ndarray:
        """Panes some open window of some query still needs."""
        keep = np.zeros(len(panes), dtype=bool)
        for q in self.queries:
            keep |= self._last_end(q, panes) > wm - q.allowed_lateness
        return keep

    def _one_pane_windows(self, q: WindowQuery) -> bool:
        """Each window of ``q`` is exactly one pane (tumbling windows of the pane length)."""
        return q.sliding.size == q.sliding.slide == self.pane

    def _windows_with_data(
        self, q: WindowQuery, table: PaneTable, rows: np.ndarray | None, j_lo: np.ndarray | int, j_hi: np.ndarray | int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(key, window index) of every window in [j_lo, j_hi] containing a selected pane, and
        for one-pane windows the table row of each window's pane (else None).

        ``rows`` selects rows of ``table`` (a mask; None: all); ``j_lo`` and ``j_hi`` are
        numbers or arrays over the table's rows.

        Window j is [j*slide, j*slide + size). Pane p (time [p*P, (p+1)*P)) lies in windows
        floor((p*P - size)/slide) + 1 .. floor(p*P/slide); along a key's sorted panes both
        bounds never decrease, so each pane adds the windows after its predecessor's last.
        """
        z, s = q.sliding.size, q.sliding.slide
        if self._one_pane_windows(q):  # pane p is window p, the only window holding it
            inside = (table.pane >= j_lo) & (table.pane <= j_hi)
            if rows is not None:
                inside &= rows
            at = np.flatnonzero(inside)
            return table.key[at], table.pane[at], at
        pick = (lambda a: a) if rows is None else (lambda a: a[rows])
        if not np.isscalar(j_lo):
            j_lo = pick(j_lo)
        if not np.isscalar(j_hi):
            j_hi = pick(j_hi)
        key, pane = pick(table.key), pick(table.pane)
        if len(key) == 0:
            return key, key, None
        start = pane * self.pane
        lo = np.maximum(np.floor_divide(start - z, s) + 1, j_lo)
        hi = np.minimum(np.floor_divide(start, s), j_hi)
        previous_hi = np.empty_like(hi)
        previous_hi[0] = NO_WATERMARK
        previous_hi[1:] = hi[:-1]
        previous_hi[1:][key[1:] != key[:-1]] = NO_WATERMARK
        lo = np.maximum(lo, previous_hi + 1)
        count = np.maximum(hi - lo + 1, 0)
        total = int(count.sum())
        if total == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), None
        offsets = np.arange(total) - np.repeat(np.cumsum(count) - count, count)
        return np.repeat(key, count), np.repeat(lo, count) + offsets, None

    def _emit(
        self,
        q: WindowQuery,
        layout: PartialLayout,
        table: PaneTable,
        wk: np.ndarray,
        wj: np.ndarray,
        all_keys: pa.Table,
        first: np.ndarray,
        out_schema: pa.Schema,
        at: np.ndarray | None = None,
    ) -> pa.Table:
        """Result rows of windows (wk, wj), combining each window's panes; ``at``: the table
        row of each window's only pane, for one-pane windows."""
        z, s = q.sliding.size, q.sliding.slide
        if at is not None:
            # a window of one pane is that pane's partials (what combining [at, at + 1) gives)
            lo, hi = at, at + 1
            combined = {f.name: table.parts[f.name][at] for f in layout.fields if f.kind != "udaf"}
        else:
            # both ends in one search: the table's pairs are encoded once
            bounds = pair_searchsorted(
                table.key,
                table.pane,
                np.concatenate([wk, wk]),
                np.concatenate([(wj * s) // self.pane, (wj * s + z) // self.pane]),
            )
            lo, hi = bounds[: len(wk)], bounds[len(wk) :]
            combined = combine_ranges(layout, table, lo, hi)
        udafs = {}
        for _, agg in q.aggregates:
            if isinstance(agg, UserAggregate):
                name = layout.udaf_field[id(agg)]
                if name not in udafs:
                    udafs[name] = sliding_udaf(table, name, agg, lo, hi)
        columns: dict[str, pa.Array] = {}
        if QUERY_COLUMN in out_schema.names:
            columns[QUERY_COLUMN] = pa.array([q.display_name] * len(wk), pa.string())
        if self.emit_keys:
            keys = all_keys.take(pa.array(first[wk]))
            for c in self.key_columns:
                columns[c] = keys[c]
        wtype = out_schema.field(WINDOW_START).type
        columns[WINDOW_START] = to_time_array(wj * s, wtype)
        columns[WINDOW_END] = to_time_array(wj * s + z, wtype)
        mine = {name: finalize(agg, layout, combined, udafs) for name, agg in q.aggregates}
        for f in out_schema:
            if f.name in columns:
                continue
            columns[f.name] = mine.get(f.name, pa.nulls(len(wk), f.type))
        return pa.table(columns).cast(out_schema)

    def _panes_from_state(self, layout: PartialLayout, state: pa.Table) -> PaneTable:
        """The state's panes as a PaneTable (state row i has key id i)."""
        if state.num_rows == 0:
            return empty_pane_table(layout)
        stored = read_window_state(state, layout, [PANE_STATE])
        return PaneTable(stored.key, stored.bounds[PANE_STATE], stored.parts)

    def _state_changes(
        self,
        layout: PartialLayout,
        schema: pa.Schema,
        final: PaneTable,
        changed: np.ndarray,
        n_state: int,
        all_keys: pa.Table,
        first: np.ndarray,
        state: pa.Table,
        rows: pa.Table,
        wm: int,
    ) -> tuple[pa.Table, pa.Table | None]:
        """New state rows of changed keys that still have panes; deletes for the others."""
        state_schema = self.state_schema(schema).append(pa.field(KEY_GROUP, pa.int32()))
        panes = StoredIntervals(final.key, {PANE_STATE: final.pane}, final.parts)
        return window_state_changes(
            layout, self.key_columns, state_schema, panes, changed, n_state, all_keys, first, state, rows, wm
        )


def _udaf_adds(
    layout: PartialLayout, rows: pa.Table, order: np.ndarray, starts: np.ndarray
) -> tuple[dict[str, np.ndarray], dict[int, BaseException]]:
    """Each group's pickled UDAF accumulators (per field, an object array over the groups
    ``starts`` delimits in ``order``), and the groups on which some ``add`` raised."""
    ends = np.append(starts[1:], len(order)).tolist()
    accumulators: dict[str, np.ndarray] = {}
    failed: dict[int, BaseException] = {}
    for f in layout.fields:
        if f.kind != "udaf":
            continue
        values = udaf_values(rows, f.udaf).take(pa.array(order))
        cells = np.empty(len(starts), dtype=object)
        for g, (a, b) in enumerate(zip(starts.tolist(), ends)):
            try:
                cells[g] = pickle.dumps(f.udaf.add(f.udaf.create(), values.slice(a, b - a)))
            except Exception as exc:  # the group's records become dead letters
                failed.setdefault(g, exc)
        accumulators[f.name] = cells
    return accumulators, failed


def _floor_div(a: int, b: int) -> int:
    return a // b  # Python ints: exact, floor semantics, no overflow


def _union_pairs(k1: np.ndarray, j1: np.ndarray, k2: np.ndarray, j2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted union of two sets of (key, window) pairs."""
    k = np.concatenate([k1, k2])
    j = np.concatenate([j1, j2])
    if len(k) == 0:
        return k, j
    order = sort_pairs(k, j)
    k, j = k[order], j[order]
    starts = group_starts(k, j)
    return k[starts], j[starts]


def combined_partials(layout: PartialLayout, rows: pa.Table, row_key: np.ndarray) -> PaneTable:
    """The PaneTable of combined rows; partials of one (key, pane) from several map tasks
    are combined here, in the order of their map tasks whatever order the exchange delivered
    them in (so float sums and UDAF merges are the same in a replay)."""
    pane = np.asarray(rows[PANE_STATE].to_numpy(), np.int64)
    task = np.asarray(rows[COMBINE_TASK].to_numpy(), np.int64)
    order = _sort_triples(row_key, pane, task)
    key, pane = row_key[order], pane[order]
    starts = group_starts(key, pane)
    parts = {}
    for f in layout.fields:
        column = rows[PARTIAL_PREFIX + f.name].combine_chunks()
        if f.kind == "udaf":
            cells = np.array([*column.to_pylist(), None], dtype=object)[:-1][order]
            ends = np.append(starts[1:], len(order))
            merged = np.empty(len(starts), dtype=object)
            for g, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
                if b - a == 1:
                    merged[g] = cells[a]
                    continue
                acc = f.udaf.create()
                for cell in cells[a:b]:
                    acc = f.udaf.merge(acc, pickle.loads(cell))
                merged[g] = pickle.dumps(acc)
            parts[f.name] = merged
        else:
            values = np.asarray(column.to_numpy(zero_copy_only=False), layout.numpy_dtype(f))[order]
            parts[f.name] = f.combine.reduceat(values, starts) if len(starts) else values
    return PaneTable(key[starts], pane[starts], parts)


def _sort_triples(key: np.ndarray, pane: np.ndarray, task: np.ndarray) -> np.ndarray:
    """``np.lexsort((task, pane, key))``, through one int64 code when it fits."""
    if len(key) == 0:
        return np.zeros(0, np.int64)
    pane_lo, task_lo = int(pane.min()), int(task.min())
    panes, tasks = int(pane.max()) - pane_lo + 1, int(task.max()) - task_lo + 1
    bound = (int(key.max()) + 1) * panes * tasks
    if bound >= 2**62:
        return np.lexsort((task, pane, key))
    return sort_codes((key * panes + (pane - pane_lo)) * tasks + (task - task_lo), bound)


def merge_udafs(layout: PartialLayout, merged: PaneTable, target: np.ndarray, new: PaneTable) -> None:
    """Merge combined UDAF accumulators into the panes' accumulators (new ones start from create())."""
    for f in layout.fields:
        if f.kind != "udaf":
            continue
        stored = merged.parts[f.name]
        cache = merged.live.setdefault(f.name, {})
        for g, i in enumerate(target.tolist()):
            acc = pickle.loads(stored[i]) if stored[i] is not None else f.udaf.create()
            acc = f.udaf.merge(acc, pickle.loads(new.parts[f.name][g]))
            cache[i] = acc
            stored[i] = pickle.dumps(acc)


def window_kernel(key_columns: list[str], queries: list[WindowQuery], emit_keys: bool = True) -> KeyedKernel:
    """The kernel computing ``queries`` over one keyed stream (sessions get their own)."""
    queries = list(queries)
    check_shared(queries)
    if queries[0].is_session:
        return SessionWindowKernel(key_columns, queries[0], emit_keys)
    return WindowAggregateKernel(key_columns, queries, emit_keys)
