"""Session windows: per key, records less than ``gap`` apart form one window.

A record at time t opens the session ``[t, t + gap)``; sessions of a key whose intervals
overlap merge (so two records belong to one session when they are less than ``gap`` apart;
records exactly ``gap`` apart start a new one). The state of a key holds its open sessions:
start, end and the partial aggregates of each (the same partials as panes), so merging two
sessions combines partials and never rescans records.

The rules are those of ``sluice.runtime.kernels.windows`` with sessions as the windows: a
session is open while ``end + L > W``. Per batch: (A) sessions that closed are emitted if
due and not yet emitted (append mode) and dropped; (B) the batch's records, as one-record
sessions, are merged with the open sessions of their key; a merged session made only of new
records that is already closed is late (its records go to the ``late`` side output);
(C) open sessions are emitted when due (append: end <= W and not yet emitted, or changed by
this batch while due; update: changed by this batch).
"""

from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice.errors import PipelineError
from sluice.graph.windows import QUERY_COLUMN, WINDOW_END, WINDOW_START, WindowQuery, window_output_schema
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, DeadRecord, KeyedKernel, KeyedResult
from sluice.runtime.kernels.panes import NO_WATERMARK, PartialLayout, finalize
from sluice.runtime.kernels.windows import (
    INGEST,
    LATE,
    PARTIAL_PREFIX,
    WATERMARK_STATE,
    _concat_column,
    batch_watermark,
    distinct_aggregates,
    key_columns_of,
    key_ids,
    late_schema,
    late_table,
    list_column,
    record_times,
    to_time_array,
)

START_STATE = "__start"
END_STATE = "__end"


