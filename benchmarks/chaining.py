"""Operator chaining: 4 Python operators fused into one mapInArrow pass, against what a Spark
user writes for them (one ``mapInArrow`` over the four functions composed).

    .venv/bin/python benchmarks/chaining.py [--quick]

Four vectorized Python operators in a row (``map_batches`` over Arrow: derive a column,
filter, derive another, project), then a sink that collects the rows to the driver. The
rows are written once as Parquet files, one per batch, and every run reads them through its
file source (Sluice: a ``directory`` source with ``available_now``; Spark:
``readStream.parquet`` with ``maxFilesPerTrigger`` 1 and ``trigger(availableNow=True)``),
so the read path is the same.

- **Sluice fused**: the four share one ``mapInArrow`` pass (one JVM -> Python -> JVM round
  trip per task).
- **Spark** (the anchor): Structured Streaming over the same files, ONE ``mapInArrow`` over
  the same four Arrow functions composed, ``foreachBatch`` collecting each batch to the
  driver as Arrow (``toArrow``), shuffle partitions = cores.
- **Sluice unfused** (``run(fuse=False)``): each operator its own pass, every row crossing
  between the JVM and Python four times; reported beside as ``unfused_ratio``.

Throughput is sustained throughput: the median over the batches after the warm-up of rows /
batch period (start to next start). All on local[2], best of alternating runs (the machine is
shared). Every run's output is compared value for value: per meter, the rows out and the sum
of their cost.

Writes docs/results/chaining.json; the last line printed is a JSON object whose ``ratio`` is
Sluice fused over the Spark anchor, and ``unfused_ratio`` Sluice fused over Sluice unfused.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from sluice import Pipeline, sinks, sources
from sluice.runtime.planlog import PlanLog
from sluice.runtime.session import spark_session

sys.path.insert(0, str(Path(__file__).resolve().parent))
from keyed_throughput import files_spec, write_files
from measure import Anchor, Record, anchor_conf, cores, spark_batches, spark_conf, sustained, tables_equal

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


def with_wh(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.append_column("wh", pc.multiply(batch.column("kwh"), 1000.0))


def positive(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.filter(pc.greater(batch.column("wh"), 0.0))


def with_cost(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.append_column("cost", pc.multiply(batch.column("wh"), 0.00031))


def project(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([batch.column("meter"), batch.column("cost")], names=["meter", "cost"])


def composed(batches):
    """The four operators as a Spark user composes them for one ``mapInArrow``."""
    for batch in batches:
        yield project(with_cost(positive(with_wh(batch))))


def per_meter(tables: list[pa.Table]) -> pa.Table:
    """Rows out and the sum of their cost per meter: what every run must agree on."""
    table = pa.concat_tables([t.select(["meter", "cost"]) for t in tables if t.num_rows])
    return table.group_by("meter", use_threads=False).aggregate([("cost", "count"), ("cost", "sum")])


def build(spec, counter: dict) -> Pipeline:
    p = Pipeline("chaining")
    readings = p.source(spec, name="readings")
    out = (
        readings.map_batches(with_wh, schema={"meter": "string", "kwh": "double", "wh": "double"}, name="wh")
        .map_batches(positive, name="positive")
        .map_batches(with_cost, schema={"meter": "string", "kwh": "double", "wh": "double", "cost": "double"}, name="cost")
        .map_batches(project, schema={"meter": "string", "cost": "double"}, name="project")
    )

    def count(batch_id, table):
        counter[batch_id] = table  # compared after the run, not inside the timed batch

    out.sink(sinks.callback(count), name="out")
    return p


def run(spark, spec, fused: bool, workdir: str, warmup: int) -> dict:
    checkpoint = os.path.join(workdir, "fused" if fused else "unfused")
    shutil.rmtree(checkpoint, ignore_errors=True)
    counter: dict[int, pa.Table] = {}
    result = build(spec, counter).run(checkpoint, spark=spark, fuse=fused)
    data = [m for m in result.metrics if m.rows_in]
    batches = [(m.started_at, m.started_at + m.duration_s, m.rows_in) for m in data]
    passes = len(PlanLog(checkpoint).latest().chains)  # mapInArrow passes the plan ran
    return summary(sustained(batches, warmup), list(counter.values()), len(batches), passes)


def run_spark(spark, files: str, workdir: str, warmup: int) -> dict:
    """The anchor: Spark reading the same Parquet files, one ``mapInArrow`` over the composed
    functions, each batch collected to the driver; shuffle partitions = cores (stateless:
    no state store involved)."""
    checkpoint = os.path.join(workdir, "spark")
    shutil.rmtree(checkpoint, ignore_errors=True)
    schema = spark.read.parquet(files).schema
    frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(files)
    out = frame.mapInArrow(composed, "meter string, cost double")
    tables: list[pa.Table] = []

    def collect(df, batch_id):
        tables.append(df.toArrow())

    with spark_conf(spark, anchor_conf("default", cores(spark))):
        query = out.writeStream.foreachBatch(collect).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
    try:
        query.awaitTermination()
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"Spark's query failed: {query.exception()}")
    batches = [b[:3] for b in spark_batches(query)]
    return summary(sustained(batches, warmup), tables, len(batches), 1)


def summary(throughput: float, tables: list[pa.Table], n_batches: int, passes: int) -> dict:
    values = per_meter(tables)
    return {
        "throughput": throughput,
        "output_rows": sum(t.num_rows for t in tables),
        "output_cost": pc.sum(values.column("cost_sum")).as_py() or 0.0,
        "values": values,
        "batches": n_batches,
        "python_passes": passes,
    }


ENGINES = ("fused", "spark", "unfused")
LABELS = {"fused": "Sluice fused  ", "spark": "Spark (anchor)", "unfused": "Sluice unfused"}


def rotated(repeats: int) -> list[str]:
    """``repeats`` runs of each engine, the order rotating every round (fused spark unfused,
    spark unfused fused, ...): none always runs first, so load that comes and goes on this
    shared machine favours none of them."""
    return [ENGINES[(i + j) % len(ENGINES)] for i in range(repeats) for j in range(len(ENGINES))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer and smaller batches (about a minute)")
    parser.add_argument("--rows-per-batch", type=int, default=None)
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None, help="runs of each, best kept (default 1 quick, 3 full)")
    parser.add_argument("--out", type=Path, default=RESULTS / "chaining.json", help="results file")
    args = parser.parse_args(argv)
    record = Record("chaining", args.quick)
    per_batch = args.rows_per_batch or (200_000 if args.quick else 500_000)
    n_batches = args.batches or (8 if args.quick else 12)
    repeats = args.repeats or (1 if args.quick else 3)
    warmup = 2
    spec = sources.generator(
        fields={"meter": sources.Keys(10_000, prefix="meter-"), "kwh": sources.Normal(0.4, 0.2)},
        total_rows=per_batch * n_batches,
        seed=3,
        max_rows_per_batch=per_batch,
    )
    spark = spark_session("local[2]", "chaining_benchmark")
    n_cores = cores(spark)
    workdir = tempfile.mkdtemp(prefix="sluice-chaining-")
    mode = "quick" if args.quick else "full"
    print(
        f"chaining: 4 Python operators (map_batches over Arrow), {n_batches} batches of {per_batch:,} rows "
        f"from Parquet files, local[2], best of {repeats} ({mode} mode)"
    )
    files = write_files(spec, os.path.join(workdir, "files"))
    warm_spec = sources.generator(
        fields={"meter": sources.Keys(100, prefix="meter-"), "kwh": sources.Normal(0.4, 0.2)},
        total_rows=per_batch * 2,
        seed=9,
        max_rows_per_batch=per_batch,
    )
    warm_files = write_files(warm_spec, os.path.join(workdir, "warm-files"))
    run(spark, files_spec(warm_files, per_batch), True, workdir, 0)
    run_spark(spark, warm_files, workdir, 0)
    runs: dict[str, list[dict]] = {e: [] for e in ENGINES}
    for engine in rotated(repeats):
        if engine == "spark":
            r = run_spark(spark, files, workdir, warmup)
        else:
            r = run(spark, files_spec(files, per_batch), engine == "fused", workdir, warmup)
        runs[engine].append(r)
        print(
            f"  {LABELS[engine]} {r['throughput']:>12,.0f} rows/s  "
            f"({r['python_passes']} Python pass{'es' if r['python_passes'] > 1 else ''}, "
            f"{r['output_rows']:,} rows out)",
            flush=True,
        )
    best = {e: max(runs[e], key=lambda r: r["throughput"]) for e in ENGINES}
    reference = best["fused"]["values"]
    every = [r for e in ENGINES for r in runs[e]]
    outputs_equal = all(
        r["output_rows"] == best["fused"]["output_rows"] and tables_equal(r["values"], reference, rel_tol=1e-9) for r in every
    )
    ratio = best["fused"]["throughput"] / best["spark"]["throughput"]
    unfused_ratio = best["fused"]["throughput"] / best["unfused"]["throughput"]
    results = {
        "benchmark": "chaining",
        "mode": mode,
        "ratio": round(ratio, 3),
        "unfused_ratio": round(unfused_ratio, 3),
        "setup": {
            "rows_per_batch": per_batch,
            "batches": n_batches,
            "warmup_batches": warmup,
            "best_of": repeats,
            "operators": ["wh", "positive", "cost", "project"],
            "source": "the same Parquet files, one per batch, read by each engine's file source (availableNow)",
            "sink": "each batch collected to the driver as Arrow",
            "master": "local[2]",
            "throughput": "median over steady batches of rows / batch period",
        },
        "fused_rows_per_s": round(best["fused"]["throughput"]),
        "spark_rows_per_s": round(best["spark"]["throughput"]),
        "unfused_rows_per_s": round(best["unfused"]["throughput"]),
        **{f"{e}_runs_rows_per_s": [round(r["throughput"]) for r in runs[e]] for e in ENGINES},
        "python_passes": {e: best[e]["python_passes"] for e in ENGINES},
        "output_rows": best["fused"]["output_rows"],
    }
    shutil.rmtree(workdir, ignore_errors=True)
    record.publish(
        args.out,
        results,
        {
            k: results[k]
            for k in ("benchmark", "ratio", "unfused_ratio", "mode", "fused_rows_per_s", "spark_rows_per_s", "unfused_rows_per_s")
        },
        anchor=Anchor(
            ran="Spark Structured Streaming: one mapInArrow over the four Arrow functions composed",
            formulation="readStream.parquet over the same Parquet files (maxFilesPerTrigger 1, availableNow), "
            "mapInArrow(wh -> positive -> cost -> project), foreachBatch collecting each batch as Arrow (toArrow); "
            "Sluice unfused (each operator its own mapInArrow pass) reported beside as unfused_ratio",
            state_store=None,
            shuffle_partitions=n_cores,
        ),
        outputs_equal=outputs_equal,
        spark=spark,
        outputs_compared="every run's output (Sluice fused, Spark, Sluice unfused) value for value: "
        "per meter, the rows out and the sum of their cost",
    )
    return 0 if outputs_equal else 1


if __name__ == "__main__":
    sys.exit(main())
