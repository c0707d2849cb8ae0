"""Keyed running aggregates: Sluice's key-group store against Spark Structured Streaming's
stateful groupBy (update mode).

    .venv/bin/python benchmarks/keyed_throughput.py [--quick] [--master URL | --cluster]
        [--source files|generator] [--map sql|python]

The same query on both, over the same rows (100,000 keys, uniform) in the same rows per
batch: a map (``wh = kwh * 1000``), a filter (Spark SQL on both), then a running count and
sum per key; every batch's updated keys are collected to the driver (the whole output, as
Arrow), and the two systems' final values per key are compared (``outputs_equal``).

- Sluice: ``with_columns(wh=...)`` (or ``map_batches(f)`` with ``--map python``)
  ``.filter(sql).key_by("meter").aggregate(n=count(), total=sum("wh"))``, state in the
  key-group store (Arrow delta files, checksummed), exactly once.
- Spark (the anchor, ``benchmarks.measure.spark_anchor``): ``selectExpr(...)`` (or
  ``mapInArrow(f)``) ``.filter(sql).groupBy("meter").agg(count, sum)``, output mode
  ``update``, through ``foreachBatch``, shuffle partitions = cores, measured on both of its
  state stores (the default HDFS-backed one and RocksDB with changelog checkpointing); the
  faster is the anchor and both are reported.

**Source**: with ``--source files`` (the default) the rows are written once as Parquet
files, one per batch, and both systems read them through their file source (Sluice: a
``directory`` source with ``available_now``; Spark: ``readStream.parquet`` with
``maxFilesPerTrigger`` 1 and ``trigger(availableNow=True)``). ``--source generator`` reads
Sluice's generator on both (Sluice reads it by splits inside its Python worker, Spark
through the JVM): a different path for each, labelled as such in the results.

Both run with the same number of keyed partitions as cores (2) on local[2] (or the master
given; ``--cluster`` starts a Spark standalone cluster of 2 workers x 1 core on this machine,
``runtime.cluster.LocalCluster``, runs there and writes keyed_throughput_cluster.json).

**Max sustained rate**: every batch finds a full backlog and takes exactly
``rows_per_batch`` rows: the throughput of back-to-back batches of a fixed size, measured as
the median over the batches after the warm-up of rows / batch period (a batch's period runs
from its start to the next one's start, so the work between batches counts).

**Latency at one offered rate**: each system again (a run of a fixed number of batches,
from the generator), with the source producing rows at the same rate for both: half the
slower system's max sustained rate; a record's latency is the end of the batch that
processed it (the sink's write) minus its arrival at the source; p50 and p95 over every
record of the steady batches (arrival times come from the source's offsets in Spark's
offset log, which both systems write).

**Profile**: where a Sluice batch's time goes, from the keyed stage's task metrics (input
wait = the exchange's read and the Arrow transfer from the JVM: the map stage before the
exchange, with the source, the map and the filter, is a Spark stage of its own; state
read; kernel; delta write; output), summed over tasks. docs/runtime.md, section 5, reads it.

The machine is shared: the runs alternate the two systems (A B B A A B; a Spark turn runs
both state stores) and the best run of each is kept (3 each in full mode, 1 in quick).
Writes docs/results/keyed_throughput.json and keyed_throughput.png (``_cluster`` in the
names of a cluster run; the file's ``mode`` says quick or full), with the anchor's
configuration, the load average, the cores and the versions; the last line printed is a JSON object with
``ratio`` = Sluice / Spark max sustained rate (Spark's better store).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sluice import Pipeline, agg, sinks, sources
from sluice.runtime.session import spark_session

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import (
    Anchor,
    AnchorResult,
    Record,
    alternating,
    anchor_conf,
    anchor_source,
    retrying,
    spark_batches,
    spark_conf,
    sustained,
    tables_equal,
)

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"
KEYS = 100_000
PARTITIONS = 2
FILTER = "wh >= 0"
SCHEMA = {"meter": "string", "kwh": "double", "wh": "double"}
MAP_SQL = "kwh * 1000.0"
STORES = ("default", "rocksdb")


def to_wh(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The Python map: watt-hours from kilowatt-hours (vectorized over the batch)."""
    return pa.RecordBatch.from_arrays(
        [batch.column("meter"), batch.column("kwh"), pc.multiply(batch.column("kwh"), 1000.0)], names=["meter", "kwh", "wh"]
    )


