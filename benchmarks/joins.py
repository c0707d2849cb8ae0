"""Stream-stream interval join: Sluice's join kernel against Spark Structured Streaming's
stream-stream join with watermarks and a time-range condition.

    .venv/bin/python benchmarks/joins.py [--quick]

The same inner join of two keyed streams on event time, over the same two generator
sources (unthrottled, the same rows per batch from each, records up to the watermark delay
out of order):

- Sluice: ``left.key_by("meter").join(right.key_by("meter"), between=("-2s", "+1s"))``: both
  sides routed as one tagged union by the key groups' routing table, each side's records
  buffered per key in the key-group store, matched by a sort and binary searches in numpy;
- Spark: ``l.withWatermark("ts", d).join(r.withWatermark("ts", d), "l.meter = r.meter AND
  r.ts BETWEEN l.ts - 2s AND l.ts + 1s")``: Spark's symmetric hash join, its state in the
  state store, evicted by the watermark and the time range. Each Spark run measures both of
  its state stores (the default HDFS-backed one and RocksDB with changelog checkpointing,
  ``measure.spark_anchor``) and the better one is the anchor.

Both use 2 shuffle/keyed partitions on local[2] and collect their output rows (the row
numbers of both sides) to the driver every batch. Throughput is sustained throughput: the
median over the batches after the warm-up of input rows (both sides) / batch period.

State is compared in the same units on both sides:

- **rows held**: the records buffered in the join's state, both sides together, the most
  over the batches (Spark: ``numRowsTotal`` of its join operator, the rows of its
  key-with-index-to-value stores; Sluice: the join's ``buffered`` records);
- **bytes on disk** of each checkpoint's state directory (``<checkpoint>/state/``; Spark:
  its state store's delta and snapshot files; Sluice: its key-group store's Arrow IPC
  deltas, snapshots and records), sampled four times a second while the query runs (the
  peak) and once after it stops (the end), every version each keeps for recovery included.

Spark's ``memoryUsedBytes`` (its state in the JVM for the default store, RocksDB's estimate
for RocksDB) is reported beside, labelled; Sluice's memory for state (its workers' cache of
state files) is not measured, so it has no counterpart. The results must be equal: the benchmark compares the two sets of
(left row, right row) pairs and exits non-zero if they differ.

The machine is shared, so full mode runs each system three times, alternating (A, B, B, A,
A, B), and keeps the best run of each.

Writes docs/results/joins.json; the last line printed is a JSON object whose ``ratio`` is
Sluice's throughput over Spark's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Self

import numpy as np

from sluice import Pipeline, sinks, sources
from sluice.runtime.session import spark_session

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import Anchor, Record, alternating, best_anchor, spark_anchor, spark_batches, sustained

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
START = 1_760_000_000.0
PARTITIONS = 2
LOWER_S, UPPER_S = -2, 1  # right.ts - left.ts within [LOWER_S, UPPER_S] seconds


def make_spec(side: str, keys: int, rows: int, per_batch: int, span_s: float, delay_s: float, seed: int):
    """One side: ``per_batch`` rows span ``span_s`` s of event time, up to ``delay_s`` out of order."""
    return sources.generator(
        fields={
            "meter": sources.Keys(keys, prefix="meter-"),
            f"{side}_row": sources.Sequence(),
            "ts": sources.EventTime(jitter=delay_s, step=span_s / per_batch),
        },
        total_rows=rows,
        seed=seed,
        start_time=START,
        max_rows_per_batch=per_batch,
        watermark_delay=delay_s,
    )


def dir_bytes(path: str) -> int:
    """Bytes of the files under ``path`` (0 if it does not exist yet); files that vanish while
    it walks (a compaction, Spark's maintenance) are skipped."""
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


class DiskSampler:
    """The most bytes a directory held, sampled every ``interval`` s on a thread while a query
    runs (a walk of a few hundred files: no measurable cost to either system)."""

    def __init__(self, path: str, interval: float = 0.25):
        self.path, self.interval, self.peak = path, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, dir_bytes(self.path))

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, dir_bytes(self.path))


