"""``sluice plan PIPELINE.py --rate R``: threads, slots, mapping and predicted rate for a pipeline.

Model-driven planning (Shukla and Simmhan): the operators' performance models give each one's
threads and resources for the input rate (MBA by default, or LSA), the mapping places the
threads on slots of acquired executors (SAM by default, or RSM, DSM), and the predictor says
what rate that plan sustains. The output ends with the Spark settings to run it with;
``--output`` writes a plan file ``sluice run --plan`` accepts.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

from sluice.errors import ConfigError


def register(subparsers) -> None:
    p = subparsers.add_parser("plan", help="plan threads, slots and executors for an input rate")
    p.add_argument("pipeline", help="a Python file that defines `pipeline`")
    p.add_argument("--rate", type=float, required=True, help="input rate to support (tuples/s)")
    p.add_argument("--allocation", default="MBA", choices=["MBA", "LSA"], help="allocation algorithm")
    p.add_argument("--mapping", default="SAM", choices=["SAM", "RSM", "DSM"], help="mapping algorithm")
    p.add_argument("--vm-classes", default="4,2,1", help="slots (cores) per executor class, e.g. 4,2,1")
    p.add_argument("--slot-memory", default="1g", help="memory of one slot (for spark.executor.memory)")
    p.add_argument(
        "--routing",
        default="capacity",
        choices=["capacity", "even"],
        help="how the predictor assumes input is split over an operator's partitions",
    )
    p.add_argument(
        "--unmodelled",
        default="error",
        choices=["error", "native"],
        help="what to do with a Python operator without a performance model",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON")
    p.add_argument("--output", default=None, help="write a plan file for `sluice run --plan`")
    p.set_defaults(func=main)


def make_plan(
    dag,
    rate: float,
    allocation: str = "MBA",
    mapping: str = "SAM",
    vm_classes=(4, 2, 1),
    routing: Literal["even", "capacity"] = "capacity",
) -> dict:
    """The whole planning chain on a DAG, as a JSON-able report."""
    from sluice.plan.allocation import allocate
    from sluice.plan.mapping import plan_mapping, slot_name
    from sluice.plan.predict import predict

    if not (rate > 0 and math.isfinite(rate)):
        raise ConfigError(f"--rate must be a positive number, got {rate}")
    models = dag.models()
    alloc = allocate(allocation, dag, rate, models)
    result = plan_mapping(dag, alloc, mapping, models, vm_classes=vm_classes)
    prediction = predict(dag, result.mapping, models, routing=routing, at_rate=rate)
    other: Literal["even", "capacity"] = "even" if routing == "capacity" else "capacity"
    other_rate = predict(dag, result.mapping, models, routing=other).rate
    operators = []
    for tid, a in alloc.tasks.items():
        slots = result.mapping.slots_of(tid)
        operators.append(
            {
                "id": tid,
                "kind": dag.by_id[tid].kind,
                "model": getattr(models.get(tid), "name", None),
                "rate": a.rate,
                "threads": a.threads,
                "partitions": len(slots),
                "threads_per_partition": list(slots.values()),
                "cpu": a.cpu,
                "memory": a.memory,
                "limit": prediction.task_limits.get(tid),
            }
        )
    return {
        "dag": dag.name,
        "rate": rate,
        "allocation": allocation,
        "mapping": mapping,
        "operators": operators,
        "total_cpu": alloc.total_cpu,
        "total_memory": alloc.total_memory,
        "allocated_slots": result.allocated_slots,
        "slots": result.slots,
        "executors": list(result.cluster.vm_slots),
        "placement": {slot_name(s): per for s, per in result.mapping.threads_per_slot().items()},
        "predicted_rate": prediction.rate,
        "routing": routing,
        f"predicted_rate_{other}_routing": other_rate,
        "bottleneck": prediction.bottleneck,
        "predicted_executor_cpu": prediction.vm_cpu,
        "predicted_executor_memory": prediction.vm_memory,
    }


def spark_settings(report: dict, slot_memory: str) -> dict[str, str]:
    """One executor per acquired VM, one core per slot; local[N] runs it on one machine."""
    executors = report["executors"]
    partitions = max([o["partitions"] for o in report["operators"]] + [1])
    unit = slot_memory[-1].lower() if slot_memory[-1].isalpha() else ""
    amount = float(slot_memory[:-1] if unit else slot_memory)
    return {
        "master (one machine)": f"local[{report['slots']}]",
        "spark.executor.instances": str(len(executors)),
        "spark.executor.cores": str(max(executors)),
        "spark.executor.memory": f"{amount * max(executors):g}{unit}",
        "spark.sql.shuffle.partitions": str(partitions),
        "spark.default.parallelism": str(report["slots"]),
    }


def main(args) -> int:
    from sluice.cli.check import check_pipeline
    from sluice.cli.loading import load_pipeline
    from sluice.plan.from_graph import dag_from_graph

    pipeline = load_pipeline(args.pipeline)
    check_pipeline(pipeline)  # an invalid pipeline has no plan
    dag = dag_from_graph(pipeline.job_graph(), base_dir=Path(args.pipeline).resolve().parent, unmodelled=args.unmodelled)
    try:
        vm_classes = tuple(int(x) for x in args.vm_classes.split(","))
    except ValueError:
        raise ConfigError(f"--vm-classes must be integers like 4,2,1, got {args.vm_classes!r}") from None
    report = make_plan(dag, args.rate, args.allocation, args.mapping, vm_classes, args.routing)
    report["spark"] = spark_settings(report, args.slot_memory)
    if args.output:
        _write_run_plan(pipeline, report, args.output)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(render(report))
    if args.output:
        print(f"\nplan written to {args.output} (sluice run {args.pipeline} --plan {args.output})")
    return 0


def render(report: dict) -> str:
    lines = [
        f"Plan for {report['dag']!r} at {report['rate']:g} tuples/s "
        f"({report['allocation']} allocation, {report['mapping']} mapping)",
        "",
    ]
    w = max([16] + [len(o["id"]) + 2 for o in report["operators"]])
    header = (
        f"{'operator':<{w}}{'model':<19}{'rate':>9}{'threads':>9}{'partitions':>12}{'CPU %':>8}{'mem %':>8}  threads/partition"
    )
    lines += [header, "-" * len(header)]
    for o in report["operators"]:
        if o["kind"] == "native":
            continue
        lines.append(
            f"{o['id']:<{w}}{(o['model'] or o['kind']):<19}{o['rate']:>9.1f}{o['threads']:>9}"
            f"{o['partitions']:>12}{o['cpu'] * 100:>8.1f}{o['memory'] * 100:>8.1f}  {o['threads_per_partition']}"
        )
    lines += [
        "",
        f"total CPU {report['total_cpu'] * 100:.0f} %, memory {report['total_memory'] * 100:.0f} % "
        f"-> rho = {report['allocated_slots']} slots; mapping needs {report['slots']} "
        f"(+{report['slots'] - report['allocated_slots']})",
        f"executors: {len(report['executors'])} with {report['executors']} cores",
        "",
        "mapping (slot = executor.core):",
    ]
    for slot, per in report["placement"].items():
        lines.append(f"  {slot:<8}" + ", ".join(f"{t} x{n}" for t, n in per.items()))
    lines += [
        "",
        predicted_rate_line(report),
        *[
            f"  with {k.split('_')[2]} routing instead: {v:.1f} tuples/s"
            for k, v in report.items()
            if k.startswith("predicted_rate_") and k.endswith("_routing") and math.isfinite(v)
        ],
        "",
        "Spark settings:",
    ]
    lines += [f"  {k} = {v}" for k, v in report.get("spark", {}).items()]
    return "\n".join(lines)


def predicted_rate_line(report: dict) -> str:
    """The predicted rate and what limits it; with no modelled operator nothing does, and the
    line says why rather than printing an infinite rate limited by nothing."""
    if not math.isfinite(report["predicted_rate"]) or not report["bottleneck"]:
        return (
            "predicted sustainable rate: not bounded by any model (no operator of this pipeline has a "
            "performance model; with --unmodelled native they count as free): profile the costly ones with "
            "`sluice profile PIPELINE.py:OPERATOR` and plan again"
        )
    return (
        f"predicted sustainable rate: {report['predicted_rate']:.1f} tuples/s (limited by {report['bottleneck']}, "
        f"{report['routing']} routing)"
    )


def _write_run_plan(pipeline, report: dict, path: str) -> None:
    """A physical plan ``sluice run --plan`` reads: keyed stages get the planned partitions,
    Python operators the planned worker threads per task; the model-driven allocation is
    attached for reference."""
    from sluice.plan.physical import initial_plan

    graph = pipeline.job_graph()
    base = json.loads(initial_plan(graph, pipeline.partitions).to_json())
    parts = {o["id"]: o["partitions"] for o in report["operators"]}
    for op_id, stage in base["keyed"].items():
        n = max(parts.get(op_id, stage["partitions"]), 1)
        stage["partitions"] = n
        stage["routing"] = [kg * n // graph.max_parallelism for kg in range(graph.max_parallelism)]
    python_ops = {op.id for op in graph.operators if op.is_python}
    base["threads"] = {
        o["id"]: max(o["threads_per_partition"] or [1])
        for o in report["operators"]
        if o["id"] in python_ops and o.get("threads_per_partition")
    }
    base["model_plan"] = report
    Path(path).write_text(json.dumps(base, indent=2) + "\n")
