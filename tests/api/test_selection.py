"""deduplicate and top-N (``runtime.kernels.selection``) without Spark, against DuckDB over
the same records and against a record-by-record reference of the dedup rule."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from tests.state.test_state_ttl import drive

from sluice.graph.windows import EventTime
from sluice.runtime.kernels.selection import EXPIRES, DeduplicateKernel, TopKernel

TS = pa.timestamp("us", tz="UTC")


def events(seed: int, n_batches: int, keys: int, span: int) -> list[pa.Table]:
    """Batches of (k, ts, i): keys with repeats, times moving forward with jitter, i the arrival."""
    rng = np.random.default_rng(seed)
    out, i, base = [], 0, 0
    for _ in range(n_batches):
        n = int(rng.integers(0, 40))
        ts = base + rng.integers(0, span, n)
        out.append(
            pa.table(
                {
                    "k": pa.array([f"k{x}" for x in rng.integers(0, keys, n)], pa.string()),
                    "ts": pa.array(ts, TS),
                    "i": pa.array(np.arange(i, i + n), pa.int64()),
                }
            )
        )
        i += n
        base += span // 2
    return out


def watermarks(batches: list[pa.Table], delay: int) -> list[int | None]:
    marks, seen = [], None
    for rows in batches:
        marks.append(None if seen is None else seen - delay)
        if rows.num_rows:
            top = int(np.max(rows["ts"].cast(pa.int64()).to_numpy()))
            seen = top if seen is None else max(seen, top)
    return marks


def dedup_reference(batches, marks, within):
    """Per batch, the arrival numbers of the records that pass."""
    open_until: dict = {}
    out = []
    for rows, now in zip(batches, marks):
        if now is not None:
            open_until = {k: t for k, t in open_until.items() if t > now}
        passed = []
        firsts: dict = {}
        for k, ts, i in zip(rows["k"].to_pylist(), rows["ts"].cast(pa.int64()).to_pylist(), rows["i"].to_pylist()):
            if (now is not None and ts <= now - within) or k in open_until:
                continue
            if k not in firsts or ts < firsts[k][0]:
                firsts[k] = (ts, i)
        for k, (ts, i) in firsts.items():
            open_until[k] = ts + within
            passed.append(i)
        out.append(sorted(passed))
    return out


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_deduplicate_equals_the_reference(seed):
    within = 60
    batches = events(seed, 30, 15, 40)
    marks = watermarks(batches, 5)
    kernel = DeduplicateKernel(["k"], within, EventTime("ts"))
    outputs, state = drive(kernel, batches, [(m, 0) for m in marks])
    assert [sorted(o["i"].to_pylist()) for o in outputs] == dedup_reference(batches, marks, within)
    assert all(row[EXPIRES] > marks[-1] for row in state.values())  # only open windows are kept


def test_deduplicate_without_expiry_keeps_the_first_record_per_key_as_duckdb_does():
    batches = events(9, 20, 50, 10)
    kernel = DeduplicateKernel(["k"], 10**12, EventTime("ts"))  # a window longer than the stream
    outputs, _ = drive(kernel, batches, [(m, 0) for m in watermarks(batches, 10**6)])
    got = pa.concat_tables(outputs)
    # the first batch that has the key decides; in it, the earliest record
    every = pa.concat_tables(  # noqa: F841 (read by name in DuckDB's query below)
        [t.append_column("b", pa.array([b] * t.num_rows, pa.int64())) for b, t in enumerate(batches)]
    )
    want = duckdb.sql("SELECT arg_min(i, (b, ts, i)) AS i FROM every GROUP BY k").to_arrow_table()
    assert sorted(got["i"].to_pylist()) == sorted(want["i"].to_pylist())


@pytest.mark.parametrize("ascending", [False, True])
def test_top_n_equals_duckdb(ascending):
    rng = np.random.default_rng(4)
    batches, i = [], 0
    for _ in range(25):
        n = int(rng.integers(0, 50))
        batches.append(
            pa.table(
                {
                    "k": pa.array([f"g{x}" for x in rng.integers(0, 8, n)], pa.string()),
                    "v": pa.array(rng.integers(0, 30, n), pa.int64()),  # ties: the first stays
                    "i": pa.array(np.arange(i, i + n), pa.int64()),
                }
            )
        )
        i += n
    kernel = TopKernel(["k"], 3, ["v"], ascending=ascending)
    outputs, state = drive(kernel, batches, [(None, 0)] * len(batches))
    latest: dict = {}
    for out in outputs:  # the latest top emitted per key replaces the one before
        for k in set(out["k"].to_pylist()):
            latest[k] = sorted((r["rank"], r["v"], r["i"]) for r in out.to_pylist() if r["k"] == k)
    every = pa.concat_tables(batches)  # noqa: F841 (read by DuckDB)
    order = "ASC" if ascending else "DESC"
    want = duckdb.sql(f"""SELECT k, rank, v, i FROM (SELECT k, v, i, row_number() OVER
                          (PARTITION BY k ORDER BY v {order}, i) AS rank FROM every) WHERE rank <= 3""").to_arrow_table()
    expected: dict = {}
    for r in want.to_pylist():
        expected.setdefault(r["k"], []).append((r["rank"], r["v"], r["i"]))
    assert latest == {k: sorted(v) for k, v in expected.items()}
    # the state holds exactly those records
    assert {k[0]: [(r["v"], r["i"]) for r in row["__top"]] for k, row in state.items()} == {
        k: [(v, i) for _, v, i in sorted(rows)] for k, rows in expected.items()
    }


def test_top_emits_only_keys_whose_top_changed():
    kernel = TopKernel(["k"], 1, ["v"])
    first = pa.table({"k": ["a", "b"], "v": [5, 5], "i": [0, 1]})
    second = pa.table({"k": ["a", "b"], "v": [1, 9], "i": [2, 3]})  # a's top stays, b's changes
    outputs, _ = drive(kernel, [first, second], [(None, 0)] * 2)
    assert outputs[1].to_pylist() == [{"k": "b", "v": 9, "i": 3, "rank": 1}]
