"""Nexmark on Sluice and on Spark Structured Streaming, each query's result checked against
DuckDB over the same events.

    .venv/bin/python -m benchmarks.nexmark [--quick] [--events N] [--queries q0,q5] [--out FILE]

The generator (``benchmarks.nexmark.generator``) writes the events once as Parquet files;
both engines read those files as a stream, one file per micro-batch, and the run ends when
the files are done (Spark: ``trigger(availableNow=True)``; Sluice: a finite source, which
ends with its end-of-input batch). A sentinel event two days after the last one moves both
engines' watermarks past every window, so windows are emitted by both.

- **Spark**: SQL expressions and DataFrames, shuffle partitions = cores; a stateful query
  runs on both of Spark's state stores (the default HDFS-backed one and RocksDB with
  changelog checkpointing: ``benchmarks.measure.spark_anchor``) and keeps the faster.
- **Sluice**: the query in Sluice's API (``queries.SLUICE``), keyed partitions = cores.
- **Reference**: DuckDB SQL over the same files; an engine's output stream is reduced to its
  final result (``queries.Query.mode``) and compared value for value.

Rate: events / processing time per core, the processing time running from the start of the
first micro-batch to the end of the last (so both engines' start-up before their first batch
is left out, and every batch, the end-of-input one included, is in); the whole run's wall
time is reported beside it. Best of ``--repeats`` runs (quick: 1). One unmeasured run of q0 on
each engine warms both first, and the engines take turns going first, query by query.

The last line printed is one JSON object: ``expressed`` and ``correct`` (counts over q0-q22
for Sluice), ``queries`` (per query: each engine's events/s per core and correctness, or the
reason it cannot express the query), the configuration and the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from benchmarks.measure import Anchor, Record, spark_anchor, tables_equal
from benchmarks.nexmark import queries as Q
from benchmarks.nexmark.generator import Config, write

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"


# ---- data -------------------------------------------------------------------------------


def prepare(cfg: Config, data_dir: Path) -> tuple[Path, str]:
    events = write(cfg, data_dir / "events")
    side = data_dir / "side_input.parquet"
    if not side.exists():
        keys = pa.array(range(Q.SIDE_KEYS), type=pa.int64())
        pq.write_table(pa.table({"key": keys, "value": pa.array([f"value-{k}" for k in range(Q.SIDE_KEYS)])}), side)
    return events, str(side)


def reference(query: Q.Query, events: Path, side: str) -> pa.Table:
    import duckdb

    con = duckdb.connect()
    Q.duckdb_views(con, str(events / "events-*.parquet"), side)
    return con.execute(query.reference).fetch_arrow_table()


# ---- reducing an output stream to its result ----------------------------------------------


def _latest(table: pa.Table, keys: list[str]) -> pa.Table:
    """The last row per key (rows in emission order)."""
    table = table.append_column("_i", pa.array(range(table.num_rows), type=pa.int64()))
    last = table.group_by(keys, use_threads=False).aggregate([("_i", "max")]).column("_i_max")
    return table.take(last).drop_columns(["_i"])


def result_of(query: Q.Query, stream: pa.Table) -> pa.Table:
    """An engine's output stream (its batches in order, ``_batch`` numbering them) reduced to
    what the reference computes."""
    import pyarrow.compute as pc

    if query.mode == "latest":
        stream = _latest(stream, list(query.keys))
    elif query.mode == "top":
        newest = stream.group_by(list(query.keys)).aggregate([("_batch", "max")])
        stream = stream.join(newest, list(query.keys)).filter(pc.equal(pc.field("_batch"), pc.field("_batch_max")))
    elif query.mode == "totals":
        windows = _latest(stream, [*query.keys, "window_start"])
        stream = windows.group_by(list(query.keys)).aggregate([("bid_count", "sum")]).rename_columns([*query.keys, "bid_count"])
    return stream.select(list(query.columns))


def _stack(batches: dict[int, pa.Table]) -> pa.Table | None:
    tables = [
        t.append_column("_batch", pa.array([b] * t.num_rows, type=pa.int64())) for b, t in sorted(batches.items()) if t.num_rows
    ]
    if not tables:
        return None
    return pa.concat_tables(tables, promote_options="permissive")


def check(query: Q.Query, batches: dict[int, pa.Table], expected: pa.Table) -> tuple[bool, str]:
    stream = _stack(batches)
    if stream is None:
        return expected.num_rows == 0, f"no output (expected {expected.num_rows} rows)"
    missing = [c for c in query.columns if c not in stream.column_names]
    if missing:
        return False, f"output lacks columns {missing} (has {stream.column_names})"
    got = result_of(query, stream)
    equal = tables_equal(got, expected.select(list(query.columns)))
    return equal, f"{got.num_rows} rows, expected {expected.num_rows}"


# ---- Spark ----------------------------------------------------------------------------------


def run_spark(spark, query: Q.Query, cfg: Config, events: Path, side: str, workdir: str, store: str) -> dict:
    schema = spark.read.parquet(str(events)).schema
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(events))
    if query.event_time:
        stream = stream.withWatermark("dateTime", f"{int(cfg.out_of_order_s * 1000)} milliseconds")
    frame, mode = query.spark(stream, side)
    batches: dict[int, pa.Table] = {}

    def collect(df, batch_id):
        batches[batch_id] = df.toArrow()

    checkpoint = os.path.join(workdir, f"spark-{query.name}-{store}")
    shutil.rmtree(checkpoint, ignore_errors=True)
    started = time.time()
    q = (
        frame.writeStream.outputMode(mode)
        .foreachBatch(collect)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    wall = time.time() - started
    progress = [(start, end) for start, end, *_ in _all_batches(q)]
    processing = max(e for _, e in progress) - min(s for s, _ in progress)
    return {
        "processing_s": processing,
        "wall_s": wall,
        "batches": batches,
        "micro_batches": len(progress),
        "rate": cfg.events / processing,
    }


def _all_batches(query) -> list[tuple[float, float]]:
    """(start, end) of every batch in a Spark query's progress, with or without rows."""
    from benchmarks.measure import parse_time

    out = []
    for progress in query.recentProgress:
        start = parse_time(progress["timestamp"])
        out.append((start, start + progress["durationMs"]["triggerExecution"] / 1000))
    return out