class SessionWindowKernel(KeyedKernel):
    """One session-window query over a keyed stream."""

    wants_timers = True

    def __init__(self, key_columns: list[str], query: WindowQuery, emit_keys: bool = True):
        super().__init__(key_columns)
        self.emit_keys = emit_keys
        if not query.is_session:
            raise PipelineError(f"window {query.display_name!r}: not a session window")
        self.query = query
        self.gap = query.window.gap
        self.aggregates = distinct_aggregates([query])
        self._layouts: dict[pa.Schema, PartialLayout] = {}

    def layout(self, input_schema: pa.Schema) -> PartialLayout:
        layout = self._layouts.get(input_schema)
        if layout is None:
            layout = self._layouts[input_schema] = PartialLayout(self.aggregates, input_schema)
        return layout

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        layout = self.layout(input_schema)
        fields = [input_schema.field(c) for c in self.key_columns]
        fields += [
            pa.field(WATERMARK_STATE, pa.int64()),
            pa.field(START_STATE, pa.list_(pa.int64())),
            pa.field(END_STATE, pa.list_(pa.int64())),
        ]
        fields += [pa.field(PARTIAL_PREFIX + f.name, pa.list_(layout.arrow_type(f))) for f in layout.fields]
        return pa.schema(fields)

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return window_output_schema(self.key_columns, [self.query], input_schema, self.emit_keys)

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        q = self.query
        schema = rows.schema
        layout = self.layout(schema)
        out_schema = self.output_schema(schema)
        wm = batch_watermark(q, ctx)
        lateness = q.allowed_lateness
        n_state = state.num_rows
        ids, first, all_keys = key_ids(state, rows, self.key_columns)
        n_keys = len(first)
        last_wm = np.full(n_keys, NO_WATERMARK, dtype=np.int64)
        if n_state:
            last_wm[:n_state] = np.asarray(state[WATERMARK_STATE].to_numpy(), np.int64)

        # the open sessions of the state (state row i has key id i)
        if n_state:
            starts_list = state[START_STATE].combine_chunks()
            s_key = np.asarray(pc.list_parent_indices(starts_list).to_numpy(), np.int64)
            s_start = np.asarray(pc.list_flatten(starts_list).to_numpy(), np.int64)
            s_end = np.asarray(pc.list_flatten(state[END_STATE].combine_chunks()).to_numpy(), np.int64)
            s_parts = {}
            for f in layout.fields:
                flat = pc.list_flatten(state[PARTIAL_PREFIX + f.name].combine_chunks())
                if f.kind == "udaf":
                    s_parts[f.name] = np.array(flat.to_pylist(), dtype=object).reshape(-1)
                else:
                    s_parts[f.name] = np.asarray(flat.to_numpy(zero_copy_only=False), layout.numpy_dtype(f))
        else:
            s_key = s_start = s_end = np.zeros(0, np.int64)
            s_parts = {f.name: np.zeros(0, layout.numpy_dtype(f)) for f in layout.fields}

        outputs = []
        changed = np.zeros(n_keys, dtype=bool)

        # (A) sessions closed by this watermark: emit the due ones not yet emitted, then drop
        closed = s_end + lateness <= wm
        if closed.any():
            changed[s_key[closed]] = True
            if q.mode == "append":
                emit = closed & (s_end > last_wm[s_key])
                if emit.any():
                    index = np.flatnonzero(emit)
                    parts = {name: values[index] for name, values in s_parts.items()}
                    accs = self._accumulators(layout, parts)
                    outputs.append(
                        self._emit(layout, s_key[index], s_start[index], s_end[index], parts, accs, all_keys, first, out_schema)
                    )
            open_ = ~closed
            s_key, s_start, s_end = s_key[open_], s_start[open_], s_end[open_]
            s_parts = {name: values[open_] for name, values in s_parts.items()}

        # (B) merge the batch's one-record sessions with the open sessions of their key
        times, has_time = record_times(q, rows, ctx)
        late_parts = []
        if not has_time.all():
            late_parts.append(late_table(rows, ~has_time, q.display_name, wm))
        r_index = np.flatnonzero(has_time)
        n_old, n_new = len(s_key), len(r_index)
        m_key = np.concatenate([s_key, ids[n_state:][r_index]])
        m_start = np.concatenate([s_start, times[r_index]])
        m_end = np.concatenate([s_end, times[r_index] + self.gap])
        order = np.lexsort((m_start, m_key))
        m_key, m_start, m_end = m_key[order], m_start[order], m_end[order]
        is_old = order < n_old
        group_start = _session_breaks(m_key, m_start, m_end)
        n_groups = len(group_start)
        is_break = np.zeros(len(order), dtype=bool)
        is_break[group_start] = True
        group_of = np.cumsum(is_break) - 1
        g_key = m_key[group_start]
        g_start = m_start[group_start]
        g_end = np.maximum.reduceat(m_end, group_start) if n_groups else m_end[:0]
        g_old = np.add.reduceat(is_old.astype(np.int64), group_start) if n_groups else np.zeros(0, np.int64)
        g_size = np.diff(np.append(group_start, len(order)))
        g_new = g_size - g_old
        # a session made only of new records that is already closed is late
        g_late = (g_old == 0) & (g_end + lateness <= wm)
        if g_late.any():
            late_rows = np.zeros(rows.num_rows, dtype=bool)
            member_late = g_late[group_of] & ~is_old
            late_rows[r_index[order[member_late] - n_old]] = True
            late_parts.append(late_table(rows, late_rows, q.display_name, wm))
        g_changed = (g_new > 0) | (g_old > 1)

        # partials of each merged session: old partials and new records combined
        row_table = rows.take(pa.array(r_index)) if n_new < rows.num_rows else rows
        g_parts = {}
        for f in layout.fields:
            if f.kind == "udaf":
                continue
            member = np.concatenate([s_parts[f.name], layout.field_values(f, row_table)])[order]
            g_parts[f.name] = f.combine.reduceat(member, group_start) if n_groups else member
        keep_group = ~g_late
        udaf_accs: dict[str, dict[int, object]] = {}
        failed: dict[int, BaseException] = {}  # sessions on which a UDAF raised
        for f in layout.fields:
            if f.kind != "udaf":
                continue
            cells = np.empty(n_groups, dtype=object)
            live = udaf_accs.setdefault(f.name, {})
            stored = np.concatenate([s_parts[f.name], np.empty(n_new, dtype=object)])[order]
            values = row_table[f.column].combine_chunks()
            ends = np.append(group_start[1:], len(order))
            for g in range(n_groups):
                lo, hi = int(group_start[g]), int(ends[g])
                if not keep_group[g]:
                    continue
                if not g_changed[g]:
                    cells[g] = stored[lo]
                    continue
                new_positions = [int(order[i]) - n_old for i in range(lo, hi) if not is_old[i]]
                try:
                    acc = f.udaf.create()
                    for i in range(lo, hi):
                        if is_old[i]:
                            acc = f.udaf.merge(acc, pickle.loads(stored[i]))
                    if new_positions:
                        acc = f.udaf.add(acc, values.take(pa.array(new_positions, pa.int64())))
                except Exception as exc:  # the session's new records become dead letters
                    failed.setdefault(g, exc)
                    continue
                live[g] = acc
                cells[g] = pickle.dumps(acc)
            g_parts[f.name] = cells
        if failed:
            return self._without_failed(rows, state, ctx, failed, group_start, order, is_old, n_old, r_index)

        # drop late sessions
        index = np.flatnonzero(keep_group)
        g_key, g_start, g_end, g_changed = g_key[index], g_start[index], g_end[index], g_changed[index]
        position = {int(old): new for new, old in enumerate(index)}
        g_parts = {name: values[index] for name, values in g_parts.items()}
        udaf_accs = {name: {position[g]: acc for g, acc in cache.items() if g in position} for name, cache in udaf_accs.items()}
        changed[g_key[g_changed]] = True

        # (C) emit open sessions that are due or changed
        due = g_end <= wm
        if q.mode == "append":
            emit = due & ((g_end > last_wm[g_key]) | g_changed)
        else:
            emit = g_changed
        if emit.any():
            sel = np.flatnonzero(emit)
            parts = {name: values[sel] for name, values in g_parts.items()}
            selected_accs = {n: {i: c[g] for i, g in enumerate(sel) if g in c} for n, c in udaf_accs.items()}
            accs = self._accumulators(layout, parts, selected_accs)
            outputs.append(self._emit(layout, g_key[sel], g_start[sel], g_end[sel], parts, accs, all_keys, first, out_schema))
            changed[g_key[sel]] = True

        upserts, deletes = self._state_changes(
            layout, schema, g_key, g_start, g_end, g_parts, changed, n_state, all_keys, first, state, rows, wm
        )
        output = pa.concat_tables(outputs).cast(out_schema) if outputs else out_schema.empty_table()
        side = {LATE: pa.concat_tables(late_parts) if late_parts else late_schema(schema).empty_table()}
        return KeyedResult(output=output, upserts=upserts, deletes=deletes, side_outputs=side)

    # -- pieces -----------------------------------------------------------------------

    def _without_failed(self, rows, state, ctx, failed, group_start, order, is_old, n_old, r_index) -> KeyedResult:
        """The batch again without the new records of the sessions a UDAF raised on: they
        are dead letters with the error and count in no session, and every other session,
        of that key too, is as if they had never arrived (the state is never half-applied)."""
        ends = np.append(group_start[1:], len(order))
        bad = np.zeros(rows.num_rows, dtype=bool)
        errors: dict[int, BaseException] = {}
        for g, exc in failed.items():
            for i in range(int(group_start[g]), int(ends[g])):
                if not is_old[i]:
                    row = int(r_index[int(order[i]) - n_old])
                    bad[row] = True
                    errors[row] = exc
        hidden = [c for c in rows.column_names if c in (KEY_GROUP, INGEST)]
        records = rows.filter(pa.array(bad)).drop_columns(hidden).to_pylist()
        dead = [DeadRecord(record, errors[row], tuple(record[k] for k in self.key_columns))
                for row, record in zip(np.flatnonzero(bad).tolist(), records)]
        result = self.process(rows.filter(pa.array(~bad)), state, ctx)
        result.dead_letters = dead + list(result.dead_letters)
        return result

    @staticmethod
    def _accumulators(layout: PartialLayout, parts: dict, live: dict | None = None) -> dict[str, list]:
        accs = {}
        for f in layout.fields:
            if f.kind == "udaf":
                cache = (live or {}).get(f.name, {})
                accs[f.name] = [cache[i] if i in cache else pickle.loads(b) for i, b in enumerate(parts[f.name])]
        return accs

    def _emit(self, layout, key, start, end, parts, accs, all_keys, first, out_schema) -> pa.Table:
        columns: dict[str, pa.Array] = {}
        if QUERY_COLUMN in out_schema.names:
            columns[QUERY_COLUMN] = pa.array([self.query.display_name] * len(key), pa.string())
        if self.emit_keys:
            keys = all_keys.take(pa.array(first[key]))
            for c in self.key_columns:
                columns[c] = keys[c]
        wtype = out_schema.field(WINDOW_START).type
        columns[WINDOW_START] = to_time_array(start, wtype)
        columns[WINDOW_END] = to_time_array(end, wtype)
        for name, agg in self.query.aggregates:
            columns[name] = finalize(agg, layout, parts, accs)
        return pa.table(columns).cast(out_schema)

    def _state_changes(self, layout, schema, g_key, g_start, g_end, g_parts, changed, n_state, all_keys, first, state, rows, wm):
        n_keys = len(changed)
        remaining = np.bincount(g_key, minlength=n_keys) if len(g_key) else np.zeros(n_keys, np.int64)
        upsert_ids = np.flatnonzero(changed & (remaining > 0))
        delete_ids = np.flatnonzero(changed & (remaining == 0) & (np.arange(n_keys) < n_state))
        kg = _concat_column(state, rows, KEY_GROUP).combine_chunks() if (state.num_rows + rows.num_rows) else None
        state_schema = self.state_schema(schema).append(pa.field(KEY_GROUP, pa.int32()))
        if len(upsert_ids):
            sel = np.flatnonzero(changed[g_key])  # g_key is sorted, so rows of a key are contiguous
            offsets = np.zeros(len(upsert_ids) + 1, dtype=np.int64)
            np.cumsum(remaining[upsert_ids], out=offsets[1:])
            columns, key_groups = key_columns_of(all_keys, first, upsert_ids, self.key_columns, kg)
            columns[WATERMARK_STATE] = pa.array(np.full(len(upsert_ids), wm, np.int64))
            columns[START_STATE] = list_column(g_start[sel], offsets, pa.int64())
            columns[END_STATE] = list_column(g_end[sel], offsets, pa.int64())
            for f in layout.fields:
                columns[PARTIAL_PREFIX + f.name] = list_column(g_parts[f.name][sel], offsets, layout.arrow_type(f))
            columns[KEY_GROUP] = key_groups
            upserts = pa.table(columns).cast(state_schema)
        else:
            upserts = state_schema.empty_table()
        deletes = None
        if len(delete_ids):
            columns, key_groups = key_columns_of(all_keys, first, delete_ids, self.key_columns, kg)
            columns[KEY_GROUP] = key_groups
            deletes = pa.table(columns)
        return upserts, deletes


def _session_breaks(key: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Positions where a new session begins, in intervals sorted by (key, start).

    An interval joins the current session when it starts before the running maximum end of
    the key's previous intervals. The running maximum is taken over one monotone composite
    (key, rank of time), so one ``maximum.accumulate`` serves every key at once.
    """
    n = len(key)
    if n == 0:
        return np.zeros(0, np.int64)
    values = np.unique(np.concatenate([start, end]))
    m = len(values) + 1
    c_start = key * m + np.searchsorted(values, start)
    c_end = key * m + np.searchsorted(values, end)
    running_end = np.maximum.accumulate(c_end)
    new = np.empty(n, dtype=bool)
    new[0] = True
    new[1:] = c_start[1:] >= running_end[:-1]
    return np.flatnonzero(new)
