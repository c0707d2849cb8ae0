"""A fused chain runs the SQL filter after it in Arrow and combines a running aggregate's
records per map task (``runtime.batch.compile.chain_fusions``): the filter keeps exactly the rows
Spark's would, the combined rows merge to exactly the state the records give, and a job so
fused answers as a plain-Python reference does, across a restart."""

from __future__ import annotations

import math
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import sluice
from sluice import agg, sinks, sources
from sluice.plan.physical import initial_plan
from sluice.runtime.batch import metrics as metrics_log
from sluice.runtime.batch.compile import chain_fusions
from sluice.runtime.kernels.aggregate import AggregateKernel
from sluice.runtime.kernels.factory import keyed_kernel
from sluice.runtime.kernels.keyed import KEY_GROUP, BatchContext
from sluice.runtime.kernels.predicates import arrow_predicate
from sluice.runtime.kernels.window_state import INGEST
from sluice.runtime.sinks import clear_memory, memory_batches

NAN, INF = float("nan"), float("inf")
EDGES = pa.table(
    {
        "id": pa.array(range(12), pa.int64()),
        "d": pa.array([1.0, -1.0, NAN, None, 0.0, -0.0, INF, -INF, 2.5, 1e300, -1e-300, 7.0]),
        "n": pa.array([1, None, -3, 4, 5, 6, 2**62, -(2**62), 0, 7, 2**31, -1], pa.int64()),
        "i": pa.array([1, 2, None, -4, 0, 6, 7, 8, 9, -10, 11, 12], pa.int32()),
        "s": pa.array(["a", "日本", None, "b", "", "z", "é", "e\u0301", "A", "ab", "a ", "Z"]),
        "b": pa.array([True, False, None, True, False, True, None, False, True, True, False, None]),
    }
)
SUPPORTED = [
    "d >= 0",
    "d > 0",
    "d < 0",
    "d <= 0",
    "d = 0",
    "d != 0",
    "d <> 1",
    "0 <= d",
    "-1 < d",
    "d > -1e3",
    "d = 2.5",
    "d > 1e299",
    "d < -0.0",
    "d >= 7D",
    "d == 1",
    "n > 5",
    "n <= -3",
    "n = 4611686018427387904",
    "n != 0",
    "n > -9223372036854775808",
    "5 < n",
    "n >= 2147483648L",
    "i > 5",
    "i = -4",
    "i < 3000000000",
    "s = 'a'",
    "s != 'a'",
    "s > 'a'",
    "s < 'b'",
    "s >= ''",
    "s = '日本'",
    "'b' > s",
    "b",
    "NOT b",
    "b = true",
    "b != false",
    "b AND d > 0",
    "b OR n > 5",
    "NOT (d < 0 OR s IS NULL)",
    "d IS NULL",
    "d IS NOT NULL",
    "n IS NULL OR i IS NULL",
    "(d > 0 AND (n > 1 OR i < 5)) OR NOT b",
    "`d` > 0 and `s` is not null",
    "d > 0 AND d < 2 OR d > 3",
]
UNSUPPORTED = [
    "abs(d) > 0",
    "d + 1 > 0",
    "n > 1.5",
    "d > n",
    "s = 1",
    "d IN (1, 2)",
    "s LIKE 'a%'",
    "d BETWEEN 0 AND 1",
    "D > 0",
    "nope > 1",
    "d > NULL",
    "n > 1e3",
    "d",
    "s",
    "1 = 1",
    "d > 9007199254740993",
    "s = 'it''s'",
    's = "a"',
    "CAST(d AS INT) > 0",
    "d > 0;",
    "",
    "d >",
    "(d > 0",
    "d > 0)",
    "n > 99999999999999999999",
]


def kept_ids(table: pa.Table, expression: str) -> list[int]:
    predicate = arrow_predicate(expression, table.schema)
    assert predicate is not None, expression
    return table.to_batches()[0].filter(predicate(table.to_batches()[0])).column("id").to_pylist()


def test_expressions_outside_the_subset_are_left_to_spark():
    assert [e for e in UNSUPPORTED if arrow_predicate(e, EDGES.schema) is not None] == []
    assert [e for e in SUPPORTED if arrow_predicate(e, EDGES.schema) is None] == []