# ---- Sluice ---------------------------------------------------------------------------------


def events_source(cfg: Config, events: Path, kind: str):
    """Sluice's source over the event files: a ``directory`` that reads the files there and
    ends (``available_now``), one file a batch; or a ``replay`` of them (read by the first
    Python operator's task itself), one file's worth of rows a batch."""
    from sluice import sources

    per_file = -(-(cfg.events + 1) // cfg.files)
    if kind == "directory":
        return sources.directory(
            str(events),
            format="parquet",
            event_time="dateTime",
            watermark_delay=cfg.out_of_order_s,
            max_rows_per_batch=per_file,
            available_now=True,
        )
    return sources.replay(
        str(events), format="parquet", event_time="dateTime", watermark_delay=cfg.out_of_order_s, max_rows_per_batch=per_file
    )


def run_sluice(spark, query: Q.Query, cfg: Config, events: Path, ctx: Q.Context, workdir: str, n_cores: int, source: str) -> dict:
    import sluice
    from sluice import sinks

    batches: dict[int, pa.Table] = {}

    def collect(batch_id, table):
        batches[batch_id] = table

    p = sluice.Pipeline(f"nexmark_{query.name}", partitions=n_cores)
    stream = p.source(events_source(cfg, events, source), name="events")
    query.sluice(stream, ctx).sink(sinks.callback(collect), name="out")
    checkpoint = os.path.join(workdir, f"sluice-{query.name}")
    shutil.rmtree(checkpoint, ignore_errors=True)
    started = time.time()
    result = p.run(checkpoint, spark=spark, ui=False)
    wall = time.time() - started
    spans = [(m.started_at, m.started_at + m.duration_s) for m in result.metrics]
    processing = max(e for _, e in spans) - min(s for s, _ in spans)
    return {
        "processing_s": processing,
        "wall_s": wall,
        "batches": batches,
        "micro_batches": len(spans),
        "rate": cfg.events / processing,
        "late": result.late_records,
        "dead_letters": result.dead_letters,
    }


# ---- the run ----------------------------------------------------------------------------------


def _summary(run: dict, n_cores: int, ok: bool, why: str) -> dict:
    return {
        "events_per_s_per_core": round(run["rate"] / n_cores),
        "events_per_s": round(run["rate"]),
        "processing_s": round(run["processing_s"], 2),
        "wall_s": round(run["wall_s"], 2),
        "micro_batches": run["micro_batches"],
        "correct": ok,
        "check": why,
    }


def _best(runs: list[dict]) -> dict:
    return max(runs, key=lambda r: r["rate"])


def markdown_table(summary: dict) -> str:
    """The results as a Markdown table: per query, each engine's events/s per core and
    whether its result equals the reference (or why it cannot express the query)."""

    def cell(r: dict | None) -> str:
        if not r:
            return "-"
        if not r.get("expressed"):
            return "not expressible"
        if "error" in r:
            return "failed"
        mark = "" if r.get("correct") else " (wrong)"
        return f"{r['events_per_s_per_core']:,}{mark}"

    lines = ["| query | | Sluice | Spark (best store) | Spark store | Sluice / Spark |", "|---|---|---|---|---|---|"]
    for name, row in summary["queries"].items():
        sl, sp = row.get("sluice"), row.get("spark")
        ratio = ""
        if sl and sp and sl.get("correct") and sp.get("correct"):
            ratio = f"{sl['events_per_s_per_core'] / sp['events_per_s_per_core']:.2f}"
        lines.append(f"| {name} | {row['title']} | {cell(sl)} | {cell(sp)} | {(sp or {}).get('best_store', '')} | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 events in 5 files, one run of each (a few minutes)")
    parser.add_argument("--events", type=int, default=None, help="events (default: 100,000 quick, 2,000,000 full)")
    parser.add_argument("--files", type=int, default=None, help="Parquet files = micro-batches (default: 5 quick, 10 full)")
    parser.add_argument("--queries", default=None, help="comma-separated, e.g. q0,q5 (default: all)")
    parser.add_argument("--engines", default="sluice,spark")
    parser.add_argument(
        "--sluice-source",
        choices=("directory", "replay"),
        default="directory",
        help="Sluice reads the files as a finite directory source (default) or replays them",
    )
    parser.add_argument("--repeats", type=int, default=None, help="runs of each (engine, query), best kept")
    parser.add_argument("--data", default=None, help="where the events are written (kept for reuse)")
    parser.add_argument("--out", default=None, help="the results file (default docs/results/nexmark.json; none with --queries)")
    parser.add_argument("--table", default=None, help="print a results file as a Markdown table and stop")
    args = parser.parse_args(argv)
    if args.table:
        print(markdown_table(json.loads(Path(args.table).read_text())))
        return 0
    events_n = args.events or (100_000 if args.quick else 2_000_000)
    repeats = args.repeats or (1 if args.quick else 2)
    cfg = Config(events=events_n, files=args.files or (5 if args.quick else 10))
    engines = args.engines.split(",")
    wanted = set(args.queries.split(",")) if args.queries else None
    # the Python workers Spark starts import the queries' functions from this checkout
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    record = Record("nexmark", args.quick)
    data_dir = Path(args.data or os.path.join(tempfile.gettempdir(), f"nexmark-{events_n}"))
    t0 = time.time()
    events, side = prepare(cfg, data_dir)
    print(
        f"nexmark: {events_n:,} events in {cfg.files} files under {events} ({time.time() - t0:.1f} s), "
        f"{cfg.event_rate:g} events/s of event time, out-of-orderness {cfg.out_of_order_s:g} s",
        flush=True,
    )

    from sluice.runtime.session import spark_session

    spark = spark_session("local[2]", "nexmark", conf={"spark.driver.memory": "3g"})
    n_cores = int(spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(n_cores))
    ctx = Q.Context(cfg, side, Q.join_bounds(cfg))
    workdir = tempfile.mkdtemp(prefix="nexmark-")
    out: dict[str, dict] = {}
    # one unmeasured run of q0 on each engine first: the JVM's code paths and the Python
    # workers are warm before the first measured query, for both
    q0 = Q.all_queries()[0]
    if "sluice" in engines:
        run_sluice(spark, q0, cfg, events, ctx, workdir, n_cores, args.sluice_source)
    if "spark" in engines:
        run_spark(spark, q0, cfg, events, side, workdir, "default")
    for i, query in enumerate(Q.all_queries()):
        if wanted and query.name not in wanted:
            continue
        expected = reference(query, events, side)
        row: dict = {"title": query.title, "reference_rows": expected.num_rows}
        for engine in engines if i % 2 == 0 else engines[::-1]:  # neither engine always first
            if engine not in ("sluice", "spark"):
                raise SystemExit(f"unknown engine {engine!r}: sluice or spark")
            build = query.sluice if engine == "sluice" else query.spark
            if build is None:
                row[engine] = {"expressed": False, "gap": query.sluice_gap if engine == "sluice" else query.spark_gap}
                continue
            try:
                if engine == "sluice":
                    runs = [
                        run_sluice(spark, query, cfg, events, ctx, workdir, n_cores, args.sluice_source) for _ in range(repeats)
                    ]
                    best = _best(runs)
                    ok, why = check(query, best["batches"], expected)
                    row[engine] = {
                        "expressed": True,
                        **_summary(best, n_cores, ok, why),
                        "late": best["late"],
                        "dead_letters": best["dead_letters"],
                    }
                else:
                    anchors = []
                    for _ in range(repeats):
                        anchors.append(
                            spark_anchor(
                                spark,
                                lambda store, query=query: run_spark(spark, query, cfg, events, side, workdir, store),
                                rate_key="rate",
                                stateful=query.stateful,
                                n_cores=n_cores,
                            )
                        )
                    stores = {s: r for a in anchors for s, r in a.runs.items()}
                    for a in anchors:
                        for s, r in a.runs.items():
                            stores[s] = max(stores[s], r, key=lambda x: x["rate"])
                    best_store = max(stores, key=lambda s: stores[s]["rate"])
                    best = stores[best_store]
                    ok, why = check(query, best["batches"], expected)
                    row[engine] = {
                        "expressed": True,
                        **_summary(best, n_cores, ok, why),
                        "best_store": best_store,
                        "stores": {s: round(r["rate"] / n_cores) for s, r in stores.items()},
                    }
            except Exception as exc:  # a query an engine refuses or fails is a result, not the end of the run
                text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
                row[engine] = {"expressed": True, "correct": False, "error": " ".join(text)[:600]}
                traceback.print_exc(limit=3)
        out[query.name] = row
        print(json.dumps({query.name: row}), flush=True)
    shutil.rmtree(workdir, ignore_errors=True)

    sluice_rows = [r.get("sluice", {}) for r in out.values()]
    both = [
        r["sluice"]["events_per_s"] / r["spark"]["events_per_s"]
        for r in out.values()
        if r.get("sluice", {}).get("correct") and r.get("spark", {}).get("correct") and r["spark"].get("events_per_s")
    ]
    summary = {
        "benchmark": "nexmark",
        "ratio": round(math.exp(sum(math.log(x) for x in both) / len(both)), 3) if both else None,
        "ratio_is": "geometric mean over the queries both engines ran correctly of Sluice's events/s over Spark's",
        "expressed": sum(1 for r in sluice_rows if r.get("expressed")),
        "correct": sum(1 for r in sluice_rows if r.get("correct")),
        "spark_expressed": sum(1 for r in out.values() if r.get("spark", {}).get("expressed")),
        "spark_correct": sum(1 for r in out.values() if r.get("spark", {}).get("correct")),
        "queries": out,
        "sluice": {
            "source": f"the same Parquet files, one file a batch: a {args.sluice_source} source"
            + (" (available_now)" if args.sluice_source == "directory" else ""),
            "partitions": n_cores,
        },
        "events": {
            "count": events_n,
            "files": cfg.files,
            "event_rate": cfg.event_rate,
            "out_of_order_s": cfg.out_of_order_s,
            "seed": cfg.seed,
        },
        "rate": f"events / processing time (first batch start to last batch end) / cores; best of {repeats} run(s)",
    }
    path = Path(args.out) if args.out else (None if wanted else ROOT / "docs" / "results" / "nexmark.json")
    record.publish(
        path,
        summary,
        summary,
        anchor=Anchor(
            ran="Spark Structured Streaming, each query in SQL and DataFrames, the better of its two state stores "
            "for a stateful query",
            formulation=f"the same Parquet files, readStream.parquet, maxFilesPerTrigger 1, availableNow; "
            f"watermark delay {cfg.out_of_order_s:g} s",
            state_store="best of default and rocksdb (changelog checkpointing), per query (see each query's best_store)",
            shuffle_partitions=n_cores,
        ),
        outputs_equal=all(
            bool(r.get("correct")) for row in out.values() for e, r in row.items() if e in engines and r.get("expressed")
        ),
        outputs_compared="every engine's result of every query it expresses against DuckDB's over the same events",
        spark=spark,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
