"""NULL, NaN, -0.0 and unicode keys group as in SQL's GROUP BY, in every keyed operator.

One pipeline on local Spark reads a recorded file in several batches, is stopped after two
batches and restarted from its checkpoint, and every keyed operator's final result is
compared with PostgreSQL's GROUP BY over the same rows: a NULL key (or a NULL part of a
multi-column key) is one key, every NaN is one key, -0.0 is the key 0.0. Windows are
checked window by window: tumbling (Spark's combine), sliding with a user-defined aggregate
(the Python combine) and sessions.
"""

from __future__ import annotations

import math
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sluice
from sluice import agg, sinks, sources
from sluice import windows as W
from sluice.runtime.sinks import clear_memory, memory_batches, memory_table

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROWS, PER_BATCH = 600, 200
START_US = 1_700_000_000_000_000
STEP_US = 10_000  # 10 ms between records, and 3 s between blocks of 100 (new sessions)
KEYS = ["a", "b", "ü", "日本", None]
PARTS = [1, 2, None]
FLOATS = [0.0, -0.0, float("nan"), 1.5, None]


def _input() -> pa.Table:
    rng = np.random.default_rng(7)
    ids = np.arange(ROWS)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "k": pa.array([KEYS[i] for i in rng.integers(0, len(KEYS), ROWS)], pa.string()),
            "j": pa.array([PARTS[i] for i in rng.integers(0, len(PARTS), ROWS)], pa.int64()),
            "f": pa.array([FLOATS[i] for i in rng.integers(0, len(FLOATS), ROWS)], pa.float64()),
            "v": pa.array(rng.integers(1, 100, ROWS), pa.int64()),
            "ts": pa.array(START_US + ids * STEP_US + (ids // 100) * 3_000_000, pa.timestamp("us", tz="UTC")),
        }
    )


def norm(value):
    """A key value as a dict key that compares as SQL does (NaN is one value, -0.0 is 0.0)."""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else value + 0.0
    return value


def sum_of_squares():
    return agg.udaf(
        "v",
        create=lambda: 0,
        add=lambda acc, values: acc + int(np.sum(np.square(values.to_numpy()))),
        merge=lambda a, b: a + b,
        result=lambda acc: acc,
    )


def count_seen(key, rows: pa.Table, state):
    seen = (state.value or 0) + rows.num_rows
    state.update(seen)
    return [{"j": key[0], "seen": seen}]


def build(path: str) -> sluice.Pipeline:
    p = sluice.Pipeline("null_keys", partitions=2)
    s = p.source(sources.ReplaySource(path, format="parquet", event_time="ts", max_rows_per_batch=PER_BATCH), name="rows")
    s.key_by("k").aggregate(n=agg.count(), total=agg.sum("v"), name="by_k").sink(sinks.memory("nk_by_k"))
    s.key_by("k", "j").aggregate(n=agg.count(), ss=sum_of_squares(), name="by_kj").sink(sinks.memory("nk_by_kj"))
    s.key_by("f").aggregate(n=agg.count(), name="by_f").sink(sinks.memory("nk_by_f"))
    s.key_by("k").reduce(lambda a, b: dict(a, v=a["v"] + b["v"]), name="reduce_k").sink(sinks.memory("nk_reduce"))
    s.key_by("j").process(count_seen, schema={"j": "int64", "seen": "int64"}, name="process_j").sink(sinks.memory("nk_process"))
    s.key_by("k").window(W.tumbling("1s")).aggregate(n=agg.count(), total=agg.sum("v"), name="tumbling").sink(
        sinks.memory("nk_tumbling")
    )
    s.key_by("f").window(W.sliding("2s", "1s")).aggregate(n=agg.count(), ss=sum_of_squares(), name="sliding").sink(
        sinks.memory("nk_sliding")
    )
    s.key_by("k", "j").window(W.session("0.5s")).aggregate(n=agg.count(), name="sessions").sink(sinks.memory("nk_sessions"))
    return p