def test_nan_is_above_every_number_and_null_is_dropped():
    # Spark: NaN = NaN, NaN > +inf; a NULL comparison keeps nothing, and NOT NULL is NULL
    assert kept_ids(EDGES, "d > 1e300") == [2, 6]
    assert kept_ids(EDGES, "d < 0") == [1, 7, 10]
    assert kept_ids(EDGES, "NOT (d < 0)") == [0, 2, 4, 5, 6, 8, 9, 11]
    assert kept_ids(EDGES, "d = 0") == [4, 5]  # -0.0 = 0.0


@pytest.mark.spark
def test_every_supported_expression_keeps_what_spark_keeps(spark):
    schema = "id bigint, d double, n bigint, i int, s string, b boolean"
    df = spark.createDataFrame([tuple(r.values()) for r in EDGES.to_pylist()], schema)
    # one job for all of them: each expression's kept ids, collected as one row
    from pyspark.sql import functions as F

    row = df.agg(
        *[F.sort_array(F.collect_list(F.when(F.expr(e), F.col("id")))).alias(f"e{k}") for k, e in enumerate(SUPPORTED)]
    ).collect()[0]
    want = {e: list(row[f"e{k}"]) for k, e in enumerate(SUPPORTED)}
    got = {e: kept_ids(EDGES, e) for e in SUPPORTED}
    assert got == want


# ---- the combine -----------------------------------------------------------------------------
AGGREGATES = {
    "n": agg.count(),
    "n2": agg.count(),
    "nv": agg.count("v"),
    "total": agg.sum("v"),
    "fsum": agg.sum("f"),
    "lo": agg.min("v"),
    "hi": agg.max("f"),
    "avg": agg.mean("f"),
}


def records(rows: int, seed: int) -> pa.Table:
    rnd = random.Random(seed)
    keys = [None, "日本", "a", "b", "é", ""]
    return pa.table(
        {
            "k": pa.array([rnd.choice(keys) for _ in range(rows)], pa.string()),
            "j": pa.array([rnd.choice([None, 1, 2]) for _ in range(rows)], pa.int64()),
            "v": pa.array([rnd.choice([None, rnd.randint(-50, 50)]) for _ in range(rows)], pa.int32()),
            "f": pa.array([rnd.choice([None, rnd.randint(-8, 8) / 4]) for _ in range(rows)], pa.float64()),  # exact
            INGEST: pa.array(range(rows), pa.timestamp("us", tz="UTC")),
        }
    )


def routed(rows: pa.Table) -> pa.Table:
    """The keyed stage's input: one key group for all (the kernel's numbering is by key)."""
    return rows.drop_columns([INGEST]).append_column(KEY_GROUP, pa.array([0] * rows.num_rows, pa.int32()))


@pytest.mark.parametrize("keys", [["k"], ["k", "j"]])
def test_rows_combined_per_task_merge_to_what_the_records_give(keys):
    kernel = AggregateKernel(keys, AGGREGATES)
    schema = records(0, 0).schema
    assert kernel.combinable(schema)
    kernel.bind_records(schema)
    ctx = BatchContext(0, 0, 0, 0)
    state_schema = kernel.state_schema(schema.remove(schema.get_field_index(INGEST))).append(pa.field(KEY_GROUP, pa.int32()))
    from_records = from_partials = state_schema.empty_table()
    for batch in range(3):  # state carried over batches
        tasks = [records(200, 10 * batch + t) for t in range(3)]
        partials = pa.concat_tables([kernel.combine(t, task) for task, t in enumerate(tasks)])
        assert partials.schema == pa.schema([*kernel.combined_schema(schema), pa.field(INGEST, schema.field(INGEST).type)])
        assert pc.sum(partials["__records"]).as_py() == 600
        shuffled = partials.take(pa.array(random.Random(batch).sample(range(partials.num_rows), partials.num_rows)))
        a = kernel.process(routed(pa.concat_tables(tasks)), from_records, ctx)
        b = kernel.process(routed(shuffled), from_partials, ctx)
        order = [(k, "ascending") for k in keys]
        assert b.output.sort_by(order).to_pylist() == a.output.sort_by(order).to_pylist()
        assert b.upserts.sort_by(order).to_pylist() == a.upserts.sort_by(order).to_pylist()
        from_records, from_partials = a.upserts, b.upserts


