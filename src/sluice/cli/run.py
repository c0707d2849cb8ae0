"""``sluice run PIPELINE.py``: run the ``pipeline`` a Python file defines."""

from __future__ import annotations

import argparse
import json
import os
import sys

from sluice.cli.loading import load_pipeline
from sluice.job import RunOptions


def percent(text: str) -> float:
    """``5`` or ``5%`` as the fraction 0.05."""
    try:
        value = float(text.strip().rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5 or 5%, got {text!r}") from None
    if not 0 < value <= 100:
        raise argparse.ArgumentTypeError(f"expected a percentage in (0, 100], got {text!r}")
    return value / 100


def register(subparsers) -> None:
    from sluice.cli.ui import add_server_options

    p = subparsers.add_parser("run", help="run a pipeline file on Spark")
    p.add_argument("pipeline", help="a Python file that defines `pipeline`")
    p.add_argument(
        "--checkpoint",
        default=None,
        help="checkpoint directory: a path or a URI such as file:///x, hdfs://host/x, s3://bucket/x (default .sluice/<name>)",
    )
    p.add_argument(
        "--master",
        default=None,
        help="Spark master URL, e.g. spark://host:7077 (default $SLUICE_MASTER, local[*], or the --plan's)",
    )
    p.add_argument("--no-spark-ui", action="store_true", help="don't serve Spark's UI (default: on, address printed)")
    p.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    p.add_argument("--trigger-interval", type=float, default=0.0, help="seconds between micro-batches")
    p.add_argument("--max-rows-per-batch", type=int, default=None, help="admission limit per source")
    p.add_argument("--plan", default=None, help="a plan JSON written by `sluice plan --output`")
    p.add_argument(
        "--latency",
        default=None,
        help="goal: the p95 latency from every source to every sink stays under this, e.g. 2s (over "
        "30 s); without --policies the autopilot keeps it (docs/control.md)",
    )
    p.add_argument(
        "--favour",
        choices=("latency", "cost"),
        default="latency",
        help="with --latency: what the autopilot favours when the bound and the cost conflict",
    )
    p.add_argument("--policies", default=None, help="a YAML file of control policies (docs/control.md)")
    p.add_argument(
        "--dead-letter-budget",
        type=percent,
        default=None,
        metavar="PCT",
        help="stop (exit 1) when an operator dead-letters at least PCT %% of a batch "
        "(default: the pipeline's, 100 %%: all of it)",
    )
    p.add_argument(
        "--reset-state",
        action="append",
        default=[],
        metavar="OPERATOR",
        help="drop this stateful operator's state in the checkpoint and start it empty "
        "(after a pipeline change the checkpoint cannot follow; repeat for several)",
    )
    p.add_argument(
        "--standby",
        action="store_true",
        help="a hot standby: start Spark, validate and open the sources now, then wait for the driver "
        "running this checkpoint and take over within seconds when it dies (docs/operations.md)",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=spark_setting,
        help="a Spark setting for the session, e.g. --conf spark.driver.memory=4g (repeat for several)",
    )
    p.add_argument(
        "--packages",
        default=None,
        metavar="COORDS",
        help="Maven coordinates of jars Spark fetches, comma-separated (spark.jars.packages), e.g. "
        "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.0",
    )
    p.add_argument(
        "--jars", default=None, metavar="PATHS", help="jars for the driver and executors, comma-separated (spark.jars)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress display")
    p.add_argument("--ui", action="store_true", help="serve the live dashboard and /metrics while the job runs")
    add_server_options(p)
    p.set_defaults(func=main)


def spark_setting(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--conf``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE such as spark.driver.memory=4g, got {text!r}")
    return key.strip(), value


def spark_conf_of(args) -> dict[str, str]:
    """The Spark settings ``--conf``, ``--packages`` and ``--jars`` ask for."""
    conf = dict(args.conf)
    for option, key in (("packages", "spark.jars.packages"), ("jars", "spark.jars")):
        value = getattr(args, option)
        if value:
            conf[key] = ",".join(filter(None, [conf.get(key, ""), value]))
    return conf


def _escalations_as_lines(quiet: bool) -> None:
    """The controller's escalations reach the terminal as one line each, without Python's
    warning machinery (its source lines): the progress display prints them beside its figures
    (``EscalationLines``); with ``--quiet``, the warning's own message is the line."""
    import logging
    import warnings

    from sluice.control import EscalationWarning

    # the controller also logs each escalation; unconfigured, Python would print that too
    logging.getLogger("sluice.control").addFilter(lambda record: "cannot be met" not in str(record.msg))
    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, EscalationWarning):
            if quiet:
                print(f"sluice: {message}", file=sys.stderr, flush=True)
            return
        shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


def _broker_wait_lines(pipeline, checkpoint: str):
    """Lines while a connector source waits for its broker (None: the job reads none)."""
    from sluice.cli.waiting import BrokerWaitLines
    from sluice.graph.connectors import ConnectorSource
    from sluice.runtime.checkpoint import Checkpoint

    names = [op.id for op in pipeline.job_graph().sources() if isinstance(op.connector, ConnectorSource)]
    if not names:
        return None
    return BrokerWaitLines(Checkpoint(checkpoint).sources, names).start()


def read_plan_file(path: str):
    """The physical plan of a ``sluice plan --output`` file, and the master it recommends
    (None when the file has no model plan, e.g. one written by hand)."""
    from sluice.plan.physical import Plan

    with open(path) as f:
        text = f.read()
    spark = json.loads(text).get("model_plan", {}).get("spark", {})
    return Plan.from_json(text), spark.get("master (one machine)")


def progress_display():
    """A rich table on a terminal; a line every few seconds in a log."""
    from sluice.cli.progress import ProgressLine

    if sys.stderr.isatty():
        from sluice.cli.progress_table import ProgressTable

        return ProgressTable()
    return ProgressLine()


def run_options(args, master: str | None, plan, progress, spark_ui: bool | None) -> RunOptions:
    """The run's options from ``sluice run``'s flags, the master and plan chosen, and the
    progress display (None with ``--quiet``)."""
    return RunOptions(
        master=master,
        duration=args.duration,
        trigger_interval=args.trigger_interval,
        max_rows_per_batch=args.max_rows_per_batch,
        plan=plan,
        on_batch=progress,
        policies=args.policies,
        dead_letter_budget=args.dead_letter_budget,
        reset_state=tuple(args.reset_state),
        standby=args.standby,
        on_standby=(lambda line: print(line, flush=True)) if args.standby else None,
        on_control=getattr(progress, "control", None),
        ship=args.pipeline,
        ui=spark_ui,
        spark_conf=spark_conf_of(args),
    )


def main(args) -> int:
    from sluice.cli.check import check_pipeline
    from sluice.cli.summary import run_summary

    pipeline = load_pipeline(args.pipeline)
    if args.latency:
        goals = pipeline.graph.goals
        pipeline.goals(
            args.latency,
            favour=args.favour,
            max_executors=None if goals is None else goals.max_executors,
            price_per_hour=None if goals is None else goals.price_per_hour,
        )
    check_pipeline(pipeline)  # a mistake is said now, not after Spark's start
    checkpoint = args.checkpoint or os.path.join(".sluice", pipeline.name)
    master, plan = args.master, None
    if args.plan:
        plan, planned_master = read_plan_file(args.plan)
        if master is None and planned_master:
            master = planned_master
            print(f"master {master} (recommended by the plan {args.plan}; --master overrides it)", flush=True)
    server = None
    spark_ui = False if args.no_spark_ui else None
    if args.ui:
        from sluice.cli.ui import start_server

        server = start_server(checkpoint, args, job=pipeline.name, constraints=[c.to_dict() for c in pipeline.graph.constraints])
    progress = None if args.quiet else progress_display()
    _escalations_as_lines(quiet=progress is None)
    waiting = _broker_wait_lines(pipeline, checkpoint)
    try:
        result = pipeline.run(checkpoint, run_options(args, master, plan, progress, spark_ui))
    finally:
        if waiting is not None:
            waiting.stop()
        if progress:
            progress.close()
        if server:
            server.stop()
    print(run_summary(result, checkpoint))
    if server:
        print(f"the dashboard stopped with the job; `sluice ui {checkpoint}` serves it again")
    return 0