@pytest.fixture(scope="module")
def postgres():
    import psycopg

    conn = psycopg.connect("host=127.0.0.1 port=5432 dbname=test user=postgres", autocommit=True)
    table = f"null_keys_{uuid.uuid4().hex[:12]}"
    rows = _input().to_pylist()
    with conn.cursor() as cur:
        cur.execute(f"CREATE TEMP TABLE {table} (id bigint, k text, j bigint, f float8, v bigint, ts bigint)")
        cur.executemany(
            f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s)",
            [
                (r["id"], r["k"], r["j"], r["f"], r["v"], START_US + r["id"] * STEP_US + (r["id"] // 100) * 3_000_000)
                for r in rows
            ],
        )

    def query(sql: str) -> list[tuple]:
        with conn.cursor() as cur:
            cur.execute(sql.format(t=table))
            return cur.fetchall()

    yield query
    conn.close()


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    clear_memory()
    base = tmp_path_factory.mktemp("null_keys")
    path = str(base / "rows.parquet")
    pq.write_table(_input(), path)
    checkpoint = str(base / "checkpoint")
    first = build(path).run(checkpoint, spark=spark, stop_when=lambda executor: executor.batches_done >= 2)
    second = build(path).run(checkpoint, spark=spark)  # a restart from the checkpoint
    return first, second


def final_rows(sink: str, keys: list[str]) -> dict:
    """The last row each key emitted (running operators emit a key's row when it changes)."""
    out = {}
    batches = memory_batches(sink)
    for b in sorted(batches):
        for row in batches[b].to_pylist():
            out[tuple(norm(row[k]) for k in keys)] = row
    return out


def test_the_run_was_restarted_between_batches(run):
    first, second = run
    # stopped after its second batch: a third that had started as the stop came finishes
    assert first.batches in (2, 3) and first.batches + second.batches == ROWS // PER_BATCH + 1
    assert sorted(memory_batches("nk_by_k")) == list(range(ROWS // PER_BATCH + 1))  # + the end of input


def test_running_aggregates_equal_group_by(run, postgres):
    by_k = final_rows("nk_by_k", ["k"])
    want = {(k,): (n, total) for k, n, total in postgres("SELECT k, count(*), sum(v) FROM {t} GROUP BY k")}
    assert (None,) in want and "日本" in {k for (k,) in want}
    assert {key: (row["n"], row["total"]) for key, row in by_k.items()} == want

    by_kj = final_rows("nk_by_kj", ["k", "j"])
    want = {(k, j): (n, ss) for k, j, n, ss in postgres("SELECT k, j, count(*), sum(v * v) FROM {t} GROUP BY k, j")}
    assert (None, None) in want and ("a", None) in want and (None, 1) in want
    assert {key: (row["n"], row["ss"]) for key, row in by_kj.items()} == want

    by_f = final_rows("nk_by_f", ["f"])
    want = {(norm(f),): n for f, n in postgres("SELECT f, count(*) FROM {t} GROUP BY f")}
    assert set(want) == {(0.0,), ("NaN",), (1.5,), (None,)}  # -0.0 is 0.0
    assert {key: row["n"] for key, row in by_f.items()} == want


def test_reduce_and_process_equal_group_by(run, postgres):
    reduced = final_rows("nk_reduce", ["k"])
    want = dict(postgres("SELECT k, sum(v) FROM {t} GROUP BY k"))
    assert {key[0]: row["v"] for key, row in reduced.items()} == want

    processed = final_rows("nk_process", ["j"])
    want = dict(postgres("SELECT j, count(*) FROM {t} GROUP BY j"))
    assert None in want
    assert {key[0]: row["seen"] for key, row in processed.items()} == want


def _windows(sink: str, keys: list[str], values: list[str]) -> dict:
    out = {}
    for row in memory_table(sink).to_pylist():
        window = (int(row["window_start"].timestamp() * 1e6), int(row["window_end"].timestamp() * 1e6))
        key = (*(norm(row[k]) for k in keys), *window)
        assert key not in out, f"window {key} emitted twice"
        out[key] = tuple(row[v] for v in values)
    return out


def test_windows_equal_group_by(run, postgres):
    second = 1_000_000
    tumbling = _windows("nk_tumbling", ["k"], ["n", "total"])
    want = {
        (k, w * second, (w + 1) * second): (n, total)
        for k, w, n, total in postgres("SELECT k, floor(ts / 1000000.0)::bigint AS w, count(*), sum(v) FROM {t} GROUP BY k, w")
    }
    assert tumbling == want

    sliding = _windows("nk_sliding", ["f"], ["n", "ss"])
    want = {
        (norm(f), w * second, w * second + 2 * second): (n, ss)
        for f, w, n, ss in postgres(
            "SELECT f, w, count(*), sum(v * v) FROM {t}, "
            "generate_series(floor(ts / 1000000.0)::bigint - 1, floor(ts / 1000000.0)::bigint) AS w GROUP BY f, w"
        )
    }
    assert sliding == want

    sessions = _windows("nk_sessions", ["k", "j"], ["n"])
    gap = 500_000
    want = {
        (k, j, start, end + gap): (n,)
        for k, j, start, end, n in postgres(
            "SELECT k, j, min(ts), max(ts), count(*) FROM ("
            "  SELECT *, sum(new) OVER (PARTITION BY k, j ORDER BY ts) AS session FROM ("
            f"    SELECT *, CASE WHEN ts - lag(ts) OVER (PARTITION BY k, j ORDER BY ts) < {gap} THEN 0 ELSE 1 END AS new"
            "    FROM {t}) marked) numbered GROUP BY k, j, session"
        )
    }
    assert any(k is None and j is None for k, j, *_ in want)
    assert sessions == want