def pair_codes(table, left: str, right: str, n: int) -> np.ndarray:
    """Each output row's (left row, right row) as one int64."""
    return np.asarray(table[left].to_numpy(), np.int64) * n + np.asarray(table[right].to_numpy(), np.int64)


def run_sluice(spark, specs, workdir: str, warmup: int, n: int) -> dict:
    checkpoint = os.path.join(workdir, "sluice")
    shutil.rmtree(checkpoint, ignore_errors=True)
    p = Pipeline("joins_benchmark", partitions=PARTITIONS)
    left = p.source(specs[0], name="left").key_by("meter")
    right = p.source(specs[1], name="right").key_by("meter")
    pairs: list[np.ndarray] = []
    left.join(right, between=(LOWER_S, UPPER_S), name="join").sink(
        sinks.callback(lambda batch_id, table: pairs.append(pair_codes(table, "left_row", "right_row", n)))
    )
    state_dir = os.path.join(checkpoint, "state")  # the key-group store
    with DiskSampler(state_dir) as disk:
        result = p.run(checkpoint, spark=spark)
    data = [m for m in result.metrics if m.rows_in]  # the end-of-input batch has no Spark twin
    batches = [(m.started_at, m.started_at + m.duration_s, m.rows_in) for m in data]
    state_bytes = max((m.key_groups["join"].total_state_bytes for m in result.metrics if "join" in m.key_groups), default=0)
    buffered = max((m.operators.get("join", {}).get("buffered", 0) for m in result.metrics), default=0)
    return {
        "throughput": sustained(batches, warmup),
        "batches": len(batches),
        "state_rows": int(buffered),
        "state_disk_peak_bytes": disk.peak,
        "state_disk_end_bytes": dir_bytes(state_dir),
        "state_committed_bytes": int(state_bytes),  # the live key groups' bytes the store reports
        "pairs": np.sort(np.concatenate(pairs)) if pairs else np.zeros(0, np.int64),
    }


