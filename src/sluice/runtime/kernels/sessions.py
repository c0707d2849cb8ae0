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
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sluice.errors import PipelineError
from sluice.graph.aggregates import udaf_values
from sluice.graph.windows import QUERY_COLUMN, WINDOW_END, WINDOW_START, WindowQuery, window_output_schema
from sluice.runtime.kernels.grouping import state_and_row_ids as key_ids  # the one key encoding
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, DeadRecord, KeyedKernel, KeyedResult
from sluice.runtime.kernels.panes import NO_WATERMARK, PartialLayout, finalize
from sluice.runtime.kernels.window_state import (
    INGEST,
    LATE,
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

START_STATE = "__start"
END_STATE = "__end"
_INTERVALS = [START_STATE, END_STATE]  # a session's interval in the state codec


@dataclass(frozen=True)
class _Keys:
    """The keys of one batch's state and rows, numbered once (state row i has key id i)."""

    ids: np.ndarray  # key id of each state row, then of each record
    first: np.ndarray  # per key id, its first row in (state, rows)
    all_keys: pa.Table  # the key columns of (state, rows)
    n_state: int
    last_wm: np.ndarray  # per key id, the watermark of the last batch that changed it

    @classmethod
    def of(cls, state: pa.Table, rows: pa.Table, key_columns: list[str]) -> _Keys:
        ids, first, all_keys = key_ids(state, rows, key_columns)
        last_wm = np.full(len(first), NO_WATERMARK, dtype=np.int64)
        if state.num_rows:
            last_wm[: state.num_rows] = np.asarray(state[WATERMARK_STATE].to_numpy(), np.int64)
        return cls(ids, first, all_keys, state.num_rows, last_wm)

    @property
    def count(self) -> int:
        return len(self.first)

    @property
    def row_ids(self) -> np.ndarray:
        return self.ids[self.n_state :]


@dataclass(frozen=True)
class _Members:
    """How (B) lined up the open sessions and the batch's one-record sessions: the merged
    list is ``order`` over (open sessions, records with a time); groups start at ``group_start``."""

    order: np.ndarray
    group_start: np.ndarray
    is_old: np.ndarray  # per merged position: an open session (not a record)
    n_old: int
    r_index: np.ndarray  # the row of each record with a time

    def rejected(self, failed: dict[int, BaseException], n_rows: int) -> _Rejected:
        """The records of the groups a UDAF raised on, each with its error."""
        ends = np.append(self.group_start[1:], len(self.order))
        bad = np.zeros(n_rows, dtype=bool)
        errors: dict[int, BaseException] = {}
        for g, exc in failed.items():
            for i in range(int(self.group_start[g]), int(ends[g])):
                if not self.is_old[i]:
                    row = int(self.r_index[int(self.order[i]) - self.n_old])
                    bad[row] = True
                    errors[row] = exc
        return _Rejected(bad, errors)


@dataclass(frozen=True)
class _Merged:
    """(B)'s result: the sessions after the batch, sorted by key, and what (C) needs."""

    sessions: StoredIntervals
    changed: np.ndarray  # per session: changed by this batch
    udaf_accs: dict[str, dict[int, object]]  # live UDAF accumulators of the changed sessions
    late: list[pa.Table]  # late records


@dataclass(frozen=True)
class _Rejected:
    """The records to reject because a UDAF raised on their session."""

    rows: np.ndarray  # mask over the batch's rows
    errors: dict[int, BaseException]  # row -> the error


class SessionWindowKernel(KeyedKernel):
    """One session-window query over a keyed stream."""

    wants_timers = True

    def __init__(self, key_columns: list[str], query: WindowQuery, emit_keys: bool = True):
        super().__init__(key_columns)
        self.emit_keys = emit_keys
        if not query.is_session:
            raise PipelineError(f"window {query.display_name!r}: not a session window")
        self.query = query
        self.gap = query.session.gap
        self.aggregates = distinct_aggregates([query])
        self._layouts: dict[pa.Schema, PartialLayout] = {}

    def layout(self, input_schema: pa.Schema) -> PartialLayout:
        layout = self._layouts.get(input_schema)
        if layout is None:
            layout = self._layouts[input_schema] = PartialLayout(self.aggregates, input_schema)
        return layout

    def state_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return window_state_schema(self.key_columns, input_schema, self.layout(input_schema), _INTERVALS)

    def output_schema(self, input_schema: pa.Schema) -> pa.Schema:
        return window_output_schema(self.key_columns, [self.query], input_schema, self.emit_keys)

    def process(self, rows: pa.Table, state: pa.Table, ctx: BatchContext) -> KeyedResult:
        """The three phases of the module's docstring, in order: (A) close, (B) merge, (C) emit."""
        schema = rows.schema
        layout = self.layout(schema)
        out_schema = self.output_schema(schema)
        wm = batch_watermark(self.query, ctx)
        keys = _Keys.of(state, rows, self.key_columns)
        changed = np.zeros(keys.count, dtype=bool)  # keys whose state row the batch rewrites

        outputs, sessions = self._close(read_window_state(state, layout, _INTERVALS), keys, wm, layout, out_schema, changed)
        merged = self._merge(sessions, rows, keys, ctx, wm, layout)
        if isinstance(merged, _Rejected):
            return self._without(rows, state, ctx, merged)
        outputs += self._emit_open(merged, keys, wm, layout, out_schema, changed)

        state_schema = self.state_schema(schema).append(pa.field(KEY_GROUP, pa.int32()))
        upserts, deletes = window_state_changes(
            layout,
            self.key_columns,
            state_schema,
            merged.sessions,
            changed,
            keys.n_state,
            keys.all_keys,
            keys.first,
            state,
            rows,
            wm,
        )
        output = pa.concat_tables(outputs).cast(out_schema) if outputs else out_schema.empty_table()
        late = pa.concat_tables(merged.late) if merged.late else late_schema(schema).empty_table()
        return KeyedResult(output=output, upserts=upserts, deletes=deletes, side_outputs={LATE: late})

    # -- the three phases ---------------------------------------------------------------

    def _close(
        self, stored: StoredIntervals, keys: _Keys, wm: int, layout: PartialLayout, out_schema: pa.Schema, changed: np.ndarray
    ) -> tuple[list[pa.Table], StoredIntervals]:
        """(A) Sessions closed by this watermark: emit the due ones not yet emitted (append
        mode), then drop them. Returns (their results, the sessions still open)."""
        q = self.query
        start, end = stored.bounds[START_STATE], stored.bounds[END_STATE]
        closed = end + q.allowed_lateness <= wm
        if not closed.any():
            return [], stored
        changed[stored.key[closed]] = True
        outputs = []
        if q.mode == "append":
            emit = closed & (end > keys.last_wm[stored.key])
            if emit.any():
                index = np.flatnonzero(emit)
                parts = {name: values[index] for name, values in stored.parts.items()}
                accs = self._accumulators(layout, parts)
                outputs.append(self._emit(layout, stored.key[index], start[index], end[index], parts, accs, keys, out_schema))
        still_open = np.flatnonzero(~closed)
        return outputs, _take(stored, still_open)

    def _merge(
        self, sessions: StoredIntervals, rows: pa.Table, keys: _Keys, ctx: BatchContext, wm: int, layout: PartialLayout
    ) -> _Merged | _Rejected:
        """(B) The batch's records, as one-record sessions, merged with the open sessions of
        their key. A merged session made only of new records that is already closed is late
        (its records go to the ``late`` side output). When a UDAF raises on a session, the
        batch's records of that session are rejected (and nothing is merged)."""
        q = self.query
        times, has_time = record_times(q, rows, ctx)
        late_parts = []
        if not has_time.all():
            late_parts.append(late_table(rows, ~has_time, q.display_name, wm))
        r_index = np.flatnonzero(has_time)
        s_key, s_start, s_end = sessions.key, sessions.bounds[START_STATE], sessions.bounds[END_STATE]
        n_old, n_new = len(s_key), len(r_index)
        m_key = np.concatenate([s_key, keys.row_ids[r_index]])
        m_start = np.concatenate([s_start, times[r_index]])
        m_end = np.concatenate([s_end, times[r_index] + self.gap])
        order = np.lexsort((m_start, m_key))
        m_key, m_start, m_end = m_key[order], m_start[order], m_end[order]
        group_start = _session_breaks(m_key, m_start, m_end)
        members = _Members(order, group_start, order < n_old, n_old, r_index)
        n_groups = len(group_start)
        is_break = np.zeros(len(order), dtype=bool)
        is_break[group_start] = True
        group_of = np.cumsum(is_break) - 1
        g_key = m_key[group_start]
        g_start = m_start[group_start]
        g_end = np.maximum.reduceat(m_end, group_start) if n_groups else m_end[:0]
        g_old = np.add.reduceat(members.is_old.astype(np.int64), group_start) if n_groups else np.zeros(0, np.int64)
        g_size = np.diff(np.append(group_start, len(order)))
        g_new = g_size - g_old
        # a session made only of new records that is already closed is late
        g_late = (g_old == 0) & (g_end + q.allowed_lateness <= wm)
        if g_late.any():
            late_rows = np.zeros(rows.num_rows, dtype=bool)
            member_late = g_late[group_of] & ~members.is_old
            late_rows[r_index[order[member_late] - n_old]] = True
            late_parts.append(late_table(rows, late_rows, q.display_name, wm))
        g_changed = (g_new > 0) | (g_old > 1)

        # partials of each merged session: old partials and new records combined
        row_table = rows.take(pa.array(r_index)) if n_new < rows.num_rows else rows
        g_parts = {}
        for f in layout.fields:
            if f.kind == "udaf":
                continue
            member = np.concatenate([sessions.parts[f.name], layout.field_values(f, row_table)])[order]
            g_parts[f.name] = f.combine.reduceat(member, group_start) if n_groups else member
        keep_group = ~g_late
        udaf_accs, failed = _merge_udafs(layout, sessions.parts, row_table, members, keep_group, g_changed, g_parts)
        if failed:
            return members.rejected(failed, rows.num_rows)

        # drop late sessions
        index = np.flatnonzero(keep_group)
        position = {int(old): new for new, old in enumerate(index)}
        kept = StoredIntervals(
            g_key[index],
            {START_STATE: g_start[index], END_STATE: g_end[index]},
            {name: values[index] for name, values in g_parts.items()},
        )
        udaf_accs = {name: {position[g]: acc for g, acc in cache.items() if g in position} for name, cache in udaf_accs.items()}
        return _Merged(kept, g_changed[index], udaf_accs, late_parts)

    def _emit_open(
        self, merged: _Merged, keys: _Keys, wm: int, layout: PartialLayout, out_schema: pa.Schema, changed: np.ndarray
    ) -> list[pa.Table]:
        """(C) Open sessions emitted when due (append: end <= W and not yet emitted, or
        changed by this batch while due; update: changed by this batch)."""
        sessions = merged.sessions
        g_key, g_end = sessions.key, sessions.bounds[END_STATE]
        changed[g_key[merged.changed]] = True
        if self.query.mode == "append":
            emit = (g_end <= wm) & ((g_end > keys.last_wm[g_key]) | merged.changed)
        else:
            emit = merged.changed
        if not emit.any():
            return []
        sel = np.flatnonzero(emit)
        parts = {name: values[sel] for name, values in sessions.parts.items()}
        selected_accs = {n: {i: c[g] for i, g in enumerate(sel.tolist()) if g in c} for n, c in merged.udaf_accs.items()}
        accs = self._accumulators(layout, parts, selected_accs)
        changed[g_key[sel]] = True
        return [self._emit(layout, g_key[sel], sessions.bounds[START_STATE][sel], g_end[sel], parts, accs, keys, out_schema)]

    # -- pieces -----------------------------------------------------------------------

    def _without(self, rows: pa.Table, state: pa.Table, ctx: BatchContext, rejected: _Rejected) -> KeyedResult:
        """The batch again without the new records of the sessions a UDAF raised on: they
        are dead letters with the error and count in no session, and every other session,
        of that key too, is as if they had never arrived (the state is never half-applied)."""
        bad = rejected.rows
        hidden = [c for c in rows.column_names if c in (KEY_GROUP, INGEST)]
        records = rows.filter(pa.array(bad)).drop_columns(hidden).to_pylist()
        dead = [
            DeadRecord(record, rejected.errors[row], tuple(record[k] for k in self.key_columns))
            for row, record in zip(np.flatnonzero(bad).tolist(), records)
        ]
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

    def _emit(
        self,
        layout: PartialLayout,
        key: np.ndarray,
        start: np.ndarray,
        end: np.ndarray,
        parts: dict,
        accs: dict,
        keys: _Keys,
        out_schema: pa.Schema,
    ) -> pa.Table:
        columns: dict[str, pa.Array] = {}
        if QUERY_COLUMN in out_schema.names:
            columns[QUERY_COLUMN] = pa.array([self.query.display_name] * len(key), pa.string())
        if self.emit_keys:
            key_values = keys.all_keys.take(pa.array(keys.first[key]))
            for c in self.key_columns:
                columns[c] = key_values[c]
        wtype = out_schema.field(WINDOW_START).type
        columns[WINDOW_START] = to_time_array(start, wtype)
        columns[WINDOW_END] = to_time_array(end, wtype)
        for name, agg in self.query.aggregates:
            columns[name] = finalize(agg, layout, parts, accs)
        return pa.table(columns).cast(out_schema)


def _take(sessions: StoredIntervals, index: np.ndarray) -> StoredIntervals:
    return StoredIntervals(
        sessions.key[index], {c: v[index] for c, v in sessions.bounds.items()}, {n: v[index] for n, v in sessions.parts.items()}
    )


def _merge_udafs(
    layout: PartialLayout,
    stored_parts: dict[str, np.ndarray],
    row_table: pa.Table,
    members: _Members,
    keep_group: np.ndarray,
    g_changed: np.ndarray,
    g_parts: dict[str, np.ndarray],
) -> tuple[dict[str, dict[int, object]], dict[int, BaseException]]:
    """Each merged session's UDAF accumulators (pickled into ``g_parts``; the live ones
    returned per field and session), and the sessions on which a UDAF raised. An unchanged
    session keeps its stored accumulator; a changed one merges its old sessions' and adds
    its new records."""
    order, group_start, is_old, n_old = members.order, members.group_start, members.is_old, members.n_old
    n_groups, n_new = len(group_start), len(order) - n_old
    udaf_accs: dict[str, dict[int, object]] = {}
    failed: dict[int, BaseException] = {}
    for f in layout.fields:
        if f.kind != "udaf":
            continue
        cells = np.empty(n_groups, dtype=object)
        live = udaf_accs.setdefault(f.name, {})
        stored = np.concatenate([stored_parts[f.name], np.empty(n_new, dtype=object)])[order]
        values = udaf_values(row_table, f.udaf)
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
    return udaf_accs, failed


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
