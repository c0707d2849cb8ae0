"""``sluice check PIPELINE.py``: validate a pipeline without starting Spark.

Everything Sluice can check in pure Python is checked here, in well under a second: sources,
columns and types through every operator, schemas of Python operators, keys, windows,
aggregates, sinks that are missing or dangling, latency constraints, and (with
``--checkpoint``) whether the state in an existing checkpoint still fits the pipeline. The
one thing left to Spark is typing the SQL of ``filter``/``select``/``with_columns`` (the
columns they use are checked here; their result types only Spark's analyzer knows).
``sluice run`` runs the same check before it starts Spark. Exit code 0: valid; 1: not, with
the error naming the operator and the line that made it.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from sluice.errors import ConfigError


def register(subparsers) -> None:
    p = subparsers.add_parser("check", help="validate a pipeline file without starting Spark (exit 1 if invalid)")
    p.add_argument("pipeline", help="a Python file that defines `pipeline`")
    p.add_argument(
        "--checkpoint",
        default=None,
        help="also check that the state in this (local) checkpoint fits the pipeline; nothing in it is changed",
    )
    p.add_argument("--quiet", action="store_true", help="print nothing when the pipeline is valid")
    p.set_defaults(func=main)


def check_pipeline(pipeline, checkpoint: str | None = None) -> None:
    """Validate ``pipeline`` (and its fit with ``checkpoint``) with no JVM: raises the
    ``PipelineError`` that names the operator and the user's line."""
    pipeline.job_graph().validate()
    if checkpoint is not None:
        check_against_checkpoint(pipeline, checkpoint)


def check_against_checkpoint(pipeline, checkpoint: str) -> None:
    """Run the restart's own comparison (``runtime.pipeline_record.open_checkpoint``) on a
    scratch copy of the checkpoint's small control files, so the real checkpoint is only read."""
    from sluice.runtime.checkpoint import BATCHES, PLANS, Checkpoint
    from sluice.runtime.pipeline_record import RECORD, open_checkpoint
    from sluice.runtime.planlog import PlanLog

    if "://" in checkpoint and not checkpoint.startswith("file://"):
        raise ConfigError(f"sluice check --checkpoint reads local checkpoints only, got {checkpoint}")
    path = checkpoint.removeprefix("file://")
    if not os.path.isdir(path):
        raise ConfigError(f"no checkpoint directory at {checkpoint}")
    with tempfile.TemporaryDirectory(prefix="sluice-check-") as scratch:
        record = os.path.join(path, RECORD)
        if os.path.exists(record):
            shutil.copy(record, os.path.join(scratch, RECORD))
        for sub in (PLANS, BATCHES):
            if os.path.isdir(os.path.join(path, sub)):
                shutil.copytree(
                    os.path.join(path, sub),
                    os.path.join(scratch, sub),
                    ignore=lambda _dir, names: [n for n in names if not n.endswith(".json")],
                )
        copy = Checkpoint(scratch)
        open_checkpoint(pipeline.job_graph(), copy, PlanLog(copy), pipeline.partitions)


def main(args) -> int:
    from sluice.cli.loading import load_pipeline

    pipeline = load_pipeline(args.pipeline)
    check_pipeline(pipeline, args.checkpoint)
    if not args.quiet:
        graph = pipeline.job_graph()
        sources, sinks = len(graph.sources()), len(graph.sinks())
        print(
            f"{args.pipeline}: pipeline {pipeline.name!r} is valid: {sources} source(s), "
            f"{len(graph.operators) - sources - sinks} operator(s), {sinks} sink(s)"
            + (f"; its state fits the checkpoint {args.checkpoint}" if args.checkpoint else "")
        )
    return 0
