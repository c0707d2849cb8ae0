"""Running aggregates (the kernel alone, no Spark) against a plain Python reference: several
batches over a shared state, string, integer and float keys (single and composite) with NULL
keys and NULL values, every built-in aggregate, a sum and a mean of one column (two Arrow
partials of the same name)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from sluice import agg
from sluice.runtime.kernels.aggregate import AggregateKernel
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.state.format import DELETED, merge_latest

# a sum and a mean of one column ask Arrow for two partials of the same name ("x_sum")
AGGREGATES = {
    "n": agg.count(),
    "nv": agg.count("v"),
    "total": agg.sum("v"),
    "lo": agg.min("v"),
    "hi": agg.max("x"),
    "avg": agg.mean("x"),
    "sx": agg.sum("x"),
}


def _batch(rng, kinds: list[str], rows: int) -> pa.Table:
    columns = {}
    for i, kind in enumerate(kinds):
        values = rng.integers(0, 12, rows)
        nulls = rng.random(rows) < 0.1
        if kind == "str":
            columns[f"k{i}"] = pa.array([f"m{v}" for v in values], pa.string(), mask=nulls)
        elif kind == "int":
            columns[f"k{i}"] = pa.array(values, pa.int64(), mask=nulls)
        else:
            columns[f"k{i}"] = pa.array(values / 4.0, pa.float64(), mask=nulls)
    columns["v"] = pa.array(rng.integers(-50, 50, rows), pa.int64(), mask=rng.random(rows) < 0.2)
    columns["x"] = pa.array(rng.normal(0, 1, rows), pa.float64())
    table = pa.table(columns)
    # a key's group is a function of the key, as the runtime's hash makes it
    groups = [hash(tuple(r.values())) % 5 for r in table.select([f"k{i}" for i in range(len(kinds))]).to_pylist()]
    return table.append_column(KEY_GROUP, pa.array(groups, pa.int32()))


def _reference(batches: list[pa.Table], keys: list[str]) -> dict:
    acc: dict = {}
    for batch in batches:
        for r in batch.to_pylist():
            a = acc.setdefault(
                tuple(r[k] for k in keys), {"n": 0, "nv": 0, "total": 0, "lo": None, "hi": None, "sum_x": 0.0, "count_x": 0}
            )
            a["n"] += 1
            if r["v"] is not None:
                a["nv"] += 1
                a["total"] += r["v"]
                a["lo"] = r["v"] if a["lo"] is None else min(a["lo"], r["v"])
            a["hi"] = r["x"] if a["hi"] is None else max(a["hi"], r["x"])
            a["sum_x"] += r["x"]
            a["count_x"] += 1
    return {
        k: {
            "n": a["n"],
            "nv": a["nv"],
            "total": a["total"],
            "lo": a["lo"],
            "hi": a["hi"],
            "avg": a["sum_x"] / a["count_x"],
            "sx": a["sum_x"],
        }
        for k, a in acc.items()
    }


def _run(kernel: AggregateKernel, batches: list[pa.Table], keys: list[str]) -> dict:
    """Run the batches through the kernel, state carried as the store would (latest row wins)."""
    input_schema = batches[0].drop_columns([KEY_GROUP]).schema
    state_schema = kernel.state_schema(input_schema).append(pa.field(KEY_GROUP, pa.int32()))
    state = state_schema.empty_table()
    latest: dict = {}
    for b, rows in enumerate(batches):
        result = kernel.process(rows, state, BatchContext(b, 0))
        for r in result.output.to_pylist():
            latest[tuple(r[k] for k in keys)] = {c: r[c] for c in AGGREGATES}
        pieces = [
            t.append_column(DELETED, pa.array(np.zeros(t.num_rows, bool)))
            for t in (state.select(state_schema.names), result.upserts.select(state_schema.names))
        ]
        state = merge_latest(pieces, keys).select(state_schema.names)
    return latest


def _same(a: dict, b: dict) -> bool:
    assert a.keys() == b.keys()
    for key in a:
        for name in AGGREGATES:
            x, y = a[key][name], b[key][name]
            if isinstance(x, float) or isinstance(y, float):
                assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9), (key, name, x, y)
            else:
                assert x == y, (key, name, x, y)
    return True


@pytest.mark.parametrize("kinds", [["str"], ["int"], ["str", "int"], ["float"]])
def test_running_aggregates_match_the_reference(kinds):
    rng = np.random.default_rng(len(kinds))
    keys = [f"k{i}" for i in range(len(kinds))]
    batches = [_batch(rng, kinds, n) for n in (200, 1, 150, 300)]
    kernel = AggregateKernel(keys, AGGREGATES)
    got = _run(kernel, batches, keys)
    # a NULL key is one key, carried across batches like any other
    assert any(None in key for key in got)
    assert _same(got, _reference(batches, keys))


def test_output_rows_carry_the_numbering_of_their_input_rows():
    rng = np.random.default_rng(9)
    rows = _batch(rng, ["str"], 100)
    kernel = AggregateKernel(["k0"], AGGREGATES)
    state = kernel.state_schema(rows.drop_columns([KEY_GROUP]).schema).append(pa.field(KEY_GROUP, pa.int32()))
    result = kernel.process(rows, state.empty_table(), BatchContext(0, 0))
    out_ids, row_ids = result.key_ids
    out_keys = result.output.column("k0").to_pylist()
    in_keys = rows.column("k0").to_pylist()
    output_row_of = {int(key_id): i for i, key_id in enumerate(out_ids)}
    assert len(output_row_of) == result.output.num_rows  # one output row per key
    assert all(out_keys[output_row_of[int(key_id)]] == in_keys[i] for i, key_id in enumerate(row_ids))


@pytest.mark.parametrize(
    "dtype, values",
    [
        (pa.timestamp("us", "UTC"), [5, None, 1, 9, 3, None, 7, 2]),
        (pa.timestamp("ms"), [5, None, 1, 9, 3, None, 7, 2]),
    ],
)
def test_min_and_max_of_timestamps_with_a_time_zone_carry_across_batches(dtype, values):
    """Arrow's element-wise min/max, which merge a key's state with a batch's partial, have
    no kernel for time-zoned timestamps: the running extremes are still exact from the second
    batch on."""
    keys = ["k0"]
    rows = pa.table({"k0": pa.array(["a", "b"] * 4), "t": pa.array(values, dtype)})
    rows = rows.append_column(KEY_GROUP, pa.array([0, 1] * 4, pa.int32()))
    kernel = AggregateKernel(keys, {"lo": agg.min("t"), "hi": agg.max("t")})
    state_schema = kernel.state_schema(rows.drop_columns([KEY_GROUP]).schema).append(pa.field(KEY_GROUP, pa.int32()))
    state, latest = state_schema.empty_table(), {}
    for b in range(4):  # two rows (one per key) a batch
        result = kernel.process(rows.slice(2 * b, 2), state, BatchContext(b, 0))
        latest.update({r["k0"]: (r["lo"], r["hi"]) for r in result.output.to_pylist()})
        pieces = [
            t.append_column(DELETED, pa.array(np.zeros(t.num_rows, bool)))
            for t in (state.select(state_schema.names), result.upserts.select(state_schema.names))
        ]
        state = merge_latest(pieces, keys).select(state_schema.names)
    for key in ("a", "b"):
        seen = [v for k, v in zip(rows["k0"].to_pylist(), rows["t"].to_pylist()) if k == key and v is not None]
        assert latest[key] == (min(seen), max(seen)), key
