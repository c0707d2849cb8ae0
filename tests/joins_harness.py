"""Pure drivers for the join kernels, and brute-force reference joins to check them.

``run_join`` plays the runtime's part without Spark: it tags each batch's left and right
records into the tagged union (``sluice.graph.joins``), feeds them to the kernel with a
watermark per batch, keeps the state in a dict (one row per key, as the key-group store
does), and ends with a batch at the end of time that closes everything.

``reference_join`` recomputes the join from the raw records with nested loops, by the rules
of ``sluice.runtime.kernels.joins``: records late at their batch's watermark are left out,
a window record counts only in the windows still open when it arrived, NULL keys never
match, NaN matches NaN and -0.0 matches 0.0.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa

from sluice.graph.joins import LEFT, RIGHT, SIDE, JoinSides, StreamJoin, side_column
from sluice.runtime.kernels.joins import JoinKernelBase
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.panes import END_OF_TIME


def canonical(value):
    """A hashable stand-in for a key value that compares as the kernels' key encoding does."""
    if isinstance(value, float):
        if math.isnan(value):
            return ("nan",)
        return value + 0.0  # -0.0 -> 0.0
    return value


def tag(kernel: JoinKernelBase, table: pa.Table, side: int) -> pa.Table:
    """A side's records as rows of the tagged union (the runtime does this in Spark)."""
    sides: JoinSides = kernel.sides
    keys = sides.left_keys if side == LEFT else sides.right_keys
    columns = {}
    for lk, k in zip(sides.left_keys, keys):
        columns[lk] = table[k]
    columns[SIDE] = pa.array([side] * table.num_rows, pa.int8())
    for name in kernel.union.names:
        if name in columns:
            continue
        field = kernel.union.field(name)
        own = side_column(side, "")
        if name.startswith(own):
            columns[name] = table[name[len(own) :]]
        else:
            columns[name] = pa.nulls(table.num_rows, field.type)
    return pa.table(columns).cast(kernel.union)


@dataclass
class JoinRun:
    output: list[dict]
    late: list[dict]
    state: dict
    buffered_max: int


def run_join(
    kernel: JoinKernelBase,
    batches: list[tuple[pa.Table, pa.Table]],
    marks: list[int | None],
    state: dict | None = None,
    flush: bool = True,
) -> JoinRun:
    state = {} if state is None else state
    output, late, buffered_max = [], [], 0
    state_schema = kernel.state_schema(kernel.union).append(pa.field(KEY_GROUP, pa.int32()))
    todo = list(batches) + ([None] if flush else [])
    for b, pair in enumerate(todo):
        if pair is None:
            rows = kernel.union.empty_table()
            wm = END_OF_TIME
        else:
            rows = pa.concat_tables([tag(kernel, pair[0], LEFT), tag(kernel, pair[1], RIGHT)])
            wm = marks[b]
        rows = rows.append_column(KEY_GROUP, pa.array([0] * rows.num_rows, pa.int32()))
        state_table = pa.Table.from_pylist(list(state.values()), schema=state_schema)
        result = kernel.process(rows, state_table, BatchContext(b, 0, wm, 0))
        assert result.output.schema == kernel.out_schema
        if result.deletes is not None:
            for row in result.deletes.to_pylist():
                assert state.pop(tuple(canonical(row[c]) for c in kernel.key_columns), None) is not None
        for row in result.upserts.to_pylist():
            state[tuple(canonical(row[c]) for c in kernel.key_columns)] = row
        output += result.output.to_pylist()
        if "late" in result.side_outputs:
            late += result.side_outputs["late"].to_pylist()
        buffered_max = max(buffered_max, result.metrics.get("buffered", 0))
    return JoinRun(output, late, state, buffered_max)


def side_watermarks(batches: list[tuple[list[dict], list[dict]]], time: str, delay: int) -> list[int | None]:
    """Per batch, as the runtime computes it: the minimum over the two sides of (latest event
    time of the earlier batches - delay); None until both sides have been seen."""
    marks, seen = [], [None, None]
    for pair in batches:
        marks.append(None if None in seen else min(seen) - delay)
        for side in (LEFT, RIGHT):
            times = [r[time] for r in pair[side] if r[time] is not None]
            if times:
                seen[side] = max(times) if seen[side] is None else max(seen[side], *times)
    return marks


def reference_join(
    spec: StreamJoin,
    batches: list[tuple[list[dict], list[dict]]],
    marks: list[int | None],
    left_payload: list[str],
    right_payload: list[str],
    out_names: list[str],
) -> tuple[Counter, int]:
    """(the join's rows as a multiset of tuples in ``out_names`` order, the number of late records)."""
    lk, rk = spec.sides.left_keys, spec.sides.right_keys
    lt, rt = spec.sides.left_time, spec.sides.right_time
    lateness = spec.allowed_lateness
    entries: list[list[tuple]] = [[], []]  # (record, coordinate)
    n_late = 0
    for b, pair in enumerate(batches):
        wm = -(2**62) if marks[b] is None else marks[b]
        for side, records, tcol in ((LEFT, pair[0], lt), (RIGHT, pair[1], rt)):
            for r in records:
                t = r[tcol]
                if t is None:
                    n_late += 1
                    continue
                if spec.window is not None:
                    size, slide = spec.window.size, spec.window.slide
                    js = [j for j in range((t - size) // slide + 1, t // slide + 1) if j * slide + size + lateness > wm]
                    if not js:
                        n_late += 1
                    entries[side] += [(r, j) for j in js]
                elif t + lateness < wm:
                    n_late += 1
                else:
                    entries[side].append((r, t))
    lower, upper = (0, 0) if spec.window is not None else spec.between
    out = Counter()
    matched = [set(), set()]

    def key(r, cols):
        values = tuple(r[c] for c in cols)
        return None if any(v is None for v in values) else tuple(canonical(v) for v in values)

    for i, (lrec, lc) in enumerate(entries[LEFT]):
        for j, (r, rc) in enumerate(entries[RIGHT]):
            kl = key(lrec, lk)
            if kl is None or kl != key(r, rk) or not lower <= rc - lc <= upper:
                continue
            matched[LEFT].add(i)
            matched[RIGHT].add(j)
            out[_row(spec, lrec, r, lc, left_payload, right_payload, out_names)] += 1
    for side in (LEFT, RIGHT):
        if not spec.keeps_unmatched(side):
            continue
        for i, (rec, c) in enumerate(entries[side]):
            if i not in matched[side]:
                pair = (rec, None) if side == LEFT else (None, rec)
                out[_row(spec, pair[0], pair[1], c, left_payload, right_payload, out_names)] += 1
    return out, n_late


def _row(spec, lrec, r, coord, left_payload, right_payload, out_names) -> tuple:
    keys = spec.sides.left_keys if lrec is not None else spec.sides.right_keys
    src = lrec if lrec is not None else r
    values = [canonical(src[k]) for k in keys]
    if spec.window is not None:
        values += [coord * spec.window.slide, coord * spec.window.slide + spec.window.size]
    values += [None if lrec is None else lrec[c] for c in left_payload]
    values += [None if r is None else r[c] for c in right_payload]
    return tuple(values)


def as_multiset(rows: list[dict], names: list[str], n_keys: int = 1) -> Counter:
    return Counter(tuple(canonical(row[n]) if i < n_keys else row[n] for i, n in enumerate(names)) for row in rows)