def make_spec(per_batch: int, total_rows: int | None, rate: float | None, seed: int = 5):
    return sources.generator(
        fields={"meter": sources.Keys(KEYS, prefix="meter-"), "kwh": sources.Normal(0.4, 0.2)},
        total_rows=total_rows,
        rate=rate,
        seed=seed,
        max_rows_per_batch=per_batch,
    )


# ---- the two systems ----------------------------------------------------------------------------
def run_sluice(spark, spec, workdir: str, batches: int | None, how: Setup) -> dict:
    """Until the source ends, or ``batches`` batches."""
    checkpoint = os.path.join(workdir, "sluice")
    shutil.rmtree(checkpoint, ignore_errors=True)
    ends: dict[int, float] = {}
    outputs: dict[int, pa.Table] = {}

    def collect(batch_id, table):
        ends[batch_id] = time.time()
        if how.keep_output:
            outputs[batch_id] = table

    p = Pipeline("keyed_throughput", partitions=how.partitions)
    source = p.source(spec, name="readings")
    mapped = (
        source.map_batches(to_wh, schema=SCHEMA, name="to_wh")
        if how.map == "python"
        else source.with_columns(wh=MAP_SQL, name="to_wh")
    )
    (
        mapped.filter(FILTER, name="valid")
        .key_by("meter")
        .aggregate(n=agg.count(), total=agg.sum("wh"), name="per_meter")
        .sink(sinks.callback(collect), name="out")
    )
    result = p.run(
        checkpoint, spark=spark, stop_when=None if batches is None else (lambda executor: executor.batches_done >= batches)
    )
    data = [m for m in result.metrics if m.rows_in]
    batches = [(m.started_at, m.started_at + m.duration_s, m.rows_in, m.batch_id) for m in data]
    profile: dict[str, float] = {}
    for m in data:
        if "per_meter" in m.operators:
            for name, value in m.operators["per_meter"].figures().items():
                if name.endswith("_s") and name != "slowest_task_s":
                    profile[name] = profile.get(name, 0.0) + value
    chain: dict[str, dict[str, float]] = {}
    for m in data:
        stages = {op: m.operators.get(op) for op in ("to_wh", "valid")}
        stages["per_meter.combine"] = m.operators["per_meter"].combine if "per_meter" in m.operators else None
        for op, stage in stages.items():
            for name, value in stage.figures().items() if stage is not None else ():
                chain.setdefault(op, {})[name] = chain.get(op, {}).get(name, 0.0) + value
    return {
        "batches": batches,
        "ends": ends,
        "offsets": os.path.join(checkpoint, "spark", "offsets"),
        "profile": profile,
        "chain": chain,
        "output_rows": sum(m.sinks["out"].rows for m in data if "out" in m.sinks),
        "final": final_values(outputs) if how.keep_output else None,
    }


