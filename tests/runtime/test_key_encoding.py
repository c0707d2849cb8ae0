"""The one key encoding (``runtime.kernels.grouping``), without Spark: keyed kernels run batch
after batch on the state they committed, and equal SQLite's GROUP BY with NULL keys; the
state store keeps one row per key for NaN and -0.0 keys."""

from __future__ import annotations

import sqlite3

import pyarrow as pa

from sluice import agg
from sluice.runtime.kernels.aggregate import AggregateKernel
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.process import ProcessKernel
from sluice.runtime.kernels.reduce import ReduceKernel
from sluice.runtime.state.format import build_state_table, merge_latest

ROWS = [
    ("a", 1, 5),
    (None, 1, 7),
    (None, None, 1),
    ("a", None, 2),
    ("ü", 2, 3),
    (None, 1, 4),
    ("a", 1, 6),
    (None, None, 8),
    ("ü", 2, 9),
    (None, 2, 10),
]


def _batches(size: int = 3) -> list[pa.Table]:
    table = pa.table(
        {
            "k": pa.array([r[0] for r in ROWS], pa.string()),
            "j": pa.array([r[1] for r in ROWS], pa.int64()),
            "v": pa.array([r[2] for r in ROWS], pa.int64()),
        }
    )
    table = table.append_column(KEY_GROUP, pa.array([0] * len(ROWS), pa.int32()))  # one key group: one state table
    return [table.slice(i, size) for i in range(0, len(ROWS), size)]


def _run(kernel, keys: list[str]) -> dict:
    """Feed the batches in turn, the committed state carried as the runtime does; the last
    row each key emitted."""
    state, last = None, {}
    for b, rows in enumerate(_batches()):
        state_schema = kernel.state_schema(rows.schema).append(pa.field(KEY_GROUP, pa.int32()))
        current = state.select(state_schema.names) if state is not None else state_schema.empty_table()
        result = kernel.process(rows, current, BatchContext(b, 0))
        delta = build_state_table(result.upserts, result.deletes, keys, "test")
        committed = [] if state is None else [build_state_table(state, None, keys, "test")]
        state = merge_latest(committed + [delta], keys)
        for row in result.output.to_pylist():
            last[tuple(row[k] for k in keys)] = row
    return last


def _sql(query: str) -> list[tuple]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (k TEXT, j INTEGER, v INTEGER)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", ROWS)
    return db.execute(query).fetchall()


def test_running_aggregate_of_null_keys_across_batches_equals_group_by():
    got = _run(AggregateKernel(["k", "j"], {"n": agg.count(), "total": agg.sum("v")}), ["k", "j"])
    want = {(k, j): (n, total) for k, j, n, total in _sql("SELECT k, j, count(*), sum(v) FROM t GROUP BY k, j")}
    assert {key: (row["n"], row["total"]) for key, row in got.items()} == want


def test_reduce_and_process_of_null_int_keys_equal_group_by():
    reduced = _run(ReduceKernel(["j"], lambda a, b: dict(a, v=a["v"] + b["v"])), ["j"])
    assert {key[0]: row["v"] for key, row in reduced.items()} == dict(_sql("SELECT j, sum(v) FROM t GROUP BY j"))

    def count(key, rows, state):
        state.update((state.value or 0) + rows.num_rows)
        return [{"j": key[0], "seen": state.value}]

    processed = _run(ProcessKernel(["j"], count, pa.schema([("j", pa.int64()), ("seen", pa.int64())])), ["j"])
    assert {key[0]: row["seen"] for key, row in processed.items()} == dict(_sql("SELECT j, count(*) FROM t GROUP BY j"))


def test_state_store_keeps_one_row_per_nan_and_signed_zero_key():
    older = build_state_table(
        pa.table({KEY_GROUP: pa.array([1, 1, 1], pa.int32()), "f": [0.0, float("nan"), None], "n": [1, 2, 3]}),
        None,
        ["f"],
        "test",
    )
    newer = build_state_table(
        pa.table({KEY_GROUP: pa.array([1, 1, 1], pa.int32()), "f": [-0.0, -float("nan"), None], "n": [10, 20, 30]}),
        None,
        ["f"],
        "test",
    )
    merged = merge_latest([older, newer], ["f"])
    assert sorted(merged["n"].to_pylist()) == [10, 20, 30]
