"""``sluice demo``: the smart-meter demo on embedded local Spark, then a summary."""

from __future__ import annotations

import os
import shutil


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="run the built-in smart-meter demo on local Spark")
    p.add_argument("--duration", type=float, default=60.0, help="seconds to run (default 60)")
    p.add_argument("--forever", action="store_true", help="run until Ctrl-C")
    p.add_argument("--rate", type=float, default=20_000, help="readings per second (default 20000)")
    p.add_argument("--output", default=".sluice/demo", help="where outputs and checkpoint go")
    p.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    p.add_argument("--keep", action="store_true", help="resume from the previous demo's checkpoint")
    p.add_argument("--no-spark-ui", action="store_true", help="don't serve Spark's UI (default: on, address printed)")
    p.set_defaults(func=main)


def main(args) -> int:
    from sluice.cli.run import progress_display
    from sluice.demo import build_pipeline
    from sluice.runtime.side_outputs import DEAD_LETTER, read_side_output

    output = os.path.abspath(args.output)
    if not args.keep and os.path.exists(output):
        shutil.rmtree(output)
    checkpoint = os.path.join(output, "checkpoint")
    pipeline = build_pipeline(output, rate=args.rate)
    duration = None if args.forever else args.duration
    print(f"Sluice demo: smart-meter readings at {args.rate:,.0f}/s on local Spark "
          f"({'until Ctrl-C' if duration is None else f'{duration:.0f} s'}) ...", flush=True)
    progress = progress_display()
    result = pipeline.run(checkpoint, master=args.master, duration=duration, on_batch=progress,
                          ui=False if args.no_spark_ui else None)
    progress.close()

    mine = [m for m in result.metrics if m.rows_in]
    lat = {p: sorted(m.latency_ms.get(p, 0) for m in mine) for p in ("p50", "p95", "p99")}

    def median(xs):
        return xs[len(xs) // 2] if xs else float("nan")

    dead = len(read_side_output(checkpoint, DEAD_LETTER))
    alerts = os.path.join(output, "alerts")
    print()
    print("Summary")
    print(f"  rows processed      {result.rows_in:,} in {result.batches} micro-batches")
    print(f"  throughput          {result.throughput:,.0f} rows/s over {result.elapsed_s:.1f} s")
    print(f"  latency (median of batches)  p50 {median(lat['p50']):,.0f} ms   p95 {median(lat['p95']):,.0f} ms"
          f"   p99 {median(lat['p99']):,.0f} ms")
    print(f"  dead letters        {dead} corrupt readings, in {os.path.join(checkpoint, DEAD_LETTER)}")
    print(f"  per-meter stats     {os.path.join(output, 'stats')} (Parquet, one directory per batch)")
    print(f"  spike alerts        {alerts} (JSON lines)")
    print(f"  metrics             {os.path.join(checkpoint, 'metrics.jsonl')}")
    return 0