def run_spark(spark, spec, workdir: str, batches: int | None, how: Setup, store: str = "default") -> dict:
    """Spark's stateful groupBy on ``store`` ("default" or "rocksdb"), shuffle partitions =
    cores: the anchor (``benchmarks.measure``)."""
    from pyspark.sql import functions as F

    from sluice.runtime.schemas import to_spark
    from sluice.runtime.sources import is_exhausted

    if how.files is not None:
        schema = spark.read.parquet(how.files).schema
        frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(how.files)
        controls = None
        checkpoint = os.path.join(workdir, "spark-checkpoint")
        shutil.rmtree(checkpoint, ignore_errors=True)
    else:
        frame, controls, checkpoint = anchor_source(spark, spec, workdir)
    if how.map == "python":
        schema = to_spark(pa.schema([(n, pa.string() if t == "string" else pa.float64()) for n, t in SCHEMA.items()]))
        mapped = frame.select("meter", "kwh").mapInArrow(lambda batches: map(to_wh, batches), schema)
    else:
        mapped = frame.selectExpr("meter", "kwh", f"{MAP_SQL} AS wh")
    counts = mapped.filter(FILTER).groupBy("meter").agg(F.count(F.lit(1)).alias("n"), F.sum("wh").alias("total"))
    ends: dict[int, float] = {}
    rows: dict[int, int] = {}
    outputs: dict[int, pa.Table] = {}

    def collect(df, batch_id):
        table = df.toArrow()
        rows[batch_id] = table.num_rows
        ends[batch_id] = time.time()
        if how.keep_output:
            outputs[batch_id] = table

    with spark_conf(spark, anchor_conf(store, how.partitions)):
        writer = counts.writeStream.outputMode("update").foreachBatch(collect).option("checkpointLocation", checkpoint)
        if how.files is not None and batches is None:
            query = writer.trigger(availableNow=True).start()
        else:
            query = writer.trigger(processingTime="0 seconds").start()
    try:
        if how.files is not None and batches is None:
            query.awaitTermination()
        else:
            while query.isActive and not (controls and is_exhausted(controls, "readings")):
                if batches is not None and len(ends) >= batches:
                    break
                time.sleep(0.1)
            if batches is None:
                query.processAllAvailable()
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"Spark's query failed: {query.exception()}")
    return {
        "batches": spark_batches(query),
        "ends": ends,
        "offsets": os.path.join(checkpoint, "offsets"),
        "profile": {},
        "output_rows": sum(rows.values()),
        "store": store,
        "final": final_values(outputs) if how.keep_output else None,
    }


def final_values(outputs: dict[int, pa.Table]) -> pa.Table:
    """The last (n, total) emitted per meter: the running aggregate's final state."""
    table = pa.concat_tables([outputs[b].select(["meter", "n", "total"]) for b in sorted(outputs) if outputs[b].num_rows])
    table = table.append_column("_i", pa.array(np.arange(table.num_rows), type=pa.int64()))
    last = table.group_by("meter", use_threads=False).aggregate([("_i", "max")]).column("_i_max")
    return table.take(last).drop_columns(["_i"])


@dataclass(frozen=True)
class Setup:
    """How a run reads and maps: ``files`` (the Parquet files both read, or None: the
    generator), ``map`` ("sql" or "python"), whether to keep the output for the comparison."""

    files: str | None
    map: str
    partitions: int
    keep_output: bool = True