def run_spark(spark, specs, workdir: str, warmup: int, n: int) -> dict:
    """Spark's stream-stream inner join with watermarks and a time-range condition."""
    from pyspark.sql import functions as F

    from sluice.runtime.sources import is_exhausted, open_stream, set_max_rows

    controls = os.path.join(workdir, "spark-sources")
    checkpoint = os.path.join(workdir, "spark-checkpoint")
    for d in (controls, checkpoint):
        shutil.rmtree(d, ignore_errors=True)
    delay_ms = int(specs[0].watermark_delay * 1000)
    frames = []
    for name, spec in zip(("left", "right"), specs):
        set_max_rows(controls, name, spec.max_rows_per_batch)
        frame = open_stream(spark, spec, controls, name).withWatermark("ts", f"{delay_ms} milliseconds")
        frames.append(frame.selectExpr(f"meter AS {name}_meter", f"{name}_row", f"ts AS {name}_ts"))
    joined = (
        frames[0]
        .join(
            frames[1],
            F.expr(
                f"left_meter = right_meter AND right_ts >= left_ts - INTERVAL {-LOWER_S} SECONDS "
                f"AND right_ts <= left_ts + INTERVAL {UPPER_S} SECONDS"
            ),
        )
        .select("left_row", "right_row")
    )
    pairs: list[np.ndarray] = []

    def collect(df, batch_id):
        pairs.append(pair_codes(df.toArrow(), "left_row", "right_row", n))

    state_dir = os.path.join(checkpoint, "state")  # Spark's state store files
    with DiskSampler(state_dir) as disk:
        query = (
            joined.writeStream.outputMode("append")
            .foreachBatch(collect)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            while query.isActive and not (is_exhausted(controls, "left") and is_exhausted(controls, "right")):
                time.sleep(0.1)
            query.processAllAvailable()
        finally:
            query.stop()
    batches = [(start, end, rows) for start, end, rows, _ in spark_batches(query)]
    states = [op for progress in query.recentProgress for op in progress.get("stateOperators", [])]
    return {
        "throughput": sustained(batches, warmup),
        "batches": len(batches),
        "state_rows": max((op["numRowsTotal"] for op in states), default=0),
        "state_disk_peak_bytes": disk.peak,
        "state_disk_end_bytes": dir_bytes(state_dir),
        "state_memory_bytes": max((op["memoryUsedBytes"] for op in states), default=0),
        "pairs": np.sort(np.concatenate(pairs)) if pairs else np.zeros(0, np.int64),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller batches and fewer of them (a few minutes)")
    parser.add_argument("--keys", type=int, default=50_000, help="distinct meters (keys)")
    parser.add_argument("--rows-per-batch", type=int, default=None, help="rows per batch of each side")
    parser.add_argument("--batches", type=int, default=None)
    parser.add_argument(
        "--repeats", type=int, choices=(1, 2, 3), default=None, help="runs of each system, best kept (default: 1 quick, 3 full)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "joins.json", help="results file")
    args = parser.parse_args(argv)
    record = Record("joins", args.quick)
    per_batch = args.rows_per_batch or (50_000 if args.quick else 150_000)
    n_batches = args.batches or (8 if args.quick else 14)
    repeats = args.repeats or (1 if args.quick else 3)
    warmup = 3
    span_s, delay_s = 10.0, 2.0
    rows = per_batch * n_batches
    spark = spark_session(
        "local[2]", "joins_benchmark", conf={"spark.sql.shuffle.partitions": str(PARTITIONS), "spark.driver.memory": "3g"}
    )
    workdir = tempfile.mkdtemp(prefix="sluice-joins-")
    n = rows + 1  # pair codes: left row * n + right row

    def specs(total: int, seed: int):
        return (
            make_spec("left", args.keys, total, per_batch, span_s, delay_s, seed),
            make_spec("right", args.keys, total, per_batch, span_s, delay_s, seed + 1),
        )

    mode = "quick" if args.quick else "full"
    print(
        f"interval join: {args.keys} keys, {n_batches} batches of {per_batch:,} rows per side "
        f"({span_s:g} s of event time each, watermark delay {delay_s:g} s), right.ts - left.ts in "
        f"[{LOWER_S}s, {UPPER_S}s], {PARTITIONS} partitions on local[2] ({mode} mode)",
        flush=True,
    )
    warm = specs(per_batch * 3, 99)  # JVM code paths and Python workers, for both
    run_sluice(spark, warm, workdir, 1, per_batch * 3 + 1)
    run_spark(spark, warm, workdir, 1, per_batch * 3 + 1)
    runs: dict[str, list[dict]] = {"sluice": [], "spark": []}
    anchors = []
    for system in alternating("sluice", "spark", repeats):
        if system == "sluice":
            done = {"sluice": run_sluice(spark, specs(rows, 1), workdir, warmup, n)}
            runs["sluice"].append(done["sluice"])
        else:  # Spark on each of its state stores (shuffle partitions = PARTITIONS)
            anchor = spark_anchor(spark, lambda store: run_spark(spark, specs(rows, 1), workdir, warmup, n), n_cores=PARTITIONS)
            anchors.append(anchor)
            done = {f"spark {store}": r for store, r in anchor.runs.items()}
            runs["spark"].extend(anchor.runs.values())
        for name, r in done.items():
            print(
                f"  {name:>14}: {r['throughput']:>10,.0f} rows/s, {len(r['pairs']):,} pairs, state "
                f"{r['state_rows']:,} rows held, {r['state_disk_peak_bytes']:,} bytes on disk at peak "
                f"({r['state_disk_end_bytes']:,} at the end)",
                flush=True,
            )
    best = best_anchor(anchors)
    sluice, native = max(runs["sluice"], key=lambda r: r["throughput"]), best.result
    equal = all(np.array_equal(r["pairs"], native["pairs"]) for r in runs["sluice"] + runs["spark"])
    ratio = sluice["throughput"] / native["throughput"]
    results = {
        "benchmark": "joins",
        "mode": mode,
        "setup": {
            "keys": args.keys,
            "rows_per_batch_per_side": per_batch,
            "batches": n_batches,
            "warmup_batches": warmup,
            "repeats_best_of": repeats,
            "event_span_per_batch_s": span_s,
            "watermark_delay_s": delay_s,
            "between_s": [LOWER_S, UPPER_S],
            "partitions": PARTITIONS,
            "master": "local[2]",
            "join": "inner, interval (time-range condition)",
            "throughput": "median over steady batches of input rows (both sides) / batch period",
        },
        "sluice_rows_per_s": round(sluice["throughput"]),
        "spark_rows_per_s": round(native["throughput"]),
        "sluice_runs_rows_per_s": [round(r["throughput"]) for r in runs["sluice"]],
        "spark_runs_rows_per_s": [round(r["throughput"]) for r in runs["spark"]],
        "ratio": round(ratio, 3),
        "pairs": len(native["pairs"]),
        "state": {
            "rows_held": {"sluice": sluice["state_rows"], "spark": native["state_rows"]},
            "disk_bytes_peak": {"sluice": sluice["state_disk_peak_bytes"], "spark": native["state_disk_peak_bytes"]},
            "disk_bytes_end": {"sluice": sluice["state_disk_end_bytes"], "spark": native["state_disk_end_bytes"]},
            "spark_by_store": {
                store: {k: r[k] for k in ("state_rows", "state_disk_peak_bytes", "state_disk_end_bytes", "state_memory_bytes")}
                for store, r in best.runs.items()
            },
            "sluice_committed_bytes": sluice["state_committed_bytes"],
            "spark_memory_bytes": native["state_memory_bytes"],
            "units": "rows_held: records buffered in the join's state, both sides, most over the batches (Spark: "
            "numRowsTotal of the join; Sluice: the join's buffered records). disk_bytes_*: bytes of the files under "
            "<checkpoint>/state/ (Spark: its state store's deltas and snapshots; Sluice: its key-group store), "
            "sampled four times a second while the query ran (peak) and after it stopped (end), every version kept for "
            "recovery included. sluice_committed_bytes: the live key groups' bytes Sluice's store reports; "
            "spark_memory_bytes: Spark's memoryUsedBytes (JVM memory for the default store, RocksDB's estimate "
            "for RocksDB), no Sluice counterpart (its workers' cache of state files is not measured)",
        },
        "spark_store": best.best,
        **{f"spark_{store}_rows_per_s": round(r["throughput"]) for store, r in best.runs.items()},
    }
    shutil.rmtree(workdir, ignore_errors=True)
    record.publish(
        args.out,
        results,
        {"benchmark": "joins"}
        | {
            k: results[k]
            for k in (
                "ratio",
                "sluice_rows_per_s",
                "spark_rows_per_s",
                "spark_store",
                "pairs",
            )
        }
        | {
            "sluice_state_rows": sluice["state_rows"],
            "spark_state_rows": native["state_rows"],
            "sluice_state_disk_bytes": sluice["state_disk_peak_bytes"],
            "spark_state_disk_bytes": native["state_disk_peak_bytes"],
        },
        anchor=Anchor(
            ran="Spark Structured Streaming's stream-stream join, the better of its two state stores",
            formulation="l.withWatermark(ts).join(r.withWatermark(ts), meter equal and r.ts between l.ts - 2 s and "
            "l.ts + 1 s), append mode, foreachBatch collecting the pairs; the same generator sources (Spark "
            "reads them through the JVM, Sluice by splits in its Python worker)",
            state_store=f"best of default and rocksdb (changelog checkpointing): {best.best}",
            shuffle_partitions=PARTITIONS,
            details=best.to_json(),
        ),
        outputs_equal=equal,
        spark=spark,
        outputs_compared="the (left row, right row) pairs of every run of both systems, on every Spark state store",
    )
    if not equal:
        print("the two systems' join results differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
