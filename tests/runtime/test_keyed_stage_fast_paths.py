"""The vectorized shortcuts of the keyed stage against plain reference implementations.

Reading state (the last row of each key wins), sorting and merging pane partials, and
charging output rows their ingest time each have a fast path for the common case (string
and integer keys, dense codes, few row ranges) and a general one; both must give what the
simple definitions give, nulls and repeated keys included.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sluice import agg
from sluice.graph.windows import EventTime, Sliding, WindowQuery
from sluice.runtime.batch.stages import _attach_ingest
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.panes import PaneTable, PartialLayout, merge_tables, sort_codes
from sluice.runtime.kernels.windows import COMBINE_TASK, PANE_STATE, PARTIAL_PREFIX, RECORDS, WindowAggregateKernel
from sluice.runtime.schemas import INGEST
from sluice.runtime.state.format import DELETED, merge_latest

TS = pa.timestamp("us", tz="UTC")


# ---- reading state: the last row of each (key group, key) wins ---------------------------


def _sql_key(value):
    """A key value as SQL's GROUP BY compares it (NULL one key, NaN one key, -0.0 = 0.0)."""
    return "NaN" if isinstance(value, float) and value != value else value


def _reference_latest(pieces: list[pa.Table], keys: list[str]) -> list[dict]:
    rows = [r for p in pieces for r in p.to_pylist()]
    last = {}
    for i, r in enumerate(rows):
        last[(r[KEY_GROUP], *(_sql_key(r[k]) for k in keys))] = i
    kept = [rows[i] for i in sorted(last.values()) if not rows[i][DELETED]]
    return [{c: r[c] for c in r if c != DELETED} for r in kept]


def _key_column(kind: str, values: np.ndarray, nulls: np.ndarray) -> pa.Array:
    if kind == "str":
        return pa.array([f"m{v}" for v in values], pa.string(), mask=nulls)
    if kind == "int":
        return pa.array(values, pa.int64(), mask=nulls)
    # floats: 0 as -0.0 now and then, 5 as NaN (SQL's grouping: -0.0 is 0.0, NaN one key)
    floats = np.where(values == 5, np.nan, values / 2.0)
    floats = np.where((values == 0) & (np.arange(len(values)) % 2 == 1), -0.0, floats)
    return pa.array(floats, pa.float64(), mask=nulls)


def _state_piece(rng, n: int, kinds: list[str], n_keys: int) -> pa.Table:
    columns = {KEY_GROUP: pa.array(rng.integers(0, 3, n).astype(np.int32))}
    for i, kind in enumerate(kinds):
        columns[f"k{i}"] = _key_column(kind, rng.integers(0, n_keys, n), rng.random(n) < 0.1)
    columns["v"] = pa.array(rng.integers(0, 100, n))
    columns["l"] = pa.array([list(range(x % 4)) for x in rng.integers(0, 100, n)], pa.list_(pa.int64()))
    columns[DELETED] = pa.array(rng.random(n) < 0.2)
    return pa.table(columns).sort_by([(KEY_GROUP, "ascending")])


@pytest.mark.parametrize("kinds", [["str"], ["int"], ["str", "int"], ["float"], []])
def test_merge_latest_keeps_the_last_row_of_each_key(kinds):
    rng = np.random.default_rng(len(kinds) + 7 * len("".join(kinds)))
    keys = [f"k{i}" for i in range(len(kinds))]
    for _ in range(60):
        pieces = [
            _state_piece(rng, int(rng.integers(0, 30)), kinds, int(rng.integers(1, 20))) for _ in range(int(rng.integers(1, 5)))
        ]
        got = merge_latest(pieces, keys).to_pylist()
        assert [{c: _sql_key(v) for c, v in r.items()} for r in got] == [
            {c: _sql_key(v) for c, v in r.items()} for r in _reference_latest(pieces, keys)
        ]


