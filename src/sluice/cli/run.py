"""``sluice run PIPELINE.py``: run the ``pipeline`` a Python file defines."""

from __future__ import annotations

import os
import runpy

from sluice.errors import ConfigError


def load_pipeline(path: str):
    """The ``pipeline`` variable of a Python file (a sluice.Pipeline)."""
    from sluice.api import Pipeline

    if not os.path.exists(path):
        raise ConfigError(f"no such pipeline file: {path}")
    namespace = runpy.run_path(path, run_name="__sluice__")
    pipeline = namespace.get("pipeline")
    if not isinstance(pipeline, Pipeline):
        raise ConfigError(f"{path} must define a variable `pipeline` holding a sluice.Pipeline")
    return pipeline


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run a pipeline file on Spark")
    p.add_argument("pipeline", help="a Python file that defines `pipeline`")
    p.add_argument("--checkpoint", default=None, help="checkpoint directory (default .sluice/<name>)")
    p.add_argument("--master", default=None, help="Spark master URL (default local[*])")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--trigger-interval", type=float, default=0.0, help="seconds between micro-batches")
    p.add_argument("--max-rows-per-batch", type=int, default=None, help="admission limit per source")
    p.add_argument("--plan", default=None, help="a plan JSON written by `sluice plan --output`")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.set_defaults(func=main)


def main(args) -> int:
    from sluice.cli.progress import ProgressLine

    pipeline = load_pipeline(args.pipeline)
    checkpoint = args.checkpoint or os.path.join(".sluice", pipeline.name)
    progress = None if args.quiet else ProgressLine()
    options = {}
    if args.plan:
        from sluice.plan.physical import Plan

        with open(args.plan) as f:
            options["plan"] = Plan.from_json(f.read())
    result = pipeline.run(checkpoint, master=args.master, duration=args.duration,
                          trigger_interval=args.trigger_interval, max_rows_per_batch=args.max_rows_per_batch,
                          on_batch=progress, **options)
    if progress:
        progress.close()
    print(f"{result.batches} batches, {result.rows_in:,} rows in {result.elapsed_s:.1f} s "
          f"({result.throughput:,.0f} rows/s); checkpoint {checkpoint}")
    return 0
