"""Operator chaining: 4 Python operators fused into one mapInArrow pass against the same 4
run as 4 passes.

    .venv/bin/python benchmarks/chaining.py [--quick]

One pipeline, run twice on the same generator source (unthrottled, the same rows per batch):
four vectorized Python operators in a row (``map_batches`` over Arrow: derive a column,
filter, derive another, project), then a sink that collects the rows to the driver. Fused,
the four share one ``mapInArrow`` pass (one JVM -> Python -> JVM round trip per task);
unfused (``run(fuse=False)``), each is its own pass, and every row crosses between the JVM
and Python four times. Throughput is sustained throughput: the median over the batches
after the warm-up of rows / batch period (start to next start). Both on local[2], best of
alternating runs (the machine is shared).

Writes docs/results/chaining.json; the last line printed is a JSON object whose ``ratio`` is
fused over unfused throughput.
"""

from __future__ import annotations

import argparse
import math
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
from measure import Anchor, Record, alternating, sustained

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


def with_wh(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.append_column("wh", pc.multiply(batch.column("kwh"), 1000.0))


def positive(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.filter(pc.greater(batch.column("wh"), 0.0))


def with_cost(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch.append_column("cost", pc.multiply(batch.column("wh"), 0.00031))


def project(batch: pa.RecordBatch) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([batch.column("meter"), batch.column("cost")], names=["meter", "cost"])


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
        # rows and the sum of their costs: what fused and unfused runs must agree on
        counter[batch_id] = (table.num_rows, pc.sum(table.column("cost")).as_py() or 0.0)

    out.sink(sinks.callback(count), name="out")
    return p


def run(spark, spec, fused: bool, workdir: str, warmup: int) -> dict:
    checkpoint = os.path.join(workdir, "fused" if fused else "unfused")
    shutil.rmtree(checkpoint, ignore_errors=True)
    counter: dict[int, tuple[int, float]] = {}
    result = build(spec, counter).run(checkpoint, spark=spark, fuse=fused)
    data = [m for m in result.metrics if m.rows_in]
    batches = [(m.started_at, m.started_at + m.duration_s, m.rows_in) for m in data]
    passes = len(PlanLog(checkpoint).latest().chains)  # mapInArrow passes the plan ran
    return {
        "throughput": sustained(batches, warmup),
        "output_rows": sum(n for n, _ in counter.values()),
        "output_cost": sum(c for _, c in counter.values()),
        "batches": len(batches),
        "python_passes": passes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer and smaller batches (about a minute)")
    parser.add_argument("--rows-per-batch", type=int, default=None)
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None, help="runs of each, best kept (default 1 quick, 3 full)")
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
    workdir = tempfile.mkdtemp(prefix="sluice-chaining-")
    mode = "quick" if args.quick else "full"
    print(
        f"chaining: 4 Python operators (map_batches over Arrow), {n_batches} batches of {per_batch:,} rows, "
        f"local[2], best of {repeats} ({mode} mode)"
    )
    warm = sources.generator(
        fields={"meter": sources.Keys(100), "kwh": sources.Normal(0.4, 0.2)},
        total_rows=per_batch * 2,
        seed=9,
        max_rows_per_batch=per_batch,
    )
    run(spark, warm, True, workdir, 0)
    runs: dict[bool, list[dict]] = {True: [], False: []}
    for fused in alternating(True, False, repeats):
        r = run(spark, spec, fused, workdir, warmup)
        runs[fused].append(r)
        print(
            f"  {'fused  ' if fused else 'unfused'} {r['throughput']:>12,.0f} rows/s  "
            f"({r['python_passes']} Python pass{'es' if r['python_passes'] > 1 else ''}, "
            f"{r['output_rows']:,} rows out)",
            flush=True,
        )
    fused = max(runs[True], key=lambda r: r["throughput"])
    unfused = max(runs[False], key=lambda r: r["throughput"])
    every = runs[True] + runs[False]
    outputs_equal = all(
        r["output_rows"] == fused["output_rows"] and math.isclose(r["output_cost"], fused["output_cost"], rel_tol=1e-9)
        for r in every
    )
    ratio = fused["throughput"] / unfused["throughput"]
    results = {
        "benchmark": "chaining",
        "mode": mode,
        "ratio": round(ratio, 3),
        "setup": {
            "rows_per_batch": per_batch,
            "batches": n_batches,
            "warmup_batches": warmup,
            "best_of": repeats,
            "operators": ["wh", "positive", "cost", "project"],
            "master": "local[2]",
            "throughput": "median over steady batches of rows / batch period",
        },
        "fused_rows_per_s": round(fused["throughput"]),
        "unfused_rows_per_s": round(unfused["throughput"]),
        "fused_runs_rows_per_s": [round(r["throughput"]) for r in runs[True]],
        "unfused_runs_rows_per_s": [round(r["throughput"]) for r in runs[False]],
        "python_passes": {"fused": fused["python_passes"], "unfused": unfused["python_passes"]},
        "output_rows": fused["output_rows"],
    }
    shutil.rmtree(workdir, ignore_errors=True)
    record.publish(
        RESULTS / "chaining.json",
        results,
        {k: results[k] for k in ("benchmark", "ratio", "mode", "fused_rows_per_s", "unfused_rows_per_s")},
        anchor=Anchor(
            ran="Sluice unfused: the same four operators, each its own mapInArrow pass (run(fuse=False)); "
            "not Spark's own query (one mapInArrow over the composed functions)",
            formulation="four map_batches over Arrow (derive, filter, derive, project) into a callback sink, "
            "generator source, local[2]",
        ),
        outputs_equal=outputs_equal,
        spark=spark,
        outputs_compared="every run's output row count and sum of cost, fused and unfused",
    )
    return 0 if outputs_equal else 1


if __name__ == "__main__":
    sys.exit(main())
