"""Pure in-memory drivers for window kernels, and a brute-force reference to check them.

``run_kernel`` plays the runtime's part without Spark: it feeds micro-batches to a keyed
kernel with the watermark the runtime computes (max event time of EARLIER batches minus a
delay), keeps the state in a dict keyed by the key columns, applies upserts and deletes, and
ends with a flush batch whose watermark is the end of time.

``reference`` recomputes every window from the raw records by the rules documented in
``sluice.runtime.kernels.windows``, with no panes and no partial aggregates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from sluice.graph.windows import EventTime, Session, WindowQuery
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext, KeyedKernel
from sluice.runtime.kernels.panes import END_OF_TIME

NEG_INF = -(2**63)


@dataclass
class BatchRun:
    watermark: int | None
    output: pa.Table
    late: pa.Table


@dataclass
class KernelRun:
    batches: list[BatchRun] = field(default_factory=list)
    state: dict = field(default_factory=dict)


def watermarks(batches: list[pa.Table], time_column: str, delay: int) -> list[int | None]:
    """Per batch: max event time of the earlier batches minus delay (None before any); then END."""
    marks, seen = [], None
    for rows in batches:
        marks.append(None if seen is None else seen - delay)
        if rows.num_rows and rows[time_column].null_count < rows.num_rows:
            top = pc.max(pc.cast(rows[time_column], pa.int64())).as_py()
            seen = top if seen is None else max(seen, top)
    marks.append(END_OF_TIME)
    return marks


def run_kernel(
    kernel: KeyedKernel,
    batches: list[pa.Table],
    marks: list[int | None],
    processing_times: list[int] | None = None,
    state: dict | None = None,
    start_batch: int = 0,
    flush: bool = True,
    map_tasks: list[list[int]] | None = None,
) -> KernelRun:
    """Drive ``kernel`` over ``batches`` (+ a flush batch when ``flush``), like the runtime.

    ``map_tasks`` (one list of cut points per batch) makes the runtime's map-side combine
    path: each batch is cut into map tasks, each task's records are combined
    (``kernel.combine``), and the kernel processes the combined rows of all tasks.
    """
    schema = batches[0].schema
    state = {} if state is None else state
    run = KernelRun(state=state)
    todo = list(batches) + ([schema.empty_table()] if flush else [])
    kg_schema = pa.schema(list(schema) + [pa.field(KEY_GROUP, pa.int32())])
    if map_tasks is not None:
        kernel.bind(schema)
    state_schema = kernel.state_schema(kg_schema).append(pa.field(KEY_GROUP, pa.int32()))
    for b, rows in enumerate(todo):
        batch_id = start_batch + b
        state_table = pa.Table.from_pylist(list(state.values()), schema=state_schema)
        pt = processing_times[b] if processing_times else 0
        ctx = BatchContext(batch_id=batch_id, partition=0, watermark=marks[b], processing_time=pt)
        late = None
        if map_tasks is not None:
            cuts = [0] + sorted(c for c in (map_tasks[b] if b < len(map_tasks) else []) if c <= rows.num_rows) + [rows.num_rows]
            combined, lates = [], []
            for task, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
                task_ctx = BatchContext(batch_id, task, marks[b], pt)
                part, late_part, _ = kernel.combine(rows.slice(lo, hi - lo), task_ctx)
                combined.append(part)
                lates.append(late_part)
            late = pa.concat_tables(lates)
            rows = pa.concat_tables(combined)
        rows = rows.append_column(KEY_GROUP, pa.array([0] * rows.num_rows, pa.int32()))
        result = kernel.process(rows, state_table, ctx)
        if result.deletes is not None:
            for row in result.deletes.to_pylist():
                state.pop(tuple(row[c] for c in kernel.key_columns), None)
        for row in result.upserts.to_pylist():
            state[tuple(row[c] for c in kernel.key_columns)] = row
        if late is None:
            late = result.side_outputs["late"]
        else:
            assert result.side_outputs["late"].num_rows == 0
        run.batches.append(BatchRun(marks[b], result.output, late))
    return run


# ---------------------------------------------------------------------------------------
# Brute-force reference


def _value(agg, values: list):
    array = pa.array(values)
    kind = agg.kind
    if kind == "count":
        return len(values) if agg.column is None else len(values) - array.null_count
    if kind == "udaf":
        acc = agg.add(agg.create(), pa.array(values) if values else pa.array([], pa.null()))
        return agg.result(acc)
    if len(values) - array.null_count == 0:
        return None
    if kind == "sum":
        return pc.sum(array).as_py()
    if kind == "mean":
        return pc.mean(pc.cast(array, pa.float64())).as_py()
    if kind == "min":
        return pc.min(array).as_py()
    return pc.max(array).as_py()


def _result_row(q, key, start, end, records, key_columns, with_query):
    row = {}
    if with_query:
        row["query"] = q.display_name
    row.update(dict(zip(key_columns, key)))
    row["window_start"], row["window_end"] = start, end
    for name, agg in q.aggregates:
        column = agg.column
        row[name] = _value(agg, [r[column] for r in records] if column else [None] * len(records))
    return row


def _time(q, record, pt):
    return record[q.time.column] if isinstance(q.time, EventTime) else pt


def reference(
    queries: list[WindowQuery],
    key_columns: list[str],
    batches: list[pa.Table],
    marks: list[int | None],
    processing_times: list[int] | None = None,
) -> list[tuple[list[dict], list[dict]]]:
    """Per batch (flush included): (emitted rows, late rows with ``late_for``)."""
    with_query = len(queries) > 1
    records_per_batch = [b.to_pylist() for b in batches] + [[]]
    out = [([], []) for _ in records_per_batch]
    for q in queries:
        run = _reference_session if isinstance(q.window, Session) else _reference_fixed
        for b, (emitted, late) in enumerate(run(q, key_columns, records_per_batch, marks, processing_times, with_query)):
            out[b][0].extend(emitted)
            out[b][1].extend(late)
    names = list(dict.fromkeys(name for q in queries for name, _ in q.aggregates))
    for emitted, _ in out:  # several queries: the union of their aggregate columns
        for i, row in enumerate(emitted):
            emitted[i] = {**{k: v for k, v in row.items() if k not in names}, **{n: row.get(n) for n in names}}
    return out


def _reference_fixed(q, key_columns, records_per_batch, marks, pts, with_query):
    z, s, lateness = q.window.size, q.window.slide, q.allowed_lateness
    contents: dict[tuple, list] = {}  # (key, j) -> contributing records
    previous = NEG_INF
    for b, records in enumerate(records_per_batch):
        wm = NEG_INF if marks[b] is None else marks[b]
        emitted, late = [], []

        def emit(items, emitted=emitted):  # bound: called within this batch's iteration
            for (key, j), recs in sorted(items, key=lambda kv: (repr(kv[0][0]), kv[0][1])):
                emitted.append(_result_row(q, key, j * s, j * s + z, recs, key_columns, with_query))

        if q.mode == "append":  # (A) due and closed, before this batch's records
            emit(
                [(kj, recs) for kj, recs in contents.items() if previous < kj[1] * s + z <= wm and kj[1] * s + z + lateness <= wm]
            )
        touched = set()
        for r in records:
            t = _time(q, r, pts[b] if pts else 0)
            if t is None:
                late.append(dict(r, late_for=q.display_name))
                continue
            key = tuple(r[c] for c in key_columns)
            windows = [j for j in range((t - z) // s + 1, t // s + 1) if j * s + z + lateness > wm]
            if not windows:
                late.append(dict(r, late_for=q.display_name))
            for j in windows:
                contents.setdefault((key, j), []).append(r)
                touched.add((key, j))
        chosen = []
        for (key, j), recs in contents.items():
            end = j * s + z
            if end + lateness <= wm:
                continue
            if q.mode == "append":
                if end <= wm and (end > previous or (key, j) in touched):
                    chosen.append(((key, j), recs))
            elif (key, j) in touched:
                chosen.append(((key, j), recs))
        emit(chosen)
        contents = {kj: recs for kj, recs in contents.items() if kj[1] * s + z + lateness > wm}
        previous = wm
        yield emitted, late


def _reference_session(q, key_columns, records_per_batch, marks, pts, with_query):
    gap, lateness = q.window.gap, q.allowed_lateness
    sessions: dict[tuple, list] = {}  # key -> list of [start, end, records]
    previous = NEG_INF
    for b, records in enumerate(records_per_batch):
        wm = NEG_INF if marks[b] is None else marks[b]
        emitted, late = [], []
        for key in list(sessions):
            still = []
            for start, end, recs in sessions[key]:
                if end + lateness <= wm:
                    if q.mode == "append" and previous < end:
                        emitted.append(_result_row(q, key, start, end, recs, key_columns, with_query))
                else:
                    still.append([start, end, recs])
            sessions[key] = still
        new_by_key: dict[tuple, list] = {}
        for r in records:
            t = _time(q, r, pts[b] if pts else 0)
            if t is None:
                late.append(dict(r, late_for=q.display_name))
                continue
            new_by_key.setdefault(tuple(r[c] for c in key_columns), []).append(r)
        changed = set()
        for key, recs in new_by_key.items():
            items = [(s0, e0, rs, True) for s0, e0, rs in sessions.get(key, [])]
            items += [(_time(q, r, pts[b] if pts else 0), _time(q, r, pts[b] if pts else 0) + gap, [r], False) for r in recs]
            items.sort(key=lambda it: (it[0], not it[3]))
            merged = []
            for start, end, rs, old in items:
                if merged and start < merged[-1][1]:
                    m = merged[-1]
                    m[1] = max(m[1], end)
                    m[2] = m[2] + rs
                    m[3] += int(old)
                    m[4] += int(not old)
                else:
                    merged.append([start, end, list(rs), int(old), int(not old)])
            kept = []
            for start, end, rs, n_old, n_new in merged:
                if n_old == 0 and end + lateness <= wm:
                    late.extend(dict(r, late_for=q.display_name) for r in rs)
                    continue
                kept.append([start, end, rs])
                if n_new or n_old > 1:
                    changed.add((key, start))
            sessions[key] = kept
        for key in sorted(sessions, key=repr):
            for start, end, recs in sessions[key]:
                is_changed = (key, start) in changed
                if q.mode == "append":
                    fire = end <= wm and (end > previous or is_changed)
                else:
                    fire = is_changed
                if fire:
                    emitted.append(_result_row(q, key, start, end, recs, key_columns, with_query))
        sessions = {k: v for k, v in sessions.items() if v}
        previous = wm
        yield emitted, late


# ---------------------------------------------------------------------------------------
# Comparison


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def _sort_key(row: dict):
    return tuple(repr(v) for k, v in row.items() if not isinstance(v, float))


def assert_rows_equal(actual: list[dict], expected: list[dict], context: str = "") -> None:
    actual = sorted(actual, key=_sort_key)
    expected = sorted(expected, key=_sort_key)
    assert len(actual) == len(expected), f"{context}: {len(actual)} rows, expected {len(expected)}\n{actual}\n{expected}"
    for got, want in zip(actual, expected):
        assert got.keys() == want.keys(), f"{context}: columns {list(got)} != {list(want)}"
        for name in want:
            assert _close(got[name], want[name]), f"{context}: {name}: {got} != {want}"


def assert_matches_reference(run: KernelRun, expected, drop_late_columns=("watermark",)) -> None:
    assert len(run.batches) == len(expected)
    for b, (batch, (want_rows, want_late)) in enumerate(zip(run.batches, expected)):
        assert_rows_equal(batch.output.to_pylist(), want_rows, f"batch {b} (watermark {batch.watermark}) output")
        late = [{k: v for k, v in row.items() if k not in drop_late_columns} for row in batch.late.to_pylist()]
        assert_rows_equal(late, want_late, f"batch {b} late")
