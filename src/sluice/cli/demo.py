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
    p.add_argument(
        "--grid",
        action="store_true",
        help="the smart-grid demand-response demo: alternate forecasters switched as the rate rises and "
        "falls; prints and plots value, cost and profit (docs/dynamic.md)",
    )
    p.add_argument("--peak", type=float, default=None, help="--grid: the trace's peak readings/s (default: calibrated)")
    p.add_argument("--phase", type=float, default=30.0, help="--grid: seconds per phase of the rate trace (default 30)")
    p.add_argument("--policies", default=None, help="--grid: a YAML policies file (default: alternates_by_load)")
    p.add_argument("--plot", default=None, help="--grid: where to write the plot (default: OUTPUT/grid_demo.png)")
    p.set_defaults(func=main)


def grid_main(args) -> int:
    """``sluice demo --grid``."""
    from sluice.examples.grid_demo import plot, print_report, run_grid_demo, save

    output = os.path.abspath(args.output if args.output != ".sluice/demo" else ".sluice/grid")
    print("Sluice smart-grid demo: profiling the forecasters, then a rate that rises and falls ...", flush=True)
    run = run_grid_demo(
        output,
        peak=args.peak,
        phase_s=args.phase,
        policies=args.policies,
        master=args.master,
        keep=args.keep,
        ui=False if args.no_spark_ui else None,
    )
    print_report(run)
    path = args.plot or os.path.join(output, "grid_demo.png")
    plot(run, path)
    save(run, os.path.join(output, "grid_demo.json"))
    print(
        f"\nplot: {path}\nalerts: {os.path.join(output, 'alerts')}\ndecisions: {os.path.join(run.checkpoint, 'decisions.jsonl')}"
    )
    return 0


def main(args) -> int:
    if getattr(args, "grid", False):
        return grid_main(args)
    from sluice.cli.run import progress_display
    from sluice.demo import build_pipeline
    from sluice.runtime.side_outputs import DEAD_LETTER, read_side_output

    output = os.path.abspath(args.output)
    if not args.keep and os.path.exists(output):
        shutil.rmtree(output)
    checkpoint = os.path.join(output, "checkpoint")
    pipeline = build_pipeline(output, rate=args.rate)
    duration = None if args.forever else args.duration
    print(
        f"Sluice demo: smart-meter readings at {args.rate:,.0f}/s on local Spark "
        f"({'until Ctrl-C' if duration is None else f'{duration:.0f} s'}) ...",
        flush=True,
    )
    progress = progress_display()
    result = pipeline.run(
        checkpoint, master=args.master, duration=duration, on_batch=progress, ui=False if args.no_spark_ui else None
    )
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
    print(
        f"  latency (median of batches)  p50 {median(lat['p50']):,.0f} ms   p95 {median(lat['p95']):,.0f} ms"
        f"   p99 {median(lat['p99']):,.0f} ms"
    )
    print(f"  dead letters        {dead} corrupt readings, in {os.path.join(checkpoint, DEAD_LETTER)}")
    print(f"  per-meter stats     {os.path.join(output, 'stats')} (Parquet, one directory per batch)")
    print(f"  spike alerts        {alerts} (JSON lines)")
    print(f"  metrics             {os.path.join(checkpoint, 'metrics.jsonl')}")
    return 0