def combined_by_hand(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The Python map, the filter and a combine per meter in one function, written by hand
    (``--headroom``): what the plan's own fusion (the filter in Arrow and the combine at the
    chain's end, docs/runtime.md section 3) is measured against."""
    wh = pc.multiply(batch.column("kwh"), 1000.0)
    rows = pa.table({"meter": batch.column("meter"), "wh": wh}).filter(pc.greater_equal(wh, 0))
    grouped = rows.group_by("meter", use_threads=False).aggregate([([], "count_all"), ("wh", "sum")])
    return pa.RecordBatch.from_arrays(
        [
            grouped.column("meter").combine_chunks(),
            grouped.column("count_all").combine_chunks(),
            grouped.column("wh_sum").combine_chunks(),
        ],
        names=["meter", "n", "wh"],
    )


def run_sluice_headroom(spark, spec, workdir: str, batches: int | None, how: Setup) -> dict:
    """Sluice with the filter and the combine written into the Python map by hand, each task's
    rows in one Arrow batch (so the combine sees all of them): the yardstick for the fusion the
    plan does itself (docs/runtime.md section 5). Not the headline: the user wrote the plan."""
    checkpoint = os.path.join(workdir, "sluice-headroom")
    shutil.rmtree(checkpoint, ignore_errors=True)
    p = Pipeline("keyed_throughput_headroom", partitions=how.partitions)
    (
        p.source(spec, name="readings")
        .map_batches(combined_by_hand, schema={"meter": "string", "n": "int64", "wh": "double"}, name="to_wh")
        .key_by("meter")
        .aggregate(n=agg.sum("n"), total=agg.sum("wh"), name="per_meter")
        .sink(sinks.callback(lambda batch_id, table: None), name="out")
    )
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", str(spec.max_rows_per_batch))
    try:
        result = p.run(
            checkpoint, spark=spark, stop_when=None if batches is None else (lambda executor: executor.batches_done >= batches)
        )
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    data = [m for m in result.metrics if m.rows_in]
    return {
        "batches": [(m.started_at, m.started_at + m.duration_s, m.rows_in, m.batch_id) for m in data],
        "output_rows": sum(m.sinks["out"].rows for m in data if "out" in m.sinks),
    }


RUNNERS = {"sluice": run_sluice, "spark": run_spark, "headroom": run_sluice_headroom}


def write_files(spec, directory: str) -> str:
    """The generator's rows as Parquet files, one per batch (``max_rows_per_batch`` rows),
    for both systems to read through their file sources."""
    import pyarrow.parquet as pq

    shutil.rmtree(directory, ignore_errors=True)
    os.makedirs(directory)
    table = pa.Table.from_batches(list(spec.generate(0, spec.total_rows, 0)))
    per_file = spec.max_rows_per_batch
    for i in range(0, table.num_rows, per_file):
        pq.write_table(table.slice(i, per_file), os.path.join(directory, f"part-{i // per_file:05d}.parquet"))
    return directory


def files_spec(directory: str, per_batch: int):
    """Sluice's source over the files: each read once, one file a batch, then the end."""
    return sources.directory(directory, format="parquet", max_rows_per_batch=per_batch, available_now=True)


# ---- figures ----------------------------------------------------------------------------------
def max_rate(run: dict, warmup: int) -> float:
    return sustained([(start, end, rows) for start, end, rows, _ in run["batches"]], warmup)


def record_latencies(run: dict, warmup: int, rate: float) -> tuple[float, float]:
    """p50 and p95 over the records of the steady batches, in ms: end of their batch minus
    their arrival (row i arrives at start_us + i / rate, its offset says where a batch ends)."""
    from sluice.graph.rates import arrival_us

    steady = sorted(run["batches"])[warmup:]
    samples = []
    for _, _, _, batch_id in steady:
        first, stop, start_us = _row_range(run["offsets"], batch_id)
        if stop <= first or batch_id not in run["ends"]:
            continue
        step = max(1, (stop - first) // 2000)  # 2,000 records a batch are plenty for percentiles
        arrivals = arrival_us(start_us, rate, np.arange(first, stop, step, dtype=np.int64))
        samples.append(run["ends"][batch_id] * 1e6 - arrivals)
    if not samples:
        raise SystemExit("no steady batch to measure latency on: raise --latency-batches")
    all_us = np.concatenate(samples)
    return float(np.percentile(all_us, 50) / 1000), float(np.percentile(all_us, 95) / 1000)


def _row_range(offsets_dir: str, batch_id: int) -> tuple[int, int, int]:
    """(first row, end row, start_us) of one batch, from the source's offsets in Spark's log."""

    def end_offset(b: int) -> dict | None:
        path = os.path.join(offsets_dir, str(b))
        if b < 0 or not os.path.exists(path):
            return None
        lines = open(path).read().splitlines()
        return json.loads(lines[2])

    end = end_offset(batch_id)
    before = end_offset(batch_id - 1)
    return (before["rows"] if before else 0), end["rows"], end["start_us"]


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [1, 1.3]})
    systems = ["sluice", "spark"]
    labels = ["Sluice", "Spark groupBy"]
    ax1.bar(labels, [results[s]["max_rows_per_s"] for s in systems], color=["tab:blue", "tab:orange"])
    for i, s in enumerate(systems):
        runs = results[s]["runs_rows_per_s"]
        ax1.vlines(i, min(runs), max(runs), colors="black", alpha=0.6)
    ax1.set_ylabel("max sustained rate (rows/s)")
    ax1.set_title(f"ratio {results['ratio']:.2f} (bars: every run)", fontsize=10)
    profile = results["sluice"].get("profile_s_per_batch", {})
    if profile:
        names = list(profile)
        ax2.barh(names, [profile[n] for n in names], color="tab:blue")
        ax2.set_xlabel("seconds a batch, summed over its tasks")
        ax2.set_title("Sluice's keyed stage: where a batch's time goes", fontsize=10)
        ax2.invert_yaxis()
    fig.suptitle(f"Keyed running count and sum, {KEYS:,} keys, {results['setup']['master']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


PROFILE_PARTS = {  # keyed-stage task metrics -> what they are
    "input_wait_s": "input (exchange read, Arrow transfer)",
    "state_read_s": "state read and merge",
    "kernel_s": "kernel (key ids, group-by, merge)",
    "delta_write_s": "delta write",
    "output_s": "output (ingest times, cast)",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller batches, one run of each (about 2 minutes)")
    parser.add_argument("--master", default="local[2]", help="Spark master URL (default local[2])")
    parser.add_argument("--rows-per-batch", type=int, default=None)
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=None, help="runs of each system, best kept (1 quick, 3 full)")
    parser.add_argument("--latency-batches", type=int, default=None, help="batches of each half-rate run")
    parser.add_argument(
        "--cluster", action="store_true", help="run on a standalone cluster started here: 2 workers x 1 core (overrides --master)"
    )
    parser.add_argument(
        "--name", default=None, help="results file name (docs/results/NAME.json; default keyed_throughput[_cluster])"
    )
    parser.add_argument("--replot", action="store_true", help="redraw the plot from the results file and stop")
    parser.add_argument(
        "--source",
        choices=("files", "generator"),
        default="files",
        help="both read the same Parquet files (default), or the generator (Sluice by splits)",
    )
    parser.add_argument(
        "--map",
        choices=("sql", "python"),
        default="sql",
        help="the map as SQL on both (default) or as a Python function over Arrow on both",
    )
    parser.add_argument(
        "--headroom",
        action="store_true",
        help="also run Sluice with the filter and a combine written into the map by hand "
        "(the yardstick for the plan's own fusion; reported beside the ratio)",
    )
    args = parser.parse_args(argv)
    # the latest run's results, quick or full (the file says which)
    args.name = args.name or ("keyed_throughput" + ("_cluster" if args.cluster else ""))
    if args.replot:
        plot(json.loads((RESULTS / f"{args.name}.json").read_text()), RESULTS / f"{args.name}.png")
        return 0
    if not args.cluster:
        return benchmark(args)
    from sluice.runtime.cluster import LocalCluster

    with LocalCluster(workers=2, cores=1, memory="2g") as cluster:
        args.master = cluster.master_url
        return benchmark(args)


def benchmark(args: argparse.Namespace) -> int:
    record = Record("keyed_throughput", args.quick)
    per_batch = args.rows_per_batch or (200_000 if args.quick else 400_000)
    n_batches = args.batches or (7 if args.quick else 12)
    repeats = args.repeats or (1 if args.quick else 3)  # one run each swung by a third: quick is a smoke figure
    latency_batches = args.latency_batches or (8 if args.quick else 20)
    warmup = 2
    mode = "quick" if args.quick else "full"
    spark = spark_session(
        args.master,
        "keyed_throughput_benchmark",
        conf={"spark.sql.shuffle.partitions": str(PARTITIONS), "spark.driver.memory": "3g"},
    )
    if not args.master.startswith("local"):  # executors import this directory's helpers too
        from sluice.runtime.shipping import ship_code

        ship_code(spark, __file__)
    workdir = tempfile.mkdtemp(prefix="sluice-keyed-")
    by_files = args.source == "files"
    print(
        f"keyed throughput: running count and sum over {KEYS:,} keys behind a {args.map} map and a filter, "
        f"{n_batches} batches of {per_batch:,} rows from {'Parquet files' if by_files else 'the generator'}, "
        f"{PARTITIONS} partitions on {args.master}, best of {repeats}, Spark on {' and '.join(STORES)} "
        f"({mode} mode)",
        flush=True,
    )

    def setup_for(spec, name: str) -> tuple:
        """(spec Sluice reads, Setup): the files written from ``spec``, or the generator itself."""
        if not by_files:
            return spec, Setup(None, args.map, PARTITIONS)
        directory = write_files(spec, os.path.join(workdir, name))
        return files_spec(directory, per_batch), Setup(directory, args.map, PARTITIONS)

    warm_spec, warm_how = setup_for(make_spec(per_batch, per_batch * 2, None, seed=99), "warm")
    warm_how = replace(warm_how, keep_output=False)
    systems = ["sluice", "spark"] + (["headroom"] if args.headroom else [])
    for system in systems:  # JVM code paths and Python workers warm for each
        retrying(RUNNERS[system], spark, warm_spec, workdir, None, warm_how)

    spec, how = setup_for(make_spec(per_batch, per_batch * n_batches, None), "rows")
    runs: dict[str, list[dict]] = {"sluice": [], **{f"spark_{s}": [] for s in STORES}}
    order = alternating("sluice", "spark", repeats)
    if args.headroom:  # after each Sluice run, so it meets the same machine
        order = [s for system in order for s in ([system, "headroom"] if system == "sluice" else [system])]
    headroom: list[dict] = []
    for system in order:
        for store in STORES if system == "spark" else (None,):
            if store is None:
                run = retrying(RUNNERS[system], spark, spec, workdir, None, how)
            else:
                run = retrying(run_spark, spark, spec, workdir, None, how, store)
            run["rate"] = max_rate(run, warmup)
            if system == "headroom":
                headroom.append(run)
                print(f"  {'(headroom: filter and combine in the map by hand)':<7} {run['rate']:>11,.0f} rows/s", flush=True)
                continue
            label = "sluice" if store is None else f"spark_{store}"
            runs[label].append(run)
            print(
                f"  {label:<14} max sustained {run['rate']:>11,.0f} rows/s ({len(run['batches'])} batches, "
                f"{run['output_rows']:,} rows out)",
                flush=True,
            )
    best = {s: max(rs, key=lambda r: r["rate"]) for s, rs in runs.items()}
    anchor = AnchorResult(
        {s: best[f"spark_{s}"] for s in STORES}, max(STORES, key=lambda s: best[f"spark_{s}"]["rate"]), "rate", PARTITIONS
    )
    best["spark"] = anchor.result
    ratio = best["sluice"]["rate"] / best["spark"]["rate"]
    outputs_equal = all(tables_equal(best["sluice"]["final"], best[f"spark_{s}"]["final"], sort_by=["meter"]) for s in STORES)
    print(f"  anchor: Spark on its {anchor.best} store; final values per key equal on both: {outputs_equal}", flush=True)

    # the same offered rate for both: half the slower one's max sustained rate
    offered = min(best["sluice"]["rate"], best["spark"]["rate"]) / 2
    latency = {}
    latency_how = Setup(None, args.map, PARTITIONS, keep_output=False)
    for system in alternating("sluice", "spark", 1):
        generator = make_spec(per_batch, None, offered, seed=7)
        if system == "sluice":
            run = retrying(run_sluice, spark, generator, workdir, latency_batches, latency_how)
        else:
            run = retrying(run_spark, spark, generator, workdir, latency_batches, latency_how, anchor.best)
        latency[system] = record_latencies(run, warmup, offered)
        print(
            f"  {system:<7} at {offered:>11,.0f} rows/s: latency p50 {latency[system][0]:,.0f} ms, "
            f"p95 {latency[system][1]:,.0f} ms",
            flush=True,
        )

    steady = len(best["sluice"]["batches"])
    profile = {PROFILE_PARTS[k]: round(v / steady, 3) for k, v in best["sluice"]["profile"].items() if k in PROFILE_PARTS}
    results = {
        "benchmark": "keyed_throughput",
        "mode": mode,
        "ratio": round(ratio, 3),
        "setup": {
            "keys": KEYS,
            "rows_per_batch": per_batch,
            "batches": n_batches,
            "warmup_batches": warmup,
            "best_of": repeats,
            "partitions": PARTITIONS,
            "master": args.master,
            "filter": FILTER,
            "map": args.map,
            "source": args.source,
            "max_rate": "fixed rows per batch with a full backlog; median over steady batches of rows / batch period",
            "latency": "per record: end of its batch's sink write - its arrival at the source, both at "
            "half the slower system's max rate (the same offered rate), p50/p95 over the steady "
            "batches, from the generator",
        },
        **{s: {"max_rows_per_s": round(best[s]["rate"]), "runs_rows_per_s": [round(r["rate"]) for r in runs[s]]} for s in runs},
    }
    results["spark"] = {
        "max_rows_per_s": round(best["spark"]["rate"]),
        "store": anchor.best,
        "runs_rows_per_s": results[f"spark_{anchor.best}"]["runs_rows_per_s"],
    }
    for s in ("sluice", "spark"):
        results[s].update(
            {
                "offered_rows_per_s": round(offered),
                "latency_p50_ms": round(latency[s][0], 1),
                "latency_p95_ms": round(latency[s][1], 1),
            }
        )
    results["sluice"]["profile_s_per_batch"] = profile
    if headroom:
        best_headroom = max(r["rate"] for r in headroom)
        results["headroom"] = {
            "what": "Sluice with the filter and a per-task combine written into the Python map by hand: what fusing "
            "them into the chain would buy (not the headline: the user wrote that plan)",
            "max_rows_per_s": round(best_headroom),
            "runs_rows_per_s": [round(r["rate"]) for r in headroom],
            "ratio_to_spark": round(best_headroom / best["spark"]["rate"], 3),
            "ratio_to_sluice": round(best_headroom / best["sluice"]["rate"], 3),
        }
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(results, RESULTS / f"{args.name}.png")
    shutil.rmtree(workdir, ignore_errors=True)
    print("Sluice keyed stage, seconds per batch summed over tasks: " + ", ".join(f"{k} {v}" for k, v in profile.items()))
    record.publish(
        RESULTS / f"{args.name}.json",
        results,
        {
            "benchmark": "keyed_throughput",
            "ratio": round(ratio, 3),
            "master": args.master,
            "sluice_rows_per_s": results["sluice"]["max_rows_per_s"],
            "spark_rows_per_s": results["spark"]["max_rows_per_s"],
            "spark_store": anchor.best,
            **{f"spark_{s}_rows_per_s": results[f"spark_{s}"]["max_rows_per_s"] for s in STORES},
            "sluice_p95_ms": results["sluice"]["latency_p95_ms"],
            "spark_p95_ms": results["spark"]["latency_p95_ms"],
            **({"headroom_ratio": results["headroom"]["ratio_to_spark"]} if headroom else {}),
        },
        anchor=Anchor(
            ran="Spark Structured Streaming's own query, the better of its two state stores",
            formulation="map "
            + (f"in SQL ({MAP_SQL})" if args.map == "sql" else "as mapInArrow (Python)")
            + f", filter {FILTER}, groupBy(meter).agg(count, sum), update mode; source: "
            + (
                "the same Parquet files, readStream.parquet, maxFilesPerTrigger 1, availableNow"
                if by_files
                else "Sluice's generator through the JVM (Sluice reads it by splits in its Python worker)"
            ),
            state_store=f"best of default and rocksdb (changelog checkpointing): {anchor.best}",
            shuffle_partitions=PARTITIONS,
            details=anchor.to_json(),
        ),
        outputs_equal=outputs_equal,
        outputs_compared="the final count and sum per key of Sluice's best run against Spark's on each state store",
        spark=spark,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