def test_merge_latest_of_full_rewrites_and_of_scattered_rows():
    """A key group rewritten whole by a later file keeps that file's rows (few row ranges);
    keys overridden here and there keep rows scattered over many ranges."""
    rng = np.random.default_rng(3)
    n = 2000
    base = pa.table(
        {
            KEY_GROUP: pa.array(np.repeat(np.arange(4, dtype=np.int32), n // 4)),
            "k": pa.array([f"m{i:05d}" for i in range(n)]),
            "v": pa.array(np.arange(n)),
            DELETED: pa.array(np.zeros(n, bool)),
        }
    )
    rewrite = base.set_column(2, "v", pa.array(np.arange(n) + n))
    scattered = base.filter(pa.array(rng.random(n) < 0.5))
    scattered = scattered.set_column(2, "v", pa.array(np.arange(scattered.num_rows) + 5 * n))
    for later in (rewrite, scattered):
        pieces = []
        for kg in range(4):
            for table in (base, later):
                rows = np.flatnonzero(table[KEY_GROUP].to_numpy() == kg)
                pieces.append(table.slice(int(rows[0]), len(rows)))
        assert merge_latest(pieces, ["k"]).to_pylist() == _reference_latest(pieces, ["k"])


# ---- sorting and merging pane partials ---------------------------------------------------


@pytest.mark.parametrize("n, bound", [(1000, 1500), (1000, 10**9), (1, 1), (0, 5)])
def test_sort_codes_is_the_stable_sort(n, bound):
    rng = np.random.default_rng(n)
    distinct = rng.choice(bound, size=n, replace=False) if n <= bound else np.zeros(0, np.int64)
    repeated = rng.integers(0, max(bound // 3, 1), n)
    for codes in (distinct.astype(np.int64), repeated.astype(np.int64)):
        assert np.array_equal(sort_codes(codes, bound), np.argsort(codes, kind="stable"))


def _pane_table(rng, n: int, layout: PartialLayout) -> PaneTable:
    pairs = sorted({(int(k), int(p)) for k, p in zip(rng.integers(0, 8, n), rng.integers(-3, 6, n))})
    key = np.array([k for k, _ in pairs], np.int64)
    pane = np.array([p for _, p in pairs], np.int64)
    parts = {
        f.name: (
            rng.normal(size=len(pairs))
            if layout.numpy_dtype(f) is np.float64
            else rng.integers(-5, 5, len(pairs)).astype(np.int64)
        )
        for f in layout.fields
    }
    return PaneTable(key, pane, parts)


def test_merge_tables_combines_old_then_new():
    schema = pa.schema([("v", pa.float64()), ("i", pa.int64())])
    layout = PartialLayout([agg.mean("v"), agg.min("i"), agg.max("v")], schema)
    rng = np.random.default_rng(11)
    for _ in range(50):
        old, new = _pane_table(rng, int(rng.integers(0, 25)), layout), _pane_table(rng, int(rng.integers(0, 25)), layout)
        merged, target = merge_tables(layout, old, new)
        want = {}
        for table in (old, new):
            for i, pair in enumerate(zip(table.key.tolist(), table.pane.tolist())):
                for f in layout.fields:
                    value = table.parts[f.name][i]
                    seen = want.setdefault(pair, {}).get(f.name)
                    want[pair][f.name] = value if seen is None else f.combine(seen, value)
        pairs = sorted(want)
        assert list(zip(merged.key.tolist(), merged.pane.tolist())) == pairs
        for f in layout.fields:
            assert merged.parts[f.name].tolist() == [want[p][f.name] for p in pairs]
        assert [pairs[t] for t in target] == list(zip(new.key.tolist(), new.pane.tolist()))


# ---- ingest times of output rows ---------------------------------------------------------


def _reference_ingest(output: pa.Table, rows: pa.Table, keys: list[str], processing_time: int) -> list:
    def key_of(r: dict) -> tuple:
        return tuple(_sql_key(r[k]) for k in keys)

    oldest = {}
    for r in rows.to_pylist():
        if r[INGEST] is None:
            continue  # min() skips nulls
        seen = oldest.get(key_of(r))
        oldest[key_of(r)] = r[INGEST] if seen is None else min(seen, r[INGEST])
    fill = pa.scalar(processing_time, TS).as_py()
    return [oldest.get(key_of(r), fill) for r in output.to_pylist()]


@pytest.mark.parametrize("kinds", [["str"], ["int", "str"], ["float"]])
def test_output_rows_get_the_oldest_ingest_time_of_their_key(kinds):
    rng = np.random.default_rng(len(kinds))
    keys = [f"k{i}" for i in range(len(kinds))]
    for _ in range(40):
        n_out, n_in = int(rng.integers(1, 40)), int(rng.integers(1, 60))
        output = pa.table(
            {
                **{k: _key_column(kind, rng.integers(0, 6, n_out), rng.random(n_out) < 0.1) for k, kind in zip(keys, kinds)},
                "x": pa.array(np.arange(n_out)),
            }
        )
        rows = pa.table(
            {
                **{k: _key_column(kind, rng.integers(0, 6, n_in), rng.random(n_in) < 0.1) for k, kind in zip(keys, kinds)},
                INGEST: pa.array(rng.integers(0, 1000, n_in), TS, mask=rng.random(n_in) < 0.2),
            }
        )
        got = _attach_ingest(output, rows, keys, 5000)
        assert got[INGEST].to_pylist() == _reference_ingest(got, rows, keys, 5000)
        assert got["x"].equals(output["x"]), "rows keep the kernel's order"


def test_window_kernel_key_ids_charge_the_ingest_of_late_panes_too():
    """Combined rows of panes no window accepts are dropped by the kernel, yet their records
    are input of the batch: the ids the kernel hands the runtime number every row."""
    s = 1_000_000
    schema = pa.schema([("meter", pa.string()), ("value", pa.float64()), ("ts", TS)])
    query = WindowQuery(Sliding(s, s), (("n", agg.count()), ("avg", agg.mean("value"))), EventTime("ts"))
    kernel = WindowAggregateKernel(["meter"], [query])
    kernel.bind(schema)
    combined = kernel.combined_schema(schema)
    rows = pa.table(
        {
            "meter": ["b", "a", "c", "a", "b"],
            PANE_STATE: pa.array([1, 10, 2, 12, 11], pa.int64()),  # panes 1 and 2 closed at watermark 10 s
            COMBINE_TASK: pa.array([0, 0, 0, 1, 0], pa.int32()),
            PARTIAL_PREFIX + "rows": pa.array([1, 2, 1, 1, 3], pa.int64()),
            PARTIAL_PREFIX + "n:value": pa.array([1, 2, 1, 1, 3], pa.int64()),
            PARTIAL_PREFIX + "sum:value": pa.array([1.0, 2.0, 3.0, 4.0, 5.0]),
            RECORDS: pa.array([1, 2, 1, 1, 3], pa.int64()),
            KEY_GROUP: pa.array([0] * 5, pa.int32()),
        }
    ).cast(combined.append(pa.field(RECORDS, pa.int64())).append(pa.field(KEY_GROUP, pa.int32())))
    ingest = pa.array([10, 50, 20, 40, 30], TS)
    ctx = BatchContext(1, 0, watermark=10 * s, processing_time=99)
    state = kernel.state_schema(schema).append(pa.field(KEY_GROUP, pa.int32())).empty_table()
    result = kernel.process(rows, state, ctx)
    assert result.metrics == {"late_seen": 2}
    with_ingest = rows.append_column(INGEST, ingest)
    update = WindowQuery(Sliding(s, s), query.aggregates, EventTime("ts"), mode="update")
    updated = WindowAggregateKernel(["meter"], [update])
    updated.bind(schema)
    result = updated.process(rows, state, ctx)
    got = _attach_ingest(result.output, with_ingest, ["meter"], 99, result.key_ids)
    assert {r["meter"]: r[INGEST] for r in got.to_pylist()} == {
        "b": pa.scalar(10, TS).as_py(),
        "a": pa.scalar(40, TS).as_py(),
    }  # b's oldest record is late
    assert got.equals(_attach_ingest(result.output, with_ingest, ["meter"], 99))