def test_keys_that_may_not_group_exactly_and_udafs_are_not_combined():
    schema = pa.schema([("x", pa.float64()), ("k", pa.string()), ("v", pa.int64())])
    assert not AggregateKernel(["x"], {"n": agg.count()}).combinable(schema)  # NaN, -0.0
    assert not AggregateKernel([], {"n": agg.count()}).combinable(schema)
    udaf = agg.udaf("v", create=lambda: 0, add=lambda a, v: a, merge=lambda a, b: a, result=lambda a: a)
    assert not AggregateKernel(["k"], {"u": udaf}).combinable(schema)
    assert AggregateKernel(["k"], {"n": agg.count(), "s": agg.sum("v")}).combinable(schema)


# ---- a fused job on Spark --------------------------------------------------------------------
ROWS, PER_BATCH = 4000, 1000


def to_wh(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Watt-hours; the meter of every record whose id is 13 mod 16 is NULL (one key, as in SQL)."""
    meter = pc.if_else(pc.equal(pc.bit_wise_and(batch.column("id"), 15), 13), pa.scalar(None, pa.string()), batch.column("meter"))
    return pa.RecordBatch.from_arrays(
        [batch.column("id"), meter, pc.multiply(batch.column("kwh"), 1000.0)], names=["id", "meter", "wh"]
    )


def pipeline() -> sluice.Pipeline:
    p = sluice.Pipeline("fused", partitions=2)
    s = p.source(
        sources.generator(
            fields={
                "id": sources.Sequence(),
                "meter": sources.Keys(40, distribution="zipf", skew=1.1, prefix="日"),
                "kwh": sources.Normal(0.2, 0.4),
            },
            seed=11,
            total_rows=ROWS,
            max_rows_per_batch=PER_BATCH,
        ),
        name="readings",
    )
    s.sink(sinks.memory("fused_raw"))
    (
        s.map_batches(to_wh, schema={"id": "int64", "meter": "string", "wh": "double"}, name="to_wh")
        .filter("wh >= 0", name="valid")
        .filter("id % 7 != 3", name="not_arithmetic")  # the second stays in Spark
        .key_by("meter")
        .aggregate(n=agg.count(), total=agg.sum("wh"), hi=agg.max("wh"), name="stats")
        .sink(sinks.memory("fused_stats"))
    )
    q = p.source(
        sources.generator(
            fields={"id": sources.Sequence(), "meter": sources.Keys(40, prefix="m")},
            seed=5,
            total_rows=ROWS,
            max_rows_per_batch=PER_BATCH,
        ),
        name="plain",
    )
    (
        q.map_batches(lambda b: b, name="same")
        .filter("id > 100", name="late_ids")
        .key_by("meter")
        .aggregate(n=agg.count(), name="counts")
        .sink(sinks.memory("fused_counts"))
    )
    return p


def test_the_plan_fuses_the_filter_and_the_combine_it_can():
    p = pipeline()
    graph = p.job_graph()
    fusions = chain_fusions(graph, initial_plan(graph, 2), keyed_kernel)
    by_end = {
        graph[f.end].name: ([k.op.name for k in f.filters], f.combine and graph[f.combine[0]].name) for f in fusions.values()
    }
    # the arithmetic filter is Spark's: it stops the fusion, so no combine after it
    assert by_end == {"valid": (["valid"], None), "late_ids": (["late_ids"], "counts")}


@pytest.mark.spark
def test_a_fused_job_equals_the_reference_across_a_restart(spark, tmp_path):
    clear_memory()
    checkpoint = str(tmp_path / "checkpoint")
    first = pipeline().run(checkpoint, spark=spark, stop_when=lambda executor: executor.batches_done >= 2)
    pipeline().run(checkpoint, spark=spark)
    assert first.batches in (2, 3, 4)
    raw = [r for b in sorted(memory_batches("fused_raw")) for r in memory_batches("fused_raw")[b].to_pylist()]
    assert sorted(r["id"] for r in raw) == list(range(ROWS))
    want: dict = {}
    for r in raw:
        wh, meter = r["kwh"] * 1000.0, None if r["id"] & 15 == 13 else r["meter"]
        if wh >= 0 and r["id"] % 7 != 3:
            n, total, hi = want.get(meter, (0, 0.0, -math.inf))
            want[meter] = (n + 1, total + wh, max(hi, wh))
    got = {}
    for b in sorted(memory_batches("fused_stats")):
        for row in memory_batches("fused_stats")[b].to_pylist():
            got[row["meter"]] = (row["n"], row["total"], row["hi"])
    assert got.keys() == want.keys() and None in want
    for k, (n, total, hi) in want.items():
        assert got[k][0] == n and got[k][2] == hi and got[k][1] == pytest.approx(total, rel=1e-12), k
    counts = {}
    for b in sorted(memory_batches("fused_counts")):
        for row in memory_batches("fused_counts")[b].to_pylist():
            counts[row["meter"]] = row["n"]
    assert sum(counts.values()) == ROWS - 101
    # the aggregate after the combine counts records in, not combined rows, per key group too
    for record in metrics_log.read(checkpoint):
        ops = record.operators
        if "counts" in ops and ops["counts"].get("rows_in"):
            assert ops["counts"]["rows_in"] == record.key_groups["counts"].total_rows
            assert ops["counts"]["rows_in"] > ops["counts"].combine.rows_out


def restartable(expression: str) -> sluice.Pipeline:
    p = sluice.Pipeline("fused_change", partitions=2)
    (
        p.source(
            sources.generator(
                fields={"id": sources.Sequence(), "meter": sources.Keys(30, prefix="k"), "kwh": sources.Normal(0.2, 0.4)},
                seed=7,
                total_rows=ROWS,
                max_rows_per_batch=PER_BATCH,
            ),
            name="readings",
        )
        .map_batches(to_wh, schema={"id": "int64", "meter": "string", "wh": "double"}, name="to_wh")
        .filter(expression, name="valid")
        .key_by("meter")
        .aggregate(n=agg.count(), total=agg.sum("wh"), name="stats")
        .sink(sinks.memory("fused_change"))
    )
    return p


@pytest.mark.spark
def test_state_from_combined_rows_goes_on_from_records_after_a_restart_that_stops_fusing(spark, tmp_path):
    """The state a fused run wrote is the state a run from records reads: the filter changed
    between the restarts to one Spark evaluates (same rows kept), so the second run routes
    records, and the totals are those of one uninterrupted run."""
    clear_memory()
    checkpoint = str(tmp_path / "checkpoint")
    fused, spark_side = "wh >= 0", "wh >= 0 AND (meter IS NULL OR length(meter) > 0)"
    graph = restartable(fused).job_graph()
    assert chain_fusions(graph, initial_plan(graph, 2), keyed_kernel)
    graph = restartable(spark_side).job_graph()
    assert not chain_fusions(graph, initial_plan(graph, 2), keyed_kernel)
    first = restartable(fused).run(checkpoint, spark=spark, stop_when=lambda executor: executor.batches_done >= 2)
    assert first.batches in (2, 3)
    restartable(spark_side).run(checkpoint, spark=spark)
    final = {}
    for b in sorted(memory_batches("fused_change")):
        for row in memory_batches("fused_change")[b].to_pylist():
            final[row["meter"]] = (row["n"], row["total"])
    clear_memory()
    restartable(spark_side).run(str(tmp_path / "reference"), spark=spark)
    want = {}
    for b in sorted(memory_batches("fused_change")):
        for row in memory_batches("fused_change")[b].to_pylist():
            want[row["meter"]] = (row["n"], row["total"])
    assert final.keys() == want.keys() and len(want) == 31  # 30 meters and NULL
    for k, (n, total) in want.items():
        assert final[k][0] == n and final[k][1] == pytest.approx(total, rel=1e-12), k
