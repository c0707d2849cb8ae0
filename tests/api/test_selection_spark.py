"""deduplicate and top-N on local Spark, across batches, a restart and key groups moved
between 1-3 partitions after every batch, against DuckDB over the records the source produced."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from tests.keyed_harness import RandomRebalancer, run_with_restart

from sluice import Pipeline, sinks, sources
from sluice.runtime.sinks import memory_batches

pytestmark = pytest.mark.spark

ROWS, PER_BATCH = 6_000, 1_000


def build() -> Pipeline:
    p = Pipeline("selection", partitions=2, max_parallelism=16)
    raw = p.source(
        sources.generator(
            fields={
                "id": sources.Keys(2_000, prefix="e"),
                "g": sources.Keys(12, prefix="g"),
                "v": sources.Sequence(),
                "ts": sources.EventTime(step=0.001),
            },
            total_rows=ROWS,
            seed=8,
            start_time=1_700_000_000.0,
            max_rows_per_batch=PER_BATCH,
        ),
        name="raw",
    )
    raw.sink(sinks.memory("sel_raw"))
    # a window longer than the stream: each id passes once, in the first batch that has it
    raw.key_by("id").deduplicate(within="1h", name="dedup").sink(sinks.memory("sel_dedup"))
    raw.key_by("g").top(3, by="v", name="top3").sink(sinks.memory("sel_top"))
    return p


def test_deduplicate_and_top_equal_duckdb_across_a_restart(spark, tmp_path, memory):
    dedup, top = RandomRebalancer("dedup", seed=3), RandomRebalancer("top3", seed=4)
    run_with_restart(build, str(tmp_path / "ckpt"), spark, 2, controller=lambda m, plan: top(m, dedup(m, plan)))
    assert sum(dedup.moves) > 10 and sum(top.moves) > 10  # key groups of both really moved
    raw = memory_batches("sel_raw")
    every = pa.concat_tables([t.append_column("b", pa.array([b] * t.num_rows, pa.int64())) for b, t in sorted(raw.items())])
    assert every.num_rows == ROWS

    dedup = pa.concat_tables(list(memory_batches("sel_dedup").values()))
    want = duckdb.sql("SELECT arg_min(v, (b, ts, v)) AS v FROM every GROUP BY id").to_arrow_table()
    assert sorted(dedup["v"].to_pylist()) == sorted(want["v"].to_pylist())

    latest: dict = {}
    for _, out in sorted(memory_batches("sel_top").items()):
        for g in set(out["g"].to_pylist()):
            latest[g] = sorted((r["rank"], r["v"]) for r in out.to_pylist() if r["g"] == g)
    tops = duckdb.sql("""SELECT g, rank, v FROM (SELECT g, v, row_number() OVER (PARTITION BY g ORDER BY v DESC)
                         AS rank FROM every) WHERE rank <= 3""").to_arrow_table()
    expected: dict = {}
    for r in tops.to_pylist():
        expected.setdefault(r["g"], []).append((r["rank"], r["v"]))
    assert latest == {g: sorted(rows) for g, rows in expected.items()}
